/*
 * arena.h - fixed-capacity bump allocator over one block of memory.
 *
 * Every allocation is 64-byte aligned (a cache line), so the bytes an
 * allocation sequence needs are the sum of DCP_ARENA_BYTES() of its parts:
 * that is how dcp_workspace_size() is exact.  An allocation that does not fit
 * returns NULL, leaves the arena's memory untouched and sets its sticky
 * failure flag (as zstd's workspace does): a layout makes all its
 * allocations, then asks dcp__arena_failed() once instead of testing each
 * pointer, and turns a failure into DCP_ERR_CAPACITY.  Scratch is released by
 * resetting to a mark.
 *
 * A "measuring" arena (dcp__arena_init_measure) has no memory: it only counts
 * the bytes a sequence of allocations would take, and hands back a non-NULL
 * pointer that must not be dereferenced.
 */
#ifndef DCP_ARENA_H
#define DCP_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define DCP_ARENA_ALIGN 64u

/* Bytes `count` elements of `size` bytes take in an arena; SIZE_MAX on overflow. */
size_t dcp__arena_bytes(size_t size, size_t count);
#define DCP_ARENA_BYTES(type, count) dcp__arena_bytes(sizeof(type), (size_t)(count))

/* a + b and a * b, saturating at SIZE_MAX (so an overflow reaches the caller as "too big"). */
size_t dcp__size_add(size_t a, size_t b);
size_t dcp__size_mul(size_t a, size_t b);

typedef struct dcp__arena {
    unsigned char *base; /* NULL for a measuring arena */
    size_t capacity;
    size_t used;
    size_t high_water;
    int failed;          /* an allocation did not fit since init or the last reset */
} dcp__arena;

void dcp__arena_init(dcp__arena *arena, void *memory, size_t capacity);
void dcp__arena_init_measure(dcp__arena *arena);
/* Hand the memory back to its owner (under AddressSanitizer: make it addressable again). */
void dcp__arena_release(dcp__arena *arena);

/* `count` elements of `size` bytes, 64-byte aligned, uninitialised; NULL if it does not fit. */
void *dcp__arena_alloc(dcp__arena *arena, size_t size, size_t count);
/* Same, zero-filled. */
void *dcp__arena_calloc(dcp__arena *arena, size_t size, size_t count);
#define DCP_ARENA_NEW(arena, type, count) ((type *)dcp__arena_alloc((arena), sizeof(type), (size_t)(count)))
#define DCP_ARENA_NEW_ZERO(arena, type, count) ((type *)dcp__arena_calloc((arena), sizeof(type), (size_t)(count)))

/*
 * Whether an allocation (or split) did not fit since dcp__arena_init*() or
 * the last dcp__arena_reset(): sticky, so one test after a run of
 * allocations covers them all.
 */
static inline int dcp__arena_failed(const dcp__arena *arena) { return arena->failed; }

/* Bytes still free. */
size_t dcp__arena_remaining(const dcp__arena *arena);

/* Everything allocated after a mark is released by resetting to it; a reset clears the failure flag. */
static inline size_t dcp__arena_mark(const dcp__arena *arena) { return arena->used; }
void dcp__arena_reset(dcp__arena *arena, size_t mark);

/*
 * Carve a sub-arena of `capacity` bytes from `parent` (for a stage's scratch).
 * Returns 0 on success, -1 if it does not fit.
 */
int dcp__arena_split(dcp__arena *parent, size_t capacity, dcp__arena *child);

#endif
