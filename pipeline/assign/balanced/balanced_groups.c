/*
 * balanced_groups.c - groups and microbatches, shared by the phases:
 * re-costing and splitting a group, a sequence joining a wider group, groups
 * indexed by microbatch, the exact makespan of the plan as it stands, and
 * dropping empty microbatches.
 *
 * State: reads in and work (join cost, heaps it is handed, cursor);
 * writes pass.
 */
#include "balanced_internal.h"

/* Re-cost every sequence of g at CP size cp. */
void dcp__balanced_group_recost(balanced *b, int32_t g, int32_t cp)
{
    int64_t load = 0;
    for (int32_t p = b->pass.g_head[g]; p >= 0; p = b->pass.item_next[p]) {
        b->pass.cp[p] = cp;
        b->pass.cost[p] = dcp__cost(b->in.model, b->in.len[p], cp);
        load = dcp__sat_add_i64(load, b->pass.cost[p]);
    }
    b->pass.g_cp[g] = cp;
    b->pass.g_load[g] = load;
}

/* Split g's sequences between g and a new group of the same size in the same microbatch; returns the new one. */
int32_t dcp__balanced_group_split(balanced *b, int32_t g)
{
    int32_t g2 = dcp__balanced_new_group(b, b->pass.g_mb[g], b->pass.g_cp[g]);
    int32_t p = b->pass.g_head[g];
    b->pass.g_head[g] = b->pass.g_tail[g] = -1;
    b->pass.g_count[g] = 0;
    b->pass.g_load[g] = 0;
    b->pass.g_tokens[g] = 0;
    while (p >= 0) {
        int32_t next = b->pass.item_next[p];
        /* the lighter side; on equal loads (zero costs) the side with fewer sequences, so neither stays empty */
        const balanced_pass *ps = &b->pass;
        int to_new = ps->g_load[g2] < ps->g_load[g] || (ps->g_load[g2] == ps->g_load[g] && ps->g_count[g2] < ps->g_count[g]);
        dcp__balanced_group_add(b, to_new ? g2 : g, p, b->pass.cost[p]);
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
    b->pass.cp[p] = b->pass.g_cp[g];
    b->pass.cost[p] = cost;
    dcp__balanced_group_add(b, g, p, cost);
    b->pass.g_key[g] = b->pass.g_load[g] - (minus_cap ? b->pass.mb_cap[b->pass.g_mb[g]] : 0);
    int full = b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap;
    if (at >= 0) {
        if (full) {
            heap[at] = heap[--*heap_size];
            if (at < *heap_size) dcp__balanced_heap_fix(heap, *heap_size, at);
        } else {
            heap[at].key = b->pass.g_key[g];
            heap[at].room = dcp__balanced_entry_room(b, g);
            dcp__balanced_heap_sift_down(heap, *heap_size, at);
        }
    } else {
        dcp__balanced_heap_pop(park, park_size);
        if (!full) dcp__balanced_heap_push(heap, heap_size, g, b->pass.g_key[g], dcp__balanced_entry_room(b, g));
    }
    return g;
}

/* Counting sort of live groups by microbatch into mb_first / mb_groups. */
void dcp__balanced_index_groups(balanced *b)
{
    int32_t *first = b->pass.mb_first, *cursor = b->work.cursor;
    memset(first, 0, (size_t)(b->pass.num_mbs + 1) * sizeof *first);
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) first[b->pass.g_mb[g] + 1]++;
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        first[m + 1] += first[m];
        cursor[m] = first[m];
    }
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) b->pass.mb_groups[cursor[b->pass.g_mb[g]]++] = g;
}

/* Exact makespan of the pass's plan; counts live microbatches into *live. */
int64_t dcp__balanced_evaluate(balanced *b, int32_t *live)
{
    for (int32_t m = 0; m < b->pass.num_mbs; m++) b->pass.mb_level[m] = -1;
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        if (b->pass.g_count[g] == 0) continue;
        int32_t m = b->pass.g_mb[g];
        if (b->pass.g_load[g] > b->pass.mb_level[m]) b->pass.mb_level[m] = b->pass.g_load[g];
    }
    int64_t total = 0;
    int32_t count = 0;
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        if (b->pass.mb_level[m] < 0) continue;
        total = dcp__sat_add_i64(total, dcp__sat_add_i64(b->pass.mb_level[m], b->in.model->microbatch_overhead));
        count++;
    }
    *live = count;
    return total;
}

/* Drop microbatches that received nothing and number the others 0.. in order. */
void dcp__balanced_compact_mbs(balanced *b)
{
    int32_t *renumber = b->work.cursor, live = 0;
    for (int32_t m = 0; m < b->pass.num_mbs; m++) renumber[m] = -1;
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) renumber[b->pass.g_mb[g]] = 0;
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        if (renumber[m] < 0) continue;
        b->pass.mb_free[live] = b->pass.mb_free[m];
        b->pass.mb_cap[live] = b->pass.mb_cap[m];
        renumber[m] = live++;
    }
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) b->pass.g_mb[g] = renumber[b->pass.g_mb[g]];
    b->pass.num_mbs = live;
}
