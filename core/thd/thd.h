/*
 * thd.h - THD metadata of a microbatch: the cu_seqlens scan, and the THD
 * padding and CP-slicing geometry (host side, integer only).  Internal.
 *
 * The geometry is computed once on the host and handed to either engine
 * unchanged; the copies it drives are core/thd/pack_cpu.h's.
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
#ifndef DCP_THD_H
#define DCP_THD_H

#include "dcpack.h"
#include "../error.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* THD metadata                                                              */
/* ------------------------------------------------------------------------ */

/*
 * cu_seqlens[0] = cu_seqlens_padded[0] = 0; cu_seqlens[k+1] = cu_seqlens[k] +
 * original[k]; cu_seqlens_padded[k+1] = cu_seqlens_padded[k] + padded[k];
 * *max_seqlen = max padded[k] (0 when n is 0).  The caller guarantees the
 * sums fit int32 (dcp__thd_geometry_compute() checks it).
 */
void dcp__cu_seqlens_cpu(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu_seqlens,
                        int32_t *cu_seqlens_padded, int32_t *max_seqlen);

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
