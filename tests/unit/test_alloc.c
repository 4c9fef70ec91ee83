/* test_alloc.c - arena bounds, marks and reset; workspace sizing; the allocation probe itself. */
#include "dcp_test.h"
#include "../alloc/arena.h"

#include <stdlib.h>

DCP_TEST(arena_alignment_and_bounds)
{
    static unsigned char memory[1024 + 64];
    dcp__arena arena;
    dcp__arena_init(&arena, memory + 3, 1024); /* deliberately misaligned start */
    void *a = dcp__arena_alloc(&arena, 1, 10);
    void *b = dcp__arena_alloc(&arena, 8, 3);
    DCP_REQUIRE(a && b);
    DCP_CHECK(((uintptr_t)a % 64) == 0);
    DCP_CHECK(((uintptr_t)b % 64) == 0);
    DCP_CHECK_EQ_INT((unsigned char *)b - (unsigned char *)a, 64);
    /* everything stays inside the memory handed in */
    DCP_CHECK((unsigned char *)a >= memory + 3);
    size_t before = arena.used;
    DCP_CHECK(dcp__arena_alloc(&arena, 1, 4096) == NULL); /* does not fit */
    DCP_CHECK_EQ_INT(arena.used, before);                /* and changes nothing */
    DCP_CHECK(dcp__arena_alloc(&arena, SIZE_MAX / 2, 3) == NULL); /* size overflow */
    DCP_CHECK_EQ_INT(arena.used, before);
}

DCP_TEST(arena_mark_and_reset)
{
    static unsigned char memory[4096];
    dcp__arena arena;
    dcp__arena_init(&arena, memory, sizeof memory);
    (void)dcp__arena_alloc(&arena, 1, 100);
    size_t mark = dcp__arena_mark(&arena);
    int32_t *x = DCP_ARENA_NEW(&arena, int32_t, 200);
    DCP_REQUIRE(x);
    DCP_CHECK_EQ_INT(arena.used, mark + 832);
    dcp__arena_reset(&arena, mark);
    DCP_CHECK_EQ_INT(arena.used, mark);
    int32_t *y = DCP_ARENA_NEW(&arena, int32_t, 200);
    DCP_CHECK(x == y); /* the same memory is handed out again */
    DCP_CHECK(arena.high_water >= mark + 832);
    dcp__arena_reset(&arena, arena.used + 64); /* a mark past the top is ignored */
    DCP_CHECK_EQ_INT(arena.used, mark + 832);
    /* exactly filling the arena works; one more byte does not */
    dcp__arena_reset(&arena, 0);
    DCP_CHECK(dcp__arena_alloc(&arena, 1, arena.capacity) != NULL);
    DCP_CHECK(dcp__arena_alloc(&arena, 1, 1) == NULL);
}

DCP_TEST(arena_failure_flag_is_sticky_until_reset)
{
    static unsigned char memory[1024];
    dcp__arena arena;
    dcp__arena_init(&arena, memory, sizeof memory);
    DCP_CHECK(!dcp__arena_failed(&arena));
    DCP_REQUIRE(dcp__arena_alloc(&arena, 1, 64) != NULL);
    DCP_CHECK(!dcp__arena_failed(&arena)); /* a fitting allocation sets nothing */
    DCP_CHECK(dcp__arena_alloc(&arena, 1, 4096) == NULL);
    DCP_CHECK(dcp__arena_failed(&arena));
    DCP_REQUIRE(dcp__arena_alloc(&arena, 1, 64) != NULL); /* a later fitting allocation does not clear it */
    DCP_CHECK(dcp__arena_failed(&arena));
    dcp__arena_reset(&arena, 0);
    DCP_CHECK(!dcp__arena_failed(&arena));
    DCP_CHECK(dcp__arena_alloc(&arena, SIZE_MAX / 2, 3) == NULL); /* size overflow counts too */
    DCP_CHECK(dcp__arena_failed(&arena));
    dcp__arena_reset(&arena, 0);
    dcp__arena child;
    DCP_CHECK(dcp__arena_split(&arena, 4096, &child) == -1); /* a split that does not fit */
    DCP_CHECK(dcp__arena_failed(&arena));
    dcp__arena_reset(&arena, 0);
    DCP_REQUIRE(dcp__arena_split(&arena, 256, &child) == 0);
    DCP_CHECK(!dcp__arena_failed(&child));
    DCP_CHECK(dcp__arena_alloc(&child, 1, 512) == NULL);
    DCP_CHECK(dcp__arena_failed(&child) && !dcp__arena_failed(&arena)); /* the child's failure is its own */
    dcp__arena measure;
    dcp__arena_init_measure(&measure);
    DCP_CHECK(dcp__arena_alloc(&measure, 1, 1u << 30) != NULL && !dcp__arena_failed(&measure));
}

DCP_TEST(arena_measure_matches_real)
{
    dcp__arena measure, real;
    static unsigned char memory[8192];
    dcp__arena_init_measure(&measure);
    dcp__arena_init(&real, memory, sizeof memory);
    size_t sizes[] = {1, 63, 64, 65, 200, 7};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        DCP_REQUIRE(dcp__arena_alloc(&measure, 4, sizes[i]) != NULL);
        DCP_REQUIRE(dcp__arena_alloc(&real, 4, sizes[i]) != NULL);
    }
    DCP_CHECK_EQ_INT(measure.used, real.used);
    DCP_CHECK_EQ_INT(dcp__arena_bytes(4, 65), 320);
    DCP_CHECK(dcp__arena_bytes(SIZE_MAX, 2) == SIZE_MAX);
}

DCP_TEST(probe_catches_planted_allocation)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    dcp_alloc_probe probe;
    dcp_alloc_probe_begin(&probe);
    volatile char *p = malloc(1000);
    p[0] = 1;
    uint64_t allocated = dcp_alloc_probe_allocated(&probe);
    free((void *)p);
    DCP_CHECK(allocated >= 1000);
    DCP_CHECK(dcp_alloc_probe_deallocated(&probe) >= 1000);
    /* and a region that allocates nothing reads zero */
    dcp_alloc_probe_begin(&probe);
    volatile int sum = 0;
    for (int i = 0; i < 100; i++) sum += i;
    DCP_CHECK_EQ_INT(dcp_alloc_probe_allocated(&probe), 0);
    DCP_CHECK_EQ_INT(sum, 4950);
}

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/*
 * dcp_context_create() makes a jemalloc arena before it asks for the
 * workspace; when that request fails, the arena must go too, or every failed
 * create leaks one.  A workspace of about 93 TB is refused by Linux's default
 * (heuristic) overcommit policy, being far beyond memory plus swap.
 */
DCP_TEST(failed_create_leaves_no_jemalloc_arena)
{
#ifndef DCP_HAVE_JEMALLOC
    DCP_SKIP("built without jemalloc");
#else
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 8;
    c.max_sequences = 1 << 20;
    c.max_tokens_per_rank = (int64_t)1 << 40;
    size_t need = 0;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &need));
    DCP_REQUIRE(need > ((size_t)1 << 46));
    unsigned before = 0, after = 0;
    size_t len = sizeof before;
    DCP_REQUIRE(mallctl("arenas.narenas", &before, &len, NULL, 0) == 0);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) == DCP_OK) {
        dcp_context_destroy(ctx);
        DCP_SKIP("this machine's overcommit policy maps a 93 TB workspace");
    }
    for (int i = 0; i < 32; i++) {
        ctx = NULL;
        DCP_CHECK_STATUS(dcp_context_create(&c, &ctx), DCP_ERR_ALLOC);
        DCP_CHECK(ctx == NULL);
    }
    len = sizeof after;
    DCP_REQUIRE(mallctl("arenas.narenas", &after, &len, NULL, 0) == 0);
    /* a destroyed arena's index is reused: at most one new index for all 33 tries */
    DCP_CHECK(after <= before + 1);
    /* and a context of a sane size still comes */
    c.max_tokens_per_rank = 4096;
    DCP_CHECK_STATUS(dcp_context_create(&c, &ctx), DCP_OK);
    dcp_context_destroy(ctx);
#endif
}
