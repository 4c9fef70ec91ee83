/*
 * test_gdn_pad.c - GDN causal-conv padding on host memory: the padded rows
 * and the last cu_seqlens entry, in place and out of place, without
 * cu_seqlens (where the reference crashed), and the errors.
 */
#include "dcp_test.h"

#include <stdlib.h>
#include <string.h>

DCP_TEST(pads_rows_and_last_boundary)
{
    /* 5 rows of 3 bytes, alignment 4: 3 zero rows; cu [0, 2, 5] -> [0, 2, 8] */
    unsigned char in[15], out[24];
    for (int i = 0; i < 15; i++) in[i] = (unsigned char)(i + 1);
    memset(out, 0xEE, sizeof out);
    const int32_t cu[] = {0, 2, 5};
    int32_t out_cu[3] = {-1, -1, -1};
    DCP_CHECK_EQ_INT(dcp_gdn_padded_rows(5, 4), 8);
    DCP_REQUIRE_OK(dcp_gdn_pad(in, 5, 3, 4, cu, 3, out, 8, out_cu));
    for (int i = 0; i < 15; i++) DCP_CHECK_EQ_INT(out[i], i + 1);
    for (int i = 15; i < 24; i++) DCP_CHECK_EQ_INT(out[i], 0);
    DCP_CHECK_EQ_INT(out_cu[0], 0);
    DCP_CHECK_EQ_INT(out_cu[1], 2);
    DCP_CHECK_EQ_INT(out_cu[2], 8);
    /* strip: the first 5 rows back */
    unsigned char stripped[15];
    DCP_REQUIRE_OK(dcp_gdn_strip(out, 5, 3, stripped));
    DCP_CHECK(memcmp(stripped, in, 15) == 0);
}

DCP_TEST(already_aligned_and_repeated_final_entries)
{
    int64_t rows[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    const int32_t cu[] = {0, 8, 8, 8};
    int32_t out_cu[4];
    DCP_REQUIRE_OK(dcp_gdn_pad(rows, 8, sizeof rows[0], 4, cu, 4, out, 8, out_cu));
    for (int i = 0; i < 8; i++) DCP_CHECK_EQ_INT(out[i], rows[i]);
    DCP_CHECK_EQ_INT(out_cu[3], 8);
    /* fixed-capacity cu_seqlens: only the very last entry moves, the pad becomes a sequence of its own */
    int64_t bigger[12];
    const int32_t cu7[] = {0, 7, 7, 7};
    DCP_REQUIRE_OK(dcp_gdn_pad(rows, 7, sizeof rows[0], 4, cu7, 4, bigger, 12, out_cu));
    DCP_CHECK_EQ_INT(out_cu[2], 7);
    DCP_CHECK_EQ_INT(out_cu[3], 8);
    DCP_CHECK_EQ_INT(bigger[6], 7);
    DCP_CHECK_EQ_INT(bigger[7], 0);
}

DCP_TEST(without_cu_seqlens_and_in_place)
{
    /* the reference's first version crashed here: no cu_seqlens means one sequence, only rows are padded */
    float buffer[4096 + 100];
    for (int i = 0; i < 4096 + 100; i++) buffer[i] = 7.0f;
    DCP_REQUIRE_OK(dcp_gdn_pad(buffer, 10, sizeof(float) * 10, DCP_GDN_ALIGNMENT / 1024, NULL, 0, buffer, 12, NULL));
    for (int i = 0; i < 100; i++) DCP_CHECK(buffer[i] == 7.0f);
    for (int i = 100; i < 120; i++) DCP_CHECK(buffer[i] == 0.0f);
    DCP_CHECK(buffer[120] == 7.0f); /* nothing past the padded rows */
    DCP_CHECK_EQ_INT(dcp_gdn_padded_rows(4097, DCP_GDN_ALIGNMENT), 8192);
    DCP_CHECK_EQ_INT(dcp_gdn_padded_rows(0, DCP_GDN_ALIGNMENT), 0);
    DCP_CHECK_EQ_INT(dcp_gdn_padded_rows(5, 0), 5);
    DCP_REQUIRE_OK(dcp_gdn_strip(buffer, 10, 40, buffer));
}

DCP_TEST(errors)
{
    unsigned char in[8] = {0}, out[8];
    const int32_t cu[] = {0, 5, 3};
    int32_t out_cu[3];
    DCP_CHECK_STATUS(dcp_gdn_pad(in, 5, 1, 4, NULL, 0, out, 7, NULL), DCP_ERR_CAPACITY);
    DCP_CHECK_STATUS(dcp_gdn_pad(in, -1, 1, 4, NULL, 0, out, 8, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_gdn_pad(in, 5, 0, 4, NULL, 0, out, 8, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_gdn_pad(in, 5, 1, 4, cu, 0, out, 8, out_cu), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_gdn_pad(in, 5, 1, 4, cu, 3, out, 8, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_gdn_pad(in, 5, 1, 4, cu, 3, out, 8, out_cu), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_STATUS(dcp_gdn_pad(NULL, 5, 1, 4, NULL, 0, out, 8, NULL), DCP_ERR_NULL_POINTER);
    /* rows of INT32_MAX - 1 pad to INT32_MAX + 3: the last entry cannot say so (refused before any row is read) */
    const int32_t near_max[] = {0, INT32_MAX - 1};
    DCP_CHECK_STATUS(dcp_gdn_pad(in, INT32_MAX - 1, 1, 4, near_max, 2, out, INT64_MAX, out_cu), DCP_ERR_OVERFLOW);
    DCP_CHECK_STATUS(dcp_gdn_strip(in, 5, 0, out), DCP_ERR_INVALID_ARGUMENT);
}

/*
 * cu_seqlens that disagree with `rows`: the padded last entry would point past the padded buffer
 * (last entry past rows), leave real rows outside every sequence (short of rows), or start
 * negative.  Each is DCP_ERR_CORRUPT_INPUT, and neither the rows nor the output cu_seqlens are
 * written.
 */
DCP_TEST(cu_seqlens_that_disagree_with_rows_are_refused_before_writing)
{
    const struct {
        const char *what;
        int32_t cu[4];
        int32_t num_cu;
    } bad[] = {
        {"last entry past rows", {0, 2, 6}, 3},
        {"last entry far past rows", {0, 2, 1000}, 3},
        {"last entry short of rows", {0, 2, 4}, 3},
        {"negative first entry", {-3, 2, 5}, 3},
        {"positive first entry", {1, 2, 5}, 3},
        {"decreasing in the middle", {0, 4, 3, 5}, 4},
        {"one entry for 5 rows", {5}, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char in[5] = {1, 2, 3, 4, 5}, out[8];
        int32_t out_cu[4] = {-7, -7, -7, -7};
        memset(out, 0xEE, sizeof out);
        dcp_status st = dcp_gdn_pad(in, 5, 1, 4, bad[i].cu, bad[i].num_cu, out, 8, out_cu);
        if (st != DCP_ERR_CORRUPT_INPUT)
            dcp_test_fail(__FILE__, __LINE__, "%s: %s, expected DCP_ERR_CORRUPT_INPUT", bad[i].what, dcp_status_str(st));
        for (int k = 0; k < 8; k++) DCP_CHECK_EQ_INT(out[k], 0xEE);
        for (int k = 0; k < 4; k++) DCP_CHECK_EQ_INT(out_cu[k], -7);
    }
    /* the same rows with agreeing cu_seqlens pad, and the last entry is the padded row count */
    unsigned char in[5] = {1, 2, 3, 4, 5}, out[8];
    const int32_t good[] = {0, 2, 5};
    int32_t out_cu[3];
    DCP_REQUIRE_OK(dcp_gdn_pad(in, 5, 1, 4, good, 3, out, 8, out_cu));
    DCP_CHECK_EQ_INT(out_cu[2], dcp_gdn_padded_rows(5, 4));
    /* no rows: a single 0 entry is the empty batch */
    const int32_t empty[] = {0};
    DCP_REQUIRE_OK(dcp_gdn_pad(NULL, 0, 1, 4, empty, 1, out, 8, out_cu));
    DCP_CHECK_EQ_INT(out_cu[0], 0);
}

/* The padded row count saturates at INT64_MAX without a signed overflow on the way (UBSan). */
DCP_TEST(padded_rows_near_int64_max)
{
    /* INT64_MAX - 4095 = 2^63 - 4096 is a multiple of 4096: rows + alignment - 1 wrapped on the way there */
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 4095, 4096) == INT64_MAX - 4095);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 4094, 4096) == INT64_MAX);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 1, 4096) == INT64_MAX);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX, 4096) == INT64_MAX);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX, INT32_MAX) == INT64_MAX);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 1, 2) == INT64_MAX - 1);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 2, 2) == INT64_MAX - 1);
    /* the largest multiple of 4096 is its own padding, and one row below it pads up to it */
    const int64_t top = INT64_MAX / 4096 * 4096;
    DCP_CHECK(dcp_gdn_padded_rows(top, 4096) == top);
    DCP_CHECK(dcp_gdn_padded_rows(top - 1, 4096) == top);
    DCP_CHECK(dcp_gdn_padded_rows(top + 1, 4096) == INT64_MAX);
    DCP_CHECK(dcp_gdn_padded_rows(INT64_MAX - 1, 1) == INT64_MAX - 1);
    /* a padded size past the output's capacity is DCP_ERR_CAPACITY, not a wrapped size */
    unsigned char b[1] = {0};
    DCP_CHECK_STATUS(dcp_gdn_pad(b, INT64_MAX - 4094, 1, 4096, NULL, 0, b, INT64_MAX - 1, NULL), DCP_ERR_CAPACITY);
}
