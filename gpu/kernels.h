/*
 * kernels.h - the CUDA kernels' C interface.  Internal.
 *
 * Each function launches on `stream` (a cudaStream_t; NULL = the default
 * stream) and returns a cudaError_t as int (0 = cudaSuccess) from the launch;
 * nothing here synchronises or allocates.  Every pointer is device memory
 * unless its name says host; scalars and structs passed by value come from
 * the host.  Each kernel has a CPU twin with the same arguments and the same
 * result bit for bit:
 *
 *   dcp__segment_table_pack_cuda        dcp__segment_table_pack_cpu    (core/thd/pack_cpu.h)
 *   dcp__pack_cuda                      dcp__pack_cpu
 *   dcp__padding_mask_from_layout_cuda  dcp__padding_mask_from_layout_cpu (tests/support/thd_twins.h)
 *   dcp__mtp_roll_boundary_cuda         dcp__mtp_roll_boundary_cpu     (core/model/mtp_roll.h)
 *   dcp__mtp_roll_apply_cuda            dcp__mtp_roll_apply_cpu
 *   dcp__gdn_pad_kernel_cuda            dcp_gdn_pad                   (dcpack.h)
 */
#ifndef DCP_GPU_KERNELS_H
#define DCP_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "dcpack.h"
#include "../core/thd/pack_cpu.h"

/*
 * Segment-table copy: every segment of every field in one launch: a grid that
 * fits the GPU at once, each warp an equal share of the bytes (gpu/pack.cu).
 * `table` and `fields` are host structs whose arrays are device memory;
 * total_elements = work_offset[n] (the host knows it from building the
 * table); the kernel reads work offsets, not lengths (table->length may be
 * NULL).  Pieces of 4- and 8-byte fields move as 16-byte units aligned on the
 * destination whatever the source's alignment; other sizes by halfwords or
 * bytes.
 */
int dcp__segment_table_pack_cuda(const dcp__segment_table *table, int64_t total_elements,
                                const dcp__segment_field *fields, int32_t num_fields, void *stream);

/*
 * Measurements only.  The segment kernel in another build (gpu/pack.cu lists
 * them): 0 = the library's choice; 200, 202, 203 the persistent kernel with
 * fewer loads in flight or without groups of lanes; 8200 the former
 * choice (tiles of 8192 elements a warp, 8 16-byte loads in flight where both
 * ends agree modulo 16); 4096, 8192, 16384 (+1 streaming hints, +6 16-byte
 * units from word-aligned sources) that tile kernel's other builds.  And a flat
 * 16-byte copy of one buffer (bytes a multiple of 16) in the same style:
 * variant 0/1 = 4/8 loads in flight a thread, 2/3 = the same with streaming
 * hints: the ceiling a kernel of this kind reaches.
 */
int dcp__segment_table_pack_tile_cuda(const dcp__segment_table *table, int64_t total_elements,
                                     const dcp__segment_field *fields, int32_t num_fields, int64_t variant,
                                     void *stream);
int dcp__flat_copy_probe_cuda(void *dst, const void *src, size_t bytes, int variant, void *stream);

/*
 * The input digest (core/digest.h) of spans on device: segment s is
 * length[s] elements of source src_index[s] from element src_offset[s], at
 * digest position dst_offset[s]; field k's sources are src[k * sources ..],
 * its elements elem_size[k] (4 or 8) bytes, its place in core/body.h's order
 * field_index[k].  Every array is device memory; the sum lands in *out (one
 * device uint64).  Segments fit a grid dimension (< 2^31).
 */
int dcp__digest_cuda(const dcp__segment_table *table, const void *const *src, int64_t sources,
                     const int32_t *field_index, const int64_t *elem_size, int32_t num_fields, uint64_t *out,
                     void *stream);

/* dcp__pack_cpu on device: layout arrays, work_offset ([n + 1]) and src_buffers are device memory. */
int dcp__pack_cuda(const dcp__pack_layout *layout, const int64_t *work_offset, int64_t total_elements,
                  const void *const *src_buffers, void *dst, size_t elem_size, void *stream);
/* dcp__padding_mask_from_layout_cpu on device (a memset to 1, then 0 on every segment). */
int dcp__padding_mask_from_layout_cuda(const dcp__pack_layout *layout, const int64_t *work_offset,
                                      int64_t total_elements, int64_t num_tokens, uint8_t *mask, void *stream);

/* MTP roll, kernels 1 and 2 (core/model/mtp_roll.h); cu is the device copy of cu_seqlens_padded. */
int dcp__mtp_roll_boundary_cuda(const void *field, size_t elem_size, const int32_t *cu, int32_t n, int32_t cp,
                               void *to_prev, void *to_next, void *stream);
int dcp__mtp_roll_apply_cuda(const void *field, void *out, size_t elem_size, const int32_t *cu, int32_t n,
                            int64_t num_tokens, int32_t cp, int32_t cp_rank, const void *own_to_next,
                            const void *from_next, const void *from_prev, void *stream);

/* GDN padding: rows real rows copied (unless out == in), pad zero rows, cu copied with the last entry + pad. */
int dcp__gdn_pad_kernel_cuda(const void *in, int64_t rows, int64_t pad_rows, size_t row_bytes, const int32_t *cu,
                            int32_t num_cu_seqlens, void *out, int32_t *out_cu, void *stream);

#ifdef __cplusplus
}
#endif

#endif
