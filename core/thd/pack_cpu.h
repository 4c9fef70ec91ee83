/*
 * pack_cpu.h - the data plane's copies on the CPU: a pack layout (one
 * destination) and a segment table (every field a step moves at once), and
 * their CPU twins of the copy kernel (gpu/pack.cu).  Internal.
 *
 * A segment table generalises dcp__pack_layout to everything one
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
#ifndef DCP_PACK_CPU_H
#define DCP_PACK_CPU_H

#include <stddef.h>
#include <stdint.h>

#define DCP_SEGMENT_MAX_FIELDS 8

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

/* A segment table (above): every field's copies and fills of one step in one walk. */
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
