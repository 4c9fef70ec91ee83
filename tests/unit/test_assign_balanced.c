/*
 * test_assign_balanced.c - dcpack's own scheduler, `balanced`.
 *
 *  - Hand-worked batches whose optimal plan is known (the plan's makespan is
 *    compared with the optimum worked out in the comment).
 *  - Tiny random batches against an exhaustive search over every plan
 *    (every split into microbatches, groups and CP sizes): balanced stays
 *    within a stated factor of the optimum, and the step model's lower bound
 *    (core/stats.c) never passes it, under random cost models.
 *  - Thousands of random small batches and configurations: the plan passes the
 *    validator (dcp_plan_compute validates), is the same when planned twice
 *    and in a fresh context, allocates nothing, and its makespan is at most
 *    dynamic_cp's (within a stated factor on batches of a few sequences).
 *  - The 256/1024-sequence traces on the golden configurations: lower
 *    makespan than the reference's golden dynamic_cp plans (read from
 *    tests/data/golden).
 *  - Bad input, and the scratch size being an exact bound.
 */
#include "dcp_test.h"
#include "../core/plan.h"
#include "../pipeline/stages.h"

#include <stdlib.h>

#define DCP_TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "dcp_test_rng.h"

/* ---- helpers ---- */

typedef struct small_config {
    int32_t ranks, per_rank, min_cp, vpp_group, seq_cap, max_sequences;
    dcp_scheduler scheduler;
} small_config;

static dcp_config config_of(const small_config *s)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = s->scheduler;
    c.data_parallel_size = s->ranks;
    c.max_seqlen_per_rank = s->per_rank;
    c.min_cp_size = s->min_cp > 0 ? s->min_cp : 1;
    c.max_sequences_per_microbatch = s->seq_cap;
    c.max_sequences = s->max_sequences;
    if (s->vpp_group > 1) {
        /* the VPP alignment alone: with PP > 1 balanced plans for the pipeline (test_pipeline_model.c) */
        c.pipeline_parallel_size = 1;
        c.virtual_pipeline_size = 1;
        c.microbatch_group_size_per_vp_stage = s->vpp_group;
    }
    return c;
}

static dcp_context *context_of(const small_config *s)
{
    dcp_config c = config_of(s);
    dcp_context *ctx = NULL;
    return dcp_context_create(&c, &ctx) == DCP_OK ? ctx : NULL;
}

/* Plan with `ctx`; on success the makespan (and the plan's hash) are returned through the pointers. */
/* The plan's model makespan: the pipeline's with PP > 1 (what balanced minimises there), else the barrier's. */
static dcp_status plan_model_makespan(dcp_context *ctx, const int32_t *lengths, int32_t n, int64_t *makespan)
{
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st != DCP_OK) return st;
    dcp_plan_stats stats;
    st = dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    *makespan = stats.model_makespan;
    return st;
}

static dcp_status plan_makespan(dcp_context *ctx, const int32_t *lengths, int32_t n, int64_t *makespan,
                                uint64_t *hash)
{
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st != DCP_OK) return st;
    dcp_plan_stats stats;
    st = dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    /* with PP > 1 (the VPP configurations) balanced minimises the pipeline's makespan: compare that */
    if (makespan) *makespan = stats.pipeline_makespan > 0 ? stats.pipeline_makespan : stats.makespan;
    if (hash) *hash = dcp_plan_hash(plan);
    return st;
}


/* ---- exhaustive optimum for tiny batches (up to 8 sequences, up to 8 ranks) ---- */

/* TINY_MAX: the most sequences the balanced comparison draws; TINY_CAP: the most the search takes */
enum { TINY_MAX = 6, TINY_CAP = 8, TINY_RANKS = 8 };
#define TINY_INF INT64_MAX

typedef struct tiny {
    const dcp_cost_model *model;
    int32_t n, ranks, per_rank, min_cp, seq_cap, vpp;
    const int32_t *len;
    int64_t memo[1 << TINY_CAP][TINY_RANKS + 1]; /* least slowest-group load covering R ranks with set S; -2 unknown */
    int64_t plan_memo[1 << TINY_CAP][8];         /* least makespan of set S with k microbatches so far (mod vpp) */
} tiny;

static int64_t tiny_cover(tiny *t, uint32_t set, int32_t ranks_left)
{
    if (set == 0) return ranks_left == 0 ? 0 : TINY_INF;
    if (ranks_left == 0) return TINY_INF;
    if (t->memo[set][ranks_left] != -2) return t->memo[set][ranks_left];
    int64_t best = TINY_INF;
    uint32_t low = set & (~set + 1), rest = set & ~low;
    /* every group holding the lowest sequence: `low` plus any subset of the rest */
    for (uint32_t sub = rest;; sub = (sub - 1) & rest) {
        uint32_t group = sub | low;
        int64_t tokens = 0;
        int32_t count = 0;
        for (int32_t i = 0; i < t->n; i++)
            if (group >> i & 1u) {
                tokens += t->len[i];
                count++;
            }
        if (t->seq_cap == 0 || count <= t->seq_cap) {
            for (int32_t c = 1; c <= t->ranks; c = (c * 2 > t->ranks && c < t->ranks) ? t->ranks : c * 2) {
                if (c <= ranks_left && c >= t->min_cp && tokens <= (int64_t)c * t->per_rank) {
                    int64_t load = 0;
                    for (int32_t i = 0; i < t->n; i++)
                        if (group >> i & 1u) load += dcp_cost(t->model, t->len[i], c);
                    int64_t others = tiny_cover(t, set & ~group, ranks_left - c);
                    if (others != TINY_INF) {
                        int64_t v = load > others ? load : others;
                        if (v < best) best = v;
                    }
                }
                if (c == t->ranks) break;
            }
        }
        if (sub == 0) break;
    }
    t->memo[set][ranks_left] = best;
    return best;
}

static int64_t tiny_plan(tiny *t, uint32_t set, int32_t k)
{
    if (set == 0) return k == 0 ? 0 : TINY_INF;
    if (t->plan_memo[set][k] != -2) return t->plan_memo[set][k];
    int64_t best = TINY_INF;
    uint32_t low = set & (~set + 1), rest = set & ~low;
    for (uint32_t sub = rest;; sub = (sub - 1) & rest) {
        uint32_t mb = sub | low;
        int64_t level = tiny_cover(t, mb, t->ranks);
        if (level != TINY_INF) {
            int64_t others = tiny_plan(t, set & ~mb, (k + 1) % t->vpp);
            if (others != TINY_INF && level + t->model->microbatch_overhead + others < best)
                best = level + t->model->microbatch_overhead + others;
        }
        if (sub == 0) break;
    }
    t->plan_memo[set][k] = best;
    return best;
}

/* The least makespan over every plan of a tiny batch (TINY_INF when none exists). */
static int64_t tiny_optimum(const dcp_config *c, const int32_t *len, int32_t n)
{
    static tiny t;
    t.model = &c->cost;
    t.n = n;
    t.ranks = dcp_config_num_ranks(c);
    t.per_rank = c->max_seqlen_per_rank;
    t.min_cp = c->min_cp_size;
    t.seq_cap = c->max_sequences_per_microbatch;
    t.vpp = c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
    t.len = len;
    for (int s = 0; s < (1 << n); s++) {
        for (int r = 0; r <= TINY_RANKS; r++) t.memo[s][r] = -2;
        for (int k = 0; k < 8; k++) t.plan_memo[s][k] = -2;
    }
    return tiny_plan(&t, (1u << n) - 1, 0);
}

/* Measured over 20000 tiny batches (sequences 1-6, ranks 1-8, caps, VPP 2-3): the largest ratio seen is printed. */
#define TINY_BOUND_NUM 3
#define TINY_BOUND_DEN 2

static void print_tiny(const small_config *s, const int32_t *len, int32_t n)
{
    printf("  ranks %d per_rank %d min_cp %d seq_cap %d vpp %d lengths", s->ranks, s->per_rank, s->min_cp, s->seq_cap,
           s->vpp_group);
    for (int32_t i = 0; i < n; i++) printf(" %d", len[i]);
    printf("\n");
}

DCP_TEST(tiny_batches_within_a_factor_of_the_exhaustive_optimum)
{
    static const int32_t rank_choices[] = {1, 2, 3, 4, 6, 8};
    double worst = 1.0;
    int compared = 0, optimal = 0;
    rng_state = 0x9E3779B97F4A7C15ull;
    for (int iter = 0; iter < 20000; iter++) {
        small_config s = {rank_choices[rng() % 6], rng_range(64, 4096), 1, 0, 0, TINY_MAX, DCP_SCHEDULER_BALANCED};
        int32_t n = rng_range(1, TINY_MAX);
        if (rng() % 4 == 0) s.min_cp = 1 << (rng() % 3);
        while (s.min_cp > s.ranks || (s.min_cp & (s.min_cp - 1))) s.min_cp >>= 1;
        if (s.min_cp < 1) s.min_cp = 1;
        if (rng() % 4 == 0) s.seq_cap = rng_range(1, 3);
        if (rng() % 5 == 0) s.vpp_group = rng_range(2, 3);
        int32_t len[TINY_MAX];
        for (int32_t i = 0; i < n; i++) {
            switch (rng() % 3) {
            case 0: len[i] = rng_range(1, s.per_rank); break;
            case 1: len[i] = rng_range(1, s.per_rank / 8 + 1); break;
            default: len[i] = rng_range(1, s.per_rank * s.ranks); break;
            }
        }
        dcp_config c = config_of(&s);
        int64_t best = tiny_optimum(&c, len, n);
        dcp_context *ctx = context_of(&s);
        DCP_REQUIRE(ctx != NULL);
        int64_t makespan = 0;
        dcp_status st = plan_makespan(ctx, len, n, &makespan, NULL);
        dcp_context_destroy(ctx);
        if (best == TINY_INF) {
            if (st != DCP_ERR_INFEASIBLE)
                dcp_test_fail(__FILE__, __LINE__, "iteration %d: no plan exists, balanced says %s", iter,
                              dcp_status_str(st));
            continue;
        }
        if (st != DCP_OK) {
            dcp_test_fail(__FILE__, __LINE__, "iteration %d: a plan exists (makespan %lld), balanced says %s", iter,
                          (long long)best, dcp_status_str(st));
            print_tiny(&s, len, n);
            continue;
        }
        DCP_CHECK(makespan >= best);
        compared++;
        if (makespan == best) optimal++;
        double ratio = (double)makespan / (double)best;
        if (ratio > worst) worst = ratio;
        if ((__int128)makespan * TINY_BOUND_DEN > (__int128)best * TINY_BOUND_NUM) {
            dcp_test_fail(__FILE__, __LINE__, "iteration %d: makespan %lld > %d/%d x optimum %lld (n %d, ranks %d)",
                          iter, (long long)makespan, TINY_BOUND_NUM, TINY_BOUND_DEN, (long long)best, n, s.ranks);
            print_tiny(&s, len, n);
        }
    }
    printf("tiny batches: %d compared, %d optimal, worst ratio to the optimum %.4f\n", compared, optimal, worst);
}

/*
 * The step model's lower bound (core/stats.c) against the exhaustive optimum: on tiny batches under
 * random cost models (attention, linear, KV and ring-latency terms of every weight; often one long
 * sequence among short ones, where the long one's microbatch cannot be filled up to its level) it is
 * never above the optimum, each of its steps only raises it, and step 5 (the dearest microbatch's
 * token room) raises it on some of them (test_bound.c has a plan that attains it).
 */
DCP_TEST(tiny_batches_never_below_the_lower_bound)
{
    static const int32_t rank_choices[] = {1, 2, 3, 4, 6, 8};
    int compared = 0, raised = 0, raised_to_optimum = 0, at_optimum = 0;
    rng_state = 0xD1B54A32D192ED03ull;
    for (int iter = 0; iter < 12000; iter++) {
        const int mode = (int)(rng() % 3); /* 0: any lengths, 1: one long among short ones, 2: denser shorter ones */
        small_config s = {rank_choices[rng() % 6], rng_range(8, 512), 1, 0, 0, TINY_CAP, DCP_SCHEDULER_BALANCED};
        int32_t n = rng_range(1, TINY_MAX), len[TINY_CAP];
        if (mode == 1) {
            /*
             * One long sequence that fits half of 2 or 4 ranks among up to 7 short ones of one length (a
             * quarter to a half of a rank's tokens), the attention term and the ring latency weighing
             * most: the long one's cheapest size leaves ranks that the short ones fill with tokens
             * before they reach its level.
             */
            s.ranks = rng() % 2 ? 2 : 4;
            n = rng_range(4, TINY_CAP);
            len[0] = rng_range(s.ranks / 2 * s.per_rank / 2, s.ranks / 2 * s.per_rank);
            const int32_t short_len = rng_range(s.per_rank / 4, s.per_rank / 2);
            for (int32_t i = 1; i < n; i++) len[i] = short_len;
        } else if (mode == 2) {
            /*
             * Sequences just over a rank's tokens beside longer ones, under a heavy ring latency: the
             * shorter carry more work per token (their two ranks' latency over fewer tokens), so the
             * densest tokens are not the longest.
             */
            s.ranks = rng() % 2 ? 4 : 8;
            s.per_rank = rng_range(8, 64);
            n = rng_range(4, TINY_CAP);
            for (int32_t i = 0; i < n; i++)
                len[i] = i < 2 ? rng_range(s.per_rank + 1, 2 * s.per_rank) : rng_range(1, s.per_rank / 2);
        } else {
            if (rng() % 4 == 0) s.min_cp = 1 << (rng() % 3);
            while (s.min_cp > s.ranks || (s.min_cp & (s.min_cp - 1))) s.min_cp >>= 1;
            if (s.min_cp < 1) s.min_cp = 1;
            if (rng() % 4 == 0) s.seq_cap = rng_range(1, 3);
            if (rng() % 5 == 0) s.vpp_group = rng_range(2, 3);
            for (int32_t i = 0; i < n; i++) len[i] = rng_range(1, s.per_rank * s.ranks);
        }
        dcp_config c = config_of(&s);
        const int64_t m = s.per_rank, q = rng_range(mode ? 1 : 0, 3);
        c.cost.quadratic = q;
        c.cost.linear = mode ? rng_range(0, 4) : rng() % 2 ? rng_range(0, 64) : 0;
        for (int k = 0; k < (int)(sizeof c.cost.kv / sizeof c.cost.kv[0]); k++)
            c.cost.kv[k] = mode || rng() % 3 ? 0 : rng_range(0, 600);
        if (mode == 0) c.cost.round_latency = rng() % 4 ? (int64_t)(rng() % (uint64_t)(4 * m * m + 1)) : 0;
        else c.cost.round_latency = q * len[0] * len[0] / 4 + (int64_t)(rng() % (uint64_t)(q * len[0] * len[0] + 1));
        c.cost.microbatch_overhead = (int64_t)(rng() % (uint64_t)(m * m + 1));
        const int64_t best = tiny_optimum(&c, len, n);
        if (best == TINY_INF) continue;
        const int32_t vpp = s.vpp_group > 1 ? s.vpp_group : 1;
        const int64_t full = dcp__cost_lower_bound_steps(&c.cost, len, n, s.ranks, s.per_rank, vpp, s.seq_cap, 1,
                                                         DCP__BOUND_ALL);
        const int64_t no_room = dcp__cost_lower_bound_steps(&c.cost, len, n, s.ranks, s.per_rank, vpp, s.seq_cap, 1,
                                                            DCP__BOUND_LEVEL_SEARCH);
        const int64_t no_search = dcp__cost_lower_bound_steps(&c.cost, len, n, s.ranks, s.per_rank, vpp, s.seq_cap,
                                                              1, DCP__BOUND_TOKEN_ROOM);
        compared++;
        if (full > best || no_room > full || no_search > full) {
            dcp_test_fail(__FILE__, __LINE__,
                          "iteration %d: optimum %lld, bound %lld (without step 5 %lld, without the level search %lld); "
                          "cost q %lld l %lld latency %lld overhead %lld",
                          iter, (long long)best, (long long)full, (long long)no_room, (long long)no_search,
                          (long long)c.cost.quadratic, (long long)c.cost.linear, (long long)c.cost.round_latency,
                          (long long)c.cost.microbatch_overhead);
            print_tiny(&s, len, n);
        }
        raised += full > no_room;
        raised_to_optimum += full > no_room && full == best;
        at_optimum += full == best;
    }
    printf("tiny batches: %d compared, bound at the optimum in %d; step 5 raised it in %d, to the optimum in %d\n",
           compared, at_optimum, raised, raised_to_optimum);
    DCP_CHECK(compared > 8000);
    DCP_CHECK(raised * 40 > compared);
}

/* ---- hand-worked batches ---- */

/* Plan `lengths` on `ranks` ranks of `per_rank` tokens; the makespan, or -1 with a failure recorded. */
static int64_t hand_plan(int32_t ranks, int32_t per_rank, const int32_t *lengths, int32_t n, const dcp_plan **out,
                         dcp_context **ctx_out)
{
    small_config s = {ranks, per_rank, 1, 0, 0, n, DCP_SCHEDULER_BALANCED};
    dcp_context *ctx = context_of(&s);
    if (!ctx) return -1;
    const dcp_plan *plan = NULL;
    if (dcp_plan_compute(ctx, lengths, n, &plan) != DCP_OK) {
        dcp_context_destroy(ctx);
        return -1;
    }
    dcp_plan_stats stats;
    dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    *out = plan;
    *ctx_out = ctx;
    return stats.makespan;
}

DCP_TEST(eight_full_ranks_one_sequence_each)
{
    /* 8 sequences of M tokens on 8 ranks: one microbatch, one sequence per rank, makespan cost(M,1) + overhead */
    int32_t lengths[8];
    for (int i = 0; i < 8; i++) lengths[i] = 4096;
    const dcp_plan *plan;
    dcp_context *ctx;
    int64_t makespan = hand_plan(8, 4096, lengths, 8, &plan, &ctx);
    DCP_REQUIRE(makespan >= 0);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK_EQ_INT(makespan, 4096LL * 4096 + 49152LL * 4096 + 819200);
    DCP_CHECK_EQ_INT(plan->num_microbatches, 1);
    DCP_CHECK_EQ_INT(plan->num_groups, 8);
    for (int32_t g = 0; g < plan->num_groups; g++) DCP_CHECK_EQ_INT(plan->group_cp_size[g], 1);
    dcp_context_destroy(ctx);
}

DCP_TEST(two_halves_per_rank)
{
    /* 16 sequences of M/2 on 8 ranks: the tokens fill one microbatch exactly, two sequences per rank */
    int32_t lengths[16];
    for (int i = 0; i < 16; i++) lengths[i] = 2048;
    const dcp_plan *plan;
    dcp_context *ctx;
    int64_t makespan = hand_plan(8, 4096, lengths, 16, &plan, &ctx);
    DCP_REQUIRE(makespan >= 0);
    DCP_CHECK_EQ_INT(makespan, 2 * (2048LL * 2048 + 49152LL * 2048) + 819200);
    DCP_CHECK_EQ_INT(plan->num_microbatches, 1);
    for (int32_t r = 0; r < 8; r++) DCP_CHECK_EQ_INT(dcp__plan_rank_count(plan, 0, r), 2);
    dcp_context_destroy(ctx);
}

DCP_TEST(one_long_sequence_takes_the_whole_node)
{
    /* 8192 tokens, M = 1024 on 8 ranks: the only plan is CP 8 */
    const int32_t lengths[1] = {8192};
    const dcp_plan *plan;
    dcp_context *ctx;
    int64_t makespan = hand_plan(8, 1024, lengths, 1, &plan, &ctx);
    DCP_REQUIRE(makespan >= 0);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK_EQ_INT(makespan, dcp_cost(&model, 8192, 8) + 819200);
    DCP_CHECK_EQ_INT(plan->num_groups, 1);
    DCP_CHECK_EQ_INT(plan->group_cp_size[0], 8);
    dcp_context_destroy(ctx);
}

DCP_TEST(token_capacity_forces_two_microbatches)
{
    /*
     * 2 ranks of 4096, four sequences of 4096: the tokens need two
     * microbatches; each rank runs one sequence at CP 1 in each (CP 2 would
     * add ring latency for nothing).  That meets the lower bound: all work
     * spread evenly, two microbatch overheads.
     */
    const int32_t lengths[4] = {4096, 4096, 4096, 4096};
    const dcp_plan *plan;
    dcp_context *ctx;
    int64_t makespan = hand_plan(2, 4096, lengths, 4, &plan, &ctx);
    DCP_REQUIRE(makespan >= 0);
    DCP_CHECK_EQ_INT(makespan, 2 * (4096LL * 4096 + 49152LL * 4096 + 819200));
    DCP_CHECK_EQ_INT(plan->num_microbatches, 2);
    for (int32_t g = 0; g < plan->num_groups; g++) DCP_CHECK_EQ_INT(plan->group_cp_size[g], 1);
    dcp_context_destroy(ctx);
}

DCP_TEST(short_sequences_spread_at_cp_two_not_four)
{
    /*
     * 8 ranks, four short sequences (10-19 tokens): every rank must hold one,
     * and the ring latency (491520 per round) outgrows their work, so the
     * best is all four at CP 2 (level cost(19, 2)), not one at CP 4.
     */
    const int32_t lengths[4] = {13, 19, 11, 10};
    const dcp_plan *plan;
    dcp_context *ctx;
    int64_t makespan = hand_plan(8, 199, lengths, 4, &plan, &ctx);
    DCP_REQUIRE(makespan >= 0);
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    DCP_CHECK_EQ_INT(makespan, dcp_cost(&model, 19, 2) + 819200);
    for (int32_t g = 0; g < plan->num_groups; g++) DCP_CHECK_EQ_INT(plan->group_cp_size[g], 2);
    dcp_context_destroy(ctx);
}

/* ---- random batches and configurations ---- */

static void random_config(small_config *s)
{
    static const int32_t rank_choices[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64};
    s->ranks = rank_choices[rng() % 12];
    s->per_rank = rng_range(64, 8192);
    s->min_cp = 1;
    if (rng() % 4 == 0) {
        s->min_cp = 1 << (rng() % 4);
        while (s->min_cp > s->ranks) s->min_cp >>= 1;
    }
    s->seq_cap = rng() % 4 == 0 ? rng_range(1, 8) : 0;
    s->vpp_group = rng() % 5 == 0 ? rng_range(2, 4) : 0;
    s->scheduler = DCP_SCHEDULER_BALANCED;
}

static int32_t random_lengths(const small_config *s, int32_t *len, int32_t max_n)
{
    int32_t n = rng_range(1, max_n);
    int mode = rng() % 4;
    for (int32_t i = 0; i < n; i++) {
        int64_t top = mode == 0 ? s->per_rank / 4 : mode == 1 ? s->per_rank : mode == 2 ? 4LL * s->per_rank
                                                                             : (int64_t)s->ranks * s->per_rank;
        if (top > (int64_t)s->ranks * s->per_rank) top = (int64_t)s->ranks * s->per_rank;
        if (top < 1) top = 1;
        len[i] = rng_range(1, (int32_t)(top > INT32_MAX ? INT32_MAX : top));
    }
    return n;
}

/*
 * Measured over the 3000 batches below (1-300 sequences, 1-64 ranks, caps,
 * VPP, non-power-of-two rank counts): balanced is at most dynamic_cp's
 * makespan in 99% of them (at least 98% is checked) and never 1% above it (the worst seen is printed;
 * the losses are on odd rank counts such as 3, 5, 6, 12 and 24, where only
 * the full group is not a power of two).  Batches of up to SMALL_BATCH
 * sequences may lose more: up to 1/4 (none seen).
 */
#define SMALL_BATCH 8
#define VERSUS_BOUND_NUM 5
#define VERSUS_BOUND_DEN 4
#define LARGE_BOUND_NUM 101
#define LARGE_BOUND_DEN 100

DCP_TEST(random_batches_valid_deterministic_and_at_least_as_good_as_dynamic_cp)
{
    static int32_t len[300];
    int planned = 0, compared = 0, better_or_equal = 0, infeasible = 0, dense = 0;
    double worst_small = 1.0, worst_large = 1.0;
    rng_state = 0xD1B54A32D192ED03ull;
    for (int iter = 0; iter < 3000; iter++) {
        small_config s;
        random_config(&s);
        int32_t n = random_lengths(&s, len, 300);
        s.max_sequences = n;
        dcp_context *ctx = context_of(&s);
        DCP_REQUIRE(ctx != NULL);
        int64_t makespan = 0;
        uint64_t hash = 0, again = 0, fresh_hash = 0;
        dcp_status st = plan_makespan(ctx, len, n, &makespan, &hash);
        if (st == DCP_ERR_INFEASIBLE) {
            infeasible++;
        } else if (st != DCP_OK) {
            dcp_test_fail(__FILE__, __LINE__, "iteration %d: %s: %s", iter, dcp_status_str(st),
                          dcp_context_last_error(ctx));
        } else {
            planned++;
            /* the same plan again, and from a fresh context */
            DCP_CHECK_STATUS(plan_makespan(ctx, len, n, NULL, &again), DCP_OK);
            DCP_CHECK(again == hash);
            dcp_context *fresh = context_of(&s);
            DCP_REQUIRE(fresh != NULL);
            DCP_CHECK_STATUS(plan_makespan(fresh, len, n, NULL, &fresh_hash), DCP_OK);
            DCP_CHECK(fresh_hash == hash);
            dcp_context_destroy(fresh);
        }
        /* dynamic_cp on the same batch */
        small_config d = s;
        d.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
        dcp_context *dctx = context_of(&d);
        DCP_REQUIRE(dctx != NULL);
        int64_t reference = 0;
        dcp_status dst = plan_makespan(dctx, len, n, &reference, NULL);
        dcp_context_destroy(dctx);
        if (st == DCP_ERR_INFEASIBLE && dst == DCP_OK)
            dcp_test_fail(__FILE__, __LINE__, "iteration %d: balanced infeasible, dynamic_cp %s", iter,
                          dcp_status_str(dst));
        if (st == DCP_OK && dst == DCP_OK) {
            compared++;
            double ratio = (double)makespan / (double)reference;
            if (makespan <= reference) better_or_equal++;
            /* with few sequences per rank dynamic_cp's plan is a candidate: never above it */
            if ((int64_t)n < 16 * (int64_t)s.ranks && makespan > reference)
                dcp_test_fail(__FILE__, __LINE__, "iteration %d: %d sequences on %d ranks: %lld above dynamic_cp's %lld",
                              iter, n, s.ranks, (long long)makespan, (long long)reference);
            dense += (int64_t)n < 16 * (int64_t)s.ranks;
            if (n <= SMALL_BATCH) {
                if (ratio > worst_small) worst_small = ratio;
                if ((__int128)makespan * VERSUS_BOUND_DEN > (__int128)reference * VERSUS_BOUND_NUM)
                    dcp_test_fail(__FILE__, __LINE__, "iteration %d: %d sequences: %lld > %d/%d x dynamic_cp %lld",
                                  iter, n, (long long)makespan, VERSUS_BOUND_NUM, VERSUS_BOUND_DEN,
                                  (long long)reference);
            } else {
                if (ratio > worst_large) worst_large = ratio;
                if ((__int128)makespan * LARGE_BOUND_DEN > (__int128)reference * LARGE_BOUND_NUM)
                    dcp_test_fail(__FILE__, __LINE__, "iteration %d: %d sequences: %lld > %d/%d x dynamic_cp %lld",
                                  iter, n, (long long)makespan, LARGE_BOUND_NUM, LARGE_BOUND_DEN, (long long)reference);
            }
        }
        dcp_context_destroy(ctx);
    }
    printf("random batches: %d planned, %d infeasible, %d compared with dynamic_cp (%d with few sequences per rank), %d "
           "at most its makespan; worst ratio %.4f (<= %d sequences), %.4f (more)\n",
           planned, infeasible, compared, dense, better_or_equal, worst_small, SMALL_BATCH, worst_large);
    DCP_CHECK(better_or_equal * 100 >= compared * 98);
    DCP_CHECK(dense * 4 >= compared);
}

/* ---- the reference's traces on the golden configurations ---- */

/* The assign stage's table: one entry per dcp_scheduler value, named as dcp_scheduler_name() names it; the driver
   offers balanced dynamic_cp's plan and no other scheduler a candidate. */
DCP_TEST(the_scheduler_table_follows_dcp_scheduler)
{
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        const dcp__scheduler *entry = dcp__scheduler_of((dcp_scheduler)s);
        DCP_REQUIRE(entry != NULL && entry->scratch_size && entry->assign);
        DCP_CHECK(strcmp(entry->name, dcp_scheduler_name((dcp_scheduler)s)) == 0);
    }
    DCP_CHECK(dcp__scheduler_of((dcp_scheduler)3) == NULL);
    DCP_CHECK(dcp__scheduler_of((dcp_scheduler)-1) == NULL);
    DCP_CHECK(dcp__scheduler_candidate_of(DCP_SCHEDULER_BALANCED) == dcp__scheduler_of(DCP_SCHEDULER_DYNAMIC_CP));
    DCP_CHECK(dcp__scheduler_candidate_of(DCP_SCHEDULER_DYNAMIC_CP) == NULL);
    DCP_CHECK(dcp__scheduler_candidate_of(DCP_SCHEDULER_DP_BALANCED) == NULL);
    DCP_CHECK(dcp__scheduler_candidate_of((dcp_scheduler)3) == NULL);
}

DCP_TEST(golden_traces_beat_dynamic_cp)
{
    /* dynamic_cp reproduces the golden plans exactly (test_golden), so its makespan is the reference's */
    static const char *traces[] = {"bimodal_n256_seed1",    "bimodal_n1024_seed1",    "longsft_n256_seed1",
                                   "longsft_n1024_seed1",   "mlmdefault_n256_seed1",  "mlmdefault_n1024_seed1",
                                   "uniform32k_n256_seed1", "uniform32k_n1024_seed1"};
    static const int32_t configs[][3] = {{8, 2048, 0}, {32, 4096, 0}, {32, 8192, 4}, {128, 4096, 0}};
    static int32_t len[1024];
    int compared = 0;
    double worst = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        char name[128];
        snprintf(name, sizeof name, "workloads/%s.txt", traces[t]);
        int n = dcp_test_read_trace(dcp_test_data_path(name), len, 1024);
        DCP_REQUIRE(n > 0);
        for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
            small_config s = {configs[k][0], configs[k][1], 1, configs[k][2], 0, n, DCP_SCHEDULER_BALANCED};
            int64_t ours = 0, reference = 0;
            dcp_context *ctx = context_of(&s);
            DCP_REQUIRE(ctx != NULL);
            /* with VPP (PP 2) the step is the pipeline's: balanced minimises that */
            dcp_status st = plan_model_makespan(ctx, len, n, &ours);
            dcp_context_destroy(ctx);
            s.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
            ctx = context_of(&s);
            DCP_REQUIRE(ctx != NULL);
            dcp_status dst = plan_model_makespan(ctx, len, n, &reference);
            dcp_context_destroy(ctx);
            if (dst == DCP_ERR_BAD_LENGTH) {
                DCP_CHECK_STATUS(st, DCP_ERR_BAD_LENGTH); /* a sequence longer than the whole group */
                continue;
            }
            DCP_REQUIRE_OK(dst);
            DCP_REQUIRE_OK(st);
            compared++;
            double ratio = (double)ours / (double)reference;
            if (ratio > worst) worst = ratio;
            if (ours >= reference)
                dcp_test_fail(__FILE__, __LINE__, "%s on %d ranks x %d: balanced %lld, dynamic_cp %lld", traces[t],
                              configs[k][0], configs[k][1], (long long)ours, (long long)reference);
        }
    }
    printf("golden traces: %d plans, worst balanced / dynamic_cp makespan %.4f\n", compared, worst);
}

/* Plan `lengths` with balanced; the plan must sit exactly on the lower bound and repeat. */
static void check_at_bound(const char *what, const int32_t *lengths, int32_t n, int32_t ranks, int32_t m)
{
    small_config s = {ranks, m, 1, 0, 0, n, DCP_SCHEDULER_BALANCED};
    dcp_context *ctx = context_of(&s);
    DCP_REQUIRE(ctx != NULL);
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
    const uint64_t hash = dcp_plan_hash(plan);
    dcp_plan_stats st;
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &st));
    if (st.makespan != st.lower_bound)
        dcp_test_fail(__FILE__, __LINE__, "%s on %d ranks x %d: makespan %lld, bound %lld", what, ranks, m,
                      (long long)st.makespan, (long long)st.lower_bound);
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
    DCP_CHECK(dcp_plan_hash(plan) == hash);
    dcp_context_destroy(ctx);
}

DCP_TEST(plans_at_the_lower_bound_where_one_exists)
{
    /*
     * Batches with a plan at the cost model's lower bound.  balanced stops
     * as soon as a plan reaches the bound, so a bound computed too high would
     * stop it on a worse plan: in the two hand-made batches below the first
     * passes end a few thousandths of a percent above the bound (each fails
     * when the bound balanced checks is 5% too high), later ones on it.
     */
    static const int32_t few[21] = {729,  903, 996,   857, 534, 128, 16384, 433, 115, 846, 4096,
                                    104, 8192, 8192, 424, 828, 835, 983, 12288, 372, 818};
    static const int32_t mixed[32] = {619, 807,  445, 611, 313, 4096, 1009, 881, 511,   722,  884,
                                      586, 437,  847, 797, 4096, 450, 120,  8192, 243,  915,  257,
                                      16384, 731, 403, 354, 12288, 485, 1023, 4096, 95, 296};
    check_at_bound("21 sequences", few, 21, 64, 4096);
    check_at_bound("32 sequences", mixed, 32, 64, 4096);
    /* 256 sequences on 512 ranks: one microbatch holds them all */
    static const char *traces[] = {"mlmdefault_n256_seed1", "longsft_n256_seed1"};
    static int32_t len[256];
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        char name[128];
        snprintf(name, sizeof name, "workloads/%s.txt", traces[t]);
        int n = dcp_test_read_trace(dcp_test_data_path(name), len, 256);
        DCP_REQUIRE(n == 256);
        for (int32_t m = 4096; m <= 8192; m *= 2) check_at_bound(traces[t], len, n, 512, m);
    }
}

/* ---- determinism, memory, bad input ---- */

DCP_TEST(plans_allocate_nothing_and_repeat_exactly)
{
    static int32_t len[1024];
    int n = dcp_test_read_trace(dcp_test_data_path("workloads/longsft_n1024_seed1.txt"), len, 1024);
    DCP_REQUIRE(n > 0);
    for (int dense = 0; dense < 2; dense++) {
        /* 32 ranks: many sequences per rank; 128 ranks: fewer than 16 per rank, where plans are polished */
        small_config s = {dense ? 128 : 32, 4096, 1, 0, 0, n, DCP_SCHEDULER_BALANCED};
        dcp_context *ctx = context_of(&s);
        DCP_REQUIRE(ctx != NULL);
        const dcp_plan *plan = NULL;
        dcp_status st = DCP_ERR_INVALID_ARGUMENT;
        DCP_CHECK_NO_ALLOC(st = dcp_plan_compute(ctx, len, n, &plan));
        DCP_REQUIRE_OK(st);
        uint64_t first = dcp_plan_hash(plan);
        DCP_CHECK_NO_ALLOC(st = dcp_plan_compute(ctx, len, n, &plan));
        DCP_REQUIRE_OK(st);
        DCP_CHECK(dcp_plan_hash(plan) == first);
        DCP_CHECK(dcp_context_scratch_high_water(ctx) <= dcp_context_workspace_bytes(ctx));
        dcp_context_destroy(ctx);
    }
}

/*
 * A plan is a function of the lengths and the configuration only, never of
 * what an earlier call left in the scratch: the same batch planned in a
 * workspace filled with zeros, in one filled with another byte, and again
 * after another batch in that one, is the same plan.  2048 ranks with few
 * sequences per rank take the pooled packing (balanced_pool.c), whose bucket
 * bitmaps live in the scratch; 128 ranks take the passes.
 */
DCP_TEST(plans_do_not_depend_on_what_the_scratch_held)
{
    static int32_t a[16384], other[16384];
    rng_state = DCP_TEST_RNG_SEED;
    for (int32_t i = 0; i < 16384; i++) {
        a[i] = rng_range(256, 8000);
        other[i] = rng_range(256, 30000);
    }
    static const struct {
        int32_t ranks, n;
    } cases[] = {{2048, 16384}, {2048, 4096}, {128, 1024}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        small_config sc = {cases[c].ranks, 8192, 1, 0, 0, cases[c].n, DCP_SCHEDULER_BALANCED};
        dcp_config cfg = config_of(&sc);
        size_t need = 0;
        DCP_REQUIRE_OK(dcp_workspace_size(&cfg, &need));
        unsigned char *memory[2] = {malloc(need), malloc(need)};
        DCP_REQUIRE(memory[0] && memory[1]);
        memset(memory[0], 0, need);
        memset(memory[1], 0xa5, need);
        dcp_context *ctx[2] = {NULL, NULL};
        uint64_t hash[2] = {0, 0};
        for (int w = 0; w < 2; w++) {
            DCP_REQUIRE_OK(dcp_context_init_static(memory[w], need, &cfg, &ctx[w]));
            DCP_REQUIRE_OK(plan_makespan(ctx[w], a, cases[c].n, NULL, &hash[w]));
        }
        if (hash[0] != hash[1])
            dcp_test_fail(__FILE__, __LINE__, "%d ranks, %d sequences: %016llx in a zeroed workspace, %016llx in a 0xa5 one",
                          cases[c].ranks, cases[c].n, (unsigned long long)hash[0], (unsigned long long)hash[1]);
        for (int round = 0; round < 2; round++) {
            uint64_t again = 0;
            DCP_REQUIRE_OK(plan_makespan(ctx[1], other, cases[c].n, NULL, NULL));
            DCP_REQUIRE_OK(plan_makespan(ctx[1], a, cases[c].n, NULL, &again));
            if (again != hash[0])
                dcp_test_fail(__FILE__, __LINE__, "%d ranks, %d sequences: %016llx after another batch, %016llx before",
                              cases[c].ranks, cases[c].n, (unsigned long long)again, (unsigned long long)hash[0]);
        }
        dcp_context_destroy(ctx[0]);
        dcp_context_destroy(ctx[1]);
        free(memory[0]);
        free(memory[1]);
    }
}

DCP_TEST(scratch_size_is_an_exact_bound)
{
    /* the whole batch at the configured maximum: the scheduler's arena of exactly its scratch size suffices */
    enum { N_SEQ = 600 };
    static int32_t len[N_SEQ], sorted[N_SEQ], min_cp[N_SEQ];
    rng_state = 12345;
    for (int i = 0; i < N_SEQ; i++) len[i] = rng_range(1, 3 * 4096);
    static const int32_t ranks[] = {8, 24, 128, 1024};
    for (int model = DCP_STEP_MODEL_BARRIER; model <= DCP_STEP_MODEL_DEPENDENCY; model++)
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        small_config s = {ranks[r], 4096, 1, 0, 0, N_SEQ, DCP_SCHEDULER_BALANCED};
        dcp_config c = config_of(&s);
        const dcp__scheduler *offered = dcp__scheduler_candidate_of(DCP_SCHEDULER_BALANCED);
        const size_t barrier = dcp__assign_balanced_scratch_size(&c, offered);
        c.cost.step_model = (dcp_step_model)model;
        size_t need = dcp__assign_balanced_scratch_size(&c, offered);
        DCP_REQUIRE(need > 0 && need < SIZE_MAX);
        if (model == DCP_STEP_MODEL_DEPENDENCY) {
            /* only the layout's arrays come on top: finish times and block maxima (int64), the group at each
               rank (int32), the free blocks and their sort buffer (uint64), their links (int32) */
            const int32_t local = ranks[r] < N_SEQ ? ranks[r] : N_SEQ;
            DCP_CHECK_EQ_INT(need - barrier, DCP_ARENA_BYTES(int64_t, ranks[r]) * 2 + DCP_ARENA_BYTES(int32_t, ranks[r]) +
                                                 DCP_ARENA_BYTES(uint64_t, 2 * local) + DCP_ARENA_BYTES(int32_t, local));
        }
        unsigned char *memory = aligned_alloc(64, need);
        DCP_REQUIRE(memory != NULL);
        dcp__arena arena;
        dcp__arena_init(&arena, memory, need);
        dcp__error err;
        DCP_REQUIRE_OK(dcp__bucket(len, N_SEQ, &c, sorted, min_cp, &arena, &err));
        dcp__arena_reset(&arena, 0);
        static int32_t mb_first[N_SEQ + 1], first_rank[N_SEQ], cp[N_SEQ], first_id[N_SEQ + 1], ids[N_SEQ];
        dcp_plan plan = {0};
        plan.microbatch_first_group = mb_first;
        plan.group_first_rank = first_rank;
        plan.group_cp_size = cp;
        plan.group_first_id = first_id;
        plan.ids = ids;
        plan.max_microbatches = plan.max_groups = plan.max_ids = N_SEQ;
        dcp__plan_clear(&plan, ranks[r]);
        dcp__schedule_input in = {len, N_SEQ, sorted, min_cp, ranks[r], &c, offered};
        dcp_status st = dcp__assign_balanced(&in, &plan, &arena, &err);
        if (st != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "%d ranks: %s", ranks[r], err.message);
        DCP_CHECK(arena.high_water == need); /* exact: the layout takes every byte it reserves */
        /* and one cache line less is refused cleanly */
        dcp__arena_init(&arena, memory, need - 64);
        dcp__plan_clear(&plan, ranks[r]);
        DCP_CHECK_STATUS(dcp__assign_balanced(&in, &plan, &arena, &err), DCP_ERR_CAPACITY);
        free(memory);
    }
}

DCP_TEST(bad_input_is_refused_and_the_context_stays_usable)
{
    small_config s = {8, 1000, 1, 0, 0, 16, DCP_SCHEDULER_BALANCED};
    dcp_context *ctx = context_of(&s);
    DCP_REQUIRE(ctx != NULL);
    const dcp_plan *plan = NULL;
    const int32_t good[4] = {900, 100, 1000, 250};
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, good, 4, &plan));
    uint64_t hash = dcp_plan_hash(plan);
    /* longer than all 8 ranks hold */
    const int32_t too_long[2] = {10, 8001};
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, too_long, 2, &plan), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "8001");
    /* exactly what they hold is fine */
    const int32_t exact[1] = {8000};
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, exact, 1, &plan), DCP_OK);
    /* more sequences than max_sequences */
    static int32_t many[17];
    for (int i = 0; i < 17; i++) many[i] = 5;
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, many, 17, &plan), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "max_sequences");
    /* zero and negative lengths */
    const int32_t zero[2] = {5, 0}, negative[2] = {-4, 5};
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, zero, 2, &plan), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, negative, 2, &plan), DCP_ERR_BAD_LENGTH);
    /* the context plans the good batch as before */
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, good, 4, &plan));
    DCP_CHECK(dcp_plan_hash(plan) == hash);
    dcp_context_destroy(ctx);

    /* VPP group 4 with three sequences: no plan can have four non-empty microbatches */
    small_config v = {8, 1000, 1, 4, 0, 16, DCP_SCHEDULER_BALANCED};
    ctx = context_of(&v);
    DCP_REQUIRE(ctx != NULL);
    const int32_t three[3] = {10, 20, 30};
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, three, 3, &plan), DCP_ERR_INFEASIBLE);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "3 sequences");
    const int32_t four[4] = {10, 20, 30, 40};
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, four, 4, &plan), DCP_OK);
    DCP_CHECK_EQ_INT(plan->num_microbatches, 4);
    dcp_context_destroy(ctx);
}

enum { BOTH_WAYS_MAX_N = 2560 };

/* A length up to `longest`, skewed short (the product of two uniform fractions, drawn in this order). */
static int32_t skewed_short(int32_t longest)
{
    const int64_t u = rng_range(0, 1000), v = rng_range(0, 1000);
    return 1 + (int32_t)((int64_t)longest * u / 1000 * v / 1000);
}

/* n random lengths up to `longest`, of a random shape: uniform, mostly short with a few near the longest, or skewed short. */
static void random_shape_lengths(int32_t *len, int32_t n, int32_t longest)
{
    const int shape = rng_range(0, 2);
    for (int32_t i = 0; i < n; i++)
        len[i] = shape == 0 ? rng_range(1, longest)
               : shape == 1 ? (rng_range(0, 7) == 0 ? rng_range(longest / 2, longest) : rng_range(1, longest / 16 + 1))
                            : skewed_short(longest);
}

/*
 * Bucket lengths[0..n) and plan them with dcp__assign_balanced_with() twice,
 * with the shortcuts `without` and then `with`, in a workspace of exactly the
 * stages' scratch; the statuses, plan hashes and reports go to st[], hash[]
 * and report[].
 */
static void plan_both_ways(const dcp_config *c, const int32_t *lengths, int32_t n, int32_t ranks, unsigned without,
                           unsigned with, dcp_status st[2], uint64_t hash[2], dcp__balanced_report report[2])
{
    static int32_t sorted[BOTH_WAYS_MAX_N], min_cp[BOTH_WAYS_MAX_N];
    static int32_t mb_first[BOTH_WAYS_MAX_N + 1], first_rank[BOTH_WAYS_MAX_N], cp[BOTH_WAYS_MAX_N], first_id[BOTH_WAYS_MAX_N + 1], ids[BOTH_WAYS_MAX_N];
    const dcp__scheduler *offered = dcp__scheduler_candidate_of(DCP_SCHEDULER_BALANCED);
    const size_t need = dcp__assign_balanced_scratch_size(c, offered) + dcp__bucket_scratch_size(c);
    unsigned char *memory = aligned_alloc(64, (need + 63) / 64 * 64);
    DCP_REQUIRE(memory != NULL && n <= BOTH_WAYS_MAX_N);
    for (int run = 0; run < 2; run++) {
        dcp__arena arena;
        dcp__error err;
        dcp__arena_init(&arena, memory, need);
        DCP_REQUIRE_OK(dcp__bucket(lengths, n, c, sorted, min_cp, &arena, &err));
        dcp__arena_reset(&arena, 0);
        dcp_plan plan = {0};
        plan.microbatch_first_group = mb_first;
        plan.group_first_rank = first_rank;
        plan.group_cp_size = cp;
        plan.group_first_id = first_id;
        plan.ids = ids;
        plan.max_microbatches = plan.max_groups = plan.max_ids = n;
        dcp__plan_clear(&plan, ranks);
        dcp__schedule_input in = {lengths, n, sorted, min_cp, ranks, c, offered};
        st[run] = dcp__assign_balanced_with(&in, &plan, &arena, &err, run ? with : without, &report[run]);
        hash[run] = st[run] == DCP_OK ? dcp_plan_hash(&plan) : 0;
    }
    free(memory);
}

DCP_TEST(vpp_alignment_from_the_saved_state_is_the_full_pass)
{
    /*
     * A pass whose microbatch count is not a multiple of the VPP group runs a
     * second time, merging down instead of splitting up; that run starts from
     * the first one's state before its alignment (balanced_finish.c).  On
     * random batches with a VPP group (few and many sequences per rank, ranks
     * that are not a power of two, a sequence cap, both step models) the plan
     * must be the one of running the pass again in full, and the saved state
     * must have been used often (else this would compare a path with itself).
     */
    static int32_t len[BOTH_WAYS_MAX_N];
    static const int32_t rank_choices[] = {4, 6, 8, 12, 16, 24, 32, 64, 96, 128};
    static const int32_t vpp_choices[] = {2, 3, 4, 8};
    rng_state = 0x5DEECE66Dull;
    int64_t realigned_total = 0;
    int planned = 0;
    for (int t = 0; t < 300; t++) {
        const int32_t ranks = rank_choices[rng_range(0, 9)];
        const int32_t per_rank = 1024 << rng_range(0, 3);
        int32_t n = ranks * rng_range(1, 48) / 4;
        if (n < 1) n = 1;
        if (n > 1200) n = 1200;
        small_config s = {ranks, per_rank, 1, vpp_choices[rng_range(0, 3)], rng_range(0, 4) == 0 ? rng_range(1, 6) : 0,
                          n, DCP_SCHEDULER_BALANCED};
        dcp_config c = config_of(&s);
        if (rng_range(0, 3) == 0) c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
        const int32_t longest = rng_range(256, per_rank * (ranks < 8 ? ranks : 8));
        random_shape_lengths(len, n, longest);
        dcp_status st[2] = {DCP_OK, DCP_OK};
        uint64_t hash[2] = {0, 0};
        dcp__balanced_report report[2];
        plan_both_ways(&c, len, n, ranks, DCP__BALANCED_SHORTCUTS & ~DCP__BALANCED_REUSE_ALIGNMENT, DCP__BALANCED_SHORTCUTS,
                       st, hash, report);
        if (st[0] != st[1] || hash[0] != hash[1])
            dcp_test_fail(__FILE__, __LINE__,
                          "case %d (%d sequences on %d ranks, M %d, VPP group %d): status %d / %d, plan %016llx in full, "
                          "%016llx from the saved state",
                          t, n, ranks, per_rank, s.vpp_group, (int)st[0], (int)st[1], (unsigned long long)hash[0],
                          (unsigned long long)hash[1]);
        planned += st[1] == DCP_OK;
        realigned_total += report[1].realigned;
    }
    DCP_CHECK(planned >= 250);
    if (realigned_total < 300)
        dcp_test_fail(__FILE__, __LINE__, "only %lld passes started from the saved state", (long long)realigned_total);

    /*
     * Few sequences per rank on 2,048 ranks, one sequence a rank at most, VPP
     * group 4: the polishing budget runs out during the passes, so some second
     * runs would repack less than the first did and must run in full (the
     * batch of seed 2 gets another plan when the saved state is used anyway).
     */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        rng_state = seed * 0x9E3779B97F4A7C15ull;
        const int32_t ranks = 2048, per_rank = 2048, n = ranks + rng_range(0, 512), longest = 4 * per_rank;
        small_config s = {ranks, per_rank, 1, 4, 1, n, DCP_SCHEDULER_BALANCED};
        dcp_config c = config_of(&s);
        for (int32_t i = 0; i < n; i++)
            len[i] = rng_range(0, 7) == 0 ? rng_range(longest / 2, longest) : rng_range(1, longest / 16 + 1);
        dcp_status st[2] = {DCP_OK, DCP_OK};
        uint64_t hash[2] = {0, 0};
        dcp__balanced_report report[2];
        plan_both_ways(&c, len, n, ranks, DCP__BALANCED_SHORTCUTS & ~DCP__BALANCED_REUSE_ALIGNMENT, DCP__BALANCED_SHORTCUTS,
                       st, hash, report);
        DCP_CHECK_STATUS(st[0], DCP_OK);
        if (st[0] != st[1] || hash[0] != hash[1])
            dcp_test_fail(__FILE__, __LINE__, "seed %d, %d sequences on 2048 ranks: plan %016llx in full, %016llx from the saved state",
                          (int)seed, n, (unsigned long long)hash[0], (unsigned long long)hash[1]);
    }
}

/*
 * A random batch with few sequences per rank (ranks that are not a power of
 * two, a sequence cap in one of five, a VPP group in one of five, the
 * dependency model in one of four, lengths of a random shape): M is
 * per_rank << 0..steps and n half a sequence to max_quarters / 4 a rank, at
 * most 1500.  Fills *s, *c and len[0..n); returns n.
 */
static int32_t few_per_rank_case(int32_t per_rank_base, int steps, int max_quarters, small_config *s, dcp_config *c,
                                 int32_t *len)
{
    static const int32_t rank_choices[] = {4, 6, 8, 12, 16, 24, 32, 64, 96, 128, 256};
    const int32_t ranks = rank_choices[rng_range(0, 10)];
    const int32_t per_rank = per_rank_base << rng_range(0, steps);
    int32_t n = ranks * rng_range(2, max_quarters) / 4;
    if (n < 1) n = 1;
    if (n > 1500) n = 1500;
    const int32_t vpp = rng_range(0, 4) == 0 ? 2 << rng_range(0, 1) : 1;
    *s = (small_config){ranks, per_rank, 1, vpp, rng_range(0, 4) == 0 ? rng_range(1, 6) : 0, n, DCP_SCHEDULER_BALANCED};
    *c = config_of(s);
    if (rng_range(0, 3) == 0) c->cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    const int32_t longest = rng_range(256, per_rank * (ranks < 16 ? ranks : 16));
    random_shape_lengths(len, n, longest);
    return n;
}

DCP_TEST(merge_searches_skipped_by_their_bound_change_no_plan)
{
    /*
     * With few sequences per rank, merging two microbatches takes the pair
     * with the highest gain, and pairs whose gain cannot win (their merged
     * level is never under their floors or least GPU time over N) are not
     * searched (balanced_repack.c).  On random batches with few sequences per
     * rank (ranks that are not a power of two, a sequence cap, a VPP group,
     * both step models, lengths far apart) the plan must be the one of
     * searching every pair wherever the polishing budget lasts the call (a
     * skipped search spares budget, so where it runs out the plans may
     * differ), and searches must have been skipped in most batches.
     */
    static int32_t len[BOTH_WAYS_MAX_N];
    rng_state = 0x2545F4914F6CDD1Dull;
    int compared = 0, skipped_in = 0;
    int64_t skipped = 0;
    for (int t = 0; t < 300; t++) {
        small_config s;
        dcp_config c;
        const int32_t n = few_per_rank_case(1024, 3, 40, &s, &c, len), ranks = s.ranks, per_rank = s.per_rank,
                      vpp = s.vpp_group; /* up to ten sequences a rank */
        dcp_status st[2] = {DCP_OK, DCP_OK};
        uint64_t hash[2] = {0, 0};
        dcp__balanced_report report[2];
        plan_both_ways(&c, len, n, ranks, DCP__BALANCED_SHORTCUTS & ~DCP__BALANCED_BOUND_MERGES, DCP__BALANCED_SHORTCUTS, st,
                       hash, report);
        DCP_CHECK(report[0].merges_skipped == 0);
        if (report[0].budget_ran_out) continue;
        DCP_CHECK(!report[1].budget_ran_out);
        /* every merge round's choice too: a wrong choice can end in the same plan after the polishing */
        if (st[0] != st[1] || hash[0] != hash[1] || report[0].merge_choices != report[1].merge_choices)
            dcp_test_fail(__FILE__, __LINE__,
                          "case %d (%d sequences on %d ranks, M %d, VPP group %d, cap %d): status %d / %d, plan %016llx "
                          "searching every merge, %016llx skipping %lld, merge choices %s",
                          t, n, ranks, per_rank, vpp, s.seq_cap, (int)st[0], (int)st[1], (unsigned long long)hash[0],
                          (unsigned long long)hash[1], (long long)report[1].merges_skipped,
                          report[0].merge_choices == report[1].merge_choices ? "the same" : "differ");
        compared++;
        skipped += report[1].merges_skipped;
        skipped_in += report[1].merges_skipped > 0;
    }
    DCP_CHECK(compared >= 250);
    if (skipped_in < compared / 2)
        dcp_test_fail(__FILE__, __LINE__, "merge searches were skipped in only %d of %d batches (%lld in all)", skipped_in,
                      compared, (long long)skipped);
}

DCP_TEST(implied_repacking_trials_change_no_plan)
{
    /*
     * A repacking search (a bisection on the level) does not run a trial that
     * an earlier fitted trial of the same search implies: one that took every
     * step alike down to this level (balanced_repack.c).  It is charged to the
     * polishing budget as if it had run, so the plan must be the one of
     * running every trial in every batch, wherever the budget runs out too:
     * random batches with few sequences per rank (ranks that are not a power of
     * two, a sequence cap, a VPP group, both step models, lengths far apart,
     * token budgets that leave many groups too full to look at), with the same
     * status, plan, merge choices and budget outcome, and trials must have
     * been implied in most batches.
     */
    static int32_t len[BOTH_WAYS_MAX_N];
    rng_state = 0x9E3779B97F4A7C15ull;
    int implied_in = 0, planned = 0;
    int64_t implied = 0;
    for (int t = 0; t < 300; t++) {
        small_config s;
        dcp_config c;
        const int32_t n = few_per_rank_case(512, 4, 48, &s, &c, len), ranks = s.ranks, per_rank = s.per_rank,
                      vpp = s.vpp_group; /* up to twelve sequences a rank */
        dcp_status st[2] = {DCP_OK, DCP_OK};
        uint64_t hash[2] = {0, 0};
        dcp__balanced_report report[2];
        plan_both_ways(&c, len, n, ranks, DCP__BALANCED_SHORTCUTS & ~DCP__BALANCED_IMPLIED_TRIALS, DCP__BALANCED_SHORTCUTS,
                       st, hash, report);
        DCP_CHECK(report[0].trials_implied == 0);
        if (st[0] != st[1] || hash[0] != hash[1] || report[0].merge_choices != report[1].merge_choices ||
            report[0].budget_ran_out != report[1].budget_ran_out)
            dcp_test_fail(__FILE__, __LINE__,
                          "case %d (%d sequences on %d ranks, M %d, VPP group %d, cap %d): status %d / %d, plan %016llx "
                          "running every trial, %016llx with %lld implied, merge choices %s, budget ran out %d / %d",
                          t, n, ranks, per_rank, vpp, s.seq_cap, (int)st[0], (int)st[1], (unsigned long long)hash[0],
                          (unsigned long long)hash[1], (long long)report[1].trials_implied,
                          report[0].merge_choices == report[1].merge_choices ? "the same" : "differ",
                          report[0].budget_ran_out, report[1].budget_ran_out);
        planned += st[1] == DCP_OK;
        implied += report[1].trials_implied;
        implied_in += report[1].trials_implied > 0;
    }
    DCP_CHECK(planned >= 250);
    if (implied_in < planned / 2)
        dcp_test_fail(__FILE__, __LINE__, "trials were implied in only %d of %d batches (%lld in all)", implied_in, planned,
                      (long long)implied);
}
