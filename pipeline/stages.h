/*
 * stages.h - the planning stages, each a pure function over SoA arrays.
 *
 *   gather   -> global lengths, per-DP-rank offsets   (pipeline/gather.c)
 *   bucket   -> ids sorted by length, minimal CP size  (pipeline/bucket.c)
 *   assign   -> the plan, by the configured scheduler  (pipeline/assign*.c,
 *                                                       pipeline/balanced/,
 *                                                       pipeline/dynamic_cp/)
 *   validate -> every invariant                        (core/validate.c)
 *
 * Every stage takes its scratch from an arena it may fill and never frees:
 * the caller resets the arena to a mark afterwards.  Each stage's
 * *_scratch_size() is an upper bound of what it takes for the largest input
 * the configuration allows; dcp_workspace_size() reserves the maximum.
 */
#ifndef DCP_STAGES_H
#define DCP_STAGES_H

#include "dcpack.h"
#include "../core/error.h"
#include "../alloc/arena.h"

/* ---- bucket ---- */

/*
 * Minimal CP size of a sequence: the smallest power of two >= ceil(s / M),
 * at least min_cp_size; num_ranks itself when that power of two exceeds a
 * num_ranks that is not a power of two (the reference's full-group fallback).
 * Returns 0 when s does not fit on `limit_ranks` ranks at all.
 */
int32_t dcp__min_cp_size(int64_t length, int32_t max_seqlen_per_rank, int32_t min_cp_size, int32_t num_ranks);

/*
 * Check lengths (1 <= s <= what the largest allowed group holds), sort ids by
 * length descending (stable: equal lengths keep id order) and compute each
 * id's minimal CP size.  With dp_balanced the largest group is the static CP
 * size; otherwise all DPxCP ranks.
 */
dcp_status dcp__bucket(const int32_t *lengths, int32_t num_sequences, const dcp_config *config,
                      int32_t *sorted_ids, int32_t *min_cp, dcp_arena *scratch, dcp_error *err);
size_t dcp__bucket_scratch_size(const dcp_config *config);

/* ---- assign ---- */

struct dcp__scheduler;

typedef struct dcp_schedule_input {
    const int32_t *lengths;    /* [num_sequences], by global id; all validated by dcp__bucket */
    int32_t num_sequences;
    const int32_t *sorted_ids; /* [num_sequences], by length descending, stable */
    const int32_t *min_cp;     /* [num_sequences], by global id */
    int32_t num_ranks;         /* DPxCP */
    const dcp_config *config;
    /* a scheduler whose plan this one may take as one more candidate, offered by dcp__assign (NULL: none) */
    const struct dcp__scheduler *candidate;
} dcp_schedule_input;

/*
 * One scheduler, as the assign stage picks it (pipeline/assign/assign.c holds
 * the table, in the way zstd selects a block compressor by strategy):
 * scratch_size is an upper bound of the scratch one call takes for the
 * largest input the configuration allows, with the candidate the driver
 * offers it; assign plans into a cleared plan.
 */
typedef struct dcp__scheduler {
    const char *name;
    size_t (*scratch_size)(const dcp_config *config);
    dcp_status (*assign)(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err);
} dcp__scheduler;

/* The table's entry for `which`; NULL for a value that names no scheduler. */
const dcp__scheduler *dcp__scheduler_of(dcp_scheduler which);
/* The scheduler whose plan dcp__assign offers `which` as a candidate; NULL when none. */
const dcp__scheduler *dcp__scheduler_candidate_of(dcp_scheduler which);

/*
 * Plan with config->scheduler, offering it its candidate's plan.  The plan is
 * cleared first; on error its contents are unspecified.
 */
dcp_status dcp__assign(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err);
size_t dcp__assign_scratch_size(const dcp_config *config);

dcp_status dcp__assign_dp_balanced(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch,
                                  dcp_error *err);
size_t dcp__assign_dp_balanced_scratch_size(const dcp_config *config);

dcp_status dcp__assign_dynamic_cp(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch,
                                 dcp_error *err);
size_t dcp__assign_dynamic_cp_scratch_size(const dcp_config *config);

/*
 * balanced takes in->candidate's plan as one more candidate when it has few
 * sequences per rank (pipeline/assign/balanced/balanced_reference.c); its
 * scratch makes room for that candidate's when `candidate` is not NULL.
 */
dcp_status dcp__assign_balanced(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch,
                               dcp_error *err);
size_t dcp__assign_balanced_scratch_size(const dcp_config *config, const dcp__scheduler *candidate);
/*
 * dcp__assign_balanced with its shortcuts switched for tests; each must leave
 * the plan as it is without it:
 *   DCP__BALANCED_REUSE_ALIGNMENT: a pass whose VPP alignment changed its
 *     microbatch count merges down from its saved state instead of running
 *     again in full;
 *   DCP__BALANCED_BOUND_MERGES: merge searches whose gain cannot win are not
 *     run.  It spares the polishing budget, so the plan is the same as without
 *     it whenever the budget lasts the call without it;
 *   DCP__BALANCED_IMPLIED_TRIALS: a repacking trial whose every step an
 *     earlier trial of the same search took alike is not run (nor the last
 *     trial rebuilt when the groups it left are those at the chosen level).
 * dcp__assign_balanced takes all three.  *report (unless NULL) says how often
 * each was taken and whether the polishing budget ran out.
 */
enum {
    DCP__BALANCED_REUSE_ALIGNMENT = 1,
    DCP__BALANCED_BOUND_MERGES = 2,
    DCP__BALANCED_IMPLIED_TRIALS = 4,
    DCP__BALANCED_SHORTCUTS = 7
};
typedef struct dcp__balanced_report {
    int32_t realigned;      /* passes whose second run started from the saved state */
    int64_t merges_skipped; /* merge searches not run */
    int64_t trials_implied; /* repacking trials not run: an earlier one implied them */
    uint64_t merge_choices; /* a hash of every merge round's choice (pair and gain), in call order */
    int budget_ran_out;     /* the polishing budget was used up during the call */
} dcp__balanced_report;
dcp_status dcp__assign_balanced_with(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err,
                                     unsigned shortcuts, dcp__balanced_report *report);

/* ---- gather ---- */
size_t dcp__gather_scratch_size(const dcp_config *config);

#endif
