/*
 * test_comm.c - the in-process communicator: every collective on 8 threads
 * with data that differs per rank, peer and round; size disagreements; the
 * error agreement; each injected fault (every surviving rank's status, then a
 * good collective on the same world); late ranks; zero allocation.
 *
 * Rank threads record what they saw; the checks run on the main thread after
 * dcp_inproc_run() has joined them.
 */
#define _POSIX_C_SOURCE 200809L

#include "dcp_test.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define RANKS 8
#define MAX_OPS 16

/* Generous where no timeout is expected; short where one is. */
#define NO_TIMEOUT_MS 30000
#define SHORT_TIMEOUT_MS 200

typedef struct world_test {
    dcp_inproc_world *world;
    int32_t size;
    int param;
    dcp_status status[RANKS][MAX_OPS];
    int32_t failed[RANKS][MAX_OPS];
    dcp_status agreed[RANKS][MAX_OPS];
    int bad[RANKS][MAX_OPS]; /* received data that differs from what was sent */
    int64_t elapsed_ms[RANKS][MAX_OPS];
    int64_t start_ms; /* before the ranks started */
    atomic_int counter;
} world_test;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static dcp_comm rank_comm(world_test *t, int32_t rank)
{
    dcp_comm comm;
    memset(&comm, 0, sizeof comm);
    if (dcp_inproc_comm(t->world, rank, &comm) != DCP_OK) comm.ops = NULL;
    return comm;
}

/* Create the world, run fn on every rank, destroy the world.  0 on failure. */
static int run_world(world_test *t, int32_t size, int32_t timeout_ms, void (*fn)(int32_t, void *))
{
    t->size = size;
    if (dcp_inproc_world_create(size, timeout_ms, &t->world) != DCP_OK) return 0;
    dcp_status st = dcp_inproc_run(size, fn, t);
    dcp_inproc_world_destroy(t->world);
    t->world = NULL;
    return st == DCP_OK;
}

static int64_t value(int32_t rank, int64_t i, int64_t round) { return rank * 1000003 + i * 7919 + round * 104729 + 1; }

/* One allgather of 5 values per rank; returns its status and counts wrong values in *bad. */
static dcp_status checked_allgather(dcp_comm *comm, int64_t round, int *bad)
{
    int64_t send[5], recv[RANKS * 5];
    for (int i = 0; i < 5; i++) send[i] = value(comm->rank, i, round);
    memset(recv, 0, sizeof recv);
    dcp_status st = comm->ops->allgather(comm, send, sizeof send, recv);
    *bad = 0;
    if (st == DCP_OK)
        for (int32_t r = 0; r < comm->size; r++)
            for (int i = 0; i < 5; i++) *bad += recv[r * 5 + i] != value(r, i, round);
    return st;
}

/* Every rank saw `want` at op `op`, with failed rank `failed` (unless failed < -1). */
static void check_all(world_test *t, int op, dcp_status want, int32_t failed, int line)
{
    for (int32_t r = 0; r < t->size; r++) {
        if (t->status[r][op] != want)
            dcp_test_fail(__FILE__, line, "op %d rank %d: got %s, expected %s", op, r, dcp_status_str(t->status[r][op]),
                          dcp_status_str(want));
        if (failed >= -1 && t->failed[r][op] != failed)
            dcp_test_fail(__FILE__, line, "op %d rank %d: failed rank %d, expected %d", op, r, t->failed[r][op], failed);
        if (t->bad[r][op])
            dcp_test_fail(__FILE__, line, "op %d rank %d: %d wrong values", op, r, t->bad[r][op]);
    }
}

/* ---- the collectives, good input ---- */

static void allgather_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    /* consecutive rounds with different data: a generation must never see another's buffers */
    for (int64_t round = 0; round < 200; round++) {
        int bad = 0;
        dcp_status st = checked_allgather(&comm, round, &bad);
        if (st != DCP_OK && t->status[rank][0] == DCP_OK) t->status[rank][0] = st;
        t->bad[rank][0] += bad;
    }
}

DCP_TEST(allgather_eight_ranks)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, allgather_rank));
    check_all(t, 0, DCP_OK, -2, __LINE__);
    free(t);
}

/* Rank r sends r*3+1 ints; receivers leave a gap of 2 ints between ranks, which must stay untouched. */
static void allgatherv_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    enum { GAP = 2 };
    int32_t send[RANKS * 3 + 1];
    int32_t recv[RANKS * (RANKS * 3 + 1 + GAP)];
    size_t bytes[RANKS], offsets[RANKS];
    size_t at = 0;
    for (int32_t r = 0; r < RANKS; r++) {
        bytes[r] = (size_t)(r * 3 + 1) * sizeof(int32_t);
        offsets[r] = at;
        at += bytes[r] + GAP * sizeof(int32_t);
    }
    for (int round = 0; round < 20; round++) {
        int32_t count = rank * 3 + 1;
        for (int32_t i = 0; i < count; i++) send[i] = (int32_t)value(rank, i, round);
        memset(recv, 0xA5, sizeof recv);
        dcp_status st = comm.ops->allgatherv(&comm, send, (size_t)count * sizeof(int32_t), recv, bytes, offsets);
        if (st != DCP_OK && t->status[rank][0] == DCP_OK) t->status[rank][0] = st;
        /* every byte: the data where it belongs, the fill everywhere else */
        const unsigned char *b = (const unsigned char *)recv;
        for (size_t pos = 0; pos < sizeof recv; pos++) {
            unsigned char want = 0xA5;
            for (int32_t r = 0; r < RANKS; r++)
                if (pos >= offsets[r] && pos < offsets[r] + bytes[r]) {
                    int32_t v = (int32_t)value(r, (int64_t)((pos - offsets[r]) / sizeof(int32_t)), round);
                    want = ((const unsigned char *)&v)[(pos - offsets[r]) % sizeof(int32_t)];
                }
            t->bad[rank][0] += b[pos] != want;
        }
    }
}

DCP_TEST(allgatherv_varying_counts)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, allgatherv_rank));
    check_all(t, 0, DCP_OK, -2, __LINE__);
    free(t);
}

/* ints rank p sends rank q in round `round` (zero for some pairs) */
static int32_t a2a_count(int32_t p, int32_t q, int round) { return (p * 3 + q * 5 + round) % 5; }
static int32_t a2a_value(int32_t p, int32_t q, int32_t i, int round)
{
    return (int32_t)(p * 1000000 + q * 10000 + i * 10 + round);
}

static void alltoallv_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int32_t send[RANKS * 5], recv[RANKS * 5 + 8];
    size_t send_bytes[RANKS], send_offsets[RANKS], recv_bytes[RANKS], recv_offsets[RANKS];
    for (int round = 0; round < 30; round++) {
        size_t s = 0, r = 0;
        for (int32_t q = 0; q < RANKS; q++) {
            send_offsets[q] = s * sizeof(int32_t);
            send_bytes[q] = (size_t)a2a_count(rank, q, round) * sizeof(int32_t);
            for (int32_t i = 0; i < a2a_count(rank, q, round); i++) send[s++] = a2a_value(rank, q, i, round);
            /* receive from p in reverse peer order, one int of gap after each */
            int32_t p = RANKS - 1 - q;
            recv_offsets[p] = r * sizeof(int32_t);
            recv_bytes[p] = (size_t)a2a_count(p, rank, round) * sizeof(int32_t);
            r += (size_t)a2a_count(p, rank, round) + 1;
        }
        for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) recv[i] = -1;
        dcp_status st =
            comm.ops->alltoallv(&comm, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
        if (st != DCP_OK && t->status[rank][0] == DCP_OK) t->status[rank][0] = st;
        size_t expect_filled = 0;
        for (int32_t p = 0; p < RANKS; p++) {
            const int32_t *got = recv + recv_offsets[p] / sizeof(int32_t);
            int32_t n = a2a_count(p, rank, round);
            for (int32_t i = 0; i < n; i++) t->bad[rank][0] += got[i] != a2a_value(p, rank, i, round);
            t->bad[rank][0] += got[n] != -1; /* the gap */
            expect_filled += (size_t)n;
        }
        size_t filled = 0;
        for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) filled += recv[i] != -1;
        t->bad[rank][0] += filled != expect_filled;
    }
}

DCP_TEST(alltoallv_varying_matrix)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, alltoallv_rank));
    check_all(t, 0, DCP_OK, -2, __LINE__);
    free(t);
}

static void broadcast_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    const int32_t roots[4] = {5, 7, 0, 5};
    for (int op = 0; op < 4; op++) {
        unsigned char buffer[1000];
        for (int i = 0; i < 1000; i++) buffer[i] = (unsigned char)(rank == roots[op] ? i * 7 + op : 0xEE - rank);
        t->status[rank][op] = comm.ops->broadcast(&comm, buffer, sizeof buffer, roots[op]);
        for (int i = 0; i < 1000; i++) t->bad[rank][op] += buffer[i] != (unsigned char)(i * 7 + op);
    }
}

DCP_TEST(broadcast_from_nonzero_root)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, broadcast_rank));
    for (int op = 0; op < 4; op++) check_all(t, op, DCP_OK, -2, __LINE__);
    free(t);
}

/*
 * The second barrier: a rank that returns from a collective overwrites its
 * send buffer at once.  Large buffers keep the peers copying for a while, so
 * a rank that left before every peer had read its buffer would show up as
 * poisoned data at some receiver.
 */
#define BIG_INTS (256 * 1024)

static void reuse_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int32_t *send = malloc(BIG_INTS * sizeof(int32_t));
    int32_t *recv = malloc((size_t)RANKS * BIG_INTS * sizeof(int32_t));
    if (!send || !recv) {
        t->status[rank][0] = DCP_ERR_ALLOC;
        free(send);
        free(recv);
        return;
    }
    for (int round = 0; round < 4; round++) {
        for (int32_t i = 0; i < BIG_INTS; i++) send[i] = rank * 7 + round + i;
        dcp_status st = comm.ops->allgather(&comm, send, BIG_INTS * sizeof(int32_t), recv);
        memset(send, 0xFF, BIG_INTS * sizeof(int32_t)); /* reuse the send buffer right away */
        if (st != DCP_OK && t->status[rank][0] == DCP_OK) t->status[rank][0] = st;
        for (int32_t r = 0; r < RANKS; r++)
            for (int32_t i = 0; i < BIG_INTS; i++) t->bad[rank][0] += recv[(size_t)r * BIG_INTS + i] != r * 7 + round + i;
    }
    free(send);
    free(recv);
}

DCP_TEST(send_buffer_not_reused_while_read)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, reuse_rank));
    check_all(t, 0, DCP_OK, -2, __LINE__);
    free(t);
}

/* ---- error agreement ---- */

static void agree_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    /* op 0: all OK; op 1: ranks 5 and 2 fail, 2 is the lowest; op 2: only the last rank fails */
    dcp_status local[3] = {DCP_OK, DCP_OK, DCP_OK};
    if (rank == 5) local[1] = DCP_ERR_BAD_LENGTH;
    if (rank == 2) local[1] = DCP_ERR_CAPACITY;
    if (rank == t->size - 1) local[2] = DCP_ERR_CORRUPT_INPUT;
    for (int op = 0; op < 3; op++) {
        t->agreed[rank][op] = DCP_ERR_INVALID_PLAN; /* must be overwritten */
        t->failed[rank][op] = -7;
        t->status[rank][op] = comm.ops->agree(&comm, local[op], &t->agreed[rank][op], &t->failed[rank][op]);
    }
}

DCP_TEST(agree_all_ok_and_lowest_failure_wins)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, agree_rank));
    const dcp_status want_agreed[3] = {DCP_OK, DCP_ERR_CAPACITY, DCP_ERR_CORRUPT_INPUT};
    const int32_t want_failed[3] = {-1, 2, RANKS - 1};
    for (int op = 0; op < 3; op++) {
        check_all(t, op, DCP_OK, want_failed[op], __LINE__);
        for (int32_t r = 0; r < RANKS; r++) DCP_CHECK_EQ_INT(t->agreed[r][op], want_agreed[op]);
    }
    free(t);
}

/* ---- faults ---- */

/*
 * op 0: the faulted collective (param selects allgather or agree) with the
 * fault on rank 3; op 1: a good allgather; op 2: a good agree.
 */
static void fault_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    if (t->param == 0) {
        int64_t send[3] = {rank, rank, rank}, recv[RANKS * 3];
        memset(recv, 0, sizeof recv);
        t->status[rank][0] = comm.ops->allgather(&comm, send, sizeof send, recv);
        t->failed[rank][0] = -2;
        for (size_t i = 0; i < RANKS * 3; i++) t->bad[rank][0] += t->status[rank][0] != DCP_OK && recv[i] != 0;
    } else {
        t->status[rank][0] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][0], &t->failed[rank][0]);
    }
    t->elapsed_ms[rank][0] = now_ms() - t->start_ms;
    t->status[rank][1] = checked_allgather(&comm, 1, &t->bad[rank][1]);
    t->status[rank][2] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][2], &t->failed[rank][2]);
}

static world_test *run_fault(dcp_inproc_fault fault, int op, int32_t timeout_ms)
{
    world_test *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->param = op;
    t->size = RANKS;
    if (dcp_inproc_world_create(RANKS, timeout_ms, &t->world) != DCP_OK) {
        free(t);
        return NULL;
    }
    dcp_status st = dcp_inproc_inject_fault(t->world, 3, fault);
    t->start_ms = now_ms();
    if (st == DCP_OK) st = dcp_inproc_run(RANKS, fault_rank, t);
    dcp_inproc_world_destroy(t->world);
    if (st != DCP_OK) {
        free(t);
        return NULL;
    }
    return t;
}

/* after the fault: a good allgather with the right data and an all-OK agree on every rank */
static void check_world_reusable(world_test *t, int line)
{
    check_all(t, 1, DCP_OK, -2, line);
    check_all(t, 2, DCP_OK, -1, line);
}

DCP_TEST(fault_return_error_aborts_everywhere)
{
    for (int op = 0; op < 2; op++) {
        /* a long timeout: the abort must end the collective, not the clock */
        world_test *t = run_fault(DCP_FAULT_RETURN_ERROR, op, NO_TIMEOUT_MS);
        DCP_REQUIRE(t);
        check_all(t, 0, DCP_ERR_COMM, op == 1 ? 3 : -2, __LINE__);
        for (int32_t r = 0; r < RANKS; r++) {
            DCP_CHECK(t->elapsed_ms[r][0] < NO_TIMEOUT_MS / 2);
            if (op == 1) DCP_CHECK_EQ_INT(t->agreed[r][0], DCP_ERR_COMM);
        }
        check_world_reusable(t, __LINE__);
        free(t);
    }
}

DCP_TEST(fault_never_arrive_times_out_peers)
{
    for (int op = 0; op < 2; op++) {
        world_test *t = run_fault(DCP_FAULT_NEVER_ARRIVE, op, SHORT_TIMEOUT_MS);
        DCP_REQUIRE(t);
        for (int32_t r = 0; r < RANKS; r++) {
            DCP_CHECK_STATUS(t->status[r][0], r == 3 ? DCP_ERR_COMM : DCP_ERR_TIMEOUT);
            if (op == 1) DCP_CHECK_EQ_INT(t->failed[r][0], 3);
            if (op == 1 && r != 3) DCP_CHECK_EQ_INT(t->agreed[r][0], DCP_ERR_TIMEOUT);
            /* the peers waited for the timeout (every call came after start_ms), and not forever */
            if (r != 3) DCP_CHECK(t->elapsed_ms[r][0] >= SHORT_TIMEOUT_MS - 1);
            DCP_CHECK(t->elapsed_ms[r][0] < NO_TIMEOUT_MS / 2);
            DCP_CHECK_EQ_INT(t->bad[r][0], 0);
        }
        check_world_reusable(t, __LINE__);
        free(t);
    }
}

DCP_TEST(fault_truncate_is_corrupt_everywhere)
{
    for (int op = 0; op < 2; op++) {
        world_test *t = run_fault(DCP_FAULT_TRUNCATE, op, NO_TIMEOUT_MS);
        DCP_REQUIRE(t);
        check_all(t, 0, DCP_ERR_CORRUPT_INPUT, op == 1 ? 3 : -2, __LINE__);
        check_world_reusable(t, __LINE__);
        free(t);
    }
}

/* A rank that never calls in without a fault: the others time out; a cleared fault does nothing. */
DCP_TEST(fault_cleared_and_bad_arguments)
{
    dcp_inproc_world *w = NULL;
    DCP_CHECK_STATUS(dcp_inproc_world_create(0, 10, &w), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_world_create(2, -1, &w), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_world_create(2, 10, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK(w == NULL);
    dcp_inproc_world_destroy(NULL);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 10, &w));
    dcp_comm comm;
    DCP_CHECK_STATUS(dcp_inproc_comm(w, 2, &comm), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_comm(w, -1, &comm), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_comm(NULL, 0, &comm), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_inproc_comm(w, 0, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_inproc_inject_fault(w, 2, DCP_FAULT_TRUNCATE), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_inject_fault(w, 0, (dcp_inproc_fault)9), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_inject_fault(NULL, 0, DCP_FAULT_TRUNCATE), DCP_ERR_NULL_POINTER);
    DCP_REQUIRE_OK(dcp_inproc_comm(w, 1, &comm));
    DCP_CHECK_EQ_INT(comm.rank, 1);
    DCP_CHECK_EQ_INT(comm.size, 2);
    /* the ops refuse a handle with no backend state */
    dcp_comm no_impl = comm;
    no_impl.impl = NULL;
    int64_t x = 0;
    DCP_CHECK_STATUS(comm.ops->allgather(&no_impl, &x, sizeof x, &x), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(comm.ops->broadcast(NULL, &x, sizeof x, 0), DCP_ERR_NULL_POINTER);
    dcp_inproc_world_destroy(w);
    DCP_CHECK_STATUS(dcp_inproc_run(0, NULL, NULL), DCP_ERR_NULL_POINTER);

    /* a fault set and cleared again: the collective works */
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    t->size = RANKS;
    DCP_REQUIRE_OK(dcp_inproc_world_create(RANKS, NO_TIMEOUT_MS, &t->world));
    DCP_REQUIRE_OK(dcp_inproc_inject_fault(t->world, 3, DCP_FAULT_RETURN_ERROR));
    DCP_REQUIRE_OK(dcp_inproc_inject_fault(t->world, 3, DCP_FAULT_NONE));
    DCP_REQUIRE_OK(dcp_inproc_run(RANKS, fault_rank, t));
    dcp_inproc_world_destroy(t->world);
    check_all(t, 0, DCP_OK, -2, __LINE__);
    check_world_reusable(t, __LINE__);
    free(t);
}

static void noop_rank(int32_t rank, void *arg)
{
    (void)rank;
    (void)arg;
}

DCP_TEST(run_rejects_bad_sizes)
{
    DCP_CHECK_STATUS(dcp_inproc_run(0, noop_rank, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_run(-3, noop_rank, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_inproc_run(3, noop_rank, NULL), DCP_OK);
}

/*
 * A rank's own bad arguments abort the collective: every rank gets the
 * rank's status instead of waiting (op 0: NULL send on rank 6; op 1: a NULL
 * recv_bytes on rank 0; op 2: NULL *agreed on rank 1), and the world works.
 */
static void local_error_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int64_t send = rank, recv[RANKS];
    t->status[rank][0] = comm.ops->allgather(&comm, rank == 6 ? NULL : &send, sizeof send, recv);
    size_t bytes[RANKS], offsets[RANKS];
    for (int32_t r = 0; r < RANKS; r++) {
        bytes[r] = sizeof(int64_t);
        offsets[r] = (size_t)r * sizeof(int64_t);
    }
    t->status[rank][1] =
        comm.ops->allgatherv(&comm, &send, sizeof send, recv, rank == 0 ? NULL : bytes, offsets);
    dcp_status agreed;
    t->status[rank][2] = comm.ops->agree(&comm, DCP_OK, rank == 1 ? NULL : &agreed, &t->failed[rank][2]);
    if (rank == 1) t->failed[rank][2] = 1; /* it passed no outputs */
    t->status[rank][3] = checked_allgather(&comm, 3, &t->bad[rank][3]);
}

DCP_TEST(local_argument_error_aborts_everywhere)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, local_error_rank));
    check_all(t, 0, DCP_ERR_NULL_POINTER, -2, __LINE__);
    check_all(t, 1, DCP_ERR_NULL_POINTER, -2, __LINE__);
    check_all(t, 2, DCP_ERR_NULL_POINTER, 1, __LINE__);
    check_all(t, 3, DCP_OK, -2, __LINE__);
    free(t);
}

/* ---- size disagreements ---- */

/*
 * Each op has one disagreement; every rank must get DCP_ERR_CORRUPT_INPUT and
 * no receive buffer may change.  A good allgather follows each.
 */
static void mismatch_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int32_t send[16], recv[RANKS * 16];
    for (int i = 0; i < 16; i++) send[i] = rank * 100 + i;
    size_t bytes[RANKS], offsets[RANKS], sbytes[RANKS], soffsets[RANKS];
    int op = 0;
#define UNTOUCHED()                                                                                        \
    do {                                                                                                   \
        for (size_t i_ = 0; i_ < sizeof recv / sizeof recv[0]; i_++) t->bad[rank][op] += recv[i_] != -5;   \
    } while (0)
#define GOOD_AFTER()                                                                                       \
    do {                                                                                                   \
        op++;                                                                                              \
        t->status[rank][op] = checked_allgather(&comm, op, &t->bad[rank][op]);                             \
        op++;                                                                                              \
    } while (0)
    for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) recv[i] = -5;

    /* op 0: allgather, rank 4 announces 8 bytes, the others 12 */
    t->status[rank][op] = comm.ops->allgather(&comm, send, rank == 4 ? 8 : 12, recv);
    UNTOUCHED();
    GOOD_AFTER();
    for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) recv[i] = -5;

    /* op 2: allgatherv, rank 6 expects 2 ints from rank 1, which sends 3 */
    for (int32_t r = 0; r < RANKS; r++) {
        bytes[r] = 3 * sizeof(int32_t);
        offsets[r] = (size_t)r * 3 * sizeof(int32_t);
    }
    if (rank == 6) bytes[1] = 2 * sizeof(int32_t);
    t->status[rank][op] = comm.ops->allgatherv(&comm, send, 3 * sizeof(int32_t), recv, bytes, offsets);
    UNTOUCHED();
    GOOD_AFTER();
    for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) recv[i] = -5;

    /* op 4: alltoallv, rank 2 sends 2 ints to rank 5, which expects 1 */
    for (int32_t r = 0; r < RANKS; r++) {
        sbytes[r] = sizeof(int32_t);
        soffsets[r] = 0;
        bytes[r] = sizeof(int32_t);
        offsets[r] = (size_t)r * sizeof(int32_t);
    }
    if (rank == 2) sbytes[5] = 2 * sizeof(int32_t);
    t->status[rank][op] = comm.ops->alltoallv(&comm, send, sbytes, soffsets, recv, bytes, offsets);
    UNTOUCHED();
    GOOD_AFTER();

    /* op 6: broadcast, rank 7 expects fewer bytes than root 2 sends */
    int32_t buffer[4];
    for (int i = 0; i < 4; i++) buffer[i] = rank == 2 ? 42 : -5;
    t->status[rank][op] = comm.ops->broadcast(&comm, buffer, rank == 7 ? 12 : 16, 2);
    for (int i = 0; i < 4; i++) t->bad[rank][op] += buffer[i] != (rank == 2 ? 42 : -5);
    GOOD_AFTER();

    /* op 8: broadcast, every rank names root 8 of 8 */
    t->status[rank][op] = comm.ops->broadcast(&comm, buffer, 16, RANKS);
    for (int i = 0; i < 4; i++) t->bad[rank][op] += buffer[i] != (rank == 2 ? 42 : -5);
    GOOD_AFTER();

    /* op 10: broadcast, rank 0 names root -1, the others root 2 */
    t->status[rank][op] = comm.ops->broadcast(&comm, buffer, 16, rank == 0 ? -1 : 2);
    for (int i = 0; i < 4; i++) t->bad[rank][op] += buffer[i] != (rank == 2 ? 42 : -5);
    GOOD_AFTER();

    /* op 12: broadcast, valid roots that differ: rank 5 names root 4, the others root 2 */
    t->status[rank][op] = comm.ops->broadcast(&comm, buffer, 16, rank == 5 ? 4 : 2);
    for (int i = 0; i < 4; i++) t->bad[rank][op] += buffer[i] != (rank == 2 ? 42 : -5);
    GOOD_AFTER();

    /* op 14: ranks in different collectives: rank 1 broadcasts, the others all-gather */
    for (size_t i = 0; i < sizeof recv / sizeof recv[0]; i++) recv[i] = -5;
    if (rank == 1) {
        t->status[rank][op] = comm.ops->broadcast(&comm, buffer, 4, 0);
        for (int i = 0; i < 4; i++) t->bad[rank][op] += buffer[i] != -5;
    } else {
        t->status[rank][op] = comm.ops->allgather(&comm, send, 4, recv);
        UNTOUCHED();
    }
    GOOD_AFTER();
#undef UNTOUCHED
#undef GOOD_AFTER
}

DCP_TEST(size_mismatch_is_corrupt_everywhere)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, mismatch_rank));
    for (int op = 0; op < 16; op += 2) {
        check_all(t, op, DCP_ERR_CORRUPT_INPUT, -2, __LINE__);
        check_all(t, op + 1, DCP_OK, -2, __LINE__);
    }
    free(t);
}

/* ---- late ranks ---- */

/*
 * Rank 3 stays away until every other rank has given up on op 0 (timeout),
 * then calls op 0: it must return the same DCP_ERR_TIMEOUT at once, and its
 * op 1 must meet the others' op 1.
 */
static void late_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    if (rank == 3)
        while (atomic_load(&t->counter) < t->size - 1) sleep_ms(1);
    int64_t start = now_ms();
    t->status[rank][0] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][0], &t->failed[rank][0]);
    t->elapsed_ms[rank][0] = now_ms() - start;
    if (rank != 3) atomic_fetch_add(&t->counter, 1);
    t->status[rank][1] = checked_allgather(&comm, 11, &t->bad[rank][1]);
    t->status[rank][2] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][2], &t->failed[rank][2]);
}

DCP_TEST(late_rank_gets_the_agreed_timeout_and_resynchronises)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    /* op 1 gives the late rank a full second to join after the others left op 0 */
    DCP_REQUIRE(run_world(t, RANKS, 1000, late_rank));
    check_all(t, 0, DCP_ERR_TIMEOUT, 3, __LINE__);
    for (int32_t r = 0; r < RANKS; r++) DCP_CHECK_EQ_INT(t->agreed[r][0], DCP_ERR_TIMEOUT);
    DCP_CHECK(t->elapsed_ms[3][0] < 500); /* it found op 0 over instead of waiting */
    check_world_reusable(t, __LINE__);
    free(t);
}

/*
 * Rank 3 misses three collectives: op 0 times out, op 1 is aborted by rank
 * 1's injected error, op 2 times out.  Coming late, it gets exactly those
 * three outcomes, then joins op 3.
 */
static void very_late_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    if (rank == 3)
        while (atomic_load(&t->counter) < t->size - 1) sleep_ms(1);
    for (int op = 0; op < 3; op++) {
        if (op == 1 && rank == 1) dcp_inproc_inject_fault(t->world, 1, DCP_FAULT_RETURN_ERROR);
        t->status[rank][op] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][op], &t->failed[rank][op]);
    }
    if (rank != 3) atomic_fetch_add(&t->counter, 1);
    t->status[rank][3] = checked_allgather(&comm, 3, &t->bad[rank][3]);
    t->status[rank][4] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][4], &t->failed[rank][4]);
}

DCP_TEST(late_rank_replays_missed_outcomes)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, 300, very_late_rank));
    check_all(t, 0, DCP_ERR_TIMEOUT, 3, __LINE__);
    check_all(t, 1, DCP_ERR_COMM, 1, __LINE__);
    check_all(t, 2, DCP_ERR_TIMEOUT, 3, __LINE__);
    check_all(t, 3, DCP_OK, -2, __LINE__);
    check_all(t, 4, DCP_OK, -1, __LINE__);
    free(t);
}

/*
 * Rank 3 gets ahead: its op 0 never arrives, and it calls op 1 at once.  The
 * others reach op 0 a quarter of the timeout later, so rank 3's time runs out
 * first and it ends op 0 (DCP_ERR_TIMEOUT everywhere).  Its clock for op 1
 * must restart when op 0 ends: the others join op 1 right after, and it
 * succeeds.
 */
static void ahead_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    if (rank == 3) dcp_inproc_inject_fault(t->world, 3, DCP_FAULT_NEVER_ARRIVE);
    else sleep_ms(t->param / 4);
    t->status[rank][0] = checked_allgather(&comm, 0, &t->bad[rank][0]);
    t->status[rank][1] = checked_allgather(&comm, 1, &t->bad[rank][1]);
    t->status[rank][2] = comm.ops->agree(&comm, DCP_OK, &t->agreed[rank][2], &t->failed[rank][2]);
}

DCP_TEST(rank_ahead_waits_for_the_world)
{
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    t->param = 400;
    DCP_REQUIRE(run_world(t, RANKS, 400, ahead_rank));
    for (int32_t r = 0; r < RANKS; r++) DCP_CHECK_STATUS(t->status[r][0], r == 3 ? DCP_ERR_COMM : DCP_ERR_TIMEOUT);
    check_world_reusable(t, __LINE__);
    free(t);
}

/* ---- allocation ---- */

static void no_alloc_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int64_t send[RANKS * 4], recv[RANKS * 4];
    size_t bytes[RANKS], offsets[RANKS];
    for (int32_t r = 0; r < RANKS; r++) {
        bytes[r] = 4 * sizeof(int64_t);
        offsets[r] = (size_t)r * 4 * sizeof(int64_t);
    }
    for (int i = 0; i < RANKS * 4; i++) send[i] = rank * 100 + i;
    dcp_status agreed = DCP_OK;
    int32_t failed = 0;
    /* warm up the thread (first use of the condition variable, lazy binding) */
    t->status[rank][0] = comm.ops->agree(&comm, DCP_OK, &agreed, &failed);
    DCP_CHECK_NO_ALLOC({
        for (int round = 0; round < 10; round++) {
            dcp_status st = comm.ops->allgather(&comm, send, 4 * sizeof(int64_t), recv);
            if (st == DCP_OK) st = comm.ops->allgatherv(&comm, send, bytes[rank], recv, bytes, offsets);
            if (st == DCP_OK) st = comm.ops->alltoallv(&comm, send, bytes, offsets, recv, bytes, offsets);
            if (st == DCP_OK) st = comm.ops->broadcast(&comm, recv, sizeof recv, round % RANKS);
            if (st == DCP_OK) st = comm.ops->agree(&comm, DCP_OK, &agreed, &failed);
            if (st != DCP_OK) t->status[rank][1] = st;
        }
    });
}

DCP_TEST(zero_allocation_per_collective)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    world_test *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(run_world(t, RANKS, NO_TIMEOUT_MS, no_alloc_rank));
    check_all(t, 0, DCP_OK, -2, __LINE__);
    check_all(t, 1, DCP_OK, -2, __LINE__);
    free(t);
}

/* ---- one rank ---- */

DCP_TEST(one_rank_world)
{
    dcp_inproc_world *w = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, SHORT_TIMEOUT_MS, &w));
    dcp_comm comm;
    DCP_REQUIRE_OK(dcp_inproc_comm(w, 0, &comm));
    int32_t send[3] = {4, 5, 6}, recv[6] = {0};
    DCP_CHECK_STATUS(comm.ops->allgather(&comm, send, sizeof send, recv), DCP_OK);
    DCP_CHECK(memcmp(send, recv, sizeof send) == 0);
    size_t bytes = sizeof send, offset = 3 * sizeof(int32_t);
    DCP_CHECK_STATUS(comm.ops->allgatherv(&comm, send, sizeof send, recv, &bytes, &offset), DCP_OK);
    DCP_CHECK(memcmp(send, recv + 3, sizeof send) == 0);
    size_t zero = 0;
    memset(recv, 0, sizeof recv);
    DCP_CHECK_STATUS(comm.ops->alltoallv(&comm, send, &bytes, &zero, recv, &bytes, &offset), DCP_OK);
    DCP_CHECK(memcmp(send, recv + 3, sizeof send) == 0);
    /* in place: the rank's own block of the receive buffer is its send buffer */
    DCP_CHECK_STATUS(comm.ops->allgather(&comm, recv + 3, sizeof send, recv + 3), DCP_OK);
    DCP_CHECK(memcmp(send, recv + 3, sizeof send) == 0);
    DCP_CHECK_STATUS(comm.ops->broadcast(&comm, send, sizeof send, 0), DCP_OK);
    DCP_CHECK_STATUS(comm.ops->broadcast(&comm, send, sizeof send, 1), DCP_ERR_CORRUPT_INPUT);
    dcp_status agreed = DCP_OK;
    int32_t failed = 0;
    DCP_CHECK_STATUS(comm.ops->agree(&comm, DCP_ERR_BAD_LENGTH, &agreed, &failed), DCP_OK);
    DCP_CHECK_EQ_INT(agreed, DCP_ERR_BAD_LENGTH);
    DCP_CHECK_EQ_INT(failed, 0);
    /* zero bytes with no buffers at all */
    DCP_CHECK_STATUS(comm.ops->allgather(&comm, NULL, 0, NULL), DCP_OK);
    /* each fault, then a good collective */
    const dcp_inproc_fault faults[3] = {DCP_FAULT_RETURN_ERROR, DCP_FAULT_NEVER_ARRIVE, DCP_FAULT_TRUNCATE};
    const dcp_status want[3] = {DCP_ERR_COMM, DCP_ERR_COMM, DCP_ERR_CORRUPT_INPUT};
    for (int i = 0; i < 3; i++) {
        DCP_REQUIRE_OK(dcp_inproc_inject_fault(w, 0, faults[i]));
        DCP_CHECK_STATUS(comm.ops->agree(&comm, DCP_OK, &agreed, &failed), want[i]);
        DCP_CHECK_EQ_INT(agreed, want[i]);
        DCP_CHECK_EQ_INT(failed, 0);
        memset(recv, 0, sizeof recv);
        DCP_CHECK_STATUS(comm.ops->allgather(&comm, send, sizeof send, recv), DCP_OK);
        DCP_CHECK(memcmp(send, recv, sizeof send) == 0);
    }
    dcp_inproc_world_destroy(w);
}

/* ---- every collective in turn, many rounds, rotating roots ---- */

static void mixed_rank(int32_t rank, void *arg)
{
    world_test *t = arg;
    dcp_comm comm = rank_comm(t, rank);
    int32_t n = comm.size;
    for (int round = 0; round < 100; round++) {
        int bad = 0;
        dcp_status st = checked_allgather(&comm, round, &bad);
        int64_t buffer[2] = {rank == round % n ? round : -1, rank == round % n ? -round : -1};
        if (st == DCP_OK) st = comm.ops->broadcast(&comm, buffer, sizeof buffer, round % n);
        bad += buffer[0] != round || buffer[1] != -round;
        int32_t send[RANKS], recv[RANKS];
        size_t b[RANKS], o[RANKS];
        for (int32_t p = 0; p < n; p++) {
            send[p] = rank * 1000 + p * 10 + round;
            b[p] = sizeof(int32_t);
            o[p] = (size_t)p * sizeof(int32_t);
        }
        if (st == DCP_OK) st = comm.ops->alltoallv(&comm, send, b, o, recv, b, o);
        for (int32_t p = 0; p < n; p++) bad += recv[p] != p * 1000 + rank * 10 + round;
        dcp_status agreed = DCP_ERR_INVALID_PLAN;
        int32_t failed = -7;
        dcp_status local = rank == (round * 3) % n ? DCP_ERR_INFEASIBLE : DCP_OK;
        if (st == DCP_OK) st = comm.ops->agree(&comm, round % 2 ? local : DCP_OK, &agreed, &failed);
        bad += agreed != (round % 2 ? DCP_ERR_INFEASIBLE : DCP_OK);
        bad += failed != (round % 2 ? (round * 3) % n : -1);
        if (st != DCP_OK && t->status[rank][0] == DCP_OK) t->status[rank][0] = st;
        t->bad[rank][0] += bad;
    }
}

DCP_TEST(mixed_collectives_many_rounds)
{
    for (int32_t size = 2; size <= RANKS; size += 3) {
        world_test *t = calloc(1, sizeof *t);
        DCP_REQUIRE(t);
        DCP_REQUIRE(run_world(t, size, NO_TIMEOUT_MS, mixed_rank));
        check_all(t, 0, DCP_OK, -2, __LINE__);
        free(t);
    }
}

/* ---- two threads calling as one rank (a caller bug): both fail within the timeout ---- */

typedef struct same_rank_test {
    dcp_inproc_world *world;
    int use_step;
    dcp_status status[2];
    char why[2][160];
    int64_t elapsed_ns[2];
} same_rank_test;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void same_rank_thread(int32_t thread, void *arg)
{
    same_rank_test *t = arg;
    dcp_comm comm;
    dcp_inproc_comm(t->world, 0, &comm); /* both threads take rank 0's handle; rank 1 never calls */
    const int64_t start = mono_ns();
    if (t->use_step) {
        dcp_config c;
        dcp_config_default(&c);
        c.data_parallel_size = 2;
        c.max_sequences = 8;
        c.max_seqlen_per_rank = 64;
        c.max_tokens_per_rank = 64;
        dcp_context *ctx = NULL;
        t->status[thread] = DCP_ERR_ALLOC;
        if (dcp_context_create(&c, &ctx) != DCP_OK) return;
        int64_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8}, labels[8] = {0}, positions[8] = {0};
        float mask[8] = {0};
        dcp_sample s = {tokens, labels, mask, positions, 8, NULL, 0, 8, 8};
        dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
        dcp_step_args args;
        memset(&args, 0, sizeof args);
        args.world = &comm;
        args.data_context_parallel = &comm;
        const dcp_step_output *out = NULL;
        t->status[thread] = dcp_step(ctx, &args, &in, &out);
        snprintf(t->why[thread], sizeof t->why[thread], "%s", dcp_context_last_error(ctx));
        dcp_context_destroy(ctx);
    } else {
        int64_t send = 7 + thread, recv[2];
        t->status[thread] = comm.ops->allgather(&comm, &send, sizeof send, recv);
        snprintf(t->why[thread], sizeof t->why[thread], "%s", comm.ops->describe_failure(&comm));
    }
    t->elapsed_ns[thread] = mono_ns() - start;
}

DCP_TEST(two_threads_calling_as_one_rank_both_fail_within_the_timeout)
{
    for (int use_step = 0; use_step < 2; use_step++)
        for (int round = 0; round < 5; round++) {
            same_rank_test t;
            memset(&t, 0, sizeof t);
            t.use_step = use_step;
            DCP_REQUIRE_OK(dcp_inproc_world_create(2, SHORT_TIMEOUT_MS, &t.world));
            DCP_REQUIRE_OK(dcp_inproc_run(2, same_rank_thread, &t));
            dcp_inproc_world_destroy(t.world);
            int timeouts = 0;
            for (int th = 0; th < 2; th++) {
                DCP_CHECK(t.status[th] != DCP_OK);
                DCP_CHECK(t.elapsed_ns[th] < 4 * (int64_t)SHORT_TIMEOUT_MS * 1000000);
                timeouts += t.status[th] == DCP_ERR_TIMEOUT;
            }
            DCP_CHECK(timeouts >= 1); /* the thread that got in waits for rank 1, bounded by the timeout */
            /* the other is refused at once and told why (unless it came after the first had given up) */
            if (timeouts == 1) {
                int told = strstr(t.why[0], "another thread") || strstr(t.why[1], "another thread");
                DCP_CHECK(told);
            }
        }
}
