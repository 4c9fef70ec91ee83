/*
 * test_assign_balanced.c - dcpack's own scheduler, `balanced`.
 *
 *  - Hand-worked batches whose optimal plan is known (the plan's makespan is
 *    compared with the optimum worked out in the comment).
 *  - Tiny random batches against an exhaustive search over every plan
 *    (every split into microbatches, groups and CP sizes): balanced stays
 *    within a stated factor of the optimum.
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
        c.pipeline_parallel_size = 2;
        c.virtual_pipeline_size = 2;
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
static dcp_status plan_makespan(dcp_context *ctx, const int32_t *lengths, int32_t n, int64_t *makespan,
                                uint64_t *hash)
{
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st != DCP_OK) return st;
    dcp_plan_stats stats;
    st = dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    if (makespan) *makespan = stats.makespan;
    if (hash) *hash = dcp_plan_hash(plan);
    return st;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static int32_t rng_range(int32_t lo, int32_t hi) { return lo + (int32_t)(rng() % (uint32_t)(hi - lo + 1)); }

/* ---- exhaustive optimum for tiny batches (up to 6 sequences, up to 8 ranks) ---- */

enum { TINY_MAX = 6, TINY_RANKS = 8 };
#define TINY_INF INT64_MAX

typedef struct tiny {
    const dcp_cost_model *model;
    int32_t n, ranks, per_rank, min_cp, seq_cap, vpp;
    const int32_t *len;
    int64_t memo[1 << TINY_MAX][TINY_RANKS + 1]; /* least slowest-group load covering R ranks with set S; -2 unknown */
    int64_t plan_memo[1 << TINY_MAX][8];         /* least makespan of set S with k microbatches so far (mod vpp) */
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
    for (int s = 0; s < (1 << TINY_MAX); s++) {
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
