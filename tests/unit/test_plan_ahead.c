/*
 * test_plan_ahead.c - a plan made ahead of its step (dcpack.h, "Planning a
 * step ahead"): dcp_plan_matches(), the check dcp_step() makes of
 * dcp_step_args.plan, accepts the plan dcp_plan_compute() made of exactly
 * these lengths under this configuration and nothing else.  The step side,
 * over in-process ranks, is in test_step.c.
 */
#define DCP_TEST_RNG_SEED 0x5eed0fa11ea7ull
#include "dcp_test.h"
#include "dcp_test_rng.h"
#include "step_harness.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_N = 512 };

static void config_of(dcp_config *c, dcp_scheduler scheduler)
{
    dcp_config_default(c);
    c->scheduler = scheduler;
    c->data_parallel_size = scheduler == DCP_SCHEDULER_DP_BALANCED ? 4 : 8;
    c->context_parallel_size = scheduler == DCP_SCHEDULER_DP_BALANCED ? 2 : 1;
    c->max_sequences = MAX_N;
    c->max_seqlen_per_rank = scheduler == DCP_SCHEDULER_DP_BALANCED ? 8192 : 4096; /* a static CP group holds 16000 */
}

static int32_t random_batch(int32_t *lengths)
{
    int32_t n = rng_range(1, MAX_N);
    for (int32_t i = 0; i < n; i++) lengths[i] = rng_range(1, rng() % 8 == 0 ? 16000 : 3000);
    return n;
}

/* The planning context and the step's context: one configuration, max_tokens_per_rank apart. */
typedef struct pair {
    dcp_context *planner, *stepper;
} pair;

static void pair_open(pair *p, const dcp_config *c)
{
    dcp_config step = *c;
    step.max_tokens_per_rank = 1 << 20;
    DCP_REQUIRE_OK(dcp_context_create(c, &p->planner));
    DCP_REQUIRE_OK(dcp_context_create(&step, &p->stepper));
}

static void pair_close(pair *p)
{
    dcp_context_destroy(p->planner);
    dcp_context_destroy(p->stepper);
}

/*
 * Property: for random batches under every scheduler, the plan of the batch matches; any one length
 * changed, two different lengths swapped (same multiset, same sum), one length dropped or added, or one
 * entry of any of the plan's arrays changed, does not, and is DCP_ERR_INVALID_ARGUMENT.
 */
DCP_TEST(only_the_plan_of_these_lengths_matches)
{
    static int32_t lengths[MAX_N + 1], other[MAX_N + 1];
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        dcp_config c;
        config_of(&c, (dcp_scheduler)s);
        pair p;
        pair_open(&p, &c);
        int planned = 0;
        for (int round = 0; round < 40; round++) {
            const int32_t n = random_batch(lengths);
            const dcp_plan *plan = NULL;
            dcp_status st = dcp_plan_compute(p.planner, lengths, n, &plan);
            if (st != DCP_OK) {
                DCP_CHECK(st == DCP_ERR_INFEASIBLE || st == DCP_ERR_CAPACITY || st == DCP_ERR_BAD_LENGTH);
                continue;
            }
            planned++;
            DCP_CHECK(plan->seal != 0 && plan->config_digest != 0);
            DCP_CHECK_NO_ALLOC(st = dcp_plan_matches(p.stepper, plan, lengths, n));
            DCP_CHECK_STATUS(st, DCP_OK);
            DCP_CHECK_STATUS(dcp_plan_matches(p.planner, plan, lengths, n), DCP_OK);

            /* one length changed, anywhere, by any amount */
            memcpy(other, lengths, (size_t)n * sizeof *other);
            const int32_t i = rng_range(0, n - 1);
            other[i] += rng_range(1, 9) * (rng() % 2 ? 1 : -1);
            if (other[i] < 1) other[i] = lengths[i] + 1;
            DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, other, n), DCP_ERR_INVALID_ARGUMENT);
            DCP_CHECK_CONTAINS(dcp_context_last_error(p.stepper), "not the plan of these");
            /* two different lengths swapped: the same lengths, other sequences */
            memcpy(other, lengths, (size_t)n * sizeof *other);
            for (int32_t j = 1; j < n; j++)
                if (other[j] != other[0]) {
                    int32_t t = other[j];
                    other[j] = other[0], other[0] = t;
                    DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, other, n), DCP_ERR_INVALID_ARGUMENT);
                    break;
                }
            /* one sequence fewer or more */
            DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, lengths, n - 1), DCP_ERR_INVALID_ARGUMENT);
            memcpy(other, lengths, (size_t)n * sizeof *other);
            other[n] = 7;
            DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, other, n + 1), DCP_ERR_INVALID_ARGUMENT);
            DCP_CHECK_CONTAINS(dcp_context_last_error(p.stepper), "another batch");

            /* one entry of one array changed, then put back */
            int32_t *arrays[5] = {plan->microbatch_first_group, plan->group_first_rank, plan->group_cp_size,
                                  plan->group_first_id, plan->ids};
            const int32_t sizes[5] = {plan->num_microbatches + 1, plan->num_groups, plan->num_groups,
                                      plan->num_groups + 1, plan->num_ids};
            const int a = rng_range(0, 4);
            const int32_t at = rng_range(0, sizes[a] - 1), was = arrays[a][at];
            arrays[a][at] = was + rng_range(1, 3);
            DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, lengths, n), DCP_ERR_INVALID_ARGUMENT);
            arrays[a][at] = was;
            if (plan->num_ids > 1 && plan->ids[0] != plan->ids[n - 1]) { /* ids reordered: a valid-looking plan */
                int32_t t = plan->ids[0];
                plan->ids[0] = plan->ids[n - 1], plan->ids[n - 1] = t;
                DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, lengths, n), DCP_ERR_INVALID_ARGUMENT);
                plan->ids[n - 1] = plan->ids[0], plan->ids[0] = t;
            }
            DCP_CHECK_STATUS(dcp_plan_matches(p.stepper, plan, lengths, n), DCP_OK);
        }
        if (planned < 30) dcp_test_fail(__FILE__, __LINE__, "scheduler %d planned %d of 40 batches", s, planned);
        pair_close(&p);
    }
}

/* A plan made under another configuration fails even where its arrays would be the same. */
DCP_TEST(a_plan_of_another_configuration_does_not_match)
{
    static int32_t lengths[MAX_N];
    const int32_t n = 300;
    for (int32_t i = 0; i < n; i++) lengths[i] = 100 + (i * 37) % 2900;
    dcp_config c;
    config_of(&c, DCP_SCHEDULER_BALANCED);
    dcp_config others[5];
    for (int k = 0; k < 5; k++) others[k] = c;
    others[0].scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    others[1].plan_effort = DCP_PLAN_EFFORT_FAST;
    others[2].cost.linear += 1;
    others[3].max_seqlen_per_rank = 8192;
    others[4].pad_alignment = 8; /* a data-plane field: plans alike, but the contexts differ */
    dcp_context *step = NULL;
    dcp_config sc = c;
    sc.max_tokens_per_rank = 1 << 20;
    DCP_REQUIRE_OK(dcp_context_create(&sc, &step));
    for (int k = 0; k < 5; k++) {
        dcp_context *planner = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&others[k], &planner));
        const dcp_plan *plan = NULL;
        DCP_REQUIRE_OK(dcp_plan_compute(planner, lengths, n, &plan));
        DCP_CHECK_STATUS(dcp_plan_matches(step, plan, lengths, n), DCP_ERR_INVALID_ARGUMENT);
        DCP_CHECK_CONTAINS(dcp_context_last_error(step), "another configuration");
        dcp_context_destroy(planner);
    }
    /* max_tokens_per_rank alone may differ: the planning-only context's plan is the step's */
    dcp_context *planner = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &planner));
    const dcp_plan *ahead = NULL, *own = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(planner, lengths, n, &ahead));
    DCP_CHECK_STATUS(dcp_plan_matches(step, ahead, lengths, n), DCP_OK);
    DCP_REQUIRE_OK(dcp_plan_compute(step, lengths, n, &own));
    DCP_CHECK(dcp_plan_hash(own) == dcp_plan_hash(ahead) && own->seal == ahead->seal);
    dcp_context_destroy(planner);
    dcp_context_destroy(step);
}

/* Plans not made by dcp_plan_compute, bad counts and NULLs: a clear status, the context still usable. */
DCP_TEST(hand_made_and_malformed_plans_are_refused)
{
    const int32_t lengths[4] = {100, 200, 300, 400};
    dcp_config c;
    config_of(&c, DCP_SCHEDULER_DYNAMIC_CP);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 4, &plan));
    dcp_plan copy = *plan;
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &copy, lengths, 4), DCP_OK); /* the arrays, not the struct, count */

    dcp_plan hand = copy;
    hand.config_digest = 0, hand.seal = 0; /* what a plan built by hand carries */
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &hand, lengths, 4), DCP_ERR_INVALID_ARGUMENT);
    hand = copy;
    hand.num_groups = -1;
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &hand, lengths, 4), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "-1 groups");
    hand = copy;
    hand.num_ids = c.max_sequences + 1;
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &hand, lengths, 4), DCP_ERR_CAPACITY);
    hand = copy;
    hand.ids = NULL;
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &hand, lengths, 4), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, NULL, lengths, 4), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &copy, NULL, 4), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, &copy, lengths, -1), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_plan_matches(NULL, &copy, lengths, 4), DCP_ERR_NULL_POINTER);
    /* a failed plan carries no seal: a stale pointer to it matches nothing */
    const int32_t too_long[1] = {1 << 30};
    const dcp_plan *failed = NULL;
    DCP_CHECK(dcp_plan_compute(ctx, too_long, 1, &failed) != DCP_OK);
    DCP_CHECK(plan->seal == 0);
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, plan, lengths, 4), DCP_ERR_INVALID_ARGUMENT);
    /* and the context plans as before */
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 4, &plan));
    DCP_CHECK_STATUS(dcp_plan_matches(ctx, plan, lengths, 4), DCP_OK);
    dcp_context_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* The step: in-process ranks, every rank checked against the oracle         */
/* ------------------------------------------------------------------------ */

static int32_t trace[4096];

static void step_options(dcp_harness_options *o, dcp_scheduler scheduler, int32_t n)
{
    DCP_REQUIRE(dcp_harness_read_trace(dcp_test_data_path("workloads/mlmdefault_n256_seed1.txt"), trace, n) == n);
    dcp_harness_options_default(o);
    o->config.data_parallel_size = 2;
    o->config.context_parallel_size = 2;
    o->config.tensor_parallel_size = 2; /* TP rank 1 receives by broadcast: its args.plan is ignored */
    o->config.scheduler = scheduler;
    o->config.max_sequences = 512;
    o->config.max_seqlen_per_rank = scheduler == DCP_SCHEDULER_DP_BALANCED ? 16384 : 4096;
    o->config.pad_alignment = 8;
    o->lengths = trace;
    o->num_lengths = n;
    o->plan_ahead = 1;
    o->timeout_ms = 20000;
}

/*
 * Every rank that holds data plans each step's batch on its own planning-only context and hands the
 * plan in: every rank's output is the oracle's (of the plan made in one place), and neither the
 * planning nor the step allocates.
 */
DCP_TEST(steps_with_plans_made_ahead_verify_and_allocate_nothing)
{
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        dcp_harness_options o;
        step_options(&o, (dcp_scheduler)s, 128);
        o.steps = 3;
        dcp_harness_result r;
        DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
        DCP_CHECK(r.statuses_agree);
        for (int k = 0; k < 3; k++) DCP_CHECK_EQ_INT(r.step_status[k], DCP_OK);
        DCP_CHECK(r.verified);
        DCP_CHECK_EQ_INT(r.mismatches, 0);
        if (r.heap_measured) DCP_CHECK_EQ_INT(r.heap_bytes_max, 0);
        if (!r.verified) dcp_test_fail(__FILE__, __LINE__, "scheduler %d: %s", s, r.message);
        dcp_harness_result_free(&r);
    }
}

/*
 * One rank hands in a plan that is not the batch's (of other lengths, of another configuration, or
 * changed since it was made): every rank returns DCP_ERR_INVALID_ARGUMENT in that step, no rank gets a
 * batch, and the next step (the right plan again) verifies on every rank.
 */
DCP_TEST(one_rank_with_a_plan_of_other_lengths_fails_every_rank)
{
    const dcp_harness_fault faults[3] = {DCP_HARNESS_FAULT_PLAN_OTHER_LENGTHS, DCP_HARNESS_FAULT_PLAN_OTHER_CONFIG,
                                         DCP_HARNESS_FAULT_PLAN_CHANGED};
    const int32_t ranks[3] = {3, 0, 2}; /* world ranks of TP rank 0: they hold data */
    for (int f = 0; f < 3; f++) {
        dcp_harness_options o;
        step_options(&o, DCP_SCHEDULER_BALANCED, 128);
        o.steps = 2;
        o.fault = faults[f];
        o.fault_world_rank = ranks[f];
        o.fault_step = 0;
        dcp_harness_result r;
        DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
        DCP_CHECK(r.statuses_agree);
        if (r.step_status[0] != DCP_ERR_INVALID_ARGUMENT)
            dcp_test_fail(__FILE__, __LINE__, "fault %d: step 0 returned %s", (int)faults[f],
                          dcp_status_str(r.step_status[0]));
        for (int32_t w = 0; w < r.world_size; w++)
            DCP_CHECK_EQ_INT(r.rank_step_status[w], DCP_ERR_INVALID_ARGUMENT);
        DCP_CHECK_EQ_INT(r.step_status[1], DCP_OK);
        DCP_CHECK(r.verified);
        DCP_CHECK_EQ_INT(r.mismatches, 0);
        dcp_harness_result_free(&r);
    }
}

/* 4096 sequences on 8 ranks, plans made ahead: no allocation in planning or in the step. */
DCP_TEST(zero_heap_allocations_for_a_4096_sequence_step_planned_ahead)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    static int32_t big[4096];
    DCP_REQUIRE(dcp_harness_read_trace(dcp_test_data_path("workloads/mlmdefault_n4096_seed1.txt"), big, 4096) == 4096);
    dcp_harness_options o;
    dcp_harness_options_default(&o);
    o.config.data_parallel_size = 4;
    o.config.context_parallel_size = 2;
    o.config.max_sequences = 4096;
    o.config.max_seqlen_per_rank = 4096;
    o.config.scheduler = DCP_SCHEDULER_BALANCED;
    o.config.pad_alignment = 16;
    o.lengths = big;
    o.num_lengths = 4096;
    o.steps = 3;
    o.plan_ahead = 1;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    DCP_CHECK(r.statuses_agree);
    DCP_CHECK_EQ_INT(r.step_status[2], DCP_OK);
    DCP_CHECK(r.verified);
    DCP_CHECK(r.heap_measured);
    DCP_CHECK_EQ_INT(r.heap_bytes_max, 0);
    dcp_harness_result_free(&r);
}
