/* agree.c - agreeing on a status over a communicator (see agree.h). */
#include "agree.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *dcp__comm_why(dcp_comm *comm, char *buffer, size_t size)
{
    const char *why = comm && comm->ops && comm->ops->describe_failure ? comm->ops->describe_failure(comm) : NULL;
    if (!why || !why[0]) return "";
    snprintf(buffer, size, "; %s", why);
    return buffer;
}

dcp_status dcp__agree(dcp_comm *comm, dcp_status local, dcp_error *err, const char *who, const char *rank_name)
{
    dcp_status agreed = DCP_OK;
    int32_t failed = -1;
    dcp_status st = comm->ops->agree(comm, local, &agreed, &failed);
    if (st != DCP_OK) {
        /* the agreement's own outcome is the same on every rank that took part; a local error is not */
        char why[128];
        if (local == DCP_OK)
            return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                             dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
        char own[DCP_ERROR_MESSAGE_SIZE];
        memcpy(own, err->message, sizeof own);
        own[sizeof own - 1] = '\0';
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s (this rank had failed: %.120s)", who,
                         rank_name, comm->rank, dcp_status_str(st), dcp__comm_why(comm, why, sizeof why), own);
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

static const char *call_name(uint32_t kind)
{
    switch (kind) {
    case DCP_CALL_GATHER: return "dcp_gather";
    case DCP_CALL_STEP: return "dcp_step";
    case DCP_CALL_MTP_ROLL: return "dcp_mtp_roll";
    default: return "an unknown call";
    }
}

/* DCP_OK when `theirs` (rank r's) matches `mine`; else the mismatch, described. */
static dcp_status compare_tags(const dcp_call_tag *mine, int32_t me, const dcp_call_tag *theirs, int32_t r,
                               dcp_error *err, const char *who, const char *rank_name)
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

dcp_status dcp__agree_call(dcp_comm *comm, const dcp_call_tag *mine, dcp_call_tag *tags, dcp_error *err,
                           const char *who, const char *rank_name)
{
    dcp_status st = comm->ops->allgather(comm, mine, sizeof *mine, tags);
    char why[128];
    if (st != DCP_OK)
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                         dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
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
        char own[DCP_ERROR_MESSAGE_SIZE];
        memcpy(own, err->message, sizeof own);
        own[sizeof own - 1] = '\0';
        return dcp__fail(err, s, "%s: %s %d failed with %s (this rank also failed: %.160s)", who, rank_name, r,
                         dcp_status_str(s), own);
    }
    return DCP_OK;
}

dcp_status dcp__agree_call_small(dcp_comm *comm, const dcp_call_tag *mine, dcp_error *err, const char *who,
                                 const char *rank_name)
{
    dcp_call_tag root = *mine;
    dcp_status st = comm->ops->broadcast(comm, &root, sizeof root, 0);
    char why[128];
    if (st != DCP_OK)
        return dcp__fail(err, st, "%s: error agreement failed on %s %d: %s%s", who, rank_name, comm->rank,
                         dcp_status_str(st), dcp__comm_why(comm, why, sizeof why));
    dcp_status local = (dcp_status)mine->status;
    dcp_status m = compare_tags(mine, comm->rank, &root, 0, err, who, rank_name);
    if (m != DCP_OK) local = m;
    return dcp__agree(comm, local, err, who, rank_name);
}

/* FNV-1a over one value's bytes. */
static uint64_t mix(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (uint64_t)(v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
    return h;
}

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
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) h = mix(h, fields[i]);
    for (int i = 0; i <= DCP_MAX_LOG2_CP; i++) h = mix(h, c->cost.kv[i]);
    return h;
}
