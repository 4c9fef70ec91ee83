/* arena.c - fixed-capacity bump allocator; see arena.h. */
#include "arena.h"

#include <string.h>

/*
 * Under AddressSanitizer the free part of an arena is poisoned, and so are the
 * alignment bytes after each allocation: a stage that writes past what it
 * asked for, or reads scratch it released, is reported like a heap overflow
 * instead of silently touching its neighbour inside the workspace.
 */
#if defined(__SANITIZE_ADDRESS__)
#define DCP_ARENA_POISONING 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCP_ARENA_POISONING 1
#endif
#endif
#ifdef DCP_ARENA_POISONING
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

size_t dcp__size_add(size_t a, size_t b) { return (a > SIZE_MAX - b) ? SIZE_MAX : a + b; }

size_t dcp__size_mul(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) return SIZE_MAX;
    return a * b;
}

size_t dcp__arena_bytes(size_t size, size_t count)
{
    size_t bytes = dcp__size_mul(size, count);
    if (bytes > SIZE_MAX - (DCP_ARENA_ALIGN - 1)) return SIZE_MAX;
    return (bytes + DCP_ARENA_ALIGN - 1) & ~(size_t)(DCP_ARENA_ALIGN - 1);
}

void dcp__arena_init(dcp__arena *arena, void *memory, size_t capacity)
{
    /* Align the start so that every allocation is 64-byte aligned in memory too. */
    uintptr_t start = (uintptr_t)memory;
    uintptr_t aligned = (start + DCP_ARENA_ALIGN - 1) & ~(uintptr_t)(DCP_ARENA_ALIGN - 1);
    size_t lost = (size_t)(aligned - start);
    arena->base = (unsigned char *)memory + lost;
    arena->capacity = (capacity > lost ? capacity - lost : 0) & ~(size_t)(DCP_ARENA_ALIGN - 1);
    arena->used = 0;
    arena->high_water = 0;
    arena->failed = 0;
    if (arena->capacity) POISON(arena->base, arena->capacity);
}

void dcp__arena_release(dcp__arena *arena)
{
    if (arena->base && arena->capacity) UNPOISON(arena->base, arena->capacity);
}

void dcp__arena_init_measure(dcp__arena *arena)
{
    arena->base = NULL;
    arena->capacity = SIZE_MAX;
    arena->used = 0;
    arena->high_water = 0;
    arena->failed = 0;
}

void *dcp__arena_alloc(dcp__arena *arena, size_t size, size_t count)
{
    size_t bytes = dcp__arena_bytes(size, count);
    if (bytes == SIZE_MAX || bytes > arena->capacity - arena->used) {
        arena->failed = 1;
        return NULL;
    }
    void *p = arena->base ? (void *)(arena->base + arena->used) : (void *)(uintptr_t)DCP_ARENA_ALIGN;
    if (arena->base) UNPOISON(p, size * count);
    arena->used += bytes;
    if (arena->used > arena->high_water) arena->high_water = arena->used;
    return p;
}

void *dcp__arena_calloc(dcp__arena *arena, size_t size, size_t count)
{
    void *p = dcp__arena_alloc(arena, size, count);
    if (p && arena->base) memset(p, 0, size * count);
    return p;
}

size_t dcp__arena_remaining(const dcp__arena *arena) { return arena->capacity - arena->used; }

void dcp__arena_reset(dcp__arena *arena, size_t mark)
{
    arena->failed = 0;
    if (mark <= arena->used) {
        if (arena->base && arena->used > mark) POISON(arena->base + mark, arena->used - mark);
        arena->used = mark;
    }
}

int dcp__arena_split(dcp__arena *parent, size_t capacity, dcp__arena *child)
{
    void *p = dcp__arena_alloc(parent, 1, capacity);
    if (!p) return -1;
    child->base = parent->base ? (unsigned char *)p : NULL;
    child->capacity = dcp__arena_bytes(1, capacity);
    if (child->base) POISON(child->base, child->capacity);
    child->used = 0;
    child->high_water = 0;
    child->failed = 0;
    return 0;
}
