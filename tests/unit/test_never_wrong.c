/*
 * test_never_wrong.c - a call either fails on every rank that takes part or
 * returns correct data: CP siblings holding different bytes, a rank that
 * skips or repeats a call (steps, gathers, MTP rolls), ranks built with
 * different configurations, and the smaller bad inputs of the plan checks.
 * Ranks are threads over in-process communicators.
 */
#include "dcp_test.h"

#include <stdlib.h>
#include <string.h>

#define TOKENS 8
#define STEPS 4

static dcp_config small_config(int32_t dp, int32_t cp)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = dp;
    c.context_parallel_size = cp;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 64;
    c.max_tokens_per_rank = 64;
    return c;
}

/* One rank's sample of one step: TOKENS tokens whose values name the step and the DP rank. */
typedef struct sample_buffers {
    int64_t tokens[TOKENS], labels[TOKENS], positions[TOKENS];
    float mask[TOKENS];
} sample_buffers;

static void fill(sample_buffers *b, int64_t base)
{
    for (int i = 0; i < TOKENS; i++) {
        b->tokens[i] = base + i;
        b->labels[i] = base + 50 + i;
        b->positions[i] = i;
        b->mask[i] = 1.0f;
    }
}

static dcp_sample sample_of(const sample_buffers *b)
{
    dcp_sample s = {b->tokens, b->labels, b->mask, b->positions, TOKENS, NULL, 0, TOKENS, TOKENS};
    return s;
}

/* The tokens a rank computes on in a step, in order (all microbatches, all slots). */
static int copy_tokens(const dcp_step_output *out, int64_t *dst, int cap)
{
    int n = 0;
    for (int32_t m = 0; m < out->num_microbatches; m++) {
        const dcp_microbatch *mb = &out->microbatches[m];
        for (int64_t i = 0; i < mb->num_tokens && n < cap; i++) dst[n++] = mb->tokens[i];
    }
    return n;
}

/*
 * One dcp_step on `ctx` over one world (the world is also the DPxCP group), with the rank's sample of step k
 * (base_of) and the given step id; NULL args when null_args.  Keeps the tokens it got in tokens[*count].
 */
static int64_t base_of(int32_t rank, int k);
static dcp_status step_on(dcp_context *ctx, dcp_comm *world, int32_t rank, int k, uint64_t step_id, int null_args,
                          int64_t *tokens, int *count)
{
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = world;
    args.data_context_parallel = world;
    args.step_id = step_id;
    sample_buffers b;
    fill(&b, base_of(rank, k));
    dcp_sample s = sample_of(&b);
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    const dcp_step_output *out = NULL;
    dcp_status st = dcp_step(ctx, null_args ? NULL : &args, &in, &out);
    if (count) *count = 0;
    if (st == DCP_OK && tokens && count) *count = copy_tokens(out, tokens, TOKENS);
    return st;
}

/* ---- CP siblings holding different bytes ---- */

typedef struct sibling_test {
    dcp_inproc_world *world, *lane;
    int skip_check;
    int differ;       /* 1: rank 1's tokens differ; 2: rank 1's loss_mask is -0.0f where rank 0's is 0.0f */
    dcp_status status[2];
    char message[2][512];
    int64_t tokens[2][TOKENS];
    int count[2];
} sibling_test;

static void sibling_rank(int32_t rank, void *arg)
{
    sibling_test *t = arg;
    dcp_config c = small_config(1, 2);
    c.skip_sibling_data_check = t->skip_check;
    dcp_context *ctx = NULL;
    t->status[rank] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    sample_buffers b;
    fill(&b, t->differ == 1 && rank == 1 ? 900 : 100);
    for (int i = 0; i < TOKENS; i++) b.mask[i] = (t->differ == 2 && rank == 1 && i == 3) ? -0.0f : (i == 3 ? 0.0f : 1.0f);
    dcp_comm world, lane;
    dcp_inproc_comm(t->world, rank, &world);
    dcp_inproc_comm(t->lane, rank, &lane);
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world;
    args.data_context_parallel = &lane;
    dcp_sample s = sample_of(&b);
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    const dcp_step_output *out = NULL;
    t->status[rank] = dcp_step(ctx, &args, &in, &out);
    snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(ctx));
    if (t->status[rank] == DCP_OK) t->count[rank] = copy_tokens(out, t->tokens[rank], TOKENS);
    dcp_context_destroy(ctx);
}

static void run_siblings(sibling_test *t)
{
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t->world));
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t->lane));
    DCP_REQUIRE_OK(dcp_inproc_run(2, sibling_rank, t));
    dcp_inproc_world_destroy(t->world);
    dcp_inproc_world_destroy(t->lane);
}

DCP_TEST(cp_siblings_with_different_tokens_fail_on_every_rank)
{
    sibling_test t;
    memset(&t, 0, sizeof t);
    t.differ = 1;
    run_siblings(&t);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r], DCP_ERR_CORRUPT_INPUT);
        DCP_CHECK_CONTAINS(t.message[r], "CP siblings 0 and 1 hold sequences of the same lengths with different contents");
        /* whole on both ranks, also where the rank's own message is quoted inside the agreement's */
        DCP_CHECK_CONTAINS(t.message[r], "they must hold the same data");
    }
}

DCP_TEST(cp_siblings_with_negative_and_positive_zero_loss_mask_fail)
{
    sibling_test t;
    memset(&t, 0, sizeof t);
    t.differ = 2; /* equal as floats, different as bytes: what the model would see differs in sign */
    run_siblings(&t);
    for (int r = 0; r < 2; r++) DCP_CHECK_STATUS(t.status[r], DCP_ERR_CORRUPT_INPUT);
}

DCP_TEST(cp_siblings_with_equal_inputs_step_and_the_check_can_be_skipped)
{
    sibling_test t;
    memset(&t, 0, sizeof t);
    run_siblings(&t);
    /* zigzag over CP 2: rank 0 holds chunks 0 and 3 of the 8 tokens, rank 1 chunks 1 and 2 */
    const int64_t want[2][4] = {{100, 101, 106, 107}, {102, 103, 104, 105}};
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r], DCP_OK);
        DCP_CHECK_EQ_INT(t.count[r], 4);
        for (int i = 0; i < 4; i++) DCP_CHECK_EQ_INT(t.tokens[r][i], want[r][i]);
    }
    /* with the check skipped, only lengths are compared: the documented trade */
    memset(&t, 0, sizeof t);
    t.differ = 1;
    t.skip_check = 1;
    run_siblings(&t);
    for (int r = 0; r < 2; r++) DCP_CHECK_STATUS(t.status[r], DCP_OK);
}

/* ---- a rank that skips or repeats a call ---- */

typedef struct skip_test {
    dcp_inproc_world *world;
    int joined;                   /* 1: one dcp_inproc_run per step (threads joined between steps) */
    int repeat;                   /* 1: rank 1 repeats its step 1 instead of skipping step 0 */
    int run;                      /* with joined: which step this run makes */
    int32_t lone_rank;            /* the rank whose first lone_steps steps fail on it alone (NULL args) */
    int lone_steps;
    dcp_context *ctx[2];
    dcp_status status[2][STEPS + 2];
    int64_t tokens[2][STEPS + 2][TOKENS];
    int count[2][STEPS + 2];
    int calls[2];
} skip_test;

static void step_once(skip_test *t, int32_t rank, int k, int use_null_args)
{
    dcp_comm world;
    dcp_inproc_comm(t->world, rank, &world);
    int slot = t->calls[rank]++;
    t->status[rank][slot] = step_on(t->ctx[rank], &world, rank, k, 0, use_null_args, t->tokens[rank][slot],
                                    &t->count[rank][slot]);
}

/* Rank r's input in step k. */
static int64_t base_of(int32_t rank, int k) { return 1000 * (k + 1) + 100 * rank; }

static void skip_rank(int32_t rank, void *arg)
{
    skip_test *t = arg;
    int first = t->joined ? t->run : 0, last = t->joined ? t->run + 1 : STEPS;
    /* a rank that repeats a step makes one call more than its peer: it leaves out its last step, whose
       collective would otherwise wait the world's whole timeout for a call its peer never makes */
    if (rank == 1 && t->repeat && !t->joined) last--;
    for (int k = first; k < last; k++) {
        if (rank == t->lone_rank && k < t->lone_steps && !t->repeat) {
            step_once(t, rank, k, 1); /* fails here alone: no communicator to tell the others through */
            continue;
        }
        step_once(t, rank, k, 0);
        if (rank == 1 && k == 1 && t->repeat) step_once(t, rank, k, 0); /* the same step again */
    }
}

/* What step k gives rank r when both ranks make it together on a fresh world. */
typedef struct fresh_test {
    dcp_inproc_world *world;
    int k;
    int64_t tokens[2][TOKENS];
    int count[2];
    dcp_status status[2];
} fresh_test;

static void fresh_rank(int32_t rank, void *arg)
{
    fresh_test *f = arg;
    dcp_config c = small_config(2, 1);
    dcp_context *ctx = NULL;
    f->status[rank] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm world;
    dcp_inproc_comm(f->world, rank, &world);
    f->status[rank] = step_on(ctx, &world, rank, f->k, 0, 0, f->tokens[rank], &f->count[rank]);
    dcp_context_destroy(ctx);
}

/* Every DP_OK a rank returned must hold exactly what some step gives it on a fresh world, paired with its peer's. */
static void check_never_wrong(skip_test *t)
{
    fresh_test oracle[STEPS];
    for (int k = 0; k < STEPS; k++) {
        memset(&oracle[k], 0, sizeof oracle[k]);
        oracle[k].k = k;
        DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &oracle[k].world));
        DCP_REQUIRE_OK(dcp_inproc_run(2, fresh_rank, &oracle[k]));
        dcp_inproc_world_destroy(oracle[k].world);
        DCP_REQUIRE(oracle[k].status[0] == DCP_OK && oracle[k].status[1] == DCP_OK);
    }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < t->calls[r]; i++) {
            if (t->status[r][i] != DCP_OK) continue;
            int matches = 0;
            for (int k = 0; k < STEPS && !matches; k++)
                matches = oracle[k].count[r] == t->count[r][i] &&
                          !memcmp(oracle[k].tokens[r], t->tokens[r][i], sizeof(int64_t) * (size_t)t->count[r][i]);
            if (!matches) dcp_test_fail(__FILE__, __LINE__, "rank %d call %d returned DCP_OK with a mixed batch", r, i);
        }
}

static void skip_setup(skip_test *t)
{
    dcp_config c = small_config(2, 1);
    t->lone_rank = 1;
    t->lone_steps = 1;
    for (int r = 0; r < 2; r++) DCP_REQUIRE_OK(dcp_context_create(&c, &t->ctx[r]));
}

static void skip_teardown(skip_test *t)
{
    for (int r = 0; r < 2; r++) dcp_context_destroy(t->ctx[r]);
}

DCP_TEST(a_lone_failure_never_pairs_two_steps)
{
    skip_test t;
    memset(&t, 0, sizeof t);
    skip_setup(&t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, skip_rank, &t));
    /* rank 1's first call failed alone; rank 0's step 0 met rank 1's step 1: both see it */
    DCP_CHECK_STATUS(t.status[1][0], DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(t.status[0][0], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_STATUS(t.status[1][1], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_CONTAINS(dcp_context_last_error(t.ctx[0]), "out of step");
    /* and every later call refuses at once, without a collective, until the ranks resync */
    for (int r = 0; r < 2; r++)
        for (int i = r == 0 ? 1 : 2; i < t.calls[r]; i++) DCP_CHECK_STATUS(t.status[r][i], DCP_ERR_OUT_OF_STEP);
    check_never_wrong(&t);
    /* back in step: both resync to the same count and the next step is right */
    for (int r = 0; r < 2; r++) DCP_CHECK_STATUS(dcp_context_resync(t.ctx[r], 10), DCP_OK);
    memset(t.calls, 0, sizeof t.calls);
    t.joined = 1;
    t.run = 2;
    DCP_REQUIRE_OK(dcp_inproc_run(2, skip_rank, &t));
    for (int r = 0; r < 2; r++) DCP_CHECK_STATUS(t.status[r][0], DCP_OK);
    DCP_CHECK_EQ_INT(dcp_context_calls(t.ctx[0]), 11);
    check_never_wrong(&t);
    dcp_inproc_world_destroy(t.world);
    skip_teardown(&t);
}

/*
 * Ranks kept in step by their caller (threads joined between steps): the lone rank's first lone_steps steps
 * fail on it alone, each making its peer wait out the world's timeout; the next step realigns them (the
 * lone rank's first agreement lets the timeouts it missed go by) and it and every later one succeed on both
 * ranks with the right data: never an endless run of timeouts, never a mixed batch.
 */
static void lone_failures_joined(int32_t lone_rank, int lone_steps)
{
    skip_test t;
    memset(&t, 0, sizeof t);
    skip_setup(&t);
    t.lone_rank = lone_rank;
    t.lone_steps = lone_steps;
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 300, &t.world));
    t.joined = 1;
    const int32_t peer = 1 - lone_rank;
    for (t.run = 0; t.run < STEPS; t.run++) {
        int before[2] = {t.calls[0], t.calls[1]};
        DCP_REQUIRE_OK(dcp_inproc_run(2, skip_rank, &t));
        if (t.run < lone_steps) {
            DCP_CHECK_STATUS(t.status[lone_rank][before[lone_rank]], DCP_ERR_NULL_POINTER);
            DCP_CHECK_STATUS(t.status[peer][before[peer]], DCP_ERR_TIMEOUT); /* it waited for a call never made */
        } else {
            for (int r = 0; r < 2; r++) {
                DCP_CHECK_STATUS(t.status[r][before[r]], DCP_OK);
                /* the step's own batch: both ranks' step t.run, in this rank's slots */
                int64_t base = base_of(r, t.run);
                DCP_CHECK_EQ_INT(t.count[r][before[r]], TOKENS);
                for (int i = 0; i < t.count[r][before[r]]; i++)
                    if (t.tokens[r][before[r]][i] != base + i && t.tokens[r][before[r]][i] != base_of(1 - r, t.run) + i)
                        dcp_test_fail(__FILE__, __LINE__, "rank %d step %d token %d is %lld, not of step %d", r, t.run,
                                      i, (long long)t.tokens[r][before[r]][i], t.run);
            }
        }
        for (int r = 0; r < 2; r++) DCP_CHECK_EQ_INT(dcp_context_calls(t.ctx[r]), t.run + 1);
    }
    check_never_wrong(&t);
    dcp_inproc_world_destroy(t.world);
    skip_teardown(&t);
}

DCP_TEST(a_lone_failure_with_threads_joined_between_steps_is_never_wrong)
{
    lone_failures_joined(1, 1);
}

DCP_TEST(ranks_in_lockstep_realign_after_rank_0_fails_alone)
{
    lone_failures_joined(0, 1);
}

DCP_TEST(ranks_in_lockstep_realign_after_two_lone_failures_in_a_row)
{
    lone_failures_joined(0, 2);
}

DCP_TEST(a_repeated_call_is_out_of_step)
{
    skip_test t;
    memset(&t, 0, sizeof t);
    t.repeat = 1;
    skip_setup(&t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, skip_rank, &t));
    /* steps 0 and 1 pair; rank 1's repeated step 1 (its call 2) meets rank 0's step 2 (call 2): counts agree,
       so the data of rank 1's repeat is rank 1's own choice; rank 1's step 2 (call 3) meets rank 0's step 3 */
    DCP_CHECK_STATUS(t.status[0][0], DCP_OK);
    DCP_CHECK_STATUS(t.status[0][1], DCP_OK);
    /* every call met its peer's: none waited out the timeout */
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < t.calls[r]; i++) DCP_CHECK(t.status[r][i] != DCP_ERR_TIMEOUT);
    check_never_wrong(&t);
    dcp_inproc_world_destroy(t.world);
    skip_teardown(&t);
}

/* With step ids, a rank that repeats a step is caught at once. */
typedef struct id_test {
    dcp_inproc_world *world;
    dcp_status status[2][3];
} id_test;

static void id_rank(int32_t rank, void *arg)
{
    id_test *t = arg;
    dcp_config c = small_config(2, 1);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm world;
    dcp_inproc_comm(t->world, rank, &world);
    /* rank 0 numbers its steps 1, 2, 3; rank 1 makes step 1 twice (1, 1, 2) */
    const uint64_t ids[2][3] = {{1, 2, 3}, {1, 1, 2}};
    for (int k = 0; k < 3; k++) t->status[rank][k] = step_on(ctx, &world, rank, 0, ids[rank][k], 0, NULL, NULL);
    dcp_context_destroy(ctx);
}

DCP_TEST(step_ids_catch_a_repeated_step)
{
    id_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, id_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r][0], DCP_OK);
        DCP_CHECK_STATUS(t.status[r][1], DCP_ERR_OUT_OF_STEP);
        DCP_CHECK_STATUS(t.status[r][2], DCP_ERR_OUT_OF_STEP);
    }
}

/* ---- ranks built with different configurations ---- */

typedef struct config_test {
    dcp_inproc_world *world;
    dcp_status status[2];
    char message[2][512];
} config_test;

static void config_rank(int32_t rank, void *arg)
{
    config_test *t = arg;
    dcp_config c = small_config(2, 1);
    if (rank == 1) c.pad_alignment = 8; /* rank 1 pads, rank 0 does not: their outputs would not fit together */
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm world;
    dcp_inproc_comm(t->world, rank, &world);
    t->status[rank] = step_on(ctx, &world, rank, 0, 0, 0, NULL, NULL);
    snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
}

DCP_TEST(ranks_with_different_configurations_fail_on_every_rank)
{
    config_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, config_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r], DCP_ERR_INVALID_CONFIG);
        DCP_CHECK_CONTAINS(t.message[r], "rank 1 was built with another configuration than rank 0");
    }
}

/* ---- gathers: a skipped call ---- */

typedef struct gather_skip_test {
    dcp_inproc_world *world;
    dcp_status status[2][3];
} gather_skip_test;

static void gather_skip_rank(int32_t rank, void *arg)
{
    gather_skip_test *t = arg;
    dcp_config c = small_config(2, 1);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    const int32_t lengths[2] = {5 + rank, 7};
    const int32_t *global = NULL, *offsets = NULL;
    int32_t num = 0;
    for (int k = 0; k < 3; k++) {
        dcp_comm *use = rank == 1 && k == 0 ? NULL : &comm; /* rank 1 fails alone in its first call */
        t->status[rank][k] = dcp_gather(ctx, use, 0, lengths, 2, &global, &num, &offsets);
    }
    dcp_context_destroy(ctx);
}

DCP_TEST(a_gather_skipped_on_one_rank_is_out_of_step_everywhere)
{
    gather_skip_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, gather_skip_rank, &t));
    dcp_inproc_world_destroy(t.world);
    DCP_CHECK_STATUS(t.status[1][0], DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(t.status[0][0], DCP_ERR_OUT_OF_STEP); /* met rank 1's second call */
    DCP_CHECK_STATUS(t.status[1][1], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_STATUS(t.status[0][1], DCP_ERR_OUT_OF_STEP); /* refused at once from then on */
    DCP_CHECK_STATUS(t.status[0][2], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_STATUS(t.status[1][2], DCP_ERR_OUT_OF_STEP);
}

/* ---- MTP rolls: a roll that failed alone ---- */

typedef struct roll_skip_test {
    dcp_inproc_world *world;
    dcp_status status[2][3];
} roll_skip_test;

static void roll_skip_rank(int32_t rank, void *arg)
{
    roll_skip_test *t = arg;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    const int32_t cu[2] = {0, 8}; /* one 8-token sequence over CP 2: 4 tokens a rank */
    int64_t field[4] = {1, 2, 3, 4}, out[4];
    const void *fields[1] = {field};
    void *outs[1] = {out};
    const size_t sizes[1] = {8};
    unsigned char exchange[4096];
    if (dcp_mtp_roll_exchange_bytes(2, sizes, 1, comm.size) > sizeof exchange) return;
    /* rank 1's first roll fails without a collective, so rank 0 rolls once less: its third roll would
       otherwise wait the world's whole timeout for a call rank 1 never makes */
    for (int k = 0; k < (rank == 0 ? 2 : 3); k++) {
        dcp_comm use = comm;
        if (rank == 1 && k == 0) use.ops = NULL; /* a handle without operations: fails here alone */
        t->status[rank][k] = dcp_mtp_roll(&use, 0, 0, 2, DCP_CP_ZIGZAG, cu, 2, 4, fields, outs, sizes, 1, exchange);
        comm.calls = use.calls;
    }
}

DCP_TEST(an_mtp_roll_that_failed_alone_is_out_of_step_at_the_next_roll)
{
    roll_skip_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, roll_skip_rank, &t));
    dcp_inproc_world_destroy(t.world);
    DCP_CHECK(t.status[1][0] != DCP_OK);                   /* refused alone: no operations to agree through */
    DCP_CHECK_STATUS(t.status[0][0], DCP_ERR_OUT_OF_STEP); /* rank 0's roll 0 met rank 1's roll 1 */
    DCP_CHECK_STATUS(t.status[1][1], DCP_ERR_OUT_OF_STEP);
    /* the rolls stay one apart on this handle: every later pair fails alike, none rolls another call's data */
    DCP_CHECK_STATUS(t.status[0][1], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_STATUS(t.status[1][2], DCP_ERR_OUT_OF_STEP);
}

/* ---- the plan checks' smaller bad inputs ---- */

DCP_TEST(plan_checks_refuse_non_positive_lengths_and_null_lengths)
{
    dcp_config c = small_config(2, 1);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const int32_t lengths[4] = {10, 20, 30, 40};
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 4, &plan));
    /* the valid plan against lengths with a non-positive entry: refused, naming it, stats untouched */
    int32_t bad[4] = {10, 20, 30, -40};
    dcp_plan_stats stats;
    memset(&stats, 0x5a, sizeof stats);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, plan, bad, 4, &stats), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "length 3 is -40");
    DCP_CHECK_EQ_INT(stats.total_tokens, 0x5a5a5a5a5a5a5a5all);
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, bad, 4, NULL), DCP_ERR_BAD_LENGTH);
    bad[3] = INT32_MIN;
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, plan, bad, 4, &stats), DCP_ERR_BAD_LENGTH);
    bad[3] = 0;
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, bad, 4, NULL), DCP_ERR_BAD_LENGTH);
    /* an argument error writes *violation too: a caller printing it never prints a stale one */
    dcp_plan_violation v;
    memset(&v, 0x5a, sizeof v);
    snprintf(v.message, sizeof v.message, "stale");
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, bad, 4, &v), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_EQ_INT(v.invariant, DCP_INVARIANT_NONE);
    DCP_CHECK_EQ_INT(v.id, 3);
    DCP_CHECK_EQ_INT(v.microbatch, -1);
    DCP_CHECK_EQ_INT(v.rank, -1);
    DCP_CHECK_CONTAINS(v.message, "length 3 is 0");
    memset(&v, 0x5a, sizeof v);
    snprintf(v.message, sizeof v.message, "stale");
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, lengths, 1 << 20, &v), DCP_ERR_CAPACITY);
    DCP_CHECK_EQ_INT(v.invariant, DCP_INVARIANT_NONE);
    DCP_CHECK_EQ_INT(v.id, -1);
    DCP_CHECK_CONTAINS(v.message, "1048576");
    memset(&v, 0x5a, sizeof v);
    snprintf(v.message, sizeof v.message, "stale");
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, NULL, lengths, 4, &v), DCP_ERR_NULL_POINTER);
    DCP_CHECK_EQ_INT(v.invariant, DCP_INVARIANT_NONE);
    DCP_CHECK_CONTAINS(v.message, "plan is NULL");
    /* NULL lengths are a NULL pointer, whatever the count */
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, NULL, 0, &plan), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, NULL, 4, &plan), DCP_ERR_NULL_POINTER);
    /* and the context still plans */
    DCP_CHECK_STATUS(dcp_plan_compute(ctx, lengths, 4, &plan), DCP_OK);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, plan, lengths, 4, &stats), DCP_OK);
    DCP_CHECK_EQ_INT(stats.total_tokens, 100);
    dcp_context_destroy(ctx);
}

/* ---- zigzag needs 2 x cp only where there is a cut: a 23-token span on one rank steps ---- */

DCP_TEST(an_odd_span_on_one_rank_is_not_cut)
{
    dcp_config c = small_config(1, 1);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    dcp_inproc_world *w = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, 30000, &w));
    dcp_comm world;
    DCP_REQUIRE_OK(dcp_inproc_comm(w, 0, &world));
    int64_t tokens[23], labels[23], positions[23];
    float mask[23];
    for (int i = 0; i < 23; i++) tokens[i] = 500 + i, labels[i] = i, positions[i] = i, mask[i] = 1.0f;
    dcp_sample s = {tokens, labels, mask, positions, 23, NULL, 0, 23, 23};
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world;
    args.data_context_parallel = &world;
    const dcp_step_output *out = NULL;
    DCP_REQUIRE_OK(dcp_step(ctx, &args, &in, &out));
    DCP_REQUIRE_EQ_INT(out->num_microbatches, 1);
    DCP_CHECK_EQ_INT(out->microbatches[0].local_cp_size, 1);
    DCP_CHECK_EQ_INT(out->microbatches[0].num_tokens, 23);
    for (int i = 0; i < 23; i++) DCP_CHECK_EQ_INT(out->microbatches[0].tokens[i], 500 + i);
    dcp_inproc_world_destroy(w);
    dcp_context_destroy(ctx);
}

/* ---- after a timeout, every waiting rank's message names the rank that never came ---- */

typedef struct absent_test {
    dcp_inproc_world *world;
    dcp_status status[3];
    char message[3][512];
} absent_test;

static void absent_rank(int32_t rank, void *arg)
{
    absent_test *t = arg;
    if (rank == 2) return; /* never calls: its process died, say */
    dcp_config c = small_config(3, 1);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm world;
    dcp_inproc_comm(t->world, rank, &world);
    t->status[rank] = step_on(ctx, &world, rank, 0, 0, 0, NULL, NULL);
    snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
}

DCP_TEST(after_a_timeout_every_waiting_rank_names_the_absent_rank)
{
    absent_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(3, 200, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(3, absent_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r], DCP_ERR_TIMEOUT);
        DCP_CHECK_CONTAINS(t.message[r], "rank 2 did not arrive at collective 1 within 200 ms");
    }
}

/* ---- gathers and MTP rolls: a rank that skips a whole call, caught by step ids ---- */

typedef struct whole_skip_test {
    dcp_inproc_world *world;
    int use_ids;
    dcp_status status[2][3];
    int32_t num[2][3], lengths[2][3][8];
    int calls[2];
} whole_skip_test;

/* Batch k's lengths on DP rank r: {10k + r + 1, 10k + r + 5}.  Rank 1 never makes batch 0's gather (rank 0 makes
   batches 0 and 1, rank 1 batches 1 and 2: two calls each, so nobody waits for a call that never comes). */
static void whole_skip_gather_rank(int32_t rank, void *arg)
{
    whole_skip_test *t = arg;
    dcp_config c = small_config(2, 1);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    for (int k = rank == 1 ? 1 : 0; k < (rank == 1 ? 3 : 2); k++) {
        const int32_t lengths[2] = {10 * k + rank + 1, 10 * k + rank + 5};
        const int32_t *global = NULL, *offsets = NULL;
        int32_t num = 0;
        int i = t->calls[rank]++;
        t->status[rank][i] = dcp_gather(ctx, &comm, t->use_ids ? (uint64_t)k + 1 : 0, lengths, 2, &global, &num,
                                        &offsets);
        if (t->status[rank][i] == DCP_OK) {
            t->num[rank][i] = num;
            memcpy(t->lengths[rank][i], global, sizeof(int32_t) * (size_t)(num < 8 ? num : 8));
        }
    }
    dcp_context_destroy(ctx);
}

DCP_TEST(a_gather_a_rank_never_made_is_out_of_step_with_step_ids)
{
    whole_skip_test t;
    memset(&t, 0, sizeof t);
    t.use_ids = 1;
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, whole_skip_gather_rank, &t));
    dcp_inproc_world_destroy(t.world);
    /* rank 0's batch 0 meets rank 1's batch 1: both see it; then every call refuses until a resync */
    DCP_CHECK_STATUS(t.status[0][0], DCP_ERR_OUT_OF_STEP);
    DCP_CHECK_STATUS(t.status[1][0], DCP_ERR_OUT_OF_STEP);
    for (int r = 0; r < 2; r++)
        for (int i = 1; i < t.calls[r]; i++) DCP_CHECK_STATUS(t.status[r][i], DCP_ERR_OUT_OF_STEP);
    /* without step ids the same skip pairs two batches: the documented limit of call counts alone */
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, whole_skip_gather_rank, &t));
    dcp_inproc_world_destroy(t.world);
    DCP_CHECK_STATUS(t.status[0][0], DCP_OK);
    DCP_CHECK_EQ_INT(t.lengths[0][0][0], 1);  /* rank 0's batch 0 */
    DCP_CHECK_EQ_INT(t.lengths[0][0][2], 12); /* beside rank 1's batch 1 */
}

typedef struct whole_skip_roll_test {
    dcp_inproc_world *world;
    dcp_status status[2][3];
    int calls[2];
} whole_skip_roll_test;

static void whole_skip_roll_rank(int32_t rank, void *arg)
{
    whole_skip_roll_test *t = arg;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    const int32_t cu[2] = {0, 8};
    int64_t field[4] = {1, 2, 3, 4}, out[4];
    const void *fields[1] = {field};
    void *outs[1] = {out};
    const size_t sizes[1] = {8};
    unsigned char exchange[4096];
    if (dcp_mtp_roll_exchange_bytes(2, sizes, 1, comm.size) > sizeof exchange) return;
    for (int k = rank == 1 ? 1 : 0; k < (rank == 1 ? 3 : 2); k++) /* rank 1 never makes roll 0; rank 0 stops at 1 */
        t->status[rank][t->calls[rank]++] =
            dcp_mtp_roll(&comm, (uint64_t)k + 1, 0, 2, DCP_CP_ZIGZAG, cu, 2, 4, fields, outs, sizes, 1, exchange);
}

DCP_TEST(an_mtp_roll_a_rank_never_made_is_out_of_step_with_step_ids)
{
    whole_skip_roll_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, whole_skip_roll_rank, &t));
    dcp_inproc_world_destroy(t.world);
    /* rank 0's rolls 0 and 1 meet rank 1's rolls 1 and 2: every pair meets a different step id, so every roll is
       out of step, never a boundary value from another roll */
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_EQ_INT(t.calls[r], 2);
        for (int i = 0; i < 2; i++) DCP_CHECK_STATUS(t.status[r][i], DCP_ERR_OUT_OF_STEP);
    }
}

/* ---- PP stages and TP peers that hold data must hold the same batch ---- */

typedef struct peers_test {
    int tp;              /* 0: PP 2 (rank = stage); 1: TP 2 with every TP rank holding data */
    int differ;          /* 0 same batch; 1 rank 1 other lengths; 2 rank 1 other tokens; 3 rank 1 other loss_mask */
    int skip_check;
    dcp_inproc_world *world, *lane[2];
    dcp_status status[2];
    char message[2][256];
} peers_test;

static void peers_rank(int32_t rank, void *arg)
{
    peers_test *t = arg;
    dcp_config c = small_config(1, 1);
    if (t->tp) c.tensor_parallel_size = 2;
    else c.pipeline_parallel_size = 2;
    c.skip_sibling_data_check = t->skip_check;
    dcp_context *ctx = NULL;
    t->status[rank] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm world, lane;
    dcp_inproc_comm(t->world, rank, &world);
    dcp_inproc_comm(t->lane[rank], 0, &lane);
    sample_buffers b;
    fill(&b, t->differ == 2 && rank == 1 ? 700 : 100);
    if (t->differ == 3 && rank == 1) b.mask[5] = 0.0f;
    dcp_sample s = sample_of(&b);
    if (t->differ == 1 && rank == 1) s.num_tokens = s.padded_length = s.original_length = TOKENS - 2;
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world;
    args.data_context_parallel = &lane;
    args.pipeline_rank = t->tp ? 0 : rank;
    args.tp_ranks_hold_data = t->tp;
    const dcp_step_output *out = NULL;
    t->status[rank] = dcp_step(ctx, &args, &in, &out);
    snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
}

static void run_peers(peers_test *t, int tp, int differ, int skip_check)
{
    memset(t, 0, sizeof *t);
    t->tp = tp;
    t->differ = differ;
    t->skip_check = skip_check;
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t->world));
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, 30000, &t->lane[0]));
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, 30000, &t->lane[1]));
    DCP_REQUIRE_OK(dcp_inproc_run(2, peers_rank, t));
    dcp_inproc_world_destroy(t->world);
    dcp_inproc_world_destroy(t->lane[0]);
    dcp_inproc_world_destroy(t->lane[1]);
}

/* Run one case and check both ranks: the status, and (when given) a part of the message. */
static void expect_peers(int tp, int differ, int skip_check, dcp_status want, const char *message)
{
    peers_test t;
    run_peers(&t, tp, differ, skip_check);
    for (int r = 0; r < 2; r++) {
        if (t.status[r] != want)
            dcp_test_fail(__FILE__, __LINE__, "%s, case %d%s: rank %d got %s, expected %s", tp ? "TP 2" : "PP 2", differ,
                          skip_check ? " (check skipped)" : "", r, dcp_status_str(t.status[r]), dcp_status_str(want));
        if (message) DCP_CHECK_CONTAINS(t.message[r], message);
    }
}

DCP_TEST(pp_stages_holding_other_lengths_or_tokens_fail_on_every_rank)
{
    expect_peers(0, 0, 0, DCP_OK, NULL);
    expect_peers(0, 1, 0, DCP_ERR_CORRUPT_INPUT, "ranks 0 (PP stage 0) and 1 (PP stage 1) hold different sequences");
    expect_peers(0, 2, 0, DCP_ERR_CORRUPT_INPUT, "hold the same lengths with different tokens");
    /* with the check skipped only lengths are compared: the documented trade */
    expect_peers(0, 2, 1, DCP_OK, NULL);
    expect_peers(0, 1, 1, DCP_ERR_CORRUPT_INPUT, "hold different sequences");
}

DCP_TEST(tp_peers_holding_data_with_other_tokens_fail_on_every_rank)
{
    expect_peers(1, 0, 0, DCP_OK, NULL);
    expect_peers(1, 2, 0, DCP_ERR_CORRUPT_INPUT, "hold the same lengths with different tokens");
    expect_peers(1, 3, 0, DCP_ERR_CORRUPT_INPUT, "different loss_mask");
    expect_peers(1, 1, 0, DCP_ERR_CORRUPT_INPUT, "hold different sequences");
}
