/*
 * host_block_libc.c - a context's workspace block from aligned_alloc, in
 * builds without jemalloc (see host.h; host_block_jemalloc.c otherwise).
 */
#include "host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int dcp__host_block_alloc(dcp__host_block *block, size_t size, size_t alignment)
{
    memset(block, 0, sizeof *block);
    if (size == 0 || size > SIZE_MAX - alignment) return -1;
    void *memory = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
    if (!memory) return -1;
    block->memory = memory;
    block->size = size;
    return 0;
}

void dcp__host_block_free(dcp__host_block *block)
{
    if (!block || !block->memory) return;
    free(block->memory);
    block->memory = NULL;
}
