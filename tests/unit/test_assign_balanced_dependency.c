/*
 * test_assign_balanced_dependency.c - the balanced scheduler under the dependency step model
 * (config.cost.step_model = DCP_STEP_MODEL_DEPENDENCY; docs/planning.md, step models): the
 * kept plans are laid out (microbatch order, each group's rank block) for the least
 * dependency makespan D (pipeline/assign/balanced/balanced_place.c).
 *
 *  - Hand-made batches where a layout other than the barrier model's lowers D, the plans
 *    of both models and their makespans worked out in the comments, under a cost model
 *    that makes the arithmetic plain: quadratic = kv = 0, linear = 1, so a sequence of s
 *    tokens on cp ranks costs floor(s / cp) + round_latency x (cp - 1) on each of them.
 *  - Random batches (1 to 64 ranks, powers of two or not, VPP, caps): under the dependency
 *    model the plan validates, its D is at most the D of the plan made under the barrier
 *    model and at least the dependency lower bound, and equals a rank-by-rank simulation;
 *    under the barrier model the plans are the ones balanced made before the layout
 *    existed (a digest of their hashes) and keep the barrier layout.
 *  - No allocation and the same plan every time under the dependency model (its exact
 *    scratch size: assign_balanced.scratch_size_is_an_exact_bound).
 */
#include "dcp_test.h"
#include "../core/plan.h"
#include "../pipeline/stages.h"

#include <stdlib.h>

#define DCP_TEST_RNG_SEED 0
#include "dcp_test_rng.h"

/* ---- hand-made batches ---- */

static dcp_config hand_config(int32_t ranks, int64_t round_latency, int64_t overhead, dcp_step_model model)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_BALANCED;
    c.data_parallel_size = ranks;
    c.max_sequences = 32;
    c.max_seqlen_per_rank = 100;
    c.cost.quadratic = 0;
    c.cost.linear = 1;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) c.cost.kv[k] = 0;
    c.cost.round_latency = round_latency;
    c.cost.microbatch_overhead = overhead;
    c.cost.step_model = (int32_t)model;
    return c;
}

/* What a plan of a hand-made batch is checked by: its statistics and where each sequence sits. */
typedef struct hand_result {
    dcp_plan_stats stats;
    int32_t microbatches;
    int32_t mb_of[16], rank_of[16], cp_of[16]; /* by id */
} hand_result;

static void plan_hand(const dcp_config *c, const int32_t *lengths, int32_t n, hand_result *out)
{
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(c, &ctx));
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &out->stats));
    out->microbatches = plan->num_microbatches;
    for (int32_t m = 0; m < plan->num_microbatches; m++)
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++)
            for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
                int32_t id = plan->ids[i];
                DCP_REQUIRE(id >= 0 && id < 16);
                out->mb_of[id] = m;
                out->rank_of[id] = plan->group_first_rank[g];
                out->cp_of[id] = plan->group_cp_size[g];
            }
    dcp_context_destroy(ctx);
}

/*
 * Where the group blocks sit.  4 ranks, M = 100, round latency 20: the four sequences cost
 *
 *   id 0: 190 tokens, CP 2: 95 + 20 = 115     id 2: 120 tokens, CP 2: 60 + 20 = 80
 *   id 1: 100 tokens, CP 2: 50 + 20 = 70      id 3:  70 tokens, CP 2: 35 + 20 = 55
 *
 * and balanced pairs them the same way under both models, two CP-2 groups a microbatch:
 * {190, 120} (level 115) and {100, 70} (level 70), B = 185.  The barrier model lays the
 * second microbatch out with the 100 on ranks 0-1, under the 190: those ranks finish at
 * 115 + 70 = 185, so D = B = 185.  Under the dependency model the heavier group of the
 * second microbatch (the 100, 70) takes the block that finished first (ranks 2-3, at 80) and
 * the 70 (55) the other: ranks 2-3 end at 150, ranks 0-1 at 115 + 55 = 170 = D, which no
 * layout of these groups beats (one of the two blocks carries the 190's 115 and then at
 * least 55).
 */
DCP_TEST(a_light_group_goes_under_the_heavy_one)
{
    static const int32_t lengths[] = {190, 100, 120, 70};
    hand_result bar, dep;
    dcp_config c = hand_config(4, 20, 0, DCP_STEP_MODEL_BARRIER);
    plan_hand(&c, lengths, 4, &bar);
    c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    plan_hand(&c, lengths, 4, &dep);
    DCP_CHECK_EQ_INT(bar.microbatches, 2);
    DCP_CHECK_EQ_INT(bar.stats.makespan, 185);
    DCP_CHECK_EQ_INT(bar.stats.dependency_makespan, 185);
    DCP_CHECK(bar.rank_of[0] == bar.rank_of[1] && bar.mb_of[0] != bar.mb_of[1]);
    /* the same groups in the same microbatches, laid out otherwise */
    DCP_CHECK_EQ_INT(dep.microbatches, 2);
    DCP_CHECK_EQ_INT(dep.stats.makespan, 185);
    DCP_CHECK_EQ_INT(dep.stats.dependency_makespan, 170);
    DCP_CHECK_EQ_INT(dep.stats.model_makespan, 170);
    for (int id = 0; id < 4; id++) DCP_CHECK_EQ_INT(dep.cp_of[id], 2);
    DCP_CHECK(dep.mb_of[0] == dep.mb_of[2] && dep.mb_of[1] == dep.mb_of[3] && dep.mb_of[0] != dep.mb_of[1]);
    DCP_CHECK(dep.rank_of[0] == dep.rank_of[3] && dep.rank_of[2] == dep.rank_of[1]);
    DCP_CHECK(dep.stats.dependency_makespan >= dep.stats.dependency_lower_bound);
}

/*
 * Ranks that a full-width group synchronised, then CP-1 groups.  2 ranks, M = 100, round
 * latency 1000 (a second rank costs 1000 more) and an overhead of 5 a microbatch:
 *
 *   id 4: 110 tokens: it needs both ranks, 55 + 1000 = 1055
 *   id 0: 80, ids 1 and 3: 60, id 2: 10, each alone on a rank (CP 1): its length
 *
 * Both models get the same three microbatches: {110 on both ranks}, {80 | 60}, {60 | 10}
 * (B = 1055 + 80 + 60 + 3 x 5 = 1210).  The barrier layout puts the 80 and the second 60 on
 * rank 0: 1055 + 80 + 60 + 15 = 1210 = D.  Under the dependency model the third
 * microbatch's 60 goes to the rank that finished the second one first (the other 60's):
 * rank 0 ends at 1055 + 80 + 10 + 15 = 1160, rank 1 at 1055 + 60 + 60 + 15 = 1190 = D.
 */
DCP_TEST(cp1_groups_take_the_ranks_that_finished_first)
{
    static const int32_t lengths[] = {80, 60, 10, 60, 110};
    hand_result bar, dep;
    dcp_config c = hand_config(2, 1000, 5, DCP_STEP_MODEL_BARRIER);
    plan_hand(&c, lengths, 5, &bar);
    c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    plan_hand(&c, lengths, 5, &dep);
    DCP_CHECK_EQ_INT(bar.microbatches, 3);
    DCP_CHECK_EQ_INT(bar.stats.makespan, 1210);
    DCP_CHECK_EQ_INT(bar.stats.dependency_makespan, 1210);
    DCP_CHECK_EQ_INT(dep.microbatches, 3);
    DCP_CHECK_EQ_INT(dep.stats.makespan, 1210);
    DCP_CHECK_EQ_INT(dep.stats.dependency_makespan, 1190);
    DCP_CHECK_EQ_INT(dep.cp_of[4], 2);
    /* the two 60s on one rank, the 80 and the 10 on the other */
    DCP_CHECK(dep.rank_of[1] == dep.rank_of[3] && dep.rank_of[0] == dep.rank_of[2] && dep.rank_of[0] != dep.rank_of[1]);
}

/*
 * The order of the microbatches.  4 ranks, M = 100, round latency 20; six sequences of 90
 * to 200 tokens, each on a CP-2 group (s / 2 + 20):
 *
 *   200: 120   180: 110   170: 105   160: 100   120: 80   90: 65
 *
 * Balanced pairs them {200, 180}, {170, 160}, {120, 90}: B = 120 + 105 + 80 = 305, and the
 * barrier layout runs the three heaviest groups on ranks 0-1: D = 305.  Laying the groups out
 * greedily in that microbatch order gives 295 (ranks 0-1: 120 + 100, then 65; ranks 2-3:
 * 110 + 105, then 80).  With the light microbatch first (slack descending: it leaves 15 idle
 * per pair of ranks, the others 10 and 5) and the heaviest last, 120 | 90 (80 | 65), then
 * 160 | 170 (the 170 after the 90: 65 + 105 = 170, the 160 after the 120: 180), then the 200
 * after the 170 (290) and the 180 after the 160 (290): D = 290, every rank busy to the end
 * (busy_sum / N = 2 x 580 / 4).
 */
DCP_TEST(microbatch_order_lowers_the_makespan)
{
    static const int32_t lengths[] = {120, 160, 180, 200, 170, 90};
    hand_result bar, dep;
    dcp_config c = hand_config(4, 20, 0, DCP_STEP_MODEL_BARRIER);
    plan_hand(&c, lengths, 6, &bar);
    c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    plan_hand(&c, lengths, 6, &dep);
    DCP_CHECK_EQ_INT(bar.microbatches, 3);
    DCP_CHECK_EQ_INT(bar.stats.makespan, 305);
    DCP_CHECK_EQ_INT(bar.stats.dependency_makespan, 305);
    DCP_CHECK_EQ_INT(dep.microbatches, 3);
    DCP_CHECK_EQ_INT(dep.stats.makespan, 305);
    DCP_CHECK_EQ_INT(dep.stats.dependency_makespan, 290);
    DCP_CHECK_EQ_INT(dep.stats.busy_sum, 2 * 580);
    /* the light pair first, the heavy pair last; the 200 after the 170, the 180 after the 160 */
    DCP_CHECK(dep.mb_of[0] == 0 && dep.mb_of[5] == 0 && dep.mb_of[3] == 2 && dep.mb_of[2] == 2);
    DCP_CHECK(dep.rank_of[3] == dep.rank_of[4] && dep.rank_of[4] == dep.rank_of[5]);
    DCP_CHECK(dep.rank_of[2] == dep.rank_of[1] && dep.rank_of[1] == dep.rank_of[0]);
}

/* ---- random batches ---- */


/* The barrier model's layout: every microbatch's groups from rank 0, by size, largest first. */
static int barrier_layout(const dcp_plan *p)
{
    for (int32_t m = 0; m < p->num_microbatches; m++)
        for (int32_t g = p->microbatch_first_group[m] + 1; g < p->microbatch_first_group[m + 1]; g++)
            if (p->group_cp_size[g] > p->group_cp_size[g - 1]) return 0;
    return 1;
}

/* A random configuration and batch of the random test; returns the number of sequences. */
static int32_t random_batch(dcp_config *c, int32_t *lengths, int32_t capacity)
{
    static const int32_t ranks[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 31, 32, 48, 64};
    dcp_config_default(c);
    c->scheduler = DCP_SCHEDULER_BALANCED;
    c->data_parallel_size = ranks[rng() % (sizeof ranks / sizeof ranks[0])];
    c->max_seqlen_per_rank = rng() % 2 ? 1024 : 4096;
    if (rng() % 4 == 0) { /* VPP: the microbatch count a multiple of 2 or 4 */
        /* the VPP alignment alone: with PP > 1 balanced plans for the pipeline (test_pipeline_model.c) */
        c->pipeline_parallel_size = 1;
        c->virtual_pipeline_size = 1;
        c->microbatch_group_size_per_vp_stage = rng() % 2 ? 2 : 4;
    }
    if (rng() % 6 == 0) c->max_sequences_per_microbatch = rng_range(1, 4);
    if (rng() % 5 == 0) c->cost.microbatch_overhead = 0;
    if (rng() % 7 == 0) c->cost.round_latency = 20000000; /* CP > 1 dear */
    if (rng() % 5 == 0 && c->data_parallel_size >= 2) c->min_cp_size = 2;
    int32_t n = rng_range(1, capacity), longest = c->data_parallel_size * c->max_seqlen_per_rank;
    for (int32_t i = 0; i < n; i++)
        lengths[i] = rng() % 4 ? rng_range(1, c->max_seqlen_per_rank) : rng_range(1, longest);
    c->max_sequences = n;
    return n;
}

static uint64_t fnv_mix(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/*
 * The digest (FNV-1a over the plan hashes in trial order, 0 for a batch that has no plan)
 * of the barrier model's plans of these batches, as balanced made them before it had a
 * layout for the dependency model: the barrier model's plans must not change with it.  A
 * deliberate change of balanced's barrier plans changes it too (last: dynamic_cp's plan as a
 * candidate with few sequences per rank, which lowered some of these batches' plans).
 */
#define BARRIER_DIGEST 0x28f1745691d7f23eull

DCP_TEST(random_batches_lower_the_dependency_makespan)
{
    static int32_t lengths[200];
    static int64_t finish[64];
    int planned = 0, lower = 0, infeasible = 0;
    uint64_t digest = 0xcbf29ce484222325ull;
    rng_state = 0x2545F4914F6CDD1Dull;
    for (int trial = 0; trial < 400; trial++) {
        dcp_config c;
        int32_t n = random_batch(&c, lengths, 200);
        char where[128];
        snprintf(where, sizeof where, "trial %d (%d ranks, %d sequences, VPP group %d)", trial, c.data_parallel_size,
                 n, c.microbatch_group_size_per_vp_stage);
        /* the barrier model */
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const dcp_plan *plan = NULL;
        dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
        if (st != DCP_OK) {
            if (st != DCP_ERR_INFEASIBLE)
                dcp_test_fail(__FILE__, __LINE__, "%s: barrier: %s", where, dcp_context_last_error(ctx));
            digest = fnv_mix(digest, 0);
            infeasible++;
            dcp_context_destroy(ctx);
            /* the layout changes no feasibility */
            c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
            DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
            DCP_CHECK_STATUS(dcp_plan_compute(ctx, lengths, n, &plan), st);
            dcp_context_destroy(ctx);
            continue;
        }
        dcp_plan_stats bar;
        DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &bar));
        digest = fnv_mix(digest, dcp_plan_hash(plan));
        if (!barrier_layout(plan)) dcp_test_fail(__FILE__, __LINE__, "%s: barrier plan not in the barrier layout", where);
        if (bar.dependency_makespan != dcp_test_simulate_dependency(plan, &c.cost, lengths, finish))
            dcp_test_fail(__FILE__, __LINE__, "%s: barrier plan's D is not the simulated one", where);
        dcp_context_destroy(ctx);

        /* the dependency model: a valid plan, D between the bound and the barrier plan's D */
        c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        st = dcp_plan_compute(ctx, lengths, n, &plan);
        if (st != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "%s: dependency: %s", where, dcp_context_last_error(ctx));
        dcp_plan_violation violation;
        DCP_REQUIRE_OK(dcp_plan_validate(ctx, plan, lengths, n, &violation));
        dcp_plan_stats dep;
        DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &dep));
        const uint64_t hash = dcp_plan_hash(plan);
        if (dep.dependency_makespan > bar.dependency_makespan)
            dcp_test_fail(__FILE__, __LINE__, "%s: D %lld above the barrier plan's %lld", where,
                          (long long)dep.dependency_makespan, (long long)bar.dependency_makespan);
        if (dep.dependency_makespan < dep.dependency_lower_bound)
            dcp_test_fail(__FILE__, __LINE__, "%s: D %lld below the bound %lld", where,
                          (long long)dep.dependency_makespan, (long long)dep.dependency_lower_bound);
        if (dep.dependency_makespan != dcp_test_simulate_dependency(plan, &c.cost, lengths, finish))
            dcp_test_fail(__FILE__, __LINE__, "%s: D is not the simulated one", where);
        if (dep.model_makespan != dep.dependency_makespan || dep.dependency_makespan > dep.makespan)
            dcp_test_fail(__FILE__, __LINE__, "%s: model fields", where);
        /* the same plan again */
        DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
        DCP_CHECK(dcp_plan_hash(plan) == hash);
        dcp_context_destroy(ctx);
        planned++;
        lower += dep.dependency_makespan < bar.dependency_makespan;
    }
    printf("random batches: %d planned (%d infeasible), D lower than the barrier plan's in %d; barrier digest "
           "%016llx\n",
           planned, infeasible, lower, (unsigned long long)digest);
    DCP_CHECK(planned >= 300);
    DCP_CHECK(lower * 4 >= planned); /* the layout pays in many batches */
    if (digest != BARRIER_DIGEST)
        dcp_test_fail(__FILE__, __LINE__, "barrier plans changed: digest %016llx, recorded %016llx",
                      (unsigned long long)digest, (unsigned long long)BARRIER_DIGEST);
}

/*
 * Many ranks (hundreds of free blocks of a size are sorted by radix, fewer by quicksort; N a
 * power of two or not): the same checks as the random batches.
 */
DCP_TEST(many_ranks_within_the_bounds)
{
    static int32_t lengths[4096];
    static int64_t finish[4096];
    rng_state = 99;
    for (int i = 0; i < 4096; i++) lengths[i] = rng() % 8 ? rng_range(64, 4096) : rng_range(4096, 32768);
    static const int32_t ranks[] = {300, 512, 1000, 4096};
    int lower = 0;
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++)
        for (int32_t n = 1024; n <= 4096; n *= 4) {
            dcp_config c;
            dcp_config_default(&c);
            c.scheduler = DCP_SCHEDULER_BALANCED;
            c.data_parallel_size = ranks[r];
            c.max_sequences = n;
            c.max_seqlen_per_rank = 8192;
            dcp_plan_stats bar, dep;
            int64_t simulated = 0;
            for (int model = 0; model < 2; model++) {
                c.cost.step_model = model;
                dcp_context *ctx = NULL;
                DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
                const dcp_plan *plan = NULL;
                DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
                dcp_plan_violation v;
                if (dcp_plan_validate(ctx, plan, lengths, n, &v) != DCP_OK) /* overlapping blocks would show here */
                    dcp_test_fail(__FILE__, __LINE__, "%d ranks, %d sequences, model %d: %s", ranks[r], n, model,
                                  v.message);
                DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, model ? &dep : &bar));
                if (model) simulated = dcp_test_simulate_dependency(plan, &c.cost, lengths, finish);
                dcp_context_destroy(ctx);
            }
            if (dep.dependency_makespan > bar.dependency_makespan || dep.dependency_makespan < dep.dependency_lower_bound ||
                dep.dependency_makespan != simulated)
                dcp_test_fail(__FILE__, __LINE__, "%d ranks, %d sequences: D %lld, barrier plan's %lld, bound %lld, simulated %lld",
                              ranks[r], n, (long long)dep.dependency_makespan, (long long)bar.dependency_makespan,
                              (long long)dep.dependency_lower_bound, (long long)simulated);
            lower += dep.dependency_makespan < bar.dependency_makespan;
        }
    DCP_CHECK(lower >= 4);
}

/* ---- allocation and repeatability ---- */

DCP_TEST(plans_allocate_nothing_and_repeat_exactly)
{
    static int32_t lengths[2048];
    rng_state = 777;
    for (int i = 0; i < 2048; i++) lengths[i] = rng() % 8 ? rng_range(64, 4096) : rng_range(4096, 32768);
    static const int32_t ranks[] = {6, 32, 512};
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        dcp_config c;
        dcp_config_default(&c);
        c.scheduler = DCP_SCHEDULER_BALANCED;
        c.data_parallel_size = ranks[r];
        c.max_sequences = 2048;
        c.max_seqlen_per_rank = 8192;
        c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const dcp_plan *plan = NULL;
        DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 2048, &plan));
        const uint64_t hash = dcp_plan_hash(plan);
        dcp_status st = DCP_ERR_INVALID_ARGUMENT;
        DCP_CHECK_NO_ALLOC(st = dcp_plan_compute(ctx, lengths, 2048, &plan));
        DCP_CHECK_STATUS(st, DCP_OK);
        DCP_CHECK(dcp_plan_hash(plan) == hash);
        dcp_context_destroy(ctx);
        /* a fresh context, the same plan */
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 2048, &plan));
        DCP_CHECK(dcp_plan_hash(plan) == hash);
        dcp_context_destroy(ctx);
    }
}
