/*
 * balanced_emit.c - the kept plans: the best few plans of all passes are
 * saved, one is rebuilt into the pass state for polishing, and the best is
 * emitted into the plan tables.
 *
 * State: reads in and pl (the dependency layout); writes kept (keep) and
 * pass (restore), and the plan tables.
 */
#include "balanced_internal.h"
#include "../../../core/plan.h"

/*
 * Keep the pass's plan if it is among the NUM_KEPT best so far (kept.plan[] stays
 * sorted by makespan; on a tie the earlier plan stays ahead), or, with
 * `slot` >= 0, overwrite that slot (a polished plan replacing its origin).
 */
void dcp__balanced_keep_plan(balanced *b, int64_t makespan, int slot)
{
    if (slot < 0) {
        if (b->kept.num == NUM_KEPT && makespan >= b->kept.plan[NUM_KEPT - 1].makespan) return;
        slot = b->kept.num < NUM_KEPT ? b->kept.num++ : NUM_KEPT - 1;
        /* move the slot's storage to its place in the order */
        saved_plan spare = b->kept.plan[slot];
        while (slot > 0 && b->kept.plan[slot - 1].makespan > makespan) {
            b->kept.plan[slot] = b->kept.plan[slot - 1];
            slot--;
        }
        b->kept.plan[slot] = spare;
    }
    saved_plan *k = &b->kept.plan[slot];
    k->makespan = makespan;
    k->num_groups = b->pass.num_groups;
    k->num_mbs = b->pass.num_mbs;
    memcpy(k->item_group, b->pass.item_group, (size_t)b->in.n * sizeof(int32_t));
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        k->g_mb[g] = b->pass.g_count[g] > 0 ? b->pass.g_mb[g] : -1;
        k->g_cp[g] = b->pass.g_cp[g];
    }
}

/* Rebuild the pass state (groups, loads, lists, microbatches) from a kept plan. */
void dcp__balanced_restore_plan(balanced *b, const saved_plan *k)
{
    b->pass.num_groups = k->num_groups;
    b->pass.num_mbs = k->num_mbs;
    b->pass.num_free_groups = 0;
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        b->pass.g_mb[g] = k->g_mb[g];
        b->pass.g_cp[g] = k->g_cp[g];
        b->pass.g_head[g] = b->pass.g_tail[g] = -1;
        b->pass.g_count[g] = 0;
        b->pass.g_load[g] = 0;
        b->pass.g_tokens[g] = 0;
        if (b->pass.g_mb[g] < 0) b->pass.free_groups[b->pass.num_free_groups++] = g;
    }
    for (int32_t m = 0; m < b->pass.num_mbs; m++) b->pass.mb_free[m] = 0;
    for (int32_t p = 0; p < b->in.n; p++) {
        int32_t g = k->item_group[p];
        b->pass.cp[p] = b->pass.g_cp[g];
        b->pass.cost[p] = dcp__cost(b->in.model, b->in.len[p], b->pass.cp[p]);
        dcp__balanced_group_add(b, g, p, b->pass.cost[p]);
    }
}

/*
 * A kept plan's live groups by (microbatch, class descending, index) into
 * out[]: a counting sort on the class (into by_class[]), then a stable one on
 * the microbatch, whose starts go to first[0..num_mbs] (cursor[] is scratch
 * of num_mbs entries).  Returns the number of live groups.
 */
int32_t dcp__balanced_sort_groups(const saved_plan *k, int32_t *by_class, int32_t *first, int32_t *cursor, int32_t *out)
{
    const int32_t G = k->num_groups, K = k->num_mbs;
    int32_t class_count[NUM_CLASSES + 1] = {0}, live = 0;
    for (int32_t g = 0; g < G; g++)
        if (k->g_mb[g] >= 0) {
            class_count[FULL_CLASS - dcp__balanced_class_of(k->g_cp[g]) + 1]++;
            live++;
        }
    for (int c = 0; c < NUM_CLASSES; c++) class_count[c + 1] += class_count[c];
    for (int32_t g = 0; g < G; g++)
        if (k->g_mb[g] >= 0) by_class[class_count[FULL_CLASS - dcp__balanced_class_of(k->g_cp[g])]++] = g;
    memset(first, 0, (size_t)(K + 1) * sizeof *first);
    for (int32_t j = 0; j < live; j++) first[k->g_mb[by_class[j]] + 1]++;
    for (int32_t m = 0; m < K; m++) {
        first[m + 1] += first[m];
        cursor[m] = first[m];
    }
    for (int32_t j = 0; j < live; j++) {
        int32_t g = by_class[j];
        out[cursor[k->g_mb[g]]++] = g;
    }
    return live;
}

/*
 * Emit the best plan, ids by length descending.  Barrier model: the least
 * makespan, microbatches in index order, groups by size descending from rank
 * 0.  Dependency model: the plan and layout balanced_place.c chose, groups
 * in first-rank order.
 */
dcp_status dcp__balanced_emit(balanced *b, dcp_plan *plan, dcp__error *err)
{
    const saved_plan *best = &b->kept.plan[0];
    for (int j = 1; j < b->kept.num; j++)
        if (b->kept.plan[j].makespan < best->makespan) best = &b->kept.plan[j];
    const int placed = b->in.dependency ? dcp__balanced_place(b) : -1;
    if (placed >= 0) best = &b->kept.plan[placed];
    const int32_t n = b->in.n, G = best->num_groups, K = best->num_mbs;
    int32_t *first = b->pass.mb_first, *sorted = b->pass.mb_groups;
    dcp__balanced_sort_groups(best, b->pass.order, first, b->work.cursor, sorted);
    /* ids of each group contiguous, in position order: g_head holds each group's start */
    int32_t *start = b->pass.g_head, *ids = b->pass.class_list;
    memset(start, 0, (size_t)(G + 1) * sizeof *start);
    for (int32_t p = 0; p < n; p++) start[best->item_group[p] + 1]++;
    for (int32_t g = 0; g < G; g++) start[g + 1] += start[g];
    memcpy(b->pass.g_tail, start, (size_t)G * sizeof *start);
    for (int32_t p = 0; p < n; p++) ids[b->pass.g_tail[best->item_group[p]]++] = b->in.ids[p];
    int32_t *at = b->pl.at;
    if (placed >= 0)
        for (int32_t r = 0; r < b->in.num_ranks; r++) at[r] = -1;
    for (int32_t i = 0; i < K; i++) {
        const int32_t m = placed >= 0 ? b->pl.order[i] : i;
        if (first[m + 1] == first[m]) continue;
        dcp_status st = dcp__plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        if (placed >= 0) {
            /* the groups by first rank: their blocks tile [0, N), so a walk from rank 0 meets each once */
            for (int32_t j = first[m]; j < first[m + 1]; j++) at[b->pl.rank[sorted[j]]] = sorted[j];
            for (int32_t r = 0; r < b->in.num_ranks;) {
                const int32_t g = at[r];
                if (g < 0) { /* not tiled: never for a plan that fits (the validator would name the rank) */
                    r++;
                    continue;
                }
                at[r] = -1;
                st = dcp__plan_push_group(plan, r, best->g_cp[g], ids + start[g], start[g + 1] - start[g], err);
                if (st != DCP_OK) return st;
                r += best->g_cp[g];
            }
        } else {
            int32_t rank = 0;
            for (int32_t j = first[m]; j < first[m + 1]; j++) {
                int32_t g = sorted[j];
                st = dcp__plan_push_group(plan, rank, best->g_cp[g], ids + start[g], start[g + 1] - start[g], err);
                if (st != DCP_OK) return st;
                rank += best->g_cp[g];
            }
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}
