/*
 * balanced_internal.h - the `balanced` scheduler's shared state and hot
 * helpers: one planning call's scratch (struct balanced), the CP-size
 * classes, the 4-ary heaps, group and microbatch building blocks, and the
 * functions each phase's file offers the others.
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
 * small ones are static inline here, so every file inlines them.
 */
#ifndef DCP_BALANCED_INTERNAL_H
#define DCP_BALANCED_INTERNAL_H

#include "../../stages.h"
#include "../../../core/cost.h"

#include <string.h>

/*
 * CP-size classes: one per power of two up to the largest DPxCP group
 * dcp_config_validate() accepts (2^20 ranks, past DCP_MAX_LOG2_CP: a group
 * may span the whole pool), and FULL_CLASS for all N ranks when N is not a
 * power of two.
 */
enum { MAX_LOG2_RANKS = 20, NUM_CLASSES = MAX_LOG2_RANKS + 2, FULL_CLASS = MAX_LOG2_RANKS + 1 };

/* Largest microbatch (in sequences) that is repacked: the repacking is quadratic in it. */
enum { REPACK_MAX = 4096 };

/*
 * Positions the cost table holds: every one in calls of up to COST_TABLE_WHOLE
 * sequences (3.1 MiB at most), the first COST_TABLE_MAX (1.6 MiB) in longer
 * ones, so that the workspace at 131,072 sequences on 65,536 ranks stays
 * within 256 bytes a sequence and rank.
 */
enum { COST_TABLE_WHOLE = 16384, COST_TABLE_MAX = 8192 };

/*
 * The local search's work per sequence (balanced_descent.c): with few
 * sequences per rank on every kept plan; with many, on the best plan from
 * DESCENT_MIN_SEQUENCES sequences on (below that it costs more than it finds).
 */
enum { DESCENT_WORK_DENSE = 8, DESCENT_WORK_MANY = 4, DESCENT_MIN_SEQUENCES = 16384 };

/* The fast effort level's local search on dynamic_cp's plan, per sequence (balanced.c). */
enum { FAST_DESCENT_WORK = 4 };

/* Trial merges remembered within one merge loop (the window's 28 pairs and the rounds after). */
enum { MERGE_MEMO = 64 };

/* Sequences all repacking trials of one call may go through together: bounds the polishing time. */
#define POLISH_WORK ((int64_t)1 << 22)

/*
 * An entry of a 4-ary min-heap: the key travels with the id, so sifting reads
 * one array.  In the construction heaps `room` is the group's free tokens
 * (saturated; -1 at the sequence cap), so the scan for a wider group with room
 * reads only the heap's first entries.
 */
typedef struct heap_entry {
    int64_t key;
    int32_t id;
    int32_t room;
} heap_entry;

/* A plan kept from a pass: each sequence's group, each group's microbatch (-1: unused) and CP size. */
typedef struct saved_plan {
    int64_t makespan;
    int32_t num_groups, num_mbs;
    int32_t *item_group; /* [n] */
    int32_t *g_mb;       /* [n] */
    int32_t *g_cp;       /* [n] */
} saved_plan;

enum { NUM_KEPT = 3 };

/*
 * A trial group of the pooled packing (balanced_pool.c), in one half cache
 * line.  Its room under the trial's level is pk_level - load; bprev is
 * POOL_UNLINKED while it is in no bucket (full, or being filled).
 */
typedef struct pool_group {
    int64_t load, tokens;
    int32_t size, count;
    int32_t bprev, bnext;
} pool_group;
enum { POOL_UNLINKED = -2 };

/* The pooled packing: classes above a position's minimal one whose costs are cached, room buckets per class. */
enum { POOL_WINDOW = 4, POOL_BUCKETS = 1024 };

/* Few sequences per rank on at least this many ranks: a pooled plan near its bound is the plan, no pass runs. */
enum { POOL_MIN_RANKS = 2048 };

/*
 * A trial merge of microbatches a < b under a bound: the merged level, or -1;
 * and what its search ended on (the trial level) and charged to the
 * polishing budget, so that committing it repeats only the last trial.
 */
typedef struct merge_trial {
    int32_t a, b;
    int64_t bound, merged;
    int64_t trial, charge;
} merge_trial;

/*
 * A repacking search remembered (balanced_repack.c): its sequences (a hash of
 * their positions, and how many), its bound, its outcome (the level, -1 for
 * none below the bound), the trial level it ended on and what it charged.
 */
typedef struct repack_memo {
    uint64_t key;
    int32_t count;
    int64_t bound, level, trial, charge;
} repack_memo;
enum { REPACK_MEMO = 1024 };

/*
 * What one repacking search's trials so far imply (balanced_repack.c): every
 * level from fits_from up to the search's bound fits alike with some trial
 * that fitted; the last trial run fitted, alike down to left_from (INT64_MAX:
 * it did not fit).
 */
typedef struct trial_search {
    int64_t fits_from, left_from;
} trial_search;

/* Scratch of one planning call. */
typedef struct balanced {
    /* the problem, by position in length-descending order */
    int32_t n, num_ranks, max_seqlen, seq_cap, vpp, min_cp_size;
    int64_t join_num, join_den; /* extra GPU time allowed when a sequence joins a wider group */
    int dense;                  /* fewer than 16 sequences per rank */
    int vpp_misaligned;         /* the last pass needed fix_vpp_multiple() (balanced_finish.c) */
    /*
     * A pass whose microbatch count the VPP alignment had to change runs again,
     * merging down instead of splitting up (balanced.c, try_pass), from the same
     * construction, repair and repacking: their result is kept here before the
     * first alignment, so the second only aligns (balanced_finish.c).  Laid out
     * only with a VPP group; NULL arrays otherwise.
     */
    struct {
        int32_t *cp, *item_group, *item_next, *free_groups, *mb_free;     /* [n] each */
        int64_t *cost;                                                     /* [n] */
        int32_t *g_mb, *g_cp, *g_head, *g_tail, *g_count;                 /* [n] each */
        int64_t *g_load, *g_tokens;                                        /* [n] each */
        int32_t num_groups, num_free_groups, num_mbs;
        int64_t pass_start; /* polish_work when the pass began */
        int64_t charge;     /* polishing budget the pass spent before its alignment */
        int saved;          /* the arrays hold the state of the pass that just ran */
    } before_vpp;
    int reuse_alignment;    /* second runs start from before_vpp where they can (0 only in tests: full passes) */
    int32_t num_realigned;  /* second runs that did */
    int bound_merges;       /* merge searches skipped where their gain cannot win (0 only in tests: all run) */
    int implied_trials;     /* repacking trials an earlier one implies are not run (0 only in tests: all run) */
    int64_t trials_implied; /* how many were not run */
    int64_t merges_skipped; /* searches that were */
    uint64_t merge_choices; /* a hash of every merge round's choice (tests compare it) */
    /* passes run so far: (sequential, target, CP-size signature); a repeat would give the same plan */
    struct {
        int sequential;
        int64_t target;
        uint64_t signature;
    } seen[64];
    int num_seen;
    const dcp_cost_model *model;
    const int32_t *ids; /* position -> global id */
    int32_t *len;       /* [n] */
    int32_t *min_cp;    /* [n] */
    int32_t *run_end;   /* [n] at the first position of a run of equal lengths and minimal sizes: its end */
    int64_t *next_cost; /* [n] at a run's first position: per-rank cost one size above min_cp (-1: not yet known) */
    int64_t *min_cost;  /* [n] per-rank cost at min_cp */
    __int128 min_work;  /* sum of cp * cost at min_cp */
    int64_t total_tokens;

    /*
     * The last LPT pass's CP-size choice (dcp__balanced_choose_sizes) and its inputs: the
     * sequential pass at the same target and allowance reuses it instead of
     * choosing again (class_list stays as that choice left it until another
     * choice, which clears sizes_valid).
     */
    int sizes_valid;
    int64_t sizes_level, sizes_widen_num, sizes_widen_den;
    uint64_t sizes_signature;
    __int128 sizes_work;
    int32_t sizes_class_offset[NUM_CLASSES + 1];
    int32_t *sizes_cp;   /* [n] */
    int64_t *sizes_cost; /* [n] */

    /* one pass */
    int32_t *cp;         /* [n] */
    int64_t *cost;       /* [n] per-rank cost at cp */
    int32_t *order;      /* [n] positions by cost descending */
    int32_t *class_list; /* [n] positions grouped by class */
    int32_t *item_group; /* [n] */
    int32_t *item_next;  /* [n] next position in the same group, -1 at the end */

    int32_t num_groups;   /* group ids in use: [0, num_groups) */
    int32_t num_free_groups;
    int32_t *free_groups; /* [n] ids of groups emptied by a merge, for reuse: live groups never exceed n */
    int32_t *g_mb, *g_cp, *g_head, *g_tail, *g_count; /* [n] each */
    int64_t *g_load, *g_tokens, *g_key;               /* [n] each; g_key: load minus cap */

    int32_t num_mbs;
    /*
     * Microbatches: at most 2n while a pass builds them (shelves and plain ones
     * hold at least one sequence each, except plain ones left empty, and each
     * grown one holds the sequence it was made for); n once empty ones go.
     */
    int32_t *mb_free;  /* [2n] ranks not yet in a group */
    int64_t *mb_cap;   /* [2n] level the microbatch is filled to */
    int64_t *mb_level; /* [2n] slowest rank, after a pass */
    int32_t *mb_order; /* [2n] microbatches by cap descending */
    int32_t *mb_first; /* [2n + 1] groups of a microbatch: mb_groups[mb_first[m] .. mb_first[m+1]) */
    int32_t *mb_groups;/* [n] */

    heap_entry *heap; /* [n] per-class heaps of groups by load minus cap, partitioned by class_offset */
    heap_entry *park; /* [n] per-class heaps of groups too full for the current length, by minus free tokens */
    heap_entry *local;/* [min(n, N)] groups of one microbatch by minus load (repair) */
    int32_t *cursor;  /* [2n] counting-sort cursors */
    int32_t local_cap;
    int32_t *sort_a, *sort_b; /* [n] merge sorts */
    int32_t *alive_next;      /* [n + 1] sequential passes: next unplaced position at or after p (path-compressed) */
    int32_t *g_slot;          /* [n] sequential passes: a group's leaf in room_tree */
    int64_t *room_tree;       /* [2 * room_leaves] max tree of the open microbatch's groups' free tokens */
    int32_t room_leaves;      /* a power of two >= min(n, N): groups one microbatch can hold */
    /* repacking one microbatch: its sequences, trial groups, and each sequence's cost per class */
    int32_t repack_limit;
    int32_t *rp_items, *rp_of, *rp_size, *rp_count; /* [repack_limit] each */
    int64_t *rp_load, *rp_tokens;                   /* [repack_limit] each */
    int64_t *rp_cost; /* [repack_limit * NUM_CLASSES]: INT64_MAX where the size does not fit */
    const int64_t **rp_row; /* [repack_limit]: each list item's costs, its row of rp_cost or of the cost table */
    uint64_t *rp_bits;      /* [(n + 63) / 64]: a bitset of positions for sorting them, all zero between uses */
    int32_t *rp_seg;  /* [NUM_CLASSES * repack_limit]: trial groups of each class, by load descending */
    int32_t *rp_head, *rp_tail, *rp_next; /* [repack_limit] each: a trial group's sequences (list indices) */
    int64_t polish_work; /* sequences repacking may still go through (each trial counts them) */
    /*
     * Few sequences per rank: the first table_n positions' (the longest
     * sequences') cost at every class, their cheapest and least GPU time,
     * each row computed once a call, when first asked for (repacking and the
     * local search ask for them over and over); later positions' are computed
     * where they are needed.
     */
    int32_t table_n;        /* min(n, 16N - 1), at most COST_TABLE_MAX above COST_TABLE_WHOLE; 200 bytes each */
    int table_ready;        /* the call uses the table (few sequences per rank) */
    int64_t *cost_table;    /* [table_n * NUM_CLASSES]: INT64_MAX where the size does not fit */
    int64_t *cost_cheapest; /* [table_n]: -1 until the row is computed */
    __int128 *cost_least;   /* [table_n]: the least GPU time (cost x size at the best size) */
    /*
     * Trial merges of the current merge loop: a pair's trial gives the same
     * level until a merge changes one of its microbatches, so each is
     * repacked once per loop instead of once per round.
     */
    merge_trial memo[MERGE_MEMO];
    int num_memo;
    repack_memo *rp_memo; /* [REPACK_MEMO] searches of this call, by hash (cleared per call) */
    int32_t *saved_mb;        /* [n] group -> microbatch before a regrouping */
    /* the last length costed at each class when joining a wider group: equal lengths come in runs */
    int64_t join_len[NUM_CLASSES], join_cost[NUM_CLASSES];
    /*
     * A sequence alone on one rank (CP size 1: its per-rank cost h is all its
     * work) with h < join_below[k2] cannot join a group of class k2 (size c2)
     * within the allowance, whatever its length: c2 * cost(s, c2) is at least
     * h - (c2 - 1) + c2 * (c2 - 1) * round_latency (the work, floored per
     * rank, plus the ring's fixed cost), which exceeds h * (1 + join_num /
     * join_den) while h * join_num < (c2 * (c2 - 1) * round_latency - (c2 - 1))
     * * join_den.  Saves costing and scanning classes that could never take it.
     */
    int64_t join_below[NUM_CLASSES];

    /*
     * The pooled packing (balanced_pool.c): each position's minimal class and
     * its cost there and at the POOL_WINDOW - 1 classes above (-1: not yet
     * computed), and one trial's groups and room index.  It runs before any
     * pass and is done with its trial groups once its plan is committed, so
     * pk_grp lives in heap and park (one block of 2n entries) and pk_of,
     * pk_keep_of and pk_keep_size in order, class_list and alive_next; the
     * cost cache is its own (the local search reads it too).
     */
    int8_t *pk_k0;                              /* [n] */
    int64_t *pk_cost;                           /* [n * POOL_WINDOW] */
    pool_group *pk_grp;                         /* [n] a trial's groups */
    int32_t *pk_of;                             /* [n] a trial's group of each position */
    int32_t *pk_keep_of, *pk_keep_size;         /* [n] the trial kept: each position's group, each group's size */
    int32_t pk_keep_groups;
    int32_t *pk_bhead;                          /* [NUM_CLASSES * POOL_BUCKETS] */
    uint64_t *pk_bits;                          /* [NUM_CLASSES * POOL_BUCKETS / 64] */
    uint64_t pk_summary[NUM_CLASSES];
    int8_t pk_next_class[NUM_CLASSES];          /* the next class that is a size on N ranks (NUM_CLASSES: none) */
    int64_t pk_level;                           /* the level of the trial under way */
    int pk_shift;                               /* its rooms' shift to a bucket */
    int32_t pk_shortest;                        /* the shortest length: a group with fewer free tokens is full */
    int pk_ready;                               /* the cache is in use this call */
    int64_t pk_floor;                           /* the dearest sequence's cheapest cost (set by the preparation) */

    /*
     * The local search (balanced_descent.c): per-microbatch max-heaps of
     * groups by load (laid out as mb_first), each group's place in its heap,
     * and per class a max tree over its groups of (slack, free tokens).  It
     * runs when the passes are done, so its arrays are theirs: ds_heap is
     * order, ds_pos class_list, ds_leaf alive_next, ds_slack heap and
     * ds_room park (2n int64 each: a class of c groups takes 2c nodes).
     */
    int32_t *ds_heap;   /* [n] */
    int32_t *ds_pos;    /* [n] */
    int64_t *ds_slack;  /* [2n] the classes' trees one after another */
    int64_t *ds_room;   /* [2n] */
    int32_t *ds_leaf;   /* [n] a class's leaf -> group */
    int32_t ds_tree_off[NUM_CLASSES], ds_leaves[NUM_CLASSES];
    int64_t ds_work;    /* work the search may still do */

    /* the best plans so far, by makespan (kept[0] the best); few sequences per rank: all are polished */
    saved_plan kept[NUM_KEPT + 1]; /* the last only for dynamic_cp's plan, in pk_cost's place (balanced_reference.c) */
    unsigned char *ref_region;     /* where the candidate's plan is made (NULL without one): the arrays cp .. cursor and what follows them */
    size_t ref_region_size;
    int num_kept;

    /*
     * The dependency model's layout (balanced_place.c): it runs at emit,
     * after every pass, so its per-group and per-microbatch arrays are the
     * passes' (pl_load g_load, pl_done g_key, pl_index sort_a, pl_greedy
     * sort_b, pl_rank saved_mb, pl_tmp mb_free, pl_first mb_first, pl_level
     * mb_level, pl_slack mb_cap, pl_order mb_order, pl_seen cursor,
     * pl_best_rank and pl_best_order heap); emit reads pl_rank and pl_order
     * after it.
     * Its per-rank arrays are its own, laid out only under that model.
     */
    int dependency;        /* config.cost.step_model is DCP_STEP_MODEL_DEPENDENCY */
    int64_t *pl_load;      /* [n] a group's load */
    int64_t *pl_done;      /* [n] a group's finish time in the layout under way */
    int32_t *pl_index;     /* [n] groups by microbatch, size descending, index */
    int32_t *pl_greedy;    /* [n] groups by microbatch, size descending, load descending, index */
    int32_t *pl_rank;      /* [n] a group's first rank */
    int32_t *pl_tmp;       /* [2n] merge sorts */
    int32_t *pl_first;     /* [2n + 1] microbatch m's groups: pl_index[pl_first[m] .. pl_first[m+1]) */
    int64_t *pl_level;     /* [2n] a microbatch's most loaded group */
    int64_t *pl_slack;     /* [2n] level x N minus the microbatch's GPU time (saturated) */
    int32_t *pl_seen;      /* [2n] the last microbatch order tried for this plan */
    int pl_seen_valid;
    int32_t *pl_order;     /* [2n] the microbatches in layout order */
    int32_t *pl_best_rank; /* [n] pl_rank of the best layout so far */
    int32_t *pl_best_order;/* [2n] pl_order of the best layout so far */
    int32_t pl_busy_mbs;   /* microbatches with groups */
    __int128 pl_work;      /* the plan's GPU time: the sum over groups of size x load */
    int64_t *pl_finish;    /* [N] each rank's finish time after the microbatches laid out so far */
    int64_t *pl_max;       /* [N] their maxima over the aligned blocks of each size 2^k, k >= 1, one level after another */
    int32_t *pl_at;        /* [N] at emit: the group whose block starts at a rank */
    uint64_t *pl_blocks;   /* [2 min(n, N)] the free blocks of one size (start time and index in one integer), a sort's buffer */
    int32_t *pl_next;      /* [min(n, N)] the free blocks of the next size */
    int32_t pl_block_cap;  /* min(n, N): a size has at most as many free blocks as groups left to place */

    /* With PP > 1 (balanced_pipeline.c), laid out after everything else and only then */
    int64_t *pp_cost;        /* [4n] two candidates' per-microbatch costs and tokens */
    int32_t *pp_order;       /* [4n] two candidates' orders, a trial order, a sorted one */
    unsigned char *pp_model; /* the pipeline model's scratch for n microbatches */
    int32_t *pp_tables;      /* [4n + 2] a copy of a plan's tables */
    int32_t *pp_alt;         /* [5n + 2] the tables of a plan for more microbatches */
} balanced;

/* ---- numbers ---- */

static inline int64_t dcp__balanced_sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static inline int64_t dcp__balanced_clamp128(__int128 v)
{
    if (v > (__int128)INT64_MAX) return INT64_MAX;
    if (v < -(__int128)INT64_MAX) return -INT64_MAX;
    return (int64_t)v;
}

static inline int64_t dcp__balanced_ceil_div128(__int128 a, __int128 d)
{
    return dcp__balanced_clamp128(a <= 0 ? 0 : (a + d - 1) / d);
}

/* ---- CP-size classes ---- */

static inline int dcp__balanced_class_of(int32_t cp)
{
    if (cp & (cp - 1)) return FULL_CLASS; /* all N ranks, N not a power of two */
    return cp > 0 ? __builtin_ctz((uint32_t)cp) : 0;
}

/* The next CP size after cp on num_ranks ranks: double, or all ranks; 0 when cp is already all of them. */
static inline int32_t dcp__balanced_next_size(int32_t cp, int32_t num_ranks)
{
    if (cp >= num_ranks) return 0;
    return (int64_t)cp * 2 <= num_ranks ? cp * 2 : num_ranks;
}

static inline int32_t dcp__balanced_class_size(const balanced *b, int k)
{
    return k == FULL_CLASS ? b->num_ranks : (int32_t)1 << k;
}

/* 1 if class k is a group size on this many ranks. */
static inline int dcp__balanced_class_valid(const balanced *b, int k)
{
    if (k == FULL_CLASS) return (b->num_ranks & (b->num_ranks - 1)) != 0;
    return ((int64_t)1 << k) <= b->num_ranks;
}

/* ---- 4-ary min-heaps of (key, id); equal keys in heap order (deterministic, as every operation is) ---- */

static inline int dcp__balanced_entry_less(heap_entry a, heap_entry b) { return a.key < b.key; }

/* 4-ary: half the levels of a binary heap; the four children's compares are independent. */
static inline void dcp__balanced_heap_sift_down(heap_entry *h, int32_t size, int32_t i)
{
    heap_entry x = h[i];
    for (;;) {
        int32_t c = 4 * i + 1;
        if (c >= size) break;
        /*
         * The first least child, chosen by selects rather than branches: which
         * child wins is data-dependent and mispredicted about half the time.
         */
        int32_t best = c;
        int64_t best_key = h[c].key;
        if (c + 4 <= size) {
            /* a full node (nearly always): the pairs (c, c+1) and (c+2, c+3) first, independent of each other */
            const int64_t k1 = h[c + 1].key, k2 = h[c + 2].key, k3 = h[c + 3].key;
            const int less01 = k1 < best_key, less23 = k3 < k2;
            const int32_t b01 = less01 ? c + 1 : c, b23 = less23 ? c + 3 : c + 2;
            const int64_t m01 = less01 ? k1 : best_key, m23 = less23 ? k3 : k2;
            const int right = m23 < m01; /* ties: the left pair's, so the first least child wins as before */
            best = right ? b23 : b01;
            best_key = right ? m23 : m01;
        } else {
            for (int32_t j = c + 1; j < size; j++) {
                int64_t k = h[j].key;
                int less = k < best_key;
                best = less ? j : best;
                best_key = less ? k : best_key;
            }
        }
        if (!(best_key < x.key)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static inline void dcp__balanced_heap_push(heap_entry *h, int32_t *size, int32_t id, int64_t key, int32_t room)
{
    heap_entry x = {key, id, room};
    int32_t i = (*size)++;
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (!dcp__balanced_entry_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static inline int32_t dcp__balanced_heap_pop(heap_entry *h, int32_t *size)
{
    int32_t top = h[0].id;
    h[0] = h[--(*size)];
    if (*size > 0) dcp__balanced_heap_sift_down(h, *size, 0);
    return top;
}

/* The entry at i was replaced: move it up or down to its place. */
static inline void dcp__balanced_heap_fix(heap_entry *h, int32_t size, int32_t i)
{
    heap_entry x = h[i];
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (!dcp__balanced_entry_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
    dcp__balanced_heap_sift_down(h, size, i);
}

/* The root's key changed to `key` (its room to `room`): restore the order. */
static inline void dcp__balanced_heap_rekey_top(heap_entry *h, int32_t size, int64_t key, int32_t room)
{
    h[0].key = key;
    h[0].room = room;
    dcp__balanced_heap_sift_down(h, size, 0);
}

/* ---- groups and microbatches ---- */

static inline int32_t dcp__balanced_new_mb(balanced *b, int64_t cap)
{
    int32_t m = b->num_mbs++;
    b->mb_free[m] = b->num_ranks;
    b->mb_cap[m] = cap;
    return m;
}

static inline int32_t dcp__balanced_new_group(balanced *b, int32_t mb, int32_t cp)
{
    int32_t g = b->num_free_groups > 0 ? b->free_groups[--b->num_free_groups] : b->num_groups++;
    b->g_mb[g] = mb;
    b->g_cp[g] = cp;
    b->g_head[g] = -1;
    b->g_tail[g] = -1;
    b->g_count[g] = 0;
    b->g_load[g] = 0;
    b->g_tokens[g] = 0;
    b->mb_free[mb] -= cp;
    return g;
}

static inline void dcp__balanced_group_add(balanced *b, int32_t g, int32_t p, int64_t cost)
{
    b->item_group[p] = g;
    b->item_next[p] = -1;
    if (b->g_tail[g] < 0) b->g_head[g] = p;
    else b->item_next[b->g_tail[g]] = p;
    b->g_tail[g] = p;
    b->g_count[g]++;
    b->g_load[g] = dcp__balanced_sat_add(b->g_load[g], cost);
    b->g_tokens[g] += b->len[p];
}

/* A group's free tokens for a heap entry: saturated to int32 (lengths are int32), -1 at the sequence cap. */
static inline int32_t dcp__balanced_entry_room(const balanced *b, int32_t g)
{
    if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) return -1;
    int64_t room = (int64_t)b->max_seqlen * b->g_cp[g] - b->g_tokens[g];
    return room > INT32_MAX ? INT32_MAX : room < -1 ? -1 : (int32_t)room;
}

/* dcp__cost() of s tokens at class k2's size c2, remembered per class for the next sequence of the same length. */
static inline int64_t dcp__balanced_join_cost(balanced *b, int k2, int32_t s, int32_t c2)
{
    if (b->join_len[k2] != s) {
        b->join_len[k2] = s;
        b->join_cost[k2] = dcp__cost(b->model, s, c2);
    }
    return b->join_cost[k2];
}

/*
 * A group of a wider class that has token (and count) room for a sequence of
 * s tokens: among the first entries of the class's heap (the least loaded,
 * roughly) the first with room, as its index; else the parked group with the
 * most free tokens, as WIDE_PARKED; else WIDE_NONE.
 */
enum { WIDE_NONE = -2, WIDE_PARKED = -1 };
static inline int32_t dcp__balanced_wide_candidate(const balanced *b, const heap_entry *heap, int32_t heap_size,
                                                   const heap_entry *park, int32_t park_size, int32_t s)
{
    int32_t look = heap_size < 8 ? heap_size : 8;
    for (int32_t x = 0; x < look; x++)
        if (heap[x].room >= s) return x; /* tokens + s <= M * cp, under the sequence cap */
    if (park_size > 0 && -park[0].key >= s && (b->seq_cap == 0 || b->g_count[park[0].id] < b->seq_cap)) return WIDE_PARKED;
    return WIDE_NONE;
}

/* ---- functions the phases offer each other (each documented where it is defined) ---- */

/* balanced_sizes.c: a pass's CP sizes and cost order; whether a pass would repeat an earlier one */
__int128 dcp__balanced_choose_sizes(balanced *b, int64_t level, int64_t widen_num, int64_t widen_den,
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
const int64_t *dcp__balanced_cost_row(balanced *b, int32_t p, int64_t *cheapest, __int128 *least);
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
