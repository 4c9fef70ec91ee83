/*
 * step.c - the data-plane driver: one training step on one rank.
 *
 *   validate  this rank's input, locally                 -> agree over world
 *   gather    per-rank headers + (padded, original) lengths over DPxCP
 *   plan      dcp_plan_compute on the gathered padded lengths
 *   strip     keep the fields this PP stage needs
 *   geometry  THD padding and CP slice of each of this rank's microbatches
 *                                                         -> agree over world
 *   exchange  every real token once, straight to the rank that computes on it:
 *             one all-to-all-v carrying every kept field
 *   pack      received tokens to their final slots; padding slots 0, mask 1
 *   broadcast header + body to the TP group (one block for everything)
 *                                                         -> agree over world
 *
 * Both ends of the exchange derive the same segment order from the plan:
 * for a (sender, receiver) pair, microbatch by microbatch, piece by piece of
 * the receiver's buffer.  Neither side sends a layout to the other.  A
 * sequence of DP rank p is held by the CP siblings p*cp .. p*cp+cp-1; the one
 * whose CP rank equals the receiver's rank modulo cp sends it, so the
 * siblings share the sending and a receiver's own DP rank's data never
 * leaves it.
 *
 * Local errors are agreed before any data moves, capacity and geometry errors
 * before the exchange, and communicator failures at the end, so every rank of
 * the step returns the same status and caller memory is never written.
 */
#define _POSIX_C_SOURCE 200809L
#include "step.h"
#include "stages.h"
#include "../core/context.h"
#include "../core/pack.h"
#include "../gpu/step_cuda.h"

#include <string.h>
#include <time.h>

const uint32_t dcp__step_field_bit[DCP_STEP_NUM_FIELDS] = {DCP_FIELD_TOKENS, DCP_FIELD_LABELS,
                                                          DCP_FIELD_POSITION_IDS, DCP_FIELD_LOSS_MASK};
const size_t dcp__step_field_size[DCP_STEP_NUM_FIELDS] = {8, 8, 8, 4};
static const char *const field_name[DCP_STEP_NUM_FIELDS] = {"tokens", "labels", "position_ids", "loss_mask"};

/* What each DPxCP rank tells the others before anything moves. */
typedef struct rank_header {
    uint32_t fields;
    int32_t count;   /* kept sequences */
    uint64_t hash;   /* of its (padded, original) pairs: CP siblings must agree */
    int64_t tokens;  /* sum of padded lengths */
} rank_header;

/* What TP rank 0 broadcasts first: enough to lay out the body. */
enum { H_STATUS, H_MICROBATCHES, H_CU, H_TOKENS, H_KEPT, H_SEQUENCES, H_SUM, H_SQUARED, H_BODY, H_COUNT };

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */
/* ------------------------------------------------------------------------ */

static int32_t resolved_microbatches(const dcp_config *c)
{
    return c->max_microbatches > 0 ? c->max_microbatches : c->max_sequences;
}

static int64_t cu_capacity(const dcp_config *c)
{
    dcp_thd_params p;
    dcp__thd_params_from_config(c, 1, &p);
    int64_t mb = resolved_microbatches(c);
    /* each microbatch: its sequences + 1, + 1 for a dummy; or exactly S + 1 */
    int64_t free_form = (int64_t)c->max_sequences + 2 * mb;
    return p.max_packed_sequences > 0 ? mb * ((int64_t)p.max_packed_sequences + 1) + free_form : free_form;
}

static size_t bytes_per_token(uint32_t fields)
{
    size_t b = 0;
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++)
        if (fields & dcp__step_field_bit[f]) b += dcp__step_field_size[f];
    return b;
}

typedef struct body_layout {
    size_t rows, cu, cu_padded, field[DCP_STEP_NUM_FIELDS], mask, used;
} body_layout;

static void body_layout_compute(int64_t microbatches, int64_t cu, int64_t tokens, uint32_t fields, body_layout *b)
{
    size_t at = 0;
    b->rows = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(dcp_step_row, microbatches));
    b->cu = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(int32_t, cu));
    b->cu_padded = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(int32_t, cu));
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) {
        b->field[f] = SIZE_MAX;
        if (!(fields & dcp__step_field_bit[f])) continue;
        b->field[f] = at;
        at = dcp__size_add(at, dcp__arena_bytes(dcp__step_field_size[f], (size_t)tokens));
    }
    b->mask = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(uint8_t, tokens));
    b->used = at;
}

/* Pieces one rank may send: <= 2 per (sequence, receiver), receivers of a sequence <= ceil(N / cp); >= 1 token each. */
static size_t send_piece_bound(const dcp_config *c)
{
    size_t n = (size_t)dcp_config_num_ranks(c), cp = (size_t)c->context_parallel_size;
    size_t bound = dcp__size_mul(dcp__size_mul(2, (size_t)c->max_sequences), (n + cp - 1) / cp);
    return bound < (size_t)c->max_tokens_per_rank ? bound : (size_t)c->max_tokens_per_rank;
}

static size_t max_cu_tmp(const dcp_config *c)
{
    dcp_thd_params p;
    dcp__thd_params_from_config(c, 1, &p);
    int64_t entries = (int64_t)c->max_sequences + 2;
    if ((int64_t)p.max_packed_sequences + 1 > entries) entries = (int64_t)p.max_packed_sequences + 1;
    return (size_t)entries;
}

size_t dcp__step_scratch_size(const dcp_config *c)
{
    if (c->max_tokens_per_rank <= 0) return 0;
    size_t n = (size_t)dcp_config_num_ranks(c), ns = (size_t)c->max_sequences;
    size_t mb = (size_t)resolved_microbatches(c), own = dcp__size_mul(2, ns), send = send_piece_bound(c);
    size_t pack = send > own ? send : own;
    size_t staging = dcp__size_add(dcp__size_mul((size_t)c->max_tokens_per_rank, bytes_per_token(c->fields)),
                                  dcp__size_mul(8, n));
    size_t s = DCP_ARENA_BYTES(rank_header, n);
    s = dcp__size_add(s, dcp__size_mul(6, DCP_ARENA_BYTES(size_t, n)));  /* collective byte counts/offsets */
    s = dcp__size_add(s, dcp__size_mul(3, DCP_ARENA_BYTES(int64_t, n))); /* per-peer tokens, field bases */
    s = dcp__size_add(s, DCP_ARENA_BYTES(int32_t, dcp__size_mul(2, ns))); /* gathered pairs */
    s = dcp__size_add(s, DCP_ARENA_BYTES(dcp_thd_geometry, mb));
    s = dcp__size_add(s, dcp__size_mul(2, DCP_ARENA_BYTES(int32_t, ns))); /* group original/padded */
    s = dcp__size_add(s, dcp__size_mul(2, DCP_ARENA_BYTES(int32_t, max_cu_tmp(c))));
    s = dcp__size_add(s, DCP_ARENA_BYTES(int32_t, own));                     /* pieces: sequence */
    s = dcp__size_add(s, dcp__size_mul(3, DCP_ARENA_BYTES(int64_t, own)));   /* pieces: offsets, length */
    s = dcp__size_add(s, DCP_ARENA_BYTES(int32_t, own));                     /* receive: sender */
    s = dcp__size_add(s, dcp__size_mul(3, DCP_ARENA_BYTES(int64_t, own)));   /* receive: cursor, dst, length */
    s = dcp__size_add(s, dcp__size_mul(2, DCP_ARENA_BYTES(int32_t, send)));  /* send: sample, receiver */
    s = dcp__size_add(s, dcp__size_mul(3, DCP_ARENA_BYTES(int64_t, send)));  /* send: src, cursor, length */
    s = dcp__size_add(s, dcp__size_mul(2, DCP_ARENA_BYTES(int64_t, pack)));  /* per-field offsets */
    s = dcp__size_add(s, DCP_ARENA_BYTES(const void *, ns));                 /* per-sample field pointers */
    s = dcp__size_add(s, dcp__size_mul(2, dcp__arena_bytes(1, staging)));
    return s;
}

void dcp__step_device_sizes(const dcp_config *c, size_t *staging_bytes, size_t *body_bytes, int64_t *max_segments,
                           int64_t *max_sources)
{
    size_t n = (size_t)dcp_config_num_ranks(c), ns = (size_t)c->max_sequences;
    *staging_bytes = dcp__size_add(dcp__size_mul((size_t)c->max_tokens_per_rank, bytes_per_token(c->fields)),
                                  dcp__size_mul(8, n));
    body_layout b;
    body_layout_compute(resolved_microbatches(c), cu_capacity(c), c->max_tokens_per_rank, c->fields, &b);
    *body_bytes = b.used;
    /* receiving: every piece plus the gap before it, plus the tail */
    size_t receive = dcp__size_add(dcp__size_mul(2, dcp__size_mul(2, ns)), 1), send = send_piece_bound(c);
    size_t segments = receive > send ? receive : send;
    *max_segments = segments >= (size_t)INT64_MAX ? INT64_MAX : (int64_t)segments;
    *max_sources = (int64_t)(ns > n ? ns : n);
}

dcp_status dcp__step_layout(dcp_context *ctx, dcp_arena *arena, const dcp_config *c)
{
    ctx->step = NULL;
    if (c->max_tokens_per_rank <= 0) return DCP_OK;
    /* filled here and copied in: a measuring arena hands out pointers that must not be written */
    dcp_step_state *place = DCP_ARENA_NEW(arena, dcp_step_state, 1);
    dcp_step_state st;
    memset(&st, 0, sizeof st);
    const int32_t ns = c->max_sequences, mb = resolved_microbatches(c);
    st.token_capacity = c->max_tokens_per_rank;
    st.cu_capacity = cu_capacity(c);
    body_layout b;
    body_layout_compute(mb, st.cu_capacity, st.token_capacity, c->fields, &b);
    if (b.used == SIZE_MAX) return DCP_ERR_OVERFLOW;
    st.body_capacity = b.used;
    st.original_lengths = DCP_ARENA_NEW(arena, int32_t, ns);
    st.local_pairs = DCP_ARENA_NEW(arena, int32_t, 2 * (size_t)ns);
    st.local_sample = DCP_ARENA_NEW(arena, int32_t, ns);
    st.local_start = DCP_ARENA_NEW(arena, int64_t, ns);
    st.body = DCP_ARENA_NEW(arena, unsigned char, b.used);
    st.views = DCP_ARENA_NEW(arena, dcp_microbatch, (size_t)c->virtual_pipeline_size * (size_t)mb);
    if (!place || !st.original_lengths || !st.local_pairs || !st.local_sample || !st.local_start || !st.body ||
        !st.views)
        return DCP_ERR_WORKSPACE_TOO_SMALL;
    if (arena->base) *place = st;
    ctx->step = place;
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Fields a PP stage keeps (as Megatron-LM's reference does). */
static uint32_t stage_fields(const dcp_config *c, int32_t pipeline_rank, uint32_t mtp)
{
    uint32_t f = 0;
    if (pipeline_rank == 0 || mtp) f |= DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS;
    if (pipeline_rank == c->pipeline_parallel_size - 1 || mtp) f |= DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK;
    return f;
}

static const void *sample_field(const dcp_sample *s, int f)
{
    switch (f) {
    case 0: return s->tokens;
    case 1: return s->labels;
    case 2: return s->position_ids;
    default: return s->loss_mask;
    }
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t round8(size_t v) { return (v + 7) & ~(size_t)7; }

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/*
 * Agree on `local` over the world.  A rank that failed keeps its message; the
 * others name the failing rank.  Every rank returns the agreed status.
 */
static dcp_status agree(dcp_comm *world, dcp_status local, dcp_error *err, int32_t *collectives)
{
    dcp_status agreed = DCP_OK;
    int32_t failed = -1;
    (*collectives)++;
    dcp_status st = world->ops->agree(world, local, &agreed, &failed);
    if (st != DCP_OK) {
        if (local != DCP_OK) return local;
        return dcp__fail(err, st, "step: error agreement failed on world rank %d: %s", world->rank, dcp_status_str(st));
    }
    if (agreed == DCP_OK) return DCP_OK;
    if (local == DCP_OK)
        return dcp__fail(err, agreed, "step: rank %d of the step failed with %s", failed, dcp_status_str(agreed));
    if (failed != world->rank && agreed != local) {
        dcp_error own = *err;
        dcp__fail(err, agreed, "step: rank %d of the step failed with %s (this rank also failed: %.160s)", failed,
                 dcp_status_str(agreed), own.message);
    }
    return agreed;
}

/* ------------------------------------------------------------------------ */
/* Phase 0: this rank's input                                                */
/* ------------------------------------------------------------------------ */

static dcp_status read_input(dcp_context *ctx, const dcp_step_input *in, uint32_t needed, dcp_error *err)
{
    dcp_step_state *st = ctx->step;
    const dcp_config *c = &ctx->config;
    st->num_local = 0;
    if (!in) return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: input is NULL on a rank that holds data");
    if (in->fields & ~c->fields)
        return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: input carries fields 0x%x outside config.fields 0x%x",
                        in->fields, c->fields);
    if (needed & ~in->fields)
        return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: this PP stage needs fields 0x%x, the input carries 0x%x",
                        needed, in->fields);
    if (in->num_samples < 0 || (in->num_samples > 0 && !in->samples))
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: %d samples at %p", in->num_samples,
                        (const void *)in->samples);
    if (in->num_samples > c->max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: %d samples exceed max_sequences = %d", in->num_samples,
                        c->max_sequences);
    int32_t count = 0;
    int64_t tokens = 0;
    for (int32_t i = 0; i < in->num_samples; i++) {
        const dcp_sample *s = &in->samples[i];
        if (s->num_tokens < 0)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d has %lld tokens", i, (long long)s->num_tokens);
        for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++)
            if ((in->fields & dcp__step_field_bit[f]) && s->num_tokens > 0 && !sample_field(s, f))
                return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: sample %d has no %s buffer", i, field_name[f]);
        if (s->cu_seqlens) {
            if (s->num_cu_seqlens < 1)
                return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d has %d cu_seqlens entries", i,
                                s->num_cu_seqlens);
            if (s->cu_seqlens[0] != 0)
                return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d cu_seqlens[0] is %d, not 0", i,
                                s->cu_seqlens[0]);
            for (int32_t j = 1; j < s->num_cu_seqlens; j++) {
                int32_t a = s->cu_seqlens[j - 1], b = s->cu_seqlens[j];
                if (b < a)
                    return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d cu_seqlens decreases at %d (%d -> %d)",
                                    i, j, a, b);
                if (b > s->num_tokens)
                    return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                                    "step: sample %d cu_seqlens[%d] = %d is past its %lld-token buffer", i, j, b,
                                    (long long)s->num_tokens);
                if (b == a) continue; /* empty sub-samples are dropped, as the reference does */
                if (count >= c->max_sequences)
                    return dcp__fail(err, DCP_ERR_CAPACITY, "step: more than max_sequences = %d sequences on this rank",
                                    c->max_sequences);
                st->local_sample[count] = i;
                st->local_start[count] = a;
                st->local_pairs[2 * count] = b - a;
                st->local_pairs[2 * count + 1] = b - a;
                tokens += b - a;
                count++;
            }
        } else {
            if ((int64_t)s->padded_length != s->num_tokens)
                return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                                "step: sample %d padded length %d disagrees with its %lld-token buffer", i,
                                s->padded_length, (long long)s->num_tokens);
            if (s->original_length < 0 || s->original_length > s->padded_length)
                return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: sample %d original length %d outside [0, %d]", i,
                                s->original_length, s->padded_length);
            if (s->padded_length == 0) continue;
            if (count >= c->max_sequences)
                return dcp__fail(err, DCP_ERR_CAPACITY, "step: more than max_sequences = %d sequences on this rank",
                                c->max_sequences);
            st->local_sample[count] = i;
            st->local_start[count] = 0;
            st->local_pairs[2 * count] = s->padded_length;
            st->local_pairs[2 * count + 1] = s->original_length;
            tokens += s->padded_length;
            count++;
        }
        if (tokens > st->token_capacity)
            return dcp__fail(err, DCP_ERR_CAPACITY, "step: this rank's input exceeds max_tokens_per_rank = %lld",
                            (long long)st->token_capacity);
    }
    st->num_local = count;
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Phase 1: gather, plan, this rank's geometry                              */
/* ------------------------------------------------------------------------ */

typedef struct step_run {
    dcp_context *ctx;
    const dcp_step_args *args;
    const dcp_step_input *input;
    dcp_comm *lane; /* DPxCP */
    uint32_t kept;
    int32_t rank, num_ranks, cp; /* DPxCP rank, DPxCP size, CP siblings */
    const dcp_plan *plan;
    dcp_thd_geometry *geometry; /* [num_microbatches]: this rank's */
    int64_t total_tokens, total_cu;
    dcp_step_stats stats;
} step_run;

static dcp_status gather_and_plan(step_run *r, dcp_error *err)
{
    dcp_context *ctx = r->ctx;
    dcp_step_state *st = ctx->step;
    const dcp_config *c = &ctx->config;
    dcp_arena *scratch = dcp__context_scratch(ctx);
    const int32_t n = r->num_ranks, cp = r->cp, dp = c->data_parallel_size;
    rank_header mine = {r->input->fields, st->num_local, 0, 0};
    mine.hash = fnv1a(14695981039346656037ull, st->local_pairs, (size_t)st->num_local * 2 * sizeof(int32_t));
    for (int32_t i = 0; i < st->num_local; i++) mine.tokens += st->local_pairs[2 * i];

    rank_header *headers = DCP_ARENA_NEW(scratch, rank_header, n);
    size_t *bytes = DCP_ARENA_NEW(scratch, size_t, n), *offsets = DCP_ARENA_NEW(scratch, size_t, n);
    int32_t *pairs = DCP_ARENA_NEW(scratch, int32_t, 2 * (size_t)c->max_sequences);
    if (!headers || !bytes || !offsets || !pairs)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: gather scratch too small for %d ranks", n);
    r->stats.collectives++;
    dcp_status s = r->lane->ops->allgather(r->lane, &mine, sizeof mine, headers);
    if (s != DCP_OK) return dcp__fail(err, s, "step: all-gather of rank headers failed: %s", dcp_status_str(s));
    r->stats.metadata_bytes_received += (int64_t)((n - 1) * sizeof mine);

    /* every rank sees the same headers, so every rank takes the same branch below */
    int64_t total = 0, max_numel = 0, max_count = 0;
    for (int32_t q = 0; q < n; q++) {
        if (headers[q].fields != headers[0].fields)
            return dcp__fail(err, DCP_ERR_FIELD_MISMATCH, "step: DPxCP rank %d carries fields 0x%x, rank 0 carries 0x%x",
                            q, headers[q].fields, headers[0].fields);
        const rank_header *first = &headers[q - q % cp];
        if (headers[q].count != first->count || headers[q].hash != first->hash)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                            "step: CP siblings %d and %d hold different sequences (%d vs %d); they must hold the same "
                            "data", q - q % cp, q, first->count, headers[q].count);
    }
    for (int32_t p = 0; p < dp; p++) {
        const rank_header *h = &headers[p * cp];
        ctx->rank_offsets[p] = (int32_t)(total < INT32_MAX ? total : INT32_MAX);
        total += h->count;
        if (h->tokens > max_numel) max_numel = h->tokens;
        if (h->count > max_count) max_count = h->count;
    }
    if (total > c->max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: %lld sequences over the DP group exceed max_sequences = %d",
                        (long long)total, c->max_sequences);
    ctx->rank_offsets[dp] = (int32_t)total;
    for (int32_t q = 0; q < n; q++) {
        int leader = q % cp == 0;
        bytes[q] = leader ? (size_t)headers[q].count * 2 * sizeof(int32_t) : 0;
        offsets[q] = (size_t)ctx->rank_offsets[q / cp] * 2 * sizeof(int32_t);
    }
    r->stats.collectives++;
    s = r->lane->ops->allgatherv(r->lane, st->local_pairs, bytes[r->rank], pairs, bytes, offsets);
    if (s != DCP_OK) return dcp__fail(err, s, "step: all-gather of lengths failed: %s", dcp_status_str(s));
    r->stats.metadata_bytes_received += (int64_t)(total * 2 * (int64_t)sizeof(int32_t)) - (int64_t)bytes[r->rank];
    int64_t sum = 0;
    __int128 squared = 0;
    for (int64_t i = 0; i < total; i++) {
        ctx->global_lengths[i] = pairs[2 * i];
        st->original_lengths[i] = pairs[2 * i + 1];
        sum += pairs[2 * i];
        squared += (__int128)pairs[2 * i] * pairs[2 * i];
    }
    ctx->num_global = (int32_t)total;
    if (squared > INT64_MAX)
        return dcp__fail(err, DCP_ERR_OVERFLOW, "step: the sum of squared lengths overflows int64");
    st->output.num_sequences = (int32_t)total;
    st->output.seqlen_sum = sum;
    st->output.seqlen_squared_sum = (int64_t)squared;

    /* what the reference's reroute would all-gather for this PP stage: every kept field, then both lengths */
    if (dp > 1)
        r->stats.reference_bytes_received =
            (int64_t)(dp - 1) * (max_numel * (int64_t)bytes_per_token(r->kept) + max_count * 2 * 8);

    const dcp_plan *plan = NULL;
    s = dcp_plan_compute(ctx, ctx->global_lengths, (int32_t)total, &plan);
    if (s != DCP_OK) return dcp__fail(err, s, "%s", ctx->last_error.message);
    r->plan = plan;
    return DCP_OK;
}

/* Original and padded lengths of group g's sequences, in plan order. */
static int32_t group_lengths(const dcp_context *ctx, const dcp_plan *plan, int32_t g, int32_t *original,
                             int32_t *padded)
{
    int32_t first = plan->group_first_id[g], n = plan->group_first_id[g + 1] - first;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = plan->ids[first + k];
        original[k] = ctx->step->original_lengths[id];
        padded[k] = ctx->global_lengths[id];
    }
    return n;
}

/* Global id -> owning DP rank (binary search over the offsets). */
static int32_t owner_of(const int32_t *rank_offsets, int32_t dp, int32_t id)
{
    int32_t lo = 0, hi = dp - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (rank_offsets[mid] <= id) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

typedef struct group_scratch {
    int32_t *original, *padded, *cu, *cu_padded, *seq;
    int64_t *seq_offset, *local_offset, *length;
} group_scratch;

static dcp_status my_geometry(step_run *r, group_scratch *gs, dcp_error *err)
{
    const dcp_plan *plan = r->plan;
    const dcp_config *c = &r->ctx->config;
    dcp_step_state *st = r->ctx->step;
    r->total_tokens = 0;
    r->total_cu = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int32_t g = dcp_plan_group_of_rank(plan, m, r->rank);
        if (g < 0)
            return dcp__fail(err, DCP_ERR_INVALID_PLAN, "step: rank %d holds nothing in microbatch %d", r->rank, m);
        int32_t n = group_lengths(r->ctx, plan, g, gs->original, gs->padded);
        dcp_thd_params params;
        dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
        dcp_status s = dcp__thd_geometry_compute(&params, gs->original, gs->padded, n, &r->geometry[m], err);
        if (s != DCP_OK) {
            dcp_error inner = *err;
            return dcp__fail(err, s, "step: microbatch %d on rank %d: %.200s", m, r->rank, inner.message);
        }
        r->total_tokens += r->geometry[m].num_tokens;
        r->total_cu += r->geometry[m].num_cu_seqlens;
    }
    if (r->total_tokens > st->token_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY,
                        "step: rank %d's %d microbatches hold %lld tokens, more than max_tokens_per_rank = %lld",
                        r->rank, plan->num_microbatches, (long long)r->total_tokens, (long long)st->token_capacity);
    if (r->total_cu > st->cu_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: rank %d needs %lld cu_seqlens entries, capacity %lld", r->rank,
                        (long long)r->total_cu, (long long)st->cu_capacity);
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Phase 2: exchange and pack                                               */
/* ------------------------------------------------------------------------ */

static dcp_status exchange_and_pack(step_run *r, group_scratch *gs, dcp_arena *scratch, dcp_error *err)
{
    dcp_context *ctx = r->ctx;
    dcp_step_state *st = ctx->step;
    const dcp_config *c = &ctx->config;
    const dcp_plan *plan = r->plan;
    const int32_t n = r->num_ranks, cp = r->cp, dp = c->data_parallel_size, me = r->rank;
    const size_t per_token = bytes_per_token(r->kept);
    const size_t own_bound = 2 * (size_t)c->max_sequences, send_bound = send_piece_bound(c);
    const int64_t t_stage = now_ns();

    /* the body: table, cu arrays, fields, mask */
    body_layout b;
    body_layout_compute(plan->num_microbatches, r->total_cu, r->total_tokens, r->kept, &b);
    dcp_step_row *rows = (dcp_step_row *)(st->body + b.rows);
    int32_t *cu = (int32_t *)(st->body + b.cu), *cu_padded = (int32_t *)(st->body + b.cu_padded);

    int64_t *tokens_to = DCP_ARENA_NEW_ZERO(scratch, int64_t, n), *tokens_from = DCP_ARENA_NEW_ZERO(scratch, int64_t, n);
    int64_t *base = DCP_ARENA_NEW(scratch, int64_t, n);
    size_t *send_bytes = DCP_ARENA_NEW(scratch, size_t, n), *send_offsets = DCP_ARENA_NEW(scratch, size_t, n);
    size_t *recv_bytes = DCP_ARENA_NEW(scratch, size_t, n), *recv_offsets = DCP_ARENA_NEW(scratch, size_t, n);
    int32_t *recv_sender = DCP_ARENA_NEW(scratch, int32_t, own_bound);
    int64_t *recv_cursor = DCP_ARENA_NEW(scratch, int64_t, own_bound), *recv_dst = DCP_ARENA_NEW(scratch, int64_t, own_bound),
            *recv_length = DCP_ARENA_NEW(scratch, int64_t, own_bound);
    int32_t *send_sample = DCP_ARENA_NEW(scratch, int32_t, send_bound), *send_peer = DCP_ARENA_NEW(scratch, int32_t, send_bound);
    int64_t *send_src = DCP_ARENA_NEW(scratch, int64_t, send_bound), *send_cursor = DCP_ARENA_NEW(scratch, int64_t, send_bound),
            *send_length = DCP_ARENA_NEW(scratch, int64_t, send_bound);
    size_t pack_bound = send_bound > own_bound ? send_bound : own_bound;
    int64_t *pack_src = DCP_ARENA_NEW(scratch, int64_t, pack_bound), *pack_dst = DCP_ARENA_NEW(scratch, int64_t, pack_bound);
    const void **sources = DCP_ARENA_NEW(scratch, const void *, c->max_sequences);
    if (!tokens_to || !tokens_from || !base || !send_bytes || !send_offsets || !recv_bytes || !recv_offsets ||
        !recv_sender || !recv_cursor || !recv_dst || !recv_length || !send_sample || !send_peer || !send_src ||
        !send_cursor || !send_length || !pack_src || !pack_dst || !sources)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: exchange scratch too small");

    /* receiver side: rows, cu_seqlens and where every real piece comes from */
    int64_t token_at = 0, cu_at = 0, received = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int32_t g = dcp_plan_group_of_rank(plan, m, me);
        int32_t count = group_lengths(ctx, plan, g, gs->original, gs->padded);
        const dcp_thd_geometry *geo = &r->geometry[m];
        dcp_thd_params params;
        dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
        int32_t cp_rank = me - plan->group_first_rank[g];
        dcp__thd_cu_seqlens_write(geo, gs->original, gs->padded, count, cu + cu_at, cu_padded + cu_at);
        dcp_step_row row = {token_at, geo->num_tokens, cu_at, geo->num_cu_seqlens, geo->max_seqlen,
                            plan->group_cp_size[g], cp_rank, count};
        rows[m] = row;
        int32_t pieces = dcp__thd_real_pieces(geo, &params, gs->original, cu_padded + cu_at, cp_rank, gs->seq,
                                             gs->seq_offset, gs->local_offset, gs->length);
        for (int32_t i = 0; i < pieces; i++) {
            int32_t id = plan->ids[plan->group_first_id[g] + gs->seq[i]];
            int32_t sender = owner_of(ctx->rank_offsets, dp, id) * cp + me % cp;
            recv_sender[received] = sender;
            recv_cursor[received] = tokens_from[sender];
            recv_dst[received] = token_at + gs->local_offset[i];
            recv_length[received] = gs->length[i];
            tokens_from[sender] += gs->length[i];
            r->stats.tokens_computed += gs->length[i];
            received++;
        }
        token_at += geo->num_tokens;
        cu_at += geo->num_cu_seqlens;
    }
    r->stats.tokens_out = token_at;

    /* sender side: the pieces of every receiver in this sibling's share that come from this DP rank */
    int64_t sent = 0;
    if (per_token > 0) {
        const int32_t my_dp = me / cp, my_cp = me % cp;
        const int32_t lo = ctx->rank_offsets[my_dp], hi = ctx->rank_offsets[my_dp + 1];
        for (int32_t m = 0; m < plan->num_microbatches; m++) {
            for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
                int32_t first_id = plan->group_first_id[g], count = plan->group_first_id[g + 1] - first_id;
                int owns = 0;
                for (int32_t k = 0; k < count && !owns; k++)
                    owns = plan->ids[first_id + k] >= lo && plan->ids[first_id + k] < hi;
                if (!owns) continue;
                group_lengths(ctx, plan, g, gs->original, gs->padded);
                dcp_thd_params params;
                dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
                dcp_thd_geometry geo;
                dcp_status s = dcp__thd_geometry_compute(&params, gs->original, gs->padded, count, &geo, err);
                if (s != DCP_OK) return s; /* its ranks reported it before the exchange; not reached */
                dcp__thd_cu_seqlens_write(&geo, gs->original, gs->padded, count, gs->cu, gs->cu_padded);
                int32_t first_rank = plan->group_first_rank[g];
                for (int32_t d = first_rank; d < first_rank + plan->group_cp_size[g]; d++) {
                    if (d % cp != my_cp) continue;
                    int32_t pieces = dcp__thd_real_pieces(&geo, &params, gs->original, gs->cu_padded, d - first_rank,
                                                         gs->seq, gs->seq_offset, gs->local_offset, gs->length);
                    for (int32_t i = 0; i < pieces; i++) {
                        int32_t id = plan->ids[first_id + gs->seq[i]];
                        if (id < lo || id >= hi) continue;
                        if ((size_t)sent >= send_bound)
                            return dcp__fail(err, DCP_ERR_CAPACITY, "step: more than %zu pieces to send", send_bound);
                        int32_t local = id - lo;
                        send_sample[sent] = ctx->step->local_sample[local];
                        send_src[sent] = ctx->step->local_start[local] + gs->seq_offset[i];
                        send_peer[sent] = d;
                        send_cursor[sent] = tokens_to[d];
                        send_length[sent] = gs->length[i];
                        tokens_to[d] += gs->length[i];
                        sent++;
                    }
                }
            }
        }
    }

    /* staging blocks: per peer, every kept field's run of tokens, 8-byte aligned */
    size_t send_total = 0, recv_total = 0;
    for (int32_t q = 0; q < n; q++) {
        send_offsets[q] = send_total;
        send_bytes[q] = round8((size_t)tokens_to[q] * per_token);
        send_total += send_bytes[q];
        recv_offsets[q] = recv_total;
        recv_bytes[q] = round8((size_t)tokens_from[q] * per_token);
        recv_total += recv_bytes[q];
        int64_t payload_out = tokens_to[q] * (int64_t)per_token, payload_in = tokens_from[q] * (int64_t)per_token;
        if (q == me) {
            r->stats.exchange_bytes_local += payload_in;
        } else {
            r->stats.exchange_bytes_sent += payload_out;
            r->stats.exchange_bytes_received += payload_in;
        }
    }
    const int device = ctx->cuda != NULL;
    unsigned char *send_staging, *recv_staging;
    if (device) {
        send_staging = dcp__cuda_send_staging(ctx);
        recv_staging = dcp__cuda_recv_staging(ctx);
        size_t capacity = dcp__cuda_staging_capacity(ctx);
        if (send_total > capacity || recv_total > capacity)
            return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging of %zu + %zu bytes exceeds the device's %zu each",
                            send_total, recv_total, capacity);
    } else {
        send_staging = DCP_ARENA_NEW(scratch, unsigned char, send_total + 1);
        recv_staging = DCP_ARENA_NEW(scratch, unsigned char, recv_total + 1);
    }
    if (!send_staging || !recv_staging)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging of %zu + %zu bytes exceeds the workspace", send_total,
                        recv_total);

    const dcp_step_input *in = r->input;
    if (device) {
        dcp_status s = dcp__step_cuda_stage(ctx, r->args->cuda_stream, in, r->kept, sent, send_sample, send_src,
                                           send_peer, send_cursor, send_length, n, send_offsets, tokens_to, err);
        if (s != DCP_OK) return s;
    }
    size_t field_offset = 0; /* bytes per token of the kept fields before this one */
    for (int f = 0; f < DCP_STEP_NUM_FIELDS && !device; f++) {
        if (!(r->kept & dcp__step_field_bit[f])) continue;
        size_t size = dcp__step_field_size[f];
        for (int32_t q = 0; q < n; q++)
            base[q] = (int64_t)((send_offsets[q] + (size_t)tokens_to[q] * field_offset) / size);
        for (int64_t i = 0; i < sent; i++) pack_dst[i] = base[send_peer[i]] + send_cursor[i];
        for (int32_t i = 0; i < in->num_samples; i++) sources[i] = sample_field(&in->samples[i], f);
        dcp_pack_layout layout = {sent, send_sample, send_src, pack_dst, send_length};
        dcp__pack_cpu(&layout, sources, send_staging, size);
        field_offset += size;
    }

    int64_t t_exchange = now_ns();
    r->stats.time_stage_ns += t_exchange - t_stage;
    if (per_token > 0) {
        r->stats.collectives++;
        dcp_status s = r->lane->ops->alltoallv(r->lane, send_staging, send_bytes, send_offsets, recv_staging,
                                               recv_bytes, recv_offsets);
        if (s != DCP_OK) return dcp__fail(err, s, "step: the token exchange failed: %s", dcp_status_str(s));
    }
    int64_t t_pack = now_ns();
    r->stats.time_exchange_ns += t_pack - t_exchange;

    if (device) {
        size_t offsets[DCP_STEP_NUM_FIELDS];
        for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) offsets[f] = (r->kept & dcp__step_field_bit[f]) ? b.field[f] : SIZE_MAX;
        dcp_status s = dcp__step_cuda_land(ctx, r->args->cuda_stream, r->kept, received, recv_sender, recv_cursor,
                                          recv_dst, recv_length, token_at, n, recv_offsets, tokens_from, offsets,
                                          b.mask, b.cu_padded + DCP_ARENA_BYTES(int32_t, r->total_cu), err);
        r->stats.time_pack_ns += now_ns() - t_pack;
        return s;
    }

    /* pack: zero every slot, then land the received pieces; the mask is 1 wherever no piece landed */
    field_offset = 0;
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) {
        if (!(r->kept & dcp__step_field_bit[f])) continue;
        size_t size = dcp__step_field_size[f];
        unsigned char *out = st->body + b.field[f];
        memset(out, 0, (size_t)token_at * size);
        for (int32_t q = 0; q < n; q++)
            base[q] = (int64_t)((recv_offsets[q] + (size_t)tokens_from[q] * field_offset) / size);
        for (int64_t i = 0; i < received; i++) pack_src[i] = base[recv_sender[i]] + recv_cursor[i];
        const void *staging[1] = {recv_staging};
        dcp_pack_layout layout = {received, NULL, pack_src, recv_dst, recv_length};
        dcp__pack_cpu(&layout, staging, out, size);
        field_offset += size;
    }
    dcp_pack_layout placed = {received, NULL, recv_dst, recv_dst, recv_length};
    dcp__padding_mask_from_layout_cpu(&placed, token_at, st->body + b.mask);
    r->stats.time_pack_ns += now_ns() - t_pack;
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Outputs                                                                   */
/* ------------------------------------------------------------------------ */

static void build_views(dcp_context *ctx, const dcp_step_args *args, int32_t microbatches, int64_t total_cu,
                        int64_t total_tokens, uint32_t kept)
{
    dcp_step_state *st = ctx->step;
    const dcp_config *c = &ctx->config;
    body_layout b;
    body_layout_compute(microbatches, total_cu, total_tokens, kept, &b);
    const dcp_step_row *rows = (const dcp_step_row *)(st->body + b.rows);
    /* the arrays live in the device body when there is one; its prefix (rows, cu arrays) is mirrored on the host */
    const unsigned char *data = ctx->cuda ? dcp__cuda_body(ctx) : st->body;
    const int32_t vpp = c->virtual_pipeline_size, pp = args->pipeline_rank;
    for (int32_t v = 0; v < vpp; v++) {
        int first = pp == 0 && v == 0, last = pp == c->pipeline_parallel_size - 1 && v == vpp - 1;
        int mtp = (args->mtp_virtual_stages >> v) & 1u;
        int inputs = first || mtp, targets = last || mtp;
        for (int32_t m = 0; m < microbatches; m++) {
            const dcp_step_row *row = &rows[m];
            dcp_microbatch *mb = &st->views[(size_t)v * (size_t)microbatches + (size_t)m];
            memset(mb, 0, sizeof *mb);
            int64_t t = row->token_offset;
            if (inputs && b.field[0] != SIZE_MAX) mb->tokens = (const int64_t *)(data + b.field[0]) + t;
            if (targets && b.field[1] != SIZE_MAX) mb->labels = (const int64_t *)(data + b.field[1]) + t;
            if (inputs && b.field[2] != SIZE_MAX) mb->position_ids = (const int64_t *)(data + b.field[2]) + t;
            if (targets && b.field[3] != SIZE_MAX) mb->loss_mask = (const float *)(data + b.field[3]) + t;
            mb->padding_mask = data + b.mask + t;
            mb->cu_seqlens = (const int32_t *)(data + b.cu) + row->cu_offset;
            mb->cu_seqlens_padded = (const int32_t *)(data + b.cu_padded) + row->cu_offset;
            mb->cu_seqlens_host = (const int32_t *)(st->body + b.cu) + row->cu_offset;
            mb->cu_seqlens_padded_host = (const int32_t *)(st->body + b.cu_padded) + row->cu_offset;
            mb->num_tokens = row->num_tokens;
            mb->num_cu_seqlens = (int32_t)row->num_cu_seqlens;
            mb->num_sequences = (int32_t)row->num_sequences;
            mb->max_seqlen = (int32_t)row->max_seqlen;
            mb->local_cp_size = (int32_t)row->local_cp_size;
            mb->cp_rank = (int32_t)row->cp_rank;
        }
    }
    st->output.num_microbatches = microbatches;
    st->output.num_virtual_stages = vpp;
    st->output.microbatches = st->views;
}

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

/* A communicator the caller hands in: operations present, this rank inside the group. */
static dcp_status check_comm(const dcp_comm *comm, const char *name, dcp_error *err)
{
    if (!comm->ops) return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: the %s communicator has no operations", name);
    if (comm->size < 1 || comm->rank < 0 || comm->rank >= comm->size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: %s communicator rank %d outside [0, %d)", name,
                        comm->rank, comm->size);
    return DCP_OK;
}

static dcp_status check_args(const dcp_context *ctx, const dcp_step_args *a, int holds_data, dcp_error *err)
{
    const dcp_config *c = &ctx->config;
    dcp_status s;
    if (a->tensor_parallel && (s = check_comm(a->tensor_parallel, "TP", err)) != DCP_OK) return s;
    if (a->pipeline_rank < 0 || a->pipeline_rank >= c->pipeline_parallel_size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: pipeline_rank %d outside [0, %d)", a->pipeline_rank,
                        c->pipeline_parallel_size);
    if (c->virtual_pipeline_size < 32 && (a->mtp_virtual_stages >> c->virtual_pipeline_size) != 0)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: mtp_virtual_stages 0x%x names a virtual stage past %d",
                        a->mtp_virtual_stages, c->virtual_pipeline_size);
    if (a->tensor_parallel && a->tensor_parallel->size != c->tensor_parallel_size)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: TP communicator has %d ranks, tensor_parallel_size is %d",
                        a->tensor_parallel->size, c->tensor_parallel_size);
    if (!a->tp_ranks_hold_data && c->tensor_parallel_size > 1 && !a->tensor_parallel)
        return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: tensor_parallel_size %d needs a TP communicator",
                        c->tensor_parallel_size);
    if (holds_data) {
        if (!a->data_context_parallel || !a->data_context_parallel->ops)
            return dcp__fail(err, DCP_ERR_NULL_POINTER, "step: a rank that holds data needs its DPxCP communicator");
        if ((s = check_comm(a->data_context_parallel, "DPxCP", err)) != DCP_OK) return s;
        if (a->data_context_parallel->size != ctx->num_ranks)
            return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: DPxCP communicator has %d ranks, the plan needs %d",
                            a->data_context_parallel->size, ctx->num_ranks);
    }
    return DCP_OK;
}

static dcp_status finish(dcp_context *ctx, dcp_status s, dcp_error *err, const dcp_step_output **output)
{
    dcp__arena_reset(&ctx->arena, ctx->scratch_mark);
    if (s != DCP_OK) {
        ctx->step->output.num_microbatches = 0;
        ctx->step->output.microbatches = NULL;
        return dcp__context_fail(ctx, s, err);
    }
    *output = &ctx->step->output;
    return DCP_OK;
}

dcp_status dcp_step(dcp_context *ctx, const dcp_step_args *args, const dcp_step_input *input,
                    const dcp_step_output **output)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp_error err;
    dcp__error_clear(&err);
    if (!ctx->step)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_CAPACITY,
                                              "step: max_tokens_per_rank is 0: this context plans but holds no data"),
                                &err);
    if (!args || !args->world || !args->world->ops)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_NULL_POINTER,
                                              "step: args and the world communicator are required"),
                                &err); /* no communicator to tell the others through */
    if (args->world->size < 1 || args->world->rank < 0 || args->world->rank >= args->world->size)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT,
                                              "step: world communicator rank %d outside [0, %d)", args->world->rank,
                                              args->world->size),
                                &err); /* an agreement through it could not be trusted */

    dcp_step_state *st = ctx->step;
    memset(&st->output, 0, sizeof st->output);
    step_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.args = args;
    r.input = input;
    r.lane = args->data_context_parallel;
    r.kept = stage_fields(&ctx->config, args->pipeline_rank, args->mtp_virtual_stages);
    r.num_ranks = ctx->num_ranks;
    r.cp = ctx->config.context_parallel_size;
    const int broadcasts = !args->tp_ranks_hold_data && args->tensor_parallel && args->tensor_parallel->size > 1;
    const int holds_data = !broadcasts || args->tensor_parallel->rank == 0;

    /* phase 0: local checks, agreed before any data collective */
    dcp_status s = output ? check_args(ctx, args, holds_data, &err)
                          : dcp__fail(&err, DCP_ERR_NULL_POINTER, "step: output is NULL");
    if (s == DCP_OK && holds_data) {
        r.rank = r.lane->rank;
        s = read_input(ctx, input, r.kept, &err);
    }
    if (s == DCP_OK && holds_data) r.kept &= input->fields;
    s = agree(args->world, s, &err, &r.stats.collectives);
    if (s != DCP_OK) return finish(ctx, s, &err, output);

    /* phase 1: gather, plan, this rank's geometry; agreed before the exchange */
    const int64_t t_plan = now_ns();
    group_scratch gs;
    memset(&gs, 0, sizeof gs);
    if (holds_data) {
        for (int32_t i = 0; i < st->num_local; i++) r.stats.tokens_in += st->local_pairs[2 * i + 1];
        s = gather_and_plan(&r, &err);
        if (s == DCP_OK) {
            dcp_arena *scratch = dcp__context_scratch(ctx); /* planning's scratch is free again */
            const dcp_config *c = &ctx->config;
            size_t ns = (size_t)c->max_sequences, own = 2 * ns, cu_tmp = max_cu_tmp(c);
            r.geometry = DCP_ARENA_NEW(scratch, dcp_thd_geometry, r.plan->num_microbatches);
            gs.original = DCP_ARENA_NEW(scratch, int32_t, ns);
            gs.padded = DCP_ARENA_NEW(scratch, int32_t, ns);
            gs.cu = DCP_ARENA_NEW(scratch, int32_t, cu_tmp);
            gs.cu_padded = DCP_ARENA_NEW(scratch, int32_t, cu_tmp);
            gs.seq = DCP_ARENA_NEW(scratch, int32_t, own);
            gs.seq_offset = DCP_ARENA_NEW(scratch, int64_t, own);
            gs.local_offset = DCP_ARENA_NEW(scratch, int64_t, own);
            gs.length = DCP_ARENA_NEW(scratch, int64_t, own);
            if (!r.geometry || !gs.original || !gs.padded || !gs.cu || !gs.cu_padded || !gs.seq || !gs.seq_offset ||
                !gs.local_offset || !gs.length)
                s = dcp__fail(&err, DCP_ERR_CAPACITY, "step: geometry scratch too small");
            else
                s = my_geometry(&r, &gs, &err);
        }
    }
    r.stats.time_plan_ns = now_ns() - t_plan;
    s = agree(args->world, s, &err, &r.stats.collectives);
    if (s != DCP_OK) return finish(ctx, s, &err, output);

    /* phase 2: exchange and pack; phase 3: broadcast to the TP group */
    int64_t header[H_COUNT];
    memset(header, 0, sizeof header);
    if (holds_data) {
        s = exchange_and_pack(&r, &gs, &ctx->arena, &err);
        body_layout b;
        body_layout_compute(r.plan->num_microbatches, r.total_cu, r.total_tokens, r.kept, &b);
        header[H_STATUS] = s;
        header[H_MICROBATCHES] = r.plan->num_microbatches;
        header[H_CU] = r.total_cu;
        header[H_TOKENS] = r.total_tokens;
        header[H_KEPT] = r.kept;
        header[H_SEQUENCES] = st->output.num_sequences;
        header[H_SUM] = st->output.seqlen_sum;
        header[H_SQUARED] = st->output.seqlen_squared_sum;
        header[H_BODY] = (int64_t)b.used;
    }
    if (broadcasts) {
        dcp_comm *tp = args->tensor_parallel;
        r.stats.collectives++;
        dcp_status bs = tp->ops->broadcast(tp, header, sizeof header, 0);
        if (bs != DCP_OK && s == DCP_OK) s = dcp__fail(&err, bs, "step: TP broadcast of the header failed: %s", dcp_status_str(bs));
        if (s == DCP_OK && header[H_STATUS] != DCP_OK)
            s = dcp__fail(&err, (dcp_status)header[H_STATUS], "step: TP rank 0 failed with %s",
                         dcp_status_str((dcp_status)header[H_STATUS]));
        if (s == DCP_OK && !holds_data) {
            body_layout b;
            body_layout_compute(header[H_MICROBATCHES], header[H_CU], header[H_TOKENS], (uint32_t)header[H_KEPT], &b);
            if (header[H_MICROBATCHES] < 0 || header[H_MICROBATCHES] > resolved_microbatches(&ctx->config) ||
                b.used != (size_t)header[H_BODY] || b.used > st->body_capacity)
                s = dcp__fail(&err, DCP_ERR_CORRUPT_INPUT, "step: TP header describes %lld bytes, capacity %zu",
                             (long long)header[H_BODY], st->body_capacity);
        }
        if (header[H_STATUS] == DCP_OK && bs == DCP_OK) {
            /* the body follows whenever rank 0 announced success, so no peer waits for it in vain */
            int64_t used = header[H_BODY];
            if (used < 0 || (size_t)used > st->body_capacity) used = 0;
            r.stats.collectives++;
            /* with a CUDA workspace the body is on the device; TP peers then mirror its prefix on the host */
            unsigned char *body = ctx->cuda ? dcp__cuda_body(ctx) : st->body;
            dcp_status body_status = tp->ops->broadcast(tp, body, (size_t)used, 0);
            if (body_status != DCP_OK && s == DCP_OK)
                s = dcp__fail(&err, body_status, "step: TP broadcast of the outputs failed: %s",
                             dcp_status_str(body_status));
            if (ctx->cuda && !holds_data && s == DCP_OK) {
                body_layout b;
                body_layout_compute(header[H_MICROBATCHES], header[H_CU], header[H_TOKENS], (uint32_t)header[H_KEPT], &b);
                s = dcp__cuda_body_download(ctx, args->cuda_stream, b.cu_padded + DCP_ARENA_BYTES(int32_t, header[H_CU]),
                                           &err);
            }
            r.stats.broadcast_bytes = (int64_t)sizeof header + used;
        }
        if (!holds_data) {
            st->output.num_sequences = (int32_t)header[H_SEQUENCES];
            st->output.seqlen_sum = header[H_SUM];
            st->output.seqlen_squared_sum = header[H_SQUARED];
        }
    }
    s = agree(args->world, s, &err, &r.stats.collectives);
    if (s != DCP_OK) return finish(ctx, s, &err, output);

    build_views(ctx, args, (int32_t)header[H_MICROBATCHES], header[H_CU], header[H_TOKENS], (uint32_t)header[H_KEPT]);
    st->output.plan = holds_data ? r.plan : NULL;
    st->output.stats = r.stats;
    return finish(ctx, DCP_OK, &err, output);
}
