/*
 * oracle.h - what the reference gives one DPxCP rank for one microbatch,
 * computed the straightforward way, in the reference's order, in one
 * process: concatenate the full samples, build cu_seqlens, the padding mask
 * by searching cu_seqlens_padded, sanitise, extend, pad before slicing, slice
 * token by token with TransformerEngine's index formula, then
 * pad_sequence_for_thd.  It shares no code with the library's data plane; it
 * allocates freely.  Used by the tests, `dcpack step --check` and the bench.
 */
#ifndef DCP_ORACLE_H
#define DCP_ORACLE_H

#include "dcpack.h"

/* The global batch, by global id: each sequence's fields hold `padded` elements. */
typedef struct dcp_oracle_batch {
    int32_t num_sequences;
    const int32_t *padded;
    const int32_t *original;
    const int64_t *const *tokens; /* [num_sequences] pointers */
    const int64_t *const *labels;
    const float *const *loss_mask;
    const int64_t *const *position_ids;
} dcp_oracle_batch;

typedef struct dcp_oracle_microbatch {
    int64_t num_tokens;
    int64_t *tokens, *labels, *position_ids; /* [num_tokens] each */
    float *loss_mask;
    uint8_t *padding_mask;
    int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_cu_seqlens, max_seqlen, local_cp_size, cp_rank, num_sequences;
} dcp_oracle_microbatch;

/*
 * Expected output of DPxCP rank `rank` in microbatch `microbatch` of `plan`.
 * Returns DCP_OK, or the status the reference's assertion maps to (with a
 * message in `message`), or DCP_ERR_ALLOC when out of memory.  Free with
 * dcp_oracle_microbatch_free().
 */
dcp_status dcp_oracle_microbatch_compute(const dcp_config *config, const dcp_plan *plan, const dcp_oracle_batch *batch,
                                         int32_t microbatch, int32_t rank, dcp_oracle_microbatch *out, char *message,
                                         size_t message_size);
void dcp_oracle_microbatch_free(dcp_oracle_microbatch *out);

#endif
