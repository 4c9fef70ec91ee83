/*
 * plan_ahead.h - the plans a step takes: one made ahead of it (plan_ahead.c)
 * or one it makes (plan_compute.c).  Internal.
 */
#ifndef DCP_PLAN_AHEAD_H
#define DCP_PLAN_AHEAD_H

#include "dcpack.h"
#include "../core/error.h"

/* Digest of the configuration a plan depends on: the whole configuration, max_tokens_per_rank aside. */
uint64_t dcp__plan_config_digest(const dcp_config *config);

/* The seal of `plan` made of these lengths under a configuration of that digest (dcp_plan.seal). */
uint64_t dcp__plan_seal(uint64_t config_digest, const int32_t *lengths, int32_t num_lengths, const dcp_plan *plan);

/*
 * The step's plan from dcp_step_args.plan: checked as dcp_plan_matches() does (the message into err), then
 * copied into the context's plan.  On failure the context's plan is cleared, as after a failed dcp_plan_compute.
 */
dcp_status dcp__plan_take(dcp_context *ctx, const dcp_plan *plan, const int32_t *lengths, int32_t num_lengths,
                          dcp__error *err);

/*
 * Plan `lengths` into the context's plan (bucket -> assign -> validate), as dcp_plan_compute() does and the
 * step does inside its call: the status, and on failure a message in err and the context's plan cleared.
 * Its scratch starts at the arena's current mark and is back there on return; nothing is recorded in the
 * context's last error (the caller does, once).
 */
dcp_status dcp__plan_make(dcp_context *ctx, const int32_t *lengths, int32_t num_lengths, dcp__error *err);

#endif
