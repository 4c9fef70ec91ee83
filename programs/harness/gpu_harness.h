/*
 * gpu_harness.h - the GPU mode of the step harness: every world rank is a
 * thread driving its own GPU (world rank w on device w), its communicators
 * are NCCL (the world from ncclCommInitAll, the DPxCP lanes and TP groups
 * split from it), its input samples live in device memory and its context
 * has a CUDA workspace.  After a step the rank's outputs are downloaded into
 * host arrays, so the harness checks them against the oracle exactly as it
 * checks the in-process ranks.  Built only with NCCL.
 */
#ifndef DCP_GPU_HARNESS_H
#define DCP_GPU_HARNESS_H

#include "dcpack.h"

typedef struct dcp_gpu_world dcp_gpu_world;

/* NCCL communicators for `size` GPUs (devices 0..size-1). */
dcp_status dcp_gpu_world_create(int32_t size, dcp_gpu_world **world, char *message, size_t message_size);
void dcp_gpu_world_destroy(dcp_gpu_world *world);

typedef struct dcp_gpu_rank {
    int32_t device;
    void *stream;
    dcp_comm world, lane, tp;
    int has_lane, has_tp;
    dcp_sample *samples;                 /* device copies of the rank's input */
    void *field_blocks[4];               /* tokens, labels, loss_mask, position_ids */
    void *workspace;                     /* the context's device workspace */
    dcp_step_output host_output;         /* the last step's outputs, downloaded */
    dcp_microbatch *host_views;
    void **downloads;
    int32_t num_downloads, download_capacity;
    int64_t cu_mismatches;               /* device cu_seqlens that differ from the host copies */
    char message[256];
    dcp_status failed; /* the last download's status (DCP_OK, DCP_ERR_ALLOC or DCP_ERR_CUDA); message says why */
} dcp_gpu_rank;

/*
 * In the rank's thread: bind device world_rank, create a stream, wrap the
 * world communicator and split the lane (lane_color < 0: none) and, when
 * split_tp, the TP group.  Every rank of the world calls it.
 */
dcp_status dcp_gpu_rank_begin(dcp_gpu_world *world, int32_t world_rank, int32_t lane_color, int32_t lane_key,
                              int split_tp, int32_t tp_color, int32_t tp_key, size_t staging_bytes,
                              int32_t timeout_ms, dcp_gpu_rank *rank);
/*
 * Give the context a CUDA workspace in device memory the harness takes and
 * fills with 0xA5 first (so a slot the step forgets to write shows up), and
 * pinned memory dcpack takes itself.
 */
dcp_status dcp_gpu_rank_attach(dcp_gpu_rank *rank, dcp_context *context, const dcp_config *config);
/* Device copies of host samples (field buffers to the device; cu_seqlens stay host). */
dcp_status dcp_gpu_rank_upload(dcp_gpu_rank *rank, const dcp_sample *samples, int32_t num_samples, uint32_t fields);
/* Download a step's outputs into rank->host_output. */
dcp_status dcp_gpu_rank_download(dcp_gpu_rank *rank, const dcp_step_output *output);
/*
 * Heap bytes (allocated + freed, jemalloc's counters for this thread) one
 * NCCL collective costs after warm-up, measured on one all-reduce of the
 * world communicator (its agree operation): NCCL 2.27 and later allocate and
 * free a group job in every ncclGroupEnd.  0 without jemalloc.  Collective
 * over the world.
 */
uint64_t dcp_gpu_rank_nccl_call_heap(dcp_gpu_rank *rank);
/* Free device memory on this rank's GPU (cudaMemGetInfo). */
int64_t dcp_gpu_free_bytes(void);
void dcp_gpu_rank_end(dcp_gpu_rank *rank);

#endif
