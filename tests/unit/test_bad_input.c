/*
 * test_bad_input.c - every kind of bad input the public API can receive
 * (configuration, context, planning, validation, gather, step, communicator
 * sizes, CUDA and NCCL entry points): the status it gets, the message naming
 * the offending value, nothing written to the caller's outputs, and a context
 * that works afterwards exactly as a fresh one does (same status and plan
 * hash for a good batch, same packed tokens for a good step).
 *
 * The README's bad-input table points at these cases (and at the narrower or
 * multi-rank ones in test_config.c, test_stage_validate.c, test_stage_bucket.c,
 * test_gather.c, test_step.c, test_comm.c, test_mtp_roll.c, test_gdn_pad.c).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "dcp_test.h"
#include "../core/plan.h"

#include <stdlib.h>
#include <time.h>

/* ---- a one-rank communicator: collectives are local copies ---- */

static dcp_status solo_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    (void)comm;
    if (bytes) memmove(recv, send, bytes);
    return DCP_OK;
}

static dcp_status solo_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                                  const size_t *recv_bytes, const size_t *recv_offsets)
{
    (void)comm;
    (void)recv_bytes;
    if (send_bytes) memmove((char *)recv + recv_offsets[0], send, send_bytes);
    return DCP_OK;
}

static dcp_status solo_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes,
                                 const size_t *send_offsets, void *recv, const size_t *recv_bytes,
                                 const size_t *recv_offsets)
{
    (void)comm;
    (void)recv_bytes;
    if (send_bytes[0]) memmove((char *)recv + recv_offsets[0], (const char *)send + send_offsets[0], send_bytes[0]);
    return DCP_OK;
}

static dcp_status solo_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    (void)comm;
    (void)buffer;
    (void)bytes;
    (void)root;
    return DCP_OK;
}

static dcp_status solo_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    (void)comm;
    *agreed = local;
    *failed_rank = local == DCP_OK ? -1 : 0;
    return DCP_OK;
}

static const dcp_comm_ops solo_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), solo_allgather, solo_allgatherv, solo_alltoallv, solo_broadcast,
    solo_agree, NULL,
};

/*
 * Tables dcpack must refuse without calling through: another version, a
 * size short of this version's layout, a required operation missing.  Their
 * operations count the calls that reached them.
 */
static int trap_calls;
static dcp_status trap_allgather(dcp_comm *c, const void *s, size_t b, void *r)
{
    (void)c, (void)s, (void)b, (void)r;
    trap_calls++;
    return DCP_ERR_COMM;
}
static dcp_status trap_allgatherv(dcp_comm *c, const void *s, size_t sb, void *r, const size_t *rb, const size_t *ro)
{
    (void)c, (void)s, (void)sb, (void)r, (void)rb, (void)ro;
    trap_calls++;
    return DCP_ERR_COMM;
}
static dcp_status trap_alltoallv(dcp_comm *c, const void *s, const size_t *sb, const size_t *so, void *r,
                                 const size_t *rb, const size_t *ro)
{
    (void)c, (void)s, (void)sb, (void)so, (void)r, (void)rb, (void)ro;
    trap_calls++;
    return DCP_ERR_COMM;
}
static dcp_status trap_broadcast(dcp_comm *c, void *b, size_t n, int32_t root)
{
    (void)c, (void)b, (void)n, (void)root;
    trap_calls++;
    return DCP_ERR_COMM;
}
static dcp_status trap_agree(dcp_comm *c, dcp_status l, dcp_status *a, int32_t *f)
{
    (void)c, (void)l, (void)a, (void)f;
    trap_calls++;
    return DCP_ERR_COMM;
}
static const dcp_comm_ops version_2_ops = {2, sizeof(dcp_comm_ops), trap_allgather, trap_allgatherv, trap_alltoallv,
                                           trap_broadcast, trap_agree, NULL};
static const dcp_comm_ops version_0_ops = {0, sizeof(dcp_comm_ops), trap_allgather, trap_allgatherv, trap_alltoallv,
                                           trap_broadcast, trap_agree, NULL};
static const dcp_comm_ops short_ops = {DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops) - sizeof(void *), trap_allgather,
                                       trap_allgatherv, trap_alltoallv, trap_broadcast, trap_agree, NULL};
static const dcp_comm_ops no_agree_ops = {DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), trap_allgather,
                                          trap_allgatherv, trap_alltoallv, trap_broadcast, NULL, NULL};

static dcp_comm solo_comm(void)
{
    dcp_comm comm = {&solo_ops, 0, 1, NULL, 0};
    return comm;
}

/* ---- helpers ---- */

static const int32_t good_lengths[8] = {700, 100, 300, 900, 50, 20, 400, 1000};

static dcp_config small_config(dcp_scheduler scheduler)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = scheduler;
    c.data_parallel_size = 2;
    c.context_parallel_size = 2;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 1000;
    return c;
}

static int scheduler_built(dcp_scheduler scheduler)
{
    dcp_config c = small_config(scheduler);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return 0;
    const dcp_plan *plan;
    int built = dcp_plan_compute(ctx, good_lengths, 8, &plan) != DCP_ERR_UNSUPPORTED;
    dcp_context_destroy(ctx);
    if (!built) printf("note: scheduler %s is not built; not checked\n", dcp_scheduler_name(scheduler));
    return built;
}

/* Status and hash of the good batch on `ctx`. */
static dcp_status good_plan(dcp_context *ctx, uint64_t *hash)
{
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, good_lengths, 8, &plan);
    *hash = st == DCP_OK ? dcp_plan_hash(plan) : 0;
    return st;
}

/* The context plans the good batch exactly as a fresh context with its configuration does. */
static void check_usable(dcp_context *ctx, const char *after, int line)
{
    dcp_context *fresh = NULL;
    if (dcp_context_create(dcp_context_config(ctx), &fresh) != DCP_OK) {
        dcp_test_fail(__FILE__, line, "fresh context failed");
        return;
    }
    uint64_t h_fresh, h_used;
    dcp_status s_fresh = good_plan(fresh, &h_fresh), s_used = good_plan(ctx, &h_used);
    if (s_fresh != DCP_OK || s_used != s_fresh || h_used != h_fresh)
        dcp_test_fail(__FILE__, line, "after %s: good batch gives %s (hash %llx), fresh context %s (hash %llx)", after,
                      dcp_status_str(s_used), (unsigned long long)h_used, dcp_status_str(s_fresh),
                      (unsigned long long)h_fresh);
    dcp_context_destroy(fresh);
}

/* Expect `got` == `want`, the message to name `part`, and the context to stay usable. */
static void expect_error(dcp_context *ctx, dcp_status got, dcp_status want, const char *part, const char *what,
                         int line)
{
    if (got != want)
        dcp_test_fail(__FILE__, line, "%s: got %s, expected %s (%s)", what, dcp_status_str(got), dcp_status_str(want),
                      dcp_context_last_error(ctx));
    if (!strstr(dcp_context_last_error(ctx), part))
        dcp_test_fail(__FILE__, line, "%s: message \"%s\" does not name \"%s\"", what, dcp_context_last_error(ctx),
                      part);
    if (dcp_test_message_cut(dcp_context_last_error(ctx)))
        dcp_test_fail(__FILE__, line, "%s: message \"%s\" was cut short", what, dcp_context_last_error(ctx));
    check_usable(ctx, what, line);
}

/* ---- dcp_plan_compute ---- */

DCP_TEST(plan_compute_bad_inputs)
{
    const dcp_plan *sentinel = (const dcp_plan *)&good_lengths; /* never a plan: must stay untouched */
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        if (!scheduler_built((dcp_scheduler)s)) continue;
        dcp_config c = small_config((dcp_scheduler)s);
        dcp_context *ctx = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const dcp_plan *plan = sentinel;
        const int32_t nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        const int32_t zero[3] = {5, 0, 5}, negative[3] = {5, -3, 5}, minimum[2] = {INT32_MIN, 1};
        /* longer than the largest group: 2 static CP ranks (dp_balanced) or all 4 ranks, of 1000 tokens */
        const int32_t too_long[2] = {1, s == DCP_SCHEDULER_DP_BALANCED ? 2001 : 4001};

        DCP_CHECK_STATUS(dcp_plan_compute(NULL, good_lengths, 8, &plan), DCP_ERR_NULL_POINTER);
        expect_error(ctx, dcp_plan_compute(ctx, good_lengths, 8, NULL), DCP_ERR_NULL_POINTER, "plan is NULL",
                     "NULL plan", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, NULL, 3, &plan), DCP_ERR_NULL_POINTER, "lengths is NULL",
                     "NULL lengths", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, good_lengths, -1, &plan), DCP_ERR_INVALID_ARGUMENT, "-1",
                     "negative count", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, good_lengths, 0, &plan), DCP_ERR_INVALID_ARGUMENT, "empty batch",
                     "empty batch", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, nine, 9, &plan), DCP_ERR_CAPACITY, "max_sequences = 8",
                     "more sequences than max_sequences", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, zero, 3, &plan), DCP_ERR_BAD_LENGTH, "sequence 1 has length 0",
                     "zero length", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, negative, 3, &plan), DCP_ERR_BAD_LENGTH, "length -3",
                     "negative length", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, minimum, 2, &plan), DCP_ERR_BAD_LENGTH, "-2147483648",
                     "INT32_MIN length", __LINE__);
        expect_error(ctx, dcp_plan_compute(ctx, too_long, 2, &plan), DCP_ERR_BAD_LENGTH,
                     s == DCP_SCHEDULER_DP_BALANCED ? "2001" : "4001", "length beyond the largest group", __LINE__);
        DCP_CHECK(plan == sentinel); /* no failure wrote the output */
        dcp_context_destroy(ctx);

        /* more microbatches than max_microbatches: a capacity error, not a write past the tables */
        c.max_microbatches = 1;
        DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
        const int32_t full[8] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}; /* 2 per rank: 2 microbatches */
        expect_error(ctx, dcp_plan_compute(ctx, full, 8, &plan), DCP_ERR_CAPACITY, "max_microbatches",
                     "more microbatches than max_microbatches", __LINE__);
        DCP_CHECK(plan == sentinel);
        dcp_context_destroy(ctx);
    }
}

DCP_TEST(plan_compute_infeasible_vpp)
{
    /* dp_balanced, DP 2 x VPP group 4: 3 sequences cannot make 8 packs */
    dcp_config c = small_config(DCP_SCHEDULER_DP_BALANCED);
    c.pipeline_parallel_size = 2;
    c.virtual_pipeline_size = 2;
    c.microbatch_group_size_per_vp_stage = 4;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan = NULL;
    const int32_t three[3] = {10, 20, 30};
    expect_error(ctx, dcp_plan_compute(ctx, three, 3, &plan), DCP_ERR_INFEASIBLE, "3 sequences", "VPP infeasible",
                 __LINE__);
    DCP_CHECK(plan == NULL);
    dcp_context_destroy(ctx);
}

/* ---- dcp_plan_validate and dcp_plan_stats_compute on hand-made plans ---- */

typedef struct {
    int32_t mb[4], first_rank[8], cp[8], first_id[9], ids[8];
    dcp_plan plan;
} hand_plan;

/* A valid plan of the good batch on 4 ranks: mb 0 = {3} on [0,2), {7} on [2,4); mb 1 = the rest on all 4. */
static void hand_plan_init(hand_plan *h)
{
    memset(h, 0, sizeof *h);
    h->plan = (dcp_plan){.num_ranks = 4, .microbatch_first_group = h->mb, .group_first_rank = h->first_rank,
                         .group_cp_size = h->cp, .group_first_id = h->first_id, .ids = h->ids,
                         .max_microbatches = 3, .max_groups = 8, .max_ids = 8};
    dcp__plan_clear(&h->plan, 4);
    dcp__plan_open_microbatch(&h->plan, NULL);
    dcp__plan_push_group(&h->plan, 0, 2, (int32_t[]){3}, 1, NULL);
    dcp__plan_push_group(&h->plan, 2, 2, (int32_t[]){7}, 1, NULL);
    dcp__plan_close_microbatch(&h->plan);
    dcp__plan_open_microbatch(&h->plan, NULL);
    dcp__plan_push_group(&h->plan, 0, 4, (int32_t[]){0, 1, 2, 4, 5, 6}, 6, NULL);
    dcp__plan_close_microbatch(&h->plan);
}

DCP_TEST(validate_and_stats_bad_inputs)
{
    dcp_config c = small_config(DCP_SCHEDULER_DP_BALANCED);
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    hand_plan h;
    hand_plan_init(&h);
    dcp_plan_stats stats, untouched;
    memset(&untouched, 0x5A, sizeof untouched);
    stats = untouched;
    DCP_REQUIRE_OK(dcp_plan_validate(ctx, &h.plan, good_lengths, 8, NULL));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, &h.plan, good_lengths, 8, &stats));
    DCP_CHECK_EQ_INT(stats.total_tokens, 3470);

    DCP_CHECK_STATUS(dcp_plan_validate(NULL, &h.plan, good_lengths, 8, NULL), DCP_ERR_NULL_POINTER);
    expect_error(ctx, dcp_plan_validate(ctx, NULL, good_lengths, 8, NULL), DCP_ERR_NULL_POINTER, "plan is NULL",
                 "validate NULL plan", __LINE__);
    expect_error(ctx, dcp_plan_validate(ctx, &h.plan, NULL, 8, NULL), DCP_ERR_NULL_POINTER, "lengths is NULL",
                 "validate NULL lengths", __LINE__);
    expect_error(ctx, dcp_plan_validate(ctx, &h.plan, good_lengths, -2, NULL), DCP_ERR_CAPACITY, "-2",
                 "validate negative count", __LINE__);
    expect_error(ctx, dcp_plan_validate(ctx, &h.plan, good_lengths, 9, NULL), DCP_ERR_CAPACITY, "9",
                 "validate count over max_sequences", __LINE__);

    /* garbage counts and offsets are caught before any array is read past its capacity */
    const struct { int32_t *field; int32_t value; const char *part; } corruptions[] = {
        {&h.plan.num_microbatches, -1, "capacity"},
        {&h.plan.num_microbatches, INT32_MAX, "capacity"},
        {&h.plan.num_groups, 1000, "capacity"},
        {&h.plan.num_ids, -5, "capacity"},
        {&h.plan.num_ranks, 0, "plan has 0 ranks"},
        {&h.mb[1], 7, "invalid"},
        {&h.mb[1], -1, "invalid"},
        {&h.first_id[1], 9, "invalid"},
        {&h.first_id[2], -4, "invalid"},
        {&h.first_rank[1], INT32_MAX, "leaves ranks"},
        {&h.cp[2], INT32_MIN, "leaves ranks"},
        {&h.ids[7], INT32_MAX, "out of range"},
    };
    for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
        hand_plan_init(&h);
        *corruptions[i].field = corruptions[i].value;
        dcp_plan_violation v;
        char what[64];
        snprintf(what, sizeof what, "corruption %zu", i);
        expect_error(ctx, dcp_plan_validate(ctx, &h.plan, good_lengths, 8, &v), DCP_ERR_INVALID_PLAN,
                     corruptions[i].part, what, __LINE__);
        /* statistics refuse the same plan instead of walking it */
        stats = untouched;
        expect_error(ctx, dcp_plan_stats_compute(ctx, &h.plan, good_lengths, 8, &stats), DCP_ERR_INVALID_PLAN,
                     corruptions[i].part, what, __LINE__);
        DCP_CHECK(memcmp(&stats, &untouched, sizeof stats) == 0);
    }

    /* a stale plan: computed for another batch */
    hand_plan_init(&h);
    const int32_t other[6] = {1, 2, 3, 4, 5, 6};
    expect_error(ctx, dcp_plan_stats_compute(ctx, &h.plan, other, 6, &stats), DCP_ERR_INVALID_PLAN,
                 "8 ids for 6 sequences", "stats of a stale plan", __LINE__);
    expect_error(ctx, dcp_plan_stats_compute(ctx, &h.plan, good_lengths, 100, &stats), DCP_ERR_CAPACITY,
                 "num_lengths 100", "stats count over max_sequences", __LINE__);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(NULL, &h.plan, good_lengths, 8, &stats), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, NULL, good_lengths, 8, &stats), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, &h.plan, NULL, 8, &stats), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, &h.plan, good_lengths, 8, NULL), DCP_ERR_NULL_POINTER);

    /* plan queries with out-of-range arguments answer "none" */
    hand_plan_init(&h);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(NULL, 0, 0), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, -1, 0), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, 2, 0), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, INT32_MAX, 0), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, 0, -1), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, 0, 4), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, 0, INT32_MAX), -1);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&h.plan, 1, 3), 2);
    dcp_context_destroy(ctx);
}

/* ---- dcp_gather and dcp_gather_packed ---- */

static void check_gather_usable(dcp_context *ctx, dcp_comm *comm, int line)
{
    const int32_t *lengths = NULL, *offsets = NULL;
    int32_t n = -1;
    dcp_status st = dcp_gather(ctx, comm, 0, good_lengths, 8, &lengths, &n, &offsets);
    if (st != DCP_OK || n != 8 || memcmp(lengths, good_lengths, sizeof good_lengths) != 0 || offsets[1] != 8)
        dcp_test_fail(__FILE__, line, "good gather after a failure: %s, %d sequences", dcp_status_str(st), n);
    check_usable(ctx, "gather", line);
}

DCP_TEST(gather_bad_inputs)
{
    dcp_config c = small_config(DCP_SCHEDULER_DP_BALANCED);
    c.data_parallel_size = 1;
    c.context_parallel_size = 4;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    dcp_comm comm = solo_comm();
    const int32_t *lengths = NULL, *offsets = NULL;
    int32_t n = -1;
#define GATHER_FAILS(call, want, part)                                                                         \
    do {                                                                                                       \
        lengths = NULL;                                                                                        \
        offsets = NULL;                                                                                        \
        n = -1;                                                                                                \
        expect_error(ctx, (call), (want), (part), #call, __LINE__);                                            \
        DCP_CHECK(lengths == NULL && offsets == NULL && n == -1);                                              \
        check_gather_usable(ctx, &comm, __LINE__);                                                             \
    } while (0)

    DCP_CHECK_STATUS(dcp_gather(NULL, &comm, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_NULL_POINTER);
    GATHER_FAILS(dcp_gather(ctx, NULL, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    dcp_comm no_ops = comm;
    no_ops.ops = NULL;
    GATHER_FAILS(dcp_gather(ctx, &no_ops, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, NULL, 8, &lengths, &n, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, good_lengths, 8, NULL, &n, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, good_lengths, 8, &lengths, NULL, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, good_lengths, 8, &lengths, &n, NULL), DCP_ERR_NULL_POINTER, "NULL");
    dcp_comm two = comm;
    two.size = 2;
    GATHER_FAILS(dcp_gather(ctx, &two, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "communicator has 2 ranks, data_parallel_size is 1");
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, good_lengths, -1, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "num_local -1");
    const int32_t negative[3] = {4, -9, 4};
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, negative, 3, &lengths, &n, &offsets), DCP_ERR_BAD_LENGTH, "length -9");
    const int32_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    GATHER_FAILS(dcp_gather(ctx, &comm, 0, nine, 9, &lengths, &n, &offsets), DCP_ERR_CAPACITY, "max_sequences = 8");
    /* zero-length samples are dropped, so nine with one empty fit */
    const int32_t nine_one_empty[9] = {1, 1, 1, 0, 1, 1, 1, 1, 1};
    DCP_CHECK_STATUS(dcp_gather(ctx, &comm, 0, nine_one_empty, 9, &lengths, &n, &offsets), DCP_OK);
    DCP_CHECK_EQ_INT(n, 8);

    /* pre-packed: cu_seqlens must start at 0, never decrease, and stay within total_tokens */
    const int32_t cu_good[4] = {0, 7, 7, 12};
    const int32_t cu_start[3] = {1, 7, 12}, cu_down[4] = {0, 7, 5, 12}, cu_wrap[3] = {0, INT32_MAX, INT32_MIN};
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, NULL, 4, 12, &lengths, &n, &offsets), DCP_ERR_NULL_POINTER, "NULL");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_good, 0, 12, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "0 cu_seqlens entries");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_good, -3, 12, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "-3 cu_seqlens entries");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_good, 4, -1, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "-1 tokens");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_start, 3, 12, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "cu_seqlens[0] is 1");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_down, 4, 12, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "decreases at 2");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_good, 4, 11, &lengths, &n, &offsets), DCP_ERR_CORRUPT_INPUT,
                 "cu_seqlens[3] = 12 is past the 11 tokens");
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_wrap, 3, INT64_MAX, &lengths, &n, &offsets),
                 DCP_ERR_CORRUPT_INPUT, "decreases at 2");
    int32_t cu_many[11];
    for (int i = 0; i < 11; i++) cu_many[i] = 3 * i;
    GATHER_FAILS(dcp_gather_packed(ctx, &comm, 0, cu_many, 11, 30, &lengths, &n, &offsets), DCP_ERR_CAPACITY,
                 "max_sequences = 8");
    /* a lone 0 is a packed sample with no sub-samples: nothing to gather, not an error */
    DCP_CHECK_STATUS(dcp_gather_packed(ctx, &comm, 0, cu_good, 1, 0, &lengths, &n, &offsets), DCP_OK);
    DCP_CHECK_EQ_INT(n, 0);
    DCP_CHECK_STATUS(dcp_gather_packed(ctx, &comm, 0, cu_good, 4, 12, &lengths, &n, &offsets), DCP_OK);
    DCP_CHECK_EQ_INT(n, 2);
    DCP_CHECK(lengths[0] == 7 && lengths[1] == 5);
    /* operations tables of another layout are refused, never called through */
    trap_calls = 0;
    dcp_comm bad = solo_comm(); /* the good one stays for the check that the context is still usable */
    bad.ops = &version_2_ops;
    GATHER_FAILS(dcp_gather(ctx, &bad, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "operations table is version 2, this dcpack reads version 1");
    bad.ops = &version_0_ops;
    GATHER_FAILS(dcp_gather(ctx, &bad, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "version 0");
    bad.ops = &short_ops;
    GATHER_FAILS(dcp_gather_packed(ctx, &bad, 0, cu_good, 4, 12, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "bytes, version 1 has");
    bad.ops = &no_agree_ops;
    GATHER_FAILS(dcp_gather(ctx, &bad, 0, good_lengths, 8, &lengths, &n, &offsets), DCP_ERR_INVALID_ARGUMENT,
                 "has no agree operation");
    DCP_CHECK_EQ_INT(trap_calls, 0);
#undef GATHER_FAILS
    dcp_context_destroy(ctx);
}

/* ---- contexts ---- */

DCP_TEST(context_bad_inputs)
{
    dcp_config c = small_config(DCP_SCHEDULER_DP_BALANCED);
    size_t need = 0;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &need));
    unsigned char *memory = malloc(need + 64);
    DCP_REQUIRE(memory);
    dcp_context *ctx = NULL;
    /* every size below the exact need, at an odd address, fails without touching *context */
    const size_t shorts[] = {0, 1, 63, 64, need / 2, need - 64, need - 1};
    for (size_t i = 0; i < sizeof shorts / sizeof shorts[0]; i++) {
        ctx = NULL;
        DCP_CHECK_STATUS(dcp_context_init_static(memory + 1, shorts[i], &c, &ctx), DCP_ERR_WORKSPACE_TOO_SMALL);
        DCP_CHECK(ctx == NULL);
    }
    DCP_REQUIRE_OK(dcp_context_init_static(memory + 1, need, &c, &ctx));
    /* the context keeps its own copy of the configuration */
    c.max_sequences = 1;
    DCP_CHECK_EQ_INT(dcp_context_config(ctx)->max_sequences, 8);
    check_usable(ctx, "caller changed the configuration", __LINE__);
    dcp_context_destroy(ctx);
    free(memory);

    DCP_CHECK_EQ_INT(dcp_context_workspace_bytes(NULL), 0);
    DCP_CHECK_EQ_INT(dcp_context_scratch_high_water(NULL), 0);
    dcp_scheduler s = DCP_SCHEDULER_BALANCED;
    DCP_CHECK_STATUS(dcp_scheduler_from_name(NULL, &s), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_scheduler_from_name("dp_balanced", NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_scheduler_from_name("", &s), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_scheduler_from_name("DP_BALANCED", &s), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_EQ_INT(s, DCP_SCHEDULER_BALANCED); /* untouched on failure */
    DCP_CHECK(strcmp(dcp_scheduler_name((dcp_scheduler)42), "unknown") == 0);
    dcp_config_default(NULL);
    dcp_cost_model_default(NULL);
    DCP_CHECK_EQ_INT(dcp_config_num_ranks(NULL), 0);
    char tiny[4];
    c.data_parallel_size = -1;
    DCP_CHECK_STATUS(dcp_config_validate(&c, tiny, sizeof tiny), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK(strlen(tiny) == 3); /* truncated, terminated */
    DCP_CHECK_STATUS(dcp_config_validate(&c, tiny, 0), DCP_ERR_INVALID_CONFIG);
}

/* ---- dcp_step on a one-rank world ---- */

typedef struct step_fixture {
    int64_t tokens[2][8], labels[2][8], position_ids[2][8];
    float loss_mask[2][8];
    int32_t cu[4];
    dcp_sample samples[2];
    dcp_step_input input;
    dcp_comm world, lane;
    dcp_step_args args;
} step_fixture;

/* Two samples of 8 tokens: one sequence with 6 real tokens, and a pre-packed one holding 3 + 5. */
static void step_fixture_init(step_fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 8; t++) {
            f->tokens[s][t] = 100 * s + t + 1;
            f->labels[s][t] = -(100 * s + t + 1);
            f->position_ids[s][t] = t;
            f->loss_mask[s][t] = 1.0f;
        }
    f->cu[0] = 0, f->cu[1] = 3, f->cu[2] = 8;
    for (int s = 0; s < 2; s++)
        f->samples[s] = (dcp_sample){f->tokens[s], f->labels[s], f->loss_mask[s], f->position_ids[s], 8, NULL, 0, 8, 6};
    f->samples[1].cu_seqlens = f->cu;
    f->samples[1].num_cu_seqlens = 3;
    f->input = (dcp_step_input){f->samples, 2, DCP_FIELD_ALL};
    f->world = solo_comm();
    f->lane = solo_comm();
    memset(&f->args, 0, sizeof f->args);
    f->args.world = &f->world;
    f->args.data_context_parallel = &f->lane;
}

static dcp_config step_config(void)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 64;
    c.max_tokens_per_rank = 64;
    return c;
}

/* A good step on `ctx` gives what it gives on a fresh context: same status, same packed tokens. */
static void check_step_usable(dcp_context *ctx, const char *after, int line)
{
    step_fixture good;
    step_fixture_init(&good);
    dcp_context *fresh = NULL;
    if (dcp_context_create(dcp_context_config(ctx), &fresh) != DCP_OK) {
        dcp_test_fail(__FILE__, line, "fresh context failed");
        return;
    }
    const dcp_step_output *a = NULL, *b = NULL;
    dcp_status sa = dcp_step(ctx, &good.args, &good.input, &a);
    dcp_status sb = dcp_step(fresh, &good.args, &good.input, &b);
    if (sa != DCP_OK || sb != DCP_OK || a->num_microbatches != b->num_microbatches)
        dcp_test_fail(__FILE__, line, "after %s: good step %s, fresh context %s", after, dcp_status_str(sa),
                      dcp_status_str(sb));
    else
        for (int32_t m = 0; m < a->num_microbatches; m++) {
            const dcp_microbatch *x = &a->microbatches[m], *y = &b->microbatches[m];
            if (x->num_tokens != y->num_tokens ||
                memcmp(x->tokens, y->tokens, (size_t)x->num_tokens * sizeof *x->tokens) != 0 ||
                memcmp(x->padding_mask, y->padding_mask, (size_t)x->num_tokens) != 0)
                dcp_test_fail(__FILE__, line, "after %s: microbatch %d differs from a fresh context's", after, m);
        }
    dcp_context_destroy(fresh);
}

DCP_TEST(step_bad_inputs)
{
    dcp_config c = step_config();
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture f;
    const dcp_step_output *out = NULL;
    const dcp_step_output *const untouched = (const dcp_step_output *)&f;

    /* the good input works: 3 sequences (6 of 8 real; 3; 5) */
    step_fixture_init(&f);
    DCP_REQUIRE_OK(dcp_step(ctx, &f.args, &f.input, &out));
    DCP_CHECK_EQ_INT(out->num_sequences, 3);

#define STEP_FAILS(mutation, want, part)                                                                     \
    do {                                                                                                     \
        step_fixture_init(&f);                                                                               \
        mutation;                                                                                            \
        out = untouched;                                                                                     \
        dcp_status got_ = dcp_step(ctx, &f.args, &f.input, &out);                                            \
        if (got_ != (want))                                                                                  \
            dcp_test_fail(__FILE__, __LINE__, "%s: got %s, expected %s (%s)", #mutation, dcp_status_str(got_), \
                          dcp_status_str(want), dcp_context_last_error(ctx));                                \
        DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), part);                                               \
        DCP_CHECK(out == untouched);                                                                         \
        check_step_usable(ctx, #mutation, __LINE__);                                                         \
    } while (0)

    DCP_CHECK_STATUS(dcp_step(NULL, &f.args, &f.input, &out), DCP_ERR_NULL_POINTER);
    /* arguments */
    STEP_FAILS(f.args.world = NULL, DCP_ERR_NULL_POINTER, "world communicator");
    STEP_FAILS(f.world.ops = NULL, DCP_ERR_NULL_POINTER, "world communicator");
    STEP_FAILS(f.args.data_context_parallel = NULL, DCP_ERR_NULL_POINTER, "DPxCP communicator");
    STEP_FAILS(f.lane.ops = NULL, DCP_ERR_NULL_POINTER, "DPxCP communicator");
    trap_calls = 0;
    STEP_FAILS(f.world.ops = &version_2_ops, DCP_ERR_INVALID_ARGUMENT,
               "world communicator's operations table is version 2");
    STEP_FAILS(f.world.ops = &short_ops, DCP_ERR_INVALID_ARGUMENT, "world communicator's operations table is");
    STEP_FAILS(f.lane.ops = &version_0_ops, DCP_ERR_INVALID_ARGUMENT,
               "DPxCP communicator's operations table is version 0");
    STEP_FAILS(f.lane.ops = &no_agree_ops, DCP_ERR_INVALID_ARGUMENT, "DPxCP communicator has no agree operation");
    DCP_CHECK_EQ_INT(trap_calls, 0);
    STEP_FAILS(f.lane.size = 2, DCP_ERR_INVALID_ARGUMENT, "DPxCP communicator has 2 ranks");
    STEP_FAILS(f.lane.rank = 1, DCP_ERR_INVALID_ARGUMENT, "rank 1");
    STEP_FAILS(f.lane.rank = -1, DCP_ERR_INVALID_ARGUMENT, "rank -1");
    STEP_FAILS(f.world.rank = 3, DCP_ERR_INVALID_ARGUMENT, "rank 3");
    STEP_FAILS(f.args.pipeline_rank = 1, DCP_ERR_INVALID_ARGUMENT, "pipeline_rank 1");
    STEP_FAILS(f.args.pipeline_rank = -1, DCP_ERR_INVALID_ARGUMENT, "pipeline_rank -1");
    STEP_FAILS(f.args.mtp_virtual_stages = 2, DCP_ERR_INVALID_ARGUMENT, "mtp_virtual_stages 0x2");
    dcp_comm tp_comm = solo_comm();
    tp_comm.size = 2;
    STEP_FAILS(f.args.tensor_parallel = &tp_comm, DCP_ERR_INVALID_ARGUMENT, "TP communicator has 2 ranks");
    dcp_comm tp_no_ops = solo_comm();
    tp_no_ops.ops = NULL;
    STEP_FAILS(f.args.tensor_parallel = &tp_no_ops, DCP_ERR_NULL_POINTER, "TP communicator has no operations");
    dcp_comm tp_bad_rank = solo_comm();
    tp_bad_rank.rank = 1;
    STEP_FAILS(f.args.tensor_parallel = &tp_bad_rank, DCP_ERR_INVALID_ARGUMENT, "TP communicator rank 1");
    /* the input */
    STEP_FAILS(f.input.fields = 0x10, DCP_ERR_FIELD_MISMATCH, "outside config.fields");
    STEP_FAILS(f.input.fields = DCP_FIELD_TOKENS | DCP_FIELD_LABELS, DCP_ERR_FIELD_MISMATCH, "needs fields");
    STEP_FAILS(f.input.num_samples = -1, DCP_ERR_INVALID_ARGUMENT, "-1 samples");
    STEP_FAILS(f.input.samples = NULL, DCP_ERR_INVALID_ARGUMENT, "2 samples");
    STEP_FAILS(f.samples[0].num_tokens = -8, DCP_ERR_CORRUPT_INPUT, "sample 0 has -8 tokens");
    STEP_FAILS(f.samples[1].labels = NULL, DCP_ERR_NULL_POINTER, "sample 1 has no labels buffer");
    STEP_FAILS(f.samples[0].padded_length = 9, DCP_ERR_CORRUPT_INPUT, "padded length 9 disagrees");
    STEP_FAILS(f.samples[0].original_length = 9, DCP_ERR_CORRUPT_INPUT, "original length 9 outside [0, 8]");
    STEP_FAILS(f.samples[0].original_length = -1, DCP_ERR_CORRUPT_INPUT, "original length -1");
    STEP_FAILS(f.samples[1].num_cu_seqlens = 0, DCP_ERR_CORRUPT_INPUT, "0 cu_seqlens entries");
    STEP_FAILS(f.cu[0] = 1, DCP_ERR_CORRUPT_INPUT, "cu_seqlens[0] is 1");
    STEP_FAILS(f.cu[1] = 9, DCP_ERR_CORRUPT_INPUT, "past its 8-token buffer");
    STEP_FAILS((f.cu[1] = 5, f.cu[2] = 4), DCP_ERR_CORRUPT_INPUT, "decreases at 2");
    STEP_FAILS(f.samples[1].num_tokens = 7, DCP_ERR_CORRUPT_INPUT, "past its 7-token buffer");
    dcp_context_destroy(ctx);

    /* capacities: tokens per rank, sequences */
    c.max_tokens_per_rank = 15;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture_init(&f);
    out = untouched;
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "max_tokens_per_rank = 15");
    DCP_CHECK(out == untouched);
    dcp_context_destroy(ctx);
    c.max_tokens_per_rank = 64;
    c.max_sequences = 2;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture_init(&f);
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "max_sequences = 2");
    dcp_context_destroy(ctx);
#undef STEP_FAILS
}

/* ---- configuration values test_config.c's table leaves out ---- */

/*
 * Every other field dcp_config_validate() checks: the status and message, and
 * the same refusal from dcp_workspace_size() (size untouched),
 * dcp_context_create() and dcp_context_init_static() (no context).
 */
DCP_TEST(config_bad_values_refused_by_every_entry_point)
{
    static unsigned char memory[1 << 16];
    enum { CASES = 17 };
    for (int i = 0; i < CASES; i++) {
        dcp_config c = small_config(DCP_SCHEDULER_DYNAMIC_CP);
        dcp_status want = DCP_ERR_INVALID_CONFIG;
        const char *part = "";
        switch (i) {
        case 0: c.virtual_pipeline_size = 0, part = "virtual_pipeline_size must be >= 1, got 0"; break;
        case 1: c.min_cp_size = 0, part = "min_cp_size must be >= 1, got 0"; break;
        case 2: c.world_size = -8, part = "world_size must be >= 0, got -8"; break;
        case 3: c.max_sequences_per_microbatch = -1, part = "max_sequences_per_microbatch must be >= 0, got -1"; break;
        case 4: c.max_tokens_per_rank = -1, part = "max_tokens_per_rank must be >= 0, got -1"; break;
        case 5:
            c.max_tokens_per_rank = ((int64_t)1 << 40) + 1, want = DCP_ERR_OVERFLOW;
            part = "max_tokens_per_rank 1099511627777 exceeds 2^40";
            break;
        case 6: c.max_microbatches = -1, part = "max_microbatches must be >= 0, got -1"; break;
        case 7: c.pad_alignment = -16, part = "pad_alignment must be >= 0, got -16"; break;
        case 8: c.pad_to_max_seqlen = 2, part = "pad_to_max_seqlen must be 0 or 1, got 2"; break;
        case 9: c.thd_tail_policy = (dcp_thd_tail)2, part = "thd_tail_policy 2 is not"; break;
        case 10: c.cp_partition = (dcp_cp_partition)-1, part = "cp_partition -1 is not"; break;
        case 11: c.cost.quadratic = -1, part = "cost.quadratic must be >= 0, got -1"; break;
        case 12: c.cost.linear = INT64_MIN, part = "cost.linear must be >= 0, got -9223372036854775808"; break;
        case 13: c.cost.round_latency = -3, part = "cost.round_latency must be >= 0, got -3"; break;
        case 14: c.scheduler = (dcp_scheduler)-1, part = "scheduler -1 is not one of"; break;
        case 15: c.fields = 1u << 31, part = "fields 0x80000000 has bits outside"; break;
        case 16: c.max_seqlen_per_rank = INT32_MIN, part = "max_seqlen_per_rank must be >= 1, got -2147483648"; break;
        }
        char message[256];
        dcp_status st = dcp_config_validate(&c, message, sizeof message);
        if (st != want)
            dcp_test_fail(__FILE__, __LINE__, "case %d: validate gave %s (%s), expected %s", i, dcp_status_str(st),
                          message, dcp_status_str(want));
        DCP_CHECK_CONTAINS(message, part);
        size_t size = 777;
        DCP_CHECK_STATUS(dcp_workspace_size(&c, &size), want);
        DCP_CHECK_EQ_INT(size, 777);
        dcp_context *ctx = NULL;
        DCP_CHECK_STATUS(dcp_context_create(&c, &ctx), want);
        DCP_CHECK(ctx == NULL);
        DCP_CHECK_STATUS(dcp_context_init_static(memory, sizeof memory, &c, &ctx), want);
        DCP_CHECK(ctx == NULL);
    }
}

/* ---- dcp_step: missing arguments, and the planner's errors reached through a step ---- */

DCP_TEST(step_missing_arguments_and_planning_errors)
{
    dcp_config c = step_config();
    c.max_tokens_per_rank = 128; /* room for the 100-token sample below */
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture f;
    const dcp_step_output *out = NULL;
    const char *required = "args and the world communicator are required";

    step_fixture_init(&f);
    DCP_CHECK_STATUS(dcp_step(ctx, NULL, &f.input, &out), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), required);
    DCP_CHECK(out == NULL);
    check_step_usable(ctx, "NULL args", __LINE__);
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "output is NULL");
    check_step_usable(ctx, "NULL output", __LINE__);
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, NULL, &out), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "input is NULL on a rank that holds data");
    DCP_CHECK(out == NULL);
    check_step_usable(ctx, "NULL input", __LINE__);

    /* a sequence longer than the one rank holds (M = 64): the planner's DCP_ERR_BAD_LENGTH */
    static int64_t long_tokens[100], long_labels[100], long_positions[100];
    static float long_mask[100];
    step_fixture_init(&f);
    f.samples[0] = (dcp_sample){long_tokens, long_labels, long_mask, long_positions, 100, NULL, 0, 100, 100};
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "length 100");
    DCP_CHECK(out == NULL);
    check_step_usable(ctx, "a sequence longer than the ranks hold", __LINE__);
    dcp_context_destroy(ctx);

    /* VPP: one sequence cannot make the 2 microbatches of a VPP group: DCP_ERR_INFEASIBLE */
    c = step_config();
    c.pipeline_parallel_size = 2;
    c.virtual_pipeline_size = 2;
    c.microbatch_group_size_per_vp_stage = 2;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture_init(&f);
    f.input.num_samples = 1;
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_ERR_INFEASIBLE);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "1 sequences cannot fill");
    DCP_CHECK(out == NULL);
    check_step_usable(ctx, "a VPP-infeasible batch", __LINE__); /* three sequences make 2 microbatches */
    dcp_context_destroy(ctx);

    /* TP 2 where only TP rank 0 holds the data, without a TP communicator */
    c = step_config();
    c.tensor_parallel_size = 2;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    step_fixture_init(&f);
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "tensor_parallel_size 2 needs a TP communicator");
    DCP_CHECK(out == NULL);
    f.args.tp_ranks_hold_data = 1; /* every TP rank holds the data: no TP communicator needed */
    DCP_CHECK_STATUS(dcp_step(ctx, &f.args, &f.input, &out), DCP_OK);
    DCP_CHECK(out != NULL && out->num_sequences == 3);
    dcp_context_destroy(ctx);
}

/* ---- dcp_step over two CP ranks: a span zigzag slicing cannot cut, a NULL output on one rank ---- */

typedef struct cp_step_test {
    dcp_inproc_world *world, *lane;
    int32_t lengths[3]; /* the sample's length in each step */
    dcp_status status[2][3];
    char message[2][256];
    int64_t tokens_computed[2];
} cp_step_test;

static void cp_step_rank(int32_t rank, void *arg)
{
    cp_step_test *t = arg;
    dcp_config c = step_config();
    c.context_parallel_size = 2; /* dp_balanced, DP 1 x CP 2, zigzag, no padding */
    dcp_context *ctx = NULL;
    t->status[rank][0] = t->status[rank][1] = t->status[rank][2] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    int64_t tokens[16], labels[16], positions[16];
    float mask[16];
    for (int i = 0; i < 16; i++) tokens[i] = labels[i] = positions[i] = i, mask[i] = 1.0f;
    dcp_comm world, lane;
    dcp_inproc_comm(t->world, rank, &world);
    dcp_inproc_comm(t->lane, rank, &lane);
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world;
    args.data_context_parallel = &lane;
    for (int k = 0; k < 3; k++) {
        /* CP siblings hold the same input; in step 1 rank 1 passes no output pointer */
        dcp_sample s = {tokens, labels, mask, positions, t->lengths[k], NULL, 0, t->lengths[k], t->lengths[k]};
        dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
        const dcp_step_output *out = NULL;
        t->status[rank][k] = dcp_step(ctx, &args, &in, k == 1 && rank == 1 ? NULL : &out);
        if (k == 0) snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(ctx));
        if (k == 2 && t->status[rank][k] == DCP_OK) t->tokens_computed[rank] = out->stats.tokens_computed;
    }
    dcp_context_destroy(ctx);
}

DCP_TEST(step_over_two_cp_ranks_uncuttable_span_and_null_output_fail_on_every_rank)
{
    cp_step_test t;
    memset(&t, 0, sizeof t);
    t.lengths[0] = 6; /* zigzag over CP 2 cuts a span into 4 equal chunks */
    t.lengths[1] = 8;
    t.lengths[2] = 12;
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.lane));
    DCP_REQUIRE_OK(dcp_inproc_run(2, cp_step_rank, &t));
    dcp_inproc_world_destroy(t.world);
    dcp_inproc_world_destroy(t.lane);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r][0], DCP_ERR_BAD_LENGTH);
        DCP_CHECK_STATUS(t.status[r][1], DCP_ERR_NULL_POINTER); /* agreed: rank 0 does not wait or pair on */
        DCP_CHECK_STATUS(t.status[r][2], DCP_OK);
        DCP_CHECK_EQ_INT(t.tokens_computed[r], 6); /* half of step 2's 12-token sequence on each rank */
    }
    /* each rank finds it while laying out its own slice, and names the span */
    DCP_CHECK_CONTAINS(t.message[0], "on rank 0: zigzag CP slicing: sequence 0 spans 6 slots, not divisible by 2*cp");
    DCP_CHECK_CONTAINS(t.message[1], "on rank 1: zigzag CP slicing: sequence 0 spans 6 slots");
}

/* ---- a communicator operation with sizes past SIZE_MAX ---- */

typedef struct overflow_test {
    dcp_inproc_world *world;
    dcp_status status[4][3];
    int64_t recv[4][3][4];
} overflow_test;

static void overflow_rank(int32_t rank, void *arg)
{
    overflow_test *t = arg;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    int64_t send = 10 + rank;
    for (int k = 0; k < 3; k++)
        for (int p = 0; p < 4; p++) t->recv[rank][k][p] = -1;
    /* rank 2 announces an allgather whose 4 blocks would not fit in size_t */
    t->status[rank][0] = comm.ops->allgather(&comm, &send, rank == 2 ? SIZE_MAX / 2 : sizeof send, t->recv[rank][0]);
    /* rank 1 places one allgatherv piece so that it ends past SIZE_MAX */
    size_t bytes[4], offsets[4];
    for (int p = 0; p < 4; p++) bytes[p] = sizeof(int64_t), offsets[p] = (size_t)p * sizeof(int64_t);
    if (rank == 1) offsets[3] = SIZE_MAX - 4;
    t->status[rank][1] = comm.ops->allgatherv(&comm, &send, sizeof send, t->recv[rank][1], bytes, offsets);
    /* and the world works afterwards */
    t->status[rank][2] = comm.ops->allgather(&comm, &send, sizeof send, t->recv[rank][2]);
}

DCP_TEST(communicator_sizes_past_size_max_abort_everywhere)
{
    overflow_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(4, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(4, overflow_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 4; r++) {
        DCP_CHECK_STATUS(t.status[r][0], DCP_ERR_OVERFLOW);
        DCP_CHECK_STATUS(t.status[r][1], DCP_ERR_OVERFLOW);
        DCP_CHECK_STATUS(t.status[r][2], DCP_OK);
        for (int p = 0; p < 4; p++) {
            DCP_CHECK_EQ_INT(t.recv[r][0][p], -1); /* nothing copied by an aborted collective */
            DCP_CHECK_EQ_INT(t.recv[r][1][p], -1);
            DCP_CHECK_EQ_INT(t.recv[r][2][p], 10 + p);
        }
    }
}

/* ---- CUDA and NCCL entry points on a machine or build without them ---- */

DCP_TEST(cuda_and_nccl_entry_points_refuse_cleanly)
{
    dcp_config c = step_config();
    dcp_context *ctx = NULL, *planning = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    size_t device = 7, host = 7;
    dcp_status st = dcp_cuda_workspace_size(&c, &device, &host);
    DCP_CHECK_STATUS(dcp_context_attach_cuda(NULL, NULL, 0, NULL, 0), DCP_ERR_NULL_POINTER);
    if (st == DCP_ERR_UNSUPPORTED) {
        /* built without CUDA: every entry point says so and writes nothing */
        DCP_CHECK(device == 7 && host == 7);
        DCP_CHECK_EQ_INT(dcp_cuda_device_count(), 0);
        DCP_CHECK_STATUS(dcp_context_attach_cuda(ctx, NULL, 0, NULL, 0), DCP_ERR_UNSUPPORTED);
        DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "built without CUDA");
        unsigned char rows[8] = {0};
        DCP_CHECK_STATUS(dcp_gdn_pad_cuda(rows, 1, 1, 4, NULL, 0, rows, 8, NULL, NULL), DCP_ERR_UNSUPPORTED);
        DCP_CHECK_STATUS(dcp_gdn_strip_cuda(rows, 1, 1, rows, NULL), DCP_ERR_UNSUPPORTED);
        DCP_CHECK_STATUS(dcp_mtp_roll_cuda(NULL, 0, 0, 1, DCP_CP_ZIGZAG, NULL, 0, 0, NULL, NULL, NULL, 0, NULL, NULL, NULL),
                         DCP_ERR_UNSUPPORTED);
    } else {
        /* built with CUDA: sizes and caller memory are checked before any CUDA call */
        DCP_CHECK_STATUS(st, DCP_OK);
        DCP_CHECK(device > 0 && device != 7 && host > 0);
        size_t d = 7, h = 7;
        DCP_CHECK_STATUS(dcp_cuda_workspace_size(NULL, &d, &h), DCP_ERR_NULL_POINTER);
        DCP_CHECK_STATUS(dcp_cuda_workspace_size(&c, NULL, &h), DCP_ERR_NULL_POINTER);
        dcp_config bad = c;
        bad.data_parallel_size = 0;
        DCP_CHECK_STATUS(dcp_cuda_workspace_size(&bad, &d, &h), DCP_ERR_INVALID_CONFIG);
        bad = c;
        bad.max_tokens_per_rank = 0;
        DCP_CHECK_STATUS(dcp_cuda_workspace_size(&bad, &d, &h), DCP_ERR_CAPACITY);
        DCP_CHECK(d == 7 && h == 7);
        unsigned char small[64];
        DCP_CHECK_STATUS(dcp_context_attach_cuda(ctx, small, device - 1, NULL, 0), DCP_ERR_WORKSPACE_TOO_SMALL);
        DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "attach_cuda: needs");
        DCP_REQUIRE_OK(dcp_context_create(&bad, &planning));
        DCP_CHECK_STATUS(dcp_context_attach_cuda(planning, NULL, 0, NULL, 0), DCP_ERR_CAPACITY);
        DCP_CHECK_CONTAINS(dcp_context_last_error(planning), "max_tokens_per_rank is 0");
        dcp_context_destroy(planning);
    }
    check_step_usable(ctx, "a refused CUDA attach", __LINE__); /* still a host context */
    dcp_context_destroy(ctx);

    dcp_comm comm;
    memset(&comm, 0xAB, sizeof comm);
    if (!dcp_nccl_available()) {
        DCP_CHECK_STATUS(dcp_nccl_comm_init(&comm, NULL, NULL, NULL), DCP_ERR_UNSUPPORTED);
        DCP_CHECK(comm.ops == NULL); /* a handle that no collective can run on */
        dcp_comm child;
        DCP_CHECK_STATUS(dcp_nccl_comm_split(&comm, 0, 0, &child), DCP_ERR_UNSUPPORTED);
        DCP_CHECK(child.ops == NULL);
        dcp_nccl_cp_groups groups;
        DCP_CHECK_STATUS(dcp_nccl_cp_groups_create(&comm, &groups), DCP_ERR_UNSUPPORTED);
        DCP_CHECK_EQ_INT(groups.count, 0);
        DCP_CHECK(dcp_nccl_cp_group(&groups, 1) == NULL);
        DCP_CHECK_STATUS(dcp_nccl_comm_abort(&comm), DCP_ERR_UNSUPPORTED);
    } else {
        DCP_CHECK_STATUS(dcp_nccl_comm_init(&comm, NULL, NULL, NULL), DCP_ERR_NULL_POINTER);
        DCP_CHECK_STATUS(dcp_nccl_comm_init(NULL, &comm, NULL, NULL), DCP_ERR_NULL_POINTER);
    }
}

/* ---- dcp_mtp_roll: a bad argument on one rank of the group ---- */

/*
 * Rounds of a roll over one CP group of 2 ranks (cu_seqlens_padded {0, 8, 16},
 * 8 slots a rank): round 0, rank 1's cu_seqlens decrease; round 1, rank 0
 * passes no exchange scratch; round 2 is good.  Before the rolls agreed their
 * errors, rank 0's round 0 met rank 1's round 1 and returned DCP_OK with its
 * neighbour's values from another call.
 */
typedef struct roll_test {
    dcp_inproc_world *world;
    int rounds, bad;
    dcp_status status[2][3];
    int64_t out[2][3][8];
    double elapsed_ms[2][3];
} roll_test;

static double monotonic_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void roll_rank(int32_t rank, void *arg)
{
    roll_test *t = arg;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    static const int32_t good[3] = {0, 8, 16}, down[3] = {0, 12, 8};
    const size_t sizes[1] = {8};
    char exchange[1024];
    for (int k = 0; k < t->rounds; k++) {
        int round = t->rounds == 1 ? 2 : k;
        int64_t in[8];
        for (int i = 0; i < 8; i++) in[i] = 1000 * round + 100 * rank + i;
        const void *fields[1] = {in};
        void *outs[1] = {t->out[rank][k]};
        const int32_t *cu = t->bad && round == 0 && rank == 1 ? down : good;
        void *x = t->bad && round == 1 && rank == 0 ? NULL : exchange;
        double start = monotonic_ms();
        t->status[rank][k] = dcp_mtp_roll(&comm, 0, 0, 2, DCP_CP_ZIGZAG, cu, 3, 8, fields, outs, sizes, 1, x);
        t->elapsed_ms[rank][k] = monotonic_ms() - start;
    }
}

DCP_TEST(mtp_roll_bad_argument_on_one_rank_is_agreed)
{
    roll_test t, fresh;
    memset(&t, 0, sizeof t);
    memset(&fresh, 0, sizeof fresh);
    t.rounds = 3;
    t.bad = 1;
    fresh.rounds = 1; /* round 2 alone, on a world of its own */
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 20000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 20000, &fresh.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, roll_rank, &t));
    DCP_REQUIRE_OK(dcp_inproc_run(2, roll_rank, &fresh));
    dcp_inproc_world_destroy(t.world);
    dcp_inproc_world_destroy(fresh.world);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r][0], DCP_ERR_CORRUPT_INPUT);
        DCP_CHECK_STATUS(t.status[r][1], DCP_ERR_NULL_POINTER);
        DCP_CHECK_STATUS(t.status[r][2], DCP_OK);
        DCP_CHECK_STATUS(fresh.status[r][0], DCP_OK);
        for (int k = 0; k < 2; k++) DCP_CHECK(t.elapsed_ms[r][k] < 10000); /* at once, not after the timeout */
        /* the good round gives what it gives on a fresh world */
        DCP_CHECK(memcmp(t.out[r][2], fresh.out[r][0], sizeof t.out[r][2]) == 0);
    }
}

/* ---- dcp_gather over two DP ranks: a NULL output pointer on one of them ---- */

typedef struct gather_null_test {
    dcp_inproc_world *world;
    dcp_status status[2][2];
    int32_t count[2], second_rank_first[2];
} gather_null_test;

static void gather_null_rank(int32_t rank, void *arg)
{
    gather_null_test *t = arg;
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 2;
    c.max_sequences = 16;
    dcp_context *ctx = NULL;
    t->status[rank][0] = t->status[rank][1] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    for (int k = 0; k < 2; k++) {
        const int32_t lengths[2] = {100 * k + 10 * rank + 1, 100 * k + 10 * rank + 2};
        const int32_t *global = NULL, *offsets = NULL;
        int32_t n = 0;
        /* call 0: rank 1 passes no global_lengths pointer */
        t->status[rank][k] = dcp_gather(ctx, &comm, 0, lengths, 2, k == 0 && rank == 1 ? NULL : &global, &n, &offsets);
        if (k == 1 && t->status[rank][k] == DCP_OK) {
            t->count[rank] = n;
            t->second_rank_first[rank] = global[offsets[1]];
        }
    }
    dcp_context_destroy(ctx);
}

/*
 * Before the pointers were agreed, rank 1 returned alone, and rank 0's
 * gather met rank 1's next one: DCP_OK with rank 1's lengths of the next call.
 */
DCP_TEST(gather_null_output_on_one_rank_fails_on_every_rank)
{
    gather_null_test t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 20000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, gather_null_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t.status[r][0], DCP_ERR_NULL_POINTER);
        DCP_CHECK_STATUS(t.status[r][1], DCP_OK);
        DCP_CHECK_EQ_INT(t.count[r], 4);
        DCP_CHECK_EQ_INT(t.second_rank_first[r], 111); /* call 1's lengths, not another call's */
    }
}

/* ---- a plan that breaks max_sequences_per_microbatch ---- */

DCP_TEST(validate_sequence_cap)
{
    dcp_config c = small_config(DCP_SCHEDULER_DYNAMIC_CP);
    c.max_sequences_per_microbatch = 2;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    hand_plan h;
    hand_plan_init(&h); /* microbatch 1: six sequences on all 4 ranks */
    dcp_plan_violation v;
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, &h.plan, good_lengths, 8, &v), DCP_ERR_INVALID_PLAN);
    DCP_CHECK_EQ_INT(v.invariant, DCP_INVARIANT_SEQUENCE_CAP);
    DCP_CHECK_EQ_INT(v.microbatch, 1);
    DCP_CHECK_CONTAINS(v.message, "rank 0 holds 6 sequences, cap 2");
    dcp_plan_stats stats;
    DCP_CHECK_STATUS(dcp_plan_stats_compute(ctx, &h.plan, good_lengths, 8, &stats), DCP_ERR_INVALID_PLAN);
    check_usable(ctx, "a plan over the sequence cap", __LINE__);
    dcp_context_destroy(ctx);
}

/* ---- messages end on a whole word ---- */

/*
 * A message longer than its buffer ends after its last whole word, marked "...": never mid-word
 * ("they must hold the same da").  The same holds for dcp_config_validate()'s caller buffer.
 */
DCP_TEST(messages_longer_than_their_buffer_end_on_a_whole_word)
{
    dcp__error err;
    char word[40];
    /* words of 1 to 13 letters, far more than the buffer holds */
    char text[2 * DCP_ERROR_MESSAGE_SIZE] = "";
    for (int i = 0; strlen(text) + 20 < sizeof text; i++) {
        int n = 1 + i % 13;
        for (int k = 0; k < n; k++) word[k] = (char)('a' + (i + k) % 26);
        word[n] = '\0';
        strcat(text, word);
        strcat(text, " ");
    }
    /* every cut point: the text shifted by 0 to 15 leading characters */
    for (int shift = 0; shift < 16; shift++) {
        DCP_CHECK_STATUS(dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "%.*s%s", shift, "xxxxxxxxxxxxxxxx", text),
                         DCP_ERR_CORRUPT_INPUT);
        size_t n = strlen(err.message);
        DCP_REQUIRE(n >= 3 && n < DCP_ERROR_MESSAGE_SIZE);
        DCP_CHECK(dcp_test_message_cut(err.message));
        DCP_CHECK(err.message[n - 4] != ' ');
        /* what comes before the mark is a prefix of the text that ends where a word ends */
        char expected[2 * DCP_ERROR_MESSAGE_SIZE + 16];
        snprintf(expected, sizeof expected, "%.*s%s", shift, "xxxxxxxxxxxxxxxx", text);
        DCP_CHECK(strncmp(err.message, expected, n - 3) == 0);
        DCP_CHECK(expected[n - 3] == ' ');
        DCP_CHECK(n - 3 > DCP_ERROR_MESSAGE_SIZE - 24); /* little is lost: at most one word */
    }
    /* a message that fits is untouched, one that fills the buffer exactly too */
    dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "they must hold the same data");
    DCP_CHECK(strcmp(err.message, "they must hold the same data") == 0);
    memset(text, 'a', DCP_ERROR_MESSAGE_SIZE - 1);
    text[DCP_ERROR_MESSAGE_SIZE - 1] = '\0';
    dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "%s", text);
    DCP_CHECK_EQ_INT(strlen(err.message), DCP_ERROR_MESSAGE_SIZE - 1);
    DCP_CHECK(!dcp_test_message_cut(err.message));
    /* one word longer than the buffer is cut, still marked */
    text[DCP_ERROR_MESSAGE_SIZE - 1] = 'a';
    text[DCP_ERROR_MESSAGE_SIZE] = '\0';
    dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "%s", text);
    DCP_CHECK(dcp_test_message_cut(err.message));
    DCP_CHECK_EQ_INT(strlen(err.message), DCP_ERROR_MESSAGE_SIZE - 1);

    /* dcp_config_validate into a small caller buffer */
    dcp_config c;
    dcp_config_default(&c);
    c.max_tokens_per_rank = 1;
    c.fields = DCP_FIELD_TOKENS;
    char small[48];
    DCP_CHECK_STATUS(dcp_config_validate(&c, small, sizeof small), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK(dcp_test_message_cut(small));
    DCP_CHECK(strncmp(small, "fields (tokens) lack labels, position_ids,", strlen(small) - 3) == 0);
    char whole[DCP_ERROR_MESSAGE_SIZE];
    DCP_CHECK_STATUS(dcp_config_validate(&c, whole, sizeof whole), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_CONTAINS(whole, "(max_tokens_per_rank 0 only plans)");
}
