/* agree.c - agreeing on a status over a communicator (see agree.h). */
#include "agree.h"

#include <string.h>

dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp_error *err, const char *who, const char *rank_name)
{
    dcp_status agreed = DCP_OK;
    int32_t failed = -1;
    dcp_status st = comm->ops->agree(comm, local, &agreed, &failed);
    if (st != DCP_OK) {
        if (local != DCP_OK) return local;
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s", who, rank_name, comm->rank,
                         dcp_status_str(st));
    }
    if (agreed == DCP_OK || (failed == comm->rank && agreed == local)) return agreed;
    if (local == DCP_OK)
        return dcp__fail(err, agreed, "%s: %s %d failed with %s", who, rank_name, failed, dcp_status_str(agreed));
    char own[DCP_ERROR_MESSAGE_SIZE];
    memcpy(own, err->message, sizeof own);
    own[sizeof own - 1] = '\0';
    return dcp__fail(err, agreed, "%s: %s %d failed with %s (this rank also failed: %.160s)", who, rank_name, failed,
                     dcp_status_str(agreed), own);
}
