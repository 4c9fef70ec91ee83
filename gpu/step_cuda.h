/*
 * step_cuda.h - a context's CUDA workspace and the device half of dcp_step.
 * Internal.
 *
 * The workspace is one device block and one pinned host block, sized from
 * the configuration (dcp_cuda_workspace_size) and bound once
 * (dcp_context_attach_cuda):
 *
 *   device: [send staging][receive staging][body][segment tables]
 *   pinned: [dcp_cuda_state][segment tables, as they are built]
 *
 * The step builds each segment table (and the pointer tables of the fields)
 * in the pinned block, uploads it in one copy and runs one launch of the
 * segment kernel: once to gather outgoing tokens into the send staging, once
 * to place received tokens in the body, zero every padding slot and write
 * the mask.  The body has the host body's layout (pipeline/step.c); its
 * prefix (rows, cu_seqlens) is written on the host and uploaded.
 *
 * Without CUDA these functions exist and report DCP_ERR_UNSUPPORTED (a
 * context never gets a CUDA workspace then).
 */
#ifndef DCP_STEP_CUDA_H
#define DCP_STEP_CUDA_H

#include "dcpack.h"
#include "../core/error.h"

#include <stddef.h>
#include <stdint.h>

struct dcp_context;
typedef struct dcp_cuda_state dcp_cuda_state;

/* Release the workspace (what dcpack allocated of it); NULL-safe, no-op without one. */
void dcp__cuda_release(struct dcp_context *ctx);

unsigned char *dcp__cuda_send_staging(struct dcp_context *ctx);
unsigned char *dcp__cuda_recv_staging(struct dcp_context *ctx);
size_t dcp__cuda_staging_capacity(struct dcp_context *ctx);
unsigned char *dcp__cuda_body(struct dcp_context *ctx);

/*
 * Gather this rank's outgoing pieces into the device send staging: piece i
 * is length[i] tokens of sample sample[i] from element src[i], for peer
 * peer[i] at token cursor[i] of that peer's block; a peer's block holds each
 * kept field's run in step order (tokens, labels, position_ids, loss_mask).
 */
dcp_status dcp__step_cuda_stage(struct dcp_context *ctx, void *stream, const dcp_step_input *in, uint32_t kept,
                               int64_t pieces, const int32_t *sample, const int64_t *src, const int32_t *peer,
                               const int64_t *cursor, const int64_t *length, int32_t num_peers,
                               const size_t *send_offsets, const int64_t *tokens_to, dcp_error *err);

/*
 * Upload the body prefix (prefix_bytes of the host body), then place every
 * received piece (from sender[i]'s block at token cursor[i], length[i]
 * tokens, to token dst[i]; dst increasing and disjoint) into the device body
 * fields at field_offset[f] (SIZE_MAX: not kept), zero every other slot of
 * [0, total_tokens) and write the mask at mask_offset; then wait for the
 * stream.
 */
dcp_status dcp__step_cuda_land(struct dcp_context *ctx, void *stream, uint32_t kept, int64_t pieces,
                              const int32_t *sender, const int64_t *cursor, const int64_t *dst, const int64_t *length,
                              int64_t total_tokens, int32_t num_peers, const size_t *recv_offsets,
                              const int64_t *tokens_from, const size_t *field_offset, size_t mask_offset,
                              size_t prefix_bytes, dcp_error *err);

/* A TP peer's copy of the body prefix, device to host, after the broadcast. */
dcp_status dcp__cuda_body_download(struct dcp_context *ctx, void *stream, size_t prefix_bytes, dcp_error *err);

#endif
