/*
 * shm_comm.c - the dcp_comm interface between processes of one host, over
 * POSIX shared memory (see shm_comm.h).
 *
 * Segment layout:
 *
 *   header   magic, sizes, the wake-up counter (a futex word), the job's failure
 *   slots    one per world rank: announced[c] and copied[c] for every
 *            communicator c (how many collectives the rank has announced on c
 *            and finished copying on c), then the descriptor of the collective
 *            the rank is in: communicator, number, operation, its argument
 *            status, sizes, and four arrays of world-size entries
 *   regions  one per world rank: what the rank sends in its current collective
 *
 * A collective number k on communicator c, on every member:
 *   1. write the descriptor (and the data it sends into its own region),
 *      then announced[c] = k (release), wake everyone;
 *   2. wait until every member's announced[c] >= k;
 *   3. judge the descriptors: the same judgement on every member;
 *   4. on DCP_OK copy what it receives out of its peers' regions;
 *   5. copied[c] = k, wake everyone, wait until every member's copied[c] >= k.
 * A member cannot reach step 5's end before every peer has copied, so no
 * region or descriptor is rewritten while a peer still reads it.
 */
#define _GNU_SOURCE /* syscall() */
#include "shm_comm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the shared-memory communicator needs lock-free (address-free) atomics");

#define SHM_MAGIC 0x3130736d68737064ull /* "dpshms01" */

enum { OP_ALLGATHER = 1, OP_ALLGATHERV = 2, OP_ALLTOALLV = 3, OP_BROADCAST = 4, OP_AGREE = 5 };

typedef struct shm_header {
    _Atomic uint64_t magic; /* 0 until rank 0 has sized and set up the segment: then SHM_MAGIC (release) */
    int32_t world_size;
    int32_t reserved;
    uint64_t region_bytes, slot_bytes, regions_at, total_bytes;
    _Atomic uint32_t wake;         /* bumped on every change; sleepers wait on it */
    _Atomic int32_t failure;       /* 0, or the status every operation of the job now returns */
    _Atomic int32_t failure_claim; /* the first rank to fail the job writes the message, then `failure` */
    int32_t failure_rank;          /* world rank the failure names */
    char failure_message[224];
} shm_header;

typedef struct shm_slot {
    _Atomic uint64_t announced[SHM_COMM_MAX];
    _Atomic uint64_t copied[SHM_COMM_MAX];
    _Atomic int64_t pid; /* the rank's process, written when it opens the job: who is gone, after a timeout */
    int32_t comm_id, op, arg_status, root, value, reserved;
    uint64_t seq, bytes;
    /* then uint64_t arrays[4][world_size]: send_bytes, send_offsets, recv_bytes, recv_offsets */
} shm_slot;

struct shm_job {
    unsigned char *base;
    shm_header *h;
    size_t map_bytes;
    int32_t rank, world;
    int32_t timeout_ms;
    int32_t next_id; /* communicators made so far, the world included */
    int owner, unlinked;
    char name[256];
};

typedef struct shm_group {
    shm_job *job;
    int32_t id;
    int32_t *members; /* world rank of each group rank */
    uint64_t seq;     /* collectives made on this communicator */
    char message[256];
} shm_group;

static const dcp_comm_ops shm_ops;

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t deadline_after(const shm_job *j)
{
    return j->timeout_ms > 0 ? now_ns() + (int64_t)j->timeout_ms * 1000000 : INT64_MAX;
}

static shm_slot *slot_of(const shm_job *j, int32_t world_rank)
{
    return (shm_slot *)(j->base + align_up(sizeof(shm_header), 64) + (size_t)world_rank * j->h->slot_bytes);
}

static uint64_t *arrays_of(const shm_job *j, shm_slot *s, int which)
{
    return (uint64_t *)(s + 1) + (size_t)which * (size_t)j->world;
}

static unsigned char *region_of(const shm_job *j, int32_t world_rank)
{
    return j->base + j->h->regions_at + (size_t)world_rank * j->h->region_bytes;
}

static dcp_status note(shm_group *g, dcp_status s, const char *format, ...) __attribute__((format(printf, 3, 4)));
static dcp_status note(shm_group *g, dcp_status s, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(g->message, sizeof g->message, format, args);
    va_end(args);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Waiting and waking                                                        */
/* ------------------------------------------------------------------------ */

static void wake_all(shm_job *j)
{
    atomic_fetch_add_explicit(&j->h->wake, 1u, memory_order_acq_rel);
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)&j->h->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
}

/* Sleep until the wake-up counter moves past `seen`, at most until the deadline (and 50 ms). */
static void sleep_for_change(shm_job *j, uint32_t seen, int64_t deadline)
{
    int64_t left = deadline - now_ns();
    if (left <= 0) return;
    if (left > 50000000) left = 50000000;
#ifdef __linux__
    struct timespec t = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
    syscall(SYS_futex, (uint32_t *)&j->h->wake, FUTEX_WAIT, seen, &t, NULL, 0);
#else
    (void)seen;
    struct timespec t = {0, left < 200000 ? (long)left : 200000};
    nanosleep(&t, NULL);
#endif
}

/* Mark the job failed (the first failure wins) and wake everyone. */
static void fail_job(shm_job *j, dcp_status status, int32_t world_rank, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_job(shm_job *j, dcp_status status, int32_t world_rank, const char *format, ...)
{
    int32_t unclaimed = 0;
    if (atomic_compare_exchange_strong(&j->h->failure_claim, &unclaimed, 1)) {
        va_list args;
        va_start(args, format);
        vsnprintf(j->h->failure_message, sizeof j->h->failure_message, format, args);
        va_end(args);
        j->h->failure_rank = world_rank;
        atomic_store_explicit(&j->h->failure, (int32_t)status, memory_order_release);
    }
    wake_all(j);
}

/* The job's failure, once it is published (a rank that claimed it is writing it right now). */
static dcp_status job_failure(shm_job *j)
{
    dcp_status f = (dcp_status)atomic_load_explicit(&j->h->failure, memory_order_acquire);
    if (f != DCP_OK || !atomic_load(&j->h->failure_claim)) return f;
    for (int64_t until = now_ns() + 1000000000; now_ns() < until;) {
        f = (dcp_status)atomic_load_explicit(&j->h->failure, memory_order_acquire);
        if (f != DCP_OK) return f;
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    return DCP_ERR_COMM; /* claimed by a rank that died before publishing it */
}

static dcp_status failed(shm_group *g, dcp_status f)
{
    return note(g, f, "the job's communicators failed: %s", g->job->h->failure_message);
}

/* 1 while the rank's process exists (not exited, not a zombie); 1 too when that cannot be told. */
static int rank_alive(const shm_job *j, int32_t world_rank)
{
    const pid_t pid = (pid_t)atomic_load(&slot_of(j, world_rank)->pid);
    if (pid <= 0) return 1; /* never opened the job: not known to be gone */
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
#ifdef __linux__
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t got = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[got] = '\0';
        const char *close_paren = strrchr(stat, ')');
        if (close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X')) return 0;
    }
#endif
    return 1;
}

/* Wait until every member's counter (announced or copied) on this communicator reaches seq. */
static dcp_status wait_members(shm_group *g, int copied, uint64_t seq, int size)
{
    shm_job *j = g->job;
    const int64_t deadline = deadline_after(j);
    for (;;) {
        uint32_t seen = atomic_load_explicit(&j->h->wake, memory_order_acquire);
        dcp_status f = job_failure(j);
        if (f != DCP_OK) return failed(g, f);
        int32_t missing = -1;
        for (int32_t r = 0; r < size && missing < 0; r++) {
            shm_slot *s = slot_of(j, g->members[r]);
            _Atomic uint64_t *counter = copied ? &s->copied[g->id] : &s->announced[g->id];
            if (atomic_load_explicit(counter, memory_order_acquire) < seq) missing = r;
        }
        if (missing < 0) return DCP_OK;
        if (now_ns() >= deadline) {
            /* the peer waited for may itself be waiting for one that is gone: name that one */
            const int32_t waited = g->members[missing];
            int32_t gone = rank_alive(j, waited) ? -1 : waited;
            for (int32_t r = 0; gone < 0 && r < j->world; r++)
                if (!rank_alive(j, r)) gone = r;
            if (gone >= 0)
                fail_job(j, DCP_ERR_TIMEOUT, gone,
                         "rank %d (world) is gone: rank %d waited %d ms for rank %d to %s collective %llu of "
                         "communicator %d",
                         gone, j->rank, j->timeout_ms, waited, copied ? "finish" : "arrive at",
                         (unsigned long long)seq, g->id);
            else
                fail_job(j, DCP_ERR_TIMEOUT, waited,
                         "rank %d (world) did not %s collective %llu of communicator %d within %d ms (noticed by "
                         "rank %d)",
                         waited, copied ? "finish" : "arrive at", (unsigned long long)seq, g->id, j->timeout_ms,
                         j->rank);
            return failed(g, job_failure(j));
        }
        sleep_for_change(j, seen, deadline);
    }
}

/* ------------------------------------------------------------------------ */
/* One collective                                                            */
/* ------------------------------------------------------------------------ */

static dcp_status begin(dcp_comm *comm, shm_group **out)
{
    if (!comm || comm->ops != &shm_ops || !comm->impl) return DCP_ERR_NULL_POINTER;
    shm_group *g = (shm_group *)comm->impl;
    dcp_status f = job_failure(g->job);
    if (f != DCP_OK) return failed(g, f);
    *out = g;
    return DCP_OK;
}

/* This rank's slot with the descriptor's head written for the next collective. */
static shm_slot *describe(shm_group *g, int32_t op, dcp_status arg_status)
{
    shm_slot *s = slot_of(g->job, g->job->rank);
    s->comm_id = g->id;
    s->op = op;
    s->arg_status = (int32_t)arg_status;
    s->seq = ++g->seq;
    s->root = 0;
    s->value = 0;
    s->bytes = 0;
    return s;
}

/* Announce the descriptor and wait for every member's; then the verdict every member computes alike. */
static dcp_status announce_and_meet(dcp_comm *comm, shm_group *g, shm_slot *mine)
{
    shm_job *j = g->job;
    atomic_store_explicit(&mine->announced[g->id], mine->seq, memory_order_release);
    wake_all(j);
    dcp_status s = wait_members(g, 0, mine->seq, comm->size);
    if (s != DCP_OK) return s;
    for (int32_t r = 0; r < comm->size; r++) {
        shm_slot *p = slot_of(j, g->members[r]);
        if (p->comm_id != g->id || p->seq != mine->seq || p->op != mine->op)
            return note(g, DCP_ERR_CORRUPT_INPUT,
                        "collective %llu of communicator %d: rank %d called operation %d, rank %d operation %d",
                        (unsigned long long)mine->seq, g->id, 0, slot_of(j, g->members[0])->op, r, p->op);
    }
    for (int32_t r = 0; r < comm->size; r++) {
        shm_slot *p = slot_of(j, g->members[r]);
        if (p->arg_status != DCP_OK)
            return note(g, (dcp_status)p->arg_status, "collective %llu of communicator %d: rank %d failed with %s",
                        (unsigned long long)mine->seq, g->id, r, dcp_status_str((dcp_status)p->arg_status));
    }
    return DCP_OK;
}

/* Say this rank has copied, and wait until every member has. */
static dcp_status leave(dcp_comm *comm, shm_group *g, shm_slot *mine, dcp_status verdict)
{
    atomic_store_explicit(&mine->copied[g->id], mine->seq, memory_order_release);
    wake_all(g->job);
    dcp_status s = wait_members(g, 1, mine->seq, comm->size);
    return s != DCP_OK ? s : verdict;
}

static int add_overflows(uint64_t a, uint64_t b, uint64_t *sum)
{
    *sum = a + b;
    return *sum < a;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

static dcp_status op_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    shm_group *g = NULL;
    dcp_status s = begin(comm, &g);
    if (s != DCP_OK) return s;
    shm_job *j = g->job;
    dcp_status arg = DCP_OK;
    if (bytes && (!send || !recv)) arg = DCP_ERR_NULL_POINTER;
    else if (bytes > j->h->region_bytes) arg = DCP_ERR_CAPACITY;
    shm_slot *mine = describe(g, OP_ALLGATHER, arg);
    mine->bytes = bytes;
    if (arg == DCP_OK && bytes) memcpy(region_of(j, j->rank), send, bytes);
    dcp_status v = announce_and_meet(comm, g, mine);
    if (v != DCP_OK && job_failure(j) != DCP_OK) return v;
    for (int32_t r = 0; v == DCP_OK && r < comm->size; r++)
        if (slot_of(j, g->members[r])->bytes != bytes)
            v = note(g, DCP_ERR_CORRUPT_INPUT, "all-gather: rank %d sends %llu bytes, rank %d %zu", r,
                     (unsigned long long)slot_of(j, g->members[r])->bytes, comm->rank, bytes);
    if (v == DCP_OK)
        for (int32_t r = 0; r < comm->size; r++)
            if (bytes) memcpy((unsigned char *)recv + (size_t)r * bytes, region_of(j, g->members[r]), bytes);
    return leave(comm, g, mine, v);
}

static dcp_status op_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                                const size_t *recv_bytes, const size_t *recv_offsets)
{
    shm_group *g = NULL;
    dcp_status s = begin(comm, &g);
    if (s != DCP_OK) return s;
    shm_job *j = g->job;
    dcp_status arg = DCP_OK;
    if (!recv_bytes || !recv_offsets || (send_bytes && !send)) arg = DCP_ERR_NULL_POINTER;
    else if (send_bytes > j->h->region_bytes) arg = DCP_ERR_CAPACITY;
    for (int32_t r = 0; arg == DCP_OK && r < comm->size; r++) {
        uint64_t end;
        if (add_overflows(recv_offsets[r], recv_bytes[r], &end)) arg = DCP_ERR_OVERFLOW;
        else if (recv_bytes[r] && !recv) arg = DCP_ERR_NULL_POINTER;
    }
    shm_slot *mine = describe(g, OP_ALLGATHERV, arg);
    mine->bytes = send_bytes;
    uint64_t *announced_recv = arrays_of(j, mine, 2);
    for (int32_t r = 0; r < comm->size; r++) announced_recv[r] = arg == DCP_OK ? recv_bytes[r] : 0;
    if (arg == DCP_OK && send_bytes) memcpy(region_of(j, j->rank), send, send_bytes);
    dcp_status v = announce_and_meet(comm, g, mine);
    if (v != DCP_OK && job_failure(j) != DCP_OK) return v;
    /* every member checks every pair: p expects from q what q sends */
    for (int32_t p = 0; v == DCP_OK && p < comm->size; p++) {
        const uint64_t *expect = arrays_of(j, slot_of(j, g->members[p]), 2);
        for (int32_t q = 0; v == DCP_OK && q < comm->size; q++)
            if (expect[q] != slot_of(j, g->members[q])->bytes)
                v = note(g, DCP_ERR_CORRUPT_INPUT, "all-gather-v: rank %d expects %llu bytes from rank %d, which sends %llu",
                         p, (unsigned long long)expect[q], q, (unsigned long long)slot_of(j, g->members[q])->bytes);
    }
    if (v == DCP_OK)
        for (int32_t r = 0; r < comm->size; r++)
            if (recv_bytes[r]) memcpy((unsigned char *)recv + recv_offsets[r], region_of(j, g->members[r]), recv_bytes[r]);
    return leave(comm, g, mine, v);
}

static dcp_status op_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                               void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    shm_group *g = NULL;
    dcp_status s = begin(comm, &g);
    if (s != DCP_OK) return s;
    shm_job *j = g->job;
    const int32_t n = comm->size;
    dcp_status arg = DCP_OK;
    if (!send_bytes || !send_offsets || !recv_bytes || !recv_offsets) arg = DCP_ERR_NULL_POINTER;
    for (int32_t r = 0; arg == DCP_OK && r < n; r++) {
        uint64_t send_end, recv_end;
        if (add_overflows(send_offsets[r], send_bytes[r], &send_end) ||
            add_overflows(recv_offsets[r], recv_bytes[r], &recv_end))
            arg = DCP_ERR_OVERFLOW;
        else if ((send_bytes[r] && !send) || (recv_bytes[r] && !recv)) arg = DCP_ERR_NULL_POINTER;
        else if (send_bytes[r] && send_end > j->h->region_bytes) arg = DCP_ERR_CAPACITY;
    }
    shm_slot *mine = describe(g, OP_ALLTOALLV, arg);
    uint64_t *a_send = arrays_of(j, mine, 0), *a_offset = arrays_of(j, mine, 1), *a_recv = arrays_of(j, mine, 2);
    unsigned char *region = region_of(j, j->rank);
    for (int32_t r = 0; r < n; r++) {
        a_send[r] = arg == DCP_OK ? send_bytes[r] : 0;
        a_offset[r] = arg == DCP_OK ? send_offsets[r] : 0;
        a_recv[r] = arg == DCP_OK ? recv_bytes[r] : 0;
        if (arg == DCP_OK && send_bytes[r])
            memcpy(region + send_offsets[r], (const unsigned char *)send + send_offsets[r], send_bytes[r]);
    }
    dcp_status v = announce_and_meet(comm, g, mine);
    if (v != DCP_OK && job_failure(j) != DCP_OK) return v;
    for (int32_t p = 0; v == DCP_OK && p < n; p++) {
        const uint64_t *sends = arrays_of(j, slot_of(j, g->members[p]), 0);
        for (int32_t q = 0; v == DCP_OK && q < n; q++) {
            const uint64_t expected = arrays_of(j, slot_of(j, g->members[q]), 2)[p];
            if (sends[q] != expected)
                v = note(g, DCP_ERR_CORRUPT_INPUT, "all-to-all-v: rank %d sends %llu bytes to rank %d, which expects %llu",
                         p, (unsigned long long)sends[q], q, (unsigned long long)expected);
        }
    }
    if (v == DCP_OK)
        for (int32_t r = 0; r < n; r++) {
            if (!recv_bytes[r]) continue;
            shm_slot *peer = slot_of(j, g->members[r]);
            memcpy((unsigned char *)recv + recv_offsets[r],
                   region_of(j, g->members[r]) + arrays_of(j, peer, 1)[comm->rank], recv_bytes[r]);
        }
    return leave(comm, g, mine, v);
}

static dcp_status op_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    shm_group *g = NULL;
    dcp_status s = begin(comm, &g);
    if (s != DCP_OK) return s;
    shm_job *j = g->job;
    dcp_status arg = DCP_OK;
    if (root < 0 || root >= comm->size) arg = DCP_ERR_INVALID_ARGUMENT;
    else if (bytes && !buffer) arg = DCP_ERR_NULL_POINTER;
    else if (bytes > j->h->region_bytes) arg = DCP_ERR_CAPACITY;
    shm_slot *mine = describe(g, OP_BROADCAST, arg);
    mine->bytes = bytes;
    mine->root = root;
    if (arg == DCP_OK && comm->rank == root && bytes) memcpy(region_of(j, j->rank), buffer, bytes);
    dcp_status v = announce_and_meet(comm, g, mine);
    if (v != DCP_OK && job_failure(j) != DCP_OK) return v;
    for (int32_t r = 0; v == DCP_OK && r < comm->size; r++) {
        shm_slot *p = slot_of(j, g->members[r]);
        if (p->bytes != bytes || p->root != root)
            v = note(g, DCP_ERR_CORRUPT_INPUT, "broadcast: rank %d announces %llu bytes from root %d, rank %d %zu from %d",
                     r, (unsigned long long)p->bytes, p->root, comm->rank, bytes, root);
    }
    if (v == DCP_OK && comm->rank != root && bytes) memcpy(buffer, region_of(j, g->members[root]), bytes);
    return leave(comm, g, mine, v);
}

static dcp_status op_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    shm_group *g = NULL;
    dcp_status s = begin(comm, &g);
    if (s != DCP_OK) {
        if (agreed) *agreed = s;
        if (failed_rank) *failed_rank = -1;
        return s;
    }
    shm_job *j = g->job;
    shm_slot *mine = describe(g, OP_AGREE, agreed && failed_rank ? DCP_OK : DCP_ERR_NULL_POINTER);
    mine->value = (int32_t)local;
    dcp_status v = announce_and_meet(comm, g, mine);
    dcp_status result = DCP_OK;
    int32_t first = -1;
    for (int32_t r = 0; v == DCP_OK && r < comm->size && first < 0; r++) {
        dcp_status value = (dcp_status)slot_of(j, g->members[r])->value;
        if (value != DCP_OK) result = value, first = r;
    }
    if (v == DCP_OK || job_failure(j) == DCP_OK) v = leave(comm, g, mine, v);
    if (v == DCP_OK) {
        *agreed = result;
        *failed_rank = first;
        return DCP_OK;
    }
    /* the collective itself failed: every member gets its status, naming the rank the failure names */
    int32_t who = -1;
    if (job_failure(j) != DCP_OK)
        for (int32_t r = 0; r < comm->size; r++)
            if (g->members[r] == j->h->failure_rank) who = r;
    if (agreed) *agreed = v;
    if (failed_rank) *failed_rank = who;
    return v;
}

static const char *op_describe_failure(dcp_comm *comm) { return shm_comm_last_error(comm); }

static const dcp_comm_ops shm_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), op_allgather, op_allgatherv, op_alltoallv, op_broadcast, op_agree,
    op_describe_failure,
};

/* ------------------------------------------------------------------------ */
/* Job and communicators                                                     */
/* ------------------------------------------------------------------------ */

static dcp_status job_fail_open(char *message, size_t size, dcp_status s, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static dcp_status job_fail_open(char *message, size_t size, dcp_status s, const char *format, ...)
{
    if (message && size) {
        va_list args;
        va_start(args, format);
        vsnprintf(message, size, format, args);
        va_end(args);
    }
    return s;
}

/*
 * A rank other than 0: map the segment `name` once rank 0 has published it.  Rank 0 creates the name empty,
 * sizes it, sets it up and only then stores the magic (release), so until the name exists, holds its full size
 * and carries the magic (acquire) the segment is not ready and this rank tries again (every millisecond, up to
 * timeout_ms; 0: forever).  A size or magic that can only be another job's is DCP_ERR_INVALID_CONFIG at once.
 * Nothing of a mapping is read after it is unmapped.
 */
static dcp_status open_published(const char *name, int32_t world, size_t region_bytes, size_t slot_bytes,
                                 size_t regions_at, size_t total, int32_t timeout_ms, void **out, char *message,
                                 size_t message_size)
{
    const int64_t deadline = timeout_ms > 0 ? now_ns() + (int64_t)timeout_ms * 1000000 : INT64_MAX;
    const char *waiting = "does not exist yet";
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0);
        if (fd < 0 && errno != ENOENT)
            return job_fail_open(message, message_size, DCP_ERR_COMM, "shm_open(%s): %s", name, strerror(errno));
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) != 0) {
                int e = errno;
                close(fd);
                return job_fail_open(message, message_size, DCP_ERR_COMM, "fstat(%s): %s", name, strerror(e));
            }
            if (st.st_size != 0 && (size_t)st.st_size != total) { /* rank 0 sizes it in one step: another job's */
                close(fd);
                return job_fail_open(message, message_size, DCP_ERR_INVALID_CONFIG,
                                     "shared memory %s holds %lld bytes, this rank expects %zu (another world or "
                                     "region size)",
                                     name, (long long)st.st_size, total);
            }
            waiting = "is not sized yet";
            if (st.st_size != 0) {
                void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                int e = errno;
                close(fd);
                fd = -1;
                if (base == MAP_FAILED)
                    return job_fail_open(message, message_size, DCP_ERR_COMM, "mmap(%s, %zu): %s", name, total,
                                         strerror(e));
                shm_header *h = (shm_header *)base;
                const uint64_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
                if (magic == SHM_MAGIC && h->world_size == world && h->region_bytes == region_bytes &&
                    h->slot_bytes == slot_bytes && h->regions_at == regions_at) {
                    *out = base;
                    return DCP_OK;
                }
                const int32_t their_world = h->world_size; /* read before the mapping goes */
                const unsigned long long their_region = (unsigned long long)h->region_bytes;
                munmap(base, total);
                if (magic != 0)
                    return job_fail_open(message, message_size, DCP_ERR_INVALID_CONFIG,
                                         "shared memory %s was made for another job (world %d, region %llu bytes)",
                                         name, their_world, their_region);
                waiting = "is not set up yet";
            }
            if (fd >= 0) close(fd);
        }
        if (now_ns() >= deadline)
            return job_fail_open(message, message_size, DCP_ERR_TIMEOUT,
                                 "shared memory %s %s after %d ms: rank 0 did not publish it", name, waiting,
                                 timeout_ms);
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
}

/* Rank 0: create `name` empty, size it, set up the header, then publish it (the magic, release). */
static dcp_status create_and_publish(const char *name, int32_t world, size_t region_bytes, size_t slot_bytes,
                                     size_t regions_at, size_t total, void **out, char *message, size_t message_size)
{
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return job_fail_open(message, message_size, DCP_ERR_COMM, "shm_open(%s): %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)total) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return job_fail_open(message, message_size, DCP_ERR_COMM, "ftruncate(%s, %zu): %s", name, total, strerror(e));
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) {
        shm_unlink(name);
        return job_fail_open(message, message_size, DCP_ERR_COMM, "mmap(%s, %zu): %s", name, total, strerror(e));
    }
    shm_header *h = (shm_header *)base;
    h->world_size = world;
    h->region_bytes = region_bytes;
    h->slot_bytes = slot_bytes;
    h->regions_at = regions_at;
    h->total_bytes = total;
    atomic_init(&h->wake, 0u);
    atomic_init(&h->failure, 0);
    atomic_init(&h->failure_claim, 0);
    h->failure_rank = -1;
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release); /* published: openers may use it now */
    *out = base;
    return DCP_OK;
}

dcp_status shm_job_open(const char *name, int32_t world, int32_t rank, size_t region_bytes, int32_t timeout_ms,
                        shm_job **out, char *message, size_t message_size)
{
    if (!name || !out) return DCP_ERR_NULL_POINTER;
    *out = NULL;
    if (name[0] != '/' || strlen(name) >= sizeof(((shm_job *)0)->name) || world < 1 || world > SHM_COMM_MAX_RANKS ||
        rank < 0 || rank >= world || region_bytes == 0 || timeout_ms < 0)
        return job_fail_open(message, message_size, DCP_ERR_INVALID_ARGUMENT,
                             "shared memory: bad arguments (name %s, world %d, rank %d)", name, world, rank);
    region_bytes = align_up(region_bytes, 64);
    const size_t slot_bytes = align_up(sizeof(shm_slot) + 4 * (size_t)world * sizeof(uint64_t), 64);
    const size_t regions_at = align_up(align_up(sizeof(shm_header), 64) + (size_t)world * slot_bytes, 4096);
    if (region_bytes > (SIZE_MAX - regions_at) / (size_t)world)
        return job_fail_open(message, message_size, DCP_ERR_OVERFLOW, "shared memory: %d regions of %zu bytes", world,
                             region_bytes);
    const size_t total = regions_at + (size_t)world * region_bytes;

    void *base = NULL;
    dcp_status s = rank == 0 ? create_and_publish(name, world, region_bytes, slot_bytes, regions_at, total, &base,
                                                  message, message_size)
                             : open_published(name, world, region_bytes, slot_bytes, regions_at, total, timeout_ms,
                                              &base, message, message_size);
    if (s != DCP_OK) return s;
    atomic_store(&((shm_slot *)((unsigned char *)base + align_up(sizeof(shm_header), 64) + (size_t)rank * slot_bytes))->pid,
                 (int64_t)getpid());
    shm_job *j = calloc(1, sizeof *j);
    if (!j) {
        munmap(base, total);
        if (rank == 0) shm_unlink(name);
        return DCP_ERR_ALLOC;
    }
    j->base = (unsigned char *)base;
    j->h = (shm_header *)base;
    j->map_bytes = total;
    j->rank = rank;
    j->world = world;
    j->timeout_ms = timeout_ms;
    j->owner = rank == 0;
    snprintf(j->name, sizeof j->name, "%s", name);
    *out = j;
    return DCP_OK;
}

void shm_job_set_timeout(shm_job *j, int32_t timeout_ms)
{
    if (j && timeout_ms >= 0) j->timeout_ms = timeout_ms;
}

void shm_job_unlink(shm_job *j)
{
    if (j && j->owner && !j->unlinked) {
        shm_unlink(j->name);
        j->unlinked = 1;
    }
}

void shm_job_close(shm_job *j)
{
    if (!j) return;
    shm_job_unlink(j);
    munmap(j->base, j->map_bytes);
    free(j);
}

dcp_status shm_job_failure(const shm_job *j, char *message, size_t size)
{
    if (!j) return DCP_ERR_NULL_POINTER;
    dcp_status f = (dcp_status)atomic_load_explicit(&j->h->failure, memory_order_acquire);
    if (message && size) snprintf(message, size, "%s", f != DCP_OK ? j->h->failure_message : "");
    return f;
}

static dcp_status group_make(shm_job *j, int32_t id, const int32_t *members, int32_t size, int32_t rank, dcp_comm *comm)
{
    shm_group *g = calloc(1, sizeof *g);
    int32_t *m = calloc((size_t)size, sizeof *m);
    if (!g || !m) {
        free(g), free(m);
        return DCP_ERR_ALLOC;
    }
    memcpy(m, members, (size_t)size * sizeof *m);
    g->job = j;
    g->id = id;
    g->members = m;
    comm->ops = &shm_ops;
    comm->rank = rank;
    comm->size = size;
    comm->impl = g;
    comm->calls = 0;
    return DCP_OK;
}

dcp_status shm_comm_world(shm_job *j, dcp_comm *comm)
{
    if (!j || !comm) return DCP_ERR_NULL_POINTER;
    memset(comm, 0, sizeof *comm);
    if (j->next_id != 0) return DCP_ERR_INVALID_ARGUMENT; /* the world is the job's first communicator */
    int32_t *members = calloc((size_t)j->world, sizeof *members);
    if (!members) return DCP_ERR_ALLOC;
    for (int32_t r = 0; r < j->world; r++) members[r] = r;
    dcp_status s = group_make(j, j->next_id++, members, j->world, j->rank, comm);
    free(members);
    return s;
}

typedef struct split_entry {
    int32_t color, key, world_rank, parent_rank;
} split_entry;

static int split_order(const void *a, const void *b)
{
    const split_entry *x = (const split_entry *)a, *y = (const split_entry *)b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->parent_rank > y->parent_rank) - (x->parent_rank < y->parent_rank);
}

dcp_status shm_comm_split(dcp_comm *parent, int32_t color, int32_t key, dcp_comm *child)
{
    if (!child) return DCP_ERR_NULL_POINTER;
    memset(child, 0, sizeof *child);
    if (!parent || parent->ops != &shm_ops || !parent->impl) return DCP_ERR_NULL_POINTER;
    shm_group *pg = (shm_group *)parent->impl;
    shm_job *j = pg->job;
    const int32_t id = j->next_id++; /* the same on every rank: every rank makes the same splits */
    const int32_t n = parent->size;
    split_entry *all = calloc((size_t)n, sizeof *all);
    int32_t *members = calloc((size_t)n, sizeof *members);
    if (!all || !members) {
        free(all), free(members);
        return DCP_ERR_ALLOC;
    }
    split_entry me = {color, key, j->rank, parent->rank};
    dcp_status s = parent->ops->allgather(parent, &me, sizeof me, all);
    if (s == DCP_OK && id >= SHM_COMM_MAX)
        s = note(pg, DCP_ERR_CAPACITY, "split: more than %d communicators in one job", SHM_COMM_MAX);
    if (s == DCP_OK && color >= 0) {
        int32_t count = 0;
        for (int32_t r = 0; r < n; r++)
            if (all[r].color == color) all[count++] = all[r];
        qsort(all, (size_t)count, sizeof *all, split_order);
        int32_t rank = -1;
        for (int32_t r = 0; r < count; r++) {
            members[r] = all[r].world_rank;
            if (all[r].world_rank == j->rank) rank = r;
        }
        s = group_make(j, id, members, count, rank, child);
    }
    free(all), free(members);
    return s;
}

const char *shm_comm_last_error(const dcp_comm *comm)
{
    return comm && comm->ops == &shm_ops && comm->impl ? ((const shm_group *)comm->impl)->message : "";
}

dcp_status shm_comm_abort(dcp_comm *comm)
{
    if (!comm || comm->ops != &shm_ops || !comm->impl) return DCP_ERR_NULL_POINTER;
    shm_group *g = (shm_group *)comm->impl;
    if (job_failure(g->job) == DCP_OK)
        fail_job(g->job, DCP_ERR_COMM, g->job->rank, "rank %d (world) aborted its communicators", g->job->rank);
    shm_comm_destroy(comm);
    return DCP_OK;
}

void shm_comm_destroy(dcp_comm *comm)
{
    if (!comm || comm->ops != &shm_ops || !comm->impl) return;
    shm_group *g = (shm_group *)comm->impl;
    free(g->members);
    free(g);
    memset(comm, 0, sizeof *comm);
}
