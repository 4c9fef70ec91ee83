/*
 * stats.c - the step cost model of a plan (README, cost model): makespan and
 * lower bound under both step models (barrier and dependency), the
 * reference's quadratic model.  Every rank of a group carries the same cost,
 * so this walks groups, not ranks.  The caller has checked the plan
 * (dcp__plan_check): the walk trusts its offsets.
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

size_t dcp__stats_scratch_size(const dcp_config *config)
{
    return DCP_ARENA_BYTES(int64_t, dcp_config_num_ranks(config));
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t dcp__dependency_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n,
                                    int32_t num_ranks, int32_t max_seqlen_per_rank, int32_t static_cp)
{
    /* the static CP size is a group size of its own only when it is neither a power of two nor N */
    int extra_cp = static_cp > 1 && static_cp < num_ranks && !is_pow2(static_cp);
    __int128 work = 0, tokens = 0;
    int64_t longest_run = 0; /* max over sequences of its smallest per-rank cost */
    for (int32_t i = 0; i < n; i++) {
        int64_t s = lengths[i];
        __int128 best_total = -1;
        int64_t best_rank = -1;
        for (int64_t cp = 1;; cp = (cp * 2 > num_ranks) ? num_ranks : cp * 2) {
            if (s <= cp * (int64_t)max_seqlen_per_rank) {
                int64_t c = dcp_cost(model, s, (int32_t)cp);
                __int128 total = (__int128)cp * c;
                if (best_total < 0 || total < best_total) best_total = total;
                if (best_rank < 0 || c < best_rank) best_rank = c;
            }
            if (cp >= num_ranks) break;
        }
        if (extra_cp && s <= (int64_t)static_cp * max_seqlen_per_rank) {
            int64_t c = dcp_cost(model, s, static_cp);
            __int128 total = (__int128)static_cp * c;
            if (best_total < 0 || total < best_total) best_total = total;
            if (best_rank < 0 || c < best_rank) best_rank = c;
        }
        if (best_total > 0) work += best_total;
        if (best_rank > longest_run) longest_run = best_rank;
        tokens += s;
    }
    __int128 capacity = (__int128)num_ranks * max_seqlen_per_rank;
    __int128 microbatches = capacity > 0 ? (tokens + capacity - 1) / capacity : 0;
    __int128 spread = num_ranks > 0 ? (work + num_ranks - 1) / num_ranks : 0; /* ceil: the makespan is an integer */
    __int128 busiest = spread > longest_run ? spread : longest_run;
    __int128 bound = busiest + microbatches * model->microbatch_overhead;
    return bound > INT64_MAX ? INT64_MAX : (int64_t)bound;
}

dcp_status dcp__plan_stats(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths, int32_t num_lengths,
                           int64_t *finish, dcp_plan_stats *stats)
{
    const dcp_cost_model *model = &config->cost;
    const int32_t *first_group = plan->microbatch_first_group, *first_rank = plan->group_first_rank,
                  *cp_size = plan->group_cp_size;
    dcp_plan_stats st = {0};
    st.num_microbatches = plan->num_microbatches;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int64_t slowest = 0, slowest_quad = 0;
        /*
         * Dependency model: finish[first rank of a group] is that group's finish time in the latest
         * microbatch walked.  Both microbatches' groups are sorted by first rank and cover [0, N), so the
         * groups of m-1 under a group of m are found by one merge: h is the group of m-1 holding this
         * group's first rank, h_finish its finish (kept here, since finish[first_rank[h]] may be this
         * microbatch's by then).  O(groups of m-1 + groups of m).
         */
        int32_t h = m > 0 ? first_group[m - 1] : -1;
        int64_t h_finish = m > 0 ? finish[first_rank[h]] : 0;
        for (int32_t g = first_group[m]; g < first_group[m + 1]; g++) {
            int32_t cp = cp_size[g];
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

            int64_t start = 0, end = (int64_t)first_rank[g] + cp;
            if (m > 0) {
                start = h_finish;
                while (h + 1 < first_group[m] && (int64_t)first_rank[h] + cp_size[h] < end) {
                    h_finish = finish[first_rank[++h]];
                    if (h_finish > start) start = h_finish;
                }
                if ((int64_t)first_rank[h] + cp_size[h] == end && h + 1 < first_group[m])
                    h_finish = finish[first_rank[++h]]; /* the next group starts where h ends */
            }
            int64_t done = sat_add(sat_add(start, cost), model->microbatch_overhead);
            finish[first_rank[g]] = done;
            if (m + 1 == plan->num_microbatches && done > st.dependency_makespan) st.dependency_makespan = done;
        }
        st.max_rank_sum = sat_add(st.max_rank_sum, slowest);
        st.makespan = sat_add(st.makespan, sat_add(slowest, model->microbatch_overhead));
        st.quad_makespan = sat_add(st.quad_makespan, slowest_quad);
    }
    st.lower_bound = dcp__cost_lower_bound(model, lengths, num_lengths, plan->num_ranks, config->max_seqlen_per_rank);
    st.dependency_lower_bound = dcp__dependency_lower_bound(model, lengths, num_lengths, plan->num_ranks,
                                                            config->max_seqlen_per_rank,
                                                            config->context_parallel_size);
    st.step_model = model->step_model;
    int dependency = model->step_model == DCP_STEP_MODEL_DEPENDENCY;
    st.model_makespan = dependency ? st.dependency_makespan : st.makespan;
    st.model_lower_bound = dependency ? st.dependency_lower_bound : st.lower_bound;
    *stats = st;
    return DCP_OK;
}
