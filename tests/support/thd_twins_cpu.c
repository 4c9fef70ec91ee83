/*
 * thd_twins_cpu.c - CPU twins of the THD kernels only the tests and benchmarks
 * run (thd_twins.h).  Each loop is the sequential form of a kernel whose
 * threads each own one segment or one slot; nothing here allocates.
 */
#include "thd_twins.h"

#include <string.h>

void dcp__padding_mask_from_layout_cpu(const dcp__pack_layout *layout, int64_t num_tokens, uint8_t *mask)
{
    memset(mask, 1, (size_t)num_tokens);
    for (int64_t i = 0; i < layout->num_segments; i++)
        memset(mask + layout->dst_offset[i], 0, (size_t)layout->length[i]);
}

void dcp__thd_padding_mask_cpu(const int32_t *cu_seqlens, const int32_t *cu_seqlens_padded, int32_t num_sequences,
                              int64_t num_tokens, uint8_t *mask)
{
    memset(mask, 1, (size_t)num_tokens);
    for (int32_t k = 0; k < num_sequences; k++) {
        int64_t start = cu_seqlens_padded[k];
        int64_t valid_end = start + (int64_t)(cu_seqlens[k + 1] - cu_seqlens[k]);
        if (valid_end > cu_seqlens_padded[k + 1]) valid_end = cu_seqlens_padded[k + 1];
        if (valid_end > num_tokens) valid_end = num_tokens;
        if (start < valid_end) memset(mask + start, 0, (size_t)(valid_end - start));
    }
}

void dcp__thd_sanitize_cpu(const uint8_t *mask, int64_t num_tokens, void *field, size_t elem_size)
{
    unsigned char *out = (unsigned char *)field;
    for (int64_t t = 0; t < num_tokens; t++)
        if (mask[t]) memset(out + (size_t)t * elem_size, 0, elem_size);
}

int64_t dcp__cp_slice_layout_cpu(const int32_t *cu_seqlens_padded, int32_t num_sequences, int64_t partition_total,
                                int32_t cp, int32_t cp_rank, dcp_cp_partition partition, int64_t *src_offset,
                                int64_t *dst_offset, int64_t *length)
{
    if (cp < 1 || cp_rank < 0 || cp_rank >= cp || partition_total < 0) return -1;
    if (cp == 1) {
        src_offset[0] = 0;
        dst_offset[0] = 0;
        length[0] = partition_total;
        return 1;
    }
    if (partition == DCP_CP_CONTIGUOUS) {
        if (partition_total % cp != 0) return -1;
        int64_t local = partition_total / cp;
        src_offset[0] = (int64_t)cp_rank * local;
        dst_offset[0] = 0;
        length[0] = local;
        return 1;
    }
    if (partition_total != cu_seqlens_padded[num_sequences]) return -1;
    for (int32_t k = 0; k < num_sequences; k++) {
        int64_t span = (int64_t)cu_seqlens_padded[k + 1] - cu_seqlens_padded[k];
        if (span < 0 || span % (2 * (int64_t)cp) != 0 || cu_seqlens_padded[k] % (2 * (int64_t)cp) != 0) return -1;
    }
    for (int32_t k = 0; k < num_sequences; k++) {
        int64_t start = cu_seqlens_padded[k];
        int64_t chunk = ((int64_t)cu_seqlens_padded[k + 1] - start) / (2 * cp);
        int64_t local = start / cp;
        src_offset[2 * k] = start + (int64_t)cp_rank * chunk;
        dst_offset[2 * k] = local;
        length[2 * k] = chunk;
        src_offset[2 * k + 1] = start + (int64_t)(2 * cp - 1 - cp_rank) * chunk;
        dst_offset[2 * k + 1] = local + chunk;
        length[2 * k + 1] = chunk;
    }
    return 2 * (int64_t)num_sequences;
}
