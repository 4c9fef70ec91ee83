/*
 * balanced_repack.c - repacking and merging, with few sequences per rank: a
 * microbatch's sequences (or two microbatches' together) are repacked at the
 * least level where a best-fit packing fits N ranks, then the free ranks
 * filled; a microbatch is replaced when that lowers its level, and two are
 * merged while that lowers the makespan.
 *
 * State: reads in and pass; writes rp, table (its rows, when first asked
 * for), shortcut's counts, pass (a committed repacking or merge) and
 * work.cursor.
 */
#include "balanced_internal.h"
#include "../../../core/hash.h"

/*
 * Position p's per-rank cost at every class into row[] (INT64_MAX where it
 * does not fit); returns the cheapest, and in *least the least GPU time it can
 * take (its cost times its size, at the best size; -1 when it fits nowhere).
 */
static int64_t class_costs(const balanced *b, int32_t p, int64_t *row, dcp__i128 *least)
{
    int64_t cheapest = INT64_MAX;
    *least = -1;
    for (int k = 0; k < NUM_CLASSES; k++) {
        int32_t size = dcp__balanced_class_size(b, k);
        row[k] = INT64_MAX;
        if (!dcp__balanced_class_valid(b, k) || size < b->in.min_cp[p] || b->in.len[p] > (int64_t)size * b->in.max_seqlen)
            continue;
        row[k] = dcp__cost(b->in.model, b->in.len[p], size);
        if (row[k] < cheapest) cheapest = row[k];
        if (row[k] != INT64_MAX) {
            const dcp__i128 w = (dcp__i128)row[k] * size;
            if (*least < 0 || w < *least) *least = w;
        }
    }
    return cheapest;
}

/*
 * Position p's row of the call's cost table (every class, INT64_MAX where it
 * does not fit), computed on first use, its cheapest entry and the least GPU
 * time it can take (class_costs).  Only while b->table.ready (few sequences
 * per rank), for positions below table.n.
 */
const int64_t *dcp__balanced_cost_row(balanced *b, int32_t p, int64_t *cheapest, dcp__i128 *least)
{
    int64_t *row = b->table.cost + (size_t)p * NUM_CLASSES;
    if (b->table.cheapest[p] < 0) b->table.cheapest[p] = class_costs(b, p, row, &b->table.least[p]);
    *cheapest = b->table.cheapest[p];
    *least = b->table.least[p];
    return row;
}

/*
 * Cost of each of the `count` sequences in rp.items at every class it fits
 * (INT64_MAX elsewhere); returns the least level any arrangement can reach
 * (the largest over sequences of their cheapest per-rank cost).
 */
static int64_t repack_costs(balanced *b, int32_t count, dcp__i128 *least_work, int64_t *tokens)
{
    dcp__i128 work = 0;
    int64_t sum = 0;
    int64_t floor_level = 0;
    for (int32_t i = 0; i < count; i++) {
        int32_t p = b->rp.items[i];
        int64_t cheapest;
        dcp__i128 least; /* the least GPU time the sequence can take */
        if (b->table.ready && p < b->table.n) {
            b->rp.row[i] = dcp__balanced_cost_row(b, p, &cheapest, &least);
        } else {
            int64_t *own = b->rp.cost + (size_t)i * NUM_CLASSES;
            cheapest = class_costs(b, p, own, &least);
            b->rp.row[i] = own;
        }
        if (cheapest > floor_level) floor_level = cheapest;
        work += least;
        sum += b->in.len[p];
    }
    *least_work = work;
    *tokens = sum;
    return floor_level;
}

/* Append list item i (cost `cost` at the group's size) to trial group g. */
static void rp_append(balanced *b, int32_t g, int32_t i, int64_t cost)
{
    b->rp.of[i] = g;
    b->rp.next[i] = -1;
    if (b->rp.tail[g] < 0) b->rp.head[g] = i;
    else b->rp.next[b->rp.tail[g]] = i;
    b->rp.tail[g] = i;
    b->rp.load[g] = dcp__sat_add_i64(b->rp.load[g], cost);
    b->rp.tokens[g] += b->in.len[b->rp.items[i]];
    b->rp.count[g]++;
}

/* Split trial group g's sequences (longest first, each to the lighter side) with a new group; returns it. */
static int32_t rp_split(balanced *b, int32_t g, int32_t *groups)
{
    int32_t g2 = (*groups)++, i = b->rp.head[g];
    int k = dcp__balanced_class_of(b->rp.size[g]);
    b->rp.size[g2] = b->rp.size[g];
    b->rp.load[g] = b->rp.load[g2] = 0;
    b->rp.tokens[g] = b->rp.tokens[g2] = 0;
    b->rp.count[g] = b->rp.count[g2] = 0;
    b->rp.head[g] = b->rp.tail[g] = b->rp.head[g2] = b->rp.tail[g2] = -1;
    while (i >= 0) {
        int32_t next = b->rp.next[i];
        int to_new = b->rp.load[g2] < b->rp.load[g] || (b->rp.load[g2] == b->rp.load[g] && b->rp.count[g2] < b->rp.count[g]);
        rp_append(b, to_new ? g2 : g, i, b->rp.row[i][k]);
        i = next;
    }
    return g2;
}

/* Widen trial group g (one sequence) to size2. */
static void rp_widen(balanced_repack *rp, int32_t g, int32_t size2)
{
    rp->load[g] = rp->row[rp->head[g]][dcp__balanced_class_of(size2)];
    rp->size[g] = size2;
}

/*
 * The first x in [0, len) with load[seg[x]] <= v (len when none), where seg is
 * ordered by load descending: an exponential search from `hint` (the answer
 * is usually near the last one), then halving.  The same answer as halving
 * the whole range, in fewer reads.
 */
static inline int32_t first_at_most(const int64_t *load, const int32_t *seg, int32_t len, int64_t v, int32_t hint)
{
    if (len <= 0) return 0;
    if (hint < 0) hint = 0;
    if (hint >= len) hint = len - 1;
    int32_t below, at; /* load[seg[below]] > v (or below = -1), load[seg[at]] <= v (or at = len) */
    if (load[seg[hint]] <= v) {
        at = hint;
        int32_t step = 1;
        while (at - step >= 0 && load[seg[at - step]] <= v) {
            at -= step;
            step *= 2;
        }
        below = at - step >= 0 ? at - step : -1;
    } else {
        below = hint;
        int32_t step = 1;
        while (below + step < len && load[seg[below + step]] > v) {
            below += step;
            step *= 2;
        }
        at = below + step < len ? below + step : len;
    }
    while (at - below > 1) {
        int32_t mid = below + (at - below) / 2;
        if (load[seg[mid]] <= v) at = mid;
        else below = mid;
    }
    return at;
}

/*
 * Best-fit-decreasing packing of the microbatch's sequences (longest first)
 * under `level`: each goes into the fullest trial group, at least as wide as
 * its narrowest size under the level, that stays under the level, else opens
 * a group of that narrowest size.  Returns the ranks used (num_ranks + 1 when
 * more than all); the groups are left in rp_* and *num_groups.
 *
 * When it fits, also *fits_from: the least level down to which a trial would
 * take every step alike, so make the same packing.  A step compares the level
 * with the sequence's costs and with loads plus a cost: a lower level keeps
 * each comparison that failed, and each that held as long as it stays at or
 * above the cost of the narrowest size taken and the load the chosen group
 * ends at (a lower level can only drop other candidates, which lost anyway).
 * A look that ran out of its LOOK candidates could find another group at a
 * lower level (its window starts later): it pins *fits_from to the level.
 */
static int32_t repack_trial(balanced *b, int32_t count, int64_t level, int32_t *num_groups, int64_t *fits_from)
{
    enum { WIDER = 4, LOOK = 16 };
    const int32_t N = b->in.num_ranks, limit = b->rp.limit;
    int32_t groups = 0, ranks = 0, seg_len[NUM_CLASSES] = {0}, seg_hint[NUM_CLASSES] = {0};
    int64_t least = 0; /* the span's low end: every cost and load + cost that had to fit */
    b->rp.polish_work -= count;
    for (int32_t i = 0; i < count; i++) {
        const int64_t *row = b->rp.row[i];
        int32_t p = b->rp.items[i], s = b->in.len[p];
        int k = 0;
        while (k < NUM_CLASSES && row[k] > level) k++;
        if (k == NUM_CLASSES) return N + 1;
        if (row[k] > least) least = row[k];
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
            if (!dcp__balanced_class_valid(b, k2)) continue;
            tried++;
            int64_t c = row[k2];
            if (c > level || seg_len[k2] == 0) continue;
            const int32_t *seg = b->rp.seg + (size_t)k2 * limit;
            if (b->rp.load[seg[seg_len[k2] - 1]] > level - c) continue; /* even the lightest group is too full */
            /* loads descending: the first with load <= level - c */
            const int32_t lo = seg_hint[k2] = first_at_most(b->rp.load, seg, seg_len[k2], level - c, seg_hint[k2]);
            int32_t x = lo;
            for (; x < seg_len[k2] && x < lo + LOOK; x++) {
                int32_t g = seg[x];
                if (b->rp.tokens[g] + s > (int64_t)b->rp.size[g] * b->in.max_seqlen) continue;
                if (b->in.seq_cap > 0 && b->rp.count[g] >= b->in.seq_cap) continue;
                if (dcp__sat_add_i64(b->rp.load[g], c) > best_load) {
                    best = g;
                    best_at = x;
                    best_class = k2;
                    best_load = dcp__sat_add_i64(b->rp.load[g], c);
                }
                break;
            }
            if (x == lo + LOOK && x < seg_len[k2]) least = level; /* the look ran out of candidates */
        }
        if (best_load > least) least = best_load;
        if (best < 0) {
            int32_t size = dcp__balanced_class_size(b, k);
            ranks += size;
            if (ranks > N) return N + 1;
            best = groups++;
            b->rp.size[best] = size;
            b->rp.load[best] = 0;
            b->rp.tokens[best] = 0;
            b->rp.count[best] = 0;
            b->rp.head[best] = b->rp.tail[best] = -1;
            best_class = k;
            best_at = seg_len[k]++;
            b->rp.seg[(size_t)k * limit + best_at] = best;
        }
        rp_append(b, best, i, row[best_class]);
        /*
         * Its load grew: move it forward in its class's descending order,
         * behind every group at least as heavy.  Loads cluster under the
         * level, so the move can be long: find the place by halving (the
         * prefix is sorted) and shift the block at once.
         */
        int32_t *seg = b->rp.seg + (size_t)best_class * limit;
        const int64_t load = b->rp.load[best];
        /* the first of seg[0, best_at) lighter than the group */
        const int32_t lo = first_at_most(b->rp.load, seg, best_at, load - 1, best_at - 1);
        memmove(seg + lo + 1, seg + lo, (size_t)(best_at - lo) * sizeof *seg);
        seg[lo] = best;
    }
    *num_groups = groups;
    *fits_from = least;
    return ranks;
}

/*
 * A trial packing whose outcome is known without running it, charged what
 * running it would cost (so the polishing budget, and with it every later
 * choice, is the same as if it had run):
 * - it cannot fit: its groups would hold every sequence on at most N ranks,
 *   at most M tokens a rank (so the tokens must fit N x M) and a load of at
 *   most `level` (so their GPU time, at least the sequences' least work, is at
 *   most N x level);
 * - it fits: a trial of the same search fitted at a higher level and took
 *   every step alike down to this one (its *fits_from, repack_trial).  The
 *   bisection tries only levels under every fitted one, so the least
 *   fits_from of the search so far (search->fits_from) decides.
 */
static int repack_fits(balanced *b, int32_t count, int64_t level, dcp__i128 least_work, int64_t tokens,
                       int32_t *num_groups, trial_search *search)
{
    if ((dcp__i128)level * b->in.num_ranks < least_work || tokens > (int64_t)b->in.num_ranks * b->in.max_seqlen) {
        b->rp.polish_work -= count;
        return 0;
    }
    if (b->shortcut.implied_trials && level >= search->fits_from) {
        b->rp.polish_work -= count;
        b->shortcut.trials_implied++;
        return 1;
    }
    int64_t fits_from = INT64_MAX;
    const int fits = repack_trial(b, count, level, num_groups, &fits_from) <= b->in.num_ranks;
    if (fits && fits_from < search->fits_from) search->fits_from = fits_from;
    search->left_from = fits ? fits_from : INT64_MAX;
    return fits;
}

/* The ranks the trial groups hold. */
static int32_t groups_ranks(const balanced_repack *rp, int32_t groups)
{
    int32_t ranks = 0;
    for (int32_t g = 0; g < groups; g++) ranks += rp->size[g];
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
    const int32_t N = b->in.num_ranks;
    int32_t groups = *num_groups;
    if ((int64_t)groups * free_ranks > 65536) {
        /* many groups and many free ranks: repair()'s rule, the most loaded group first, through a heap */
        int32_t size = 0;
        for (int32_t j = 0; j < groups; j++)
            if (b->rp.size[j] <= free_ranks) dcp__balanced_heap_push(b->work.local, &size, j, -b->rp.load[j], 0);
        while (free_ranks > 0) {
            if (size == 0) return INT64_MAX;
            int32_t g = dcp__balanced_heap_pop(b->work.local, &size);
            int32_t gs = b->rp.size[g];
            if (gs > free_ranks) continue; /* free ranks only shrink */
            if (b->rp.count[g] >= 2) {
                int32_t g2 = rp_split(b, g, &groups);
                free_ranks -= gs;
                dcp__balanced_heap_push(b->work.local, &size, g, -b->rp.load[g], 0);
                dcp__balanced_heap_push(b->work.local, &size, g2, -b->rp.load[g2], 0);
            } else {
                int32_t size2 = dcp__balanced_next_size(gs, N);
                if (size2 == 0 || size2 - gs > free_ranks) continue;
                rp_widen(&b->rp, g, size2);
                free_ranks -= size2 - gs;
                dcp__balanced_heap_push(b->work.local, &size, g, -b->rp.load[g], 0);
            }
        }
    }
    while (free_ranks > 0) {
        /* the two highest loads, to know the level without any one group */
        int32_t top = -1;
        int64_t second = 0;
        for (int32_t j = 0; j < groups; j++) {
            if (top < 0 || b->rp.load[j] > b->rp.load[top]) {
                if (top >= 0) second = b->rp.load[top];
                top = j;
            } else if (b->rp.load[j] > second) {
                second = b->rp.load[j];
            }
        }
        /* the split or widening that leaves the lowest level (ties: the more loaded group, then the lower index) */
        int32_t g = -1;
        int64_t best_level = INT64_MAX;
        for (int32_t j = 0; j < groups; j++) {
            int32_t size = b->rp.size[j];
            if (size > free_ranks) continue;
            int64_t after;
            if (b->rp.count[j] >= 2) {
                after = b->rp.load[j] / 2 + (b->rp.load[j] & 1); /* an even split, as an estimate */
            } else {
                int32_t size2 = dcp__balanced_next_size(size, N);
                if (size2 == 0 || size2 - size > free_ranks) continue;
                after = b->rp.row[b->rp.head[j]][dcp__balanced_class_of(size2)];
            }
            int64_t others = j == top ? second : b->rp.load[top];
            int64_t level = after > others ? after : others;
            if (g < 0 || level < best_level || (level == best_level && b->rp.load[j] > b->rp.load[g])) {
                best_level = level;
                g = j;
            }
        }
        if (g < 0) return INT64_MAX;
        int32_t size = b->rp.size[g];
        if (b->rp.count[g] >= 2) {
            rp_split(b, g, &groups);
            free_ranks -= size;
        } else {
            int32_t size2 = dcp__balanced_next_size(size, N);
            rp_widen(&b->rp, g, size2);
            free_ranks -= size2 - size;
        }
    }
    int64_t level = 0;
    for (int32_t j = 0; j < groups; j++)
        if (b->rp.load[j] > level) level = b->rp.load[j];
    *num_groups = groups;
    return level;
}

/*
 * Ascending sort of `count` (distinct) positions in rp.items: through a
 * bitset when they are dense in their range (a microbatch's sequences mostly
 * are), else a merge sort through sort_b.  The bitset is left all zero.
 */
static void sort_positions(balanced *b, int32_t count)
{
    int32_t *items = b->rp.items, lo = INT32_MAX, hi = -1;
    for (int32_t i = 0; i < count; i++) {
        if (items[i] < lo) lo = items[i];
        if (items[i] > hi) hi = items[i];
    }
    if (count > 0 && (hi / 64 - lo / 64) <= 4 * (int64_t)count) {
        uint64_t *bits = b->rp.bits;
        for (int32_t i = 0; i < count; i++) bits[items[i] / 64] |= (uint64_t)1 << (items[i] % 64);
        int32_t out = 0;
        for (int32_t w = lo / 64; w <= hi / 64; w++) {
            uint64_t word = bits[w];
            bits[w] = 0;
            while (word) {
                items[out++] = w * 64 + __builtin_ctzll(word);
                word &= word - 1;
            }
        }
        return;
    }
    int32_t *src = items, *dst = b->work.sort_b;
    for (int32_t width = 1; width < count; width *= 2) {
        for (int32_t lo2 = 0; lo2 < count; lo2 += 2 * width) {
            int32_t mid = lo2 + width < count ? lo2 + width : count;
            int32_t end = lo2 + 2 * width < count ? lo2 + 2 * width : count;
            int32_t i = lo2, j = mid, o = lo2;
            while (i < mid && j < end) dst[o++] = src[j] < src[i] ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < end) dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != items) memcpy(items, src, (size_t)count * sizeof *src);
}

/*
 * The sequences of microbatches ms[0..num) into rp.items, in ascending
 * position order: how many, or -1 when they are more than a repacking takes
 * or the polishing budget is spent.
 */
static int32_t gather_items(balanced *b, const int32_t *ms, int num)
{
    int32_t count = 0;
    for (int j = 0; j < num; j++)
        for (int32_t x = b->pass.mb_first[ms[j]]; x < b->pass.mb_first[ms[j] + 1]; x++)
            count += b->pass.g_count[b->pass.mb_groups[x]];
    if (count > b->rp.limit || b->rp.polish_work <= 0) return -1;
    count = 0;
    for (int j = 0; j < num; j++)
        for (int32_t x = b->pass.mb_first[ms[j]]; x < b->pass.mb_first[ms[j] + 1]; x++)
            for (int32_t p = b->pass.g_head[b->pass.mb_groups[x]]; p >= 0; p = b->pass.item_next[p])
                b->rp.items[count++] = p;
    if (count > 0) sort_positions(b, count);
    return count;
}

/* A repacking committed: the old groups go to the free list, the `groups` trial groups become real ones in ms[0]. */
static void commit_repack(balanced *b, const int32_t *ms, int num, int32_t count, int32_t groups)
{
    for (int j = 0; j < num; j++) {
        for (int32_t x = b->pass.mb_first[ms[j]]; x < b->pass.mb_first[ms[j] + 1]; x++) {
            int32_t g = b->pass.mb_groups[x];
            b->pass.g_count[g] = 0;
            b->pass.g_head[g] = b->pass.g_tail[g] = -1;
            b->pass.free_groups[b->pass.num_free_groups++] = g;
        }
        b->pass.mb_free[ms[j]] = b->in.num_ranks;
    }
    const int32_t m = ms[0];
    int32_t *real = b->work.cursor;
    for (int32_t j = 0; j < groups; j++) real[j] = dcp__balanced_new_group(b, m, b->rp.size[j]);
    for (int32_t i = 0; i < count; i++) {
        int32_t p = b->rp.items[i], g = real[b->rp.of[i]];
        b->pass.cp[p] = b->pass.g_cp[g];
        b->pass.cost[p] = b->rp.row[i][dcp__balanced_class_of(b->pass.g_cp[g])];
        dcp__balanced_group_add(b, g, p, b->pass.cost[p]);
    }
}

/*
 * Repack the sequences of microbatches ms[0..num) into microbatch ms[0]: the
 * least level (binary search) at which the trial packing fits N ranks, then
 * the free ranks filled.  Committed only when the resulting level is below
 * `better_than` (and `commit` is set); the other microbatches are left empty.
 * Returns the new level, or -1 when none below `better_than` was found.
 * Uses mb_groups / mb_first from dcp__balanced_index_groups().
 */
static int64_t repack(balanced *b, const int32_t *ms, int num, int64_t better_than, int commit, const merge_trial *replay,
                      merge_trial *search)
{
    const int32_t count = gather_items(b, ms, num);
    if (count <= 0) return -1;
    /*
     * The same sequences under the same bound were searched before (passes
     * rebuild like microbatches): the search is a pure function of them, so
     * its outcome is taken from the memory and the budget charged what it took
     * then; a commit repeats only the last trial (charged once already).
     */
    repack_memo *e = NULL;
    merge_trial remembered;
    if (!replay) {
        uint64_t key = DCP_FNV1A64_OFFSET ^ (uint64_t)(uint32_t)count;
        for (int32_t i = 0; i < count; i++) key = dcp__fnv1a_word(key, (uint64_t)(uint32_t)b->rp.items[i]);
        e = &b->rp.memo[key & (REPACK_MEMO - 1)];
        if (e->key == key && e->count == count && e->bound == better_than) {
            b->rp.polish_work -= e->charge;
            if (e->level < 0) return -1;
            if (search) {
                search->trial = e->trial;
                search->charge = e->charge;
            }
            if (!commit) return e->level;
            b->rp.polish_work += count; /* the trial below was charged with the rest */
            remembered = (merge_trial){0, 0, better_than, e->level, e->trial, count};
            replay = &remembered;
            e = NULL;
        } else {
            e->key = key;
            e->count = count;
            e->bound = better_than;
            e->level = -1;
            e->trial = -1;
            e->charge = 0;
        }
    }
    dcp__i128 least_work = 0;
    int64_t tokens = 0;
    int64_t lo = repack_costs(b, count, &least_work, &tokens), hi = better_than - 1;
    int32_t groups = 0;
    const int64_t work_before = b->rp.polish_work;
    trial_search trials = {INT64_MAX, INT64_MAX};
    if (replay) {
        /*
         * The search ran before on these same sequences and bound (a merge's
         * trial): it is deterministic, so only its last trial is repeated,
         * and the budget is charged what the whole search took.
         */
        hi = replay->trial;
        b->rp.polish_work -= replay->charge - count;
    } else {
        if (lo > hi || !repack_fits(b, count, hi, least_work, tokens, &groups, &trials)) {
            e->charge = work_before - b->rp.polish_work;
            return -1;
        }
        while (lo < hi && hi - lo > (hi >> 12)) { /* to within 1/4096 of the level */
            int64_t mid = lo + (hi - lo) / 2;
            if (repack_fits(b, count, mid, least_work, tokens, &groups, &trials)) hi = mid;
            else lo = mid + 1;
        }
    }
    int32_t ranks;
    if (b->shortcut.implied_trials && trials.left_from <= hi) {
        /* the last trial run fitted, at hi or above and alike down to it: its groups are the packing at hi */
        b->rp.polish_work -= count;
        b->shortcut.trials_implied++;
        ranks = groups_ranks(&b->rp, groups);
    } else {
        int64_t fits_from;
        ranks = repack_trial(b, count, hi, &groups, &fits_from);
    }
    int64_t level = repack_fill(b, &groups, b->in.num_ranks - ranks);
    if (e) {
        e->charge = work_before - b->rp.polish_work;
        e->trial = hi;
        e->level = level < better_than ? level : -1;
    }
    if (level >= better_than) return -1;
    if (search) {
        search->trial = hi;
        search->charge = work_before - b->rp.polish_work;
    }
    if (commit) commit_repack(b, ms, num, count, groups);
    return level;
}

/*
 * Whether some microbatch holds at most `limit` sequences: else neither
 * repacking nor merging (whose pairs hold at most `limit` together) can
 * touch any, and the passes over every group they start with are spared.
 */
int dcp__balanced_any_within(balanced *b, int32_t limit)
{
    int32_t *count = b->work.cursor;
    memset(count, 0, (size_t)b->pass.num_mbs * sizeof *count);
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) count[b->pass.g_mb[g]] += b->pass.g_count[g]; /* a free group's microbatch is stale */
    for (int32_t m = 0; m < b->pass.num_mbs; m++)
        if (count[m] > 0 && count[m] <= limit) return 1;
    return 0;
}

/* Repack every microbatch of at most `limit` sequences where that lowers its level. */
void dcp__balanced_repack_microbatches(balanced *b, int32_t limit)
{
    int32_t live = 0;
    dcp__balanced_evaluate(b, &live);
    dcp__balanced_index_groups(b);
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        int32_t count = 0;
        for (int32_t x = b->pass.mb_first[m]; x < b->pass.mb_first[m + 1]; x++)
            count += b->pass.g_count[b->pass.mb_groups[x]];
        if (count == 0 || count > limit) continue;
        repack(b, &m, 1, b->pass.mb_level[m], 1, NULL, NULL);
    }
}

/* Microbatches m1 and m2 as they are: both levels plus the overhead of the one a merge saves. */
static int64_t both_levels(const balanced *b, int32_t m1, int32_t m2)
{
    return dcp__sat_add_i64(dcp__sat_add_i64(b->pass.mb_level[m1], b->pass.mb_level[m2]),
                                 b->in.model->microbatch_overhead);
}

/*
 * What no repacking of microbatch m's sequences goes under: its floor (the
 * dearest sequence's cheapest cost) and its least GPU time (each sequence at
 * the size where it takes least), which N ranks cannot spread below 1/N.
 * Only the sequences the cost table holds count (the longest; the others'
 * costs would have to be computed here): a weaker bound, still a true one.
 */
static void microbatch_floor(balanced *b, int32_t m, int64_t *floor_level, dcp__i128 *least_work)
{
    int64_t highest = 0;
    dcp__i128 work = 0;
    if (b->table.ready) {
        for (int32_t x = b->pass.mb_first[m]; x < b->pass.mb_first[m + 1]; x++) {
            for (int32_t p = b->pass.g_head[b->pass.mb_groups[x]]; p >= 0; p = b->pass.item_next[p]) {
                if (p >= b->table.n) continue;
                int64_t cheapest;
                dcp__i128 least;
                dcp__balanced_cost_row(b, p, &cheapest, &least);
                if (cheapest > highest) highest = cheapest;
                work += least;
            }
        }
    }
    *floor_level = highest;
    *least_work = work;
}

/* Microbatches a merge round looks at: the least loaded ones. */
enum { MERGE_WINDOW = 8 };

/* The MERGE_WINDOW lowest levels, by insertion (ties: lower index), and their sequence counts; how many. */
static int least_window(const balanced_pass *ps, int32_t window[MERGE_WINDOW], int32_t counts[MERGE_WINDOW])
{
    int size = 0;
    for (int32_t m = 0; m < ps->num_mbs; m++) {
        if (ps->mb_level[m] < 0) continue;
        int32_t count = 0;
        for (int32_t x = ps->mb_first[m]; x < ps->mb_first[m + 1]; x++)
            count += ps->g_count[ps->mb_groups[x]];
        int j = size < MERGE_WINDOW ? size++ : MERGE_WINDOW;
        while (j > 0 && ps->mb_level[window[j - 1]] > ps->mb_level[m]) {
            if (j < MERGE_WINDOW) {
                window[j] = window[j - 1];
                counts[j] = counts[j - 1];
            }
            j--;
        }
        if (j < MERGE_WINDOW) {
            window[j] = m;
            counts[j] = count;
        }
    }
    return size;
}

/*
 * The window's pairs with at most `limit` sequences between them (as
 * i * MERGE_WINDOW + j, so window order is numeric order) into pair_of, by
 * gain cap (in cap) descending, equal caps in window order; how many.
 */
static int32_t candidate_pairs(balanced *b, int32_t limit, const int32_t *window, const int32_t *counts, int size,
                               int64_t *cap, int32_t *pair_of)
{
    int64_t floor_of[MERGE_WINDOW] = {0};
    dcp__i128 work_of[MERGE_WINDOW] = {0};
    int32_t pairs = 0;
    for (int i = 0; i < size && b->shortcut.bound_merges; i++) {
        int paired = 0; /* only a microbatch that can pair up is looked at */
        for (int j = 0; j < size && !paired; j++) paired = j != i && counts[i] + counts[j] <= limit;
        if (paired) microbatch_floor(b, window[i], &floor_of[i], &work_of[i]);
    }
    for (int i = 0; i < size; i++) {
        for (int j = i + 1; j < size; j++) {
            if (counts[i] + counts[j] > limit) continue;
            int64_t gain_cap = INT64_MAX;
            if (b->shortcut.bound_merges) {
                const int64_t both = both_levels(b, window[i], window[j]);
                const dcp__i128 spread = (work_of[i] + work_of[j] + b->in.num_ranks - 1) / b->in.num_ranks;
                int64_t least = floor_of[i] > floor_of[j] ? floor_of[i] : floor_of[j];
                if (spread > least) least = spread > INT64_MAX ? INT64_MAX : (int64_t)spread;
                gain_cap = both - least;
            }
            int32_t x = pairs++; /* insertion: equal caps stay in window order */
            while (x > 0 && cap[x - 1] < gain_cap) {
                cap[x] = cap[x - 1];
                pair_of[x] = pair_of[x - 1];
                x--;
            }
            cap[x] = gain_cap;
            pair_of[x] = i * MERGE_WINDOW + j;
        }
    }
    return pairs;
}

/*
 * The merged level of a pair under `bound` (-1: none below it), and its
 * search in *search: from the merge loop's memo where the pair was tried
 * under that bound, else repacked (not committed) and, without `force`,
 * remembered.
 */
static int64_t trial_merge(balanced *b, int32_t pair[2], int64_t bound, int force, merge_trial *search)
{
    for (int e = 0; !force && e < b->rp.num_merge_memo; e++) {
        const merge_trial *t = &b->rp.merge_memo[e];
        if (t->a == pair[0] && t->b == pair[1] && t->bound == bound) {
            *search = *t;
            return search->merged;
        }
    }
    *search = (merge_trial){pair[0], pair[1], bound, -1, 0, 0};
    const int64_t merged = repack(b, pair, 2, bound, 0, NULL, search);
    search->merged = merged;
    if (!force && b->rp.num_merge_memo < MERGE_MEMO) b->rp.merge_memo[b->rp.num_merge_memo++] = *search;
    return merged;
}

/*
 * Merge two microbatches by repacking their sequences together.  Candidates
 * are pairs among the eight least loaded microbatches with at most `limit`
 * sequences between them.  Without `force`, the pair whose merge lowers the
 * makespan most is merged (if any does); with it, the pair whose merge lowers
 * it most or raises it least, whatever the makespan.  Returns 1 when a merge
 * was made.
 * A merge loop clears b->rp.num_merge_memo before its first round; without `force`
 * the trials go through the memo.
 *
 * Either way the pair chosen has the highest gain (both levels plus the
 * overhead, less the merged level), the first in window order among equal
 * gains.  A merged level is never under the pair's floors or its least GPU
 * time over N ranks (microbatch_floor), which caps the gain: pairs are
 * searched in order of that cap, and once no cap left can beat the best gain
 * found, the rest are not searched.  The same pair wins as when every pair is
 * searched; only the polishing budget is spared.
 */
int dcp__balanced_merge_microbatches(balanced *b, int32_t limit, int force)
{
    int32_t live = 0, window[MERGE_WINDOW], counts[MERGE_WINDOW];
    dcp__balanced_evaluate(b, &live);
    dcp__balanced_index_groups(b);
    const int size = least_window(&b->pass, window, counts);
    int64_t cap[MERGE_WINDOW * MERGE_WINDOW];
    int32_t pair_of[MERGE_WINDOW * MERGE_WINDOW];
    const int32_t pairs = candidate_pairs(b, limit, window, counts, size, cap, pair_of);
    int32_t best[2] = {-1, -1}, best_pair = -1;
    int64_t best_gain = force ? INT64_MIN : 0, best_bound = 0;
    merge_trial best_search = {0};
    int32_t q = 0;
    for (; q < pairs; q++) {
        /* the caps left are at most this one, and an equal gain wins only earlier in window order */
        if (cap[q] < best_gain || (cap[q] == best_gain && (best_pair < 0 || pair_of[q] > best_pair))) break;
        int32_t pair[2] = {window[pair_of[q] / MERGE_WINDOW], window[pair_of[q] % MERGE_WINDOW]};
        const int64_t both = both_levels(b, pair[0], pair[1]);
        const int64_t bound = force ? INT64_MAX : both;
        merge_trial search;
        const int64_t merged = trial_merge(b, pair, bound, force, &search);
        if (merged < 0) continue;
        int64_t gain = both - merged;
        if (gain > best_gain || (gain == best_gain && best_pair >= 0 && pair_of[q] < best_pair)) {
            best_gain = gain;
            best_bound = bound;
            best[0] = pair[0];
            best[1] = pair[1];
            best_search = search;
            best_pair = pair_of[q];
        }
    }
    b->shortcut.merges_skipped += pairs - q;
    /* the round's choice, for tests: the pair (or none) and its gain, in call order */
    const uint64_t choice[3] = {(uint64_t)(uint32_t)best[0], (uint64_t)(uint32_t)best[1], (uint64_t)best_gain};
    for (int k = 0; k < 3; k++) b->shortcut.merge_choices = dcp__fnv1a_word(b->shortcut.merge_choices, choice[k]);
    if (best[0] < 0) return 0;
    /* trials that involved either microbatch are stale now */
    int kept = 0;
    for (int e = 0; e < b->rp.num_merge_memo; e++) {
        const merge_trial t = b->rp.merge_memo[e];
        if (t.a != best[0] && t.a != best[1] && t.b != best[0] && t.b != best[1]) b->rp.merge_memo[kept++] = t;
    }
    b->rp.num_merge_memo = kept;
    /* the same bound as the trial: the search is deterministic, so the commit replays its last trial */
    return repack(b, best, 2, best_bound, 1, &best_search, NULL) >= 0;
}
