/*
 * stats.c - the step cost model of a plan (README, cost model): makespan, lower
 * bound, the reference's quadratic model.  Every rank of a group carries the
 * same cost, so this walks groups, not ranks.  The caller has checked the
 * plan (dcp__plan_check): the walk trusts its offsets.
 */
#include "plan.h"

static int64_t sat_add(int64_t a, int64_t b) { return (a > INT64_MAX - b) ? INT64_MAX : a + b; }

int64_t dcp__cost_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                             int32_t max_seqlen_per_rank)
{
    __int128 work = 0, tokens = 0;
    for (int32_t i = 0; i < n; i++) {
        int64_t s = lengths[i];
        __int128 best = -1;
        for (int64_t cp = 1; cp <= num_ranks; cp = (cp * 2 > num_ranks && cp < num_ranks) ? num_ranks : cp * 2) {
            if (s <= cp * (int64_t)max_seqlen_per_rank) {
                __int128 total = (__int128)cp * dcp_cost(model, s, (int32_t)cp);
                if (best < 0 || total < best) best = total;
            }
            if (cp == num_ranks) break;
        }
        if (best > 0) work += best;
        tokens += s;
    }
    __int128 capacity = (__int128)num_ranks * max_seqlen_per_rank;
    __int128 microbatches = capacity > 0 ? (tokens + capacity - 1) / capacity : 0;
    __int128 bound = work / num_ranks + microbatches * model->microbatch_overhead;
    return bound > INT64_MAX ? INT64_MAX : (int64_t)bound;
}

dcp_status dcp__plan_stats(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths, int32_t num_lengths,
                           dcp_plan_stats *stats)
{
    const dcp_cost_model *model = &config->cost;
    dcp_plan_stats st = {0};
    st.num_microbatches = plan->num_microbatches;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int64_t slowest = 0, slowest_quad = 0;
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            int32_t cp = plan->group_cp_size[g];
            int64_t cost = 0, quad = 0;
            for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
                int32_t id = plan->ids[i];
                if (id < 0 || id >= num_lengths) return DCP_ERR_INVALID_PLAN;
                int64_t s = lengths[id];
                cost = sat_add(cost, dcp_cost(model, s, cp));
                quad = sat_add(quad, (int64_t)(((__int128)s * s) / cp));
                st.cp_size_sum += cp;
                st.total_tokens += s;
            }
            if (cost > slowest) slowest = cost;
            if (quad > slowest_quad) slowest_quad = quad;
            st.busy_sum = sat_add(st.busy_sum, (int64_t)((__int128)cost * cp > INT64_MAX ? INT64_MAX : cost * cp));
        }
        st.max_rank_sum = sat_add(st.max_rank_sum, slowest);
        st.makespan = sat_add(st.makespan, sat_add(slowest, model->microbatch_overhead));
        st.quad_makespan = sat_add(st.quad_makespan, slowest_quad);
    }
    st.lower_bound = dcp__cost_lower_bound(model, lengths, num_lengths, plan->num_ranks, config->max_seqlen_per_rank);
    *stats = st;
    return DCP_OK;
}
