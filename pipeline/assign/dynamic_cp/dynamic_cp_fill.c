/*
 * dynamic_cp_fill.c - a microbatch's empty ranks and the groups of all N
 * ranks: the reference's fill_empty_gpus (double the first group of the
 * smallest size that can grow, shifting later groups right), its
 * fill_with_full_dpxcp_group fallback when no group can grow, and the
 * microbatch of one all-N group that a tallest sequence needing more than the
 * largest power of two <= N ranks gets.
 */
#include "dynamic_cp_internal.h"

static void fenwick_add(int32_t *f, int32_t size, int32_t i, int32_t delta)
{
    for (i++; i <= size; i += i & -i) f[i] += delta;
}

static int32_t fenwick_prefix(const int32_t *f, int32_t i) /* sum of [0, i) */
{
    int32_t s = 0;
    for (; i > 0; i -= i & -i) s += f[i];
    return s;
}

/*
 * fill_empty_gpus_once until no rank is empty: double the first group (in
 * creation order) of the smallest size that can grow, shifting later groups
 * right.  Returns 0 when no group can grow (the caller falls back to the full
 * group).
 */
int dcp__dynamic_cp_fill_empty_ranks(dyn_state *st)
{
    const int32_t ranks = st->num_ranks, groups = st->num_groups, words = st->bit_words;
    int32_t used = st->free_rank;
    if (used == ranks) return 1;
    memset(st->class_bits, 0, sizeof(uint64_t) * (size_t)(st->log2_pow2 + 1) * (size_t)words);
    memset(st->fenwick, 0, sizeof(int32_t) * ((size_t)groups + 1));
    for (int32_t g = 0; g < groups; g++) {
        int32_t j = dcp__dynamic_cp_log2_floor(st->group_size[g]);
        st->class_bits[(size_t)j * words + g / 64] |= 1ull << (g % 64);
        fenwick_add(st->fenwick, groups, g, st->group_size[g]);
    }
    int32_t smallest = st->log2_min_cp;
    while (used < ranks) {
        int32_t j = smallest, grown = -1;
        for (; j <= st->log2_pow2 && grown < 0; j++) {
            const uint64_t *bits = st->class_bits + (size_t)j * words;
            int any = 0;
            for (int32_t w = 0; w < words && grown < 0; w++) {
                uint64_t word = bits[w];
                any |= word != 0;
                while (word && grown < 0) {
                    int32_t g = w * 64 + __builtin_ctzll(word);
                    word &= word - 1;
                    int32_t size = st->group_size[g];
                    int32_t next = 2 * size < ranks ? 2 * size : ranks, need = next - size;
                    int32_t end = fenwick_prefix(st->fenwick, g + 1) - 1;
                    if (end + need >= ranks) continue; /* the reference's test */
                    if (need > ranks - used) continue; /* would push groups past rank N-1 (reference: IndexError) */
                    grown = g;
                }
            }
            if (any) break; /* only the smallest existing size is considered */
        }
        if (grown < 0) return 0;
        smallest = j;
        int32_t size = st->group_size[grown];
        int32_t next = 2 * size < ranks ? 2 * size : ranks;
        st->class_bits[(size_t)j * words + grown / 64] &= ~(1ull << (grown % 64));
        if (next == 2 * size && j + 1 <= st->log2_pow2)
            st->class_bits[(size_t)(j + 1) * words + grown / 64] |= 1ull << (grown % 64);
        fenwick_add(st->fenwick, groups, grown, next - size);
        st->group_size[grown] = next;
        used += next - size;
    }
    return 1;
}

/* The reference's fill_with_full_dpxcp_group: every sequence left, in order, that still fits on all N ranks. */
void dcp__dynamic_cp_full_group_fallback(dyn_state *st, int32_t first_pos)
{
    const int32_t ranks = st->num_ranks;
    st->num_groups = 1;
    st->group_size[0] = ranks;
    st->free_rank = ranks;
    st->num_placed = 0;
    soft_double packed = {0, 0};
    for (int32_t p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, first_pos); p < st->n;
         p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, p + 1)) {
        if (st->num_placed >= st->seq_cap) break;
        soft_double share = dcp__dynamic_cp_soft_div(st->lengths[st->sorted[p]], ranks);
        soft_double next = dcp__dynamic_cp_soft_add(packed, share);
        if (!dcp__dynamic_cp_soft_le(next, st->per_rank)) continue;
        packed = next;
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = 0;
    }
}

/*
 * A tallest sequence that needs more than the largest power of two <= N ranks
 * (N not a power of two): the reference asserts here.  dcpack runs its loop on:
 * one group of all N ranks, joined by the following sequences that also need
 * it while tokens and the load cap allow; shorter ones wait.
 */
void dcp__dynamic_cp_full_group_microbatch(dyn_state *st, int32_t first_pos)
{
    const int32_t ranks = st->num_ranks;
    const int32_t tall = st->sorted[first_pos];
    const dcp__u128 cap = dcp__dynamic_cp_cap_times(st->lengths[tall], st->per_rank, ranks); /* loads scaled by N: s*s */
    int64_t tokens = st->lengths[tall];
    dcp__u128 load = (dcp__u128)st->lengths[tall] * (dcp__u128)st->lengths[tall];
    st->num_groups = 1;
    st->group_size[0] = ranks;
    st->free_rank = ranks;
    st->placed_pos[0] = first_pos;
    st->placed_group[0] = 0;
    st->num_placed = 1;
    for (int32_t p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, first_pos + 1); p < st->n;
         p = dcp__dynamic_cp_find_unplaced(st->next_unplaced, p + 1)) {
        int32_t id = st->sorted[p];
        if (st->min_cp[id] <= st->pow2_ranks) break; /* the rest cannot use a group of N */
        int64_t s = st->lengths[id];
        dcp__u128 square = (dcp__u128)s * (dcp__u128)s;
        if (tokens + s > st->per_rank * ranks || load + square > cap || st->num_placed >= st->seq_cap) continue;
        tokens += s;
        load += square;
        st->placed_pos[st->num_placed] = p;
        st->placed_group[st->num_placed++] = 0;
    }
}
