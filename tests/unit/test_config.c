/* test_config.c - configuration validation table, workspace sizing, context init and errors. */
#include "dcp_test.h"

#include <stdlib.h>

static dcp_config base(void)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 4;
    c.context_parallel_size = 2;
    c.max_sequences = 256;
    return c;
}

typedef struct {
    const char *what;
    void (*mutate)(dcp_config *);
    dcp_status expected;
    const char *message_part;
} config_case;

static void zero_dp(dcp_config *c) { c->data_parallel_size = 0; }
static void negative_cp(dcp_config *c) { c->context_parallel_size = -2; }
static void zero_tp(dcp_config *c) { c->tensor_parallel_size = 0; }
static void zero_pp(dcp_config *c) { c->pipeline_parallel_size = 0; }
static void zero_sequences(dcp_config *c) { c->max_sequences = 0; }
static void negative_seqlen(dcp_config *c) { c->max_seqlen_per_rank = -1; }
static void min_cp_not_pow2(dcp_config *c) { c->min_cp_size = 3; }
static void min_cp_too_big(dcp_config *c) { c->min_cp_size = 16; }
static void world_mismatch(dcp_config *c) { c->world_size = 12; }
static void world_match(dcp_config *c) { c->world_size = 8; }
static void ranks_overflow(dcp_config *c) { c->data_parallel_size = 1 << 16; c->context_parallel_size = 1 << 16; }
static void tokens_overflow(dcp_config *c)
{
    c->max_sequences = INT32_MAX;
    c->data_parallel_size = 1 << 19;
    c->context_parallel_size = 1;
    c->max_seqlen_per_rank = INT32_MAX;
}
static void world_overflow(dcp_config *c) { c->tensor_parallel_size = 1 << 20; c->pipeline_parallel_size = 1 << 10; }
static void bad_scheduler(dcp_config *c) { c->scheduler = (dcp_scheduler)7; }
static void bad_fields(dcp_config *c) { c->fields = 0x30; }
static void stepping_tokens_only(dcp_config *c) { c->fields = DCP_FIELD_TOKENS; c->max_tokens_per_rank = 4096; }
static void stepping_no_fields(dcp_config *c) { c->fields = 0; c->max_tokens_per_rank = 1; }
static void stepping_without_position_ids(dcp_config *c)
{
    c->fields = DCP_FIELD_ALL & ~(uint32_t)DCP_FIELD_POSITION_IDS;
    c->max_tokens_per_rank = 4096;
    c->pipeline_parallel_size = 2; /* PP stage 0 needs position_ids however many stages there are */
}
static void planning_tokens_only(dcp_config *c) { c->fields = DCP_FIELD_TOKENS; c->max_tokens_per_rank = 0; }
static void negative_cost(dcp_config *c) { c->cost.kv[3] = -1; }
static void negative_overhead(dcp_config *c) { c->cost.microbatch_overhead = -5; }
static void negative_gather(dcp_config *c) { c->cost.cp_gather[2] = -3; }
static void negative_knee(dcp_config *c) { c->cost.small_knee = -4096; }
static void negative_slope(dcp_config *c) { c->cost.small_slope = -1; }
static void negative_margin(dcp_config *c) { c->cost.margin_ppm = -20000; }
static void margin_all(dcp_config *c) { c->cost.margin_ppm = 1000000; }
static void margin_most(dcp_config *c) { c->cost.margin_ppm = 999999; }
static void forward_zero(dcp_config *c) { c->cost.forward_ppm = 0; }
static void forward_all(dcp_config *c) { c->cost.forward_ppm = 1000000; }
static void forward_least(dcp_config *c) { c->cost.forward_ppm = 1; }
static void bad_schedule(dcp_config *c) { c->cost.pipeline_schedule = 2; }
static void interleaved(dcp_config *c) { c->cost.pipeline_schedule = DCP_PIPELINE_INTERLEAVED; }
static void negative_first_stage(dcp_config *c) { c->cost.first_stage_per_token = -7; }
static void negative_last_stage(dcp_config *c) { c->cost.last_stage_per_token = -8; }
static void vpp_without_pp(dcp_config *c) { c->virtual_pipeline_size = 2; }
static void negative_group(dcp_config *c) { c->microbatch_group_size_per_vp_stage = -1; }
static void vpp_ok(dcp_config *c) { c->virtual_pipeline_size = 2; c->pipeline_parallel_size = 4; c->microbatch_group_size_per_vp_stage = 4; }

DCP_TEST(config_validation_table)
{
    const config_case cases[] = {
        {"dp 0", zero_dp, DCP_ERR_INVALID_CONFIG, "data_parallel_size must be >= 1, got 0"},
        {"cp -2", negative_cp, DCP_ERR_INVALID_CONFIG, "context_parallel_size must be >= 1, got -2"},
        {"tp 0", zero_tp, DCP_ERR_INVALID_CONFIG, "tensor_parallel_size"},
        {"pp 0", zero_pp, DCP_ERR_INVALID_CONFIG, "pipeline_parallel_size"},
        {"no sequences", zero_sequences, DCP_ERR_INVALID_CONFIG, "max_sequences must be >= 1, got 0"},
        {"M -1", negative_seqlen, DCP_ERR_INVALID_CONFIG, "max_seqlen_per_rank must be >= 1, got -1"},
        {"min cp 3", min_cp_not_pow2, DCP_ERR_INVALID_CONFIG, "power of two, got 3"},
        {"min cp 16 > 8 ranks", min_cp_too_big, DCP_ERR_INVALID_CONFIG, "exceeds the 8 DPxCP ranks"},
        {"world 12", world_mismatch, DCP_ERR_INVALID_CONFIG, "world_size 12 does not match"},
        {"world 8", world_match, DCP_OK, ""},
        {"2^32 ranks", ranks_overflow, DCP_ERR_OVERFLOW, "exceeds"},
        {"tokens", tokens_overflow, DCP_ERR_OVERFLOW, "overflows int64"},
        {"world", world_overflow, DCP_ERR_OVERFLOW, "overflows int32"},
        {"scheduler 7", bad_scheduler, DCP_ERR_INVALID_CONFIG, "scheduler 7"},
        {"fields", bad_fields, DCP_ERR_INVALID_CONFIG, "fields 0x30"},
        {"stepping on tokens only", stepping_tokens_only, DCP_ERR_INVALID_CONFIG,
         "fields (tokens) lack labels, position_ids, loss_mask: a context that steps needs all four"},
        {"stepping on no fields", stepping_no_fields, DCP_ERR_INVALID_CONFIG,
         "fields (none) lack tokens, labels, position_ids, loss_mask"},
        {"stepping without position_ids", stepping_without_position_ids, DCP_ERR_INVALID_CONFIG,
         "fields (tokens, labels, loss_mask) lack position_ids"},
        {"planning on tokens only", planning_tokens_only, DCP_OK, ""},
        {"kv -1", negative_cost, DCP_ERR_INVALID_CONFIG, "cost.kv[3] must be >= 0, got -1"},
        {"overhead", negative_overhead, DCP_ERR_INVALID_CONFIG, "cost.microbatch_overhead"},
        {"cp_gather -3", negative_gather, DCP_ERR_INVALID_CONFIG, "cost.cp_gather[2] must be >= 0, got -3"},
        {"knee", negative_knee, DCP_ERR_INVALID_CONFIG, "cost.small_knee must be >= 0, got -4096"},
        {"slope", negative_slope, DCP_ERR_INVALID_CONFIG, "cost.small_slope must be >= 0, got -1"},
        {"margin -", negative_margin, DCP_ERR_INVALID_CONFIG, "cost.margin_ppm must be >= 0, got -20000"},
        {"margin 1e6", margin_all, DCP_ERR_INVALID_CONFIG, "cost.margin_ppm must be below 1000000"},
        {"margin 999999", margin_most, DCP_OK, ""},
        {"forward 0", forward_zero, DCP_ERR_INVALID_CONFIG, "cost.forward_ppm must be in 1..999999"},
        {"forward 1e6", forward_all, DCP_ERR_INVALID_CONFIG, "got 1000000"},
        {"forward 1", forward_least, DCP_OK, ""},
        {"schedule 2", bad_schedule, DCP_ERR_INVALID_CONFIG, "cost.pipeline_schedule 2 is not 1f1b(0) or interleaved(1)"},
        {"interleaved", interleaved, DCP_OK, ""},
        {"first stage", negative_first_stage, DCP_ERR_INVALID_CONFIG, "cost.first_stage_per_token must be >= 0, got -7"},
        {"last stage", negative_last_stage, DCP_ERR_INVALID_CONFIG, "cost.last_stage_per_token must be >= 0, got -8"},
        {"vpp without pp", vpp_without_pp, DCP_ERR_INVALID_CONFIG, "needs pipeline_parallel_size >= 2"},
        {"group -1", negative_group, DCP_ERR_INVALID_CONFIG, "microbatch_group_size_per_vp_stage"},
        {"vpp ok", vpp_ok, DCP_OK, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dcp_config c = base();
        cases[i].mutate(&c);
        char message[256];
        dcp_status st = dcp_config_validate(&c, message, sizeof message);
        if (st != cases[i].expected)
            dcp_test_fail(__FILE__, __LINE__, "case '%s': got %s (%s), expected %s", cases[i].what,
                          dcp_status_str(st), message, dcp_status_str(cases[i].expected));
        DCP_CHECK_CONTAINS(message, cases[i].message_part);
        /* an invalid config has no workspace size, and *size is left alone */
        size_t size = 12345;
        dcp_status ws = dcp_workspace_size(&c, &size);
        DCP_CHECK_EQ_INT(ws, cases[i].expected);
        if (ws != DCP_OK) DCP_CHECK_EQ_INT(size, 12345);
    }
    DCP_CHECK_STATUS(dcp_config_validate(NULL, NULL, 0), DCP_ERR_NULL_POINTER);
}

DCP_TEST(config_defaults_and_names)
{
    dcp_config c;
    dcp_config_default(&c);
    DCP_CHECK_STATUS(dcp_config_validate(&c, NULL, 0), DCP_OK);
    DCP_CHECK_EQ_INT(dcp_config_num_ranks(&c), 1);
    DCP_CHECK_EQ_INT(c.cost.linear, 12 * 4096);
    DCP_CHECK_EQ_INT(c.cost.kv[3], 492);  /* cp 8: inside one node */
    DCP_CHECK_EQ_INT(c.cost.kv[4], 3934); /* cp 16: across nodes */
    dcp_scheduler s;
    DCP_CHECK_STATUS(dcp_scheduler_from_name("balanced", &s), DCP_OK);
    DCP_CHECK_EQ_INT(s, DCP_SCHEDULER_BALANCED);
    DCP_CHECK_STATUS(dcp_scheduler_from_name("dynamic_cp", &s), DCP_OK);
    DCP_CHECK_EQ_INT(s, DCP_SCHEDULER_DYNAMIC_CP);
    DCP_CHECK_STATUS(dcp_scheduler_from_name("hybrid", &s), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK(strcmp(dcp_scheduler_name(DCP_SCHEDULER_DP_BALANCED), "dp_balanced") == 0);
    DCP_CHECK(strcmp(dcp_status_str(DCP_ERR_CAPACITY), "DCP_ERR_CAPACITY") == 0);
    DCP_CHECK(strcmp(dcp_status_str((dcp_status)-999), "DCP_ERR_UNKNOWN") == 0);
}

DCP_TEST(cost_model_values)
{
    dcp_cost_model m;
    dcp_cost_model_default(&m);
    /* cp 1: s^2 + 12*H*s */
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1000, 1), 1000LL * 1000 + 49152LL * 1000);
    /* cp 2, s = 4096: work/2 + exposed KV (492*s*1/2 - s^2/2 < 0 -> 0) + one round */
    int64_t s = 4096;
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 2), (s * s + 49152 * s) / 2 + 491520);
    /* cp 16, s = 2048: exposed KV = (3934*s*15 - s^2)/16 > 0 */
    s = 2048;
    int64_t expect = (s * s + 49152 * s + (3934 * s * 15 - s * s)) / 16 + 491520LL * 15;
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 16), expect);
    /* s^2 beyond 2^63 saturates instead of wrapping */
    m.quadratic = INT64_MAX / 4;
    DCP_CHECK_EQ_INT(dcp_cost(&m, INT32_MAX, 1), INT64_MAX);
    DCP_CHECK_EQ_INT(dcp_cost(&m, 0, 1), 0);
}

/* cp_gather[k] * s, undivided, on every rank of a CP group; nothing at cp 1 (gather[0] is never read) */
DCP_TEST(cost_model_gather_term)
{
    dcp_cost_model m;
    dcp_cost_model_default(&m);
    const int64_t s = 4096;
    const int64_t base2 = dcp_cost(&m, s, 2), base4 = dcp_cost(&m, s, 4), base1 = dcp_cost(&m, s, 1);
    const int64_t base3 = dcp_cost(&m, s, 3), base16 = dcp_cost(&m, s, 16);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) m.cp_gather[k] = 1000 + k;
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 1), base1);
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 2), (s * s + 49152 * s) / 2 + 491520 + 1001 * s);
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 2), base2 + 1001 * s);
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 4), base4 + 1002 * s);
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 3), base3 + 1002 * s); /* k = ceil(log2 3) = 2 */
    DCP_CHECK_EQ_INT(dcp_cost(&m, s, 16), base16 + 1004 * s);
    /* odd s at cp 2: the division rounds the divided terms only */
    DCP_CHECK_EQ_INT(dcp_cost(&m, 4097, 2), (4097LL * 4097 + 49152LL * 4097) / 2 + 491520 + 1001LL * 4097);
    /* the wide path (s^2 past int64) adds the same term */
    m.quadratic = 0;
    m.linear = 0;
    m.round_latency = 0;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) m.kv[k] = 0;
    DCP_CHECK_EQ_INT(dcp_cost(&m, 1LL << 40, 8), 1003LL << 40);
    m.quadratic = 1;
    const int64_t big = 4000000000LL; /* s^2 > 2^63: 128-bit path, and s^2/8 alone fits */
    DCP_CHECK_EQ_INT(dcp_cost(&m, big, 8), (int64_t)(((__int128)big * big) / 8) + 1003LL * big);
}

DCP_TEST(workspace_size_is_exact)
{
    dcp_config c = base();
    size_t need = 0;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &need));
    DCP_CHECK(need > 0);
    unsigned char *memory = malloc(need + 1);
    DCP_REQUIRE(memory);
    dcp_context *ctx = NULL;
    /* one byte short fails cleanly, the exact size works, at any alignment */
    DCP_CHECK_STATUS(dcp_context_init_static(memory, need - 1, &c, &ctx), DCP_ERR_WORKSPACE_TOO_SMALL);
    DCP_CHECK(ctx == NULL);
    DCP_CHECK_STATUS(dcp_context_init_static(memory + 1, need, &c, &ctx), DCP_OK);
    DCP_CHECK(ctx != NULL);
    DCP_CHECK(dcp_context_workspace_bytes(ctx) <= need);
    DCP_CHECK_EQ_INT(dcp_context_config(ctx)->max_sequences, 256);
    dcp_context_destroy(ctx); /* caller memory: destroy frees nothing */
    free(memory);
    /* bigger configurations need more */
    size_t bigger = 0;
    c.max_sequences = 1024;
    DCP_REQUIRE_OK(dcp_workspace_size(&c, &bigger));
    DCP_CHECK(bigger > need);
}

DCP_TEST(context_null_pointers)
{
    dcp_config c = base();
    dcp_context *ctx = NULL;
    size_t size;
    char buf[64];
    DCP_CHECK_STATUS(dcp_workspace_size(NULL, &size), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_workspace_size(&c, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_init_static(NULL, 100, &c, &ctx), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_init_static(buf, sizeof buf, NULL, &ctx), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_init_static(buf, sizeof buf, &c, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_create(NULL, &ctx), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_create(&c, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_context_init_static(buf, sizeof buf, &c, &ctx), DCP_ERR_WORKSPACE_TOO_SMALL);
    dcp_context_destroy(NULL);
    DCP_CHECK(dcp_context_config(NULL) == NULL);
    DCP_CHECK_CONTAINS(dcp_context_last_error(NULL), "NULL");
    c.data_parallel_size = 0;
    DCP_CHECK_STATUS(dcp_context_create(&c, &ctx), DCP_ERR_INVALID_CONFIG);
}

DCP_TEST(context_create_and_destroy_owned)
{
    dcp_config c = base();
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    DCP_CHECK(ctx != NULL);
    DCP_CHECK_EQ_INT(dcp_context_config(ctx)->data_parallel_size, 4);
    DCP_CHECK(strcmp(dcp_context_last_error(ctx), "") == 0);
    dcp_context_destroy(ctx);
    /* a second context of another size works after the first is gone */
    c.max_sequences = 8192;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    dcp_context_destroy(ctx);
}

/*
 * The small-microbatch hinge, once per group in plan statistics: cost(s, cp) = s / cp (linear 1, no
 * latency) plus gather 2 a token at cp 2, knee 200, slope 3, overhead 10.
 */
DCP_TEST(stats_charge_the_hinge_per_group)
{
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 2;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 200;
    c.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    c.cost.quadratic = 0;
    c.cost.linear = 1;
    c.cost.round_latency = 0;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) c.cost.kv[k] = 0;
    c.cost.microbatch_overhead = 10;
    c.cost.cp_gather[1] = 2;
    c.cost.small_knee = 200;
    c.cost.small_slope = 3;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const dcp_plan *plan;
    dcp_plan_stats st;
    /* two ranks, one sequence each: 100 + 3 * 100 and 50 + 3 * 150 */
    int32_t two[2] = {100, 50};
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, two, 2, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, two, 2, &st));
    DCP_CHECK_EQ_INT(st.num_microbatches, 1);
    DCP_CHECK_EQ_INT(st.makespan, 500 + 10);
    DCP_CHECK_EQ_INT(st.dependency_makespan, 500 + 10);
    DCP_CHECK_EQ_INT(st.max_rank_sum, 500);
    DCP_CHECK_EQ_INT(st.busy_sum, 400 + 500);
    DCP_CHECK(st.lower_bound <= st.makespan && st.dependency_lower_bound <= st.dependency_makespan);
    /* one sequence of 300 must take both ranks: 150 tokens a rank, 150 + 2 * 300 + 3 * 50 on each */
    int32_t one[1] = {300};
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, one, 1, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, one, 1, &st));
    DCP_CHECK_EQ_INT(st.makespan, 150 + 600 + 150 + 10);
    DCP_CHECK_EQ_INT(st.busy_sum, 2 * 900);
    /* the bound never counts the hinge: every sequence at its cheapest, 750 on each rank, + one overhead */
    DCP_CHECK_EQ_INT(st.lower_bound, 750 + 10);
    dcp_context_destroy(ctx);
    /* at or above the knee nothing is added; a huge slope saturates */
    c.cost.small_knee = 150;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, one, 1, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, one, 1, &st));
    DCP_CHECK_EQ_INT(st.makespan, 750 + 10);
    dcp_context_destroy(ctx);
    c.cost.small_knee = INT64_MAX;
    c.cost.small_slope = INT64_MAX;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, two, 2, &plan));
    DCP_REQUIRE_OK(dcp_plan_stats_compute(ctx, plan, two, 2, &st));
    DCP_CHECK_EQ_INT(st.makespan, INT64_MAX);
    DCP_CHECK_EQ_INT(st.dependency_makespan, INT64_MAX);
    DCP_CHECK_EQ_INT(st.busy_sum, INT64_MAX);
    DCP_CHECK(st.lower_bound < INT64_MAX);
    dcp_context_destroy(ctx);
}
