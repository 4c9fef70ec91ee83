/*
 * step.h - the data plane's state inside a context, and its sizes.  Internal.
 *
 * One step on one rank runs the step stages that stages.h declares (gather,
 * plan, strip, reroute, pack, broadcast), in that order, from step.c.  The
 * step's state (dcp__step_state) holds what outlives a stage: this rank's
 * sequence table, the gathered original lengths, the body the outputs live
 * in and the views handed to the caller.
 */
#ifndef DCP_STEP_H
#define DCP_STEP_H

#include "dcpack.h"
#include "../alloc/arena.h"
#include "../core/body.h"
#include "../core/capacity.h"
#include "../core/error.h"
#include "../core/mover.h"
#include "../core/thd/thd.h"
#include "stages.h"

typedef struct dcp__step_state {
    int64_t token_capacity;      /* max_tokens_per_rank */
    int64_t cu_capacity;         /* cu_seqlens entries over all microbatches of a rank */
    dcp__input_spans local;   /* arrays [max_sequences] */
    int32_t *original_lengths;   /* [max_sequences]: gathered, by global id */
    dcp__mover mover;             /* where tokens are staged and landed; the body it lands in */
    dcp_microbatch *views;       /* [virtual_pipeline_size * max_microbatches] */
    dcp_step_output output;
} dcp__step_state;

/*
 * The views of every virtual stage, [virtual_pipeline_size][microbatches],
 * over a body laid out as `b`: the fields dcp__strip_view_fields gives each
 * stage, lists built by dcp__pack_views (step.c, the driver, composes them).
 */
void dcp__step_views(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages,
                     int32_t microbatches, uint32_t kept, const dcp__body_layout *b, const unsigned char *host_body,
                     const unsigned char *body, dcp_microbatch *views);

/* ---- sizes (context.c) ---- */

struct dcp_context;
/* Lay out the step's state (nothing when max_tokens_per_rank is 0). */
dcp_status dcp__step_layout(struct dcp_context *ctx, dcp__arena *arena, const dcp_config *config);
/* What one step takes from scratch, at most. */
size_t dcp__step_scratch_size(const dcp_config *config);
/* What a device mover must hold for this configuration. */
void dcp__step_mover_sizes(const dcp_config *config, dcp__mover_sizes *sizes);

#endif
