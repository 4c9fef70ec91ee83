/*
 * test_mover_cpu.c - the CPU token mover (core/mover_cpu.c) on its own:
 * exchange buffers from scratch, staging pieces of samples into per-peer
 * blocks, landing a hand-filled receive buffer and this rank's own pieces
 * (straight from its samples) into the body, reading back; and the landing
 * table both movers run (core/landing.c, dcp__landing_segments).
 *
 * A peer's block holds each kept field's run of that peer's tokens, in field
 * order (tokens, labels, position_ids, loss_mask), starting at the block's
 * offset; the block is rounded up to 8 bytes.  A rank's own block is empty:
 * its own pieces never travel.
 */
#include "dcp_test.h"
#include "../core/mover.h"

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

DCP_TEST(init_read_back_and_release)
{
    _Alignas(64) static unsigned char body[128];
    for (int i = 0; i < 128; i++) body[i] = (unsigned char)i;
    dcp__mover m;
    memset(&m, 0x5A, sizeof m);
    dcp__mover_cpu_init(&m, body, 128);
    DCP_REQUIRE(m.ops != NULL);
    DCP_CHECK(strcmp(m.ops->name, "cpu") == 0);
    DCP_CHECK(m.state == NULL);
    DCP_CHECK(m.host_body == body && m.body == body);
    DCP_CHECK_EQ_INT(m.body_capacity, 128);
    /* the body is the host body: reading back is a no-op that succeeds */
    dcp__error err;
    dcp__error_clear(&err);
    DCP_CHECK_STATUS(m.ops->read_back(&m, NULL, 96, &err), DCP_OK);
    for (int i = 0; i < 128; i++) DCP_CHECK_EQ_INT(body[i], i);
    m.ops->release(&m);
    DCP_CHECK(strcmp(m.ops->name, "cpu") == 0 && m.body == body);
}

DCP_TEST(buffers_come_from_scratch)
{
    _Alignas(64) static unsigned char memory[512];
    dcp__exchange_blocks x;
    memset(&x, 0, sizeof x);
    x.num_peers = 2;
    x.send_total = 88;
    x.recv_total = 184;
    dcp__mover m;
    dcp__mover_cpu_init(&m, NULL, 0);
    dcp__arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    unsigned char *send = NULL, *recv = NULL;
    dcp__error err;
    dcp__error_clear(&err);
    /* 88 + 1 -> 128 bytes, 184 + 1 -> 192 bytes, one after the other */
    DCP_REQUIRE_OK(m.ops->buffers(&m, &x, &a, &send, &recv, &err));
    DCP_CHECK(send == memory && recv == memory + 128);
    DCP_CHECK_EQ_INT(a.used, 320);
    dcp__arena_release(&a);
    /* 128 bytes of scratch: the send buffer fits, the receive buffer does not */
    dcp__arena_init(&a, memory, 128);
    DCP_CHECK_STATUS(m.ops->buffers(&m, &x, &a, &send, &recv, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "staging of 88 + 184 bytes exceeds the workspace");
    dcp__arena_release(&a);
}

#define STAGE_KEPT (DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS | DCP_FIELD_LOSS_MASK) /* 8 + 8 + 4 = 20 bytes */

DCP_TEST(stage_fills_each_peer_block)
{
    /* sample 0: tokens 10+i, position_ids 100+i, loss 0.5i + 0.25 (8 tokens); sample 1: 20+i, 200+i, 10+i (4) */
    int64_t tok0[8], pos0[8], tok1[4], pos1[4];
    float loss0[8], loss1[4];
    for (int i = 0; i < 8; i++) {
        tok0[i] = 10 + i;
        pos0[i] = 100 + i;
        loss0[i] = 0.5f * (float)i + 0.25f;
    }
    for (int i = 0; i < 4; i++) {
        tok1[i] = 20 + i;
        pos1[i] = 200 + i;
        loss1[i] = 10.0f + (float)i;
    }
    dcp_sample s[2];
    memset(s, 0, sizeof s);
    s[0].tokens = tok0, s[0].position_ids = pos0, s[0].loss_mask = loss0, s[0].num_tokens = 8;
    s[1].tokens = tok1, s[1].position_ids = pos1, s[1].loss_mask = loss1, s[1].num_tokens = 4;
    s[0].labels = NULL; /* not kept: never read */
    dcp_step_input in = {s, 2, STAGE_KEPT};
    /*
     * Pieces: sample 1 [2,4) -> peer 1 cursor 0; sample 0 [5,6) -> peer 0 cursor 0; sample 0 [0,1) -> peer 1
     * cursor 2.  Peer 0 gets 1 token (20 bytes -> block of 24 at 0), peer 1 gets 3 (60 -> 64 at 24).
     *   peer 0: tokens [0,8) = 15, position_ids [8,16) = 105, loss [16,20) = 2.75
     *   peer 1: tokens [24,48) = 22, 23, 10; position_ids [48,72) = 202, 203, 100; loss [72,84) = 12, 13, 0.25
     */
    int32_t sample[3] = {1, 0, 0}, peer[3] = {1, 0, 1};
    int64_t src[3] = {2, 5, 0}, cursor[3] = {0, 0, 2}, length[3] = {2, 1, 1};
    dcp__send_pieces p = {3, sample, src, peer, cursor, length};
    const size_t send_offsets[2] = {0, 24}, recv_offsets[2] = {0, 0};
    const int64_t to[2] = {1, 3}, from[2] = {0, 0};
    dcp__exchange_blocks x = {2, send_offsets, recv_offsets, to, from, 88, 0};
    _Alignas(64) static unsigned char send[89], memory[1024];
    memset(send, 0xCD, sizeof send);
    dcp__mover m;
    dcp__mover_cpu_init(&m, NULL, 0);
    dcp__arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(m.ops->stage(&m, NULL, &in, STAGE_KEPT, &p, &x, send, &a, &err));
    dcp__arena_release(&a);
    DCP_CHECK_EQ_INT(get64(send + 0), 15);
    DCP_CHECK_EQ_INT(get64(send + 8), 105);
    DCP_CHECK(getf(send + 16) == 2.75f);
    const int64_t want_tok[3] = {22, 23, 10}, want_pos[3] = {202, 203, 100};
    const float want_loss[3] = {12.0f, 13.0f, 0.25f};
    for (int i = 0; i < 3; i++) {
        DCP_CHECK_EQ_INT(get64(send + 24 + 8 * i), want_tok[i]);
        DCP_CHECK_EQ_INT(get64(send + 48 + 8 * i), want_pos[i]);
        DCP_CHECK(getf(send + 72 + 4 * i) == want_loss[i]);
    }
    /* the rounding bytes of each block and the byte past the total are not written */
    for (int i = 20; i < 24; i++) DCP_CHECK_EQ_INT(send[i], 0xCD);
    for (int i = 84; i < 89; i++) DCP_CHECK_EQ_INT(send[i], 0xCD);

    /* 64 bytes of scratch: the peer bases fit, the piece offsets do not */
    dcp__arena_init(&a, memory, 64);
    DCP_CHECK_STATUS(m.ops->stage(&m, NULL, &in, STAGE_KEPT, &p, &x, send, &a, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "staging scratch too small");
    dcp__arena_release(&a);
}

DCP_TEST(stage_with_nothing_to_send_touches_nothing)
{
    /*
     * A rank whose tokens all stay with it (every piece its own) has no piece to stage: the stage returns at
     * once, takes no scratch (an arena of 0 bytes is enough) and writes no byte of the send buffer.
     */
    int64_t tok[4] = {1, 2, 3, 4}, pos[4] = {5, 6, 7, 8};
    float loss[4] = {1, 1, 1, 1};
    dcp_sample s;
    memset(&s, 0, sizeof s);
    s.tokens = tok, s.position_ids = pos, s.loss_mask = loss, s.num_tokens = 4;
    dcp_step_input in = {&s, 1, STAGE_KEPT};
    dcp__send_pieces p = {0, NULL, NULL, NULL, NULL, NULL};
    const size_t offsets[2] = {0, 0};
    const int64_t none[2] = {0, 0};
    dcp__exchange_blocks x = {2, offsets, offsets, none, none, 0, 0};
    _Alignas(64) static unsigned char send[8], memory[64];
    memset(send, 0xCD, sizeof send);
    dcp__mover m;
    dcp__mover_cpu_init(&m, NULL, 0);
    dcp__arena a;
    dcp__arena_init(&a, memory, 0);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_CHECK_STATUS(m.ops->stage(&m, NULL, &in, STAGE_KEPT, &p, &x, send, &a, &err), DCP_OK);
    DCP_CHECK_EQ_INT(a.used, 0);
    for (int i = 0; i < 8; i++) DCP_CHECK_EQ_INT(send[i], 0xCD);
    dcp__arena_release(&a);
}

#define LAND_KEPT (DCP_FIELD_POSITION_IDS | DCP_FIELD_LOSS_MASK) /* 8 + 4 = 12 bytes a token */

static const dcp__own_pieces no_own = {0, NULL, NULL, NULL, NULL};

DCP_TEST(land_reads_each_field_run_of_each_peer)
{
    /*
     * position_ids and loss_mask only.  Peer 0 sent 2 tokens (24 bytes at 0), peer 1 one (12 -> 16 at 24):
     *   peer 0: position_ids [0,16) = 300, 301; loss [16,24) = 0.5, 0.75
     *   peer 1: position_ids [24,32) = 310;     loss [32,36) = 0.125
     * Pieces: peer 0 cursor 1 -> slot 0; peer 1 cursor 0 -> slot 1; peer 0 cursor 0 -> slot 3; slot 2 of 4 is
     * padding.  Body (1 microbatch, 2 cu entries, 4 tokens): prefix [0,192), position_ids [192,256),
     * loss_mask [256,320), mask [320,384).
     */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 2, 4, LAND_KEPT, &b);
    DCP_REQUIRE_EQ_INT(b.field[2], 192);
    DCP_REQUIRE_EQ_INT(b.field[3], 256);
    DCP_REQUIRE_EQ_INT(b.mask, 320);
    DCP_REQUIRE(b.field[0] == SIZE_MAX && b.field[1] == SIZE_MAX);
    _Alignas(64) static unsigned char recv[40], body[448], memory[1024];
    memset(recv, 0x11, sizeof recv);
    put64(recv + 0, 300);
    put64(recv + 8, 301);
    putf(recv + 16, 0.5f);
    putf(recv + 20, 0.75f);
    put64(recv + 24, 310);
    putf(recv + 32, 0.125f);
    memset(body, 0xAB, sizeof body);
    int32_t sender[3] = {0, 1, 0};
    int64_t cursor[3] = {1, 0, 0}, dst[3] = {0, 1, 3}, length[3] = {1, 1, 1};
    dcp__recv_pieces p = {3, sender, cursor, dst, length};
    const size_t send_offsets[2] = {0, 0}, recv_offsets[2] = {0, 24};
    const int64_t to[2] = {0, 0}, from[2] = {2, 1};
    dcp__exchange_blocks x = {2, send_offsets, recv_offsets, to, from, 0, 40};
    /* no own piece: the samples are not read (their field pointers are NULL) */
    dcp_sample unread;
    memset(&unread, 0, sizeof unread);
    dcp_step_input in = {&unread, 1, LAND_KEPT};
    dcp__mover m;
    dcp__mover_cpu_init(&m, body, sizeof body);
    dcp__arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(m.ops->land(&m, NULL, LAND_KEPT, &p, &x, recv, &no_own, &in, &b, 4, &a, &err));
    dcp__arena_release(&a);
    const int64_t want_pos[4] = {301, 310, 0, 300};
    const float want_loss[4] = {0.75f, 0.125f, 0.0f, 0.5f};
    const uint8_t want_mask[4] = {0, 0, 1, 0};
    for (int t = 0; t < 4; t++) {
        DCP_CHECK_EQ_INT(get64(body + 192 + 8 * t), want_pos[t]);
        DCP_CHECK(getf(body + 256 + 4 * t) == want_loss[t]);
        DCP_CHECK_EQ_INT(body[320 + t], want_mask[t]);
    }
    for (int i = 0; i < 192; i++) DCP_CHECK_EQ_INT(body[i], 0xAB); /* prefix */
    for (int i = 384; i < 448; i++) DCP_CHECK_EQ_INT(body[i], 0xAB); /* past the body */
    /* nothing past slot 4 of any part: position_ids [224,256), loss_mask [272,320), mask [324,384) */
    for (int i = 224; i < 256; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 272; i < 320; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 324; i < 384; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
}


/*
 * One landing of both kinds: 3 peers, this rank is 1 (its own block is empty), position_ids and loss_mask.
 *   receive buffer: peer 0 at 0 sent 2 tokens: position_ids [0,16) = 300, 301; loss [16,24) = 0.5, 0.75
 *                   peer 1 (this rank) at 24: nothing
 *                   peer 2 at 24 sent 1 token: position_ids [24,32) = 320; loss [32,36) = 0.125; rounded to 40
 *   samples:        sample 0: position_ids 100+i, loss 4 + i/4 (6 tokens); sample 1: 200+i, 10+i (4 tokens)
 * Pieces by destination over 8 slots:
 *   own  sample 1 src 2 -> slots 0..1      (202, 203; 12, 13)
 *   recv peer 2 cursor 0 -> slot 2         (320; 0.125)
 *        slot 3: no piece, padding         (0; 0; mask 1)
 *   own  sample 0 src 3 -> slot 4          (103; 4.75)
 *   recv peer 0 cursor 0 -> slots 5..6     (300, 301; 0.5, 0.75)
 *   own  sample 0 src 0 -> slot 7          (100; 4)
 * Body (1 microbatch, 2 cu entries, 8 tokens): prefix [0,192), position_ids [192,256), loss_mask [256,320),
 * mask [320,384).
 */
typedef struct mixed {
    int64_t pos0[6], pos1[4];
    float loss0[6], loss1[4];
    dcp_sample s[2];
    dcp_step_input in;
    _Alignas(64) unsigned char recv[40];
} mixed;

static int32_t mix_sender[2] = {2, 0};
static int64_t mix_cursor[2] = {0, 0}, mix_rdst[2] = {2, 5}, mix_rlen[2] = {1, 2};
static int32_t mix_sample[3] = {1, 0, 0};
static int64_t mix_src[3] = {2, 3, 0}, mix_odst[3] = {0, 4, 7}, mix_olen[3] = {2, 1, 1};
static const size_t mix_send_offsets[3] = {0, 0, 0}, mix_recv_offsets[3] = {0, 24, 24};
static const int64_t mix_to[3] = {0, 0, 0}, mix_from[3] = {2, 0, 1};

static void mixed_fill(mixed *x)
{
    memset(x, 0, sizeof *x);
    for (int i = 0; i < 6; i++) {
        x->pos0[i] = 100 + i;
        x->loss0[i] = 4.0f + 0.25f * (float)i;
    }
    for (int i = 0; i < 4; i++) {
        x->pos1[i] = 200 + i;
        x->loss1[i] = 10.0f + (float)i;
    }
    /* tokens and labels are not kept: NULL, never read */
    x->s[0].position_ids = x->pos0, x->s[0].loss_mask = x->loss0, x->s[0].num_tokens = 6;
    x->s[1].position_ids = x->pos1, x->s[1].loss_mask = x->loss1, x->s[1].num_tokens = 4;
    x->in = (dcp_step_input){x->s, 2, LAND_KEPT};
    memset(x->recv, 0x11, sizeof x->recv);
    put64(x->recv + 0, 300);
    put64(x->recv + 8, 301);
    putf(x->recv + 16, 0.5f);
    putf(x->recv + 20, 0.75f);
    put64(x->recv + 24, 320);
    putf(x->recv + 32, 0.125f);
}

DCP_TEST(land_mixes_received_and_own_pieces_in_one_pass)
{
    dcp__body_layout b;
    dcp__body_layout_compute(1, 2, 8, LAND_KEPT, &b);
    DCP_REQUIRE_EQ_INT(b.field[2], 192);
    DCP_REQUIRE_EQ_INT(b.field[3], 256);
    DCP_REQUIRE_EQ_INT(b.mask, 320);
    DCP_REQUIRE_EQ_INT(b.used, 384);
    static mixed x;
    mixed_fill(&x);
    _Alignas(64) static unsigned char body[448], memory[1024];
    memset(body, 0xAB, sizeof body);
    dcp__recv_pieces r = {2, mix_sender, mix_cursor, mix_rdst, mix_rlen};
    dcp__own_pieces o = {3, mix_sample, mix_src, mix_odst, mix_olen};
    dcp__exchange_blocks blocks = {3, mix_send_offsets, mix_recv_offsets, mix_to, mix_from, 0, 40};
    dcp__mover m;
    dcp__mover_cpu_init(&m, body, sizeof body);
    dcp__arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    dcp__error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(m.ops->land(&m, NULL, LAND_KEPT, &r, &blocks, x.recv, &o, &x.in, &b, 8, &a, &err));
    dcp__arena_release(&a);
    const int64_t want_pos[8] = {202, 203, 320, 0, 103, 300, 301, 100};
    const float want_loss[8] = {12.0f, 13.0f, 0.125f, 0.0f, 4.75f, 0.5f, 0.75f, 4.0f};
    const uint8_t want_mask[8] = {0, 0, 0, 1, 0, 0, 0, 0};
    for (int t = 0; t < 8; t++) {
        DCP_CHECK_EQ_INT(get64(body + 192 + 8 * t), want_pos[t]);
        DCP_CHECK(getf(body + 256 + 4 * t) == want_loss[t]);
        DCP_CHECK_EQ_INT(body[320 + t], want_mask[t]);
    }
    /* the padding slot is all-zero bytes; the prefix, the rest of each part and past the body are untouched */
    DCP_CHECK(memcmp(body + 256 + 4 * 3, "\0\0\0\0", 4) == 0);
    for (int i = 0; i < 192; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 288; i < 320; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    for (int i = 328; i < 448; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
    /* the samples and the receive buffer are only read */
    for (int i = 0; i < 6; i++) DCP_CHECK_EQ_INT(x.pos0[i], 100 + i);
    DCP_CHECK_EQ_INT(get64(x.recv + 24), 320);

    /* own pieces only (nothing received, no receive block): every slot from the samples or padding */
    const int64_t nothing[3] = {0, 0, 0};
    dcp__exchange_blocks quiet = {3, mix_send_offsets, mix_send_offsets, mix_to, nothing, 0, 0};
    dcp__recv_pieces none = {0, NULL, NULL, NULL, NULL};
    memset(body, 0xAB, sizeof body);
    dcp__arena_init(&a, memory, sizeof memory);
    DCP_REQUIRE_OK(m.ops->land(&m, NULL, LAND_KEPT, &none, &quiet, x.recv, &o, &x.in, &b, 8, &a, &err));
    dcp__arena_release(&a);
    const int64_t own_pos[8] = {202, 203, 0, 0, 103, 0, 0, 100};
    const uint8_t own_mask[8] = {0, 0, 1, 1, 0, 1, 1, 0};
    for (int t = 0; t < 8; t++) {
        DCP_CHECK_EQ_INT(get64(body + 192 + 8 * t), own_pos[t]);
        DCP_CHECK_EQ_INT(body[320 + t], own_mask[t]);
    }
    DCP_CHECK(getf(body + 256 + 4 * 4) == 4.75f && getf(body + 256 + 4 * 7) == 4.0f);
}

DCP_TEST(land_refuses_a_bad_piece_before_writing)
{
    dcp__body_layout b;
    dcp__body_layout_compute(1, 2, 8, LAND_KEPT, &b);
    static mixed x;
    mixed_fill(&x);
    _Alignas(64) static unsigned char body[448], memory[1024];
    memset(body, 0xAB, sizeof body);
    dcp__exchange_blocks blocks = {3, mix_send_offsets, mix_recv_offsets, mix_to, mix_from, 0, 40};
    dcp__mover m;
    dcp__mover_cpu_init(&m, body, sizeof body);
    dcp__arena a;
    dcp__error err;
    dcp__error_clear(&err);
    /* own piece 1 moved from slot 4 to slot 6: inside received piece 1 (slots 5..6) */
    int64_t odst[3] = {0, 6, 7};
    dcp__recv_pieces r = {2, mix_sender, mix_cursor, mix_rdst, mix_rlen};
    dcp__own_pieces o = {3, mix_sample, mix_src, odst, mix_olen};
    dcp__arena_init(&a, memory, sizeof memory);
    DCP_CHECK_STATUS(m.ops->land(&m, NULL, LAND_KEPT, &r, &blocks, x.recv, &o, &x.in, &b, 8, &a, &err),
                     DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(err.message, "own piece 1 lands over another or past 8 tokens");
    dcp__arena_release(&a);
    /* received piece 1 two slots long from slot 7 of 8: past the body */
    int64_t rdst[2] = {2, 7};
    dcp__recv_pieces past = {2, mix_sender, mix_cursor, rdst, mix_rlen};
    dcp__own_pieces first = {1, mix_sample, mix_src, mix_odst, mix_olen}; /* slots 0..1 only */
    dcp__arena_init(&a, memory, sizeof memory);
    DCP_CHECK_STATUS(m.ops->land(&m, NULL, LAND_KEPT, &past, &blocks, x.recv, &first, &x.in, &b, 8, &a, &err),
                     DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(err.message, "received piece 1 lands over another or past 8 tokens");
    dcp__arena_release(&a);
    /* a refused table writes no byte of the body */
    for (int i = 0; i < 448; i++) DCP_CHECK_EQ_INT(body[i], 0xAB);
}

/* ------------------------------------------------------------------------ */
/* The landing table (core/landing.c)                                        */
/* ------------------------------------------------------------------------ */

#define SEGS 16

static void check_segments(int64_t n, const int32_t *si, const int64_t *so, const int64_t *d, const int64_t *l,
                           int64_t want_n, const int32_t *want_si, const int64_t *want_so, const int64_t *want_d,
                           const int64_t *want_l, int64_t total, int line)
{
    if (n != want_n) {
        dcp_test_fail(__FILE__, line, "%lld segments, expected %lld", (long long)n, (long long)want_n);
        return;
    }
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        if (si[i] != want_si[i] || so[i] != want_so[i] || d[i] != want_d[i] || l[i] != want_l[i])
            dcp_test_fail(__FILE__, line, "segment %lld = {%d, %lld, %lld, %lld}, expected {%d, %lld, %lld, %lld}",
                          (long long)i, si[i], (long long)so[i], (long long)d[i], (long long)l[i], want_si[i],
                          (long long)want_so[i], (long long)want_d[i], (long long)want_l[i]);
        /* the segments tile [0, total): each starts where the last ended, none empty */
        if (d[i] != at || l[i] <= 0)
            dcp_test_fail(__FILE__, line, "segment %lld at %lld, length %lld: not the next tile after %lld",
                          (long long)i, (long long)d[i], (long long)l[i], (long long)at);
        at = d[i] + l[i];
    }
    if (at != total)
        dcp_test_fail(__FILE__, line, "the segments end at %lld, not %lld", (long long)at, (long long)total);
}

DCP_TEST(landing_segments_tile_the_body_with_fills)
{
    int32_t si[SEGS];
    int64_t so[SEGS], d[SEGS], l[SEGS], bad = 0;
    /*
     * The mixed landing above (3 peers, so sample s is source 3 + s): no leading or tail gap, one fill at
     * slot 3, adjacent pieces with no fill between them.  2 + 3 pieces, 6 segments (the bound is 2*5 + 1).
     */
    dcp__recv_pieces r = {2, mix_sender, mix_cursor, mix_rdst, mix_rlen};
    dcp__own_pieces o = {3, mix_sample, mix_src, mix_odst, mix_olen};
    int64_t n = dcp__landing_segments(&r, &o, 3, 8, si, so, d, l, &bad);
    {
        const int32_t want_si[6] = {4, 2, -1, 3, 0, 3};
        const int64_t want_so[6] = {2, 0, 0, 3, 0, 0}, want_d[6] = {0, 2, 3, 4, 5, 7}, want_l[6] = {2, 1, 1, 1, 2, 1};
        check_segments(n, si, so, d, l, 6, want_si, want_so, want_d, want_l, 8, __LINE__);
    }

    /*
     * A leading gap, a gap between, a tail: 2 peers; received peer 1 cursor 4 -> slots 3..4; own sample 0
     * src 1 -> slot 6 (source 2 + 0); total 10:
     *   fill [0,3), peer 1 [3,5), fill [5,6), sample 0 [6,7), fill [7,10)
     */
    int32_t r2_sender[1] = {1}, o2_sample[1] = {0};
    int64_t r2_cursor[1] = {4}, r2_dst[1] = {3}, r2_len[1] = {2};
    int64_t o2_src[1] = {1}, o2_dst[1] = {6}, o2_len[1] = {1};
    dcp__recv_pieces r2 = {1, r2_sender, r2_cursor, r2_dst, r2_len};
    dcp__own_pieces o2 = {1, o2_sample, o2_src, o2_dst, o2_len};
    n = dcp__landing_segments(&r2, &o2, 2, 10, si, so, d, l, &bad);
    {
        const int32_t want_si[5] = {-1, 1, -1, 2, -1};
        const int64_t want_so[5] = {0, 4, 0, 1, 0}, want_d[5] = {0, 3, 5, 6, 7}, want_l[5] = {3, 2, 1, 1, 3};
        check_segments(n, si, so, d, l, 5, want_si, want_so, want_d, want_l, 10, __LINE__);
    }
    /* own pieces only: the same table with the received piece a fill [0,5) -> fill [0,6), own [6,7), fill [7,10) */
    dcp__recv_pieces none = {0, NULL, NULL, NULL, NULL};
    n = dcp__landing_segments(&none, &o2, 2, 10, si, so, d, l, &bad);
    {
        const int32_t want_si[3] = {-1, 2, -1};
        const int64_t want_so[3] = {0, 1, 0}, want_d[3] = {0, 6, 7}, want_l[3] = {6, 1, 3};
        check_segments(n, si, so, d, l, 3, want_si, want_so, want_d, want_l, 10, __LINE__);
    }
    /* a piece ending exactly at total_tokens is in the body: no tail fill */
    n = dcp__landing_segments(&r2, &o2, 2, 7, si, so, d, l, &bad);
    {
        const int32_t want_si[4] = {-1, 1, -1, 2};
        const int64_t want_so[4] = {0, 4, 0, 1}, want_d[4] = {0, 3, 5, 6}, want_l[4] = {3, 2, 1, 1};
        check_segments(n, si, so, d, l, 4, want_si, want_so, want_d, want_l, 7, __LINE__);
    }
}

DCP_TEST(landing_segments_refuse_overlaps_and_disorder_naming_the_piece)
{
    int32_t si[SEGS];
    int64_t so[SEGS], d[SEGS], l[SEGS], bad;
    int32_t sender[2] = {0, 1}, sample[2] = {0, 0};
    int64_t zero[2] = {0, 0}, one[2] = {1, 1}, two[2] = {2, 2};
    dcp__recv_pieces no_recv = {0, NULL, NULL, NULL, NULL};
    dcp__own_pieces no_own_pieces = {0, NULL, NULL, NULL, NULL};

    /* received pieces out of order: slot 5, then slot 2 (before the end of the last, 6): received 1 */
    int64_t r_back[2] = {5, 2};
    dcp__recv_pieces rb = {2, sender, zero, r_back, one};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&rb, &no_own_pieces, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, 1);
    /* own pieces out of order: slot 4, then slot 1: own 1, named -1 - 1 = -2 */
    int64_t o_back[2] = {4, 1};
    dcp__own_pieces ob = {2, sample, zero, o_back, one};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&no_recv, &ob, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, -2);
    /* received pieces overlapping: [1,3) then [2,4): received 1 */
    int64_t r_over[2] = {1, 2};
    dcp__recv_pieces ro = {2, sender, zero, r_over, two};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&ro, &no_own_pieces, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, 1);
    /* a received piece starting inside an own one: own [0,2) lands first, received [1,2) overlaps: received 0 */
    int64_t r_in[1] = {1}, o_at0[1] = {0};
    dcp__recv_pieces ri = {1, sender, zero, r_in, one};
    dcp__own_pieces o0 = {1, sample, zero, o_at0, two};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&ri, &o0, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, 0);
    /* both at slot 3: the received one is taken first, the own one is refused: own 0 (-1) */
    int64_t at3[1] = {3};
    dcp__recv_pieces r3 = {1, sender, zero, at3, one};
    dcp__own_pieces o3 = {1, sample, zero, at3, one};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&r3, &o3, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, -1);
    /* past total_tokens: own [7,9) of 8 (own 1, after own [0,2)); a negative length (received 0) */
    int64_t o_past[2] = {0, 7};
    dcp__own_pieces op = {2, sample, zero, o_past, two};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&no_recv, &op, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, -2);
    int64_t minus[1] = {-1};
    dcp__recv_pieces rn = {1, sender, zero, at3, minus};
    bad = 99;
    DCP_CHECK_EQ_INT(dcp__landing_segments(&rn, &no_own_pieces, 2, 8, si, so, d, l, &bad), -1);
    DCP_CHECK_EQ_INT(bad, 0);
    /* the same pieces in order are accepted: [1,3) and [3,5) received, [5,7) own -> fill, 3 pieces, tail */
    int64_t r_ok[2] = {1, 3}, o_ok[1] = {5};
    dcp__recv_pieces rk = {2, sender, zero, r_ok, two};
    dcp__own_pieces ok = {1, sample, zero, o_ok, two};
    DCP_CHECK_EQ_INT(dcp__landing_segments(&rk, &ok, 2, 8, si, so, d, l, &bad), 5);
}
