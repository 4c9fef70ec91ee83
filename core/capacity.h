/*
 * capacity.h - a rank's step capacities, worked out from the configuration
 * alone: how many microbatches and cu_seqlens entries its body holds, and
 * bounds on the route tables.  Internal.
 *
 * They sit below pipeline/ so that the step's sizes (pipeline/context.c)
 * and the stages that lay out scratch with them (pipeline/reroute.c, the
 * driver) both use them without calling each other.
 */
#ifndef DCP_CAPACITY_H
#define DCP_CAPACITY_H

#include "dcpack.h"

#include <stddef.h>
#include <stdint.h>

/* Resolved microbatch capacity of a rank: max_microbatches, or max_sequences when 0. */
int32_t dcp__step_max_microbatches(const dcp_config *config);
/* cu_seqlens entries over all microbatches of a rank, at most. */
int64_t dcp__step_cu_capacity(const dcp_config *config);
/* Pieces one rank may send in one step, at most. */
size_t dcp__step_send_piece_bound(const dcp_config *config);
/* cu_seqlens entries one microbatch may need, at most. */
size_t dcp__step_group_cu_bound(const dcp_config *config);

#endif
