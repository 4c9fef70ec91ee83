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
