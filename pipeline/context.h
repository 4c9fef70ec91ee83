/*
 * context.h - what a dcp_context holds.  Internal.
 *
 * The context lives at the start of its own workspace; everything after it is
 * one arena.  dcp__context_layout() (context.c) lays out the persistent
 * buffers (the plan, the gathered lengths, the bucket outputs, the step's
 * state), then the rest is scratch that each stage bump-allocates from and
 * that is released by resetting to scratch_mark.  The same layout function,
 * run on a measuring arena, gives dcp_workspace_size() exactly (the way zstd
 * sizes a compression context from its own workspace layout).
 */
#ifndef DCP_CONTEXT_H
#define DCP_CONTEXT_H

#include "dcpack.h"
#include "../alloc/arena.h"
#include "../alloc/host.h"
#include "../core/comm/agree.h"
#include "../core/cost_fit.h"
#include "../core/error.h"
#include "../core/plan.h"

struct dcp__step_state; /* step.h */

struct dcp_context {
    dcp_config config;
    int32_t num_ranks;        /* DPxCP */
    int32_t max_microbatches; /* resolved capacity */

    dcp__arena arena;          /* the workspace after this struct */
    size_t scratch_mark;      /* arena mark where scratch starts */
    size_t scratch_bytes;     /* scratch capacity reserved by the layout */

    /* plan output */
    dcp_plan plan;

    /* gather output */
    int32_t *global_lengths;  /* [max_sequences] */
    int32_t *rank_offsets;    /* [data_parallel_size + 1] */
    int32_t num_global;

    /* bucket output */
    int32_t *sorted_ids;      /* [max_sequences]: ids by length descending, stable */
    int32_t *min_cp;          /* [max_sequences]: minimal CP size per id */

    /* data plane (step.h); NULL when max_tokens_per_rank is 0 */
    struct dcp__step_state *step;

    dcp__error last_error;

    /* calls in step (dcpack.h, dcp_context_resync) */
    uint64_t calls;           /* multi-rank calls made on this context */
    int out_of_step;          /* a call found the ranks out of step: refuse until resync */
    uint32_t steps_skipped;   /* dcp_step calls since the last first agreement that failed here before one (step.c) */
    uint64_t config_digest;   /* dcp__config_digest(&config) */

    /* online calibration (observe.c): the rows and the fit; rows NULL when max_observations is 0 */
    dcp__fit_state fit;

    dcp__host_block owned;     /* the workspace, when dcp_context_create() allocated it */
};

/* Online calibration (observe.c): the rows' ring on `arena`, and the scratch an observation needs. */
dcp_status dcp__observe_layout(dcp_context *ctx, dcp__arena *arena, const dcp_config *config);
size_t dcp__observe_scratch_size(const dcp_config *config);

/* Lay out the persistent buffers on `arena` and reserve the scratch. */
dcp_status dcp__context_layout(dcp_context *ctx, dcp__arena *arena, const dcp_config *config);

/*
 * A device mover for a context: the device and pinned bytes `backend` needs
 * for configuration c (dcp_cuda_workspace_size()), and binding one to a
 * context (dcp_context_attach_cuda()); api/attach_cuda.c names the backend.
 */
struct dcp__mover_backend;
dcp_status dcp__mover_workspace_size(const dcp_config *c, const struct dcp__mover_backend *backend,
                                     size_t *device_bytes, size_t *host_bytes);
dcp_status dcp__context_attach_mover(dcp_context *ctx, const struct dcp__mover_backend *backend, void *device_memory,
                                     size_t device_bytes, void *host_memory, size_t host_bytes);

/*
 * Scratch: the arena past scratch_mark, taken in phases.  A call begins with
 * all of it free (dcp__scratch_begin gives the mark it starts at); a phase
 * takes from ctx->arena what it needs, and it lives until the caller resets
 * to a mark taken before it (dcp__scratch_reset_to), so a buffer's lifetime
 * is the span between the mark and the reset that names it.  A call ends
 * with dcp__scratch_end, successful or not.
 */
static inline size_t dcp__scratch_begin(dcp_context *ctx)
{
    dcp__arena_reset(&ctx->arena, ctx->scratch_mark);
    return ctx->scratch_mark;
}
/* Where the next phase starts: everything taken so far stays. */
static inline size_t dcp__scratch_mark(const dcp_context *ctx) { return dcp__arena_mark(&ctx->arena); }
/* Release everything taken since `mark`. */
static inline void dcp__scratch_reset_to(dcp_context *ctx, size_t mark) { dcp__arena_reset(&ctx->arena, mark); }
/* Release the call's scratch. */
static inline void dcp__scratch_end(dcp_context *ctx) { dcp__arena_reset(&ctx->arena, ctx->scratch_mark); }

/*
 * Start a multi-rank call: count it and fill its tag.  DCP_ERR_OUT_OF_STEP
 * (with the message in err) while the context is out of step.
 */
dcp_status dcp__context_call_begin(dcp_context *ctx, uint32_t kind, uint64_t step_id, dcp__call_tag *tag,
                                   dcp__error *err);
/* End it: an agreed DCP_ERR_OUT_OF_STEP puts the context out of step. */
static inline dcp_status dcp__context_call_end(dcp_context *ctx, dcp_status agreed)
{
    if (agreed == DCP_ERR_OUT_OF_STEP) ctx->out_of_step = 1;
    return agreed;
}

/* Record a failure in the context's last-error text and return the status. */
static inline dcp_status dcp__context_fail(dcp_context *ctx, dcp_status status, const dcp__error *err)
{
    return ctx ? dcp__error_record(&ctx->last_error, status, err) : status;
}

#endif
