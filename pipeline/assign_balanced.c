/* assign_balanced.c - placeholder until the balanced scheduler lands: it reports itself unavailable. */
#include "stages.h"

size_t dcp_assign_balanced_scratch_size(const dcp_config *config)
{
    (void)config;
    return 0;
}

dcp_status dcp_assign_balanced(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    (void)in;
    (void)plan;
    (void)scratch;
    return dcp_fail(err, DCP_ERR_UNSUPPORTED, "the balanced scheduler is not built yet");
}
