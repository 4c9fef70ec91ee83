/*
 * agree.h - agreeing on a status over a communicator.  Internal.
 *
 * Every multi-rank call (gather, step, MTP roll) agrees on its local errors
 * before data moves, so every rank of the group returns the same status
 * instead of some ranks waiting in a collective the failed rank never joins.
 */
#ifndef DCP_AGREE_H
#define DCP_AGREE_H

#include "dcpack.h"
#include "error.h"

/*
 * Agree on `local` over `comm`; every rank returns the agreed status.  A rank
 * that failed keeps its own message (naming the lowest failing rank first when
 * that is another rank); the others name the lowest failing rank.  `who`
 * starts the messages ("gather", "step"); `rank_name` names a rank of the
 * group ("DP rank", "rank").  When the agreement itself fails, a rank that
 * failed locally returns its own status, the others the communicator's.
 */
dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp_error *err, const char *who, const char *rank_name);

#endif
