/*
 * comm_nccl.c - the dcp_comm interface over NCCL (dcpack.h, "NCCL
 * communicator backend").
 *
 * Every operation is enqueued on the communicator's stream and waited for
 * before it returns, polling the stream and ncclCommGetAsyncError, so a
 * failure or a missing peer comes back as a status (DCP_ERR_NCCL,
 * DCP_ERR_TIMEOUT) rather than a hang.  Device buffers go to NCCL as they
 * are; host buffers (the step's plan metadata) travel through a device
 * staging buffer taken at init.  The variable-size operations are grouped
 * ncclSend/ncclRecv, one group per call, with the rank's own block copied by
 * cudaMemcpyAsync.  A communicator of one rank makes no NCCL call at all (see
 * copy_own).  Nothing here allocates after init; what init takes comes from
 * alloc/.  Builds without NCCL compile no_nccl.c instead.
 *
 * A lost peer.  Once a peer is gone (its process died, the communicator was
 * aborted, NCCL reported an asynchronous error) what a collective leaves in
 * its output is not data: a kernel that returns early writes nothing, or
 * part.  Every such path fails the call and marks the communicator broken
 * (only abort/destroy are allowed then); host outputs are staged through a
 * buffer zeroed before each collective, so a collective that wrote nothing
 * hands back zeros, never the previous call's bytes; and the agreement reads
 * no reduced value at all: every rank contributes a sealed record (magic,
 * its rank, its status, the communicator's count of agreements, a check)
 * and a record that does not check out fails the call with DCP_ERR_COMM.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"
#include "../alloc/device.h"
#include "../alloc/host.h"

#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

typedef struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    int owns_comm;
    int broken; /* timed out or failed asynchronously: only abort/destroy are allowed */
    int32_t timeout_ms;
    size_t staging_bytes;
    unsigned char *staging; /* device: [staging_bytes][256 spare bytes] */
    uint64_t agreements;    /* op_agree calls that reached NCCL: every rank's count is the same */
    dcp_nccl_options options;
    char message[256];
} nccl_impl;

#define IMPL(comm) ((nccl_impl *)(comm)->impl)

void dcp_nccl_options_default(dcp_nccl_options *o)
{
    o->timeout_ms = 600000;
    o->host_staging_bytes = (size_t)1 << 20;
}

int32_t dcp_nccl_available(void) { return 1; }

static dcp_status fail(nccl_impl *c, dcp_status s, const char *format, ...) __attribute__((format(printf, 3, 4)));
static dcp_status fail(nccl_impl *c, dcp_status s, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(c->message, sizeof c->message, format, args);
    va_end(args);
    return s;
}

#define NCCL_TRY(c, call)                                                                                        \
    do {                                                                                                         \
        ncclResult_t r_ = (call);                                                                                \
        if (r_ != ncclSuccess) {                                                                                 \
            if (r_ == ncclSystemError || r_ == ncclRemoteError || r_ == ncclInternalError) (c)->broken = 1;      \
            return fail((c), DCP_ERR_NCCL, "%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError((c)->comm)); \
        }                                                                                                        \
    } while (0)
#define CUDA_TRY(c, call)                                                                                        \
    do {                                                                                                         \
        cudaError_t e_ = (call);                                                                                 \
        if (e_ != cudaSuccess) return fail((c), DCP_ERR_CUDA, "%s: %s", #call, cudaGetErrorString(e_));         \
    } while (0)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Wait until everything enqueued on the stream is done, watching for NCCL errors and the timeout. */
static dcp_status wait_stream(nccl_impl *c)
{
    const double start = now_ms();
    for (unsigned spins = 0;; spins++) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return fail(c, DCP_ERR_CUDA, "stream: %s", cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(c->comm, &async);
        if (q != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            c->broken = 1;
            return fail(c, DCP_ERR_NCCL, "asynchronous NCCL error: %s (%s)",
                        ncclGetErrorString(q != ncclSuccess ? q : async), ncclGetLastError(c->comm));
        }
        if (c->timeout_ms > 0 && now_ms() - start > (double)c->timeout_ms) {
            c->broken = 1;
            return fail(c, DCP_ERR_TIMEOUT, "an NCCL operation did not complete within %d ms (a peer missing?)",
                        c->timeout_ms);
        }
        if (spins > 2000) {
            struct timespec pause = {0, 20000}; /* past the first ~ms, stop burning a core */
            nanosleep(&pause, NULL);
        }
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        c->broken = 1;
        return fail(c, DCP_ERR_NCCL, "asynchronous NCCL error: %s", ncclGetErrorString(async));
    }
    return DCP_OK;
}

/* 1: device memory, 0: host memory (pageable or pinned), for NULL too. */
static int on_device(const void *p)
{
    if (!p) return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static dcp_status begin(dcp_comm *comm, nccl_impl **out)
{
    if (!comm || !comm->impl) return DCP_ERR_NULL_POINTER;
    nccl_impl *c = IMPL(comm);
    if (c->broken) return fail(c, DCP_ERR_COMM, "the communicator failed earlier; abort it");
    CUDA_TRY(c, cudaSetDevice(c->device));
    *out = c;
    return DCP_OK;
}

/*
 * Both buffers on the device, or both on the host (staged); a mix is refused.
 * A NULL buffer says nothing about placement: it goes to NCCL as it is, which
 * refuses it (ncclInvalidArgument -> DCP_ERR_NCCL).
 */
static dcp_status placement(nccl_impl *c, const void *a, size_t a_bytes, const void *b, size_t b_bytes, int *device)
{
    int da = a_bytes && a ? on_device(a) : -1, db = b_bytes && b ? on_device(b) : -1;
    if (da >= 0 && db >= 0 && da != db)
        return fail(c, DCP_ERR_INVALID_ARGUMENT, "one buffer is device memory and the other host memory");
    *device = da >= 0 ? da : db >= 0 ? db : 1;
    return DCP_OK;
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* Device -> host on the communicator's stream (never the legacy default stream, which would wait for other streams). */
static dcp_status to_host(nccl_impl *c, void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(c, cudaStreamSynchronize(c->stream));
    return DCP_OK;
}

/*
 * A communicator of one rank moves nothing between ranks: every operation is
 * the copy of the rank's own block to where it goes (memmove for host
 * buffers, cudaMemcpyAsync on the stream, waited for, for device buffers),
 * with no NCCL call and no staging.  One-GPU steps make several such calls.
 */
static dcp_status copy_own(nccl_impl *c, int device, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return DCP_OK;
    if (!device) {
        memmove(dst, src, bytes);
        return DCP_OK;
    }
    CUDA_TRY(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return wait_stream(c);
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

static dcp_status op_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    nccl_impl *c = NULL;
    dcp_status s = begin(comm, &c);
    if (s != DCP_OK) return s;
    if (bytes == 0) return DCP_OK;
    int device;
    if ((s = placement(c, send, bytes, recv, bytes, &device)) != DCP_OK) return s;
    size_t total = bytes * (size_t)comm->size;
    if (comm->size == 1) return copy_own(c, device, recv, send, bytes);
    if (device) {
        NCCL_TRY(c, ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream));
        return wait_stream(c);
    }
    if (total > c->staging_bytes)
        return fail(c, DCP_ERR_CAPACITY, "all-gather of %zu host bytes exceeds the %zu-byte staging buffer", total,
                    c->staging_bytes);
    unsigned char *mine = c->staging + (size_t)comm->rank * bytes;
    CUDA_TRY(c, cudaMemsetAsync(c->staging, 0, total, c->stream)); /* what no peer writes reads as zeros */
    CUDA_TRY(c, cudaMemcpyAsync(mine, send, bytes, cudaMemcpyHostToDevice, c->stream));
    NCCL_TRY(c, ncclAllGather(mine, c->staging, bytes, ncclUint8, c->comm, c->stream));
    if ((s = wait_stream(c)) != DCP_OK) return s;
    return to_host(c, recv, c->staging, total);
}

static dcp_status op_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                                const size_t *recv_bytes, const size_t *recv_offsets)
{
    nccl_impl *c = NULL;
    dcp_status s = begin(comm, &c);
    if (s != DCP_OK) return s;
    const int32_t me = comm->rank, n = comm->size;
    if (recv_bytes[me] != send_bytes)
        return fail(c, DCP_ERR_INVALID_ARGUMENT, "all-gather-v: rank %d sends %zu bytes but expects %zu from itself",
                    me, send_bytes, recv_bytes[me]);
    size_t extent = 0, total = 0;
    for (int32_t p = 0; p < n; p++) {
        total += recv_bytes[p];
        if (recv_bytes[p] && recv_offsets[p] + recv_bytes[p] > extent) extent = recv_offsets[p] + recv_bytes[p];
    }
    if (total == 0) return DCP_OK;
    int device;
    if ((s = placement(c, send, send_bytes, recv, extent, &device)) != DCP_OK) return s;
    unsigned char *base = (unsigned char *)recv;
    const unsigned char *from = (const unsigned char *)send;
    if (n == 1) return copy_own(c, device, base + recv_offsets[0], from, send_bytes);
    if (!device) {
        if (extent > c->staging_bytes)
            return fail(c, DCP_ERR_CAPACITY, "all-gather-v of %zu host bytes exceeds the %zu-byte staging buffer",
                        extent, c->staging_bytes);
        base = c->staging;
        CUDA_TRY(c, cudaMemsetAsync(base, 0, extent, c->stream)); /* what no peer writes reads as zeros */
        if (send_bytes)
            CUDA_TRY(c, cudaMemcpyAsync(base + recv_offsets[me], send, send_bytes, cudaMemcpyHostToDevice, c->stream));
        from = base + recv_offsets[me];
    }
    NCCL_TRY(c, ncclGroupStart());
    for (int32_t p = 0; p < n; p++) {
        if (p == me) continue;
        if (recv_bytes[p]) {
            ncclResult_t r = ncclRecv(base + recv_offsets[p], recv_bytes[p], ncclUint8, p, c->comm, c->stream);
            if (r != ncclSuccess) {
                ncclGroupEnd();
                NCCL_TRY(c, r);
            }
        }
        if (send_bytes) {
            ncclResult_t r = ncclSend(from, send_bytes, ncclUint8, p, c->comm, c->stream);
            if (r != ncclSuccess) {
                ncclGroupEnd();
                NCCL_TRY(c, r);
            }
        }
    }
    NCCL_TRY(c, ncclGroupEnd());
    if (device && send_bytes && base + recv_offsets[me] != from)
        CUDA_TRY(c, cudaMemcpyAsync(base + recv_offsets[me], from, send_bytes, cudaMemcpyDeviceToDevice, c->stream));
    if ((s = wait_stream(c)) != DCP_OK) return s;
    if (!device)
        for (int32_t p = 0; p < n; p++)
            if (recv_bytes[p])
                if ((s = to_host(c, (unsigned char *)recv + recv_offsets[p], base + recv_offsets[p], recv_bytes[p])) !=
                    DCP_OK)
                    return s;
    return DCP_OK;
}

static dcp_status op_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                               void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    nccl_impl *c = NULL;
    dcp_status s = begin(comm, &c);
    if (s != DCP_OK) return s;
    const int32_t me = comm->rank, n = comm->size;
    size_t send_extent = 0, recv_extent = 0;
    for (int32_t p = 0; p < n; p++) {
        if (send_bytes[p] && send_offsets[p] + send_bytes[p] > send_extent) send_extent = send_offsets[p] + send_bytes[p];
        if (recv_bytes[p] && recv_offsets[p] + recv_bytes[p] > recv_extent) recv_extent = recv_offsets[p] + recv_bytes[p];
    }
    if (send_bytes[me] != recv_bytes[me])
        return fail(c, DCP_ERR_INVALID_ARGUMENT, "all-to-all-v: rank %d sends itself %zu bytes but expects %zu", me,
                    send_bytes[me], recv_bytes[me]);
    if (send_extent == 0 && recv_extent == 0) return DCP_OK;
    int device;
    if ((s = placement(c, send, send_extent, recv, recv_extent, &device)) != DCP_OK) return s;
    const unsigned char *out = (const unsigned char *)send;
    unsigned char *in = (unsigned char *)recv;
    if (n == 1) return copy_own(c, device, in + recv_offsets[0], out + send_offsets[0], send_bytes[0]);
    if (!device) {
        size_t in_at = align256(send_extent);
        if (in_at + recv_extent > c->staging_bytes)
            return fail(c, DCP_ERR_CAPACITY, "all-to-all-v of %zu + %zu host bytes exceeds the %zu-byte staging buffer",
                        send_extent, recv_extent, c->staging_bytes);
        if (send_extent) CUDA_TRY(c, cudaMemcpyAsync(c->staging, send, send_extent, cudaMemcpyHostToDevice, c->stream));
        if (recv_extent) CUDA_TRY(c, cudaMemsetAsync(c->staging + in_at, 0, recv_extent, c->stream));
        out = c->staging;
        in = c->staging + in_at;
    }
    NCCL_TRY(c, ncclGroupStart());
    for (int32_t p = 0; p < n; p++) {
        if (p == me) continue;
        ncclResult_t r = ncclSuccess;
        if (send_bytes[p]) r = ncclSend(out + send_offsets[p], send_bytes[p], ncclUint8, p, c->comm, c->stream);
        if (r == ncclSuccess && recv_bytes[p])
            r = ncclRecv(in + recv_offsets[p], recv_bytes[p], ncclUint8, p, c->comm, c->stream);
        if (r != ncclSuccess) {
            ncclGroupEnd();
            NCCL_TRY(c, r);
        }
    }
    NCCL_TRY(c, ncclGroupEnd());
    if (send_bytes[me])
        CUDA_TRY(c, cudaMemcpyAsync(in + recv_offsets[me], out + send_offsets[me], send_bytes[me],
                                    cudaMemcpyDeviceToDevice, c->stream));
    if ((s = wait_stream(c)) != DCP_OK) return s;
    if (!device)
        for (int32_t p = 0; p < n; p++)
            if (recv_bytes[p])
                if ((s = to_host(c, (unsigned char *)recv + recv_offsets[p], in + recv_offsets[p], recv_bytes[p])) !=
                    DCP_OK)
                    return s;
    return DCP_OK;
}

static dcp_status op_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    nccl_impl *c = NULL;
    dcp_status s = begin(comm, &c);
    if (s != DCP_OK) return s;
    if (bytes == 0) return DCP_OK; /* a bad root is NCCL's to refuse (DCP_ERR_NCCL) */
    if (comm->size == 1 && root == 0) return DCP_OK; /* the root holds it already */
    if (on_device(buffer)) {
        NCCL_TRY(c, ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, c->comm, c->stream));
        return wait_stream(c);
    }
    if (bytes > c->staging_bytes)
        return fail(c, DCP_ERR_CAPACITY, "broadcast of %zu host bytes exceeds the %zu-byte staging buffer", bytes,
                    c->staging_bytes);
    if (comm->rank == root) CUDA_TRY(c, cudaMemcpyAsync(c->staging, buffer, bytes, cudaMemcpyHostToDevice, c->stream));
    else CUDA_TRY(c, cudaMemsetAsync(c->staging, 0, bytes, c->stream)); /* a broadcast that wrote nothing: zeros */
    NCCL_TRY(c, ncclBroadcast(c->staging, c->staging, bytes, ncclUint8, root, c->comm, c->stream));
    if ((s = wait_stream(c)) != DCP_OK) return s;
    return comm->rank != root ? to_host(c, buffer, c->staging, bytes) : DCP_OK;
}

/* One rank's record in an agreement (see the file's comment). */
typedef struct agree_record {
    uint32_t magic;
    int32_t rank;
    int32_t status;
    uint32_t zero;
    uint64_t agreement; /* the communicator's count of agreements */
    uint64_t check;
} agree_record;

#define AGREE_MAGIC 0x44434147u /* "DCAG" */

static uint64_t record_check(const agree_record *r)
{
    uint64_t v[3] = {(uint64_t)r->magic << 32 | (uint32_t)r->rank, (uint64_t)(uint32_t)r->status << 32 | r->zero,
                     r->agreement};
    uint64_t x = 0x452821E638D01377ull;
    for (int i = 0; i < 3; i++) {
        x = (x ^ v[i]) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 31;
    }
    return x;
}

/*
 * Every rank's sealed record, all-gathered through the zeroed staging buffer and read back a block at a
 * time; the lowest failing rank is the agreed outcome.  A record that does not check out (zeros where a
 * peer wrote nothing, another agreement's, garbage) fails the call: DCP_ERR_COMM, the communicator broken.
 */
static dcp_status op_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    nccl_impl *c = NULL;
    dcp_status s = begin(comm, &c);
    if (s != DCP_OK) return s;
    const int no_output = !agreed || !failed_rank; /* still takes part, as a failure, so no peer waits in vain */
    if (no_output) local = DCP_ERR_NULL_POINTER;
    if (comm->size == 1) {
        if (no_output) return fail(c, DCP_ERR_NULL_POINTER, "agree: a NULL output");
        *agreed = local;
        *failed_rank = local == DCP_OK ? -1 : comm->rank;
        return DCP_OK;
    }
    const size_t n = (size_t)comm->size, total = n * sizeof(agree_record);
    if (total > c->staging_bytes)
        return fail(c, DCP_ERR_CAPACITY, "agreement of %zu ranks exceeds the %zu-byte staging buffer", n,
                    c->staging_bytes);
    agree_record mine = {AGREE_MAGIC, comm->rank, (int32_t)local, 0, ++c->agreements, 0};
    mine.check = record_check(&mine);
    unsigned char *slot = c->staging + (size_t)comm->rank * sizeof mine;
    CUDA_TRY(c, cudaMemsetAsync(c->staging, 0, total, c->stream));
    CUDA_TRY(c, cudaMemcpyAsync(slot, &mine, sizeof mine, cudaMemcpyHostToDevice, c->stream));
    NCCL_TRY(c, ncclAllGather(slot, c->staging, sizeof mine, ncclUint8, c->comm, c->stream));
    if ((s = wait_stream(c)) != DCP_OK) return s;
    dcp_status outcome = DCP_OK;
    int32_t lowest = -1;
    agree_record block[64];
    for (size_t first = 0; first < n; first += 64) {
        size_t count = n - first < 64 ? n - first : 64;
        if ((s = to_host(c, block, c->staging + first * sizeof mine, count * sizeof mine)) != DCP_OK) return s;
        for (size_t i = 0; i < count; i++) {
            const agree_record *r = &block[i];
            const int32_t p = (int32_t)(first + i);
            if (r->magic != AGREE_MAGIC || r->rank != p || r->zero != 0 || r->agreement != mine.agreement ||
                r->check != record_check(r) || r->status > 0 ||
                (p == comm->rank && memcmp(r, &mine, sizeof mine) != 0)) {
                c->broken = 1;
                return fail(c, DCP_ERR_COMM,
                            "agreement %llu: rank %d's record did not arrive intact (a peer gone, or the "
                            "communicator aborted): its result is not a status",
                            (unsigned long long)mine.agreement, p);
            }
            if (r->status != DCP_OK && lowest < 0) {
                lowest = p;
                outcome = (dcp_status)r->status;
            }
        }
    }
    if (no_output) return fail(c, DCP_ERR_NULL_POINTER, "agree: a NULL output");
    *agreed = outcome;
    *failed_rank = lowest;
    return DCP_OK;
}

static const char *op_describe_failure(dcp_comm *comm) { return comm && comm->impl ? IMPL(comm)->message : ""; }

static const dcp_comm_ops nccl_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), op_allgather, op_allgatherv, op_alltoallv, op_broadcast, op_agree,
    op_describe_failure,
};

/* ------------------------------------------------------------------------ */
/* Life cycle                                                                */
/* ------------------------------------------------------------------------ */

static void impl_free(nccl_impl *c)
{
    if (!c) return;
    if (c->staging) {
        int current = 0;
        cudaGetDevice(&current);
        cudaSetDevice(c->device);
        dcp__device_free(c->staging);
        cudaSetDevice(current);
    }
    dcp__host_free(c);
}

size_t dcp_nccl_staging_bytes(const dcp_config *config)
{
    if (!config) return 0;
    size_t n = (size_t)dcp_config_num_ranks(config), ns = config->max_sequences > 0 ? (size_t)config->max_sequences : 0;
    size_t headers = n * 64, lengths = ns * 2 * sizeof(int32_t) + 64, header = 256;
    size_t need = headers > lengths ? headers : lengths;
    if (header > need) need = header;
    return align256(need) + 4096;
}

dcp_status dcp_nccl_comm_init(dcp_comm *comm, void *nccl_comm, void *cuda_stream, const dcp_nccl_options *options)
{
    if (!comm || !nccl_comm) return DCP_ERR_NULL_POINTER;
    memset(comm, 0, sizeof *comm);
    nccl_impl *c = dcp__host_calloc(1, sizeof *c);
    if (!c) return DCP_ERR_ALLOC;
    c->comm = (ncclComm_t)nccl_comm;
    c->stream = (cudaStream_t)cuda_stream;
    if (options) c->options = *options;
    else dcp_nccl_options_default(&c->options);
    c->timeout_ms = c->options.timeout_ms;
    c->staging_bytes = c->options.host_staging_bytes ? align256(c->options.host_staging_bytes) : ((size_t)1 << 20);
    int rank = 0, size = 0, device = 0;
    if (ncclCommUserRank(c->comm, &rank) != ncclSuccess || ncclCommCount(c->comm, &size) != ncclSuccess ||
        ncclCommCuDevice(c->comm, &device) != ncclSuccess) {
        dcp__host_free(c);
        return DCP_ERR_NCCL;
    }
    c->device = device;
    int current = 0;
    cudaGetDevice(&current);
    if (cudaSetDevice(device) != cudaSuccess ||
        dcp__device_alloc((void **)&c->staging, c->staging_bytes + 256) != 0) {
        (void)cudaGetLastError();
        c->staging = NULL;
        cudaSetDevice(current);
        dcp__host_free(c);
        return DCP_ERR_CUDA;
    }
    cudaSetDevice(current);
    comm->ops = &nccl_ops;
    comm->rank = rank;
    comm->size = size;
    comm->impl = c;
    return DCP_OK;
}

dcp_status dcp_nccl_comm_split(dcp_comm *parent, int32_t color, int32_t key, dcp_comm *child)
{
    if (!parent || !parent->impl || !child) return DCP_ERR_NULL_POINTER;
    memset(child, 0, sizeof *child);
    nccl_impl *p = IMPL(parent);
    ncclComm_t made = NULL;
    if (cudaSetDevice(p->device) != cudaSuccess) return DCP_ERR_CUDA;
    ncclResult_t r = ncclCommSplit(p->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &made, NULL);
    if (r != ncclSuccess) {
        fail(p, DCP_ERR_NCCL, "ncclCommSplit: %s (%s)", ncclGetErrorString(r), ncclGetLastError(p->comm));
        return DCP_ERR_NCCL;
    }
    if (color < 0 || !made) return DCP_OK;
    dcp_status s = dcp_nccl_comm_init(child, made, p->stream, &p->options);
    if (s != DCP_OK) {
        ncclCommDestroy(made);
        return s;
    }
    IMPL(child)->owns_comm = 1;
    return DCP_OK;
}

void *dcp_nccl_comm_handle(const dcp_comm *comm)
{
    return comm && comm->impl && comm->ops == &nccl_ops ? (void *)IMPL(comm)->comm : NULL;
}

const char *dcp_nccl_comm_last_error(const dcp_comm *comm)
{
    return comm && comm->impl && comm->ops == &nccl_ops ? IMPL(comm)->message : "";
}

dcp_status dcp_nccl_comm_abort(dcp_comm *comm)
{
    if (!comm || !comm->impl || comm->ops != &nccl_ops) return DCP_ERR_NULL_POINTER;
    nccl_impl *c = IMPL(comm);
    cudaSetDevice(c->device);
    ncclResult_t r = ncclCommAbort(c->comm);
    c->comm = NULL;
    c->owns_comm = 0;
    impl_free(c);
    memset(comm, 0, sizeof *comm);
    return r == ncclSuccess ? DCP_OK : DCP_ERR_NCCL;
}

void dcp_nccl_comm_destroy(dcp_comm *comm)
{
    if (!comm || !comm->impl || comm->ops != &nccl_ops) return;
    nccl_impl *c = IMPL(comm);
    if (c->owns_comm && c->comm) {
        cudaSetDevice(c->device);
        ncclCommDestroy(c->comm);
    }
    impl_free(c);
    memset(comm, 0, sizeof *comm);
}

/* ------------------------------------------------------------------------ */
/* Dynamic CP groups                                                         */
/* ------------------------------------------------------------------------ */

dcp_status dcp_nccl_cp_groups_create(dcp_comm *dpxcp, dcp_nccl_cp_groups *groups)
{
    if (!dpxcp || !groups) return DCP_ERR_NULL_POINTER;
    memset(groups, 0, sizeof *groups);
    const int32_t n = dpxcp->size, rank = dpxcp->rank;
    int32_t count = 0;
    for (int32_t size = 1; size <= n && count < DCP_MAX_LOG2_CP + 1; size *= 2) {
        /* a block of `size` consecutive ranks; every rank is in exactly one, so no rank sits out */
        dcp_status s = dcp_nccl_comm_split(dpxcp, rank / size, rank % size, &groups->group[count]);
        if (s != DCP_OK) {
            dcp_nccl_cp_groups_destroy(groups);
            return s;
        }
        groups->size[count++] = size;
        if (size > n / 2) break;
    }
    if ((n & (n - 1)) != 0) { /* the whole pool, as a group of its own */
        dcp_status s = dcp_nccl_comm_split(dpxcp, 0, rank, &groups->group[count]);
        if (s != DCP_OK) {
            dcp_nccl_cp_groups_destroy(groups);
            return s;
        }
        groups->size[count++] = n;
    }
    groups->count = count;
    return DCP_OK;
}

dcp_comm *dcp_nccl_cp_group(dcp_nccl_cp_groups *groups, int32_t local_cp_size)
{
    if (!groups) return NULL;
    for (int32_t i = 0; i < groups->count; i++)
        if (groups->size[i] == local_cp_size) return &groups->group[i];
    return NULL;
}

void dcp_nccl_cp_groups_destroy(dcp_nccl_cp_groups *groups)
{
    if (!groups) return;
    for (int32_t i = 0; i < DCP_MAX_LOG2_CP + 2; i++) dcp_nccl_comm_destroy(&groups->group[i]);
    memset(groups, 0, sizeof *groups);
}
