/*
 * segments.h - the segment table the data plane's copy kernel walks, and its
 * CPU twin.  Internal.
 *
 * A segment table generalises dcp__pack_layout (pack.h) to everything one
 * step moves in one launch: segment i copies length[i] elements from
 * src[src_index[i]] + src_offset[i] to dst[dst_index[i]] + dst_offset[i],
 * for every field of a field set at once (the same element offsets, each
 * field with its own pointer tables and element size).  A segment with
 * src_index < 0 is a fill: it writes zero bytes.  A field whose `src` table
 * is NULL is a padding mask: it writes 0 on copy segments and 1 on fill
 * segments.  So one table can place every received token and clear every
 * padding slot, writing each output byte once.
 *
 * work_offset[i] = sum of length[0..i) (n + 1 entries): the kernel's blocks
 * split the total elements evenly and find their segments by binary search.
 * Tables and pointer tables live in the memory of the engine that runs them
 * (host for the twin, device for the kernel).
 */
#ifndef DCP_SEGMENTS_H
#define DCP_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#define DCP_SEGMENT_MAX_FIELDS 8

typedef struct dcp__segment_table {
    int64_t num_segments;
    const int32_t *src_index;   /* [n] or NULL (all 0); < 0: fill */
    const int64_t *src_offset;  /* [n] elements */
    const int32_t *dst_index;   /* [n] or NULL (all 0) */
    const int64_t *dst_offset;  /* [n] elements */
    const int64_t *length;      /* [n] elements, >= 0 */
    const int64_t *work_offset; /* [n + 1] */
} dcp__segment_table;

typedef struct dcp__segment_field {
    const void *const *src; /* indexed by src_index; NULL: padding mask (elem_size 1) */
    void *const *dst;       /* indexed by dst_index */
    int64_t elem_size;      /* bytes */
} dcp__segment_field;

/* work_offset from length (host arrays); returns the total. */
int64_t dcp__segment_work_offsets(const int64_t *length, int64_t n, int64_t *work_offset);

/* The sequential form of the kernel: every segment of every field, in order. */
void dcp__segment_table_pack_cpu(const dcp__segment_table *table, const dcp__segment_field *fields, int32_t num_fields);

#endif
