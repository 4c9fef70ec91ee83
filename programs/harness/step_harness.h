/*
 * step_harness.h - run dcp_step() over in-process ranks (one thread per rank
 * of DPxCPxTPxPP) on synthetic token data, and check every rank's outputs
 * against the oracle.  Shared by the tests, `dcpack step` and bench_step.
 * The harness allocates freely before and after steps; the steps themselves
 * are measured with jemalloc's per-thread counters.
 */
#ifndef DCP_STEP_HARNESS_H
#define DCP_STEP_HARNESS_H

#include "dcpack.h"

/* Bad input planted on one rank in one step, to test error agreement. */
typedef enum dcp_harness_fault {
    DCP_HARNESS_FAULT_NONE = 0,
    DCP_HARNESS_FAULT_CU_DECREASING,   /* pre-packed cu_seqlens going backwards */
    DCP_HARNESS_FAULT_CU_NOT_ZERO,     /* cu_seqlens[0] != 0 */
    DCP_HARNESS_FAULT_CU_PAST_BUFFER,  /* last boundary past the buffer */
    DCP_HARNESS_FAULT_LENGTH_MISMATCH, /* padded length != buffer length */
    DCP_HARNESS_FAULT_FIELD_MISMATCH,  /* one rank drops a field */
    DCP_HARNESS_FAULT_CAPACITY,        /* more samples than max_sequences */
    DCP_HARNESS_FAULT_SIBLINGS_DIFFER, /* a CP sibling holds one sequence fewer */
    /* with plan_ahead: the rank hands its step a plan that is not the batch's */
    DCP_HARNESS_FAULT_PLAN_OTHER_LENGTHS, /* the plan of the batch with two different lengths swapped */
    DCP_HARNESS_FAULT_PLAN_OTHER_CONFIG,  /* the batch's plan made under plan_effort fast (the step's: full) */
    DCP_HARNESS_FAULT_PLAN_CHANGED        /* the batch's plan with its first and last ids swapped after it was made */
} dcp_harness_fault;

typedef struct dcp_harness_options {
    dcp_config config;           /* max_tokens_per_rank 0: sized from the plan */
    const int32_t *lengths;      /* real tokens of each sequence of the global batch */
    int32_t num_lengths;
    int prepacked;               /* samples are pre-packed (cu_seqlens, 4 sequences each) */
    int tp_ranks_hold_data;
    int32_t mtp_pipeline_rank;   /* -1: no MTP layers */
    uint32_t mtp_virtual_stages; /* on that stage */
    int32_t steps;               /* >= 1 */
    int check;                   /* verify every rank against the oracle after each step */
    dcp_harness_fault fault;
    dcp_inproc_fault comm_fault; /* CPU ranks: a communicator fault on the fault rank in the fault step, */
    int32_t comm_fault_call;     /* at its comm_fault_call-th collective of that step (0 = the first) */
    int32_t fault_world_rank;    /* the rank that gets the planted input and/or communicator fault */
    int32_t fault_step;
    int32_t timeout_ms;          /* collectives waiting longer fail (0: 60 s); the same for every communicator */
    int plan_ahead;              /* every rank that holds data plans the batch on a planning-only context of its
                                    own before each step (allocations counted with the step's) and hands the
                                    plan to dcp_step (dcp_step_args.plan) */
    int gpu;                     /* one thread per GPU, NCCL communicators, device data (gpu_harness.h); the
                                    first step is a warm-up for allocation counts.  Needs NCCL and world-size GPUs */
} dcp_harness_options;

typedef struct dcp_harness_result {
    int32_t world_size;
    int32_t num_microbatches;
    int64_t total_tokens;           /* padded tokens of the global batch */
    dcp_status step_status[8];      /* per step (first 8): the status rank 0 returned */
    int statuses_agree;             /* every rank returned the same status in every step */
    char message[768];              /* first failure or mismatch (a library message and its context) */
    int verified;                   /* check was on, every successful step matched */
    int64_t mismatches;
    uint64_t heap_bytes_max;        /* most bytes one rank allocated inside one dcp_step() */
    uint64_t heap_calls_max;        /* same, in allocation events seen (0 or more) */
    int heap_measured;              /* jemalloc's per-thread counters were readable: heap_bytes_max means something */
    int64_t device_bytes_delta;     /* gpu: most free device memory one GPU lost between the end of the first step
                                       and the end of the last (cudaMemGetInfo) */
    uint64_t nccl_heap_per_call;    /* gpu: heap bytes one NCCL collective allocates + frees (NCCL's group job) */
    int64_t heap_bytes_beyond_nccl; /* gpu: most heap bytes one rank's step took beyond its collectives x the above */
    double step_seconds_min, step_seconds_median; /* slowest rank's time per step */
    /* per world rank, last step */
    dcp_step_stats *rank_stats;     /* [world_size] */
    dcp_step_stats *step_stats;     /* [steps * world_size]: every successful step's, step-major (zero where it failed) */
    int32_t *rank_pipeline, *rank_tensor, *rank_dpxcp; /* [world_size] */
    int32_t *rank_collectives;      /* [world_size]: collectives each rank made in the last step */
    dcp_status *rank_step_status;   /* [steps * world_size]: what each rank's dcp_step returned */
} dcp_harness_result;

void dcp_harness_options_default(dcp_harness_options *options);

/*
 * Run; DCP_OK when the harness itself worked (step failures are in the result).
 * DCP_ERR_ALLOC when memory ran out (the batch, a rank's workspace, the oracle)
 * or not every rank's thread could start (then none runs); result->message says which.
 */
dcp_status dcp_harness_run(const dcp_harness_options *options, dcp_harness_result *result);
void dcp_harness_result_free(dcp_harness_result *result);

/* Read a trace (one length per line); returns the count or -1. */
int32_t dcp_harness_read_trace(const char *path, int32_t *out, int32_t capacity);

/* Bytes per token of the fields a PP stage keeps (for reports). */
int32_t dcp_harness_fields_bytes(uint32_t fields);

#endif
