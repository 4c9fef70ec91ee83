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

/*
 * bucket -> assign -> validate into the context's plan.  Each stage is a phase that starts at the mark the
 * call found and is released before the next; the scratch is back at that mark on return.
 */
static dcp_status plan_stages(dcp_context *ctx, const int32_t *lengths, int32_t num_lengths, dcp__error *err)
{
    const dcp_config *config = &ctx->config;
    const size_t phase = dcp__scratch_mark(ctx);
    dcp_status st = dcp__bucket(lengths, num_lengths, config, ctx->sorted_ids, ctx->min_cp, &ctx->arena, err);
    dcp__scratch_reset_to(ctx, phase);
    if (st != DCP_OK) return st;

    dcp__schedule_input in = {
        .lengths = lengths,
        .num_sequences = num_lengths,
        .sorted_ids = ctx->sorted_ids,
        .min_cp = ctx->min_cp,
        .num_ranks = ctx->num_ranks,
        .config = config,
    };
    st = dcp__assign(&in, &ctx->plan, &ctx->arena, err);
    dcp__scratch_reset_to(ctx, phase);
    if (st != DCP_OK) return st;

    dcp_plan_violation violation;
    st = dcp__plan_check(&ctx->plan, config, lengths, num_lengths, &ctx->arena, &violation);
    dcp__scratch_reset_to(ctx, phase);
    if (st != DCP_OK)
        return dcp__fail(err, st, "%s scheduler produced an invalid plan (invariant %d): %s",
                         dcp_scheduler_name(config->scheduler), (int)violation.invariant, violation.message);
    ctx->plan.config_digest = dcp__plan_config_digest(config); /* the seal a step checks (plan_ahead.c) */
    ctx->plan.seal = dcp__plan_seal(ctx->plan.config_digest, lengths, num_lengths, &ctx->plan);
    return DCP_OK;
}

dcp_status dcp__plan_make(dcp_context *ctx, const int32_t *lengths, int32_t num_lengths, dcp__error *err)
{
    dcp_status st;
    if (num_lengths < 0)
        st = dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "num_lengths %d is negative", num_lengths);
    else if (num_lengths == 0)
        st = dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "empty batch: no sequences to plan");
    else
        st = plan_stages(ctx, lengths, num_lengths, err);
    if (st == DCP_OK) return DCP_OK;
    if (num_lengths > 0) dcp__plan_clear(&ctx->plan, ctx->num_ranks); /* never hand out a half-built plan */
    if (!err->message[0]) dcp__fail(err, st, "%s", dcp_status_str(st)); /* a stage that named nothing */
    return st;
}

dcp_status dcp_plan_compute(dcp_context *ctx, const int32_t *lengths, int32_t num_lengths, const dcp_plan **plan)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    if (!plan || !lengths)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER, "dcp_plan_compute: %s is NULL",
                                              plan ? "lengths" : "plan"), &err);
    dcp__scratch_begin(ctx);
    dcp_status st = dcp__plan_make(ctx, lengths, num_lengths, &err);
    dcp__scratch_end(ctx);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err);
    *plan = &ctx->plan;
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
    dcp__scratch_begin(ctx);
    dcp_status st = dcp__plan_check(plan, &ctx->config, lengths, num_lengths, &ctx->arena, v);
    dcp__scratch_end(ctx);
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
    const size_t phase = dcp__scratch_begin(context);
    dcp_status checked = dcp__plan_check(plan, config, lengths, num_lengths, &context->arena, &v);
    dcp__scratch_reset_to(context, phase); /* the check's scratch; the finish times start at the same mark */
    if (checked != DCP_OK)
        return dcp__context_fail(context, dcp__fail(&err, checked, "plan stats: invalid plan (invariant %d): %s",
                                                    (int)v.invariant, v.message), &err);
    /* the dependency model's per-rank finish times (the checked plan has the configuration's N ranks) */
    int64_t *finish = DCP_ARENA_NEW(&context->arena, int64_t,
                                    dcp__stats_scratch_size(config) / sizeof(int64_t));
    if (!finish) /* cannot happen: the workspace reserves dcp__stats_scratch_size() */
        return dcp__context_fail(context, dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL,
                                                    "plan stats: scratch too small for %d ranks", plan->num_ranks),
                                 &err);
    dcp_status st = dcp__plan_stats(plan, config, lengths, num_lengths, finish, stats);
    dcp__scratch_end(context);
    return st;
}
