/*
 * planner.c - from command-line settings and traces to a sized context, and
 * timed planning runs through the public API.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <string.h>
#include <time.h>

void dcp_cli_setup_default(dcp_cli_setup *s)
{
    memset(s, 0, sizeof *s);
    s->scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    s->ranks = 32;
    s->max_seqlen_per_rank = 4096;
    s->min_cp_size = 1;
    dcp_cost_model_default(&s->cost);
    s->step_model = -1;
    s->pp = 1;
    s->vpp = 1;
    s->schedule = -1;
}

#define REFUSE(status, ...) (snprintf(message, message_size, __VA_ARGS__), (status))

int dcp_cli_capacity(int32_t requested, const dcp_cli_trace *const *traces, int num_traces, int32_t *capacity,
                     char *message, size_t message_size)
{
    int64_t cap = requested, most = 0;
    for (int t = 0; t < num_traces; t++)
        if (traces[t]->count > most) most = traces[t]->count;
    if (cap == 0) cap = (most + 255) / 256 * 256;
    for (int t = 0; t < num_traces; t++)
        if (traces[t]->count > cap)
            return REFUSE(DCP_EXIT_INPUT, "%s: %d sequences exceed the capacity --max-sequences %lld", traces[t]->name,
                          traces[t]->count, (long long)cap);
    *capacity = (int32_t)cap;
    return DCP_EXIT_OK;
}

const char *dcp_cli_ranks_hold(int64_t ranks, int64_t m, int static_cp, char *buffer, size_t size)
{
    if (static_cp && ranks == 1)
        snprintf(buffer, size, "the static CP group: one rank of max_seqlen_per_rank %lld tokens", (long long)m);
    else if (static_cp)
        snprintf(buffer, size, "the static CP group: %lld ranks x max_seqlen_per_rank %lld = %lld tokens",
                 (long long)ranks, (long long)m, (long long)(ranks * m));
    else if (ranks == 1)
        snprintf(buffer, size, "what the one rank holds: max_seqlen_per_rank %lld tokens", (long long)m);
    else
        snprintf(buffer, size, "what all %lld ranks hold together: %lld x max_seqlen_per_rank %lld = %lld tokens",
                 (long long)ranks, (long long)ranks, (long long)m, (long long)(ranks * m));
    return buffer;
}

int dcp_cli_config_make(const dcp_cli_setup *s, const dcp_cli_trace *const *traces, int num_traces, dcp_config *config,
                        int32_t *cp_used, char *message, size_t message_size)
{
    const int64_t n = s->ranks, m = s->max_seqlen_per_rank;
    int32_t longest = 0;
    const dcp_cli_trace *longest_trace = NULL;
    int32_t longest_id = 0;
    for (int t = 0; t < num_traces; t++) {
        for (int32_t i = 0; i < traces[t]->count; i++)
            if (traces[t]->lengths[i] > longest) {
                longest = traces[t]->lengths[i];
                longest_trace = traces[t];
                longest_id = i;
            }
    }
    char where[600], hold[160];

    int64_t dp = n, cp = 1;
    if (s->scheduler == DCP_SCHEDULER_DP_BALANCED) {
        cp = s->cp;
        if (cp == 0) { /* the smallest CP size dividing N that holds the longest sequence */
            for (int64_t c = 1; c <= n && cp == 0; c++)
                if (n % c == 0 && c * m >= longest) cp = c;
            if (cp == 0 && longest_trace)
                return REFUSE(DCP_EXIT_INPUT, "%s: length %d exceeds %s",
                              dcp_cli_trace_where(longest_trace, longest_id, where, sizeof where), longest,
                              dcp_cli_ranks_hold(n, m, 0, hold, sizeof hold));
        }
        if (n % cp != 0)
            return REFUSE(DCP_EXIT_USAGE, "--cp %lld does not divide --ranks %lld (dp = ranks / cp)",
                                (long long)cp, (long long)n);
        dp = n / cp;
    } else if (s->cp != 0) {
        return REFUSE(DCP_EXIT_USAGE,
                            "--cp applies to dp_balanced only: %s chooses a CP size per sequence (see --min-cp-size)",
                            dcp_scheduler_name(s->scheduler));
    }
    *cp_used = s->scheduler == DCP_SCHEDULER_DP_BALANCED ? (int32_t)cp : 0;

    /* every sequence must fit the largest group that may hold it */
    const int64_t group = s->scheduler == DCP_SCHEDULER_DP_BALANCED ? cp : n;
    for (int t = 0; t < num_traces; t++)
        for (int32_t i = 0; i < traces[t]->count; i++)
            if (traces[t]->lengths[i] > group * m) {
                if (s->scheduler == DCP_SCHEDULER_DP_BALANCED)
                    return REFUSE(DCP_EXIT_INPUT, "%s: length %d exceeds %s (raise --cp or --max-seqlen-per-rank)",
                                  dcp_cli_trace_where(traces[t], i, where, sizeof where), traces[t]->lengths[i],
                                  dcp_cli_ranks_hold(cp, m, 1, hold, sizeof hold));
                return REFUSE(DCP_EXIT_INPUT, "%s: length %d exceeds %s",
                              dcp_cli_trace_where(traces[t], i, where, sizeof where), traces[t]->lengths[i],
                              dcp_cli_ranks_hold(n, m, 0, hold, sizeof hold));
            }

    int32_t capacity = 0;
    int st = dcp_cli_capacity(s->max_sequences, traces, num_traces, &capacity, message, message_size);
    if (st != DCP_EXIT_OK) return st;

    dcp_config_default(config);
    config->scheduler = s->scheduler;
    config->plan_effort = s->plan_effort;
    config->data_parallel_size = (int32_t)dp;
    config->context_parallel_size = (int32_t)cp;
    config->max_seqlen_per_rank = (int32_t)m;
    config->min_cp_size = s->min_cp_size;
    config->microbatch_group_size_per_vp_stage = s->vpp_group;
    config->max_sequences_per_microbatch = s->max_sequences_per_microbatch;
    config->max_sequences = capacity;
    config->cost = s->cost;
    /* the pipeline (--pp, --vpp, --schedule): with VPP the group defaults to P, as Megatron-LM's does */
    config->pipeline_parallel_size = s->pp;
    config->virtual_pipeline_size = s->vpp;
    if (s->vpp > 1 && s->vpp_group == 0) config->microbatch_group_size_per_vp_stage = s->pp;
    if (s->schedule >= 0) config->cost.pipeline_schedule = s->schedule;
    else if (s->vpp > 1) config->cost.pipeline_schedule = DCP_PIPELINE_INTERLEAVED;
    if (s->schedule == DCP_PIPELINE_1F1B && s->vpp > 1)
        return REFUSE(DCP_EXIT_USAGE, "--schedule 1f1b runs one model chunk per stage: --vpp %d needs interleaved",
                      s->vpp);
    char why[512];
    if (dcp_config_validate(config, why, sizeof why) != DCP_OK)
        return REFUSE(DCP_EXIT_USAGE, "invalid configuration: %s", why);
    return DCP_EXIT_OK;
}

int dcp_cli_planner_create(const char *command, const dcp_config *config, dcp_cli_planner *planner)
{
    planner->config = *config;
    planner->context = NULL;
    dcp_status st = dcp_context_create(config, &planner->context);
    if (st != DCP_OK)
        return dcp_cli_fail(DCP_EXIT_ERROR, command, "cannot create a planning context (%s) for %d sequences on %d ranks",
                            dcp_status_str(st), config->max_sequences, dcp_config_num_ranks(config));
    return DCP_EXIT_OK;
}

void dcp_cli_planner_destroy(dcp_cli_planner *planner)
{
    dcp_context_destroy(planner->context);
    planner->context = NULL;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dcp_status dcp_cli_plan_timed(dcp_cli_planner *planner, const dcp_cli_trace *trace, int32_t repeat, double *seconds,
                              const dcp_plan **plan, dcp_plan_stats *stats)
{
    dcp_status st = DCP_OK;
    for (int32_t r = 0; r < repeat; r++) {
        double t0 = now_seconds();
        st = dcp_plan_compute(planner->context, trace->lengths, trace->count, plan);
        seconds[r] = now_seconds() - t0;
        if (st != DCP_OK) return st;
    }
    return dcp_plan_stats_compute(planner->context, *plan, trace->lengths, trace->count, stats);
}
