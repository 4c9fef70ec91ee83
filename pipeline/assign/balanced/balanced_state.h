/*
 * balanced_state.h - the state of one `balanced` planning call, grouped by
 * phase: the problem every phase reads, the plan a pass builds, and one
 * group of tables per phase, each saying which phase writes it and which
 * read it.  Every array is laid out once per call on the arena by
 * balanced.c (balanced_layout), which also gives the exact scratch size;
 * phases that never run together share arrays (the aliases are named where
 * each group is declared).  balanced_internal.h describes the algorithm.
 */
#ifndef DCP_BALANCED_STATE_H
#define DCP_BALANCED_STATE_H

#include "../../stages.h"
#include "../../../core/cost.h"
#include "../../../core/int128.h"

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
 * line.  Its room under the trial's level is pk.level - load; bprev is
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

/*
 * The problem, by position in length-descending order.  Written once by the
 * entry point (balanced.c: read_problem, set_join_allowance, prepare_search),
 * read by every phase.
 */
typedef struct balanced_problem {
    int32_t n, num_ranks, max_seqlen, seq_cap, vpp, min_cp_size;
    int64_t join_num, join_den; /* extra GPU time allowed when a sequence joins a wider group */
    int dense;                  /* fewer than 16 sequences per rank */
    int dependency;             /* config.cost.step_model is DCP_STEP_MODEL_DEPENDENCY */
    const dcp_cost_model *model;
    const int32_t *ids; /* position -> global id */
    int32_t *len;       /* [n] */
    int32_t *min_cp;    /* [n] */
    int32_t *run_end;   /* [n] at the first position of a run of equal lengths and minimal sizes: its end */
    int64_t *min_cost;  /* [n] per-rank cost at min_cp */
    dcp__i128 min_work;  /* sum of cp * cost at min_cp */
    int64_t total_tokens;
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
} balanced_problem;

/*
 * The shortcuts a call takes (set by the entry point from its `shortcuts`
 * argument; each is 0 only in tests, which compare plans with and without
 * it), and what they saved (written by balanced_finish.c and
 * balanced_repack.c, read into the report by balanced.c).
 */
typedef struct balanced_shortcuts {
    int reuse_alignment;    /* second runs start from before_vpp where they can (0: full passes) */
    int32_t num_realigned;  /* second runs that did */
    int bound_merges;       /* merge searches skipped where their gain cannot win (0: all run) */
    int implied_trials;     /* repacking trials an earlier one implies are not run (0: all run) */
    int64_t trials_implied; /* how many were not run */
    int64_t merges_skipped; /* searches that were */
    uint64_t merge_choices; /* a hash of every merge round's choice (tests compare it) */
} balanced_shortcuts;

/*
 * The size-choice phase (balanced_sizes.c, the only writer and reader but
 * for the layout): the passes run so far, the cost one size above the
 * minimal one, and the last LPT pass's CP-size choice with its inputs: the
 * sequential pass at the same target and allowance reuses it instead of
 * choosing again (the pass's class_list stays as that choice left it until
 * another choice, which clears valid).
 */
typedef struct balanced_sizes {
    /* passes run so far: (sequential, target, CP-size signature); a repeat would give the same plan */
    struct {
        int sequential;
        int64_t target;
        uint64_t signature;
    } seen[64];
    int num_seen;
    int64_t *next_cost; /* [n] at a run's first position: per-rank cost one size above min_cp (-1: not yet known) */
    int valid;
    int64_t level, widen_num, widen_den;
    uint64_t signature;
    dcp__i128 work;
    int32_t class_offset[NUM_CLASSES + 1];
    int32_t *cp;   /* [n] */
    int64_t *cost; /* [n] */
} balanced_sizes;

/*
 * The plan a pass builds, and that a kept plan is restored into: CP sizes
 * and cost order (written by balanced_sizes.c), groups and microbatches
 * (written by the constructions, balanced_groups.c, balanced_finish.c,
 * balanced_repack.c, the pooled packing's commit, the local search and
 * balanced_emit.c's restore); read by every phase after it.
 */
typedef struct balanced_pass {
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
    int vpp_misaligned; /* the last pass needed fix_vpp_multiple() (balanced_finish.c; read by balanced.c) */
} balanced_pass;

/*
 * A pass whose microbatch count the VPP alignment had to change runs again,
 * merging down instead of splitting up (balanced.c, try_pass), from the same
 * construction, repair and repacking: their result is kept here before the
 * first alignment, so the second only aligns.  Written and read by
 * balanced_finish.c (balanced.c clears `saved` and sets `pass_start`).  Laid
 * out only with a VPP group; NULL arrays otherwise.
 */
typedef struct balanced_before_vpp {
    int32_t *cp, *item_group, *item_next, *free_groups, *mb_free;     /* [n] each */
    int64_t *cost;                                                     /* [n] */
    int32_t *g_mb, *g_cp, *g_head, *g_tail, *g_count;                 /* [n] each */
    int64_t *g_load, *g_tokens;                                        /* [n] each */
    int32_t num_groups, num_free_groups, num_mbs;
    int64_t pass_start; /* polish_work when the pass began */
    int64_t charge;     /* polishing budget the pass spent before its alignment */
    int saved;          /* the arrays hold the state of the pass that just ran */
} balanced_before_vpp;

/*
 * Working arrays of the constructions and of the phases that build or
 * regroup microbatches (balanced_lpt.c, balanced_sequential.c,
 * balanced_groups.c, balanced_finish.c, balanced_repack.c,
 * balanced_pool.c, balanced_emit.c): what one phase leaves in them no
 * other phase reads (the finish sorts in the heaps; the pooled packing, the
 * local search and the dependency layout keep arrays of their own in them,
 * as their parts below say).
 */
typedef struct balanced_work {
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
    int32_t *saved_mb;        /* [n] group -> microbatch before a regrouping */
    /* the last length costed at each class when joining a wider group: equal lengths come in runs */
    int64_t join_len[NUM_CLASSES], join_cost[NUM_CLASSES];
} balanced_work;

/*
 * Repacking one microbatch against a level, and merging microbatches
 * (balanced_repack.c, the only writer; balanced_finish.c reads limit,
 * balanced.c sets polish_work and clears memo): its sequences, trial groups,
 * each sequence's cost per class, and what earlier searches found.
 */
typedef struct balanced_repack {
    int32_t limit;                         /* the most sequences a repacked microbatch holds */
    int32_t *items, *of, *size, *count;    /* [limit] each */
    int64_t *load, *tokens;                /* [limit] each */
    int64_t *cost;       /* [limit * NUM_CLASSES]: INT64_MAX where the size does not fit */
    const int64_t **row; /* [limit]: each list item's costs, its row of cost or of the cost table */
    uint64_t *bits;      /* [(n + 63) / 64]: a bitset of positions for sorting them, all zero between uses */
    int32_t *seg;        /* [NUM_CLASSES * limit]: trial groups of each class, by load descending */
    int32_t *head, *tail, *next; /* [limit] each: a trial group's sequences (list indices) */
    int64_t polish_work; /* sequences repacking may still go through (each trial counts them) */
    /*
     * Trial merges of the current merge loop: a pair's trial gives the same
     * level until a merge changes one of its microbatches, so each is
     * repacked once per loop instead of once per round.
     */
    merge_trial merge_memo[MERGE_MEMO];
    int num_merge_memo;
    repack_memo *memo; /* [REPACK_MEMO] searches of this call, by hash (cleared per call) */
} balanced_repack;

/*
 * Few sequences per rank: the first n positions' (the longest sequences')
 * cost at every class, their cheapest and least GPU time, each row computed
 * once a call, when first asked for (repacking and the local search ask for
 * them over and over); later positions' are computed where they are needed.
 * Written by balanced_repack.c (dcp__balanced_cost_row), which every phase
 * that costs a sequence at another size reads it through; balanced.c clears it.
 */
typedef struct balanced_cost_table {
    int32_t n;         /* min(n, 16N - 1), at most COST_TABLE_MAX above COST_TABLE_WHOLE; 200 bytes each */
    int ready;         /* the call uses the table (few sequences per rank) */
    int64_t *cost;     /* [n * NUM_CLASSES]: INT64_MAX where the size does not fit */
    int64_t *cheapest; /* [n]: -1 until the row is computed */
    dcp__i128 *least;   /* [n]: the least GPU time (cost x size at the best size) */
} balanced_cost_table;

/*
 * The pooled packing (balanced_pool.c, the only writer): each position's
 * minimal class and its cost there and at the POOL_WINDOW - 1 classes above
 * (-1: not yet computed), and one trial's groups and room index.  It runs
 * before any pass and is done with its trial groups once its plan is
 * committed, so grp lives in work.heap and work.park (one block of 2n
 * entries) and of, keep_of and keep_size in pass.order, pass.class_list and
 * work.alive_next; the cost cache is its own (the local search reads it too,
 * balanced.c reads floor).
 */
typedef struct balanced_pool {
    int8_t *k0;                         /* [n] */
    int64_t *cost;                      /* [n * POOL_WINDOW] */
    pool_group *grp;                    /* [n] a trial's groups */
    int32_t *of;                        /* [n] a trial's group of each position */
    int32_t *keep_of, *keep_size;       /* [n] the trial kept: each position's group, each group's size */
    int32_t keep_groups;
    int32_t *bhead;                     /* [NUM_CLASSES * POOL_BUCKETS] */
    uint64_t *bits;                     /* [NUM_CLASSES * POOL_BUCKETS / 64] */
    uint64_t summary[NUM_CLASSES];
    int8_t next_class[NUM_CLASSES];     /* the next class that is a size on N ranks (NUM_CLASSES: none) */
    int64_t level;                      /* the level of the trial under way */
    int shift;                          /* its rooms' shift to a bucket */
    int32_t shortest;                   /* the shortest length: a group with fewer free tokens is full */
    int ready;                          /* the cache is in use this call */
    int64_t floor;                      /* the dearest sequence's cheapest cost (set by the preparation) */
} balanced_pool;

/*
 * The local search (balanced_descent.c, the only writer and reader):
 * per-microbatch max-heaps of groups by load (laid out as pass.mb_first),
 * each group's place in its heap, and per class a max tree over its groups
 * of (slack, free tokens).  It runs when the passes are done, so its arrays
 * are theirs: heap is pass.order, pos pass.class_list, leaf
 * work.alive_next, slack work.heap and room work.park (2n int64 each: a
 * class of c groups takes 2c nodes).
 */
typedef struct balanced_descent {
    int32_t *heap;   /* [n] */
    int32_t *pos;    /* [n] */
    int64_t *slack;  /* [2n] the classes' trees one after another */
    int64_t *room;   /* [2n] */
    int32_t *leaf;   /* [n] a class's leaf -> group */
    int32_t tree_off[NUM_CLASSES], leaves[NUM_CLASSES];
    int64_t work;    /* work the search may still do */
} balanced_descent;

/*
 * The best plans so far, by makespan (plan[0] the best); few sequences per
 * rank: all are polished.  Written by balanced_emit.c (keep), read by
 * balanced.c, balanced_finish.c, balanced_emit.c and balanced_pipeline.c;
 * balanced_reference.c makes dynamic_cp's plan in ref_region.
 */
typedef struct balanced_kept {
    saved_plan plan[NUM_KEPT + 1]; /* the last only for dynamic_cp's plan, in pool.cost's place (balanced_reference.c) */
    int num;
    /* where the candidate's plan is made (NULL without one): the arrays pass.cp .. work.cursor and what follows them */
    unsigned char *ref_region;
    size_t ref_region_size;
} balanced_kept;

/*
 * The dependency model's layout (balanced_place.c, the only writer; emit
 * reads rank and order after it): it runs at emit, after every pass, so its
 * per-group and per-microbatch arrays are the passes' (load pass.g_load,
 * done pass.g_key, index work.sort_a, greedy work.sort_b, rank
 * work.saved_mb, tmp pass.mb_free, first pass.mb_first, level
 * pass.mb_level, slack pass.mb_cap, order pass.mb_order, seen work.cursor,
 * best_rank and best_order work.heap).  Its per-rank arrays are its own,
 * laid out only under that model.
 */
typedef struct balanced_place {
    int64_t *load;      /* [n] a group's load */
    int64_t *done;      /* [n] a group's finish time in the layout under way */
    int32_t *index;     /* [n] groups by microbatch, size descending, index */
    int32_t *greedy;    /* [n] groups by microbatch, size descending, load descending, index */
    int32_t *rank;      /* [n] a group's first rank */
    int32_t *tmp;       /* [2n] merge sorts */
    int32_t *first;     /* [2n + 1] microbatch m's groups: index[first[m] .. first[m+1]) */
    int64_t *level;     /* [2n] a microbatch's most loaded group */
    int64_t *slack;     /* [2n] level x N minus the microbatch's GPU time (saturated) */
    int32_t *seen;      /* [2n] the last microbatch order tried for this plan */
    int seen_valid;
    int32_t *order;     /* [2n] the microbatches in layout order */
    int32_t *best_rank; /* [n] rank of the best layout so far */
    int32_t *best_order;/* [2n] order of the best layout so far */
    int32_t busy_mbs;   /* microbatches with groups */
    dcp__i128 work;      /* the plan's GPU time: the sum over groups of size x load */
    int64_t *finish;    /* [N] each rank's finish time after the microbatches laid out so far */
    int64_t *max;       /* [N] their maxima over the aligned blocks of each size 2^k, k >= 1, one level after another */
    int32_t *at;        /* [N] at emit: the group whose block starts at a rank */
    uint64_t *blocks;   /* [2 min(n, N)] the free blocks of one size (start time and index in one integer), a sort's buffer */
    int32_t *next;      /* [min(n, N)] the free blocks of the next size */
    int32_t block_cap;  /* min(n, N): a size has at most as many free blocks as groups left to place */
} balanced_place;

/*
 * With PP > 1 (balanced_pipeline.c, the only writer and reader), laid out
 * after everything else and only then.
 */
typedef struct balanced_pipeline {
    int64_t *cost;        /* [4n] two candidates' per-microbatch costs and tokens */
    int32_t *order;       /* [4n] two candidates' orders, a trial order, a sorted one */
    unsigned char *model; /* the pipeline model's scratch for n microbatches */
    int32_t *tables;      /* [4n + 2] a copy of a plan's tables */
    int32_t *alt;         /* [5n + 2] the tables of a plan for more microbatches */
    int64_t *class_sum;   /* [P] the class order's per-class cost sums, */
    int32_t *class_fill;  /* [P] member counts, */
    int32_t *class_slot;  /* [P] residues, */
    int32_t *class_of;    /* [n] and each microbatch's class */
} balanced_pipeline;

/* Scratch of one planning call, by phase. */
typedef struct balanced {
    balanced_problem in;
    balanced_shortcuts shortcut;
    balanced_sizes sizes;
    balanced_pass pass;
    balanced_before_vpp before_vpp;
    balanced_work work;
    balanced_repack rp;
    balanced_cost_table table;
    balanced_pool pk;
    balanced_descent ds;
    balanced_kept kept;
    balanced_place pl;
    balanced_pipeline pp;
} balanced;

#endif /* DCP_BALANCED_STATE_H */
