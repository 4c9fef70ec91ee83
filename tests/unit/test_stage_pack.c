/*
 * test_stage_pack.c - the pack stage (pipeline/pack.c) on its own:
 * dcp__pack_land through the CPU mover from a receive buffer filled by hand
 * and, for the pieces a rank keeps, straight from its samples (the receive
 * table's own pieces), and the views over a body whose rows are written by
 * hand: dcp__pack_views for one virtual stage given its fields, and
 * dcp__step_views, the driver's composition of strip (which fields each
 * virtual stage shows) and pack over every virtual stage.
 *
 * Body layouts are checked against offsets worked out by hand first: every
 * part of a body starts on a 64-byte boundary (arena rounding), in the order
 * rows, cu_seqlens, cu_seqlens_padded, tokens, labels, position_ids,
 * loss_mask, padding mask, skipping fields not kept.
 */
#include "dcp_test.h"
#include "../pipeline/step.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* pack_land                                                                 */
/* ------------------------------------------------------------------------ */

#define LAND_KEPT (DCP_FIELD_TOKENS | DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK) /* 8 + 8 + 4 = 20 bytes a token */

static void put64(unsigned char *at, int64_t v) { memcpy(at, &v, sizeof v); }
static void putf(unsigned char *at, float v) { memcpy(at, &v, sizeof v); }
static int64_t get64(const unsigned char *at)
{
    int64_t v;
    memcpy(&v, at, sizeof v);
    return v;
}
static float getf(const unsigned char *at)
{
    float v;
    memcpy(&v, at, sizeof v);
    return v;
}

/*
 * Two peers, neither of them this rank (its own pieces take no block); peer 0 sent 1 token, peer 1 sent 3.
 * Each block holds its tokens' fields one run after another in field order, the block rounded to 8 bytes:
 *   peer 0 at 0:  token 100 [0,8), label 200 [8,16), loss 0.5 [16,20), pad [20,24)
 *   peer 1 at 24: tokens 101,102,103 [24,48), labels 201,202,203 [48,72), loss 1, .25, .75 [72,84), pad
 * Pieces (by destination): peer 1 cursor 0 -> slots 0..1; peer 0 cursor 0 -> slot 3; peer 1 cursor 2 ->
 * slot 4.  Slots 2 and 5 of 6 are padding.
 */
static const int32_t land_sender[3] = {1, 0, 1};
static const int64_t land_cursor[3] = {0, 0, 2}, land_dst[3] = {0, 3, 4}, land_length[3] = {2, 1, 1};
static const int64_t land_from[2] = {1, 3};
static const size_t land_recv_offsets[2] = {0, 24}, land_send_offsets[2] = {0, 0};
static const int64_t land_to[2] = {0, 0};

static void fill_recv(unsigned char *recv)
{
    memset(recv, 0x77, 88);
    put64(recv + 0, 100);
    put64(recv + 8, 200);
    putf(recv + 16, 0.5f);
    for (int i = 0; i < 3; i++) {
        put64(recv + 24 + 8 * i, 101 + i);
        put64(recv + 48 + 8 * i, 201 + i);
    }
    putf(recv + 72, 1.0f);
    putf(recv + 76, 0.25f);
    putf(recv + 80, 0.75f);
}

/* No own piece (own_count 0); the landing then never reads the samples. */
static void land_tables(dcp__receive_table *rt, dcp__exchange_blocks *x)
{
    memset(rt, 0, sizeof *rt);
    rt->received.sender = (int32_t *)land_sender;
    rt->received.cursor = (int64_t *)land_cursor;
    rt->received.dst = (int64_t *)land_dst;
    rt->received.length = (int64_t *)land_length;
    rt->received.count = 3;
    memset(x, 0, sizeof *x);
    x->num_peers = 2;
    x->send_offsets = land_send_offsets;
    x->recv_offsets = land_recv_offsets;
    x->tokens_to = land_to;
    x->tokens_from = land_from;
    x->send_total = 0;
    x->recv_total = 88;
}

/* An input whose one sample has no field: landing without own pieces must not read it. */
static dcp_sample unread_sample;
static const dcp_step_input unread_input = {&unread_sample, 1, LAND_KEPT};

DCP_TEST(land_puts_each_field_in_its_slots)
{
    /* 1 microbatch, 3 cu entries, 6 tokens, tokens|labels|loss_mask:
     * rows [0,64) cu [64,128) cu_padded [128,192) tokens [192,256) labels [256,320)
     * loss_mask [320,384) mask [384,448); used 448 */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, 6, LAND_KEPT, &b);
    DCP_REQUIRE_EQ_INT(b.field[0], 192);
    DCP_REQUIRE_EQ_INT(b.field[1], 256);
    DCP_REQUIRE(b.field[2] == SIZE_MAX);
    DCP_REQUIRE_EQ_INT(b.field[3], 320);
    DCP_REQUIRE_EQ_INT(b.mask, 384);
    DCP_REQUIRE_EQ_INT(b.used, 448);

    _Alignas(64) static unsigned char recv[88], body[512], scratch_memory[1024];
    fill_recv(recv);
    memset(body, 0xAB, sizeof body);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, sizeof body);
    dcp__receive_table rt;
    dcp__exchange_blocks x;
    land_tables(&rt, &x);
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, sizeof scratch_memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(dcp__pack_land(&mover, NULL, LAND_KEPT, &rt, &x, recv, &unread_input, &b, 6, &scratch, &err));
    dcp__arena_release(&scratch);

    const int64_t want_tokens[6] = {101, 102, 0, 100, 103, 0};
    const int64_t want_labels[6] = {201, 202, 0, 200, 203, 0};
    const float want_loss[6] = {1.0f, 0.25f, 0.0f, 0.5f, 0.75f, 0.0f};
    const uint8_t want_mask[6] = {0, 0, 1, 0, 0, 1};
    for (int t = 0; t < 6; t++) {
        DCP_CHECK_EQ_INT(get64(body + 192 + 8 * t), want_tokens[t]);
        DCP_CHECK_EQ_INT(get64(body + 256 + 8 * t), want_labels[t]);
        DCP_CHECK(getf(body + 320 + 4 * t) == want_loss[t]);
        DCP_CHECK_EQ_INT(body[384 + t], want_mask[t]);
    }
    /* padding loss_mask slots are all-zero bytes (not merely == 0.0f, which -0.0f would pass) */
    DCP_CHECK(memcmp(body + 320 + 4 * 2, "\0\0\0\0", 4) == 0);
    DCP_CHECK(memcmp(body + 320 + 4 * 5, "\0\0\0\0", 4) == 0);
    /* the prefix (the reroute stage's rows and cu arrays) and everything past the body stay as they were */
    for (int i = 0; i < 192; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 448; i < 512; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    /* and so does every part past slot 6: tokens [240,256), labels [304,320), loss_mask [344,384), mask [390,448) */
    for (int i = 240; i < 256; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 304; i < 320; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 344; i < 384; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 390; i < 448; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
}

DCP_TEST(land_without_fields_writes_only_the_mask)
{
    /* a middle PP stage keeps nothing: rows 0, cu 64, cu_padded 128, mask 192, used 256 */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, 6, 0, &b);
    DCP_REQUIRE_EQ_INT(b.mask, 192);
    DCP_REQUIRE_EQ_INT(b.used, 256);
    _Alignas(64) static unsigned char body[320], scratch_memory[1024];
    memset(body, 0xAB, sizeof body);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, sizeof body);
    dcp__receive_table rt;
    dcp__exchange_blocks x;
    land_tables(&rt, &x);
    const int64_t none[2] = {0, 0};
    x.tokens_from = none; /* nothing moved */
    x.recv_total = 0;
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, sizeof scratch_memory);
    dcp__error err;
    unsigned char recv[1] = {0};
    const dcp_step_input no_fields = {&unread_sample, 1, 0};
    DCP_REQUIRE_OK(dcp__pack_land(&mover, NULL, 0, &rt, &x, recv, &no_fields, &b, 6, &scratch, &err));
    dcp__arena_release(&scratch);
    const uint8_t want_mask[6] = {0, 0, 1, 0, 0, 1};
    for (int t = 0; t < 6; t++) DCP_CHECK_EQ_INT(body[192 + t], want_mask[t]);
    for (int i = 0; i < 192; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 198; i < 320; i++) DCP_CHECK_EQ_INT(body[i], 0xAB); /* the mask past slot 6, and past the body */
}

DCP_TEST(land_refuses_too_little_scratch)
{
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, 6, LAND_KEPT, &b);
    _Alignas(64) static unsigned char recv[88], body[512], scratch_memory[64];
    fill_recv(recv);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, sizeof body);
    dcp__receive_table rt;
    dcp__exchange_blocks x;
    land_tables(&rt, &x);
    /* 64 bytes: the table holds 2 * (3 received + 0 own) + 1 = 7 segments; its src_index (7 * 4 = 28 bytes, one
     * 64-byte line) fits, its src_offset (7 * 8 = 56 bytes, the next line) does not */
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, sizeof scratch_memory);
    DCP_REQUIRE_EQ_INT(scratch.capacity, 64);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_CHECK_STATUS(dcp__pack_land(&mover, NULL, LAND_KEPT, &rt, &x, recv, &unread_input, &b, 6, &scratch, &err),
                     DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "landing scratch too small");
    dcp__arena_release(&scratch);
}

/*
 * The same received pieces over 8 slots, with two own pieces in the receive table, landed from this rank's
 * samples in the same pass:
 *   sample 0: tokens 500+i, labels 600+i, loss 2 + i/4 (4 tokens); sample 1: 510+i, 610+i, 3 + i/2 (4)
 *   own sample 1 src 1 -> slot 2 (the slot that was padding above); own sample 0 src 0 -> slots 6..7
 * So slots 0..1 peer 1, 2 sample 1, 3 peer 0, 4 peer 1, 5 padding, 6..7 sample 0.  8 tokens take the same
 * parts as 6: tokens [192,256) labels [256,320) loss_mask [320,384) mask [384,448).
 */
static const int32_t own_sample[2] = {1, 0};
static const int64_t own_src[2] = {1, 0}, own_dst[2] = {2, 6}, own_length[2] = {1, 2};

typedef struct own_input {
    int64_t tok[2][4], lab[2][4];
    float loss[2][4];
    dcp_sample s[2];
    dcp_step_input in;
} own_input;

static void own_setup(own_input *o, dcp__receive_table *rt, const int64_t *dst)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < 4; i++) {
        o->tok[0][i] = 500 + i, o->lab[0][i] = 600 + i, o->loss[0][i] = 2.0f + 0.25f * (float)i;
        o->tok[1][i] = 510 + i, o->lab[1][i] = 610 + i, o->loss[1][i] = 3.0f + 0.5f * (float)i;
    }
    for (int k = 0; k < 2; k++) {
        o->s[k].tokens = o->tok[k], o->s[k].labels = o->lab[k], o->s[k].loss_mask = o->loss[k];
        o->s[k].num_tokens = 4; /* position_ids not kept: NULL, never read */
    }
    o->in = (dcp_step_input){o->s, 2, LAND_KEPT};
    rt->own.sample = (int32_t *)own_sample;
    rt->own.src = (int64_t *)own_src;
    rt->own.dst = (int64_t *)dst;
    rt->own.length = (int64_t *)own_length;
    rt->own.count = 2;
    rt->own_tokens = 3;
}

DCP_TEST(land_takes_own_pieces_from_the_samples_beside_received_ones)
{
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, 8, LAND_KEPT, &b);
    DCP_REQUIRE_EQ_INT(b.field[0], 192);
    DCP_REQUIRE_EQ_INT(b.field[1], 256);
    DCP_REQUIRE_EQ_INT(b.field[3], 320);
    DCP_REQUIRE_EQ_INT(b.mask, 384);
    DCP_REQUIRE_EQ_INT(b.used, 448);
    _Alignas(64) static unsigned char recv[88], body[512], scratch_memory[2048];
    static own_input o;
    fill_recv(recv);
    memset(body, 0xAB, sizeof body);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, sizeof body);
    dcp__receive_table rt;
    dcp__exchange_blocks x;
    land_tables(&rt, &x);
    own_setup(&o, &rt, own_dst);
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, sizeof scratch_memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(dcp__pack_land(&mover, NULL, LAND_KEPT, &rt, &x, recv, &o.in, &b, 8, &scratch, &err));
    dcp__arena_release(&scratch);
    const int64_t want_tokens[8] = {101, 102, 511, 100, 103, 0, 500, 501};
    const int64_t want_labels[8] = {201, 202, 611, 200, 203, 0, 600, 601};
    const float want_loss[8] = {1.0f, 0.25f, 3.5f, 0.5f, 0.75f, 0.0f, 2.0f, 2.25f};
    const uint8_t want_mask[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    for (int t = 0; t < 8; t++) {
        DCP_CHECK_EQ_INT(get64(body + 192 + 8 * t), want_tokens[t]);
        DCP_CHECK_EQ_INT(get64(body + 256 + 8 * t), want_labels[t]);
        DCP_CHECK(getf(body + 320 + 4 * t) == want_loss[t]);
        DCP_CHECK_EQ_INT(body[384 + t], want_mask[t]);
    }
    DCP_CHECK(memcmp(body + 320 + 4 * 5, "\0\0\0\0", 4) == 0);
    for (int i = 0; i < 192; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 352; i < 384; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 392; i < 512; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
}

DCP_TEST(land_refuses_an_own_piece_over_a_received_one)
{
    /*
     * Own piece 1 at slot 4 instead of 6: received piece 2 (peer 1 cursor 2) lands there too.  By destination:
     * received 0 [0,2), own 0 [2,3), received 1 [3,4), then received 2 and own 1 both at 4: the received one
     * first (a tie), so own piece 1 starts before the end of the last, 5, and is named.  Nothing is written.
     */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, 8, LAND_KEPT, &b);
    _Alignas(64) static unsigned char recv[88], body[512], scratch_memory[2048];
    static own_input o;
    fill_recv(recv);
    memset(body, 0xAB, sizeof body);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, sizeof body);
    dcp__receive_table rt;
    dcp__exchange_blocks x;
    land_tables(&rt, &x);
    const int64_t over[2] = {2, 4};
    own_setup(&o, &rt, over);
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, sizeof scratch_memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_CHECK_STATUS(dcp__pack_land(&mover, NULL, LAND_KEPT, &rt, &x, recv, &o.in, &b, 8, &scratch, &err),
                     DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(err.message, "own piece 1 lands over another or past 8 tokens");
    dcp__arena_release(&scratch);
    for (int i = 0; i < 512; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
}

/* ------------------------------------------------------------------------ */
/* pack_views                                                                */
/* ------------------------------------------------------------------------ */

static void put_row(unsigned char *host, int m, int64_t token_offset, int64_t num_tokens, int64_t cu_offset,
                    int64_t num_cu, int64_t max_seqlen, int64_t local_cp, int64_t cp_rank, int64_t sequences)
{
    dcp__body_row row = {token_offset, num_tokens, cu_offset, num_cu, max_seqlen, local_cp, cp_rank, sequences};
    memcpy(host + (size_t)m * sizeof row, &row, sizeof row);
}

#define SAME(p, q) ((const void *)(p) == (const void *)(q))

static void check_meta(const dcp_microbatch *v, int64_t tokens, int32_t cu, int32_t seqs, int32_t longest,
                       int32_t local_cp, int32_t cp_rank, int line)
{
    if (v->num_tokens != tokens || v->num_cu_seqlens != cu || v->num_sequences != seqs || v->max_seqlen != longest ||
        v->local_cp_size != local_cp || v->cp_rank != cp_rank)
        dcp_test_fail(__FILE__, line, "view {%lld, %d, %d, %d, %d, %d}, expected {%lld, %d, %d, %d, %d, %d}",
                      (long long)v->num_tokens, v->num_cu_seqlens, v->num_sequences, v->max_seqlen, v->local_cp_size,
                      v->cp_rank, (long long)tokens, cu, seqs, longest, local_cp, cp_rank);
}

DCP_TEST(views_of_pp2_vpp2_first_rank)
{
    dcp_config c;
    dcp_config_default(&c);
    c.pipeline_parallel_size = 2;
    c.virtual_pipeline_size = 2;
    const uint32_t kept = DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS; /* PP rank 0 keeps the inputs */
    /*
     * 2 microbatches, 5 cu entries, 6 tokens: rows [0,128) cu [128,192) cu_padded [192,256)
     * tokens [256,320) position_ids [320,384) mask [384,448)
     */
    dcp__body_layout b;
    dcp__body_layout_compute(2, 5, 6, kept, &b);
    DCP_REQUIRE_EQ_INT(b.cu, 128);
    DCP_REQUIRE_EQ_INT(b.cu_padded, 192);
    DCP_REQUIRE_EQ_INT(b.field[0], 256);
    DCP_REQUIRE_EQ_INT(b.field[2], 320);
    DCP_REQUIRE_EQ_INT(b.mask, 384);
    _Alignas(64) static unsigned char host[448], data[448];
    memset(host, 0, sizeof host);
    /* mb 0: slots [0,4), cu [0,3), 2 sequences on CP rank 1 of 2; mb 1: slots [4,6), cu [3,5), CP rank 3 of 4 */
    put_row(host, 0, 0, 4, 0, 3, 4, 2, 1, 2);
    put_row(host, 1, 4, 2, 3, 2, 8, 4, 3, 1);
    dcp_microbatch views[5];
    memset(views, 0xEE, sizeof views);
    const unsigned char *d = data, *h = host;
    dcp__step_views(&c, 0, 0, 2, kept, &b, host, data, views);

    /* v0 (first stage): tokens and position_ids; mb 1 starts 4 tokens (32 bytes, 4 mask bytes) and 3 cu
     * entries (12 bytes) in */
    DCP_CHECK(SAME(views[0].tokens, d + 256) && SAME(views[0].position_ids, d + 320));
    DCP_CHECK(views[0].labels == NULL && views[0].loss_mask == NULL);
    DCP_CHECK(SAME(views[0].padding_mask, d + 384));
    DCP_CHECK(SAME(views[0].cu_seqlens, d + 128) && SAME(views[0].cu_seqlens_padded, d + 192));
    DCP_CHECK(SAME(views[0].cu_seqlens_host, h + 128) && SAME(views[0].cu_seqlens_padded_host, h + 192));
    check_meta(&views[0], 4, 3, 2, 4, 2, 1, __LINE__);
    DCP_CHECK(SAME(views[1].tokens, d + 288) && SAME(views[1].position_ids, d + 352));
    DCP_CHECK(views[1].labels == NULL && views[1].loss_mask == NULL);
    DCP_CHECK(SAME(views[1].padding_mask, d + 388));
    DCP_CHECK(SAME(views[1].cu_seqlens, d + 140) && SAME(views[1].cu_seqlens_padded, d + 204));
    DCP_CHECK(SAME(views[1].cu_seqlens_host, h + 140) && SAME(views[1].cu_seqlens_padded_host, h + 204));
    check_meta(&views[1], 2, 2, 1, 8, 4, 3, __LINE__);
    /* v1 (neither first nor last): no field, the same mask, cu arrays and shape (views[2], views[3]) */
    for (int m = 0; m < 2; m++) {
        const dcp_microbatch *v = &views[2 + m];
        DCP_CHECK(v->tokens == NULL && v->labels == NULL && v->position_ids == NULL && v->loss_mask == NULL);
        DCP_CHECK(SAME(v->padding_mask, m == 0 ? d + 384 : d + 388));
        DCP_CHECK(SAME(v->cu_seqlens, m == 0 ? d + 128 : d + 140));
        DCP_CHECK(SAME(v->cu_seqlens_padded_host, m == 0 ? h + 192 : h + 204));
    }
    check_meta(&views[2], 4, 3, 2, 4, 2, 1, __LINE__);
    check_meta(&views[3], 2, 2, 1, 8, 4, 3, __LINE__);
    /* nothing past vpp * microbatches views */
    unsigned char untouched[sizeof views[4]];
    memset(untouched, 0xEE, sizeof untouched);
    DCP_CHECK(memcmp(&views[4], untouched, sizeof untouched) == 0);
}

DCP_TEST(views_of_pp2_vpp2_last_rank)
{
    dcp_config c;
    dcp_config_default(&c);
    c.pipeline_parallel_size = 2;
    c.virtual_pipeline_size = 2;
    const uint32_t kept = DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK; /* PP rank 1 keeps the targets */
    /*
     * 2 microbatches, 5 cu entries, 6 tokens: rows [0,128) cu [128,192) cu_padded [192,256)
     * labels [256,320) loss_mask [320,384) mask [384,448)
     */
    dcp__body_layout b;
    dcp__body_layout_compute(2, 5, 6, kept, &b);
    DCP_REQUIRE_EQ_INT(b.field[1], 256);
    DCP_REQUIRE_EQ_INT(b.field[3], 320);
    DCP_REQUIRE_EQ_INT(b.mask, 384);
    _Alignas(64) static unsigned char host[448], data[448];
    memset(host, 0, sizeof host);
    put_row(host, 0, 0, 4, 0, 3, 4, 2, 1, 2);
    put_row(host, 1, 4, 2, 3, 2, 8, 4, 3, 1);
    dcp_microbatch views[4];
    memset(views, 0xEE, sizeof views);
    const unsigned char *d = data;
    dcp__step_views(&c, 1, 0, 2, kept, &b, host, data, views);
    /* v0 (views[0], [1]): nothing; v1 (last, views[2], [3]): labels and loss_mask; mb 1 is 4 tokens in:
     * labels + 4*8 = 288, loss_mask + 4*4 = 336, mask + 4 = 388 */
    for (int m = 0; m < 2; m++)
        DCP_CHECK(views[m].tokens == NULL && views[m].labels == NULL && views[m].position_ids == NULL &&
                  views[m].loss_mask == NULL);
    DCP_CHECK(SAME(views[2].labels, d + 256) && SAME(views[2].loss_mask, d + 320));
    DCP_CHECK(SAME(views[3].labels, d + 288) && SAME(views[3].loss_mask, d + 336));
    DCP_CHECK(views[2].tokens == NULL && views[2].position_ids == NULL);
    DCP_CHECK(views[3].tokens == NULL && views[3].position_ids == NULL);
    DCP_CHECK(SAME(views[3].padding_mask, d + 388));
    check_meta(&views[3], 2, 2, 1, 8, 4, 3, __LINE__);
}

DCP_TEST(views_of_an_mtp_virtual_stage)
{
    dcp_config c;
    dcp_config_default(&c);
    c.pipeline_parallel_size = 1;
    c.virtual_pipeline_size = 2;
    /* 1 microbatch, 2 cu entries, 3 tokens, all fields: rows [0,64) cu [64,128) cu_padded [128,192)
     * tokens [192,256) labels [256,320) position_ids [320,384) loss_mask [384,448) mask [448,512) */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 2, 3, DCP_FIELD_ALL, &b);
    DCP_REQUIRE_EQ_INT(b.field[0], 192);
    DCP_REQUIRE_EQ_INT(b.field[1], 256);
    DCP_REQUIRE_EQ_INT(b.field[2], 320);
    DCP_REQUIRE_EQ_INT(b.field[3], 384);
    DCP_REQUIRE_EQ_INT(b.mask, 448);
    _Alignas(64) static unsigned char host[512];
    memset(host, 0, sizeof host);
    put_row(host, 0, 0, 3, 0, 2, 3, 1, 0, 1);
    dcp_microbatch views[2];
    memset(views, 0xEE, sizeof views);
    const unsigned char *h = host;
    /* the CPU body: data == host */
    dcp__step_views(&c, 0, 0x2, 1, DCP_FIELD_ALL, &b, host, host, views);
    /* v0: first stage, inputs only */
    DCP_CHECK(SAME(views[0].tokens, h + 192) && SAME(views[0].position_ids, h + 320));
    DCP_CHECK(views[0].labels == NULL && views[0].loss_mask == NULL);
    /* v1: last stage and MTP: all four */
    DCP_CHECK(SAME(views[1].tokens, h + 192) && SAME(views[1].labels, h + 256));
    DCP_CHECK(SAME(views[1].position_ids, h + 320) && SAME(views[1].loss_mask, h + 384));
    for (int v = 0; v < 2; v++) {
        DCP_CHECK(SAME(views[v].padding_mask, h + 448));
        DCP_CHECK(SAME(views[v].cu_seqlens, h + 64) && SAME(views[v].cu_seqlens_host, h + 64));
        DCP_CHECK(SAME(views[v].cu_seqlens_padded, h + 128) && SAME(views[v].cu_seqlens_padded_host, h + 128));
        check_meta(&views[v], 3, 2, 1, 3, 1, 0, __LINE__);
    }
    /* with MTP on v0 instead: v0 all four, v1 (last) the targets */
    memset(views, 0xEE, sizeof views);
    dcp__step_views(&c, 0, 0x1, 1, DCP_FIELD_ALL, &b, host, host, views);
    DCP_CHECK(SAME(views[0].labels, h + 256) && SAME(views[0].loss_mask, h + 384));
    DCP_CHECK(SAME(views[0].tokens, h + 192) && SAME(views[0].position_ids, h + 320));
    DCP_CHECK(views[1].tokens == NULL && views[1].position_ids == NULL);
    DCP_CHECK(SAME(views[1].labels, h + 256) && SAME(views[1].loss_mask, h + 384));
}

DCP_TEST(pack_views_shows_exactly_the_fields_it_is_given)
{
    /* one virtual stage's list: only the fields in `shown`, whatever the body keeps; nothing past [microbatches] */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 2, 3, DCP_FIELD_ALL, &b);
    _Alignas(64) static unsigned char host[512];
    memset(host, 0, sizeof host);
    put_row(host, 0, 0, 3, 0, 2, 3, 1, 0, 1);
    const unsigned char *h = host;
    dcp_microbatch views[2];
    memset(views, 0xEE, sizeof views);
    dcp__pack_views(1, DCP_FIELD_LABELS, &b, host, host, views);
    DCP_CHECK(SAME(views[0].labels, h + b.field[1]));
    DCP_CHECK(views[0].tokens == NULL && views[0].position_ids == NULL && views[0].loss_mask == NULL);
    DCP_CHECK(SAME(views[0].padding_mask, h + b.mask) && SAME(views[0].cu_seqlens, h + b.cu));
    check_meta(&views[0], 3, 2, 1, 3, 1, 0, __LINE__);
    unsigned char untouched[sizeof views[1]];
    memset(untouched, 0xEE, sizeof untouched);
    DCP_CHECK(memcmp(&views[1], untouched, sizeof untouched) == 0);
    /* no field at all: the shape and the mask still */
    dcp__pack_views(1, 0, &b, host, host, views);
    DCP_CHECK(views[0].tokens == NULL && views[0].labels == NULL && views[0].position_ids == NULL &&
              views[0].loss_mask == NULL);
    check_meta(&views[0], 3, 2, 1, 3, 1, 0, __LINE__);
}
