/*
 * test_margin.c - balanced's margin rule (docs/planning.md, the margin): the plan emitted is
 * dynamic_cp's, exactly, unless balanced's own is lower under the configured step model (every term:
 * the layout, the gather, the hinge) by at least margin_ppm parts per million of dynamic_cp's; and
 * so, under any model, neither effort level is above dynamic_cp's model makespan.  Every plan made
 * here (all three schedulers' where they plan) also keeps both lower bounds below its makespans.
 */
#include "dcp_test.h"

#define DCP_TEST_RNG_SEED 0x5DEECE66Dull
#include "dcp_test_rng.h"

#include <string.h>


static int32_t trace[16384];
static int32_t trace_n;
static int32_t lengths[4096];

static void load_trace(void)
{
    if (trace_n == 0) trace_n = dcp_test_read_trace(dcp_test_data_path("workloads/mlmdefault_n1024_seed1.txt"), trace, 16384);
    DCP_REQUIRE(trace_n > 0);
}

typedef struct {
    int ok;
    uint64_t hash;
    int64_t model_makespan;
    int32_t source;
} outcome;

static outcome plan_with(const dcp_config *c, int32_t n)
{
    outcome o = {0, 0, 0, -1};
    dcp_context *ctx = NULL;
    if (dcp_context_create(c, &ctx) != DCP_OK) return o;
    const dcp_plan *plan = NULL;
    dcp_plan_stats st;
    if (dcp_plan_compute(ctx, lengths, n, &plan) == DCP_OK &&
        dcp_plan_validate(ctx, plan, lengths, n, NULL) == DCP_OK &&
        dcp_plan_stats_compute(ctx, plan, lengths, n, &st) == DCP_OK) {
        o.ok = 1;
        /* with the gather and the hinge the bounds stay bounds, and D <= B still holds */
        DCP_CHECK(st.lower_bound <= st.makespan);
        DCP_CHECK(st.dependency_lower_bound <= st.dependency_makespan);
        DCP_CHECK(st.dependency_makespan <= st.makespan);
        o.hash = dcp_plan_hash(plan);
        o.model_makespan = st.model_makespan;
        o.source = plan->source;
    }
    dcp_context_destroy(ctx);
    return o;
}

static outcome plan_as(dcp_config c, int32_t n, dcp_scheduler s, dcp_plan_effort effort)
{
    c.scheduler = s;
    c.plan_effort = effort;
    return plan_with(&c, n);
}

/* DP 10 x CP 2, M 385: 151 sequences of the embedded trace (mlmdefault), cut to what 20 ranks hold. */
static void base_config(dcp_config *c, int32_t ranks, int32_t max_seqlen, int32_t n)
{
    dcp_config_default(c);
    c->data_parallel_size = ranks;
    c->max_seqlen_per_rank = max_seqlen;
    c->max_sequences = n;
}

/*
 * Random batches under the dependency model (and, every other one, with the step's terms: a gather
 * per CP size, a hinge, a margin): fast and full never above dynamic_cp's model makespan, and where
 * the rule kept dynamic_cp's plan it is dynamic_cp's exactly.
 */
DCP_TEST(random_batches_never_above_dynamic_cp_under_the_configured_model)
{
    load_trace();
    int kept = 0, planned = 0;
    for (int trial = 0; trial < 2000; trial++) {
        const int32_t ranks = rng_range(2, 24), max_seqlen = rng_range(128, 2048);
        const int32_t n = rng_range(ranks, 200);
        const int64_t most = (int64_t)ranks * max_seqlen;
        const int32_t start = rng_range(0, trace_n - 1);
        for (int32_t i = 0; i < n; i++) {
            int32_t s = trace[(start + i * 7) % trace_n];
            lengths[i] = s > most ? (int32_t)(1 + s % most) : s;
        }
        dcp_config c;
        base_config(&c, ranks, max_seqlen, n);
        c.cost.step_model = (trial % 4 == 3) ? DCP_STEP_MODEL_BARRIER : DCP_STEP_MODEL_DEPENDENCY;
        if (trial % 2) {
            for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) c.cost.cp_gather[k] = 30000 + 5000 * k;
            c.cost.small_knee = max_seqlen / 2;
            c.cost.small_slope = 60000;
            c.cost.margin_ppm = (trial % 3) * 10000;
        }
        (void)plan_as(c, n, DCP_SCHEDULER_DP_BALANCED, DCP_PLAN_EFFORT_FULL); /* its bounds, where it plans */
        const outcome dyn = plan_as(c, n, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL);
        if (!dyn.ok) continue;
        planned++;
        DCP_CHECK_EQ_INT(dyn.source, DCP_PLAN_SOURCE_SEARCH);
        for (int effort = DCP_PLAN_EFFORT_FULL; effort <= DCP_PLAN_EFFORT_FAST; effort++) {
            const outcome bal = plan_as(c, n, DCP_SCHEDULER_BALANCED, (dcp_plan_effort)effort);
            DCP_REQUIRE(bal.ok);
            if (bal.model_makespan > dyn.model_makespan)
                dcp_test_fail(__FILE__, __LINE__, "trial %d (%d ranks, M %d, %d sequences, effort %d): %lld > dynamic_cp's %lld",
                              trial, ranks, max_seqlen, n, effort, (long long)bal.model_makespan,
                              (long long)dyn.model_makespan);
            if (bal.source == DCP_PLAN_SOURCE_DYNAMIC_CP) {
                kept++;
                DCP_CHECK(bal.hash == dyn.hash);
                DCP_CHECK_EQ_INT(bal.model_makespan, dyn.model_makespan);
            } else {
                /* kept balanced's: lower by the margin at least */
                DCP_CHECK((__int128)(dyn.model_makespan - bal.model_makespan) * 1000000 >=
                          (__int128)dyn.model_makespan * c.cost.margin_ppm);
            }
        }
    }
    DCP_CHECK(planned > 1500);
    DCP_CHECK(kept > 0); /* the rule did act */
}

/*
 * The rule at its edge: a batch where balanced's plan is lower than dynamic_cp's by g parts per
 * million (rounded down).  margin_ppm = g keeps balanced's plan, g + 1 yields dynamic_cp's, exactly.
 */
DCP_TEST(a_plan_within_the_margin_yields_dynamic_cps)
{
    load_trace();
    int found = 0;
    for (int trial = 0; trial < 200 && found < 3; trial++) {
        const int32_t ranks = rng_range(4, 16), max_seqlen = rng_range(256, 2048), n = rng_range(2 * ranks, 150);
        const int64_t most = (int64_t)ranks * max_seqlen;
        const int32_t start = rng_range(0, trace_n - 1);
        for (int32_t i = 0; i < n; i++) {
            int32_t s = trace[(start + i * 3) % trace_n];
            lengths[i] = s > most ? (int32_t)(1 + s % most) : s;
        }
        dcp_config c;
        base_config(&c, ranks, max_seqlen, n);
        c.cost.step_model = trial % 2 ? DCP_STEP_MODEL_DEPENDENCY : DCP_STEP_MODEL_BARRIER;
        const outcome dyn = plan_as(c, n, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL);
        const outcome own = plan_as(c, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FULL);
        if (!dyn.ok || !own.ok || own.model_makespan >= dyn.model_makespan) continue;
        const int64_t gain = (int64_t)(((__int128)(dyn.model_makespan - own.model_makespan) * 1000000) / dyn.model_makespan);
        if (gain < 2 || gain >= 999999) continue;
        found++;
        c.cost.margin_ppm = gain;
        outcome at = plan_as(c, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FULL);
        DCP_CHECK(at.hash == own.hash);
        DCP_CHECK_EQ_INT(at.source, DCP_PLAN_SOURCE_SEARCH);
        DCP_CHECK_EQ_INT(at.model_makespan, own.model_makespan);
        c.cost.margin_ppm = gain + 1;
        outcome past = plan_as(c, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FULL);
        DCP_CHECK(past.hash == dyn.hash);
        DCP_CHECK_EQ_INT(past.source, DCP_PLAN_SOURCE_DYNAMIC_CP);
        DCP_CHECK_EQ_INT(past.model_makespan, dyn.model_makespan);
        /* the fast level follows the same rule */
        c.cost.margin_ppm = 999999;
        outcome fast = plan_as(c, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FAST);
        DCP_CHECK(fast.hash == dyn.hash);
    }
    DCP_CHECK_EQ_INT(found, 3);
}

/*
 * The hinge moves the choice: a batch of short sequences where balanced's plan cuts more (smaller)
 * microbatches than dynamic_cp's.  With a hinge that charges them, the plan is never above
 * dynamic_cp's under the model that includes it.
 */
DCP_TEST(the_hinge_is_weighed_at_the_choice)
{
    dcp_config c;
    base_config(&c, 8, 8192, 64);
    for (int32_t i = 0; i < 64; i++) lengths[i] = 200 + (i * 37) % 900;
    const outcome plain_dyn = plan_as(c, 64, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL);
    const outcome plain = plan_as(c, 64, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FULL);
    DCP_REQUIRE(plain_dyn.ok && plain.ok);
    DCP_CHECK(plain.model_makespan <= plain_dyn.model_makespan);
    c.cost.small_knee = 1 << 20;
    c.cost.small_slope = 1 << 20;
    const outcome dyn = plan_as(c, 64, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL);
    const outcome bal = plan_as(c, 64, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FULL);
    DCP_REQUIRE(dyn.ok && bal.ok);
    DCP_CHECK(dyn.hash == plain_dyn.hash);  /* dynamic_cp does not weigh the model */
    DCP_CHECK(dyn.model_makespan > plain_dyn.model_makespan); /* the hinge is charged */
    DCP_CHECK(bal.model_makespan <= dyn.model_makespan);
}

/*
 * The documented guarantee that failed (fast above dynamic_cp under the dependency model): DP 10 x
 * CP 2, M 385, 151 sequences of the embedded trace (mlmdefault, every 7th from a start, those longer
 * than the 20 ranks hold cut to fit), step_model dependency.  Without the rule, from start 78 fast's
 * dependency makespan was 898,740,396 against dynamic_cp's 895,282,739 (and 4 more of the first 1024
 * starts were above); now it is dynamic_cp's plan there, and no start is above.
 */
DCP_TEST(fast_above_dynamic_cp_under_the_dependency_model)
{
    load_trace();
    for (int32_t start = 0; start < 1024; start++) {
        const int32_t n = 151, most = 20 * 385;
        for (int32_t i = 0; i < n; i++) {
            int32_t s = trace[(start + i * 7) % trace_n];
            lengths[i] = s > most ? 1 + s % most : s;
        }
        dcp_config c;
        base_config(&c, 10, 385, n);
        c.context_parallel_size = 2;
        c.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
        const outcome dyn = plan_as(c, n, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL);
        const outcome fast = plan_as(c, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FAST);
        DCP_REQUIRE(dyn.ok && fast.ok);
        if (fast.model_makespan > dyn.model_makespan)
            dcp_test_fail(__FILE__, __LINE__, "start %d: fast %lld > dynamic_cp %lld", start,
                          (long long)fast.model_makespan, (long long)dyn.model_makespan);
        if (start == 78) {
            DCP_CHECK_EQ_INT(dyn.model_makespan, 895282739);
            DCP_CHECK_EQ_INT(fast.source, DCP_PLAN_SOURCE_DYNAMIC_CP);
            DCP_CHECK(fast.hash == dyn.hash);
        }
    }
}
