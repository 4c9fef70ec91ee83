/*
 * reroute.c - the route tables and the one exchange.
 *
 * Once every rank holds the plan, every rank can compute, for each token,
 * which rank computes on it and where it lands there.  So both ends of the
 * exchange derive the same segment order from the plan: for a (sender,
 * receiver) pair, microbatch by microbatch, piece by piece of the receiver's
 * buffer.  Neither side sends a layout to the other.  A sequence of DP rank p
 * is held by the CP siblings p*cp .. p*cp+cp-1; the one whose CP rank equals
 * the receiver's rank modulo cp sends it, so the siblings share the sending
 * and a receiver's own DP rank's data never leaves it: those pieces are
 * listed as own pieces, landed straight from the samples, and take no part
 * in the exchange.
 */
#include "stages.h"
#include "../core/comm/agree.h"
#include "../core/capacity.h"
#include "../core/plan.h"

#include <string.h>

dcp_status dcp__group_scratch_take(const dcp_config *c, dcp__arena *scratch, dcp__group_scratch *gs)
{
    size_t ns = (size_t)c->max_sequences, own = 2 * ns, cu = dcp__step_group_cu_bound(c);
    gs->original = DCP_ARENA_NEW(scratch, int32_t, ns);
    gs->padded = DCP_ARENA_NEW(scratch, int32_t, ns);
    gs->cu = DCP_ARENA_NEW(scratch, int32_t, cu);
    gs->cu_padded = DCP_ARENA_NEW(scratch, int32_t, cu);
    gs->seq = DCP_ARENA_NEW(scratch, int32_t, own);
    gs->seq_offset = DCP_ARENA_NEW(scratch, int64_t, own);
    gs->local_offset = DCP_ARENA_NEW(scratch, int64_t, own);
    gs->length = DCP_ARENA_NEW(scratch, int64_t, own);
    if (!gs->original || !gs->padded || !gs->cu || !gs->cu_padded || !gs->seq || !gs->seq_offset ||
        !gs->local_offset || !gs->length)
        return DCP_ERR_CAPACITY;
    return DCP_OK;
}

dcp_status dcp__rank_geometry_take(const dcp_config *c, int32_t microbatches, dcp__arena *scratch,
                                   dcp__rank_geometry *g)
{
    g->microbatch = DCP_ARENA_NEW(scratch, dcp__thd_geometry, microbatches);
    g->group = DCP_ARENA_NEW(scratch, int32_t, microbatches);
    g->first = DCP_ARENA_NEW(scratch, int32_t, (size_t)microbatches + 1);
    g->original = DCP_ARENA_NEW(scratch, int32_t, c->max_sequences);
    g->padded = DCP_ARENA_NEW(scratch, int32_t, c->max_sequences);
    return g->microbatch && g->group && g->first && g->original && g->padded ? DCP_OK : DCP_ERR_CAPACITY;
}

dcp_status dcp__reroute_tables_take(const dcp_config *c, dcp__arena *scratch, dcp__receive_table *rt,
                                    dcp__send_table *send, dcp__block_arrays *blocks)
{
    const size_t n = (size_t)dcp_config_num_ranks(c), own = 2 * (size_t)c->max_sequences;
    const size_t bound = dcp__step_send_piece_bound(c);
    memset(rt, 0, sizeof *rt);
    rt->received.sender = DCP_ARENA_NEW(scratch, int32_t, own);
    rt->received.cursor = DCP_ARENA_NEW(scratch, int64_t, own);
    rt->received.dst = DCP_ARENA_NEW(scratch, int64_t, own);
    rt->received.length = DCP_ARENA_NEW(scratch, int64_t, own);
    rt->tokens_from = DCP_ARENA_NEW_ZERO(scratch, int64_t, n);
    rt->own.sample = DCP_ARENA_NEW(scratch, int32_t, own);
    rt->own.src = DCP_ARENA_NEW(scratch, int64_t, own);
    rt->own.dst = DCP_ARENA_NEW(scratch, int64_t, own);
    rt->own.length = DCP_ARENA_NEW(scratch, int64_t, own);
    memset(send, 0, sizeof *send);
    send->pieces.sample = DCP_ARENA_NEW(scratch, int32_t, bound);
    send->pieces.peer = DCP_ARENA_NEW(scratch, int32_t, bound);
    send->pieces.src = DCP_ARENA_NEW(scratch, int64_t, bound);
    send->pieces.cursor = DCP_ARENA_NEW(scratch, int64_t, bound);
    send->pieces.length = DCP_ARENA_NEW(scratch, int64_t, bound);
    send->capacity = (int64_t)bound;
    send->tokens_to = DCP_ARENA_NEW_ZERO(scratch, int64_t, n);
    blocks->send_bytes = DCP_ARENA_NEW(scratch, size_t, n);
    blocks->send_offsets = DCP_ARENA_NEW(scratch, size_t, n);
    blocks->recv_bytes = DCP_ARENA_NEW(scratch, size_t, n);
    blocks->recv_offsets = DCP_ARENA_NEW(scratch, size_t, n);
    /* each pointer, not the arena's sticky flag: the step's arena may hold an earlier failed (optional) take */
    const dcp__recv_pieces *r = &rt->received;
    const dcp__own_pieces *o = &rt->own;
    const dcp__send_pieces *p = &send->pieces;
    int ok = r->sender && r->cursor && r->dst && r->length && rt->tokens_from && o->sample && o->src && o->dst &&
             o->length && p->sample && p->peer && p->src && p->cursor && p->length && send->tokens_to &&
             blocks->send_bytes && blocks->send_offsets && blocks->recv_bytes &&
             blocks->recv_offsets;
    return ok ? DCP_OK : DCP_ERR_CAPACITY;
}

/* What the take functions above lay out, measured by running them on a measuring arena (no second formula). */
size_t dcp__reroute_scratch_size(const dcp_config *c)
{
    dcp__arena m;
    dcp__arena_init_measure(&m);
    dcp__rank_geometry geometry;
    dcp__group_scratch gs;
    dcp__receive_table rt;
    dcp__send_table send;
    dcp__block_arrays blocks;
    if (dcp__rank_geometry_take(c, dcp__step_max_microbatches(c), &m, &geometry) != DCP_OK ||
        dcp__group_scratch_take(c, &m, &gs) != DCP_OK || dcp__reroute_tables_take(c, &m, &rt, &send, &blocks) != DCP_OK)
        return SIZE_MAX;
    return m.used;
}

/* Original and padded lengths of group g's sequences, in plan order. */
static int32_t group_lengths(const dcp_plan *plan, const dcp__step_lengths *L, int32_t g, int32_t *original,
                             int32_t *padded)
{
    int32_t first = plan->group_first_id[g], n = plan->group_first_id[g + 1] - first;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = plan->ids[first + k];
        original[k] = L->original[id];
        padded[k] = L->padded[id];
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

dcp_status dcp__reroute_geometry(const dcp_plan *plan, const dcp_config *c, const dcp__step_lengths *L, int32_t rank,
                                 int64_t token_capacity, int64_t cu_capacity, dcp__rank_geometry *out, dcp__error *err)
{
    out->total_tokens = 0;
    out->total_cu = 0;
    int32_t at = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int32_t g = dcp_plan_group_of_rank(plan, m, rank);
        if (g < 0) return dcp__fail(err, DCP_ERR_INVALID_PLAN, "step: rank %d holds nothing in microbatch %d", rank, m);
        int32_t n = plan->group_first_id[g + 1] - plan->group_first_id[g];
        if (n > c->max_sequences - at)
            return dcp__fail(err, DCP_ERR_INVALID_PLAN, "step: rank %d's groups hold more than %d sequences", rank,
                             c->max_sequences);
        group_lengths(plan, L, g, out->original + at, out->padded + at);
        out->group[m] = g;
        out->first[m] = at;
        dcp__thd_params params;
        dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
        dcp_status s = dcp__thd_geometry_compute(&params, out->original + at, out->padded + at, n, &out->microbatch[m],
                                                 err);
        at += n;
        if (s != DCP_OK) {
            dcp__error inner = *err;
            return dcp__fail(err, s, "step: microbatch %d on rank %d: %.200s", m, rank, inner.message);
        }
        out->total_tokens += out->microbatch[m].num_tokens;
        out->total_cu += out->microbatch[m].num_cu_seqlens;
    }
    out->first[plan->num_microbatches] = at;
    if (out->total_tokens > token_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY,
                         "step: rank %d's %d microbatches hold %lld tokens, more than max_tokens_per_rank = %lld", rank,
                         plan->num_microbatches, (long long)out->total_tokens, (long long)token_capacity);
    if (out->total_cu > cu_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: rank %d needs %lld cu_seqlens entries, capacity %lld", rank,
                         (long long)out->total_cu, (long long)cu_capacity);
    return DCP_OK;
}

void dcp__reroute_receive(const dcp_plan *plan, const dcp_config *c, const dcp__step_lengths *L, int32_t me,
                          const dcp__input_spans *local, const dcp__rank_geometry *geometry, dcp__group_scratch *gs,
                          dcp__receive_table *out)
{
    const int32_t cp = c->context_parallel_size, dp = c->data_parallel_size;
    const int32_t lo = L->rank_offsets[me / cp], hi = L->rank_offsets[me / cp + 1]; /* this DP rank's ids */
    int64_t token_at = 0, cu_at = 0, received = 0, own = 0, own_tokens = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        const int32_t g = geometry->group[m], count = geometry->first[m + 1] - geometry->first[m];
        const int32_t *original = geometry->original + geometry->first[m], *padded = geometry->padded + geometry->first[m];
        const dcp__thd_geometry *geo = &geometry->microbatch[m];
        dcp__thd_params params;
        dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
        int32_t cp_rank = me - plan->group_first_rank[g];
        dcp__thd_cu_seqlens_write(geo, original, padded, count, out->cu + cu_at, out->cu_padded + cu_at);
        dcp__body_row row = {token_at, geo->num_tokens, cu_at, geo->num_cu_seqlens, geo->max_seqlen,
                            plan->group_cp_size[g], cp_rank, count};
        out->rows[m] = row;
        int32_t pieces = dcp__thd_real_pieces(geo, &params, original, out->cu_padded + cu_at, cp_rank, gs->seq,
                                              gs->seq_offset, gs->local_offset, gs->length);
        for (int32_t i = 0; i < pieces; i++) {
            int32_t id = plan->ids[plan->group_first_id[g] + gs->seq[i]];
            if (id >= lo && id < hi) { /* its own DP rank's: from the sample, no exchange */
                int32_t k = id - lo;
                out->own.sample[own] = local->sample[k];
                out->own.src[own] = local->start[k] + gs->seq_offset[i];
                out->own.dst[own] = token_at + gs->local_offset[i];
                out->own.length[own] = gs->length[i];
                own_tokens += gs->length[i];
                own++;
                continue;
            }
            int32_t sender = owner_of(L->rank_offsets, dp, id) * cp + me % cp;
            out->received.sender[received] = sender;
            out->received.cursor[received] = out->tokens_from[sender];
            out->received.dst[received] = token_at + gs->local_offset[i];
            out->received.length[received] = gs->length[i];
            out->tokens_from[sender] += gs->length[i];
            received++;
        }
        token_at += geo->num_tokens;
        cu_at += geo->num_cu_seqlens;
    }
    out->received.count = received;
    out->own.count = own;
    out->own_tokens = own_tokens;
}

dcp_status dcp__reroute_send(const dcp_plan *plan, const dcp_config *c, const dcp__step_lengths *L, int32_t me,
                             const dcp__input_spans *local, dcp__group_scratch *gs, dcp__send_table *out,
                             dcp__error *err)
{
    const int32_t cp = c->context_parallel_size, my_dp = me / cp, my_cp = me % cp;
    const int32_t lo = L->rank_offsets[my_dp], hi = L->rank_offsets[my_dp + 1];
    int64_t sent = 0;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            int32_t first_id = plan->group_first_id[g], count = plan->group_first_id[g + 1] - first_id;
            int32_t first_rank = plan->group_first_rank[g];
            int others = 0; /* a receiver other than this rank that this CP sibling serves */
            for (int32_t d = first_rank; d < first_rank + plan->group_cp_size[g] && !others; d++)
                others = d != me && d % cp == my_cp;
            if (!others) continue;
            int owns = 0;
            for (int32_t k = 0; k < count && !owns; k++)
                owns = plan->ids[first_id + k] >= lo && plan->ids[first_id + k] < hi;
            if (!owns) continue;
            group_lengths(plan, L, g, gs->original, gs->padded);
            dcp__thd_params params;
            dcp__thd_params_from_config(c, plan->group_cp_size[g], &params);
            dcp__thd_geometry geo;
            dcp_status s = dcp__thd_geometry_compute(&params, gs->original, gs->padded, count, &geo, err);
            if (s != DCP_OK) return s; /* its ranks reported it before the exchange; not reached */
            dcp__thd_cu_seqlens_write(&geo, gs->original, gs->padded, count, gs->cu, gs->cu_padded);
            for (int32_t d = first_rank; d < first_rank + plan->group_cp_size[g]; d++) {
                if (d % cp != my_cp || d == me) continue; /* its own pieces land from the samples */
                int32_t pieces = dcp__thd_real_pieces(&geo, &params, gs->original, gs->cu_padded, d - first_rank,
                                                      gs->seq, gs->seq_offset, gs->local_offset, gs->length);
                for (int32_t i = 0; i < pieces; i++) {
                    int32_t id = plan->ids[first_id + gs->seq[i]];
                    if (id < lo || id >= hi) continue;
                    if (sent >= out->capacity)
                        return dcp__fail(err, DCP_ERR_CAPACITY, "step: more than %lld pieces to send",
                                         (long long)out->capacity);
                    int32_t k = id - lo;
                    out->pieces.sample[sent] = local->sample[k];
                    out->pieces.src[sent] = local->start[k] + gs->seq_offset[i];
                    out->pieces.peer[sent] = d;
                    out->pieces.cursor[sent] = out->tokens_to[d];
                    out->pieces.length[sent] = gs->length[i];
                    out->tokens_to[d] += gs->length[i];
                    sent++;
                }
            }
        }
    }
    out->pieces.count = sent;
    return DCP_OK;
}

static size_t round8(size_t v) { return (v + 7) & ~(size_t)7; }

void dcp__reroute_blocks(const int64_t *tokens_to, const int64_t *tokens_from, int32_t n, int32_t me,
                         int64_t own_tokens, size_t per_token, size_t *send_bytes, size_t *send_offsets,
                         size_t *recv_bytes, size_t *recv_offsets, dcp__exchange_blocks *blocks,
                         dcp_step_stats *stats)
{
    size_t send_total = 0, recv_total = 0;
    stats->exchange_bytes_local += own_tokens * (int64_t)per_token;
    for (int32_t q = 0; q < n; q++) {
        send_offsets[q] = send_total;
        send_bytes[q] = round8((size_t)tokens_to[q] * per_token);
        send_total += send_bytes[q];
        recv_offsets[q] = recv_total;
        recv_bytes[q] = round8((size_t)tokens_from[q] * per_token);
        recv_total += recv_bytes[q];
        int64_t payload_out = tokens_to[q] * (int64_t)per_token, payload_in = tokens_from[q] * (int64_t)per_token;
        if (q != me) { /* the own block is empty: own pieces land from the samples */
            stats->exchange_bytes_sent += payload_out;
            stats->exchange_bytes_received += payload_in;
        }
    }
    blocks->num_peers = n;
    blocks->send_offsets = send_offsets;
    blocks->recv_offsets = recv_offsets;
    blocks->tokens_to = tokens_to;
    blocks->tokens_from = tokens_from;
    blocks->send_total = send_total;
    blocks->recv_total = recv_total;
}

dcp_status dcp__reroute_exchange(dcp_comm *lane, const unsigned char *send, const size_t *send_bytes,
                                 const size_t *send_offsets, unsigned char *recv, const size_t *recv_bytes,
                                 const size_t *recv_offsets, dcp_step_stats *stats, dcp__error *err)
{
    stats->collectives++;
    char why[128];
    dcp_status s = lane->ops->alltoallv(lane, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
    if (s != DCP_OK) return dcp__fail(err, s, "step: the token exchange failed: %s%s", dcp_status_str(s),
                                        dcp__comm_why(lane, why, sizeof why));
    return DCP_OK;
}
