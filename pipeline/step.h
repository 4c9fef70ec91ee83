/*
 * step.h - the data plane's persistent state inside a context.  Internal.
 *
 * dcp__step_layout() places it at init (nothing when max_tokens_per_rank is
 * 0); dcp__step_scratch_size() bounds what one step takes from scratch.  The
 * outputs of a step live in `body`, one block whose used prefix is laid out
 * per step from four numbers (microbatches, cu_seqlens entries, tokens, kept
 * fields), so TP rank 0 can broadcast it in one piece and its peers rebuild
 * the same pointers.
 */
#ifndef DCP_STEP_H
#define DCP_STEP_H

#include "dcpack.h"
#include "../alloc/arena.h"

/* Fields in the order they sit in staging blocks and bodies: 8-byte ones first. */
#define DCP_STEP_NUM_FIELDS 4
extern const uint32_t dcp__step_field_bit[DCP_STEP_NUM_FIELDS];   /* tokens, labels, position_ids, loss_mask */
extern const size_t dcp__step_field_size[DCP_STEP_NUM_FIELDS];

/* Per-microbatch row of a body's table. */
typedef struct dcp_step_row {
    int64_t token_offset, num_tokens, cu_offset, num_cu_seqlens;
    int64_t max_seqlen, local_cp_size, cp_rank, num_sequences;
} dcp_step_row;

typedef struct dcp_step_state {
    int64_t token_capacity;      /* max_tokens_per_rank */
    int64_t cu_capacity;         /* cu_seqlens entries over all microbatches of a rank */
    size_t body_capacity;
    int32_t *original_lengths;   /* [max_sequences]: gathered, by global id */
    int32_t *local_pairs;        /* [2 * max_sequences]: this rank's kept sequences, (padded, original) */
    int32_t *local_sample;       /* [max_sequences]: the sample each comes from */
    int64_t *local_start;        /* [max_sequences]: its first element in that sample */
    int32_t num_local;
    unsigned char *body;         /* [body_capacity] */
    dcp_microbatch *views;       /* [virtual_pipeline_size * max_microbatches] */
    dcp_step_output output;
} dcp_step_state;

struct dcp_context;
dcp_status dcp__step_layout(struct dcp_context *ctx, dcp_arena *arena, const dcp_config *config);
size_t dcp__step_scratch_size(const dcp_config *config);

/*
 * What a CUDA workspace (gpu/step_cuda.c) must hold for this configuration:
 * bytes of one exchange staging buffer (send or receive), of the body, the
 * most segments one copy launch can have (the send pieces, or the received
 * pieces with the gaps between them), and the most source pointers per field.
 * SIZE_MAX / INT64_MAX on overflow.
 */
void dcp__step_device_sizes(const dcp_config *config, size_t *staging_bytes, size_t *body_bytes, int64_t *max_segments,
                           int64_t *max_sources);

#endif
