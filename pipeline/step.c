/*
 * step.c - the data-plane driver: one training step on one rank.
 *
 *   check     the arguments and this rank's input (gather_local)  -> agree over world,
 *             with the call's tag (count, step id, configuration), so ranks
 *             that skipped or repeated a call never pair their data; the tag
 *             also carries a hash of the rank's lengths and digests of its
 *             data, so PP stages and TP peers that hold data are compared
 *             (check_same_batch)
 *   gather    per-rank headers + (padded, original) lengths over DPxCP
 *   plan      dcp__plan_make (dcp_plan_compute's stages) on the gathered padded lengths (or check the plan
 *             made ahead)
 *   reroute   this rank's THD geometry                             -> agree over world
 *   reroute   receive (and own) and send tables, blocks; stage (mover) the
 *             tokens that travel; the exchange
 *   pack      received and own tokens to their final slots (mover, one pass:
 *             own tokens straight from the samples)
 *   broadcast header + body to the TP group (one block for everything)
 *                                                                  -> agree over world
 *
 * The stages are in stages.h; this file only sequences them and agrees their
 * errors.  Local errors are agreed before any data moves, capacity and
 * geometry errors before the exchange, and communicator failures at the end,
 * so every rank of the step returns the same status and caller memory is
 * never written.  Every agreement is an all-gather of sealed records (see
 * core/comm/agree.h): a communicator that "succeeds" with a zeroed, stale or
 * garbage result after a peer is gone fails the step, never passes it.
 *
 * Scratch phases (context.h's marks): the first agreement's records, released after it; the gather's,
 * released before planning; planning's, released inside dcp__plan_make; then, kept to the end of the step,
 * the geometry, the later agreements' records, the route tables and the mover's buffers.
 */
#define _POSIX_C_SOURCE 200809L
#include "context.h"
#include "plan_ahead.h"
#include "stages.h"
#include "step.h"
#include "../core/comm/agree.h"

#include <string.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/*
 * An agreement after the first (phase 1: before the exchange; 2: at the end), through `tags` (world->size
 * records taken once, above what the step holds in the arena), or without scratch when there is none.
 */
static dcp_status agree(dcp_context *ctx, dcp_comm *world, dcp__call_tag *tag, dcp__call_tag *tags, uint32_t phase,
                        dcp_status local, dcp__error *err, dcp_step_stats *stats)
{
    tag->phase = phase;
    tag->status = local;
    stats->collectives += tags ? 1 : 2;
    dcp_status st = tags ? dcp__agree_call(world, tag, tags, err, "step", "rank")
                         : dcp__agree_call_small(world, tag, err, "step", "rank");
    return dcp__context_call_end(ctx, st);
}

/*
 * Ranks that hold data at the same DPxCP rank -- one per PP stage, and per TP rank when every TP rank holds
 * data -- must hold the same batch: the same (padded, original) lengths, and (unless
 * skip_sibling_data_check) the same bytes in every field both digested.  Every rank reads the same tags, so
 * every rank returns the same verdict.
 */
static dcp_status check_same_batch(const dcp__call_tag *tags, int32_t n, dcp__error *err)
{
    for (int32_t q = 1; q < n; q++) {
        const dcp__call_tag *b = &tags[q];
        if (b->lane_rank < 0) continue;
        for (int32_t p = 0; p < q; p++) {
            const dcp__call_tag *a = &tags[p];
            if (a->lane_rank != b->lane_rank) continue;
            if (a->count != b->count || a->hash != b->hash)
                return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                                 "step: ranks %d (PP stage %d) and %d (PP stage %d) hold different sequences as DPxCP "
                                 "rank %d (%lld vs %lld); every PP stage and every TP rank that holds data must hold "
                                 "the same batch",
                                 p, a->stage, q, b->stage, a->lane_rank, (long long)a->count, (long long)b->count);
            for (int f = 0; f < DCP_NUM_FIELDS; f++) {
                const uint32_t bit = dcp__field_bit[f];
                if ((a->field_mask & bit) && (b->field_mask & bit) && a->field_digest[f] != b->field_digest[f])
                    return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                                     "step: ranks %d (PP stage %d) and %d (PP stage %d) hold the same lengths with "
                                     "different %s as DPxCP rank %d; every PP stage and every TP rank that holds "
                                     "data must hold the same batch",
                                     p, a->stage, q, b->stage, dcp__field_name[f], a->lane_rank);
            }
            break; /* the lowest such rank was compared with all lower ones */
        }
    }
    return DCP_OK;
}

/*
 * The first agreement of a step: the call's tag and every rank's local status, over the world.
 *
 * A step that failed on this rank alone before its first agreement (step_begin) made no collective; peers
 * that waited for it there timed out, one collective ahead of this rank.  On a communicator that hands a
 * late rank the outcomes it missed, in order (the in-process one), this rank's next agreement is answered
 * at once with that timeout, and ranks kept in step by the caller (joined between steps) would stay one
 * collective apart: every later step a timeout.  So while such skipped steps are owed, a timed-out first
 * agreement is made again, once per skipped step: the replayed timeouts go by at once and the agreement
 * meets the peers' current one, where the tags decide (the same call: the step goes on; another: out of
 * step).  Each retry can cost at most one timeout the peers already paid for the skipped step.
 */
static dcp_status agree_call(dcp_context *ctx, dcp_comm *world, dcp__call_tag *tag, dcp_status local, dcp__error *err,
                             dcp_step_stats *stats)
{
    tag->status = local;
    const size_t phase = dcp__scratch_mark(ctx);
    dcp__call_tag *tags = DCP_ARENA_NEW(&ctx->arena, dcp__call_tag, world->size);
    dcp__error own = *err; /* this rank's local error, kept for a retry */
    dcp_status st;
    for (;;) {
        stats->collectives += tags ? 1 : 2;
        st = tags ? dcp__agree_call(world, tag, tags, err, "step", "rank")
                  : dcp__agree_call_small(world, tag, err, "step", "rank");
        if (st != DCP_ERR_TIMEOUT || ctx->steps_skipped == 0) break;
        ctx->steps_skipped--;
        *err = own;
    }
    ctx->steps_skipped = 0;
    if (st == DCP_OK && tags) st = check_same_batch(tags, world->size, err);
    dcp__scratch_reset_to(ctx, phase); /* the records are read */
    return dcp__context_call_end(ctx, st);
}

/* A step that fails here before its first agreement: its peers may wait for it (see agree_call). */
static dcp_status skipped(dcp_context *ctx, dcp_status status, const dcp__error *err)
{
    if (ctx->steps_skipped < UINT32_MAX) ctx->steps_skipped++;
    return dcp__context_fail(ctx, status, err);
}

static dcp_status check_args(const dcp_context *ctx, const dcp_step_args *a, int holds_data, dcp__error *err)
{
    const dcp_config *c = &ctx->config;
    dcp_status s;
    if (a->tensor_parallel && (s = dcp__comm_check(a->tensor_parallel, "step", "TP communicator", err)) != DCP_OK)
        return s;
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
        if ((s = dcp__comm_check(a->data_context_parallel, "step", "DPxCP communicator", err)) != DCP_OK) return s;
        if (a->data_context_parallel->size != ctx->num_ranks)
            return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: DPxCP communicator has %d ranks, the plan needs %d",
                             a->data_context_parallel->size, ctx->num_ranks);
    }
    return DCP_OK;
}

/* One step's working set on this rank. */
typedef struct step_run {
    dcp_context *ctx;
    const dcp_step_args *args;
    const dcp_step_input *input;
    dcp_comm *lane; /* DPxCP */
    uint32_t kept;
    int32_t rank;   /* DPxCP */
    const dcp_plan *plan;
    dcp__step_lengths lengths;
    dcp__rank_geometry geometry;
    dcp__body_layout body; /* of this rank's outputs: from its geometry, or (a TP peer) from the header */
    dcp__group_scratch gs;
    uint64_t data_digest; /* of the bytes this rank moves, when CP siblings compare them; else 0 */
    dcp_step_stats stats;
} step_run;

/* gather, plan, this rank's geometry: everything before the exchange. */
static dcp_status gather_and_plan(step_run *r, dcp__error *err)
{
    dcp_context *ctx = r->ctx;
    dcp__step_state *st = ctx->step;
    dcp__step_lengths *L = &r->lengths;
    L->padded = ctx->global_lengths;
    L->original = st->original_lengths;
    L->rank_offsets = ctx->rank_offsets;
    const size_t phase = dcp__scratch_mark(ctx);
    dcp_status s = dcp__gather_step(r->lane, r->input->fields, &st->local, r->data_digest, &ctx->config, L,
                                    &ctx->arena, &r->stats, err);
    dcp__scratch_reset_to(ctx, phase); /* the gathered lengths are in the context's arrays */
    ctx->num_global = s == DCP_OK ? L->num_sequences : 0;
    if (s != DCP_OK) return s;
    st->output.num_sequences = L->num_sequences;
    st->output.seqlen_sum = L->sum;
    st->output.seqlen_squared_sum = L->squared_sum;
    /* what the reference's reroute would all-gather for this PP stage: every kept field, then both lengths */
    const int32_t dp = ctx->config.data_parallel_size;
    if (dp > 1)
        r->stats.reference_bytes_received =
            (int64_t)(dp - 1) * (L->max_rank_tokens * (int64_t)dcp__bytes_per_token(r->kept) + L->max_rank_count * 2 * 8);

    if (r->args->plan) { /* made ahead: checked against these lengths, not made again (plan_ahead.c) */
        s = dcp__plan_take(ctx, r->args->plan, L->padded, L->num_sequences, err);
        if (s != DCP_OK) return s;
        r->plan = &ctx->plan;
    } else {
        s = dcp__plan_make(ctx, L->padded, L->num_sequences, err); /* releases its own scratch */
        if (s != DCP_OK) return s;
        r->plan = &ctx->plan;
    }

    /* the geometry and group scratch live to the end of the step */
    if (dcp__rank_geometry_take(&ctx->config, r->plan->num_microbatches, &ctx->arena, &r->geometry) != DCP_OK ||
        dcp__group_scratch_take(&ctx->config, &ctx->arena, &r->gs) != DCP_OK)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: geometry scratch too small");
    s = dcp__reroute_geometry(r->plan, &ctx->config, L, r->rank, st->token_capacity, st->cu_capacity, &r->geometry,
                              err);
    if (s != DCP_OK) return s;
    /* the body's layout, once: the route tables, the landing, the header and the views all read it */
    dcp__body_layout_compute(r->plan->num_microbatches, r->geometry.total_cu, r->geometry.total_tokens, r->kept,
                             &r->body);
    return DCP_OK;
}

/* reroute and pack: the route tables, staging, the exchange, landing. */
static dcp_status exchange_and_pack(step_run *r, dcp__error *err)
{
    dcp_context *ctx = r->ctx;
    dcp__step_state *st = ctx->step;
    dcp__mover *mover = &st->mover;
    dcp__arena *scratch = &ctx->arena; /* after the geometry and the agreements' records; kept to the end */
    const dcp_config *c = &ctx->config;
    const int32_t n = ctx->num_ranks;
    const size_t per_token = dcp__bytes_per_token(r->kept);
    void *stream = r->args->cuda_stream;
    const int64_t t_stage = now_ns();

    const dcp__body_layout *b = &r->body;
    dcp__receive_table rt;
    dcp__send_table sendt;
    dcp__block_arrays xa;
    if (dcp__reroute_tables_take(c, scratch, &rt, &sendt, &xa) != DCP_OK)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: exchange scratch too small");
    rt.rows = (dcp__body_row *)(st->mover.host_body + b->rows);
    rt.cu = (int32_t *)(st->mover.host_body + b->cu);
    rt.cu_padded = (int32_t *)(st->mover.host_body + b->cu_padded);

    dcp__reroute_receive(r->plan, c, &r->lengths, r->rank, &st->local, &r->geometry, &r->gs, &rt);
    r->stats.tokens_computed += rt.own_tokens;
    for (int64_t i = 0; i < rt.received.count; i++) r->stats.tokens_computed += rt.received.length[i];
    r->stats.tokens_out = r->geometry.total_tokens;
    if (per_token > 0) {
        dcp_status s = dcp__reroute_send(r->plan, c, &r->lengths, r->rank, &st->local, &r->gs, &sendt, err);
        if (s != DCP_OK) return s;
    }
    dcp__exchange_blocks blocks;
    dcp__reroute_blocks(sendt.tokens_to, rt.tokens_from, n, r->rank, rt.own_tokens, per_token, xa.send_bytes,
                        xa.send_offsets, xa.recv_bytes, xa.recv_offsets, &blocks, &r->stats);
    unsigned char *send = NULL, *recv = NULL;
    dcp_status s = mover->ops->buffers(mover, &blocks, scratch, &send, &recv, err);
    if (s != DCP_OK) return s;
    if (per_token > 0) {
        s = mover->ops->stage(mover, stream, r->input, r->kept, &sendt.pieces, &blocks, send, scratch, err);
        if (s != DCP_OK) return s;
    }

    const int64_t t_exchange = now_ns();
    r->stats.time_stage_ns += t_exchange - t_stage;
    if (per_token > 0 && n > 1) { /* a lane of one rank keeps every token: nothing travels */
        s = dcp__reroute_exchange(r->lane, send, xa.send_bytes, xa.send_offsets, recv, xa.recv_bytes, xa.recv_offsets,
                                  &r->stats, err);
        if (s != DCP_OK) return s;
    }
    const int64_t t_pack = now_ns();
    r->stats.time_exchange_ns += t_pack - t_exchange;
    s = dcp__pack_land(mover, stream, r->kept, &rt, &blocks, recv, r->input, b, r->geometry.total_tokens, scratch,
                       err);
    r->stats.time_pack_ns += now_ns() - t_pack;
    return s;
}

static dcp_status finish(dcp_context *ctx, dcp_status s, dcp__error *err, const dcp_step_output **output)
{
    dcp__scratch_end(ctx);
    if (s != DCP_OK) {
        ctx->step->output.num_microbatches = 0;
        ctx->step->output.microbatches = NULL;
        return dcp__context_fail(ctx, s, err);
    }
    *output = &ctx->step->output;
    return DCP_OK;
}

/*
 * The views of every virtual stage, [vpp][microbatches]: strip decides which
 * of the kept fields virtual stage v shows, pack builds its list.
 */
void dcp__step_views(const dcp_config *c, int32_t pipeline_rank, uint32_t mtp, int32_t microbatches, uint32_t kept,
                     const dcp__body_layout *b, const unsigned char *host_body, const unsigned char *body,
                     dcp_microbatch *views)
{
    for (int32_t v = 0; v < c->virtual_pipeline_size; v++)
        dcp__pack_views(microbatches, dcp__strip_view_fields(c, pipeline_rank, mtp, v, kept), b, host_body, body,
                        views + (size_t)v * (size_t)microbatches);
}

/* Before any collective: the call in step with its peers, a context that holds data, a world to agree through. */
static dcp_status step_begin(dcp_context *ctx, const dcp_step_args *args, dcp__call_tag *tag, dcp__error *err)
{
    /* every call counts, also one that fails here alone: its peers' next call will not match it */
    dcp_status begun = dcp__context_call_begin(ctx, DCP_CALL_STEP, args ? args->step_id : 0, tag, err);
    if (begun != DCP_OK) {
        if (ctx->step) ctx->step->output.num_microbatches = 0;
        return dcp__context_fail(ctx, begun, err); /* out of step: no collective */
    }
    if (!ctx->step)
        return skipped(ctx, dcp__fail(err, DCP_ERR_CAPACITY,
                                      "step: max_tokens_per_rank is 0: this context plans but holds no data"),
                       err);
    if (!args || !args->world || !args->world->ops)
        return skipped(ctx, dcp__fail(err, DCP_ERR_NULL_POINTER, "step: args and the world communicator are required"),
                       err); /* no communicator to tell the others through */
    if (args->world->size < 1 || args->world->rank < 0 || args->world->rank >= args->world->size)
        return skipped(ctx, dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "step: world communicator rank %d outside [0, %d)",
                                      args->world->rank, args->world->size),
                       err); /* an agreement through it could not be trusted */
    dcp_status s = dcp__comm_ops_check(args->world->ops, "step", "world communicator", err);
    if (s != DCP_OK) return skipped(ctx, s, err); /* nor through a table of another layout */
    return DCP_OK;
}

/*
 * This rank's local checks (arguments, its input) and its part of the call's
 * tag: its lengths always; unless skip_sibling_data_check, a digest of each
 * field -- the kept ones for its CP siblings, every one it carries for its PP
 * stages and TP peers (a digest that fails, a device error, is a local
 * error).  The first agreement carries the result.
 */
static dcp_status check_local(step_run *r, dcp__call_tag *tag, int holds_data, int has_output, dcp__error *err)
{
    dcp_context *ctx = r->ctx;
    dcp__step_state *st = ctx->step;
    const dcp_step_args *args = r->args;
    const dcp_step_input *input = r->input;
    dcp_status s = has_output ? check_args(ctx, args, holds_data, err)
                              : dcp__fail(err, DCP_ERR_NULL_POINTER, "step: output is NULL");
    st->local.count = 0;
    if (s == DCP_OK && holds_data) {
        r->rank = r->lane->rank;
        s = dcp__gather_local(input, r->kept, &ctx->config, st->token_capacity, &st->local, err);
    }
    if (s == DCP_OK && holds_data) r->kept &= input->fields;
    const dcp_config *c = &ctx->config;
    const int peers_hold = c->pipeline_parallel_size > 1 || (args->tp_ranks_hold_data && c->tensor_parallel_size > 1);
    if (s == DCP_OK && holds_data && !c->skip_sibling_data_check && (c->context_parallel_size > 1 || peers_hold)) {
        const uint32_t fields = peers_hold ? (input->fields & c->fields) : r->kept;
        for (int f = 0; f < DCP_NUM_FIELDS && s == DCP_OK; f++) {
            if (!(fields & dcp__field_bit[f])) continue;
            s = st->mover.ops->digest(&st->mover, args->cuda_stream, input, dcp__field_bit[f], &st->local,
                                      &tag->field_digest[f], err);
            tag->field_mask |= dcp__field_bit[f];
            if (r->kept & dcp__field_bit[f]) r->data_digest += tag->field_digest[f]; /* the digest is a sum over fields */
        }
        if (c->context_parallel_size == 1) r->data_digest = 0;
    }
    if (s == DCP_OK && holds_data) {
        tag->lane_rank = r->lane->rank;
        tag->count = st->local.count;
        tag->hash = dcp__pairs_hash(st->local.pairs, st->local.count);
    }
    tag->stage = args->pipeline_rank;
    return s;
}

/* What TP rank 0 broadcasts first: the exchange's status, what lays out the body, the batch's numbers. */
static void broadcast_header_fill(const step_run *r, dcp_status s, dcp__broadcast_header *header)
{
    const dcp_step_output *out = &r->ctx->step->output;
    header->status = s;
    header->microbatches = r->plan->num_microbatches;
    header->cu = r->geometry.total_cu;
    header->tokens = r->geometry.total_tokens;
    header->kept = r->kept;
    header->sequences = out->num_sequences;
    header->sum = out->seqlen_sum;
    header->squared_sum = out->seqlen_squared_sum;
    header->body_bytes = (int64_t)r->body.used;
}

/* The broadcast to the TP group; a peer takes the batch's numbers, and its body's layout, from the header. */
static dcp_status broadcast_to_tp(step_run *r, int holds_data, dcp__broadcast_header *header, dcp__error *err)
{
    dcp_context *ctx = r->ctx;
    dcp__step_state *st = ctx->step;
    dcp_status s = dcp__broadcast(r->args->tensor_parallel, holds_data, header, &r->body, &st->mover,
                                  ctx->max_microbatches, r->args->cuda_stream, &r->stats, err);
    if (!holds_data) {
        st->output.num_sequences = (int32_t)header->sequences;
        st->output.seqlen_sum = header->sum;
        st->output.seqlen_squared_sum = header->squared_sum;
    }
    return s;
}

/* The output: every virtual stage's views over the body (laid out as the header says), and the step's numbers. */
static void publish_output(step_run *r, int holds_data, const dcp__broadcast_header *header)
{
    dcp_context *ctx = r->ctx;
    dcp__step_state *st = ctx->step;
    dcp__step_views(&ctx->config, r->args->pipeline_rank, r->args->mtp_virtual_stages, (int32_t)header->microbatches,
                    (uint32_t)header->kept, &r->body, st->mover.host_body, st->mover.body, st->views);
    st->output.num_microbatches = (int32_t)header->microbatches;
    st->output.num_virtual_stages = ctx->config.virtual_pipeline_size;
    st->output.microbatches = st->views;
    st->output.plan = holds_data ? r->plan : NULL;
    st->output.stats = r->stats;
}

dcp_status dcp_step(dcp_context *ctx, const dcp_step_args *args, const dcp_step_input *input,
                    const dcp_step_output **output)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    dcp__call_tag tag;
    dcp_status s = step_begin(ctx, args, &tag, &err);
    if (s != DCP_OK) return s;
    dcp__scratch_begin(ctx); /* released in finish() */

    memset(&ctx->step->output, 0, sizeof ctx->step->output);
    step_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.args = args;
    r.input = input;
    r.lane = args->data_context_parallel;
    r.kept = dcp__strip_fields(&ctx->config, args->pipeline_rank, args->mtp_virtual_stages); /* strip */
    const int broadcasts = !args->tp_ranks_hold_data && args->tensor_parallel && args->tensor_parallel->size > 1;
    const int holds_data = !broadcasts || args->tensor_parallel->rank == 0;

    /* local checks, agreed before any data collective */
    s = check_local(&r, &tag, holds_data, output != NULL, &err);
    s = agree_call(ctx, args->world, &tag, s, &err, &r.stats);
    if (s != DCP_OK) return finish(ctx, s, &err, output);

    /* gather, plan, this rank's geometry; agreed before the exchange */
    const int64_t t_plan = now_ns();
    if (holds_data) {
        r.stats.tokens_in = ctx->step->local.original_tokens;
        s = gather_and_plan(&r, &err);
    }
    r.stats.time_plan_ns = now_ns() - t_plan;
    /* the later agreements' records, above the plan's geometry in the arena (the workspace reserves them) */
    dcp__call_tag *tags = DCP_ARENA_NEW(&ctx->arena, dcp__call_tag, args->world->size);
    if (s == DCP_OK && holds_data && !r.plan) /* cannot happen: gather_and_plan succeeded */
        s = dcp__fail(&err, DCP_ERR_INVALID_PLAN, "step: planning succeeded without a plan");
    s = agree(ctx, args->world, &tag, tags, 1, s, &err, &r.stats);
    if (s != DCP_OK) return finish(ctx, s, &err, output);
    if (holds_data && !r.plan) /* an agreement that passed a rank without a plan: never read it */
        return finish(ctx, dcp__fail(&err, DCP_ERR_COMM, "step: the agreement passed a rank that has no plan"), &err,
                      output);

    /* reroute and pack, then the broadcast to the TP group; agreed at the end */
    dcp__broadcast_header header;
    memset(&header, 0, sizeof header);
    if (holds_data) {
        s = exchange_and_pack(&r, &err);
        broadcast_header_fill(&r, s, &header);
    }
    if (broadcasts) s = broadcast_to_tp(&r, holds_data, &header, &err);
    s = agree(ctx, args->world, &tag, tags, 2, s, &err, &r.stats);
    if (s != DCP_OK) return finish(ctx, s, &err, output);

    publish_output(&r, holds_data, &header);
    return finish(ctx, DCP_OK, &err, output);
}
