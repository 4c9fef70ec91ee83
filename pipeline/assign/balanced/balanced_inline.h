/*
 * balanced_inline.h - the `balanced` scheduler's hot small helpers, static
 * inline so that every phase's file inlines them: a 128-bit ceiling division
 * (the saturations are core/int128.h's), the CP-size classes, the 4-ary
 * heaps, and the building blocks of groups and microbatches (they write
 * balanced_pass and read balanced_problem; the join cost remembers its last
 * length in balanced_work).
 */
#ifndef DCP_BALANCED_INLINE_H
#define DCP_BALANCED_INLINE_H

#include "balanced_state.h"

#include <string.h>

/* ---- numbers ---- */

/* a / d rounded up, for d > 0, saturated to [0, INT64_MAX] */
static inline int64_t dcp__balanced_ceil_div128(dcp__i128 a, dcp__i128 d)
{
    return dcp__i128_saturate(a <= 0 ? 0 : (a + d - 1) / d);
}

/* ---- CP-size classes ---- */

static inline int dcp__balanced_class_of(int32_t cp)
{
    if (cp & (cp - 1)) return FULL_CLASS; /* all N ranks, N not a power of two */
    return cp > 0 ? __builtin_ctz((uint32_t)cp) : 0;
}

/* The next CP size after cp on num_ranks ranks: double, or all ranks; 0 when cp is already all of them. */
static inline int32_t dcp__balanced_next_size(int32_t cp, int32_t num_ranks)
{
    if (cp >= num_ranks) return 0;
    return (int64_t)cp * 2 <= num_ranks ? cp * 2 : num_ranks;
}

static inline int32_t dcp__balanced_class_size(const balanced *b, int k)
{
    return k == FULL_CLASS ? b->in.num_ranks : (int32_t)1 << k;
}

/* 1 if class k is a group size on this many ranks. */
static inline int dcp__balanced_class_valid(const balanced *b, int k)
{
    if (k == FULL_CLASS) return (b->in.num_ranks & (b->in.num_ranks - 1)) != 0;
    return ((int64_t)1 << k) <= b->in.num_ranks;
}

/* ---- 4-ary min-heaps of (key, id); equal keys in heap order (deterministic, as every operation is) ---- */

static inline int dcp__balanced_entry_less(heap_entry a, heap_entry b) { return a.key < b.key; }

/* 4-ary: half the levels of a binary heap; the four children's compares are independent. */
static inline void dcp__balanced_heap_sift_down(heap_entry *h, int32_t size, int32_t i)
{
    heap_entry x = h[i];
    for (;;) {
        int32_t c = 4 * i + 1;
        if (c >= size) break;
        /*
         * The first least child, chosen by selects rather than branches: which
         * child wins is data-dependent and mispredicted about half the time.
         */
        int32_t best = c;
        int64_t best_key = h[c].key;
        if (c + 4 <= size) {
            /* a full node (nearly always): the pairs (c, c+1) and (c+2, c+3) first, independent of each other */
            const int64_t k1 = h[c + 1].key, k2 = h[c + 2].key, k3 = h[c + 3].key;
            const int less01 = k1 < best_key, less23 = k3 < k2;
            const int32_t b01 = less01 ? c + 1 : c, b23 = less23 ? c + 3 : c + 2;
            const int64_t m01 = less01 ? k1 : best_key, m23 = less23 ? k3 : k2;
            const int right = m23 < m01; /* ties: the left pair's, so the first least child wins as before */
            best = right ? b23 : b01;
            best_key = right ? m23 : m01;
        } else {
            for (int32_t j = c + 1; j < size; j++) {
                int64_t k = h[j].key;
                int less = k < best_key;
                best = less ? j : best;
                best_key = less ? k : best_key;
            }
        }
        if (!(best_key < x.key)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

/* x moved up from slot i to its place (h[i] is free); returns that place. */
static inline int32_t dcp__balanced_heap_sift_up(heap_entry *h, int32_t i, heap_entry x)
{
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (!dcp__balanced_entry_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
    return i;
}

static inline void dcp__balanced_heap_push(heap_entry *h, int32_t *size, int32_t id, int64_t key, int32_t room)
{
    heap_entry x = {key, id, room};
    dcp__balanced_heap_sift_up(h, (*size)++, x);
}

static inline int32_t dcp__balanced_heap_pop(heap_entry *h, int32_t *size)
{
    int32_t top = h[0].id;
    h[0] = h[--(*size)];
    if (*size > 0) dcp__balanced_heap_sift_down(h, *size, 0);
    return top;
}

/* The entry at i was replaced: move it up or down to its place. */
static inline void dcp__balanced_heap_fix(heap_entry *h, int32_t size, int32_t i)
{
    i = dcp__balanced_heap_sift_up(h, i, h[i]);
    dcp__balanced_heap_sift_down(h, size, i);
}

/* The root's key changed to `key` (its room to `room`): restore the order. */
static inline void dcp__balanced_heap_rekey_top(heap_entry *h, int32_t size, int64_t key, int32_t room)
{
    h[0].key = key;
    h[0].room = room;
    dcp__balanced_heap_sift_down(h, size, 0);
}

/* ---- groups and microbatches ---- */

static inline int32_t dcp__balanced_new_mb(balanced *b, int64_t cap)
{
    int32_t m = b->pass.num_mbs++;
    b->pass.mb_free[m] = b->in.num_ranks;
    b->pass.mb_cap[m] = cap;
    return m;
}

static inline int32_t dcp__balanced_new_group(balanced *b, int32_t mb, int32_t cp)
{
    int32_t g = b->pass.num_free_groups > 0 ? b->pass.free_groups[--b->pass.num_free_groups] : b->pass.num_groups++;
    b->pass.g_mb[g] = mb;
    b->pass.g_cp[g] = cp;
    b->pass.g_head[g] = -1;
    b->pass.g_tail[g] = -1;
    b->pass.g_count[g] = 0;
    b->pass.g_load[g] = 0;
    b->pass.g_tokens[g] = 0;
    b->pass.mb_free[mb] -= cp;
    return g;
}

static inline void dcp__balanced_group_add(balanced *b, int32_t g, int32_t p, int64_t cost)
{
    b->pass.item_group[p] = g;
    b->pass.item_next[p] = -1;
    if (b->pass.g_tail[g] < 0) b->pass.g_head[g] = p;
    else b->pass.item_next[b->pass.g_tail[g]] = p;
    b->pass.g_tail[g] = p;
    b->pass.g_count[g]++;
    b->pass.g_load[g] = dcp__sat_add_i64(b->pass.g_load[g], cost);
    b->pass.g_tokens[g] += b->in.len[p];
}

/* A group's free tokens for a heap entry: saturated to int32 (lengths are int32), -1 at the sequence cap. */
static inline int32_t dcp__balanced_entry_room(const balanced *b, int32_t g)
{
    if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) return -1;
    int64_t room = (int64_t)b->in.max_seqlen * b->pass.g_cp[g] - b->pass.g_tokens[g];
    return room > INT32_MAX ? INT32_MAX : room < -1 ? -1 : (int32_t)room;
}

/* dcp__cost() of s tokens at class k2's size c2, remembered per class for the next sequence of the same length. */
static inline int64_t dcp__balanced_join_cost(balanced *b, int k2, int32_t s, int32_t c2)
{
    if (b->work.join_len[k2] != s) {
        b->work.join_len[k2] = s;
        b->work.join_cost[k2] = dcp__cost(b->in.model, s, c2);
    }
    return b->work.join_cost[k2];
}

/*
 * A group of a wider class that has token (and count) room for a sequence of
 * s tokens: among the first entries of the class's heap (the least loaded,
 * roughly) the first with room, as its index; else the parked group with the
 * most free tokens, as WIDE_PARKED; else WIDE_NONE.
 */
enum { WIDE_NONE = -2, WIDE_PARKED = -1 };
static inline int32_t dcp__balanced_wide_candidate(const balanced *b, const heap_entry *heap, int32_t heap_size,
                                                   const heap_entry *park, int32_t park_size, int32_t s)
{
    int32_t look = heap_size < 8 ? heap_size : 8;
    for (int32_t x = 0; x < look; x++)
        if (heap[x].room >= s) return x; /* tokens + s <= M * cp, under the sequence cap */
    if (park_size > 0 && -park[0].key >= s && (b->in.seq_cap == 0 || b->pass.g_count[park[0].id] < b->in.seq_cap))
        return WIDE_PARKED;
    return WIDE_NONE;
}

#endif /* DCP_BALANCED_INLINE_H */
