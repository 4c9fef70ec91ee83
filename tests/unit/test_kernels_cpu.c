/*
 * test_kernels_cpu.c - the data plane's CPU twins and THD geometry: hand-worked
 * cases, then the fused form (real pieces -> pack + mask) against the
 * reference's order of operations (pack, mask, sanitise, extend, slice, pad)
 * on generated microbatches.
 */
#include "dcp_test.h"
#include "../core/mover.h"
#include "../support/thd_twins.h"
#include "../core/thd/pack_cpu.h"

#include <stdlib.h>
#include <string.h>

DCP_TEST(pack_copies_segments_from_several_buffers)
{
    const int64_t a[] = {10, 11, 12, 13, 14};
    const int64_t b[] = {20, 21, 22};
    const void *srcs[] = {a, b};
    int32_t buffer[] = {1, 0, 0};
    int64_t src[] = {1, 3, 0}, dst[] = {0, 2, 5}, len[] = {2, 2, 1};
    dcp__pack_layout layout = {3, buffer, src, dst, len};
    int64_t out[7] = {-1, -1, -1, -1, -1, -1, -1};
    dcp__pack_cpu(&layout, srcs, out, sizeof out[0]);
    const int64_t want[] = {21, 22, 13, 14, -1, 10, -1};
    for (int i = 0; i < 7; i++) DCP_CHECK_EQ_INT(out[i], want[i]);

    uint8_t mask[7];
    dcp__padding_mask_from_layout_cpu(&layout, 7, mask);
    const uint8_t want_mask[] = {0, 0, 0, 0, 1, 0, 1};
    for (int i = 0; i < 7; i++) DCP_CHECK_EQ_INT(mask[i], want_mask[i]);
}

/* Received and own pieces merged by destination, gaps and tail filled: every slot once; overlaps refused. */
DCP_TEST(landing_table_tiles_the_body_and_refuses_overlaps)
{
    /* received: from peer 1 at its cursor 0 to slots 2..4, from peer 0 at cursor 5 to slot 9; own: sample 1 to 0..1 and 6..7 */
    int32_t sender[] = {1, 0};
    int64_t cursor[] = {0, 5}, rdst[] = {2, 9}, rlen[] = {3, 1};
    int32_t sample[] = {1, 0};
    int64_t src[] = {4, 0}, odst[] = {0, 6}, olen[] = {2, 2};
    dcp__recv_pieces r = {2, sender, cursor, rdst, rlen};
    dcp__own_pieces o = {2, sample, src, odst, olen};
    int32_t si[9];
    int64_t so[9], d[9], l[9], bad = 0;
    int64_t n = dcp__landing_segments(&r, &o, 2, 12, si, so, d, l, &bad);
    DCP_REQUIRE(n == 7);
    const int32_t want_si[] = {3, 1, -1, 2, -1, 0, -1};
    const int64_t want_so[] = {4, 0, 0, 0, 0, 5, 0}, want_d[] = {0, 2, 5, 6, 8, 9, 10}, want_l[] = {2, 3, 1, 2, 1, 1, 2};
    for (int i = 0; i < 7; i++) {
        DCP_CHECK_EQ_INT(si[i], want_si[i]);
        DCP_CHECK_EQ_INT(so[i], want_so[i]);
        DCP_CHECK_EQ_INT(d[i], want_d[i]);
        DCP_CHECK_EQ_INT(l[i], want_l[i]);
    }
    /* run by the segment kernel's twin: peers' runs and samples as one source table, the mask 1 on fills */
    const int64_t peer0[] = {0, 0, 0, 0, 0, 105}, peer1[] = {111, 112, 113};
    const int64_t sample0[] = {200, 201}, sample1[] = {0, 0, 0, 0, 214, 215};
    const void *sources[] = {peer0, peer1, sample0, sample1};
    int64_t out[12];
    uint8_t mask[12];
    memset(out, 0x5A, sizeof out);
    memset(mask, 0x5A, sizeof mask);
    void *dst_out[] = {out}, *dst_mask[] = {mask};
    dcp__segment_field fields[2] = {{sources, dst_out, 8}, {NULL, dst_mask, 1}};
    dcp__segment_table t = {n, si, so, NULL, d, l, NULL};
    dcp__segment_table_pack_cpu(&t, fields, 2);
    const int64_t want_out[] = {214, 215, 111, 112, 113, 0, 200, 201, 0, 105, 0, 0};
    const uint8_t want_mask[] = {0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 1};
    for (int i = 0; i < 12; i++) {
        DCP_CHECK_EQ_INT(out[i], want_out[i]);
        DCP_CHECK_EQ_INT(mask[i], want_mask[i]);
    }
    /* an own piece over a received one, and a piece past the body, are refused and named */
    int64_t odst_bad[] = {3, 6};
    dcp__own_pieces overlap = {2, sample, src, odst_bad, olen};
    DCP_CHECK_EQ_INT(dcp__landing_segments(&r, &overlap, 2, 12, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, -1); /* own piece 0 starts inside received piece 0 */
    DCP_CHECK_EQ_INT(dcp__landing_segments(&r, &o, 2, 9, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, 1); /* received piece 1 at slot 9 of 9 */
    dcp__recv_pieces none = {0, NULL, NULL, NULL, NULL};
    dcp__own_pieces nothing = {0, NULL, NULL, NULL, NULL};
    DCP_CHECK_EQ_INT(dcp__landing_segments(&none, &nothing, 0, 0, si, so, d, l, &bad), 0);
    DCP_CHECK_EQ_INT(dcp__landing_segments(&none, &nothing, 0, 5, si, so, d, l, &bad), 1);
    DCP_CHECK_EQ_INT(si[0], -1);
    DCP_CHECK_EQ_INT(l[0], 5);
}

DCP_TEST(cu_seqlens_scan)
{
    int32_t original[] = {3, 2, 7}, padded[] = {4, 4, 8}, cu[4], cup[4], longest = -1;
    dcp__cu_seqlens_cpu(original, padded, 3, cu, cup, &longest);
    const int32_t want_cu[] = {0, 3, 5, 12}, want_cup[] = {0, 4, 8, 16};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(cu[i], want_cu[i]);
        DCP_CHECK_EQ_INT(cup[i], want_cup[i]);
    }
    DCP_CHECK_EQ_INT(longest, 8);
}

DCP_TEST(reference_padding_mask_and_sanitise)
{
    /* two sequences: 3 of 4 slots real, 2 of 4 real; 2 tail slots */
    const int32_t cu[] = {0, 3, 5}, cup[] = {0, 4, 8};
    uint8_t mask[10];
    dcp__thd_padding_mask_cpu(cu, cup, 2, 10, mask);
    const uint8_t want[] = {0, 0, 0, 1, 0, 0, 1, 1, 1, 1};
    for (int i = 0; i < 10; i++) DCP_CHECK_EQ_INT(mask[i], want[i]);
    float loss[10];
    for (int i = 0; i < 10; i++) loss[i] = 1.5f;
    dcp__thd_sanitize_cpu(mask, 10, loss, sizeof loss[0]);
    for (int i = 0; i < 10; i++) DCP_CHECK(loss[i] == (want[i] ? 0.0f : 1.5f));
}

DCP_TEST(zigzag_and_contiguous_slices)
{
    const int32_t cup[] = {0, 8, 12};
    int64_t src[4], dst[4], len[4];
    DCP_REQUIRE_EQ_INT(dcp__cp_slice_layout_cpu(cup, 2, 12, 2, 0, DCP_CP_ZIGZAG, src, dst, len), 4);
    const int64_t src0[] = {0, 6, 8, 11}, dst0[] = {0, 2, 4, 5}, len0[] = {2, 2, 1, 1};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(src[i], src0[i]);
        DCP_CHECK_EQ_INT(dst[i], dst0[i]);
        DCP_CHECK_EQ_INT(len[i], len0[i]);
    }
    DCP_REQUIRE_EQ_INT(dcp__cp_slice_layout_cpu(cup, 2, 12, 2, 1, DCP_CP_ZIGZAG, src, dst, len), 4);
    const int64_t src1[] = {2, 4, 9, 10};
    for (int i = 0; i < 4; i++) DCP_CHECK_EQ_INT(src[i], src1[i]);
    DCP_REQUIRE_EQ_INT(dcp__cp_slice_layout_cpu(cup, 2, 12, 2, 1, DCP_CP_CONTIGUOUS, src, dst, len), 1);
    DCP_CHECK_EQ_INT(src[0], 6);
    DCP_CHECK_EQ_INT(len[0], 6);
    /* a span not divisible by 2*cp cannot be cut zigzag; a total not divisible by cp not contiguously */
    const int32_t odd[] = {0, 6};
    DCP_CHECK_EQ_INT(dcp__cp_slice_layout_cpu(odd, 1, 6, 2, 0, DCP_CP_ZIGZAG, src, dst, len), -1);
    DCP_CHECK_EQ_INT(dcp__cp_slice_layout_cpu(odd, 1, 6, 4, 0, DCP_CP_CONTIGUOUS, src, dst, len), -1);
    DCP_CHECK_EQ_INT(dcp__cp_slice_layout_cpu(odd, 1, 7, 1, 0, DCP_CP_ZIGZAG, src, dst, len), 1);
}

static dcp__thd_params params(int32_t cp, dcp_cp_partition partition, int32_t alignment, int32_t target,
                             dcp_thd_tail tail, int32_t s)
{
    dcp__thd_params p = {cp, partition, alignment, target, tail, s};
    return p;
}

DCP_TEST(geometry_hand_worked)
{
    dcp__error err;
    dcp__thd_geometry g;
    int32_t cu[8], cup[8];
    int32_t o2[] = {3, 2}, p2[] = {4, 4};

    /* no padding: the packed spans as they are */
    dcp__thd_params p = params(1, DCP_CP_ZIGZAG, 0, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.num_tokens, 8);
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 3);
    DCP_CHECK_EQ_INT(g.max_seqlen, 4);

    /* alignment 16, dummy tail of 8 */
    p = params(1, DCP_CP_ZIGZAG, 16, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.num_tokens, 16);
    DCP_CHECK_EQ_INT(g.dummy_length, 8);
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 4);
    DCP_CHECK_EQ_INT(g.max_seqlen, 8);
    dcp__thd_cu_seqlens_write(&g, o2, p2, 2, cu, cup);
    const int32_t cu_b[] = {0, 3, 5, 13}, cup_b[] = {0, 4, 8, 16};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(cu[i], cu_b[i]);
        DCP_CHECK_EQ_INT(cup[i], cup_b[i]);
    }

    /* the same with a fixed capacity of 3 sequences: 4 entries, max_seqlen = target; 2 is too few */
    p.max_packed_sequences = 3;
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 4);
    DCP_CHECK_EQ_INT(g.max_seqlen, 16);
    p.max_packed_sequences = 5;
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    dcp__thd_cu_seqlens_write(&g, o2, p2, 2, cu, cup);
    const int32_t cu_f[] = {0, 3, 5, 13, 13, 13}, cup_f[] = {0, 4, 8, 16, 16, 16};
    for (int i = 0; i < 6; i++) {
        DCP_CHECK_EQ_INT(cu[i], cu_f[i]);
        DCP_CHECK_EQ_INT(cup[i], cup_f[i]);
    }
    p.max_packed_sequences = 2;
    DCP_CHECK_STATUS(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err), DCP_ERR_CAPACITY);

    /* extend_last: the last sequence's span grows to the target, no dummy */
    p = params(1, DCP_CP_ZIGZAG, 16, 0, DCP_THD_TAIL_EXTEND_LAST, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.num_tokens, 16);
    DCP_CHECK_EQ_INT(g.partition_total, 16);
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 3);
    DCP_CHECK_EQ_INT(g.max_seqlen, 12);
    dcp__thd_cu_seqlens_write(&g, o2, p2, 2, cu, cup);
    DCP_CHECK_EQ_INT(cup[2], 16);
    DCP_CHECK_EQ_INT(cu[2], 5);

    /* pad to max (10) */
    p = params(1, DCP_CP_ZIGZAG, 0, 10, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o2, p2, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.num_tokens, 10);
    DCP_CHECK_EQ_INT(g.dummy_length, 2);
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 4);
}

DCP_TEST(geometry_zigzag_and_contiguous_pieces)
{
    dcp__error err;
    dcp__thd_geometry g;
    int32_t cu[8], cup[8], seq[8];
    int64_t off[8], loc[8], len[8];

    /* zigzag cp=2, alignment 8: 12 packed -> 6 local -> 8, dummy 4 */
    int32_t o[] = {7, 4}, pd[] = {8, 4};
    dcp__thd_params p = params(2, DCP_CP_ZIGZAG, 8, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, o, pd, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.local_tokens, 6);
    DCP_CHECK_EQ_INT(g.num_tokens, 8);
    DCP_CHECK_EQ_INT(g.dummy_length, 4);
    dcp__thd_cu_seqlens_write(&g, o, pd, 2, cu, cup);
    const int32_t want_cu[] = {0, 7, 11, 15}, want_cup[] = {0, 8, 12, 16};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(cu[i], want_cu[i]);
        DCP_CHECK_EQ_INT(cup[i], want_cup[i]);
    }
    int32_t count = dcp__thd_real_pieces(&g, &p, o, cup, 0, seq, off, loc, len);
    DCP_REQUIRE_EQ_INT(count, 4);
    const int32_t w_seq[] = {0, 0, 1, 1};
    const int64_t w_off[] = {0, 6, 0, 3}, w_loc[] = {0, 2, 4, 5}, w_len[] = {2, 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(seq[i], w_seq[i]);
        DCP_CHECK_EQ_INT(off[i], w_off[i]);
        DCP_CHECK_EQ_INT(loc[i], w_loc[i]);
        DCP_CHECK_EQ_INT(len[i], w_len[i]);
    }

    /* a dummy of 2 slots cannot be cut over 2*cp = 4 */
    int32_t o1[] = {4}, p1[] = {4};
    p = params(2, DCP_CP_ZIGZAG, 3, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_CHECK_STATUS(dcp__thd_geometry_compute(&p, o1, p1, 1, &g, &err), DCP_ERR_BAD_LENGTH);
    /* nor a span of 6 over 4 */
    int32_t o6[] = {6}, p6[] = {6};
    p = params(2, DCP_CP_ZIGZAG, 0, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_CHECK_STATUS(dcp__thd_geometry_compute(&p, o6, p6, 1, &g, &err), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(err.message, "not divisible by 2*cp");

    /* contiguous cp=2, alignment 4: width fixed at 4 before slicing, dummy 1 */
    int32_t oc[] = {3, 4}, pc[] = {3, 4};
    p = params(2, DCP_CP_CONTIGUOUS, 4, 0, DCP_THD_TAIL_APPEND_DUMMY, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, oc, pc, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.partition_total, 8);
    DCP_CHECK_EQ_INT(g.num_tokens, 4);
    DCP_CHECK_EQ_INT(g.dummy_length, 1);
    dcp__thd_cu_seqlens_write(&g, oc, pc, 2, cu, cup);
    count = dcp__thd_real_pieces(&g, &p, oc, cup, 1, seq, off, loc, len);
    DCP_REQUIRE_EQ_INT(count, 1);
    DCP_CHECK_EQ_INT(seq[0], 1);
    DCP_CHECK_EQ_INT(off[0], 1);
    DCP_CHECK_EQ_INT(loc[0], 0);
    DCP_CHECK_EQ_INT(len[0], 3);
    count = dcp__thd_real_pieces(&g, &p, oc, cup, 0, seq, off, loc, len);
    DCP_REQUIRE_EQ_INT(count, 2);
    DCP_CHECK_EQ_INT(len[0], 3);
    DCP_CHECK_EQ_INT(loc[1], 3);

    /* extend_last with zigzag and pad-to-max 8: last span 4 -> 12 */
    int32_t oe[] = {4, 3}, pe[] = {4, 4};
    p = params(2, DCP_CP_ZIGZAG, 0, 8, DCP_THD_TAIL_EXTEND_LAST, 0);
    DCP_REQUIRE_OK(dcp__thd_geometry_compute(&p, oe, pe, 2, &g, &err));
    DCP_CHECK_EQ_INT(g.last_padded_end, 16);
    DCP_CHECK_EQ_INT(g.num_tokens, 8);
    DCP_CHECK_EQ_INT(g.num_cu_seqlens, 3);
    DCP_CHECK_EQ_INT(g.max_seqlen, 12);
    /* a packed microbatch larger than the target is a capacity error */
    int32_t ob[] = {20}, pb[] = {20};
    DCP_CHECK_STATUS(dcp__thd_geometry_compute(&p, ob, pb, 1, &g, &err), DCP_ERR_CAPACITY);
    /* bad lengths */
    int32_t obad[] = {5}, pbad[] = {4};
    DCP_CHECK_STATUS(dcp__thd_geometry_compute(&p, obad, pbad, 1, &g, &err), DCP_ERR_BAD_LENGTH);
}

/* ---- fused vs reference order ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The reference's order on one microbatch: returns 0 if the fused form matches. */
static int compare_one(const dcp__thd_params *p, const int32_t *o, const int32_t *pd, int32_t n, int32_t r)
{
    dcp__error err;
    dcp__thd_geometry g;
    if (dcp__thd_geometry_compute(p, o, pd, n, &g, &err) != DCP_OK) return -1; /* rejected shapes are tested above */
    int32_t *cu0 = calloc((size_t)n + 1, sizeof *cu0), *cup0 = calloc((size_t)n + 1, sizeof *cup0);
    int32_t *cu = calloc((size_t)g.num_cu_seqlens, sizeof *cu), *cup = calloc((size_t)g.num_cu_seqlens, sizeof *cup);
    int32_t longest;
    dcp__cu_seqlens_cpu(o, pd, n, cu0, cup0, &longest);
    dcp__thd_cu_seqlens_write(&g, o, pd, n, cu, cup);

    /* packed buffer: token value = 1000*k + j + 1 in real and padding slots alike (sanitising must clear them) */
    int64_t total = g.partition_total;
    int64_t *packed = calloc((size_t)total, sizeof *packed);
    uint8_t *mask = malloc((size_t)total);
    for (int32_t k = 0; k < n; k++)
        for (int32_t j = 0; j < pd[k]; j++) packed[cup0[k] + j] = 1000 * (int64_t)k + j + 1;
    dcp__thd_padding_mask_cpu(cu0, cup0, n, total, mask);
    dcp__thd_sanitize_cpu(mask, total, packed, sizeof *packed);
    int64_t *src = malloc(sizeof *src * (2 * (size_t)n + 1)), *dst = malloc(sizeof *dst * (2 * (size_t)n + 1)),
            *len = malloc(sizeof *len * (2 * (size_t)n + 1));
    int64_t segments = dcp__cp_slice_layout_cpu(cup, n, total, p->cp, r, p->partition, src, dst, len);
    int ok = segments >= 0;
    int64_t *want = calloc((size_t)g.num_tokens, sizeof *want);
    uint8_t *want_mask = malloc((size_t)g.num_tokens);
    memset(want_mask, 1, (size_t)g.num_tokens);
    if (ok) {
        dcp__pack_layout slice = {segments, NULL, src, dst, len};
        const void *bufs[] = {packed};
        dcp__pack_cpu(&slice, bufs, want, sizeof *want);
        const void *mbufs[] = {mask};
        dcp__pack_cpu(&slice, mbufs, want_mask, 1);
    }

    /* fused: real pieces straight from per-sequence sources */
    int32_t *seq = malloc(sizeof *seq * 2 * (size_t)n);
    int64_t *off = malloc(sizeof *off * 2 * (size_t)n), *loc = malloc(sizeof *loc * 2 * (size_t)n),
            *plen = malloc(sizeof *plen * 2 * (size_t)n), *soff = malloc(sizeof *soff * 2 * (size_t)n);
    int32_t pieces = dcp__thd_real_pieces(&g, p, o, cup, r, seq, off, loc, plen);
    for (int32_t i = 0; i < pieces; i++) soff[i] = cup0[seq[i]] + off[i];
    int64_t *got = calloc((size_t)g.num_tokens, sizeof *got);
    uint8_t *got_mask = malloc((size_t)g.num_tokens);
    dcp__pack_layout fused = {pieces, NULL, soff, loc, plen};
    const void *bufs[] = {packed};
    dcp__pack_cpu(&fused, bufs, got, sizeof *got);
    dcp__padding_mask_from_layout_cpu(&fused, g.num_tokens, got_mask);
    for (int64_t t = 0; ok && t < g.num_tokens; t++)
        if (got[t] != want[t] || got_mask[t] != want_mask[t]) ok = 0;
    free(cu0), free(cup0), free(cu), free(cup), free(packed), free(mask), free(src), free(dst), free(len);
    free(want), free(want_mask), free(seq), free(off), free(loc), free(plen), free(soff), free(got), free(got_mask);
    return ok ? 0 : 1;
}

DCP_TEST(fused_pieces_match_reference_order)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int checked = 0;
    for (int trial = 0; trial < 4000; trial++) {
        int32_t cp = 1 << (rng_next(&s) % 4);
        dcp_cp_partition part = (dcp_cp_partition)(rng_next(&s) % 2);
        int mode = (int)(rng_next(&s) % 3); /* none, alignment, target */
        int32_t alignment = mode == 1 ? (int32_t)(1 + rng_next(&s) % 8) * 2 : 0;
        int32_t n = 1 + (int32_t)(rng_next(&s) % 6);
        int32_t o[6], pd[6];
        int64_t packed = 0;
        for (int32_t k = 0; k < n; k++) {
            pd[k] = (int32_t)(1 + rng_next(&s) % 12) * (part == DCP_CP_ZIGZAG ? 2 * cp : 1);
            o[k] = (int32_t)(rng_next(&s) % ((uint64_t)pd[k] + 1));
            packed += pd[k];
        }
        int32_t target = mode == 2 ? (int32_t)((packed + cp - 1) / cp + rng_next(&s) % 8) * 2 : 0;
        dcp__thd_params p = params(cp, part, alignment, target, (dcp_thd_tail)(rng_next(&s) % 2), 0);
        for (int32_t r = 0; r < cp; r++) {
            int bad = compare_one(&p, o, pd, n, r);
            if (bad < 0) break;
            if (bad) {
                dcp_test_fail(__FILE__, __LINE__, "trial %d: cp %d partition %d align %d target %d tail %d rank %d",
                              trial, cp, (int)part, alignment, target, (int)p.tail, r);
                return;
            }
            checked++;
        }
    }
    DCP_CHECK(checked > 3000); /* most generated shapes are accepted */
}
