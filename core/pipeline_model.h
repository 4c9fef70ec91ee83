/*
 * pipeline_model.h - the pipeline step model (docs/planning.md, pipeline step
 * model).  Internal.
 *
 * A plan's microbatches run through P pipeline stages, each stage holding V
 * model chunks (virtual stage k = chunk * P + stage).  Microbatch m's cost c_m
 * (its slowest group plus the microbatch overhead, as the barrier model
 * counts) is split evenly over the V chunks (c_m / V, rounded down); virtual
 * stage 0 adds first_per_token * t_m and virtual stage P*V-1 adds
 * last_per_token * t_m, t_m the microbatch's largest tokens per rank.  An op
 * (forward or backward of one microbatch on one virtual stage) takes
 * forward_ppm / 1e6 of that (rounded down) forward, the rest backward.
 *
 * Each stage runs its ops in the order of the schedule (Megatron-LM's
 * non-interleaved 1F1B when V = 1, its interleaved 1F1B when V > 1); a
 * forward needs the forward of the virtual stage before, a backward the
 * backward of the virtual stage after (the last one its own forward).  The
 * makespan is the longest path of that graph, computed exactly in saturating
 * integers in O(P * V * K), with no allocation.
 */
#ifndef DCP_CORE_PIPELINE_MODEL_H
#define DCP_CORE_PIPELINE_MODEL_H

#include "dcpack.h"

#include <stddef.h>

typedef struct dcp__pipeline {
    int32_t stages;          /* P >= 1 */
    int32_t chunks;          /* V >= 1: 1 = non-interleaved 1F1B, > 1 = interleaved */
    int32_t group;           /* microbatches per group of the interleaved table (Megatron-LM's
                                microbatch_group_size_per_vp_stage), >= P */
    int32_t forward_ppm;     /* 0 .. 1e6 */
    int64_t first_per_token; /* virtual stage 0's extra work per token slot */
    int64_t last_per_token;  /* virtual stage P*V-1's extra work per token slot */
} dcp__pipeline;

/*
 * The pipeline of a configuration: P = pipeline_parallel_size, V =
 * virtual_pipeline_size (the schedule is the interleaved one exactly when V >
 * 1: dcp_config_validate() rejects an interleaved schedule with V = 1, and
 * V > 1 runs interleaved whatever cost.pipeline_schedule says, as Megatron-LM
 * does), group = microbatch_group_size_per_vp_stage when >= P, else P
 * (Megatron-LM's default).
 */
void dcp__pipeline_of(const dcp_config *config, dcp__pipeline *pipe);

/* Bytes of scratch dcp__pipeline_makespan() needs for up to `max_microbatches` microbatches. */
size_t dcp__pipeline_scratch_size(const dcp__pipeline *pipe, int32_t max_microbatches);

/*
 * Whether Megatron-LM runs K microbatches under this schedule: always with one chunk; interleaved,
 * when K >= group and the last group is full or holds at least P microbatches (schedules.py refuses
 * other counts; in this model they would deadlock).
 */
int dcp__pipeline_runs(const dcp__pipeline *pipe, int32_t K);

/*
 * The makespan of K microbatches run in the order order[0..K-1] (ids into
 * cost[] and tokens[]; NULL: 0, 1, ..., K-1): cost[m] the microbatch's cost
 * c_m, tokens[m] its t_m.  `scratch` holds dcp__pipeline_scratch_size(pipe, K)
 * bytes, 8-byte aligned.  INT64_MAX where the schedule does not run K
 * microbatches (dcp__pipeline_runs); -1 only if the graph could not finish,
 * which the tests show never happens otherwise (a check, never a number).
 */
int64_t dcp__pipeline_makespan(const dcp__pipeline *pipe, const int64_t *cost, const int64_t *tokens,
                               const int32_t *order, int32_t K, void *scratch);

/*
 * A lower bound of the makespan of these K microbatches in any order:
 * the largest over stages r of (the forward time one microbatch spends on
 * virtual stages 0..r-1) + (all of stage r's work) + (the backward time
 * another spends on virtual stages 0..r-1), the two chosen least (one
 * microbatch when K = 1), and the longest microbatch's whole chain of
 * forwards and backwards.  O(P * (P + V) * K).
 */
int64_t dcp__pipeline_lower_bound(const dcp__pipeline *pipe, const int64_t *cost, const int64_t *tokens, int32_t K);

/* The forward and backward time of microbatch (cost c, tokens t) on virtual stage k (exposed for the tests). */
void dcp__pipeline_op_times(const dcp__pipeline *pipe, int64_t c, int64_t t, int32_t k, int64_t *forward,
                            int64_t *backward);

/*
 * The j-th op (0 .. 2*V*K-1) stage r runs: *forward 1 or 0, *position the schedule position of its
 * microbatch (0 .. K-1), *chunk its model chunk.  The order Megatron-LM's schedules.py runs.
 */
void dcp__pipeline_op(const dcp__pipeline *pipe, int32_t K, int32_t r, int32_t j, int *forward, int32_t *position,
                      int32_t *chunk);

/*
 * Each microbatch's c_m and t_m in a plan that dcp__plan_check accepted: its slowest group's cost
 * (the sum of dcp_cost over the group's ids, with the small-microbatch hinge) plus microbatch_overhead, and the largest tokens per rank
 * (a group's tokens over its CP size, rounded up) of its groups.  cost[] and tokens[] hold
 * plan->num_microbatches entries.  DCP_ERR_INVALID_PLAN for an id outside [0, num_lengths).
 */
dcp_status dcp__pipeline_plan_inputs(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                                     int32_t num_lengths, int64_t *cost, int64_t *tokens);

#endif
