/*
 * gather.c - the step's gather stage: dcp__gather_local lists this rank's
 * sequences from its samples, then dcp__gather_step all-gathers every DPxCP
 * rank's header and (padded, original) lengths; the step driver agrees on
 * its errors.  The public dcp_gather() and dcp_gather_packed() are in
 * gather_drivers.c.
 */
#include "stages.h"
#include "../core/comm/agree.h"
#include "../core/hash.h"
#include "../core/int128.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* The step's gather                                                         */
/* ------------------------------------------------------------------------ */

static dcp_status check_cu_seqlens(const dcp_sample *s, int32_t i, dcp__error *err)
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
                          dcp__input_spans *out, dcp__error *err)
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
                             dcp__input_spans *out, dcp__error *err)
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

/* A hash of the (padded, original) pairs, one 64-bit step per pair (see stages.h). */
uint64_t dcp__pairs_hash(const int32_t *pairs, int32_t count)
{
    uint64_t h = DCP_FNV1A64_OFFSET ^ (uint64_t)(uint32_t)count;
    for (int32_t k = 0; k < count; k++)
        h = dcp__hash_word(h, (uint64_t)(uint32_t)pairs[2 * k] << 32 | (uint32_t)pairs[2 * k + 1]);
    return h;
}

/* The step gather's scratch for n ranks: their headers, the all-gather's bytes and offsets, every (padded, original) pair. */
typedef struct gather_scratch {
    rank_header *headers;
    size_t *bytes, *offsets;
    int32_t *pairs;
} gather_scratch;

static int gather_scratch_take(const dcp_config *c, size_t n, dcp__arena *scratch, gather_scratch *g)
{
    g->headers = DCP_ARENA_NEW(scratch, rank_header, n);
    g->bytes = DCP_ARENA_NEW(scratch, size_t, n);
    g->offsets = DCP_ARENA_NEW(scratch, size_t, n);
    g->pairs = DCP_ARENA_NEW(scratch, int32_t, dcp__size_mul(2, (size_t)c->max_sequences));
    return g->headers && g->bytes && g->offsets && g->pairs; /* not the sticky flag: the arena may have failed before */
}

/* What gather_scratch_take lays out, measured on a measuring arena. */
size_t dcp__gather_step_scratch_size(const dcp_config *c)
{
    dcp__arena m;
    dcp__arena_init_measure(&m);
    gather_scratch g;
    return gather_scratch_take(c, (size_t)dcp_config_num_ranks(c), &m, &g) ? m.used : SIZE_MAX;
}

dcp_status dcp__gather_step(dcp_comm *lane, uint32_t fields, const dcp__input_spans *local, uint64_t data_digest,
                            const dcp_config *c, dcp__step_lengths *out, dcp__arena *scratch, dcp_step_stats *stats,
                            dcp__error *err)
{
    const int32_t n = lane->size, cp = c->context_parallel_size, dp = c->data_parallel_size;
    rank_header mine = {HEADER_MAGIC, fields, local->count, 0, dcp__pairs_hash(local->pairs, local->count),
                        data_digest, local->tokens, 0};
    mine.check = header_check(&mine);
    char why[128];

    gather_scratch g;
    if (!gather_scratch_take(c, (size_t)n, scratch, &g))
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: gather scratch too small for %d ranks", n);
    rank_header *headers = g.headers;
    size_t *bytes = g.bytes, *offsets = g.offsets;
    int32_t *pairs = g.pairs;
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
    dcp__i128 squared = 0;
    for (int64_t i = 0; i < total; i++) {
        out->padded[i] = pairs[2 * i];
        out->original[i] = pairs[2 * i + 1];
        sum += pairs[2 * i];
        squared += (dcp__i128)pairs[2 * i] * pairs[2 * i];
    }
    out->num_sequences = (int32_t)total;
    if (squared > INT64_MAX) return dcp__fail(err, DCP_ERR_OVERFLOW, "step: the sum of squared lengths overflows int64");
    out->sum = sum;
    out->squared_sum = (int64_t)squared;
    return DCP_OK;
}
