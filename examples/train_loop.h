/*
 * train_loop.h - the parts of dcpack_train_data_loop (docs/examples.md), one
 * file each:
 *
 *   train_data_loop.c   main: set-up, then one rank's loop of steps
 *   train_options.c     options, the rank's place from the environment
 *   train_data.c        the trace, each step's batch, the loader's samples
 *   train_rendezvous.c  rank 0 publishes the job's rendezvous in a file
 *   train_comms.c       communicators (shm or NCCL) and the failure drill
 *   train_checks.c      every output checked against the oracle; the step report
 *   train_plan_ahead.c  --plan-ahead: the next batch gathered and planned on a thread
 *
 * Only the public header is used from dcpack.
 */
#ifndef DCP_TRAIN_LOOP_H
#define DCP_TRAIN_LOOP_H

#include <dcpack.h>

#include "shm_comm.h"
#include "thd_oracle.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef DCP_EXAMPLE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

/* Exit status (docs/examples.md). */
enum {
    RC_OK = 0,
    RC_MISMATCH = 1,
    RC_USAGE = 2,
    RC_PEER_LOST = 3,
    RC_STEP_FAILED = 4,
    RC_SETUP = 5,
    RC_DIED = 9
};

static inline double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static inline int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ---- options and layout (train_options.c) ---- */

typedef struct options {
    int32_t dp, cp, tp, pp, vpp;
    int mtp;
    const char *trace;
    int32_t batch, steps;
    const char *comm; /* "nccl" or "shm" */
    int32_t timeout_ms, init_timeout_ms;
    const char *rendezvous, *job_id;
    dcp_scheduler scheduler;
    dcp_plan_effort effort;
    int plan_ahead;
    int32_t max_seqlen_per_rank, pad_alignment;
    int32_t die_step, die_rank, die_call;
    int die_kill;
    int verbose;
} options;

typedef struct layout {
    int32_t world, rank, local_rank;
    int32_t dp, cp, tp, pp, vpp, n; /* n = DP*CP */
    int32_t tp_rank, cp_rank, dp_rank, pp_rank, dpxcp;
    int holds_data; /* TP rank 0 holds the batch and broadcasts the step's outputs to its TP peers */
    uint32_t mtp_virtual_stages;
} layout;

int usage_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
int parse_int(const char *text, int64_t lo, int64_t hi, int32_t *out);
/* -1 to go on, else the exit status */
int parse_options(int argc, char **argv, options *o);
int make_layout(const options *o, layout *L);

/* ---- the trace, batches and the loader (train_data.c) ---- */

int32_t *read_trace(const char *path, int32_t *count);

/* One global batch: G sequences, ids in DP-rank order (the order dcp_step gathers them in). */
typedef struct batch {
    int32_t n, step;
    int32_t *padded, *original;
    int64_t *source;
    int32_t *first; /* [dp + 1]: DP rank p holds ids first[p] .. first[p+1]-1 */
} batch;

int batch_alloc(batch *b, int32_t n, int32_t dp);
void batch_free(batch *b);
/* Step k: lines k*G .. k*G+G-1 of the trace (wrapping); spans padded to a multiple of 2*DPxCP so zigzag cuts them. */
void batch_fill(batch *b, const int32_t *trace, int32_t trace_count, int32_t step, int32_t g, int32_t dp, int32_t n);

/* A DP rank's loader output: one sample per sequence, its padding slots holding garbage the step must clear. */
typedef struct loader {
    int64_t capacity; /* tokens */
    int64_t *tokens, *labels, *positions;
    float *loss_mask;
    dcp_sample *samples;
    int32_t num_samples;
    int64_t num_tokens;
} loader;

int loader_alloc(loader *l, int64_t capacity, int32_t max_samples);
void loader_free(loader *l);
void loader_fill(loader *l, const batch *b, int32_t dp_rank);

#ifdef DCP_EXAMPLE_NCCL
/* The loader's fields on the device, uploaded every step (what a GPU data loader hands the step). */
typedef struct device_input {
    void *field[4];
    dcp_sample *samples;
} device_input;

int device_input_alloc(device_input *d, int64_t capacity, int32_t max_samples);
void device_input_free(device_input *d);
int device_input_upload(device_input *d, const loader *l, cudaStream_t stream);
#endif

/* ---- rendezvous (train_rendezvous.c) ---- */

void job_token(const options *o, char *out, size_t size);
int publish(const char *path, const char *job, const char *comm, const char *payload);
/* Poll for rank 0's line of this job and communicator kind; a stale file of another job is ignored. */
int await_rendezvous(int32_t rank, const char *path, const char *job, const char *comm, char *payload,
                     size_t payload_size, int32_t timeout_ms);

/* ---- communicators and the failure drill (train_comms.c) ---- */

#define MAX_CP_GROUPS (DCP_MAX_LOG2_CP + 2)

typedef struct comms {
    int nccl;
    dcp_comm world, dpxcp, tp; /* tp: TP > 1 only */
    dcp_comm dp;               /* --plan-ahead: this rank's DP group (one rank of each DP rank, same CP rank) */
    /* shm */
    shm_job *shm;
    int32_t cp_count;
    int32_t cp_size[MAX_CP_GROUPS];
    dcp_comm cp_group[MAX_CP_GROUPS];
#ifdef DCP_EXAMPLE_NCCL
    ncclComm_t nccl_world;
    cudaStream_t stream;
    dcp_nccl_cp_groups groups;
#endif
} comms;

dcp_comm *cp_group_of(comms *c, int32_t size);
const char *comm_error(comms *c, dcp_comm *comm);
int setup_shm(const options *o, const layout *L, const char *path, const char *job, size_t region_bytes, comms *c);
#ifdef DCP_EXAMPLE_NCCL
int setup_nccl(const options *o, const layout *L, const char *path, const char *job, size_t staging, comms *c);
#endif
void print_comm_failure(comms *c, int32_t rank);
void comms_abort(comms *c);
void comms_destroy(comms *c);

/* The failure drill: the step's communicators count their collectives, and one rank leaves mid-step. */
typedef struct drill {
    int armed, kill, in_step;
    int32_t rank, at_step, at_call, step, calls;
} drill;
extern drill fate;
/* outer: inner's collectives, each counted (and the drill's exit before the chosen one) */
void counted(dcp_comm *inner, dcp_comm *outer);

/* ---- checks and the step report (train_checks.c) ---- */

/*
 * Everything this rank received in this step against the oracle (the plan, every microbatch, the
 * scalars) and its CP group communicators; the number of mismatches (the first in message).  *cs: a
 * failed CP group all-gather.
 */
int64_t check_step(dcp_context *planner, const oracle_config *ocfg, const batch *b, const layout *L, comms *c,
                   int use_nccl, const dcp_step_output *out, char *message, size_t message_size, dcp_status *cs);

/* What each rank reports after a step (all-gathered over the world). */
enum { REPORT_STEP_NS, REPORT_PLAN_NS, REPORT_STAGE_NS, REPORT_EXCHANGE_NS, REPORT_PACK_NS, REPORT_AHEAD_NS,
       REPORT_MISMATCHES, REPORT_TOKENS, REPORT_MAX_CP, REPORT_FIELDS };

/*
 * Every rank's time and verdict, to every rank (a barrier before the next step too); rank 0 prints
 * the step's line.  *slowest: the slowest rank's step time; *mismatching: ranks that saw a mismatch.
 */
dcp_status report_step(comms *c, const layout *L, int32_t step, const dcp_step_output *out, int64_t step_ns,
                       int64_t ahead_ns, int64_t bad, int64_t *report, int64_t *slowest, int32_t *mismatching);

#ifdef DCP_EXAMPLE_NCCL
/* A host copy of a step's device outputs, to check. */
typedef struct host_output {
    dcp_step_output out;
    dcp_microbatch *views;
    void **blocks;
    int32_t num_blocks, capacity;
    int failed;
} host_output;

int host_output_make(host_output *h, const dcp_step_output *out);
void host_output_free(host_output *h);
#endif

/* ---- --plan-ahead (train_plan_ahead.c) ---- */

/*
 * The next step's plan, made while this one runs (dcpack.h, "Planning a step ahead"): its lengths
 * gathered over the DP group on a planning-only context, planned there on a thread of this program.
 */
typedef struct plan_ahead {
    dcp_context *ctx;   /* planning only: max_tokens_per_rank 0 */
    dcp_comm *dp;       /* this rank's DP group */
    pthread_t thread;
    int running;
    const int32_t *lengths; /* gathered, in ctx */
    int32_t n;
    const dcp_plan *plan;   /* in ctx, once the thread is joined */
    dcp_status status;
    int64_t plan_ns;        /* the thread's dcp_plan_compute */
} plan_ahead;

dcp_status plan_ahead_open(plan_ahead *a, const dcp_config *config, dcp_comm *dp);
/* Gather the batch's lengths (this DP rank's share, on this thread: a collective, tagged with the step number it
   is for, so a rank that skips one is caught) and start planning them. */
dcp_status plan_ahead_start(plan_ahead *a, const batch *b, int32_t dp_rank, int32_t step);
/* Wait for the plan; NULL (with the status in a->status) when it failed. */
const dcp_plan *plan_ahead_take(plan_ahead *a);
void plan_ahead_close(plan_ahead *a);

#endif
