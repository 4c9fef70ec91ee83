/*
 * gather.c - every DP rank's sequence lengths -> one global list, the same on
 * every rank.  Global id = the DP rank's offset (exclusive prefix sum of the
 * counts) + the local index, as in the reference.
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
 *
 * The step's gather (dcp__gather_local, dcp__gather_step) lists this rank's
 * sequences from its samples, then all-gathers every DPxCP rank's header and
 * (padded, original) lengths; the step driver agrees on its errors.
 */
#include "context.h"
#include "stages.h"
#include "step.h"
#include "../core/agree.h"

#include <string.h>

size_t dcp__gather_scratch_size(const dcp_config *config)
{
    size_t dp = (size_t)config->data_parallel_size;
    size_t s = DCP_ARENA_BYTES(int32_t, config->max_sequences); /* compacted local lengths */
    s = dcp__size_add(s, DCP_ARENA_BYTES(dcp_call_tag, dp));     /* call tags (with the counts) */
    s = dcp__size_add(s, DCP_ARENA_BYTES(size_t, dp));            /* byte counts */
    s = dcp__size_add(s, DCP_ARENA_BYTES(size_t, dp));            /* byte offsets */
    return s;
}

/* A hash of `count` lengths (each rank sends one for its own; every rank checks what arrives). */
static uint64_t lengths_hash(const int32_t *lengths, int64_t count)
{
    uint64_t h = 14695981039346656037ull ^ (uint64_t)count;
    for (int64_t k = 0; k < count; k++) {
        h = (h ^ (uint32_t)lengths[k]) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h;
}

/*
 * Shared tail: `local` holds this rank's compacted lengths (or an error in
 * local_status).  The scratch was taken before the agreement, so a rank that
 * cannot get it fails in the agreement, not alone in the all-gather.
 */
static dcp_status gather_lengths(dcp_context *ctx, dcp_comm *comm, dcp_call_tag *tag, const int32_t *local,
                                 int32_t count, dcp_status local_status, dcp_arena *scratch, dcp_error *err)
{
    const int32_t dp = comm->size;
    dcp_call_tag *tags = DCP_ARENA_NEW(scratch, dcp_call_tag, dp);
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
static dcp_status check_comm(dcp_context *ctx, dcp_comm *comm, dcp_error *err)
{
    if (!comm || !comm->ops) return dcp__fail(err, DCP_ERR_NULL_POINTER, "gather: the communicator is NULL");
    if (comm->size != ctx->config.data_parallel_size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "gather: communicator has %d ranks, data_parallel_size is %d",
                        comm->size, ctx->config.data_parallel_size);
    return DCP_OK;
}

/* The caller's other pointers: a local error like any other, agreed before the all-gather. */
static dcp_status check_pointers(const void *data, int32_t n, const int32_t **global_lengths, int32_t *num_global,
                                 const int32_t **rank_offsets, dcp_error *err)
{
    if (!global_lengths || !num_global || !rank_offsets || (!data && n > 0))
        return dcp__fail(err, DCP_ERR_NULL_POINTER, "gather: a required pointer is NULL");
    return DCP_OK;
}

static dcp_status finish(dcp_context *ctx, dcp_status st, dcp_error *err, const int32_t **global_lengths,
                         int32_t *num_global, const int32_t **rank_offsets)
{
    dcp__arena_reset(&ctx->arena, ctx->scratch_mark);
    if (st != DCP_OK) {
        ctx->num_global = 0;
        return dcp__context_fail(ctx, st, err);
    }
    *global_lengths = ctx->global_lengths;
    *num_global = ctx->num_global;
    *rank_offsets = ctx->rank_offsets;
    return DCP_OK;
}

dcp_status dcp_gather(dcp_context *ctx, dcp_comm *comm, uint64_t step_id, const int32_t *local_lengths, int32_t num_local,
                      const int32_t **global_lengths, int32_t *num_global, const int32_t **rank_offsets)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp_error err;
    dcp__error_clear(&err);
    dcp_call_tag tag;
    dcp_status st = dcp__context_call_begin(ctx, DCP_CALL_GATHER, step_id, &tag, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* out of step: no collective */
    st = check_comm(ctx, comm, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* no peer can be told */

    dcp_arena *scratch = dcp__context_scratch(ctx);
    int32_t *local = DCP_ARENA_NEW(scratch, int32_t, ctx->config.max_sequences);
    int32_t count = 0;
    dcp_status local_status = check_pointers(local_lengths, num_local, global_lengths, num_global, rank_offsets, &err);
    if (local_status == DCP_OK && !local)
        local_status = dcp__fail(&err, DCP_ERR_CAPACITY, "gather: scratch too small for %d sequences",
                                ctx->config.max_sequences);
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
    dcp_error err;
    dcp__error_clear(&err);
    dcp_call_tag tag;
    dcp_status st = dcp__context_call_begin(ctx, DCP_CALL_GATHER, step_id, &tag, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* out of step: no collective */
    st = check_comm(ctx, comm, &err);
    if (st != DCP_OK) return dcp__context_fail(ctx, st, &err); /* no peer can be told */

    dcp_arena *scratch = dcp__context_scratch(ctx);
    int32_t *local = DCP_ARENA_NEW(scratch, int32_t, ctx->config.max_sequences);
    int32_t count = 0;
    dcp_status local_status =
        check_pointers(cu_seqlens, num_cu_seqlens, global_lengths, num_global, rank_offsets, &err);
    if (local_status == DCP_OK && !local)
        local_status = dcp__fail(&err, DCP_ERR_CAPACITY, "gather: scratch too small for %d sequences",
                                ctx->config.max_sequences);
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

/* ------------------------------------------------------------------------ */
/* The step's gather                                                         */
/* ------------------------------------------------------------------------ */

static dcp_status check_cu_seqlens(const dcp_sample *s, int32_t i, dcp_error *err)
{
    if (s->num_cu_seqlens < 1)
        return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d has %d cu_seqlens entries", i, s->num_cu_seqlens);
    if (s->cu_seqlens[0] != 0)
        return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d cu_seqlens[0] is %d, not 0", i, s->cu_seqlens[0]);
    for (int32_t j = 1; j < s->num_cu_seqlens; j++) {
        int32_t a = s->cu_seqlens[j - 1], b = s->cu_seqlens[j];
        if (b < a)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d cu_seqlens decreases at %d (%d -> %d)", i, j,
                             a, b);
        if (b > s->num_tokens)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d cu_seqlens[%d] = %d is past its %lld-token buffer",
                             i, j, b, (long long)s->num_tokens);
    }
    return DCP_OK;
}

/* The sequences of the samples into the table (count and sums in locals: the table's arrays cannot alias them). */
static dcp_status collect(const dcp_step_input *in, const dcp_config *c, int64_t token_capacity,
                          dcp_local_sequences *out, dcp_error *err)
{
    int32_t count = 0;
    int64_t tokens = 0, original_tokens = 0;
    dcp_status st = DCP_OK;
    const int want_tokens = (in->fields & DCP_FIELD_TOKENS) != 0, want_labels = (in->fields & DCP_FIELD_LABELS) != 0;
    const int want_positions = (in->fields & DCP_FIELD_POSITION_IDS) != 0;
    const int want_mask = (in->fields & DCP_FIELD_LOSS_MASK) != 0;
#define PUSH(sample_, start_, padded_, original_)                                                          \
    do {                                                                                                   \
        out->sample[count] = (sample_);                                                                    \
        out->start[count] = (start_);                                                                      \
        out->pairs[2 * count] = (padded_);                                                                 \
        out->pairs[2 * count + 1] = (original_);                                                           \
        tokens += (padded_);                                                                               \
        original_tokens += (original_);                                                                    \
        count++;                                                                                           \
    } while (0)
    for (int32_t i = 0; i < in->num_samples && st == DCP_OK; i++) {
        const dcp_sample *s = &in->samples[i];
        if (s->num_tokens < 0) {
            st = dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d has %lld tokens", i, (long long)s->num_tokens);
            break;
        }
        const int missing = s->num_tokens > 0 && ((want_tokens && !s->tokens) | (want_labels && !s->labels) |
                                                  (want_positions && !s->position_ids) | (want_mask && !s->loss_mask));
        if (missing) { /* which one, for the message */
            for (int f = 0; f < DCP_NUM_FIELDS && st == DCP_OK; f++)
                if ((in->fields & dcp__field_bit[f]) && !dcp__sample_field(s, f))
                    st = dcp__fail(err, DCP_ERR_NULL_POINTER, "step: sample %d has no %s buffer", i, dcp__field_name[f]);
            break;
        }
        if (s->cu_seqlens) {
            if ((st = check_cu_seqlens(s, i, err)) != DCP_OK) break;
            for (int32_t j = 1; j < s->num_cu_seqlens; j++) {
                int32_t a = s->cu_seqlens[j - 1], b = s->cu_seqlens[j];
                if (b == a) continue; /* empty sub-samples are dropped, as the reference does */
                if (count >= c->max_sequences) {
                    st = dcp__fail(err, DCP_ERR_CAPACITY, "step: more than max_sequences = %d sequences on this rank",
                                   c->max_sequences);
                    break;
                }
                PUSH(i, a, b - a, b - a);
            }
            if (st != DCP_OK) break;
        } else {
            if ((int64_t)s->padded_length != s->num_tokens) {
                st = dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                               "step: sample %d padded length %d disagrees with its %lld-token buffer", i,
                               s->padded_length, (long long)s->num_tokens);
                break;
            }
            if (s->original_length < 0 || s->original_length > s->padded_length) {
                st = dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d original length %d outside [0, %d]", i,
                               s->original_length, s->padded_length);
                break;
            }
            if (s->padded_length == 0) continue;
            if (count >= c->max_sequences) {
                st = dcp__fail(err, DCP_ERR_CAPACITY, "step: more than max_sequences = %d sequences on this rank",
                               c->max_sequences);
                break;
            }
            PUSH(i, 0, s->padded_length, s->original_length);
        }
        if (tokens > token_capacity)
            st = dcp__fail(err, DCP_ERR_CAPACITY, "step: this rank's input exceeds max_tokens_per_rank = %lld",
                           (long long)token_capacity);
    }
#undef PUSH
    out->count = count;
    out->tokens = tokens;
    out->original_tokens = original_tokens;
    return st;
}

dcp_status dcp__gather_local(const dcp_step_input *in, uint32_t needed, const dcp_config *c, int64_t token_capacity,
                             dcp_local_sequences *out, dcp_error *err)
{
    char fa[64], fb[64];
    out->count = 0;
    out->tokens = 0;
    out->original_tokens = 0;
    if (!in) return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: input is NULL on a rank that holds data");
    if (in->fields & ~c->fields)
        return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: input carries fields (%s) outside config.fields (%s)",
                         dcp__field_names(in->fields, fa, sizeof fa), dcp__field_names(c->fields, fb, sizeof fb));
    if (needed & ~in->fields)
        return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: this PP stage needs fields (%s), the input carries (%s)",
                         dcp__field_names(needed, fa, sizeof fa), dcp__field_names(in->fields, fb, sizeof fb));
    if (in->num_samples < 0 || (in->num_samples > 0 && !in->samples))
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: %d samples at %p", in->num_samples,
                         (const void *)in->samples);
    if (in->num_samples > c->max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: %d samples exceed max_sequences = %d", in->num_samples,
                         c->max_sequences);
    return collect(in, c, token_capacity, out, err);
}

/* What each DPxCP rank tells the others before anything moves. */
typedef struct rank_header {
    uint32_t magic;  /* HEADER_MAGIC */
    uint32_t fields;
    int32_t count;   /* kept sequences */
    uint32_t zero;   /* 0 (no padding bytes in a header) */
    uint64_t hash;   /* of its (padded, original) pairs: CP siblings must agree */
    uint64_t data;   /* digest of the bytes it moves (core/digest.h), or 0 unchecked: CP siblings must agree */
    int64_t tokens;  /* sum of padded lengths */
    uint64_t check;  /* a hash of the fields above: a zeroed, torn or garbage header never reads as one */
} rank_header;

#define HEADER_MAGIC 0x44435048u /* "DCPH" */

static uint64_t header_check(const rank_header *h)
{
    uint64_t v[5] = {(uint64_t)h->magic << 32 | h->fields, (uint64_t)(uint32_t)h->count, h->hash, h->data,
                     (uint64_t)h->tokens};
    uint64_t x = 0x243F6A8885A308D3ull;
    for (int i = 0; i < 5; i++) {
        x = (x ^ v[i]) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 31;
    }
    return x;
}

/* A hash of the (padded, original) pairs, one 64-bit step per pair (see step.h). */
uint64_t dcp__pairs_hash(const int32_t *pairs, int32_t count)
{
    uint64_t h = 14695981039346656037ull ^ (uint64_t)(uint32_t)count;
    for (int32_t k = 0; k < count; k++) {
        uint64_t v = (uint64_t)(uint32_t)pairs[2 * k] << 32 | (uint32_t)pairs[2 * k + 1];
        h = (h ^ v) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h;
}

size_t dcp__gather_step_scratch_size(const dcp_config *c)
{
    size_t n = (size_t)dcp_config_num_ranks(c);
    size_t s = DCP_ARENA_BYTES(rank_header, n);
    s = dcp__size_add(s, dcp__size_mul(2, DCP_ARENA_BYTES(size_t, n)));
    return dcp__size_add(s, DCP_ARENA_BYTES(int32_t, dcp__size_mul(2, (size_t)c->max_sequences)));
}

dcp_status dcp__gather_step(dcp_comm *lane, uint32_t fields, const dcp_local_sequences *local, uint64_t data_digest,
                            const dcp_config *c, dcp_step_lengths *out, dcp_arena *scratch, dcp_step_stats *stats,
                            dcp_error *err)
{
    const int32_t n = lane->size, cp = c->context_parallel_size, dp = c->data_parallel_size;
    rank_header mine = {HEADER_MAGIC, fields, local->count, 0, dcp__pairs_hash(local->pairs, local->count),
                        data_digest, local->tokens, 0};
    mine.check = header_check(&mine);
    char why[128];

    rank_header *headers = DCP_ARENA_NEW(scratch, rank_header, n);
    size_t *bytes = DCP_ARENA_NEW(scratch, size_t, n), *offsets = DCP_ARENA_NEW(scratch, size_t, n);
    int32_t *pairs = DCP_ARENA_NEW(scratch, int32_t, 2 * (size_t)c->max_sequences);
    if (!headers || !bytes || !offsets || !pairs)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: gather scratch too small for %d ranks", n);
    stats->collectives++;
    memset(headers, 0, (size_t)n * sizeof *headers); /* a backend that writes nothing leaves no header */
    dcp_status s = lane->ops->allgather(lane, &mine, sizeof mine, headers);
    if (s != DCP_OK) return dcp__fail(err, s, "step: all-gather of rank headers failed: %s%s", dcp_status_str(s),
                                        dcp__comm_why(lane, why, sizeof why));
    /* a header that is no header, or one out of range, is the communicator's failure: never read it */
    for (int32_t q = 0; q < n; q++)
        if (headers[q].magic != HEADER_MAGIC || headers[q].check != header_check(&headers[q]) ||
            headers[q].count < 0 || headers[q].count > c->max_sequences || headers[q].tokens < 0 ||
            (q == lane->rank && memcmp(&headers[q], &mine, sizeof mine) != 0))
            return dcp__fail(err, DCP_ERR_COMM,
                             "step: the header that arrived from DPxCP rank %d is not one it can have sent: the "
                             "communicator returned a result that cannot be trusted (a peer gone?)%s",
                             q, dcp__comm_why(lane, why, sizeof why));
    stats->metadata_bytes_received += (int64_t)((n - 1) * sizeof mine);

    /* every rank sees the same headers, so every rank takes the same branch below */
    char fa[64], fb[64];
    int64_t total = 0;
    out->max_rank_tokens = 0;
    out->max_rank_count = 0;
    for (int32_t q = 0; q < n; q++) {
        if (headers[q].fields != headers[0].fields)
            return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: DPxCP rank %d carries fields (%s), rank 0 carries (%s)", q,
                             dcp__field_names(headers[q].fields, fa, sizeof fa),
                             dcp__field_names(headers[0].fields, fb, sizeof fb));
        const rank_header *first = &headers[q - q % cp];
        if (headers[q].count != first->count || headers[q].hash != first->hash)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                             "step: CP siblings %d and %d hold different sequences (%d vs %d); they must hold the same "
                             "data", q - q % cp, q, first->count, headers[q].count);
        if (headers[q].data != first->data)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                             "step: CP siblings %d and %d hold sequences of the same lengths with different contents "
                             "(digests %016llx and %016llx); they must hold the same data",
                             q - q % cp, q, (unsigned long long)first->data, (unsigned long long)headers[q].data);
    }
    for (int32_t p = 0; p < dp; p++) {
        const rank_header *h = &headers[p * cp];
        out->rank_offsets[p] = (int32_t)(total < INT32_MAX ? total : INT32_MAX);
        total += h->count;
        if (h->tokens > out->max_rank_tokens) out->max_rank_tokens = h->tokens;
        if (h->count > out->max_rank_count) out->max_rank_count = h->count;
    }
    if (total > c->max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: %lld sequences over the DP group exceed max_sequences = %d",
                         (long long)total, c->max_sequences);
    out->rank_offsets[dp] = (int32_t)total;
    for (int32_t q = 0; q < n; q++) {
        int leader = q % cp == 0;
        bytes[q] = leader ? (size_t)headers[q].count * 2 * sizeof(int32_t) : 0;
        offsets[q] = (size_t)out->rank_offsets[q / cp] * 2 * sizeof(int32_t);
    }
    stats->collectives++;
    s = lane->ops->allgatherv(lane, local->pairs, bytes[lane->rank], pairs, bytes, offsets);
    if (s != DCP_OK) return dcp__fail(err, s, "step: all-gather of lengths failed: %s%s", dcp_status_str(s),
                                        dcp__comm_why(lane, why, sizeof why));
    stats->metadata_bytes_received += (int64_t)(total * 2 * (int64_t)sizeof(int32_t)) - (int64_t)bytes[lane->rank];
    for (int32_t p = 0; p < dp; p++)
        if (dcp__pairs_hash(pairs + 2 * (size_t)out->rank_offsets[p], headers[p * cp].count) != headers[p * cp].hash)
            return dcp__fail(err, DCP_ERR_COMM,
                             "step: the lengths that arrived from DPxCP rank %d are not the ones it sent: the "
                             "communicator returned a result that cannot be trusted (a peer gone?)%s",
                             p * cp, dcp__comm_why(lane, why, sizeof why));
    int64_t sum = 0;
    __int128 squared = 0;
    for (int64_t i = 0; i < total; i++) {
        out->padded[i] = pairs[2 * i];
        out->original[i] = pairs[2 * i + 1];
        sum += pairs[2 * i];
        squared += (__int128)pairs[2 * i] * pairs[2 * i];
    }
    out->num_sequences = (int32_t)total;
    if (squared > INT64_MAX) return dcp__fail(err, DCP_ERR_OVERFLOW, "step: the sum of squared lengths overflows int64");
    out->sum = sum;
    out->squared_sum = (int64_t)squared;
    return DCP_OK;
}
