/*
 * plan.h - building a dcp_plan.  Internal.
 *
 * A scheduler emits microbatches one at a time: dcp__plan_open_microbatch(),
 * then its groups in ascending first-rank order with dcp__plan_push_group(),
 * then dcp__plan_close_microbatch().  Each push checks the plan's fixed
 * capacities and returns DCP_ERR_CAPACITY instead of writing past them.  The
 * shape invariants (blocks, coverage, order) are not checked here: that is
 * the validator's job, so a scheduler bug is caught, not hidden.
 */
#ifndef DCP_PLAN_H
#define DCP_PLAN_H

#include "dcpack.h"
#include "error.h"
#include "../alloc/arena.h"

/* Allocate the plan's arrays for the given capacities (NULL-free on success). */
dcp_status dcp__plan_init(dcp_plan *plan, dcp__arena *arena, int32_t max_microbatches, int32_t max_groups,
                         int32_t max_ids);

/* Empty the plan for `num_ranks` ranks. */
void dcp__plan_clear(dcp_plan *plan, int32_t num_ranks);

dcp_status dcp__plan_open_microbatch(dcp_plan *plan, dcp__error *err);
dcp_status dcp__plan_push_group(dcp_plan *plan, int32_t first_rank, int32_t cp_size, const int32_t *ids,
                               int32_t count, dcp__error *err);
void dcp__plan_close_microbatch(dcp_plan *plan);

/* Number of ids a rank holds in a microbatch (0 when none). */
int32_t dcp__plan_rank_count(const dcp_plan *plan, int32_t microbatch, int32_t rank);


/*
 * Validate a plan without a context: the pure function behind
 * dcp_plan_validate().  `scratch` needs dcp__validate_scratch_size() bytes.
 */
dcp_status dcp__plan_check(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                          int32_t num_lengths, dcp__arena *scratch, dcp_plan_violation *violation);
size_t dcp__validate_scratch_size(const dcp_config *config);

/*
 * lower bound (docs/planning.md, cost model) of a batch's makespan (saturating) with no static CP size:
 * over groups of powers of two and N only (dcp_plan_stats.lower_bound also weighs the static CP size).
 */
int64_t dcp__cost_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                             int32_t max_seqlen_per_rank);

/*
 * The same bound without its level search (step 4 of core/stats.c; with step 5): O(n), never above
 * dcp__cost_lower_bound(), so still a lower bound; for a scheduler that checks it often or on
 * large batches (the search walks every sequence some 25 to 64 times).
 */
int64_t dcp__cost_lower_bound_quick(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                                    int32_t max_seqlen_per_rank);

/*
 * The bound with some of its steps (core/stats.c): the level search (step 4) and the dearest
 * microbatch's token room (step 5); every step left out leaves a lower bound, never above the full
 * one.  VPP group `vpp` (1: none), sequence cap `seq_cap` (0: none), static CP size `static_cp` (1:
 * none).  dcp_plan_stats.lower_bound takes them all; the tests weigh each step.
 */
enum { DCP__BOUND_LEVEL_SEARCH = 1u, DCP__BOUND_TOKEN_ROOM = 2u, DCP__BOUND_ALL = 3u };
int64_t dcp__cost_lower_bound_steps(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                                    int32_t max_seqlen_per_rank, int32_t vpp, int32_t seq_cap, int32_t static_cp,
                                    unsigned steps);

/*
 * Lower bound (docs/planning.md, step models) of a batch's dependency makespan, which is also one of its
 * barrier makespan (saturating): max(ceil(W / N), max over sequences of its smallest per-rank cost)
 * + microbatch_overhead * ceil(tokens / (N * M)), W the sum over sequences of their smallest cp * cost,
 * over the group sizes that can hold them (powers of two up to N, N, and static_cp).
 */
int64_t dcp__dependency_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n,
                                    int32_t num_ranks, int32_t max_seqlen_per_rank, int32_t static_cp);

/*
 * The step-model statistics of a plan that dcp__plan_check accepted for these lengths.  `finish` is
 * scratch of dcp__stats_scratch_size() bytes: plan->num_ranks int64, then with PP > 1 the pipeline
 * model's (core/pipeline_model.h).  O(ids + groups), plus O(P * (P + V) * K) with PP > 1; allocation-free.
 */
dcp_status dcp__plan_stats(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths, int32_t num_lengths,
                           int64_t *finish, dcp_plan_stats *stats);
/* in whole int64s */
size_t dcp__stats_scratch_size(const dcp_config *config);

/*
 * The configured step model's makespan of such a plan (dcp_plan_stats.model_makespan, the hinge
 * included) without the bounds: O(ids + groups); -1 for an id outside [0, num_lengths).  For a
 * scheduler that weighs whole plans (balanced's margin rule).
 */
int64_t dcp__plan_model_makespan(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                                 int32_t num_lengths, int64_t *finish);

#endif
