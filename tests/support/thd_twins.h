/*
 * thd_twins.h - THD kernels and their CPU twins that only the tests and
 * benchmarks run: the cu_seqlens scan on device, the reference's padding
 * mask, pad-slot sanitising and CP slicing.  The step builds its buffers
 * from one segment table instead (core/thd/pack_cpu.h), so none of this is
 * in the library; the tests keep it as the reference's order of operations
 * (pack, padding mask, sanitise, CP slice) that the step's fused pieces are
 * checked against (test_kernels_cpu.c, fuzz_thd.c).
 *
 * The CUDA functions (thd_twins.cu, in a build with CUDA) follow gpu/kernels.h:
 * each launches on `stream`, returns a cudaError_t as int, neither
 * synchronises nor allocates, and equals its CPU twin bit for bit:
 *
 *   dcp__cu_seqlens_cuda                dcp__cu_seqlens_cpu        (core/thd/thd.h)
 *   dcp__thd_cu_seqlens_write_cuda      dcp__thd_cu_seqlens_write  (core/thd/thd.h)
 *   dcp__thd_padding_mask_cuda          dcp__thd_padding_mask_cpu
 *   dcp__thd_sanitize_cuda              dcp__thd_sanitize_cpu
 *   dcp__cp_slice_layout_cuda           dcp__cp_slice_layout_cpu
 *   dcp__cp_slice_cuda                  dcp__cp_slice_layout_cpu + dcp__pack_cpu
 */
#ifndef DCP_THD_TWINS_H
#define DCP_THD_TWINS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "dcpack.h"
#include "../../core/thd/pack_cpu.h"
#include "../../core/thd/thd.h"

/* ------------------------------------------------------------------------ */
/* CPU twins (thd_twins_cpu.c)                                               */
/* ------------------------------------------------------------------------ */

/*
 * Padding mask of a rank's buffer from the layout that filled it with real
 * tokens: mask[t] = 0 where a segment's destination covers t, 1 everywhere
 * else in [0, num_tokens).
 */
void dcp__padding_mask_from_layout_cpu(const dcp__pack_layout *layout, int64_t num_tokens, uint8_t *mask);

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
/* CUDA kernels (thd_twins.cu)                                               */
/* ------------------------------------------------------------------------ */

/* Block scan: cu_seqlens, cu_seqlens_padded (n + 1 entries each) and *max_seqlen (one device int32). */
int dcp__cu_seqlens_cuda(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu_seqlens,
                        int32_t *cu_seqlens_padded, int32_t *max_seqlen, void *stream);
/* The THD-padded cu_seqlens of a microbatch (geometry from dcp__thd_geometry_compute on the host). */
int dcp__thd_cu_seqlens_write_cuda(const dcp__thd_geometry *geometry, const int32_t *original, const int32_t *padded,
                                  int32_t n, int32_t *cu_seqlens, int32_t *cu_seqlens_padded, void *stream);
/* The reference's padding mask of a packed buffer (a memset to 1, then 0 on each sequence's real slots). */
int dcp__thd_padding_mask_cuda(const int32_t *cu_seqlens, const int32_t *cu_seqlens_padded, int32_t num_sequences,
                              int64_t num_tokens, uint8_t *mask, void *stream);
/* Zero every element whose mask byte is 1. */
int dcp__thd_sanitize_cuda(const uint8_t *mask, int64_t num_tokens, void *field, size_t elem_size, void *stream);

/*
 * The CP slice as segments, computed on device from cu_seqlens_padded; the
 * segment count (or -1 when the shape cannot be cut, writing no segment) goes
 * to *count (one device int64).  One block.
 */
int dcp__cp_slice_layout_cuda(const int32_t *cu_seqlens_padded, int32_t num_sequences, int64_t partition_total,
                             int32_t cp, int32_t cp_rank, dcp_cp_partition partition, int64_t *src_offset,
                             int64_t *dst_offset, int64_t *length, int64_t *count, void *stream);
/*
 * CP-slice a packed field directly: each output slot computes its source
 * offset from cu_seqlens_padded (no index tensor, no segment table).  The
 * caller has checked the shape (dcp__cp_slice_layout_cpu or _cuda says it
 * cuts); out holds partition_total / cp elements.
 */
int dcp__cp_slice_cuda(const void *packed, int32_t num_sequences, const int32_t *cu_seqlens_padded,
                      int64_t partition_total, int32_t cp, int32_t cp_rank, dcp_cp_partition partition, void *out,
                      size_t elem_size, void *stream);

#ifdef __cplusplus
}
#endif

#endif
