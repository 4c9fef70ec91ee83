/*
 * test_integer_safety.c - sizes at the edges of their integer types.
 *
 * Lengths near INT32_MAX with M near INT32_MAX, token totals beyond 2^31,
 * s^2 beyond 2^63 in the cost model (it saturates at INT64_MAX; documented in
 * dcpack.h), and 65,536 ranks.  Every scheduler that is built plans each
 * batch, and the plan passes the validator; a scheduler that still reports
 * DCP_ERR_UNSUPPORTED on a trivial batch is named in the output and left out.
 */
#include "dcp_test.h"

#include <stdlib.h>

static int scheduler_built(dcp_scheduler scheduler)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = scheduler;
    c.data_parallel_size = 2;
    c.max_sequences = 8;
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return 0;
    const int32_t lengths[3] = {10, 20, 30};
    const dcp_plan *plan;
    int built = dcp_plan_compute(ctx, lengths, 3, &plan) != DCP_ERR_UNSUPPORTED;
    dcp_context_destroy(ctx);
    if (!built) printf("note: scheduler %s is not built; not checked\n", dcp_scheduler_name(scheduler));
    return built;
}

static int64_t sum_lengths(const int32_t *lengths, int32_t n)
{
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += lengths[i];
    return total;
}

/* Plan with `scheduler`, validate, check the statistics' token total; no allocation in the step. */
static void plan_and_check(dcp_config c, dcp_scheduler scheduler, const int32_t *lengths, int32_t n, int line)
{
    c.scheduler = scheduler;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&c, &ctx);
    if (st != DCP_OK) {
        dcp_test_fail(__FILE__, line, "%s: context: %s", dcp_scheduler_name(scheduler), dcp_status_str(st));
        return;
    }
    const dcp_plan *plan = NULL;
    DCP_CHECK_NO_ALLOC(st = dcp_plan_compute(ctx, lengths, n, &plan));
    if (st != DCP_OK) {
        dcp_test_fail(__FILE__, line, "%s: %s: %s", dcp_scheduler_name(scheduler), dcp_status_str(st),
                      dcp_context_last_error(ctx));
    } else {
        dcp_plan_violation v;
        st = dcp_plan_validate(ctx, plan, lengths, n, &v);
        if (st != DCP_OK) dcp_test_fail(__FILE__, line, "%s: invalid plan: %s", dcp_scheduler_name(scheduler), v.message);
        dcp_plan_stats stats;
        st = dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
        if (st != DCP_OK || stats.total_tokens != sum_lengths(lengths, n) || stats.makespan < 0 ||
            stats.busy_sum < 0 || stats.quad_makespan < 0)
            dcp_test_fail(__FILE__, line, "%s: stats %s, total %lld of %lld, makespan %lld",
                          dcp_scheduler_name(scheduler), dcp_status_str(st), (long long)stats.total_tokens,
                          (long long)sum_lengths(lengths, n), (long long)stats.makespan);
    }
    dcp_context_destroy(ctx);
}

static void plan_every_scheduler(const dcp_config *c, const int32_t *lengths, int32_t n, int line)
{
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++)
        if (scheduler_built((dcp_scheduler)s)) plan_and_check(*c, (dcp_scheduler)s, lengths, n, line);
}

DCP_TEST(lengths_near_int32_max)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 4;
    c.max_sequences = 16;
    c.max_seqlen_per_rank = INT32_MAX;
    const int32_t lengths[] = {INT32_MAX, INT32_MAX, INT32_MAX - 1, 1, INT32_MAX, 2, 3, INT32_MAX};
    const int32_t n = (int32_t)(sizeof lengths / sizeof lengths[0]);
    plan_every_scheduler(&c, lengths, n, __LINE__);

    /* M one short of INT32_MAX: an INT32_MAX sequence needs two ranks (static CP 2 for dp_balanced) */
    c.data_parallel_size = 2;
    c.context_parallel_size = 2;
    c.max_seqlen_per_rank = INT32_MAX - 1;
    plan_every_scheduler(&c, lengths, n, __LINE__);

    /* one rank of M = INT32_MAX - 1 cannot hold INT32_MAX: a clean DCP_ERR_BAD_LENGTH naming both */
    c.data_parallel_size = 1;
    c.context_parallel_size = 1;
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan;
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, lengths, n, &plan), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "length 2147483647");
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "2147483646");
    dcp_context_destroy(ctx);
}

DCP_TEST(token_totals_beyond_2_31)
{
    /* 2048 sequences of about 2^21 tokens: more than 2^32 tokens in one batch */
    enum { N = 2048 };
    static int32_t lengths[N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        lengths[i] = (1 << 21) + (int32_t)(x >> 12); /* 2^21 .. 2^21 + 2^20 */
    }
    DCP_REQUIRE(sum_lengths(lengths, N) > ((int64_t)1 << 32));
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 16;
    c.context_parallel_size = 4;
    c.max_sequences = N;
    c.max_seqlen_per_rank = 1 << 22;
    plan_every_scheduler(&c, lengths, N, __LINE__);
}

DCP_TEST(cost_model_saturates)
{
    dcp_cost_model m;
    dcp_cost_model_default(&m);
    m.linear = 0;
    /* the largest s whose s^2 fits int64 is exact; one more saturates */
    DCP_CHECK_EQ_INT(dcp_cost(&m, 3037000499LL, 1), 3037000499LL * 3037000499LL);
    DCP_CHECK_EQ_INT(dcp_cost(&m, 3037000500LL, 1), INT64_MAX);
    /* s^2 * quadratic far beyond 2^127 still saturates (no __int128 overflow) */
    m.quadratic = INT64_MAX;
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, 1), INT64_MAX);
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, 1 << 16), INT64_MAX);
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, INT32_MAX), INT64_MAX);
    dcp_cost_model_default(&m);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) m.kv[k] = INT64_MAX;
    m.round_latency = INT64_MAX;
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT32_MAX, 1 << 16), INT64_MAX);
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1, 2), INT64_MAX); /* round latency alone */
    /* cost never decreases as s grows through the saturation point */
    dcp_cost_model_default(&m);
    int64_t previous = 0;
    int saturated = 0;
    for (int64_t s = 3036900000LL; s < 3037050000LL; s += 7) {
        int64_t cost = dcp_cost(&m, s, 1);
        DCP_CHECK(cost >= previous);
        previous = cost;
        saturated += cost == INT64_MAX;
    }
    DCP_CHECK(saturated > 0 && previous == INT64_MAX && dcp_cost(&m, 3036900000LL, 1) < INT64_MAX);
    /* negative coefficients (rejected by dcp_config_validate) count as 0, so the result is never negative */
    dcp_cost_model_default(&m);
    m.quadratic = -1;
    m.linear = -5;
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1000, 1), 0);
    m.quadratic = INT64_MIN;
    m.linear = INT64_MIN;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) m.kv[k] = -1;
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, 4), 491520LL * 3); /* only the round latency is left */
    /* degenerate arguments */
    dcp_cost_model_default(&m);
    DCP_CHECK_EQ_INT(dcp_cost(&m, -1, 1), 0);
    DCP_CHECK_EQ_INT(dcp_cost(&m, 100, 0), 0);
    DCP_CHECK_EQ_INT(dcp_cost(NULL, 100, 1), 0);
}

/* the gather term and the hinge saturate at INT64_MAX instead of wrapping */
DCP_TEST(gather_and_hinge_saturate)
{
    dcp_cost_model m;
    dcp_cost_model_default(&m);
    m.cp_gather[1] = INT64_MAX / 2;
    DCP_CHECK_EQ_INT(dcp_cost(&m, 2, 2), INT64_MAX);  /* the product alone */
    DCP_CHECK(dcp_cost(&m, 1, 2) < INT64_MAX);        /* INT64_MAX / 2 + the rest still fits */
    m.cp_gather[1] = INT64_MAX - 1;
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1, 2), INT64_MAX);  /* the sum with the divided terms */
    m.cp_gather[1] = INT64_MAX;
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, 2), INT64_MAX);
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT64_MAX, 1), dcp_cost(&m, INT64_MAX, 1)); /* cp 1: no gather */
    /* cost never decreases as s grows through the gather's saturation */
    m.cp_gather[1] = INT64_MAX / 3000;
    int64_t previous = 0;
    for (int64_t s = 2900; s < 3100; s++) {
        int64_t cost = dcp_cost(&m, s, 2);
        DCP_CHECK(cost >= previous);
        previous = cost;
    }
    DCP_CHECK_EQ_INT(previous, INT64_MAX);
    /* a negative gather (rejected by dcp_config_validate) counts as 0 */
    dcp_cost_model_default(&m);
    const int64_t plain = dcp_cost(&m, 1000, 4);
    m.cp_gather[2] = INT64_MIN;
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1000, 4), plain);
}

DCP_TEST(plan_stats_saturate)
{
    /* coefficients so large that every sequence's cost saturates: totals stay at INT64_MAX */
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = 4;
    c.max_sequences = 64;
    c.max_seqlen_per_rank = INT32_MAX;
    c.cost.quadratic = INT64_MAX;
    c.cost.microbatch_overhead = INT64_MAX;
    int32_t lengths[64];
    for (int i = 0; i < 64; i++) lengths[i] = INT32_MAX - i;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 64, &plan));
    dcp_plan_stats stats;
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, 64, &stats));
    DCP_CHECK_EQ_INT(stats.makespan, INT64_MAX);
    DCP_CHECK_EQ_INT(stats.lower_bound, INT64_MAX);
    DCP_CHECK_EQ_INT(stats.busy_sum, INT64_MAX);
    DCP_CHECK_EQ_INT(stats.max_rank_sum, INT64_MAX);
    DCP_CHECK(stats.quad_makespan > 0);
    DCP_CHECK_EQ_INT(stats.total_tokens, sum_lengths(lengths, 64));
    dcp_context_destroy(ctx);
}

DCP_TEST(ranks_65536)
{
    enum { RANKS = 1 << 16, N = 2 * RANKS };
    int32_t *lengths = malloc(N * sizeof *lengths);
    DCP_REQUIRE(lengths);
    uint32_t x = 99;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        lengths[i] = 1 + (int32_t)(x >> 19); /* 1 .. 8192 */
    }
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = RANKS;
    c.max_sequences = N;
    c.max_seqlen_per_rank = 8192;
    /* the workspace stays proportional to the capacities: well under 256 bytes per sequence and rank */
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        c.scheduler = (dcp_scheduler)s;
        size_t bytes = 0;
        DCP_REQUIRE_OK(dcp_workspace_size(&c, &bytes));
        printf("%s, %d ranks, %d sequences: workspace %zu bytes\n", dcp_scheduler_name(c.scheduler), RANKS, N,
               bytes);
        DCP_CHECK(bytes < (size_t)256 * (N + RANKS));
    }
    plan_every_scheduler(&c, lengths, N, __LINE__);
    /* static CP 4 over 16384 DP lanes */
    c.data_parallel_size = RANKS / 4;
    c.context_parallel_size = 4;
    plan_and_check(c, DCP_SCHEDULER_DP_BALANCED, lengths, N, __LINE__);
    free(lengths);

    /* 2^20 DPxCP ranks is the largest configuration accepted; one more lane is DCP_ERR_OVERFLOW */
    dcp_config_default(&c);
    c.data_parallel_size = 1 << 20;
    c.max_sequences = 1 << 20;
    DCP_CHECK_STATUS(dcp_config_validate(&c, NULL, 0), DCP_OK);
    c.data_parallel_size = (1 << 20) + 1;
    char message[256];
    DCP_CHECK_STATUS(dcp_config_validate(&c, message, sizeof message), DCP_ERR_OVERFLOW);
    DCP_CHECK_CONTAINS(message, "1048577");
}
