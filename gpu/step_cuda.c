/*
 * step_cuda.c - a context's CUDA workspace and the device half of dcp_step
 * (see step_cuda.h).
 */
#include "step_cuda.h"
#include "../core/context.h"
#include "../core/segments.h"
#include "../pipeline/step.h"

#include <string.h>

#ifdef DCP_HAVE_CUDA
#include "kernels.h"

#include <cuda_runtime.h>

/* Step order of the fields, as in pipeline/step.c. */
static const size_t field_size[DCP_STEP_NUM_FIELDS] = {8, 8, 8, 4};

struct dcp_cuda_state {
    int device;
    int owns_device, owns_host;
    unsigned char *device_base;
    void *host_base;
    size_t staging_bytes, body_bytes, table_bytes;
    int64_t max_segments, max_sources;
    unsigned char *send_staging, *recv_staging, *body, *table; /* device */
    unsigned char *host_table;                                 /* pinned */
};

static size_t align256(size_t v) { return v > SIZE_MAX - 255 ? SIZE_MAX : (v + 255) & ~(size_t)255; }

/* Bytes of a table of `segments` segments with `fields` fields of `sources` + `dests` pointers each. */
static size_t table_bytes(int64_t segments, int64_t fields, int64_t sources, int64_t dests)
{
    size_t n = (size_t)segments;
    size_t b = align256(dcp__size_mul(n, 4)) * 2;               /* src_index, dst_index */
    b = dcp__size_add(b, dcp__size_mul(align256(dcp__size_mul(n, 8)), 3)); /* src_offset, dst_offset, length */
    b = dcp__size_add(b, align256(dcp__size_mul(n + 1, 8)));     /* work_offset */
    b = dcp__size_add(b, align256(dcp__size_mul((size_t)fields, dcp__size_mul((size_t)sources, 8))));
    b = dcp__size_add(b, align256(dcp__size_mul((size_t)fields, dcp__size_mul((size_t)dests, 8))));
    return b;
}

typedef struct sizes {
    size_t staging, body, table, device, host;
    int64_t segments, sources;
} sizes;

static dcp_status sizes_compute(const dcp_config *c, sizes *z)
{
    dcp__step_device_sizes(c, &z->staging, &z->body, &z->segments, &z->sources);
    if (z->staging == SIZE_MAX || z->body == SIZE_MAX || z->segments == INT64_MAX) return DCP_ERR_OVERFLOW;
    int64_t ranks = dcp_config_num_ranks(c);
    /* 5 fields: four data fields and the mask; sources: samples or peers; destinations: peers */
    z->table = table_bytes(z->segments, DCP_STEP_NUM_FIELDS + 1, z->sources, ranks);
    z->device = dcp__size_add(dcp__size_add(dcp__size_mul(align256(z->staging), 2), align256(z->body)), align256(z->table));
    z->host = dcp__size_add(align256(sizeof(dcp_cuda_state)), align256(z->table));
    return z->device == SIZE_MAX || z->host == SIZE_MAX ? DCP_ERR_OVERFLOW : DCP_OK;
}

dcp_status dcp_cuda_workspace_size(const dcp_config *c, size_t *device_bytes, size_t *host_bytes)
{
    if (!c || !device_bytes || !host_bytes) return DCP_ERR_NULL_POINTER;
    dcp_status s = dcp_config_validate(c, NULL, 0);
    if (s != DCP_OK) return s;
    if (c->max_tokens_per_rank <= 0) return DCP_ERR_CAPACITY;
    sizes z;
    if ((s = sizes_compute(c, &z)) != DCP_OK) return s;
    *device_bytes = z.device;
    *host_bytes = z.host;
    return DCP_OK;
}

static dcp_status cuda_fail(dcp_error *err, cudaError_t e, const char *what)
{
    return dcp__fail(err, DCP_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

dcp_status dcp_context_attach_cuda(dcp_context *ctx, void *device_memory, size_t device_bytes, void *host_memory,
                                   size_t host_bytes)
{
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp_error err;
    dcp__error_clear(&err);
    if (ctx->cuda)
        return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_INVALID_ARGUMENT, "attach_cuda: already attached"), &err);
    if (!ctx->step)
        return dcp__context_fail(
            ctx, dcp__fail(&err, DCP_ERR_CAPACITY, "attach_cuda: max_tokens_per_rank is 0: nothing to hold"), &err);
    sizes z;
    dcp_status s = sizes_compute(&ctx->config, &z);
    if (s != DCP_OK) return dcp__context_fail(ctx, dcp__fail(&err, s, "attach_cuda: workspace size overflows"), &err);
    if ((device_memory && device_bytes < z.device) || (host_memory && host_bytes < z.host))
        return dcp__context_fail(ctx,
                                dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL,
                                         "attach_cuda: needs %zu device and %zu pinned bytes, got %zu and %zu", z.device,
                                         z.host, device_bytes, host_bytes),
                                &err);
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return dcp__context_fail(ctx, cuda_fail(&err, e, "attach_cuda: cudaGetDevice"), &err);
    unsigned char *dmem = (unsigned char *)device_memory;
    void *hmem = host_memory;
    if (!dmem && (e = cudaMalloc((void **)&dmem, z.device)) != cudaSuccess)
        return dcp__context_fail(ctx, cuda_fail(&err, e, "attach_cuda: cudaMalloc"), &err);
    if (!hmem && (e = cudaMallocHost(&hmem, z.host)) != cudaSuccess) {
        if (!device_memory) cudaFree(dmem);
        return dcp__context_fail(ctx, cuda_fail(&err, e, "attach_cuda: cudaMallocHost"), &err);
    }
    /* the state sits at the start of the pinned block, 256-aligned */
    uintptr_t at = ((uintptr_t)hmem + 255) & ~(uintptr_t)255;
    if (host_memory && at != (uintptr_t)hmem && host_bytes < z.host + (at - (uintptr_t)hmem)) {
        if (!device_memory) cudaFree(dmem);
        return dcp__context_fail(ctx,
                                dcp__fail(&err, DCP_ERR_WORKSPACE_TOO_SMALL,
                                         "attach_cuda: pinned memory not 256-byte aligned and no room to align it"),
                                &err);
    }
    dcp_cuda_state *st = (dcp_cuda_state *)at;
    memset(st, 0, sizeof *st);
    st->device = device;
    st->owns_device = device_memory == NULL;
    st->owns_host = host_memory == NULL;
    st->device_base = dmem;
    st->host_base = hmem;
    st->staging_bytes = z.staging;
    st->body_bytes = z.body;
    st->table_bytes = z.table;
    st->max_segments = z.segments;
    st->max_sources = z.sources;
    /* device blocks start 256-aligned relative to the base (cudaMalloc's base is) */
    st->send_staging = dmem;
    st->recv_staging = st->send_staging + align256(z.staging);
    st->body = st->recv_staging + align256(z.staging);
    st->table = st->body + align256(z.body);
    st->host_table = (unsigned char *)st + align256(sizeof *st);
    ctx->cuda = st;
    return DCP_OK;
}

void dcp__cuda_release(dcp_context *ctx)
{
    if (!ctx || !ctx->cuda) return;
    dcp_cuda_state *st = ctx->cuda;
    ctx->cuda = NULL;
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(st->device);
    unsigned char *dmem = st->owns_device ? st->device_base : NULL;
    void *hmem = st->owns_host ? st->host_base : NULL;
    if (dmem) cudaFree(dmem);
    if (hmem) cudaFreeHost(hmem); /* the state lived in it: read above */
    cudaSetDevice(current);
}

unsigned char *dcp__cuda_send_staging(dcp_context *ctx) { return ctx->cuda->send_staging; }
unsigned char *dcp__cuda_recv_staging(dcp_context *ctx) { return ctx->cuda->recv_staging; }
size_t dcp__cuda_staging_capacity(dcp_context *ctx) { return ctx->cuda->staging_bytes; }
unsigned char *dcp__cuda_body(dcp_context *ctx) { return ctx->cuda->body; }

/* ------------------------------------------------------------------------ */
/* Segment tables                                                            */
/* ------------------------------------------------------------------------ */

/* A table being built in the pinned block, with the same offsets in the device block. */
typedef struct table_build {
    int64_t n;
    int32_t *src_index, *dst_index;
    int64_t *src_offset, *dst_offset, *length, *work;
    const void **src_ptrs; /* [fields][sources] */
    void **dst_ptrs;       /* [fields][dests] */
    int64_t sources, dests;
    size_t bytes;          /* used, from the start of the table */
} table_build;

static void *carve(unsigned char *base, size_t *at, size_t bytes)
{
    void *p = base + *at;
    *at += align256(bytes);
    return p;
}

static dcp_status table_begin(dcp_cuda_state *st, int64_t n, int32_t fields, int64_t sources, int64_t dests,
                              table_build *t, dcp_error *err)
{
    if (n > st->max_segments || sources > st->max_sources + 1 ||
        table_bytes(n, fields, sources, dests) > st->table_bytes)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: a device segment table of %lld segments exceeds the workspace",
                        (long long)n);
    unsigned char *h = st->host_table;
    size_t at = 0;
    t->n = n;
    t->src_index = (int32_t *)carve(h, &at, (size_t)n * 4);
    t->dst_index = (int32_t *)carve(h, &at, (size_t)n * 4);
    t->src_offset = (int64_t *)carve(h, &at, (size_t)n * 8);
    t->dst_offset = (int64_t *)carve(h, &at, (size_t)n * 8);
    t->length = (int64_t *)carve(h, &at, (size_t)n * 8);
    t->work = (int64_t *)carve(h, &at, (size_t)(n + 1) * 8);
    t->src_ptrs = (const void **)carve(h, &at, (size_t)fields * (size_t)sources * 8);
    t->dst_ptrs = (void **)carve(h, &at, (size_t)fields * (size_t)dests * 8);
    t->sources = sources;
    t->dests = dests;
    t->bytes = at;
    return DCP_OK;
}

/* The device address of a pointer into the pinned table. */
#define ON_DEVICE(st, p) ((void *)((st)->table + ((const unsigned char *)(p) - (st)->host_table)))

/* Upload the table and launch the segment kernel over `fields`. */
static dcp_status table_run(dcp_cuda_state *st, table_build *t, dcp_segment_field *fields, int32_t num_fields,
                            void *stream, dcp_error *err)
{
    int64_t total = dcp__segment_work_offsets(t->length, t->n, t->work);
    cudaError_t e = cudaMemcpyAsync(st->table, st->host_table, t->bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: upload of a segment table");
    dcp_segment_table table = {t->n,
                               (const int32_t *)ON_DEVICE(st, t->src_index),
                               (const int64_t *)ON_DEVICE(st, t->src_offset),
                               (const int32_t *)ON_DEVICE(st, t->dst_index),
                               (const int64_t *)ON_DEVICE(st, t->dst_offset),
                               (const int64_t *)ON_DEVICE(st, t->length),
                               (const int64_t *)ON_DEVICE(st, t->work)};
    for (int32_t f = 0; f < num_fields; f++) {
        if (fields[f].src) fields[f].src = (const void *const *)ON_DEVICE(st, fields[f].src);
        fields[f].dst = (void *const *)ON_DEVICE(st, fields[f].dst);
    }
    int rc = dcp__segment_table_pack_cuda(&table, total, fields, num_fields, stream);
    if (rc != 0) return cuda_fail(err, (cudaError_t)rc, "step: segment kernel launch");
    return DCP_OK;
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

dcp_status dcp__step_cuda_stage(dcp_context *ctx, void *stream, const dcp_step_input *in, uint32_t kept,
                               int64_t pieces, const int32_t *sample, const int64_t *src, const int32_t *peer,
                               const int64_t *cursor, const int64_t *length, int32_t num_peers,
                               const size_t *send_offsets, const int64_t *tokens_to, dcp_error *err)
{
    dcp_cuda_state *st = ctx->cuda;
    if (pieces == 0) return DCP_OK;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: cudaSetDevice");
    int32_t nf = 0;
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) nf += (kept & dcp__step_field_bit[f]) != 0;
    table_build t;
    int64_t sources = in->num_samples > 0 ? in->num_samples : 1;
    dcp_status s = table_begin(st, pieces, nf, sources, num_peers, &t, err);
    if (s != DCP_OK) return s;
    for (int64_t i = 0; i < pieces; i++) {
        t.src_index[i] = sample[i];
        t.dst_index[i] = peer[i];
        t.src_offset[i] = src[i];
        t.dst_offset[i] = cursor[i];
        t.length[i] = length[i];
    }
    dcp_segment_field fields[DCP_STEP_NUM_FIELDS];
    size_t field_offset = 0;
    int32_t k = 0;
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) {
        if (!(kept & dcp__step_field_bit[f])) continue;
        const void **srcs = t.src_ptrs + (size_t)k * (size_t)t.sources;
        void **dsts = t.dst_ptrs + (size_t)k * (size_t)t.dests;
        for (int32_t i = 0; i < in->num_samples; i++) srcs[i] = sample_field(&in->samples[i], f);
        for (int32_t q = 0; q < num_peers; q++)
            dsts[q] = st->send_staging + send_offsets[q] + (size_t)tokens_to[q] * field_offset;
        fields[k].src = srcs;
        fields[k].dst = dsts;
        fields[k].elem_size = (int64_t)field_size[f];
        field_offset += field_size[f];
        k++;
    }
    s = table_run(st, &t, fields, nf, stream, err);
    if (s != DCP_OK) return s;
    /* the exchange may run on another stream and reads the staging: it must be complete */
    e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: gathering outgoing tokens");
}

dcp_status dcp__step_cuda_land(dcp_context *ctx, void *stream, uint32_t kept, int64_t pieces, const int32_t *sender,
                              const int64_t *cursor, const int64_t *dst, const int64_t *length, int64_t total_tokens,
                              int32_t num_peers, const size_t *recv_offsets, const int64_t *tokens_from,
                              const size_t *field_offset, size_t mask_offset, size_t prefix_bytes, dcp_error *err)
{
    dcp_cuda_state *st = ctx->cuda;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: cudaSetDevice");
    if (prefix_bytes > 0) {
        e = cudaMemcpyAsync(st->body, ctx->step->body, prefix_bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) return cuda_fail(err, e, "step: upload of cu_seqlens");
    }
    int32_t nf = 1; /* the mask */
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) nf += (kept & dcp__step_field_bit[f]) != 0;
    table_build t;
    dcp_status s = table_begin(st, 2 * pieces + 1, nf, num_peers, 1, &t, err);
    if (s != DCP_OK) return s;
    /* every piece, with a fill for the gap before it, then the tail: each slot written once */
    int64_t n = 0, at = 0;
    for (int64_t i = 0; i < pieces; i++) {
        if (dst[i] < at || dst[i] + length[i] > total_tokens)
            return dcp__fail(err, DCP_ERR_INVALID_PLAN, "step: received piece %lld lands at %lld, before %lld",
                            (long long)i, (long long)dst[i], (long long)at);
        if (dst[i] > at) {
            t.src_index[n] = -1, t.dst_index[n] = 0, t.src_offset[n] = 0, t.dst_offset[n] = at;
            t.length[n++] = dst[i] - at;
        }
        t.src_index[n] = sender[i], t.dst_index[n] = 0, t.src_offset[n] = cursor[i], t.dst_offset[n] = dst[i];
        t.length[n++] = length[i];
        at = dst[i] + length[i];
    }
    if (at < total_tokens) {
        t.src_index[n] = -1, t.dst_index[n] = 0, t.src_offset[n] = 0, t.dst_offset[n] = at;
        t.length[n++] = total_tokens - at;
    }
    t.n = n; /* the carved arrays hold 2 * pieces + 1; the used prefix is what runs */
    dcp_segment_field fields[DCP_STEP_NUM_FIELDS + 1];
    size_t offset_in_block = 0;
    int32_t k = 0;
    for (int f = 0; f < DCP_STEP_NUM_FIELDS; f++) {
        if (!(kept & dcp__step_field_bit[f])) continue;
        const void **srcs = t.src_ptrs + (size_t)k * (size_t)t.sources;
        void **dsts = t.dst_ptrs + (size_t)k * (size_t)t.dests;
        for (int32_t q = 0; q < num_peers; q++)
            srcs[q] = st->recv_staging + recv_offsets[q] + (size_t)tokens_from[q] * offset_in_block;
        dsts[0] = st->body + field_offset[f];
        fields[k].src = srcs;
        fields[k].dst = dsts;
        fields[k].elem_size = (int64_t)field_size[f];
        offset_in_block += field_size[f];
        k++;
    }
    void **mask_dst = t.dst_ptrs + (size_t)k * (size_t)t.dests;
    mask_dst[0] = st->body + mask_offset;
    fields[k].src = NULL;
    fields[k].dst = mask_dst;
    fields[k].elem_size = 1;
    if (n > 0 && (s = table_run(st, &t, fields, nf, stream, err)) != DCP_OK) return s;
    e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: placing received tokens");
}

dcp_status dcp__cuda_body_download(dcp_context *ctx, void *stream, size_t prefix_bytes, dcp_error *err)
{
    dcp_cuda_state *st = ctx->cuda;
    if (prefix_bytes > ctx->step->body_capacity)
        return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: body prefix of %zu bytes", prefix_bytes);
    cudaError_t e = cudaMemcpyAsync(ctx->step->body, st->body, prefix_bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: download of cu_seqlens");
}

#else /* built without CUDA */

dcp_status dcp_cuda_workspace_size(const dcp_config *c, size_t *device_bytes, size_t *host_bytes)
{
    (void)c, (void)device_bytes, (void)host_bytes;
    return DCP_ERR_UNSUPPORTED;
}

dcp_status dcp_context_attach_cuda(dcp_context *ctx, void *device_memory, size_t device_bytes, void *host_memory,
                                   size_t host_bytes)
{
    (void)device_memory, (void)device_bytes, (void)host_memory, (void)host_bytes;
    if (!ctx) return DCP_ERR_NULL_POINTER;
    dcp_error err;
    return dcp__context_fail(ctx, dcp__fail(&err, DCP_ERR_UNSUPPORTED, "attach_cuda: built without CUDA"), &err);
}

void dcp__cuda_release(dcp_context *ctx) { (void)ctx; }
unsigned char *dcp__cuda_send_staging(dcp_context *ctx) { (void)ctx; return NULL; }
unsigned char *dcp__cuda_recv_staging(dcp_context *ctx) { (void)ctx; return NULL; }
size_t dcp__cuda_staging_capacity(dcp_context *ctx) { (void)ctx; return 0; }
unsigned char *dcp__cuda_body(dcp_context *ctx) { (void)ctx; return NULL; }

dcp_status dcp__step_cuda_stage(dcp_context *ctx, void *stream, const dcp_step_input *in, uint32_t kept,
                               int64_t pieces, const int32_t *sample, const int64_t *src, const int32_t *peer,
                               const int64_t *cursor, const int64_t *length, int32_t num_peers,
                               const size_t *send_offsets, const int64_t *tokens_to, dcp_error *err)
{
    (void)ctx, (void)stream, (void)in, (void)kept, (void)pieces, (void)sample, (void)src, (void)peer, (void)cursor;
    (void)length, (void)num_peers, (void)send_offsets, (void)tokens_to;
    return dcp__fail(err, DCP_ERR_UNSUPPORTED, "step: built without CUDA");
}

dcp_status dcp__step_cuda_land(dcp_context *ctx, void *stream, uint32_t kept, int64_t pieces, const int32_t *sender,
                              const int64_t *cursor, const int64_t *dst, const int64_t *length, int64_t total_tokens,
                              int32_t num_peers, const size_t *recv_offsets, const int64_t *tokens_from,
                              const size_t *field_offset, size_t mask_offset, size_t prefix_bytes, dcp_error *err)
{
    (void)ctx, (void)stream, (void)kept, (void)pieces, (void)sender, (void)cursor, (void)dst, (void)length;
    (void)total_tokens, (void)num_peers, (void)recv_offsets, (void)tokens_from, (void)field_offset, (void)mask_offset;
    (void)prefix_bytes;
    return dcp__fail(err, DCP_ERR_UNSUPPORTED, "step: built without CUDA");
}

dcp_status dcp__cuda_body_download(dcp_context *ctx, void *stream, size_t prefix_bytes, dcp_error *err)
{
    (void)ctx, (void)stream, (void)prefix_bytes;
    return dcp__fail(err, DCP_ERR_UNSUPPORTED, "step: built without CUDA");
}

#endif
