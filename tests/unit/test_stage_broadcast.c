/*
 * test_stage_broadcast.c - the broadcast stage (pipeline/broadcast.c) on its
 * own, over 2 in-process TP ranks run as threads: TP rank 0 holds the data,
 * rank 1 receives the header and the body.  The mover is a recording one, so
 * the test sees whether (and with how many prefix bytes) the stage asks it to
 * read the body back.
 */
#include "dcp_test.h"
#include "../pipeline/step.h"

#include <stdlib.h>

#define BODY 1024

typedef struct record {
    int read_backs;
    size_t prefix;
    dcp_status read_back_status;
    int other_calls;
} record;

static dcp_status rec_buffers(dcp__mover *m, const dcp__exchange_blocks *x, dcp__arena *s, unsigned char **a,
                              unsigned char **b, dcp__error *e)
{
    (void)x, (void)s, (void)a, (void)b, (void)e;
    ((record *)m->state)->other_calls++;
    return DCP_ERR_UNSUPPORTED;
}
static dcp_status rec_stage(dcp__mover *m, void *st, const dcp_step_input *in, uint32_t k, const dcp__send_pieces *p,
                            const dcp__exchange_blocks *x, unsigned char *s, dcp__arena *a, dcp__error *e)
{
    (void)st, (void)in, (void)k, (void)p, (void)x, (void)s, (void)a, (void)e;
    ((record *)m->state)->other_calls++;
    return DCP_ERR_UNSUPPORTED;
}
static dcp_status rec_land(dcp__mover *m, void *st, uint32_t k, const dcp__recv_pieces *p, const dcp__exchange_blocks *x,
                           const unsigned char *r, const dcp__own_pieces *o, const dcp_step_input *in,
                           const dcp__body_layout *b, int64_t t, dcp__arena *a, dcp__error *e)
{
    (void)st, (void)k, (void)p, (void)x, (void)r, (void)o, (void)in, (void)b, (void)t, (void)a, (void)e;
    ((record *)m->state)->other_calls++;
    return DCP_ERR_UNSUPPORTED;
}
static dcp_status rec_read_back(dcp__mover *m, void *stream, size_t prefix_bytes, dcp__error *err)
{
    (void)stream;
    record *r = m->state;
    r->read_backs++;
    r->prefix = prefix_bytes;
    if (r->read_back_status != DCP_OK) return dcp__fail(err, r->read_back_status, "read back failed");
    return DCP_OK;
}
static void rec_release(dcp__mover *m) { ((record *)m->state)->other_calls++; }
static const dcp__mover_ops record_ops = {"record", rec_buffers, rec_stage, rec_land, NULL, rec_read_back, rec_release};

typedef struct bcast {
    dcp_inproc_world *world;
    dcp_inproc_fault fault[2];
    int32_t max_microbatches[2];
    size_t capacity[2];
    dcp__broadcast_header header[2];
    _Alignas(64) unsigned char body[2][BODY];
    record rec[2];
    dcp_status status[2];
    char message[2][DCP_ERROR_MESSAGE_SIZE];
    dcp_step_stats stats[2];
    dcp__body_layout layout[2];
} bcast;

static void bcast_rank(int32_t rank, void *arg)
{
    bcast *t = arg;
    dcp_comm tp;
    if ((t->status[rank] = dcp_inproc_comm(t->world, rank, &tp)) != DCP_OK) return;
    dcp__mover mover = {&record_ops, &t->rec[rank], t->body[rank], t->capacity[rank], t->body[rank]};
    memset(&t->stats[rank], 0, sizeof t->stats[rank]);
    dcp__error err;
    dcp__error_clear(&err);
    if (t->fault[rank] != DCP_FAULT_NONE) dcp_inproc_inject_fault(t->world, rank, t->fault[rank]);
    dcp__body_layout b; /* rank 0's own layout, of its header; rank 1's is filled from the header it receives */
    dcp__body_layout_compute(t->header[rank].microbatches, t->header[rank].cu, t->header[rank].tokens,
                             (uint32_t)t->header[rank].kept, &b);
    t->status[rank] = dcp__broadcast(&tp, rank == 0, &t->header[rank], &b, &mover, t->max_microbatches[rank], NULL,
                                     &t->stats[rank], &err);
    t->layout[rank] = b;
    snprintf(t->message[rank], sizeof t->message[rank], "%s", err.message);
}

/*
 * Rank 0's header for 1 microbatch, 2 cu entries, 3 tokens, all fields: the body is rows 64 + cu 64 +
 * cu_padded 64 (prefix 192) + 4 fields of 64 + mask 64 = 512 bytes.  Its body bytes are a pattern, past
 * 512 a different one; rank 1 starts from zeros and a zero header.
 */
static void bcast_reset(bcast *t, dcp_status rank0_status)
{
    memset(t->fault, 0, sizeof t->fault);
    memset(t->rec, 0, sizeof t->rec);
    for (int r = 0; r < 2; r++) {
        t->max_microbatches[r] = 4;
        t->capacity[r] = BODY;
    }
    dcp__broadcast_header h = {rank0_status, 1, 2, 3, DCP_FIELD_ALL, 1, 8, 64, 512};
    t->header[0] = h;
    memset(&t->header[1], 0, sizeof t->header[1]);
    for (int i = 0; i < BODY; i++) t->body[0][i] = (unsigned char)(i < 512 ? i * 7 + 1 : 0x55);
    memset(t->body[1], 0, BODY);
}

static int bcast_run(bcast *t) { return dcp_inproc_run(2, bcast_rank, t) == DCP_OK; }

static int body_is_zero(const unsigned char *body)
{
    for (int i = 0; i < BODY; i++)
        if (body[i]) return 0;
    return 1;
}

/* The success case: both ranks OK, rank 1 holds rank 0's header and first 512 body bytes. */
static void check_delivered(const bcast *t, int line)
{
    for (int r = 0; r < 2; r++) {
        if (t->status[r] != DCP_OK)
            dcp_test_fail(__FILE__, line, "rank %d: %s: %s", r, dcp_status_str(t->status[r]), t->message[r]);
        if (t->stats[r].collectives != 2 || t->stats[r].broadcast_bytes != (int64_t)sizeof(dcp__broadcast_header) + 512)
            dcp_test_fail(__FILE__, line, "rank %d: %d collectives, %lld broadcast bytes", r, t->stats[r].collectives,
                          (long long)t->stats[r].broadcast_bytes);
        if (t->rec[r].other_calls) dcp_test_fail(__FILE__, line, "rank %d: the mover was asked to do more", r);
    }
    if (memcmp(&t->header[1], &t->header[0], sizeof t->header[0]) != 0)
        dcp_test_fail(__FILE__, line, "rank 1's header differs from rank 0's");
    if (memcmp(t->body[1], t->body[0], 512) != 0) dcp_test_fail(__FILE__, line, "rank 1's body differs");
    for (int i = 512; i < BODY; i++)
        if (t->body[1][i] != 0) {
            dcp_test_fail(__FILE__, line, "rank 1's body written past 512 bytes (at %d)", i);
            break;
        }
    /* rank 1 lays out its body from the header it received: rank 0's layout */
    if (memcmp(&t->layout[1], &t->layout[0], sizeof t->layout[0]) != 0 || t->layout[1].used != 512)
        dcp_test_fail(__FILE__, line, "rank 1's body layout (%zu bytes) differs from rank 0's (%zu)", t->layout[1].used,
                      t->layout[0].used);
    /* rank 1 reads back the prefix (rows + both cu arrays = 192 bytes); rank 0 does not */
    if (t->rec[1].read_backs != 1 || t->rec[1].prefix != 192 || t->rec[0].read_backs != 0)
        dcp_test_fail(__FILE__, line, "read backs: rank 0 %d, rank 1 %d of %zu bytes", t->rec[0].read_backs,
                      t->rec[1].read_backs, t->rec[1].prefix);
}

DCP_TEST(header_and_body_arrive)
{
    bcast *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(dcp_inproc_world_create(2, 30000, &t->world) == DCP_OK);
    bcast_reset(t, DCP_OK);
    DCP_REQUIRE(bcast_run(t));
    check_delivered(t, __LINE__);
    DCP_CHECK_EQ_INT(t->header[1].sum, 8);
    DCP_CHECK_EQ_INT(t->header[1].squared_sum, 64);
    DCP_CHECK_EQ_INT(t->header[1].body_bytes, 512);
    /* rank 0's own body is left as it was */
    for (int i = 0; i < BODY; i++) DCP_CHECK_EQ_INT(t->body[0][i], (unsigned char)(i < 512 ? i * 7 + 1 : 0x55));
    dcp_inproc_world_destroy(t->world);
    free(t);
}

DCP_TEST(header_past_capacity_is_refused)
{
    bcast *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(dcp_inproc_world_create(2, 30000, &t->world) == DCP_OK);

    /* rank 1 holds 256 bytes, the header describes 512: refused, nothing written on rank 1.  Rank 1 then
     * joins the body broadcast with 0 bytes (it must not wait for, nor take, what it cannot hold), so the
     * broadcast's sizes disagree and rank 0 fails too */
    bcast_reset(t, DCP_OK);
    t->capacity[1] = 256;
    DCP_REQUIRE(bcast_run(t));
    DCP_CHECK_STATUS(t->status[1], DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(t->message[1], "TP header describes 512 bytes, capacity 256");
    DCP_CHECK(body_is_zero(t->body[1]));
    DCP_CHECK_EQ_INT(t->rec[1].read_backs, 0);
    DCP_CHECK_STATUS(t->status[0], DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(t->message[0], "TP broadcast of the outputs failed");
    DCP_CHECK_EQ_INT(t->stats[0].collectives, 2);
    DCP_CHECK_EQ_INT(t->stats[1].collectives, 2);

    /* more microbatches than rank 1 holds views for */
    bcast_reset(t, DCP_OK);
    t->max_microbatches[1] = 0;
    DCP_REQUIRE(bcast_run(t));
    DCP_CHECK_STATUS(t->status[1], DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(t->message[1], "TP header describes 512 bytes, capacity 1024");
    DCP_CHECK_EQ_INT(t->rec[1].read_backs, 0);

    /* body bytes that disagree with the layout the header's four numbers give (512) */
    bcast_reset(t, DCP_OK);
    t->header[0].body_bytes = 500;
    DCP_REQUIRE(bcast_run(t));
    DCP_CHECK_STATUS(t->status[1], DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(t->message[1], "TP header describes 500 bytes, capacity 1024");
    DCP_CHECK_EQ_INT(t->rec[1].read_backs, 0);

    /* the pair is still in step: a good broadcast goes through */
    bcast_reset(t, DCP_OK);
    DCP_REQUIRE(bcast_run(t));
    check_delivered(t, __LINE__);
    dcp_inproc_world_destroy(t->world);
    free(t);
}

DCP_TEST(rank0_failure_propagates_without_a_body)
{
    bcast *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(dcp_inproc_world_create(2, 30000, &t->world) == DCP_OK);
    bcast_reset(t, DCP_ERR_BAD_LENGTH);
    DCP_REQUIRE(bcast_run(t));
    DCP_CHECK_STATUS(t->status[0], DCP_ERR_BAD_LENGTH);
    DCP_CHECK_STATUS(t->status[1], DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(t->message[1], "TP rank 0 failed with DCP_ERR_BAD_LENGTH");
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_EQ_INT(t->stats[r].collectives, 1); /* the header only */
        DCP_CHECK_EQ_INT(t->stats[r].broadcast_bytes, 0);
        DCP_CHECK_EQ_INT(t->rec[r].read_backs, 0);
    }
    DCP_CHECK(body_is_zero(t->body[1]));
    DCP_CHECK_EQ_INT(t->header[1].status, DCP_ERR_BAD_LENGTH);
    /* both skipped the body alike: the next broadcast pairs up */
    bcast_reset(t, DCP_OK);
    DCP_REQUIRE(bcast_run(t));
    check_delivered(t, __LINE__);
    dcp_inproc_world_destroy(t->world);
    free(t);
}

DCP_TEST(header_broadcast_and_read_back_failures)
{
    bcast *t = calloc(1, sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE(dcp_inproc_world_create(2, 30000, &t->world) == DCP_OK);
    /* the header broadcast fails: both report it and neither sends the body */
    bcast_reset(t, DCP_OK);
    t->fault[1] = DCP_FAULT_RETURN_ERROR;
    DCP_REQUIRE(bcast_run(t));
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(t->status[r], DCP_ERR_COMM);
        DCP_CHECK_CONTAINS(t->message[r], "TP broadcast of the header failed: DCP_ERR_COMM");
        DCP_CHECK_EQ_INT(t->stats[r].collectives, 1);
        DCP_CHECK_EQ_INT(t->rec[r].read_backs, 0);
    }
    DCP_CHECK(body_is_zero(t->body[1]));
    /* rank 1 cannot read its body back: its mover's status comes out */
    bcast_reset(t, DCP_OK);
    t->rec[1].read_back_status = DCP_ERR_CUDA;
    DCP_REQUIRE(bcast_run(t));
    DCP_CHECK_STATUS(t->status[0], DCP_OK);
    DCP_CHECK_STATUS(t->status[1], DCP_ERR_CUDA);
    DCP_CHECK_EQ_INT(t->rec[1].read_backs, 1);
    dcp_inproc_world_destroy(t->world);
    free(t);
}
