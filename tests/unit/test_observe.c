/*
 * test_observe.c - online calibration (dcpack.h, "Online calibration").
 *
 * Synthetic machines with known coefficients (picoseconds) time every
 * microbatch of the plans a context makes: each rank's time is its group's
 * time under the machine's true model, with 2% noise, an outlier now and
 * then and ranks that do not report.  A context that starts from the default
 * model and observes 12 steps must predict the next batches' microbatch
 * times within 5% (median), and its balanced plans must be no slower than
 * dynamic_cp's under the true model.  Over communicators: every rank refits
 * to the same model from its own row, a bad observation on one rank fails on
 * every rank and changes nothing, ranks with different histories or models
 * never plan apart, and a communicator that lies never yields a model.
 */
#define DCP_TEST_RNG_SEED 0x0B5E7u
#include "dcp_test.h"
#include "dcp_test_rng.h"
#include "../core/comm/agree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS 8
#define MAX_SEQ 512
#define M 8192
#define MAX_MB 256

typedef struct machine {
    const char *name;
    dcp_cost_model truth;
} machine;

static void machine_thd(machine *m) /* like dcpack.thd's one layer on an H200: gathered K/V, a knee */
{
    m->name = "thd-like";
    dcp_cost_model_default(&m->truth);
    memset(m->truth.kv, 0, sizeof m->truth.kv);
    m->truth.quadratic = 88;
    m->truth.linear = 2949879;
    m->truth.microbatch_overhead = 1133951500;
    m->truth.round_latency = 20000000;
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) m->truth.cp_gather[k] = 75000;
    m->truth.small_knee = 4096;
    m->truth.small_slope = 1100000;
}

static void machine_attention(machine *m) /* unlike the default: attention-bound, a wide-CP exchange that grows */
{
    m->name = "attention-bound";
    dcp_cost_model_default(&m->truth);
    memset(m->truth.kv, 0, sizeof m->truth.kv);
    m->truth.quadratic = 600;
    m->truth.linear = 400000;
    m->truth.microbatch_overhead = 300000000;
    m->truth.round_latency = 0;
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) m->truth.cp_gather[k] = 60000 * (int64_t)k;
}

static void machine_linear(machine *m) /* FFN-bound with a large fixed cost, no exposed exchange */
{
    m->name = "linear-bound";
    dcp_cost_model_default(&m->truth);
    memset(m->truth.kv, 0, sizeof m->truth.kv);
    m->truth.quadratic = 20;
    m->truth.linear = 8000000;
    m->truth.microbatch_overhead = 5000000000;
    m->truth.round_latency = 100000000;
}

static void batch(int32_t *lengths, int32_t *n)
{
    int64_t tokens = 0;
    int32_t k = 0;
    while (tokens < (int64_t)RANKS * M * 3 && k < MAX_SEQ) {
        uint32_t c = rng() % 100;
        int32_t s = c < 65 ? rng_range(64, 2048) : c < 93 ? rng_range(2049, M) : rng_range(M + 1, 4 * M);
        lengths[k++] = s;
        tokens += s;
    }
    *n = k;
}

static dcp_context *context(dcp_scheduler scheduler, const dcp_cost_model *cost, int32_t observations)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = RANKS;
    c.scheduler = scheduler;
    c.max_sequences = MAX_SEQ;
    c.max_seqlen_per_rank = M;
    c.max_microbatches = MAX_MB;
    c.max_observations = observations;
    if (cost) c.cost = *cost;
    dcp_context *ctx = NULL;
    return dcp_context_create(&c, &ctx) == DCP_OK ? ctx : NULL;
}

static double noise(void) { return ((double)(rng() % 4001) - 2000.0) / 100000.0; } /* +-2% */

/* Measured times of a plan on a machine (truth: a context holding its model): noise, outliers, missing ranks. */
static int measure(dcp_context *truth, const dcp_plan *plan, const int32_t *lengths, int32_t n, int64_t *times,
                   int dirty)
{
    if (dcp_observe_predict(truth, plan, lengths, n, times) != DCP_OK) return -1;
    for (int32_t i = 0; i < plan->num_microbatches * plan->num_ranks; i++) {
        if (times[i] == DCP_OBSERVE_MISSING) continue;
        double t = (double)times[i] * (1.0 + noise());
        if (dirty && rng() % 60 == 0) t *= 2.5;                /* a straggler */
        if (dirty && rng() % 40 == 0) t = (double)DCP_OBSERVE_MISSING; /* a rank that did not time it */
        times[i] = (int64_t)t;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int64_t times[MAX_MB * RANKS], predicted[MAX_MB * RANKS];
static double errors[MAX_MB * RANKS * 8];

/* Observe 12 steps on `m`, then the checks of the brief; returns the median error of the held-out batches. */
static double calibrate_on(const machine *mc, int check_plans)
{
    dcp_context *truth = context(DCP_SCHEDULER_DYNAMIC_CP, &mc->truth, 0);
    dcp_context *ctx = context(DCP_SCHEDULER_BALANCED, NULL, 4096);
    dcp_context *dyn = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 0);
    double result = -1.0;
    if (!truth || !ctx || !dyn) {
        dcp_test_fail(__FILE__, __LINE__, "%s: contexts", mc->name);
        goto out;
    }
    int32_t lengths[MAX_SEQ], n;
    for (int step = 0; step < 12; step++) {
        batch(lengths, &n);
        const dcp_plan *plan;
        if (dcp_plan_compute(ctx, lengths, n, &plan) != DCP_OK || measure(truth, plan, lengths, n, times, 1) != 0 ||
            dcp_observe_matrix(ctx, plan, lengths, n, times) != DCP_OK) {
            dcp_test_fail(__FILE__, __LINE__, "%s step %d: %s", mc->name, step, dcp_context_last_error(ctx));
            goto out;
        }
    }
    dcp_observe_report rep;
    dcp_observe_status(ctx, &rep);
    DCP_CHECK_EQ_INT(rep.steps, 12);
    DCP_CHECK(rep.identified & DCP_TERM_QUADRATIC);
    DCP_CHECK(rep.identified & DCP_TERM_LINEAR);
    DCP_CHECK(rep.identified & DCP_TERM_OVERHEAD);
    DCP_CHECK(rep.rows_used <= rep.rows && rep.rows > 0);
    /* held out: the next batches' groups, predicted against the noise-free truth */
    int32_t e = 0;
    int64_t balanced_sum = 0, dynamic_sum = 0;
    for (int b = 0; b < 6; b++) {
        batch(lengths, &n);
        const dcp_plan *plan;
        if (dcp_plan_compute(ctx, lengths, n, &plan) != DCP_OK ||
            dcp_observe_predict(ctx, plan, lengths, n, predicted) != DCP_OK ||
            dcp_observe_predict(truth, plan, lengths, n, times) != DCP_OK) {
            dcp_test_fail(__FILE__, __LINE__, "%s held-out %d: %s", mc->name, b, dcp_context_last_error(ctx));
            goto out;
        }
        for (int32_t i = 0; i < plan->num_microbatches * plan->num_ranks; i++)
            if (times[i] > 0) errors[e++] = fabs((double)predicted[i] - (double)times[i]) / (double)times[i];
        if (check_plans) {
            dcp_plan_stats sb, sd;
            const dcp_plan *dp;
            if (dcp_plan_stats_compute(truth, plan, lengths, n, &sb) != DCP_OK ||
                dcp_plan_compute(dyn, lengths, n, &dp) != DCP_OK ||
                dcp_plan_stats_compute(truth, dp, lengths, n, &sd) != DCP_OK) {
                dcp_test_fail(__FILE__, __LINE__, "%s: stats", mc->name);
                goto out;
            }
            balanced_sum += sb.makespan;
            dynamic_sum += sd.makespan;
        }
    }
    qsort(errors, (size_t)e, sizeof errors[0], cmp_double);
    result = errors[(e - 1) / 2];
    if (getenv("DCP_OBSERVE_VERBOSE"))
        printf("%s: median %.4f p90 %.4f over %d, identified %#x, rows %d/%d, fit %lld ppm, predict %lld ppm, "
               "margin %lld; balanced %lld dynamic_cp %lld\n",
               mc->name, result, errors[(e * 9) / 10], e, rep.identified, rep.rows_used, rep.rows,
               (long long)rep.fit_error_ppm, (long long)rep.predict_error_ppm,
               (long long)dcp_context_config(ctx)->cost.margin_ppm, (long long)balanced_sum, (long long)dynamic_sum);
    if (check_plans && balanced_sum > dynamic_sum)
        dcp_test_fail(__FILE__, __LINE__, "%s: balanced's plans take %lld ps under the true model, dynamic_cp's %lld",
                      mc->name, (long long)balanced_sum, (long long)dynamic_sum);
out:
    dcp_context_destroy(truth);
    dcp_context_destroy(ctx);
    dcp_context_destroy(dyn);
    return result;
}

DCP_TEST(twelve_steps_predict_the_next_batches_within_five_percent_on_three_machines)
{
    machine ms[3];
    machine_thd(&ms[0]);
    machine_attention(&ms[1]);
    machine_linear(&ms[2]);
    for (int i = 0; i < 3; i++) {
        double med = calibrate_on(&ms[i], 1);
        if (!(med >= 0.0 && med < 0.05))
            dcp_test_fail(__FILE__, __LINE__, "%s: median error of the held-out microbatches %.4f", ms[i].name, med);
    }
}

DCP_TEST(the_default_model_uncalibrated_is_far_off_so_the_check_has_teeth)
{
    /* the same held-out check on the uncalibrated default model, at its best single scale, fails */
    machine m;
    machine_attention(&m);
    dcp_context *truth = context(DCP_SCHEDULER_DYNAMIC_CP, &m.truth, 0);
    dcp_context *ctx = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 4096);
    DCP_REQUIRE(truth && ctx);
    int32_t lengths[MAX_SEQ], n;
    batch(lengths, &n);
    const dcp_plan *plan;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
    DCP_REQUIRE_OK(dcp_observe_predict(ctx, plan, lengths, n, predicted));
    DCP_REQUIRE_OK(dcp_observe_predict(truth, plan, lengths, n, times));
    double num = 0, den = 0;
    int32_t e = 0;
    for (int32_t i = 0; i < plan->num_microbatches * plan->num_ranks; i++)
        if (times[i] > 0) {
            double q = (double)predicted[i] / (double)times[i];
            num += q;
            den += q * q;
        }
    double scale = num / den;
    for (int32_t i = 0; i < plan->num_microbatches * plan->num_ranks; i++)
        if (times[i] > 0) errors[e++] = fabs(scale * (double)predicted[i] - (double)times[i]) / (double)times[i];
    qsort(errors, (size_t)e, sizeof errors[0], cmp_double);
    DCP_CHECK(errors[(e - 1) / 2] > 0.05);
    dcp_context_destroy(truth);
    dcp_context_destroy(ctx);
}

DCP_TEST(a_fit_is_exactly_reproducible_and_its_digest_follows_the_rows)
{
    machine m;
    machine_thd(&m);
    dcp_context *truth = context(DCP_SCHEDULER_DYNAMIC_CP, &m.truth, 0);
    dcp_context *a = context(DCP_SCHEDULER_BALANCED, NULL, 4096), *b = context(DCP_SCHEDULER_BALANCED, NULL, 4096);
    DCP_REQUIRE(truth && a && b);
    for (int step = 0; step < 5; step++) {
        int32_t lengths[MAX_SEQ], n;
        batch(lengths, &n);
        const dcp_plan *pa, *pb;
        DCP_REQUIRE_OK(dcp_plan_compute(a, lengths, n, &pa));
        DCP_REQUIRE_OK(dcp_plan_compute(b, lengths, n, &pb));
        DCP_REQUIRE(dcp_plan_hash(pa) == dcp_plan_hash(pb));
        DCP_REQUIRE(measure(truth, pa, lengths, n, times, 1) == 0);
        DCP_CHECK_NO_ALLOC(DCP_REQUIRE_OK(dcp_observe_matrix(a, pa, lengths, n, times)));
        DCP_REQUIRE_OK(dcp_observe_matrix(b, pb, lengths, n, times));
        DCP_CHECK(memcmp(&dcp_context_config(a)->cost, &dcp_context_config(b)->cost, sizeof(dcp_cost_model)) == 0);
        DCP_CHECK_NO_ALLOC(DCP_REQUIRE_OK(dcp_observe_predict(a, pa, lengths, n, predicted)));
    }
    dcp_observe_report ra, rb;
    dcp_observe_status(a, &ra);
    dcp_observe_status(b, &rb);
    DCP_CHECK(ra.digest == rb.digest);
    /* one time more on one context: another digest, another model */
    int32_t lengths[MAX_SEQ], n;
    batch(lengths, &n);
    const dcp_plan *pa;
    DCP_REQUIRE_OK(dcp_plan_compute(a, lengths, n, &pa));
    DCP_REQUIRE(measure(truth, pa, lengths, n, times, 0) == 0);
    DCP_REQUIRE_OK(dcp_observe_matrix(a, pa, lengths, n, times));
    dcp_observe_status(a, &ra);
    DCP_CHECK(ra.digest != rb.digest);
    DCP_CHECK(ra.margin_ppm == dcp_context_config(a)->cost.margin_ppm);
    dcp_context_destroy(truth);
    dcp_context_destroy(a);
    dcp_context_destroy(b);
}

DCP_TEST(terms_the_rows_cannot_tell_apart_keep_the_prior_scaled)
{
    /* only CP 1 groups of one length: quadratic, linear and overhead are one column; cp_gather never seen */
    dcp_context *ctx = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 64);
    DCP_REQUIRE(ctx);
    int32_t cps[4] = {1, 1, 1, 1}, first[5] = {0, 1, 2, 3, 4}, lengths[4] = {4096, 4096, 4096, 4096};
    int64_t t[4] = {1000000000, 1010000000, 990000000, 1000000000};
    DCP_REQUIRE_OK(dcp_observe_groups(ctx, 4, cps, first, lengths, t));
    dcp_observe_report r;
    dcp_observe_status(ctx, &r);
    DCP_CHECK(r.identified & DCP_TERM_QUADRATIC);
    DCP_CHECK(!(r.identified & DCP_TERM_LINEAR));
    DCP_CHECK(!(r.identified & DCP_TERM_OVERHEAD));
    DCP_CHECK(!(r.identified & DCP_TERM_CP_GATHER(1)));
    dcp_cost_model def;
    dcp_cost_model_default(&def);
    const dcp_cost_model *got = &dcp_context_config(ctx)->cost;
    /* the prior's round latency and kv scaled by one factor, ratios kept */
    DCP_CHECK(got->round_latency > 0 && got->kv[1] > 0);
    double ratio = (double)got->round_latency / (double)got->kv[1], want = (double)def.round_latency / (double)def.kv[1];
    DCP_CHECK(fabs(ratio - want) / want < 1e-3);
    /* and it predicts what it saw */
    DCP_CHECK(r.fit_error_ppm < 20000);
    dcp_context_destroy(ctx);
}

DCP_TEST(an_outlier_row_is_left_out_of_the_fit)
{
    /* 24 CP-1 groups timed exactly by a known model, one of them 3x: the fit leaves it out */
    machine m;
    machine_linear(&m);
    dcp_context *ctx = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 64);
    DCP_REQUIRE(ctx);
    int32_t cps[24], first[25], ls[24];
    int64_t t[24];
    first[0] = 0;
    for (int g = 0; g < 24; g++) {
        cps[g] = 1;
        ls[g] = 300 + 700 * g;
        first[g + 1] = g + 1;
        t[g] = dcp_cost(&m.truth, ls[g], 1) + m.truth.microbatch_overhead;
    }
    t[7] *= 3;
    DCP_REQUIRE_OK(dcp_observe_groups(ctx, 24, cps, first, ls, t));
    dcp_observe_report r;
    dcp_observe_status(ctx, &r);
    DCP_CHECK_EQ_INT(r.rows, 24);
    DCP_CHECK_EQ_INT(r.rows_used, 23);
    DCP_CHECK(r.fit_error_ppm < 1000); /* the other rows fit to 0.1% */
    const dcp_cost_model *got = &dcp_context_config(ctx)->cost;
    DCP_CHECK(llabs(got->linear - m.truth.linear) * 100 < m.truth.linear);
    dcp_context_destroy(ctx);
}

DCP_TEST(bad_observations_are_refused_and_change_nothing)
{
    dcp_context *ctx = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 64), *off = context(DCP_SCHEDULER_DYNAMIC_CP, NULL, 0);
    DCP_REQUIRE(ctx && off);
    int32_t lengths[MAX_SEQ], n;
    batch(lengths, &n);
    const dcp_plan *plan;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, n, &plan));
    const int32_t cells = plan->num_microbatches * plan->num_ranks;
    for (int32_t i = 0; i < cells; i++) times[i] = 100000000 + i;
    const dcp_cost_model before = dcp_context_config(ctx)->cost;
    const int64_t bad[] = {-2, DCP_OBSERVE_INVALID, DCP_OBSERVE_MAX_TIME + 1};
    for (int k = 0; k < 3; k++) {
        int64_t keep = times[3];
        times[3] = bad[k];
        DCP_CHECK_STATUS(dcp_observe_matrix(ctx, plan, lengths, n, times), DCP_ERR_INVALID_ARGUMENT);
        DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "microbatch 0");
        times[3] = keep;
    }
    DCP_CHECK_STATUS(dcp_observe_matrix(off, plan, lengths, n, times), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(dcp_context_last_error(off), "max_observations is 0");
    /* a plan this context did not make of these lengths */
    int32_t other[MAX_SEQ];
    memcpy(other, lengths, sizeof other);
    other[0] += 1;
    DCP_CHECK_STATUS(dcp_observe_matrix(ctx, plan, other, n, times), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "not a plan this context stepped");
    DCP_CHECK(memcmp(&before, &dcp_context_config(ctx)->cost, sizeof before) == 0);
    dcp_observe_report r;
    dcp_observe_status(ctx, &r);
    DCP_CHECK_EQ_INT(r.steps, 0);
    DCP_CHECK_EQ_INT(r.rows, 0);
    /* the same times are taken once fixed */
    DCP_CHECK_STATUS(dcp_observe_matrix(ctx, plan, lengths, n, times), DCP_OK);
    dcp_observe_status(ctx, &r);
    DCP_CHECK_EQ_INT(r.steps, 1);
    DCP_CHECK(memcmp(&before, &dcp_context_config(ctx)->cost, sizeof before) != 0);
    /* a plan made before the refit is not the context's any more */
    DCP_CHECK_STATUS(dcp_observe_matrix(ctx, plan, lengths, n, times), DCP_ERR_INVALID_ARGUMENT);
    /* groups: a CP size that is no power of two, a length of 0 */
    int32_t cps[2] = {3, 1}, first[3] = {0, 1, 2}, ls[2] = {100, 0};
    int64_t t[2] = {1000, 1000};
    DCP_CHECK_STATUS(dcp_observe_groups(ctx, 2, cps, first, ls, t), DCP_ERR_INVALID_ARGUMENT);
    cps[0] = 2;
    DCP_CHECK_STATUS(dcp_observe_groups(ctx, 2, cps, first, ls, t), DCP_ERR_BAD_LENGTH);
    dcp_observe_report r2;
    dcp_observe_status(ctx, &r2);
    DCP_CHECK(r2.digest == r.digest);
    dcp_context_destroy(ctx);
    dcp_context_destroy(off);
}

/* ---- over communicators ---- */

#define WORLD 4
#define FAULT_NONE (-1)

typedef struct world_run {
    dcp_inproc_world *world;
    dcp_context *ctx[WORLD];
    dcp_context *truth;
    int32_t lengths[MAX_SEQ];
    int32_t n;
    int64_t row[WORLD][MAX_MB];
    int64_t bad_value;   /* written into rank bad_rank's first time, when bad_rank >= 0 */
    int32_t bad_rank;
    int32_t lie_rank;    /* this rank's all-gather of the times hands back garbage */
    dcp_status status[WORLD];
    char message[WORLD][256];
    uint64_t plan_hash[WORLD];
    uint64_t step_id;
} world_run;

/* A communicator that corrupts its second all-gather (dcp_observe's times) on one rank. */
typedef struct lying {
    dcp_comm comm;
    dcp_comm inner;
    int lie;
    int allgathers;
} lying;

static dcp_status lie_allgather(dcp_comm *c, const void *send, size_t bytes, void *recv)
{
    lying *l = (lying *)c;
    dcp_status s = l->inner.ops->allgather(&l->inner, send, bytes, recv);
    if (s == DCP_OK && l->lie && l->allgathers++ == 1) memset(recv, 0x5a, bytes * (size_t)c->size);
    return s;
}
static dcp_status lie_allgatherv(dcp_comm *c, const void *s, size_t sb, void *r, const size_t *rb, const size_t *ro)
{
    return ((lying *)c)->inner.ops->allgatherv(&((lying *)c)->inner, s, sb, r, rb, ro);
}
static dcp_status lie_alltoallv(dcp_comm *c, const void *s, const size_t *sb, const size_t *so, void *r,
                                const size_t *rb, const size_t *ro)
{
    return ((lying *)c)->inner.ops->alltoallv(&((lying *)c)->inner, s, sb, so, r, rb, ro);
}
static dcp_status lie_broadcast(dcp_comm *c, void *b, size_t n, int32_t root)
{
    return ((lying *)c)->inner.ops->broadcast(&((lying *)c)->inner, b, n, root);
}
static dcp_status lie_agree(dcp_comm *c, dcp_status local, dcp_status *agreed, int32_t *failed)
{
    return ((lying *)c)->inner.ops->agree(&((lying *)c)->inner, local, agreed, failed);
}
static const dcp_comm_ops lie_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), lie_allgather, lie_allgatherv, lie_alltoallv, lie_broadcast, lie_agree,
    NULL,
};

static void observe_rank(int32_t rank, void *arg)
{
    world_run *w = arg;
    lying l;
    memset(&l, 0, sizeof l);
    dcp_inproc_comm(w->world, rank, &l.inner);
    l.comm = l.inner;
    l.comm.ops = &lie_ops;
    l.lie = rank == w->lie_rank;
    const dcp_plan *plan;
    w->status[rank] = dcp_plan_compute(w->ctx[rank], w->lengths, w->n, &plan);
    if (w->status[rank] != DCP_OK) return;
    int64_t *mine = w->row[rank];
    if (rank == w->bad_rank) mine[0] = w->bad_value;
    w->status[rank] = dcp_observe(w->ctx[rank], plan, w->lengths, w->n, mine, &l.comm, w->step_id);
    snprintf(w->message[rank], sizeof w->message[rank], "%s", dcp_context_last_error(w->ctx[rank]));
    /* the next batch's plan on every rank, under the model each holds now */
    const dcp_plan *next;
    int32_t more[MAX_SEQ];
    memcpy(more, w->lengths, sizeof more);
    more[0] = more[0] % 500 + 1;
    w->plan_hash[rank] = dcp_plan_compute(w->ctx[rank], more, w->n, &next) == DCP_OK ? dcp_plan_hash(next) : 0;
}

/* Each rank's own row of a measured step (the full matrix comes from the truth). */
static int world_step(world_run *w)
{
    batch(w->lengths, &w->n);
    const dcp_plan *plan;
    if (dcp_plan_compute(w->ctx[0], w->lengths, w->n, &plan) != DCP_OK) return -1;
    if (measure(w->truth, plan, w->lengths, w->n, times, 1) != 0) return -1;
    for (int32_t r = 0; r < WORLD; r++)
        for (int32_t m = 0; m < plan->num_microbatches; m++) w->row[r][m] = times[m * WORLD + r];
    w->step_id++;
    return dcp_inproc_run(WORLD, observe_rank, w) == DCP_OK ? 0 : -1;
}

static dcp_context *world_context(int32_t observations)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = WORLD;
    c.scheduler = DCP_SCHEDULER_BALANCED;
    c.max_sequences = MAX_SEQ;
    c.max_seqlen_per_rank = M;
    c.max_microbatches = MAX_MB;
    c.max_observations = observations;
    dcp_context *ctx = NULL;
    return dcp_context_create(&c, &ctx) == DCP_OK ? ctx : NULL;
}

static int world_open(world_run *w)
{
    memset(w, 0, sizeof *w);
    w->bad_rank = w->lie_rank = FAULT_NONE;
    machine m;
    machine_thd(&m);
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = WORLD;
    c.max_sequences = MAX_SEQ;
    c.max_seqlen_per_rank = M;
    c.max_microbatches = MAX_MB;
    c.cost = m.truth;
    if (dcp_context_create(&c, &w->truth) != DCP_OK) return -1;
    for (int r = 0; r < WORLD; r++)
        if (!(w->ctx[r] = world_context(1024))) return -1;
    return dcp_inproc_world_create(WORLD, 5000, &w->world);
}

static void world_close(world_run *w)
{
    for (int r = 0; r < WORLD; r++) dcp_context_destroy(w->ctx[r]);
    dcp_context_destroy(w->truth);
    dcp_inproc_world_destroy(w->world);
}

static int same_models(const world_run *w)
{
    for (int r = 1; r < WORLD; r++)
        if (memcmp(&dcp_context_config(w->ctx[r])->cost, &dcp_context_config(w->ctx[0])->cost,
                   sizeof(dcp_cost_model)) != 0)
            return 0;
    return 1;
}

DCP_TEST(ranks_refit_to_one_model_from_their_own_rows_and_plan_alike)
{
    world_run w;
    DCP_REQUIRE(world_open(&w) == 0);
    for (int step = 0; step < 6; step++) {
        DCP_REQUIRE(world_step(&w) == 0);
        for (int r = 0; r < WORLD; r++) DCP_CHECK_STATUS(w.status[r], DCP_OK);
        DCP_CHECK(same_models(&w));
        for (int r = 1; r < WORLD; r++) DCP_CHECK(w.plan_hash[r] == w.plan_hash[0] && w.plan_hash[0] != 0);
    }
    /* the model moved off the default, the same on every rank as one process fitting the whole matrix */
    dcp_cost_model def;
    dcp_cost_model_default(&def);
    DCP_CHECK(dcp_context_config(w.ctx[0])->cost.linear != def.linear);
    world_close(&w);
}

DCP_TEST(a_bad_observation_on_one_rank_fails_on_every_rank_and_changes_no_model)
{
    const int64_t bad[] = {-5, DCP_OBSERVE_INVALID};
    for (int k = 0; k < 2; k++) {
        world_run w;
        DCP_REQUIRE(world_open(&w) == 0);
        DCP_REQUIRE(world_step(&w) == 0);
        dcp_cost_model before = dcp_context_config(w.ctx[0])->cost;
        w.bad_rank = 2;
        w.bad_value = bad[k];
        DCP_REQUIRE(world_step(&w) == 0);
        for (int r = 0; r < WORLD; r++) {
            DCP_CHECK_STATUS(w.status[r], DCP_ERR_INVALID_ARGUMENT);
            DCP_CHECK(memcmp(&before, &dcp_context_config(w.ctx[r])->cost, sizeof before) == 0);
            DCP_CHECK(w.plan_hash[r] == w.plan_hash[0]);
        }
        DCP_CHECK_CONTAINS(w.message[2], "rank 2's time on microbatch 0");
        DCP_CHECK_CONTAINS(w.message[0], "rank 2 failed");
        /* and the next good step goes through */
        w.bad_rank = FAULT_NONE;
        DCP_REQUIRE(world_step(&w) == 0);
        for (int r = 0; r < WORLD; r++) DCP_CHECK_STATUS(w.status[r], DCP_OK);
        DCP_CHECK(same_models(&w));
        world_close(&w);
    }
}

DCP_TEST(ranks_with_other_observations_or_models_never_plan_apart)
{
    world_run w;
    DCP_REQUIRE(world_open(&w) == 0);
    DCP_REQUIRE(world_step(&w) == 0);
    /* rank 1 alone observes one step more, locally */
    const dcp_plan *plan;
    DCP_REQUIRE_OK(dcp_plan_compute(w.ctx[1], w.lengths, w.n, &plan));
    DCP_REQUIRE(measure(w.truth, plan, w.lengths, w.n, times, 0) == 0);
    DCP_REQUIRE_OK(dcp_observe_matrix(w.ctx[1], plan, w.lengths, w.n, times));
    dcp_cost_model model1 = dcp_context_config(w.ctx[1])->cost, model0 = dcp_context_config(w.ctx[0])->cost;
    DCP_REQUIRE(memcmp(&model0, &model1, sizeof model0) != 0);
    DCP_REQUIRE(world_step(&w) == 0);
    for (int r = 0; r < WORLD; r++) {
        /* the plan rank 1 made under its own model is not the others' plan: told as another plan, or history */
        DCP_CHECK(w.status[r] == DCP_ERR_INVALID_CONFIG || w.status[r] == DCP_ERR_INVALID_ARGUMENT);
        DCP_CHECK(w.status[r] == w.status[0]);
    }
    DCP_CHECK(memcmp(&model1, &dcp_context_config(w.ctx[1])->cost, sizeof model1) == 0);
    DCP_CHECK(memcmp(&model0, &dcp_context_config(w.ctx[0])->cost, sizeof model0) == 0);
    world_close(&w);
}

/* A gather over contexts whose models differ: DCP_ERR_INVALID_CONFIG on every rank. */
typedef struct gather_run {
    dcp_inproc_world *world;
    dcp_context *ctx[WORLD];
    dcp_status status[WORLD];
} gather_run;

static void gather_rank(int32_t rank, void *arg)
{
    gather_run *g = arg;
    dcp_comm comm;
    dcp_inproc_comm(g->world, rank, &comm);
    int32_t mine[3] = {100 + rank, 200, 300};
    const int32_t *global, *offsets;
    int32_t count;
    g->status[rank] = dcp_gather(g->ctx[rank], &comm, 1, mine, 3, &global, &count, &offsets);
}

DCP_TEST(a_rank_holding_another_model_fails_the_next_gather_on_every_rank)
{
    gather_run g;
    memset(&g, 0, sizeof g);
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = WORLD;
    c.max_sequences = MAX_SEQ;
    c.max_observations = 64;
    for (int r = 0; r < WORLD; r++) DCP_REQUIRE_OK(dcp_context_create(&c, &g.ctx[r]));
    DCP_REQUIRE_OK(dcp_inproc_world_create(WORLD, 5000, &g.world));
    int32_t cps[2] = {1, 1}, first[3] = {0, 1, 2}, ls[2] = {1000, 3000};
    int64_t t[2] = {100000000, 400000000};
    DCP_REQUIRE_OK(dcp_observe_groups(g.ctx[3], 2, cps, first, ls, t));
    DCP_REQUIRE_OK(dcp_inproc_run(WORLD, gather_rank, &g));
    for (int r = 0; r < WORLD; r++) DCP_CHECK_STATUS(g.status[r], DCP_ERR_INVALID_CONFIG);
    /* the same observation on the others: they agree again */
    for (int r = 0; r < 3; r++) DCP_REQUIRE_OK(dcp_observe_groups(g.ctx[r], 2, cps, first, ls, t));
    DCP_REQUIRE_OK(dcp_inproc_run(WORLD, gather_rank, &g));
    for (int r = 0; r < WORLD; r++) DCP_CHECK_STATUS(g.status[r], DCP_OK);
    for (int r = 0; r < WORLD; r++) dcp_context_destroy(g.ctx[r]);
    dcp_inproc_world_destroy(g.world);
}

DCP_TEST(a_lying_or_failing_communicator_never_yields_a_model)
{
    world_run w;
    DCP_REQUIRE(world_open(&w) == 0);
    DCP_REQUIRE(world_step(&w) == 0);
    dcp_cost_model before = dcp_context_config(w.ctx[0])->cost;
    /* rank 1's all-gather of the times comes back as garbage */
    w.lie_rank = 1;
    DCP_REQUIRE(world_step(&w) == 0);
    for (int r = 0; r < WORLD; r++) {
        DCP_CHECK(w.status[r] != DCP_OK);
        DCP_CHECK(memcmp(&before, &dcp_context_config(w.ctx[r])->cost, sizeof before) == 0);
    }
    DCP_CHECK_STATUS(w.status[1], DCP_ERR_COMM);
    DCP_CHECK_CONTAINS(w.message[1], "are not the ones it sent");
    w.lie_rank = FAULT_NONE;
    /* an injected fault in the agreement: the same error everywhere, no model changes; then a clean step */
    const dcp_inproc_fault faults[] = {DCP_FAULT_RETURN_ERROR, DCP_FAULT_TRUNCATE};
    for (int f = 0; f < 2; f++) {
        DCP_REQUIRE_OK(dcp_inproc_inject_fault(w.world, 3, faults[f]));
        DCP_REQUIRE(world_step(&w) == 0);
        for (int r = 0; r < WORLD; r++) {
            DCP_CHECK(w.status[r] != DCP_OK);
            DCP_CHECK(w.status[r] == w.status[0]);
            DCP_CHECK(memcmp(&before, &dcp_context_config(w.ctx[r])->cost, sizeof before) == 0);
        }
        DCP_REQUIRE(world_step(&w) == 0);
        for (int r = 0; r < WORLD; r++) DCP_CHECK_STATUS(w.status[r], DCP_OK);
        DCP_CHECK(same_models(&w));
        before = dcp_context_config(w.ctx[0])->cost;
    }
    world_close(&w);
}
