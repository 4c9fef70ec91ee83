/* metrics.c - numbers derived from dcp_plan_stats, and small summaries of timings. */
#include "cli.h"

#include <stdlib.h>

void dcp_cli_metrics_compute(const dcp_plan_stats *s, int32_t ranks, int32_t max_seqlen_per_rank, int32_t sequences,
                             dcp_cli_metrics *m)
{
    /* under the configured step model: barrier (lower_bound / makespan) or dependency */
    m->efficiency = s->model_makespan > 0 ? (double)s->model_lower_bound / (double)s->model_makespan : 0.0;
    double mean_rank = ranks > 0 ? (double)s->busy_sum / ranks : 0.0;
    m->imbalance = mean_rank > 0 ? (double)s->max_rank_sum / mean_rank : 1.0;
    double rank_time = (double)ranks * (double)s->max_rank_sum;
    m->idle_fraction = rank_time > 0 ? 1.0 - (double)s->busy_sum / rank_time : 0.0;
    double slots = (double)s->num_microbatches * ranks * max_seqlen_per_rank;
    m->padding_waste = slots > 0 ? 1.0 - (double)s->total_tokens / slots : 0.0;
    m->mean_cp_size = sequences > 0 ? (double)s->cp_size_sum / sequences : 0.0;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dcp_cli_median(double *v, int64_t n)
{
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double dcp_cli_percentile(double *v, int64_t n, double p)
{
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, compare_double);
    int64_t rank = (int64_t)(p / 100.0 * (double)n + 0.999999999); /* nearest rank: ceil(p/100 * n) */
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

const char *dcp_cli_format_seconds(double s, char *buf, size_t size)
{
    if (s < 1e-3) snprintf(buf, size, "%.0f us", s * 1e6);
    else if (s < 1.0) snprintf(buf, size, "%.2f ms", s * 1e3);
    else snprintf(buf, size, "%.2f s", s);
    return buf;
}

int64_t dcp_cli_group_cost(const dcp_cost_model *model, const dcp_plan *plan, const int32_t *lengths, int32_t g)
{
    int64_t cost = 0;
    for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
        int64_t c = dcp_cost(model, lengths[plan->ids[i]], plan->group_cp_size[g]);
        cost = cost > INT64_MAX - c ? INT64_MAX : cost + c;
    }
    return cost;
}
