/*
 * assign.c - the assign stage: the table of schedulers, and the driver's
 * offer of one scheduler's plan to another as a candidate.
 */
#include "../stages.h"
#include "../../core/plan.h"

static size_t balanced_scratch_size(const dcp_config *config);

/* By dcp_scheduler value. */
static const dcp__scheduler schedulers[] = {
    [DCP_SCHEDULER_DP_BALANCED] = {"dp_balanced", dcp__assign_dp_balanced_scratch_size, dcp__assign_dp_balanced},
    [DCP_SCHEDULER_DYNAMIC_CP] = {"dynamic_cp", dcp__assign_dynamic_cp_scratch_size, dcp__assign_dynamic_cp},
    [DCP_SCHEDULER_BALANCED] = {"balanced", balanced_scratch_size, dcp__assign_balanced},
};
enum { NUM_SCHEDULERS = (int)(sizeof schedulers / sizeof schedulers[0]) };

/*
 * Which scheduler's plan each is offered (-1: none).  balanced takes
 * dynamic_cp's, so that with few sequences per rank its plan is never above
 * dynamic_cp's (pipeline/assign/balanced/balanced_reference.c).
 */
static const int offered[] = {
    [DCP_SCHEDULER_DP_BALANCED] = -1,
    [DCP_SCHEDULER_DYNAMIC_CP] = -1,
    [DCP_SCHEDULER_BALANCED] = DCP_SCHEDULER_DYNAMIC_CP,
};

const dcp__scheduler *dcp__scheduler_of(dcp_scheduler which)
{
    const int i = (int)which;
    return i >= 0 && i < NUM_SCHEDULERS ? &schedulers[i] : NULL;
}

const dcp__scheduler *dcp__scheduler_candidate_of(dcp_scheduler which)
{
    const int i = (int)which;
    return i >= 0 && i < NUM_SCHEDULERS && offered[i] >= 0 ? &schedulers[offered[i]] : NULL;
}

static size_t balanced_scratch_size(const dcp_config *config)
{
    return dcp__assign_balanced_scratch_size(config, dcp__scheduler_candidate_of(DCP_SCHEDULER_BALANCED));
}

size_t dcp__assign_scratch_size(const dcp_config *config)
{
    const dcp__scheduler *s = dcp__scheduler_of(config->scheduler);
    return s ? s->scratch_size(config) : 0;
}

dcp_status dcp__assign(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err)
{
    dcp__plan_clear(plan, in->num_ranks);
    if (in->num_sequences == 0) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "empty batch: no sequences to plan");
    const dcp__scheduler *s = dcp__scheduler_of(in->config->scheduler);
    if (!s) return dcp__fail(err, DCP_ERR_INVALID_CONFIG, "unknown scheduler %d", (int)in->config->scheduler);
    dcp__schedule_input offer = *in;
    offer.candidate = dcp__scheduler_candidate_of(in->config->scheduler);
    return s->assign(&offer, plan, scratch, err);
}
