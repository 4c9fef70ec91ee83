/*
 * strip.c - which fields a PP stage keeps, and which of them each of its
 * virtual stages shows: the first stage takes the inputs (tokens,
 * position_ids), the last the targets (labels, loss_mask), an MTP stage
 * both, as Megatron-LM's reference does.  The fields a rank does not keep
 * are never moved.
 */
#include "stages.h"

uint32_t dcp__strip_fields(const dcp_config *c, int32_t pipeline_rank, uint32_t mtp)
{
    uint32_t f = 0;
    if (pipeline_rank == 0 || mtp) f |= DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS;
    if (pipeline_rank == c->pipeline_parallel_size - 1 || mtp) f |= DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK;
    return f;
}

uint32_t dcp__strip_view_fields(const dcp_config *c, int32_t pipeline_rank, uint32_t mtp, int32_t v, uint32_t kept)
{
    const int32_t vpp = c->virtual_pipeline_size;
    int first = pipeline_rank == 0 && v == 0, last = pipeline_rank == c->pipeline_parallel_size - 1 && v == vpp - 1;
    int is_mtp = v < 32 && ((mtp >> v) & 1u);
    uint32_t f = 0;
    if (first || is_mtp) f |= DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS;
    if (last || is_mtp) f |= DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK;
    return f & kept;
}
