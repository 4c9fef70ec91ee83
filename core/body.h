/*
 * body.h - the fields a step moves and the block its outputs live in.
 * Internal.
 *
 * A step's outputs on one rank are one block, the body: a table of rows
 * (one per microbatch), the cu_seqlens and cu_seqlens_padded arrays, each
 * kept field's tokens and the padding mask.  Its layout follows from four
 * numbers (microbatches, cu_seqlens entries, tokens, kept fields), so TP
 * rank 0 can broadcast it in one piece and its peers rebuild the same
 * pointers, and a token mover (mover.h) knows where to land tokens.
 */
#ifndef DCP_BODY_H
#define DCP_BODY_H

#include "dcpack.h"

#include <stddef.h>
#include <stdint.h>

/* Fields in the order they sit in exchange blocks and bodies: 8-byte ones first. */
#define DCP_NUM_FIELDS 4
extern const uint32_t dcp__field_bit[DCP_NUM_FIELDS];  /* tokens, labels, position_ids, loss_mask */
extern const size_t dcp__field_size[DCP_NUM_FIELDS];   /* bytes per token */
extern const char *const dcp__field_name[DCP_NUM_FIELDS];

/* Sample s's buffer of field f (in the order above): a load at the field's offset in dcp_sample, inlined. */
static inline const void *dcp__sample_field(const dcp_sample *s, int f)
{
    switch (f) {
    case 0: return s->tokens;
    case 1: return s->labels;
    case 2: return s->position_ids;
    default: return s->loss_mask;
    }
}

/* Bytes one token takes over the fields in the mask. */
size_t dcp__bytes_per_token(uint32_t fields);

/*
 * The fields of a mask by name, for messages: "tokens, labels", "none", and
 * bits outside DCP_FIELD_ALL as "bits 0x30".  Always terminated; returns `buffer`.
 * 80 bytes hold every mask.
 */
#define DCP_FIELD_NAMES_SIZE 80
const char *dcp__field_names(uint32_t fields, char *buffer, size_t size);

/* One microbatch's row of a body's table. */
typedef struct dcp__body_row {
    int64_t token_offset, num_tokens, cu_offset, num_cu_seqlens;
    int64_t max_seqlen, local_cp_size, cp_rank, num_sequences;
} dcp__body_row;

/* Byte offsets of a body's parts; field[f] is SIZE_MAX for a field not kept; `used` its size (SIZE_MAX: overflow). */
typedef struct dcp__body_layout {
    size_t rows, cu, cu_padded, field[DCP_NUM_FIELDS], mask, used;
    size_t prefix; /* bytes of the rows and both cu arrays: what the host writes */
} dcp__body_layout;

void dcp__body_layout_compute(int64_t microbatches, int64_t cu_entries, int64_t tokens, uint32_t fields,
                              dcp__body_layout *layout);

#endif
