/*
 * mover_cpu.c - the CPU token mover (see mover.h): exchange buffers from
 * scratch, staging and landing by the CPU twins of the pack kernels.
 */
#include "mover.h"
#include "digest.h"
#include "pack.h"

#include <string.h>

static dcp_status cpu_buffers(dcp_mover *m, const dcp_exchange_blocks *x, dcp_arena *scratch, unsigned char **send,
                              unsigned char **recv, dcp_error *err)
{
    (void)m;
    *send = DCP_ARENA_NEW(scratch, unsigned char, x->send_total + 1);
    *recv = DCP_ARENA_NEW(scratch, unsigned char, x->recv_total + 1);
    if (!*send || !*recv)
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

static dcp_status cpu_stage(dcp_mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                            const dcp_send_pieces *p, const dcp_exchange_blocks *x, unsigned char *send,
                            dcp_arena *scratch, dcp_error *err)
{
    (void)m, (void)stream;
    int64_t *base = DCP_ARENA_NEW(scratch, int64_t, x->num_peers);
    int64_t *dst = DCP_ARENA_NEW(scratch, int64_t, p->count);
    const void **sources = DCP_ARENA_NEW(scratch, const void *, in->num_samples);
    if (!base || !dst || !sources) return dcp__fail(err, DCP_ERR_CAPACITY, "step: staging scratch too small");
    size_t field_offset = 0; /* bytes per token of the kept fields before this one */
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        size_t size = dcp__field_size[f];
        field_bases(x->send_offsets, x->tokens_to, x->num_peers, field_offset, size, base);
        for (int64_t i = 0; i < p->count; i++) dst[i] = base[p->peer[i]] + p->cursor[i];
        for (int32_t i = 0; i < in->num_samples; i++) sources[i] = dcp__sample_field(&in->samples[i], f);
        dcp_pack_layout layout = {p->count, p->sample, p->src, dst, p->length};
        dcp__pack_cpu(&layout, sources, send, size);
        field_offset += size;
    }
    return DCP_OK;
}

static dcp_status cpu_land(dcp_mover *m, void *stream, uint32_t kept, const dcp_recv_pieces *p,
                           const dcp_exchange_blocks *x, const unsigned char *recv, const dcp_body_layout *b,
                           int64_t total_tokens, dcp_arena *scratch, dcp_error *err)
{
    (void)stream;
    int64_t *base = DCP_ARENA_NEW(scratch, int64_t, x->num_peers);
    int64_t *src = DCP_ARENA_NEW(scratch, int64_t, p->count);
    if (!base || !src) return dcp__fail(err, DCP_ERR_CAPACITY, "step: landing scratch too small");
    /* zero every slot, then land the pieces; the mask is 1 wherever no piece landed */
    size_t field_offset = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        if (!(kept & dcp__field_bit[f])) continue;
        size_t size = dcp__field_size[f];
        unsigned char *out = m->host_body + b->field[f];
        memset(out, 0, (size_t)total_tokens * size);
        field_bases(x->recv_offsets, x->tokens_from, x->num_peers, field_offset, size, base);
        for (int64_t i = 0; i < p->count; i++) src[i] = base[p->sender[i]] + p->cursor[i];
        const void *staging[1] = {recv};
        dcp_pack_layout layout = {p->count, NULL, src, p->dst, p->length};
        dcp__pack_cpu(&layout, staging, out, size);
        field_offset += size;
    }
    dcp_pack_layout placed = {p->count, NULL, p->dst, p->dst, p->length};
    dcp__padding_mask_from_layout_cpu(&placed, total_tokens, m->host_body + b->mask);
    return DCP_OK;
}

static dcp_status cpu_digest(dcp_mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                             const dcp_input_spans *spans, uint64_t *digest, dcp_error *err)
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

static dcp_status cpu_read_back(dcp_mover *m, void *stream, size_t prefix_bytes, dcp_error *err)
{
    (void)m, (void)stream, (void)prefix_bytes, (void)err;
    return DCP_OK; /* the body is the host body */
}

static void cpu_release(dcp_mover *m) { (void)m; }

static const dcp_mover_ops cpu_ops = {"cpu", cpu_buffers, cpu_stage, cpu_land, cpu_digest, cpu_read_back, cpu_release};

void dcp__mover_cpu_init(dcp_mover *m, unsigned char *host_body, size_t capacity)
{
    m->ops = &cpu_ops;
    m->state = NULL;
    m->host_body = host_body;
    m->body = host_body;
    m->body_capacity = capacity;
}
