/*
 * balanced_lpt.c - the LPT construction pass for a target of K microbatches:
 * tall and wide sequences shelved first-fit, then the rest, longest-
 * processing-time first, where their group ends lowest against its
 * microbatch's cap.
 *
 * State: reads in and the sizes its choice writes; writes pass (groups,
 * microbatches) and work's heaps, then finish's state through
 * dcp__balanced_finish_pass().
 */
#include "balanced_internal.h"

/*
 * The placement of the rest: each class's heap and park (partitions of
 * b->work.heap and b->work.park by class_offset) and their sizes, each class's first
 * microbatch in mb_order that may still have free ranks for it, the classes
 * with sequences, and the microbatches in cap order with the plain ones' cap.
 */
typedef struct lpt_state {
    int32_t class_offset[NUM_CLASSES + 1];
    int32_t heap_size[NUM_CLASSES], park_size[NUM_CLASSES];
    int32_t ptr_new[NUM_CLASSES];
    uint32_t present; /* classes with sequences: only their heaps can be non-empty */
    int32_t num_order;
    int64_t plain_cap;
} lpt_state;

/* A wider group's offer for a sequence: its class (-1: none), its place (wide_candidate), its cost there, its key after. */
typedef struct wide_offer {
    int k;
    int32_t at;
    int64_t cost, after;
} wide_offer;

/*
 * Shelves, first-fit in decreasing cost order: tall sequences, and every
 * sequence wider than the narrowest CP size in use (its group's ranks can
 * hold nothing narrower, so it should sit beside groups of like cost).
 * Returns how many microbatches they opened.
 */
static int32_t shelve(balanced *b, int64_t level)
{
    const int32_t n = b->in.n;
    int32_t narrowest = b->in.num_ranks;
    for (int32_t p = 0; p < n; p++) {
        if (b->pass.cp[p] < narrowest) narrowest = b->pass.cp[p];
        b->pass.item_group[p] = -1;
    }
    int32_t ptr[NUM_CLASSES] = {0};
    for (int32_t i = 0; i < n; i++) {
        int32_t p = b->pass.order[i], c = b->pass.cp[p];
        if (b->pass.cost[p] <= level && c == narrowest) continue;
        int k = dcp__balanced_class_of(c);
        while (ptr[k] < b->pass.num_mbs && b->pass.mb_free[ptr[k]] < c) ptr[k]++;
        int32_t m = ptr[k] < b->pass.num_mbs ? ptr[k] : dcp__balanced_new_mb(b, b->pass.cost[p]);
        dcp__balanced_group_add(b, dcp__balanced_new_group(b, m, c), p, b->pass.cost[p]);
    }
    return b->pass.num_mbs;
}

/*
 * Plain microbatches: enough for the target count and for the tokens the
 * shelves cannot take, at the cap that spreads the rest's work over them;
 * then mb_order, the shelves above that cap, the plain ones, the other shelves.
 */
static void open_plain(balanced *b, lpt_state *st, int64_t target_mbs, int32_t shelves, int64_t level)
{
    const int32_t n = b->in.n, N = b->in.num_ranks;
    const int64_t M = b->in.max_seqlen;
    dcp__i128 rest_work = 0, room_work = 0;
    int64_t rest_tokens = 0, room_tokens = 0, rest_count = 0;
    for (int32_t p = 0; p < n; p++) {
        if (b->pass.item_group[p] >= 0) continue;
        rest_work += (dcp__i128)b->pass.cp[p] * b->pass.cost[p];
        rest_tokens += b->in.len[p];
        rest_count++;
    }
    for (int32_t m = 0; m < shelves; m++) {
        room_work += (dcp__i128)b->pass.mb_free[m] * b->pass.mb_cap[m];
        room_tokens += (int64_t)b->pass.mb_free[m] * M;
    }
    for (int32_t g = 0; g < b->pass.num_groups; g++) room_tokens += (int64_t)b->pass.g_cp[g] * M - b->pass.g_tokens[g];
    int64_t plain = target_mbs - shelves;
    int64_t need = dcp__balanced_ceil_div128((dcp__i128)rest_tokens - room_tokens, (dcp__i128)N * M);
    if (plain < need) plain = need;
    if (plain > rest_count) plain = rest_count;
    int64_t plain_cap = level;
    if (plain > 0 && rest_work > room_work)
        plain_cap = dcp__balanced_ceil_div128(rest_work - room_work, (dcp__i128)plain * N);
    int32_t num_order = 0, m = 0;
    while (m < shelves && b->pass.mb_cap[m] >= plain_cap) b->pass.mb_order[num_order++] = m++;
    for (int64_t j = 0; j < plain; j++) b->pass.mb_order[num_order++] = dcp__balanced_new_mb(b, plain_cap);
    while (m < shelves) b->pass.mb_order[num_order++] = m++;
    st->num_order = num_order;
    st->plain_cap = plain_cap;
}

/* The shelves' groups with count room into their class's heap, by load minus cap; which classes have sequences. */
static void seed_heaps(balanced *b, lpt_state *st)
{
    for (int k = 0; k < NUM_CLASSES; k++) st->heap_size[k] = st->park_size[k] = st->ptr_new[k] = 0;
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) continue;
        int k = dcp__balanced_class_of(b->pass.g_cp[g]);
        b->pass.g_key[g] = b->pass.g_load[g] - b->pass.mb_cap[b->pass.g_mb[g]];
        dcp__balanced_heap_push(b->work.heap + st->class_offset[k], &st->heap_size[k], g, b->pass.g_key[g],
                                dcp__balanced_entry_room(b, g));
    }
    st->present = 0;
    for (int k = 0; k < NUM_CLASSES; k++)
        if (st->class_offset[k + 1] > st->class_offset[k]) st->present |= 1u << k;
}

/*
 * The least loaded group of class k with token room for s tokens (-1: none).
 * A group without room for the current length is parked (a heap by free
 * tokens) until lengths in its class (which only decrease) fit it again, so
 * each group is parked at most once per sequence it receives.
 */
static int32_t same_class_group(balanced *b, lpt_state *st, int k, int32_t s, int64_t room_limit)
{
    heap_entry *heap = b->work.heap + st->class_offset[k], *park = b->work.park + st->class_offset[k];
    while (st->park_size[k] > 0 && -park[0].key >= s) {
        int32_t g = dcp__balanced_heap_pop(park, &st->park_size[k]);
        dcp__balanced_heap_push(heap, &st->heap_size[k], g, b->pass.g_key[g], dcp__balanced_entry_room(b, g));
    }
    while (st->heap_size[k] > 0) {
        int32_t top = heap[0].id;
        if (s <= heap[0].room) return top; /* room_limit - tokens, kept in the entry */
        dcp__balanced_heap_pop(heap, &st->heap_size[k]);
        dcp__balanced_heap_push(park, &st->park_size[k], top, b->pass.g_tokens[top] - room_limit, 0);
    }
    return -1;
}

/*
 * The wider groups that could take a sequence of class k (size c, per-rank
 * cost h, s tokens) at their size: the lowest within the allowance (*wide)
 * and the lowest of any (*any).  A wider class surely over the allowance
 * matters only as the last resort before a new microbatch.
 */
static void wider_offers(balanced *b, const lpt_state *st, int k, int32_t c, int64_t h, int32_t s, int last_resort,
                         wide_offer *wide, wide_offer *any)
{
    const dcp__i128 allowance = (dcp__i128)c * h * (b->in.join_den + b->in.join_num); /* as in the sequential pass */
    *wide = (wide_offer){-1, 0, 0, INT64_MAX};
    *any = (wide_offer){-1, 0, 0, INT64_MAX};
    for (uint32_t wider = st->present >> (k + 1), k2 = (uint32_t)k + 1; wider; wider >>= 1, k2++) {
        if (!(wider & 1u)) continue;
        if (!last_resort && c == 1 && h < b->in.join_below[k2]) continue;
        const int32_t off = st->class_offset[k2];
        int32_t at = dcp__balanced_wide_candidate(b, b->work.heap + off, st->heap_size[k2], b->work.park + off,
                                                  st->park_size[k2], s);
        if (at == WIDE_NONE) continue;
        int32_t top = at >= 0 ? b->work.heap[off + at].id : b->work.park[off].id, c2 = b->pass.g_cp[top];
        int64_t h2 = dcp__balanced_join_cost(b, (int)k2, s, c2);
        int64_t after = dcp__sat_add_i64(b->pass.g_key[top], h2);
        if (after < any->after) *any = (wide_offer){(int)k2, at, h2, after};
        if ((dcp__i128)((int64_t)c2 * b->in.join_den) * h2 > allowance) continue;
        if (after < wide->after) *wide = (wide_offer){(int)k2, at, h2, after};
    }
}

/* A new group of size c for sequence p in microbatch m of cap `cap`, in class k's heap while it may take more. */
static void open_group(balanced *b, lpt_state *st, int k, int32_t m, int64_t cap, int32_t p, int32_t c, int64_t h)
{
    int32_t g = dcp__balanced_new_group(b, m, c);
    dcp__balanced_group_add(b, g, p, h);
    b->pass.g_key[g] = h - cap;
    if (b->in.seq_cap != 1)
        dcp__balanced_heap_push(b->work.heap + st->class_offset[k], &st->heap_size[k], g, b->pass.g_key[g],
                                dcp__balanced_entry_room(b, g));
}

/*
 * Sequence p where its group ends lowest against its microbatch's cap: free
 * ranks of the highest cap, the least loaded group of its size with room,
 * or a wider group with room under its cap, which may take it at its size
 * for a bounded extra cost, beyond that bound only when the alternative is a
 * new microbatch, which costs more; else a new microbatch.
 */
static void place_sequence(balanced *b, lpt_state *st, int32_t p)
{
    const int32_t c = b->pass.cp[p], s = b->in.len[p];
    const int64_t h = b->pass.cost[p], room_limit = (int64_t)b->in.max_seqlen * c;
    const int k = dcp__balanced_class_of(c);
    heap_entry *heap = b->work.heap + st->class_offset[k];
    int32_t g = same_class_group(b, st, k, s, room_limit);
    while (st->ptr_new[k] < st->num_order && b->pass.mb_free[b->pass.mb_order[st->ptr_new[k]]] < c) st->ptr_new[k]++;
    const int32_t fresh = st->ptr_new[k] < st->num_order ? b->pass.mb_order[st->ptr_new[k]] : -1;
    wide_offer wide, any;
    wider_offers(b, st, k, c, h, s, fresh < 0 && g < 0, &wide, &any);
    if (fresh < 0 && g < 0 && wide.k < 0 && any.k >= 0 &&
        (any.after < 0 ? 0 : any.after) < dcp__sat_add_i64(h, b->in.model->microbatch_overhead))
        wide = any;
    const int64_t fresh_after = fresh >= 0 ? h - b->pass.mb_cap[fresh] : INT64_MAX;
    const int64_t same_after = g >= 0 ? dcp__sat_add_i64(b->pass.g_key[g], h) : INT64_MAX;
    if (fresh >= 0 && fresh_after <= same_after && fresh_after <= wide.after) {
        open_group(b, st, k, fresh, b->pass.mb_cap[fresh], p, c, h);
    } else if (g >= 0 && same_after <= wide.after) {
        dcp__balanced_group_add(b, g, p, h);
        b->pass.g_key[g] = b->pass.g_load[g] - b->pass.mb_cap[b->pass.g_mb[g]];
        if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) dcp__balanced_heap_pop(heap, &st->heap_size[k]);
        else dcp__balanced_heap_rekey_top(heap, st->heap_size[k], b->pass.g_key[g], dcp__balanced_entry_room(b, g));
    } else if (wide.k >= 0) {
        dcp__balanced_wide_join(b, b->work.heap + st->class_offset[wide.k], &st->heap_size[wide.k],
                                b->work.park + st->class_offset[wide.k], &st->park_size[wide.k], wide.at, p, wide.cost, 1);
    } else {
        int32_t grown = dcp__balanced_new_mb(b, st->plain_cap);
        b->pass.mb_order[st->num_order++] = grown;
        open_group(b, st, k, grown, st->plain_cap, p, c, h);
    }
}

/*
 * LPT pass for a target of `target_mbs` microbatches at the allowance
 * widen_num / widen_den: shelves, plain microbatches, then the rest by
 * decreasing cost, and the common end (dcp__balanced_finish_pass()).
 * Returns the plan's makespan, or -1 (no plan, or its CP sizes repeat an
 * earlier pass at this target).
 */
int64_t dcp__balanced_lpt_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den, int merge_down)
{
    const int32_t N = b->in.num_ranks;
    lpt_state st;
    b->pass.num_groups = 0;
    b->pass.num_free_groups = 0;
    b->pass.num_mbs = 0;

    int64_t level = dcp__balanced_ceil_div128(b->in.min_work, (dcp__i128)target_mbs * N);
    uint64_t signature;
    dcp__i128 work = dcp__balanced_choose_sizes(b, level, widen_num, widen_den, st.class_offset, &signature, 1);
    if (!merge_down && dcp__balanced_seen_before(b, 0, target_mbs, signature)) return -1;
    level = dcp__balanced_ceil_div128(work, (dcp__i128)target_mbs * N);

    const int32_t shelves = shelve(b, level);
    open_plain(b, &st, target_mbs, shelves, level);
    /* the rest: LPT against each microbatch's cap */
    seed_heaps(b, &st);
    for (int32_t j = 0; j < b->in.n; j++) {
        int32_t p = b->pass.order[j];
        if (b->pass.item_group[p] < 0) place_sequence(b, &st, p);
    }
    return dcp__balanced_finish_pass(b, merge_down);
}
