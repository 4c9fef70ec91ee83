/*
 * pack_cpu.c - the CPU twins of the copy kernel (gpu/pack.cu): a pack
 * layout's copies, and a segment table's copies and fills for every field.
 */
#include "pack_cpu.h"

#include <string.h>

void dcp__pack_cpu(const dcp__pack_layout *layout, const void *const *src_buffers, void *dst, size_t elem_size)
{
    unsigned char *out = (unsigned char *)dst;
    for (int64_t i = 0; i < layout->num_segments; i++) {
        const unsigned char *src = (const unsigned char *)src_buffers[layout->src_buffer ? layout->src_buffer[i] : 0];
        memcpy(out + (size_t)layout->dst_offset[i] * elem_size, src + (size_t)layout->src_offset[i] * elem_size,
               (size_t)layout->length[i] * elem_size);
    }
}

int64_t dcp__segment_work_offsets(const int64_t *length, int64_t n, int64_t *work_offset)
{
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        work_offset[i] = at;
        at += length[i];
    }
    work_offset[n] = at;
    return at;
}

void dcp__segment_table_pack_cpu(const dcp__segment_table *t, const dcp__segment_field *fields, int32_t num_fields)
{
    for (int32_t f = 0; f < num_fields; f++) {
        const dcp__segment_field *fd = &fields[f];
        const size_t e = (size_t)fd->elem_size;
        for (int64_t i = 0; i < t->num_segments; i++) {
            int32_t si = t->src_index ? t->src_index[i] : 0, di = t->dst_index ? t->dst_index[i] : 0;
            unsigned char *dst = (unsigned char *)fd->dst[di] + (size_t)t->dst_offset[i] * e;
            size_t bytes = (size_t)t->length[i] * e;
            if (!fd->src) memset(dst, si < 0 ? 1 : 0, bytes);
            else if (si < 0) memset(dst, 0, bytes);
            else memcpy(dst, (const unsigned char *)fd->src[si] + (size_t)t->src_offset[i] * e, bytes);
        }
    }
}
