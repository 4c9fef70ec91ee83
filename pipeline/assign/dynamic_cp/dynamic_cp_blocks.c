/*
 * dynamic_cp_blocks.c - the finished microbatches: each stored as blocks of
 * consecutive ranks (one per group, in rank order) with its ids in placement
 * order, and the VPP alignment (the reference's align_sample_id_groups) that
 * splits microbatches until their count is a multiple of the microbatch
 * group.
 */
#include "dynamic_cp_internal.h"

/* Record the finished microbatch: its groups in rank order, ids in placement order. */
dcp_status dcp__dynamic_cp_store_microbatch(dyn_state *st, dcp__error *err)
{
    if (st->num_mb >= st->max_mb || st->num_blocks + st->num_groups > st->n)
        return dcp__fail(err, DCP_ERR_CAPACITY,
                         "dynamic_cp: the plan needs more than max_microbatches = %d microbatches", st->max_mb);
    const int32_t groups = st->num_groups;
    int32_t *cursor = st->group_fill;
    for (int32_t g = 0; g <= groups; g++) cursor[g] = 0;
    for (int32_t i = 0; i < st->num_placed; i++) cursor[st->placed_group[i] + 1]++;
    int32_t first = st->num_ids;
    for (int32_t g = 0; g < groups; g++) {
        int32_t b = st->num_blocks + g;
        st->block_size[b] = st->group_size[g];
        st->block_first_id[b] = first;
        st->block_count[b] = cursor[g + 1];
        int32_t c = cursor[g + 1];
        cursor[g + 1] = first;
        first += c;
    }
    cursor[0] = 0;
    for (int32_t i = 0; i < st->num_placed; i++) {
        int32_t g = st->placed_group[i];
        st->ids[cursor[g + 1]++] = st->sorted[st->placed_pos[i]];
        st->next_unplaced[st->placed_pos[i]] = st->placed_pos[i] + 1;
    }
    st->mb_first_block[st->num_mb] = st->num_blocks;
    st->mb_num_blocks[st->num_mb] = groups;
    st->num_mb++;
    st->num_blocks += groups;
    st->num_ids = first;
    return DCP_OK;
}

/*
 * fill_empty_by_expanding_cp on block sizes (non-increasing, summing to less
 * than N): repeatedly double the first block of the trailing run of smallest
 * blocks, or the first block when all are equal.  Returns 0 where the
 * reference would loop forever or corrupt the list.
 */
static int refill_half(int32_t *sizes, int32_t count, int32_t ranks)
{
    int64_t used = 0;
    for (int32_t i = 0; i < count; i++) used += sizes[i];
    while (used < ranks) {
        const int64_t empty = ranks - used;
        int32_t prev = 0, acted = 0;
        for (int32_t i = count - 1; i >= 0; i--) {
            int32_t c = sizes[i];
            if (c > prev && prev != 0) {
                if (prev > empty) return 0;
                sizes[i + 1] = 2 * prev;
                used += prev;
                acted = 1;
                break;
            }
            if (c <= empty && i == 0) {
                sizes[0] = 2 * c;
                used += c;
                acted = 1;
                break;
            }
            prev = c;
        }
        if (!acted) return 0;
    }
    return 1;
}

/* split_group: the second half replaces microbatch i, the first half is appended.  0 if it cannot split. */
static int split_microbatch(dyn_state *st, int32_t i)
{
    const int32_t b0 = st->mb_first_block[i], count = st->mb_num_blocks[i], ranks = st->num_ranks;
    if (count < 2) return 0;
    for (int32_t k = 1; k < count; k++)
        if (st->block_size[b0 + k] > st->block_size[b0 + k - 1])
            return 0; /* the reference asserts; never true for microbatches built here (sizes never increase) */
    int32_t k = 0, prefix = 0;
    while (prefix < ranks / 2) prefix += st->block_size[b0 + k++];
    if (k >= count) return 0;
    int32_t *tmp = st->tmp_sizes;
    for (int32_t b = 0; b < count; b++) tmp[b] = st->block_size[b0 + b];
    if (!refill_half(tmp, k, ranks) || !refill_half(tmp + k, count - k, ranks)) return 0;
    if (st->num_mb >= st->n) return 0; /* cannot happen: every microbatch holds an id */
    for (int32_t b = 0; b < count; b++) st->block_size[b0 + b] = tmp[b];
    st->mb_first_block[i] = b0 + k;
    st->mb_num_blocks[i] = count - k;
    st->mb_first_block[st->num_mb] = b0;
    st->mb_num_blocks[st->num_mb] = k;
    st->num_mb++;
    return 1;
}

dcp_status dcp__dynamic_cp_align_microbatches(dyn_state *st, dcp__error *err)
{
    const int32_t multiple = st->align_group;
    int32_t remainder = (multiple - st->num_mb % multiple) % multiple;
    int32_t i = st->num_mb - 1, attempts = 0;
    while (remainder > 0) {
        if (i < 0) {
            if (attempts >= st->num_mb)
                return dcp__fail(err, DCP_ERR_INFEASIBLE,
                                "dynamic_cp: cannot split %d microbatches into a multiple of "
                                "microbatch_group_size_per_vp_stage %d: no microbatch has two CP groups to split",
                                st->num_mb, multiple);
            i = st->num_mb - 1;
        }
        if (split_microbatch(st, i)) {
            remainder--;
            attempts = 0;
        } else {
            attempts++;
        }
        i--;
    }
    return DCP_OK;
}
