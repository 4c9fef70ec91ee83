/*
 * assign_dynamic_cp.c - the reference's DefaultDynamicCPScheduler, decision for
 * decision, in integer arithmetic.
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
 * (cap_times()), though it never rejects an option (see place()).  The one
 * float sum that is not exact (s/N summed in the full-group fallback, N not a
 * power of two) is replayed with correctly rounded binary64 operations on
 * integers (soft_div(), soft_add()).
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
 * Where the reference crashes or hangs, dcpack decides (README, "Reference
 * bugs"): a group the fill step cannot grow without writing past rank N-1 is
 * skipped instead of raising IndexError; a sequence needing more ranks than
 * the largest power of two <= N (N not a power of two) gets all N ranks
 * instead of an AssertionError; align skips a microbatch whose halves cannot
 * be refilled instead of looping forever or corrupting the rank list;
 * max_sequences_per_microbatch, which the reference ignores here, is honoured
 * as one more fit condition (0 = unlimited = the reference).
 */
#include "stages.h"
#include "../core/plan.h"

#include <string.h>

typedef unsigned __int128 dcp_u128;

/*
 * Loads stay below 2^60 (sums of two below 2^62): when s_tallest * M * L
 * reaches 2^60, loads are kept in units of 2^shift / L (shift > 0, costs
 * rounded down).  The reference's own float loads are inexact long before
 * that (2^53), so this only happens far outside its exact range.
 */
#define DYN_LOAD_LOG2 60

/* 1.05 as the double 0x1.0cccccccccccdp+0 = DYN_CAP_MANTISSA / 2^52. */
#define DYN_CAP_MANTISSA 4728779608739021ull

/* ------------------------------------------------------------------------ */
/* Exact binary64 helpers (positive values, no subnormals needed)           */
/* ------------------------------------------------------------------------ */

static int bit_length_u128(dcp_u128 v)
{
    uint64_t hi = (uint64_t)(v >> 64), lo = (uint64_t)v;
    if (hi) return 128 - __builtin_clzll(hi);
    if (lo) return 64 - __builtin_clzll(lo);
    return 0;
}

/* Round v (> 0) to 53 significant bits, nearest-even; v ~= *mantissa * 2^*shift. `sticky` = bits below v were lost. */
static void round_to_double(dcp_u128 v, int sticky, uint64_t *mantissa, int *shift)
{
    int bits = bit_length_u128(v);
    if (bits <= 53) {
        *mantissa = (uint64_t)v;
        *shift = 0;
        return;
    }
    int drop = bits - 53;
    uint64_t m = (uint64_t)(v >> drop);
    dcp_u128 rest = v & (((dcp_u128)1 << drop) - 1);
    dcp_u128 half = (dcp_u128)1 << (drop - 1);
    if (rest > half || (rest == half && (sticky || (m & 1)))) m++;
    if (m == (1ull << 53)) {
        m >>= 1;
        drop++;
    }
    *mantissa = m;
    *shift = drop;
}

/*
 * floor(cap * x), cap = (double(tall) * double(M)) * 1.05 exactly as binary64
 * evaluates it (the reference's float(local_tall) * float(mslpr) * (1.0 + 0.05)).
 * tall, M < 2^31 and x <= 2^20: the result is below 2^84.
 */
static dcp_u128 cap_times(int64_t tall, int64_t per_rank, int64_t x)
{
    uint64_t m1, m2;
    int e1, e2;
    round_to_double((dcp_u128)tall * (dcp_u128)per_rank, 0, &m1, &e1);
    round_to_double((dcp_u128)m1 * DYN_CAP_MANTISSA, 0, &m2, &e2);
    int e = e1 + e2 - 52; /* cap = m2 * 2^e, e <= 10 */
    dcp_u128 v = (dcp_u128)m2 * (dcp_u128)x;
    return e >= 0 ? v << e : v >> (-e);
}

/* A positive double m * 2^e, m in [2^52, 2^53); m == 0 is +0.0. */
typedef struct soft_double {
    uint64_t m;
    int e;
} soft_double;

/* s / n correctly rounded (Python's int / int). */
static soft_double soft_div(int64_t s, int64_t n)
{
    dcp_u128 num = (dcp_u128)s << 96; /* s < 2^31, n <= 2^20: the quotient keeps >= 77 bits */
    dcp_u128 q = num / (dcp_u128)n, r = num % (dcp_u128)n;
    soft_double d;
    int shift;
    round_to_double(q, r != 0, &d.m, &shift);
    d.e = shift - 96;
    return d;
}

/* a + b correctly rounded. */
static soft_double soft_add(soft_double a, soft_double b)
{
    if (a.m == 0) return b;
    if (b.m == 0) return a;
    if (a.e < b.e) {
        soft_double t = a;
        a = b;
        b = t;
    }
    int diff = a.e - b.e;
    if (diff > 60) return a; /* b is below a quarter ulp of a */
    dcp_u128 sum = ((dcp_u128)a.m << diff) + b.m;
    soft_double d;
    int shift;
    round_to_double(sum, 0, &d.m, &shift);
    d.e = b.e + shift;
    return d;
}

/* a <= limit (limit >= 0 an integer). */
static int soft_le(soft_double a, int64_t limit)
{
    if (a.m == 0) return 1;
    if (a.e >= 0) return a.e < 64 && ((dcp_u128)a.m << a.e) <= (dcp_u128)limit;
    if (limit <= 0) return 0;
    if (-a.e > 64) return 1; /* a < 2^-11 < limit */
    return (dcp_u128)a.m <= ((dcp_u128)limit << (-a.e));
}

/* ------------------------------------------------------------------------ */
/* Scheduler state                                                          */
/* ------------------------------------------------------------------------ */

#define MAX_CLASSES 32

/* A segment-tree node over the groups of one size class, in creation order. */
typedef struct dyn_node {
    int64_t tokens;    /* min tokens */
    int64_t load;      /* min load (scaled by L) */
    int64_t fit;       /* max length that still fits (tokens and count), 0 = none */
    int32_t count;     /* min number of sequences */
    int32_t pad;
} dyn_node;

static const dyn_node empty_node = {INT64_MAX, INT64_MAX, 0, INT32_MAX, 0};

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

static int32_t log2_floor(int64_t v)
{
    int32_t k = 0;
    while ((v >> (k + 1)) > 0) k++;
    return k;
}

/* Lay out every scratch array; run on a measuring arena it gives the scratch size. */
static int dyn_alloc(dyn_state *st, dcp_arena *a, int32_t n, int32_t ranks, int32_t min_cp_size)
{
    const int32_t p2 = (int32_t)1 << log2_floor(ranks);
    const int32_t j0 = log2_floor(min_cp_size), j1 = log2_floor(p2);
    int32_t nodes = 0, slots = 0;
    for (int32_t j = 0; j < MAX_CLASSES; j++) {
        st->tree_offset[j] = st->tree_leaves[j] = st->slot_offset[j] = st->class_count[j] = 0;
        if (j < j0 || j > j1) continue;
        int32_t groups = ranks >> j, leaves = 1;
        while (leaves < groups) leaves *= 2;
        st->tree_offset[j] = nodes;
        st->tree_leaves[j] = leaves;
        st->slot_offset[j] = slots;
        nodes += 2 * leaves;
        slots += groups;
    }
    st->bit_words = (ranks + 63) / 64;
    st->next_unplaced = DCP_ARENA_NEW(a, int32_t, (size_t)n + 1);
    st->sorted_lengths = DCP_ARENA_NEW(a, int32_t, n);
    st->group_size = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_count = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_slot = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_tokens = DCP_ARENA_NEW(a, int64_t, ranks);
    st->group_load = DCP_ARENA_NEW(a, int64_t, ranks);
    st->placed_pos = DCP_ARENA_NEW(a, int32_t, n);
    st->placed_group = DCP_ARENA_NEW(a, int32_t, n);
    st->nodes = DCP_ARENA_NEW(a, dyn_node, nodes);
    st->slot_group = DCP_ARENA_NEW(a, int32_t, slots);
    st->class_bits = DCP_ARENA_NEW(a, uint64_t, (size_t)(j1 + 1) * st->bit_words);
    st->fenwick = DCP_ARENA_NEW(a, int32_t, (size_t)ranks + 1);
    st->ids = DCP_ARENA_NEW(a, int32_t, n);
    st->block_size = DCP_ARENA_NEW(a, int32_t, n);
    st->block_first_id = DCP_ARENA_NEW(a, int32_t, n);
    st->block_count = DCP_ARENA_NEW(a, int32_t, n);
    st->mb_first_block = DCP_ARENA_NEW(a, int32_t, n);
    st->mb_num_blocks = DCP_ARENA_NEW(a, int32_t, n);
    st->group_fill = DCP_ARENA_NEW(a, int32_t, (size_t)ranks + 1);
    st->tmp_sizes = DCP_ARENA_NEW(a, int32_t, ranks);
    return st->next_unplaced && st->sorted_lengths && st->group_size && st->group_count && st->group_slot &&
           st->group_tokens && st->group_load && st->placed_pos && st->placed_group && st->nodes && st->slot_group &&
           st->class_bits && st->fenwick && st->ids && st->block_size && st->block_first_id && st->block_count &&
           st->mb_first_block && st->mb_num_blocks && st->group_fill && st->tmp_sizes;
}

size_t dcp__assign_dynamic_cp_scratch_size(const dcp_config *config)
{
    int32_t ranks = dcp_config_num_ranks(config);
    if (ranks <= 0 || config->max_sequences <= 0) return 0;
    dyn_state st;
    dcp_arena measure;
    dcp__arena_init_measure(&measure);
    dyn_alloc(&st, &measure, config->max_sequences, ranks, config->min_cp_size > 0 ? config->min_cp_size : 1);
    return measure.used;
}

/* First unplaced sorted position >= p (path halving). */
static int32_t find_unplaced(int32_t *next, int32_t p)
{
    while (next[p] != p) {
        next[p] = next[next[p]];
        p = next[p];
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Class trees                                                              */
/* ------------------------------------------------------------------------ */

/* Recompute node v from its children; 0 if it did not change (its ancestors need nothing). */
static int node_pull(dyn_node *t, int32_t v)
{
    const dyn_node *l = &t[2 * v], *r = &t[2 * v + 1];
    dyn_node x;
    x.tokens = l->tokens < r->tokens ? l->tokens : r->tokens;
    x.load = l->load < r->load ? l->load : r->load;
    x.fit = l->fit > r->fit ? l->fit : r->fit;
    x.count = l->count < r->count ? l->count : r->count;
    x.pad = 0;
    if (x.tokens == t[v].tokens && x.load == t[v].load && x.fit == t[v].fit && x.count == t[v].count) return 0;
    t[v] = x;
    return 1;
}

/* Per-rank load of a sequence of length s on 2^j ranks: s*s/2^j scaled by L, in units of 2^load_shift. */
static int64_t load_of(const dyn_state *st, int64_t s, int32_t j)
{
    return (int64_t)((((dcp_u128)s * (dcp_u128)s) << (st->log2_pow2 - j)) >> st->load_shift);
}

/*
 * Longest sequence group g (of class j) can still take.  Only tokens and the
 * count limit it: the load cap never does (see place()).
 */
static int64_t group_fit(const dyn_state *st, int32_t g, int32_t j)
{
    if (st->group_count[g] >= st->seq_cap) return 0;
    int64_t by_tokens = (st->per_rank << j) - st->group_tokens[g];
    return by_tokens > 0 ? by_tokens : 0;
}

static void tree_set(dyn_state *st, int32_t j, int32_t slot)
{
    dyn_node *t = st->nodes + st->tree_offset[j];
    int32_t g = st->slot_group[st->slot_offset[j] + slot];
    int32_t v = st->tree_leaves[j] + slot;
    t[v].tokens = st->group_tokens[g];
    t[v].load = st->group_load[g];
    t[v].count = st->group_count[g];
    t[v].fit = group_fit(st, g, j);
    for (v >>= 1; v >= 1; v >>= 1)
        if (!node_pull(t, v)) break;
}

/* Reset the used leaves [0, count) of class j and their ancestors. */
static void tree_clear(dyn_state *st, int32_t j)
{
    int32_t count = st->class_count[j];
    if (count == 0) return;
    dyn_node *t = st->nodes + st->tree_offset[j];
    int32_t lo = st->tree_leaves[j], hi = lo + count - 1;
    while (lo >= 1) {
        for (int32_t v = lo; v <= hi; v++) t[v] = empty_node;
        lo >>= 1;
        hi >>= 1;
    }
    st->class_count[j] = 0;
}

/* Leftmost group with tokens <= max_tokens, count < cap and load <= max_load. */
static int32_t tree_first_fit(const dyn_node *t, int32_t v, int32_t leaves, int64_t max_tokens, int32_t cap,
                              int64_t max_load)
{
    if (t[v].tokens > max_tokens || t[v].load > max_load || t[v].count >= cap) return -1;
    if (v >= leaves) return v - leaves;
    int32_t r = tree_first_fit(t, 2 * v, leaves, max_tokens, cap, max_load);
    if (r >= 0) return r;
    return tree_first_fit(t, 2 * v + 1, leaves, max_tokens, cap, max_load);
}

/* Least load < *bound among groups with tokens <= max_tokens and count < cap; lowers *bound. */
static void tree_least_load(const dyn_node *t, int32_t v, int32_t leaves, int64_t max_tokens, int32_t cap,
                            int64_t *bound)
{
    if (t[v].tokens > max_tokens || t[v].count >= cap || t[v].load >= *bound) return;
    if (v >= leaves) {
        *bound = t[v].load;
        return;
    }
    /* the child holding the smaller load first: its answer prunes the other one */
    int32_t a = 2 * v, b = 2 * v + 1;
    if (t[b].load < t[a].load) {
        a = b;
        b = 2 * v;
    }
    tree_least_load(t, a, leaves, max_tokens, cap, bound);
    tree_least_load(t, b, leaves, max_tokens, cap, bound);
}

/* ------------------------------------------------------------------------ */
/* One microbatch                                                           */
/* ------------------------------------------------------------------------ */

static int32_t open_group(dyn_state *st, int32_t j, int64_t tokens, int64_t load)
{
    int32_t g = st->num_groups++;
    int32_t slot = st->class_count[j]++;
    st->group_size[g] = (int32_t)1 << j;
    st->group_count[g] = 1;
    st->group_slot[g] = slot;
    st->group_tokens[g] = tokens;
    st->group_load[g] = load;
    st->free_rank += (int32_t)1 << j;
    st->slot_group[st->slot_offset[j] + slot] = g;
    if (load > st->max_load) st->max_load = load;
    tree_set(st, j, slot);
    return g;
}

static void add_to_group(dyn_state *st, int32_t g, int32_t j, int64_t tokens, int64_t load)
{
    st->group_tokens[g] += tokens;
    st->group_load[g] += load;
    st->group_count[g]++;
    if (st->group_load[g] > st->max_load) st->max_load = st->group_load[g];
    tree_set(st, j, st->group_slot[g]);
}

/*
 * Largest length some option accepts now.  A sequence of length s has an
 * option iff for some class c >= cp_min(s) (i.e. s <= c*M) a group of size c
 * has s more tokens of room (and count room), or c ranks are free; every
 * condition is monotone in s, so the sequences that fit are exactly those up
 * to this length.
 */
static int64_t placeable_length(const dyn_state *st)
{
    int64_t best = 0;
    const int32_t free_ranks = st->num_ranks - st->free_rank;
    for (int32_t j = st->log2_min_cp; j <= st->log2_pow2; j++) {
        int64_t fit = free_ranks >= ((int32_t)1 << j) ? st->per_rank << j : 0; /* a new group */
        if (st->class_count[j] > 0 && st->nodes[st->tree_offset[j] + 1].fit > fit)
            fit = st->nodes[st->tree_offset[j] + 1].fit; /* < c*M */
        if (fit > best) best = fit;
    }
    return best;
}

/*
 * The reference's choice for one sequence: options in order (c ascending; per
 * c the groups of size c in creation order, then a new group), value =
 * max(max_load, load + cost), the first smallest value <= cap.  Returns the
 * group, or -1 if no option fits.
 *
 * The cap never rejects an option: a group of size c with token room for s
 * holds sequences no longer than the tallest t, so load + s*s/c <= t * (its
 * tokens + s) / c <= t*M < cap, and a new group costs s*s/c <= s*M (c >= s/M).
 * The tests are kept so the decision reads as the reference's.
 */
static int32_t place(dyn_state *st, int32_t id)
{
    const int64_t s = st->lengths[id];
    const int64_t v0 = st->max_load;
    if (st->min_cp[id] > st->pow2_ranks) return -1; /* needs the full non-power-of-two group */
    int64_t best_value = INT64_MAX;
    int32_t best_class = -1, best_slot = -1; /* slot -1: a new group */
    int done = 0;
    for (int32_t j = log2_floor(st->min_cp[id]); j <= st->log2_pow2 && !done; j++) {
        const int64_t cost = load_of(st, s, j);
        if (cost > st->cap) continue;
        if (st->class_count[j] > 0) {
            const dyn_node *t = st->nodes + st->tree_offset[j];
            const int32_t leaves = st->tree_leaves[j];
            const int64_t max_tokens = (st->per_rank << j) - s;
            if (t[1].tokens <= max_tokens && t[1].count < st->seq_cap) {
                if (v0 >= cost) {
                    int32_t slot = tree_first_fit(t, 1, leaves, max_tokens, st->seq_cap, v0 - cost);
                    if (slot >= 0) { /* value == v0: nothing can be smaller, and this is the first */
                        best_class = j;
                        best_slot = slot;
                        best_value = v0;
                        break;
                    }
                }
                int64_t bound = st->cap - cost + 1; /* load + cost <= cap */
                if (best_value - cost < bound) bound = best_value - cost; /* strictly better */
                int32_t slot = -1;
                if (t[1].load < bound) {
                    int64_t least = bound;
                    tree_least_load(t, 1, leaves, max_tokens, st->seq_cap, &least);
                    /* the first group (creation order) with that least load */
                    if (least < bound) slot = tree_first_fit(t, 1, leaves, max_tokens, st->seq_cap, least);
                    bound = least;
                }
                if (slot >= 0) {
                    best_value = bound + cost;
                    best_class = j;
                    best_slot = slot;
                }
            }
        }
        if (st->num_ranks - st->free_rank >= ((int32_t)1 << j)) {
            int64_t value = cost > v0 ? cost : v0;
            if (value < best_value) {
                best_value = value;
                best_class = j;
                best_slot = -1;
                if (value == v0) done = 1;
            }
        }
    }
    if (best_class < 0) return -1;
    const int64_t cost = load_of(st, s, best_class);
    if (best_slot < 0) return open_group(st, best_class, s, cost);
    int32_t g = st->slot_group[st->slot_offset[best_class] + best_slot];
    add_to_group(st, g, best_class, s, cost);
    return g;
}

static void fenwick_add(int32_t *f, int32_t size, int32_t i, int32_t delta)
{
    for (i++; i <= size; i += i & -i) f[i] += delta;
}

static int32_t fenwick_prefix(const int32_t *f, int32_t i) /* sum of [0, i) */
{
    int32_t s = 0;
    for (; i > 0; i -= i & -i) s += f[i];
    return s;
}

/*
 * fill_empty_gpus_once until no rank is empty: double the first group (in
 * creation order) of the smallest size that can grow, shifting later groups
 * right.  Returns 0 when no group can grow (the caller falls back to the full
 * group).
 */
static int fill_empty_ranks(dyn_state *st)
{
    const int32_t ranks = st->num_ranks, groups = st->num_groups, words = st->bit_words;
    int32_t used = st->free_rank;
    if (used == ranks) return 1;
    memset(st->class_bits, 0, sizeof(uint64_t) * (size_t)(st->log2_pow2 + 1) * (size_t)words);
    memset(st->fenwick, 0, sizeof(int32_t) * ((size_t)groups + 1));
    for (int32_t g = 0; g < groups; g++) {
        int32_t j = log2_floor(st->group_size[g]);
        st->class_bits[(size_t)j * words + g / 64] |= 1ull << (g % 64);
        fenwick_add(st->fenwick, groups, g, st->group_size[g]);
    }
    int32_t smallest = st->log2_min_cp;
    while (used < ranks) {
        int32_t j = smallest, grown = -1;
        for (; j <= st->log2_pow2 && grown < 0; j++) {
            const uint64_t *bits = st->class_bits + (size_t)j * words;
            int any = 0;
            for (int32_t w = 0; w < words && grown < 0; w++) {
                uint64_t word = bits[w];
                any |= word != 0;
                while (word && grown < 0) {
                    int32_t g = w * 64 + __builtin_ctzll(word);
                    word &= word - 1;
                    int32_t size = st->group_size[g];
                    int32_t next = 2 * size < ranks ? 2 * size : ranks, need = next - size;
                    int32_t end = fenwick_prefix(st->fenwick, g + 1) - 1;
                    if (end + need >= ranks) continue; /* the reference's test */
                    if (need > ranks - used) continue; /* would push groups past rank N-1 (reference: IndexError) */
                    grown = g;
                }
            }
            if (any) break; /* only the smallest existing size is considered */
        }
        if (grown < 0) return 0;
        smallest = j;
        int32_t size = st->group_size[grown];
        int32_t next = 2 * size < ranks ? 2 * size : ranks;
        st->class_bits[(size_t)j * words + grown / 64] &= ~(1ull << (grown % 64));
        if (next == 2 * size && j + 1 <= st->log2_pow2)
            st->class_bits[(size_t)(j + 1) * words + grown / 64] |= 1ull << (grown % 64);
        fenwick_add(st->fenwick, groups, grown, next - size);
        st->group_size[grown] = next;
        used += next - size;
    }
    return 1;
}

/* Record the finished microbatch: its groups in rank order, ids in placement order. */
static dcp_status store_microbatch(dyn_state *st, dcp_error *err)
{
    if (st->num_mb >= st->max_mb || st->num_blocks + st->num_groups > st->n)
        return dcp__fail(err, DCP_ERR_CAPACITY, "dynamic_cp: the plan needs more than max_microbatches = %d microbatches", st->max_mb);
    const int32_t groups = st->num_groups;
    int32_t *cursor = st->group_fill;
    for (int32_t g = 0; g <= groups; g++) cursor[g] = 0;
    for (int32_t i = 0; i < st->num_placed; i++) cursor[st->placed_group[i] + 1]++;
    int32_t first = st->num_ids;
    for (int32_t g = 0; g < groups; g++) {
        int32_t b = st->num_blocks + g;
        st->block_size[b] = st->group_size[g];
        st->block_first_id[b] = first;
        st->block_count[b] = cursor[g + 1];
        int32_t c = cursor[g + 1];
        cursor[g + 1] = first;
        first += c;
    }
    cursor[0] = 0;
    for (int32_t i = 0; i < st->num_placed; i++) {
        int32_t g = st->placed_group[i];
        st->ids[cursor[g + 1]++] = st->sorted[st->placed_pos[i]];
        st->next_unplaced[st->placed_pos[i]] = st->placed_pos[i] + 1;
    }
    st->mb_first_block[st->num_mb] = st->num_blocks;
    st->mb_num_blocks[st->num_mb] = groups;
    st->num_mb++;
    st->num_blocks += groups;
    st->num_ids = first;
    return DCP_OK;
}

static void reset_microbatch(dyn_state *st)
{
    for (int32_t j = st->log2_min_cp; j <= st->log2_pow2; j++) tree_clear(st, j);
    st->num_groups = 0;
    st->num_placed = 0;
    st->free_rank = 0;
    st->max_load = 0;
}

/* The reference's fill_with_full_dpxcp_group: every sequence left, in order, that still fits on all N ranks. */
static void full_group_fallback(dyn_state *st, int32_t first_pos)
{
    const int32_t ranks = st->num_ranks;
    st->num_groups = 1;
    st->group_size[0] = ranks;
    st->free_rank = ranks;
    st->num_placed = 0;
    soft_double packed = {0, 0};
    for (int32_t p = find_unplaced(st->next_unplaced, first_pos); p < st->n;
         p = find_unplaced(st->next_unplaced, p + 1)) {
        if (st->num_placed >= st->seq_cap) break;
        soft_double next = soft_add(packed, soft_div(st->lengths[st->sorted[p]], ranks));
        if (!soft_le(next, st->per_rank)) continue;
        packed = next;
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = 0;
    }
}

/*
 * A tallest sequence that needs more than the largest power of two <= N ranks
 * (N not a power of two): the reference asserts here.  dcpack runs its loop on:
 * one group of all N ranks, joined by the following sequences that also need
 * it while tokens and the load cap allow; shorter ones wait.
 */
static void full_group_microbatch(dyn_state *st, int32_t first_pos)
{
    const int32_t ranks = st->num_ranks;
    const int32_t tall = st->sorted[first_pos];
    const dcp_u128 cap = cap_times(st->lengths[tall], st->per_rank, ranks); /* loads scaled by N: s*s */
    int64_t tokens = st->lengths[tall];
    dcp_u128 load = (dcp_u128)st->lengths[tall] * (dcp_u128)st->lengths[tall];
    st->num_groups = 1;
    st->group_size[0] = ranks;
    st->free_rank = ranks;
    st->placed_pos[0] = first_pos;
    st->placed_group[0] = 0;
    st->num_placed = 1;
    for (int32_t p = find_unplaced(st->next_unplaced, first_pos + 1); p < st->n;
         p = find_unplaced(st->next_unplaced, p + 1)) {
        int32_t id = st->sorted[p];
        if (st->min_cp[id] <= st->pow2_ranks) break; /* the rest cannot use a group of N */
        int64_t s = st->lengths[id];
        dcp_u128 square = (dcp_u128)s * (dcp_u128)s;
        if (tokens + s > st->per_rank * ranks || load + square > cap || st->num_placed >= st->seq_cap) continue;
        tokens += s;
        load += square;
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = 0;
    }
}

static dcp_status next_microbatch(dyn_state *st, int32_t first_pos, dcp_error *err)
{
    const int32_t tall = st->sorted[first_pos];
    const int32_t c0 = st->min_cp[tall];
    reset_microbatch(st);
    if (c0 > st->pow2_ranks) {
        full_group_microbatch(st, first_pos);
        return store_microbatch(st, err);
    }
    const int64_t tall_len = st->lengths[tall];
    st->cap = (int64_t)(cap_times(tall_len, st->per_rank, st->pow2_ranks) >> st->load_shift);

    int32_t j0 = log2_floor(c0);
    int32_t g0 = open_group(st, j0, tall_len, load_of(st, tall_len, j0));
    st->placed_pos[0] = first_pos;
    st->placed_group[0] = g0;
    st->num_placed = 1;

    int32_t pos = first_pos;
    for (;;) {
        int64_t theta = placeable_length(st);
        /* first sorted position after pos with length <= theta (lengths are non-increasing): gallop, then bisect */
        int32_t lo = pos + 1, hi = lo, step = 1;
        while (hi < st->n && st->sorted_lengths[hi] > theta) {
            lo = hi + 1;
            hi = lo + step < st->n ? lo + step : st->n;
            step *= 2;
        }
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (st->sorted_lengths[mid] <= theta) hi = mid;
            else lo = mid + 1;
        }
        if (lo >= st->n) break;
        int32_t p = find_unplaced(st->next_unplaced, lo);
        if (p >= st->n) break;
        int32_t g = place(st, st->sorted[p]);
        if (g < 0)
            return dcp__fail(err, DCP_ERR_INVALID_PLAN,
                            "dynamic_cp: internal error: sequence %d (length %d) within the placeable bound %lld "
                            "found no option", st->sorted[p], st->lengths[st->sorted[p]], (long long)theta);
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = g;
        pos = p;
    }
    if (!fill_empty_ranks(st)) full_group_fallback(st, first_pos);
    return store_microbatch(st, err);
}

/* ------------------------------------------------------------------------ */
/* VPP alignment (align_sample_id_groups)                                    */
/* ------------------------------------------------------------------------ */

/*
 * fill_empty_by_expanding_cp on block sizes (non-increasing, summing to less
 * than N): repeatedly double the first block of the trailing run of smallest
 * blocks, or the first block when all are equal.  Returns 0 where the
 * reference would loop forever or corrupt the list.
 */
static int refill_half(int32_t *sizes, int32_t count, int32_t ranks)
{
    int64_t used = 0;
    for (int32_t i = 0; i < count; i++) used += sizes[i];
    while (used < ranks) {
        const int64_t empty = ranks - used;
        int32_t prev = 0, acted = 0;
        for (int32_t i = count - 1; i >= 0; i--) {
            int32_t c = sizes[i];
            if (c > prev && prev != 0) {
                if (prev > empty) return 0;
                sizes[i + 1] = 2 * prev;
                used += prev;
                acted = 1;
                break;
            }
            if (c <= empty && i == 0) {
                sizes[0] = 2 * c;
                used += c;
                acted = 1;
                break;
            }
            prev = c;
        }
        if (!acted) return 0;
    }
    return 1;
}

/* split_group: the second half replaces microbatch i, the first half is appended.  0 if it cannot split. */
static int split_microbatch(dyn_state *st, int32_t i)
{
    const int32_t b0 = st->mb_first_block[i], count = st->mb_num_blocks[i], ranks = st->num_ranks;
    if (count < 2) return 0;
    for (int32_t k = 1; k < count; k++)
        if (st->block_size[b0 + k] > st->block_size[b0 + k - 1])
            return 0; /* the reference asserts; never true for microbatches built here (sizes never increase) */
    int32_t k = 0, prefix = 0;
    while (prefix < ranks / 2) prefix += st->block_size[b0 + k++];
    if (k >= count) return 0;
    int32_t *tmp = st->tmp_sizes;
    for (int32_t b = 0; b < count; b++) tmp[b] = st->block_size[b0 + b];
    if (!refill_half(tmp, k, ranks) || !refill_half(tmp + k, count - k, ranks)) return 0;
    if (st->num_mb >= st->n) return 0; /* cannot happen: every microbatch holds an id */
    for (int32_t b = 0; b < count; b++) st->block_size[b0 + b] = tmp[b];
    st->mb_first_block[i] = b0 + k;
    st->mb_num_blocks[i] = count - k;
    st->mb_first_block[st->num_mb] = b0;
    st->mb_num_blocks[st->num_mb] = k;
    st->num_mb++;
    return 1;
}

static dcp_status align_microbatches(dyn_state *st, dcp_error *err)
{
    const int32_t multiple = st->align_group;
    int32_t remainder = (multiple - st->num_mb % multiple) % multiple;
    int32_t i = st->num_mb - 1, attempts = 0;
    while (remainder > 0) {
        if (i < 0) {
            if (attempts >= st->num_mb)
                return dcp__fail(err, DCP_ERR_INFEASIBLE,
                                "dynamic_cp: cannot split %d microbatches into a multiple of "
                                "microbatch_group_size_per_vp_stage %d: no microbatch has two CP groups to split",
                                st->num_mb, multiple);
            i = st->num_mb - 1;
        }
        if (split_microbatch(st, i)) {
            remainder--;
            attempts = 0;
        } else {
            attempts++;
        }
        i--;
    }
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */

dcp_status dcp__assign_dynamic_cp(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    const dcp_config *c = in->config;
    const int32_t n = in->num_sequences, ranks = in->num_ranks;
    dyn_state st;
    memset(&st, 0, sizeof st);
    if (!dyn_alloc(&st, scratch, n, ranks, c->min_cp_size))
        return dcp__fail(err, DCP_ERR_CAPACITY, "dynamic_cp scratch too small for %d sequences on %d ranks", n, ranks);
    st.num_ranks = ranks;
    st.log2_pow2 = log2_floor(ranks);
    st.pow2_ranks = (int32_t)1 << st.log2_pow2;
    st.log2_min_cp = log2_floor(c->min_cp_size);
    st.per_rank = c->max_seqlen_per_rank;
    st.seq_cap = c->max_sequences_per_microbatch > 0 ? c->max_sequences_per_microbatch : INT32_MAX;
    st.align_group = c->microbatch_group_size_per_vp_stage;
    st.lengths = in->lengths;
    st.sorted = in->sorted_ids;
    st.min_cp = in->min_cp;
    st.n = n;
    st.max_mb = plan->max_microbatches < n ? plan->max_microbatches : n;

    const dcp_u128 largest_load = (dcp_u128)in->lengths[in->sorted_ids[0]] * (dcp_u128)st.per_rank * st.pow2_ranks;
    while ((largest_load >> st.load_shift) >= ((dcp_u128)1 << DYN_LOAD_LOG2)) st.load_shift++;

    for (int32_t j = st.log2_min_cp; j <= st.log2_pow2; j++) {
        dyn_node *t = st.nodes + st.tree_offset[j];
        for (int32_t v = 0; v < 2 * st.tree_leaves[j]; v++) t[v] = empty_node;
    }
    for (int32_t p = 0; p <= n; p++) st.next_unplaced[p] = p;
    for (int32_t p = 0; p < n; p++) st.sorted_lengths[p] = in->lengths[in->sorted_ids[p]];

    for (int32_t first = find_unplaced(st.next_unplaced, 0); first < n;
         first = find_unplaced(st.next_unplaced, first)) {
        dcp_status s = next_microbatch(&st, first, err);
        if (s != DCP_OK) return s;
    }
    if (st.align_group > 1) {
        dcp_status s = align_microbatches(&st, err);
        if (s != DCP_OK) return s;
    }
    for (int32_t m = 0; m < st.num_mb; m++) {
        dcp_status s = dcp__plan_open_microbatch(plan, err);
        if (s != DCP_OK) return s;
        int32_t rank = 0;
        for (int32_t b = st.mb_first_block[m]; b < st.mb_first_block[m] + st.mb_num_blocks[m]; b++) {
            s = dcp__plan_push_group(plan, rank, st.block_size[b], st.ids + st.block_first_id[b], st.block_count[b], err);
            if (s != DCP_OK) return s;
            rank += st.block_size[b];
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}
