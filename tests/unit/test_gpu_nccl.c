/* dcp-test-label: gpu */
/*
 * test_gpu_nccl.c - the NCCL communicator backend on real GPUs, one thread
 * per GPU: every operation on device and on host buffers against what it
 * must deliver, error agreement, NCCL's own errors and a missing peer coming
 * back as statuses (then abort), the dynamic-CP group communicators, and the
 * MTP roll over NCCL against the host roll.  Needs 2 GPUs, except the
 * communicator of one rank (one GPU).
 */
#define _POSIX_C_SOURCE 200809L
#include "dcp_test.h"
#include "dcpack.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE_TWO_GPUS()                                                                                 \
    do {                                                                                                   \
        if (dcp_cuda_device_count() < 1) DCP_SKIP("no GPU");                                               \
        if (!dcp_nccl_available()) DCP_SKIP("built without NCCL");                                         \
        if (dcp_cuda_device_count() < 2) DCP_SKIP("needs 2 GPUs");                                         \
    } while (0)

#ifdef DCP_HAVE_NCCL
#include "gpu_util.h"
#include <nccl.h>

#define MAX_RANKS 8

typedef struct world {
    int32_t size;
    ncclComm_t comms[MAX_RANKS];
} world;

typedef void (*rank_fn)(world *w, int32_t rank, dcp_comm *comm, void *arg);

typedef struct rank_arg {
    world *w;
    int32_t rank;
    rank_fn fn;
    void *arg;
    int32_t timeout_ms;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = (rank_arg *)p;
    CUDA_CHECK(cudaSetDevice(a->rank));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    dcp_nccl_options options;
    dcp_nccl_options_default(&options);
    options.timeout_ms = a->timeout_ms;
    options.host_staging_bytes = 1 << 16;
    dcp_comm comm;
    dcp_status s = dcp_nccl_comm_init(&comm, a->w->comms[a->rank], stream, &options);
    if (s != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "rank %d: dcp_nccl_comm_init: %s", a->rank, dcp_status_str(s));
    else a->fn(a->w, a->rank, &comm, a->arg);
    dcp_nccl_comm_destroy(&comm);
    cudaStreamDestroy(stream);
    return NULL;
}

/* Run fn on every GPU of a fresh world of `size` ranks. */
static void run_world(int32_t size, rank_fn fn, void *arg, int32_t timeout_ms)
{
    world w;
    memset(&w, 0, sizeof w);
    w.size = size;
    ncclResult_t r = ncclCommInitAll(w.comms, size, NULL);
    if (r != ncclSuccess) {
        dcp_test_fail(__FILE__, __LINE__, "ncclCommInitAll: %s", ncclGetErrorString(r));
        return;
    }
    pthread_t threads[MAX_RANKS];
    rank_arg args[MAX_RANKS];
    for (int32_t i = 0; i < size; i++) {
        args[i] = (rank_arg){&w, i, fn, arg, timeout_ms};
        pthread_create(&threads[i], NULL, rank_main, &args[i]);
    }
    for (int32_t i = 0; i < size; i++) pthread_join(threads[i], NULL);
    for (int32_t i = 0; i < size; i++)
        if (w.comms[i]) {
            cudaSetDevice(i);
            ncclCommDestroy(w.comms[i]);
        }
}

static int32_t world_size(void) { return dcp_cuda_device_count() < MAX_RANKS ? dcp_cuda_device_count() : MAX_RANKS; }

static unsigned char pattern(int32_t from, int32_t to, size_t i) { return (unsigned char)(from * 31 + to * 7 + i * 13 + 1); }

/* ---- operations ---------------------------------------------------------- */

static void operations(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)arg;
    const int32_t n = w->size;
    for (int device = 0; device < 2; device++) {
        /* all-gather: 1000 bytes each */
        size_t bytes = 1000;
        unsigned char *send = malloc(bytes), *recv = malloc(bytes * (size_t)n);
        for (size_t i = 0; i < bytes; i++) send[i] = pattern(me, 0, i);
        void *ds = device ? to_device(send, bytes) : send, *dr = device ? to_device(NULL, bytes * (size_t)n) : recv;
        DCP_CHECK_STATUS(comm->ops->allgather(comm, ds, bytes, dr), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, bytes * (size_t)n, cudaMemcpyDeviceToHost));
        for (int32_t p = 0; p < n; p++)
            for (size_t i = 0; i < bytes; i++)
                if (recv[(size_t)p * bytes + i] != pattern(p, 0, i)) {
                    dcp_test_fail(__FILE__, __LINE__, "all-gather (%s): rank %d byte %zu from %d", device ? "device" : "host",
                                  me, i, p);
                    p = n;
                    break;
                }
        if (device) cudaFree(ds), cudaFree(dr);
        free(send), free(recv);

        /* all-gather-v: rank p sends 37 * p bytes (rank 0 none), landing in reverse order with gaps */
        size_t rb[MAX_RANKS], ro[MAX_RANKS], at = 0;
        for (int32_t p = n - 1; p >= 0; p--) {
            rb[p] = 37 * (size_t)p;
            ro[p] = at;
            at += rb[p] + 5;
        }
        send = malloc(rb[me] + 1);
        recv = malloc(at);
        memset(recv, 0xEE, at);
        for (size_t i = 0; i < rb[me]; i++) send[i] = pattern(me, 1, i);
        ds = device ? to_device(send, rb[me]) : send;
        dr = device ? to_device(recv, at) : recv;
        DCP_CHECK_STATUS(comm->ops->allgatherv(comm, ds, rb[me], dr, rb, ro), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, at, cudaMemcpyDeviceToHost));
        for (int32_t p = 0; p < n; p++) {
            for (size_t i = 0; i < rb[p]; i++)
                if (recv[ro[p] + i] != pattern(p, 1, i)) {
                    dcp_test_fail(__FILE__, __LINE__, "all-gather-v: rank %d byte %zu from %d", me, i, p);
                    break;
                }
            for (size_t i = 0; i < 5; i++) DCP_CHECK(recv[ro[p] + rb[p] + i] == 0xEE); /* gaps untouched */
        }
        if (device) cudaFree(ds), cudaFree(dr);
        free(send), free(recv);

        /* all-to-all-v: rank me sends (me + 2 * to) * 11 bytes to `to`, none to the next rank */
        size_t sb[MAX_RANKS], so[MAX_RANKS], rcb[MAX_RANKS], rco[MAX_RANKS], st = 0, rt = 0;
        for (int32_t p = 0; p < n; p++) {
            sb[p] = p == (me + 1) % n && n > 1 ? 0 : (size_t)(me + 2 * p) * 11;
            so[p] = st;
            st += sb[p] + 3;
            rcb[p] = me == (p + 1) % n && n > 1 ? 0 : (size_t)(p + 2 * me) * 11;
            rco[p] = rt;
            rt += rcb[p] + 3;
        }
        send = malloc(st);
        recv = malloc(rt);
        memset(recv, 0xEE, rt);
        for (int32_t p = 0; p < n; p++)
            for (size_t i = 0; i < sb[p]; i++) send[so[p] + i] = pattern(me, p, i);
        ds = device ? to_device(send, st) : send;
        dr = device ? to_device(recv, rt) : recv;
        DCP_CHECK_STATUS(comm->ops->alltoallv(comm, ds, sb, so, dr, rcb, rco), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, rt, cudaMemcpyDeviceToHost));
        for (int32_t p = 0; p < n; p++) {
            for (size_t i = 0; i < rcb[p]; i++)
                if (recv[rco[p] + i] != pattern(p, me, i)) {
                    dcp_test_fail(__FILE__, __LINE__, "all-to-all-v: rank %d byte %zu from %d", me, i, p);
                    break;
                }
            for (size_t i = 0; i < 3; i++) DCP_CHECK(recv[rco[p] + rcb[p] + i] == 0xEE);
        }
        if (device) cudaFree(ds), cudaFree(dr);
        free(send), free(recv);

        /* broadcast from the last rank */
        bytes = 777;
        unsigned char *buf = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) buf[i] = me == n - 1 ? pattern(n - 1, 9, i) : 0;
        void *db = device ? to_device(buf, bytes) : buf;
        DCP_CHECK_STATUS(comm->ops->broadcast(comm, db, bytes, n - 1), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(buf, db, bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < bytes; i++)
            if (buf[i] != pattern(n - 1, 9, i)) {
                dcp_test_fail(__FILE__, __LINE__, "broadcast: rank %d byte %zu", me, i);
                break;
            }
        if (device) cudaFree(db);
        free(buf);
    }

    /* agreement: all OK; then rank 1 fails; then every rank fails and the lowest one wins */
    dcp_status agreed;
    int32_t failed;
    DCP_CHECK_STATUS(comm->ops->agree(comm, DCP_OK, &agreed, &failed), DCP_OK);
    DCP_CHECK_STATUS(agreed, DCP_OK);
    DCP_CHECK_EQ_INT(failed, -1);
    DCP_CHECK_STATUS(comm->ops->agree(comm, me == 1 ? DCP_ERR_CAPACITY : DCP_OK, &agreed, &failed), DCP_OK);
    DCP_CHECK_STATUS(agreed, DCP_ERR_CAPACITY);
    DCP_CHECK_EQ_INT(failed, 1);
    DCP_CHECK_STATUS(comm->ops->agree(comm, me == 0 ? DCP_ERR_UNSUPPORTED : DCP_ERR_BAD_LENGTH, &agreed, &failed), DCP_OK);
    DCP_CHECK_STATUS(agreed, DCP_ERR_UNSUPPORTED);
    DCP_CHECK_EQ_INT(failed, 0);

    /* host buffers past the staging buffer: a capacity error on every rank, nothing sent */
    size_t big = (size_t)1 << 17;
    unsigned char *a = calloc(big, 1), *b = calloc(big * (size_t)n, 1);
    DCP_CHECK_STATUS(comm->ops->allgather(comm, a, big, b), DCP_ERR_CAPACITY);
    free(a), free(b);
    /* NCCL's own refusal (a root past the last rank) is DCP_ERR_NCCL with NCCL's words; the communicator goes on */
    void *dbuf = to_device(NULL, 64);
    DCP_CHECK_STATUS(comm->ops->broadcast(comm, dbuf, 64, n), DCP_ERR_NCCL);
    DCP_CHECK_CONTAINS(dcp_nccl_comm_last_error(comm), "ncclBroadcast");
    cudaFree(dbuf);
    DCP_CHECK_STATUS(comm->ops->agree(comm, DCP_OK, &agreed, &failed), DCP_OK);
}

static void run_operations(void) { run_world(world_size(), operations, NULL, 60000); }

/* ---- a communicator of one rank -------------------------------------------- */

/*
 * One rank: every operation copies its own block where it goes (no NCCL call),
 * on host and device buffers; host buffers need no staging; agreement returns
 * the rank's own status.
 */
static void one_rank(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)w, (void)arg;
    DCP_CHECK_EQ_INT(comm->size, 1);
    for (int device = 0; device < 2; device++) {
        size_t bytes = 1 << 18; /* past the test's 64 KiB staging buffer: host buffers do not pass through it */
        unsigned char *send = malloc(bytes), *recv = malloc(bytes + 16);
        for (size_t i = 0; i < bytes; i++) send[i] = pattern(me, 3, i);
        memset(recv, 0xEE, bytes + 16);
        void *ds = device ? to_device(send, bytes) : send, *dr = device ? to_device(recv, bytes + 16) : recv;
        DCP_CHECK_STATUS(comm->ops->allgather(comm, ds, bytes, dr), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, bytes + 16, cudaMemcpyDeviceToHost));
        DCP_CHECK(memcmp(recv, send, bytes) == 0 && recv[bytes] == 0xEE);
        /* all-gather-v and all-to-all-v land at an offset; the bytes around stay */
        size_t rb[1] = {1000}, ro[1] = {16}, sb[1] = {1000}, so[1] = {8};
        if (device) CUDA_CHECK(cudaMemset(dr, 0xEE, bytes + 16));
        else memset(recv, 0xEE, bytes + 16);
        DCP_CHECK_STATUS(comm->ops->allgatherv(comm, ds, 1000, dr, rb, ro), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, bytes + 16, cudaMemcpyDeviceToHost));
        DCP_CHECK(memcmp(recv + 16, send, 1000) == 0 && recv[15] == 0xEE && recv[1016] == 0xEE);
        DCP_CHECK_STATUS(comm->ops->alltoallv(comm, ds, sb, so, dr, rb, ro), DCP_OK);
        if (device) CUDA_CHECK(cudaMemcpy(recv, dr, bytes + 16, cudaMemcpyDeviceToHost));
        DCP_CHECK(memcmp(recv + 16, send + 8, 1000) == 0 && recv[15] == 0xEE && recv[1016] == 0xEE);
        DCP_CHECK_STATUS(comm->ops->broadcast(comm, ds, bytes, 0), DCP_OK);
        if (device) cudaFree(ds), cudaFree(dr);
        free(send), free(recv);
    }
    dcp_status agreed;
    int32_t failed;
    DCP_CHECK_STATUS(comm->ops->agree(comm, DCP_OK, &agreed, &failed), DCP_OK);
    DCP_CHECK_STATUS(agreed, DCP_OK);
    DCP_CHECK_EQ_INT(failed, -1);
    DCP_CHECK_STATUS(comm->ops->agree(comm, DCP_ERR_BAD_LENGTH, &agreed, &failed), DCP_OK);
    DCP_CHECK_STATUS(agreed, DCP_ERR_BAD_LENGTH);
    DCP_CHECK_EQ_INT(failed, 0);
    /* NCCL still refuses a root past the only rank */
    void *dbuf = to_device(NULL, 64);
    DCP_CHECK_STATUS(comm->ops->broadcast(comm, dbuf, 64, 1), DCP_ERR_NCCL);
    cudaFree(dbuf);
}

static void run_one_rank(void) { run_world(1, one_rank, NULL, 60000); }

/* ---- allocation after warm-up --------------------------------------------- */

/* Bytes allocated + freed on this thread by `stmt`, the third time it runs (the first two warm up). */
#define HEAP_OF(out, stmt)                                                                                 \
    do {                                                                                                   \
        for (int rep_ = 0; rep_ < 3; rep_++) {                                                             \
            dcp_alloc_probe probe_;                                                                        \
            dcp_alloc_probe_begin(&probe_);                                                                \
            stmt;                                                                                          \
            (out) = dcp_alloc_probe_allocated(&probe_) + dcp_alloc_probe_deallocated(&probe_);             \
        }                                                                                                  \
    } while (0)

static void no_allocation(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)arg;
    const int32_t n = w->size;
    size_t bytes = 4096, sb[MAX_RANKS], so[MAX_RANKS];
    for (int32_t p = 0; p < n; p++) sb[p] = bytes, so[p] = bytes * (size_t)p;
    unsigned char *host = calloc(bytes * (size_t)n * 2, 1), host_one[64] = {0};
    void *dev = to_device(NULL, bytes * (size_t)n * 2);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    struct cudaPointerAttributes attributes;
    dcp_status agreed;
    int32_t failed;
    uint64_t heap[24];
    const char *names[24];
    int k = 0;
    names[k] = "allgather device";
    HEAP_OF(heap[k], comm->ops->allgather(comm, dev, bytes, (char *)dev + bytes * (size_t)n));
    names[++k] = "allgather host";
    HEAP_OF(heap[k], comm->ops->allgather(comm, host, 64, host + bytes * (size_t)n));
    names[++k] = "allgatherv device";
    HEAP_OF(heap[k], comm->ops->allgatherv(comm, (char *)dev + so[me], bytes, dev, sb, so));
    names[++k] = "alltoallv device";
    HEAP_OF(heap[k], comm->ops->alltoallv(comm, dev, sb, so, (char *)dev + bytes * (size_t)n, sb, so));
    names[++k] = "alltoallv host";
    HEAP_OF(heap[k], comm->ops->alltoallv(comm, host, sb, so, host + bytes * (size_t)n, sb, so));
    names[++k] = "broadcast device";
    HEAP_OF(heap[k], comm->ops->broadcast(comm, dev, bytes, 0));
    names[++k] = "broadcast host";
    HEAP_OF(heap[k], comm->ops->broadcast(comm, host, 64, 0));
    names[++k] = "agree";
    HEAP_OF(heap[k], comm->ops->agree(comm, DCP_OK, &agreed, &failed));
    ncclComm_t raw = (ncclComm_t)dcp_nccl_comm_handle(comm);
    ncclResult_t async_error;
    names[++k] = "raw ncclAllReduce enqueue";
    HEAP_OF(heap[k], (ncclAllReduce(dev, dev, 1, ncclInt64, ncclMin, raw, stream), cudaStreamSynchronize(stream)));
    names[++k] = "raw ncclGroupStart+End empty";
    HEAP_OF(heap[k], (ncclGroupStart(), ncclGroupEnd()));
    names[++k] = "raw ncclCommGetAsyncError";
    HEAP_OF(heap[k], ncclCommGetAsyncError(raw, &async_error));
    names[++k] = "raw send/recv group";
    HEAP_OF(heap[k], (ncclGroupStart(), ncclSend(dev, 64, ncclUint8, (me + 1) % n, raw, stream),
                      ncclRecv((char *)dev + 64, 64, ncclUint8, (me + n - 1) % n, raw, stream), ncclGroupEnd(),
                      cudaStreamSynchronize(stream)));
    names[++k] = "cudaMemcpyAsync pageable H2D";
    HEAP_OF(heap[k], cudaMemcpyAsync(dev, host_one, 64, cudaMemcpyHostToDevice, stream));
    names[++k] = "cudaMemcpyAsync D2H + sync";
    HEAP_OF(heap[k], (cudaMemcpyAsync(host_one, dev, 64, cudaMemcpyDeviceToHost, stream), cudaStreamSynchronize(stream)));
    names[++k] = "cudaPointerGetAttributes";
    HEAP_OF(heap[k], cudaPointerGetAttributes(&attributes, host));
    names[++k] = "cudaStreamQuery";
    HEAP_OF(heap[k], cudaStreamQuery(stream));
    names[++k] = "cudaSetDevice";
    HEAP_OF(heap[k], cudaSetDevice(me));
    k++;
    if (me == 0) {
        int version = 0;
        ncclGetVersion(&version);
        printf("NCCL %d\n", version);
        for (int i = 0; i < k; i++) printf("heap after warm-up: %-30s %llu B\n", names[i], (unsigned long long)heap[i]);
    }
    /* every operation is one NCCL call: it may cost what a bare NCCL call costs (NCCL 2.27+ allocates and frees a
       group job in each ncclGroupEnd), and not a byte more */
    const uint64_t bare = heap[8];
    for (int i = 0; i < 8; i++)
        if (heap[i] > bare)
            dcp_test_fail(__FILE__, __LINE__, "rank %d: %s allocated %llu bytes, a bare NCCL call %llu", me, names[i],
                          (unsigned long long)heap[i], (unsigned long long)bare);
    for (int i = 10; i < k; i++)
        if (i != 11 && heap[i] != 0) dcp_test_fail(__FILE__, __LINE__, "rank %d: %s allocated %llu bytes", me, names[i],
                                        (unsigned long long)heap[i]);
    cudaStreamDestroy(stream);
    cudaFree(dev);
    free(host);
}

static void run_no_allocation(void)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    run_world(world_size(), no_allocation, NULL, 60000);
}

/* ---- a missing peer ------------------------------------------------------ */

static void missing_peer(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)arg;
    void *d = to_device(NULL, 4096);
    /* once together, so NCCL's connections exist and the lone call below only waits on the device */
    DCP_CHECK_STATUS(comm->ops->allgather(comm, (char *)d + me * 1024, 1024, d), DCP_OK);
    if (me == 0) {
        DCP_CHECK_STATUS(comm->ops->allgather(comm, d, 1024, d), DCP_ERR_TIMEOUT);
        DCP_CHECK_CONTAINS(dcp_nccl_comm_last_error(comm), "did not complete");
        /* a broken communicator refuses further work until it is aborted */
        dcp_status agreed;
        int32_t failed;
        DCP_CHECK_STATUS(comm->ops->agree(comm, DCP_OK, &agreed, &failed), DCP_ERR_COMM);
    }
    /* every rank aborts: the hung collective on rank 0 is released (and only then may its memory go) */
    DCP_CHECK_STATUS(dcp_nccl_comm_abort(comm), DCP_OK);
    w->comms[me] = NULL; /* aborted: not destroyed again */
    cudaFree(d);
}

static void run_missing_peer(void) { run_world(2, missing_peer, NULL, 1500); }

/* ---- dynamic CP groups --------------------------------------------------- */

static void cp_groups(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)arg;
    dcp_nccl_cp_groups groups;
    DCP_REQUIRE_OK(dcp_nccl_cp_groups_create(comm, &groups));
    for (int32_t size = 1; size <= w->size; size *= 2) {
        dcp_comm *g = dcp_nccl_cp_group(&groups, size);
        DCP_REQUIRE(g != NULL);
        DCP_CHECK_EQ_INT(g->size, size);
        DCP_CHECK_EQ_INT(g->rank, me % size);
        /* the group holds exactly the block of `size` ranks starting at a multiple of size */
        int32_t mine = me, got[MAX_RANKS];
        int32_t *d = to_device(&mine, 4), *dr = to_device(NULL, 4 * (size_t)size);
        DCP_CHECK_STATUS(g->ops->allgather(g, d, 4, dr), DCP_OK);
        CUDA_CHECK(cudaMemcpy(got, dr, 4 * (size_t)size, cudaMemcpyDeviceToHost));
        for (int32_t i = 0; i < size; i++) DCP_CHECK_EQ_INT(got[i], me - me % size + i);
        cudaFree(d), cudaFree(dr);
    }
    DCP_CHECK(dcp_nccl_cp_group(&groups, 3) == NULL);
    dcp_nccl_cp_groups_destroy(&groups);
}

static void run_cp_groups(void) { run_world(world_size(), cp_groups, NULL, 60000); }

/* ---- MTP roll over NCCL --------------------------------------------------- */

#define ROLL_FIELDS 2
typedef struct roll_case {
    int32_t cp, num_cu;
    int32_t cu[64];
    int64_t tokens;
    int64_t *labels[MAX_RANKS];
    float *mask[MAX_RANKS];
    int64_t *want_labels[MAX_RANKS];
    float *want_mask[MAX_RANKS];
} roll_case;

static const size_t roll_sizes[ROLL_FIELDS] = {8, 4};

typedef struct host_roll_arg {
    dcp_inproc_world *g;
    roll_case *rc;
    int32_t rank;
} host_roll_arg;

static void *host_roll(void *p)
{
    host_roll_arg *a = (host_roll_arg *)p;
    roll_case *rc = a->rc;
    dcp_comm comm;
    DCP_CHECK_STATUS(dcp_inproc_comm(a->g, a->rank, &comm), DCP_OK);
    const void *in[ROLL_FIELDS] = {rc->labels[a->rank], rc->mask[a->rank]};
    void *out[ROLL_FIELDS] = {rc->want_labels[a->rank], rc->want_mask[a->rank]};
    void *x = malloc(dcp_mtp_roll_exchange_bytes(rc->num_cu, roll_sizes, ROLL_FIELDS, comm.size));
    dcp_status s = dcp_mtp_roll(&comm, 0, 0, rc->cp, DCP_CP_ZIGZAG, rc->cu, rc->num_cu, rc->tokens, in, out, roll_sizes, ROLL_FIELDS, x);
    if (s != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "host roll: %s", dcp_status_str(s));
    free(x);
    return NULL;
}

static void device_roll(world *w, int32_t me, dcp_comm *comm, void *arg)
{
    (void)w;
    roll_case *rc = (roll_case *)arg;
    size_t t = (size_t)rc->tokens;
    void *in[ROLL_FIELDS] = {to_device(rc->labels[me], t * 8), to_device(rc->mask[me], t * 4)};
    void *out[ROLL_FIELDS] = {to_device(NULL, t * 8), to_device(NULL, t * 4)};
    int32_t *cu = to_device(rc->cu, (size_t)rc->num_cu * 4);
    void *x = to_device(NULL, dcp_mtp_roll_exchange_bytes(rc->num_cu, roll_sizes, ROLL_FIELDS, 0));
    void *host_scratch = malloc(dcp_mtp_roll_exchange_bytes(0, NULL, 0, comm->size));
    DCP_CHECK_STATUS(dcp_mtp_roll_cuda(comm, 0, 0, rc->cp, DCP_CP_ZIGZAG, cu, rc->num_cu, rc->tokens, (const void *const *)in, out,
                                       roll_sizes, ROLL_FIELDS, x, host_scratch, NULL),
                     DCP_OK);
    CUDA_CHECK(cudaDeviceSynchronize());
    DCP_CHECK(device_equals(out[0], rc->want_labels[me], t * 8));
    DCP_CHECK(device_equals(out[1], rc->want_mask[me], t * 4));
    for (int f = 0; f < ROLL_FIELDS; f++) cudaFree(in[f]), cudaFree(out[f]);
    cudaFree(cu), cudaFree(x), free(host_scratch);
}

static void run_mtp_roll(void)
{
    const int32_t n = 2;
    roll_case rc;
    memset(&rc, 0, sizeof rc);
    rc.cp = n;
    rc.num_cu = 40;
    for (int32_t k = 1; k < rc.num_cu; k++) rc.cu[k] = rc.cu[k - 1] + (k % 7 == 0 ? 0 : 2 * n * (1 + (k * 5) % 11));
    rc.tokens = rc.cu[rc.num_cu - 1] / n + 6; /* a tail of 6 */
    for (int32_t r = 0; r < n; r++) {
        rc.labels[r] = malloc((size_t)rc.tokens * 8);
        rc.mask[r] = malloc((size_t)rc.tokens * 4);
        rc.want_labels[r] = malloc((size_t)rc.tokens * 8);
        rc.want_mask[r] = malloc((size_t)rc.tokens * 4);
        for (int64_t j = 0; j < rc.tokens; j++) {
            rc.labels[r][j] = 1000 * (r + 1) + j;
            rc.mask[r][j] = 0.5f + (float)((j + r) % 3);
        }
    }
    dcp_inproc_world *g = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(n, 60000, &g));
    pthread_t threads[MAX_RANKS];
    host_roll_arg args[MAX_RANKS];
    for (int32_t r = 0; r < n; r++) {
        args[r] = (host_roll_arg){g, &rc, r};
        pthread_create(&threads[r], NULL, host_roll, &args[r]);
    }
    for (int32_t r = 0; r < n; r++) pthread_join(threads[r], NULL);
    dcp_inproc_world_destroy(g);
    run_world(n, device_roll, &rc, 60000);
    for (int32_t r = 0; r < n; r++) free(rc.labels[r]), free(rc.mask[r]), free(rc.want_labels[r]), free(rc.want_mask[r]);
}

#else
static void run_one_rank(void) {}
static void run_no_allocation(void) {}
static void run_operations(void) {}
static void run_missing_peer(void) {}
static void run_cp_groups(void) {}
static void run_mtp_roll(void) {}
#endif

DCP_TEST(operations_on_device_and_host_buffers)
{
    REQUIRE_TWO_GPUS();
    run_operations();
}

DCP_TEST(one_rank_communicator_copies_without_nccl)
{
    if (dcp_cuda_device_count() < 1) DCP_SKIP("no GPU");
    if (!dcp_nccl_available()) DCP_SKIP("built without NCCL");
    run_one_rank();
}

DCP_TEST(operations_allocate_nothing_beyond_nccl)
{
    REQUIRE_TWO_GPUS();
    run_no_allocation();
}

DCP_TEST(missing_peer_times_out_then_aborts)
{
    REQUIRE_TWO_GPUS();
    run_missing_peer();
}

DCP_TEST(dynamic_cp_group_communicators)
{
    REQUIRE_TWO_GPUS();
    run_cp_groups();
}

DCP_TEST(mtp_roll_over_nccl_equals_host_roll)
{
    REQUIRE_TWO_GPUS();
    run_mtp_roll();
}
