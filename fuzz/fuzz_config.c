/*
 * fuzz_config.c - arbitrary configurations through validation, workspace
 * sizing, static init and one planning call.
 *
 * Every field of dcp_config is drawn from its default, a small value
 * (-8..247), a power of two, a value at the int32/int64 edges or raw bits.
 * Properties:
 *  - dcp_config_validate() and dcp_workspace_size() agree (an invalid
 *    configuration has no size, and *size is left alone); every rejection
 *    has a message;
 *  - a valid configuration whose workspace is at most 64 MiB builds in
 *    exactly dcp_workspace_size() bytes at an odd address, fails cleanly one
 *    byte short, and plans a batch of lengths from the input: DCP_OK with a
 *    valid plan, or a documented input error.
 *
 * Input layout: per field, a selector byte then its value bytes (see pick32);
 * the remaining bytes are lengths, 2 bytes each (+1).
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_WORKSPACE ((size_t)64 << 20)
#define MAX_LENGTHS 1024

static int32_t pick32(fuzz_reader *r, int32_t current)
{
    switch (fuzz_u8(r) & 7) {
    case 3: return (int32_t)fuzz_u8(r) - 8;
    case 4: return (int32_t)((uint32_t)1 << (fuzz_u8(r) % 31));
    case 5: return INT32_MAX - fuzz_u8(r);
    case 6: return INT32_MIN + fuzz_u8(r);
    case 7: return (int32_t)fuzz_u32(r);
    default: return current;
    }
}

static int64_t pick64(fuzz_reader *r, int64_t current)
{
    switch (fuzz_u8(r) & 7) {
    case 3: return (int64_t)fuzz_u8(r) - 8;
    case 4: return (int64_t)((uint64_t)1 << (fuzz_u8(r) % 63));
    case 5: return INT64_MAX - fuzz_u8(r);
    case 6: return INT64_MIN + fuzz_u8(r);
    case 7: return (int64_t)((uint64_t)fuzz_u32(r) | (uint64_t)fuzz_u32(r) << 32);
    default: return current;
    }
}

static int32_t lengths[MAX_LENGTHS];
static int scheduler_built[3];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (int s = 0; s < 3; s++) scheduler_built[s] = fuzz_scheduler_built((dcp_scheduler)s);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    dcp_config c;
    dcp_config_default(&c);
    c.max_sequences = 64; /* a default that keeps most valid inputs small */
    c.world_size = pick32(&r, c.world_size);
    c.data_parallel_size = pick32(&r, c.data_parallel_size);
    c.context_parallel_size = pick32(&r, c.context_parallel_size);
    c.tensor_parallel_size = pick32(&r, c.tensor_parallel_size);
    c.pipeline_parallel_size = pick32(&r, c.pipeline_parallel_size);
    c.virtual_pipeline_size = pick32(&r, c.virtual_pipeline_size);
    c.microbatch_group_size_per_vp_stage = pick32(&r, c.microbatch_group_size_per_vp_stage);
    c.scheduler = (dcp_scheduler)pick32(&r, (int32_t)c.scheduler);
    c.max_sequences = pick32(&r, c.max_sequences);
    c.max_seqlen_per_rank = pick32(&r, c.max_seqlen_per_rank);
    c.min_cp_size = pick32(&r, c.min_cp_size);
    c.max_sequences_per_microbatch = pick32(&r, c.max_sequences_per_microbatch);
    c.max_tokens_per_rank = pick64(&r, c.max_tokens_per_rank);
    c.max_microbatches = pick32(&r, c.max_microbatches);
    c.pad_alignment = pick32(&r, c.pad_alignment);
    c.fields = (uint32_t)pick32(&r, (int32_t)c.fields);
    c.pad_to_max_seqlen = pick32(&r, c.pad_to_max_seqlen);
    c.thd_tail_policy = (dcp_thd_tail)pick32(&r, (int32_t)c.thd_tail_policy);
    c.cp_partition = (dcp_cp_partition)pick32(&r, (int32_t)c.cp_partition);
    c.cost.quadratic = pick64(&r, c.cost.quadratic);
    c.cost.linear = pick64(&r, c.cost.linear);
    const int k = fuzz_u8(&r) % (DCP_MAX_LOG2_CP + 1);
    c.cost.kv[k] = pick64(&r, c.cost.kv[k]);
    c.cost.round_latency = pick64(&r, c.cost.round_latency);
    c.cost.microbatch_overhead = pick64(&r, c.cost.microbatch_overhead);

    char message[256];
    memset(message, 'x', sizeof message);
    dcp_status valid = dcp_config_validate(&c, message, sizeof message);
    DCP_FUZZ_ASSERT(memchr(message, '\0', sizeof message) != NULL, "message not terminated");
    size_t need = 12345;
    dcp_status sized = dcp_workspace_size(&c, &need);
    if (valid != DCP_OK) {
        DCP_FUZZ_ASSERT(valid == DCP_ERR_INVALID_CONFIG || valid == DCP_ERR_OVERFLOW, "validate: %s",
                        dcp_status_str(valid));
        DCP_FUZZ_ASSERT(message[0] != '\0', "%s without a message", dcp_status_str(valid));
        DCP_FUZZ_ASSERT(sized == valid && need == 12345, "invalid configuration sized: %s", dcp_status_str(sized));
        dcp_context *ctx = NULL;
        DCP_FUZZ_ASSERT(dcp_context_create(&c, &ctx) == valid && ctx == NULL, "invalid configuration created");
        return 0;
    }
    DCP_FUZZ_ASSERT(message[0] == '\0', "valid configuration with a message: %s", message);
    DCP_FUZZ_ASSERT(dcp_config_num_ranks(&c) >= 1, "valid configuration without ranks");
    if (sized == DCP_ERR_OVERFLOW) return 0; /* does not fit in size_t: refused cleanly */
    DCP_FUZZ_ASSERT(sized == DCP_OK && need > 0, "valid configuration not sized: %s", dcp_status_str(sized));
    if (need > MAX_WORKSPACE) return 0;

    unsigned char *memory = malloc(need + 1);
    DCP_FUZZ_ASSERT(memory != NULL, "malloc %zu", need);
    dcp_context *ctx = NULL;
    DCP_FUZZ_ASSERT(dcp_context_init_static(memory + 1, need - 1, &c, &ctx) == DCP_ERR_WORKSPACE_TOO_SMALL &&
                        ctx == NULL,
                    "one byte short of %zu accepted", need);
    dcp_status st = dcp_context_init_static(memory + 1, need, &c, &ctx);
    DCP_FUZZ_ASSERT(st == DCP_OK && ctx != NULL, "init_static with the exact %zu bytes: %s", need,
                    dcp_status_str(st));

    int32_t n = 0;
    while (fuzz_remaining(&r) >= 2 && n < MAX_LENGTHS) lengths[n++] = 1 + fuzz_u16(&r);
    const dcp_plan *plan = NULL;
    st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st == DCP_ERR_UNSUPPORTED && !scheduler_built[c.scheduler]) st = DCP_ERR_INFEASIBLE; /* not built yet */
    DCP_FUZZ_ASSERT(st == DCP_OK || fuzz_is_input_error(st), "plan: %s: %s",
                    dcp_status_str(st), dcp_context_last_error(ctx));
    if (st == DCP_OK) {
        DCP_FUZZ_ASSERT(dcp_plan_validate(ctx, plan, lengths, n, NULL) == DCP_OK, "invalid plan: %s",
                        dcp_context_last_error(ctx));
        dcp_plan_stats stats;
        DCP_FUZZ_ASSERT(dcp_plan_stats_compute(ctx, plan, lengths, n, &stats) == DCP_OK, "stats");
    } else {
        DCP_FUZZ_ASSERT(dcp_context_last_error(ctx)[0] != '\0', "%s without a message", dcp_status_str(st));
    }
    DCP_FUZZ_ASSERT(dcp_context_workspace_bytes(ctx) <= need, "workspace bytes past the size");
    dcp_context_destroy(ctx);
    free(memory);
    return 0;
}
