/*
 * host_block_jemalloc.c - a context's workspace block from a jemalloc arena
 * of its own, thread cache off (see host.h).  Builds without jemalloc
 * compile host_block_libc.c instead.
 */
#include "host.h"

#include <jemalloc/jemalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Hand a jemalloc arena back (its one allocation already freed). */
static void destroy_arena(unsigned arena_index)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", arena_index);
    mallctl(name, NULL, NULL, NULL, 0);
}

int dcp__host_block_alloc(dcp__host_block *block, size_t size, size_t alignment)
{
    memset(block, 0, sizeof *block);
    if (size == 0 || size > SIZE_MAX - alignment) return -1;
    unsigned arena_index = 0;
    size_t len = sizeof arena_index;
    if (mallctl("arenas.create", &arena_index, &len, NULL, 0) != 0) return -1;
    void *memory = mallocx(size, MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(alignment));
    if (!memory) {
        destroy_arena(arena_index); /* a failed allocation leaves no arena behind */
        return -1;
    }
    block->memory = memory;
    block->size = size;
    block->jemalloc_arena = arena_index;
    block->uses_jemalloc = 1;
    return 0;
}

void dcp__host_block_free(dcp__host_block *block)
{
    if (!block || !block->memory) return;
    void *memory = block->memory;
    block->memory = NULL;
    dallocx(memory, MALLOCX_TCACHE_NONE);
    destroy_arena(block->jemalloc_arena);
}
