/*
 * balanced_descent.c - the last step of a plan: a local search that lowers
 * microbatch levels one move at a time.
 *
 * A microbatch's level is its most loaded group's load.  Relieving it means
 * taking load off that group (the top) without raising any other
 * microbatch's level:
 *
 *   move  a sequence of the top (which keeps at least one) into a group of
 *         any size and microbatch with room for it under that microbatch's
 *         level (under the new level when it is the top's own microbatch);
 *   swap  a sequence of the top with a shorter one of another group, which
 *         takes the longer one within its room.
 *
 * A move or swap lowers the level when the top was the only group at it,
 * else it leaves one group fewer at the level (a target in the same
 * microbatch must end below it); no level ever rises, so the makespan never
 * does, and every step lowers (levels, groups at each level), so the search
 * ends.  Group sizes and microbatches stay as they are, and so does every
 * invariant: token room and the sequence cap are checked, and no group is
 * emptied.
 *
 * Structures: a max-heap of group loads per microbatch (its top and the load
 * below it), and per CP-size class a max tree over its groups of room under
 * the level (slack) and free tokens (a query walks it depth first, left to
 * right, into subtrees whose maxima suffice).  Levels only fall, so a stored slack is
 * never below the true one: a query that lands on a stale leaf refreshes it
 * and searches on.  Every step is charged to a work budget, so the search
 * ends within a fixed amount of work whatever the input.
 *
 * State: reads in, pk's cost cache and table (through
 * dcp__balanced_cost_row); writes ds (in pass's and work's arrays, which
 * the passes are done with) and pass, the plan it lowers.
 */
#include "balanced_internal.h"

/* Sequences a swap candidate window looks at, each way; the top's sequences a swap is tried for. */
enum { SWAP_LOOK = 32, SWAP_ITEMS = 8 };

/* ---- per-microbatch max-heaps of groups by load (ties: lower id on top) ---- */

static inline int heap_higher(const balanced_pass *ps, int32_t g, int32_t h)
{
    return ps->g_load[g] > ps->g_load[h] || (ps->g_load[g] == ps->g_load[h] && g < h);
}

static void heap_up(balanced *b, int32_t *h, int32_t i)
{
    int32_t g = h[i];
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!heap_higher(&b->pass, g, h[parent])) break;
        h[i] = h[parent];
        b->ds.pos[h[i]] = i;
        i = parent;
    }
    h[i] = g;
    b->ds.pos[g] = i;
}

static void heap_down(balanced *b, int32_t *h, int32_t size, int32_t i)
{
    int32_t g = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && heap_higher(&b->pass, h[c + 1], h[c])) c++;
        if (!heap_higher(&b->pass, h[c], g)) break;
        h[i] = h[c];
        b->ds.pos[h[i]] = i;
        i = c;
    }
    h[i] = g;
    b->ds.pos[g] = i;
}

/* The load of g changed: restore its microbatch's heap and level. */
static void heap_moved(balanced *b, int32_t g, int64_t before)
{
    int32_t m = b->pass.g_mb[g];
    int32_t *h = b->ds.heap + b->pass.mb_first[m];
    int32_t size = b->pass.mb_first[m + 1] - b->pass.mb_first[m];
    if (b->pass.g_load[g] > before) heap_up(b, h, b->ds.pos[g]);
    else heap_down(b, h, size, b->ds.pos[g]);
    b->pass.mb_level[m] = b->pass.g_load[h[0]];
}

/* The second highest load of microbatch m (0 when the top is its only group). */
static int64_t heap_second(const balanced *b, int32_t m)
{
    const int32_t *h = b->ds.heap + b->pass.mb_first[m];
    int32_t size = b->pass.mb_first[m + 1] - b->pass.mb_first[m];
    int64_t second = 0;
    if (size > 1) second = b->pass.g_load[h[1]];
    if (size > 2 && b->pass.g_load[h[2]] > second) second = b->pass.g_load[h[2]];
    return second;
}

/* ---- per-class max trees of (slack, free tokens) ---- */

static int64_t group_slack(const balanced *b, int32_t g) { return b->pass.mb_level[b->pass.g_mb[g]] - b->pass.g_load[g]; }

static int64_t group_free_tokens(const balanced *b, int32_t g)
{
    if (b->in.seq_cap > 0 && b->pass.g_count[g] >= b->in.seq_cap) return -1;
    return (int64_t)b->in.max_seqlen * b->pass.g_cp[g] - b->pass.g_tokens[g];
}

/* Set leaf `slot` of class k's tree and its ancestors. */
static void tree_set(balanced_descent *ds, int k, int32_t slot, int64_t slack, int64_t room)
{
    int64_t *ts = ds->slack + ds->tree_off[k], *tr = ds->room + ds->tree_off[k];
    int32_t i = ds->leaves[k] + slot;
    ts[i] = slack;
    tr[i] = room;
    for (i >>= 1; i >= 1; i >>= 1) {
        int64_t s = ts[2 * i] > ts[2 * i + 1] ? ts[2 * i] : ts[2 * i + 1];
        int64_t r = tr[2 * i] > tr[2 * i + 1] ? tr[2 * i] : tr[2 * i + 1];
        if (ts[i] == s && tr[i] == r) break; /* the rest of the path already holds these maxima */
        ts[i] = s;
        tr[i] = r;
    }
}

static void tree_refresh(balanced *b, int32_t g)
{
    tree_set(&b->ds, dcp__balanced_class_of(b->pass.g_cp[g]), b->work.g_slot[g], group_slack(b, g),
             group_free_tokens(b, g));
}

/*
 * The first group (in slot order) of class k with slack >= need, at least
 * `tokens` free tokens, other than `skip_g` and outside microbatch `skip_mb`
 * (-1: none); -1 when there is none.  Stale leaves met on the way are
 * refreshed.  Charges one unit of work per node.
 */
static int32_t tree_find(balanced *b, int k, int64_t need, int64_t tokens, int32_t skip_g, int32_t skip_mb)
{
    const int64_t *ts = b->ds.slack + b->ds.tree_off[k], *tr = b->ds.room + b->ds.tree_off[k];
    const int32_t leaves = b->ds.leaves[k];
    int32_t i = 1;
    for (;;) {
        b->ds.work--;
        if (ts[i] >= need && tr[i] >= tokens) {
            if (i >= leaves) {
                int32_t g = b->ds.leaf[b->ds.tree_off[k] / 2 + (i - leaves)];
                int64_t slack = group_slack(b, g);
                if (slack != ts[i]) tree_set(&b->ds, k, i - leaves, slack, tr[i]);
                if (slack >= need && g != skip_g && b->pass.g_mb[g] != skip_mb) return g;
            } else {
                i = 2 * i; /* the left child first */
                continue;
            }
        }
        /* next subtree to the right: climb while this is a right child */
        while (i & 1) i >>= 1;
        if (i == 0) return -1;
        i++;
        if (b->ds.work <= 0) return -1;
    }
}

/* ---- items ---- */

static void list_remove(balanced_pass *ps, int32_t g, int32_t p)
{
    int32_t prev = -1;
    for (int32_t q = ps->g_head[g]; q != p; q = ps->item_next[q]) prev = q;
    int32_t next = ps->item_next[p];
    if (prev < 0) ps->g_head[g] = next;
    else ps->item_next[prev] = next;
    if (ps->g_tail[g] == p) ps->g_tail[g] = prev;
}

/* Position p's per-rank cost at CP size cp (from the call's table, or the pooled packing's cache, when it has one). */
static int64_t cost_at(balanced *b, int32_t p, int32_t cp)
{
    if (b->table.ready && p < b->table.n) {
        int64_t cheapest;
        dcp__i128 least;
        return dcp__balanced_cost_row(b, p, &cheapest, &least)[dcp__balanced_class_of(cp)];
    }
    if (b->pk.ready) return dcp__balanced_pool_cost(b, p, cp);
    return dcp__cost(b->in.model, b->in.len[p], cp);
}

/* Move p (in g) into h at cost c. */
static void apply_move(balanced *b, int32_t p, int32_t g, int32_t h, int64_t c)
{
    int64_t before_g = b->pass.g_load[g], before_h = b->pass.g_load[h];
    list_remove(&b->pass, g, p);
    b->pass.g_count[g]--;
    b->pass.g_load[g] -= b->pass.cost[p];
    b->pass.g_tokens[g] -= b->in.len[p];
    b->pass.cp[p] = b->pass.g_cp[h];
    b->pass.cost[p] = c;
    dcp__balanced_group_add(b, h, p, c);
    heap_moved(b, g, before_g);
    heap_moved(b, h, before_h);
    tree_refresh(b, g);
    tree_refresh(b, h);
}

/* Exchange p (in g, to cost cp_h in h) and q (in h, to cost cq_g in g). */
static void apply_swap(balanced *b, int32_t p, int32_t g, int32_t q, int32_t h, int64_t cp_h, int64_t cq_g)
{
    int64_t before_g = b->pass.g_load[g], before_h = b->pass.g_load[h];
    /* p takes q's place in h's list and q takes p's in g's */
    for (int32_t *link = &b->pass.g_head[g]; *link >= 0; link = &b->pass.item_next[*link])
        if (*link == p) {
            *link = q;
            break;
        }
    for (int32_t *link = &b->pass.g_head[h]; *link >= 0; link = &b->pass.item_next[*link])
        if (*link == q) {
            *link = p;
            break;
        }
    int32_t next_p = b->pass.item_next[p];
    b->pass.item_next[p] = b->pass.item_next[q];
    b->pass.item_next[q] = next_p;
    if (b->pass.g_tail[g] == p) b->pass.g_tail[g] = q;
    if (b->pass.g_tail[h] == q) b->pass.g_tail[h] = p;
    b->pass.item_group[p] = h;
    b->pass.item_group[q] = g;
    /* the loads after the swap, saturated as loads are (costs saturate at INT64_MAX) */
    b->pass.g_load[g] = dcp__i128_saturate_nonneg((dcp__i128)b->pass.g_load[g] + cq_g - b->pass.cost[p]);
    b->pass.g_load[h] = dcp__i128_saturate_nonneg((dcp__i128)b->pass.g_load[h] + cp_h - b->pass.cost[q]);
    b->pass.g_tokens[g] += b->in.len[q] - b->in.len[p];
    b->pass.g_tokens[h] += b->in.len[p] - b->in.len[q];
    b->pass.cp[p] = b->pass.g_cp[h];
    b->pass.cp[q] = b->pass.g_cp[g];
    b->pass.cost[p] = cp_h;
    b->pass.cost[q] = cq_g;
    heap_moved(b, g, before_g);
    heap_moved(b, h, before_h);
    tree_refresh(b, g);
    tree_refresh(b, h);
}

/*
 * A group for p that takes it without raising a level: in microbatch m
 * (level L) it must end at or under cap_m, elsewhere at or under its own
 * level.  Among the sizes p fits, the one that adds the least GPU time.
 * Returns the group (its cost in *cost), or -1.
 */
static int32_t move_target(balanced *b, int32_t p, int32_t g, int32_t m, int64_t L, int64_t cap_m, int64_t *cost)
{
    const int32_t s = b->in.len[p];
    int32_t best = -1;
    dcp__i128 best_work = 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        if (b->ds.leaves[k] == 0) continue;
        const int32_t size = dcp__balanced_class_size(b, k);
        if (size < b->in.min_cp[p] || s > (int64_t)size * b->in.max_seqlen) continue;
        const int64_t c = cost_at(b, p, size);
        if (c > cap_m) continue; /* it could not stay under the level even alone */
        dcp__i128 work = (dcp__i128)size * c;
        if (best >= 0 && work >= best_work) continue;
        /* slack >= c + (L - cap_m) is enough anywhere (levels elsewhere are their own) */
        int32_t h = tree_find(b, k, dcp__sat_add_i64(c, L - cap_m), s, g, -1);
        if (h < 0 && b->pass.num_mbs > 1) h = tree_find(b, k, c, s, g, m);
        if (h < 0) continue;
        best = h;
        best_work = work;
        *cost = c;
    }
    return best;
}

/* Lower microbatch m's top by one move or swap; 1 when one was made. */
static int relieve(balanced *b, int32_t m)
{
    const int32_t g = b->ds.heap[b->pass.mb_first[m]];
    const int64_t L = b->pass.g_load[g], L2 = heap_second(b, m);
    const int tie = L2 >= L;
    /* the top's sequences, by cost ascending (ties: position) */
    int32_t count = 0, *items = b->work.sort_a;
    for (int32_t p = b->pass.g_head[g]; p >= 0 && count < b->in.n; p = b->pass.item_next[p]) {
        int32_t j = count++;
        const int64_t *cost = b->pass.cost;
        while (j > 0 && (cost[items[j - 1]] > cost[p] || (cost[items[j - 1]] == cost[p] && items[j - 1] > p))) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = p;
    }
    b->ds.work -= count;
    /* moves: the cheapest sequence that clears the top down to L2, then the dearest of those that do not */
    if (count >= 2) {
        int32_t first_full = 0;
        while (first_full < count && b->pass.cost[items[first_full]] < L - L2) first_full++;
        for (int32_t j = 0; j < count && b->ds.work > 0; j++) {
            int32_t p = j < count - first_full ? items[first_full + j] : items[count - 1 - j];
            if (j >= count - first_full && tie) break;
            int64_t left = L - b->pass.cost[p];
            int64_t cap_m = tie ? L - 1 : (left > L2 ? left : L2);
            int64_t c = 0;
            int32_t h = move_target(b, p, g, m, L, cap_m, &c);
            if (h >= 0) {
                apply_move(b, p, g, h, c);
                return 1;
            }
        }
    }
    /* swaps: a shorter sequence of another group for one of the top's, the SWAP_ITEMS dearest of the top's first */
    const int32_t cp_g = b->pass.g_cp[g];
    const int64_t need = tie ? 1 : L - L2;
    for (int32_t j = count - 1; j >= 0 && j >= count - SWAP_ITEMS && b->ds.work > 0; j--) {
        const int32_t p = items[j], s = b->in.len[p];
        const int64_t cx = b->pass.cost[p];
        /* q0: the first position after p whose length, at g's size, takes `need` off the top */
        int32_t lo = p + 1, hi = b->in.n;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            b->ds.work--;
            if (cx - cost_at(b, mid, cp_g) >= need) hi = mid;
            else lo = mid + 1;
        }
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1 && tie) break;
            /* pass 0: from q0 on (the top clears L2); pass 1: back from q0 (it only falls) */
            for (int32_t step = 0; step < SWAP_LOOK && b->ds.work > 0; step++) {
                int32_t q = pass == 0 ? lo + step : lo - 1 - step;
                if (q >= b->in.n || q <= p) break;
                b->ds.work--;
                const int32_t t = b->in.len[q];
                if (t >= s) break; /* pass 1 reached p's own length */
                const int32_t h = b->pass.item_group[q];
                if (h == g) continue;
                const int32_t cp_h = b->pass.g_cp[h];
                if (b->pass.g_tokens[h] - t + s > (int64_t)b->in.max_seqlen * cp_h) continue;
                if (cp_h < b->in.min_cp[p]) continue;
                const int64_t cq_g = cost_at(b, q, cp_g);
                const int64_t drop = cx - cq_g;
                if (drop <= 0) continue;
                const int64_t cp_in_h = cost_at(b, p, cp_h);
                const int64_t rise = cp_in_h - b->pass.cost[q];
                int64_t cap;
                if (b->pass.g_mb[h] == m) {
                    int64_t left = L - drop;
                    cap = tie ? L - 1 : (left > L2 ? left : L2);
                } else {
                    cap = b->pass.mb_level[b->pass.g_mb[h]];
                }
                if ((dcp__i128)b->pass.g_load[h] + rise > cap) continue; /* loads saturate at INT64_MAX */
                apply_swap(b, p, g, q, h, cp_in_h, cq_g);
                return 1;
            }
        }
    }
    return 0;
}

/*
 * The local search on the pass state as it stands (compacted microbatches,
 * groups with their loads), within `budget` units of work.
 */
void dcp__balanced_descent(balanced *b, int64_t budget)
{
    int32_t live = 0;
    dcp__balanced_evaluate(b, &live);
    dcp__balanced_index_groups(b);
    b->ds.work = budget;
    /* heaps */
    for (int32_t m = 0; m < b->pass.num_mbs; m++) {
        int32_t *h = b->ds.heap + b->pass.mb_first[m];
        int32_t size = b->pass.mb_first[m + 1] - b->pass.mb_first[m];
        for (int32_t j = 0; j < size; j++) {
            h[j] = b->pass.mb_groups[b->pass.mb_first[m] + j];
            b->ds.pos[h[j]] = j;
        }
        for (int32_t j = size / 2 - 1; j >= 0; j--) heap_down(b, h, size, j);
    }
    /*
     * Trees: the classes one after another, a class of c groups as an
     * implicit tree of 2c nodes (node 1 the root, i's children 2i and 2i + 1,
     * leaves c .. 2c - 1: every inner node has both children).
     */
    int32_t count[NUM_CLASSES] = {0};
    for (int32_t g = 0; g < b->pass.num_groups; g++)
        if (b->pass.g_count[g] > 0) b->work.g_slot[g] = count[dcp__balanced_class_of(b->pass.g_cp[g])]++;
    int32_t off = 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        b->ds.leaves[k] = count[k];
        b->ds.tree_off[k] = off;
        for (int32_t i = 0; i < 2 * count[k]; i++) {
            b->ds.slack[off + i] = INT64_MIN;
            b->ds.room[off + i] = INT64_MIN;
        }
        off += 2 * count[k];
    }
    for (int32_t g = 0; g < b->pass.num_groups; g++) {
        if (b->pass.g_count[g] == 0) continue;
        int k = dcp__balanced_class_of(b->pass.g_cp[g]);
        b->ds.leaf[b->ds.tree_off[k] / 2 + b->work.g_slot[g]] = g;
        tree_refresh(b, g);
    }
    for (int progress = 1; progress && b->ds.work > 0;) {
        progress = 0;
        for (int32_t m = 0; m < b->pass.num_mbs && b->ds.work > 0; m++) {
            if (b->pass.mb_first[m + 1] == b->pass.mb_first[m]) continue;
            while (b->ds.work > 0 && relieve(b, m)) progress = 1;
        }
    }
}
