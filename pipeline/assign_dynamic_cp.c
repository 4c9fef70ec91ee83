/* assign_dynamic_cp.c - placeholder until the dynamic_cp scheduler lands: it reports itself unavailable. */
#include "stages.h"

size_t dcp_assign_dynamic_cp_scratch_size(const dcp_config *config)
{
    (void)config;
    return 0;
}

dcp_status dcp_assign_dynamic_cp(const dcp_schedule_input *in, dcp_plan *plan, dcp_arena *scratch, dcp_error *err)
{
    (void)in;
    (void)plan;
    (void)scratch;
    return dcp_fail(err, DCP_ERR_UNSUPPORTED, "the dynamic_cp scheduler is not built yet");
}
