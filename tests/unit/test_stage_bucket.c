/* test_stage_bucket.c - the bucket stage: length checks, stable descending sort, minimal CP sizes. */
#include "dcp_test.h"
#include "../pipeline/stages.h"

#include <stdlib.h>

DCP_TEST(min_cp_size_rules)
{
    /* power of two >= ceil(s / M), at least min_cp_size */
    DCP_CHECK_EQ_INT(dcp__min_cp_size(1, 4096, 1, 32), 1);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(4096, 4096, 1, 32), 1);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(4097, 4096, 1, 32), 2);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(3 * 4096, 4096, 1, 32), 4);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(100, 4096, 4, 32), 4);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(32 * 4096, 4096, 1, 32), 32);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(32 * 4096 + 1, 4096, 1, 32), 0); /* longer than the whole group */
    /* 24 ranks: a sequence needing 17 ranks gets all 24 (no power of two fits) */
    DCP_CHECK_EQ_INT(dcp__min_cp_size(17 * 100, 100, 1, 24), 24);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(9 * 100, 100, 1, 24), 16);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(0, 100, 1, 24), 0);
    DCP_CHECK_EQ_INT(dcp__min_cp_size(INT32_MAX, INT32_MAX, 1, 65536), 1);
}

/* The rule by its definition: double from min_cp_size until the ranks hold the sequence. */
static int32_t min_cp_by_doubling(int64_t s, int32_t m, int32_t min_cp, int32_t ranks)
{
    if (s <= 0 || s > (int64_t)ranks * m) return 0;
    int64_t cp = min_cp > 1 ? min_cp : 1;
    while (cp * m < s) cp *= 2;
    return (int32_t)(cp > ranks ? ranks : cp);
}

DCP_TEST(min_cp_size_matches_doubling)
{
    /* powers of two take a shift-and-clz path; other sizes double: both give the defined size */
    static const int32_t ms[] = {1, 2, 64, 100, 2048, 4096, 6000, 8192, 1 << 20, INT32_MAX};
    static const int32_t mins[] = {1, 2, 3, 4, 16, 64};
    static const int32_t ranks[] = {1, 8, 24, 512, 1 << 20};
    int checked = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t k = 0; k < sizeof mins / sizeof mins[0]; k++)
            for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
                int64_t m = ms[a];
                /* lengths around every multiple-of-a-power-of-two boundary, and a spread */
                for (int e = 0; e < 32; e++) {
                    for (int d = -1; d <= 1; d++) {
                        int64_t s = (m << e) + d;
                        if (s < 1 || s > INT32_MAX) continue;
                        DCP_CHECK_EQ_INT(dcp__min_cp_size(s, ms[a], mins[k], ranks[r]),
                                         min_cp_by_doubling(s, ms[a], mins[k], ranks[r]));
                        checked++;
                    }
                }
                for (int64_t s = 1; s < 100000; s += 997) {
                    DCP_CHECK_EQ_INT(dcp__min_cp_size(s, ms[a], mins[k], ranks[r]),
                                     min_cp_by_doubling(s, ms[a], mins[k], ranks[r]));
                    checked++;
                }
            }
    DCP_CHECK(checked > 10000);
}

static dcp_config config_for(int32_t ranks, int32_t m, int32_t max_seq)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = ranks;
    c.max_seqlen_per_rank = m;
    c.max_sequences = max_seq;
    return c;
}

DCP_TEST(bucket_sorts_stably_descending)
{
    static unsigned char memory[1 << 16];
    dcp__arena arena;
    dcp__arena_init(&arena, memory, sizeof memory);
    dcp_config c = config_for(8, 1000, 64);
    const int32_t lengths[] = {5, 70000, 5, 300, 2000, 300, 1, 70000, 256, 257};
    int32_t n = 10, sorted[10], min_cp[10];
    dcp__error err;
    DCP_CHECK_STATUS(dcp__bucket(lengths, n, &c, sorted, min_cp, &arena, &err), DCP_ERR_BAD_LENGTH);
    /* 70000 > 8 * 1000: rejected, naming the sequence */
    DCP_CHECK_CONTAINS(err.message, "sequence 1 has length 70000");
    c.max_seqlen_per_rank = 10000;
    DCP_REQUIRE_OK(dcp__bucket(lengths, n, &c, sorted, min_cp, &arena, &err));
    const int32_t expected[] = {1, 7, 4, 3, 5, 9, 8, 0, 2, 6};
    for (int i = 0; i < n; i++) DCP_CHECK_EQ_INT(sorted[i], expected[i]);
    DCP_CHECK_EQ_INT(min_cp[1], 8);
    DCP_CHECK_EQ_INT(min_cp[4], 1);
}

DCP_TEST(bucket_rejects_bad_lengths_and_capacity)
{
    static unsigned char memory[1 << 16];
    dcp__arena arena;
    dcp__arena_init(&arena, memory, sizeof memory);
    dcp_config c = config_for(4, 100, 4);
    int32_t sorted[8], min_cp[8];
    dcp__error err;
    DCP_CHECK_STATUS(dcp__bucket((int32_t[]){5, 0, 3}, 3, &c, sorted, min_cp, &arena, &err), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(err.message, "sequence 1 has length 0");
    DCP_CHECK_STATUS(dcp__bucket((int32_t[]){5, -7}, 2, &c, sorted, min_cp, &arena, &err), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(err.message, "length -7");
    DCP_CHECK_STATUS(dcp__bucket((int32_t[]){1, 2, 3, 4, 5}, 5, &c, sorted, min_cp, &arena, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "5 sequences exceed max_sequences = 4");
    /* dp_balanced: the limit is the static CP group, not all ranks */
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = 2;
    c.context_parallel_size = 2;
    DCP_CHECK_STATUS(dcp__bucket((int32_t[]){201}, 1, &c, sorted, min_cp, &arena, &err), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_STATUS(dcp__bucket((int32_t[]){200}, 1, &c, sorted, min_cp, &arena, &err), DCP_OK);
    DCP_CHECK_EQ_INT(min_cp[0], 2);
}

DCP_TEST(bucket_large_random_is_sorted_and_stable)
{
    enum { N = 20000 };
    static int32_t lengths[N], sorted[N], min_cp[N];
    static unsigned char memory[1 << 20];
    dcp__arena arena;
    dcp__arena_init(&arena, memory, sizeof memory);
    dcp_config c = config_for(512, 8192, N);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        lengths[i] = 1 + (int32_t)(x % ((i % 3) ? 5000 : 4000000)); /* many ties among short ones */
    }
    dcp__error err;
    dcp_status st = DCP_ERR_COMM;
    DCP_CHECK_NO_ALLOC(st = dcp__bucket(lengths, N, &c, sorted, min_cp, &arena, &err));
    DCP_REQUIRE_OK(st);
    for (int i = 1; i < N; i++) {
        int32_t a = sorted[i - 1], b = sorted[i];
        if (lengths[a] < lengths[b] || (lengths[a] == lengths[b] && a > b)) {
            dcp_test_fail(__FILE__, __LINE__, "order broken at %d: id %d (%d) before id %d (%d)", i, a, lengths[a], b,
                          lengths[b]);
            break;
        }
    }
}

/* Every length equal: no bit differs, so no radix pass runs (and no key is shifted by 32). */
DCP_TEST(bucket_all_lengths_equal_keeps_id_order)
{
    dcp_config c;
    dcp_config_default(&c);
    c.max_sequences = 2048;
    enum { N = 1500 };
    static int32_t lengths[N], ids[N], min_cp[N];
    for (int i = 0; i < N; i++) lengths[i] = 777;
    static unsigned char memory[1 << 20];
    dcp__arena scratch;
    dcp__arena_init(&scratch, memory, sizeof memory);
    dcp__error err;
    DCP_REQUIRE_OK(dcp__bucket(lengths, N, &c, ids, min_cp, &scratch, &err));
    for (int i = 0; i < N; i++) DCP_CHECK_EQ_INT(ids[i], i);
    /* and below 1024 sequences (8-bit digits) */
    DCP_REQUIRE_OK(dcp__bucket(lengths, 5, &c, ids, min_cp, &scratch, &err));
    for (int i = 0; i < 5; i++) DCP_CHECK_EQ_INT(ids[i], i);
}
