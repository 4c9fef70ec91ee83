/*
 * gpu_harness.c - the GPU mode of the step harness (see gpu_harness.h).
 */
#include "gpu_harness.h"

#ifdef DCP_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

struct dcp_gpu_world {
    int32_t size;
    ncclComm_t *comms;
};

dcp_status dcp_gpu_world_create(int32_t size, dcp_gpu_world **out, char *message, size_t message_size)
{
    if (dcp_cuda_device_count() < size) {
        snprintf(message, message_size, "needs %d GPUs, %d visible", size, dcp_cuda_device_count());
        return DCP_ERR_UNSUPPORTED;
    }
    dcp_gpu_world *w = calloc(1, sizeof *w);
    if (w) w->comms = calloc((size_t)size, sizeof *w->comms);
    if (!w || !w->comms) {
        snprintf(message, message_size, "out of host memory for %d communicators", size);
        if (w) free(w);
        return DCP_ERR_ALLOC;
    }
    w->size = size;
    ncclResult_t r = ncclCommInitAll(w->comms, size, NULL);
    if (r != ncclSuccess) {
        snprintf(message, message_size, "ncclCommInitAll over %d GPUs: %s", size, ncclGetErrorString(r));
        free(w->comms), free(w);
        return DCP_ERR_NCCL;
    }
    *out = w;
    return DCP_OK;
}

void dcp_gpu_world_destroy(dcp_gpu_world *w)
{
    if (!w) return;
    for (int32_t i = 0; i < w->size; i++) {
        cudaSetDevice(i);
        ncclCommDestroy(w->comms[i]);
    }
    free(w->comms), free(w);
}

dcp_status dcp_gpu_rank_begin(dcp_gpu_world *w, int32_t world_rank, int32_t lane_color, int32_t lane_key, int split_tp,
                              int32_t tp_color, int32_t tp_key, size_t staging_bytes, int32_t timeout_ms,
                              dcp_gpu_rank *r)
{
    memset(r, 0, sizeof *r);
    r->device = world_rank;
    if (cudaSetDevice(world_rank) != cudaSuccess) return DCP_ERR_CUDA;
    cudaStream_t stream;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return DCP_ERR_CUDA;
    r->stream = stream;
    dcp_nccl_options options;
    dcp_nccl_options_default(&options);
    options.timeout_ms = timeout_ms;
    options.host_staging_bytes = staging_bytes;
    dcp_status s = dcp_nccl_comm_init(&r->world, w->comms[world_rank], stream, &options);
    if (s != DCP_OK) return s;
    s = dcp_nccl_comm_split(&r->world, lane_color, lane_key, &r->lane);
    if (s != DCP_OK) return s;
    r->has_lane = lane_color >= 0;
    if (split_tp) {
        s = dcp_nccl_comm_split(&r->world, tp_color, tp_key, &r->tp);
        if (s != DCP_OK) return s;
        r->has_tp = 1;
    }
    return DCP_OK;
}

dcp_status dcp_gpu_rank_attach(dcp_gpu_rank *r, dcp_context *ctx, const dcp_config *config)
{
    size_t device_bytes = 0, host_bytes = 0;
    dcp_status s = dcp_cuda_workspace_size(config, &device_bytes, &host_bytes);
    if (s != DCP_OK) return s;
    if (cudaMalloc(&r->workspace, device_bytes) != cudaSuccess || cudaMemset(r->workspace, 0xA5, device_bytes) != cudaSuccess)
        return DCP_ERR_CUDA;
    return dcp_context_attach_cuda(ctx, r->workspace, device_bytes, NULL, 0);
}

static const void *field_of(const dcp_sample *s, int f)
{
    return f == 0 ? (const void *)s->tokens : f == 1 ? (const void *)s->labels
                                          : f == 2 ? (const void *)s->loss_mask
                                                   : (const void *)s->position_ids;
}

dcp_status dcp_gpu_rank_upload(dcp_gpu_rank *r, const dcp_sample *samples, int32_t n, uint32_t fields)
{
    const uint32_t bits[4] = {DCP_FIELD_TOKENS, DCP_FIELD_LABELS, DCP_FIELD_LOSS_MASK, DCP_FIELD_POSITION_IDS};
    const size_t sizes[4] = {8, 8, 4, 8};
    r->message[0] = '\0';
    r->samples = calloc((size_t)n + 1, sizeof *r->samples);
    if (!r->samples) {
        snprintf(r->message, sizeof r->message, "out of host memory for %d samples", n);
        return DCP_ERR_ALLOC;
    }
    memcpy(r->samples, samples, (size_t)n * sizeof *samples);
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += samples[i].num_tokens;
    for (int f = 0; f < 4; f++) {
        if (!(fields & bits[f])) continue;
        unsigned char *host = malloc((size_t)total * sizes[f] + 1), *device = NULL;
        if (!host) {
            snprintf(r->message, sizeof r->message, "out of host memory for %lld bytes of field %d",
                     (long long)total * (long long)sizes[f] + 1, f);
            return DCP_ERR_ALLOC;
        }
        if (cudaMalloc((void **)&device, (size_t)total * sizes[f] + 1) != cudaSuccess) {
            snprintf(r->message, sizeof r->message, "cudaMalloc of %lld bytes of field %d failed",
                     (long long)total * (long long)sizes[f] + 1, f);
            free(host);
            return DCP_ERR_CUDA;
        }
        r->field_blocks[f] = device;
        size_t at = 0;
        for (int32_t i = 0; i < n; i++) {
            size_t bytes = (size_t)samples[i].num_tokens * sizes[f];
            if (bytes) memcpy(host + at, field_of(&samples[i], f), bytes);
            const void *p = device + at;
            if (f == 0) r->samples[i].tokens = p;
            else if (f == 1) r->samples[i].labels = p;
            else if (f == 2) r->samples[i].loss_mask = p;
            else r->samples[i].position_ids = p;
            at += bytes;
        }
        cudaError_t e = cudaMemcpy(device, host, at, cudaMemcpyHostToDevice);
        free(host);
        if (e != cudaSuccess) return DCP_ERR_CUDA;
    }
    return DCP_OK;
}

static void *download(dcp_gpu_rank *r, const void *device, size_t bytes)
{
    if (!device) return NULL;
    if (r->num_downloads == r->download_capacity) {
        int32_t capacity = r->download_capacity ? 2 * r->download_capacity : 64;
        void **grown = realloc(r->downloads, (size_t)capacity * sizeof *r->downloads);
        if (!grown) {
            snprintf(r->message, sizeof r->message, "out of host memory for %d downloads", capacity);
            r->failed = DCP_ERR_ALLOC;
            return NULL;
        }
        r->downloads = grown;
        r->download_capacity = capacity;
    }
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
        snprintf(r->message, sizeof r->message, "out of host memory for a %zu-byte download", bytes);
        r->failed = DCP_ERR_ALLOC;
        return NULL;
    }
    if (bytes && cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(r->message, sizeof r->message, "download of %zu bytes failed", bytes);
        r->failed = DCP_ERR_CUDA;
    }
    r->downloads[r->num_downloads++] = host;
    return host;
}

static void downloads_free(dcp_gpu_rank *r)
{
    for (int32_t i = 0; i < r->num_downloads; i++) free(r->downloads[i]);
    r->num_downloads = 0;
    free(r->host_views);
    r->host_views = NULL;
}

dcp_status dcp_gpu_rank_download(dcp_gpu_rank *r, const dcp_step_output *out)
{
    downloads_free(r);
    r->message[0] = '\0';
    r->failed = DCP_OK;
    r->host_output = *out;
    size_t views = (size_t)out->num_virtual_stages * (size_t)out->num_microbatches;
    r->host_views = calloc(views + 1, sizeof *r->host_views);
    if (!r->host_views) {
        snprintf(r->message, sizeof r->message, "out of host memory for %zu microbatch views", views);
        return r->failed = DCP_ERR_ALLOC;
    }
    for (size_t i = 0; i < views; i++) {
        const dcp_microbatch *d = &out->microbatches[i];
        dcp_microbatch *h = &r->host_views[i];
        *h = *d;
        size_t t = (size_t)d->num_tokens, c = (size_t)d->num_cu_seqlens * 4;
        h->tokens = download(r, d->tokens, t * 8);
        h->labels = download(r, d->labels, t * 8);
        h->loss_mask = download(r, d->loss_mask, t * 4);
        h->position_ids = download(r, d->position_ids, t * 8);
        h->padding_mask = download(r, d->padding_mask, t);
        h->cu_seqlens = download(r, d->cu_seqlens, c);
        h->cu_seqlens_padded = download(r, d->cu_seqlens_padded, c);
        if (r->failed != DCP_OK) break; /* a download failed: its pointer may be NULL */
        /* the device arrays must say what the host copies say */
        if (memcmp(h->cu_seqlens, d->cu_seqlens_host, c) != 0 ||
            memcmp(h->cu_seqlens_padded, d->cu_seqlens_padded_host, c) != 0)
            r->cu_mismatches++;
    }
    r->host_output.microbatches = r->host_views;
    return r->failed;
}

uint64_t dcp_gpu_rank_nccl_call_heap(dcp_gpu_rank *r)
{
    uint64_t heap = 0;
#ifdef DCP_HAVE_JEMALLOC
    uint64_t *ap = NULL, *dp = NULL;
    size_t len = sizeof ap;
    mallctl("thread.allocatedp", &ap, &len, NULL, 0);
    len = sizeof dp;
    mallctl("thread.deallocatedp", &dp, &len, NULL, 0);
    for (int rep = 0; rep < 3; rep++) { /* the first calls warm up */
        uint64_t a0 = ap ? *ap : 0, d0 = dp ? *dp : 0;
        dcp_status agreed;
        int32_t failed;
        r->world.ops->agree(&r->world, DCP_OK, &agreed, &failed);
        heap = (ap ? *ap - a0 : 0) + (dp ? *dp - d0 : 0);
    }
#else
    (void)r;
#endif
    return heap;
}

int64_t dcp_gpu_free_bytes(void)
{
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
    return (int64_t)free_bytes;
}

void dcp_gpu_rank_end(dcp_gpu_rank *r)
{
    cudaSetDevice(r->device);
    downloads_free(r);
    free(r->downloads);
    for (int f = 0; f < 4; f++) cudaFree(r->field_blocks[f]);
    cudaFree(r->workspace); /* after the context that used it is gone */
    free(r->samples);
    dcp_nccl_comm_destroy(&r->tp);
    dcp_nccl_comm_destroy(&r->lane);
    dcp_nccl_comm_destroy(&r->world);
    if (r->stream) cudaStreamDestroy((cudaStream_t)r->stream);
    memset(r, 0, sizeof *r);
}

#endif
