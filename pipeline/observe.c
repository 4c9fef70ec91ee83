/*
 * observe.c - online calibration (dcpack.h, "Online calibration"): a
 * stepped plan's measured times become observation rows, one per CP group
 * and microbatch, and the context's cost model is refit from them
 * (core/cost_fit.c).  dcp_observe agrees the rows over the DPxCP
 * communicator first, so every rank refits from the same matrix.
 *
 * Nothing changes until every check has passed: a bad observation on any
 * rank leaves the model, the rows and the digest as they were.
 */
#include "context.h"
#include "../core/cost.h"
#include "../core/cost_fit.h"
#include "../core/hash.h"
#include "../core/plan.h"

#include <string.h>

/* A rank's measured time: 1 a time, 0 missing, -1 a bad value. */
static int time_kind(int64_t t)
{
    if (t == DCP_OBSERVE_MISSING || t == 0) return 0;
    if (t < 0 || t > DCP_OBSERVE_MAX_TIME) return -1;
    return 1;
}

static const char *bad_time_why(int64_t t)
{
    if (t == DCP_OBSERVE_INVALID) return "DCP_OBSERVE_INVALID (a timing that failed)";
    if (t < 0) return "negative";
    return "past DCP_OBSERVE_MAX_TIME";
}

/* What the scratch of an observation holds, laid out in one place (sizes measure it). */
typedef struct observe_scratch {
    dcp__call_tag *tags;   /* [num_ranks] */
    int64_t *matrix;       /* [num_ranks * max_microbatches]: every rank's row */
    dcp__fit_row *rows;    /* [max_sequences]: this step's rows */
    int64_t *predicted;    /* [max_sequences]: each row's time under the model that planned the step */
    int64_t *values;       /* [num_ranks]: one group's times */
    double *fit;           /* dcp__fit_scratch_size(max_observations) bytes */
} observe_scratch;

static int observe_scratch_take(const dcp_config *c, dcp__arena *a, observe_scratch *o)
{
    const size_t n = (size_t)dcp_config_num_ranks(c);
    const size_t mb = (size_t)(c->max_microbatches > 0 ? c->max_microbatches : c->max_sequences);
    o->tags = DCP_ARENA_NEW(a, dcp__call_tag, n);
    o->matrix = DCP_ARENA_NEW(a, int64_t, dcp__size_mul(n, mb));
    o->rows = DCP_ARENA_NEW(a, dcp__fit_row, (size_t)c->max_sequences);
    o->predicted = DCP_ARENA_NEW(a, int64_t, (size_t)c->max_sequences);
    o->values = DCP_ARENA_NEW(a, int64_t, n);
    o->fit = DCP_ARENA_NEW(a, double, dcp__fit_scratch_size(c->max_observations) / sizeof(double) + 1);
    return o->tags && o->matrix && o->rows && o->predicted && o->values && o->fit;
}

size_t dcp__observe_scratch_size(const dcp_config *c)
{
    if (c->max_observations <= 0) return 0;
    dcp__arena m;
    dcp__arena_init_measure(&m);
    observe_scratch o;
    return observe_scratch_take(c, &m, &o) ? m.used : SIZE_MAX;
}

dcp_status dcp__observe_layout(dcp_context *ctx, dcp__arena *arena, const dcp_config *c)
{
    memset(&ctx->fit, 0, sizeof ctx->fit);
    if (c->max_observations <= 0) return DCP_OK;
    dcp__fit_row *rows = DCP_ARENA_NEW(arena, dcp__fit_row, (size_t)c->max_observations);
    if (dcp__arena_failed(arena)) return DCP_ERR_WORKSPACE_TOO_SMALL;
    dcp__fit_init(&ctx->fit, rows, c->max_observations, &c->cost);
    return DCP_OK;
}

/* One group's time on each of its ranks under model m: its sequences, the hinge, the overhead. */
static int64_t group_time(const dcp_cost_model *m, const int32_t *lengths, const int32_t *ids, int32_t count,
                          int32_t cp)
{
    int64_t sum = 0, tokens = 0;
    for (int32_t i = 0; i < count; i++) {
        const int32_t s = lengths[ids ? ids[i] : i];
        const int64_t c = dcp__cost(m, s, cp);
        sum = c > INT64_MAX - sum ? INT64_MAX : sum + c;
        tokens += s;
    }
    sum = dcp__group_cost(m, sum, tokens / cp);
    return m->microbatch_overhead > INT64_MAX - sum ? INT64_MAX : sum + m->microbatch_overhead;
}

static uint64_t times_hash(const int64_t *t, int32_t n)
{
    uint64_t h = DCP_FNV1A64_OFFSET ^ (uint64_t)(uint32_t)n;
    for (int32_t i = 0; i < n; i++) h = dcp__hash_word(h, (uint64_t)t[i]);
    return h;
}

/*
 * This step's rows into ctx's state and the refit model into the configuration.
 * rows[0..count) carry their features and times; their errors under the
 * model that planned the step are set here.
 */
static void take_rows(dcp_context *ctx, dcp__fit_row *rows, int32_t count, const int64_t *predicted, double *fit)
{
    if (count == 0) return;
    double scale = 1.0;
    if (!ctx->fit.fitted) { /* the prior is in its own unit: judge its shape, at the scale that fits it best */
        double num = 0.0, den = 0.0;
        for (int32_t i = 0; i < count; i++) {
            double q = (double)predicted[i] / (double)rows[i].time;
            num += q;
            den += q * q;
        }
        scale = den > 0.0 ? num / den : 1.0;
    }
    for (int32_t i = 0; i < count; i++) {
        double p = (double)predicted[i] * scale, e = (p - (double)rows[i].time) / (double)rows[i].time;
        e = (e < 0 ? -e : e) * 1e6;
        rows[i].error_ppm = e > 1e12 ? (int64_t)1000000000000 : (int64_t)(e + 0.5);
    }
    dcp__fit_push(&ctx->fit, rows, count);
    dcp_cost_model model;
    dcp__fit_refit(&ctx->fit, fit, &model);
    ctx->config.cost = model;
    ctx->config_digest = dcp__config_digest(&ctx->config); /* the next call agrees the new model */
}

/* Which rank's row is read: times[m * stride_m + r * stride_r]. */
typedef struct times_view {
    const int64_t *t;
    size_t stride_m, stride_r;
} times_view;

static int64_t time_at(times_view v, int32_t m, int32_t r) { return v.t[(size_t)m * v.stride_m + (size_t)r * v.stride_r]; }

/* Every entry of `v` over the plan's ranks [r0, r1): a time, missing, or a bad value (said). */
static dcp_status check_times(const dcp_plan *plan, times_view v, int32_t r0, int32_t r1, const char *who,
                              dcp__error *err)
{
    for (int32_t m = 0; m < plan->num_microbatches; m++)
        for (int32_t r = r0; r < r1; r++) {
            const int64_t t = time_at(v, m, r);
            const int kind = time_kind(t);
            if (kind < 0)
                return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                                 "%s: rank %d's time on microbatch %d is %lld, %s: times are picoseconds >= 0 or "
                                 "DCP_OBSERVE_MISSING",
                                 who, r, m, (long long)t, bad_time_why(t));
            if (kind > 0 && dcp_plan_group_of_rank(plan, m, r) < 0)
                return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                                 "%s: rank %d reports %lld ps on microbatch %d, where it held nothing", who, r,
                                 (long long)t, m);
        }
    return DCP_OK;
}

/* The plan's rows from checked times: the median of each group's timed ranks. */
static int32_t plan_rows(const dcp_plan *plan, const int32_t *lengths, times_view v, const dcp_cost_model *model,
                         observe_scratch *o)
{
    int32_t count = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++)
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            const int32_t first = plan->group_first_rank[g], cp = plan->group_cp_size[g];
            int32_t timed = 0;
            for (int32_t r = first; r < first + cp; r++)
                if (time_kind(time_at(v, m, r)) > 0) o->values[timed++] = time_at(v, m, r);
            if (timed == 0) continue;
            const int32_t *ids = plan->ids + plan->group_first_id[g];
            const int32_t n = plan->group_first_id[g + 1] - plan->group_first_id[g];
            dcp__fit_row *row = &o->rows[count];
            dcp__fit_row_features(row, cp, lengths, ids, n);
            row->time = dcp__fit_median(o->values, timed);
            o->predicted[count++] = group_time(model, lengths, ids, n, cp);
        }
    return count;
}

static dcp_status off(dcp_context *ctx, const char *who, dcp__error *err)
{
    (void)ctx;
    return dcp__fail(err, DCP_ERR_CAPACITY, "%s: max_observations is 0: online calibration is off for this context",
                     who);
}

/* The plan is this context's of these lengths (dcp_plan_matches), said as an observation's error. */
static dcp_status check_plan(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n,
                             const char *who, dcp__error *err)
{
    dcp_status st = dcp_plan_matches(ctx, plan, lengths, n);
    if (st == DCP_OK) return DCP_OK;
    return dcp__fail(err, st, "%s: not a plan this context stepped: %s", who, dcp_context_last_error(ctx));
}

dcp_status dcp_observe_matrix(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n,
                              const int64_t *times)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    const char *who = "dcp_observe_matrix";
    dcp_status st = DCP_OK;
    if (!plan && !lengths) { /* the context's own plan, of the lengths its last step gathered */
        plan = &ctx->plan;
        lengths = ctx->global_lengths;
        n = ctx->num_global;
    }
    if (!plan || !lengths || !times)
        st = dcp__fail(&err, DCP_ERR_NULL_POINTER, "%s: %s is NULL", who, !plan ? "plan" : !lengths ? "lengths" : "times");
    else if (ctx->config.max_observations <= 0)
        st = off(ctx, who, &err);
    if (st == DCP_OK) st = check_plan(ctx, plan, lengths, n, who, &err);
    const times_view v = {times, (size_t)(plan ? plan->num_ranks : 0), 1};
    if (st == DCP_OK) st = check_times(plan, v, 0, plan->num_ranks, who, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err);
    observe_scratch o;
    dcp__scratch_begin(ctx);
    if (!observe_scratch_take(&ctx->config, &ctx->arena, &o)) {
        dcp__scratch_end(ctx);
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL, "%s: scratch too small", who), &err);
    }
    int32_t count = plan_rows(plan, lengths, v, &ctx->config.cost, &o);
    take_rows(ctx, o.rows, count, o.predicted, o.fit);
    dcp__scratch_end(ctx);
    return DCP_OK;
}

dcp_status dcp_observe_groups(dcp_context *ctx, int32_t num_groups, const int32_t *cp_sizes,
                              const int32_t *group_first, const int32_t *lengths, const int64_t *times)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    const char *who = "dcp_observe_groups";
    dcp_status st = DCP_OK;
    if (num_groups < 0 || num_groups > ctx->config.max_sequences)
        st = dcp__fail(&err, DCP_ERR_CAPACITY, "%s: %d groups outside [0, max_sequences %d]", who, num_groups,
                       ctx->config.max_sequences);
    else if (num_groups > 0 && (!cp_sizes || !group_first || !lengths || !times))
        st = dcp__fail(&err, DCP_ERR_NULL_POINTER, "%s: an array is NULL", who);
    else if (ctx->config.max_observations <= 0)
        st = off(ctx, who, &err);
    if (st == DCP_OK && num_groups > 0 && group_first[0] != 0)
        st = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "%s: group_first[0] is %d, not 0", who, group_first[0]);
    for (int32_t g = 0; st == DCP_OK && g < num_groups; g++) {
        const int32_t cp = cp_sizes[g];
        if (cp < 1 || cp > (1 << DCP_MAX_LOG2_CP) || (cp & (cp - 1)) != 0)
            st = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "%s: group %d's CP size %d is not a power of two in 1..%d",
                           who, g, cp, 1 << DCP_MAX_LOG2_CP);
        else if (group_first[g + 1] <= group_first[g])
            st = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "%s: group %d holds no sequence (group_first %d, %d)", who,
                           g, group_first[g], group_first[g + 1]);
        else if (time_kind(times[g]) < 0)
            st = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "%s: group %d's time is %lld, %s", who, g,
                           (long long)times[g], bad_time_why(times[g]));
        for (int32_t i = group_first[g]; st == DCP_OK && i < group_first[g + 1]; i++)
            if (lengths[i] < 1)
                st = dcp__fail(&err, DCP_ERR_BAD_LENGTH, "%s: length %d (group %d) is %d; lengths are at least 1",
                               who, i, g, lengths[i]);
    }
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err);
    observe_scratch o;
    dcp__scratch_begin(ctx);
    if (!observe_scratch_take(&ctx->config, &ctx->arena, &o)) {
        dcp__scratch_end(ctx);
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL, "%s: scratch too small", who), &err);
    }
    int32_t count = 0;
    for (int32_t g = 0; g < num_groups; g++) {
        if (time_kind(times[g]) == 0) continue;
        const int32_t *l = lengths + group_first[g];
        const int32_t n = group_first[g + 1] - group_first[g];
        dcp__fit_row_features(&o.rows[count], cp_sizes[g], l, NULL, n);
        o.rows[count].time = times[g];
        o.predicted[count] = group_time(&ctx->config.cost, l, NULL, n, cp_sizes[g]);
        count++;
    }
    take_rows(ctx, o.rows, count, o.predicted, o.fit);
    dcp__scratch_end(ctx);
    return DCP_OK;
}

dcp_status dcp_observe(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n,
                       const int64_t *my_times, dcp_comm *comm, uint64_t step_id)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    const char *who = "observe";
    /* a communicator that cannot be used fails on this rank alone: there is no collective to agree in */
    if (!comm || !comm->ops || !comm->ops->allgather || !comm->ops->agree || comm->size != ctx->num_ranks ||
        comm->rank < 0 || comm->rank >= comm->size)
        return dcp__context_fail(
            ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT,
                           "observe: the communicator must be the DPxCP group of %d ranks (got %s)", ctx->num_ranks,
                           !comm ? "NULL" : !comm->ops ? "no operations" : "another size or rank"), &err);
    dcp_status usable = dcp__comm_ops_check(comm->ops, who, "communicator", &err);
    if (usable != DCP_OK) return dcp__context_fail(ctx, usable, &err);
    /* off: no scratch for an agreement; at once, as on every rank built alike */
    if (ctx->config.max_observations <= 0) return dcp__context_fail(ctx, off(ctx, who, &err), &err);
    observe_scratch o;
    dcp__scratch_begin(ctx);
    if (!observe_scratch_take(&ctx->config, &ctx->arena, &o)) {
        dcp__scratch_end(ctx);
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL, "observe: scratch too small"), &err);
    }
    if (!plan && !lengths) { /* the context's own plan, of the lengths its last step gathered */
        plan = &ctx->plan;
        lengths = ctx->global_lengths;
        n = ctx->num_global;
    }
    dcp__call_tag mine;
    dcp_status st = dcp__context_call_begin(ctx, DCP_CALL_OBSERVE, step_id, &mine, &err);
    if (st == DCP_OK && (!plan || !lengths || !my_times))
        st = dcp__fail(&err, DCP_ERR_NULL_POINTER, "observe: %s is NULL", !plan ? "plan" : !lengths ? "lengths" : "my_times");
    if (st == DCP_OK) st = check_plan(ctx, plan, lengths, n, who, &err);
    const int32_t mb = st == DCP_OK ? plan->num_microbatches : 0;
    if (st == DCP_OK) {
        /* this rank's row, read as row `comm->rank` of a one-row matrix */
        const times_view mine_view = {my_times - comm->rank, 0, 1};
        st = check_times(plan, mine_view, comm->rank, comm->rank + 1, who, &err);
    }
    mine.status = st;
    mine.count = mb;
    mine.hash = st == DCP_OK ? times_hash(my_times, mb) : 0;
    mine.field_digest[0] = ctx->fit.digest;
    mine.field_digest[1] = st == DCP_OK ? plan->seal : 0;
    st = dcp__agree_call(comm, &mine, o.tags, &err, who, "rank");
    /* every rank holds the same tags: the same verdict everywhere */
    for (int32_t r = 1; st == DCP_OK && r < comm->size; r++) {
        if (o.tags[r].field_digest[0] != o.tags[0].field_digest[0])
            st = dcp__fail(&err, DCP_ERR_INVALID_CONFIG,
                           "observe: rank %d holds other observations than rank 0 (digests %016llx, %016llx): its "
                           "model would differ; rebuild the contexts alike",
                           r, (unsigned long long)o.tags[r].field_digest[0],
                           (unsigned long long)o.tags[0].field_digest[0]);
        else if (o.tags[r].field_digest[1] != o.tags[0].field_digest[1] || o.tags[r].count != o.tags[0].count)
            st = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT,
                           "observe: rank %d observed another plan than rank 0 (%lld and %lld microbatches, seals "
                           "%016llx, %016llx)",
                           r, (long long)o.tags[r].count, (long long)o.tags[0].count,
                           (unsigned long long)o.tags[r].field_digest[1], (unsigned long long)o.tags[0].field_digest[1]);
    }
    if (st == DCP_OK) {
        char why[128];
        dcp_status local = DCP_OK;
        const size_t bytes = (size_t)mb * sizeof(int64_t);
        memset(o.matrix, 0, bytes * (size_t)comm->size); /* a backend that writes nothing leaves no row */
        dcp_status s = mb > 0 ? comm->ops->allgather(comm, my_times, bytes, o.matrix) : DCP_OK;
        if (s != DCP_OK)
            local = dcp__fail(&err, s, "observe: all-gather of the times failed: %s%s", dcp_status_str(s),
                              dcp__comm_why(comm, why, sizeof why));
        for (int32_t r = 0; local == DCP_OK && r < comm->size; r++)
            if (times_hash(o.matrix + (size_t)r * (size_t)mb, mb) != o.tags[r].hash)
                local = dcp__fail(&err, DCP_ERR_COMM,
                                  "observe: the times that arrived from rank %d are not the ones it sent: the "
                                  "communicator returned a result that cannot be trusted (a peer gone?)%s",
                                  r, dcp__comm_why(comm, why, sizeof why));
        /* every row was checked by its sender before the tags: check the others' here too, cheaply */
        const times_view all = {o.matrix, 1, (size_t)mb};
        if (local == DCP_OK) local = check_times(plan, all, 0, comm->size, who, &err);
        st = dcp__agree(comm, local, &err, who, "rank");
        if (st == DCP_OK) {
            int32_t count = plan_rows(plan, lengths, all, &ctx->config.cost, &o);
            take_rows(ctx, o.rows, count, o.predicted, o.fit);
        }
    }
    dcp__scratch_end(ctx);
    st = dcp__context_call_end(ctx, st);
    return st == DCP_OK ? DCP_OK : dcp__context_fail(ctx, st, &err);
}

dcp_status dcp_observe_predict(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n,
                               int64_t *out)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    if (!out) {
        dcp__error err;
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER, "dcp_observe_predict: out is NULL"), &err);
    }
    dcp_status st = dcp_plan_validate(ctx, plan, lengths, n, NULL);
    if (st != DCP_OK) return st;
    const dcp_cost_model *m = &ctx->config.cost;
    for (int32_t mi = 0; mi < plan->num_microbatches; mi++) {
        for (int32_t r = 0; r < plan->num_ranks; r++) out[(size_t)mi * (size_t)plan->num_ranks + (size_t)r] = DCP_OBSERVE_MISSING;
        for (int32_t g = plan->microbatch_first_group[mi]; g < plan->microbatch_first_group[mi + 1]; g++) {
            const int32_t first = plan->group_first_rank[g], cp = plan->group_cp_size[g];
            const int64_t t = group_time(m, lengths, plan->ids + plan->group_first_id[g],
                                         plan->group_first_id[g + 1] - plan->group_first_id[g], cp);
            for (int32_t r = first; r < first + cp; r++) out[(size_t)mi * (size_t)plan->num_ranks + (size_t)r] = t;
        }
    }
    return DCP_OK;
}

dcp_status dcp_observe_status(const dcp_context *ctx, dcp_observe_report *report)
{
    if (!ctx || !report) return DCP_ERR_NULL_POINTER;
    memset(report, 0, sizeof *report);
    const dcp__fit_state *s = &ctx->fit;
    report->steps = s->steps;
    report->rows = s->count;
    report->rows_used = s->rows_used;
    report->identified = s->identified;
    report->fit_error_ppm = s->fit_error_ppm;
    report->predict_error_ppm = s->predict_error_ppm;
    report->margin_ppm = ctx->config.cost.margin_ppm;
    report->digest = s->digest;
    return DCP_OK;
}
