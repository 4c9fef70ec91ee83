/*
 * balanced_internal.h - the `balanced` scheduler's algorithm and the
 * functions each phase's file offers the others.  One planning call's state
 * (struct balanced, grouped by phase) is in balanced_state.h, the hot small
 * helpers every file inlines in balanced_inline.h.
 *
 * The scheduler minimises the step cost model's makespan (docs/planning.md, cost
 * model), the sum over microbatches of (slowest rank + microbatch overhead),
 * under every invariant of a plan.
 *
 * A microbatch is a multiset of groups: a group is a power-of-two block of
 * ranks (or all N ranks) holding sequences that all run at that CP size, and
 * every rank of the group carries the group's load (the sum of cost(s, cp)
 * over its sequences).  Where a group sits inside the microbatch changes no
 * cost (the CP size alone says intra- or inter-node), nor the barrier
 * makespan, so a microbatch is only "which groups, of which sizes": any
 * multiset of sizes summing to N is laid out by placing groups in decreasing
 * size order, each one aligned.
 *
 * With the default coefficients the linear term (12 * hidden per token)
 * dominates a sequence's cost, so a rank full of tokens carries about the
 * same load whatever it holds: plans that fill every group to its token
 * capacity with sequences of like length are nearly balanced.  Two
 * constructions build such plans; several passes of each run and the exact
 * makespan picks the winner.
 *
 * Every pass starts from CP sizes: each sequence on the lower bound's choice
 * (its minimal CP size), widened while its per-rank cost stays above a target
 * level T = work / (K * N), widening lowers it and the extra GPU time stays
 * within the pass's allowance (none, 1/16, 1/4 or any).
 *
 * LPT pass (target K microbatches): sequences wider than the narrowest CP
 * size, or above T, are shelved first-fit in decreasing cost order (each
 * opens a microbatch at its cost, later ones fill its free ranks); the rest,
 * in decreasing cost order, go where their group ends lowest relative to its
 * microbatch's cap (a shelf's level, or the plain microbatches' share of the
 * remaining work): free ranks of the highest cap, the least loaded group of
 * their size with token room, or a wider group within the allowance.
 *
 * Sequential pass: open a microbatch, walk the unplaced sequences longest
 * first and put each where its group's load ends lowest (free ranks, the
 * least loaded group of its size, a wider group within the allowance),
 * skipping what no group has room for; when nothing fits, open the next.
 *
 * Both end alike: free ranks (few sequences) are filled by splitting the most
 * loaded group or widening a lone sequence; with fewer than 16 sequences per
 * rank every microbatch is repacked (binary search on its level, best-fit
 * packing under it) and microbatches are merged while that lowers the
 * makespan; the count is aligned to the VPP group (splitting up, and when
 * that changed the count, the same pass again merging down: that second run
 * starts from the first one's state before its alignment, see before_vpp);
 * finally all groups are dealt, by load, into the microbatches again (for
 * equal sizes that order minimises the sum of maxima).
 *
 * Few sequences per rank on a power of two of ranks start with the pooled
 * packing (balanced_pool.c): every sequence packed at once under one level
 * into the ranks of the least microbatch count (and of one more), by a
 * best-fit packing whose level is found by false position on the ranks it
 * needs; its plans are candidates like the passes'.  On at least
 * POOL_MIN_RANKS ranks, within 1/16 of that count's bound it is the plan and
 * the passes are skipped (they cost most there), else they run as above.
 *
 * Last, a local search (balanced_descent.c) lowers microbatch levels one
 * move or swap of a sequence at a time, never raising any: on every kept
 * plan with fewer than 16 sequences per rank, on the best one with more from
 * DESCENT_MIN_SEQUENCES sequences on.  With fewer than 16, dynamic_cp's plan
 * is then one more candidate (balanced_reference.c), so the plan is never
 * above it.
 *
 * Under the dependency step model (config.cost.step_model) a group starts
 * when its own ranks are done with the microbatch before, so the order of the
 * microbatches and the block each group takes change the makespan: the
 * passes above still minimise the barrier makespan, and at emit every kept
 * plan is laid out for the least dependency makespan (balanced_place.c),
 * never above the dependency makespan of the plan the barrier model emits.
 *
 * Everything is integer and every choice is a pure function of the lengths
 * and the configuration, so every rank, compiler and optimisation level
 * computes the same plan.  Scratch comes from the arena, laid out by one
 * function that also gives the exact scratch size.
 *
 * The files of pipeline/assign/balanced/, one per phase:
 *
 *   balanced_state.h       the call's state, by phase: who writes and reads each part
 *   balanced_inline.h      numbers, CP-size classes, 4-ary heaps, group building blocks
 *   balanced.c             entry point: scratch layout and size, which passes run
 *   balanced_sizes.c       every pass's first step: CP sizes for its target level
 *   balanced_lpt.c         the LPT construction pass
 *   balanced_sequential.c  the sequential construction pass (open microbatch, room tree)
 *   balanced_groups.c      groups and microbatches: split, re-cost, join a wider group,
 *                          index by microbatch, evaluate, compact
 *   balanced_repack.c      repacking microbatches against a level, and merging them
 *   balanced_finish.c      the end of every pass (repair, VPP alignment, regroup) and
 *                          the polishing of kept plans
 *   balanced_pool.c        the pooled packing (few sequences per rank on many ranks)
 *   balanced_descent.c     the local search on a kept plan
 *   balanced_place.c       the dependency step model: microbatch order and group blocks
 *   balanced_reference.c   dynamic_cp's plan as a candidate (few sequences per rank)
 *   balanced_emit.c        the kept plans: keep, restore, emit the best
 *
 * Functions one file offers the others are named dcp__balanced_*; the hot
 * small ones are static inline in balanced_inline.h, so every file inlines
 * them.  Each phase's file says, at its top, which parts of the state it
 * reads and which it writes.
 */
#ifndef DCP_BALANCED_INTERNAL_H
#define DCP_BALANCED_INTERNAL_H

#include "balanced_inline.h"

/* ---- functions the phases offer each other (each documented where it is defined) ---- */

/* balanced_sizes.c: a pass's CP sizes and cost order; whether a pass would repeat an earlier one */
dcp__i128 dcp__balanced_choose_sizes(balanced *b, int64_t level, int64_t widen_num, int64_t widen_den,
                                    int32_t class_offset[NUM_CLASSES + 1], uint64_t *signature, int merge);
int dcp__balanced_seen_before(balanced *b, int sequential, int64_t target, uint64_t signature);

/* balanced_lpt.c, balanced_sequential.c: one construction pass; its plan's makespan, or -1 */
int64_t dcp__balanced_lpt_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den,
                               int merge_down);
int64_t dcp__balanced_sequential_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den,
                                      int merge_down);

/* balanced_groups.c: groups and microbatches */
void dcp__balanced_group_recost(balanced *b, int32_t g, int32_t cp);
int32_t dcp__balanced_group_split(balanced *b, int32_t g);
int32_t dcp__balanced_wide_join(balanced *b, heap_entry *heap, int32_t *heap_size, heap_entry *park,
                                int32_t *park_size, int32_t at, int32_t p, int64_t cost, int minus_cap);
void dcp__balanced_index_groups(balanced *b);
int64_t dcp__balanced_evaluate(balanced *b, int32_t *live);
void dcp__balanced_compact_mbs(balanced *b);

/* balanced_repack.c: the call's cost table; repacking every microbatch, merging two */
const int64_t *dcp__balanced_cost_row(balanced *b, int32_t p, int64_t *cheapest, dcp__i128 *least);
int dcp__balanced_any_within(balanced *b, int32_t limit);
void dcp__balanced_repack_microbatches(balanced *b, int32_t limit);
int dcp__balanced_merge_microbatches(balanced *b, int32_t limit, int force);

/* balanced_finish.c: the common end of a pass; polishing a kept plan */
int64_t dcp__balanced_finish_pass(balanced *b, int merge_down);
int dcp__balanced_can_realign(const balanced *b);
int64_t dcp__balanced_realign_pass(balanced *b);
int64_t dcp__balanced_finish_pool(balanced *b);
void dcp__balanced_polish_plan(balanced *b, int slot, int32_t max_microbatches);
void dcp__balanced_descend_plan(balanced *b, int slot, int64_t budget);

/* balanced_pool.c: the pooled packing for few sequences per rank on many ranks */
void dcp__balanced_pool_prepare(balanced *b);
int64_t dcp__balanced_pool_pass(balanced *b, int32_t mbs);
int64_t dcp__balanced_pool_cost(balanced *b, int32_t p, int32_t cp);

/* balanced_descent.c: the local search on a plan */
void dcp__balanced_descent(balanced *b, int64_t budget);

/* balanced_place.c: the dependency model's microbatch order and group blocks */
int dcp__balanced_place(balanced *b);

/*
 * balanced_pipeline.c: with PP > 1, the emitted plan or dynamic_cp's, whichever has the least pipeline
 * makespan, in the microbatch order that lowers it most (never above dynamic_cp's in its own order).
 * The layout adds its arrays (0 when they do not fit).
 */
int dcp__balanced_pipeline_layout(balanced *b, dcp__arena *a, const dcp_config *config, int32_t n);
dcp_status dcp__balanced_pipeline(balanced *b, const dcp__schedule_input *in, dcp_plan *plan, dcp__error *err);

/* balanced_emit.c: the kept plans */
void dcp__balanced_keep_plan(balanced *b, int64_t makespan, int slot);
void dcp__balanced_restore_plan(balanced *b, const saved_plan *k);
int32_t dcp__balanced_sort_groups(const saved_plan *k, int32_t *by_class, int32_t *first, int32_t *cursor, int32_t *out);
dcp_status dcp__balanced_emit(balanced *b, dcp_plan *plan, dcp__error *err);

/* balanced_reference.c: dynamic_cp's plan as a candidate (its tables are also sized by the layout) */
void dcp__balanced_reference_tables(dcp_plan *plan, int32_t **position, dcp__arena *a, int32_t n);
int dcp__balanced_read_reference(balanced *b, const dcp__schedule_input *in, int32_t max_microbatches);

#endif /* DCP_BALANCED_INTERNAL_H */
