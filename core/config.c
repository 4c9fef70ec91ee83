/* config.c - configuration defaults and validation, scheduler and step-model names, the cost model. */
#include "dcpack.h"
#include "cost.h"
#include "int128.h"
#include "body.h"
#include "error.h"

#include <stdio.h>
#include <string.h>

/* Ranks beyond this are rejected: per-rank tables are sized by it. */
#define DCP_MAX_RANKS (1 << 20)

void dcp_cost_model_default(dcp_cost_model *model)
{
    if (!model) return;
    memset(model, 0, sizeof *model);
    model->quadratic = 1;
    model->linear = 12 * 4096;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) model->kv[k] = (k <= 3) ? 492 : 3934; /* cp <= 8: one node */
    model->round_latency = 491520;
    model->microbatch_overhead = 819200;
    model->step_model = DCP_STEP_MODEL_BARRIER;
    model->pipeline_schedule = DCP_PIPELINE_1F1B;
    model->forward_ppm = 333333;
}

/*
 * Products in dcp_cost are capped at 2^100: any term that large already makes
 * the result (divided by cp < 2^31) exceed INT64_MAX, so capping changes
 * nothing but keeps s^2 * quadratic (up to 2^189) inside dcp__i128.  Negative
 * coefficients (which dcp_config_validate rejects) count as 0.
 */
#define COST_CAP ((dcp__i128)1 << 100)

static dcp__i128 mul_capped(dcp__i128 a, dcp__i128 b)
{
    if (a <= 0 || b <= 0) return 0;
    if (a > COST_CAP / b) return COST_CAP;
    return a * b;
}

int64_t dcp_cost(const dcp_cost_model *model, int64_t length, int32_t cp)
{
    if (!model || length <= 0 || cp <= 0) return 0;
    int64_t fast;
    if (dcp__cost_int64(model, length, cp, &fast)) return fast;
    dcp__i128 s = length;
    dcp__i128 quad = mul_capped(mul_capped(model->quadratic, s), s);
    dcp__i128 work = quad + mul_capped(model->linear, s);
    dcp__i128 fixed = 0;
    if (cp > 1) {
        int k = dcp__log2_ceil(cp);
        if (k > DCP_MAX_LOG2_CP) k = DCP_MAX_LOG2_CP;
        /* KV traffic the attention compute does not hide; once capped, work is past INT64_MAX * cp anyway */
        dcp__i128 exposed = mul_capped(mul_capped(model->kv[k], s), cp - 1) - quad;
        if (exposed > 0) work += exposed;
        fixed = mul_capped(model->round_latency, cp - 1) + mul_capped(model->cp_gather[k], s); /* undivided */
    }
    return dcp__i128_saturate_nonneg(work / cp + fixed);
}

const char *dcp_scheduler_name(dcp_scheduler scheduler)
{
    switch (scheduler) {
    case DCP_SCHEDULER_DP_BALANCED: return "dp_balanced";
    case DCP_SCHEDULER_DYNAMIC_CP: return "dynamic_cp";
    case DCP_SCHEDULER_BALANCED: return "balanced";
    }
    return "unknown";
}

dcp_status dcp_scheduler_from_name(const char *name, dcp_scheduler *out)
{
    if (!name || !out) return DCP_ERR_NULL_POINTER;
    for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED; s++) {
        if (strcmp(name, dcp_scheduler_name((dcp_scheduler)s)) == 0) {
            *out = (dcp_scheduler)s;
            return DCP_OK;
        }
    }
    return DCP_ERR_INVALID_ARGUMENT;
}

const char *dcp_step_model_name(dcp_step_model model)
{
    switch (model) {
    case DCP_STEP_MODEL_BARRIER: return "barrier";
    case DCP_STEP_MODEL_DEPENDENCY: return "dependency";
    }
    return "unknown";
}

dcp_status dcp_step_model_from_name(const char *name, dcp_step_model *out)
{
    if (!name || !out) return DCP_ERR_NULL_POINTER;
    for (int m = DCP_STEP_MODEL_BARRIER; m <= DCP_STEP_MODEL_DEPENDENCY; m++) {
        if (strcmp(name, dcp_step_model_name((dcp_step_model)m)) == 0) {
            *out = (dcp_step_model)m;
            return DCP_OK;
        }
    }
    return DCP_ERR_INVALID_ARGUMENT;
}

void dcp_config_default(dcp_config *config)
{
    if (!config) return;
    memset(config, 0, sizeof *config);
    config->data_parallel_size = 1;
    config->context_parallel_size = 1;
    config->tensor_parallel_size = 1;
    config->pipeline_parallel_size = 1;
    config->virtual_pipeline_size = 1;
    config->scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    config->max_sequences = 4096;
    config->max_seqlen_per_rank = 4096;
    config->min_cp_size = 1;
    config->fields = DCP_FIELD_ALL;
    dcp_cost_model_default(&config->cost);
}

int32_t dcp_config_num_ranks(const dcp_config *config)
{
    if (!config) return 0;
    int64_t n = (int64_t)config->data_parallel_size * config->context_parallel_size;
    return (n >= 1 && n <= DCP_MAX_RANKS) ? (int32_t)n : 0;
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* The message into the caller's buffer: cut after a whole word, marked "...", when it does not fit. */
#define REJECT(status, ...)                                                                        \
    do {                                                                                           \
        if (message && message_size &&                                                             \
            (size_t)snprintf(message, message_size, __VA_ARGS__) >= message_size)                 \
            dcp__message_cut(message, message_size);                                               \
        return (status);                                                                           \
    } while (0)

dcp_status dcp_config_validate(const dcp_config *c, char *message, size_t message_size)
{
    if (message && message_size) message[0] = '\0';
    if (!c) REJECT(DCP_ERR_NULL_POINTER, "config is NULL");

    const struct { const char *name; int32_t value; } sizes[] = {
        {"data_parallel_size", c->data_parallel_size},
        {"context_parallel_size", c->context_parallel_size},
        {"tensor_parallel_size", c->tensor_parallel_size},
        {"pipeline_parallel_size", c->pipeline_parallel_size},
        {"virtual_pipeline_size", c->virtual_pipeline_size},
        {"max_sequences", c->max_sequences},
        {"max_seqlen_per_rank", c->max_seqlen_per_rank},
        {"min_cp_size", c->min_cp_size},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value < 1)
            REJECT(DCP_ERR_INVALID_CONFIG, "%s must be >= 1, got %d", sizes[i].name, sizes[i].value);
    if (c->max_observations < 0)
        REJECT(DCP_ERR_INVALID_CONFIG, "max_observations must be >= 0 (0: online calibration off), got %d",
               c->max_observations);

    const struct { const char *name; int64_t value; } counts[] = {
        {"world_size", c->world_size},
        {"microbatch_group_size_per_vp_stage", c->microbatch_group_size_per_vp_stage},
        {"max_sequences_per_microbatch", c->max_sequences_per_microbatch},
        {"max_tokens_per_rank", c->max_tokens_per_rank},
        {"max_microbatches", c->max_microbatches},
        {"pad_alignment", c->pad_alignment},
        {"cost.quadratic", c->cost.quadratic},
        {"cost.linear", c->cost.linear},
        {"cost.round_latency", c->cost.round_latency},
        {"cost.microbatch_overhead", c->cost.microbatch_overhead},
        {"cost.small_knee", c->cost.small_knee},
        {"cost.small_slope", c->cost.small_slope},
        {"cost.margin_ppm", c->cost.margin_ppm},
        {"cost.first_stage_per_token", c->cost.first_stage_per_token},
        {"cost.last_stage_per_token", c->cost.last_stage_per_token},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 0)
            REJECT(DCP_ERR_INVALID_CONFIG, "%s must be >= 0, got %lld", counts[i].name,
                   (long long)counts[i].value);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++)
        if (c->cost.kv[k] < 0)
            REJECT(DCP_ERR_INVALID_CONFIG, "cost.kv[%d] must be >= 0, got %lld", k, (long long)c->cost.kv[k]);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++)
        if (c->cost.cp_gather[k] < 0)
            REJECT(DCP_ERR_INVALID_CONFIG, "cost.cp_gather[%d] must be >= 0, got %lld", k,
                   (long long)c->cost.cp_gather[k]);
    if (c->cost.margin_ppm >= 1000000)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.margin_ppm must be below 1000000 (all of the makespan), got %lld",
               (long long)c->cost.margin_ppm);
    if (c->cost.forward_ppm < 1 || c->cost.forward_ppm > 999999)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.forward_ppm must be in 1..999999 (a share of a microbatch), got %d",
               (int)c->cost.forward_ppm);
    if (c->cost.pipeline_schedule != DCP_PIPELINE_1F1B && c->cost.pipeline_schedule != DCP_PIPELINE_INTERLEAVED)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.pipeline_schedule %d is not 1f1b(0) or interleaved(1)",
               (int)c->cost.pipeline_schedule);

    if ((int)c->scheduler < DCP_SCHEDULER_DP_BALANCED || (int)c->scheduler > DCP_SCHEDULER_BALANCED)
        REJECT(DCP_ERR_INVALID_CONFIG, "scheduler %d is not one of dp_balanced(0), dynamic_cp(1), balanced(2)",
               (int)c->scheduler);
    if (c->cost.step_model != DCP_STEP_MODEL_BARRIER && c->cost.step_model != DCP_STEP_MODEL_DEPENDENCY)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.step_model %d is not barrier(0) or dependency(1)", (int)c->cost.step_model);
    if (c->plan_effort != DCP_PLAN_EFFORT_FULL && c->plan_effort != DCP_PLAN_EFFORT_FAST)
        REJECT(DCP_ERR_INVALID_CONFIG, "plan_effort %d is not full(0) or fast(1)", (int)c->plan_effort);
    if (c->fields & ~(uint32_t)DCP_FIELD_ALL)
        REJECT(DCP_ERR_INVALID_CONFIG, "fields 0x%x has bits outside DCP_FIELD_ALL (0x%x)", c->fields,
               (unsigned)DCP_FIELD_ALL);
    /*
     * A context that steps serves every PP stage of the job: stage 0 takes tokens and position_ids,
     * the last stage labels and loss_mask (at PP 1 one stage takes all four).  A set without one of
     * them would pass here and fail every step of the stage that needs it.
     */
    if (c->max_tokens_per_rank > 0 && (c->fields & DCP_FIELD_ALL) != DCP_FIELD_ALL) {
        char has[DCP_FIELD_NAMES_SIZE], lacks[DCP_FIELD_NAMES_SIZE];
        REJECT(DCP_ERR_INVALID_CONFIG,
               "fields (%s) lack %s: a context that steps needs all four (max_tokens_per_rank 0 only plans)",
               dcp__field_names(c->fields, has, sizeof has), dcp__field_names(~c->fields & DCP_FIELD_ALL, lacks, sizeof lacks));
    }

    if (c->pad_to_max_seqlen != 0 && c->pad_to_max_seqlen != 1)
        REJECT(DCP_ERR_INVALID_CONFIG, "pad_to_max_seqlen must be 0 or 1, got %d", c->pad_to_max_seqlen);
    if ((int)c->thd_tail_policy != DCP_THD_TAIL_APPEND_DUMMY && (int)c->thd_tail_policy != DCP_THD_TAIL_EXTEND_LAST)
        REJECT(DCP_ERR_INVALID_CONFIG, "thd_tail_policy %d is not append_dummy(0) or extend_last(1)",
               (int)c->thd_tail_policy);
    if ((int)c->cp_partition != DCP_CP_ZIGZAG && (int)c->cp_partition != DCP_CP_CONTIGUOUS)
        REJECT(DCP_ERR_INVALID_CONFIG, "cp_partition %d is not zigzag(0) or contiguous(1)", (int)c->cp_partition);

    int64_t ranks = (int64_t)c->data_parallel_size * c->context_parallel_size;
    if (ranks > DCP_MAX_RANKS)
        REJECT(DCP_ERR_OVERFLOW, "data_parallel_size * context_parallel_size = %lld exceeds %d ranks",
               (long long)ranks, DCP_MAX_RANKS);
    dcp__i128 world = (dcp__i128)ranks * c->tensor_parallel_size * c->pipeline_parallel_size;
    if (world > INT32_MAX)
        REJECT(DCP_ERR_OVERFLOW, "DP*CP*TP*PP overflows int32 (%d*%d*%d*%d)", c->data_parallel_size,
               c->context_parallel_size, c->tensor_parallel_size, c->pipeline_parallel_size);
    if (c->world_size != 0 && c->world_size != (int32_t)world)
        REJECT(DCP_ERR_INVALID_CONFIG,
               "world_size %d does not match DP*CP*TP*PP = %d*%d*%d*%d = %lld", c->world_size,
               c->data_parallel_size, c->context_parallel_size, c->tensor_parallel_size,
               c->pipeline_parallel_size, (long long)world);
    if (!is_pow2(c->min_cp_size))
        REJECT(DCP_ERR_INVALID_CONFIG, "min_cp_size must be a power of two, got %d", c->min_cp_size);
    if (c->min_cp_size > ranks)
        REJECT(DCP_ERR_INVALID_CONFIG, "min_cp_size %d exceeds the %lld DPxCP ranks", c->min_cp_size,
               (long long)ranks);
    if (c->virtual_pipeline_size > 1 && c->pipeline_parallel_size < 2)
        REJECT(DCP_ERR_INVALID_CONFIG, "virtual_pipeline_size %d needs pipeline_parallel_size >= 2",
               c->virtual_pipeline_size);
    /* the pipeline step model (core/pipeline_model.h): V > 1 runs interleaved whatever the schedule says */
    if (c->cost.pipeline_schedule != DCP_PIPELINE_1F1B && c->cost.pipeline_schedule != DCP_PIPELINE_INTERLEAVED)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.pipeline_schedule %d is not 1f1b(0) or interleaved(1)",
               (int)c->cost.pipeline_schedule);
    if (c->cost.pipeline_schedule == DCP_PIPELINE_INTERLEAVED && c->pipeline_parallel_size > 1 &&
        c->virtual_pipeline_size < 2)
        REJECT(DCP_ERR_INVALID_CONFIG,
               "cost.pipeline_schedule interleaved needs virtual_pipeline_size >= 2, got %d",
               c->virtual_pipeline_size);
    if (c->cost.forward_ppm < 0 || c->cost.forward_ppm > 1000000)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.forward_ppm must be in [0, 1000000], got %d", (int)c->cost.forward_ppm);
    if (c->cost.first_stage_per_token < 0 || c->cost.last_stage_per_token < 0)
        REJECT(DCP_ERR_INVALID_CONFIG, "cost.first_stage_per_token %lld and last_stage_per_token %lld must be >= 0",
               (long long)c->cost.first_stage_per_token, (long long)c->cost.last_stage_per_token);

    /* Token totals of a full batch must fit int64: sequences * (N * M). */
    dcp__i128 batch_tokens = (dcp__i128)c->max_sequences * ranks * c->max_seqlen_per_rank;
    if (batch_tokens > INT64_MAX)
        REJECT(DCP_ERR_OVERFLOW, "max_sequences * ranks * max_seqlen_per_rank = %d * %lld * %d overflows int64",
               c->max_sequences, (long long)ranks, c->max_seqlen_per_rank);
    if (c->max_tokens_per_rank > 0 && c->max_tokens_per_rank > ((int64_t)1 << 40))
        REJECT(DCP_ERR_OVERFLOW, "max_tokens_per_rank %lld exceeds 2^40", (long long)c->max_tokens_per_rank);
    return DCP_OK;
}
