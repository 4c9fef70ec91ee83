/*
 * balanced_finish.c - the common end of every construction pass: free ranks
 * filled (repair), repacking and merging where sequences are few, the
 * microbatch count aligned to the VPP group, and the groups dealt into the
 * microbatches again by load (regroup); and the same polishing again for a
 * kept plan.
 *
 * State: reads in and kept; writes pass, work (local heap, sorts,
 * saved_mb), before_vpp, rp (through repacking) and, polishing, the kept
 * plan it restores and keeps again.
 */
#include "balanced_internal.h"

/* Step 4: fill free ranks of every microbatch by splitting or widening its most loaded group. */
static int repair(balanced *b)
{
    int any_free = 0;
    for (int32_t m = 0; m < b->pass.num_mbs && !any_free; m++) any_free = b->pass.mb_free[m] > 0;
    if (!any_free) return 1; /* full microbatches (the usual case with many sequences per rank): nothing to index */
    dcp__balanced_index_groups(b);
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        if (b->pass.mb_free[m] == 0 || b->pass.mb_first[m + 1] == b->pass.mb_first[m]) continue;
        int32_t size = 0;
        for (int32_t j = b->pass.mb_first[m]; j < b->pass.mb_first[m + 1]; j++) {
            int32_t g = b->pass.mb_groups[j];
            dcp__balanced_heap_push(b->work.local, &size, g, -b->pass.g_load[g], 0);
        }
        while (b->pass.mb_free[m] > 0 && size > 0) {
            int32_t g = dcp__balanced_heap_pop(b->work.local, &size);
            int32_t c = b->pass.g_cp[g];
            if (c > b->pass.mb_free[m]) continue; /* free ranks only shrink: g never fits again */
            if (b->pass.g_count[g] >= 2) {
                int32_t g2 = dcp__balanced_group_split(b, g);
                dcp__balanced_heap_push(b->work.local, &size, g, -b->pass.g_load[g], 0);
                dcp__balanced_heap_push(b->work.local, &size, g2, -b->pass.g_load[g2], 0);
            } else {
                int32_t c2 = dcp__balanced_next_size(c, b->in.num_ranks);
                if (c2 == 0 || c2 - c > b->pass.mb_free[m]) continue;
                dcp__balanced_group_recost(b, g, c2);
                b->pass.mb_free[m] -= c2 - c;
                dcp__balanced_heap_push(b->work.local, &size, g, -b->pass.g_load[g], 0);
            }
        }
        if (b->pass.mb_free[m] > 0) {
            /* N is not a power of two and no block fits the gap: the whole microbatch becomes one group */
            int32_t keep = -1;
            for (int32_t g = 0; g < b->pass.num_groups; g++) {
                if (b->pass.g_mb[g] != m || b->pass.g_count[g] == 0) continue;
                if (keep < 0) {
                    keep = g;
                    continue;
                }
                for (int32_t p = b->pass.g_head[g]; p >= 0;) {
                    int32_t next = b->pass.item_next[p];
                    dcp__balanced_group_add(b, keep, p, 0);
                    p = next;
                }
                b->pass.g_count[g] = 0;
                b->pass.g_head[g] = b->pass.g_tail[g] = -1;
                b->pass.free_groups[b->pass.num_free_groups++] = g;
            }
            dcp__balanced_group_recost(b, keep, b->in.num_ranks);
            b->pass.mb_free[m] = 0;
            /* more sequences than the cap allows on a rank: the surplus goes, cap by cap, to new microbatches */
            while (b->in.seq_cap > 0 && b->pass.g_count[keep] > b->in.seq_cap) {
                int32_t moved = dcp__balanced_new_group(b, dcp__balanced_new_mb(b, 0), b->in.num_ranks);
                int32_t p = b->pass.g_head[keep];
                b->pass.g_head[keep] = b->pass.g_tail[keep] = -1;
                b->pass.g_count[keep] = 0;
                b->pass.g_load[keep] = 0;
                b->pass.g_tokens[keep] = 0;
                for (int32_t taken = 0; p >= 0; taken++) {
                    int32_t next = b->pass.item_next[p];
                    dcp__balanced_group_add(b, taken < b->in.seq_cap ? keep : moved, p, b->pass.cost[p]);
                    p = next;
                }
                keep = moved;
            }
        }
    }
    return 1;
}

/* Stable merge sort of group ids by load descending (ties: lower id first); returns the sorted array. */
static int32_t *sort_groups_by_load(balanced *b, int32_t count)
{
    int32_t *src = b->work.sort_a, *dst = b->work.sort_b;
    for (int32_t width = 1; width < count; width *= 2) {
        for (int32_t lo = 0; lo < count; lo += 2 * width) {
            int32_t mid = lo + width < count ? lo + width : count;
            int32_t hi = lo + 2 * width < count ? lo + 2 * width : count;
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                int32_t x = src[i], y = src[j];
                const int64_t *load = b->pass.g_load;
                if (load[y] > load[x] || (load[y] == load[x] && y < x)) dst[o++] = src[j++];
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
    heap_entry *src = b->work.heap, *dst = b->work.park;
    uint64_t all_or = 0, all_and = ~(uint64_t)0;
    for (int32_t j = 0; j < count; j++) {
        int32_t g = b->work.sort_a[j];
        uint64_t key = ~(uint64_t)b->pass.g_load[g]; /* loads are >= 0: ascending complement = descending load */
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
    for (int32_t j = 0; j < count; j++) b->work.sort_a[j] = src[j].id;
    return b->work.sort_a;
}

/*
 * Regroup: deal all groups, by load descending, first-fit into the same
 * number of microbatches, so each microbatch holds groups of like load (for
 * equal sizes this ordering minimises the sum of microbatch maxima).  Kept
 * only when the makespan drops.  `makespan` and `live` are dcp__balanced_evaluate()'s for
 * the plan as it stands.
 */
static int64_t regroup(balanced *b, int64_t makespan, int32_t live)
{
    int32_t count = 0;
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        if (b->pass.g_count[g] == 0) continue;
        b->work.sort_a[count++] = g;
        b->work.saved_mb[g] = b->pass.g_mb[g];
    }
    const int32_t old_mbs = b->pass.num_mbs;
    int32_t *sorted = radix_sort_groups_by_load(b, count);
    for (int32_t m = 0; m < live; m++) b->pass.mb_free[m] = b->in.num_ranks;
    int32_t ptr[NUM_CLASSES] = {0};
    int ok = 1;
    for (int32_t j = 0; j < count && ok; j++) {
        int32_t g = sorted[j], c = b->pass.g_cp[g];
        int k = dcp__balanced_class_of(c);
        while (ptr[k] < live && b->pass.mb_free[ptr[k]] < c) ptr[k]++;
        if (ptr[k] == live) ok = 0;
        else {
            b->pass.g_mb[g] = ptr[k];
            b->pass.mb_free[ptr[k]] -= c;
        }
    }
    if (ok) {
        b->pass.num_mbs = live;
        int32_t again = 0;
        int64_t regrouped = dcp__balanced_evaluate(b, &again);
        if (regrouped < makespan) return regrouped;
    }
    for (int32_t j = 0; j < count; j++) b->pass.g_mb[b->work.sort_a[j]] = b->work.saved_mb[b->work.sort_a[j]];
    b->pass.num_mbs = old_mbs;
    for (int32_t m = 0; m < old_mbs; m++) b->pass.mb_free[m] = 0;
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
        dcp__balanced_evaluate(b, &live);
        if (live % b->in.vpp == 0) return 1;
        if (merge_down) {
            if (live > b->in.vpp && dcp__balanced_merge_microbatches(b, b->rp.limit, 1)) continue;
            merge_down = 0; /* no merge fits: split upwards instead */
        }
        dcp__balanced_index_groups(b);
        int32_t best = -1, best_groups = 0;
        for (int32_t m = 0; m < b->pass.num_mbs; m++) {
            int32_t groups = b->pass.mb_first[m + 1] - b->pass.mb_first[m];
            if (groups == 0) continue;
            if (groups == 1 && b->pass.g_count[b->pass.mb_groups[b->pass.mb_first[m]]] < 2) continue;
            if (best < 0 || groups > best_groups || (groups == best_groups && b->pass.mb_level[m] > b->pass.mb_level[best])) {
                best = m;
                best_groups = groups;
            }
        }
        if (best < 0) return 0;
        if (best_groups == 1) {
            int32_t g2 = dcp__balanced_group_split(b, b->pass.mb_groups[b->pass.mb_first[best]]);
            int32_t half = dcp__balanced_new_mb(b, 0);
            b->pass.mb_free[best] += b->pass.g_cp[g2];
            b->pass.g_mb[g2] = half;
            b->pass.mb_free[half] -= b->pass.g_cp[g2];
        } else {
            /* groups of the microbatch by load descending, each to the half with fewer ranks */
            int32_t count = 0;
            for (int32_t j = b->pass.mb_first[best]; j < b->pass.mb_first[best + 1]; j++)
                b->work.sort_a[count++] = b->pass.mb_groups[j];
            int32_t *sorted = sort_groups_by_load(b, count);
            int32_t half = dcp__balanced_new_mb(b, 0), used[2] = {0, 0};
            b->pass.mb_free[best] = b->in.num_ranks;
            for (int32_t j = 0; j < count; j++) {
                int32_t g = sorted[j], side = used[1] < used[0];
                used[side] += b->pass.g_cp[g];
                b->pass.g_mb[g] = side ? half : best;
            }
            b->pass.mb_free[best] = b->in.num_ranks - used[0];
            b->pass.mb_free[half] = b->in.num_ranks - used[1];
        }
        if (!repair(b)) return 0;
    }
}

/* The end of a pass from its VPP alignment on: align, regroup; the exact makespan or -1. */
static int64_t finish_alignment(balanced *b, int merge_down)
{
    int32_t live = 0;
    b->pass.vpp_misaligned = 0;
    if (b->in.vpp > 1) {
        dcp__balanced_evaluate(b, &live);
        b->pass.vpp_misaligned = live % b->in.vpp != 0;
        if (!fix_vpp_multiple(b, merge_down)) return -1;
        dcp__balanced_compact_mbs(b);
    }
    int64_t makespan = dcp__balanced_evaluate(b, &live);
    makespan = regroup(b, makespan, live);
    return makespan;
}

/*
 * The state a pass has built before its VPP alignment: into before_vpp (save),
 * or back from it.  One list for both ways, so that they always cover the
 * same arrays.
 */
static void copy_before_alignment(balanced *b, int save)
{
    const size_t n = (size_t)b->in.n;
    const size_t groups = (size_t)(save ? b->pass.num_groups : b->before_vpp.num_groups);
    const size_t free_groups = (size_t)(save ? b->pass.num_free_groups : b->before_vpp.num_free_groups);
    const size_t mbs = (size_t)(save ? b->pass.num_mbs : b->before_vpp.num_mbs);
#define COPY(field, count)                                                                         \
    (save ? memcpy(b->before_vpp.field, b->pass.field, (count) * sizeof *b->pass.field)                      \
          : memcpy(b->pass.field, b->before_vpp.field, (count) * sizeof *b->pass.field))
    COPY(cp, n);
    COPY(cost, n);
    COPY(item_group, n);
    COPY(item_next, n);
    COPY(g_mb, groups);
    COPY(g_cp, groups);
    COPY(g_head, groups);
    COPY(g_tail, groups);
    COPY(g_count, groups);
    COPY(g_load, groups);
    COPY(g_tokens, groups);
    COPY(free_groups, free_groups);
    COPY(mb_free, mbs);
#undef COPY
    if (save) {
        b->before_vpp.num_groups = b->pass.num_groups;
        b->before_vpp.num_free_groups = b->pass.num_free_groups;
        b->before_vpp.num_mbs = b->pass.num_mbs;
    } else {
        b->pass.num_groups = b->before_vpp.num_groups;
        b->pass.num_free_groups = b->before_vpp.num_free_groups;
        b->pass.num_mbs = b->before_vpp.num_mbs;
    }
}

/* The common end of a pass: fill free ranks, repack, merge, VPP, regroup; the exact makespan or -1. */
int64_t dcp__balanced_finish_pass(balanced *b, int merge_down)
{
    if (!repair(b)) return -1;
    dcp__balanced_compact_mbs(b);
    if (b->in.dense && dcp__balanced_any_within(b, b->rp.limit)) {
        /* few sequences per rank: repack each microbatch, merge microbatches while that pays */
        dcp__balanced_repack_microbatches(b, b->rp.limit);
        b->rp.num_merge_memo = 0;
        while (dcp__balanced_merge_microbatches(b, b->rp.limit, 0)) {
        }
        dcp__balanced_compact_mbs(b);
    }
    if (b->in.vpp > 1 && b->before_vpp.cp) {
        /* kept for the same pass merging down, with what it has charged to the polishing budget so far */
        copy_before_alignment(b, 1);
        b->before_vpp.charge = b->before_vpp.pass_start - b->rp.polish_work;
        b->before_vpp.saved = 1;
    }
    return finish_alignment(b, merge_down);
}

/*
 * Whether the pass that just ran can merge down from its saved state instead of
 * running again.  Running it again builds the same state before the alignment
 * (the construction and repair read nothing the alignment changed) and charges
 * the polishing budget the same amount, provided the budget stays positive
 * throughout, as every repacking search then runs, or is taken from the
 * memory, as it did the first time: so exactly when the budget left exceeds
 * that charge.
 */
int dcp__balanced_can_realign(const balanced *b)
{
    return b->before_vpp.saved && b->rp.polish_work - b->before_vpp.charge > 0;
}

/* The pass that just ran, merging down from its saved state: its exact makespan or -1. */
int64_t dcp__balanced_realign_pass(balanced *b)
{
    copy_before_alignment(b, 0);
    b->rp.polish_work -= b->before_vpp.charge;
    b->before_vpp.saved = 0;
    return finish_alignment(b, 1);
}

/*
 * Few sequences per rank: polish a kept plan.  Repack each microbatch against
 * its level, merge microbatches while that lowers the makespan, align to the
 * VPP group again (merging down where some pair fits, else splitting),
 * regroup; the slot takes the result when its makespan is lower.
 */
void dcp__balanced_polish_plan(balanced *b, int slot, int32_t max_microbatches)
{
    dcp__balanced_restore_plan(b, &b->kept.plan[slot]);
    dcp__balanced_repack_microbatches(b, b->rp.limit);
    b->rp.num_merge_memo = 0;
    while (dcp__balanced_merge_microbatches(b, b->rp.limit, 0)) {
    }
    dcp__balanced_compact_mbs(b);
    int32_t live = 0;
    if (b->in.vpp > 1) {
        dcp__balanced_evaluate(b, &live);
        if (live % b->in.vpp != 0) {
            if (!fix_vpp_multiple(b, 1)) return;
            dcp__balanced_compact_mbs(b);
            dcp__balanced_repack_microbatches(b, b->rp.limit);
        }
    }
    int64_t makespan = dcp__balanced_evaluate(b, &live);
    makespan = regroup(b, makespan, live);
    if (makespan < b->kept.plan[slot].makespan && b->pass.num_mbs <= max_microbatches) dcp__balanced_keep_plan(b, makespan, slot);
}

/* The local search on a kept plan, then regroup; the slot takes the result when its makespan is lower. */
void dcp__balanced_descend_plan(balanced *b, int slot, int64_t budget)
{
    dcp__balanced_restore_plan(b, &b->kept.plan[slot]);
    dcp__balanced_compact_mbs(b);
    dcp__balanced_descent(b, budget);
    int32_t live = 0;
    int64_t makespan = dcp__balanced_evaluate(b, &live);
    makespan = regroup(b, makespan, live);
    if (makespan < b->kept.plan[slot].makespan) dcp__balanced_keep_plan(b, makespan, slot);
}

/* The common end of a pooled pass (free ranks already filled): VPP alignment (merging down where a pair fits), regroup; the makespan or -1. */
int64_t dcp__balanced_finish_pool(balanced *b)
{
    dcp__balanced_compact_mbs(b);
    int32_t live = 0;
    b->pass.vpp_misaligned = 0;
    if (b->in.vpp > 1) {
        dcp__balanced_evaluate(b, &live);
        if (live % b->in.vpp != 0) {
            if (!fix_vpp_multiple(b, 1)) return -1;
            dcp__balanced_compact_mbs(b);
        }
    }
    int64_t makespan = dcp__balanced_evaluate(b, &live);
    return regroup(b, makespan, live);
}
