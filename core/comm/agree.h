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
#include "../error.h"

/*
 * Agree on `local` over `comm` through the backend's agree(); every rank
 * returns the agreed status.  A rank that failed keeps its own message
 * (naming the lowest failing rank first when that is another rank); the
 * others name the lowest failing rank.  `who` starts the messages ("gather",
 * "step"); `rank_name` names a rank of the group ("DP rank", "rank").  When
 * the agreement itself fails every rank returns the agreement's status (the
 * same on every rank that took part, whatever each had failed with locally),
 * so ranks that waited in different places for one missing peer still agree.
 * An agreement is never DCP_OK where this rank's own status was an error:
 * a backend that reports "every rank OK" then (or an agreed value that is no
 * status, or names no rank of the group) is not believed, and the call
 * returns DCP_ERR_COMM with this rank's own message.
 */
dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp__error *err, const char *who, const char *rank_name);

/*
 * Whether an operations table can be called through: this version
 * (DCP_COMM_OPS_VERSION), at least its size, every required operation.  The
 * check says which is wrong in `err` (may be NULL; DCP_ERR_NULL_POINTER for no
 * table, DCP_ERR_INVALID_ARGUMENT for the rest), `who` and `name` starting it.
 */
dcp_status dcp__comm_ops_check(const dcp_comm_ops *ops, const char *who, const char *name, dcp__error *err);

/*
 * Whether `comm` can be called through: non-NULL, a dcp_comm_ops table of
 * this version and at least its size, every required operation present, and
 * rank inside [0, size).  Otherwise fails `err` (DCP_ERR_NULL_POINTER for a
 * missing communicator or table, DCP_ERR_INVALID_ARGUMENT for the rest)
 * with `who` ("step", "gather") and `name` ("TP communicator") in the message.
 */
dcp_status dcp__comm_check(const dcp_comm *comm, const char *who, const char *name, dcp__error *err);

/*
 * Calls in step.  The first collective of every multi-rank call carries a
 * tag: which call it is, the caller's count of such calls, the caller's step
 * id and a digest of the configuration.  Ranks whose tags differ met in
 * different calls (one skipped or repeated a call): pairing their data would
 * be silently wrong, so every rank returns DCP_ERR_OUT_OF_STEP (a different
 * configuration: DCP_ERR_INVALID_CONFIG) and says which ranks differ.
 */
enum { DCP_CALL_GATHER = 1, DCP_CALL_STEP = 2, DCP_CALL_MTP_ROLL = 3, DCP_CALL_OBSERVE = 4 };

#define DCP_CALL_TAG_MAGIC 0x44435054u /* "DCPT" */

/*
 * A rank's record in an agreement.  It travels through the caller's
 * communicator as plain bytes, so it carries its own proof of integrity:
 * the magic, and `check`, a hash of every other byte (dcp__call_tag_seal).
 * A buffer a failed backend left zeroed, half written, stale from another
 * agreement (another phase or call) or full of garbage cannot read as a
 * valid record, so it can never read as "every rank OK".
 */
typedef struct dcp__call_tag {
    uint32_t magic;         /* DCP_CALL_TAG_MAGIC */
    uint32_t kind;          /* DCP_CALL_* */
    int32_t status;         /* the rank's local status */
    uint32_t phase;         /* which agreement of the call: 0 the first, then 1, 2, ... */
    uint64_t call;          /* the caller's count of multi-rank calls before this one */
    uint64_t step_id;       /* the caller's step id, or 0 */
    uint64_t config_digest; /* dcp__config_digest, or 0 where there is no configuration */
    int32_t rank;           /* the sender's rank in the communicator */
    int32_t lane_rank;      /* dcp_step: the sender's DPxCP rank when it holds data, else -1 */
    int32_t stage;          /* dcp_step: the sender's PP stage */
    uint32_t field_mask;    /* dcp_step: the fields field_digest covers */
    int64_t count;          /* payload: dcp_gather's count of lengths; dcp_step's count of sequences */
    uint64_t hash;          /* payload: a hash of the lengths (or (padded, original) pairs) counted */
    uint64_t field_digest[4]; /* dcp_step: per-field digests of the data held (DCP_FIELD_* order), or 0 */
    uint64_t check;         /* a hash of every byte above */
} dcp__call_tag;

/* A tag for `comm`'s rank, all of it zero but kind, call, step id and configuration digest. */
void dcp__call_tag_init(dcp__call_tag *tag, uint32_t kind, uint64_t call, uint64_t step_id, uint64_t config_digest);

/* Set the magic and the check over the rest (call just before sending). */
void dcp__call_tag_seal(dcp__call_tag *tag);

/* 1 when the record's magic and check hold. */
int dcp__call_tag_valid(const dcp__call_tag *tag);

/*
 * Agree on a call in one all-gather of every rank's sealed tag into `tags`
 * (comm->size entries of scratch): first that every record is intact (its
 * magic and check hold, it names its sender's rank, this rank's own record
 * came back as sent, and it belongs to this phase: else DCP_ERR_COMM, the
 * communicator's result cannot be trusted), then that all tags match (else
 * DCP_ERR_OUT_OF_STEP or DCP_ERR_INVALID_CONFIG), then on the statuses as
 * dcp__agree does.  Every rank whose communicator works returns the same
 * status, and never DCP_OK where its own status was an error.  `mine` is
 * sealed here (its rank set to comm->rank).
 */
dcp_status dcp__agree_call(dcp_comm *comm, dcp__call_tag *mine, dcp__call_tag *tags, dcp__error *err,
                           const char *who, const char *rank_name);

/*
 * The same without scratch, in two collectives: rank 0's sealed tag is
 * broadcast and each rank checks and compares its own, then the statuses (a
 * mismatch counting as a failure) are agreed through dcp__agree.  A mismatch
 * can then hide behind a lower rank's local error; that call fails anyway,
 * and the next one reports it.
 */
dcp_status dcp__agree_call_small(dcp_comm *comm, dcp__call_tag *mine, dcp__error *err, const char *who,
                                 const char *rank_name);

/* Why comm's last operation failed, as "; <the backend's sentence>", or "" when it says nothing. */
const char *dcp__comm_why(dcp_comm *comm, char *buffer, size_t size);

/* A digest of every field of a configuration (padding bytes excluded): ranks compare it. */
uint64_t dcp__config_digest(const dcp_config *config);

#endif
