/*
 * fuzz_comm.c - the in-process communicator under arbitrary sequences of
 * collectives, each with at most one anomaly on one rank: an injected fault
 * (a rank returns an error, never arrives, truncates what it sends), sizes
 * that disagree, or a NULL buffer.  Ranks are threads (dcp_inproc_run).
 *
 * Properties, per collective:
 *  - no anomaly: DCP_OK on every rank and every byte where it belongs (the
 *    fill everywhere else);
 *  - a rank returns an error: DCP_ERR_COMM on every rank;
 *  - sizes that disagree, or a truncated send: DCP_ERR_CORRUPT_INPUT on every
 *    rank (a rank with nothing to send truncates nothing: DCP_OK);
 *  - a NULL buffer: DCP_ERR_NULL_POINTER on every rank;
 *  - a rank never arrives: DCP_ERR_COMM on it, DCP_ERR_TIMEOUT on the others,
 *    within the world's timeout;
 *  - agree: every rank gets the lowest failing rank's status and number.
 * and after the whole sequence the world still works: a good all-gather on
 * every rank.  Nothing hangs (libFuzzer's -timeout reports a hang).
 *
 * Inputs without a rank that never arrives use a 10 s timeout, so a slow
 * thread cannot time out by accident; with one, 200 ms, and a timeout that
 * every rank agrees on is then accepted for any collective.
 *
 * Input layout: [0] ranks - 2 (mod 5), then 4 bytes a collective:
 *   [operation (mod 5) | anomaly << 3 (mod 6)] [anomalous rank] [size] [extra: root / agree's failing ranks]
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_RANKS 6
#define MAX_OPS 8
#define MAX_BYTES 64

enum op { OP_ALLGATHER, OP_ALLGATHERV, OP_ALLTOALLV, OP_BROADCAST, OP_AGREE, NUM_OPS };
enum anomaly { NONE, RETURN_ERROR, TRUNCATE, NEVER_ARRIVE, MISMATCH, NULL_BUFFER, NUM_ANOMALIES };

typedef struct collective {
    enum op op;
    enum anomaly anomaly;
    int32_t rank;  /* the anomalous rank */
    int32_t size;  /* base byte count */
    uint8_t extra; /* broadcast root; agree: bit r = rank r fails */
} collective;

typedef struct world_run {
    dcp_inproc_world *world;
    int32_t size;
    int32_t num_ops;
    collective ops[MAX_OPS];
    dcp_status status[MAX_OPS + 1][MAX_RANKS];
    dcp_status agreed[MAX_OPS][MAX_RANKS];
    int32_t failed[MAX_OPS][MAX_RANKS];
    int bad[MAX_OPS + 1][MAX_RANKS]; /* wrong bytes after an OK collective */
} world_run;

static unsigned char byte_of(int32_t op, int32_t from, int32_t to, size_t i)
{
    return (unsigned char)(op * 31 + from * 7 + to * 3 + (int32_t)i * 13 + 1);
}

static size_t v_bytes(const collective *c, int32_t r) { return (size_t)((c->size + r * 3) % 50); }
static size_t a_bytes(const collective *c, int32_t from, int32_t to)
{
    return (size_t)((c->size + from * 7 + to * 5) % 23);
}

/* Run collective k on rank r; check the bytes it received when it succeeded. */
static void run_collective(world_run *w, int32_t k, int32_t r, dcp_comm *comm)
{
    const collective *c = &w->ops[k];
    const int32_t n = w->size;
    const int anomalous = c->anomaly != NONE && c->rank == r;
    unsigned char send[MAX_RANKS * MAX_BYTES], recv[MAX_RANKS * MAX_BYTES + 8];
    memset(recv, 0xA5, sizeof recv);
    size_t bytes[MAX_RANKS], offsets[MAX_RANKS], sbytes[MAX_RANKS], soffsets[MAX_RANKS];
    dcp_status st = DCP_OK;
    int bad = 0;
    /* a fault applies to this rank's next collective: armed from its own thread, just before */
    if (anomalous && (c->anomaly == RETURN_ERROR || c->anomaly == TRUNCATE || c->anomaly == NEVER_ARRIVE)) {
        dcp_inproc_fault fault = c->anomaly == RETURN_ERROR ? DCP_FAULT_RETURN_ERROR
                                 : c->anomaly == TRUNCATE   ? DCP_FAULT_TRUNCATE
                                                            : DCP_FAULT_NEVER_ARRIVE;
        DCP_FUZZ_ASSERT(dcp_inproc_inject_fault(w->world, r, fault) == DCP_OK, "inject");
    }
    switch (c->op) {
    case OP_ALLGATHER: {
        size_t b = (size_t)(c->size % MAX_BYTES) + 1;
        for (size_t i = 0; i < b; i++) send[i] = byte_of(k, r, 0, i);
        size_t announce = anomalous && c->anomaly == MISMATCH ? b - 1 : b;
        st = comm->ops->allgather(comm, anomalous && c->anomaly == NULL_BUFFER ? NULL : send, announce, recv);
        if (st == DCP_OK)
            for (int32_t p = 0; p < n; p++)
                for (size_t i = 0; i < b; i++) bad += recv[(size_t)p * b + i] != byte_of(k, p, 0, i);
        break;
    }
    case OP_ALLGATHERV: {
        size_t at = 0;
        for (int32_t p = 0; p < n; p++) {
            bytes[p] = v_bytes(c, p);
            offsets[p] = at;
            at += bytes[p] + 1; /* a gap byte that must stay untouched */
        }
        size_t mine = v_bytes(c, r);
        for (size_t i = 0; i < mine; i++) send[i] = byte_of(k, r, 0, i);
        if (anomalous && c->anomaly == MISMATCH) bytes[(r + 1) % n] += 1; /* expects more than its peer sends */
        st = comm->ops->allgatherv(comm, send, mine, anomalous && c->anomaly == NULL_BUFFER ? NULL : recv, bytes,
                                   offsets);
        if (st == DCP_OK)
            for (int32_t p = 0; p < n; p++) {
                for (size_t i = 0; i < v_bytes(c, p); i++) bad += recv[offsets[p] + i] != byte_of(k, p, 0, i);
                bad += recv[offsets[p] + v_bytes(c, p)] != 0xA5;
            }
        break;
    }
    case OP_ALLTOALLV: {
        size_t at = 0, rat = 0;
        for (int32_t p = 0; p < n; p++) {
            sbytes[p] = a_bytes(c, r, p);
            soffsets[p] = at;
            for (size_t i = 0; i < sbytes[p]; i++) send[at + i] = byte_of(k, r, p, i);
            at += sbytes[p];
            bytes[p] = a_bytes(c, p, r);
            offsets[p] = rat;
            rat += bytes[p] + 1;
        }
        if (anomalous && c->anomaly == MISMATCH) sbytes[(r + 1) % n] += 1;
        st = comm->ops->alltoallv(comm, anomalous && c->anomaly == NULL_BUFFER ? NULL : send, sbytes, soffsets, recv,
                                  bytes, offsets);
        if (st == DCP_OK)
            for (int32_t p = 0; p < n; p++) {
                for (size_t i = 0; i < bytes[p]; i++) bad += recv[offsets[p] + i] != byte_of(k, p, r, i);
                bad += recv[offsets[p] + bytes[p]] != 0xA5;
            }
        break;
    }
    case OP_BROADCAST: {
        const int32_t root = c->extra % n;
        size_t b = (size_t)(c->size % MAX_BYTES) + 1;
        if (r == root)
            for (size_t i = 0; i < b; i++) recv[i] = byte_of(k, root, 0, i);
        size_t announce = anomalous && c->anomaly == MISMATCH ? b + 1 : b;
        st = comm->ops->broadcast(comm, anomalous && c->anomaly == NULL_BUFFER ? NULL : recv, announce, root);
        if (st == DCP_OK) {
            for (size_t i = 0; i < b; i++) bad += recv[i] != byte_of(k, root, 0, i);
            bad += recv[b] != 0xA5;
        }
        break;
    }
    default: {
        dcp_status local = ((c->extra >> r) & 1) ? (dcp_status)(-1 - (r % 12)) : DCP_OK;
        dcp_status agreed = (dcp_status)99;
        int32_t failed = -99;
        st = comm->ops->agree(comm, local, anomalous && c->anomaly == NULL_BUFFER ? NULL : &agreed, &failed);
        w->agreed[k][r] = agreed;
        w->failed[k][r] = failed;
        break;
    }
    }
    w->status[k][r] = st;
    w->bad[k][r] = bad;
}

static void rank_main(int32_t r, void *arg)
{
    world_run *w = arg;
    dcp_comm comm;
    if (dcp_inproc_comm(w->world, r, &comm) != DCP_OK) {
        for (int32_t k = 0; k <= w->num_ops; k++) w->status[k][r] = DCP_ERR_INVALID_ARGUMENT;
        return;
    }
    for (int32_t k = 0; k < w->num_ops; k++) run_collective(w, k, r, &comm);
    /* the world still works: a good all-gather */
    int64_t mine = 1000 + r, all[MAX_RANKS];
    w->status[w->num_ops][r] = comm.ops->allgather(&comm, &mine, sizeof mine, all);
    for (int32_t p = 0; p < w->size && w->status[w->num_ops][r] == DCP_OK; p++)
        w->bad[w->num_ops][r] += all[p] != 1000 + p;
}

/* Does a rank have anything to send in collective c (a truncation of nothing changes nothing)? */
static int sends_something(const world_run *w, const collective *c, int32_t r)
{
    switch (c->op) {
    case OP_ALLGATHERV: return v_bytes(c, r) > 0;
    case OP_ALLTOALLV:
        for (int32_t p = 0; p < w->size; p++)
            if (a_bytes(c, r, p) > 0) return 1;
        return 0;
    case OP_BROADCAST: return c->extra % w->size == r;
    default: return 1;
    }
}

static void check(const world_run *w, int never_arrive)
{
    const int32_t n = w->size;
    for (int32_t k = 0; k <= w->num_ops; k++) {
        const collective *c = k < w->num_ops ? &w->ops[k] : NULL;
        const enum anomaly a = c ? c->anomaly : NONE;
        const dcp_status s0 = w->status[k][0];
        if (a == NEVER_ARRIVE) {
            for (int32_t r = 0; r < n; r++)
                DCP_FUZZ_ASSERT(w->status[k][r] == (r == c->rank ? DCP_ERR_COMM : DCP_ERR_TIMEOUT),
                                "collective %d (op %d): rank %d never arrives; rank %d got %s", k, (int)c->op, c->rank,
                                r, dcp_status_str(w->status[k][r]));
            continue;
        }
        for (int32_t r = 1; r < n; r++)
            DCP_FUZZ_ASSERT(w->status[k][r] == s0, "collective %d (op %d, anomaly %d on rank %d): rank 0 %s, rank %d %s",
                            k, c ? (int)c->op : -1, (int)a, c ? c->rank : -1, dcp_status_str(s0), r,
                            dcp_status_str(w->status[k][r]));
        dcp_status want = DCP_OK;
        if (a == RETURN_ERROR) want = DCP_ERR_COMM;
        if (a == MISMATCH) want = DCP_ERR_CORRUPT_INPUT;
        if (a == NULL_BUFFER) want = DCP_ERR_NULL_POINTER;
        if (a == TRUNCATE && sends_something(w, c, c->rank)) want = DCP_ERR_CORRUPT_INPUT;
        /* with a 200 ms timeout in the input, a thread the machine left waiting may time out: agreed, it counts */
        if (!(never_arrive && s0 == DCP_ERR_TIMEOUT))
            DCP_FUZZ_ASSERT(s0 == want, "collective %d (op %d, anomaly %d on rank %d): %s, expected %s", k,
                            c ? (int)c->op : -1, (int)a, c ? c->rank : -1, dcp_status_str(s0), dcp_status_str(want));
        for (int32_t r = 0; r < n; r++)
            DCP_FUZZ_ASSERT(w->bad[k][r] == 0, "collective %d: rank %d received %d wrong bytes", k, r, w->bad[k][r]);
        if (c && c->op == OP_AGREE && s0 == DCP_OK) {
            int32_t lowest = -1;
            for (int32_t r = 0; r < n && lowest < 0; r++)
                if ((c->extra >> r) & 1) lowest = r;
            dcp_status want_agreed = lowest < 0 ? DCP_OK : (dcp_status)(-1 - (lowest % 12));
            for (int32_t r = 0; r < n; r++)
                DCP_FUZZ_ASSERT(w->agreed[k][r] == want_agreed && w->failed[k][r] == lowest,
                                "agree %d: rank %d got %s from rank %d, expected %s from %d", k, r,
                                dcp_status_str(w->agreed[k][r]), w->failed[k][r], dcp_status_str(want_agreed), lowest);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static world_run w;
    memset(&w, 0, sizeof w);
    fuzz_reader rd;
    fuzz_reader_init(&rd, data, size);
    w.size = 2 + fuzz_u8(&rd) % (MAX_RANKS - 1);
    int never_arrive = 0;
    while (fuzz_remaining(&rd) >= 4 && w.num_ops < MAX_OPS) {
        collective *c = &w.ops[w.num_ops++];
        uint8_t b = fuzz_u8(&rd);
        c->op = (enum op)((b & 7) % NUM_OPS);
        c->anomaly = (enum anomaly)((b >> 3) % NUM_ANOMALIES);
        c->rank = fuzz_u8(&rd) % w.size;
        c->size = fuzz_u8(&rd);
        c->extra = fuzz_u8(&rd);
        if (c->op == OP_AGREE && c->anomaly == MISMATCH) c->anomaly = NONE;
        if (c->anomaly == NEVER_ARRIVE && never_arrive++) c->anomaly = NONE; /* one slow input is enough */
    }
    const int32_t timeout_ms = never_arrive ? 200 : 10000;
    DCP_FUZZ_ASSERT(dcp_inproc_world_create(w.size, timeout_ms, &w.world) == DCP_OK, "world");
    DCP_FUZZ_ASSERT(dcp_inproc_run(w.size, rank_main, &w) == DCP_OK, "run");
    dcp_inproc_world_destroy(w.world);
    if (getenv("DCP_FUZZ_VERBOSE"))
        for (int32_t k = 0; k <= w.num_ops; k++)
            fprintf(stderr, "fuzz_comm: %d ranks, collective %d (op %d, anomaly %d on rank %d): rank 0 %s\n", w.size, k,
                    k < w.num_ops ? (int)w.ops[k].op : -1, k < w.num_ops ? (int)w.ops[k].anomaly : 0,
                    k < w.num_ops ? w.ops[k].rank : -1, dcp_status_str(w.status[k][0]));
    check(&w, never_arrive);
    return 0;
}
