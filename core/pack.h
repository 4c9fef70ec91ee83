/*
 * pack.h - the data plane's element-wise operations, as plain C over SoA
 * buffers.  Internal.
 *
 * Each function here is the CPU twin of a CUDA kernel: it takes exactly the
 * arguments the kernel takes (device pointers on GPU, host pointers here),
 * computes the same thing bit for bit, and has no hidden state.  Layouts
 * (segment tables) are computed once on the host by the geometry functions
 * below and handed to either engine unchanged.
 *
 * Vocabulary, for one microbatch on one DPxCP rank (as Megatron-LM's reference does):
 *  - the packed buffer: the microbatch's sequences concatenated in plan order,
 *    sequence k occupying [cu_seqlens_padded[k], cu_seqlens_padded[k+1]) of
 *    which the first original[k] slots hold real tokens and the rest are
 *    padding slots;
 *  - the CP slice: the part of the packed buffer this rank of the sequence's
 *    CP group computes on, in local order;
 *  - the rank's buffer: the slice followed by tail padding up to num_tokens.
 * Padding slots hold 0 in every field (tokens 0, labels 0, loss_mask 0.0f,
 * position_ids 0: all-zero bytes) and 1 in the padding mask.
 */
#ifndef DCP_PACK_H
#define DCP_PACK_H

#include "dcpack.h"
#include "error.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Segment gather                                                            */
/* ------------------------------------------------------------------------ */

/*
 * A table of copies: segment i moves length[i] elements from
 * src_buffers[src_buffer[i]] + src_offset[i] to dst + dst_offset[i] (offsets
 * and lengths in elements).  src_buffer may be NULL: every segment reads
 * src_buffers[0].  Destination ranges of different segments never overlap.
 */
typedef struct dcp__pack_layout {
    int64_t num_segments;
    const int32_t *src_buffer; /* [num_segments] or NULL */
    const int64_t *src_offset; /* [num_segments] */
    const int64_t *dst_offset; /* [num_segments] */
    const int64_t *length;     /* [num_segments] */
} dcp__pack_layout;

/* Copy every segment of `layout` (elements of elem_size bytes).  Slots of dst no segment covers are untouched. */
void dcp__pack_cpu(const dcp__pack_layout *layout, const void *const *src_buffers, void *dst, size_t elem_size);

/*
 * Padding mask of a rank's buffer from the layout that filled it with real
 * tokens: mask[t] = 0 where a segment's destination covers t, 1 everywhere
 * else in [0, num_tokens).
 */
void dcp__padding_mask_from_layout_cpu(const dcp__pack_layout *layout, int64_t num_tokens, uint8_t *mask);

/* ------------------------------------------------------------------------ */
/* THD metadata and reference-order operations on a packed buffer            */
/* ------------------------------------------------------------------------ */

/*
 * cu_seqlens[0] = cu_seqlens_padded[0] = 0; cu_seqlens[k+1] = cu_seqlens[k] +
 * original[k]; cu_seqlens_padded[k+1] = cu_seqlens_padded[k] + padded[k];
 * *max_seqlen = max padded[k] (0 when n is 0).  The caller guarantees the
 * sums fit int32 (dcp__thd_geometry_compute() checks it).
 */
void dcp__cu_seqlens_cpu(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu_seqlens,
                        int32_t *cu_seqlens_padded, int32_t *max_seqlen);

/*
 * The reference's padding mask of a packed (not yet CP-sliced) buffer of
 * num_tokens slots: mask[x] = 1 when x lies in sequence k's padded span at or
 * past cu_seqlens_padded[k] + (cu_seqlens[k+1] - cu_seqlens[k]), or past
 * cu_seqlens_padded[num_sequences]; 0 otherwise.
 */
void dcp__thd_padding_mask_cpu(const int32_t *cu_seqlens, const int32_t *cu_seqlens_padded, int32_t num_sequences,
                              int64_t num_tokens, uint8_t *mask);

/* Pad-slot sanitising: every element t of field with mask[t] = 1 becomes all-zero bytes. */
void dcp__thd_sanitize_cpu(const uint8_t *mask, int64_t num_tokens, void *field, size_t elem_size);

/*
 * The CP slice as source offsets: the segments of a packed buffer of
 * partition_total slots that rank cp_rank of cp takes, in local order.
 *  - cp == 1: one segment [0, partition_total).
 *  - zigzag (TransformerEngine's THD partitioned indices): sequence k's span
 *    (length L, a multiple of 2*cp) in 2*cp chunks of c = L/(2*cp); the rank
 *    takes chunk cp_rank to local cu_seqlens_padded[k]/cp and chunk
 *    2*cp-1-cp_rank right after it.  partition_total must equal
 *    cu_seqlens_padded[num_sequences].
 *  - contiguous: one segment [cp_rank*P, (cp_rank+1)*P), P = partition_total/cp.
 * Writes at most max(2*num_sequences, 1) segments; returns their number, or
 * -1 (writing nothing) when the shape cannot be cut that way.
 */
int64_t dcp__cp_slice_layout_cpu(const int32_t *cu_seqlens_padded, int32_t num_sequences, int64_t partition_total,
                                int32_t cp, int32_t cp_rank, dcp_cp_partition partition, int64_t *src_offset,
                                int64_t *dst_offset, int64_t *length);

/* ------------------------------------------------------------------------ */
/* THD padding geometry (host side, integer only)                            */
/* ------------------------------------------------------------------------ */

typedef struct dcp__thd_params {
    int32_t cp;                   /* size of the microbatch's CP group (local_cp_size) */
    dcp_cp_partition partition;
    int32_t alignment;            /* > 0: pad the rank's buffer to a multiple of it */
    int32_t target;               /* > 0: pad the rank's buffer to exactly this; wins over alignment */
    dcp_thd_tail tail;
    int32_t max_packed_sequences; /* S > 0 with padding on: cu_seqlens arrays get exactly S+1 entries */
} dcp__thd_params;

/* Fill params from a configuration for a group of `cp` ranks (S per the header's mapping). */
void dcp__thd_params_from_config(const dcp_config *config, int32_t cp, dcp__thd_params *params);

/* The shape of one microbatch on the ranks of one CP group (the same on each of them). */
typedef struct dcp__thd_geometry {
    int32_t num_sequences;   /* real sequences, n */
    int64_t packed_tokens;   /* sum of padded lengths: cu_seqlens_padded[n] as packed */
    int64_t partition_total; /* slots the CP slice cuts: packed_tokens, or the padding target when the
                                tail is attached before slicing (extend_last, contiguous) */
    int64_t local_tokens;    /* partition_total / cp: the slice each rank holds */
    int64_t num_tokens;      /* each rank's buffer after tail padding (>= local_tokens) */
    int32_t last_padded_end; /* cu_seqlens_padded[n] after extend_last (packed_tokens otherwise) */
    int32_t dummy_length;    /* tokens of the appended dummy sequence, 0 when none */
    int32_t num_cu_seqlens;  /* entries of cu_seqlens and of cu_seqlens_padded */
    int32_t max_seqlen;
} dcp__thd_geometry;

/*
 * The reference's THD padding and CP-slicing arithmetic for one microbatch
 * (get_batch_on_this_rank_for_sequence_packing with pad_sequence_for_thd),
 * without touching data.  original[k] <= padded[k], padded[k] >= 1, n >= 1.
 * Errors (where the reference asserts): DCP_ERR_BAD_LENGTH (a zigzag span or
 * dummy not divisible by 2*cp, a contiguous total not divisible by cp, an
 * original length past its padded one), DCP_ERR_CAPACITY (packed tokens past
 * the padding target, more cu_seqlens entries than S+1), DCP_ERR_OVERFLOW
 * (a boundary past INT32_MAX).
 */
dcp_status dcp__thd_geometry_compute(const dcp__thd_params *params, const int32_t *original, const int32_t *padded,
                                    int32_t n, dcp__thd_geometry *geometry, dcp__error *err);

/*
 * Write the final cu_seqlens and cu_seqlens_padded (geometry->num_cu_seqlens
 * entries each): the scans of original/padded lengths, the extended last end
 * (extend_last), the dummy sequence (append_dummy: cu_seqlens grows by the
 * dummy length, cu_seqlens_padded ends at the padding target), then the last
 * value repeated up to the fixed entry count.
 */
void dcp__thd_cu_seqlens_write(const dcp__thd_geometry *geometry, const int32_t *original, const int32_t *padded,
                              int32_t n, int32_t *cu_seqlens, int32_t *cu_seqlens_padded);

/*
 * The real-token pieces rank cp_rank's buffer holds, in local order: piece i
 * is `length[i]` tokens of sequence seq[i] starting at offset seq_offset[i]
 * of that sequence, landing at local_offset[i] of the buffer.  Only slots
 * before the sequence's original length are real; everything else of the
 * buffer is padding.  cu_seqlens_padded is the final one (from
 * dcp__thd_cu_seqlens_write).  Writes at most 2*n pieces; returns their number.
 */
int32_t dcp__thd_real_pieces(const dcp__thd_geometry *geometry, const dcp__thd_params *params, const int32_t *original,
                            const int32_t *cu_seqlens_padded, int32_t cp_rank, int32_t *seq, int64_t *seq_offset,
                            int64_t *local_offset, int64_t *length);

#endif
