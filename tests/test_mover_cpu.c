/*
 * test_mover_cpu.c - the CPU token mover (core/mover_cpu.c) on its own:
 * exchange buffers from scratch, staging pieces of samples into per-peer
 * blocks, landing a hand-filled receive buffer into the body, reading back.
 *
 * A peer's block holds each kept field's run of that peer's tokens, in field
 * order (tokens, labels, position_ids, loss_mask), starting at the block's
 * offset; the block is rounded up to 8 bytes.
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
    dcp_mover m;
    memset(&m, 0x5A, sizeof m);
    dcp__mover_cpu_init(&m, body, 128);
    DCP_REQUIRE(m.ops != NULL);
    DCP_CHECK(strcmp(m.ops->name, "cpu") == 0);
    DCP_CHECK(m.state == NULL);
    DCP_CHECK(m.host_body == body && m.body == body);
    DCP_CHECK_EQ_INT(m.body_capacity, 128);
    /* the body is the host body: reading back is a no-op that succeeds */
    dcp_error err;
    dcp__error_clear(&err);
    DCP_CHECK_STATUS(m.ops->read_back(&m, NULL, 96, &err), DCP_OK);
    for (int i = 0; i < 128; i++) DCP_CHECK_EQ_INT(body[i], i);
    m.ops->release(&m);
    DCP_CHECK(strcmp(m.ops->name, "cpu") == 0 && m.body == body);
}

DCP_TEST(buffers_come_from_scratch)
{
    _Alignas(64) static unsigned char memory[512];
    dcp_exchange_blocks x;
    memset(&x, 0, sizeof x);
    x.num_peers = 2;
    x.send_total = 88;
    x.recv_total = 184;
    dcp_mover m;
    dcp__mover_cpu_init(&m, NULL, 0);
    dcp_arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    unsigned char *send = NULL, *recv = NULL;
    dcp_error err;
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
    const int32_t sample[3] = {1, 0, 0}, peer[3] = {1, 0, 1};
    const int64_t src[3] = {2, 5, 0}, cursor[3] = {0, 0, 2}, length[3] = {2, 1, 1};
    dcp_send_pieces p = {3, sample, src, peer, cursor, length};
    const size_t send_offsets[2] = {0, 24}, recv_offsets[2] = {0, 0};
    const int64_t to[2] = {1, 3}, from[2] = {0, 0};
    dcp_exchange_blocks x = {2, send_offsets, recv_offsets, to, from, 88, 0};
    _Alignas(64) static unsigned char send[89], memory[1024];
    memset(send, 0xCD, sizeof send);
    dcp_mover m;
    dcp__mover_cpu_init(&m, NULL, 0);
    dcp_arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    dcp_error err;
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

#define LAND_KEPT (DCP_FIELD_POSITION_IDS | DCP_FIELD_LOSS_MASK) /* 8 + 4 = 12 bytes a token */

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
    dcp_body_layout b;
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
    const int32_t sender[3] = {0, 1, 0};
    const int64_t cursor[3] = {1, 0, 0}, dst[3] = {0, 1, 3}, length[3] = {1, 1, 1};
    dcp_recv_pieces p = {3, sender, cursor, dst, length};
    const size_t send_offsets[2] = {0, 0}, recv_offsets[2] = {0, 24};
    const int64_t to[2] = {0, 0}, from[2] = {2, 1};
    dcp_exchange_blocks x = {2, send_offsets, recv_offsets, to, from, 0, 40};
    dcp_mover m;
    dcp__mover_cpu_init(&m, body, sizeof body);
    dcp_arena a;
    dcp__arena_init(&a, memory, sizeof memory);
    dcp_error err;
    dcp__error_clear(&err);
    DCP_REQUIRE_OK(m.ops->land(&m, NULL, LAND_KEPT, &p, &x, recv, &b, 4, &a, &err));
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
}
