/* plan_tables.c - building, querying and hashing plans; see plan.h. */
#include "plan.h"
#include "hash.h"

dcp_status dcp__plan_init(dcp_plan *plan, dcp__arena *arena, int32_t max_microbatches, int32_t max_groups,
                         int32_t max_ids)
{
    plan->microbatch_first_group = DCP_ARENA_NEW(arena, int32_t, (size_t)max_microbatches + 1);
    plan->group_first_rank = DCP_ARENA_NEW(arena, int32_t, max_groups);
    plan->group_cp_size = DCP_ARENA_NEW(arena, int32_t, max_groups);
    plan->group_first_id = DCP_ARENA_NEW(arena, int32_t, (size_t)max_groups + 1);
    plan->ids = DCP_ARENA_NEW(arena, int32_t, max_ids);
    if (!plan->microbatch_first_group || !plan->group_first_rank || !plan->group_cp_size ||
        !plan->group_first_id || !plan->ids)
        return DCP_ERR_WORKSPACE_TOO_SMALL;
    plan->max_microbatches = max_microbatches;
    plan->max_groups = max_groups;
    plan->max_ids = max_ids;
    if (arena->base) dcp__plan_clear(plan, 0);
    return DCP_OK;
}

void dcp__plan_clear(dcp_plan *plan, int32_t num_ranks)
{
    plan->num_ranks = num_ranks;
    plan->num_microbatches = 0;
    plan->num_groups = 0;
    plan->num_ids = 0;
    plan->microbatch_first_group[0] = 0;
    plan->group_first_id[0] = 0;
    plan->config_digest = 0;
    plan->seal = 0;
    plan->source = DCP_PLAN_SOURCE_SEARCH;
}

dcp_status dcp__plan_open_microbatch(dcp_plan *plan, dcp__error *err)
{
    if (plan->num_microbatches >= plan->max_microbatches)
        return dcp__fail(err, DCP_ERR_CAPACITY, "plan needs more than max_microbatches = %d microbatches",
                        plan->max_microbatches);
    plan->microbatch_first_group[plan->num_microbatches + 1] = plan->num_groups;
    return DCP_OK;
}

dcp_status dcp__plan_push_group(dcp_plan *plan, int32_t first_rank, int32_t cp_size, const int32_t *ids,
                               int32_t count, dcp__error *err)
{
    if (plan->num_groups >= plan->max_groups)
        return dcp__fail(err, DCP_ERR_CAPACITY, "plan needs more than %d groups", plan->max_groups);
    if (count < 0 || count > plan->max_ids - plan->num_ids)
        return dcp__fail(err, DCP_ERR_CAPACITY, "plan needs more than %d sequence slots (have %d, adding %d)",
                        plan->max_ids, plan->num_ids, count);
    int32_t g = plan->num_groups++;
    plan->group_first_rank[g] = first_rank;
    plan->group_cp_size[g] = cp_size;
    for (int32_t i = 0; i < count; i++) plan->ids[plan->num_ids + i] = ids[i];
    plan->num_ids += count;
    plan->group_first_id[g + 1] = plan->num_ids;
    plan->microbatch_first_group[plan->num_microbatches + 1] = plan->num_groups;
    return DCP_OK;
}

void dcp__plan_close_microbatch(dcp_plan *plan)
{
    plan->microbatch_first_group[plan->num_microbatches + 1] = plan->num_groups;
    plan->num_microbatches++;
}

int32_t dcp_plan_group_of_rank(const dcp_plan *plan, int32_t microbatch, int32_t rank)
{
    if (!plan || microbatch < 0 || microbatch >= plan->num_microbatches) return -1;
    int32_t lo = plan->microbatch_first_group[microbatch];
    int32_t hi = plan->microbatch_first_group[microbatch + 1];
    /* groups are sorted by first rank: find the last one starting at or before `rank` */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (plan->group_first_rank[mid] <= rank) lo = mid + 1;
        else hi = mid;
    }
    int32_t g = lo - 1;
    if (g < plan->microbatch_first_group[microbatch]) return -1;
    if (rank >= plan->group_first_rank[g] + plan->group_cp_size[g]) return -1;
    return g;
}

int32_t dcp__plan_rank_count(const dcp_plan *plan, int32_t microbatch, int32_t rank)
{
    int32_t g = dcp_plan_group_of_rank(plan, microbatch, rank);
    return g < 0 ? 0 : plan->group_first_id[g + 1] - plan->group_first_id[g];
}

static uint64_t fnv1a(uint64_t h, const int32_t *v, int32_t n)
{
    for (int32_t i = 0; i < n; i++) h = dcp__fnv1a_u32(h, (uint32_t)v[i]);
    return h;
}

uint64_t dcp_plan_hash(const dcp_plan *plan)
{
    if (!plan) return 0;
    uint64_t h = DCP_FNV1A64_OFFSET;
    int32_t header[4] = {plan->num_ranks, plan->num_microbatches, plan->num_groups, plan->num_ids};
    h = fnv1a(h, header, 4);
    h = fnv1a(h, plan->microbatch_first_group, plan->num_microbatches + 1);
    h = fnv1a(h, plan->group_first_rank, plan->num_groups);
    h = fnv1a(h, plan->group_cp_size, plan->num_groups);
    h = fnv1a(h, plan->group_first_id, plan->num_groups + 1);
    h = fnv1a(h, plan->ids, plan->num_ids);
    return h;
}
