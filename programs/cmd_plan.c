/*
 * cmd_plan.c - `dcpack plan`: plan one global batch and report it.
 *
 * Without --scheduler every scheduler plans the batch and a side-by-side
 * comparison ends in a one-line conclusion; without an input the batch is
 * the embedded default trace (mlmdefault, 1024 sequences) on 32 ranks with
 * max_seqlen_per_rank 4096.  With --scheduler the plan itself is printed:
 * as text, or as the JSON object {"plan": [...], "stats": {...}}.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char plan_usage[] =
    "usage: dcpack plan [input] [configuration] [output]\n"
    "\n"
    "Plan one global batch. Without --scheduler, plan it with every scheduler and compare them;\n"
    "without an input, plan the embedded default trace (the reference benchmark's lognormal\n"
    "lengths: mlmdefault, 1024 sequences, seed 1).\n"
    "\n"
    "input (one of; default: the embedded trace):\n"
    "  --trace FILE|-          lengths from FILE ('-': standard input); ids are 0-based records\n"
    "  --column NAME           the length column of a CSV file or the key of a JSON Lines file\n"
    "  --input-format F        auto (default), text (one length per line), csv, jsonl\n"
    "  --generate SPEC         a generated trace, FAMILY[:key=value,...]: mlmdefault, longsft,\n"
    "                          bimodal, uniform32k (keys n, seed), lognormal (mean, sigma, min,\n"
    "                          max, n, seed), uniform (min, max, n, seed); see dcpack generate --help\n"
    "\n"
    "configuration:\n"
    "  --ranks N               DPxCP ranks (default 32)\n"
    "  --max-seqlen-per-rank M tokens one rank holds in a microbatch (default 4096)\n"
    "  --scheduler S           dp_balanced, dynamic_cp or balanced (default: compare all three)\n"
    "  --cp C                  dp_balanced's static CP size; dp = N / C (default: the smallest\n"
    "                          CP size dividing N that holds the longest sequence)\n"
    "  --min-cp-size K         smallest CP group (a power of two; default 1)\n"
    "  --vpp-group G           microbatch count must be a multiple of G (default 0: none; with --vpp\n"
    "                          > 1 it defaults to --pp)\n"
    "  --pp P                  pipeline stages (default 1): balanced plans for the pipeline's step\n"
    "                          and the statistics show its makespan (docs/planning.md, pipeline)\n"
    "  --vpp V                 model chunks per stage (default 1); V > 1 runs interleaved 1F1B\n"
    "  --schedule S            1f1b or interleaved (default: interleaved when --vpp > 1)\n"
    "  --max-sequences-per-microbatch K   per rank (default 0: unlimited)\n"
    "  --max-sequences K       capacity of the context (default: the trace's count rounded up)\n"
    "  --cost FILE             cost-model profile (see dcpack cost --help); its step_model\n"
    "                          (barrier or dependency) is what efficiency and the best plan judge by;\n"
    "                          with time_unit_ps (a calibrated profile) makespans print in ms too\n"
    "  --step-model NAME       barrier or dependency: overrides the cost model's step_model\n"
    "                          (a profile's too); balanced lays its plans out for the one it names\n"
    "  --effort full|fast      balanced's search (docs/planning.md, effort levels): full (default)\n"
    "                          or fast (dynamic_cp's plan and a short local search on it)\n"
    "\n"
    "output:\n"
    "  --format text|json      json: {\"plan\": [[[ids of rank 0], [ids of rank 1], ...], ...per\n"
    "                          microbatch], \"stats\": {...}}; without --scheduler:\n"
    "                          {\"comparison\": [{\"scheduler\", \"stats\"} or {\"scheduler\", \"error\"}, ...],\n"
    "                          \"best\"}: \"error\" is {\"status\", \"message\"} (the library's status name and\n"
    "                          why), \"best\" the scheduler with the lowest makespan under the step\n"
    "                          model (model_makespan), or null if none planned\n"
    "  --svg FILE              draw the plan (needs --scheduler)\n"
    "  --repeat R              plan R times; plan time is the median (default 5)\n"
    "  --summary               text: statistics only, no per-microbatch listing\n"
    "  --no-timing             text: print '-' for plan times (reproducible output)\n"
    "  -h, --help              this help\n"
    "\n"
    "examples:\n"
    "  dcpack plan\n"
    "  dcpack plan --trace lengths.txt --ranks 64 --max-seqlen-per-rank 8192 --scheduler dynamic_cp\n"
    "  dcpack plan --trace batch.csv --column seq_len --scheduler dp_balanced --cp 4 --format json\n"
    "  dcpack plan --generate longsft:n=4096,seed=3 --ranks 128 --max-seqlen-per-rank 16384\n"
    "  cat lengths.txt | dcpack plan --trace - --scheduler balanced --cost my_profile.txt --svg plan.svg\n"
    "\n"
    "exit status: 0 ok (without --scheduler: some scheduler planned the batch); 1 the batch could\n"
    "not be planned (or an output not written); 2 usage error or a configuration the library\n"
    "rejects; 3 bad input: a trace or profile that cannot be read or holds a bad value, a sequence\n"
    "longer than its ranks hold, more sequences than --max-sequences (the file, line and value\n"
    "are named).\n";

typedef struct plan_options {
    dcp_cli_input input;
    dcp_cli_setup setup;
    const char *cost_path;
    int scheduler_set;
    int json;
    int summary;
    int no_timing;
    int32_t repeat;
    const char *svg;
} plan_options;

/* One scheduler's run over the trace. */
typedef struct plan_run {
    dcp_cli_setup setup;
    dcp_config config;
    int32_t cp;
    dcp_cli_planner planner;
    dcp_status status;
    char message[512];
    const dcp_plan *plan;
    dcp_plan_stats stats;
    dcp_cli_metrics metrics;
    double median_seconds, min_seconds;
} plan_run;

static void group_ranks(char *buf, size_t size, int32_t first, int32_t count)
{
    if (count == 1) snprintf(buf, size, "rank %d", first);
    else snprintf(buf, size, "ranks %d-%d", first, first + count - 1);
}

static void print_number(FILE *out, int64_t v, int width)
{
    char digits[32], grouped[48];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && digits[i - 1] != '-' && (n - i) % 3 == 0) grouped[o++] = ',';
        grouped[o++] = digits[i];
    }
    grouped[o] = '\0';
    fprintf(out, "%*s", width, grouped);
}

/*
 * A cost the model saturated (INT64_MAX: dcp_cost and the plan's sums saturate instead of wrapping): its
 * true value is unknown, only that it is at least INT64_MAX, so it is said, never printed as a number or
 * compared into a ratio or a winner.
 */
static int saturated(int64_t v) { return v == INT64_MAX; }

static void print_cost(FILE *out, int64_t v, int width)
{
    if (saturated(v)) fprintf(out, "%*s", width, "saturated");
    else print_number(out, v, width);
}

/* Any of a plan's cost sums saturated. */
static int stats_saturated(const dcp_plan_stats *s)
{
    return saturated(s->makespan) || saturated(s->lower_bound) || saturated(s->dependency_makespan) ||
           saturated(s->dependency_lower_bound) || saturated(s->model_makespan) || saturated(s->model_lower_bound) ||
           saturated(s->busy_sum) || saturated(s->max_rank_sum);
}

/* imbalance and idle come from busy_sum and max_rank_sum */
static int balance_saturated(const dcp_plan_stats *s) { return saturated(s->busy_sum) || saturated(s->max_rank_sum); }

static const char *time_text(const plan_options *o, double seconds, char *buf, size_t size)
{
    if (o->no_timing) {
        snprintf(buf, size, "-");
        return buf;
    }
    return dcp_cli_format_seconds(seconds, buf, size);
}

static void print_header(const plan_options *o, const dcp_cli_trace *trace)
{
    printf("trace: %s: %d sequences, ", trace->name, trace->count);
    print_number(stdout, dcp_cli_trace_tokens(trace), 0);
    printf(" tokens, longest %d\n", dcp_cli_trace_longest(trace));
    printf("ranks %d, max_seqlen_per_rank %d", o->setup.ranks, o->setup.max_seqlen_per_rank);
    if (o->setup.min_cp_size > 1) printf(", min_cp_size %d", o->setup.min_cp_size);
    if (o->setup.vpp_group > 1) printf(", vpp_group %d", o->setup.vpp_group);
    if (o->setup.pp > 1)
        printf(", pp %d, vpp %d (%s)", o->setup.pp, o->setup.vpp, o->setup.vpp > 1 ? "interleaved 1F1B" : "1F1B");
    if (o->setup.max_sequences_per_microbatch > 0)
        printf(", max_sequences_per_microbatch %d", o->setup.max_sequences_per_microbatch);
    printf("; cost model: %s, step model %s%s\n", o->cost_path ? o->cost_path : "defaults (docs/planning.md, Cost model)",
           dcp_step_model_name((dcp_step_model)o->setup.cost.step_model),
           o->setup.plan_effort == DCP_PLAN_EFFORT_FAST ? "; balanced effort fast" : "");
}

/* "makespan", or "dependency makespan" when the step model is dependency: what efficiency and "best" judge by. */
static const char *model_makespan_name(const dcp_cli_setup *setup)
{
    if (setup->pp > 1) return "pipeline makespan";
    return setup->cost.step_model == DCP_STEP_MODEL_DEPENDENCY ? "dependency makespan" : "makespan";
}

static void print_plan_text(const plan_options *o, const plan_run *r, const dcp_cli_trace *trace)
{
    char label[96];
    if (r->cp) snprintf(label, sizeof label, "%s (cp %d, dp %d)", dcp_scheduler_name(r->config.scheduler), r->cp,
                        r->config.data_parallel_size);
    else snprintf(label, sizeof label, "%s", dcp_scheduler_name(r->config.scheduler));
    printf("dcpack plan: %s\n", label);
    print_header(o, trace);
    const dcp_plan_stats *s = &r->stats;
    const dcp_cli_metrics *m = &r->metrics;
    char t[32];
    printf("\n");
    printf("  microbatches   %d\n", s->num_microbatches);
    const int64_t unit_ps = o->setup.time_unit_ps;
    printf("  makespan       ");
    print_cost(stdout, s->makespan, 0);
    if (unit_ps > 0 && !saturated(s->makespan)) printf(" = %.3f ms", dcp_cli_units_ms(s->makespan, unit_ps));
    printf("   (lower bound ");
    print_cost(stdout, s->lower_bound, 0);
    printf(")   barrier: every rank waits for each microbatch's slowest rank\n");
    printf("  dependency     ");
    print_cost(stdout, s->dependency_makespan, 0);
    if (unit_ps > 0 && !saturated(s->dependency_makespan))
        printf(" = %.3f ms", dcp_cli_units_ms(s->dependency_makespan, unit_ps));
    printf("   (lower bound ");
    print_cost(stdout, s->dependency_lower_bound, 0);
    printf(")   a rank waits only for the ranks of its CP groups\n");
    if (r->config.pipeline_parallel_size > 1) {
        printf("  pipeline       ");
        print_cost(stdout, s->pipeline_makespan, 0);
        if (unit_ps > 0 && !saturated(s->pipeline_makespan))
            printf(" = %.3f ms", dcp_cli_units_ms(s->pipeline_makespan, unit_ps));
        printf("   (lower bound ");
        print_cost(stdout, s->pipeline_lower_bound, 0);
        printf(")   %d stages, %d chunks each, the microbatches in plan order\n", r->config.pipeline_parallel_size,
               r->config.virtual_pipeline_size);
    }
    if (unit_ps > 0)
        printf("  time unit      %lld ps per cost unit (the profile's time_unit_ps)\n", (long long)unit_ps);
    if (saturated(s->model_makespan))
        printf("  efficiency     saturated   the %s step model's makespan saturates int64: no ratio\n",
               dcp_step_model_name((dcp_step_model)s->step_model));
    else
        printf("  efficiency     %.3f   lower bound / makespan, %s step model\n", m->efficiency,
               dcp_step_model_name((dcp_step_model)s->step_model));
    if (balance_saturated(s)) {
        printf("  imbalance      saturated   the ranks' summed costs saturate int64\n");
        printf("  idle           saturated\n");
    } else {
        printf("  imbalance      %.3f   slowest rank / mean rank, summed over microbatches\n", m->imbalance);
        printf("  idle           %.3f   fraction of rank time spent waiting for the slowest rank\n", m->idle_fraction);
    }
    if (stats_saturated(s))
        printf("  saturated      the cost model's costs exceed int64 on this batch (INT64_MAX, said \"saturated\"):\n"
               "                 its coefficients are too large for these lengths (docs/planning.md, Cost model)\n");
    printf("  padding waste  %.3f   fraction of token slots (microbatches x ranks x M) left empty\n", m->padding_waste);
    printf("  mean CP size   %.2f\n", m->mean_cp_size);
    printf("  plan time      %s   median of %d runs\n", time_text(o, r->median_seconds, t, sizeof t), o->repeat);
    if (o->summary) return;

    const dcp_plan *p = r->plan;
    for (int32_t mb = 0; mb < p->num_microbatches; mb++) {
        int32_t first = p->microbatch_first_group[mb], last = p->microbatch_first_group[mb + 1];
        int64_t slowest = -1;
        int32_t slowest_rank = 0;
        for (int32_t g = first; g < last; g++) {
            int64_t c = dcp_cli_group_cost(&r->config.cost, p, trace->lengths, g);
            if (c > slowest) slowest = c, slowest_rank = p->group_first_rank[g];
        }
        printf("\nmicrobatch %d: %d group%s, slowest rank %d (cost ", mb, last - first, last - first == 1 ? "" : "s",
               slowest_rank);
        print_cost(stdout, slowest, 0);
        printf(")\n");
        for (int32_t g = first; g < last; g++) {
            char ranks[48];
            int32_t n = p->group_first_id[g + 1] - p->group_first_id[g];
            group_ranks(ranks, sizeof ranks, p->group_first_rank[g], p->group_cp_size[g]);
            printf("  %-13s cp %-4d %4d seq%s  ids", ranks, p->group_cp_size[g], n, n == 1 ? " " : "s");
            for (int32_t i = p->group_first_id[g]; i < p->group_first_id[g + 1]; i++) printf(" %d", p->ids[i]);
            printf("\n");
        }
    }
}

static void print_stats_json(const plan_options *o, const plan_run *r, const dcp_cli_trace *trace, const char *indent)
{
    const dcp_plan_stats *s = &r->stats;
    const dcp_cli_metrics *m = &r->metrics;
    printf("{\n");
    printf("%s  \"scheduler\": ", indent);
    dcp_cli_json_string(stdout, dcp_scheduler_name(r->config.scheduler));
    printf(",\n");
    printf("%s  \"ranks\": %d,\n", indent, dcp_config_num_ranks(&r->config));
    printf("%s  \"data_parallel_size\": %d,\n", indent, r->config.data_parallel_size);
    printf("%s  \"context_parallel_size\": %d,\n", indent, r->config.context_parallel_size);
    printf("%s  \"cp\": %d,\n", indent, r->cp);
    printf("%s  \"max_seqlen_per_rank\": %d,\n", indent, r->config.max_seqlen_per_rank);
    printf("%s  \"min_cp_size\": %d,\n", indent, r->config.min_cp_size);
    printf("%s  \"vpp_group\": %d,\n", indent, r->config.microbatch_group_size_per_vp_stage);
    printf("%s  \"max_sequences_per_microbatch\": %d,\n", indent, r->config.max_sequences_per_microbatch);
    printf("%s  \"trace\": ", indent);
    dcp_cli_json_string(stdout, trace->name);
    printf(",\n%s  \"cost_model\": ", indent);
    dcp_cli_json_string(stdout, o->cost_path ? o->cost_path : "default");
    printf(",\n");
    printf("%s  \"sequences\": %d,\n", indent, trace->count);
    printf("%s  \"total_tokens\": %lld,\n", indent, (long long)s->total_tokens);
    printf("%s  \"microbatches\": %d,\n", indent, s->num_microbatches);
    printf("%s  \"makespan\": %lld,\n", indent, (long long)s->makespan);
    printf("%s  \"lower_bound\": %lld,\n", indent, (long long)s->lower_bound);
    printf("%s  \"pipeline_parallel_size\": %d,\n", indent, r->config.pipeline_parallel_size);
    printf("%s  \"virtual_pipeline_size\": %d,\n", indent, r->config.virtual_pipeline_size);
    printf("%s  \"pipeline_schedule\": ", indent);
    dcp_cli_json_string(stdout, r->config.virtual_pipeline_size > 1 ? "interleaved" : "1f1b");
    printf(",\n");
    printf("%s  \"pipeline_makespan\": %lld,\n", indent, (long long)s->pipeline_makespan);
    printf("%s  \"pipeline_lower_bound\": %lld,\n", indent, (long long)s->pipeline_lower_bound);
    /* a saturated makespan has no ratio: null, and "saturated" says why */
    if (saturated(s->model_makespan)) printf("%s  \"efficiency\": null,\n", indent);
    else printf("%s  \"efficiency\": %.6f,\n", indent, m->efficiency);
    if (balance_saturated(s)) printf("%s  \"imbalance\": null,\n%s  \"idle_fraction\": null,\n", indent, indent);
    else {
        printf("%s  \"imbalance\": %.6f,\n", indent, m->imbalance);
        printf("%s  \"idle_fraction\": %.6f,\n", indent, m->idle_fraction);
    }
    printf("%s  \"saturated\": %s,\n", indent, stats_saturated(s) ? "true" : "false");
    printf("%s  \"padding_waste\": %.6f,\n", indent, m->padding_waste);
    printf("%s  \"mean_cp_size\": %.6f,\n", indent, m->mean_cp_size);
    printf("%s  \"quad_makespan\": %lld,\n", indent, (long long)s->quad_makespan);
    printf("%s  \"busy_sum\": %lld,\n", indent, (long long)s->busy_sum);
    printf("%s  \"max_rank_sum\": %lld,\n", indent, (long long)s->max_rank_sum);
    printf("%s  \"repeat\": %d,\n", indent, o->repeat);
    printf("%s  \"plan_seconds\": %.9f,\n", indent, r->median_seconds);
    printf("%s  \"plan_seconds_min\": %.9f,\n", indent, r->min_seconds);
    if (o->setup.time_unit_ps > 0) { /* a calibrated profile: its cost units are times */
        int64_t unit_ps = o->setup.time_unit_ps;
        printf("%s  \"time_unit_ps\": %lld,\n", indent, (long long)unit_ps);
        printf("%s  \"makespan_ms\": %.6f,\n", indent, dcp_cli_units_ms(s->makespan, unit_ps));
        printf("%s  \"lower_bound_ms\": %.6f,\n", indent, dcp_cli_units_ms(s->lower_bound, unit_ps));
        printf("%s  \"dependency_makespan_ms\": %.6f,\n", indent, dcp_cli_units_ms(s->dependency_makespan, unit_ps));
        printf("%s  \"model_makespan_ms\": %.6f,\n", indent, dcp_cli_units_ms(s->model_makespan, unit_ps));
        printf("%s  \"pipeline_makespan_ms\": %.6f,\n", indent, dcp_cli_units_ms(s->pipeline_makespan, unit_ps));
    }
    printf("%s  \"step_model\": ", indent);
    dcp_cli_json_string(stdout, dcp_step_model_name((dcp_step_model)s->step_model));
    printf(",\n");
    printf("%s  \"dependency_makespan\": %lld,\n", indent, (long long)s->dependency_makespan);
    printf("%s  \"dependency_lower_bound\": %lld,\n", indent, (long long)s->dependency_lower_bound);
    printf("%s  \"model_makespan\": %lld,\n", indent, (long long)s->model_makespan);
    printf("%s  \"model_lower_bound\": %lld\n", indent, (long long)s->model_lower_bound);
    printf("%s}", indent);
}

static void print_plan_json(const plan_options *o, const plan_run *r, const dcp_cli_trace *trace)
{
    const dcp_plan *p = r->plan;
    printf("{\n  \"plan\": [\n");
    for (int32_t mb = 0; mb < p->num_microbatches; mb++) {
        int32_t g = p->microbatch_first_group[mb], last = p->microbatch_first_group[mb + 1];
        printf("    [");
        for (int32_t rank = 0; rank < p->num_ranks; rank++) {
            while (g < last && p->group_first_rank[g] + p->group_cp_size[g] <= rank) g++;
            printf("%s[", rank ? ", " : "");
            if (g < last && p->group_first_rank[g] <= rank)
                for (int32_t i = p->group_first_id[g]; i < p->group_first_id[g + 1]; i++)
                    printf("%s%d", i > p->group_first_id[g] ? ", " : "", p->ids[i]);
            printf("]");
        }
        printf("]%s\n", mb + 1 < p->num_microbatches ? "," : "");
    }
    printf("  ],\n  \"stats\": ");
    print_stats_json(o, r, trace, "  ");
    printf("\n}\n");
}

/*
 * Configure and plan one scheduler.  A configuration the scheduler cannot
 * take returns its exit status with the reason in r->message; a planning
 * failure returns DCP_EXIT_OK with r->status and r->message set.
 */
static int run_scheduler(const char *command, const plan_options *o, dcp_cli_setup setup, const dcp_cli_trace *trace,
                         plan_run *r)
{
    memset(r, 0, sizeof *r);
    r->setup = setup;
    const dcp_cli_trace *traces[1] = {trace};
    int st = dcp_cli_config_make(&r->setup, traces, 1, &r->config, &r->cp, r->message, sizeof r->message);
    if (st != DCP_EXIT_OK) return st;
    st = dcp_cli_planner_create(command, &r->config, &r->planner);
    if (st != DCP_EXIT_OK) return st;
    double *seconds = malloc(sizeof *seconds * (size_t)o->repeat);
    if (!seconds) return dcp_cli_fail(DCP_EXIT_ERROR, command, "out of memory");
    r->status = dcp_cli_plan_timed(&r->planner, trace, o->repeat, seconds, &r->plan, &r->stats);
    if (r->status == DCP_OK) {
        dcp_cli_metrics_compute(&r->stats, setup.ranks, setup.max_seqlen_per_rank, trace->count, &r->metrics);
        r->min_seconds = seconds[0];
        for (int32_t i = 1; i < o->repeat; i++)
            if (seconds[i] < r->min_seconds) r->min_seconds = seconds[i];
        r->median_seconds = dcp_cli_median(seconds, o->repeat);
    } else {
        snprintf(r->message, sizeof r->message, "%s", dcp_context_last_error(r->planner.context));
    }
    free(seconds);
    return DCP_EXIT_OK;
}

static void label_of(const plan_run *r, char *buf, size_t size)
{
    if (r->cp) snprintf(buf, size, "%s (cp %d)", dcp_scheduler_name(r->config.scheduler), r->cp);
    else snprintf(buf, size, "%s", dcp_scheduler_name(r->config.scheduler));
}

static int compare_schedulers(const plan_options *o, const dcp_cli_trace *trace)
{
    /* dynamic_cp first: it takes any batch whose sequences fit all N ranks, so its refusal is the batch's fault */
    const dcp_scheduler order[] = {DCP_SCHEDULER_DYNAMIC_CP, DCP_SCHEDULER_DP_BALANCED, DCP_SCHEDULER_BALANCED};
    const dcp_scheduler all[] = {DCP_SCHEDULER_DP_BALANCED, DCP_SCHEDULER_DYNAMIC_CP, DCP_SCHEDULER_BALANCED};
    enum { COUNT = 3 };
    plan_run runs[COUNT];
    int best = -1, planned = 0;
    for (int j = 0; j < COUNT; j++) {
        int k = (int)order[j]; /* runs[] is indexed by scheduler */
        dcp_cli_setup setup = o->setup;
        setup.scheduler = order[j];
        if (order[j] != DCP_SCHEDULER_DP_BALANCED) setup.cp = 0; /* --cp is dp_balanced's alone */
        int st = run_scheduler("plan", o, setup, trace, &runs[k]);
        if (st != DCP_EXIT_OK) {
            if (order[j] == DCP_SCHEDULER_DYNAMIC_CP) {
                if (runs[k].message[0]) dcp_cli_fail(st, "plan", "%s", runs[k].message);
                dcp_cli_planner_destroy(&runs[k].planner);
                return st;
            }
            runs[k].status = DCP_ERR_INVALID_CONFIG;
        }
    }
    /* judged by the configured step model's makespan (the barrier one by default); a saturated makespan is
       only known to be at least INT64_MAX, so when the lowest is saturated there is no winner */
    for (int k = 0; k < COUNT; k++)
        if (runs[k].status == DCP_OK) {
            planned++;
            if (best < 0 || runs[k].stats.model_makespan < runs[best].stats.model_makespan) best = k;
        }
    const int all_saturated = best >= 0 && saturated(runs[best].stats.model_makespan);
    if (all_saturated) best = -1;

    if (o->json) {
        printf("{\n  \"comparison\": [\n");
        for (int k = 0; k < COUNT; k++) {
            const plan_run *r = &runs[k];
            printf("    {\"scheduler\": ");
            dcp_cli_json_string(stdout, dcp_scheduler_name(all[k]));
            printf(", ");
            if (r->status == DCP_OK) {
                printf("\"stats\": ");
                print_stats_json(o, r, trace, "    ");
            } else {
                printf("\"error\": {\"status\": ");
                dcp_cli_json_string(stdout, dcp_status_str(r->status));
                printf(", \"message\": ");
                dcp_cli_json_string(stdout, r->message);
                printf("}");
            }
            printf("}%s\n", k + 1 < COUNT ? "," : "");
        }
        printf("  ],\n  \"best\": ");
        if (best >= 0) dcp_cli_json_string(stdout, dcp_scheduler_name(all[best]));
        else printf("null");
        printf(",\n  \"saturated\": %s\n}\n", all_saturated ? "true" : "false");
    } else {
        printf("dcpack plan: every scheduler on one global batch\n");
        print_header(o, trace);
        const int64_t unit_ps = o->setup.time_unit_ps;
        printf("\n%-20s %12s %16s %16s ", "scheduler", "microbatches", "makespan", "dependency");
        if (unit_ps > 0) printf("%12s %12s ", "makespan ms", "depend. ms");
        printf("%10s %9s %7s %10s\n", "efficiency", "imbalance", "mean CP", "plan time");
        for (int k = 0; k < COUNT; k++) {
            const plan_run *r = &runs[k];
            char label[64], t[32];
            label_of(r, label, sizeof label);
            printf("%-20s ", label);
            if (r->status == DCP_OK) {
                printf("%12d ", r->stats.num_microbatches);
                print_cost(stdout, r->stats.makespan, 16);
                printf(" ");
                print_cost(stdout, r->stats.dependency_makespan, 16);
                if (unit_ps > 0) {
                    char ms[2][32];
                    for (int i = 0; i < 2; i++) {
                        const int64_t v = i ? r->stats.dependency_makespan : r->stats.makespan;
                        if (saturated(v)) snprintf(ms[i], sizeof ms[i], "saturated");
                        else snprintf(ms[i], sizeof ms[i], "%.3f", dcp_cli_units_ms(v, unit_ps));
                    }
                    printf(" %12s %12s", ms[0], ms[1]);
                }
                char eff[16], imb[16];
                if (saturated(r->stats.model_makespan)) snprintf(eff, sizeof eff, "saturated");
                else snprintf(eff, sizeof eff, "%.3f", r->metrics.efficiency);
                if (balance_saturated(&r->stats)) snprintf(imb, sizeof imb, "saturated");
                else snprintf(imb, sizeof imb, "%.3f", r->metrics.imbalance);
                printf(" %10s %9s %7.2f %10s\n", eff, imb, r->metrics.mean_cp_size,
                       time_text(o, r->median_seconds, t, sizeof t));
            } else {
                const char *what = r->status == DCP_ERR_UNSUPPORTED      ? "not available"
                                   : r->status == DCP_ERR_INVALID_CONFIG ? "not configurable"
                                                                         : "failed";
                if (r->status == DCP_ERR_INVALID_CONFIG) printf("%s: %s\n", what, r->message);
                else printf("%s: %s (%s)\n", what, r->message, dcp_status_str(r->status));
            }
        }
        printf("\nmakespan: step-model cost units (docs/planning.md, Cost model), every rank waiting for each microbatch's\n"
               "slowest rank; dependency: the makespan when a rank waits only for the ranks of its CP groups;\n"
               "efficiency = lower bound / makespan under the %s step model; imbalance = slowest rank /\n"
               "mean rank, summed over microbatches (1.000 = perfectly even).\n\n",
               dcp_step_model_name((dcp_step_model)o->setup.cost.step_model));
        if (unit_ps > 0)
            printf("ms: the two makespans in milliseconds; the profile's cost unit is %lld ps (time_unit_ps).\n\n",
                   (long long)unit_ps);
        else /* a first-time user: the shipped calibrated profiles turn the units into milliseconds */
            printf("For step times in ms, plan with a calibrated profile: --cost llama8b-layer-h100 (one layer of a\n"
                   "Llama-8B-like model timed on one GPU; dcpack plan --cost no-such-name lists the shipped ones).\n\n");
        if (all_saturated) {
            printf("every scheduler's %s saturates int64 (shown \"saturated\"): the cost model's coefficients are\n"
                   "too large for these lengths, so no scheduler is lowest and there is no efficiency; use a model\n"
                   "whose costs fit (docs/planning.md, Cost model).\n",
                   model_makespan_name(&o->setup));
        } else if (best < 0) {
            printf("no scheduler could plan this batch.\n");
        } else {
            char best_label[64], other_label[64];
            label_of(&runs[best], best_label, sizeof best_label);
            /* the runner-up: the next lowest makespan */
            int second = -1;
            for (int k = 0; k < COUNT; k++)
                if (k != best && runs[k].status == DCP_OK &&
                    (second < 0 || runs[k].stats.model_makespan < runs[second].stats.model_makespan))
                    second = k;
            if (second < 0) {
                printf("%s is the only scheduler that planned this batch: efficiency %.3f.\n", best_label,
                       runs[best].metrics.efficiency);
            } else if (saturated(runs[second].stats.model_makespan)) {
                printf("%s has the lowest %s (%.1f%% above the lower bound); every other scheduler's saturates "
                       "int64.\n",
                       best_label, model_makespan_name(&o->setup),
                       100.0 * ((double)runs[best].stats.model_makespan / (double)runs[best].stats.model_lower_bound -
                                1.0));
            } else {
                const dcp_plan_stats *b = &runs[best].stats, *o2 = &runs[second].stats;
                label_of(&runs[second], other_label, sizeof other_label);
                double gain = 1.0 - (double)b->model_makespan / (double)o2->model_makespan;
                printf("%s has the lowest %s: %.1f%% below %s and %.1f%% above the lower bound.\n", best_label,
                       model_makespan_name(&o->setup), 100.0 * gain, other_label,
                       100.0 * ((double)b->model_makespan / (double)b->model_lower_bound - 1.0));
            }
        }
    }
    for (int k = 0; k < COUNT; k++) dcp_cli_planner_destroy(&runs[k].planner);
    if (dcp_cli_output_status("plan") != DCP_EXIT_OK) return DCP_EXIT_ERROR;
    return planned > 0 ? DCP_EXIT_OK : DCP_EXIT_ERROR;
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int dcp_cli_plan(int argc, char **argv)
{
    plan_options o;
    memset(&o, 0, sizeof o);
    dcp_cli_setup_default(&o.setup);
    o.repeat = 5;
    dcp_cli_args args = {argc, argv, 1, "plan"};
    for (; args.i < argc; args.i++) {
        const char *v = NULL;
        int st = DCP_EXIT_OK, got;
        if (dcp_cli_flag(&args, "-h") || dcp_cli_flag(&args, "--help")) {
            fputs(plan_usage, stdout);
            return DCP_EXIT_OK;
        }
        if ((got = dcp_cli_input_option(&args, &o.input, &st)) != 0 ||
            (got = dcp_cli_setup_option(&args, &o.setup, &o.cost_path, &st)) != 0) {
            if (got < 0) return st;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--scheduler", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (dcp_scheduler_from_name(v, &o.setup.scheduler) != DCP_OK)
                return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "--scheduler: '%s' is not dp_balanced, dynamic_cp or balanced",
                                    v);
            o.scheduler_set = 1;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--format", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (strcmp(v, "json") == 0) o.json = 1;
            else if (strcmp(v, "text") == 0) o.json = 0;
            else return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "--format: '%s' is not text or json", v);
            continue;
        }
        if ((got = dcp_cli_option(&args, "--repeat", &v)) != 0) {
            int64_t r = 0;
            if (got < 0 || dcp_cli_parse_int("plan", "--repeat", v, 1, 1000000, &r) != DCP_EXIT_OK) return DCP_EXIT_USAGE;
            o.repeat = (int32_t)r;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--svg", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            o.svg = v;
            continue;
        }
        if (dcp_cli_flag(&args, "--summary")) {
            o.summary = 1;
            continue;
        }
        if (dcp_cli_flag(&args, "--no-timing")) {
            o.no_timing = 1;
            continue;
        }
        return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "unknown argument '%s' (see dcpack plan --help)", argv[args.i]);
    }
    if (o.input.trace && o.input.generate)
        return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "--trace and --generate are two inputs: give one");
    if ((o.input.column || o.input.input_format) && !o.input.trace)
        return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "--column and --input-format describe a --trace file");
    if (!o.scheduler_set && o.svg)
        return dcp_cli_fail(DCP_EXIT_USAGE, "plan", "--svg draws one plan: give --scheduler");

    dcp_cli_trace trace;
    int st;
    if (o.input.trace) st = dcp_cli_trace_read("plan", o.input.trace, o.input.input_format, o.input.column, &trace);
    else if (o.input.generate) st = dcp_cli_trace_generate("plan", o.input.generate, 0, &trace);
    else st = dcp_cli_trace_default(&trace);
    if (st != DCP_EXIT_OK) return st;

    if (!is_pow2(o.setup.ranks) && (!o.scheduler_set || o.setup.scheduler != DCP_SCHEDULER_DP_BALANCED))
        fprintf(stderr,
                "dcpack plan: note: %d ranks is not a power of two: a sequence that needs more ranks than the largest "
                "power of two below runs on all %d (the reference's full-group fallback)\n",
                o.setup.ranks, o.setup.ranks);

    if (!o.scheduler_set) {
        /* --cp sets dp_balanced's CP size; the dynamic schedulers ignore it in a comparison */
        st = compare_schedulers(&o, &trace);
        dcp_cli_trace_free(&trace);
        return st;
    }

    plan_run r;
    st = run_scheduler("plan", &o, o.setup, &trace, &r);
    if (st != DCP_EXIT_OK && r.message[0]) {
        dcp_cli_fail(st, "plan", "%s", r.message);
    } else if (st == DCP_EXIT_OK && r.status != DCP_OK) {
        st = dcp_cli_fail(r.status == DCP_ERR_BAD_LENGTH ? DCP_EXIT_INPUT : DCP_EXIT_ERROR, "plan",
                          "%s could not plan %s: %s (%s)", dcp_scheduler_name(o.setup.scheduler), trace.name,
                          r.message, dcp_status_str(r.status));
    } else if (st == DCP_EXIT_OK) {
        if (o.json) print_plan_json(&o, &r, &trace);
        else print_plan_text(&o, &r, &trace);
        st = dcp_cli_output_status("plan");
        if (st == DCP_EXIT_OK && o.svg) {
            char title[700];
            char label[64];
            label_of(&r, label, sizeof label);
            snprintf(title, sizeof title, "%s on %d ranks, max_seqlen_per_rank %d: %s", label, o.setup.ranks,
                     o.setup.max_seqlen_per_rank, trace.name);
            st = dcp_cli_svg_write("plan", o.svg, r.plan, &trace, &r.config, &r.stats, title, o.setup.time_unit_ps);
        }
    }
    dcp_cli_planner_destroy(&r.planner);
    dcp_cli_trace_free(&trace);
    return st;
}
