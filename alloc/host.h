/*
 * host.h - host memory, taken only at init.  Internal.
 *
 * Two kinds: a context's workspace (one block from a jemalloc arena of its
 * own with the thread cache off, or aligned_alloc in builds without
 * jemalloc), and small objects made once when a communicator or a world is
 * created.  Nothing here is called while a step runs.
 */
#ifndef DCP_ALLOC_HOST_H
#define DCP_ALLOC_HOST_H

#include <stddef.h>

/* One workspace block and where it came from. */
typedef struct dcp__host_block {
    void *memory;           /* NULL until allocated */
    size_t size;
    unsigned jemalloc_arena; /* the arena index, when uses_jemalloc */
    int uses_jemalloc;
} dcp__host_block;

/* `size` bytes aligned to `alignment` (a power of two); 0 on success, -1 when no memory. */
int dcp__host_block_alloc(dcp__host_block *block, size_t size, size_t alignment);
/* Free the block and hand back its jemalloc arena; NULL-safe, a no-op on an empty block. */
void dcp__host_block_free(dcp__host_block *block);

/* `count` zeroed elements of `size` bytes for an object made at init; NULL when no memory or on overflow. */
void *dcp__host_calloc(size_t count, size_t size);
/* Free what dcp__host_calloc returned; NULL-safe. */
void dcp__host_free(void *memory);

#endif
