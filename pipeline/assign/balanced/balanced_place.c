/*
 * balanced_place.c - the layout of the kept plans under the dependency step
 * model (docs/planning.md, step models): the order of the microbatches and
 * the rank block of every group.  Neither changes the barrier makespan, both
 * change the dependency makespan D (a group starts when all its ranks have
 * finished the microbatch before), so this runs only when the configuration's
 * step_model is DCP_STEP_MODEL_DEPENDENCY, at emit time.
 *
 * For every kept plan, D is computed for several layouts:
 *
 *   default     the layout the barrier model emits: microbatches in index
 *               order, groups by size descending laid out from rank 0;
 *   greedy      microbatches in one of three orders (index; level ascending;
 *               slack descending, the slack being the rank time a barrier
 *               would leave idle: level x N minus the microbatch's GPU time;
 *               an order equal to one tried is skipped), and within a
 *               microbatch groups by size descending, then by load
 *               descending, each onto the free aligned block of its size whose
 *               ranks finished the previous microbatch earliest (ties: the
 *               lowest first rank).  Over the benchmark matrix each of the
 *               three orders gives the least D in some cells; level
 *               descending never did.
 *
 * The layout with the least D wins (ties: the lower barrier makespan, the
 * lower kept index, the earlier layout above, so the default layout wins
 * ties within a plan): D never exceeds that of the plan the barrier model
 * emits.
 *
 * Blocks: placed largest first, power-of-two groups always find an aligned
 * free block (the groups of each size and above sum to a multiple of that
 * size within [0, N), so the free space below them is whole aligned blocks).
 * The free blocks of one size are the unused blocks of the size visited
 * before, cut to it, and the pieces of N's binary decomposition between the
 * two sizes, cut likewise; only the sizes a microbatch holds are visited, and
 * each has at most as many free blocks as groups left to place.  A block's start time is the
 * maximum finish time of its ranks, read from per-level block maxima built
 * from the ranks' finish times once a microbatch: O(N + groups x sizes x log)
 * a microbatch, integer and saturating like core/stats.c.
 *
 * State: reads in and kept; writes pl, whose per-group and per-microbatch
 * arrays are pass's and work's (balanced_state.h).
 */
#include "balanced_internal.h"

enum { LAYOUT_DEFAULT, LAYOUT_INDEX, LAYOUT_LEVEL_ASC, LAYOUT_SLACK_DESC, NUM_LAYOUTS };

/* Stable merge sort of v[0..count) by key[v[i]] (descending when `descending`); tmp holds count entries. */
static void sort_by_key(int32_t *v, int32_t count, const int64_t *key, int descending, int32_t *tmp)
{
    enum { RUN = 16 };
    /* insertion sort of short runs, then merges of doubling width */
    for (int32_t lo = 0; lo < count; lo += RUN) {
        int32_t hi = lo + RUN < count ? lo + RUN : count;
        for (int32_t i = lo + 1; i < hi; i++) {
            int32_t x = v[i], j = i;
            while (j > lo && (descending ? key[v[j - 1]] < key[x] : key[v[j - 1]] > key[x])) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = x;
        }
    }
    int32_t *src = v, *dst = tmp;
    for (int32_t width = RUN; width < count; width *= 2) {
        for (int32_t lo = 0; lo < count; lo += 2 * width) {
            int32_t mid = lo + width < count ? lo + width : count;
            int32_t hi = mid + width < count ? mid + width : count;
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                /* the right run's entry goes first only when strictly before: stable */
                int right = descending ? key[src[j]] > key[src[i]] : key[src[j]] < key[src[i]];
                dst[o++] = right ? src[j++] : src[i++];
            }
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != v) memcpy(v, src, (size_t)count * sizeof *v);
}

/*
 * A free block of size 2^k as one integer: its start time above its index
 * (first rank / 2^k), so that integer order is (start, first rank) order.
 * Start times are taken relative to the least one of their size and keep the
 * bits the index leaves: exact while they span less than 2^(64 - index bits)
 * (at least 2^43 with N <= 2^20), else shifted down (the choice stays a pure function of the
 * plan; D is computed exactly anyway).
 */
enum { RADIX_MIN = 256 }; /* fewer blocks: quicksort */

static void sift_down(uint64_t *h, int32_t size, int32_t i)
{
    uint64_t x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && h[c] < h[c + 1]) c++;
        if (!(x < h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/*
 * Put the `need` least blocks first, in increasing order (the rest after
 * them in no particular order, the same for the same input): quicksort
 * (median of three) into the ranges that hold any of the first `need`,
 * insertion sort for short ranges, heapsort past a depth limit.  Blocks are
 * distinct (first ranks differ), so the result is one order.
 */
static void sort_least(uint64_t *h, int32_t count, int32_t need)
{
    /* (quicksort mispredicts half its comparisons: for many blocks the radix sort below is faster) */
    enum { SHORT = 16 };
    int depth = 2 * (32 - __builtin_clz((uint32_t)count | 1));
    while (count > SHORT && need > 0) {
        if (depth-- == 0) {
            for (int32_t i = count / 2 - 1; i >= 0; i--) sift_down(h, count, i);
            for (int32_t end = count - 1; end > 0; end--) {
                uint64_t t = h[0];
                h[0] = h[end];
                h[end] = t;
                sift_down(h, end, 0);
            }
            return;
        }
        /* the median of the first, middle and last entries as pivot, at h[0] */
        int32_t mid = count / 2, last = count - 1;
        uint64_t t;
        if (h[mid] < h[0]) t = h[mid], h[mid] = h[0], h[0] = t;
        if (h[last] < h[0]) t = h[last], h[last] = h[0], h[0] = t;
        if (h[last] < h[mid]) t = h[last], h[last] = h[mid], h[mid] = t;
        t = h[mid], h[mid] = h[0], h[0] = t;
        const uint64_t pivot = h[0];
        int32_t i = 0, j = count;
        for (;;) {
            do i++; while (i < count && h[i] < pivot);
            do j--; while (pivot < h[j]);
            if (i >= j) break;
            t = h[i], h[i] = h[j], h[j] = t;
        }
        h[0] = h[j];
        h[j] = pivot;
        /* [0, j) below the pivot, [j + 1, count) above: the right side only matters while need > j + 1 */
        if (j < count - 1 - j) {
            sort_least(h, j, need);
            need -= j + 1;
            h += j + 1;
            count -= j + 1;
        } else {
            if (need > j + 1) sort_least(h + j + 1, count - 1 - j, need - j - 1);
            count = j;
        }
    }
    if (need <= 0) return;
    for (int32_t i = 1; i < count; i++) {
        uint64_t x = h[i];
        int32_t j = i;
        while (j > 0 && x < h[j - 1]) {
            h[j] = h[j - 1];
            j--;
        }
        h[j] = x;
    }
}

/*
 * Sort blocks ascending, all of them: least significant digit first, a byte
 * at a time up to the highest byte of `max`, skipping bytes every block
 * shares.  tmp holds count entries.
 */
static void radix_sort(uint64_t *h, uint64_t *tmp, int32_t count, uint64_t max)
{
    uint64_t *src = h, *dst = tmp;
    for (int shift = 0; shift < 64 && (max >> shift) != 0; shift += 8) {
        int32_t at[256] = {0};
        for (int32_t i = 0; i < count; i++) at[(src[i] >> shift) & 255]++;
        if (at[(src[0] >> shift) & 255] == count) continue;
        for (int32_t d = 0, sum = 0; d < 256; d++) {
            const int32_t c = at[d];
            at[d] = sum;
            sum += c;
        }
        for (int32_t i = 0; i < count; i++) dst[at[(src[i] >> shift) & 255]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != h) memcpy(h, src, (size_t)count * sizeof *h);
}

/*
 * Kept plan k's groups and microbatches for the layouts: each group's load
 * (the sum of its sequences' costs, as core/stats.c sums them), each
 * microbatch's groups by size descending then index (pl.index) and by size
 * descending, load descending, index (pl.greedy), and its level (its most
 * loaded group).
 */
static void prepare(balanced *b, const saved_plan *k)
{
    const int32_t G = k->num_groups, K = k->num_mbs;
    int64_t *load = b->pl.load;
    /* lengths descend: equal lengths at one size come in runs, costed once */
    int64_t memo_len[NUM_CLASSES], memo_cost[NUM_CLASSES];
    for (int c = 0; c < NUM_CLASSES; c++) memo_len[c] = -1;
    for (int32_t g = 0; g < G; g++) load[g] = 0;
    for (int32_t p = 0; p < b->in.n; p++) {
        int32_t g = k->item_group[p], cp = k->g_cp[g];
        int c = dcp__balanced_class_of(cp);
        if (memo_len[c] != b->in.len[p]) {
            memo_len[c] = b->in.len[p];
            memo_cost[c] = dcp__cost(b->in.model, b->in.len[p], cp);
        }
        load[g] = dcp__sat_add_i64(load[g], memo_cost[c]);
    }
    /* pl.seen is free until an order is tried */
    int32_t *first = b->pl.first;
    const int32_t live = dcp__balanced_sort_groups(k, b->pl.tmp, first, b->pl.seen, b->pl.index);
    /* within each (microbatch, size): by load descending, stable (index order on equal loads) */
    memcpy(b->pl.greedy, b->pl.index, (size_t)live * sizeof *b->pl.greedy);
    b->pl.busy_mbs = 0;
    b->pl.work = 0;
    for (int32_t m = 0; m < K; m++) {
        int64_t level = 0;
        for (int32_t j = first[m]; j < first[m + 1];) {
            int32_t cp = k->g_cp[b->pl.greedy[j]], end = j + 1;
            while (end < first[m + 1] && k->g_cp[b->pl.greedy[end]] == cp) end++;
            sort_by_key(b->pl.greedy + j, end - j, load, 1, b->pl.tmp);
            if (load[b->pl.greedy[j]] > level) level = load[b->pl.greedy[j]];
            j = end;
        }
        b->pl.level[m] = level;
        b->pl.busy_mbs += first[m + 1] > first[m];
        /* the rank time a barrier would leave idle: level x N minus the microbatch's GPU time */
        dcp__i128 slack = (dcp__i128)level * b->in.num_ranks;
        for (int32_t j = first[m]; j < first[m + 1]; j++)
            slack -= (dcp__i128)load[b->pl.index[j]] * k->g_cp[b->pl.index[j]];
        b->pl.slack[m] = dcp__i128_saturate(slack);
        b->pl.work += (dcp__i128)level * b->in.num_ranks - slack;
    }
}

/* The start time of the block of size 2^k at rank r: the latest finish time of its ranks. */
static inline int64_t block_start(const balanced_place *pl, const int32_t *level_off, int k, int32_t r)
{
    return k == 0 ? pl->finish[r] : pl->max[level_off[k] + (r >> k)];
}

/*
 * Place the groups of microbatch m greedily (pl.greedy order): each size's
 * groups, heaviest first, onto its free aligned blocks by start time.  Writes
 * pl.rank and pl.done; 0 when the groups do not fit N ranks (not a plan).
 */
static int place_greedy(balanced *b, const saved_plan *k, int32_t m, const int32_t *level_off)
{
    const int32_t N = b->in.num_ranks, cap = b->pl.block_cap, begin = b->pl.first[m], end = b->pl.first[m + 1];
    const int64_t o = b->in.model->microbatch_overhead;
    uint64_t *blocks = b->pl.blocks;
    int32_t *next = b->pl.next;
    int32_t num_blocks = 0; /* the free blocks of the size last visited; from `used` on, the unused ones */
    int32_t used = 0;
    int last = 31;          /* the size last visited (2^last); 31: none yet, every piece of N is still to come */
    uint64_t last_mask = 0; /* the index bits of its blocks */
    for (int32_t j = begin; j < end;) {
        const int32_t g0 = b->pl.greedy[j], cp = k->g_cp[g0];
        const int kc = dcp__balanced_class_of(cp);
        if (kc == FULL_CLASS) { /* all N ranks (N not a power of two): alone in its microbatch */
            if (end - begin != 1) return 0;
            int64_t start = 0;
            for (int32_t r = 0; r < N; r++)
                if (b->pl.finish[r] > start) start = b->pl.finish[r];
            b->pl.rank[g0] = 0;
            b->pl.done[g0] = dcp__sat_add_i64(dcp__sat_add_i64(start, b->pl.load[g0]), o);
            return 1;
        }
        int32_t count = 1;
        while (j + count < end && k->g_cp[b->pl.greedy[j + count]] == cp) count++;
        /* the free blocks of size cp: the unused blocks above cut to size, and N's pieces of sizes in [cp, 2^last) */
        int32_t num_next = 0;
        const int32_t split = (int32_t)1 << (last == 31 ? 0 : last - kc);
        if (last < 31 && (int64_t)(num_blocks - used) * split > cap) return 0;
        for (int32_t u = used; u < num_blocks; u++) {
            const int32_t r0 = (int32_t)(blocks[u] & last_mask) << last;
            for (int32_t t = 0; t < split; t++) next[num_next++] = r0 + (t << kc);
        }
        for (int bit = kc; bit < last && bit <= MAX_LOG2_RANKS; bit++) {
            if (!((N >> bit) & 1)) continue;
            const int32_t piece = N & ~(int32_t)(((int64_t)2 << bit) - 1), parts = (int32_t)1 << (bit - kc);
            if (num_next + parts > cap) return 0;
            for (int32_t t = 0; t < parts; t++) next[num_next++] = piece + (t << kc);
        }
        if (count > num_next) return 0;
        /* the blocks as integers (above sift_down), the `count` earliest first and in order */
        int64_t least = INT64_MAX, most = 0;
        for (int32_t i = 0; i < num_next; i++) {
            const int64_t start = block_start(&b->pl, level_off, kc, next[i]);
            least = start < least ? start : least;
            most = start > most ? start : most;
        }
        const int index_bits = 32 - __builtin_clz((uint32_t)(N >> kc)); /* indices < N / 2^k */
        const uint64_t index_mask = ((uint64_t)1 << index_bits) - 1;
        int shift = 0;
        while (((uint64_t)(most - least) >> shift) >> (64 - index_bits)) shift++;
        for (int32_t i = 0; i < num_next; i++)
            blocks[i] = ((uint64_t)(block_start(&b->pl, level_off, kc, next[i]) - least) >> shift) << index_bits |
                        (uint64_t)(next[i] >> kc);
        if (num_next < RADIX_MIN) sort_least(blocks, num_next, count);
        else radix_sort(blocks, blocks + cap, num_next, ((uint64_t)(most - least) >> shift) << index_bits | index_mask);
        for (int32_t i = 0; i < count; i++) {
            const int32_t g = b->pl.greedy[j + i], r0 = (int32_t)(blocks[i] & index_mask) << kc;
            b->pl.rank[g] = r0;
            b->pl.done[g] =
                dcp__sat_add_i64(dcp__sat_add_i64(block_start(&b->pl, level_off, kc, r0), b->pl.load[g]), o);
        }
        num_blocks = num_next;
        used = count;
        last = kc;
        last_mask = index_mask;
        j += count;
    }
    return 1;
}

/* The default layout of microbatch m: groups by size descending (pl.index order) from rank 0. */
static int place_default(balanced *b, const saved_plan *k, int32_t m, const int32_t *level_off)
{
    const int32_t N = b->in.num_ranks;
    const int64_t o = b->in.model->microbatch_overhead;
    int64_t rank = 0;
    for (int32_t j = b->pl.first[m]; j < b->pl.first[m + 1]; j++) {
        const int32_t g = b->pl.index[j], cp = k->g_cp[g];
        const int kc = dcp__balanced_class_of(cp);
        if (rank + cp > N || (kc != FULL_CLASS && (rank & (cp - 1)))) return 0;
        int64_t start = 0;
        if (kc == FULL_CLASS) {
            for (int32_t r = 0; r < N; r++)
                if (b->pl.finish[r] > start) start = b->pl.finish[r];
        } else {
            start = block_start(&b->pl, level_off, kc, (int32_t)rank);
        }
        b->pl.rank[g] = (int32_t)rank;
        b->pl.done[g] = dcp__sat_add_i64(dcp__sat_add_i64(start, b->pl.load[g]), o);
        rank += cp;
    }
    return 1;
}

/*
 * The microbatch order of a layout into pl.order: index order, or by level
 * ascending, or by slack descending (stable: index order on equal keys).  0
 * when the layout need not run: a greedy layout of a plan with one
 * microbatch (every rank starts at 0, so its D is the default layout's), or
 * an order equal to one tried before for this plan (the last sorted order is
 * kept in pl.seen).
 */
static int choose_order(balanced_place *pl, const saved_plan *k, int layout)
{
    const int32_t K = k->num_mbs;
    int32_t *order = pl->order;
    for (int32_t m = 0; m < K; m++) order[m] = m;
    if (layout == LAYOUT_DEFAULT) return 1;
    if (pl->busy_mbs <= 1) return 0;
    if (layout == LAYOUT_INDEX) return 1;
    if (layout == LAYOUT_LEVEL_ASC) sort_by_key(order, K, pl->level, 0, pl->tmp);
    else sort_by_key(order, K, pl->slack, 1, pl->tmp);
    int same_index = 1, same_seen = pl->seen_valid;
    for (int32_t i = 0; i < K; i++) {
        same_index = same_index && order[i] == i;
        same_seen = same_seen && order[i] == pl->seen[i];
    }
    if (same_index || same_seen) return 0;
    memcpy(pl->seen, order, (size_t)K * sizeof *order);
    pl->seen_valid = 1;
    return 1;
}

/*
 * D of kept plan k (prepared) under a layout whose order is in pl.order; -1
 * when its groups do not fit.  A layout that cannot beat `limit` (reach it,
 * when `tie_wins`) stops early and returns -1: after each microbatch every
 * rank still pays its share of the remaining GPU time and an overhead per
 * remaining microbatch, so D >= ceil((sum of finish times + remaining GPU
 * time) / N) + remaining microbatches x overhead.
 */
static int64_t layout_makespan(balanced *b, const saved_plan *k, int layout, int64_t limit, int tie_wins)
{
    const int32_t N = b->in.num_ranks, K = k->num_mbs;
    const int64_t o = b->in.model->microbatch_overhead;
    int32_t level_off[MAX_LOG2_RANKS + 2];
    level_off[1] = 0;
    for (int kc = 1; kc <= MAX_LOG2_RANKS; kc++) level_off[kc + 1] = level_off[kc] + (N >> kc);
    for (int32_t r = 0; r < N; r++) b->pl.finish[r] = 0;
    int64_t makespan = 0;
    int32_t left = b->pl.busy_mbs;   /* microbatches with groups not yet laid out */
    dcp__i128 work_left = b->pl.work; /* their GPU time */
    for (int32_t i = 0; i < K; i++) {
        const int32_t m = b->pl.order[i], begin = b->pl.first[m], end = b->pl.first[m + 1];
        if (begin == end) continue;
        /* block maxima of the previous microbatch's finish times, up to the largest power-of-two size here */
        int top = dcp__balanced_class_of(k->g_cp[b->pl.index[begin]]);
        if (top == FULL_CLASS) top = 0;
        for (int kc = 1; kc <= top; kc++) {
            const int64_t *src = kc == 1 ? b->pl.finish : b->pl.max + level_off[kc - 1];
            int64_t *dst = b->pl.max + level_off[kc];
            for (int32_t x = 0; x < (N >> kc); x++) dst[x] = src[2 * x] > src[2 * x + 1] ? src[2 * x] : src[2 * x + 1];
        }
        int ok = layout == LAYOUT_DEFAULT ? place_default(b, k, m, level_off) : place_greedy(b, k, m, level_off);
        if (!ok) return -1;
        dcp__i128 finish_sum = 0;
        for (int32_t j = begin; j < end; j++) {
            const int32_t g = b->pl.index[j], cp = k->g_cp[g], r0 = b->pl.rank[g];
            const int64_t done = b->pl.done[g];
            for (int32_t r = r0; r < r0 + cp; r++) b->pl.finish[r] = done;
            if (done > makespan) makespan = done;
            finish_sum += (dcp__i128)cp * done;
            work_left -= (dcp__i128)cp * b->pl.load[g];
        }
        if (--left > 0 && limit < INT64_MAX) {
            /* the sum of the finish times is the microbatch's: every rank is in one of its groups */
            const int64_t bound = dcp__i128_saturate(dcp__balanced_ceil_div128(finish_sum + work_left, N) +
                                                         (dcp__i128)left * o);
            if (bound > limit || (bound == limit && !tie_wins)) return -1;
        }
    }
    return makespan;
}

/* Whether layout `layout` of kept plan j goes before the best so far on equal D (see above). */
static int wins_tie(const balanced *b, int j, int layout, int best, int best_layout)
{
    const int64_t x = b->kept.plan[j].makespan, y = b->kept.plan[best].makespan;
    return x < y || (x == y && (j < best || (j == best && layout < best_layout)));
}

/*
 * Choose the kept plan and its layout with the least D (see above), and
 * leave that layout in pl.order (the microbatches in emit order) and pl.rank
 * (each group's first rank).  Returns the kept plan's index, or -1 when the
 * barrier model's plan and layout are the choice without a layout to run (all
 * kept plans in one microbatch) or no layout fits.
 * Each plan's layouts run greedy ones first, the order that most often won
 * over the benchmark matrix first, so that the others stop early; the result
 * does not depend on that order.
 */
int dcp__balanced_place(balanced *b)
{
    static const int8_t runs[NUM_LAYOUTS] = {LAYOUT_SLACK_DESC, LAYOUT_LEVEL_ASC, LAYOUT_INDEX, LAYOUT_DEFAULT};
    /*
     * Every kept plan in one microbatch: every rank starts at 0, so each
     * plan's D is its barrier makespan whatever the layout, and the barrier
     * model's choice stands (emitted as it emits it).
     */
    int single = 1;
    for (int j = 0; j < b->kept.num && single; j++) {
        const saved_plan *k = &b->kept.plan[j];
        for (int32_t g = 0, mb = -1; g < k->num_groups && single; g++) {
            if (k->g_mb[g] < 0) continue;
            if (mb < 0) mb = k->g_mb[g];
            single = k->g_mb[g] == mb;
        }
    }
    if (single) return -1;
    int best = -1, best_layout = 0;
    int64_t best_makespan = 0;
    for (int j = 0; j < b->kept.num; j++) {
        const saved_plan *k = &b->kept.plan[j];
        prepare(b, k);
        b->pl.seen_valid = 0;
        for (int x = 0; x < NUM_LAYOUTS; x++) {
            const int layout = runs[x];
            if (!choose_order(&b->pl, k, layout)) continue;
            /* least D, then barrier makespan, then kept index, then layout (default first) */
            const int tie = best >= 0 && wins_tie(b, j, layout, best, best_layout);
            const int64_t d = layout_makespan(b, k, layout, best < 0 ? INT64_MAX : best_makespan, tie);
            if (d >= 0 && (best < 0 || d < best_makespan || (d == best_makespan && tie))) {
                best = j;
                best_layout = layout;
                best_makespan = d;
                /* the next layouts overwrite pl.rank and pl.order: keep this one's */
                memcpy(b->pl.best_rank, b->pl.rank, (size_t)k->num_groups * sizeof *b->pl.rank);
                memcpy(b->pl.best_order, b->pl.order, (size_t)k->num_mbs * sizeof *b->pl.order);
            }
        }
    }
    if (best >= 0) {
        memcpy(b->pl.rank, b->pl.best_rank, (size_t)b->kept.plan[best].num_groups * sizeof *b->pl.rank);
        memcpy(b->pl.order, b->pl.best_order, (size_t)b->kept.plan[best].num_mbs * sizeof *b->pl.order);
    }
    return best;
}
