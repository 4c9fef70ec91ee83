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
 * group ("DP rank", "rank").  When the agreement itself fails every rank
 * returns the agreement's status (the same on every rank that took part,
 * whatever each had failed with locally), so ranks that waited in different
 * places for one missing peer still agree.
 */
dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp_error *err, const char *who, const char *rank_name);

/*
 * Calls in step.  The first collective of every multi-rank call carries a
 * tag: which call it is, the caller's count of such calls, the caller's step
 * id and a digest of the configuration.  Ranks whose tags differ met in
 * different calls (one skipped or repeated a call): pairing their data would
 * be silently wrong, so every rank returns DCP_ERR_OUT_OF_STEP (a different
 * configuration: DCP_ERR_INVALID_CONFIG) and says which ranks differ.
 */
enum { DCP_CALL_GATHER = 1, DCP_CALL_STEP = 2, DCP_CALL_MTP_ROLL = 3 };

typedef struct dcp_call_tag {
    uint32_t kind;          /* DCP_CALL_* */
    int32_t status;         /* the rank's local status */
    uint64_t call;          /* the caller's count of multi-rank calls before this one */
    uint64_t step_id;       /* dcp_step_args.step_id, or 0 */
    uint64_t config_digest; /* dcp__config_digest, or 0 where there is no configuration */
} dcp_call_tag;

/*
 * Agree on a call in one all-gather of every rank's tag into `tags`
 * (comm->size entries of scratch): first that all tags match, then on the
 * statuses as dcp__agree does.  Every rank returns the same status.
 */
dcp_status dcp__agree_call(dcp_comm *comm, const dcp_call_tag *mine, dcp_call_tag *tags, dcp_error *err,
                           const char *who, const char *rank_name);

/*
 * The same without scratch, in two collectives: rank 0's tag is broadcast and
 * each rank compares its own, then the statuses (a mismatch counting as a
 * failure) are agreed.  A mismatch can then hide behind a lower rank's local
 * error; that call fails anyway, and the next one reports it.
 */
dcp_status dcp__agree_call_small(dcp_comm *comm, const dcp_call_tag *mine, dcp_error *err, const char *who,
                                 const char *rank_name);

/* Why comm's last operation failed, as "; <the backend's sentence>", or "" when it says nothing. */
const char *dcp__comm_why(dcp_comm *comm, char *buffer, size_t size);

/* A digest of every field of a configuration (padding bytes excluded): ranks compare it. */
uint64_t dcp__config_digest(const dcp_config *config);

#endif
