/*
 * balanced_pool.c - the pooled packing, for few sequences per rank on a
 * power of two of ranks: every sequence packed at once under one level into
 * the K * N ranks of K microbatches, the groups then dealt into the
 * microbatches.  Its plans are candidates beside the passes'; on many ranks
 * one near its bound is the plan (balanced.c).
 *
 * With many ranks the construction passes cost too much (a pass walks
 * structures the size of N, and the repacking that follows it is quadratic in
 * a microbatch's sequences), while such a batch is one or a few microbatches
 * of like levels.  A trial packs the sequences, longest first, each into the
 * group of its narrowest size under the level (or of the next few sizes)
 * whose room it fills best, else into a new group of its narrowest size, and
 * counts the ranks its groups take.  The least level at which they fit
 * K * N ranks is found by false position on that count (pool_search: three
 * or four trials, to within 1/512).  Groups are powers of two, so on N = 2^m
 * ranks any such set of groups deals into K microbatches (largest first,
 * first fit).  Free ranks are filled (pool_fill: first the most loaded group
 * split or widened while that lowers it, then the steps that leave the least
 * load), the count aligned to the VPP group, the groups regrouped by load;
 * the local search (balanced_descent.c) follows.
 *
 * A trial group's room is the load it may still take under the level (-1
 * once it cannot take the shortest sequence: token room or the sequence cap
 * used up); trial groups are indexed by room in POOL_BUCKETS buckets per
 * class (a two-level bitmap of the non-empty ones), so the best fit is a
 * bitmap scan away, and only token room can disappoint (a lookup then looks
 * at a few more groups).
 *
 * Costs of a position at its minimal class and the POOL_WINDOW - 1 above are
 * cached on first use (-1: not yet known).
 *
 * State: reads in; writes pk (its trial groups in work.heap and
 * work.park, its kept trial in pass.order, pass.class_list and
 * work.alive_next) and, committing a trial, pass.
 */
#include "balanced_internal.h"

/* Classes a sequence may join a group in: its narrowest under the level and the next POOL_WIDER - 1. */
enum { POOL_WIDER = 4 };

/* Groups a best-fit lookup looks at before giving up (token room can disappoint). */
enum { POOL_LOOK = 64, POOL_BUCKET_LOOK = 8 };

/*
 * A search's trials up from its guess and false-position steps, at most: two
 * or three suffice when the ranks needed fall smoothly with the level; far
 * more is the sign of a batch one level fits badly (it falls back to the
 * passes then).
 */
enum { POOL_GROW = 10, POOL_STEPS = 8 };

static inline int pool_min_class(const balanced *b, int32_t p) { return b->pk.k0[p]; }

/* The next class after k that is a size on this many ranks, or NUM_CLASSES. */
static inline int pool_next_class(const balanced *b, int k) { return b->pk.next_class[k]; }

/* pool_cost() when the window does not have it yet. */
static int64_t pool_cost_slow(balanced *b, int32_t p, int k)
{
    const int k0 = pool_min_class(b, p);
    int64_t c = INT64_MAX;
    if (k >= k0 && dcp__balanced_class_valid(b, k)) {
        const int32_t size = dcp__balanced_class_size(b, k);
        if (b->in.len[p] <= (int64_t)size * b->in.max_seqlen) c = dcp__cost(b->in.model, b->in.len[p], size);
    }
    if (k >= k0 && k - k0 < POOL_WINDOW) b->pk.cost[(size_t)p * POOL_WINDOW + (k - k0)] = c;
    return c;
}

/* Per-rank cost of position p at class k; INT64_MAX where p cannot run at that size. */
static inline int64_t pool_cost(balanced *b, int32_t p, int k)
{
    const unsigned j = (unsigned)(k - pool_min_class(b, p));
    if (j < POOL_WINDOW) {
        const int64_t c = b->pk.cost[(size_t)p * POOL_WINDOW + j];
        if (c >= 0) return c;
    }
    return pool_cost_slow(b, p, k);
}

/*
 * The narrowest class at which p costs at most `level` (its cost in *cost),
 * or NUM_CLASSES.  Every class is looked at: past its cheapest size a cost
 * need not rise steadily (the exposed-KV coefficient changes at 16 ranks).
 */
static int pool_class_under(balanced *b, int32_t p, int64_t level, int64_t *cost)
{
    for (int k = pool_min_class(b, p); k < NUM_CLASSES; k = pool_next_class(b, k)) {
        int64_t c = pool_cost(b, p, k);
        if (c <= level) {
            *cost = c;
            return k;
        }
    }
    return NUM_CLASSES;
}

/* ---- the room index ---- */

static inline int32_t pool_bucket(int64_t room, int shift)
{
    int64_t v = room >> shift;
    return v >= POOL_BUCKETS ? POOL_BUCKETS - 1 : (int32_t)v;
}

/* Take trial group g (class k, linked while its load was as now) out of its bucket. */
static void pool_unlink(balanced_pool *pk, int k, int32_t g)
{
    pool_group *x = &pk->grp[g];
    if (x->bprev == POOL_UNLINKED) return;
    const int32_t bk = pool_bucket(pk->level - x->load, pk->shift);
    int32_t *head = pk->bhead + (size_t)k * POOL_BUCKETS;
    if (x->bprev >= 0) pk->grp[x->bprev].bnext = x->bnext;
    else head[bk] = x->bnext;
    if (x->bnext >= 0) pk->grp[x->bnext].bprev = x->bprev;
    if (head[bk] < 0) {
        uint64_t *bits = pk->bits + (size_t)k * (POOL_BUCKETS / 64);
        bits[bk >> 6] &= ~((uint64_t)1 << (bk & 63));
        if (!bits[bk >> 6]) pk->summary[k] &= ~((uint64_t)1 << (bk >> 6));
    }
    x->bprev = POOL_UNLINKED;
}

/* Put trial group g (class k) into the bucket of its room, unless it can take nothing more. */
static void pool_link(balanced *b, int k, int32_t g)
{
    pool_group *x = &b->pk.grp[g];
    x->bprev = POOL_UNLINKED;
    if (b->in.seq_cap > 0 && x->count >= b->in.seq_cap) return;
    if ((int64_t)x->size * b->in.max_seqlen - x->tokens < b->pk.shortest) return; /* not even the shortest sequence fits */
    const int64_t room = b->pk.level - x->load;
    if (room < 0) return;
    const int32_t bk = pool_bucket(room, b->pk.shift);
    int32_t *head = b->pk.bhead + (size_t)k * POOL_BUCKETS;
    uint64_t *bits = b->pk.bits + (size_t)k * (POOL_BUCKETS / 64);
    if (!(bits[bk >> 6] & ((uint64_t)1 << (bk & 63)))) {
        head[bk] = -1; /* heads are valid only under a set bit: cleared buckets need no reset */
        bits[bk >> 6] |= (uint64_t)1 << (bk & 63);
        b->pk.summary[k] |= (uint64_t)1 << (bk >> 6);
    }
    x->bprev = -1;
    x->bnext = head[bk];
    if (head[bk] >= 0) b->pk.grp[head[bk]].bprev = g;
    head[bk] = g;
}

/* The first non-empty bucket of class k at or after bk, or -1. */
static int32_t pool_next_bucket(const balanced_pool *pk, int k, int32_t bk)
{
    if (bk >= POOL_BUCKETS) return -1;
    const uint64_t *bits = pk->bits + (size_t)k * (POOL_BUCKETS / 64);
    int32_t w = bk >> 6;
    uint64_t word = bits[w] & (~(uint64_t)0 << (bk & 63));
    if (word) return (w << 6) + __builtin_ctzll(word);
    uint64_t rest = w + 1 < POOL_BUCKETS / 64 ? pk->summary[k] & (~(uint64_t)0 << (w + 1)) : 0;
    if (!rest) return -1;
    w = __builtin_ctzll(rest);
    return (w << 6) + __builtin_ctzll(bits[w]);
}

/* A trial group of class k that takes s tokens at cost c: the least room at least c (to within a bucket), or -1. */
static int32_t pool_find(balanced *b, int k, int64_t c, int32_t s)
{
    if (!b->pk.summary[k]) return -1;
    const int32_t *head = b->pk.bhead + (size_t)k * POOL_BUCKETS;
    const int64_t most = b->pk.level - c; /* the load a group may have to take it */
    int scanned = 0;
    for (int32_t bk = pool_next_bucket(&b->pk, k, pool_bucket(c, b->pk.shift)); bk >= 0 && scanned < POOL_LOOK;
         bk = pool_next_bucket(&b->pk, k, bk + 1)) {
        /*
         * In c's own bucket some rooms fall short of c: look at a few only
         * (the bucket can be long); past it every room is enough, and only
         * token room can disappoint.
         */
        int in_bucket = 0;
        for (int32_t g = head[bk]; g >= 0 && scanned < POOL_LOOK && in_bucket < POOL_BUCKET_LOOK;
             g = b->pk.grp[g].bnext, scanned++, in_bucket++) {
            const pool_group *x = &b->pk.grp[g];
            if (x->load > most) continue;
            if (x->tokens + s > (int64_t)x->size * b->in.max_seqlen) continue;
            return g;
        }
    }
    return -1;
}

/*
 * One trial: pack every position (longest first) under `level` on
 * `capacity` ranks.  Returns the ranks used; once they pass `stop_at` the
 * trial ends there and returns them so far (the trial groups are then
 * partial), and capacity + 1 when some position fits no size under the
 * level.  The groups are left in pk.grp (*num_groups), each position's group
 * in pk.of.
 */
static int64_t pool_trial(balanced *b, int64_t level, int64_t capacity, int64_t stop_at, int32_t *num_groups)
{
    int32_t groups = 0;
    int64_t ranks = 0;
    b->pk.level = level;
    b->pk.shift = 0;
    while ((level >> b->pk.shift) >= POOL_BUCKETS) b->pk.shift++;
    for (int k = 0; k < NUM_CLASSES; k++) {
        if (b->pk.summary[k]) memset(b->pk.bits + (size_t)k * (POOL_BUCKETS / 64), 0, (POOL_BUCKETS / 64) * sizeof(uint64_t));
        b->pk.summary[k] = 0;
    }
    for (int32_t p = 0; p < b->in.n; p++) {
        const int32_t s = b->in.len[p];
        int64_t c0 = 0;
        const int k = pool_class_under(b, p, level, &c0);
        if (k == NUM_CLASSES) return capacity + 1;
        int32_t best = -1;
        int best_class = k;
        int64_t best_load = -1, best_cost = c0;
        for (int k2 = k, tried = 0; k2 < NUM_CLASSES && tried < POOL_WIDER; k2 = pool_next_class(b, k2), tried++) {
            if (!b->pk.summary[k2]) continue;
            const int64_t c = k2 == k ? c0 : pool_cost(b, p, k2);
            if (c > level) continue;
            const int32_t g = pool_find(b, k2, c, s);
            if (g < 0) continue;
            const int64_t after = dcp__sat_add_i64(b->pk.grp[g].load, c);
            if (after > best_load) { /* across classes: the fullest it leaves */
                best = g;
                best_class = k2;
                best_load = after;
                best_cost = c;
            }
        }
        if (best < 0) {
            const int32_t size = dcp__balanced_class_size(b, k);
            ranks += size;
            if (ranks > stop_at) return ranks;
            best = groups++;
            pool_group *x = &b->pk.grp[best];
            x->size = size;
            x->load = 0;
            x->tokens = 0;
            x->count = 0;
            x->bprev = POOL_UNLINKED;
            best_class = k;
            best_cost = c0;
        } else {
            pool_unlink(&b->pk, best_class, best);
        }
        pool_group *x = &b->pk.grp[best];
        b->pk.of[p] = best;
        x->load = dcp__sat_add_i64(x->load, best_cost);
        x->tokens += s;
        x->count++;
        pool_link(b, best_class, best);
    }
    *num_groups = groups;
    return ranks;
}

/* Keep the trial's groups (each position's group and each group's size): the last trial is not always the one used. */
static void pool_keep(balanced *b, int32_t groups)
{
    memcpy(b->pk.keep_of, b->pk.of, (size_t)b->in.n * sizeof *b->pk.of);
    for (int32_t g = 0; g < groups; g++) b->pk.keep_size[g] = b->pk.grp[g].size;
    b->pk.keep_groups = groups;
}

/*
 * The least level (to within 1/512) at which every position packs on
 * `capacity` ranks; the groups of its trial are left in pk.keep_of and
 * pk.keep_size.  Returns the level, or -1 when none fits.
 */
static int64_t pool_search(balanced *b, int64_t capacity, int32_t *num_groups)
{
    /*
     * Where to start: no level below the dearest sequence's cheapest cost
     * fits, nor one below the GPU time at minimal sizes spread over the ranks
     * (the least GPU time each sequence can take, when its cost grows no
     * faster than its size shrinks, as with the default model).
     */
    int64_t lo = b->pk.floor;
    const int64_t work_floor = dcp__balanced_ceil_div128(b->in.min_work, capacity);
    if (work_floor > lo) lo = work_floor;
    /*
     * Trials run to the end and count the ranks they need; about as the level
     * rises, the ranks needed fall, so the level where they meet the capacity
     * is found by false position (Illinois) between a level that does not fit
     * and one that does, to within 1/512.  The first trial is at the floor;
     * the second at the floor scaled by the ranks it needed over the capacity
     * (then up in steps of 1/64 until one fits).  The groups of the least
     * level that fitted are kept (pk.keep_of, pk.keep_size), so no trial is
     * repeated.
     */
    int32_t groups = 0;
    /*
     * A floor that needs more than 17/16 of the ranks ends the search: the
     * level must rise by about as much, past where the plan would be kept
     * as it is (balanced.c).  So the floor's trial stops there.
     */
    const int64_t give_up = (int64_t)((dcp__i128)capacity * 17 / 16);
    int64_t need_lo = pool_trial(b, lo, capacity, give_up, &groups);
    if (need_lo <= capacity) {
        pool_keep(b, groups);
        *num_groups = groups;
        return lo;
    }
    if (need_lo > give_up) return -1;
    int64_t hi = dcp__i128_saturate((dcp__i128)lo * need_lo / capacity + 1), need_hi;
    for (int grow = 0;; grow++) {
        need_hi = pool_trial(b, hi, capacity, INT64_MAX, &groups);
        if (need_hi <= capacity) break;
        /*
         * The ranks needed should fall as the level rises: a step up that
         * needs more is the sign of a batch one level fits badly (token
         * room, not load, binds), and growing on would only run trials.
         */
        if (grow >= POOL_GROW || hi >= INT64_MAX / 2 || need_hi > need_lo) return -1;
        lo = hi;
        need_lo = need_hi;
        hi += (hi >> (grow < 6 ? 6 - grow : 0)) + 1; /* steps of 1/64, 1/32, ... then doubling */
    }
    pool_keep(b, groups);
    int64_t best = hi;
    /* false position; a side kept twice running has its excess halved (Illinois) */
    dcp__i128 excess_lo = need_lo - capacity, slack_hi = capacity - need_hi;
    int side = 0;
    for (int step = 0; step < POOL_STEPS && hi - lo > (hi >> 9); step++) {
        dcp__i128 span = hi - lo;
        int64_t t = lo + (int64_t)(span * excess_lo / (excess_lo + slack_hi + 1));
        /* keep clear of the ends, so the bracket always shrinks */
        const int64_t margin = (hi >> 10) + 1;
        if (t < lo + margin) t = lo + margin;
        if (t > hi - margin) t = hi - margin;
        if (t <= lo || t >= hi) break;
        const int64_t need = pool_trial(b, t, capacity, INT64_MAX, &groups);
        if (need <= capacity) {
            pool_keep(b, groups);
            best = hi = t;
            slack_hi = capacity - need;
            if (side == 1) excess_lo /= 2;
            side = 1;
        } else {
            lo = t;
            excess_lo = need - capacity;
            if (side == -1) slack_hi /= 2;
            side = -1;
        }
    }
    *num_groups = b->pk.keep_groups;
    return best;
}

/* What a fill step does to group g: its load after (a split: the heavier half, estimated as half), in *key; 0 when it has none. */
static int pool_step(balanced *b, int32_t g, int32_t free_ranks, int64_t *key)
{
    const int32_t c = b->pass.g_cp[g];
    if (b->pass.g_count[g] >= 2) {
        if (c > free_ranks) return 0;
        *key = b->pass.g_load[g] / 2 + (b->pass.g_load[g] & 1);
        return 1;
    }
    const int32_t c2 = dcp__balanced_next_size(c, b->in.num_ranks);
    if (c2 == 0 || c2 - c > free_ranks) return 0;
    *key = pool_cost(b, b->pass.g_head[g], dcp__balanced_class_of(c2));
    return 1;
}

/* Apply g's fill step (split it, or widen its only sequence); returns the new group of a split, else -1. */
static int32_t pool_apply(balanced *b, int32_t g)
{
    const int32_t m = b->pass.g_mb[g], c = b->pass.g_cp[g];
    if (b->pass.g_count[g] >= 2) return dcp__balanced_group_split(b, g);
    const int32_t c2 = dcp__balanced_next_size(c, b->in.num_ranks);
    const int32_t p = b->pass.g_head[g];
    b->pass.cp[p] = c2;
    b->pass.cost[p] = pool_cost(b, p, dcp__balanced_class_of(c2));
    b->pass.g_cp[g] = c2;
    b->pass.g_load[g] = b->pass.cost[p];
    b->pass.mb_free[m] -= c2 - c;
    return -1;
}

/*
 * Fill every microbatch's free ranks (every rank must hold something).
 * First the most loaded group is split or widened while that lowers it (the
 * level falls); then the ranks left go, step by step, to the split or
 * widening that leaves the least load (a short sequence widened can cost
 * more: the ring's latency), so the level rises as little as it must.
 * Returns 0 when some gap cannot be filled.
 */
static int pool_fill(balanced *b)
{
    dcp__balanced_index_groups(b);
    heap_entry *h = b->work.heap;
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        if (b->pass.mb_free[m] == 0) continue;
        /* the top, while its step lowers it: a max-heap by load */
        int32_t size = 0;
        for (int32_t j = b->pass.mb_first[m]; j < b->pass.mb_first[m + 1]; j++) {
            const int32_t g = b->pass.mb_groups[j];
            dcp__balanced_heap_push(h, &size, g, -b->pass.g_load[g], 0);
        }
        while (b->pass.mb_free[m] > 0 && size > 0) {
            const int32_t g = h[0].id;
            int64_t after = 0;
            if (!pool_step(b, g, b->pass.mb_free[m], &after) || after >= b->pass.g_load[g]) break;
            dcp__balanced_heap_pop(h, &size);
            const int32_t g2 = pool_apply(b, g);
            dcp__balanced_heap_push(h, &size, g, -b->pass.g_load[g], 0);
            if (g2 >= 0) dcp__balanced_heap_push(h, &size, g2, -b->pass.g_load[g2], 0);
        }
        if (b->pass.mb_free[m] == 0) continue;
        /* the rest: a min-heap by the load each group's step leaves (groups of the microbatch listed again: splits added some) */
        size = 0;
        for (int32_t g = 0; g < b->pass.num_groups; g++) {
            int64_t key = 0;
            if (b->pass.g_count[g] > 0 && b->pass.g_mb[g] == m && pool_step(b, g, b->pass.mb_free[m], &key))
                dcp__balanced_heap_push(h, &size, g, key, 0);
        }
        while (b->pass.mb_free[m] > 0) {
            if (size == 0) return 0;
            const int32_t g = dcp__balanced_heap_pop(h, &size);
            int64_t key = 0;
            if (!pool_step(b, g, b->pass.mb_free[m], &key)) continue; /* free ranks only shrink: it never fits again */
            const int32_t g2 = pool_apply(b, g);
            if (pool_step(b, g, b->pass.mb_free[m], &key)) dcp__balanced_heap_push(h, &size, g, key, 0);
            if (g2 >= 0 && pool_step(b, g2, b->pass.mb_free[m], &key)) dcp__balanced_heap_push(h, &size, g2, key, 0);
        }
    }
    return 1;
}

/*
 * Before the first pooled pass of a call: the cost cache and the bucket
 * bitmaps cleared.  A trial clears only the bitmaps its summary marks, and
 * the scratch holds whatever the call before left there: a stale bit would
 * hand out a stale bucket head, so the plan would depend on that call.
 */
void dcp__balanced_pool_prepare(balanced *b)
{
    memset(b->pk.cost, 0xff, (size_t)b->in.n * POOL_WINDOW * sizeof *b->pk.cost);
    memset(b->pk.bits, 0, (size_t)NUM_CLASSES * (POOL_BUCKETS / 64) * sizeof *b->pk.bits);
    memset(b->pk.summary, 0, sizeof b->pk.summary);
    for (int32_t p = 0; p < b->in.n; p++) b->pk.k0[p] = (int8_t)dcp__balanced_class_of(b->in.min_cp[p]);
    for (int k = 0; k < NUM_CLASSES; k++) {
        int k2 = k + 1;
        while (k2 < NUM_CLASSES && !dcp__balanced_class_valid(b, k2)) k2++;
        b->pk.next_class[k] = (int8_t)k2;
    }
    b->pk.shortest = b->in.n > 0 ? b->in.len[b->in.n - 1] : 1;
    b->pk.ready = 1;
    /* the dearest sequence's cheapest cost, over every size it fits: no level below it fits */
    int64_t floor = 0;
    for (int32_t p = 0; p < b->in.n; p++) {
        int64_t cheapest = INT64_MAX;
        if (b->in.min_cost[p] <= floor) continue; /* its cheapest cost is at most this: it cannot raise the floor */
        for (int k = pool_min_class(b, p); k < NUM_CLASSES; k = pool_next_class(b, k)) {
            const int64_t c = pool_cost(b, p, k);
            if (c < cheapest) cheapest = c;
        }
        if (cheapest != INT64_MAX && cheapest > floor) floor = cheapest;
    }
    b->pk.floor = floor;
}

/* Position p's per-rank cost at CP size cp, through the cache. */
int64_t dcp__balanced_pool_cost(balanced *b, int32_t p, int32_t cp) { return pool_cost(b, p, dcp__balanced_class_of(cp)); }

/*
 * The pooled pass for `mbs` microbatches (N a power of two): the makespan of
 * its plan after the common end, or -1 when the sequences do not pack on
 * mbs * N ranks, or not nearly at the floor (pool_search).
 */
int64_t dcp__balanced_pool_pass(balanced *b, int32_t mbs)
{
    const int32_t N = b->in.num_ranks;
    b->pass.num_groups = 0;
    b->pass.num_free_groups = 0;
    b->pass.num_mbs = 0;
    int32_t groups = 0;
    if (pool_search(b, (int64_t)mbs * N, &groups) < 0) return -1;
    /* groups by size descending (ties: load descending, then index), first fit into the microbatches */
    int32_t *order = b->work.sort_a, *by = b->work.sort_b;
    int32_t count[NUM_CLASSES + 1] = {0};
    for (int32_t g = 0; g < groups; g++) count[FULL_CLASS - dcp__balanced_class_of(b->pk.keep_size[g]) + 1]++;
    for (int k = 0; k < NUM_CLASSES; k++) count[k + 1] += count[k];
    for (int32_t g = 0; g < groups; g++) by[count[FULL_CLASS - dcp__balanced_class_of(b->pk.keep_size[g])]++] = g;
    memcpy(order, by, (size_t)groups * sizeof *order);
    for (int32_t m = 0; m < mbs; m++) dcp__balanced_new_mb(b, 0);
    int32_t *real = b->work.cursor, next = 0;
    for (int32_t j = 0; j < groups; j++) {
        const int32_t g = order[j], size = b->pk.keep_size[g];
        while (next < mbs && b->pass.mb_free[next] < size) next++;
        if (next == mbs) return -1; /* cannot happen on a power of two of ranks */
        real[g] = dcp__balanced_new_group(b, next, size);
    }
    for (int32_t p = 0; p < b->in.n; p++) {
        const int32_t g = real[b->pk.keep_of[p]];
        b->pass.cp[p] = b->pass.g_cp[g];
        b->pass.cost[p] = pool_cost(b, p, dcp__balanced_class_of(b->pass.g_cp[g]));
        dcp__balanced_group_add(b, g, p, b->pass.cost[p]);
    }
    if (!pool_fill(b)) return -1;
    return dcp__balanced_finish_pool(b);
}
