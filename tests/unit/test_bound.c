/*
 * test_bound.c - the step model's lower bound (core/stats.c): no plan of any
 * scheduler on any workload trace and benchmark configuration costs less, nor
 * with a static CP size that is not a power of two, it is never below the
 * plain bound (work over the ranks plus the token-forced microbatches'
 * overhead), and hand-made plans attain it exactly where each of its terms is
 * what binds.
 */
#include "dcp_test.h"
#include "dcp_test_plan.h"

#include <stdlib.h>

/* bench_plan's matrix configurations: ranks, max_seqlen_per_rank, VPP group. */
static const struct {
    int32_t ranks, max_seqlen, vpp_group;
} configs[] = {
    {8, 2048, 0},  {8, 8192, 0},  {32, 4096, 0},  {32, 8192, 0},
    {32, 8192, 4}, {128, 4096, 0}, {512, 4096, 0}, {512, 8192, 0},
};

static const char *const traces[] = {
    "bimodal_n256_seed1",      "bimodal_n1024_seed1",    "bimodal_n4096_seed1",    "bimodal_n16384_seed1",
    "longsft_n256_seed1",      "longsft_n1024_seed1",    "longsft_n4096_seed1",    "longsft_n16384_seed1",
    "mlmdefault_n256_seed1",   "mlmdefault_n1024_seed1", "mlmdefault_n4096_seed1", "mlmdefault_n16384_seed1",
    "uniform32k_n256_seed1",   "uniform32k_n1024_seed1", "uniform32k_n4096_seed1", "uniform32k_n16384_seed1",
};

/*
 * The plain bound: the least GPU time of each sequence over the ranks, plus the token-forced microbatches'
 * overhead.  The group sizes are the powers of two up to the ranks, the ranks, and the static CP size.
 */
static int64_t plain_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t ranks, int32_t m,
                           int32_t static_cp)
{
    __int128 work = 0, tokens = 0;
    for (int32_t i = 0; i < n; i++) {
        __int128 best = -1;
        for (int64_t cp = 1; cp <= ranks; cp = (cp * 2 > ranks && cp < ranks) ? ranks : cp * 2) {
            if (lengths[i] <= cp * (int64_t)m) {
                __int128 w = (__int128)cp * dcp_cost(model, lengths[i], (int32_t)cp);
                if (best < 0 || w < best) best = w;
            }
            if (cp == ranks) break;
        }
        if (static_cp >= 1 && static_cp <= ranks && lengths[i] <= (int64_t)static_cp * m) {
            __int128 w = (__int128)static_cp * dcp_cost(model, lengths[i], static_cp);
            if (best < 0 || w < best) best = w;
        }
        if (best > 0) work += best;
        tokens += lengths[i];
    }
    __int128 capacity = (__int128)ranks * m;
    __int128 bound = work / ranks + (tokens + capacity - 1) / capacity * model->microbatch_overhead;
    return bound > INT64_MAX ? INT64_MAX : (int64_t)bound;
}

/* The lengths of tests/data/workloads/NAME.txt (at most cap) and the longest; the count, <= 0 on failure. */
static int read_workload(const char *name, int32_t *lengths, int cap, int32_t *longest)
{
    char path[256];
    snprintf(path, sizeof path, "workloads/%s.txt", name);
    const int n = dcp_test_read_trace(dcp_test_data_path(path), lengths, cap);
    *longest = 0;
    for (int i = 0; i < n; i++)
        if (lengths[i] > *longest) *longest = lengths[i];
    return n;
}

DCP_TEST(no_plan_on_any_trace_and_configuration_is_below_the_bound)
{
    int32_t *lengths = malloc(16384 * sizeof *lengths);
    DCP_REQUIRE(lengths);
    int planned = 0, tighter = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        int32_t longest = 0;
        const int n = read_workload(traces[t], lengths, 16384, &longest);
        DCP_REQUIRE(n > 0);
        for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
            if ((int64_t)longest > (int64_t)configs[k].ranks * configs[k].max_seqlen) continue; /* no plan exists */
            for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
                dcp_config c;
                dcp_config_default(&c);
                c.scheduler = (dcp_scheduler)s;
                c.max_sequences = n;
                c.max_seqlen_per_rank = configs[k].max_seqlen;
                c.data_parallel_size = configs[k].ranks;
                if (configs[k].vpp_group > 1) {
                    c.pipeline_parallel_size = 2;
                    c.virtual_pipeline_size = 2;
                    c.microbatch_group_size_per_vp_stage = configs[k].vpp_group;
                }
                if (s == DCP_SCHEDULER_DP_BALANCED) { /* static CP: the least power of two that holds the longest */
                    int32_t cp = 1;
                    while ((int64_t)cp * configs[k].max_seqlen < longest) cp *= 2;
                    if (configs[k].ranks % cp != 0) continue;
                    c.context_parallel_size = cp;
                    c.data_parallel_size = configs[k].ranks / cp;
                }
                dcp_context *ctx = NULL;
                DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
                const dcp_plan *plan = NULL;
                dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
                if (st == DCP_OK) {
                    dcp_plan_stats stats;
                    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &stats));
                    const int64_t plain = plain_bound(&c.cost, lengths, n, configs[k].ranks, configs[k].max_seqlen,
                                                      c.context_parallel_size);
                    if (stats.makespan < stats.lower_bound || stats.lower_bound < plain)
                        dcp_test_fail(__FILE__, __LINE__, "%s on %d ranks, M %d, VPP %d, %s: makespan %lld, bound %lld, plain %lld",
                                      traces[t], configs[k].ranks, configs[k].max_seqlen, configs[k].vpp_group,
                                      dcp_scheduler_name(c.scheduler), (long long)stats.makespan,
                                      (long long)stats.lower_bound, (long long)plain);
                    planned++;
                    tighter += stats.lower_bound > plain;
                }
                dcp_context_destroy(ctx);
            }
        }
    }
    printf("%d plans at or above the bound; the bound is above the plain one for %d of them\n", planned, tighter);
    DCP_CHECK(planned > 250);
    DCP_CHECK(tighter > 0);
    free(lengths);
}

/*
 * Static CP sizes that are not powers of two (3, 5, 6, 12) on 2 and 8 groups of them, every scheduler (each
 * takes such a configuration; dp_balanced plans groups of the static size), on the traces of 256 and 1024
 * sequences, M the least multiple of 1024 (at least 4096) with which the static group holds the longest
 * sequence: no plan is below either bound, and the barrier bound is at least the plain one over the same
 * group sizes.
 */
DCP_TEST(no_plan_with_a_static_cp_size_is_below_the_bound)
{
    static const int32_t sizes[] = {3, 5, 6, 12}, groups[] = {2, 8};
    int32_t *lengths = malloc(1024 * sizeof *lengths);
    DCP_REQUIRE(lengths);
    int planned = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        if (!strstr(traces[t], "_n256_") && !strstr(traces[t], "_n1024_")) continue;
        int32_t longest = 0;
        const int n = read_workload(traces[t], lengths, 1024, &longest);
        DCP_REQUIRE(n > 0);
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
            for (size_t d = 0; d < sizeof groups / sizeof groups[0]; d++)
                for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
                    const int32_t cp = sizes[z], ranks = cp * groups[d];
                    int32_t m = (longest + cp - 1) / cp;
                    m = m < 4096 ? 4096 : (m + 1023) / 1024 * 1024;
                    dcp_config c;
                    dcp_config_default(&c);
                    c.scheduler = (dcp_scheduler)s;
                    c.max_sequences = n;
                    c.max_seqlen_per_rank = m;
                    c.data_parallel_size = groups[d];
                    c.context_parallel_size = cp;
                    c.cost.step_model = (int32_t)((t + z + d + (size_t)s) % 2);
                    dcp_context *ctx = NULL;
                    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
                    const dcp_plan *plan = NULL;
                    if (dcp_plan_compute(ctx, lengths, n, &plan) == DCP_OK) {
                        dcp_plan_stats stats;
                        DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &stats));
                        const int64_t plain = plain_bound(&c.cost, lengths, n, ranks, m, cp);
                        if (stats.makespan < stats.lower_bound || stats.lower_bound < plain ||
                            stats.dependency_makespan < stats.dependency_lower_bound)
                            dcp_test_fail(__FILE__, __LINE__,
                                          "%s on %d ranks (CP %d), M %d, %s: makespan %lld, bound %lld, plain %lld, "
                                          "dependency makespan %lld, bound %lld",
                                          traces[t], ranks, cp, m, dcp_scheduler_name(c.scheduler),
                                          (long long)stats.makespan, (long long)stats.lower_bound, (long long)plain,
                                          (long long)stats.dependency_makespan,
                                          (long long)stats.dependency_lower_bound);
                        planned++;
                    }
                    dcp_context_destroy(ctx);
                }
    }
    printf("%d plans with a static CP size at or above both bounds\n", planned);
    DCP_CHECK(planned >= 180);
    free(lengths);
}

/* ---- hand-made plans that attain the bound ---- */

static void one_group_microbatch(fixture *f, int32_t cp, int n, const int32_t *ids)
{
    dcp__plan_open_microbatch(&f->plan, NULL);
    dcp__plan_push_group(&f->plan, 0, cp, ids, n, NULL);
    dcp__plan_close_microbatch(&f->plan);
}

/*
 * The stats of a hand-made plan on `ranks` ranks (static CP size `static_cp`) under `model` (NULL: the
 * default); the context's configuration as given.
 */
static dcp_plan_stats stats_of(fixture *f, int32_t ranks, int32_t static_cp, int32_t m, int32_t vpp_group,
                               const int32_t *lengths, int n, const dcp_cost_model *model)
{
    dcp_config c;
    dcp_config_default(&c);
    if (model) c.cost = *model;
    c.data_parallel_size = ranks / static_cp;
    c.context_parallel_size = static_cp;
    c.max_sequences = 32;
    c.max_seqlen_per_rank = m;
    if (vpp_group > 1) {
        c.pipeline_parallel_size = 2;
        c.virtual_pipeline_size = 2;
        c.microbatch_group_size_per_vp_stage = vpp_group;
    }
    dcp_plan_stats stats;
    memset(&stats, 0, sizeof stats);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return stats;
    dcp_status st = dcp_plan_stats_compute(ctx, &f->plan, lengths, n, &stats);
    if (st != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "stats: %s", dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
    return stats;
}

DCP_TEST(bound_attained_one_short_sequence_per_rank)
{
    /*
     * 8 sequences of 128 tokens on 8 ranks, one each: a microbatch costs
     * cost(128, 1) + o.  Their cheapest size is 2 (cost(128, 2) is lower), so
     * the longest sequence alone bounds less; but no level below cost(128, 1)
     * leaves room for the GPU time of size 2 (the ring's latency): the search
     * over the level finds cost(128, 1) exactly.
     */
    int32_t lengths[8];
    for (int i = 0; i < 8; i++) lengths[i] = 128;
    fixture f;
    fixture_init(&f, 8);
    dcp__plan_open_microbatch(&f.plan, NULL);
    for (int32_t i = 0; i < 8; i++) dcp__plan_push_group(&f.plan, i, 1, &i, 1, NULL);
    dcp__plan_close_microbatch(&f.plan);
    dcp_plan_stats st = stats_of(&f, 8, 1, 4096, 0, lengths, 8, NULL);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK(dcp_cost(&model, 128, 2) < dcp_cost(&model, 128, 1));
    DCP_CHECK_EQ_INT(st.makespan, dcp_cost(&model, 128, 1) + model.microbatch_overhead);
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
}

DCP_TEST(bound_attained_one_sequence_on_every_rank)
{
    /* 32768 tokens on 8 ranks of 4096: only size 8 holds it; the plan is the bound */
    const int32_t lengths[1] = {32768};
    fixture f;
    fixture_init(&f, 8);
    one_group_microbatch(&f, 8, 1, (int32_t[]){0});
    dcp_plan_stats st = stats_of(&f, 8, 1, 4096, 0, lengths, 1, NULL);
    DCP_CHECK(st.makespan > 0);
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
}

DCP_TEST(bound_attained_where_the_forced_microbatches_bind)
{
    /*
     * 16384 and 8192 tokens on 2 ranks of 8192: the tokens need two
     * microbatches; the longer sequence alone fills one (size 2), the shorter
     * runs at size 2 in the other (every rank must hold something).  The
     * plain bound (GPU time over the ranks, the shorter at size 1) is lower;
     * the longest sequence's cheapest cost plus the second microbatch's least
     * (phi(8192), at size 2) is the makespan.
     */
    const int32_t lengths[2] = {16384, 8192};
    fixture f;
    fixture_init(&f, 2);
    one_group_microbatch(&f, 2, 1, (int32_t[]){0});
    one_group_microbatch(&f, 2, 1, (int32_t[]){1});
    dcp_plan_stats st = stats_of(&f, 2, 1, 8192, 0, lengths, 2, NULL);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK_EQ_INT(st.makespan, dcp_cost(&model, 16384, 2) + dcp_cost(&model, 8192, 2) + 2 * model.microbatch_overhead);
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
    DCP_CHECK(plain_bound(&model, lengths, 2, 2, 8192, 1) < st.lower_bound);
}

DCP_TEST(bound_attained_where_the_vpp_group_forces_microbatches)
{
    /* four sequences of 4096 tokens on one rank of 8192, VPP group 4: two microbatches hold them, four must run */
    const int32_t lengths[4] = {4096, 4096, 4096, 4096};
    fixture f;
    fixture_init(&f, 1);
    for (int32_t i = 0; i < 4; i++) one_group_microbatch(&f, 1, 1, &i);
    dcp_plan_stats st = stats_of(&f, 1, 1, 8192, 4, lengths, 4, NULL);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK_EQ_INT(st.makespan, 4 * (dcp_cost(&model, 4096, 1) + model.microbatch_overhead));
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
    DCP_CHECK(plain_bound(&model, lengths, 4, 1, 8192, 1) < st.lower_bound);
}

DCP_TEST(bound_attained_with_a_static_cp_group)
{
    /*
     * Two sequences of 3 x 4096 tokens on DP 2 x CP 3 ranks of 4096: each needs 3 ranks or more, and
     * each runs on a group of the static size 3 in one microbatch: makespan cost(s, 3) + o.  The GPU time
     * c cost(s, c) is least at 3 among the sizes that hold s (3, 4 and 6), so below the level cost(s, 3)
     * both sequences run on 4 or 6 ranks, whose work over the 6 ranks, at least 2 x 4 cost(s, 4) / 6, is
     * above every such level: the bound is cost(s, 3) + o, the makespan.  Weighing only powers of two
     * and N (dcp__cost_lower_bound) it would be ceil(2 x 4 cost(s, 4) / 6) + o, above the plan.
     */
    const int32_t s = 3 * 4096, lengths[2] = {s, s};
    fixture f;
    fixture_init(&f, 6);
    dcp__plan_open_microbatch(&f.plan, NULL);
    for (int32_t i = 0; i < 2; i++) dcp__plan_push_group(&f.plan, 3 * i, 3, &i, 1, NULL);
    dcp__plan_close_microbatch(&f.plan);
    dcp_plan_stats st = stats_of(&f, 6, 3, 4096, 0, lengths, 2, NULL);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    const int64_t w3 = 3 * dcp_cost(&model, s, 3), w4 = 4 * dcp_cost(&model, s, 4), w6 = 6 * dcp_cost(&model, s, 6);
    DCP_CHECK(w3 < w4 && w4 < w6);
    DCP_CHECK_EQ_INT(st.makespan, dcp_cost(&model, s, 3) + model.microbatch_overhead);
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound(&model, lengths, 2, 6, 4096), (2 * w4 + 5) / 6 + model.microbatch_overhead);
    DCP_CHECK(dcp__cost_lower_bound(&model, lengths, 2, 6, 4096) > st.makespan);
}

/* Attention and ring latency only: cost(s, c) = s^2 / c + 1024 (c - 1); the default overhead. */
static dcp_cost_model attention_and_latency_model(void)
{
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    model.quadratic = 1;
    model.linear = 0;
    for (int k = 0; k < (int)(sizeof model.kv / sizeof model.kv[0]); k++) model.kv[k] = 0;
    model.round_latency = 1024;
    return model;
}

DCP_TEST(bound_attained_where_the_dearest_microbatchs_token_room_binds)
{
    /*
     * Attention and ring latency only (cost(s, c) = s^2 / c + 1024 (c - 1)), 4 ranks of 32 tokens: one
     * sequence of 64 tokens (cheapest per rank on 2 ranks, 3072; its least GPU time, 6144, also there)
     * and 12 of 16 (256 on one rank).  The tokens need two microbatches.  The first holds the long one
     * at level 3072 but only 128 tokens: the long one's 64 and 64 more, which carry at most 1024 of
     * work, so it cannot take the 2048 of work the level leaves room for; the other microbatch runs the
     * remaining 2048 over 4 ranks, 512 each.  Makespan 3072 + 512 + 2 o, the bound; without step 5 the
     * bound is the long one's level plus the second microbatch's floor, 3072 + 256 + 2 o.
     */
    const dcp_cost_model model = attention_and_latency_model();
    int32_t lengths[13];
    lengths[0] = 64;
    for (int i = 1; i < 13; i++) lengths[i] = 16;
    DCP_CHECK_EQ_INT(dcp_cost(&model, 64, 2), 3072);
    DCP_CHECK_EQ_INT(dcp_cost(&model, 64, 4), 4096);
    DCP_CHECK_EQ_INT(dcp_cost(&model, 16, 1), 256);
    fixture f;
    fixture_init(&f, 4);
    dcp__plan_open_microbatch(&f.plan, NULL);
    dcp__plan_push_group(&f.plan, 0, 2, (int32_t[]){0}, 1, NULL);
    dcp__plan_push_group(&f.plan, 2, 1, (int32_t[]){1, 2}, 2, NULL);
    dcp__plan_push_group(&f.plan, 3, 1, (int32_t[]){3, 4}, 2, NULL);
    dcp__plan_close_microbatch(&f.plan);
    dcp__plan_open_microbatch(&f.plan, NULL);
    for (int32_t r = 0; r < 4; r++) dcp__plan_push_group(&f.plan, r, 1, (int32_t[]){5 + 2 * r, 6 + 2 * r}, 2, NULL);
    dcp__plan_close_microbatch(&f.plan);
    dcp_plan_stats st = stats_of(&f, 4, 1, 32, 0, lengths, 13, &model);
    const int64_t o = model.microbatch_overhead;
    DCP_CHECK_EQ_INT(st.makespan, 3072 + 512 + 2 * o);
    DCP_CHECK_EQ_INT(st.lower_bound, st.makespan);
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound_steps(&model, lengths, 13, 4, 32, 1, 0, 1, DCP__BOUND_LEVEL_SEARCH),
                     3072 + 256 + 2 * o);
    /* the quick bound (no level search) has step 5 too */
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound_quick(&model, lengths, 13, 4, 32), st.makespan);
}

DCP_TEST(bound_step_5_fills_the_dearest_microbatch_densest_tokens_first)
{
    /*
     * cost(s, c) = s^2 / c + 1024 (c - 1) on 4 ranks of 32 tokens; lengths 64, 51, 35, 35, 34, 32 (251
     * tokens: two microbatches).  Least GPU time per token, rounded up: 96 (64 tokens, on 2 ranks), 95
     * (34), 94 (35), 92 (51: more tokens share the same ring latency), 32 (32, on one rank).  The 128
     * tokens that carry the most are 64 + 34 + 30 of a 35: U = 6144 + 3230 + 2820 = 12194, under
     * N x_1 = 4 x 3072, so the bound is (4 x 3072 + (21564 - 12194)) / 4 = 5414.5, 5415 (X2 = 1636 is
     * less), against 5391 (the work over 4 ranks) without step 5.  Taking the tokens longest first
     * instead (64, 51, 13 of a 35: 12058) would give 5449, above what those tokens can carry.
     */
    const dcp_cost_model model = attention_and_latency_model();
    const int32_t lengths[6] = {64, 51, 35, 35, 34, 32};
    const int64_t o = model.microbatch_overhead;
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound_steps(&model, lengths, 6, 4, 32, 1, 0, 1, DCP__BOUND_TOKEN_ROOM), 5415 + 2 * o);
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound_steps(&model, lengths, 6, 4, 32, 1, 0, 1, 0), 5391 + 2 * o);
    DCP_CHECK(dcp__cost_lower_bound(&model, lengths, 6, 4, 32) >= 5415 + 2 * o);
}
