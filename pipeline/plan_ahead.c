/*
 * plan_ahead.c - a plan made ahead of its step (dcpack.h, "Planning a step
 * ahead"): the seal dcp_plan_compute() puts on every plan it makes, the check
 * of a plan against the lengths a step gathered (dcp_plan_matches), and the
 * step's taking of a plan it did not make.
 *
 * The seal chains a digest of the planning configuration (the context's,
 * max_tokens_per_rank aside: a planning-only context makes the same plans),
 * the lengths and the plan's arrays.  A plan whose seal is recomputed equal
 * is the plan dcp_plan_compute() made, and validated, of those lengths under
 * that configuration: every rank that holds data checks it on its own, and
 * plans are deterministic, so ranks whose checks pass hold the same plan
 * without exchanging it.  The check reads each length and array entry once:
 * no planning, no scratch, no collective.
 */
#include "plan_ahead.h"
#include "context.h"
#include "../core/comm/agree.h"
#include "../core/hash.h"
#include "../core/plan.h"

#include <string.h>

uint64_t dcp__plan_config_digest(const dcp_config *config)
{
    dcp_config planning = *config;
    planning.max_tokens_per_rank = 0; /* data plane only: a planning-only context plans alike */
    return dcp__config_digest(&planning);
}

/* An array and its count into h, two entries a step. */
static uint64_t words(uint64_t h, const int32_t *a, int32_t n)
{
    h = dcp__hash_word(h, (uint64_t)(uint32_t)n);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) h = dcp__hash_word(h, (uint64_t)(uint32_t)a[i] << 32 | (uint32_t)a[i + 1]);
    return i < n ? dcp__hash_word(h, (uint64_t)(uint32_t)a[i]) : h;
}

uint64_t dcp__plan_seal(uint64_t config_digest, const int32_t *lengths, int32_t num_lengths, const dcp_plan *plan)
{
    uint64_t h = dcp__hash_word(DCP_FNV1A64_OFFSET, config_digest);
    h = words(h, lengths, num_lengths);
    h = dcp__hash_word(h, (uint64_t)(uint32_t)plan->num_ranks);
    h = words(h, plan->microbatch_first_group, plan->num_microbatches + 1);
    h = words(h, plan->group_first_rank, plan->num_groups);
    h = words(h, plan->group_cp_size, plan->num_groups);
    h = words(h, plan->group_first_id, plan->num_groups + 1);
    return words(h, plan->ids, plan->num_ids);
}

/* The check of dcp_plan_matches, into err; the plan may be anyone's, so its counts are checked before use. */
static dcp_status check(const dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n,
                        dcp__error *err)
{
    if (!plan->microbatch_first_group || !plan->group_first_rank || !plan->group_cp_size || !plan->group_first_id ||
        !plan->ids)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "plan ahead: the plan has a NULL array: not a computed plan");
    if (plan->num_microbatches < 0 || plan->num_groups < 0 || plan->num_ids < 0)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "plan ahead: the plan has %d microbatches, %d groups, %d ids: not a computed plan",
                         plan->num_microbatches, plan->num_groups, plan->num_ids);
    const uint64_t mine = dcp__plan_config_digest(&ctx->config);
    if (plan->config_digest != mine)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "plan ahead: the plan was made under another configuration (digest %016llx, this "
                         "context's %016llx): plan on a context of this configuration",
                         (unsigned long long)plan->config_digest, (unsigned long long)mine);
    if (plan->num_microbatches > ctx->plan.max_microbatches || plan->num_groups > ctx->plan.max_groups ||
        plan->num_ids > ctx->plan.max_ids)
        return dcp__fail(err, DCP_ERR_CAPACITY,
                         "plan ahead: the plan's %d microbatches, %d groups, %d ids exceed this context's %d, %d, %d",
                         plan->num_microbatches, plan->num_groups, plan->num_ids, ctx->plan.max_microbatches,
                         ctx->plan.max_groups, ctx->plan.max_ids);
    if (plan->num_ids != n)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "plan ahead: the plan is of %d sequences, the step gathered %d: a plan of another batch",
                         plan->num_ids, n);
    const uint64_t seal = dcp__plan_seal(mine, lengths, n, plan);
    if (plan->seal != seal)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "plan ahead: the plan is not the plan of these %d lengths (seal %016llx, expected %016llx): "
                         "made of other lengths, or changed since it was made",
                         n, (unsigned long long)plan->seal, (unsigned long long)seal);
    return DCP_OK;
}

dcp_status dcp_plan_matches(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t num_lengths)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    if (!plan || (!lengths && num_lengths > 0))
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER, "dcp_plan_matches: %s is NULL",
                                                plan ? "lengths" : "plan"), &err);
    if (num_lengths < 0)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "num_lengths %d is negative",
                                                num_lengths), &err);
    dcp_status s = check(ctx, plan, lengths, num_lengths, &err);
    return s == DCP_OK ? DCP_OK : dcp__context_fail(ctx, s, &err);
}

dcp_status dcp__plan_take(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t n, dcp__error *err)
{
    dcp_status s = check(ctx, plan, lengths, n, err);
    if (s != DCP_OK) {
        if (plan != &ctx->plan) dcp__plan_clear(&ctx->plan, ctx->num_ranks); /* as a failed dcp_plan_compute */
        return s;
    }
    if (plan == &ctx->plan) return DCP_OK; /* the step's own last plan, for the same lengths again */
    dcp_plan *to = &ctx->plan;
    to->num_ranks = plan->num_ranks;
    to->num_microbatches = plan->num_microbatches;
    to->num_groups = plan->num_groups;
    to->num_ids = plan->num_ids;
    memcpy(to->microbatch_first_group, plan->microbatch_first_group,
           ((size_t)plan->num_microbatches + 1) * sizeof *to->microbatch_first_group);
    memcpy(to->group_first_rank, plan->group_first_rank, (size_t)plan->num_groups * sizeof *to->group_first_rank);
    memcpy(to->group_cp_size, plan->group_cp_size, (size_t)plan->num_groups * sizeof *to->group_cp_size);
    memcpy(to->group_first_id, plan->group_first_id, ((size_t)plan->num_groups + 1) * sizeof *to->group_first_id);
    memcpy(to->ids, plan->ids, (size_t)plan->num_ids * sizeof *to->ids);
    to->config_digest = plan->config_digest;
    to->seal = plan->seal;
    to->source = plan->source;
    return DCP_OK;
}
