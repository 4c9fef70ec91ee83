/*
 * gather_drivers.c - dcp_gather() and dcp_gather_packed(): every DP rank's
 * sequence lengths -> one global list, the same on every rank.  Global id =
 * the DP rank's offset (exclusive prefix sum of the counts) + the local
 * index, as in the reference.
 *
 * Local problems (a NULL input or output pointer, a negative length, corrupt
 * cu_seqlens, too many sequences, no scratch) go through the communicator's
 * agreement step first, so every rank of the DP group returns the same status
 * instead of some ranks waiting forever in the all-gather, or pairing it with
 * the failed rank's next call.  Only a communicator that cannot be used (NULL,
 * no operations, not data_parallel_size ranks) fails on the calling rank alone.  Nothing after the agreement can fail on one
 * rank alone: every later decision is taken on data all ranks share.
 *
 * The call's tag carries this rank's count of lengths and a hash of them, so
 * the agreement's one all-gather also gathers the counts, and the lengths
 * that arrive are checked against their sender's hash: a communicator that
 * "succeeds" with zeros, garbage or another call's buffer after a peer is
 * gone fails the call (DCP_ERR_COMM) instead of handing out wrong lengths.
 */
#include "context.h"
#include "stages.h"
#include "../core/comm/agree.h"
#include "../core/hash.h"

#include <string.h>

size_t dcp__gather_scratch_size(const dcp_config *config)
{
    size_t dp = (size_t)config->data_parallel_size;
    size_t s = DCP_ARENA_BYTES(int32_t, config->max_sequences); /* compacted local lengths */
    s = dcp__size_add(s, DCP_ARENA_BYTES(dcp__call_tag, dp));     /* call tags (with the counts) */
    s = dcp__size_add(s, DCP_ARENA_BYTES(size_t, dp));            /* byte counts */
    s = dcp__size_add(s, DCP_ARENA_BYTES(size_t, dp));            /* byte offsets */
    return s;
}

/* A hash of `count` lengths (each rank sends one for its own; every rank checks what arrives). */
static uint64_t lengths_hash(const int32_t *lengths, int64_t count)
{
    uint64_t h = DCP_FNV1A64_OFFSET ^ (uint64_t)count;
    for (int64_t k = 0; k < count; k++) h = dcp__hash_word(h, (uint32_t)lengths[k]);
    return h;
}

/*
 * Shared tail: `local` holds this rank's compacted lengths (or an error in
 * local_status).  The scratch was taken before the agreement, so a rank that
 * cannot get it fails in the agreement, not alone in the all-gather.
 */
static dcp_status gather_lengths(dcp_context *ctx, dcp_comm *comm, dcp__call_tag *tag, const int32_t *local,
                                 int32_t count, dcp_status local_status, dcp__arena *scratch, dcp__error *err)
{
    const int32_t dp = comm->size;
    dcp__call_tag *tags = DCP_ARENA_NEW(scratch, dcp__call_tag, dp);
    size_t *bytes = DCP_ARENA_NEW(scratch, size_t, dp);
    size_t *offsets = DCP_ARENA_NEW(scratch, size_t, dp);
    if (local_status == DCP_OK && (!local || !tags || !bytes || !offsets))
        local_status = dcp__fail(err, DCP_ERR_CAPACITY, "gather: scratch too small for %d DP ranks", dp);
    tag->status = local_status;
    tag->count = local_status == DCP_OK ? count : 0;
    tag->hash = local_status == DCP_OK ? lengths_hash(local, count) : 0;
    dcp_status st = tags ? dcp__agree_call(comm, tag, tags, err, "gather", "DP rank")
                         : dcp__agree_call_small(comm, tag, err, "gather", "DP rank");
    st = dcp__context_call_end(ctx, st);
    if (st != DCP_OK) return st;
    char why[128];

    /* every rank sees the same (checked) tags, so every rank takes the same branch below */
    int64_t total = 0;
    for (int32_t r = 0; r < dp; r++) {
        if (tags[r].count < 0 || tags[r].count > ctx->config.max_sequences)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "gather: DP rank %d reported %lld sequences", r,
                             (long long)tags[r].count);
        ctx->rank_offsets[r] = (int32_t)(total < INT32_MAX ? total : INT32_MAX);
        offsets[r] = (size_t)total * sizeof(int32_t);
        bytes[r] = (size_t)tags[r].count * sizeof(int32_t);
        total += tags[r].count;
    }
    if (total > ctx->config.max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "gather: %lld sequences over the DP group exceed max_sequences = %d",
                        (long long)total, ctx->config.max_sequences);
    ctx->rank_offsets[dp] = (int32_t)total;
    st = comm->ops->allgatherv(comm, local, (size_t)count * sizeof(int32_t), ctx->global_lengths, bytes, offsets);
    if (st != DCP_OK) return dcp__fail(err, st, "gather: all-gather of lengths failed: %s%s", dcp_status_str(st),
                                         dcp__comm_why(comm, why, sizeof why));
    for (int32_t r = 0; r < dp; r++)
        if (lengths_hash(ctx->global_lengths + ctx->rank_offsets[r], tags[r].count) != tags[r].hash)
            return dcp__fail(err, DCP_ERR_COMM,
                             "gather: the lengths that arrived from DP rank %d are not the ones it sent: the "
                             "communicator returned a result that cannot be trusted (a peer gone?)%s",
                             r, dcp__comm_why(comm, why, sizeof why));
    ctx->num_global = (int32_t)total;
    return DCP_OK;
}

/* The communicator: without a usable one no peer can be told, so these errors are local. */
static dcp_status check_comm(dcp_context *ctx, dcp_comm *comm, dcp__error *err)
{
    if (!comm || !comm->ops) return dcp__fail(err, DCP_ERR_NULL_POINTER, "gather: the communicator is NULL");
    dcp_status s = dcp__comm_ops_check(comm->ops, "gather", "communicator", err);
    if (s != DCP_OK) return s;
    if (comm->size != ctx->config.data_parallel_size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "gather: communicator has %d ranks, data_parallel_size is %d",
                        comm->size, ctx->config.data_parallel_size);
    return DCP_OK;
}

/* The caller's other pointers: a local error like any other, agreed before the all-gather. */
static dcp_status check_pointers(const void *data, int32_t n, const int32_t **global_lengths, int32_t *num_global,
                                 const int32_t **rank_offsets, dcp__error *err)
{
    if (!global_lengths || !num_global || !rank_offsets || (!data && n > 0))
        return dcp__fail(err, DCP_ERR_NULL_POINTER, "gather: a required pointer is NULL");
    return DCP_OK;
}

static dcp_status finish(dcp_context *ctx, dcp_status st, dcp__error *err, const int32_t **global_lengths,
                         int32_t *num_global, const int32_t **rank_offsets)
{
    dcp__scratch_end(ctx);
    if (st != DCP_OK) {
        ctx->num_global = 0;
        return dcp__context_fail(ctx, st, err);
    }
    *global_lengths = ctx->global_lengths;
    *num_global = ctx->num_global;
    *rank_offsets = ctx->rank_offsets;
    return DCP_OK;
}

/* The call's tag, then the communicator: either failing, this rank makes no collective. */
static dcp_status gather_begin(dcp_context *ctx, dcp_comm *comm, uint64_t step_id, dcp__call_tag *tag,
                               dcp__error *err)
{
    dcp_status st = dcp__context_call_begin(ctx, DCP_CALL_GATHER, step_id, tag, err);
    return st != DCP_OK ? st : check_comm(ctx, comm, err);
}

/* The scratch for this rank's lengths, or DCP_ERR_CAPACITY: a failure the peers hear of in the gather. */
static dcp_status check_scratch(const dcp_context *ctx, const int32_t *local, dcp__error *err)
{
    if (local) return DCP_OK;
    return dcp__fail(err, DCP_ERR_CAPACITY, "gather: scratch too small for %d sequences", ctx->config.max_sequences);
}

dcp_status dcp_gather(dcp_context *ctx, dcp_comm *comm, uint64_t step_id, const int32_t *local_lengths, int32_t num_local,
                      const int32_t **global_lengths, int32_t *num_global, const int32_t **rank_offsets)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    dcp__call_tag tag;
    dcp_status st = gather_begin(ctx, comm, step_id, &tag, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* no collective: no peer can be told */

    dcp__scratch_begin(ctx); /* the lengths and the gather's scratch live until finish() */
    dcp__arena *scratch = &ctx->arena;
    int32_t *local = DCP_ARENA_NEW(scratch, int32_t, ctx->config.max_sequences);
    int32_t count = 0;
    dcp_status local_status = check_pointers(local_lengths, num_local, global_lengths, num_global, rank_offsets, &err);
    if (local_status == DCP_OK) local_status = check_scratch(ctx, local, &err);
    if (local_status == DCP_OK && num_local < 0)
        local_status = dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "gather: num_local %d is negative", num_local);
    for (int32_t i = 0; i < num_local && local_status == DCP_OK; i++) {
        int32_t s = local_lengths[i];
        if (s < 0)
            local_status = dcp__fail(&err, DCP_ERR_BAD_LENGTH, "gather: DP rank %d sample %d has length %d", comm->rank,
                                    i, s);
        else if (s > 0 && count >= ctx->config.max_sequences)
            local_status = dcp__fail(&err, DCP_ERR_CAPACITY, "gather: DP rank %d has more than max_sequences = %d",
                                    comm->rank, ctx->config.max_sequences);
        else if (s > 0)
            local[count++] = s;
    }
    if (local_status != DCP_OK) count = 0;
    st = gather_lengths(ctx, comm, &tag, local, count, local_status, scratch, &err);
    return finish(ctx, st, &err, global_lengths, num_global, rank_offsets);
}

dcp_status dcp_gather_packed(dcp_context *ctx, dcp_comm *comm, uint64_t step_id, const int32_t *cu_seqlens, int32_t num_cu_seqlens,
                             int64_t total_tokens, const int32_t **global_lengths, int32_t *num_global,
                             const int32_t **rank_offsets)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    dcp__call_tag tag;
    dcp_status st = gather_begin(ctx, comm, step_id, &tag, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* no collective: no peer can be told */

    dcp__scratch_begin(ctx); /* the lengths and the gather's scratch live until finish() */
    dcp__arena *scratch = &ctx->arena;
    int32_t *local = DCP_ARENA_NEW(scratch, int32_t, ctx->config.max_sequences);
    int32_t count = 0;
    dcp_status local_status =
        check_pointers(cu_seqlens, num_cu_seqlens, global_lengths, num_global, rank_offsets, &err);
    if (local_status == DCP_OK) local_status = check_scratch(ctx, local, &err);
    if (local_status == DCP_OK && (num_cu_seqlens < 1 || total_tokens < 0))
        local_status = dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "gather: %d cu_seqlens entries for %lld tokens",
                                num_cu_seqlens, (long long)total_tokens);
    if (local_status == DCP_OK && cu_seqlens[0] != 0)
        local_status = dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "gather: cu_seqlens[0] is %d, not 0", cu_seqlens[0]);
    for (int32_t i = 1; i < num_cu_seqlens && local_status == DCP_OK; i++) {
        int64_t s = (int64_t)cu_seqlens[i] - cu_seqlens[i - 1];
        if (s < 0)
            local_status = dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "gather: cu_seqlens decreases at %d (%d -> %d)", i,
                                    cu_seqlens[i - 1], cu_seqlens[i]);
        else if (cu_seqlens[i] > total_tokens)
            local_status = dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "gather: cu_seqlens[%d] = %d is past the %lld tokens",
                                    i, cu_seqlens[i], (long long)total_tokens);
        else if (s > 0 && count >= ctx->config.max_sequences)
            local_status = dcp__fail(&err, DCP_ERR_CAPACITY, "gather: DP rank %d has more than max_sequences = %d",
                                    comm->rank, ctx->config.max_sequences);
        else if (s > 0)
            local[count++] = (int32_t)s; /* empty sub-samples are dropped, as the reference does */
    }
    if (local_status != DCP_OK) count = 0;
    st = gather_lengths(ctx, comm, &tag, local, count, local_status, scratch, &err);
    return finish(ctx, st, &err, global_lengths, num_global, rank_offsets);
}
