/* assign.c - one entry point for the three schedulers. */
#include "../stages.h"
#include "../../core/plan.h"

size_t dcp__assign_scratch_size(const dcp_config *config)
{
    switch (config->scheduler) {
    case DCP_SCHEDULER_DP_BALANCED: return dcp__assign_dp_balanced_scratch_size(config);
    case DCP_SCHEDULER_DYNAMIC_CP: return dcp__assign_dynamic_cp_scratch_size(config);
    case DCP_SCHEDULER_BALANCED: return dcp__assign_balanced_scratch_size(config);
    }
    return 0;
}

dcp_status dcp__assign(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    dcp__plan_clear(plan, in->num_ranks);
    if (in->num_sequences == 0) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "empty batch: no sequences to plan");
    switch (in->config->scheduler) {
    case DCP_SCHEDULER_DP_BALANCED: return dcp__assign_dp_balanced(in, plan, scratch, err);
    case DCP_SCHEDULER_DYNAMIC_CP: return dcp__assign_dynamic_cp(in, plan, scratch, err);
    case DCP_SCHEDULER_BALANCED: return dcp__assign_balanced(in, plan, scratch, err);
    }
    return dcp__fail(err, DCP_ERR_INVALID_CONFIG, "unknown scheduler %d", (int)in->config->scheduler);
}
