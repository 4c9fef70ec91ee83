/*
 * dcpack_cuda.h - CUDA and NCCL: device workspaces, the NCCL communicator and the
 * dynamic-CP group communicators.
 * Part of the public API: dcpack.h includes it, so including dcpack.h is
 * enough; it includes dcpack.h for the types it uses.
 */
#ifndef DCPACK_CUDA_H
#define DCPACK_CUDA_H

#include "dcpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* CUDA and NCCL                                                             */
/* ------------------------------------------------------------------------ */

/*
 * Built where nvcc is found, the library carries CUDA kernels for sm_90
 * (gpu/ .cu files); where NCCL is found too, a communicator backend over NCCL.  No
 * CUDA or NCCL type appears in this header: a stream is passed as `void *`
 * (a cudaStream_t), a communicator as `void *` (an ncclComm_t).  In a build
 * without CUDA (or NCCL) every function below returns DCP_ERR_UNSUPPORTED
 * (dcp_cuda_device_count() returns 0).  Device pointers are named so; every
 * other pointer is host memory.
 */

/* Visible CUDA devices; 0 when there is none or the library has no CUDA. */
int32_t dcp_cuda_device_count(void);
/* 1 when the library was built with the NCCL backend. */
int32_t dcp_nccl_available(void);

/*
 * Size and bind a context's CUDA workspace, so that dcp_step() runs on the GPU.
 *
 * dcp_cuda_workspace_size() gives the device bytes (staging for the exchange,
 * the outputs, segment tables) and pinned host bytes (segment tables on
 * their way up) a context needs.  dcp_context_attach_cuda() binds them: pass
 * memory, or NULL to let dcpack take it (one cudaMalloc on the current
 * device, one cudaMallocHost; dcp_context_destroy() releases them).  With
 * a workspace, sample field buffers and the outputs' arrays are device memory
 * (cu_seqlens_host and cu_seqlens_padded_host host memory); cu_seqlens and
 * lengths stay host memory.  Every copy and kernel goes on args->cuda_stream
 * and the step waits for its stream before it returns (its closing error
 * agreement reads the result), so outputs are ready when it returns.  The
 * communicators must accept device buffers for the exchange and the TP
 * broadcast (the NCCL backend does).
 * Returns: DCP_OK; DCP_ERR_CAPACITY (max_tokens_per_rank is 0);
 * DCP_ERR_WORKSPACE_TOO_SMALL; DCP_ERR_CUDA (with the CUDA message in
 * dcp_context_last_error()); DCP_ERR_INVALID_ARGUMENT (already attached).
 * Allocation: attach with NULL memory makes the only device and pinned
 * allocations dcpack makes; no step allocates.
 * See docs/gpu.md#the-cuda-workspace-and-the-device-step.
 */
dcp_status dcp_cuda_workspace_size(const dcp_config *config, size_t *device_bytes, size_t *host_bytes);
dcp_status dcp_context_attach_cuda(dcp_context *context, void *device_memory, size_t device_bytes,
                                   void *pinned_host_memory, size_t host_bytes);

/*
 * The MTP roll and GDN padding on device memory, on `cuda_stream`.
 *
 * As dcp_mtp_roll() and dcp_gdn_pad() (dcpack_model.h), with the cu arrays in
 * device memory.  dcp_mtp_roll_cuda rolls zigzag only; it takes
 * device_exchange of dcp_mtp_roll_exchange_bytes(num_cu_seqlens, elem_size,
 * num_fields, 0) bytes and host_scratch of (0, NULL, 0, comm size) bytes, and
 * checks its arguments but not the contents of device_cu_seqlens_padded
 * (reading them back would cost a synchronisation per call): pass the
 * cu_seqlens_padded a step produced, or check them on the host with
 * dcp_mtp_roll first.
 * Returns: as the host calls (DCP_ERR_CORRUPT_INPUT for cu_seqlens that do
 * not describe the rows is the host dcp_gdn_pad's alone); DCP_ERR_UNSUPPORTED
 * (dcp_mtp_roll_cuda with contiguous and cp > 1).
 * See docs/gpu.md#dynamic-cp-groups-on-nccl.
 */
dcp_status dcp_mtp_roll_cuda(dcp_comm *comm, uint64_t step_id, int32_t group_first_rank, int32_t cp,
                             dcp_cp_partition partition, const int32_t *device_cu_seqlens_padded, int32_t num_cu_seqlens, int64_t num_tokens,
                             const void *const *device_fields, void *const *device_out, const size_t *elem_size,
                             int32_t num_fields, void *device_exchange, void *host_scratch, void *cuda_stream);
dcp_status dcp_gdn_pad_cuda(const void *device_in, int64_t rows, size_t row_bytes, int32_t alignment,
                            const int32_t *device_cu_seqlens, int32_t num_cu_seqlens, void *device_out,
                            int64_t out_capacity_rows, int32_t *device_out_cu_seqlens, void *cuda_stream);
dcp_status dcp_gdn_strip_cuda(const void *device_padded, int64_t rows, size_t row_bytes, void *device_out,
                              void *cuda_stream);

/*
 * NCCL communicator backend.
 *
 * dcp_nccl_comm_init() wraps the caller's ncclComm_t (not taken over: the
 * caller destroys it) and CUDA stream in a dcp_comm.  Every operation is
 * enqueued on that stream and waited for before it returns (the step reads
 * what it receives), polling ncclCommGetAsyncError meanwhile.  Device buffers
 * go to NCCL as they are; agree is one ncclAllGather of a sealed 32-byte
 * record per rank; host buffers (plan metadata, a few KB) go through a device
 * staging buffer of options.host_staging_bytes taken at init, zeroed before
 * each collective (a collective that wrote nothing hands back zeros, never
 * the previous call's bytes).
 * Returns: an NCCL call's failure and an asynchronous NCCL error are
 * DCP_ERR_NCCL, a CUDA failure DCP_ERR_CUDA, an operation still incomplete
 * after options.timeout_ms DCP_ERR_TIMEOUT, an agreement record that did not
 * arrive intact (a peer gone, the communicator aborted) DCP_ERR_COMM; after
 * any of these the communicator is unusable: call dcp_nccl_comm_abort().
 * Host buffers larger than the staging buffer are DCP_ERR_CAPACITY.
 * dcp_nccl_comm_last_error() gives the message.
 * Allocation: init allocates (the backend state, the staging buffer);
 * operations do not.
 * See docs/gpu.md#nccl-backend for each operation's NCCL calls.
 */
typedef struct dcp_nccl_options {
    int32_t timeout_ms;        /* 0 = wait forever; default 600000 */
    size_t host_staging_bytes; /* default 1 MiB; dcp_nccl_staging_bytes() gives what dcp_step needs */
} dcp_nccl_options;

/* Defaults: timeout_ms 600000, host_staging_bytes 1 MiB. */
void dcp_nccl_options_default(dcp_nccl_options *options);
/* Staging a dcp_step over this configuration needs for its host-memory collectives. */
size_t dcp_nccl_staging_bytes(const dcp_config *config);
/* Wrap the caller's ncclComm_t and CUDA stream in `comm` (above).  Allocation: the backend state and staging. */
dcp_status dcp_nccl_comm_init(dcp_comm *comm, void *nccl_comm, void *cuda_stream, const dcp_nccl_options *options);
/*
 * ncclCommSplit of comm's communicator: the child owns its new ncclComm_t (destroyed with it).
 *
 * color < 0 leaves this rank out (child->ops is then NULL).
 * Collective: over `parent`.
 */
dcp_status dcp_nccl_comm_split(dcp_comm *parent, int32_t color, int32_t key, dcp_comm *child);
/* The wrapped ncclComm_t. */
void *dcp_nccl_comm_handle(const dcp_comm *comm);
/* Message of the communicator's last failure ("" if none). */
const char *dcp_nccl_comm_last_error(const dcp_comm *comm);
/* ncclCommAbort, after a timeout or an asynchronous error; the communicator is then destroyed. */
dcp_status dcp_nccl_comm_abort(dcp_comm *comm);
/* Release the backend state (and the ncclComm_t only when dcp_nccl_comm_split created it). NULL-safe. */
void dcp_nccl_comm_destroy(dcp_comm *comm);

/*
 * Dynamic CP groups: this rank's communicator for every block a microbatch's CP group can be.
 *
 * A microbatch's CP group is a block of local_cp_size consecutive DPxCP ranks
 * starting at a multiple of local_cp_size (or all N ranks when N is not a
 * power of two and the group is the whole pool): its identity is
 * (local_cp_size, dpxcp_rank - cp_rank), both in each dcp_microbatch.
 * dcp_nccl_cp_groups_create() builds, once at init, this rank's communicator
 * for every such block (ncclCommSplit with color = rank / size, one split per
 * power of two up to N, plus the full group), like the reference's pre-built
 * groups; dcp_nccl_cp_group() picks the one of a microbatch.  Blocks are
 * built for power-of-two CP sizes up to 2^DCP_MAX_LOG2_CP = 65536 ranks;
 * dcp_nccl_cp_group() returns NULL for a wider one, which only a DPxCP pool
 * of more than 65536 GPUs can need: its caller builds those.  A caller with
 * its own process groups passes their ncclComm_t to dcp_nccl_comm_init()
 * instead.
 * Collective: dcp_nccl_cp_groups_create() over the DPxCP communicator.
 * See docs/gpu.md#dynamic-cp-groups-on-nccl.
 */
typedef struct dcp_nccl_cp_groups {
    int32_t count;                              /* entries of group[] in use */
    int32_t size[DCP_MAX_LOG2_CP + 2];          /* group[i] has size[i] ranks */
    dcp_comm group[DCP_MAX_LOG2_CP + 2];
} dcp_nccl_cp_groups;

dcp_status dcp_nccl_cp_groups_create(dcp_comm *data_context_parallel, dcp_nccl_cp_groups *groups);
/* This rank's communicator for a microbatch with this local_cp_size, or NULL. */
dcp_comm *dcp_nccl_cp_group(dcp_nccl_cp_groups *groups, int32_t local_cp_size);
/* Release every communicator of `groups` (and their ncclComm_t) and zero it.  NULL-safe. */
void dcp_nccl_cp_groups_destroy(dcp_nccl_cp_groups *groups);

#ifdef __cplusplus
}
#endif

#endif /* DCPACK_CUDA_H */
