/*
 * mover_cuda.c - the CUDA token mover (core/mover.h).
 *
 * Its workspace is one device block and one pinned host block, sized from
 * the configuration's mover sizes and bound once (dcp_context_attach_cuda):
 *
 *   device: [send staging][receive staging][segment tables .....][body]
 *   pinned: [cuda_mover state]             [segment tables .....][body prefix]
 *
 * The segment-table region has the same size and offsets in both blocks, and
 * a table is built at its end, so the table and what follows it are
 * contiguous on both sides: in the pinned block the body's prefix (rows,
 * cu_seqlens; the host writes it there, it is the mover's host body), on the
 * device the body itself.  One copy uploads a table, and for landing the
 * prefix with it.  Arrays only the host needs (segment lengths) sit below the
 * uploaded range.
 *
 * Each copy runs one launch of the segment kernel: once to gather the tokens
 * that travel into the send staging, once to land every token in the body
 * (received ones from the receive staging, the ones this rank keeps straight
 * from the caller's samples), zero every padding slot and write the mask.
 * The device body has the host body's layout (core/body.h).
 */
#include "mover_cuda.h"
#include "../core/thd/pack_cpu.h"
#include "../alloc/device.h"
#include "kernels.h"

#include <cuda_runtime.h>
#include <string.h>

typedef struct cuda_mover {
    int device;
    int owns_device, owns_host;
    unsigned char *device_base;
    void *host_base;
    size_t staging_bytes, body_bytes, table_bytes, prefix_bytes; /* table_bytes: the region, a multiple of 256 */
    int64_t max_segments, max_sources;
    unsigned char *send_staging, *recv_staging, *table, *body; /* device; body = table + table_bytes */
    unsigned char *host_table, *host_prefix;                   /* pinned; host_prefix = host_table + table_bytes */
    unsigned char *host_body;                                  /* the CPU mover's body, given back on release */
} cuda_mover;

static size_t align256(size_t v) { return v > SIZE_MAX - 255 ? SIZE_MAX : (v + 255) & ~(size_t)255; }

/*
 * Bytes of a table of `segments` segments (with or without destination
 * indices) and `fields` fields of `sources` + `dests` pointers each.
 */
static size_t table_bytes(int64_t segments, int64_t fields, int64_t sources, int64_t dests, int with_dst_index)
{
    size_t n = (size_t)segments;
    size_t b = align256(dcp__size_mul(n, 8));                              /* length (host only) */
    b = dcp__size_add(b, align256(dcp__size_mul(n, 4)) * (with_dst_index ? 2 : 1)); /* src_index, dst_index */
    b = dcp__size_add(b, dcp__size_mul(align256(dcp__size_mul(n, 8)), 2)); /* src_offset, dst_offset */
    b = dcp__size_add(b, align256(dcp__size_mul(n + 1, 8)));               /* work_offset */
    b = dcp__size_add(b, align256(dcp__size_mul((size_t)fields, dcp__size_mul((size_t)sources, 8))));
    b = dcp__size_add(b, align256(dcp__size_mul((size_t)fields, dcp__size_mul((size_t)dests, 8))));
    return dcp__size_add(b, 256); /* scalars: the digest's field indices, sizes and sum */
}

typedef struct sizes {
    size_t table, prefix, device, host;
} sizes;

static dcp_status sizes_compute(const dcp__mover_sizes *z, sizes *out)
{
    if (z->staging == SIZE_MAX || z->body == SIZE_MAX || z->prefix == SIZE_MAX || z->segments == INT64_MAX)
        return DCP_ERR_OVERFLOW;
    /* 5 fields: four data fields and the mask; sources: peers and samples; destinations: peers */
    out->table = align256(table_bytes(z->segments, DCP_NUM_FIELDS + 1, z->sources, z->ranks, 1));
    out->prefix = align256(z->prefix);
    out->device = dcp__size_add(dcp__size_add(dcp__size_mul(align256(z->staging), 2), out->table), align256(z->body));
    out->host = dcp__size_add(dcp__size_add(align256(sizeof(cuda_mover)), out->table), out->prefix);
    return out->device == SIZE_MAX || out->host == SIZE_MAX ? DCP_ERR_OVERFLOW : DCP_OK;
}

dcp_status dcp__mover_cuda_workspace_size(const dcp__mover_sizes *z, size_t *device_bytes, size_t *host_bytes)
{
    sizes s;
    dcp_status st = sizes_compute(z, &s);
    if (st != DCP_OK) return st;
    *device_bytes = s.device;
    *host_bytes = s.host;
    return DCP_OK;
}

static dcp_status cuda_fail(dcp__error *err, cudaError_t e, const char *what)
{
    return dcp__fail(err, DCP_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* ------------------------------------------------------------------------ */
/* Segment tables                                                            */
/* ------------------------------------------------------------------------ */

/* A table being built at the end of the pinned region, with the same offsets in the device region. */
typedef struct table_build {
    int64_t n;
    int32_t *src_index, *dst_index; /* dst_index NULL: every segment to destination 0 */
    int64_t *src_offset, *dst_offset, *length, *work;
    const void **src_ptrs; /* [fields][sources] */
    void **dst_ptrs;       /* [fields][dests] */
    unsigned char *scalars; /* 256 bytes */
    int64_t sources, dests;
    size_t upload_from;    /* region offset of the first uploaded byte: past the lengths, unless the kernel reads them */
} table_build;

static void *carve(unsigned char *base, size_t *at, size_t bytes)
{
    void *p = base + *at;
    *at += align256(bytes);
    return p;
}

/*
 * Carve a table of n segments.  The segment kernel reads work offsets, not
 * lengths, so the lengths stay on the host unless `kernel_reads_lengths` (the
 * digest kernel): table_upload() sends what upload_from says.
 */
static dcp_status table_begin(cuda_mover *st, int64_t n, int32_t fields, int64_t sources, int64_t dests,
                              int with_dst_index, int kernel_reads_lengths, table_build *t, dcp__error *err)
{
    const size_t bytes = table_bytes(n, fields, sources, dests, with_dst_index);
    if (n > st->max_segments || sources > st->max_sources + 1 || bytes > st->table_bytes)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: a device segment table of %lld segments exceeds the workspace",
                         (long long)n);
    unsigned char *h = st->host_table;
    size_t at = st->table_bytes - bytes; /* a multiple of 256: the table ends where the region does */
    t->n = n;
    t->upload_from = at;
    t->length = (int64_t *)carve(h, &at, (size_t)n * 8);
    if (!kernel_reads_lengths) t->upload_from = at;
    t->src_index = (int32_t *)carve(h, &at, (size_t)n * 4);
    t->dst_index = with_dst_index ? (int32_t *)carve(h, &at, (size_t)n * 4) : NULL;
    t->src_offset = (int64_t *)carve(h, &at, (size_t)n * 8);
    t->dst_offset = (int64_t *)carve(h, &at, (size_t)n * 8);
    t->work = (int64_t *)carve(h, &at, (size_t)(n + 1) * 8);
    t->src_ptrs = (const void **)carve(h, &at, (size_t)fields * (size_t)sources * 8);
    t->dst_ptrs = (void **)carve(h, &at, (size_t)fields * (size_t)dests * 8);
    t->scalars = (unsigned char *)carve(h, &at, 256);
    t->sources = sources;
    t->dests = dests;
    return DCP_OK;
}

/* The device address of a pointer into the pinned region. */
#define ON_DEVICE(st, p) ((void *)((st)->table + ((const unsigned char *)(p) - (st)->host_table)))

/* Upload the table from upload_from, and the `prefix` bytes after it (the body's prefix, to the body), in one copy. */
static dcp_status table_upload(cuda_mover *st, const table_build *t, size_t prefix, void *stream, dcp__error *err)
{
    cudaError_t e = cudaMemcpyAsync(st->table + t->upload_from, st->host_table + t->upload_from,
                                    st->table_bytes - t->upload_from + prefix, cudaMemcpyHostToDevice,
                                    (cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: upload of a segment table");
}

/* Upload the table and the `prefix` bytes after it (table_upload), then launch the segment kernel over `fields`. */
static dcp_status table_run(cuda_mover *st, table_build *t, dcp__segment_field *fields, int32_t num_fields,
                            size_t prefix, void *stream, dcp__error *err)
{
    int64_t total = dcp__segment_work_offsets(t->length, t->n, t->work);
    dcp_status s = table_upload(st, t, prefix, stream, err);
    if (s != DCP_OK) return s;
    dcp__segment_table table = {t->n,
                               (const int32_t *)ON_DEVICE(st, t->src_index),
                               (const int64_t *)ON_DEVICE(st, t->src_offset),
                               t->dst_index ? (const int32_t *)ON_DEVICE(st, t->dst_index) : NULL,
                               (const int64_t *)ON_DEVICE(st, t->dst_offset),
                               NULL, /* the kernel reads work offsets, not lengths */
                               (const int64_t *)ON_DEVICE(st, t->work)};
    for (int32_t f = 0; f < num_fields; f++) {
        if (fields[f].src) fields[f].src = (const void *const *)ON_DEVICE(st, fields[f].src);
        fields[f].dst = (void *const *)ON_DEVICE(st, fields[f].dst);
    }
    int rc = dcp__segment_table_pack_cuda(&table, total, fields, num_fields, stream);
    if (rc != 0) return cuda_fail(err, (cudaError_t)rc, "step: segment kernel launch");
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* The operations                                                            */
/* ------------------------------------------------------------------------ */

static dcp_status cuda_buffers(dcp__mover *m, const dcp__exchange_blocks *x, dcp__arena *scratch, unsigned char **send,
                               unsigned char **recv, dcp__error *err)
{
    (void)scratch;
    cuda_mover *st = (cuda_mover *)m->state;
    if (x->send_total > st->staging_bytes || x->recv_total > st->staging_bytes)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging of %zu + %zu bytes exceeds the device's %zu each",
                         x->send_total, x->recv_total, st->staging_bytes);
    *send = st->send_staging;
    *recv = st->recv_staging;
    return DCP_OK;
}

static dcp_status cuda_stage(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                             const dcp__send_pieces *p, const dcp__exchange_blocks *x, unsigned char *send,
                             dcp__arena *scratch, dcp__error *err)
{
    (void)scratch;
    cuda_mover *st = (cuda_mover *)m->state;
    if (p->count == 0) return DCP_OK;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: cudaSetDevice");
    int32_t nf = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) nf += (kept & dcp__field_bit[f]) != 0;
    table_build t;
    int64_t sources = in->num_samples > 0 ? in->num_samples : 1;
    dcp_status s = table_begin(st, p->count, nf, sources, x->num_peers, 1, 0, &t, err);
    if (s != DCP_OK) return s;
    for (int64_t i = 0; i < p->count; i++) {
        t.src_index[i] = p->sample[i];
        t.dst_index[i] = p->peer[i];
        t.src_offset[i] = p->src[i];
        t.dst_offset[i] = p->cursor[i];
        t.length[i] = p->length[i];
    }
    dcp__segment_field fields[DCP_NUM_FIELDS];
    size_t field_offset = 0;
    int32_t k = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        const void **srcs = t.src_ptrs + (size_t)k * (size_t)t.sources;
        void **dsts = t.dst_ptrs + (size_t)k * (size_t)t.dests;
        for (int32_t i = 0; i < in->num_samples; i++) srcs[i] = dcp__sample_field(&in->samples[i], f);
        for (int32_t q = 0; q < x->num_peers; q++)
            dsts[q] = send + x->send_offsets[q] + (size_t)x->tokens_to[q] * field_offset;
        fields[k].src = srcs;
        fields[k].dst = dsts;
        fields[k].elem_size = (int64_t)dcp__field_size[f];
        field_offset += dcp__field_size[f];
        k++;
    }
    s = table_run(st, &t, fields, nf, 0, stream, err);
    if (s != DCP_OK) return s;
    /* the exchange may run on another stream and reads the staging: it must be complete */
    e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: gathering outgoing tokens");
}

static dcp_status cuda_land(dcp__mover *m, void *stream, uint32_t kept, const dcp__recv_pieces *r,
                            const dcp__exchange_blocks *x, const unsigned char *recv, const dcp__own_pieces *o,
                            const dcp_step_input *in, const dcp__body_layout *b, int64_t total_tokens,
                            dcp__arena *scratch, dcp__error *err)
{
    (void)scratch;
    cuda_mover *st = (cuda_mover *)m->state;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: cudaSetDevice");
    if (b->prefix > st->prefix_bytes)
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: a body prefix of %zu bytes exceeds the workspace's %zu",
                         b->prefix, st->prefix_bytes);
    int32_t nf = 1; /* the mask */
    for (int f = 0; f < DCP_NUM_FIELDS; f++) nf += (kept & dcp__field_bit[f]) != 0;
    /* sources of a field: the peers' runs in the receive buffer, then the samples' buffers */
    const int32_t samples = o->count > 0 ? in->num_samples : 0;
    table_build t;
    dcp_status s = table_begin(st, 2 * (r->count + o->count) + 1, nf, (int64_t)x->num_peers + samples, 1, 0, 0, &t, err);
    if (s != DCP_OK) return s;
    /* every piece, with a fill for the gap before it, then the tail: each slot written once */
    int64_t bad = 0;
    const int64_t n = dcp__landing_segments(r, o, x->num_peers, total_tokens, t.src_index, t.src_offset,
                                            t.dst_offset, t.length, &bad);
    if (n < 0)
        return dcp__landing_refuse(err, bad, total_tokens);
    t.n = n; /* the carved arrays hold 2 * pieces + 1; the used prefix is what runs */
    dcp__segment_field fields[DCP_NUM_FIELDS + 1];
    /* the samples' buffers, every kept field's in one pass over the samples */
    int kept_field[DCP_NUM_FIELDS], nk = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++)
        if (kept & dcp__field_bit[f]) kept_field[nk++] = f;
    for (int32_t i = 0; i < samples; i++)
        for (int j = 0; j < nk; j++)
            t.src_ptrs[(size_t)j * (size_t)t.sources + (size_t)x->num_peers + (size_t)i] =
                dcp__sample_field(&in->samples[i], kept_field[j]);
    size_t offset_in_block = 0;
    int32_t k = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        const void **srcs = t.src_ptrs + (size_t)k * (size_t)t.sources;
        void **dsts = t.dst_ptrs + (size_t)k * (size_t)t.dests;
        for (int32_t q = 0; q < x->num_peers; q++)
            srcs[q] = recv + x->recv_offsets[q] + (size_t)x->tokens_from[q] * offset_in_block;
        dsts[0] = st->body + b->field[f];
        fields[k].src = srcs;
        fields[k].dst = dsts;
        fields[k].elem_size = (int64_t)dcp__field_size[f];
        offset_in_block += dcp__field_size[f];
        k++;
    }
    void **mask_dst = t.dst_ptrs + (size_t)k * (size_t)t.dests;
    mask_dst[0] = st->body + b->mask;
    fields[k].src = NULL;
    fields[k].dst = mask_dst;
    fields[k].elem_size = 1;
    /* the table and the body's prefix (rows, cu_seqlens, written by the host after the table) in one copy */
    if (n > 0 && (s = table_run(st, &t, fields, nf, b->prefix, stream, err)) != DCP_OK) return s;
    if (n == 0 && b->prefix > 0) {
        e = cudaMemcpyAsync(st->body, st->host_prefix, b->prefix, cudaMemcpyHostToDevice, (cudaStream_t)stream);
        if (e != cudaSuccess) return cuda_fail(err, e, "step: upload of cu_seqlens");
    }
    e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: placing tokens");
}

static dcp_status cuda_digest(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                              const dcp__input_spans *spans, uint64_t *digest, dcp__error *err)
{
    cuda_mover *st = (cuda_mover *)m->state;
    *digest = 0;
    int32_t nf = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) nf += (kept & dcp__field_bit[f]) != 0;
    if (spans->count == 0 || nf == 0) return DCP_OK;
    cudaError_t e = cudaSetDevice(st->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: cudaSetDevice");
    table_build t;
    int64_t sources = in->num_samples > 0 ? in->num_samples : 1;
    dcp_status s = table_begin(st, spans->count, nf, sources, 1, 0, 1, &t, err);
    if (s != DCP_OK) return s;
    int64_t position = 0;
    for (int32_t k = 0; k < spans->count; k++) {
        t.src_index[k] = spans->sample[k];
        t.src_offset[k] = spans->start[k];
        t.dst_offset[k] = position; /* the span's first digest position */
        t.length[k] = spans->pairs[2 * k];
        position += spans->pairs[2 * k];
    }
    int32_t *field_index = (int32_t *)t.scalars;
    int64_t *elem_size = (int64_t *)(t.scalars + 64);
    uint64_t *sum = (uint64_t *)(t.scalars + 128);
    int32_t k = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        const void **srcs = t.src_ptrs + (size_t)k * (size_t)t.sources;
        for (int32_t i = 0; i < in->num_samples; i++) srcs[i] = dcp__sample_field(&in->samples[i], f);
        field_index[k] = f;
        elem_size[k] = (int64_t)dcp__field_size[f];
        k++;
    }
    if ((s = table_upload(st, &t, 0, stream, err)) != DCP_OK) return s;
    dcp__segment_table table = {t.n,
                               (const int32_t *)ON_DEVICE(st, t.src_index),
                               (const int64_t *)ON_DEVICE(st, t.src_offset),
                               NULL,
                               (const int64_t *)ON_DEVICE(st, t.dst_offset),
                               (const int64_t *)ON_DEVICE(st, t.length),
                               NULL};
    int rc = dcp__digest_cuda(&table, (const void *const *)ON_DEVICE(st, t.src_ptrs), t.sources,
                              (const int32_t *)ON_DEVICE(st, field_index), (const int64_t *)ON_DEVICE(st, elem_size),
                              nf, (uint64_t *)ON_DEVICE(st, sum), stream);
    if (rc != 0) return cuda_fail(err, (cudaError_t)rc, "step: digest kernel launch");
    e = cudaMemcpyAsync(sum, ON_DEVICE(st, sum), sizeof *sum, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) return cuda_fail(err, e, "step: digest of this rank's input");
    *digest = *sum;
    return DCP_OK;
}

static dcp_status cuda_read_back(dcp__mover *m, void *stream, size_t prefix_bytes, dcp__error *err)
{
    cuda_mover *st = (cuda_mover *)m->state;
    if (prefix_bytes > st->prefix_bytes)
        return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: body prefix of %zu bytes", prefix_bytes);
    cudaError_t e = cudaMemcpyAsync(m->host_body, st->body, prefix_bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? DCP_OK : cuda_fail(err, e, "step: download of cu_seqlens");
}

static void cuda_release(dcp__mover *m)
{
    cuda_mover *st = (cuda_mover *)m->state;
    if (!st) return;
    dcp__mover_cpu_init(m, st->host_body, m->body_capacity); /* the context steps on the host again */
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(st->device);
    unsigned char *dmem = st->owns_device ? st->device_base : NULL;
    void *hmem = st->owns_host ? st->host_base : NULL;
    dcp__device_free(dmem);
    dcp__pinned_free(hmem); /* the state lived in it: read above */
    cudaSetDevice(current);
}

static const dcp__mover_ops cuda_ops = {"cuda",     cuda_buffers,   cuda_stage,  cuda_land,
                                       cuda_digest, cuda_read_back, cuda_release};

/* ------------------------------------------------------------------------ */
/* Creation                                                                  */
/* ------------------------------------------------------------------------ */

dcp_status dcp__mover_cuda_create(dcp__mover *m, const dcp__mover_sizes *z, void *device_memory, size_t device_bytes,
                                  void *host_memory, size_t host_bytes, dcp__error *err)
{
    sizes need;
    dcp_status s = sizes_compute(z, &need);
    if (s != DCP_OK) return dcp__fail(err, s, "attach_cuda: workspace size overflows");
    if ((device_memory && device_bytes < need.device) || (host_memory && host_bytes < need.host))
        return dcp__fail(err, DCP_ERR_WORKSPACE_TOO_SMALL,
                         "attach_cuda: needs %zu device and %zu pinned bytes, got %zu and %zu", need.device, need.host,
                         device_bytes, host_bytes);
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return cuda_fail(err, e, "attach_cuda: cudaGetDevice");
    void *dmem = device_memory, *hmem = host_memory;
    int rc;
    if (!dmem && (rc = dcp__device_alloc(&dmem, need.device)) != 0)
        return cuda_fail(err, (cudaError_t)rc, "attach_cuda: cudaMalloc");
    if (!hmem && (rc = dcp__pinned_alloc(&hmem, need.host)) != 0) {
        if (!device_memory) dcp__device_free(dmem);
        return cuda_fail(err, (cudaError_t)rc, "attach_cuda: cudaMallocHost");
    }
    /* the state sits at the start of the pinned block, 256-aligned */
    uintptr_t at = ((uintptr_t)hmem + 255) & ~(uintptr_t)255;
    if (host_memory && at != (uintptr_t)hmem && host_bytes < need.host + (at - (uintptr_t)hmem)) {
        if (!device_memory) dcp__device_free(dmem);
        return dcp__fail(err, DCP_ERR_WORKSPACE_TOO_SMALL,
                         "attach_cuda: pinned memory not 256-byte aligned and no room to align it");
    }
    cuda_mover *st = (cuda_mover *)at;
    memset(st, 0, sizeof *st);
    st->device = device;
    st->owns_device = device_memory == NULL;
    st->owns_host = host_memory == NULL;
    st->device_base = (unsigned char *)dmem;
    st->host_base = hmem;
    st->staging_bytes = z->staging;
    st->body_bytes = z->body;
    st->table_bytes = need.table;
    st->prefix_bytes = need.prefix;
    st->max_segments = z->segments;
    st->max_sources = z->sources;
    /* device blocks start 256-aligned relative to the base (cudaMalloc's base is); the body follows the tables */
    st->send_staging = st->device_base;
    st->recv_staging = st->send_staging + align256(z->staging);
    st->table = st->recv_staging + align256(z->staging);
    st->body = st->table + need.table;
    /* pinned: the tables, then the body's prefix, which the host writes there: it is the mover's host body now */
    st->host_table = (unsigned char *)st + align256(sizeof *st);
    st->host_prefix = st->host_table + need.table;
    st->host_body = m->host_body;
    m->ops = &cuda_ops;
    m->state = st;
    m->body = st->body;
    m->host_body = st->host_prefix;
    return DCP_OK;
}

const dcp__mover_backend dcp__mover_backend_cuda = {"cuda", dcp__mover_cuda_workspace_size, dcp__mover_cuda_create};
