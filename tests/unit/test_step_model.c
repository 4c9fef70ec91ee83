/*
 * test_step_model.c - the two step models of plan statistics (dcp_cost_model.step_model):
 * barrier (a microbatch ends for every rank at its slowest rank) and dependency (a rank
 * waits only for the ranks it shares a CP group with).
 *
 *  - Hand-made plans whose makespans are worked out in the comments, under a cost model
 *    that makes the arithmetic plain: quadratic = kv = round_latency = 0, linear = 1, so a
 *    sequence of s tokens on cp ranks costs floor(s / cp) on each of them.
 *  - The lower bound of the dependency model, by hand, where its longest-sequence term
 *    is what makes it tight.
 *  - The configured model picks model_makespan / model_lower_bound; validation and the
 *    names of the models.
 *  - Random batches: dependency_makespan equals a rank-by-rank simulation.
 *  - Every plan of the benchmark matrix (every trace of tests/data/workloads x
 *    bench/c/bench_plan.c's configurations x every scheduler): dependency_lower_bound <= dependency_makespan <=
 *    makespan.
 *  - Statistics stay allocation-free, and the workspace reserves their scratch.
 */
#include "dcp_test.h"
#include "../core/plan.h"
#include "../pipeline/stages.h"

#include <dirent.h>
#include <stdlib.h>

#define DCP_TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "dcp_test_rng.h"

/* ---- hand-made plans ---- */

/* The cost model of the hand-made cases: cost(s, cp) = floor(s / cp) + round_latency * (cp - 1). */
static dcp_config hand_config(int32_t ranks, int64_t overhead, int64_t round_latency, dcp_step_model model)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = ranks;
    c.max_sequences = 32;
    c.max_seqlen_per_rank = 1000;
    c.cost.quadratic = 0;
    c.cost.linear = 1;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) c.cost.kv[k] = 0;
    c.cost.round_latency = round_latency;
    c.cost.microbatch_overhead = overhead;
    c.cost.step_model = (int32_t)model;
    return c;
}

typedef struct hand_plan {
    int32_t mb[9], first_rank[32], cp[32], first_id[33], ids[32];
    dcp_plan plan;
} hand_plan;

/*
 * Build a plan from triples (first rank, cp, id), one sequence a group; -1 closes a
 * microbatch, -2 ends the plan.
 */
static void hand_plan_build(hand_plan *h, int32_t ranks, const int32_t *spec)
{
    memset(h, 0, sizeof *h);
    h->plan = (dcp_plan){.num_ranks = ranks, .microbatch_first_group = h->mb, .group_first_rank = h->first_rank,
                         .group_cp_size = h->cp, .group_first_id = h->first_id, .ids = h->ids,
                         .max_microbatches = 8, .max_groups = 32, .max_ids = 32};
    dcp__plan_clear(&h->plan, ranks);
    int open = 0;
    for (const int32_t *p = spec; *p != -2;) {
        if (*p == -1) {
            dcp__plan_close_microbatch(&h->plan);
            open = 0;
            p++;
            continue;
        }
        if (!open) dcp__plan_open_microbatch(&h->plan, NULL);
        open = 1;
        dcp__plan_push_group(&h->plan, p[0], p[1], &p[2], 1, NULL);
        p += 3;
    }
}

/* Statistics of a hand-made plan under `c` (the plan is validated by the call). */
static dcp_status hand_stats(const dcp_config *c, const hand_plan *h, const int32_t *lengths, int32_t n,
                             dcp_plan_stats *stats)
{
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(c, &ctx);
    if (st != DCP_OK) return st;
    st = dcp_plan_stats_compute(ctx, &h->plan, lengths, n, stats);
    dcp_context_destroy(ctx);
    return st;
}

/*
 * Two microbatches on 4 ranks; ranks 0 and 1 hold one sequence each (CP 1), ranks 2-3 one
 * of CP 2:
 *
 *   microbatch 0:  rank 0: id 0 (100)   rank 1: id 1 (10)    ranks 2-3: id 2 (40 -> 20 each)
 *   microbatch 1:  rank 0: id 3 (10)    rank 1: id 4 (100)   ranks 2-3: id 5 (40 -> 20 each)
 *
 * Barrier: each microbatch waits for its slowest rank: 100 + 100 = 200.
 * Dependency: rank 0 finishes microbatch 0 at 100 and microbatch 1 at 110; rank 1 at 10,
 * then 110; ranks 2-3 at 20, then 40.  Rank 1 does not wait for rank 0: 110.
 * busy_sum = 100 + 10 + 2*20 + 10 + 100 + 2*20 = 300.
 * Lower bounds: cp * cost(s, cp) is smallest at 100 for s = 100 (any cp), 8 for s = 10
 * (cp 4: 4 * floor(10/4)), 40 for s = 40; W = 296 over 4 ranks: ceil 74 (floor 74 for the
 * barrier bound); the longest run of one sequence is 100 on 4 ranks, 25; one microbatch
 * holds the 300 tokens (4 x 1000); overhead 0: both bounds are 74.
 */
static const int32_t ahead_lengths[] = {100, 10, 40, 10, 100, 40};
static const int32_t ahead_spec[] = {0, 1, 0, 1, 1, 1, 2, 2, 2, -1, 0, 1, 3, 1, 1, 4, 2, 2, 5, -1, -2};

DCP_TEST(cp1_rank_runs_ahead)
{
    dcp_config c = hand_config(4, 0, 0, DCP_STEP_MODEL_BARRIER);
    hand_plan h;
    hand_plan_build(&h, 4, ahead_spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, ahead_lengths, 6, &s));
    DCP_CHECK_EQ_INT(s.num_microbatches, 2);
    DCP_CHECK_EQ_INT(s.makespan, 200);
    DCP_CHECK_EQ_INT(s.dependency_makespan, 110);
    DCP_CHECK_EQ_INT(s.busy_sum, 300);
    DCP_CHECK_EQ_INT(s.lower_bound, 74);
    DCP_CHECK_EQ_INT(s.dependency_lower_bound, 74);
    /* barrier configured: the model fields are the barrier ones */
    DCP_CHECK_EQ_INT(s.step_model, DCP_STEP_MODEL_BARRIER);
    DCP_CHECK_EQ_INT(s.model_makespan, 200);
    DCP_CHECK_EQ_INT(s.model_lower_bound, 74);
}

/*
 * The same two microbatches with a third between them: one sequence of 400 tokens on all 4
 * ranks (100 each).  It starts when every rank is done with microbatch 0 (at 100) and ends
 * at 200 on every rank; then rank 1 runs 100 more: 300, the barrier makespan (100 x 3).
 */
DCP_TEST(full_group_forces_a_sync)
{
    static const int32_t lengths[] = {100, 10, 40, 400, 10, 100, 40};
    static const int32_t spec[] = {0, 1, 0, 1, 1, 1, 2, 2, 2, -1, 0, 4, 3, -1,
                                   0, 1, 4, 1, 1, 5, 2, 2, 6, -1, -2};
    dcp_config c = hand_config(4, 0, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan h;
    hand_plan_build(&h, 4, spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, lengths, 7, &s));
    DCP_CHECK_EQ_INT(s.makespan, 300);
    DCP_CHECK_EQ_INT(s.dependency_makespan, 300);
    DCP_CHECK_EQ_INT(s.model_makespan, 300);
    DCP_CHECK_EQ_INT(s.step_model, DCP_STEP_MODEL_DEPENDENCY);
}

/*
 * Rank 0 is the busiest rank and nothing makes it wait: the dependency makespan is the sum
 * along rank 0, each of its microbatches plus the overhead (3 here).
 *
 *   microbatch 0:  rank 0: 50   rank 1: 10   rank 2: 10          rank 3: 10
 *   microbatch 1:  rank 0: 50   rank 1: 30   ranks 2-3: 40 -> 20 each
 *   microbatch 2:  rank 0: 50   rank 1: 10   rank 2: 60          rank 3: 10
 *
 * Dependency: rank 0 finishes at 53, 106, 159; rank 1 at 13, 46, 59; ranks 2-3 start
 * microbatch 1 at 13 and end at 36; then rank 2 ends at 99, rank 3 at 49.  Makespan 159 =
 * 3 x 50 + 3 x 3.  Barrier: (50 + 3) + (50 + 3) + (60 + 3) = 169.
 */
DCP_TEST(makespan_is_the_sum_along_one_rank)
{
    static const int32_t lengths[] = {50, 10, 10, 10, 50, 30, 40, 50, 10, 60, 10};
    static const int32_t spec[] = {0, 1, 0, 1, 1, 1, 2, 1, 2, 3, 1, 3, -1,
                                   0, 1, 4, 1, 1, 5, 2, 2, 6, -1,
                                   0, 1, 7, 1, 1, 8, 2, 1, 9, 3, 1, 10, -1, -2};
    dcp_config c = hand_config(4, 3, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan h;
    hand_plan_build(&h, 4, spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, lengths, 11, &s));
    DCP_CHECK_EQ_INT(s.dependency_makespan, 159);
    DCP_CHECK_EQ_INT(s.makespan, 169);
    DCP_CHECK_EQ_INT(s.model_makespan, 159);
}

/*
 * The critical path changes rank through a CP group: rank 0's long sequence, then the CP-2
 * group of ranks 0-1, then rank 1's long sequence.  No rank is busy for more than 201, yet the
 * dependency makespan is 300; the barrier makespan also pays rank 2's 150 in microbatch 1.
 *
 *   microbatch 0:  rank 0: 100      rank 1: 1         rank 2: 1     rank 3: 1
 *   microbatch 1:  ranks 0-1: 200 -> 100 each          rank 2: 150   rank 3: 1
 *   microbatch 2:  rank 0: 1        rank 1: 100       rank 2: 1     rank 3: 1
 *
 * Dependency, overhead 0: ranks 0-1 start microbatch 1 at max(100, 1) = 100, end at 200;
 * rank 1 ends at 300, rank 0 at 201, rank 2 at 1 + 150 + 1 = 152, rank 3 at 3.  Barrier:
 * 100 + 150 + 100 = 350.  With an overhead of 7 a microbatch, each of the three microbatches
 * on the path adds 7: 321, and the barrier 371.
 */
static const int32_t chain_lengths[] = {100, 1, 1, 1, 200, 150, 1, 1, 100, 1, 1};
static const int32_t chain_spec[] = {0, 1, 0, 1, 1, 1, 2, 1, 2, 3, 1, 3, -1,
                                     0, 2, 4, 2, 1, 5, 3, 1, 6, -1,
                                     0, 1, 7, 1, 1, 8, 2, 1, 9, 3, 1, 10, -1, -2};

DCP_TEST(chain_through_a_group_exceeds_every_ranks_busy_time)
{
    dcp_config c = hand_config(4, 0, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan h;
    hand_plan_build(&h, 4, chain_spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, chain_lengths, 11, &s));
    DCP_CHECK_EQ_INT(s.dependency_makespan, 300);
    DCP_CHECK_EQ_INT(s.makespan, 350);
    DCP_CHECK_EQ_INT(s.busy_sum, 100 + 3 + 2 * 100 + 150 + 1 + 1 + 100 + 1 + 1);
}

DCP_TEST(overhead_is_paid_once_a_microbatch_on_the_critical_path)
{
    dcp_plan_stats s;
    hand_plan h;
    /* the chain: three microbatches on the path */
    dcp_config c = hand_config(4, 7, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan_build(&h, 4, chain_spec);
    DCP_REQUIRE_OK(hand_stats(&c, &h, chain_lengths, 11, &s));
    DCP_CHECK_EQ_INT(s.dependency_makespan, 300 + 3 * 7);
    DCP_CHECK_EQ_INT(s.makespan, 350 + 3 * 7);
    /* running ahead: rank 0 (or 1) pays two overheads, 110 + 10; the barrier 200 + 10 */
    c = hand_config(4, 5, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan_build(&h, 4, ahead_spec);
    DCP_REQUIRE_OK(hand_stats(&c, &h, ahead_lengths, 6, &s));
    DCP_CHECK_EQ_INT(s.dependency_makespan, 120);
    DCP_CHECK_EQ_INT(s.makespan, 210);
    /* one microbatch is what the tokens need (300 of 4 x 1000): both bounds add one overhead */
    DCP_CHECK_EQ_INT(s.lower_bound, 74 + 5);
    DCP_CHECK_EQ_INT(s.dependency_lower_bound, 74 + 5);
    DCP_CHECK_EQ_INT(s.model_lower_bound, 74 + 5);
}

/*
 * A round latency of 1000 makes CP > 1 dear: one sequence of 100 tokens is cheapest, in
 * total and per rank, on one rank (cost 100; CP 2: 50 + 1000, CP 4: 25 + 3000).  With three
 * sequences of 1 token, spreading the work evenly gives W = 103 over 4 ranks (floor(103/4) = 25 +
 * overhead, the work term alone), but some rank runs the 100 tokens: the dependency bound is
 * 100 + overhead 5 = 105, the barrier bound's forced-microbatch term finds the same, and the plan
 * that runs one sequence on each rank reaches it.
 */
DCP_TEST(longest_sequence_term_makes_the_bound_tight)
{
    static const int32_t lengths[] = {100, 1, 1, 1};
    static const int32_t spec[] = {0, 1, 0, 1, 1, 1, 2, 1, 2, 3, 1, 3, -1, -2};
    dcp_config c = hand_config(4, 5, 1000, DCP_STEP_MODEL_DEPENDENCY);
    DCP_CHECK_EQ_INT(dcp_cost(&c.cost, 100, 2), 1050);
    DCP_CHECK_EQ_INT(dcp_cost(&c.cost, 100, 4), 3025);
    hand_plan h;
    hand_plan_build(&h, 4, spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, lengths, 4, &s));
    /* the barrier bound counts the slowest sequence of its one forced microbatch too: 100 + 5 */
    DCP_CHECK_EQ_INT(s.lower_bound, 100 + 5);
    DCP_CHECK_EQ_INT(s.dependency_lower_bound, 105);
    DCP_CHECK_EQ_INT(s.dependency_makespan, 105);
    DCP_CHECK_EQ_INT(s.makespan, 105);
    DCP_CHECK_EQ_INT(s.model_lower_bound, 105);
    DCP_CHECK_EQ_INT(dcp__dependency_lower_bound(&c.cost, lengths, 4, 4, 1000, 1), 105);
}

/*
 * dp_balanced on DP 2 x CP 3: groups of 3 ranks, a size that is not a power of two.  Two
 * sequences of 5 tokens with M = 2 need at least 3 ranks each; a round latency of 1 makes
 * cp * cost(5, cp) = cp * floor(5/cp) + cp * (cp - 1) 9 on CP 3, 16 on CP 4, 30 on CP 6, and the
 * per-rank cost 3, 4 and 5.  The plan runs each sequence on a CP-3 group: makespan 3 +
 * overhead 2 = 5 under both models.  The dependency bound, max(ceil(18 / 6), 3) + 2 x
 * ceil(10 / 12) = 5, is tight; without CP 3 among the group sizes it would be
 * max(ceil(32 / 6), 4) + 2 = 8, above the plan.
 *
 * The barrier bound weighs CP 3 too: the tokens need K_min = ceil(10 / 12) = 1 microbatch, so
 * X2 = 0; x_1 = phi(5) = 3 (CP 3), and at the level T = 3 the least work is W(3) = 9 + 9 = 18,
 * ceil(18 / 6) = 3 <= T + X2: T* = 3 and lower_bound = 3 + 0 + 2 = 5, the makespan.  Over powers
 * of two and N only (dcp__cost_lower_bound, no static size) phi(5) = 4 (CP 4) and the work is
 * 16 + 16 = 32 at every level from 4 up: ceil(32 / 6) = 6 > 4 and > 5, T* = 6, 6 + 2 = 8, above
 * the plan.
 */
DCP_TEST(lower_bound_counts_a_static_cp_group)
{
    dcp_config c = hand_config(2, 2, 1, DCP_STEP_MODEL_DEPENDENCY);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.context_parallel_size = 3;
    c.max_seqlen_per_rank = 2;
    static const int32_t lengths[] = {5, 5};
    static const int32_t spec[] = {0, 3, 0, 3, 3, 1, -1, -2};
    hand_plan h;
    hand_plan_build(&h, 6, spec);
    dcp_plan_stats s;
    DCP_REQUIRE_OK(hand_stats(&c, &h, lengths, 2, &s));
    DCP_CHECK_EQ_INT(s.makespan, 5);
    DCP_CHECK_EQ_INT(s.dependency_makespan, 5);
    DCP_CHECK_EQ_INT(s.dependency_lower_bound, 5);
    DCP_CHECK_EQ_INT(dcp__dependency_lower_bound(&c.cost, lengths, 2, 6, 2, 3), 5);
    DCP_CHECK_EQ_INT(dcp__dependency_lower_bound(&c.cost, lengths, 2, 6, 2, 1), 8);
    DCP_CHECK_EQ_INT(s.lower_bound, 5);
    DCP_CHECK(s.makespan >= s.lower_bound);
    DCP_CHECK_EQ_INT(dcp__cost_lower_bound(&c.cost, lengths, 2, 6, 2), 8);
    /* the scheduler finds that plan */
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 2, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, 2, &s));
    DCP_CHECK_EQ_INT(s.dependency_makespan, 5);
    DCP_CHECK_EQ_INT(s.makespan, 5);
    DCP_CHECK_EQ_INT(s.lower_bound, 5);
    dcp_context_destroy(ctx);
}

/* ---- the configured model, validation, names ---- */

DCP_TEST(configured_model_picks_makespan_and_bound)
{
    dcp_cost_model zero, dflt;
    memset(&zero, 0, sizeof zero);
    DCP_CHECK_EQ_INT(zero.step_model, DCP_STEP_MODEL_BARRIER); /* a zero-initialised model is the barrier one */
    dcp_cost_model_default(&dflt);
    DCP_CHECK_EQ_INT(dflt.step_model, DCP_STEP_MODEL_BARRIER);
    dcp_config d;
    dcp_config_default(&d);
    DCP_CHECK_EQ_INT(d.cost.step_model, DCP_STEP_MODEL_BARRIER);

    hand_plan h;
    hand_plan_build(&h, 4, ahead_spec);
    dcp_plan_stats s;
    dcp_config c = hand_config(4, 0, 0, DCP_STEP_MODEL_DEPENDENCY);
    DCP_REQUIRE_OK(hand_stats(&c, &h, ahead_lengths, 6, &s));
    DCP_CHECK_EQ_INT(s.step_model, DCP_STEP_MODEL_DEPENDENCY);
    DCP_CHECK_EQ_INT(s.model_makespan, 110);
    DCP_CHECK_EQ_INT(s.model_lower_bound, 74);
    /* the barrier fields keep their meaning whatever the model */
    DCP_CHECK_EQ_INT(s.makespan, 200);
    DCP_CHECK_EQ_INT(s.lower_bound, 74);
}

DCP_TEST(validation_rejects_unknown_step_models)
{
    const int32_t bad[] = {2, -1, 7};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dcp_config c;
        dcp_config_default(&c);
        c.cost.step_model = bad[i];
        char message[160], expect[80];
        DCP_CHECK_STATUS(dcp_config_validate(&c, message, sizeof message), DCP_ERR_INVALID_CONFIG);
        snprintf(expect, sizeof expect, "cost.step_model %d is not barrier(0) or dependency(1)", bad[i]);
        DCP_CHECK_CONTAINS(message, expect);
        size_t size = 0;
        DCP_CHECK_STATUS(dcp_workspace_size(&c, &size), DCP_ERR_INVALID_CONFIG);
        dcp_context *ctx = NULL;
        DCP_CHECK_STATUS(dcp_context_create(&c, &ctx), DCP_ERR_INVALID_CONFIG);
        DCP_CHECK(ctx == NULL);
    }
    dcp_config c;
    dcp_config_default(&c);
    c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    DCP_CHECK_STATUS(dcp_config_validate(&c, NULL, 0), DCP_OK);
    /* the workspace of dynamic_cp (the default) does not depend on the step model; balanced's grows by
       its layout's arrays under the dependency model (assign_balanced.scratch_size_is_an_exact_bound) */
    size_t barrier_size = 0, dependency_size = 0;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &dependency_size));
    c.cost.step_model = DCP_STEP_MODEL_BARRIER;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &barrier_size));
    DCP_CHECK_EQ_INT(barrier_size, dependency_size);
}

DCP_TEST(step_model_names)
{
    DCP_CHECK(strcmp(dcp_step_model_name(DCP_STEP_MODEL_BARRIER), "barrier") == 0);
    DCP_CHECK(strcmp(dcp_step_model_name(DCP_STEP_MODEL_DEPENDENCY), "dependency") == 0);
    DCP_CHECK(strcmp(dcp_step_model_name((dcp_step_model)5), "unknown") == 0);
    dcp_step_model m = DCP_STEP_MODEL_BARRIER;
    DCP_CHECK_STATUS(dcp_step_model_from_name("dependency", &m), DCP_OK);
    DCP_CHECK_EQ_INT(m, DCP_STEP_MODEL_DEPENDENCY);
    DCP_CHECK_STATUS(dcp_step_model_from_name("barrier", &m), DCP_OK);
    DCP_CHECK_EQ_INT(m, DCP_STEP_MODEL_BARRIER);
    DCP_CHECK_STATUS(dcp_step_model_from_name("Barrier", &m), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_step_model_from_name("", &m), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_step_model_from_name(NULL, &m), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_step_model_from_name("barrier", NULL), DCP_ERR_NULL_POINTER);
}

/* ---- plans of the schedulers ---- */

/* What every plan's statistics must satisfy; `where` names the plan in failures. */
static void check_plan_stats(const dcp_plan *plan, const dcp_plan_stats *s, const dcp_config *c, const char *where)
{
    int32_t n = plan->num_ranks;
    if (s->dependency_makespan > s->makespan)
        dcp_test_fail(__FILE__, __LINE__, "%s: dependency makespan %lld above the barrier makespan %lld", where,
                      (long long)s->dependency_makespan, (long long)s->makespan);
    if (s->dependency_makespan < s->dependency_lower_bound)
        dcp_test_fail(__FILE__, __LINE__, "%s: dependency makespan %lld below its lower bound %lld", where,
                      (long long)s->dependency_makespan, (long long)s->dependency_lower_bound);
    /* both bounds weigh every group size a plan can have, the static CP size among them */
    if (s->makespan < s->lower_bound)
        dcp_test_fail(__FILE__, __LINE__, "%s: makespan %lld below its lower bound %lld", where,
                      (long long)s->makespan, (long long)s->lower_bound);
    /* the plan's own bound: the average rank's busy time plus an overhead per microbatch */
    int64_t average = (s->busy_sum + n - 1) / n + (int64_t)s->num_microbatches * c->cost.microbatch_overhead;
    if (s->dependency_makespan < average)
        dcp_test_fail(__FILE__, __LINE__, "%s: dependency makespan %lld below the average busy time %lld", where,
                      (long long)s->dependency_makespan, (long long)average);
    /* the two bounds are proved apart: the barrier one counts forced microbatches' slowest sequences, which
       the dependency model does not sum, so neither need be the larger; each holds for its own makespan */
    int dep = c->cost.step_model == DCP_STEP_MODEL_DEPENDENCY, pp = c->pipeline_parallel_size > 1;
    /* with PP > 1 the step is the pipeline's (core/pipeline_model.c) */
    if (pp && s->pipeline_makespan < s->pipeline_lower_bound)
        dcp_test_fail(__FILE__, __LINE__, "%s: pipeline makespan %lld below its lower bound %lld", where,
                      (long long)s->pipeline_makespan, (long long)s->pipeline_lower_bound);
    if (s->model_makespan != (pp ? s->pipeline_makespan : dep ? s->dependency_makespan : s->makespan) ||
        s->model_lower_bound != (pp ? s->pipeline_lower_bound : dep ? s->dependency_lower_bound : s->lower_bound) ||
        s->step_model != c->cost.step_model)
        dcp_test_fail(__FILE__, __LINE__, "%s: model fields do not follow step_model %d", where, c->cost.step_model);
}


/* A planned batch: its dependency makespan equals the rank-by-rank simulation's, and check_plan_stats() holds. */
static void check_against_simulation(const dcp_plan *plan, const dcp_plan_stats *s, const dcp_config *c,
                                     const int32_t *lengths, int64_t *finish, const char *where)
{
    int64_t expected = dcp_test_simulate_dependency(plan, &c->cost, lengths, finish);
    if (s->dependency_makespan != expected)
        dcp_test_fail(__FILE__, __LINE__, "%s: dependency makespan %lld, simulated %lld", where,
                      (long long)s->dependency_makespan, (long long)expected);
    check_plan_stats(plan, s, c, where);
}

DCP_TEST(random_plans_match_a_rank_by_rank_simulation)
{
    static const int32_t ranks[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    int32_t lengths[200];
    int64_t finish[32];
    int checked = 0, below = 0;
    for (int trial = 0; trial < 600; trial++) {
        dcp_config c;
        dcp_config_default(&c);
        int32_t n = ranks[rng() % (sizeof ranks / sizeof ranks[0])];
        c.scheduler = (dcp_scheduler)(trial % 3);
        c.data_parallel_size = n;
        if (c.scheduler == DCP_SCHEDULER_DP_BALANCED) {
            /* a static CP size dividing n: 1, 2 or 3 where it divides */
            int32_t cp = (int32_t)(rng() % 3) + 1;
            if (n % cp) cp = 1;
            c.context_parallel_size = cp;
            c.data_parallel_size = n / cp;
        }
        c.max_seqlen_per_rank = 1024;
        c.max_sequences = 200;
        c.cost.step_model = (int32_t)(rng() % 2);
        if (trial % 5 == 0) c.cost.microbatch_overhead = 0;
        if (trial % 7 == 0) c.cost.round_latency = 20000000; /* CP > 1 dear */
        int32_t count = rng_range(1, 200), longest = c.context_parallel_size * c.max_seqlen_per_rank;
        if (c.scheduler != DCP_SCHEDULER_DP_BALANCED) longest = n * c.max_seqlen_per_rank;
        for (int32_t i = 0; i < count; i++)
            lengths[i] = rng() % 4 ? rng_range(1, c.max_seqlen_per_rank) : rng_range(1, longest);
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const dcp_plan *plan = NULL;
        if (dcp_plan_compute(ctx, lengths, count, &plan) == DCP_OK) {
            dcp_plan_stats s;
            DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, count, &s));
            char where[96];
            snprintf(where, sizeof where, "trial %d (%s, %d ranks, cp %d, %d sequences)", trial,
                     dcp_scheduler_name(c.scheduler), n, c.context_parallel_size, count);
            check_against_simulation(plan, &s, &c, lengths, finish, where);
            checked++;
            below += s.dependency_makespan < s.makespan;
        }
        dcp_context_destroy(ctx);
    }
    DCP_CHECK(checked >= 400);
    DCP_CHECK(below > 0); /* ranks do run ahead in some plans */
}

/*
 * Static CP sizes that are not powers of two (3, 5, 6 and 12, N a multiple of 1 to 4 of them), every
 * scheduler (each takes such a configuration; dp_balanced makes groups of the static size, the others
 * powers of two and N), both models, with and without a sequence cap or a VPP group: no plan beats
 * either bound.  Most batches fill the static groups tightly (every length above the power of two
 * below the size times M), some with equal lengths and one sequence per group, so that the
 * dp_balanced plan is optimal or nearly: there a bound that weighed only powers of two and N
 * (dcp__cost_lower_bound) lies above the plan, and the test counts those cases.
 */
DCP_TEST(random_static_cp_plans_within_both_bounds)
{
    static const int32_t sizes[] = {3, 5, 6, 12};
    int32_t lengths[200];
    int64_t finish[48];
    int checked = 0, static_ok = 0, beat_pow2_bound = 0;
    for (int trial = 0; trial < 1200; trial++) {
        const int32_t cp = sizes[trial % 4], dp = rng_range(1, 4), n = cp * dp;
        const dcp_scheduler scheduler = (dcp_scheduler)((trial / 4) % 3);
        const dcp_step_model model = (dcp_step_model)(rng() % 2);
        dcp_config c;
        if (trial % 3 == 0) { /* the plain cost model of the hand-made plans, short lengths */
            c = hand_config(dp, rng_range(0, 3), rng_range(0, 2), model);
            c.max_seqlen_per_rank = rng_range(2, 64);
        } else {
            dcp_config_default(&c);
            c.cost.step_model = (int32_t)model;
            c.max_seqlen_per_rank = 1024;
            if (trial % 5 == 0) c.cost.microbatch_overhead = 0;
            if (trial % 7 == 0) c.cost.round_latency = 20000000; /* CP > 1 dear */
        }
        c.scheduler = scheduler;
        c.data_parallel_size = dp;
        c.context_parallel_size = cp;
        c.max_sequences = 200;
        const int capped = trial % 6 == 1, vpp = trial % 8 == 3;
        if (capped) c.max_sequences_per_microbatch = rng_range(1, 4);
        if (vpp) {
            c.pipeline_parallel_size = 2;
            c.virtual_pipeline_size = 2;
            c.microbatch_group_size_per_vp_stage = rng_range(2, 4);
        }
        const int32_t m = c.max_seqlen_per_rank;
        int32_t below = 1; /* the largest power of two below cp */
        while (below * 2 < cp) below *= 2;
        const int32_t tight_lo = below * m + 1, tight_hi = cp * m; /* lengths only cp or more ranks hold */
        const int32_t longest = scheduler == DCP_SCHEDULER_DP_BALANCED ? cp * m : n * m;
        int32_t count;
        switch (rng() % 4) {
        case 0: /* one length, one sequence per static group in each microbatch */
            count = dp * rng_range(1, 4);
            lengths[0] = rng_range(tight_lo, tight_hi);
            for (int32_t i = 1; i < count; i++) lengths[i] = lengths[0];
            break;
        case 1: /* every length needs cp ranks or more */
            count = rng_range(1, 200);
            for (int32_t i = 0; i < count; i++) lengths[i] = rng_range(tight_lo, tight_hi);
            break;
        default: /* mostly short, some up to the largest group */
            count = rng_range(1, 200);
            for (int32_t i = 0; i < count; i++)
                lengths[i] = rng() % 4 ? rng_range(1, m) : rng_range(1, longest);
            break;
        }
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const dcp_plan *plan = NULL;
        if (dcp_plan_compute(ctx, lengths, count, &plan) == DCP_OK) {
            dcp_plan_stats s;
            DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, count, &s));
            char where[128];
            snprintf(where, sizeof where, "trial %d (%s, %d ranks, cp %d, M %d, %d sequences%s%s)", trial,
                     dcp_scheduler_name(c.scheduler), n, cp, m, count, capped ? ", capped" : "", vpp ? ", VPP" : "");
            check_against_simulation(plan, &s, &c, lengths, finish, where);
            checked++;
            if (scheduler == DCP_SCHEDULER_DP_BALANCED) {
                int has_static = 0;
                for (int32_t g = 0; g < plan->num_groups; g++) has_static |= plan->group_cp_size[g] == cp;
                static_ok += has_static && cp < n;
                /* without a cap or VPP group the bound over powers of two and N is the old lower_bound */
                if (!capped && !vpp && s.makespan < dcp__cost_lower_bound(&c.cost, lengths, count, n, m))
                    beat_pow2_bound++;
            }
        }
        dcp_context_destroy(ctx);
    }
    printf("%d plans within both bounds; %d dp_balanced plans with static groups below N, %d of them below the "
           "bound over powers of two and N\n", checked, static_ok, beat_pow2_bound);
    DCP_CHECK(checked >= 900);
    DCP_CHECK(static_ok >= 200);
    DCP_CHECK(beat_pow2_bound > 0); /* the static size matters in some of these batches */
}

/* ---- the benchmark matrix ---- */

/* bench/c/bench_plan.c's configurations: ranks, max_seqlen_per_rank, VPP group. */
static const int32_t bench_configs[][3] = {{8, 2048, 0},   {8, 8192, 0},   {32, 4096, 0},  {32, 8192, 0},
                                           {32, 8192, 4},  {128, 4096, 0}, {512, 4096, 0}, {512, 8192, 0}};

static int name_order(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

DCP_TEST(benchmark_matrix_within_the_bounds)
{
    char names[64][128];
    int num_traces = 0;
    DIR *d = opendir(dcp_test_data_path("workloads"));
    DCP_REQUIRE(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) && num_traces < 64) {
        size_t len = strlen(e->d_name);
        if (len > 4 && len < sizeof names[0] && strcmp(e->d_name + len - 4, ".txt") == 0)
            memcpy(names[num_traces++], e->d_name, len + 1);
    }
    closedir(d);
    qsort(names, (size_t)num_traces, sizeof names[0], name_order);
    DCP_REQUIRE(num_traces >= 16);

    static int32_t lengths[16384];
    int plans = 0, ahead = 0;
    for (int t = 0; t < num_traces; t++) {
        char rel[160];
        snprintf(rel, sizeof rel, "workloads/%.127s", names[t]);
        int32_t n = dcp_test_read_trace(dcp_test_data_path(rel), lengths, 16384);
        DCP_REQUIRE(n > 0);
        int32_t longest = 0;
        for (int32_t i = 0; i < n; i++)
            if (lengths[i] > longest) longest = lengths[i];
        for (size_t k = 0; k < sizeof bench_configs / sizeof bench_configs[0]; k++) {
            int32_t ranks = bench_configs[k][0], per_rank = bench_configs[k][1], vpp = bench_configs[k][2];
            if ((int64_t)longest > (int64_t)ranks * per_rank) continue; /* the bench skips it too */
            for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
                dcp_config c;
                dcp_config_default(&c);
                c.scheduler = (dcp_scheduler)s;
                c.max_sequences = n;
                c.max_seqlen_per_rank = per_rank;
                c.data_parallel_size = ranks;
                c.cost.step_model = (int32_t)((t + (int)k + s) % 2); /* both models, for the model fields */
                if (vpp > 1) {
                    c.pipeline_parallel_size = 2;
                    c.virtual_pipeline_size = 2;
                    c.microbatch_group_size_per_vp_stage = vpp;
                }
                if (s == DCP_SCHEDULER_DP_BALANCED) { /* the bench's static CP: the smallest holding the longest */
                    int32_t cp = 1;
                    while ((int64_t)cp * per_rank < longest) cp *= 2;
                    if (cp > ranks || ranks % cp) continue;
                    c.context_parallel_size = cp;
                    c.data_parallel_size = ranks / cp;
                }
                dcp_context *ctx = NULL;
                DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
                const dcp_plan *plan = NULL;
                dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
                if (st == DCP_OK) {
                    dcp_plan_stats stats;
                    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, lengths, n, &stats));
                    char where[200];
                    snprintf(where, sizeof where, "%.127s r%d m%d vpp%d %s", names[t], ranks, per_rank, vpp,
                             dcp_scheduler_name(c.scheduler));
                    check_plan_stats(plan, &stats, &c, where);
                    plans++;
                    ahead += stats.dependency_makespan < stats.makespan;
                }
                dcp_context_destroy(ctx);
            }
        }
    }
    /* 323 of the 384 cells plan; in most of those plans some rank runs ahead (285 when written) */
    DCP_CHECK(plans >= 300);
    DCP_CHECK(ahead * 2 > plans);
}

/* ---- allocation and workspace ---- */

DCP_TEST(stats_allocate_nothing)
{
    dcp_config c = hand_config(4, 5, 0, DCP_STEP_MODEL_DEPENDENCY);
    hand_plan h;
    hand_plan_build(&h, 4, chain_spec);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    dcp_plan_stats s;
    dcp_status st = DCP_ERR_INVALID_ARGUMENT;
    DCP_CHECK_NO_ALLOC(st = dcp_plan_stats_compute(ctx, &h.plan, chain_lengths, 11, &s));
    DCP_CHECK_STATUS(st, DCP_OK);
    DCP_CHECK_EQ_INT(s.dependency_makespan, 300 + 3 * 5);
    dcp_context_destroy(ctx);
}

/*
 * One sequence on a static CP group of 4096 ranks (dp_balanced, DP 1): the finish times of
 * 4096 ranks (32 KiB) are the largest scratch of this configuration, and a context built in
 * exactly dcp_workspace_size() bytes still computes the statistics.
 */
DCP_TEST(workspace_reserves_the_finish_times)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = 1;
    c.context_parallel_size = 4096;
    c.max_sequences = 1;
    c.max_seqlen_per_rank = 16;
    c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    size_t stats_bytes = dcp__stats_scratch_size(&c);
    DCP_CHECK(stats_bytes > dcp__assign_scratch_size(&c));
    DCP_CHECK(stats_bytes > dcp__bucket_scratch_size(&c));
    DCP_CHECK(stats_bytes > dcp__gather_scratch_size(&c));
    DCP_CHECK(stats_bytes > dcp__validate_scratch_size(&c));
    size_t size = 0;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &size));
    void *memory = malloc(size);
    DCP_REQUIRE(memory != NULL);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_init_static(memory, size, &c, &ctx));
    const int32_t lengths[1] = {50000};
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 1, &plan));
    dcp_plan_stats s;
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, plan, lengths, 1, &s), DCP_OK);
    int64_t one = dcp_cost(&c.cost, 50000, 4096) + c.cost.microbatch_overhead;
    DCP_CHECK_EQ_INT(s.makespan, one);
    DCP_CHECK_EQ_INT(s.dependency_makespan, one);
    DCP_CHECK(dcp_context_scratch_high_water(ctx) >= stats_bytes);
    dcp_context_destroy(ctx);
    free(memory);
}

/*
 * fuzz_config (PP 101, one microbatch): the pipeline model's stage tables end in int32s, so with an odd
 * PP its scratch is a multiple of 4 bytes, not 8; dcp_plan_stats_compute took the statistics' scratch as
 * size / 8 int64s and the model wrote its last int32 past the arena allocation (ASan: use-after-poison).
 * The size is whole int64s now; the statistics run (under the sanitizer job, inside their allocation).
 */
DCP_TEST(stats_scratch_is_whole_int64s_for_odd_pipelines)
{
    for (int32_t pp = 2; pp <= 101; pp += (pp < 9 ? 1 : 23)) {
        dcp_config c;
        dcp_config_default(&c);
        c.scheduler = DCP_SCHEDULER_DP_BALANCED;
        c.pipeline_parallel_size = pp;
        c.max_microbatches = 1;
        c.max_sequences = 8;
        c.max_seqlen_per_rank = 4096;
        const size_t bytes = dcp__stats_scratch_size(&c);
        if (bytes % sizeof(int64_t) != 0) fprintf(stderr, "PP %d: %zu bytes\n", (int)pp, bytes);
        DCP_CHECK_EQ_INT(bytes % sizeof(int64_t), 0);
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const int32_t lengths[2] = {100, 200};
        const dcp_plan *plan = NULL;
        DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 2, &plan));
        dcp_plan_stats s;
        DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, plan, lengths, 2, &s), DCP_OK);
        DCP_CHECK(s.pipeline_makespan > 0);
        dcp_context_destroy(ctx);
    }
}
