/*
 * mover_cpu.c - the CPU token mover (see mover.h): exchange buffers from
 * scratch, staging and landing by the CPU twins of the pack kernels (landing:
 * the twin of the segment kernel over the table the CUDA mover launches).
 */
#include "mover.h"
#include "digest.h"
#include "thd/pack_cpu.h"

#include <string.h>

/*
 * The scratch each operation takes, one take function each, so that
 * dcp__mover_cpu_scratch_size measures the operations' own layout.  Each
 * returns 0 when an array does not fit.
 */

/* The send and receive buffers (one byte more each: a buffer of no bytes is still a pointer). */
static int buffers_take(dcp__arena *scratch, size_t send_bytes, size_t recv_bytes, unsigned char **send,
                        unsigned char **recv)
{
    *send = DCP_ARENA_NEW(scratch, unsigned char, send_bytes + 1);
    *recv = DCP_ARENA_NEW(scratch, unsigned char, recv_bytes + 1);
    return *send && *recv;
}

/* Staging: each peer's element base of a field, each piece's destination, each sample's buffer of the field. */
typedef struct stage_scratch {
    int64_t *base, *dst;
    const void **sources;
} stage_scratch;

static int stage_take(dcp__arena *scratch, int64_t peers, int64_t pieces, int64_t samples, stage_scratch *t)
{
    t->base = DCP_ARENA_NEW(scratch, int64_t, peers);
    t->dst = DCP_ARENA_NEW(scratch, int64_t, pieces);
    t->sources = DCP_ARENA_NEW(scratch, const void *, samples);
    return t->base && t->dst && t->sources;
}

/* Landing: the segment table of `cap` entries, each kept field's source table and every destination. */
typedef struct land_scratch {
    int32_t *src_index;
    int64_t *src_offset, *dst_offset, *length;
    const void **src; /* [DCP_NUM_FIELDS][sources] */
    void **dst;       /* [DCP_NUM_FIELDS + 1]: the fields, then the mask */
} land_scratch;

static int land_take(dcp__arena *scratch, int64_t cap, int64_t sources, land_scratch *t)
{
    t->src_index = DCP_ARENA_NEW(scratch, int32_t, cap);
    t->src_offset = DCP_ARENA_NEW(scratch, int64_t, cap);
    t->dst_offset = DCP_ARENA_NEW(scratch, int64_t, cap);
    t->length = DCP_ARENA_NEW(scratch, int64_t, cap);
    t->src = DCP_ARENA_NEW(scratch, const void *, (size_t)DCP_NUM_FIELDS * (size_t)(sources > 0 ? sources : 1));
    t->dst = DCP_ARENA_NEW(scratch, void *, DCP_NUM_FIELDS + 1);
    return t->src_index && t->src_offset && t->dst_offset && t->length && t->src && t->dst;
}

static dcp_status cpu_buffers(dcp__mover *m, const dcp__exchange_blocks *x, dcp__arena *scratch, unsigned char **send,
                              unsigned char **recv, dcp__error *err)
{
    (void)m;
    if (!buffers_take(scratch, x->send_total, x->recv_total, send, recv))
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging of %zu + %zu bytes exceeds the workspace", x->send_total,
                         x->recv_total);
    return DCP_OK;
}

/* Element index of each peer's run of a field whose block offset is `field_offset` bytes per token. */
static void field_bases(const size_t *offsets, const int64_t *tokens, int32_t peers, size_t field_offset, size_t size,
                        int64_t *base)
{
    for (int32_t q = 0; q < peers; q++) base[q] = (int64_t)((offsets[q] + (size_t)tokens[q] * field_offset) / size);
}

static dcp_status cpu_stage(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                            const dcp__send_pieces *p, const dcp__exchange_blocks *x, unsigned char *send,
                            dcp__arena *scratch, dcp__error *err)
{
    (void)m, (void)stream;
    if (p->count == 0) return DCP_OK; /* nothing travels */
    stage_scratch t;
    if (!stage_take(scratch, x->num_peers, p->count, in->num_samples, &t))
        return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging scratch too small");
    int64_t *base = t.base, *dst = t.dst;
    const void **sources = t.sources;
    size_t field_offset = 0; /* bytes per token of the kept fields before this one */
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        size_t size = dcp__field_size[f];
        field_bases(x->send_offsets, x->tokens_to, x->num_peers, field_offset, size, base);
        for (int64_t i = 0; i < p->count; i++) dst[i] = base[p->peer[i]] + p->cursor[i];
        for (int32_t i = 0; i < in->num_samples; i++) sources[i] = dcp__sample_field(&in->samples[i], f);
        dcp__pack_layout layout = {p->count, p->sample, p->src, dst, p->length};
        dcp__pack_cpu(&layout, sources, send, size);
        field_offset += size;
    }
    return DCP_OK;
}

/*
 * The landing table (dcp__landing_segments) over two source tables per field,
 * the peers' runs in the receive buffer and the samples' buffers, run by the
 * CPU twin of the segment kernel: the same table the CUDA mover launches.
 */
static dcp_status cpu_land(dcp__mover *m, void *stream, uint32_t kept, const dcp__recv_pieces *r,
                           const dcp__exchange_blocks *x, const unsigned char *recv, const dcp__own_pieces *o,
                           const dcp_step_input *in, const dcp__body_layout *b, int64_t total_tokens,
                           dcp__arena *scratch, dcp__error *err)
{
    (void)stream;
    const int64_t cap = 2 * (r->count + o->count) + 1;
    const int32_t samples = o->count > 0 ? in->num_samples : 0;
    const int64_t sources = (int64_t)x->num_peers + samples;
    land_scratch t;
    if (!land_take(scratch, cap, sources, &t)) return dcp__fail(err, DCP_ERR_CAPACITY, "step: landing scratch too small");
    int32_t *src_index = t.src_index;
    int64_t *src_offset = t.src_offset, *dst_offset = t.dst_offset, *length = t.length;
    const void **src = t.src;
    void **dst = t.dst;
    int64_t bad = 0;
    const int64_t n = dcp__landing_segments(r, o, x->num_peers, total_tokens, src_index, src_offset, dst_offset,
                                            length, &bad);
    if (n < 0)
        return dcp__landing_refuse(err, bad, total_tokens);
    dcp__segment_field fields[DCP_NUM_FIELDS + 1];
    size_t field_offset = 0; /* bytes per token of the kept fields before this one, in each peer's block */
    int32_t k = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        const size_t size = dcp__field_size[f];
        const void **table = src + (size_t)k * (size_t)sources;
        for (int32_t q = 0; q < x->num_peers; q++)
            table[q] = recv + x->recv_offsets[q] + (size_t)x->tokens_from[q] * field_offset;
        for (int32_t s = 0; s < samples; s++) table[x->num_peers + s] = dcp__sample_field(&in->samples[s], f);
        dst[k] = m->host_body + b->field[f];
        fields[k] = (dcp__segment_field){table, (void *const *)&dst[k], (int64_t)size};
        field_offset += size;
        k++;
    }
    dst[k] = m->host_body + b->mask;
    fields[k] = (dcp__segment_field){NULL, (void *const *)&dst[k], 1};
    /* the twin walks the segments in order: it needs no work offsets */
    dcp__segment_table table = {n, src_index, src_offset, NULL, dst_offset, length, NULL};
    dcp__segment_table_pack_cpu(&table, fields, k + 1);
    return DCP_OK;
}

static dcp_status cpu_digest(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                             const dcp__input_spans *spans, uint64_t *digest, dcp__error *err)
{
    (void)m, (void)stream, (void)err;
    uint64_t sum = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        const size_t size = dcp__field_size[f];
        int64_t position = 0;
        for (int32_t k = 0; k < spans->count; k++) {
            const unsigned char *base = (const unsigned char *)dcp__sample_field(&in->samples[spans->sample[k]], f);
            int64_t length = spans->pairs[2 * k];
            sum += dcp__digest_run_cpu(base + (size_t)spans->start[k] * size, size, length, position, f);
            position += length;
        }
    }
    *digest = sum;
    return DCP_OK;
}

static dcp_status cpu_read_back(dcp__mover *m, void *stream, size_t prefix_bytes, dcp__error *err)
{
    (void)m, (void)stream, (void)prefix_bytes, (void)err;
    return DCP_OK; /* the body is the host body */
}

static void cpu_release(dcp__mover *m) { (void)m; }

static const dcp__mover_ops cpu_ops = {"cpu", cpu_buffers, cpu_stage, cpu_land, cpu_digest, cpu_read_back, cpu_release};

void dcp__mover_cpu_init(dcp__mover *m, unsigned char *host_body, size_t capacity)
{
    m->ops = &cpu_ops;
    m->state = NULL;
    m->host_body = host_body;
    m->body = host_body;
    m->body_capacity = capacity;
}

size_t dcp__mover_cpu_scratch_size(size_t staging, int32_t ranks, int32_t samples, int64_t send_pieces,
                                   int64_t land_pieces)
{
    dcp__arena measure;
    dcp__arena_init_measure(&measure);
    unsigned char *send, *recv;
    stage_scratch stage;
    land_scratch land;
    /* one after the other, as a step calls them: nothing is released between them */
    if (!buffers_take(&measure, staging, staging, &send, &recv) ||
        !stage_take(&measure, ranks, send_pieces, samples, &stage) ||
        !land_take(&measure, 2 * land_pieces + 1, (int64_t)ranks + samples, &land))
        return SIZE_MAX;
    return measure.used;
}
