/* test_stage_validate.c - the validate stage: the plan validator catches each invariant, on hand-made plans. */
#include "dcp_test.h"
#include "dcp_test_plan.h"

static void group(fixture *f, int32_t first, int32_t cp, int n, const int32_t *ids)
{
    dcp__plan_push_group(&f->plan, first, cp, ids, n, NULL);
}

static dcp_context *make_context(int32_t ranks, int32_t m, int32_t vpp_group)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = ranks;
    c.max_sequences = 32;
    c.max_seqlen_per_rank = m;
    c.microbatch_group_size_per_vp_stage = vpp_group;
    if (vpp_group > 1) {
        c.pipeline_parallel_size = 2;
        c.virtual_pipeline_size = 2;
    }
    dcp_context *ctx = NULL;
    return dcp_context_create(&c, &ctx) == DCP_OK ? ctx : NULL;
}

/* lengths: ids 0..5 */
static const int32_t lengths[6] = {800, 300, 200, 100, 100, 50};

/* A valid 4-rank plan: mb0 = {0} on [0,2), {1} on 2, {2} on 3; mb1 = {3,4,5} on all 4. */
static void valid_plan(fixture *f)
{
    fixture_init(f, 4);
    dcp__plan_open_microbatch(&f->plan, NULL);
    group(f, 0, 2, 1, (int32_t[]){0});
    group(f, 2, 1, 1, (int32_t[]){1});
    group(f, 3, 1, 1, (int32_t[]){2});
    dcp__plan_close_microbatch(&f->plan);
    dcp__plan_open_microbatch(&f->plan, NULL);
    group(f, 0, 4, 3, (int32_t[]){3, 4, 5});
    dcp__plan_close_microbatch(&f->plan);
}

static void expect(dcp_context *ctx, fixture *f, int32_t n, dcp_invariant inv, int32_t mb, const char *part)
{
    dcp_plan_violation v;
    dcp_status st = dcp_plan_validate(ctx, &f->plan, lengths, n, &v);
    if (inv == DCP_INVARIANT_NONE) {
        if (st != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "expected a valid plan, got: %s", v.message);
        return;
    }
    if (st != DCP_ERR_INVALID_PLAN || v.invariant != inv || v.microbatch != mb)
        dcp_test_fail(__FILE__, __LINE__, "expected invariant %d at microbatch %d, got %s invariant %d mb %d: %s",
                      (int)inv, mb, dcp_status_str(st), (int)v.invariant, v.microbatch, v.message);
    DCP_CHECK_CONTAINS(v.message, part);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), part);
}

DCP_TEST(validator_accepts_valid_plan)
{
    dcp_context *ctx = make_context(4, 500, 0);
    DCP_REQUIRE(ctx);
    fixture f;
    valid_plan(&f);
    expect(ctx, &f, 6, DCP_INVARIANT_NONE, -1, "");
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&f.plan, 0, 1), 0);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&f.plan, 0, 3), 2);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&f.plan, 1, 2), 3);
    DCP_CHECK_EQ_INT(dcp_plan_group_of_rank(&f.plan, 2, 0), -1);
    DCP_CHECK_EQ_INT(dcp__plan_rank_count(&f.plan, 1, 3), 3);
    DCP_CHECK_NO_ALLOC(dcp_plan_validate(ctx, &f.plan, lengths, 6, NULL));
    dcp_context_destroy(ctx);
}

DCP_TEST(validator_each_id_once)
{
    dcp_context *ctx = make_context(4, 500, 0);
    DCP_REQUIRE(ctx);
    fixture f;
    valid_plan(&f);
    f.ids[5] = 3; /* id 3 twice, id 5 missing */
    expect(ctx, &f, 6, DCP_INVARIANT_EACH_ID_ONCE, 1, "id 3 scheduled twice");
    valid_plan(&f);
    f.ids[1] = 6; /* out of range */
    expect(ctx, &f, 6, DCP_INVARIANT_EACH_ID_ONCE, 0, "id 6 out of range");
    valid_plan(&f);
    expect(ctx, &f, 5, DCP_INVARIANT_EACH_ID_ONCE, -1, "6 ids for 5 sequences");
    dcp_context_destroy(ctx);
}

DCP_TEST(validator_block_shape)
{
    dcp_context *ctx = make_context(4, 500, 0);
    DCP_REQUIRE(ctx);
    fixture f;
    valid_plan(&f);
    f.cp[3] = 3; /* 3 ranks is neither a power of two nor all 4 */
    expect(ctx, &f, 6, DCP_INVARIANT_BLOCK_SHAPE, 1, "size 3");
    valid_plan(&f);
    f.first_rank[1] = 1; /* overlaps group 0 on rank 1 */
    expect(ctx, &f, 6, DCP_INVARIANT_BLOCK_SHAPE, 0, "overlaps");
    valid_plan(&f);
    f.first_rank[2] = 4; /* past the last rank */
    expect(ctx, &f, 6, DCP_INVARIANT_BLOCK_SHAPE, 0, "leaves ranks");
    dcp_context_destroy(ctx);
}

DCP_TEST(validator_token_capacity)
{
    /* M = 399: id 0 (800 tokens) on 2 ranks is 400 per rank, one too many */
    dcp_context *ctx = make_context(4, 399, 0);
    DCP_REQUIRE(ctx);
    fixture f;
    valid_plan(&f);
    expect(ctx, &f, 6, DCP_INVARIANT_TOKEN_CAPACITY, 0, "800 tokens over cp 2");
    dcp_context_destroy(ctx);
    ctx = make_context(4, 400, 0); /* exactly full is fine */
    DCP_REQUIRE(ctx);
    expect(ctx, &f, 6, DCP_INVARIANT_NONE, -1, "");
    dcp_context_destroy(ctx);
}

DCP_TEST(validator_no_empty_rank)
{
    dcp_context *ctx = make_context(4, 5000, 0);
    DCP_REQUIRE(ctx);
    fixture f;
    fixture_init(&f, 4);
    dcp__plan_open_microbatch(&f.plan, NULL);
    group(&f, 0, 2, 1, (int32_t[]){0});
    group(&f, 2, 1, 5, (int32_t[]){1, 2, 3, 4, 5}); /* rank 3 holds nothing */
    dcp__plan_close_microbatch(&f.plan);
    expect(ctx, &f, 6, DCP_INVARIANT_NO_EMPTY_RANK, 0, "rank 3 holds no sequence");
    fixture_init(&f, 4);
    dcp__plan_open_microbatch(&f.plan, NULL);
    group(&f, 0, 2, 3, (int32_t[]){0, 1, 2});
    group(&f, 2, 2, 0, NULL); /* a group with no ids */
    dcp__plan_close_microbatch(&f.plan);
    dcp__plan_open_microbatch(&f.plan, NULL);
    group(&f, 0, 4, 3, (int32_t[]){3, 4, 5});
    dcp__plan_close_microbatch(&f.plan);
    expect(ctx, &f, 6, DCP_INVARIANT_NO_EMPTY_RANK, 0, "empty group");
    dcp_context_destroy(ctx);
}

DCP_TEST(validator_vpp_multiple_and_structure)
{
    dcp_context *ctx = make_context(4, 500, 4);
    DCP_REQUIRE(ctx);
    fixture f;
    valid_plan(&f); /* 2 microbatches, group of 4 */
    expect(ctx, &f, 6, DCP_INVARIANT_VPP_MULTIPLE, -1, "not a multiple");
    dcp_context_destroy(ctx);
    ctx = make_context(4, 500, 0);
    DCP_REQUIRE(ctx);
    valid_plan(&f);
    f.mb_first[1] = 5; /* microbatch 0 claims groups past microbatch 1's start */
    expect(ctx, &f, 6, DCP_INVARIANT_STRUCTURE, 0, "invalid");
    valid_plan(&f);
    f.plan.num_ranks = 8;
    expect(ctx, &f, 6, DCP_INVARIANT_STRUCTURE, -1, "plan has 8 ranks");
    dcp_context_destroy(ctx);
}

DCP_TEST(plan_builder_capacity)
{
    fixture f;
    fixture_init(&f, 4);
    dcp__error err;
    f.plan.max_ids = 2;
    DCP_REQUIRE_OK(dcp__plan_open_microbatch(&f.plan, &err));
    DCP_CHECK_STATUS(dcp__plan_push_group(&f.plan, 0, 4, (int32_t[]){1, 2, 3}, 3, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "more than 2 sequence slots");
    DCP_CHECK_EQ_INT(f.plan.num_ids, 0); /* nothing written */
    f.plan.max_microbatches = 1;
    dcp__plan_close_microbatch(&f.plan);
    DCP_CHECK_STATUS(dcp__plan_open_microbatch(&f.plan, &err), DCP_ERR_CAPACITY);
    /* hashes differ when one id differs */
    fixture a, b;
    valid_plan(&a);
    valid_plan(&b);
    DCP_CHECK(dcp_plan_hash(&a.plan) == dcp_plan_hash(&b.plan));
    b.ids[4] = 5;
    b.ids[5] = 4;
    DCP_CHECK(dcp_plan_hash(&a.plan) != dcp_plan_hash(&b.plan));
}
