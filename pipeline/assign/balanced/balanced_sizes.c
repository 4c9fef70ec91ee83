/*
 * balanced_sizes.c - the first step of every construction pass: each
 * sequence's CP size for the pass's target level (its minimal size, widened
 * while that lowers its per-rank cost above the level within the allowance),
 * the positions by per-rank cost descending, and the record of passes run so
 * far (a pass whose sizes repeat an earlier one's would repeat its plan).
 *
 * State: reads in; writes sizes, and pass.cp, pass.cost, pass.order and
 * pass.class_list.
 */
#include "balanced_internal.h"
#include "../../../core/hash.h"

/* Steps 1-2: CP sizes for target level `level`, then positions by per-rank cost descending. */
dcp__i128 dcp__balanced_choose_sizes(balanced *b, int64_t level, int64_t widen_num, int64_t widen_den,
                                    int32_t class_offset[NUM_CLASSES + 1], uint64_t *signature, int merge)
{
    if (!merge && b->sizes.valid && b->sizes.level == level && b->sizes.widen_num == widen_num &&
        b->sizes.widen_den == widen_den) {
        memcpy(b->pass.cp, b->sizes.cp, (size_t)b->in.n * sizeof *b->pass.cp);
        memcpy(b->pass.cost, b->sizes.cost, (size_t)b->in.n * sizeof *b->pass.cost);
        memcpy(class_offset, b->sizes.class_offset, sizeof b->sizes.class_offset);
        *signature = b->sizes.signature;
        return b->sizes.work;
    }
    uint64_t sig = DCP_FNV1A64_OFFSET; /* word-wise FNV-1a over the widened positions and their sizes */
    const int32_t n = b->in.n;
    int32_t count[NUM_CLASSES] = {0};
    dcp__i128 work = 0;
    /* a run of equal lengths (and minimal sizes) widens alike: one decision per run */
    for (int32_t p = 0, stop; p < n; p = stop) {
        stop = b->in.run_end[p];
        int32_t c = b->in.min_cp[p];
        int64_t h = b->in.min_cost[p];
        while (h > level) {
            int32_t c2 = dcp__balanced_next_size(c, b->in.num_ranks);
            if (c2 == 0) break;
            int64_t h2;
            if (c == b->in.min_cp[p]) { /* every pass asks for the first step: remember it */
                if (b->sizes.next_cost[p] < 0) b->sizes.next_cost[p] = dcp__cost(b->in.model, b->in.len[p], c2);
                h2 = b->sizes.next_cost[p];
            } else {
                h2 = dcp__cost(b->in.model, b->in.len[p], c2);
            }
            if (h2 >= h) break;
            /* the extra GPU time of the wider group must stay within the allowance */
            if ((dcp__i128)((int64_t)c2 * widen_den) * h2 > (dcp__i128)c * h * (widen_den + widen_num)) break;
            c = c2;
            h = h2;
        }
        for (int32_t q = p; q < stop; q++) {
            b->pass.cp[q] = c;
            b->pass.cost[q] = h;
        }
        if (c != b->in.min_cp[p])
            for (int32_t q = p; q < stop; q++) sig = dcp__fnv1a_word(sig, (uint64_t)q ^ ((uint64_t)c << 32));
        work += (dcp__i128)c * h * (stop - p);
        count[dcp__balanced_class_of(c)] += stop - p;
    }
    *signature = sig;
    /* each class, in position order, is already by cost descending: merge the classes */
    class_offset[0] = 0;
    for (int k = 0; k < NUM_CLASSES; k++) class_offset[k + 1] = class_offset[k] + count[k];
    int32_t head[NUM_CLASSES], end[NUM_CLASSES], live[NUM_CLASSES], num_live = 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        head[k] = class_offset[k];
        end[k] = class_offset[k];
        if (count[k] > 0) live[num_live++] = k;
    }
    for (int32_t p = 0, stop; p < n; p = stop) {
        stop = b->in.run_end[p];
        int k = dcp__balanced_class_of(b->pass.cp[p]);
        for (int32_t q = p; q < stop; q++) b->pass.class_list[end[k]++] = q;
    }
    for (int32_t i = 0; i < n && merge; i++) {
        int best = -1;
        int32_t best_p = 0;
        for (int j = 0; j < num_live; j++) {
            int k = live[j];
            int32_t p = b->pass.class_list[head[k]];
            if (best < 0 || b->pass.cost[p] > b->pass.cost[best_p] || (b->pass.cost[p] == b->pass.cost[best_p] && p < best_p)) {
                best = j;
                best_p = p;
            }
        }
        b->pass.order[i] = best_p;
        int k = live[best];
        if (++head[k] == end[k]) live[best] = live[--num_live];
    }
    /* only an LPT pass's choice is reused (by the sequential pass after it); any other leaves class_list changed */
    b->sizes.valid = merge;
    if (!merge) return work;
    b->sizes.level = level;
    b->sizes.widen_num = widen_num;
    b->sizes.widen_den = widen_den;
    b->sizes.signature = sig;
    b->sizes.work = work;
    memcpy(b->sizes.class_offset, class_offset, sizeof b->sizes.class_offset);
    memcpy(b->sizes.cp, b->pass.cp, (size_t)n * sizeof *b->pass.cp);
    memcpy(b->sizes.cost, b->pass.cost, (size_t)n * sizeof *b->pass.cost);
    return work;
}

/* 1 if a pass of this kind, target and CP sizes ran before (it would repeat its plan); else records it. */
int dcp__balanced_seen_before(balanced *b, int sequential, int64_t target, uint64_t signature)
{
    for (int j = 0; j < b->sizes.num_seen; j++)
        if (b->sizes.seen[j].sequential == sequential && b->sizes.seen[j].target == target &&
            b->sizes.seen[j].signature == signature)
            return 1;
    if (b->sizes.num_seen < (int)(sizeof b->sizes.seen / sizeof b->sizes.seen[0])) {
        b->sizes.seen[b->sizes.num_seen].sequential = sequential;
        b->sizes.seen[b->sizes.num_seen].target = target;
        b->sizes.seen[b->sizes.num_seen].signature = signature;
        b->sizes.num_seen++;
    }
    return 0;
}
