/*
 * comm_inproc.c - the in-process communicator: the ranks of a world are
 * threads of this process and a collective copies straight between their
 * buffers.  The semantics callers see are in dcpack.h ("In-process backend").
 *
 * Generations.  Every rank numbers its collectives 1, 2, 3, ... (its `seq`);
 * collective k of all ranks is the world's generation k.  The world assembles
 * one generation at a time, `gen`:
 *
 *   collecting --all announced, inconsistent--> every rank DONE(CORRUPT); next generation
 *   collecting --all announced, consistent----> every rank COPY
 *   copying    --the last rank copied---------> every rank DONE(OK); next generation
 *   collecting --a rank gives up--------------> abort record; waiting ranks DONE(status); next generation
 *
 * A rank that calls collective k while gen < k (it failed early in an earlier
 * one and ran ahead) announces and waits "at the door"; it counts as arrived
 * when gen reaches k.  A rank that calls collective k while gen > k is late:
 * k was aborted without it (it cannot have completed without it), and the
 * outcome is in the abort history, a ring of the last HISTORY aborts.  A rank
 * that gives up on a k > gen writes k's abort record in advance; gen skips k
 * when it gets there.
 *
 * Whoever decides an outcome writes it into the slot of every rank it
 * concerns, so a rank that wakes after the world has moved on still reads its
 * own result.  One mutex guards all shared state; one condition variable
 * (monotonic clock) is broadcast on every change of state.  Copies run
 * outside the mutex: announcements do not change while their ranks copy.
 */
#define _POSIX_C_SOURCE 200809L

#include "dcpack.h"
#include "../../alloc/host.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HISTORY 64 /* aborted generations the world remembers for late ranks */

enum op { OP_ALLGATHER = 1, OP_ALLGATHERV, OP_ALLTOALLV, OP_BROADCAST, OP_AGREE };

enum stage {
    STAGE_IDLE = 0, /* not in a collective */
    STAGE_WAITING,  /* announced, waiting for the others (or at the door) */
    STAGE_COPY,     /* everyone announced consistently: copy now */
    STAGE_COPIED,   /* copied, waiting for the others to finish copying */
    STAGE_DONE      /* outcome in result / failed_rank */
};

/* What a rank announces for one collective. */
typedef struct announcement {
    int op;
    const unsigned char *send;           /* allgather(v), alltoallv; broadcast: the buffer */
    size_t bytes;                        /* allgather(v) send bytes; broadcast bytes */
    const size_t *send_bytes;            /* alltoallv [size] */
    const size_t *send_offsets;          /* alltoallv [size] */
    unsigned char *recv;                 /* allgather(v), alltoallv; broadcast: the buffer */
    const size_t *recv_bytes;            /* allgatherv, alltoallv [size] */
    const size_t *recv_offsets;          /* allgatherv, alltoallv [size] */
    int32_t root;                        /* broadcast */
    dcp_status local;                    /* agree */
    int truncated;                       /* DCP_FAULT_TRUNCATE: provides half of each piece it sends */
} announcement;

typedef struct rank_slot {
    dcp_inproc_world *world;
    int32_t rank;
    uint64_t seq;          /* generation of this rank's next collective */
    uint64_t gen;          /* generation the announcement is for */
    int stage;
    dcp_status result;     /* outcome, once stage == STAGE_DONE */
    int32_t failed_rank;
    dcp_status agreed;     /* agree(): computed while copying */
    int32_t agreed_rank;
    dcp_inproc_fault fault; /* pending for the next collective */
    int64_t call_ns;       /* when the rank called the collective */
    announcement a;
    char why[128];         /* why its last collective failed; "" after a success */
    int busy;              /* a thread is inside a collective as this rank */
} rank_slot;

typedef struct abort_record {
    uint64_t gen; /* 0: empty */
    dcp_status status;
    int32_t rank;
} abort_record;

struct dcp_inproc_world {
    int32_t size;
    int64_t timeout_ns; /* 0: wait forever */
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    uint64_t gen;         /* the generation being assembled */
    int64_t gen_start_ns; /* when it became the one being assembled */
    int32_t arrived;      /* ranks that announced it */
    int32_t copied;       /* ranks done copying it */
    int copying;
    rank_slot *slots;
    abort_record history[HISTORY];
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void finish(rank_slot *slot, dcp_status status, int32_t failed_rank)
{
    slot->stage = STAGE_DONE;
    slot->result = status;
    slot->failed_rank = failed_rank;
}

static const abort_record *aborted(const dcp_inproc_world *w, uint64_t gen)
{
    const abort_record *rec = &w->history[gen % HISTORY];
    return rec->gen == gen ? rec : NULL;
}

static int announced_current(const dcp_inproc_world *w, int32_t p)
{
    return w->slots[p].stage == STAGE_WAITING && w->slots[p].gen == w->gen;
}

/* ---- deciding a fully announced generation ---- */

static size_t provided(const announcement *a, size_t announced)
{
    return a->truncated ? announced / 2 : announced;
}

/* The lowest rank involved in a disagreement. */
static void blame(int32_t *culprit, int32_t a, int32_t b)
{
    int32_t low = a < b ? a : b;
    if (*culprit < 0 || low < *culprit) *culprit = low;
}

/* DCP_OK if every rank can receive exactly what every sender provides. */
static dcp_status check_announcements(const dcp_inproc_world *w, int32_t *culprit)
{
    const int32_t n = w->size;
    const rank_slot *s = w->slots;
    *culprit = -1;
    for (int32_t q = 1; q < n; q++)
        if (s[q].a.op != s[0].a.op) blame(culprit, 0, q);
    if (*culprit >= 0) return DCP_ERR_CORRUPT_INPUT;

    switch (s[0].a.op) {
    case OP_ALLGATHER:
        for (int32_t p = 0; p < n; p++) {
            if (s[p].a.bytes != s[0].a.bytes) blame(culprit, 0, p);
            if (provided(&s[p].a, s[p].a.bytes) != s[p].a.bytes) blame(culprit, p, p);
        }
        break;
    case OP_ALLGATHERV:
        for (int32_t p = 0; p < n; p++) {
            if (provided(&s[p].a, s[p].a.bytes) != s[p].a.bytes) blame(culprit, p, p);
            for (int32_t q = 0; q < n; q++)
                if (s[q].a.recv_bytes[p] != s[p].a.bytes) blame(culprit, p, q);
        }
        break;
    case OP_ALLTOALLV:
        for (int32_t p = 0; p < n; p++)
            for (int32_t q = 0; q < n; q++) {
                size_t sent = s[p].a.send_bytes[q];
                if (provided(&s[p].a, sent) != sent) blame(culprit, p, p);
                if (s[q].a.recv_bytes[p] != sent) blame(culprit, p, q);
            }
        break;
    case OP_BROADCAST: {
        for (int32_t q = 0; q < n; q++) {
            if (s[q].a.root < 0 || s[q].a.root >= n) blame(culprit, q, q);
            if (s[q].a.root != s[0].a.root) blame(culprit, 0, q);
        }
        if (*culprit >= 0) break;
        const int32_t root = s[0].a.root;
        for (int32_t q = 0; q < n; q++)
            if (s[q].a.bytes != s[root].a.bytes) blame(culprit, root, q);
        if (provided(&s[root].a, s[root].a.bytes) != s[root].a.bytes) blame(culprit, root, root);
        break;
    }
    case OP_AGREE:
        for (int32_t p = 0; p < n; p++)
            if (provided(&s[p].a, sizeof(dcp_status)) != sizeof(dcp_status)) blame(culprit, p, p);
        break;
    default:
        blame(culprit, 0, 0);
        break;
    }
    return *culprit >= 0 ? DCP_ERR_CORRUPT_INPUT : DCP_OK;
}

static void advance(dcp_inproc_world *w);

/* Every rank has announced the current generation: reject it or let everyone copy. */
static void all_arrived(dcp_inproc_world *w)
{
    int32_t culprit = -1;
    dcp_status verdict = check_announcements(w, &culprit);
    if (verdict != DCP_OK) {
        for (int32_t p = 0; p < w->size; p++) finish(&w->slots[p], verdict, culprit);
        advance(w);
        return;
    }
    w->copying = 1;
    for (int32_t p = 0; p < w->size; p++) w->slots[p].stage = STAGE_COPY;
    pthread_cond_broadcast(&w->changed);
}

/* The current generation is over: start the next one that has not been aborted in advance. */
static void advance(dcp_inproc_world *w)
{
    w->gen++;
    while (aborted(w, w->gen)) w->gen++;
    w->gen_start_ns = now_ns();
    w->arrived = 0;
    w->copied = 0;
    w->copying = 0;
    for (int32_t p = 0; p < w->size; p++)
        if (announced_current(w, p)) w->arrived++; /* ranks that were waiting at the door */
    pthread_cond_broadcast(&w->changed);
    if (w->arrived == w->size) all_arrived(w);
}

/*
 * Abort generation `gen` (the current one, still collecting, or a later one)
 * with `status` caused by `rank`.  The first abort of a generation wins.
 */
static void abort_generation(dcp_inproc_world *w, uint64_t gen, dcp_status status, int32_t rank)
{
    abort_record *rec = &w->history[gen % HISTORY];
    if (rec->gen == gen) return;
    rec->gen = gen;
    rec->status = status;
    rec->rank = rank;
    for (int32_t p = 0; p < w->size; p++)
        if (w->slots[p].stage == STAGE_WAITING && w->slots[p].gen == gen) finish(&w->slots[p], status, rank);
    if (gen == w->gen) advance(w);
    pthread_cond_broadcast(&w->changed);
}

static int32_t lowest_missing(const dcp_inproc_world *w)
{
    for (int32_t p = 0; p < w->size; p++)
        if (!announced_current(w, p)) return p;
    return -1;
}

/* ---- copying: every rank reads its peers' buffers, writes only its own ---- */

/* bytes from src + src_at to dst + dst_at; nothing (not even the pointer arithmetic) for 0 bytes */
static void copy_piece(unsigned char *dst_base, size_t dst_at, const unsigned char *src_base, size_t src_at,
                       size_t bytes, int self)
{
    if (bytes == 0) return;
    unsigned char *dst = dst_base + dst_at;
    const unsigned char *src = src_base + src_at;
    if (dst == src) return;
    if (self) memmove(dst, src, bytes); /* an in-place collective may overlap its own send and receive */
    else memcpy(dst, src, bytes);
}

static void copy_in(rank_slot *me)
{
    const dcp_inproc_world *w = me->world;
    const announcement *a = &me->a;
    const int32_t r = me->rank;
    switch (a->op) {
    case OP_ALLGATHER:
        for (int32_t p = 0; p < w->size; p++)
            copy_piece(a->recv, (size_t)p * a->bytes, w->slots[p].a.send, 0, a->bytes, p == r);
        break;
    case OP_ALLGATHERV:
        for (int32_t p = 0; p < w->size; p++)
            copy_piece(a->recv, a->recv_offsets[p], w->slots[p].a.send, 0, a->recv_bytes[p], p == r);
        break;
    case OP_ALLTOALLV:
        for (int32_t p = 0; p < w->size; p++) {
            const announcement *peer = &w->slots[p].a;
            copy_piece(a->recv, a->recv_offsets[p], peer->send, peer->send_offsets[r], a->recv_bytes[p], p == r);
        }
        break;
    case OP_BROADCAST:
        if (r != a->root) copy_piece(a->recv, 0, w->slots[a->root].a.send, 0, a->bytes, 0);
        break;
    case OP_AGREE:
        me->agreed = DCP_OK;
        me->agreed_rank = -1;
        for (int32_t p = 0; p < w->size; p++)
            if (w->slots[p].a.local != DCP_OK) {
                me->agreed = w->slots[p].a.local;
                me->agreed_rank = p;
                break;
            }
        break;
    default:
        break;
    }
}

/* ---- one collective, from one rank's side ---- */

static void wait_until(dcp_inproc_world *w, int64_t deadline_ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ns / 1000000000);
    ts.tv_nsec = (long)(deadline_ns % 1000000000);
    int rc = pthread_cond_timedwait(&w->changed, &w->mutex, &ts);
    (void)rc; /* ETIMEDOUT or a wake-up: the caller re-reads the state either way */
}

/* The sentence describe_failure gives for a collective's outcome on this rank. */
static void describe(rank_slot *me, uint64_t k, dcp_status status, int32_t failed, dcp_inproc_fault fault)
{
    const dcp_inproc_world *w = me->world;
    if (status == DCP_OK) me->why[0] = '\0';
    else if (fault == DCP_FAULT_NEVER_ARRIVE)
        snprintf(me->why, sizeof me->why, "rank %d did not take part in collective %llu (planted fault)", me->rank,
                 (unsigned long long)k);
    else if (status == DCP_ERR_TIMEOUT && failed >= 0 && failed != me->rank)
        snprintf(me->why, sizeof me->why, "rank %d did not arrive at collective %llu within %lld ms", failed,
                 (unsigned long long)k, (long long)(w->timeout_ns / 1000000));
    else if (status == DCP_ERR_TIMEOUT)
        snprintf(me->why, sizeof me->why, "this rank came to collective %llu after its peers had given up",
                 (unsigned long long)k);
    else if (failed >= 0)
        snprintf(me->why, sizeof me->why, "collective %llu failed with %s on rank %d", (unsigned long long)k,
                 dcp_status_str(status), failed);
    else
        snprintf(me->why, sizeof me->why, "collective %llu failed with %s", (unsigned long long)k,
                 dcp_status_str(status));
}

/*
 * Take part in the next collective.  `local` is the rank's own verdict on its
 * arguments (DCP_OK or the status it gives up with).
 */
static dcp_status collective(rank_slot *me, const announcement *a, dcp_status local, int32_t *failed_rank)
{
    dcp_inproc_world *w = me->world;
    dcp_status status;
    int32_t failed;
    pthread_mutex_lock(&w->mutex);
    if (me->busy) {
        /* a second thread calling as this rank (a caller bug: it took another rank's handle): it must not take
           part, or the slot's state would be two calls' at once and one thread could wait forever.  It fails at
           once; the first goes on and times out waiting for the rank that never came. */
        snprintf(me->why, sizeof me->why,
                 "rank %d's handle is already in a collective on another thread (two threads calling as one rank)",
                 me->rank);
        pthread_mutex_unlock(&w->mutex);
        if (failed_rank) *failed_rank = me->rank;
        return DCP_ERR_INVALID_ARGUMENT;
    }
    me->busy = 1;
    const uint64_t k = me->seq++;
    const dcp_inproc_fault fault = me->fault;
    me->fault = DCP_FAULT_NONE;
    const abort_record *rec = aborted(w, k);

    if (fault == DCP_FAULT_NEVER_ARRIVE) {
        /* the call counts, but nobody learns of it */
        status = DCP_ERR_COMM;
        failed = me->rank;
    } else if (k < w->gen) {
        /* late: k ended without this rank, so it was aborted */
        status = rec ? rec->status : DCP_ERR_TIMEOUT;
        failed = rec ? rec->rank : me->rank;
    } else if (rec) {
        /* aborted in advance by a rank that ran ahead */
        status = rec->status;
        failed = rec->rank;
    } else if (local != DCP_OK || fault == DCP_FAULT_RETURN_ERROR) {
        abort_generation(w, k, local != DCP_OK ? local : DCP_ERR_COMM, me->rank);
        rec = aborted(w, k);
        status = rec->status;
        failed = rec->rank;
    } else {
        me->a = *a;
        me->a.truncated = fault == DCP_FAULT_TRUNCATE;
        me->gen = k;
        me->stage = STAGE_WAITING;
        me->call_ns = now_ns();
        if (k == w->gen && ++w->arrived == w->size) all_arrived(w);
        while (me->stage != STAGE_DONE) {
            if (me->stage == STAGE_COPY) {
                pthread_mutex_unlock(&w->mutex);
                copy_in(me);
                pthread_mutex_lock(&w->mutex);
                me->stage = STAGE_COPIED;
                if (++w->copied == w->size) {
                    for (int32_t p = 0; p < w->size; p++) finish(&w->slots[p], DCP_OK, -1);
                    advance(w);
                }
            } else if (me->stage == STAGE_COPIED || w->timeout_ns == 0) {
                pthread_cond_wait(&w->changed, &w->mutex); /* copies always finish: no time limit */
            } else {
                /* waiting for peers: the clock runs from the later of the call and the current generation's start */
                int64_t start = me->call_ns > w->gen_start_ns ? me->call_ns : w->gen_start_ns;
                int64_t deadline = start + w->timeout_ns;
                if (now_ns() < deadline) wait_until(w, deadline);
                else if (k == w->gen) abort_generation(w, k, DCP_ERR_TIMEOUT, lowest_missing(w));
                else abort_generation(w, w->gen, DCP_ERR_TIMEOUT, me->rank); /* it skipped the current one */
            }
        }
        me->stage = STAGE_IDLE;
        status = me->result;
        failed = me->failed_rank;
    }
    describe(me, k, status, failed, fault);
    me->busy = 0;
    pthread_mutex_unlock(&w->mutex);
    if (failed_rank) *failed_rank = failed;
    return status;
}

/* ---- the operations ---- */

static rank_slot *slot_of(dcp_comm *comm) { return comm ? (rank_slot *)comm->impl : NULL; }

/* DCP_OK if recv + offsets[p] + bytes[p] is addressable for every p. */
static dcp_status check_pieces(const void *base, const size_t *bytes, const size_t *offsets, int32_t n)
{
    for (int32_t p = 0; p < n; p++) {
        if (bytes[p] == 0) continue;
        if (!base) return DCP_ERR_NULL_POINTER;
        if (offsets[p] > SIZE_MAX - bytes[p]) return DCP_ERR_OVERFLOW;
    }
    return DCP_OK;
}

static dcp_status inproc_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    rank_slot *me = slot_of(comm);
    if (!me) return DCP_ERR_NULL_POINTER;
    announcement a = {0};
    a.op = OP_ALLGATHER;
    a.send = send;
    a.bytes = bytes;
    a.recv = recv;
    dcp_status local = DCP_OK;
    if (bytes > 0 && (!send || !recv)) local = DCP_ERR_NULL_POINTER;
    else if (bytes > SIZE_MAX / (size_t)me->world->size) local = DCP_ERR_OVERFLOW;
    return collective(me, &a, local, NULL);
}

static dcp_status inproc_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                                    const size_t *recv_bytes, const size_t *recv_offsets)
{
    rank_slot *me = slot_of(comm);
    if (!me) return DCP_ERR_NULL_POINTER;
    announcement a = {0};
    a.op = OP_ALLGATHERV;
    a.send = send;
    a.bytes = send_bytes;
    a.recv = recv;
    a.recv_bytes = recv_bytes;
    a.recv_offsets = recv_offsets;
    dcp_status local = DCP_OK;
    if (!recv_bytes || !recv_offsets || (send_bytes > 0 && !send)) local = DCP_ERR_NULL_POINTER;
    else local = check_pieces(recv, recv_bytes, recv_offsets, me->world->size);
    return collective(me, &a, local, NULL);
}

static dcp_status inproc_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes,
                                   const size_t *send_offsets, void *recv, const size_t *recv_bytes,
                                   const size_t *recv_offsets)
{
    rank_slot *me = slot_of(comm);
    if (!me) return DCP_ERR_NULL_POINTER;
    announcement a = {0};
    a.op = OP_ALLTOALLV;
    a.send = send;
    a.send_bytes = send_bytes;
    a.send_offsets = send_offsets;
    a.recv = recv;
    a.recv_bytes = recv_bytes;
    a.recv_offsets = recv_offsets;
    dcp_status local = DCP_OK;
    if (!send_bytes || !send_offsets || !recv_bytes || !recv_offsets) local = DCP_ERR_NULL_POINTER;
    else local = check_pieces(send, send_bytes, send_offsets, me->world->size);
    if (local == DCP_OK) local = check_pieces(recv, recv_bytes, recv_offsets, me->world->size);
    return collective(me, &a, local, NULL);
}

static dcp_status inproc_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    rank_slot *me = slot_of(comm);
    if (!me) return DCP_ERR_NULL_POINTER;
    announcement a = {0};
    a.op = OP_BROADCAST;
    a.send = buffer;
    a.recv = buffer;
    a.bytes = bytes;
    a.root = root; /* checked against the other ranks' roots: a bad root is everyone's error */
    dcp_status local = bytes > 0 && !buffer ? DCP_ERR_NULL_POINTER : DCP_OK;
    return collective(me, &a, local, NULL);
}

static dcp_status inproc_agree(dcp_comm *comm, dcp_status local_status, dcp_status *agreed, int32_t *failed_rank)
{
    rank_slot *me = slot_of(comm);
    if (!me) return DCP_ERR_NULL_POINTER;
    announcement a = {0};
    a.op = OP_AGREE;
    a.local = local_status;
    dcp_status local = !agreed || !failed_rank ? DCP_ERR_NULL_POINTER : DCP_OK;
    int32_t failed = -1;
    dcp_status st = collective(me, &a, local, &failed);
    if (agreed && failed_rank) {
        *agreed = st == DCP_OK ? me->agreed : st;
        *failed_rank = st == DCP_OK ? me->agreed_rank : failed;
    }
    return st;
}

static const char *inproc_describe_failure(dcp_comm *comm)
{
    rank_slot *me = slot_of(comm);
    if (!me) return "";
    pthread_mutex_lock(&me->world->mutex);
    const char *why = me->why; /* written only by this rank's own calls */
    pthread_mutex_unlock(&me->world->mutex);
    return why;
}

static const dcp_comm_ops inproc_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), inproc_allgather, inproc_allgatherv, inproc_alltoallv, inproc_broadcast,
    inproc_agree, inproc_describe_failure,
};

/* ---- worlds ---- */

dcp_status dcp_inproc_world_create(int32_t size, int32_t timeout_ms, dcp_inproc_world **world)
{
    if (!world) return DCP_ERR_NULL_POINTER;
    if (size < 1 || timeout_ms < 0) return DCP_ERR_INVALID_ARGUMENT;
    dcp_inproc_world *w = dcp__host_calloc(1, sizeof *w);
    rank_slot *slots = dcp__host_calloc((size_t)size, sizeof *slots);
    if (!w || !slots) {
        dcp__host_free(w);
        dcp__host_free(slots);
        return DCP_ERR_ALLOC;
    }
    pthread_condattr_t attr;
    int ok = pthread_condattr_init(&attr) == 0;
    ok = ok && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0;
    ok = ok && pthread_cond_init(&w->changed, &attr) == 0;
    if (ok && pthread_mutex_init(&w->mutex, NULL) != 0) {
        pthread_cond_destroy(&w->changed);
        ok = 0;
    }
    pthread_condattr_destroy(&attr);
    if (!ok) {
        dcp__host_free(w);
        dcp__host_free(slots);
        return DCP_ERR_ALLOC;
    }
    w->size = size;
    w->timeout_ns = (int64_t)timeout_ms * 1000000;
    w->slots = slots;
    w->gen = 1;
    w->gen_start_ns = now_ns();
    for (int32_t r = 0; r < size; r++) {
        slots[r].world = w;
        slots[r].rank = r;
        slots[r].seq = 1;
    }
    *world = w;
    return DCP_OK;
}

void dcp_inproc_world_destroy(dcp_inproc_world *world)
{
    if (!world) return;
    pthread_cond_destroy(&world->changed);
    pthread_mutex_destroy(&world->mutex);
    dcp__host_free(world->slots);
    dcp__host_free(world);
}

dcp_status dcp_inproc_comm(dcp_inproc_world *world, int32_t rank, dcp_comm *comm)
{
    if (!world || !comm) return DCP_ERR_NULL_POINTER;
    if (rank < 0 || rank >= world->size) return DCP_ERR_INVALID_ARGUMENT;
    comm->ops = &inproc_ops;
    comm->rank = rank;
    comm->size = world->size;
    comm->impl = &world->slots[rank];
    comm->calls = 0;
    return DCP_OK;
}

dcp_status dcp_inproc_inject_fault(dcp_inproc_world *world, int32_t rank, dcp_inproc_fault fault)
{
    if (!world) return DCP_ERR_NULL_POINTER;
    if (rank < 0 || rank >= world->size || fault < DCP_FAULT_NONE || fault > DCP_FAULT_TRUNCATE)
        return DCP_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&world->mutex);
    world->slots[rank].fault = fault;
    pthread_mutex_unlock(&world->mutex);
    return DCP_OK;
}

/* ---- running ranks as threads ---- */

typedef struct run_gate {
    pthread_mutex_t mutex;
    pthread_cond_t open;
    int state; /* 0: wait, 1: run, -1: cancelled */
    void (*fn)(int32_t rank, void *arg);
    void *arg;
} run_gate;

typedef struct run_rank {
    run_gate *gate;
    int32_t rank;
} run_rank;

static void *run_thread(void *p)
{
    run_rank *rr = p;
    run_gate *g = rr->gate;
    pthread_mutex_lock(&g->mutex);
    while (g->state == 0) pthread_cond_wait(&g->open, &g->mutex);
    int run = g->state == 1;
    pthread_mutex_unlock(&g->mutex);
    if (run) g->fn(rr->rank, g->arg);
    return NULL;
}

dcp_status dcp_inproc_run(int32_t size, void (*fn)(int32_t rank, void *arg), void *arg)
{
    if (!fn) return DCP_ERR_NULL_POINTER;
    if (size < 1) return DCP_ERR_INVALID_ARGUMENT;
    pthread_t *threads = dcp__host_calloc((size_t)size, sizeof *threads);
    run_rank *ranks = dcp__host_calloc((size_t)size, sizeof *ranks);
    run_gate gate = {.state = 0, .fn = fn, .arg = arg};
    if (!threads || !ranks || pthread_mutex_init(&gate.mutex, NULL) != 0) {
        dcp__host_free(threads);
        dcp__host_free(ranks);
        return DCP_ERR_ALLOC;
    }
    if (pthread_cond_init(&gate.open, NULL) != 0) {
        pthread_mutex_destroy(&gate.mutex);
        dcp__host_free(threads);
        dcp__host_free(ranks);
        return DCP_ERR_ALLOC;
    }
    int32_t started = 0;
    for (; started < size; started++) {
        ranks[started].gate = &gate;
        ranks[started].rank = started;
        if (pthread_create(&threads[started], NULL, run_thread, &ranks[started]) != 0) break;
    }
    /* all ranks or none: a missing rank would leave the others waiting in their first collective */
    pthread_mutex_lock(&gate.mutex);
    gate.state = started == size ? 1 : -1;
    pthread_cond_broadcast(&gate.open);
    pthread_mutex_unlock(&gate.mutex);
    for (int32_t r = 0; r < started; r++) pthread_join(threads[r], NULL);
    pthread_cond_destroy(&gate.open);
    pthread_mutex_destroy(&gate.mutex);
    dcp__host_free(threads);
    dcp__host_free(ranks);
    return started == size ? DCP_OK : DCP_ERR_ALLOC;
}
