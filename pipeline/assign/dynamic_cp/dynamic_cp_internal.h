/*
 * dynamic_cp_internal.h - the `dynamic_cp` scheduler's shared state and hot
 * helpers: the reference's DefaultDynamicCPScheduler, decision for decision,
 * in integer arithmetic.  One planning call's scratch (dyn_state), the
 * class-tree node, and the functions each phase's file offers the others.
 *
 * The reference (Megatron-LM data_schedule_utils.next_hdp_group_packing_aware)
 * builds one microbatch at a time from the sequences left, sorted by length
 * descending:
 *   - the tallest opens group 0 on ranks [0, cp_min);
 *   - every other sequence, for c = cp_min, 2 cp_min, ... <= N, considers
 *     adding itself to each group of size c whose per-rank tokens stay <= M,
 *     then a new group on the c lowest free ranks; each option's value is the
 *     largest per-rank load (sum of s*s/c) after it; the first option with the
 *     smallest value <= cap = s_tallest * M * 1.05 wins, or the sequence waits
 *     for the next microbatch;
 *   - empty ranks are filled by doubling the first group of the smallest size
 *     (shifting later groups right); if no group can grow, the microbatch is
 *     replaced by one group of all N ranks holding what fits;
 *   - with VPP, microbatches are split until their count is a multiple of the
 *     microbatch group (align_sample_id_groups).
 *
 * Exactness.  Loads s*s/c with c a power of two are dyadic rationals, and the
 * reference's float sums of them are exact while they stay below 2^53 units of
 * 1/L (L = the largest power of two <= N): we keep loads scaled by L, as
 * integers.  Token checks sum(s/c) + s/c <= M become sum(s) + s <= M*c.  The
 * cap is rebuilt bit for bit as the double the reference computes
 * (dcp__dynamic_cp_cap_times()), though it never rejects an option (see
 * place() in dynamic_cp_place.c).  The one float sum that is not exact (s/N
 * summed in the full-group fallback, N not a power of two) is replayed with
 * correctly rounded binary64 operations on integers (dynamic_cp_exact.c).
 *
 * Speed.  The reference scans every group and every rank for every sequence
 * left, every microbatch.  Here: (1) whether a sequence can be placed at all is
 * monotone in its length (every constraint is), so per microbatch we keep the
 * largest placeable length and jump, by a galloping search over the sorted
 * order, straight to the next sequence that fits; the sequences skipped are
 * exactly the reference's leftovers.  (2) Each CP size class keeps its groups
 * in a segment tree (creation order) of min tokens, min load, min count and
 * max token room, so "first group whose value equals the current maximum" and
 * "first group of least load" are tree descents.  (3) Every rank of a group
 * carries the same load and free ranks carry none, so an option's value is
 * max(current maximum, group load + cost): no per-rank scan.
 *
 * Where the reference crashes or hangs, dcpack decides (docs/planning.md, "Reference
 * bugs"): a group the fill step cannot grow without writing past rank N-1 is
 * skipped instead of raising IndexError; a sequence needing more ranks than
 * the largest power of two <= N (N not a power of two) gets all N ranks
 * instead of an AssertionError; align skips a microbatch whose halves cannot
 * be refilled instead of looping forever or corrupting the rank list;
 * max_sequences_per_microbatch, which the reference ignores here, is honoured
 * as one more fit condition (0 = unlimited = the reference).
 *
 * The files of pipeline/assign/dynamic_cp/, one per phase:
 *
 *   dynamic_cp.c          entry point: scratch layout and size, the microbatch loop,
 *                         the plan emitted
 *   dynamic_cp_exact.c    the reference's floats replayed exactly: the load cap,
 *                         correctly rounded s / N sums
 *   dynamic_cp_place.c    one microbatch: the class trees and each sequence's option
 *                         (and its form for one rank: one group, no trees)
 *   dynamic_cp_fill.c     empty ranks: groups doubled, or the group of all N ranks
 *   dynamic_cp_blocks.c   finished microbatches: stored as blocks of ranks, split for
 *                         VPP alignment
 *
 * Functions one file offers the others are named dcp__dynamic_cp_*; the hot
 * small ones are static inline here, so every file inlines them.
 */
#ifndef DCP_DYNAMIC_CP_INTERNAL_H
#define DCP_DYNAMIC_CP_INTERNAL_H

#include "../../stages.h"
#include "../../../core/int128.h"

#include <string.h>

/*
 * Loads stay below 2^60 (sums of two below 2^62): when s_tallest * M * L
 * reaches 2^60, loads are kept in units of 2^shift / L (shift > 0, costs
 * rounded down).  The reference's own float loads are inexact long before
 * that (2^53), so this only happens far outside its exact range.
 */
#define DYN_LOAD_LOG2 60

/* 1.05 as the double 0x1.0cccccccccccdp+0 = DYN_CAP_MANTISSA / 2^52. */
#define DYN_CAP_MANTISSA 4728779608739021ull

/* Size classes 2^j, j < MAX_CLASSES: one segment tree each. */
#define MAX_CLASSES 32

/* A segment-tree node over the groups of one size class, in creation order. */
typedef struct dyn_node {
    int64_t tokens;    /* min tokens */
    int64_t load;      /* min load (scaled by L) */
    int64_t fit;       /* max length that still fits (tokens and count), 0 = none */
    int32_t count;     /* min number of sequences */
    int32_t pad;
} dyn_node;

/* A positive double m * 2^e, m in [2^52, 2^53); m == 0 is +0.0. */
typedef struct soft_double {
    uint64_t m;
    int e;
} soft_double;

/* Scratch of one planning call. */
typedef struct dyn_state {
    /* configuration */
    int32_t num_ranks, pow2_ranks, log2_pow2, log2_min_cp;
    int64_t per_rank;       /* M */
    int32_t load_shift;     /* loads in units of 2^load_shift / L; 0 in the reference's exact range */
    int32_t seq_cap;        /* INT32_MAX when unlimited */
    int32_t align_group;    /* > 1: VPP alignment */

    /* input */
    const int32_t *lengths, *sorted, *min_cp;
    int32_t *sorted_lengths; /* lengths[sorted[k]]: the binary searches read one array */
    int32_t n;

    /* sorted positions already placed: next_unplaced[] union-find, n = sentinel */
    int32_t *next_unplaced;

    /* the microbatch under construction */
    int64_t cap;            /* floor(cap * L) */
    int64_t max_load;       /* the largest group load (free ranks carry none) */
    int32_t free_rank;      /* ranks [free_rank, N) are in no group */
    int32_t num_groups;
    int32_t *group_size, *group_count, *group_slot;
    int64_t *group_tokens, *group_load;
    int32_t *placed_pos, *placed_group;
    int32_t num_placed;

    /* per size class 2^j: tree of its groups */
    dyn_node *nodes;
    int32_t *slot_group;
    int32_t tree_offset[MAX_CLASSES], tree_leaves[MAX_CLASSES], slot_offset[MAX_CLASSES], class_count[MAX_CLASSES];

    /* fill step */
    uint64_t *class_bits;   /* [classes][bit_words] */
    int32_t bit_words;
    int32_t *fenwick;       /* group sizes by creation order, 1-based */

    /* finished microbatches: blocks of consecutive ranks, each with its ids */
    int32_t *ids;
    int32_t num_ids;
    int32_t *block_size, *block_first_id, *block_count;
    int32_t num_blocks;
    int32_t *mb_first_block, *mb_num_blocks;
    int32_t num_mb, max_mb;
    int32_t *group_fill;    /* counting-sort cursor per group */
    int32_t *tmp_sizes;     /* align: refilled halves */
} dyn_state;

/* ---- hot helpers ---- */

/* The node of no group: neutral for every min and max. */
static inline dyn_node dcp__dynamic_cp_empty_node(void)
{
    return (dyn_node){INT64_MAX, INT64_MAX, 0, INT32_MAX, 0};
}

static inline int32_t dcp__dynamic_cp_log2_floor(int64_t v)
{
    int32_t k = 0;
    while ((v >> (k + 1)) > 0) k++;
    return k;
}

/* First unplaced sorted position >= p (path halving). */
static inline int32_t dcp__dynamic_cp_find_unplaced(int32_t *next, int32_t p)
{
    while (next[p] != p) {
        next[p] = next[next[p]];
        p = next[p];
    }
    return p;
}

/* Per-rank load of a sequence of length s on 2^j ranks: s*s/2^j scaled by L, in units of 2^load_shift. */
static inline int64_t dcp__dynamic_cp_load_of(const dyn_state *st, int64_t s, int32_t j)
{
    return (int64_t)((((dcp__u128)s * (dcp__u128)s) << (st->log2_pow2 - j)) >> st->load_shift);
}

/* ---- functions the phases offer each other (each documented where it is defined) ---- */

/* dynamic_cp_exact.c: the reference's binary64 arithmetic, replayed on integers */
dcp__u128 dcp__dynamic_cp_cap_times(int64_t tall, int64_t per_rank, int64_t x);
soft_double dcp__dynamic_cp_soft_div(int64_t s, int64_t n);
soft_double dcp__dynamic_cp_soft_add(soft_double a, soft_double b);
int dcp__dynamic_cp_soft_le(soft_double a, int64_t limit);

/* dynamic_cp_place.c: one microbatch, from its tallest sequence to its last group (and its form for one rank) */
dcp_status dcp__dynamic_cp_next_microbatch(dyn_state *st, int32_t first_pos, dcp__error *err);
dcp_status dcp__dynamic_cp_next_microbatch_one_rank(dyn_state *st, int32_t first_pos, dcp__error *err);

/* dynamic_cp_fill.c: the microbatch's empty ranks; the groups of all N ranks */
int dcp__dynamic_cp_fill_empty_ranks(dyn_state *st);
void dcp__dynamic_cp_full_group_fallback(dyn_state *st, int32_t first_pos);
void dcp__dynamic_cp_full_group_microbatch(dyn_state *st, int32_t first_pos);

/* dynamic_cp_blocks.c: the finished microbatches */
dcp_status dcp__dynamic_cp_store_microbatch(dyn_state *st, dcp__error *err);
dcp_status dcp__dynamic_cp_align_microbatches(dyn_state *st, dcp__error *err);

#endif /* DCP_DYNAMIC_CP_INTERNAL_H */
