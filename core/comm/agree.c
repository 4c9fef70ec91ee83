/* agree.c - agreeing on a status over a communicator (see agree.h). */
#include "agree.h"
#include "../hash.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *dcp__comm_why(dcp_comm *comm, char *buffer, size_t size)
{
    const char *why = comm && comm->ops && comm->ops->describe_failure ? comm->ops->describe_failure(comm) : NULL;
    if (!why || !why[0]) return "";
    snprintf(buffer, size, "; %s", why);
    return buffer;
}

/* A status this library can return (a backend's garbage is not one). */
static int known_status(int64_t s)
{
    return s <= 0 && s >= INT32_MIN && strcmp(dcp_status_str((dcp_status)s), "DCP_ERR_UNKNOWN") != 0;
}

/* This rank's own message, kept while a new one is written around it. */
static void keep_own(const dcp__error *err, char *own, size_t size)
{
    memcpy(own, err->message, size);
    own[size - 1] = '\0';
}

dcp_status dcp__comm_ops_check(const dcp_comm_ops *ops, const char *who, const char *name, dcp__error *err)
{
    if (!ops) return dcp__fail(err, DCP_ERR_NULL_POINTER, "%s: the %s has no operations", who, name);
    if (ops->version != DCP_COMM_OPS_VERSION)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "%s: the %s's operations table is version %" PRIu32 ", this dcpack reads version %u "
                         "(dcp_comm_ops.version = DCP_COMM_OPS_VERSION)", who, name, ops->version,
                         DCP_COMM_OPS_VERSION);
    if (ops->size < sizeof(dcp_comm_ops))
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                         "%s: the %s's operations table is %" PRIu32 " bytes, version %u has %zu "
                         "(dcp_comm_ops.size = sizeof(dcp_comm_ops))", who, name, ops->size, DCP_COMM_OPS_VERSION,
                         sizeof(dcp_comm_ops));
    const char *missing = !ops->allgather ? "allgather" : !ops->allgatherv ? "allgatherv"
                        : !ops->alltoallv ? "alltoallv" : !ops->broadcast ? "broadcast" : !ops->agree ? "agree" : NULL;
    if (missing) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "%s: the %s has no %s operation", who, name, missing);
    return DCP_OK;
}

dcp_status dcp__comm_check(const dcp_comm *comm, const char *who, const char *name, dcp__error *err)
{
    if (!comm) return dcp__fail(err, DCP_ERR_NULL_POINTER, "%s: the %s is NULL", who, name);
    dcp_status s = dcp__comm_ops_check(comm->ops, who, name, err);
    if (s != DCP_OK) return s;
    if (comm->size < 1 || comm->rank < 0 || comm->rank >= comm->size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "%s: %s rank %d outside [0, %d)", who, name, comm->rank,
                         comm->size);
    return DCP_OK;
}

dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp__error *err, const char *who, const char *rank_name)
{
    dcp_status agreed = DCP_OK;
    int32_t failed = -1;
    dcp_status st = comm->ops->agree(comm, local, &agreed, &failed);
    char why[128], own[DCP_ERROR_MESSAGE_SIZE];
    if (st != DCP_OK) {
        /* the agreement's own outcome is the same on every rank that took part; a local error is not */
        if (local == DCP_OK)
            return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                             dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
        keep_own(err, own, sizeof own);
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s (this rank had failed: %s)", who,
                         rank_name, comm->rank, dcp_status_str(st), dcp__comm_why(comm, why, sizeof why), own);
    }
    /* an agreement in which this rank failed cannot be OK, and an agreed failure names a rank of the group */
    if ((agreed == DCP_OK && local != DCP_OK) || !known_status(agreed) ||
        (agreed != DCP_OK && (failed < 0 || failed >= comm->size))) {
        if (local == DCP_OK)
            return dcp__fail(err, DCP_ERR_COMM,
                             "%s: the communicator's agreement on %s %d is not believable (status %d, rank %d)%s", who,
                             rank_name, comm->rank, (int)agreed, failed, dcp__comm_why(comm, why, sizeof why));
        keep_own(err, own, sizeof own);
        return dcp__fail(err, DCP_ERR_COMM,
                         "%s: the communicator reported %s from the agreement although %s %d failed (%s): its "
                         "result cannot be trusted",
                         who, agreed == DCP_OK ? "every rank OK" : dcp_status_str(agreed), rank_name, comm->rank, own);
    }
    if (agreed == DCP_OK || (failed == comm->rank && agreed == local)) return agreed;
    if (local == DCP_OK)
        return dcp__fail(err, agreed, "%s: %s %d failed with %s", who, rank_name, failed, dcp_status_str(agreed));
    keep_own(err, own, sizeof own);
    return dcp__fail(err, agreed, "%s: %s %d failed with %s (this rank also failed: %s)", who, rank_name, failed,
                     dcp_status_str(agreed), own);
}

static const char *call_name(uint32_t kind)
{
    switch (kind) {
    case DCP_CALL_GATHER: return "dcp_gather";
    case DCP_CALL_STEP: return "dcp_step";
    case DCP_CALL_MTP_ROLL: return "dcp_mtp_roll";
    case DCP_CALL_OBSERVE: return "dcp_observe";
    default: return "an unknown call";
    }
}

/* no padding bytes: every byte of a record is a field the check covers */
_Static_assert(sizeof(dcp__call_tag) == 112, "dcp__call_tag has padding");

/* FNV-1a over bytes, then a final mix. */
static uint64_t tag_hash(const dcp__call_tag *tag)
{
    uint64_t h = dcp__fnv1a_bytes(DCP_FNV1A64_OFFSET, tag, offsetof(dcp__call_tag, check));
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29) ^ 0x5a5a5a5a5a5a5a5aull; /* an all-zero record never checks out */
}

void dcp__call_tag_init(dcp__call_tag *tag, uint32_t kind, uint64_t call, uint64_t step_id, uint64_t config_digest)
{
    memset(tag, 0, sizeof *tag);
    tag->kind = kind;
    tag->call = call;
    tag->step_id = step_id;
    tag->config_digest = config_digest;
    tag->lane_rank = -1;
}

void dcp__call_tag_seal(dcp__call_tag *tag)
{
    tag->magic = DCP_CALL_TAG_MAGIC;
    tag->check = tag_hash(tag);
}

int dcp__call_tag_valid(const dcp__call_tag *tag)
{
    return tag->magic == DCP_CALL_TAG_MAGIC && tag->check == tag_hash(tag) && known_status(tag->status);
}

/* DCP_OK when the record rank r's slot holds can be believed; else DCP_ERR_COMM, said. */
static dcp_status check_record(dcp_comm *comm, const dcp__call_tag *mine, const dcp__call_tag *t, int32_t r,
                               dcp__error *err, const char *who, const char *rank_name)
{
    char why[128];
    const char *what = NULL;
    if (!dcp__call_tag_valid(t)) what = "is not a record (zeroed, torn or garbage)";
    else if (t->rank != r) what = "holds another rank's record";
    else if (r == comm->rank && memcmp(t, mine, sizeof *t) != 0) what = "(this rank's own) came back altered";
    else if (t->phase != mine->phase) what = "holds a record of another agreement (a stale buffer)";
    if (!what) return DCP_OK;
    return dcp__fail(err, DCP_ERR_COMM,
                     "%s: the agreement's slot of %s %d %s: the communicator returned a result that cannot be "
                     "trusted (a peer gone?)%s",
                     who, rank_name, r, what, dcp__comm_why(comm, why, sizeof why));
}

/* DCP_OK when `theirs` (rank r's) matches `mine`; else the mismatch, described. */
static dcp_status compare_tags(const dcp__call_tag *mine, int32_t me, const dcp__call_tag *theirs, int32_t r,
                               dcp__error *err, const char *who, const char *rank_name)
{
    if (theirs->kind != mine->kind || theirs->call != mine->call || theirs->step_id != mine->step_id)
        return dcp__fail(err, DCP_ERR_OUT_OF_STEP,
                         "%s: ranks out of step: %s %d is in %s call %" PRIu64 " (step id %" PRIu64 "), %s %d in %s "
                         "call %" PRIu64 " (step id %" PRIu64 "); a rank skipped or repeated a call",
                         who, rank_name, r, call_name(theirs->kind), theirs->call, theirs->step_id, rank_name, me,
                         call_name(mine->kind), mine->call, mine->step_id);
    if (theirs->config_digest != mine->config_digest)
        return dcp__fail(err, DCP_ERR_INVALID_CONFIG, "%s: %s %d was built with another configuration than %s %d",
                         who, rank_name, r, rank_name, me);
    return DCP_OK;
}

dcp_status dcp__agree_call(dcp_comm *comm, dcp__call_tag *mine, dcp__call_tag *tags, dcp__error *err,
                           const char *who, const char *rank_name)
{
    char why[128], own[DCP_ERROR_MESSAGE_SIZE];
    mine->rank = comm->rank;
    dcp__call_tag_seal(mine);
    memset(tags, 0, (size_t)comm->size * sizeof *tags); /* a backend that writes nothing leaves no record */
    dcp_status st = comm->ops->allgather(comm, mine, sizeof *mine, tags);
    if (st != DCP_OK) {
        if (mine->status == DCP_OK)
            return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                             dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
        keep_own(err, own, sizeof own);
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s (this rank had failed: %s)", who,
                         rank_name, comm->rank, dcp_status_str(st), dcp__comm_why(comm, why, sizeof why), own);
    }
    /* every record must be intact before any is read: garbage never reads as "OK" */
    if (mine->status != DCP_OK) keep_own(err, own, sizeof own);
    for (int32_t r = 0; r < comm->size; r++) {
        dcp_status c = check_record(comm, mine, &tags[r], r, err, who, rank_name);
        if (c == DCP_OK) continue;
        if (mine->status != DCP_OK) {
            size_t used = strlen(err->message);
            snprintf(err->message + used, sizeof err->message - used, " (this rank had failed: %s)", own);
        }
        return c;
    }
    /* every rank sees the same tags: the first mismatch against rank 0's, then the lowest failing rank */
    for (int32_t r = 1; r < comm->size; r++) {
        dcp_status m = compare_tags(&tags[0], 0, &tags[r], r, err, who, rank_name);
        if (m != DCP_OK) return m;
    }
    for (int32_t r = 0; r < comm->size; r++) {
        dcp_status s = (dcp_status)tags[r].status;
        if (s == DCP_OK) continue;
        if (r == comm->rank) return s; /* this rank's own message stands */
        if (mine->status == DCP_OK)
            return dcp__fail(err, s, "%s: %s %d failed with %s", who, rank_name, r, dcp_status_str(s));
        keep_own(err, own, sizeof own);
        return dcp__fail(err, s, "%s: %s %d failed with %s (this rank also failed: %s)", who, rank_name, r,
                         dcp_status_str(s), own);
    }
    return mine->status; /* DCP_OK: the own record, checked above, says so */
}

dcp_status dcp__agree_call_small(dcp_comm *comm, dcp__call_tag *mine, dcp__error *err, const char *who,
                                 const char *rank_name)
{
    mine->rank = comm->rank;
    dcp__call_tag_seal(mine);
    dcp__call_tag root = *mine;
    if (comm->rank != 0) memset(&root, 0, sizeof root); /* a backend that writes nothing leaves no record */
    dcp_status st = comm->ops->broadcast(comm, &root, sizeof root, 0);
    char why[128];
    if (st != DCP_OK) {
        if (mine->status == DCP_OK)
            return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                             dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
        char own[DCP_ERROR_MESSAGE_SIZE];
        keep_own(err, own, sizeof own);
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s (this rank had failed: %s)", who,
                         rank_name, comm->rank, dcp_status_str(st), dcp__comm_why(comm, why, sizeof why), own);
    }
    dcp_status local = (dcp_status)mine->status;
    if (local == DCP_OK) {
        dcp_status m = check_record(comm, mine, &root, 0, err, who, rank_name);
        if (m == DCP_OK) m = compare_tags(mine, comm->rank, &root, 0, err, who, rank_name);
        if (m != DCP_OK) local = m;
    }
    return dcp__agree(comm, local, err, who, rank_name);
}

/* FNV-1a over one value's bytes. */
static uint64_t mix(uint64_t h, int64_t v) { return dcp__fnv1a_u64(h, (uint64_t)v); }

uint64_t dcp__config_digest(const dcp_config *c)
{
    const int64_t fields[] = {c->world_size, c->data_parallel_size, c->context_parallel_size,
                              c->tensor_parallel_size, c->pipeline_parallel_size, c->virtual_pipeline_size,
                              c->microbatch_group_size_per_vp_stage, (int64_t)c->scheduler, c->max_sequences,
                              c->max_seqlen_per_rank, c->min_cp_size, c->max_sequences_per_microbatch,
                              c->max_tokens_per_rank, c->max_microbatches, c->pad_alignment, (int64_t)c->fields,
                              c->pad_to_max_seqlen, (int64_t)c->thd_tail_policy, (int64_t)c->cp_partition,
                              c->skip_sibling_data_check, c->cost.quadratic, c->cost.linear, c->cost.round_latency,
                              c->cost.microbatch_overhead, c->cost.step_model, (int64_t)c->plan_effort};
    uint64_t h = DCP_FNV1A64_OFFSET;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) h = mix(h, fields[i]);
    for (int i = 0; i <= DCP_MAX_LOG2_CP; i++) h = mix(h, c->cost.kv[i]);
    /* the step's terms and the pipeline's: ranks planning with different ones must not meet */
    const int64_t step_terms[] = {c->cost.small_knee, c->cost.small_slope, c->cost.margin_ppm,
                                  c->cost.pipeline_schedule, c->cost.forward_ppm, c->cost.first_stage_per_token,
                                  c->cost.last_stage_per_token};
    for (size_t i = 0; i < sizeof step_terms / sizeof step_terms[0]; i++) h = mix(h, step_terms[i]);
    for (int i = 0; i <= DCP_MAX_LOG2_CP; i++) h = mix(h, c->cost.cp_gather[i]);
    return h;
}
