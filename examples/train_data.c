/*
 * train_data.c - the trace, each step's global batch, and a DP rank's loader output (one sample per
 * sequence, its padding slots holding garbage); with NCCL, the same uploaded to the GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t *read_trace(const char *path, int32_t *count)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dcpack_train_data_loop: cannot open trace %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int32_t n = 0, cap = 1024;
    int32_t *lengths = malloc((size_t)cap * sizeof *lengths);
    char line[128];
    int line_no = 0, bad = !lengths;
    while (!bad && fgets(line, sizeof line, f)) {
        line_no++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || *p == '\0') continue;
        p[strcspn(p, " \t\r\n")] = '\0';
        int32_t v;
        if (!parse_int(p, 1, INT32_MAX, &v)) {
            fprintf(stderr, "dcpack_train_data_loop: %s:%d: '%s' is not a length\n", path, line_no, p);
            bad = 1;
            break;
        }
        if (n == cap) {
            int32_t *more = realloc(lengths, (size_t)cap * 2 * sizeof *lengths);
            if (!more) {
                bad = 1;
                break;
            }
            lengths = more, cap *= 2;
        }
        lengths[n++] = v;
    }
    fclose(f);
    if (!bad && n == 0) fprintf(stderr, "dcpack_train_data_loop: trace %s holds no length\n", path), bad = 1;
    if (bad) {
        free(lengths);
        return NULL;
    }
    *count = n;
    return lengths;
}

int batch_alloc(batch *b, int32_t n, int32_t dp)
{
    memset(b, 0, sizeof *b);
    b->padded = calloc((size_t)n, sizeof *b->padded);
    b->original = calloc((size_t)n, sizeof *b->original);
    b->source = calloc((size_t)n, sizeof *b->source);
    b->first = calloc((size_t)dp + 1, sizeof *b->first);
    return b->padded && b->original && b->source && b->first;
}

void batch_free(batch *b) { free(b->padded), free(b->original), free(b->source), free(b->first); }

void batch_fill(batch *b, const int32_t *trace, int32_t trace_count, int32_t step, int32_t g, int32_t dp, int32_t n)
{
    b->n = g;
    b->step = step;
    const int64_t multiple = 2 * (int64_t)n;
    for (int32_t i = 0; i < g; i++) {
        const int64_t src = ((int64_t)step * g + i) % trace_count;
        b->source[i] = src;
        b->original[i] = trace[src];
        int64_t padded = (trace[src] + multiple - 1) / multiple * multiple;
        b->padded[i] = padded > INT32_MAX ? INT32_MAX : (int32_t)padded;
    }
    for (int32_t p = 0; p <= dp; p++) b->first[p] = (int32_t)((int64_t)g * p / dp);
}

int loader_alloc(loader *l, int64_t capacity, int32_t max_samples)
{
    memset(l, 0, sizeof *l);
    l->capacity = capacity;
    size_t c = (size_t)(capacity > 0 ? capacity : 1);
    l->tokens = malloc(c * sizeof *l->tokens);
    l->labels = malloc(c * sizeof *l->labels);
    l->positions = malloc(c * sizeof *l->positions);
    l->loss_mask = malloc(c * sizeof *l->loss_mask);
    l->samples = calloc((size_t)max_samples + 1, sizeof *l->samples);
    return l->tokens && l->labels && l->positions && l->loss_mask && l->samples;
}

void loader_free(loader *l)
{
    free(l->tokens), free(l->labels), free(l->positions), free(l->loss_mask), free(l->samples);
}

void loader_fill(loader *l, const batch *b, int32_t dp_rank)
{
    int64_t at = 0;
    l->num_samples = 0;
    for (int32_t id = b->first[dp_rank]; id < b->first[dp_rank + 1]; id++) {
        const int64_t src = b->source[id], span = b->padded[id], real = b->original[id];
        for (int64_t j = 0; j < span; j++) {
            const int is_real = j < real;
            l->tokens[at + j] = is_real ? oracle_token(src, b->step, j) : oracle_garbage_token(src);
            l->labels[at + j] = is_real ? oracle_label(src, b->step, j) : ORACLE_GARBAGE_LABEL;
            l->positions[at + j] = is_real ? oracle_position(j) : ORACLE_GARBAGE_POSITION;
            l->loss_mask[at + j] = is_real ? oracle_loss_mask(src, j) : ORACLE_GARBAGE_LOSS_MASK;
        }
        dcp_sample *s = &l->samples[l->num_samples++];
        memset(s, 0, sizeof *s);
        s->tokens = l->tokens + at;
        s->labels = l->labels + at;
        s->loss_mask = l->loss_mask + at;
        s->position_ids = l->positions + at;
        s->num_tokens = span;
        s->padded_length = (int32_t)span;
        s->original_length = (int32_t)real;
        at += span;
    }
    l->num_tokens = at;
}

#ifdef DCP_EXAMPLE_NCCL
int device_input_alloc(device_input *d, int64_t capacity, int32_t max_samples)
{
    memset(d, 0, sizeof *d);
    const size_t sizes[4] = {8, 8, 4, 8};
    for (int f = 0; f < 4; f++)
        if (cudaMalloc(&d->field[f], (size_t)(capacity > 0 ? capacity : 1) * sizes[f]) != cudaSuccess) return 0;
    d->samples = calloc((size_t)max_samples + 1, sizeof *d->samples);
    return d->samples != NULL;
}

void device_input_free(device_input *d)
{
    for (int f = 0; f < 4; f++) cudaFree(d->field[f]);
    free(d->samples);
    memset(d, 0, sizeof *d);
}

int device_input_upload(device_input *d, const loader *l, cudaStream_t stream)
{
    const void *host[4] = {l->tokens, l->labels, l->loss_mask, l->positions};
    const size_t sizes[4] = {8, 8, 4, 8};
    /* on the step's stream, and waited for: the loader reuses its host buffers next step */
    for (int f = 0; f < 4; f++)
        if (l->num_tokens && cudaMemcpyAsync(d->field[f], host[f], (size_t)l->num_tokens * sizes[f],
                                             cudaMemcpyHostToDevice, stream) != cudaSuccess)
            return 0;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 0;
    for (int32_t i = 0; i < l->num_samples; i++) {
        const int64_t at = l->samples[i].tokens - l->tokens;
        d->samples[i] = l->samples[i];
        d->samples[i].tokens = (const int64_t *)d->field[0] + at;
        d->samples[i].labels = (const int64_t *)d->field[1] + at;
        d->samples[i].loss_mask = (const float *)d->field[2] + at;
        d->samples[i].position_ids = (const int64_t *)d->field[3] + at;
    }
    return 1;
}
#endif
