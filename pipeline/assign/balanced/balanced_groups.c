/*
 * balanced_groups.c - groups and microbatches, shared by the phases:
 * re-costing and splitting a group, a sequence joining a wider group, groups
 * indexed by microbatch, the exact makespan of the plan as it stands, and
 * dropping empty microbatches.
 */
#include "balanced_internal.h"

/* Re-cost every sequence of g at CP size cp. */
void dcp__balanced_group_recost(balanced *b, int32_t g, int32_t cp)
{
    int64_t load = 0;
    for (int32_t p = b->g_head[g]; p >= 0; p = b->item_next[p]) {
        b->cp[p] = cp;
        b->cost[p] = dcp__cost(b->model, b->len[p], cp);
        load = dcp__balanced_sat_add(load, b->cost[p]);
    }
    b->g_cp[g] = cp;
    b->g_load[g] = load;
}

/* Split g's sequences between g and a new group of the same size in the same microbatch; returns the new one. */
int32_t dcp__balanced_group_split(balanced *b, int32_t g)
{
    int32_t g2 = dcp__balanced_new_group(b, b->g_mb[g], b->g_cp[g]);
    int32_t p = b->g_head[g];
    b->g_head[g] = b->g_tail[g] = -1;
    b->g_count[g] = 0;
    b->g_load[g] = 0;
    b->g_tokens[g] = 0;
    while (p >= 0) {
        int32_t next = b->item_next[p];
        /* the lighter side; on equal loads (zero costs) the side with fewer sequences, so neither stays empty */
        int to_new = b->g_load[g2] < b->g_load[g] || (b->g_load[g2] == b->g_load[g] && b->g_count[g2] < b->g_count[g]);
        dcp__balanced_group_add(b, to_new ? g2 : g, p, b->cost[p]);
        p = next;
    }
    return g2;
}

/*
 * Put sequence p (at `cost`, its CP size becoming the group's) into the wider
 * group found by dcp__balanced_wide_candidate() at `at`, and restore that class's heaps: a
 * heap entry's key only grew, so it sifts down (or leaves when the group is at
 * the sequence cap); a parked group goes back to the heap.  Keys are the load,
 * minus the microbatch's cap when `minus_cap`.  Returns the group.
 */
int32_t dcp__balanced_wide_join(balanced *b, heap_entry *heap, int32_t *heap_size, heap_entry *park,
                                int32_t *park_size, int32_t at, int32_t p, int64_t cost, int minus_cap)
{
    int32_t g = at >= 0 ? heap[at].id : park[0].id;
    b->cp[p] = b->g_cp[g];
    b->cost[p] = cost;
    dcp__balanced_group_add(b, g, p, cost);
    b->g_key[g] = b->g_load[g] - (minus_cap ? b->mb_cap[b->g_mb[g]] : 0);
    int full = b->seq_cap > 0 && b->g_count[g] >= b->seq_cap;
    if (at >= 0) {
        if (full) {
            heap[at] = heap[--*heap_size];
            if (at < *heap_size) dcp__balanced_heap_fix(heap, *heap_size, at);
        } else {
            heap[at].key = b->g_key[g];
            heap[at].room = dcp__balanced_entry_room(b, g);
            dcp__balanced_heap_sift_down(heap, *heap_size, at);
        }
    } else {
        dcp__balanced_heap_pop(park, park_size);
        if (!full) dcp__balanced_heap_push(heap, heap_size, g, b->g_key[g], dcp__balanced_entry_room(b, g));
    }
    return g;
}

/* Counting sort of live groups by microbatch into mb_first / mb_groups. */
void dcp__balanced_index_groups(balanced *b)
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

/* Exact makespan of the pass's plan; counts live microbatches into *live. */
int64_t dcp__balanced_evaluate(balanced *b, int32_t *live)
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
        total = dcp__balanced_sat_add(total, dcp__balanced_sat_add(b->mb_level[m], b->model->microbatch_overhead));
        count++;
    }
    *live = count;
    return total;
}

/* Drop microbatches that received nothing and number the others 0.. in order. */
void dcp__balanced_compact_mbs(balanced *b)
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
