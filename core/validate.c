/*
 * validate.c - check every invariant of a plan (docs/planning.md, cost model), every step.
 *
 * O(ids + groups + microbatches) time, one byte per sequence of scratch.  The
 * first violation found is reported with its microbatch, rank and id.
 */
#include "plan.h"

#include <stdio.h>
#include <string.h>

size_t dcp__validate_scratch_size(const dcp_config *config)
{
    return DCP_ARENA_BYTES(uint8_t, config->max_sequences);
}

static dcp_status violation_at(dcp_plan_violation *v, dcp_invariant inv, int32_t mb, int32_t rank, int32_t id,
                               const char *fmt, ...) DCP_PRINTF(6, 7);

#include <stdarg.h>
static dcp_status violation_at(dcp_plan_violation *v, dcp_invariant inv, int32_t mb, int32_t rank, int32_t id,
                               const char *fmt, ...)
{
    if (v) {
        v->invariant = inv;
        v->microbatch = mb;
        v->rank = rank;
        v->id = id;
        va_list args;
        va_start(args, fmt);
        vsnprintf(v->message, sizeof v->message, fmt, args);
        va_end(args);
    }
    return DCP_ERR_INVALID_PLAN;
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

dcp_status dcp__plan_check(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                          int32_t num_lengths, dcp__arena *scratch, dcp_plan_violation *v)
{
    if (v) {
        memset(v, 0, sizeof *v);
        v->microbatch = v->rank = v->id = -1;
    }
    const int32_t n = plan->num_ranks;
    const int32_t nmb = plan->num_microbatches;
    if (n != dcp_config_num_ranks(config))
        return violation_at(v, DCP_INVARIANT_STRUCTURE, -1, -1, -1, "plan has %d ranks, configuration %d", n,
                            dcp_config_num_ranks(config));
    if (nmb < 0 || nmb > plan->max_microbatches || plan->num_groups < 0 || plan->num_groups > plan->max_groups ||
        plan->num_ids < 0 || plan->num_ids > plan->max_ids)
        return violation_at(v, DCP_INVARIANT_STRUCTURE, -1, -1, -1, "plan counts out of capacity");
    if (plan->num_ids != num_lengths)
        return violation_at(v, DCP_INVARIANT_EACH_ID_ONCE, -1, -1, -1, "plan holds %d ids for %d sequences",
                            plan->num_ids, num_lengths);
    if (plan->microbatch_first_group[0] != 0 || plan->microbatch_first_group[nmb] != plan->num_groups ||
        plan->group_first_id[0] != 0 || plan->group_first_id[plan->num_groups] != plan->num_ids)
        return violation_at(v, DCP_INVARIANT_STRUCTURE, -1, -1, -1, "plan offsets do not span its arrays");

    uint8_t *seen = DCP_ARENA_NEW_ZERO(scratch, uint8_t, num_lengths);
    if (!seen && num_lengths > 0)
        return violation_at(v, DCP_INVARIANT_STRUCTURE, -1, -1, -1, "validator scratch too small for %d sequences",
                            num_lengths);

    const int64_t per_rank = config->max_seqlen_per_rank;
    const int32_t seq_cap = config->max_sequences_per_microbatch;
    const int32_t static_cp = config->context_parallel_size;
    for (int32_t m = 0; m < nmb; m++) {
        int32_t g0 = plan->microbatch_first_group[m], g1 = plan->microbatch_first_group[m + 1];
        if (g1 < g0 || g1 > plan->num_groups)
            return violation_at(v, DCP_INVARIANT_STRUCTURE, m, -1, -1, "microbatch %d group range [%d,%d) invalid",
                                m, g0, g1);
        int32_t next_free = 0; /* groups are sorted and disjoint: each starts at or after the previous end */
        int64_t covered = 0;
        for (int32_t g = g0; g < g1; g++) {
            int32_t first = plan->group_first_rank[g], cp = plan->group_cp_size[g];
            int32_t i0 = plan->group_first_id[g], i1 = plan->group_first_id[g + 1];
            if (i1 < i0 || i1 > plan->num_ids)
                return violation_at(v, DCP_INVARIANT_STRUCTURE, m, first, -1, "group %d id range [%d,%d) invalid", g,
                                    i0, i1);
            if (cp < 1 || first < 0 || (int64_t)first + cp > n)
                return violation_at(v, DCP_INVARIANT_BLOCK_SHAPE, m, first, -1,
                                    "microbatch %d: group at rank %d of size %d leaves ranks [0,%d)", m, first, cp, n);
            /* a static CP group (dp_balanced with a CP size that is not a power of two) is a block too */
            int static_group = cp == static_cp && first % static_cp == 0;
            if (!is_pow2(cp) && cp != n && !static_group)
                return violation_at(v, DCP_INVARIANT_BLOCK_SHAPE, m, first, -1,
                                    "microbatch %d: group at rank %d has size %d, not a power of two, %d, or a CP "
                                    "group of %d", m, first, cp, n, static_cp);
            if (first < next_free)
                return violation_at(v, DCP_INVARIANT_BLOCK_SHAPE, m, first, -1,
                                    "microbatch %d: group at rank %d overlaps or precedes the previous group", m,
                                    first);
            if (first > next_free)
                return violation_at(v, DCP_INVARIANT_NO_EMPTY_RANK, m, next_free, -1,
                                    "microbatch %d: rank %d holds no sequence", m, next_free);
            if (i1 == i0)
                return violation_at(v, DCP_INVARIANT_NO_EMPTY_RANK, m, first, -1,
                                    "microbatch %d: ranks [%d,%d) hold an empty group", m, first, first + cp);
            if (seq_cap > 0 && i1 - i0 > seq_cap)
                return violation_at(v, DCP_INVARIANT_SEQUENCE_CAP, m, first, -1,
                                    "microbatch %d: rank %d holds %d sequences, cap %d", m, first, i1 - i0, seq_cap);
            int64_t tokens = 0;
            for (int32_t i = i0; i < i1; i++) {
                int32_t id = plan->ids[i];
                if (id < 0 || id >= num_lengths)
                    return violation_at(v, DCP_INVARIANT_EACH_ID_ONCE, m, first, id,
                                        "microbatch %d: id %d out of range [0,%d)", m, id, num_lengths);
                if (seen[id])
                    return violation_at(v, DCP_INVARIANT_EACH_ID_ONCE, m, first, id,
                                        "microbatch %d: id %d scheduled twice", m, id);
                seen[id] = 1;
                tokens += lengths[id];
            }
            /* sum of s / cp <= M  <=>  sum of s <= M * cp (exact in integers) */
            if (tokens > per_rank * cp)
                return violation_at(v, DCP_INVARIANT_TOKEN_CAPACITY, m, first, -1,
                                    "microbatch %d: ranks [%d,%d) hold %lld tokens over cp %d, more than %lld per rank",
                                    m, first, first + cp, (long long)tokens, cp, (long long)per_rank);
            next_free = first + cp;
            covered += cp;
        }
        if (covered != n)
            return violation_at(v, DCP_INVARIANT_NO_EMPTY_RANK, m, next_free, -1,
                                "microbatch %d: rank %d holds no sequence", m, next_free);
    }
    /* every id placed exactly once: num_ids == num_lengths and no id twice => all seen */
    int32_t group = config->microbatch_group_size_per_vp_stage;
    if (group > 1 && nmb % group != 0)
        return violation_at(v, DCP_INVARIANT_VPP_MULTIPLE, -1, -1, -1,
                            "%d microbatches is not a multiple of microbatch_group_size_per_vp_stage %d", nmb, group);
    return DCP_OK;
}
