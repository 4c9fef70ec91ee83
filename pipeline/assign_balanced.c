/*
 * assign_balanced.c - dcpack's own scheduler: minimise the step cost model's
 * makespan (COSTMODEL.md), sum over microbatches of (slowest rank + overhead).
 *
 * A microbatch is a multiset of groups: a group is a power-of-two block of
 * ranks (or all N ranks) holding sequences that all run at that CP size, and
 * every rank of the group carries the group's load (the sum of cost(s, cp)
 * over its sequences).  Where a group sits inside the microbatch changes no
 * cost (the CP size alone says intra- or inter-node), so a microbatch is only
 * "which groups, of which sizes": any multiset of sizes summing to N is laid
 * out by placing groups in decreasing size order, each one aligned.
 *
 * One construction pass, for a target microbatch count K:
 *  1. CP size: each sequence starts on the lower bound's choice (its minimal
 *     CP size) and is widened (CP doubled) while its per-rank cost stays above
 *     the target level T = work / (K * N), widening lowers it, and the extra
 *     GPU time stays within a variant's allowance.
 *  2. Tall sequences (per-rank cost above T) are shelved first-fit in
 *     decreasing cost order: each opens a microbatch whose level is its cost,
 *     and later tall ones fill the free ranks of earlier shelves.
 *  3. The rest, in decreasing cost order, go where they leave the most room
 *     under their microbatch's level (LPT with per-microbatch caps: a shelf's
 *     level, or T for the plain microbatches): a new group on free ranks of
 *     the microbatch with the highest cap, or the existing group of their CP
 *     size with the lowest load minus cap that has token (and count) room.
 *  4. Free ranks left over (few sequences) are filled by splitting the most
 *     loaded group in two, or widening it when it holds one sequence.
 *  5. Local search: per microbatch, sequences move or swap from the slowest
 *     rank to others while that lowers the microbatch's maximum.
 * Several passes (K from the token bound upwards, widening allowances) run;
 * the plan with the smallest exact makespan wins (ties: the earlier pass).
 *
 * Everything is integer and every tie is broken by index, so the plan is a
 * pure function of the lengths and the configuration.  Scratch comes from the
 * arena, laid out by one function that also gives the exact scratch size.
 */
#include "stages.h"
#include "../core/plan.h"

#include <string.h>
#ifdef DCP_BALANCED_TRACE
#include <stdio.h>
#endif

enum { NUM_CLASSES = DCP_MAX_LOG2_CP + 2, FULL_CLASS = DCP_MAX_LOG2_CP + 1 };

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static int64_t clamp128(__int128 v)
{
    if (v > (__int128)INT64_MAX) return INT64_MAX;
    if (v < -(__int128)INT64_MAX) return -INT64_MAX;
    return (int64_t)v;
}

/* An entry of a binary min-heap: the key travels with the id, so sifting reads one array. */
typedef struct heap_entry {
    int64_t key;
    int32_t id;
} heap_entry;

/* Scratch of one planning call. */
typedef struct balanced {
    /* the problem, by position in length-descending order */
    int32_t n, num_ranks, max_seqlen, seq_cap, vpp;
    int64_t join_num, join_den; /* extra GPU time allowed when a sequence joins a wider group */
    uint64_t signatures[4];     /* CP-size signatures of the passes run for the current target */
    int num_signatures;
    const dcp_cost_model *model;
    const int32_t *ids; /* position -> global id */
    int32_t *len;       /* [n] */
    int32_t *min_cp;    /* [n] */
    int64_t *min_cost;  /* [n] per-rank cost at min_cp */
    __int128 min_work;  /* sum of cp * cost at min_cp */
    int64_t total_tokens;

    /* one pass */
    int32_t *cp;         /* [n] */
    int64_t *cost;       /* [n] per-rank cost at cp */
    int32_t *order;      /* [n] positions by cost descending */
    int32_t *class_list; /* [n] positions grouped by class */
    int32_t *item_group; /* [n] */
    int32_t *item_next;  /* [n] next position in the same group, -1 at the end */

    int32_t num_groups;
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
    int32_t *sort_a, *sort_b; /* [n] merge sort of groups */
    int32_t *saved_mb;        /* [n] group -> microbatch before a regrouping */

    /* the best plan so far */
    int64_t best_makespan;
    int32_t best_groups, best_mbs;
    int32_t *best_item_group; /* [n] */
    int32_t *best_g_mb;       /* [n] */
    int32_t *best_g_cp;       /* [n] */
} balanced;

/* Lay out the scratch for up to `n` sequences on `num_ranks` ranks (a measuring arena gives the size). */
static int balanced_layout(balanced *b, dcp_arena *a, int32_t n, int32_t num_ranks)
{
    size_t un = (size_t)n;
    int32_t local = n < num_ranks ? n : num_ranks;
    b->len = DCP_ARENA_NEW(a, int32_t, un);
    b->min_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->min_cost = DCP_ARENA_NEW(a, int64_t, un);
    b->cp = DCP_ARENA_NEW(a, int32_t, un);
    b->cost = DCP_ARENA_NEW(a, int64_t, un);
    b->order = DCP_ARENA_NEW(a, int32_t, un);
    b->class_list = DCP_ARENA_NEW(a, int32_t, un);
    b->item_group = DCP_ARENA_NEW(a, int32_t, un);
    b->item_next = DCP_ARENA_NEW(a, int32_t, un);
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
    b->best_item_group = DCP_ARENA_NEW(a, int32_t, un);
    b->best_g_mb = DCP_ARENA_NEW(a, int32_t, un);
    b->best_g_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->sort_a = DCP_ARENA_NEW(a, int32_t, un);
    b->sort_b = DCP_ARENA_NEW(a, int32_t, un);
    b->saved_mb = DCP_ARENA_NEW(a, int32_t, un);
    b->local_cap = local;
    return b->len && b->min_cp && b->min_cost && b->cp && b->cost && b->order && b->class_list &&
           b->item_group && b->item_next && b->g_mb && b->g_cp && b->g_head && b->g_tail && b->g_count &&
           b->g_load && b->g_tokens && b->g_key && b->mb_free && b->mb_cap && b->mb_level && b->mb_order &&
           b->mb_first && b->mb_groups && b->heap && b->park && b->cursor && b->local && b->best_item_group &&
           b->best_g_mb && b->best_g_cp && b->sort_a && b->sort_b && b->saved_mb;
}

size_t dcp_assign_balanced_scratch_size(const dcp_config *config)
{
    balanced b;
    dcp_arena measure;
    dcp_arena_init_measure(&measure);
    if (!balanced_layout(&b, &measure, config->max_sequences, dcp_config_num_ranks(config))) return SIZE_MAX;
    return measure.used;
}

/* ---- sizes ---- */

static int class_of(int32_t cp)
{
    if (cp & (cp - 1)) return FULL_CLASS; /* all N ranks, N not a power of two */
    int k = 0;
    while ((1 << k) < cp) k++;
    return k;
}

/* The next CP size after cp on num_ranks ranks: double, or all ranks; 0 when cp is already all of them. */
static int32_t next_size(int32_t cp, int32_t num_ranks)
{
    if (cp >= num_ranks) return 0;
    return (int64_t)cp * 2 <= num_ranks ? cp * 2 : num_ranks;
}

/* ---- binary min-heaps of (key, id), ties broken by the lower id ---- */

static inline int entry_less(heap_entry a, heap_entry b) { return a.key < b.key || (a.key == b.key && a.id < b.id); }

#ifdef DCP_BALANCED_TRACE
static long trace_sifts, trace_parks;
#endif
/* 4-ary: half the levels of a binary heap; the four children's compares are independent. */
static void heap_sift_down(heap_entry *h, int32_t size, int32_t i)
{
#ifdef DCP_BALANCED_TRACE
    trace_sifts++;
#endif
    heap_entry x = h[i];
    for (;;) {
        int32_t c = 4 * i + 1;
        if (c >= size) break;
        int32_t best = c;
        int32_t last = c + 4 < size ? c + 4 : size;
        for (int32_t j = c + 1; j < last; j++)
            if (entry_less(h[j], h[best])) best = j;
        if (!entry_less(h[best], x)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static void heap_push(heap_entry *h, int32_t *size, int32_t id, int64_t key)
{
    heap_entry x = {key, id};
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

/* The root's key changed to `key`: restore the order. */
static void heap_rekey_top(heap_entry *h, int32_t size, int64_t key)
{
    h[0].key = key;
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
    int32_t g = b->num_groups++;
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

static int group_fits(const balanced *b, int32_t g, int32_t s)
{
    if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) return 0;
    return b->g_tokens[g] + s <= (int64_t)b->max_seqlen * b->g_cp[g];
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

/* Split g's sequences between g and a new group of the same size in the same microbatch. */
static void group_split(balanced *b, int32_t g)
{
    int32_t g2 = new_group(b, b->g_mb[g], b->g_cp[g]);
    int32_t p = b->g_head[g];
    b->g_head[g] = b->g_tail[g] = -1;
    b->g_count[g] = 0;
    b->g_load[g] = 0;
    b->g_tokens[g] = 0;
    while (p >= 0) {
        int32_t next = b->item_next[p];
        group_add(b, b->g_load[g2] < b->g_load[g] ? g2 : g, p, b->cost[p]);
        p = next;
    }
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
                             int32_t class_offset[NUM_CLASSES + 1], uint64_t *signature)
{
    uint64_t sig = 14695981039346656037ull;
    const int32_t n = b->n;
    int32_t count[NUM_CLASSES] = {0};
    __int128 work = 0;
    for (int32_t p = 0; p < n; p++) {
        int32_t c = b->min_cp[p];
        int64_t h = b->min_cost[p];
        while (h > level) {
            int32_t c2 = next_size(c, b->num_ranks);
            if (c2 == 0) break;
            int64_t h2 = dcp_cost(b->model, b->len[p], c2);
            if (h2 >= h) break;
            /* the extra GPU time of the wider group must stay within the allowance */
            if ((__int128)c2 * h2 * widen_den > (__int128)c * h * (widen_den + widen_num)) break;
            c = c2;
            h = h2;
        }
        b->cp[p] = c;
        b->cost[p] = h;
        if (c != b->min_cp[p]) sig = (sig ^ (uint64_t)p ^ ((uint64_t)c << 32)) * 1099511628211ull;
        work += (__int128)c * h;
        count[class_of(c)]++;
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
    for (int32_t p = 0; p < n; p++) {
        int k = class_of(b->cp[p]);
        b->class_list[end[k]++] = p;
    }
    for (int32_t i = 0; i < n; i++) {
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
    return work;
}

static int64_t ceil_div128(__int128 a, __int128 d) { return clamp128(a <= 0 ? 0 : (a + d - 1) / d); }

/* Step 4: fill free ranks of every microbatch by splitting or widening its most loaded group. */
static int repair(balanced *b)
{
    const int32_t groups_before = b->num_groups;
    index_groups(b);
    for (int32_t m = 0; m < b->num_mbs; m++) {
        if (b->mb_free[m] == 0 || b->mb_first[m + 1] == b->mb_first[m]) continue;
        int32_t size = 0;
        for (int32_t j = b->mb_first[m]; j < b->mb_first[m + 1]; j++) {
            int32_t g = b->mb_groups[j];
            heap_push(b->local, &size, g, -b->g_load[g]);
        }
        while (b->mb_free[m] > 0 && size > 0) {
            int32_t g = heap_pop(b->local, &size);
            int32_t c = b->g_cp[g];
            if (c > b->mb_free[m]) continue; /* free ranks only shrink: g never fits again */
            if (b->g_count[g] >= 2) {
                group_split(b, g);
                int32_t g2 = b->num_groups - 1;
                heap_push(b->local, &size, g, -b->g_load[g]);
                heap_push(b->local, &size, g2, -b->g_load[g2]);
            } else {
                int32_t c2 = next_size(c, b->num_ranks);
                if (c2 == 0 || c2 - c > b->mb_free[m]) continue;
                group_recost(b, g, c2);
                b->mb_free[m] -= c2 - c;
                heap_push(b->local, &size, g, -b->g_load[g]);
            }
        }
        if (b->mb_free[m] > 0) {
            /* N is not a power of two and no block fits the gap: the whole microbatch becomes one group */
            int32_t keep = -1, count = 0;
            for (int32_t g = 0; g < b->num_groups; g++) {
                if (b->g_mb[g] != m || b->g_count[g] == 0) continue;
                count += b->g_count[g];
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
            }
            if (b->seq_cap > 0 && count > b->seq_cap) return 0;
            group_recost(b, keep, b->num_ranks);
            b->mb_free[m] = 0;
        }
    }
    (void)groups_before;
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
 * Regroup: deal all groups, by load descending, first-fit into the same
 * number of microbatches, so each microbatch holds groups of like load (for
 * equal sizes this ordering minimises the sum of microbatch maxima).  Kept
 * only when the makespan drops.
 */
static int64_t regroup(balanced *b, int64_t makespan)
{
    int32_t count = 0, live = 0;
    for (int32_t g = 0; g < b->num_groups; g++) {
        if (b->g_count[g] == 0) continue;
        b->sort_a[count++] = g;
        b->saved_mb[g] = b->g_mb[g];
    }
    evaluate(b, &live);
    const int32_t old_mbs = b->num_mbs;
    int32_t *sorted = sort_groups_by_load(b, count);
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
 * split the microbatch with the most groups (ties: the slowest) in two halves
 * of about N/2 ranks each, then refill both by repair.  A microbatch of one
 * group with several sequences is split through its group.  Returns 0 when no
 * microbatch can be split (fewer sequences than microbatches needed).
 */
static int fix_vpp_multiple(balanced *b)
{
    for (;;) {
        int32_t live = 0;
        evaluate(b, &live);
        if (live % b->vpp == 0) return 1;
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
            group_split(b, b->mb_groups[b->mb_first[best]]);
            int32_t g2 = b->num_groups - 1, half = new_mb(b, 0);
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

static int64_t run_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den)
{
    const int32_t n = b->n, N = b->num_ranks;
    const int64_t M = b->max_seqlen;
    int32_t class_offset[NUM_CLASSES + 1];
    b->num_groups = 0;
    b->num_mbs = 0;

    int64_t level = ceil_div128(b->min_work, (__int128)target_mbs * N);
    uint64_t signature;
    __int128 work = choose_sizes(b, level, widen_num, widen_den, class_offset, &signature);
    for (int j = 0; j < b->num_signatures; j++)
        if (b->signatures[j] == signature) return -1; /* same CP sizes as an earlier pass: same plan */
    if (b->num_signatures < 4) b->signatures[b->num_signatures++] = signature;
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
        heap_push(b->heap + class_offset[k], &heap_size[k], g, b->g_key[g]);
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
            heap_push(heap, &heap_size[k], g, b->g_key[g]);
        }
        int32_t g = -1;
        while (heap_size[k] > 0) {
            int32_t top = heap[0].id;
            if (b->g_tokens[top] + s <= room_limit) {
                g = top;
                break;
            }
            heap_pop(heap, &heap_size[k]);
            heap_push(park, &park_size[k], top, b->g_tokens[top] - room_limit);
#ifdef DCP_BALANCED_TRACE
            trace_parks++;
#endif
        }
        while (ptr_new[k] < num_order && b->mb_free[b->mb_order[ptr_new[k]]] < c) ptr_new[k]++;
        int32_t fresh = ptr_new[k] < num_order ? b->mb_order[ptr_new[k]] : -1;
        /* a wider group with room under its cap may take the sequence at its size, for a bounded extra cost */
        int wide_class = -1;
        int64_t wide_cost = 0, wide_after = INT64_MAX;
        for (uint32_t wider = b->join_den > 0 ? present >> (k + 1) : 0, k2 = (uint32_t)k + 1; wider;
             wider >>= 1, k2++) {
            if (!(wider & 1u) || heap_size[k2] == 0) continue;
            int32_t top = b->heap[class_offset[k2]].id, c2 = b->g_cp[top];
            if (b->g_tokens[top] + s > (int64_t)M * c2 || (b->seq_cap > 0 && b->g_count[top] >= b->seq_cap)) continue;
            int64_t h2 = dcp_cost(b->model, s, c2);
            if ((__int128)c2 * h2 * b->join_den > (__int128)c * h * (b->join_den + b->join_num)) continue;
            int64_t after = sat_add(b->g_key[top], h2);
            if (after < wide_after) {
                wide_after = after;
                wide_class = (int)k2;
                wide_cost = h2;
            }
        }
        int64_t fresh_after = fresh >= 0 ? h - b->mb_cap[fresh] : INT64_MAX;
        int64_t same_after = g >= 0 ? sat_add(b->g_key[g], h) : INT64_MAX;
        if (fresh >= 0 && fresh_after <= same_after && fresh_after <= wide_after) {
            g = new_group(b, fresh, c);
            group_add(b, g, p, h);
            b->g_key[g] = h - b->mb_cap[fresh];
            if (b->seq_cap != 1) heap_push(heap, &heap_size[k], g, b->g_key[g]);
        } else if (g >= 0 && same_after <= wide_after) {
            group_add(b, g, p, h);
            b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
            if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) heap_pop(heap, &heap_size[k]);
            else heap_rekey_top(heap, heap_size[k], b->g_key[g]);
        } else if (wide_class >= 0) {
            heap_entry *wide = b->heap + class_offset[wide_class];
            g = wide[0].id;
            b->cp[p] = b->g_cp[g];
            b->cost[p] = wide_cost;
            group_add(b, g, p, wide_cost);
            b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
            if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) heap_pop(wide, &heap_size[wide_class]);
            else heap_rekey_top(wide, heap_size[wide_class], b->g_key[g]);
        } else {
            int32_t grown = new_mb(b, plain_cap);
            b->mb_order[num_order++] = grown;
            g = new_group(b, grown, c);
            group_add(b, g, p, h);
            b->g_key[g] = h - plain_cap;
            if (b->seq_cap != 1) heap_push(heap, &heap_size[k], g, b->g_key[g]);
        }
    }

    if (!repair(b)) return -1;
    compact_mbs(b);
    int32_t live = 0;
    if (b->vpp > 1 && !fix_vpp_multiple(b)) return -1;
    int64_t makespan = evaluate(b, &live);
    makespan = regroup(b, makespan);
    return makespan;
}

static void keep_best(balanced *b, int64_t makespan)
{
    b->best_makespan = makespan;
    b->best_groups = b->num_groups;
    b->best_mbs = b->num_mbs;
    memcpy(b->best_item_group, b->item_group, (size_t)b->n * sizeof(int32_t));
    for (int32_t g = 0; g < b->num_groups; g++) {
        b->best_g_mb[g] = b->g_count[g] > 0 ? b->g_mb[g] : -1;
        b->best_g_cp[g] = b->g_cp[g];
    }
}

/* Emit the best plan: microbatches in index order, groups by size descending, ids by length descending. */
static dcp_status emit(balanced *b, dcp_plan *plan, dcp_error *err)
{
    const int32_t n = b->n, G = b->best_groups, K = b->best_mbs;
    int32_t *first = b->mb_first, *sorted = b->mb_groups, *cursor = b->cursor;
    /* groups by (microbatch, class descending, index): counting sort on the class, then on the microbatch */
    int32_t class_count[NUM_CLASSES + 1] = {0}, live_groups = 0;
    for (int32_t g = 0; g < G; g++)
        if (b->best_g_mb[g] >= 0) {
            class_count[FULL_CLASS - class_of(b->best_g_cp[g]) + 1]++;
            live_groups++;
        }
    for (int k = 0; k < NUM_CLASSES; k++) class_count[k + 1] += class_count[k];
    for (int32_t g = 0; g < G; g++)
        if (b->best_g_mb[g] >= 0) b->order[class_count[FULL_CLASS - class_of(b->best_g_cp[g])]++] = g;
    memset(first, 0, (size_t)(K + 1) * sizeof *first);
    for (int32_t j = 0; j < live_groups; j++) first[b->best_g_mb[b->order[j]] + 1]++;
    for (int32_t m = 0; m < K; m++) {
        first[m + 1] += first[m];
        cursor[m] = first[m];
    }
    for (int32_t j = 0; j < live_groups; j++) {
        int32_t g = b->order[j];
        sorted[cursor[b->best_g_mb[g]]++] = g;
    }
    /* ids of each group contiguous, in position order: g_head holds each group's start */
    int32_t *start = b->g_head, *ids = b->class_list;
    memset(start, 0, (size_t)(G + 1) * sizeof *start);
    for (int32_t p = 0; p < n; p++) start[b->best_item_group[p] + 1]++;
    for (int32_t g = 0; g < G; g++) start[g + 1] += start[g];
    memcpy(b->g_tail, start, (size_t)G * sizeof *start);
    for (int32_t p = 0; p < n; p++) ids[b->g_tail[b->best_item_group[p]]++] = b->ids[p];
    for (int32_t m = 0; m < K; m++) {
        if (first[m + 1] == first[m]) continue;
        dcp_status st = dcp_plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        int32_t rank = 0;
        for (int32_t j = first[m]; j < first[m + 1]; j++) {
            int32_t g = sorted[j];
            st = dcp_plan_push_group(plan, rank, b->best_g_cp[g], ids + start[g], start[g + 1] - start[g], err);
            if (st != DCP_OK) return st;
            rank += b->best_g_cp[g];
        }
        dcp_plan_close_microbatch(plan);
    }
    return DCP_OK;
}

dcp_status dcp_assign_balanced(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    const dcp_config *c = in->config;
    balanced b;
    memset(&b, 0, sizeof b);
    if (!balanced_layout(&b, scratch, in->num_sequences, in->num_ranks))
        return dcp_fail(err, DCP_ERR_CAPACITY, "balanced scratch too small for %d sequences on %d ranks",
                        in->num_sequences, in->num_ranks);
    b.n = in->num_sequences;
    b.num_ranks = in->num_ranks;
    b.max_seqlen = c->max_seqlen_per_rank;
    b.seq_cap = c->max_sequences_per_microbatch;
    b.vpp = c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
    b.model = &c->cost;
    b.ids = in->sorted_ids;
    for (int32_t p = 0; p < b.n; p++) {
        int32_t id = in->sorted_ids[p];
        b.len[p] = in->lengths[id];
        b.min_cp[p] = in->min_cp[id];
        b.min_cost[p] = dcp_cost(b.model, b.len[p], b.min_cp[p]);
        b.min_work += (__int128)b.min_cp[p] * b.min_cost[p];
        b.total_tokens += b.len[p];
    }
    const int64_t capacity = (int64_t)b.num_ranks * b.max_seqlen;
    int64_t k0 = (b.total_tokens + capacity - 1) / capacity;
    if (k0 < 1) k0 = 1;
    k0 = (k0 + b.vpp - 1) / b.vpp * b.vpp;
    if (k0 > b.n)
        return dcp_fail(err, DCP_ERR_INFEASIBLE,
                        "%d sequences cannot fill %lld microbatches (a multiple of the VPP group %d)", b.n,
                        (long long)k0, b.vpp);
    b.best_makespan = -1;
    b.join_num = 1;
    b.join_den = 8;
#ifdef DCP_BALANCED_TRACE
    fprintf(stderr, "begin n=%d ranks=%d m=%d k0=%lld\n", b.n, b.num_ranks, b.max_seqlen, (long long)k0);
#endif
    /*
     * Which passes: with many sequences per rank the construction is robust
     * and a pass costs most, so two (the token bound without widening, one
     * more microbatch with widening);
     * with few per rank (where a pass is cheap) five target counts and four
     * allowances.  A pass whose CP sizes repeat an earlier pass's for the same
     * target is skipped.  Chosen by measurement over the benchmark matrix.
     */
    static const int64_t widen[][2] = {{0, 1}, {1, 4}, {1, 16}, {1, 0}};
    const int dense = (int64_t)b.n < 16 * (int64_t)b.num_ranks;
    const int num_targets = dense ? 5 : 2, num_widen = dense ? 4 : 2;
    for (int t = 0; t < num_targets; t++) {
        int64_t k = k0 + (int64_t)t * b.vpp;
        if (k > b.n) break;
        b.num_signatures = 0;
        for (int w = 0; w < num_widen; w++) {
            if (!dense && w != t) continue; /* (k0, no widening), (k0 + 1, widening up to 1/4) */
            int64_t makespan = run_pass(&b, k, widen[w][0], widen[w][1]);
#ifdef DCP_BALANCED_TRACE
            fprintf(stderr, "sifts %ld parks %ld ", trace_sifts, trace_parks);
            trace_sifts = trace_parks = 0;
            fprintf(stderr, "pass k=%lld widen=%lld/%lld mbs=%d groups=%d makespan=%lld\n", (long long)k,
                    (long long)widen[w][0], (long long)widen[w][1], b.num_mbs, b.num_groups, (long long)makespan);
#endif
            if (makespan >= 0 && (b.best_makespan < 0 || makespan < b.best_makespan)) keep_best(&b, makespan);
        }
    }
    if (b.best_makespan < 0)
        return dcp_fail(err, DCP_ERR_INFEASIBLE, "balanced: no plan for %d sequences on %d ranks", b.n, b.num_ranks);
    return emit(&b, plan, err);
}
