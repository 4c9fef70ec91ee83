/*
 * plan_compute.c - the planning driver: bucket -> assign -> validate, from gathered
 * lengths, into the context's plan; and the public checks of a plan
 * (validation, statistics).  Every stage's scratch is released when the call
 * returns, successful or not.
 */
#include "context.h"
#include "plan_ahead.h"
#include "stages.h"
#include "../core/plan.h"

#include <stdio.h>

dcp_status dcp_plan_compute(dcp_context *ctx, const int32_t *lengths, int32_t num_lengths, const dcp_plan **plan)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    if (!plan || !lengths)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER, "dcp_plan_compute: %s is NULL",
                                              plan ? "lengths" : "plan"), &err);
    if (num_lengths < 0)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "num_lengths %d is negative",
                                              num_lengths), &err);
    if (num_lengths == 0)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "empty batch: no sequences to plan"),
                                &err);
    const dcp_config *config = &ctx->config;
    dcp_status st = dcp__bucket(lengths, num_lengths, config, ctx->sorted_ids, ctx->min_cp, dcp__context_scratch(ctx),
                               &err);
    if (st != DCP_OK) goto done;

    dcp__schedule_input in = {
        .lengths = lengths,
        .num_sequences = num_lengths,
        .sorted_ids = ctx->sorted_ids,
        .min_cp = ctx->min_cp,
        .num_ranks = ctx->num_ranks,
        .config = config,
    };
    st = dcp__assign(&in, &ctx->plan, dcp__context_scratch(ctx), &err);
    if (st != DCP_OK) goto done;

    dcp_plan_violation violation;
    st = dcp__plan_check(&ctx->plan, config, lengths, num_lengths, dcp__context_scratch(ctx), &violation);
    if (st != DCP_OK) {
        dcp__fail(&err, st, "%s scheduler produced an invalid plan (invariant %d): %s",
                 dcp_scheduler_name(config->scheduler), (int)violation.invariant, violation.message);
        goto done;
    }
    ctx->plan.config_digest = dcp__plan_config_digest(config); /* the seal a step checks (plan_ahead.c) */
    ctx->plan.seal = dcp__plan_seal(ctx->plan.config_digest, lengths, num_lengths, &ctx->plan);
    *plan = &ctx->plan;
done:
    dcp__arena_reset(&ctx->arena, ctx->scratch_mark);
    if (st != DCP_OK) {
        dcp__plan_clear(&ctx->plan, ctx->num_ranks); /* never hand out a half-built plan */
        return dcp__context_fail(ctx, st, &err);
    }
    return DCP_OK;
}

/* A plan is checked against lengths a plan could have been made of: every one at least 1 (*bad: the index). */
static dcp_status check_lengths(const int32_t *lengths, int32_t n, int32_t *bad, dcp__error *err)
{
    for (int32_t i = 0; i < n; i++)
        if (lengths[i] < 1) {
            *bad = i;
            return dcp__fail(err, DCP_ERR_BAD_LENGTH, "length %d is %d; lengths are at least 1", i, lengths[i]);
        }
    return DCP_OK;
}

/*
 * An argument error of dcp_plan_validate, in *violation too (when given), so a caller that prints
 * the violation never prints a stale one: no invariant, `id` the offending length's index or -1.
 */
static dcp_status argument_error(dcp_context *ctx, dcp_status st, int32_t id, dcp_plan_violation *v, dcp__error *err)
{
    if (v) {
        v->invariant = DCP_INVARIANT_NONE;
        v->microbatch = v->rank = -1;
        v->id = id;
        snprintf(v->message, sizeof v->message, "%.*s", (int)sizeof v->message - 1, err->message);
    }
    return dcp__context_fail(ctx, st, err);
}

dcp_status dcp_plan_validate(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t num_lengths,
                             dcp_plan_violation *violation)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    if (!plan || (!lengths && num_lengths > 0))
        return argument_error(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER, "dcp_plan_validate: %s is NULL",
                                             plan ? "lengths" : "plan"), -1, violation, &err);
    if (num_lengths < 0 || num_lengths > ctx->config.max_sequences)
        return argument_error(ctx, dcp__fail(&err, DCP_ERR_CAPACITY, "num_lengths %d outside [0, max_sequences %d]",
                                             num_lengths, ctx->config.max_sequences), -1, violation, &err);
    int32_t at = -1;
    dcp_status bad = check_lengths(lengths, num_lengths, &at, &err);
    if (bad != DCP_OK) return argument_error(ctx, bad, at, violation, &err);
    dcp_plan_violation local;
    dcp_plan_violation *v = violation ? violation : &local;
    dcp_status st = dcp__plan_check(plan, &ctx->config, lengths, num_lengths, dcp__context_scratch(ctx), v);
    dcp__arena_reset(&ctx->arena, ctx->scratch_mark);
    if (st != DCP_OK) {
        dcp__fail(&err, st, "invariant %d: %s", (int)v->invariant, v->message);
        return dcp__context_fail(ctx, st, &err);
    }
    return DCP_OK;
}

dcp_status dcp_plan_stats_compute(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                                  int32_t num_lengths, dcp_plan_stats *stats)
{
    if (!context || !plan || !lengths || !stats) return DCP_ERR_NULL_POINTER;
    const dcp_config *config = &context->config;
    /* the statistics trust the plan's offsets: check them (and every invariant) first */
    dcp__error err;
    if (num_lengths < 0 || num_lengths > config->max_sequences)
        return dcp__context_fail(context, dcp__fail(&err, DCP_ERR_CAPACITY,
                                                    "plan stats: num_lengths %d outside [0, max_sequences %d]",
                                                    num_lengths, config->max_sequences), &err);
    int32_t at = -1;
    dcp_status bad = check_lengths(lengths, num_lengths, &at, &err);
    if (bad != DCP_OK) return dcp__context_fail(context, bad, &err);
    dcp_plan_violation v;
    dcp_status checked = dcp__plan_check(plan, config, lengths, num_lengths, dcp__context_scratch(context), &v);
    dcp__arena_reset(&context->arena, context->scratch_mark);
    if (checked != DCP_OK)
        return dcp__context_fail(context, dcp__fail(&err, checked, "plan stats: invalid plan (invariant %d): %s",
                                                    (int)v.invariant, v.message), &err);
    /* the dependency model's per-rank finish times (the checked plan has the configuration's N ranks) */
    int64_t *finish = DCP_ARENA_NEW(dcp__context_scratch(context), int64_t,
                                    dcp__stats_scratch_size(config) / sizeof(int64_t));
    if (!finish) /* cannot happen: the workspace reserves dcp__stats_scratch_size() */
        return dcp__context_fail(context, dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL,
                                                    "plan stats: scratch too small for %d ranks", plan->num_ranks),
                                 &err);
    dcp_status st = dcp__plan_stats(plan, config, lengths, num_lengths, finish, stats);
    dcp__arena_reset(&context->arena, context->scratch_mark);
    return st;
}
