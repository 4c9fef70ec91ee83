/*
 * workspace.c - size a context exactly, then build it in caller memory or in
 * memory from a jemalloc arena of its own.
 *
 * Layout of a workspace:   [slack to 64 B][dcp_context][persistent buffers][scratch]
 * dcp__context_layout() allocates the persistent buffers in a fixed order and
 * reserves the largest scratch any stage needs; run on a measuring arena it
 * gives the exact size, run on the real one it places the buffers.
 */
#include "../core/context.h"
#include "../gpu/step_cuda.h"
#include "../core/plan.h"
#include "../pipeline/stages.h"
#include "../pipeline/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#define CONTEXT_BYTES (dcp__arena_bytes(sizeof(dcp_context), 1))

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static size_t scratch_size(const dcp_config *c)
{
    size_t s = dcp__gather_scratch_size(c);
    s = max_size(s, dcp__bucket_scratch_size(c));
    s = max_size(s, dcp__assign_scratch_size(c));
    s = max_size(s, dcp__validate_scratch_size(c));
    s = max_size(s, dcp__step_scratch_size(c));
    return s;
}

dcp_status dcp__context_layout(dcp_context *ctx, dcp_arena *arena, const dcp_config *config)
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
    if (!ctx->global_lengths || !ctx->rank_offsets || !ctx->sorted_ids || !ctx->min_cp)
        return DCP_ERR_WORKSPACE_TOO_SMALL;

    st = dcp__step_layout(ctx, arena, config); /* data-plane buffers (none when max_tokens_per_rank is 0) */
    if (st != DCP_OK) return st;

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
    dcp_arena measure;
    dcp__arena_init_measure(&measure);
    st = dcp__context_layout(&probe, &measure, config);
    if (st != DCP_OK) return st == DCP_ERR_WORKSPACE_TOO_SMALL ? DCP_ERR_OVERFLOW : st;
    size_t total = dcp__size_add(DCP_ARENA_ALIGN, CONTEXT_BYTES);
    total = dcp__size_add(total, measure.used);
    total = dcp__size_add(total, probe.scratch_bytes);
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

#ifdef DCP_HAVE_JEMALLOC
/* Hand a context's jemalloc arena back (its one allocation already freed). */
static void destroy_arena(unsigned arena_index)
{
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", arena_index);
    mallctl(name, NULL, NULL, NULL, 0);
}
#endif

dcp_status dcp_context_create(const dcp_config *config, dcp_context **context)
{
    if (!config || !context) return DCP_ERR_NULL_POINTER;
    size_t need;
    dcp_status st = dcp_workspace_size(config, &need);
    if (st != DCP_OK) return st;
    void *memory = NULL;
    unsigned arena_index = 0;
#ifdef DCP_HAVE_JEMALLOC
    size_t len = sizeof arena_index;
    if (mallctl("arenas.create", &arena_index, &len, NULL, 0) != 0) return DCP_ERR_ALLOC;
    memory = mallocx(need, MALLOCX_ARENA(arena_index) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(DCP_ARENA_ALIGN));
    if (!memory) {
        destroy_arena(arena_index); /* a failed create leaves no arena behind */
        return DCP_ERR_ALLOC;
    }
#else
    memory = aligned_alloc(DCP_ARENA_ALIGN, (need + DCP_ARENA_ALIGN - 1) / DCP_ARENA_ALIGN * DCP_ARENA_ALIGN);
    if (!memory) return DCP_ERR_ALLOC;
#endif
    dcp_context *ctx = NULL;
    st = init_in(memory, need, config, &ctx);
    if (st != DCP_OK) {
#ifdef DCP_HAVE_JEMALLOC
        dallocx(memory, MALLOCX_TCACHE_NONE);
        destroy_arena(arena_index);
#else
        free(memory);
#endif
        return st;
    }
    ctx->owned_memory = memory;
    ctx->owned_size = need;
    ctx->jemalloc_arena = arena_index;
#ifdef DCP_HAVE_JEMALLOC
    ctx->uses_jemalloc = 1;
#endif
    *context = ctx;
    return DCP_OK;
}

void dcp_context_destroy(dcp_context *context)
{
    if (!context) return;
    dcp__cuda_release(context); /* device and pinned memory first: their state sits outside the arena */
    dcp__arena_release(&context->arena); /* caller memory is the caller's again */
    if (!context->owned_memory) return;
    void *memory = context->owned_memory;
#ifdef DCP_HAVE_JEMALLOC
    if (context->uses_jemalloc) {
        unsigned arena_index = context->jemalloc_arena;
        dallocx(memory, MALLOCX_TCACHE_NONE);
        destroy_arena(arena_index);
        return;
    }
#endif
    free(memory);
}

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

dcp_status dcp__context_fail(dcp_context *ctx, dcp_status status, const dcp_error *err)
{
    if (ctx && status != DCP_OK) {
        if (err && err->message[0]) memcpy(&ctx->last_error, err, sizeof *err);
        else dcp__fail(&ctx->last_error, status, "%s", dcp_status_str(status));
    }
    return status;
}
