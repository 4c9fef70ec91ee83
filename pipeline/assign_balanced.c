/*
 * assign_balanced.c - dcpack's own scheduler: minimise the step cost model's
 * makespan (README, cost model), the sum over microbatches of (slowest rank +
 * microbatch overhead), under every invariant of a plan.
 *
 * A microbatch is a multiset of groups: a group is a power-of-two block of
 * ranks (or all N ranks) holding sequences that all run at that CP size, and
 * every rank of the group carries the group's load (the sum of cost(s, cp)
 * over its sequences).  Where a group sits inside the microbatch changes no
 * cost (the CP size alone says intra- or inter-node), so a microbatch is only
 * "which groups, of which sizes": any multiset of sizes summing to N is laid
 * out by placing groups in decreasing size order, each one aligned.
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
 * makespan; the count is aligned to the VPP group (merging down or splitting
 * up); finally all groups are dealt, by load, into the microbatches again
 * (for equal sizes that order minimises the sum of maxima).
 *
 * Everything is integer and every choice is a pure function of the lengths
 * and the configuration, so every rank, compiler and optimisation level
 * computes the same plan.  Scratch comes from the arena, laid out by one
 * function that also gives the exact scratch size.
 */
#include "stages.h"
#include "../core/plan.h"

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

/* Trial merges remembered within one merge loop (the window's 28 pairs and the rounds after). */
enum { MERGE_MEMO = 64 };

/* Sequences all repacking trials of one call may go through together: bounds the polishing time. */
#define POLISH_WORK ((int64_t)1 << 22)

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static int64_t clamp128(__int128 v)
{
    if (v > (__int128)INT64_MAX) return INT64_MAX;
    if (v < -(__int128)INT64_MAX) return -INT64_MAX;
    return (int64_t)v;
}

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

/* A trial merge of microbatches a < b under a bound: the merged level, or -1. */
typedef struct merge_trial {
    int32_t a, b;
    int64_t bound, merged;
} merge_trial;

/* Scratch of one planning call. */
typedef struct balanced {
    /* the problem, by position in length-descending order */
    int32_t n, num_ranks, max_seqlen, seq_cap, vpp, min_cp_size;
    int64_t join_num, join_den; /* extra GPU time allowed when a sequence joins a wider group */
    int dense;                  /* fewer than 16 sequences per rank */
    int vpp_misaligned;         /* the last pass needed fix_vpp_multiple() */
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
     * The last LPT pass's CP-size choice (choose_sizes) and its inputs: the
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
    int32_t *rp_seg;  /* [NUM_CLASSES * repack_limit]: trial groups of each class, by load descending */
    int32_t *rp_head, *rp_tail, *rp_next; /* [repack_limit] each: a trial group's sequences (list indices) */
    int64_t polish_work; /* sequences repacking may still go through (each trial counts them) */
    /*
     * Few sequences per rank: every position's cost at every class, and its
     * cheapest, computed once a call (repacking asks for them over and over).
     */
    int32_t table_n;        /* positions the table holds: min(n, 16N - 1, REPACK_MAX) */
    int table_ready;
    int64_t *cost_table;    /* [table_n * NUM_CLASSES]: INT64_MAX where the size does not fit */
    int64_t *cost_cheapest; /* [table_n] */
    /*
     * Trial merges of the current merge loop: a pair's trial gives the same
     * level until a merge changes one of its microbatches, so each is
     * repacked once per loop instead of once per round.
     */
    merge_trial memo[MERGE_MEMO];
    int num_memo;
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

    /* the best plan so far */
    /* the best plans so far, by makespan (kept[0] the best); few sequences per rank: all are polished */
    saved_plan kept[NUM_KEPT];
    int num_kept;
} balanced;

/* Lay out the scratch for up to `n` sequences on `num_ranks` ranks (a measuring arena gives the size). */
static int balanced_layout(balanced *b, dcp_arena *a, int32_t n, int32_t num_ranks)
{
    size_t un = (size_t)n;
    int32_t local = n < num_ranks ? n : num_ranks;
    b->len = DCP_ARENA_NEW(a, int32_t, un);
    b->min_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->run_end = DCP_ARENA_NEW(a, int32_t, un);
    b->next_cost = DCP_ARENA_NEW(a, int64_t, un);
    b->min_cost = DCP_ARENA_NEW(a, int64_t, un);
    b->cp = DCP_ARENA_NEW(a, int32_t, un);
    b->sizes_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->sizes_cost = DCP_ARENA_NEW(a, int64_t, un);
    b->cost = DCP_ARENA_NEW(a, int64_t, un);
    b->order = DCP_ARENA_NEW(a, int32_t, un);
    b->class_list = DCP_ARENA_NEW(a, int32_t, un);
    b->item_group = DCP_ARENA_NEW(a, int32_t, un);
    b->item_next = DCP_ARENA_NEW(a, int32_t, un);
    b->free_groups = DCP_ARENA_NEW(a, int32_t, un);
    b->g_mb = DCP_ARENA_NEW(a, int32_t, un);
    b->g_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->g_head = DCP_ARENA_NEW(a, int32_t, un + 1); /* + 1: group starts when emitting */
    b->g_tail = DCP_ARENA_NEW(a, int32_t, un);
    b->g_count = DCP_ARENA_NEW(a, int32_t, un);
    b->g_load = DCP_ARENA_NEW(a, int64_t, un);
    b->g_tokens = DCP_ARENA_NEW(a, int64_t, un);
    b->g_key = DCP_ARENA_NEW(a, int64_t, un);
    b->mb_free = DCP_ARENA_NEW(a, int32_t, 2 * un);
    b->mb_cap = DCP_ARENA_NEW(a, int64_t, 2 * un);
    b->mb_level = DCP_ARENA_NEW(a, int64_t, 2 * un);
    b->mb_order = DCP_ARENA_NEW(a, int32_t, 2 * un);
    b->mb_first = DCP_ARENA_NEW(a, int32_t, 2 * un + 1);
    b->mb_groups = DCP_ARENA_NEW(a, int32_t, un);
    b->heap = DCP_ARENA_NEW(a, heap_entry, un);
    b->park = DCP_ARENA_NEW(a, heap_entry, un);
    b->local = DCP_ARENA_NEW(a, heap_entry, (size_t)local);
    b->cursor = DCP_ARENA_NEW(a, int32_t, 2 * un);
    int kept_ok = 1;
    for (int j = 0; j < NUM_KEPT; j++) {
        b->kept[j].item_group = DCP_ARENA_NEW(a, int32_t, un);
        b->kept[j].g_mb = DCP_ARENA_NEW(a, int32_t, un);
        b->kept[j].g_cp = DCP_ARENA_NEW(a, int32_t, un);
        kept_ok = kept_ok && b->kept[j].item_group && b->kept[j].g_mb && b->kept[j].g_cp;
    }
    /* repacking handles microbatches of up to repack_limit sequences: 2N, at most REPACK_MAX */
    int32_t limit = num_ranks < REPACK_MAX / 2 ? 2 * num_ranks : REPACK_MAX;
    if (limit > n) limit = n;
    b->repack_limit = limit;
    size_t ul = (size_t)limit;
    b->rp_items = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp_of = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp_size = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp_count = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp_load = DCP_ARENA_NEW(a, int64_t, ul);
    b->rp_tokens = DCP_ARENA_NEW(a, int64_t, ul);
    b->rp_cost = DCP_ARENA_NEW(a, int64_t, dcp__size_mul(ul, NUM_CLASSES));
    b->rp_seg = DCP_ARENA_NEW(a, int32_t, dcp__size_mul(ul, NUM_CLASSES));
    b->rp_head = DCP_ARENA_NEW(a, int32_t, ul);
    int64_t table_n = 16 * (int64_t)num_ranks - 1;
    if (table_n > n) table_n = n;
    if (table_n > REPACK_MAX) table_n = REPACK_MAX; /* at most 720 KiB; larger calls compute rows as they go */
    b->table_n = (int32_t)table_n;
    b->cost_table = DCP_ARENA_NEW(a, int64_t, dcp__size_mul((size_t)table_n, NUM_CLASSES));
    b->cost_cheapest = DCP_ARENA_NEW(a, int64_t, (size_t)table_n);
    b->rp_tail = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp_next = DCP_ARENA_NEW(a, int32_t, ul);
    b->alive_next = DCP_ARENA_NEW(a, int32_t, un + 1);
    b->g_slot = DCP_ARENA_NEW(a, int32_t, un);
    b->room_leaves = 1;
    while (b->room_leaves < local) b->room_leaves *= 2;
    b->room_tree = DCP_ARENA_NEW(a, int64_t, 2 * (size_t)b->room_leaves);
    b->sort_a = DCP_ARENA_NEW(a, int32_t, un);
    b->sort_b = DCP_ARENA_NEW(a, int32_t, un);
    b->saved_mb = DCP_ARENA_NEW(a, int32_t, un);
    b->local_cap = local;
    return b->len && b->min_cp && b->run_end && b->next_cost && b->min_cost && b->cp && b->sizes_cp && b->sizes_cost && b->cost && b->order && b->class_list &&
           b->item_group && b->item_next && b->free_groups && b->g_mb && b->g_cp && b->g_head && b->g_tail && b->g_count &&
           b->g_load && b->g_tokens && b->g_key && b->mb_free && b->mb_cap && b->mb_level && b->mb_order &&
           b->mb_first && b->mb_groups && b->heap && b->park && b->cursor && b->local && kept_ok && b->sort_a && b->sort_b && b->saved_mb && b->alive_next && b->g_slot && b->room_tree && b->rp_items && b->rp_of &&
           b->rp_size && b->rp_count && b->rp_load && b->rp_tokens && b->rp_cost && b->rp_seg && b->rp_head && b->rp_tail && b->rp_next &&
           (table_n == 0 || (b->cost_table && b->cost_cheapest));
}

size_t dcp__assign_balanced_scratch_size(const dcp_config *config)
{
    balanced b;
    dcp_arena measure;
    dcp__arena_init_measure(&measure);
    if (!balanced_layout(&b, &measure, config->max_sequences, dcp_config_num_ranks(config))) return SIZE_MAX;
    return measure.used;
}

/* ---- sizes ---- */

static inline int class_of(int32_t cp)
{
    if (cp & (cp - 1)) return FULL_CLASS; /* all N ranks, N not a power of two */
    return cp > 0 ? __builtin_ctz((uint32_t)cp) : 0;
}

/* The next CP size after cp on num_ranks ranks: double, or all ranks; 0 when cp is already all of them. */
static int32_t next_size(int32_t cp, int32_t num_ranks)
{
    if (cp >= num_ranks) return 0;
    return (int64_t)cp * 2 <= num_ranks ? cp * 2 : num_ranks;
}

/* ---- 4-ary min-heaps of (key, id); equal keys in heap order (deterministic, as every operation is) ---- */

static inline int entry_less(heap_entry a, heap_entry b) { return a.key < b.key; }

/* 4-ary: half the levels of a binary heap; the four children's compares are independent. */
static void heap_sift_down(heap_entry *h, int32_t size, int32_t i)
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
        int32_t last = c + 4 < size ? c + 4 : size;
        for (int32_t j = c + 1; j < last; j++) {
            int64_t k = h[j].key;
            int less = k < best_key;
            best = less ? j : best;
            best_key = less ? k : best_key;
        }
        if (!(best_key < x.key)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static void heap_push(heap_entry *h, int32_t *size, int32_t id, int64_t key, int32_t room)
{
    heap_entry x = {key, id, room};
    int32_t i = (*size)++;
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (!entry_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static int32_t heap_pop(heap_entry *h, int32_t *size)
{
    int32_t top = h[0].id;
    h[0] = h[--(*size)];
    if (*size > 0) heap_sift_down(h, *size, 0);
    return top;
}

/* The entry at i was replaced: move it up or down to its place. */
static void heap_fix(heap_entry *h, int32_t size, int32_t i)
{
    heap_entry x = h[i];
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (!entry_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
    heap_sift_down(h, size, i);
}

/* The root's key changed to `key` (its room to `room`): restore the order. */
static void heap_rekey_top(heap_entry *h, int32_t size, int64_t key, int32_t room)
{
    h[0].key = key;
    h[0].room = room;
    heap_sift_down(h, size, 0);
}

/* ---- groups and microbatches ---- */

static int32_t new_mb(balanced *b, int64_t cap)
{
    int32_t m = b->num_mbs++;
    b->mb_free[m] = b->num_ranks;
    b->mb_cap[m] = cap;
    return m;
}

static int32_t new_group(balanced *b, int32_t mb, int32_t cp)
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

static void group_add(balanced *b, int32_t g, int32_t p, int64_t cost)
{
    b->item_group[p] = g;
    b->item_next[p] = -1;
    if (b->g_tail[g] < 0) b->g_head[g] = p;
    else b->item_next[b->g_tail[g]] = p;
    b->g_tail[g] = p;
    b->g_count[g]++;
    b->g_load[g] = sat_add(b->g_load[g], cost);
    b->g_tokens[g] += b->len[p];
}

/* A group's free tokens for a heap entry: saturated to int32 (lengths are int32), -1 at the sequence cap. */
static inline int32_t entry_room(const balanced *b, int32_t g)
{
    if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) return -1;
    int64_t room = (int64_t)b->max_seqlen * b->g_cp[g] - b->g_tokens[g];
    return room > INT32_MAX ? INT32_MAX : room < -1 ? -1 : (int32_t)room;
}

/* Re-cost every sequence of g at CP size cp. */
static void group_recost(balanced *b, int32_t g, int32_t cp)
{
    int64_t load = 0;
    for (int32_t p = b->g_head[g]; p >= 0; p = b->item_next[p]) {
        b->cp[p] = cp;
        b->cost[p] = dcp_cost(b->model, b->len[p], cp);
        load = sat_add(load, b->cost[p]);
    }
    b->g_cp[g] = cp;
    b->g_load[g] = load;
}

/* Split g's sequences between g and a new group of the same size in the same microbatch; returns the new one. */
static int32_t group_split(balanced *b, int32_t g)
{
    int32_t g2 = new_group(b, b->g_mb[g], b->g_cp[g]);
    int32_t p = b->g_head[g];
    b->g_head[g] = b->g_tail[g] = -1;
    b->g_count[g] = 0;
    b->g_load[g] = 0;
    b->g_tokens[g] = 0;
    while (p >= 0) {
        int32_t next = b->item_next[p];
        /* the lighter side; on equal loads (zero costs) the side with fewer sequences, so neither stays empty */
        int to_new = b->g_load[g2] < b->g_load[g] || (b->g_load[g2] == b->g_load[g] && b->g_count[g2] < b->g_count[g]);
        group_add(b, to_new ? g2 : g, p, b->cost[p]);
        p = next;
    }
    return g2;
}

/* dcp_cost() of s tokens at class k2's size c2, remembered per class for the next sequence of the same length. */
static inline int64_t join_cost(balanced *b, int k2, int32_t s, int32_t c2)
{
    if (b->join_len[k2] != s) {
        b->join_len[k2] = s;
        b->join_cost[k2] = dcp_cost(b->model, s, c2);
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
static int32_t wide_candidate(const balanced *b, const heap_entry *heap, int32_t heap_size, const heap_entry *park,
                              int32_t park_size, int32_t s)
{
    int32_t look = heap_size < 8 ? heap_size : 8;
    for (int32_t x = 0; x < look; x++)
        if (heap[x].room >= s) return x; /* tokens + s <= M * cp, under the sequence cap */
    if (park_size > 0 && -park[0].key >= s && (b->seq_cap == 0 || b->g_count[park[0].id] < b->seq_cap)) return WIDE_PARKED;
    return WIDE_NONE;
}

/*
 * Put sequence p (at `cost`, its CP size becoming the group's) into the wider
 * group found by wide_candidate() at `at`, and restore that class's heaps: a
 * heap entry's key only grew, so it sifts down (or leaves when the group is at
 * the sequence cap); a parked group goes back to the heap.  Keys are the load,
 * minus the microbatch's cap when `minus_cap`.  Returns the group.
 */
static int32_t wide_join(balanced *b, heap_entry *heap, int32_t *heap_size, heap_entry *park, int32_t *park_size,
                         int32_t at, int32_t p, int64_t cost, int minus_cap)
{
    int32_t g = at >= 0 ? heap[at].id : park[0].id;
    b->cp[p] = b->g_cp[g];
    b->cost[p] = cost;
    group_add(b, g, p, cost);
    b->g_key[g] = b->g_load[g] - (minus_cap ? b->mb_cap[b->g_mb[g]] : 0);
    int full = b->seq_cap > 0 && b->g_count[g] >= b->seq_cap;
    if (at >= 0) {
        if (full) {
            heap[at] = heap[--*heap_size];
            if (at < *heap_size) heap_fix(heap, *heap_size, at);
        } else {
            heap[at].key = b->g_key[g];
            heap[at].room = entry_room(b, g);
            heap_sift_down(heap, *heap_size, at);
        }
    } else {
        heap_pop(park, park_size);
        if (!full) heap_push(heap, heap_size, g, b->g_key[g], entry_room(b, g));
    }
    return g;
}

/* Counting sort of live groups by microbatch into mb_first / mb_groups. */
static void index_groups(balanced *b)
{
    int32_t *first = b->mb_first, *cursor = b->cursor;
    memset(first, 0, (size_t)(b->num_mbs + 1) * sizeof *first);
    for (int32_t g = 0; g < b->num_groups; g++)
        if (b->g_count[g] > 0) first[b->g_mb[g] + 1]++;
    for (int32_t m = 0; m < b->num_mbs; m++) {
        first[m + 1] += first[m];
        cursor[m] = first[m];
    }
    for (int32_t g = 0; g < b->num_groups; g++)
        if (b->g_count[g] > 0) b->mb_groups[cursor[b->g_mb[g]]++] = g;
}

/* ---- one construction pass ---- */

/* Steps 1-2: CP sizes for target level `level`, then positions by per-rank cost descending. */
static __int128 choose_sizes(balanced *b, int64_t level, int64_t widen_num, int64_t widen_den,
                             int32_t class_offset[NUM_CLASSES + 1], uint64_t *signature, int merge)
{
    if (!merge && b->sizes_valid && b->sizes_level == level && b->sizes_widen_num == widen_num &&
        b->sizes_widen_den == widen_den) {
        memcpy(b->cp, b->sizes_cp, (size_t)b->n * sizeof *b->cp);
        memcpy(b->cost, b->sizes_cost, (size_t)b->n * sizeof *b->cost);
        memcpy(class_offset, b->sizes_class_offset, sizeof b->sizes_class_offset);
        *signature = b->sizes_signature;
        return b->sizes_work;
    }
    uint64_t sig = 14695981039346656037ull; /* FNV-1a over the widened positions and their sizes */
    const int32_t n = b->n;
    int32_t count[NUM_CLASSES] = {0};
    __int128 work = 0;
    /* a run of equal lengths (and minimal sizes) widens alike: one decision per run */
    for (int32_t p = 0, stop; p < n; p = stop) {
        stop = b->run_end[p];
        int32_t c = b->min_cp[p];
        int64_t h = b->min_cost[p];
        while (h > level) {
            int32_t c2 = next_size(c, b->num_ranks);
            if (c2 == 0) break;
            int64_t h2;
            if (c == b->min_cp[p]) { /* every pass asks for the first step: remember it */
                if (b->next_cost[p] < 0) b->next_cost[p] = dcp_cost(b->model, b->len[p], c2);
                h2 = b->next_cost[p];
            } else {
                h2 = dcp_cost(b->model, b->len[p], c2);
            }
            if (h2 >= h) break;
            /* the extra GPU time of the wider group must stay within the allowance */
            if ((__int128)((int64_t)c2 * widen_den) * h2 > (__int128)c * h * (widen_den + widen_num)) break;
            c = c2;
            h = h2;
        }
        for (int32_t q = p; q < stop; q++) {
            b->cp[q] = c;
            b->cost[q] = h;
        }
        if (c != b->min_cp[p])
            for (int32_t q = p; q < stop; q++) sig = (sig ^ (uint64_t)q ^ ((uint64_t)c << 32)) * 1099511628211ull;
        work += (__int128)c * h * (stop - p);
        count[class_of(c)] += stop - p;
    }
    *signature = sig;
    /* each class, in position order, is already by cost descending: merge the classes */
    class_offset[0] = 0;
    for (int k = 0; k < NUM_CLASSES; k++) class_offset[k + 1] = class_offset[k] + count[k];
    int32_t head[NUM_CLASSES], end[NUM_CLASSES], live[NUM_CLASSES], num_live = 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        head[k] = class_offset[k];
        end[k] = class_offset[k];
        if (count[k] > 0) live[num_live++] = k;
    }
    for (int32_t p = 0, stop; p < n; p = stop) {
        stop = b->run_end[p];
        int k = class_of(b->cp[p]);
        for (int32_t q = p; q < stop; q++) b->class_list[end[k]++] = q;
    }
    for (int32_t i = 0; i < n && merge; i++) {
        int best = -1;
        int32_t best_p = 0;
        for (int j = 0; j < num_live; j++) {
            int k = live[j];
            int32_t p = b->class_list[head[k]];
            if (best < 0 || b->cost[p] > b->cost[best_p] || (b->cost[p] == b->cost[best_p] && p < best_p)) {
                best = j;
                best_p = p;
            }
        }
        b->order[i] = best_p;
        int k = live[best];
        if (++head[k] == end[k]) live[best] = live[--num_live];
    }
    /* only an LPT pass's choice is reused (by the sequential pass after it); any other leaves class_list changed */
    b->sizes_valid = merge;
    if (!merge) return work;
    b->sizes_level = level;
    b->sizes_widen_num = widen_num;
    b->sizes_widen_den = widen_den;
    b->sizes_signature = sig;
    b->sizes_work = work;
    memcpy(b->sizes_class_offset, class_offset, sizeof b->sizes_class_offset);
    memcpy(b->sizes_cp, b->cp, (size_t)n * sizeof *b->cp);
    memcpy(b->sizes_cost, b->cost, (size_t)n * sizeof *b->cost);
    return work;
}

static int64_t ceil_div128(__int128 a, __int128 d) { return clamp128(a <= 0 ? 0 : (a + d - 1) / d); }

/* Step 4: fill free ranks of every microbatch by splitting or widening its most loaded group. */
static int repair(balanced *b)
{
    int any_free = 0;
    for (int32_t m = 0; m < b->num_mbs && !any_free; m++) any_free = b->mb_free[m] > 0;
    if (!any_free) return 1; /* full microbatches (the usual case with many sequences per rank): nothing to index */
    index_groups(b);
    for (int32_t m = 0; m < b->num_mbs; m++) {
        if (b->mb_free[m] == 0 || b->mb_first[m + 1] == b->mb_first[m]) continue;
        int32_t size = 0;
        for (int32_t j = b->mb_first[m]; j < b->mb_first[m + 1]; j++) {
            int32_t g = b->mb_groups[j];
            heap_push(b->local, &size, g, -b->g_load[g], 0);
        }
        while (b->mb_free[m] > 0 && size > 0) {
            int32_t g = heap_pop(b->local, &size);
            int32_t c = b->g_cp[g];
            if (c > b->mb_free[m]) continue; /* free ranks only shrink: g never fits again */
            if (b->g_count[g] >= 2) {
                int32_t g2 = group_split(b, g);
                heap_push(b->local, &size, g, -b->g_load[g], 0);
                heap_push(b->local, &size, g2, -b->g_load[g2], 0);
            } else {
                int32_t c2 = next_size(c, b->num_ranks);
                if (c2 == 0 || c2 - c > b->mb_free[m]) continue;
                group_recost(b, g, c2);
                b->mb_free[m] -= c2 - c;
                heap_push(b->local, &size, g, -b->g_load[g], 0);
            }
        }
        if (b->mb_free[m] > 0) {
            /* N is not a power of two and no block fits the gap: the whole microbatch becomes one group */
            int32_t keep = -1;
            for (int32_t g = 0; g < b->num_groups; g++) {
                if (b->g_mb[g] != m || b->g_count[g] == 0) continue;
                if (keep < 0) {
                    keep = g;
                    continue;
                }
                for (int32_t p = b->g_head[g]; p >= 0;) {
                    int32_t next = b->item_next[p];
                    group_add(b, keep, p, 0);
                    p = next;
                }
                b->g_count[g] = 0;
                b->g_head[g] = b->g_tail[g] = -1;
                b->free_groups[b->num_free_groups++] = g;
            }
            group_recost(b, keep, b->num_ranks);
            b->mb_free[m] = 0;
            /* more sequences than the cap allows on a rank: the surplus goes, cap by cap, to new microbatches */
            while (b->seq_cap > 0 && b->g_count[keep] > b->seq_cap) {
                int32_t moved = new_group(b, new_mb(b, 0), b->num_ranks);
                int32_t p = b->g_head[keep];
                b->g_head[keep] = b->g_tail[keep] = -1;
                b->g_count[keep] = 0;
                b->g_load[keep] = 0;
                b->g_tokens[keep] = 0;
                for (int32_t taken = 0; p >= 0; taken++) {
                    int32_t next = b->item_next[p];
                    group_add(b, taken < b->seq_cap ? keep : moved, p, b->cost[p]);
                    p = next;
                }
                keep = moved;
            }
        }
    }
    return 1;
}

/* Exact makespan of the pass's plan; counts live microbatches into *live. */
static int64_t evaluate(balanced *b, int32_t *live)
{
    for (int32_t m = 0; m < b->num_mbs; m++) b->mb_level[m] = -1;
    for (int32_t g = 0; g < b->num_groups; g++) {
        if (b->g_count[g] == 0) continue;
        int32_t m = b->g_mb[g];
        if (b->g_load[g] > b->mb_level[m]) b->mb_level[m] = b->g_load[g];
    }
    int64_t total = 0;
    int32_t count = 0;
    for (int32_t m = 0; m < b->num_mbs; m++) {
        if (b->mb_level[m] < 0) continue;
        total = sat_add(total, sat_add(b->mb_level[m], b->model->microbatch_overhead));
        count++;
    }
    *live = count;
    return total;
}

/* ---- repacking one microbatch against a target level ---- */

static int32_t class_size(const balanced *b, int k) { return k == FULL_CLASS ? b->num_ranks : (int32_t)1 << k; }

/* 1 if class k is a group size on this many ranks. */
static int class_valid(const balanced *b, int k)
{
    if (k == FULL_CLASS) return (b->num_ranks & (b->num_ranks - 1)) != 0;
    return ((int64_t)1 << k) <= b->num_ranks;
}

/* Position p's per-rank cost at every class into row[] (INT64_MAX where it does not fit); returns the cheapest. */
static int64_t class_costs(const balanced *b, int32_t p, int64_t *row)
{
    int64_t cheapest = INT64_MAX;
    for (int k = 0; k < NUM_CLASSES; k++) {
        int32_t size = class_size(b, k);
        row[k] = INT64_MAX;
        if (!class_valid(b, k) || size < b->min_cp[p] || b->len[p] > (int64_t)size * b->max_seqlen) continue;
        row[k] = dcp_cost(b->model, b->len[p], size);
        if (row[k] < cheapest) cheapest = row[k];
    }
    return cheapest;
}

/*
 * Cost of each of the `count` sequences in rp_items at every class it fits
 * (INT64_MAX elsewhere); returns the least level any arrangement can reach
 * (the largest over sequences of their cheapest per-rank cost).
 */
static int64_t repack_costs(balanced *b, int32_t count)
{
    if (b->dense && !b->table_ready && b->n <= b->table_n) {
        for (int32_t p = 0; p < b->n; p++)
            b->cost_cheapest[p] = class_costs(b, p, b->cost_table + (size_t)p * NUM_CLASSES);
        b->table_ready = 1;
    }
    int64_t floor_level = 0;
    for (int32_t i = 0; i < count; i++) {
        int32_t p = b->rp_items[i];
        int64_t cheapest, *row = b->rp_cost + (size_t)i * NUM_CLASSES;
        if (b->table_ready) {
            memcpy(row, b->cost_table + (size_t)p * NUM_CLASSES, NUM_CLASSES * sizeof *row);
            cheapest = b->cost_cheapest[p];
        } else {
            cheapest = class_costs(b, p, row);
        }
        if (cheapest > floor_level) floor_level = cheapest;
    }
    return floor_level;
}

/* Append list item i (cost `cost` at the group's size) to trial group g. */
static void rp_append(balanced *b, int32_t g, int32_t i, int64_t cost)
{
    b->rp_of[i] = g;
    b->rp_next[i] = -1;
    if (b->rp_tail[g] < 0) b->rp_head[g] = i;
    else b->rp_next[b->rp_tail[g]] = i;
    b->rp_tail[g] = i;
    b->rp_load[g] = sat_add(b->rp_load[g], cost);
    b->rp_tokens[g] += b->len[b->rp_items[i]];
    b->rp_count[g]++;
}

/* Split trial group g's sequences (longest first, each to the lighter side) with a new group; returns it. */
static int32_t rp_split(balanced *b, int32_t g, int32_t *groups)
{
    int32_t g2 = (*groups)++, i = b->rp_head[g];
    int k = class_of(b->rp_size[g]);
    b->rp_size[g2] = b->rp_size[g];
    b->rp_load[g] = b->rp_load[g2] = 0;
    b->rp_tokens[g] = b->rp_tokens[g2] = 0;
    b->rp_count[g] = b->rp_count[g2] = 0;
    b->rp_head[g] = b->rp_tail[g] = b->rp_head[g2] = b->rp_tail[g2] = -1;
    while (i >= 0) {
        int32_t next = b->rp_next[i];
        int to_new = b->rp_load[g2] < b->rp_load[g] || (b->rp_load[g2] == b->rp_load[g] && b->rp_count[g2] < b->rp_count[g]);
        rp_append(b, to_new ? g2 : g, i, b->rp_cost[(size_t)i * NUM_CLASSES + k]);
        i = next;
    }
    return g2;
}

/* Widen trial group g (one sequence) to size2. */
static void rp_widen(balanced *b, int32_t g, int32_t size2)
{
    b->rp_load[g] = b->rp_cost[(size_t)b->rp_head[g] * NUM_CLASSES + class_of(size2)];
    b->rp_size[g] = size2;
}

/*
 * Best-fit-decreasing packing of the microbatch's sequences (longest first)
 * under `level`: each goes into the fullest trial group, at least as wide as
 * its narrowest size under the level, that stays under the level, else opens
 * a group of that narrowest size.  Returns the ranks used (num_ranks + 1 when
 * more than all); the groups are left in rp_* and *num_groups.
 */
static int32_t repack_trial(balanced *b, int32_t count, int64_t level, int32_t *num_groups)
{
    enum { WIDER = 4, LOOK = 16 };
    const int32_t N = b->num_ranks, limit = b->repack_limit;
    int32_t groups = 0, ranks = 0, seg_len[NUM_CLASSES] = {0};
    b->polish_work -= count;
    for (int32_t i = 0; i < count; i++) {
        const int64_t *row = b->rp_cost + (size_t)i * NUM_CLASSES;
        int32_t p = b->rp_items[i], s = b->len[p];
        int k = 0;
        while (k < NUM_CLASSES && row[k] > level) k++;
        if (k == NUM_CLASSES) return N + 1;
        /*
         * Best fit: among groups of this size and the next few wider ones
         * (joining costs no ranks; the group only has to stay under the
         * level), the one left fullest.  Each class keeps its groups sorted
         * by load, heaviest first, so the candidates are the heaviest that
         * still fit.
         */
        int32_t best = -1, best_at = 0;
        int best_class = -1;
        int64_t best_load = -1;
        for (int k2 = k, tried = 0; k2 < NUM_CLASSES && tried < WIDER; k2++) {
            if (!class_valid(b, k2)) continue;
            tried++;
            int64_t c = row[k2];
            if (c > level || seg_len[k2] == 0) continue;
            const int32_t *seg = b->rp_seg + (size_t)k2 * limit;
            int32_t lo = 0, hi = seg_len[k2]; /* loads descending: the first with load <= level - c */
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (b->rp_load[seg[mid]] > level - c) lo = mid + 1;
                else hi = mid;
            }
            for (int32_t x = lo; x < seg_len[k2] && x < lo + LOOK; x++) {
                int32_t g = seg[x];
                if (b->rp_tokens[g] + s > (int64_t)b->rp_size[g] * b->max_seqlen) continue;
                if (b->seq_cap > 0 && b->rp_count[g] >= b->seq_cap) continue;
                if (sat_add(b->rp_load[g], c) > best_load) {
                    best = g;
                    best_at = x;
                    best_class = k2;
                    best_load = sat_add(b->rp_load[g], c);
                }
                break;
            }
        }
        if (best < 0) {
            int32_t size = class_size(b, k);
            ranks += size;
            if (ranks > N) return N + 1;
            best = groups++;
            b->rp_size[best] = size;
            b->rp_load[best] = 0;
            b->rp_tokens[best] = 0;
            b->rp_count[best] = 0;
            b->rp_head[best] = b->rp_tail[best] = -1;
            best_class = k;
            best_at = seg_len[k]++;
            b->rp_seg[(size_t)k * limit + best_at] = best;
        }
        rp_append(b, best, i, row[best_class]);
        /*
         * Its load grew: move it forward in its class's descending order,
         * behind every group at least as heavy.  Loads cluster under the
         * level, so the move can be long: find the place by halving (the
         * prefix is sorted) and shift the block at once.
         */
        int32_t *seg = b->rp_seg + (size_t)best_class * limit;
        const int64_t load = b->rp_load[best];
        int32_t lo = 0, hi = best_at; /* the first of seg[0, best_at) lighter than the group */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (b->rp_load[seg[mid]] < load) hi = mid;
            else lo = mid + 1;
        }
        memmove(seg + lo + 1, seg + lo, (size_t)(best_at - lo) * sizeof *seg);
        seg[lo] = best;
    }
    *num_groups = groups;
    return ranks;
}

/*
 * Fill the free ranks of the trial groups: each step splits a group of two or
 * more sequences, or widens a group of one, choosing the step that leaves the
 * lowest level (widening a short sequence can raise its cost: the ring
 * latency outgrows the work it spreads).  Returns the resulting level, or
 * INT64_MAX when the gap cannot be filled.
 */
static int64_t repack_fill(balanced *b, int32_t *num_groups, int32_t free_ranks)
{
    const int32_t N = b->num_ranks;
    int32_t groups = *num_groups;
    if ((int64_t)groups * free_ranks > 65536) {
        /* many groups and many free ranks: repair()'s rule, the most loaded group first, through a heap */
        int32_t size = 0;
        for (int32_t j = 0; j < groups; j++)
            if (b->rp_size[j] <= free_ranks) heap_push(b->local, &size, j, -b->rp_load[j], 0);
        while (free_ranks > 0) {
            if (size == 0) return INT64_MAX;
            int32_t g = heap_pop(b->local, &size);
            int32_t gs = b->rp_size[g];
            if (gs > free_ranks) continue; /* free ranks only shrink */
            if (b->rp_count[g] >= 2) {
                int32_t g2 = rp_split(b, g, &groups);
                free_ranks -= gs;
                heap_push(b->local, &size, g, -b->rp_load[g], 0);
                heap_push(b->local, &size, g2, -b->rp_load[g2], 0);
            } else {
                int32_t size2 = next_size(gs, N);
                if (size2 == 0 || size2 - gs > free_ranks) continue;
                rp_widen(b, g, size2);
                free_ranks -= size2 - gs;
                heap_push(b->local, &size, g, -b->rp_load[g], 0);
            }
        }
    }
    while (free_ranks > 0) {
        /* the two highest loads, to know the level without any one group */
        int32_t top = -1;
        int64_t second = 0;
        for (int32_t j = 0; j < groups; j++) {
            if (top < 0 || b->rp_load[j] > b->rp_load[top]) {
                if (top >= 0) second = b->rp_load[top];
                top = j;
            } else if (b->rp_load[j] > second) {
                second = b->rp_load[j];
            }
        }
        /* the split or widening that leaves the lowest level (ties: the more loaded group, then the lower index) */
        int32_t g = -1;
        int64_t best_level = INT64_MAX;
        for (int32_t j = 0; j < groups; j++) {
            int32_t size = b->rp_size[j];
            if (size > free_ranks) continue;
            int64_t after;
            if (b->rp_count[j] >= 2) {
                after = b->rp_load[j] / 2 + (b->rp_load[j] & 1); /* an even split, as an estimate */
            } else {
                int32_t size2 = next_size(size, N);
                if (size2 == 0 || size2 - size > free_ranks) continue;
                after = b->rp_cost[(size_t)b->rp_head[j] * NUM_CLASSES + class_of(size2)];
            }
            int64_t others = j == top ? second : b->rp_load[top];
            int64_t level = after > others ? after : others;
            if (g < 0 || level < best_level || (level == best_level && b->rp_load[j] > b->rp_load[g])) {
                best_level = level;
                g = j;
            }
        }
        if (g < 0) return INT64_MAX;
        int32_t size = b->rp_size[g];
        if (b->rp_count[g] >= 2) {
            rp_split(b, g, &groups);
            free_ranks -= size;
        } else {
            int32_t size2 = next_size(size, N);
            rp_widen(b, g, size2);
            free_ranks -= size2 - size;
        }
    }
    int64_t level = 0;
    for (int32_t j = 0; j < groups; j++)
        if (b->rp_load[j] > level) level = b->rp_load[j];
    *num_groups = groups;
    return level;
}

/* Ascending sort of `count` positions in rp_items (merge sort through sort_a / sort_b). */
static void sort_positions(balanced *b, int32_t count)
{
    int32_t *src = b->rp_items, *dst = b->sort_b;
    for (int32_t width = 1; width < count; width *= 2) {
        for (int32_t lo = 0; lo < count; lo += 2 * width) {
            int32_t mid = lo + width < count ? lo + width : count;
            int32_t hi = lo + 2 * width < count ? lo + 2 * width : count;
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) dst[o++] = src[j] < src[i] ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != b->rp_items) memcpy(b->rp_items, src, (size_t)count * sizeof *src);
}

/*
 * Repack the sequences of microbatches ms[0..num) into microbatch ms[0]: the
 * least level (binary search) at which the trial packing fits N ranks, then
 * the free ranks filled.  Committed only when the resulting level is below
 * `better_than` (and `commit` is set); the other microbatches are left empty.
 * Returns the new level, or -1 when none below `better_than` was found.
 * Uses mb_groups / mb_first from index_groups().
 */
static int64_t repack(balanced *b, const int32_t *ms, int num, int64_t better_than, int commit)
{
    int32_t count = 0;
    for (int j = 0; j < num; j++)
        for (int32_t x = b->mb_first[ms[j]]; x < b->mb_first[ms[j] + 1]; x++) count += b->g_count[b->mb_groups[x]];
    if (count > b->repack_limit || b->polish_work <= 0) return -1;
    count = 0;
    for (int j = 0; j < num; j++)
        for (int32_t x = b->mb_first[ms[j]]; x < b->mb_first[ms[j] + 1]; x++)
            for (int32_t p = b->g_head[b->mb_groups[x]]; p >= 0; p = b->item_next[p]) b->rp_items[count++] = p;
    if (count == 0) return -1;
    sort_positions(b, count);
    int64_t lo = repack_costs(b, count), hi = better_than - 1;
    int32_t groups = 0;
    if (lo > hi || repack_trial(b, count, hi, &groups) > b->num_ranks) return -1;
    while (lo < hi && hi - lo > (hi >> 12)) { /* to within 1/4096 of the level */
        int64_t mid = lo + (hi - lo) / 2;
        if (repack_trial(b, count, mid, &groups) <= b->num_ranks) hi = mid;
        else lo = mid + 1;
    }
    int32_t ranks = repack_trial(b, count, hi, &groups);
    int64_t level = repack_fill(b, &groups, b->num_ranks - ranks);
    if (level >= better_than) return -1;
    if (!commit) return level;
    /* commit: the old groups go to the free list, the trial groups become real ones */
    for (int j = 0; j < num; j++) {
        for (int32_t x = b->mb_first[ms[j]]; x < b->mb_first[ms[j] + 1]; x++) {
            int32_t g = b->mb_groups[x];
            b->g_count[g] = 0;
            b->g_head[g] = b->g_tail[g] = -1;
            b->free_groups[b->num_free_groups++] = g;
        }
        b->mb_free[ms[j]] = b->num_ranks;
    }
    const int32_t m = ms[0];
    int32_t *real = b->cursor;
    for (int32_t j = 0; j < groups; j++) real[j] = new_group(b, m, b->rp_size[j]);
    for (int32_t i = 0; i < count; i++) {
        int32_t p = b->rp_items[i], g = real[b->rp_of[i]];
        b->cp[p] = b->g_cp[g];
        b->cost[p] = b->rp_cost[(size_t)i * NUM_CLASSES + class_of(b->g_cp[g])];
        group_add(b, g, p, b->cost[p]);
    }
    return level;
}

/* Repack every microbatch of at most `limit` sequences where that lowers its level. */
static void repack_microbatches(balanced *b, int32_t limit)
{
    int32_t live = 0;
    evaluate(b, &live);
    index_groups(b);
    for (int32_t m = 0; m < b->num_mbs; m++) {
        int32_t count = 0;
        for (int32_t x = b->mb_first[m]; x < b->mb_first[m + 1]; x++) count += b->g_count[b->mb_groups[x]];
        if (count == 0 || count > limit) continue;
        repack(b, &m, 1, b->mb_level[m], 1);
    }
}

/*
 * Merge two microbatches by repacking their sequences together.  Candidates
 * are pairs among the eight least loaded microbatches with at most `limit`
 * sequences between them.  Without `force`, the pair whose merge lowers the
 * makespan most is merged (if any does); with it, the pair with the lowest
 * merged level, whatever the makespan.  Returns 1 when a merge was made.
 * A merge loop clears b->num_memo before its first round; without `force`
 * the trials go through the memo.
 */
static int merge_microbatches(balanced *b, int32_t limit, int force)
{
    enum { WINDOW = 8 };
    int32_t live = 0, window[WINDOW], counts[WINDOW], size = 0;
    evaluate(b, &live);
    index_groups(b);
    /* the WINDOW lowest levels, by insertion (ties: lower index) */
    for (int32_t m = 0; m < b->num_mbs; m++) {
        if (b->mb_level[m] < 0) continue;
        int32_t count = 0;
        for (int32_t x = b->mb_first[m]; x < b->mb_first[m + 1]; x++) count += b->g_count[b->mb_groups[x]];
        int j = size < WINDOW ? size++ : WINDOW;
        while (j > 0 && b->mb_level[window[j - 1]] > b->mb_level[m]) {
            if (j < WINDOW) {
                window[j] = window[j - 1];
                counts[j] = counts[j - 1];
            }
            j--;
        }
        if (j < WINDOW) {
            window[j] = m;
            counts[j] = count;
        }
    }
    int32_t best[2] = {-1, -1};
    int64_t best_gain = force ? INT64_MIN : 0, best_bound = 0;
    for (int i = 0; i < size; i++) {
        for (int j = i + 1; j < size; j++) {
            if (counts[i] + counts[j] > limit) continue;
            int32_t pair[2] = {window[i], window[j]};
            int64_t both = sat_add(sat_add(b->mb_level[pair[0]], b->mb_level[pair[1]]), b->model->microbatch_overhead);
            int64_t bound = force ? INT64_MAX : both;
            int64_t merged = -2;
            for (int e = 0; !force && e < b->num_memo; e++)
                if (b->memo[e].a == pair[0] && b->memo[e].b == pair[1] && b->memo[e].bound == bound) {
                    merged = b->memo[e].merged;
                    break;
                }
            if (merged == -2) {
                merged = repack(b, pair, 2, bound, 0);
                if (!force && b->num_memo < MERGE_MEMO)
                    b->memo[b->num_memo++] = (merge_trial){pair[0], pair[1], bound, merged};
            }
            if (merged < 0) continue;
            int64_t gain = both - merged;
            if (gain > best_gain) {
                best_gain = gain;
                best_bound = bound;
                best[0] = pair[0];
                best[1] = pair[1];
            }
        }
    }
    if (best[0] < 0) return 0;
    /* trials that involved either microbatch are stale now */
    int kept = 0;
    for (int e = 0; e < b->num_memo; e++)
        if (b->memo[e].a != best[0] && b->memo[e].a != best[1] && b->memo[e].b != best[0] && b->memo[e].b != best[1])
            b->memo[kept++] = b->memo[e];
    b->num_memo = kept;
    /* the same bound as the trial: the search is deterministic, so the commit repeats it exactly */
    return repack(b, best, 2, best_bound, 1) >= 0;
}

/* Stable merge sort of group ids by load descending (ties: lower id first); returns the sorted array. */
static int32_t *sort_groups_by_load(balanced *b, int32_t count)
{
    int32_t *src = b->sort_a, *dst = b->sort_b;
    for (int32_t width = 1; width < count; width *= 2) {
        for (int32_t lo = 0; lo < count; lo += 2 * width) {
            int32_t mid = lo + width < count ? lo + width : count;
            int32_t hi = lo + 2 * width < count ? lo + 2 * width : count;
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int32_t x = src[i], y = src[j];
                if (b->g_load[y] > b->g_load[x] || (b->g_load[y] == b->g_load[x] && y < x)) dst[o++] = src[j++];
                else dst[o++] = src[i++];
            }
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/*
 * The same order as sort_groups_by_load() (load descending, ties by id) for
 * many groups: LSD radix sort of (complemented load, id) pairs through the
 * heap/park arrays (free outside construction), over the bits where the
 * loads differ, 11 at a time (8 below 4096 groups, where the counting costs
 * more than a pass).  Returns the ids, sorted, in sort_a.
 */
static int32_t *radix_sort_groups_by_load(balanced *b, int32_t count)
{
    heap_entry *src = b->heap, *dst = b->park;
    uint64_t all_or = 0, all_and = ~(uint64_t)0;
    for (int32_t j = 0; j < count; j++) {
        int32_t g = b->sort_a[j];
        uint64_t key = ~(uint64_t)b->g_load[g]; /* loads are >= 0: ascending complement = descending load */
        src[j].key = (int64_t)key;
        src[j].id = g;
        all_or |= key;
        all_and &= key;
    }
    /* only the bits where keys differ decide the order */
    uint64_t differ = all_or ^ all_and;
    const int bits = count >= 4096 ? 11 : 8;
    const uint32_t mask = (1u << bits) - 1;
    uint32_t counts[1 << 11];
    for (int shift = differ ? __builtin_ctzll(differ) : 64; shift < 64 && (differ >> shift); shift += bits) {
        memset(counts, 0, (mask + 1) * sizeof counts[0]);
        for (int32_t j = 0; j < count; j++) counts[((uint64_t)src[j].key >> shift) & mask]++;
        uint32_t sum = 0;
        for (uint32_t d = 0; d <= mask; d++) {
            uint32_t c = counts[d];
            counts[d] = sum;
            sum += c;
        }
        for (int32_t j = 0; j < count; j++) dst[counts[((uint64_t)src[j].key >> shift) & mask]++] = src[j];
        heap_entry *t = src;
        src = dst;
        dst = t;
    }
    for (int32_t j = 0; j < count; j++) b->sort_a[j] = src[j].id;
    return b->sort_a;
}

/*
 * Regroup: deal all groups, by load descending, first-fit into the same
 * number of microbatches, so each microbatch holds groups of like load (for
 * equal sizes this ordering minimises the sum of microbatch maxima).  Kept
 * only when the makespan drops.  `makespan` and `live` are evaluate()'s for
 * the plan as it stands.
 */
static int64_t regroup(balanced *b, int64_t makespan, int32_t live)
{
    int32_t count = 0;
    for (int32_t g = 0; g < b->num_groups; g++) {
        if (b->g_count[g] == 0) continue;
        b->sort_a[count++] = g;
        b->saved_mb[g] = b->g_mb[g];
    }
    const int32_t old_mbs = b->num_mbs;
    int32_t *sorted = radix_sort_groups_by_load(b, count);
    for (int32_t m = 0; m < live; m++) b->mb_free[m] = b->num_ranks;
    int32_t ptr[NUM_CLASSES] = {0};
    int ok = 1;
    for (int32_t j = 0; j < count && ok; j++) {
        int32_t g = sorted[j], c = b->g_cp[g];
        int k = class_of(c);
        while (ptr[k] < live && b->mb_free[ptr[k]] < c) ptr[k]++;
        if (ptr[k] == live) ok = 0;
        else {
            b->g_mb[g] = ptr[k];
            b->mb_free[ptr[k]] -= c;
        }
    }
    if (ok) {
        b->num_mbs = live;
        int32_t again = 0;
        int64_t regrouped = evaluate(b, &again);
        if (regrouped < makespan) return regrouped;
    }
    for (int32_t j = 0; j < count; j++) b->g_mb[b->sort_a[j]] = b->saved_mb[b->sort_a[j]];
    b->num_mbs = old_mbs;
    for (int32_t m = 0; m < old_mbs; m++) b->mb_free[m] = 0;
    return makespan;
}

/*
 * VPP: while the live microbatch count is not a multiple of the group size,
 * merge the two microbatches whose merge costs least (with `merge_down`, while
 * some pair fits one microbatch), else split the microbatch with the most groups (ties: the slowest) in two halves
 * of about N/2 ranks each, then refill both by repair.  A microbatch of one
 * group with several sequences is split through its group.  Returns 0 when no
 * microbatch can be split (fewer sequences than microbatches needed).
 */
static int fix_vpp_multiple(balanced *b, int merge_down)
{
    for (;;) {
        int32_t live = 0;
        evaluate(b, &live);
        if (live % b->vpp == 0) return 1;
        if (merge_down) {
            if (live > b->vpp && merge_microbatches(b, b->repack_limit, 1)) continue;
            merge_down = 0; /* no merge fits: split upwards instead */
        }
        index_groups(b);
        int32_t best = -1, best_groups = 0;
        for (int32_t m = 0; m < b->num_mbs; m++) {
            int32_t groups = b->mb_first[m + 1] - b->mb_first[m];
            if (groups == 0) continue;
            if (groups == 1 && b->g_count[b->mb_groups[b->mb_first[m]]] < 2) continue;
            if (best < 0 || groups > best_groups || (groups == best_groups && b->mb_level[m] > b->mb_level[best])) {
                best = m;
                best_groups = groups;
            }
        }
        if (best < 0) return 0;
        if (best_groups == 1) {
            int32_t g2 = group_split(b, b->mb_groups[b->mb_first[best]]), half = new_mb(b, 0);
            b->mb_free[best] += b->g_cp[g2];
            b->g_mb[g2] = half;
            b->mb_free[half] -= b->g_cp[g2];
        } else {
            /* groups of the microbatch by load descending, each to the half with fewer ranks */
            int32_t count = 0;
            for (int32_t j = b->mb_first[best]; j < b->mb_first[best + 1]; j++) b->sort_a[count++] = b->mb_groups[j];
            int32_t *sorted = sort_groups_by_load(b, count);
            int32_t half = new_mb(b, 0), used[2] = {0, 0};
            b->mb_free[best] = b->num_ranks;
            for (int32_t j = 0; j < count; j++) {
                int32_t g = sorted[j], side = used[1] < used[0];
                used[side] += b->g_cp[g];
                b->g_mb[g] = side ? half : best;
            }
            b->mb_free[best] = b->num_ranks - used[0];
            b->mb_free[half] = b->num_ranks - used[1];
        }
        if (!repair(b)) return 0;
    }
}

/* Drop microbatches that received nothing and number the others 0.. in order. */
static void compact_mbs(balanced *b)
{
    int32_t *renumber = b->cursor, live = 0;
    for (int32_t m = 0; m < b->num_mbs; m++) renumber[m] = -1;
    for (int32_t g = 0; g < b->num_groups; g++)
        if (b->g_count[g] > 0) renumber[b->g_mb[g]] = 0;
    for (int32_t m = 0; m < b->num_mbs; m++) {
        if (renumber[m] < 0) continue;
        b->mb_free[live] = b->mb_free[m];
        b->mb_cap[live] = b->mb_cap[m];
        renumber[m] = live++;
    }
    for (int32_t g = 0; g < b->num_groups; g++)
        if (b->g_count[g] > 0) b->g_mb[g] = renumber[b->g_mb[g]];
    b->num_mbs = live;
}

/* 1 if a pass of this kind, target and CP sizes ran before (it would repeat its plan); else records it. */
static int seen_before(balanced *b, int sequential, int64_t target, uint64_t signature)
{
    for (int j = 0; j < b->num_seen; j++)
        if (b->seen[j].sequential == sequential && b->seen[j].target == target && b->seen[j].signature == signature)
            return 1;
    if (b->num_seen < (int)(sizeof b->seen / sizeof b->seen[0])) {
        b->seen[b->num_seen].sequential = sequential;
        b->seen[b->num_seen].target = target;
        b->seen[b->num_seen].signature = signature;
        b->num_seen++;
    }
    return 0;
}

static int64_t finish_pass(balanced *b, int merge_down);

/* ---- sequential construction: microbatches one after another, each filled to its token capacity ---- */

/* Next unplaced position at or after p (n when none), compressing the path. */
static int32_t alive_find(int32_t *next, int32_t p)
{
    int32_t root = p;
    while (next[root] != root) root = next[root];
    while (next[p] != root) {
        int32_t up = next[p];
        next[p] = root;
        p = up;
    }
    return root;
}

typedef struct open_mb {
    int32_t m;
    int32_t heap_size[NUM_CLASSES], park_size[NUM_CLASSES];
    int32_t num_slots;      /* the microbatch's groups, in room_tree leaves 0.. in creation order */
    const int32_t *class_offset;
    uint32_t present;
} open_mb;

/* Free tokens of a group for one more sequence (0 when its sequence count is at the cap). */
static int64_t group_room(const balanced *b, int32_t g)
{
    if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) return 0;
    return (int64_t)b->g_cp[g] * b->max_seqlen - b->g_tokens[g];
}

/* A group's free tokens changed (or it is new): update its leaf of the max tree over the microbatch's groups. */
static void open_room_moved(balanced *b, open_mb *o, int32_t g, int64_t before)
{
    if (before < 0) b->g_slot[g] = o->num_slots++;
    int64_t *tree = b->room_tree;
    int32_t i = b->room_leaves + b->g_slot[g];
    int64_t v = group_room(b, g);
    tree[i] = v;
    /*
     * To the root without an early exit (a fixed, branch-free walk beats a
     * mispredicted stop), carrying the running maximum: each level reads only
     * the sibling, never a node just written.
     */
    for (; i > 1; i >>= 1) {
        int64_t sibling = tree[i ^ 1];
        v = v > sibling ? v : sibling;
        tree[i >> 1] = v;
    }
}

/*
 * The longest sequence of class k the open microbatch might still take: a new
 * group on its free ranks, or the most free tokens of any group (exact).
 */
static int64_t open_room(balanced *b, open_mb *o, int k)
{
    int64_t room = b->room_tree[1];
    int32_t f = b->mb_free[o->m];
    if (f >= b->min_cp_size && f >= class_size(b, k)) {
        /* all ranks, or the largest power of two within them */
        int32_t size = f == b->num_ranks ? f : (int32_t)(1u << (31 - __builtin_clz((uint32_t)f)));
        if ((int64_t)size * b->max_seqlen > room) room = (int64_t)size * b->max_seqlen;
    }
    return room;
}

/* Place sequence p in the open microbatch where its group's load ends lowest; 0 when it fits nowhere. */
static int open_place(balanced *b, open_mb *o, int32_t p)
{
    const int64_t M = b->max_seqlen;
    const int32_t c = b->cp[p], s = b->len[p];
    const int64_t h = b->cost[p];
    const int k = class_of(c);
    heap_entry *heap = b->heap + o->class_offset[k], *park = b->park + o->class_offset[k];
    while (o->park_size[k] > 0 && -park[0].key >= s) {
        int32_t g = heap_pop(park, &o->park_size[k]);
        heap_push(heap, &o->heap_size[k], g, b->g_key[g], entry_room(b, g));
    }
    int32_t same = -1;
    while (o->heap_size[k] > 0) {
        int32_t top = heap[0].id;
        if (s <= heap[0].room) { /* the entry's room is the group's c * M - tokens, kept with it */
            same = top;
            break;
        }
        heap_pop(heap, &o->heap_size[k]);
        heap_push(park, &o->park_size[k], top, b->g_tokens[top] - (int64_t)c * M, 0);
    }
    int wide_class = -1;
    int32_t wide_at = 0;
    int64_t wide_cost = 0, wide_after = INT64_MAX;
    /* free ranks take the sequence at its own size: a wider group only matters when there are none */
    const int fresh_possible = b->mb_free[o->m] >= c;
    /* GPU time a wider group may spend on the sequence: c * h * (1 + join_num / join_den), times join_den */
    const __int128 allowance = (__int128)c * h * (b->join_den + b->join_num);
    for (uint32_t wider = fresh_possible ? 0 : o->present >> (k + 1), k2 = (uint32_t)k + 1; wider; wider >>= 1, k2++) {
        if (!(wider & 1u)) continue;
        if (c == 1 && h < b->join_below[k2]) continue; /* over the allowance for sure */
        int32_t at = wide_candidate(b, b->heap + o->class_offset[k2], o->heap_size[k2], b->park + o->class_offset[k2],
                                    o->park_size[k2], s);
        if (at == WIDE_NONE) continue;
        int32_t g = at >= 0 ? b->heap[o->class_offset[k2] + at].id : b->park[o->class_offset[k2]].id, c2 = b->g_cp[g];
        int64_t h2 = join_cost(b, (int)k2, s, c2);
        if ((__int128)((int64_t)c2 * b->join_den) * h2 > allowance) continue;
        int64_t after = sat_add(b->g_load[g], h2);
        if (after < wide_after) {
            wide_after = after;
            wide_class = (int)k2;
            wide_at = at;
            wide_cost = h2;
        }
    }
    int64_t fresh_after = fresh_possible ? h : INT64_MAX;
    int64_t same_after = same >= 0 ? sat_add(b->g_load[same], h) : INT64_MAX;
    int32_t g;
    if (fresh_after != INT64_MAX && fresh_after <= same_after && fresh_after <= wide_after) {
        g = new_group(b, o->m, c);
        group_add(b, g, p, h);
        b->g_key[g] = b->g_load[g];
        open_room_moved(b, o, g, -1);
        if (b->seq_cap != 1) heap_push(heap, &o->heap_size[k], g, b->g_key[g], entry_room(b, g));
    } else if (same >= 0 && same_after <= wide_after) {
        g = same;
        int64_t before = group_room(b, g);
        group_add(b, g, p, h);
        b->g_key[g] = b->g_load[g];
        if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) heap_pop(heap, &o->heap_size[k]);
        else heap_rekey_top(heap, o->heap_size[k], b->g_key[g], entry_room(b, g));
        open_room_moved(b, o, g, before);
    } else if (wide_class >= 0) {
        heap_entry *wide_heap = b->heap + o->class_offset[wide_class], *wide_park = b->park + o->class_offset[wide_class];
        int64_t before = group_room(b, wide_at >= 0 ? wide_heap[wide_at].id : wide_park[0].id);
        g = wide_join(b, wide_heap, &o->heap_size[wide_class], wide_park, &o->park_size[wide_class], wide_at, p,
                      wide_cost, 0);
        open_room_moved(b, o, g, before);
    } else {
        return 0;
    }
    return 1;
}

/*
 * Sequential pass: open a microbatch, walk the unplaced sequences longest
 * first and put each where its group's load ends lowest (a new group on free
 * ranks, the least loaded group of its size, or a wider group within the
 * allowance), skipping those too long for any remaining room; close the
 * microbatch when nothing more fits and open the next.  Microbatches come out
 * full of tokens, each of sequences of like length.
 */
static int64_t run_sequential_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den,
                                   int merge_down)
{
    const int32_t n = b->n, N = b->num_ranks;
    int32_t class_offset[NUM_CLASSES + 1];
    b->num_groups = 0;
    b->num_free_groups = 0;
    b->num_mbs = 0;
    uint64_t signature;
    choose_sizes(b, ceil_div128(b->min_work, (__int128)target_mbs * N), widen_num, widen_den, class_offset,
                 &signature, 0);
    if (!merge_down && seen_before(b, 1, 0, signature)) return -1;
    open_mb o;
    memset(&o, 0, sizeof o);
    o.class_offset = class_offset;
    for (int k = 0; k < NUM_CLASSES; k++)
        if (class_offset[k + 1] > class_offset[k]) o.present |= 1u << k;
    /* unplaced sequences, per class in length order: indices into class_list, path-compressed */
    for (int32_t x = 0; x <= n; x++) b->alive_next[x] = x;
    /* lengths in class_list order (order is free in this pass): the scans below read one array, not two */
    int32_t *class_len = b->order;
    for (int32_t x = 0; x < n; x++) class_len[x] = b->len[b->class_list[x]];
    for (int32_t p = 0; p < n; p++) b->item_group[p] = -1;
    for (int32_t left = n; left > 0;) {
        o.m = new_mb(b, 0);
        memset(o.heap_size, 0, sizeof o.heap_size);
        memset(o.park_size, 0, sizeof o.park_size);
        o.num_slots = 0;
        memset(b->room_tree, 0, (size_t)(2 * b->room_leaves) * sizeof *b->room_tree);
        int32_t head[NUM_CLASSES], misses[NUM_CLASSES];
        uint32_t open = 0;
        for (int k = 0; k < NUM_CLASSES; k++) {
            head[k] = alive_find(b->alive_next, class_offset[k]);
            misses[k] = 0;
            if (head[k] < class_offset[k + 1]) open |= 1u << k;
        }
        const int32_t placed_before = left;
        while (open) {
            /* the longest unplaced sequence of the classes still open (ties: the lower position) */
            int k = -1;
            int32_t p = 0, s = 0;
            for (uint32_t bits = open, j = 0; bits; bits >>= 1, j++) {
                if (!(bits & 1u)) continue;
                int32_t sq = class_len[head[j]];
                if (k < 0 || sq > s || (sq == s && b->class_list[head[j]] < p)) {
                    k = (int)j;
                    s = sq;
                    p = b->class_list[head[j]];
                }
            }
            int64_t room = open_room(b, &o, k);
            int32_t end = class_offset[k + 1];
            if (s > room) {
                /* lengths only fall along a class: jump to the first that fits the room */
                int32_t lo = head[k] + 1, span = end - lo;
                /* the answer is usually near: gallop to a bracket, then halve it */
                for (int32_t step = 1; step < span; step *= 2) {
                    if (class_len[lo + step - 1] <= room) {
                        span = step;
                        break;
                    }
                    lo += step;
                    span -= step;
                }
                while (span > 0) { /* branch-free: which half holds the answer is a coin toss */
                    int32_t half = span / 2;
                    int longer = class_len[lo + half] > room;
                    lo = longer ? lo + half + 1 : lo;
                    span = longer ? span - half - 1 : half;
                }
                head[k] = lo < end ? alive_find(b->alive_next, lo) : end;
            } else if (open_place(b, &o, p)) {
                /* the placed position points past itself, straight to the next unplaced one */
                const int32_t placed = head[k];
                head[k] = alive_find(b->alive_next, placed + 1);
                b->alive_next[placed] = head[k];
                left--;
                misses[k] = 0;
            } else {
                /* room enough, yet no place (sizes, caps, allowance): a class that keeps missing closes */
                if (++misses[k] >= 8) open &= ~(1u << k);
                head[k] = alive_find(b->alive_next, head[k] + 1);
            }
            if (head[k] >= end) open &= ~(1u << k);
        }
        if (left == placed_before) return -1; /* nothing fitted an empty microbatch: cannot happen */
    }
    return finish_pass(b, merge_down);
}


static int64_t run_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den, int merge_down)
{
    const int32_t n = b->n, N = b->num_ranks;
    const int64_t M = b->max_seqlen;
    int32_t class_offset[NUM_CLASSES + 1];
    b->num_groups = 0;
    b->num_free_groups = 0;
    b->num_mbs = 0;

    int64_t level = ceil_div128(b->min_work, (__int128)target_mbs * N);
    uint64_t signature;
    __int128 work = choose_sizes(b, level, widen_num, widen_den, class_offset, &signature, 1);
    if (!merge_down && seen_before(b, 0, target_mbs, signature)) return -1;
    level = ceil_div128(work, (__int128)target_mbs * N);

    /*
     * Shelves, first-fit in decreasing cost order: tall sequences, and every
     * sequence wider than the narrowest CP size in use (its group's ranks can
     * hold nothing narrower, so it should sit beside groups of like cost).
     */
    int32_t narrowest = b->num_ranks;
    for (int32_t p = 0; p < n; p++) {
        if (b->cp[p] < narrowest) narrowest = b->cp[p];
        b->item_group[p] = -1;
    }
    int32_t ptr[NUM_CLASSES] = {0};
    for (int32_t i = 0; i < n; i++) {
        int32_t p = b->order[i], c = b->cp[p];
        if (b->cost[p] <= level && c == narrowest) continue;
        int k = class_of(c);
        while (ptr[k] < b->num_mbs && b->mb_free[ptr[k]] < c) ptr[k]++;
        int32_t m = ptr[k] < b->num_mbs ? ptr[k] : new_mb(b, b->cost[p]);
        group_add(b, new_group(b, m, c), p, b->cost[p]);
    }
    const int32_t shelves = b->num_mbs;

    /* plain microbatches: enough for the target count and for the tokens the shelves cannot take */
    __int128 rest_work = 0, room_work = 0;
    int64_t rest_tokens = 0, room_tokens = 0, rest_count = 0;
    for (int32_t p = 0; p < n; p++) {
        if (b->item_group[p] >= 0) continue;
        rest_work += (__int128)b->cp[p] * b->cost[p];
        rest_tokens += b->len[p];
        rest_count++;
    }
    for (int32_t m = 0; m < shelves; m++) {
        room_work += (__int128)b->mb_free[m] * b->mb_cap[m];
        room_tokens += (int64_t)b->mb_free[m] * M;
    }
    for (int32_t g = 0; g < b->num_groups; g++) room_tokens += (int64_t)b->g_cp[g] * M - b->g_tokens[g];
    int64_t plain = target_mbs - shelves;
    int64_t need = ceil_div128((__int128)rest_tokens - room_tokens, (__int128)N * M);
    if (plain < need) plain = need;
    if (plain > rest_count) plain = rest_count;
    int64_t plain_cap = level;
    if (plain > 0 && rest_work > room_work) plain_cap = ceil_div128(rest_work - room_work, (__int128)plain * N);
    int32_t num_order = 0, m = 0;
    while (m < shelves && b->mb_cap[m] >= plain_cap) b->mb_order[num_order++] = m++;
    for (int64_t j = 0; j < plain; j++) b->mb_order[num_order++] = new_mb(b, plain_cap);
    while (m < shelves) b->mb_order[num_order++] = m++;

    /*
     * The rest: LPT against each microbatch's cap.  A group without token room
     * for the current length is parked (a heap by free tokens) until lengths
     * in its class (which only decrease) fit it again, so each group is
     * parked at most once per sequence it receives.
     */
    int32_t heap_size[NUM_CLASSES] = {0}, park_size[NUM_CLASSES] = {0};
    for (int32_t g = 0; g < b->num_groups; g++) {
        if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) continue;
        int k = class_of(b->g_cp[g]);
        b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
        heap_push(b->heap + class_offset[k], &heap_size[k], g, b->g_key[g], entry_room(b, g));
    }
    int32_t ptr_new[NUM_CLASSES] = {0};
    uint32_t present = 0; /* classes with sequences: only their heaps can be non-empty */
    for (int k = 0; k < NUM_CLASSES; k++)
        if (class_offset[k + 1] > class_offset[k]) present |= 1u << k;
    for (int32_t j = 0; j < n; j++) {
        int32_t p = b->order[j], c = b->cp[p], s = b->len[p];
        if (b->item_group[p] >= 0) continue;
        int64_t h = b->cost[p], room_limit = (int64_t)M * c;
        int k = class_of(c);
        heap_entry *heap = b->heap + class_offset[k], *park = b->park + class_offset[k];
        while (park_size[k] > 0 && -park[0].key >= s) {
            int32_t g = heap_pop(park, &park_size[k]);
            heap_push(heap, &heap_size[k], g, b->g_key[g], entry_room(b, g));
        }
        int32_t g = -1;
        while (heap_size[k] > 0) {
            int32_t top = heap[0].id;
            if (s <= heap[0].room) { /* room_limit - tokens, kept in the entry */
                g = top;
                break;
            }
            heap_pop(heap, &heap_size[k]);
            heap_push(park, &park_size[k], top, b->g_tokens[top] - room_limit, 0);
        }
        while (ptr_new[k] < num_order && b->mb_free[b->mb_order[ptr_new[k]]] < c) ptr_new[k]++;
        int32_t fresh = ptr_new[k] < num_order ? b->mb_order[ptr_new[k]] : -1;
        /*
         * A wider group with room under its cap may take the sequence at its
         * size, for a bounded extra cost; beyond that bound only when the
         * alternative is a new microbatch, which costs more.
         */
        const __int128 allowance = (__int128)c * h * (b->join_den + b->join_num); /* as in open_place() */
        int wide_class = -1, any_class = -1;
        int32_t wide_at = 0, any_at = 0;
        int64_t wide_cost = 0, wide_after = INT64_MAX, any_cost = 0, any_after = INT64_MAX;
        /* a wider class surely over the allowance matters only as the last resort before a new microbatch */
        const int last_resort = fresh < 0 && g < 0;
        for (uint32_t wider = present >> (k + 1), k2 = (uint32_t)k + 1; wider; wider >>= 1, k2++) {
            if (!(wider & 1u)) continue;
            if (!last_resort && c == 1 && h < b->join_below[k2]) continue;
            int32_t at = wide_candidate(b, b->heap + class_offset[k2], heap_size[k2], b->park + class_offset[k2],
                                        park_size[k2], s);
            if (at == WIDE_NONE) continue;
            int32_t top = at >= 0 ? b->heap[class_offset[k2] + at].id : b->park[class_offset[k2]].id, c2 = b->g_cp[top];
            int64_t h2 = join_cost(b, (int)k2, s, c2);
            int64_t after = sat_add(b->g_key[top], h2);
            if (after < any_after) {
                any_after = after;
                any_class = (int)k2;
                any_at = at;
                any_cost = h2;
            }
            if ((__int128)((int64_t)c2 * b->join_den) * h2 > allowance) continue;
            if (after < wide_after) {
                wide_after = after;
                wide_class = (int)k2;
                wide_at = at;
                wide_cost = h2;
            }
        }
        if (fresh < 0 && g < 0 && wide_class < 0 && any_class >= 0 &&
            (any_after < 0 ? 0 : any_after) < sat_add(h, b->model->microbatch_overhead)) {
            wide_class = any_class;
            wide_at = any_at;
            wide_cost = any_cost;
            wide_after = any_after;
        }
        int64_t fresh_after = fresh >= 0 ? h - b->mb_cap[fresh] : INT64_MAX;
        int64_t same_after = g >= 0 ? sat_add(b->g_key[g], h) : INT64_MAX;
        if (fresh >= 0 && fresh_after <= same_after && fresh_after <= wide_after) {
            g = new_group(b, fresh, c);
            group_add(b, g, p, h);
            b->g_key[g] = h - b->mb_cap[fresh];
            if (b->seq_cap != 1) heap_push(heap, &heap_size[k], g, b->g_key[g], entry_room(b, g));
        } else if (g >= 0 && same_after <= wide_after) {
            group_add(b, g, p, h);
            b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
            if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) heap_pop(heap, &heap_size[k]);
            else heap_rekey_top(heap, heap_size[k], b->g_key[g], entry_room(b, g));
        } else if (wide_class >= 0) {
            g = wide_join(b, b->heap + class_offset[wide_class], &heap_size[wide_class], b->park + class_offset[wide_class],
                          &park_size[wide_class], wide_at, p, wide_cost, 1);
        } else {
            int32_t grown = new_mb(b, plain_cap);
            b->mb_order[num_order++] = grown;
            g = new_group(b, grown, c);
            group_add(b, g, p, h);
            b->g_key[g] = h - plain_cap;
            if (b->seq_cap != 1) heap_push(heap, &heap_size[k], g, b->g_key[g], entry_room(b, g));
        }
    }

    return finish_pass(b, merge_down);
}

/* The common end of a pass: fill free ranks, repack, merge, VPP, regroup; the exact makespan or -1. */
static int64_t finish_pass(balanced *b, int merge_down)
{
    if (!repair(b)) return -1;
    compact_mbs(b);
    if (b->dense) {
        /* few sequences per rank: repack each microbatch, merge microbatches while that pays */
        repack_microbatches(b, b->repack_limit);
        b->num_memo = 0;
        while (merge_microbatches(b, b->repack_limit, 0)) {
        }
        compact_mbs(b);
    }
    int32_t live = 0;
    b->vpp_misaligned = 0;
    if (b->vpp > 1) {
        evaluate(b, &live);
        b->vpp_misaligned = live % b->vpp != 0;
        if (!fix_vpp_multiple(b, merge_down)) return -1;
        compact_mbs(b);
    }
    int64_t makespan = evaluate(b, &live);
    makespan = regroup(b, makespan, live);
    return makespan;
}

/*
 * Keep the pass's plan if it is among the NUM_KEPT best so far (kept[] stays
 * sorted by makespan; on a tie the earlier plan stays ahead), or, with
 * `slot` >= 0, overwrite that slot (a polished plan replacing its origin).
 */
static void keep_plan(balanced *b, int64_t makespan, int slot)
{
    if (slot < 0) {
        if (b->num_kept == NUM_KEPT && makespan >= b->kept[NUM_KEPT - 1].makespan) return;
        slot = b->num_kept < NUM_KEPT ? b->num_kept++ : NUM_KEPT - 1;
        /* move the slot's storage to its place in the order */
        saved_plan spare = b->kept[slot];
        while (slot > 0 && b->kept[slot - 1].makespan > makespan) {
            b->kept[slot] = b->kept[slot - 1];
            slot--;
        }
        b->kept[slot] = spare;
    }
    saved_plan *k = &b->kept[slot];
    k->makespan = makespan;
    k->num_groups = b->num_groups;
    k->num_mbs = b->num_mbs;
    memcpy(k->item_group, b->item_group, (size_t)b->n * sizeof(int32_t));
    for (int32_t g = 0; g < b->num_groups; g++) {
        k->g_mb[g] = b->g_count[g] > 0 ? b->g_mb[g] : -1;
        k->g_cp[g] = b->g_cp[g];
    }
}

/*
 * Run one pass (and, when its microbatch count had to be aligned to the VPP
 * group, the same pass merging down instead of splitting up) and keep its
 * plan if it is the best so far and fits max_microbatches.
 */
static void try_pass(balanced *b, int sequential, int64_t target, const int64_t widen[2], int32_t max_microbatches,
                     int *over_capacity)
{
    int64_t (*pass)(balanced *, int64_t, int64_t, int64_t, int) = sequential ? run_sequential_pass : run_pass;
    for (int merge_down = 0; merge_down < 2; merge_down++) {
        b->vpp_misaligned = 0;
        int64_t makespan = pass(b, target, widen[0], widen[1], merge_down);
        if (makespan >= 0) {
            if (b->num_mbs > max_microbatches) *over_capacity = 1;
            else keep_plan(b, makespan, -1);
        }
        if (!b->vpp_misaligned) break;
    }
}

/* Rebuild the pass state (groups, loads, lists, microbatches) from a kept plan. */
static void restore_plan(balanced *b, const saved_plan *k)
{
    b->num_groups = k->num_groups;
    b->num_mbs = k->num_mbs;
    b->num_free_groups = 0;
    for (int32_t g = 0; g < b->num_groups; g++) {
        b->g_mb[g] = k->g_mb[g];
        b->g_cp[g] = k->g_cp[g];
        b->g_head[g] = b->g_tail[g] = -1;
        b->g_count[g] = 0;
        b->g_load[g] = 0;
        b->g_tokens[g] = 0;
        if (b->g_mb[g] < 0) b->free_groups[b->num_free_groups++] = g;
    }
    for (int32_t m = 0; m < b->num_mbs; m++) b->mb_free[m] = 0;
    for (int32_t p = 0; p < b->n; p++) {
        int32_t g = k->item_group[p];
        b->cp[p] = b->g_cp[g];
        b->cost[p] = dcp_cost(b->model, b->len[p], b->cp[p]);
        group_add(b, g, p, b->cost[p]);
    }
}

/*
 * Few sequences per rank: polish a kept plan.  Repack each microbatch against
 * its level, merge microbatches while that lowers the makespan, align to the
 * VPP group again (merging down where some pair fits, else splitting),
 * regroup; the slot takes the result when its makespan is lower.
 */
static void polish_plan(balanced *b, int slot, int32_t max_microbatches)
{
    restore_plan(b, &b->kept[slot]);
    repack_microbatches(b, b->repack_limit);
    b->num_memo = 0;
    while (merge_microbatches(b, b->repack_limit, 0)) {
    }
    compact_mbs(b);
    int32_t live = 0;
    if (b->vpp > 1) {
        evaluate(b, &live);
        if (live % b->vpp != 0) {
            if (!fix_vpp_multiple(b, 1)) return;
            compact_mbs(b);
            repack_microbatches(b, b->repack_limit);
        }
    }
    int64_t makespan = evaluate(b, &live);
    makespan = regroup(b, makespan, live);
    if (makespan < b->kept[slot].makespan && b->num_mbs <= max_microbatches) keep_plan(b, makespan, slot);
}

/* Emit the best plan: microbatches in index order, groups by size descending, ids by length descending. */
static dcp_status emit(balanced *b, dcp_plan *plan, dcp_error *err)
{
    const saved_plan *best = &b->kept[0];
    for (int j = 1; j < b->num_kept; j++)
        if (b->kept[j].makespan < best->makespan) best = &b->kept[j];
    const int32_t n = b->n, G = best->num_groups, K = best->num_mbs;
    int32_t *first = b->mb_first, *sorted = b->mb_groups, *cursor = b->cursor;
    /* groups by (microbatch, class descending, index): counting sort on the class, then on the microbatch */
    int32_t class_count[NUM_CLASSES + 1] = {0}, live_groups = 0;
    for (int32_t g = 0; g < G; g++)
        if (best->g_mb[g] >= 0) {
            class_count[FULL_CLASS - class_of(best->g_cp[g]) + 1]++;
            live_groups++;
        }
    for (int k = 0; k < NUM_CLASSES; k++) class_count[k + 1] += class_count[k];
    for (int32_t g = 0; g < G; g++)
        if (best->g_mb[g] >= 0) b->order[class_count[FULL_CLASS - class_of(best->g_cp[g])]++] = g;
    memset(first, 0, (size_t)(K + 1) * sizeof *first);
    for (int32_t j = 0; j < live_groups; j++) first[best->g_mb[b->order[j]] + 1]++;
    for (int32_t m = 0; m < K; m++) {
        first[m + 1] += first[m];
        cursor[m] = first[m];
    }
    for (int32_t j = 0; j < live_groups; j++) {
        int32_t g = b->order[j];
        sorted[cursor[best->g_mb[g]]++] = g;
    }
    /* ids of each group contiguous, in position order: g_head holds each group's start */
    int32_t *start = b->g_head, *ids = b->class_list;
    memset(start, 0, (size_t)(G + 1) * sizeof *start);
    for (int32_t p = 0; p < n; p++) start[best->item_group[p] + 1]++;
    for (int32_t g = 0; g < G; g++) start[g + 1] += start[g];
    memcpy(b->g_tail, start, (size_t)G * sizeof *start);
    for (int32_t p = 0; p < n; p++) ids[b->g_tail[best->item_group[p]]++] = b->ids[p];
    for (int32_t m = 0; m < K; m++) {
        if (first[m + 1] == first[m]) continue;
        dcp_status st = dcp__plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        int32_t rank = 0;
        for (int32_t j = first[m]; j < first[m + 1]; j++) {
            int32_t g = sorted[j];
            st = dcp__plan_push_group(plan, rank, best->g_cp[g], ids + start[g], start[g + 1] - start[g], err);
            if (st != DCP_OK) return st;
            rank += best->g_cp[g];
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}

dcp_status dcp__assign_balanced(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    const dcp_config *c = in->config;
    balanced b;
    memset(&b, 0, sizeof b);
    if (!balanced_layout(&b, scratch, in->num_sequences, in->num_ranks))
        return dcp__fail(err, DCP_ERR_CAPACITY, "balanced scratch too small for %d sequences on %d ranks",
                        in->num_sequences, in->num_ranks);
    b.n = in->num_sequences;
    b.num_ranks = in->num_ranks;
    b.max_seqlen = c->max_seqlen_per_rank;
    b.seq_cap = c->max_sequences_per_microbatch;
    b.min_cp_size = c->min_cp_size;
    b.vpp = c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
    b.model = &c->cost;
    b.ids = in->sorted_ids;
    for (int32_t p = 0, run = 0; p < b.n; p++) {
        int32_t id = in->sorted_ids[p];
        b.len[p] = in->lengths[id];
        b.min_cp[p] = in->min_cp[id];
        /* lengths descend: equal ones come in runs */
        if (p > 0 && b.len[p] == b.len[p - 1] && b.min_cp[p] == b.min_cp[p - 1]) {
            b.min_cost[p] = b.min_cost[p - 1];
        } else {
            b.min_cost[p] = dcp_cost(b.model, b.len[p], b.min_cp[p]);
            b.next_cost[p] = -1;
            run = p;
        }
        b.run_end[run] = p + 1;
        b.min_work += (__int128)b.min_cp[p] * b.min_cost[p];
        b.total_tokens += b.len[p];
    }
    const int64_t capacity = (int64_t)b.num_ranks * b.max_seqlen;
    int64_t k0 = (b.total_tokens + capacity - 1) / capacity;
    if (k0 < 1) k0 = 1;
    k0 = (k0 + b.vpp - 1) / b.vpp * b.vpp;
    if (k0 > b.n)
        return dcp__fail(err, DCP_ERR_INFEASIBLE,
                        "%d sequences cannot fill %lld microbatches (a multiple of the VPP group %d)", b.n,
                        (long long)k0, b.vpp);
    b.join_num = 1;
    b.join_den = 8;
    const int64_t latency = b.model->round_latency > 0 ? b.model->round_latency : 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        b.join_len[k] = -1;
        const int64_t c2 = class_size(&b, k);
        const __int128 ring = (__int128)c2 * (c2 - 1) * latency;
        const __int128 least = (ring - (c2 - 1)) * b.join_den;
        /*
         * h * join_num < least  <=>  h < ceil(least / join_num).  Only while the
         * ring term is far below INT64_MAX, so that no cost involved saturates
         * (a saturated cost would break the inequality); else no shortcut.
         */
        const __int128 below = least <= 0 || ring >= ((__int128)1 << 61) ? 0 : (least + b.join_num - 1) / b.join_num;
        b.join_below[k] = below > ((__int128)1 << 61) ? (int64_t)1 << 61 : (int64_t)below;
    }
    b.polish_work = POLISH_WORK;
    /*
     * Which passes (chosen by measurement over the benchmark matrix): with
     * many sequences per rank a pass costs most and three suffice, one LPT
     * pass at the token bound and two sequential ones (no widening, and
     * widening up to 1/4 more GPU time for one microbatch more); with fewer
     * than 16 per rank, where a pass is cheap and the outcome sensitive, both
     * constructions for five target counts and four allowances.  A pass whose
     * CP sizes repeat an earlier one's (for a sequential pass: any earlier
     * one's; for an LPT pass: at the same target) is skipped.
     */
    static const int64_t widen[][2] = {{0, 1}, {1, 4}, {1, 16}, {1, 0}};
    b.dense = (int64_t)b.n < 16 * (int64_t)b.num_ranks;
    int over_capacity = 0;
    /*
     * The step model's bound at minimal CP sizes: the work spread over all
     * ranks plus the overhead of the microbatches the tokens need.  With many
     * sequences per rank the widened pass runs only while the best plan is
     * more than 1% above it, so skipping it gives up less than 1%.
     */
    const __int128 bound = b.min_work / b.num_ranks + (__int128)((b.total_tokens + capacity - 1) / capacity) *
                                                          b.model->microbatch_overhead;
    for (int t = 0; t < (b.dense ? 5 : 2); t++) {
        const int64_t k = k0 + (int64_t)t * b.vpp;
        if (k > b.n) break;
        if (!b.dense && t > 0 && b.num_kept > 0 && (__int128)b.kept[0].makespan * 99 <= bound * 100) break;
        for (int w = 0; w < (b.dense ? 4 : 2); w++) {
            for (int sequential = 0; sequential < 2; sequential++) {
                if (!b.dense && (w != t || (!sequential && t > 0))) continue;
                try_pass(&b, sequential, k, widen[w], plan->max_microbatches, &over_capacity);
            }
        }
    }
    if (b.dense)
        for (int j = 0; j < b.num_kept; j++) polish_plan(&b, j, plan->max_microbatches);
    if (b.num_kept == 0 && over_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY, "balanced: the plan needs more than max_microbatches = %d microbatches",
                        plan->max_microbatches);
    if (b.num_kept == 0)
        return dcp__fail(err, DCP_ERR_INFEASIBLE, "balanced: no plan for %d sequences on %d ranks", b.n, b.num_ranks);
    return emit(&b, plan, err);
}
