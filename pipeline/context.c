/*
 * context.c - size a context exactly, then build it in caller memory or in a
 * host block of its own (alloc/host.h); bind a device workspace to it.
 *
 * Layout of a workspace:   [slack to 64 B][dcp_context][persistent buffers][scratch]
 * dcp__context_layout() places the persistent buffers in a fixed order and
 * reserves the largest scratch any stage needs; run on a measuring arena it
 * gives the exact size, run on the real one it places the buffers.  The
 * arena itself (alloc/arena.h) knows nothing of what it holds.
 */
#include "context.h"
#include "stages.h"
#include "step.h"
#include "../core/capacity.h"
#include "../core/plan.h"

#include <string.h>

#define CONTEXT_BYTES (dcp__arena_bytes(sizeof(dcp_context), 1))

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* ------------------------------------------------------------------------ */
/* The step's sizes                                                          */
/* ------------------------------------------------------------------------ */

/* One exchange buffer: every kept field of every token, each peer's block rounded to 8 bytes. */
static size_t staging_bytes(const dcp_config *c)
{
    size_t n = (size_t)dcp_config_num_ranks(c);
    return dcp__size_add(dcp__size_mul((size_t)c->max_tokens_per_rank, dcp__bytes_per_token(c->fields)),
                         dcp__size_mul(8, n));
}

size_t dcp__step_scratch_size(const dcp_config *c)
{
    if (c->max_tokens_per_rank <= 0) return 0;
    const int32_t n = dcp_config_num_ranks(c), ns = c->max_sequences;
    const int64_t send = (int64_t)dcp__step_send_piece_bound(c); /* at most max_tokens_per_rank */
    /* after planning: reroute's geometry, group scratch and tables, then the mover's exchange buffers, staging
       and landing (every received and own piece: 2 max_sequences), each measured from its own layout code */
    size_t s = dcp__reroute_scratch_size(c);
    s = dcp__size_add(s, dcp__mover_cpu_scratch_size(staging_bytes(c), n, ns, send, 2 * (int64_t)ns));
    s = max_size(s, dcp__gather_step_scratch_size(c));
    /* the call agreement over the world: one tag per rank of DP*CP*TP*PP */
    int64_t world = (int64_t)dcp_config_num_ranks(c) * c->tensor_parallel_size * c->pipeline_parallel_size;
    return dcp__size_add(s, DCP_ARENA_BYTES(dcp__call_tag, world));
}

void dcp__step_mover_sizes(const dcp_config *c, dcp__mover_sizes *z)
{
    size_t n = (size_t)dcp_config_num_ranks(c), ns = (size_t)c->max_sequences;
    z->staging = staging_bytes(c);
    dcp__body_layout b;
    dcp__body_layout_compute(dcp__step_max_microbatches(c), dcp__step_cu_capacity(c), c->max_tokens_per_rank,
                             c->fields, &b);
    z->body = b.used;
    z->prefix = b.prefix;
    /* receiving: every piece plus the gap before it, plus the tail */
    size_t receive = dcp__size_add(dcp__size_mul(2, dcp__size_mul(2, ns)), 1), send = dcp__step_send_piece_bound(c);
    size_t segments = receive > send ? receive : send;
    z->segments = segments >= (size_t)INT64_MAX ? INT64_MAX : (int64_t)segments;
    z->sources = (int64_t)dcp__size_add(ns, n); /* landing: the peers' runs, then the samples */
    z->ranks = (int64_t)n;
}

dcp_status dcp__step_layout(dcp_context *ctx, dcp__arena *arena, const dcp_config *c)
{
    ctx->step = NULL;
    if (c->max_tokens_per_rank <= 0) return DCP_OK;
    /* filled here and copied in: a measuring arena hands out pointers that must not be written */
    dcp__step_state *place = DCP_ARENA_NEW(arena, dcp__step_state, 1);
    dcp__step_state st;
    memset(&st, 0, sizeof st);
    const int32_t ns = c->max_sequences, mb = dcp__step_max_microbatches(c);
    st.token_capacity = c->max_tokens_per_rank;
    st.cu_capacity = dcp__step_cu_capacity(c);
    dcp__body_layout b;
    dcp__body_layout_compute(mb, st.cu_capacity, st.token_capacity, c->fields, &b);
    if (b.used == SIZE_MAX) return DCP_ERR_OVERFLOW;
    st.original_lengths = DCP_ARENA_NEW(arena, int32_t, ns);
    st.local.pairs = DCP_ARENA_NEW(arena, int32_t, 2 * (size_t)ns);
    st.local.sample = DCP_ARENA_NEW(arena, int32_t, ns);
    st.local.start = DCP_ARENA_NEW(arena, int64_t, ns);
    unsigned char *body = DCP_ARENA_NEW(arena, unsigned char, b.used);
    st.views = DCP_ARENA_NEW(arena, dcp_microbatch, (size_t)c->virtual_pipeline_size * (size_t)mb);
    if (dcp__arena_failed(arena)) return DCP_ERR_WORKSPACE_TOO_SMALL;
    dcp__mover_cpu_init(&st.mover, body, b.used);
    if (arena->base) *place = st;
    ctx->step = place;
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Layout and creation                                                       */
/* ------------------------------------------------------------------------ */

static size_t scratch_size(const dcp_config *c)
{
    size_t s = dcp__gather_scratch_size(c);
    s = max_size(s, dcp__bucket_scratch_size(c));
    s = max_size(s, dcp__assign_scratch_size(c));
    s = max_size(s, dcp__validate_scratch_size(c)); /* dcp_plan_validate, and dcp_plan_stats_compute's check */
    s = max_size(s, dcp__stats_scratch_size(c));    /* dcp_plan_stats_compute's finish times, after the check */
    s = max_size(s, dcp__step_scratch_size(c));
    s = max_size(s, dcp__observe_scratch_size(c)); /* 0 when max_observations is 0 */
    return s;
}

dcp_status dcp__context_layout(dcp_context *ctx, dcp__arena *arena, const dcp_config *config)
{
    const int32_t max_seq = config->max_sequences;
    const int32_t max_mb = config->max_microbatches > 0 ? config->max_microbatches : max_seq;
    ctx->config = *config;
    ctx->num_ranks = dcp_config_num_ranks(config);
    ctx->max_microbatches = max_mb;

    /* a group holds at least one id, so there are at most max_sequences groups */
    dcp_status st = dcp__plan_init(&ctx->plan, arena, max_mb, max_seq, max_seq);
    if (st != DCP_OK) return st;
    ctx->global_lengths = DCP_ARENA_NEW(arena, int32_t, max_seq);
    ctx->rank_offsets = DCP_ARENA_NEW(arena, int32_t, (size_t)config->data_parallel_size + 1);
    ctx->sorted_ids = DCP_ARENA_NEW(arena, int32_t, max_seq);
    ctx->min_cp = DCP_ARENA_NEW(arena, int32_t, max_seq);
    if (dcp__arena_failed(arena)) return DCP_ERR_WORKSPACE_TOO_SMALL;

    st = dcp__step_layout(ctx, arena, config); /* data-plane buffers (none when max_tokens_per_rank is 0) */
    if (st != DCP_OK) return st;
    st = dcp__observe_layout(ctx, arena, config); /* observation rows (none when max_observations is 0) */
    if (st != DCP_OK) return st;

    ctx->config_digest = dcp__config_digest(config);
    ctx->scratch_bytes = scratch_size(config);
    if (ctx->scratch_bytes == SIZE_MAX) return DCP_ERR_OVERFLOW;
    ctx->scratch_mark = dcp__arena_mark(arena);
    if (dcp__arena_remaining(arena) < ctx->scratch_bytes) return DCP_ERR_WORKSPACE_TOO_SMALL;
    return DCP_OK;
}

dcp_status dcp_workspace_size(const dcp_config *config, size_t *size)
{
    if (!config || !size) return DCP_ERR_NULL_POINTER;
    dcp_status st = dcp_config_validate(config, NULL, 0);
    if (st != DCP_OK) return st;
    dcp_context probe;
    memset(&probe, 0, sizeof probe);
    dcp__arena measure;
    dcp__arena_init_measure(&measure);
    st = dcp__context_layout(&probe, &measure, config);
    if (st != DCP_OK) return st == DCP_ERR_WORKSPACE_TOO_SMALL ? DCP_ERR_OVERFLOW : st;
    size_t total = dcp__size_add(DCP_ARENA_ALIGN, CONTEXT_BYTES);
    total = dcp__size_add(total, measure.used);
    /* the arena keeps whole 64-byte blocks, so the scratch is counted in them too */
    total = dcp__size_add(total, dcp__arena_bytes(1, probe.scratch_bytes));
    if (total == SIZE_MAX) return DCP_ERR_OVERFLOW;
    *size = total;
    return DCP_OK;
}

static dcp_status init_in(void *memory, size_t size, const dcp_config *config, dcp_context **out)
{
    uintptr_t start = (uintptr_t)memory;
    uintptr_t aligned = (start + DCP_ARENA_ALIGN - 1) & ~(uintptr_t)(DCP_ARENA_ALIGN - 1);
    dcp_context *ctx = (dcp_context *)aligned;
    memset(ctx, 0, sizeof *ctx);
    size_t used = (size_t)(aligned - start) + CONTEXT_BYTES;
    dcp__arena_init(&ctx->arena, (unsigned char *)ctx + CONTEXT_BYTES, size - used);
    dcp_status st = dcp__context_layout(ctx, &ctx->arena, config);
    if (st != DCP_OK) return st;
    *out = ctx;
    return DCP_OK;
}

dcp_status dcp_context_init_static(void *memory, size_t size, const dcp_config *config, dcp_context **context)
{
    if (!memory || !config || !context) return DCP_ERR_NULL_POINTER;
    size_t need;
    dcp_status st = dcp_workspace_size(config, &need);
    if (st != DCP_OK) return st;
    if (size < need) return DCP_ERR_WORKSPACE_TOO_SMALL;
    return init_in(memory, size, config, context);
}

dcp_status dcp_context_create(const dcp_config *config, dcp_context **context)
{
    if (!config || !context) return DCP_ERR_NULL_POINTER;
    size_t need;
    dcp_status st = dcp_workspace_size(config, &need);
    if (st != DCP_OK) return st;
    dcp__host_block block;
    if (dcp__host_block_alloc(&block, need, DCP_ARENA_ALIGN) != 0) return DCP_ERR_ALLOC;
    dcp_context *ctx = NULL;
    st = init_in(block.memory, need, config, &ctx);
    if (st != DCP_OK) {
        dcp__host_block_free(&block);
        return st;
    }
    ctx->owned = block;
    *context = ctx;
    return DCP_OK;
}

void dcp_context_destroy(dcp_context *context)
{
    if (!context) return;
    if (context->step) context->step->mover.ops->release(&context->step->mover); /* device memory first */
    dcp__arena_release(&context->arena); /* caller memory is the caller's again */
    dcp__host_block block = context->owned;  /* the context lives in it: copy before freeing */
    dcp__host_block_free(&block);
}

/* ------------------------------------------------------------------------ */
/* A device workspace                                                        */
/* ------------------------------------------------------------------------ */

dcp_status dcp__mover_workspace_size(const dcp_config *c, const dcp__mover_backend *backend, size_t *device_bytes,
                                     size_t *host_bytes)
{
    if (!c || !device_bytes || !host_bytes) return DCP_ERR_NULL_POINTER;
    dcp_status s = dcp_config_validate(c, NULL, 0);
    if (s != DCP_OK) return s;
    if (c->max_tokens_per_rank <= 0) return DCP_ERR_CAPACITY;
    dcp__mover_sizes z;
    dcp__step_mover_sizes(c, &z);
    return backend->workspace_size(&z, device_bytes, host_bytes);
}

dcp_status dcp__context_attach_mover(dcp_context *ctx, const dcp__mover_backend *backend, void *device_memory,
                                     size_t device_bytes, void *host_memory, size_t host_bytes)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp__error err;
    dcp__error_clear(&err);
    if (!ctx->step)
        return dcp__context_fail(
            ctx, dcp__fail(&err, DCP_ERR_CAPACITY, "attach_cuda: max_tokens_per_rank is 0: nothing to hold"), &err);
    if (ctx->step->mover.state)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "attach_cuda: already attached"), &err);
    dcp__mover_sizes z;
    dcp__step_mover_sizes(&ctx->config, &z);
    dcp_status s = backend->create(&ctx->step->mover, &z, device_memory, device_bytes, host_memory, host_bytes, &err);
    return s == DCP_OK ? DCP_OK : dcp__context_fail(ctx, s, &err);
}

/* ------------------------------------------------------------------------ */
/* Calls in step                                                             */
/* ------------------------------------------------------------------------ */

dcp_status dcp__context_call_begin(dcp_context *ctx, uint32_t kind, uint64_t step_id, dcp__call_tag *tag,
                                   dcp__error *err)
{
    dcp__call_tag_init(tag, kind, ctx->calls++, step_id, ctx->config_digest);
    if (ctx->out_of_step)
        return dcp__fail(err, DCP_ERR_OUT_OF_STEP,
                         "a previous call found the ranks out of step; call dcp_context_resync() on every rank "
                         "once they are back in step");
    return DCP_OK;
}

dcp_status dcp_context_resync(dcp_context *context, uint64_t next_call)
{
    if (!context) return DCP_ERR_NULL_POINTER;
    context->calls = next_call;
    context->out_of_step = 0;
    return DCP_OK;
}

uint64_t dcp_context_calls(const dcp_context *context) { return context ? context->calls : 0; }

/* ------------------------------------------------------------------------ */
/* Accessors                                                                 */
/* ------------------------------------------------------------------------ */

const dcp_config *dcp_context_config(const dcp_context *context) { return context ? &context->config : NULL; }

const char *dcp_context_last_error(const dcp_context *context)
{
    return context ? context->last_error.message : "context is NULL";
}

size_t dcp_context_workspace_bytes(const dcp_context *context)
{
    return context ? context->scratch_mark + context->scratch_bytes : 0;
}

size_t dcp_context_scratch_high_water(const dcp_context *context)
{
    if (!context) return 0;
    return context->arena.high_water > context->scratch_mark ? context->arena.high_water - context->scratch_mark : 0;
}
