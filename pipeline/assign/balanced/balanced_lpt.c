/*
 * balanced_lpt.c - the LPT construction pass for a target of K microbatches:
 * tall and wide sequences shelved first-fit, then the rest, longest-
 * processing-time first, where their group ends lowest against its
 * microbatch's cap.
 */
#include "balanced_internal.h"

/*
 * LPT pass for a target of `target_mbs` microbatches at the allowance
 * widen_num / widen_den: shelves, plain microbatches, then the rest by
 * decreasing cost, and the common end (dcp__balanced_finish_pass()).
 * Returns the plan's makespan, or -1 (no plan, or its CP sizes repeat an
 * earlier pass at this target).
 */
int64_t dcp__balanced_lpt_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den, int merge_down)
{
    const int32_t n = b->n, N = b->num_ranks;
    const int64_t M = b->max_seqlen;
    int32_t class_offset[NUM_CLASSES + 1];
    b->num_groups = 0;
    b->num_free_groups = 0;
    b->num_mbs = 0;

    int64_t level = dcp__balanced_ceil_div128(b->min_work, (__int128)target_mbs * N);
    uint64_t signature;
    __int128 work = dcp__balanced_choose_sizes(b, level, widen_num, widen_den, class_offset, &signature, 1);
    if (!merge_down && dcp__balanced_seen_before(b, 0, target_mbs, signature)) return -1;
    level = dcp__balanced_ceil_div128(work, (__int128)target_mbs * N);

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
        int k = dcp__balanced_class_of(c);
        while (ptr[k] < b->num_mbs && b->mb_free[ptr[k]] < c) ptr[k]++;
        int32_t m = ptr[k] < b->num_mbs ? ptr[k] : dcp__balanced_new_mb(b, b->cost[p]);
        dcp__balanced_group_add(b, dcp__balanced_new_group(b, m, c), p, b->cost[p]);
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
    int64_t need = dcp__balanced_ceil_div128((__int128)rest_tokens - room_tokens, (__int128)N * M);
    if (plain < need) plain = need;
    if (plain > rest_count) plain = rest_count;
    int64_t plain_cap = level;
    if (plain > 0 && rest_work > room_work)
        plain_cap = dcp__balanced_ceil_div128(rest_work - room_work, (__int128)plain * N);
    int32_t num_order = 0, m = 0;
    while (m < shelves && b->mb_cap[m] >= plain_cap) b->mb_order[num_order++] = m++;
    for (int64_t j = 0; j < plain; j++) b->mb_order[num_order++] = dcp__balanced_new_mb(b, plain_cap);
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
        int k = dcp__balanced_class_of(b->g_cp[g]);
        b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
        dcp__balanced_heap_push(b->heap + class_offset[k], &heap_size[k], g, b->g_key[g],
                                dcp__balanced_entry_room(b, g));
    }
    int32_t ptr_new[NUM_CLASSES] = {0};
    uint32_t present = 0; /* classes with sequences: only their heaps can be non-empty */
    for (int k = 0; k < NUM_CLASSES; k++)
        if (class_offset[k + 1] > class_offset[k]) present |= 1u << k;
    for (int32_t j = 0; j < n; j++) {
        int32_t p = b->order[j], c = b->cp[p], s = b->len[p];
        if (b->item_group[p] >= 0) continue;
        int64_t h = b->cost[p], room_limit = (int64_t)M * c;
        int k = dcp__balanced_class_of(c);
        heap_entry *heap = b->heap + class_offset[k], *park = b->park + class_offset[k];
        while (park_size[k] > 0 && -park[0].key >= s) {
            int32_t g = dcp__balanced_heap_pop(park, &park_size[k]);
            dcp__balanced_heap_push(heap, &heap_size[k], g, b->g_key[g], dcp__balanced_entry_room(b, g));
        }
        int32_t g = -1;
        while (heap_size[k] > 0) {
            int32_t top = heap[0].id;
            if (s <= heap[0].room) { /* room_limit - tokens, kept in the entry */
                g = top;
                break;
            }
            dcp__balanced_heap_pop(heap, &heap_size[k]);
            dcp__balanced_heap_push(park, &park_size[k], top, b->g_tokens[top] - room_limit, 0);
        }
        while (ptr_new[k] < num_order && b->mb_free[b->mb_order[ptr_new[k]]] < c) ptr_new[k]++;
        int32_t fresh = ptr_new[k] < num_order ? b->mb_order[ptr_new[k]] : -1;
        /*
         * A wider group with room under its cap may take the sequence at its
         * size, for a bounded extra cost; beyond that bound only when the
         * alternative is a new microbatch, which costs more.
         */
        const __int128 allowance = (__int128)c * h * (b->join_den + b->join_num); /* as in the sequential pass */
        int wide_class = -1, any_class = -1;
        int32_t wide_at = 0, any_at = 0;
        int64_t wide_cost = 0, wide_after = INT64_MAX, any_cost = 0, any_after = INT64_MAX;
        /* a wider class surely over the allowance matters only as the last resort before a new microbatch */
        const int last_resort = fresh < 0 && g < 0;
        for (uint32_t wider = present >> (k + 1), k2 = (uint32_t)k + 1; wider; wider >>= 1, k2++) {
            if (!(wider & 1u)) continue;
            if (!last_resort && c == 1 && h < b->join_below[k2]) continue;
            int32_t at = dcp__balanced_wide_candidate(b, b->heap + class_offset[k2], heap_size[k2],
                                                      b->park + class_offset[k2], park_size[k2], s);
            if (at == WIDE_NONE) continue;
            int32_t top = at >= 0 ? b->heap[class_offset[k2] + at].id : b->park[class_offset[k2]].id, c2 = b->g_cp[top];
            int64_t h2 = dcp__balanced_join_cost(b, (int)k2, s, c2);
            int64_t after = dcp__balanced_sat_add(b->g_key[top], h2);
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
            (any_after < 0 ? 0 : any_after) < dcp__balanced_sat_add(h, b->model->microbatch_overhead)) {
            wide_class = any_class;
            wide_at = any_at;
            wide_cost = any_cost;
            wide_after = any_after;
        }
        int64_t fresh_after = fresh >= 0 ? h - b->mb_cap[fresh] : INT64_MAX;
        int64_t same_after = g >= 0 ? dcp__balanced_sat_add(b->g_key[g], h) : INT64_MAX;
        if (fresh >= 0 && fresh_after <= same_after && fresh_after <= wide_after) {
            g = dcp__balanced_new_group(b, fresh, c);
            dcp__balanced_group_add(b, g, p, h);
            b->g_key[g] = h - b->mb_cap[fresh];
            if (b->seq_cap != 1)
                dcp__balanced_heap_push(heap, &heap_size[k], g, b->g_key[g], dcp__balanced_entry_room(b, g));
        } else if (g >= 0 && same_after <= wide_after) {
            dcp__balanced_group_add(b, g, p, h);
            b->g_key[g] = b->g_load[g] - b->mb_cap[b->g_mb[g]];
            if (b->seq_cap > 0 && b->g_count[g] >= b->seq_cap) dcp__balanced_heap_pop(heap, &heap_size[k]);
            else dcp__balanced_heap_rekey_top(heap, heap_size[k], b->g_key[g], dcp__balanced_entry_room(b, g));
        } else if (wide_class >= 0) {
            g = dcp__balanced_wide_join(b, b->heap + class_offset[wide_class], &heap_size[wide_class],
                                        b->park + class_offset[wide_class], &park_size[wide_class], wide_at, p,
                                        wide_cost, 1);
        } else {
            int32_t grown = dcp__balanced_new_mb(b, plain_cap);
            b->mb_order[num_order++] = grown;
            g = dcp__balanced_new_group(b, grown, c);
            dcp__balanced_group_add(b, g, p, h);
            b->g_key[g] = h - plain_cap;
            if (b->seq_cap != 1)
                dcp__balanced_heap_push(heap, &heap_size[k], g, b->g_key[g], dcp__balanced_entry_room(b, g));
        }
    }

    return dcp__balanced_finish_pass(b, merge_down);
}
