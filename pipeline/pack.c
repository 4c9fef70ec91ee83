/*
 * pack.c - received tokens into their final slots, and the views handed to
 * the caller.
 *
 * The body (core/body.h) holds every microbatch of this rank back to back,
 * padded and CP-sliced; the reroute stage has already written its rows and
 * cu_seqlens arrays on the host.  Landing goes through the token mover, so
 * the same table drives the CPU twin and the CUDA kernel: received tokens
 * from the receive buffer and the tokens this rank keeps from its samples,
 * in one pass.  Each virtual stage gets its own list of views over the same
 * arrays, showing the fields the driver says it takes (strip decides which,
 * step.c passes that on: one stage never calls another).
 */
#include "stages.h"

#include <string.h>

dcp_status dcp__pack_land(dcp__mover *mover, void *stream, uint32_t kept, const dcp__receive_table *received,
                          const dcp__exchange_blocks *blocks, const unsigned char *recv, const dcp_step_input *input,
                          const dcp__body_layout *b, int64_t total_tokens, dcp__arena *scratch, dcp__error *err)
{
    return mover->ops->land(mover, stream, kept, &received->received, blocks, recv, &received->own, input, b,
                            total_tokens, scratch, err);
}

void dcp__pack_views(int32_t microbatches, uint32_t shown, const dcp__body_layout *b, const unsigned char *host_body,
                     const unsigned char *data, dcp_microbatch *views)
{
    const dcp__body_row *rows = (const dcp__body_row *)(host_body + b->rows);
    for (int32_t m = 0; m < microbatches; m++) {
        const dcp__body_row *row = &rows[m];
        dcp_microbatch *mb = &views[m];
        memset(mb, 0, sizeof *mb);
        int64_t t = row->token_offset;
        if (shown & DCP_FIELD_TOKENS) mb->tokens = (const int64_t *)(data + b->field[0]) + t;
        if (shown & DCP_FIELD_LABELS) mb->labels = (const int64_t *)(data + b->field[1]) + t;
        if (shown & DCP_FIELD_POSITION_IDS) mb->position_ids = (const int64_t *)(data + b->field[2]) + t;
        if (shown & DCP_FIELD_LOSS_MASK) mb->loss_mask = (const float *)(data + b->field[3]) + t;
        mb->padding_mask = data + b->mask + t;
        mb->cu_seqlens = (const int32_t *)(data + b->cu) + row->cu_offset;
        mb->cu_seqlens_padded = (const int32_t *)(data + b->cu_padded) + row->cu_offset;
        mb->cu_seqlens_host = (const int32_t *)(host_body + b->cu) + row->cu_offset;
        mb->cu_seqlens_padded_host = (const int32_t *)(host_body + b->cu_padded) + row->cu_offset;
        mb->num_tokens = row->num_tokens;
        mb->num_cu_seqlens = (int32_t)row->num_cu_seqlens;
        mb->num_sequences = (int32_t)row->num_sequences;
        mb->max_seqlen = (int32_t)row->max_seqlen;
        mb->local_cp_size = (int32_t)row->local_cp_size;
        mb->cp_rank = (int32_t)row->cp_rank;
    }
}
