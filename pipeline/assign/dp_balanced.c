/*
 * dp_balanced.c - the reference's DpBalancedScheduler, exactly.
 *
 * Static CP size cp, DP size dp.  Walk sequences in global-id order, packing
 * while the pack's tokens stay <= M * cp (and, if capped, its count stays
 * under max_sequences_per_microbatch).  If the number of packs is not a
 * multiple of dp (times the VPP microbatch group), split singletons off the
 * tail: pop the last sequence of the last pack with more than one sequence
 * into a new one-sequence pack at the end, until the count is a multiple.
 * Microbatch i, DP lane d holds pack i*dp + d on its cp ranks.
 *
 * Packs are ranges of consecutive ids (the popped singletons too), so a pack
 * is (first id, count) and the ids are read from an identity table.
 *
 * The reference computes the pack of rank j as int(i*dp + j/cp) in floats:
 * floor(j/cp), exactly, at these sizes.  A sequence longer than M*cp makes it
 * emit an empty pack (when it comes first) and an over-full one; dcp__bucket
 * rejects such lengths before this stage runs.  Running out of packs to split
 * is the reference's "Not enough samples to move" assertion:
 * DCP_ERR_INFEASIBLE here.
 */
#include "../stages.h"
#include "../../core/plan.h"

static int32_t vpp_group(const dcp_config *c)
{
    return c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
}

size_t dcp__assign_dp_balanced_scratch_size(const dcp_config *c)
{
    size_t max_packs = dcp__size_add((size_t)c->max_sequences, dcp__size_mul((size_t)c->data_parallel_size,
                                                                          (size_t)vpp_group(c)));
    size_t s = DCP_ARENA_BYTES(int32_t, c->max_sequences); /* identity ids */
    s = dcp__size_add(s, dcp__arena_bytes(sizeof(int32_t), max_packs)); /* pack first id */
    s = dcp__size_add(s, dcp__arena_bytes(sizeof(int32_t), max_packs)); /* pack count */
    return s;
}

dcp_status dcp__assign_dp_balanced(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err)
{
    const dcp_config *c = in->config;
    const int32_t n = in->num_sequences, dp = c->data_parallel_size, cp = c->context_parallel_size;
    const int64_t limit = (int64_t)c->max_seqlen_per_rank * cp;
    const int32_t cap = c->max_sequences_per_microbatch; /* 0 = no cap */
    const int64_t multiple = (int64_t)dp * vpp_group(c);
    const int64_t max_packs = (int64_t)n + multiple;

    int32_t *iota = DCP_ARENA_NEW(scratch, int32_t, n);
    int32_t *pack_first = DCP_ARENA_NEW(scratch, int32_t, max_packs);
    int32_t *pack_count = DCP_ARENA_NEW(scratch, int32_t, max_packs);
    if (!iota || !pack_first || !pack_count)
        return dcp__fail(err, DCP_ERR_CAPACITY, "dp_balanced scratch too small for %d sequences", n);
    for (int32_t i = 0; i < n; i++) iota[i] = i;

    /* 1. greedy packing in id order */
    int32_t packs = 0;
    int64_t tokens = 0;
    pack_first[0] = 0;
    pack_count[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = in->lengths[i];
        if (tokens + s <= limit && (cap == 0 || pack_count[packs] < cap)) {
            pack_count[packs]++;
            tokens += s;
        } else {
            packs++;
            pack_first[packs] = i;
            pack_count[packs] = 1;
            tokens = s;
        }
    }
    packs++;

    /* 2. split singletons off the tail until the pack count is a multiple of dp (x VPP group) */
    if (packs % multiple != 0) {
        int64_t to_move = multiple - packs % multiple;
        int32_t i = packs - 1;
        while (to_move > 0) {
            if (i < 0)
                return dcp__fail(err, DCP_ERR_INFEASIBLE,
                                "dp_balanced: %d sequences cannot fill a multiple of %lld packs (dp %d x VPP group %d)",
                                n, (long long)multiple, dp, vpp_group(c));
            if (pack_count[i] > 1) {
                pack_count[i]--;
                pack_first[packs] = pack_first[i] + pack_count[i];
                pack_count[packs] = 1;
                packs++;
                to_move--;
            } else {
                i--;
            }
        }
    }

    /* 3. microbatch m, DP lane d -> pack m*dp + d, on ranks [d*cp, (d+1)*cp) */
    const int32_t microbatches = packs / dp;
    for (int32_t m = 0; m < microbatches; m++) {
        dcp_status st = dcp__plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        for (int32_t d = 0; d < dp; d++) {
            int32_t p = m * dp + d;
            st = dcp__plan_push_group(plan, d * cp, cp, iota + pack_first[p], pack_count[p], err);
            if (st != DCP_OK) return st;
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}
