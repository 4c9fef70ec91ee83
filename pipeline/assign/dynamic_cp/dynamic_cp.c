/*
 * dynamic_cp.c - the `dynamic_cp` scheduler's entry point (pipeline/stages.h):
 * the scratch layout and its exact size, one microbatch after another until
 * every sequence is placed, the VPP alignment, and the plan emitted.
 * dynamic_cp_internal.h describes the algorithm and the files of its phases.
 */
#include "dynamic_cp_internal.h"
#include "../../../core/plan.h"

/* Lay out every scratch array; run on a measuring arena it gives the scratch size. */
static int dyn_alloc(dyn_state *st, dcp__arena *a, int32_t n, int32_t ranks, int32_t min_cp_size)
{
    const int32_t p2 = (int32_t)1 << dcp__dynamic_cp_log2_floor(ranks);
    const int32_t j0 = dcp__dynamic_cp_log2_floor(min_cp_size), j1 = dcp__dynamic_cp_log2_floor(p2);
    int32_t nodes = 0, slots = 0;
    for (int32_t j = 0; j < MAX_CLASSES; j++) {
        st->tree_offset[j] = st->tree_leaves[j] = st->slot_offset[j] = st->class_count[j] = 0;
        if (j < j0 || j > j1) continue;
        int32_t groups = ranks >> j, leaves = 1;
        while (leaves < groups) leaves *= 2;
        st->tree_offset[j] = nodes;
        st->tree_leaves[j] = leaves;
        st->slot_offset[j] = slots;
        nodes += 2 * leaves;
        slots += groups;
    }
    st->bit_words = (ranks + 63) / 64;
    st->next_unplaced = DCP_ARENA_NEW(a, int32_t, (size_t)n + 1);
    st->sorted_lengths = DCP_ARENA_NEW(a, int32_t, n);
    st->group_size = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_count = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_slot = DCP_ARENA_NEW(a, int32_t, ranks);
    st->group_tokens = DCP_ARENA_NEW(a, int64_t, ranks);
    st->group_load = DCP_ARENA_NEW(a, int64_t, ranks);
    st->placed_pos = DCP_ARENA_NEW(a, int32_t, n);
    st->placed_group = DCP_ARENA_NEW(a, int32_t, n);
    st->nodes = DCP_ARENA_NEW(a, dyn_node, nodes);
    st->slot_group = DCP_ARENA_NEW(a, int32_t, slots);
    st->class_bits = DCP_ARENA_NEW(a, uint64_t, (size_t)(j1 + 1) * st->bit_words);
    st->fenwick = DCP_ARENA_NEW(a, int32_t, (size_t)ranks + 1);
    st->ids = DCP_ARENA_NEW(a, int32_t, n);
    st->block_size = DCP_ARENA_NEW(a, int32_t, n);
    st->block_first_id = DCP_ARENA_NEW(a, int32_t, n);
    st->block_count = DCP_ARENA_NEW(a, int32_t, n);
    st->mb_first_block = DCP_ARENA_NEW(a, int32_t, n);
    st->mb_num_blocks = DCP_ARENA_NEW(a, int32_t, n);
    st->group_fill = DCP_ARENA_NEW(a, int32_t, (size_t)ranks + 1);
    st->tmp_sizes = DCP_ARENA_NEW(a, int32_t, ranks);
    return !dcp__arena_failed(a);
}

size_t dcp__assign_dynamic_cp_scratch_size(const dcp_config *config)
{
    int32_t ranks = dcp_config_num_ranks(config);
    if (ranks <= 0 || config->max_sequences <= 0) return 0;
    dyn_state st;
    dcp__arena measure;
    dcp__arena_init_measure(&measure);
    dyn_alloc(&st, &measure, config->max_sequences, ranks, config->min_cp_size > 0 ? config->min_cp_size : 1);
    return measure.used;
}

dcp_status dcp__assign_dynamic_cp(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err)
{
    const dcp_config *c = in->config;
    const int32_t n = in->num_sequences, ranks = in->num_ranks;
    dyn_state st;
    memset(&st, 0, sizeof st);
    if (!dyn_alloc(&st, scratch, n, ranks, c->min_cp_size))
        return dcp__fail(err, DCP_ERR_CAPACITY, "dynamic_cp scratch too small for %d sequences on %d ranks", n, ranks);
    st.num_ranks = ranks;
    st.log2_pow2 = dcp__dynamic_cp_log2_floor(ranks);
    st.pow2_ranks = (int32_t)1 << st.log2_pow2;
    st.log2_min_cp = dcp__dynamic_cp_log2_floor(c->min_cp_size);
    st.per_rank = c->max_seqlen_per_rank;
    st.seq_cap = c->max_sequences_per_microbatch > 0 ? c->max_sequences_per_microbatch : INT32_MAX;
    st.align_group = c->microbatch_group_size_per_vp_stage;
    st.lengths = in->lengths;
    st.sorted = in->sorted_ids;
    st.min_cp = in->min_cp;
    st.n = n;
    st.max_mb = plan->max_microbatches < n ? plan->max_microbatches : n;

    const dcp__u128 largest_load = (dcp__u128)in->lengths[in->sorted_ids[0]] * (dcp__u128)st.per_rank * st.pow2_ranks;
    while ((largest_load >> st.load_shift) >= ((dcp__u128)1 << DYN_LOAD_LOG2)) st.load_shift++;

    for (int32_t j = st.log2_min_cp; j <= st.log2_pow2; j++) {
        dyn_node *t = st.nodes + st.tree_offset[j];
        for (int32_t v = 0; v < 2 * st.tree_leaves[j]; v++) t[v] = dcp__dynamic_cp_empty_node();
    }
    for (int32_t p = 0; p <= n; p++) st.next_unplaced[p] = p;
    for (int32_t p = 0; p < n; p++) st.sorted_lengths[p] = in->lengths[in->sorted_ids[p]];

    /* one rank: each microbatch is one group on it (every length fits it: bucket checked s <= M) */
    const int one_rank = ranks == 1;
    for (int32_t first = dcp__dynamic_cp_find_unplaced(st.next_unplaced, 0); first < n;
         first = dcp__dynamic_cp_find_unplaced(st.next_unplaced, first)) {
        dcp_status s = one_rank ? dcp__dynamic_cp_next_microbatch_one_rank(&st, first, err)
                                : dcp__dynamic_cp_next_microbatch(&st, first, err);
        if (s != DCP_OK) return s;
    }
    if (st.align_group > 1) {
        dcp_status s = dcp__dynamic_cp_align_microbatches(&st, err);
        if (s != DCP_OK) return s;
    }
    for (int32_t m = 0; m < st.num_mb; m++) {
        dcp_status s = dcp__plan_open_microbatch(plan, err);
        if (s != DCP_OK) return s;
        int32_t rank = 0;
        for (int32_t b = st.mb_first_block[m]; b < st.mb_first_block[m] + st.mb_num_blocks[m]; b++) {
            s = dcp__plan_push_group(plan, rank, st.block_size[b], st.ids + st.block_first_id[b], st.block_count[b],
                                     err);
            if (s != DCP_OK) return s;
            rank += st.block_size[b];
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}
