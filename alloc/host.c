/*
 * host.c - host memory blocks (see host.h).  The only file of the library
 * that calls the C allocator or jemalloc.
 */
#include "host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>

/* Hand a jemalloc arena back (its one allocation already freed). */
static void destroy_arena(unsigned arena_index)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", arena_index);
    mallctl(name, NULL, NULL, NULL, 0);
}
#endif

int dcp__host_block_alloc(dcp_host_block *block, size_t size, size_t alignment)
{
    memset(block, 0, sizeof *block);
    if (size == 0 || size > SIZE_MAX - alignment) return -1;
#ifdef DCP_HAVE_JEMALLOC
    unsigned arena_index = 0;
    size_t len = sizeof arena_index;
    if (mallctl("arenas.create", &arena_index, &len, NULL, 0) != 0) return -1;
    void *memory = mallocx(size, MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(alignment));
    if (!memory) {
        destroy_arena(arena_index); /* a failed allocation leaves no arena behind */
        return -1;
    }
    block->jemalloc_arena = arena_index;
    block->uses_jemalloc = 1;
#else
    void *memory = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
    if (!memory) return -1;
#endif
    block->memory = memory;
    block->size = size;
    return 0;
}

void dcp__host_block_free(dcp_host_block *block)
{
    if (!block || !block->memory) return;
    void *memory = block->memory;
    block->memory = NULL;
#ifdef DCP_HAVE_JEMALLOC
    if (block->uses_jemalloc) {
        dallocx(memory, MALLOCX_TCACHE_NONE);
        destroy_arena(block->jemalloc_arena);
        return;
    }
#endif
    free(memory);
}

void *dcp__host_calloc(size_t count, size_t size) { return calloc(count, size); }

void dcp__host_free(void *memory) { free(memory); }
