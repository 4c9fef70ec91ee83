/*
 * balanced_sequential.c - the sequential construction pass: microbatches one
 * after another, each filled to its token capacity with sequences of like
 * length.  The open microbatch keeps per-class heaps of its groups and a max
 * tree of their free tokens (the room tree), so the walk skips at once what
 * no group has room for.
 *
 * State: reads in; writes pass and work (heaps, room tree, alive_next,
 * g_slot), then finish's state through dcp__balanced_finish_pass().
 */
#include "balanced_internal.h"

/* Next unplaced position at or after p (n when none), compressing the path. */
static int32_t alive_find(int32_t *next, int32_t p)
{
    int32_t root = p;
    while (next[root] != root) root = next[root];
    while (next[p] != root) {
        int32_t up = next[p];
        next[p] = root;
        p = up;
    }
    return root;
}

typedef struct open_mb {
    int32_t m;
    int32_t heap_size[NUM_CLASSES], park_size[NUM_CLASSES];
    int32_t num_slots;      /* the microbatch's groups, in room_tree leaves 0.. in creation order */
    const int32_t *class_offset;
    uint32_t present;
} open_mb;

/* Free tokens of a group for one more sequence (0 when its sequence count is at the cap). */
static int64_t group_room(const balanced *b, int32_t g)
{
    if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) return 0;
    return (int64_t)b->pass.g_cp[g] * b->in.max_seqlen - b->pass.g_tokens[g];
}

/* A group's free tokens changed (or it is new): update its leaf of the max tree over the microbatch's groups. */
static void open_room_moved(balanced *b, open_mb *o, int32_t g, int64_t before)
{
    if (before < 0) b->work.g_slot[g] = o->num_slots++;
    int64_t *tree = b->work.room_tree;
    int32_t i = b->work.room_leaves + b->work.g_slot[g];
    int64_t v = group_room(b, g);
    tree[i] = v;
    /*
     * To the root without an early exit (a fixed, branch-free walk beats a
     * mispredicted stop), carrying the running maximum: each level reads only
     * the sibling, never a node just written.
     */
    for (; i > 1; i >>= 1) {
        int64_t sibling = tree[i ^ 1];
        v = v > sibling ? v : sibling;
        tree[i >> 1] = v;
    }
}

/*
 * The longest sequence of class k the open microbatch might still take: a new
 * group on its free ranks, or the most free tokens of any group (exact).
 */
static int64_t open_room(balanced *b, open_mb *o, int k)
{
    int64_t room = b->work.room_tree[1];
    int32_t f = b->pass.mb_free[o->m];
    if (f >= b->in.min_cp_size && f >= dcp__balanced_class_size(b, k)) {
        /* all ranks, or the largest power of two within them */
        int32_t size = f == b->in.num_ranks ? f : (int32_t)(1u << (31 - __builtin_clz((uint32_t)f)));
        if ((int64_t)size * b->in.max_seqlen > room) room = (int64_t)size * b->in.max_seqlen;
    }
    return room;
}

/* Place sequence p in the open microbatch where its group's load ends lowest; 0 when it fits nowhere. */
static int open_place(balanced *b, open_mb *o, int32_t p)
{
    const int64_t M = b->in.max_seqlen;
    const int32_t c = b->pass.cp[p], s = b->in.len[p];
    const int64_t h = b->pass.cost[p];
    const int k = dcp__balanced_class_of(c);
    heap_entry *heap = b->work.heap + o->class_offset[k], *park = b->work.park + o->class_offset[k];
    while (o->park_size[k] > 0 && -park[0].key >= s) {
        int32_t g = dcp__balanced_heap_pop(park, &o->park_size[k]);
        dcp__balanced_heap_push(heap, &o->heap_size[k], g, b->pass.g_key[g], dcp__balanced_entry_room(b, g));
    }
    int32_t same = -1;
    while (o->heap_size[k] > 0) {
        int32_t top = heap[0].id;
        if (s <= heap[0].room) { /* the entry's room is the group's c * M - tokens, kept with it */
            same = top;
            break;
        }
        dcp__balanced_heap_pop(heap, &o->heap_size[k]);
        dcp__balanced_heap_push(park, &o->park_size[k], top, b->pass.g_tokens[top] - (int64_t)c * M, 0);
    }
    int wide_class = -1;
    int32_t wide_at = 0;
    int64_t wide_cost = 0, wide_after = INT64_MAX;
    /* free ranks take the sequence at its own size: a wider group only matters when there are none */
    const int fresh_possible = b->pass.mb_free[o->m] >= c;
    /* GPU time a wider group may spend on the sequence: c * h * (1 + join_num / join_den), times join_den */
    const dcp__i128 allowance = (dcp__i128)c * h * (b->in.join_den + b->in.join_num);
    for (uint32_t wider = fresh_possible ? 0 : o->present >> (k + 1), k2 = (uint32_t)k + 1; wider; wider >>= 1, k2++) {
        if (!(wider & 1u)) continue;
        if (c == 1 && h < b->in.join_below[k2]) continue; /* over the allowance for sure */
        int32_t at = dcp__balanced_wide_candidate(b, b->work.heap + o->class_offset[k2], o->heap_size[k2],
                                                  b->work.park + o->class_offset[k2], o->park_size[k2], s);
        if (at == WIDE_NONE) continue;
        const int32_t off = o->class_offset[k2];
        int32_t g = at >= 0 ? b->work.heap[off + at].id : b->work.park[off].id, c2 = b->pass.g_cp[g];
        int64_t h2 = dcp__balanced_join_cost(b, (int)k2, s, c2);
        if ((dcp__i128)((int64_t)c2 * b->in.join_den) * h2 > allowance) continue;
        int64_t after = dcp__sat_add_i64(b->pass.g_load[g], h2);
        if (after < wide_after) {
            wide_after = after;
            wide_class = (int)k2;
            wide_at = at;
            wide_cost = h2;
        }
    }
    int64_t fresh_after = fresh_possible ? h : INT64_MAX;
    int64_t same_after = same >= 0 ? dcp__sat_add_i64(b->pass.g_load[same], h) : INT64_MAX;
    int32_t g;
    if (fresh_after != INT64_MAX && fresh_after <= same_after && fresh_after <= wide_after) {
        g = dcp__balanced_new_group(b, o->m, c);
        dcp__balanced_group_add(b, g, p, h);
        b->pass.g_key[g] = b->pass.g_load[g];
        open_room_moved(b, o, g, -1);
        if (b->in.seq_cap != 1)
            dcp__balanced_heap_push(heap, &o->heap_size[k], g, b->pass.g_key[g], dcp__balanced_entry_room(b, g));
    } else if (same >= 0 && same_after <= wide_after) {
        g = same;
        int64_t before = group_room(b, g);
        dcp__balanced_group_add(b, g, p, h);
        b->pass.g_key[g] = b->pass.g_load[g];
        if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) dcp__balanced_heap_pop(heap, &o->heap_size[k]);
        else dcp__balanced_heap_rekey_top(heap, o->heap_size[k], b->pass.g_key[g], dcp__balanced_entry_room(b, g));
        open_room_moved(b, o, g, before);
    } else if (wide_class >= 0) {
        heap_entry *wide_heap = b->work.heap + o->class_offset[wide_class];
        heap_entry *wide_park = b->work.park + o->class_offset[wide_class];
        int64_t before = group_room(b, wide_at >= 0 ? wide_heap[wide_at].id : wide_park[0].id);
        g = dcp__balanced_wide_join(b, wide_heap, &o->heap_size[wide_class], wide_park, &o->park_size[wide_class],
                                    wide_at, p, wide_cost, 0);
        open_room_moved(b, o, g, before);
    } else {
        return 0;
    }
    return 1;
}

/*
 * Sequential pass: open a microbatch, walk the unplaced sequences longest
 * first and put each where its group's load ends lowest (a new group on free
 * ranks, the least loaded group of its size, or a wider group within the
 * allowance), skipping those too long for any remaining room; close the
 * microbatch when nothing more fits and open the next.  Microbatches come out
 * full of tokens, each of sequences of like length.
 */
int64_t dcp__balanced_sequential_pass(balanced *b, int64_t target_mbs, int64_t widen_num, int64_t widen_den,
                                      int merge_down)
{
    const int32_t n = b->in.n, N = b->in.num_ranks;
    int32_t class_offset[NUM_CLASSES + 1];
    b->pass.num_groups = 0;
    b->pass.num_free_groups = 0;
    b->pass.num_mbs = 0;
    uint64_t signature;
    dcp__balanced_choose_sizes(b, dcp__balanced_ceil_div128(b->in.min_work, (dcp__i128)target_mbs * N), widen_num,
                               widen_den, class_offset, &signature, 0);
    if (!merge_down && dcp__balanced_seen_before(b, 1, 0, signature)) return -1;
    open_mb o;
    memset(&o, 0, sizeof o);
    o.class_offset = class_offset;
    for (int k = 0; k < NUM_CLASSES; k++)
        if (class_offset[k + 1] > class_offset[k]) o.present |= 1u << k;
    /* unplaced sequences, per class in length order: indices into class_list, path-compressed */
    for (int32_t x = 0; x <= n; x++) b->work.alive_next[x] = x;
    /* lengths in class_list order (order is free in this pass): the scans below read one array, not two */
    int32_t *class_len = b->pass.order;
    for (int32_t x = 0; x < n; x++) class_len[x] = b->in.len[b->pass.class_list[x]];
    for (int32_t p = 0; p < n; p++) b->pass.item_group[p] = -1;
    for (int32_t left = n; left > 0;) {
        o.m = dcp__balanced_new_mb(b, 0);
        memset(o.heap_size, 0, sizeof o.heap_size);
        memset(o.park_size, 0, sizeof o.park_size);
        o.num_slots = 0;
        memset(b->work.room_tree, 0, (size_t)(2 * b->work.room_leaves) * sizeof *b->work.room_tree);
        int32_t head[NUM_CLASSES], misses[NUM_CLASSES];
        uint32_t open = 0;
        for (int k = 0; k < NUM_CLASSES; k++) {
            head[k] = alive_find(b->work.alive_next, class_offset[k]);
            misses[k] = 0;
            if (head[k] < class_offset[k + 1]) open |= 1u << k;
        }
        const int32_t placed_before = left;
        while (open) {
            /* the longest unplaced sequence of the classes still open (ties: the lower position) */
            int k = -1;
            int32_t p = 0, s = 0;
            for (uint32_t bits = open, j = 0; bits; bits >>= 1, j++) {
                if (!(bits & 1u)) continue;
                int32_t sq = class_len[head[j]];
                if (k < 0 || sq > s || (sq == s && b->pass.class_list[head[j]] < p)) {
                    k = (int)j;
                    s = sq;
                    p = b->pass.class_list[head[j]];
                }
            }
            int64_t room = open_room(b, &o, k);
            int32_t end = class_offset[k + 1];
            if (s > room) {
                /* lengths only fall along a class: jump to the first that fits the room */
                int32_t lo = head[k] + 1, span = end - lo;
                /* the answer is usually near: gallop to a bracket, then halve it */
                for (int32_t step = 1; step < span; step *= 2) {
                    if (class_len[lo + step - 1] <= room) {
                        span = step;
                        break;
                    }
                    lo += step;
                    span -= step;
                }
                while (span > 0) { /* branch-free: which half holds the answer is a coin toss */
                    int32_t half = span / 2;
                    int longer = class_len[lo + half] > room;
                    lo = longer ? lo + half + 1 : lo;
                    span = longer ? span - half - 1 : half;
                }
                head[k] = lo < end ? alive_find(b->work.alive_next, lo) : end;
            } else if (open_place(b, &o, p)) {
                /* the placed position points past itself, straight to the next unplaced one */
                const int32_t placed = head[k];
                head[k] = alive_find(b->work.alive_next, placed + 1);
                b->work.alive_next[placed] = head[k];
                left--;
                misses[k] = 0;
            } else {
                /* room enough, yet no place (sizes, caps, allowance): a class that keeps missing closes */
                if (++misses[k] >= 8) open &= ~(1u << k);
                head[k] = alive_find(b->work.alive_next, head[k] + 1);
            }
            if (head[k] >= end) open &= ~(1u << k);
        }
        if (left == placed_before) return -1; /* nothing fitted an empty microbatch: cannot happen */
    }
    return dcp__balanced_finish_pass(b, merge_down);
}
