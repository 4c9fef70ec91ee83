/*
 * dynamic_cp_place.c - one microbatch, as the reference builds it: the
 * tallest sequence left opens group 0, every later one that fits takes the
 * reference's option (the class trees find it without scanning groups or
 * ranks), the sequences that fit nowhere are skipped by a galloping search,
 * and the empty ranks are filled (dynamic_cp_fill.c) before the microbatch is
 * stored (dynamic_cp_blocks.c).
 */
#include "dynamic_cp_internal.h"

/* ---- class trees: per size class, a segment tree of its groups in creation order ---- */

/* Recompute node v from its children; 0 if it did not change (its ancestors need nothing). */
static int node_pull(dyn_node *t, int32_t v)
{
    const dyn_node *l = &t[2 * v], *r = &t[2 * v + 1];
    dyn_node x;
    x.tokens = l->tokens < r->tokens ? l->tokens : r->tokens;
    x.load = l->load < r->load ? l->load : r->load;
    x.fit = l->fit > r->fit ? l->fit : r->fit;
    x.count = l->count < r->count ? l->count : r->count;
    x.pad = 0;
    if (x.tokens == t[v].tokens && x.load == t[v].load && x.fit == t[v].fit && x.count == t[v].count) return 0;
    t[v] = x;
    return 1;
}

/*
 * Longest sequence group g (of class j) can still take.  Only tokens and the
 * count limit it: the load cap never does (see place()).
 */
static int64_t group_fit(const dyn_state *st, int32_t g, int32_t j)
{
    if (st->group_count[g] >= st->seq_cap) return 0;
    int64_t by_tokens = (st->per_rank << j) - st->group_tokens[g];
    return by_tokens > 0 ? by_tokens : 0;
}

static void tree_set(dyn_state *st, int32_t j, int32_t slot)
{
    dyn_node *t = st->nodes + st->tree_offset[j];
    int32_t g = st->slot_group[st->slot_offset[j] + slot];
    int32_t v = st->tree_leaves[j] + slot;
    t[v].tokens = st->group_tokens[g];
    t[v].load = st->group_load[g];
    t[v].count = st->group_count[g];
    t[v].fit = group_fit(st, g, j);
    for (v >>= 1; v >= 1; v >>= 1)
        if (!node_pull(t, v)) break;
}

/* Reset the used leaves [0, count) of class j and their ancestors. */
static void tree_clear(dyn_state *st, int32_t j)
{
    int32_t count = st->class_count[j];
    if (count == 0) return;
    dyn_node *t = st->nodes + st->tree_offset[j];
    int32_t lo = st->tree_leaves[j], hi = lo + count - 1;
    while (lo >= 1) {
        for (int32_t v = lo; v <= hi; v++) t[v] = dcp__dynamic_cp_empty_node();
        lo >>= 1;
        hi >>= 1;
    }
    st->class_count[j] = 0;
}

/* Leftmost group with tokens <= max_tokens, count < cap and load <= max_load. */
static int32_t tree_first_fit(const dyn_node *t, int32_t v, int32_t leaves, int64_t max_tokens, int32_t cap,
                              int64_t max_load)
{
    if (t[v].tokens > max_tokens || t[v].load > max_load || t[v].count >= cap) return -1;
    if (v >= leaves) return v - leaves;
    int32_t r = tree_first_fit(t, 2 * v, leaves, max_tokens, cap, max_load);
    if (r >= 0) return r;
    return tree_first_fit(t, 2 * v + 1, leaves, max_tokens, cap, max_load);
}

/* Least load < *bound among groups with tokens <= max_tokens and count < cap; lowers *bound. */
static void tree_least_load(const dyn_node *t, int32_t v, int32_t leaves, int64_t max_tokens, int32_t cap,
                            int64_t *bound)
{
    if (t[v].tokens > max_tokens || t[v].count >= cap || t[v].load >= *bound) return;
    if (v >= leaves) {
        *bound = t[v].load;
        return;
    }
    /* the child holding the smaller load first: its answer prunes the other one */
    int32_t a = 2 * v, b = 2 * v + 1;
    if (t[b].load < t[a].load) {
        a = b;
        b = 2 * v;
    }
    tree_least_load(t, a, leaves, max_tokens, cap, bound);
    tree_least_load(t, b, leaves, max_tokens, cap, bound);
}

/* ---- one microbatch ---- */

static int32_t open_group(dyn_state *st, int32_t j, int64_t tokens, int64_t load)
{
    int32_t g = st->num_groups++;
    int32_t slot = st->class_count[j]++;
    st->group_size[g] = (int32_t)1 << j;
    st->group_count[g] = 1;
    st->group_slot[g] = slot;
    st->group_tokens[g] = tokens;
    st->group_load[g] = load;
    st->free_rank += (int32_t)1 << j;
    st->slot_group[st->slot_offset[j] + slot] = g;
    if (load > st->max_load) st->max_load = load;
    tree_set(st, j, slot);
    return g;
}

static void add_to_group(dyn_state *st, int32_t g, int32_t j, int64_t tokens, int64_t load)
{
    st->group_tokens[g] += tokens;
    st->group_load[g] += load;
    st->group_count[g]++;
    if (st->group_load[g] > st->max_load) st->max_load = st->group_load[g];
    tree_set(st, j, st->group_slot[g]);
}

/*
 * Largest length some option accepts now.  A sequence of length s has an
 * option iff for some class c >= cp_min(s) (i.e. s <= c*M) a group of size c
 * has s more tokens of room (and count room), or c ranks are free; every
 * condition is monotone in s, so the sequences that fit are exactly those up
 * to this length.
 */
static int64_t placeable_length(const dyn_state *st)
{
    int64_t best = 0;
    const int32_t free_ranks = st->num_ranks - st->free_rank;
    for (int32_t j = st->log2_min_cp; j <= st->log2_pow2; j++) {
        int64_t fit = free_ranks >= ((int32_t)1 << j) ? st->per_rank << j : 0; /* a new group */
        if (st->class_count[j] > 0 && st->nodes[st->tree_offset[j] + 1].fit > fit)
            fit = st->nodes[st->tree_offset[j] + 1].fit; /* < c*M */
        if (fit > best) best = fit;
    }
    return best;
}

/*
 * The reference's choice for one sequence: options in order (c ascending; per
 * c the groups of size c in creation order, then a new group), value =
 * max(max_load, load + cost), the first smallest value <= cap.  Returns the
 * group, or -1 if no option fits.
 *
 * The cap never rejects an option: a group of size c with token room for s
 * holds sequences no longer than the tallest t, so load + s*s/c <= t * (its
 * tokens + s) / c <= t*M < cap, and a new group costs s*s/c <= s*M (c >= s/M).
 * The tests are kept so the decision reads as the reference's.
 */
static int32_t place(dyn_state *st, int32_t id)
{
    const int64_t s = st->lengths[id];
    const int64_t v0 = st->max_load;
    if (st->min_cp[id] > st->pow2_ranks) return -1; /* needs the full non-power-of-two group */
    int64_t best_value = INT64_MAX;
    int32_t best_class = -1, best_slot = -1; /* slot -1: a new group */
    int done = 0;
    for (int32_t j = dcp__dynamic_cp_log2_floor(st->min_cp[id]); j <= st->log2_pow2 && !done; j++) {
        const int64_t cost = dcp__dynamic_cp_load_of(st, s, j);
        if (cost > st->cap) continue;
        if (st->class_count[j] > 0) {
            const dyn_node *t = st->nodes + st->tree_offset[j];
            const int32_t leaves = st->tree_leaves[j];
            const int64_t max_tokens = (st->per_rank << j) - s;
            if (t[1].tokens <= max_tokens && t[1].count < st->seq_cap) {
                if (v0 >= cost) {
                    int32_t slot = tree_first_fit(t, 1, leaves, max_tokens, st->seq_cap, v0 - cost);
                    if (slot >= 0) { /* value == v0: nothing can be smaller, and this is the first */
                        best_class = j;
                        best_slot = slot;
                        best_value = v0;
                        break;
                    }
                }
                int64_t bound = st->cap - cost + 1; /* load + cost <= cap */
                if (best_value - cost < bound) bound = best_value - cost; /* strictly better */
                int32_t slot = -1;
                if (t[1].load < bound) {
                    int64_t least = bound;
                    tree_least_load(t, 1, leaves, max_tokens, st->seq_cap, &least);
                    /* the first group (creation order) with that least load */
                    if (least < bound) slot = tree_first_fit(t, 1, leaves, max_tokens, st->seq_cap, least);
                    bound = least;
                }
                if (slot >= 0) {
                    best_value = bound + cost;
                    best_class = j;
                    best_slot = slot;
                }
            }
        }
        if (st->num_ranks - st->free_rank >= ((int32_t)1 << j)) {
            int64_t value = cost > v0 ? cost : v0;
            if (value < best_value) {
                best_value = value;
                best_class = j;
                best_slot = -1;
                if (value == v0) done = 1;
            }
        }
    }
    if (best_class < 0) return -1;
    const int64_t cost = dcp__dynamic_cp_load_of(st, s, best_class);
    if (best_slot < 0) return open_group(st, best_class, s, cost);
    int32_t g = st->slot_group[st->slot_offset[best_class] + best_slot];
    add_to_group(st, g, best_class, s, cost);
    return g;
}

/* An empty microbatch: no groups, every rank free, the class trees cleared. */
static void reset_microbatch(dyn_state *st)
{
    for (int32_t j = st->log2_min_cp; j <= st->log2_pow2; j++) tree_clear(st, j);
    st->num_groups = 0;
    st->num_placed = 0;
    st->free_rank = 0;
    st->max_load = 0;
}

/*
 * Build the microbatch whose tallest sequence is at sorted position first_pos
 * (the first one unplaced) and store it.
 */
dcp_status dcp__dynamic_cp_next_microbatch(dyn_state *st, int32_t first_pos, dcp__error *err)
{
    const int32_t tall = st->sorted[first_pos];
    const int32_t c0 = st->min_cp[tall];
    reset_microbatch(st);
    if (c0 > st->pow2_ranks) {
        dcp__dynamic_cp_full_group_microbatch(st, first_pos);
        return dcp__dynamic_cp_store_microbatch(st, err);
    }
    const int64_t tall_len = st->lengths[tall];
    st->cap = (int64_t)(dcp__dynamic_cp_cap_times(tall_len, st->per_rank, st->pow2_ranks) >> st->load_shift);

    int32_t j0 = dcp__dynamic_cp_log2_floor(c0);
    int32_t g0 = open_group(st, j0, tall_len, dcp__dynamic_cp_load_of(st, tall_len, j0));
    st->placed_pos[0] = first_pos;
    st->placed_group[0] = g0;
    st->num_placed = 1;

    int32_t pos = first_pos;
    for (;;) {
        int64_t theta = placeable_length(st);
        /* first sorted position after pos with length <= theta (lengths are non-increasing): gallop, then bisect */
        int32_t lo = pos + 1, hi = lo, step = 1;
        while (hi < st->n && st->sorted_lengths[hi] > theta) {
            lo = hi + 1;
            hi = lo + step < st->n ? lo + step : st->n;
            step *= 2;
        }
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (st->sorted_lengths[mid] <= theta) hi = mid;
            else lo = mid + 1;
        }
        if (lo >= st->n) break;
        int32_t p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, lo);
        if (p >= st->n) break;
        int32_t g = place(st, st->sorted[p]);
        if (g < 0)
            return dcp__fail(err, DCP_ERR_INVALID_PLAN,
                            "dynamic_cp: internal error: sequence %d (length %d) within the placeable bound %lld "
                            "found no option", st->sorted[p], st->lengths[st->sorted[p]], (long long)theta);
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = g;
        pos = p;
    }
    if (!dcp__dynamic_cp_fill_empty_ranks(st)) dcp__dynamic_cp_full_group_fallback(st, first_pos);
    return dcp__dynamic_cp_store_microbatch(st, err);
}

/*
 * One rank (DPxCP = 1): every group is the whole rank and a microbatch holds
 * one, so the reference's options reduce to that group: each sequence, in
 * sorted order after the last one taken, that fits the tokens left (and the
 * sequence cap) joins it.  The decisions of next_microbatch (its placeable
 * length is the group's room, and place() always takes the group then),
 * without the class trees.
 */
dcp_status dcp__dynamic_cp_next_microbatch_one_rank(dyn_state *st, int32_t first_pos, dcp__error *err)
{
    const int32_t tall = st->sorted[first_pos];
    st->num_groups = 1;
    st->group_size[0] = 1;
    st->free_rank = 1;
    st->placed_pos[0] = first_pos;
    st->placed_group[0] = 0;
    st->num_placed = 1;
    int64_t room = st->per_rank - st->lengths[tall];
    int32_t pos = first_pos;
    while (room > 0 && st->num_placed < st->seq_cap) {
        /* first sorted position after pos with length <= room (lengths are non-increasing): gallop, then bisect */
        int32_t lo = pos + 1, hi = lo, step = 1;
        while (hi < st->n && st->sorted_lengths[hi] > room) {
            lo = hi + 1;
            hi = lo + step < st->n ? lo + step : st->n;
            step *= 2;
        }
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (st->sorted_lengths[mid] <= room) hi = mid;
            else lo = mid + 1;
        }
        if (lo >= st->n) break;
        const int32_t p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, lo);
        if (p >= st->n) break;
        room -= st->sorted_lengths[p];
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = 0;
        pos = p;
    }
    return dcp__dynamic_cp_store_microbatch(st, err);
}
