/*
 * bench_digest.c - what the CP-sibling data check costs: the input digest
 * (core/digest.h) of a rank's input, on the CPU (the twin the CPU mover runs)
 * and, with CUDA and a GPU, the kernel the CUDA mover runs.
 *
 *   bench_digest [--tokens T] [--sequences S]
 *
 * The input is S sequences of T / S tokens each with the four fields (28
 * bytes a token: tokens, labels, position_ids int64, loss_mask float32), one
 * buffer per field; defaults 3.64 M tokens in 4096 sequences (the
 * mlmdefault 4096 step on one GPU).  Reported: median of 20 runs after 3
 * warm-ups (CUDA events on the GPU, CLOCK_MONOTONIC on the CPU), and the
 * bytes read per second.  The GPU time includes the kernel only; the CUDA
 * mover adds an upload of a segment table of S entries and an 8-byte read back.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"
#include "../core/digest.h"
#include "../core/thd/pack_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DCP_HAVE_CUDA
#include "../gpu/kernels.h"

#include <cuda_runtime.h>
#endif

#define RUNS 20
#define WARMUP 3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    int64_t tokens = 3640000, sequences = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--sequences") && i + 1 < argc) sequences = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--tokens T] [--sequences S]\n", argv[0]);
            return 2;
        }
    }
    if (sequences < 1 || tokens < sequences) return 2;
    const int64_t per = tokens / sequences;
    tokens = per * sequences;
    const size_t sizes[4] = {8, 8, 8, 4};
    void *host[4];
    size_t bytes = 0;
    for (int f = 0; f < 4; f++) {
        host[f] = malloc((size_t)tokens * sizes[f]);
        if (!host[f]) return 1;
        memset(host[f], 0x5a + f, (size_t)tokens * sizes[f]);
        bytes += (size_t)tokens * sizes[f];
    }
    printf("bench_digest: %lld tokens in %lld sequences, %.1f MB over 4 fields\n", (long long)tokens,
           (long long)sequences, bytes / 1e6);

    double t[RUNS];
    uint64_t cpu = 0;
    for (int r = -WARMUP; r < RUNS; r++) {
        double t0 = now_ms();
        uint64_t sum = 0;
        for (int f = 0; f < 4; f++)
            for (int64_t s = 0; s < sequences; s++)
                sum += dcp__digest_run_cpu((unsigned char *)host[f] + (size_t)(s * per) * sizes[f], sizes[f], per,
                                           s * per, f);
        if (r >= 0) t[r] = now_ms() - t0;
        cpu = sum;
    }
    double cpu_ms = median(t, RUNS);
    printf("cpu:  %8.3f ms  %7.1f GB/s read  (digest %016llx)\n", cpu_ms, bytes / cpu_ms / 1e6, (unsigned long long)cpu);

#ifdef DCP_HAVE_CUDA
    if (dcp_cuda_device_count() < 1) {
        printf("gpu:  skipped: no GPU\n");
        return 0;
    }
    int32_t *src_index = malloc(sizeof(int32_t) * (size_t)sequences);
    int64_t *src_offset = malloc(sizeof(int64_t) * (size_t)sequences), *position = malloc(sizeof(int64_t) * (size_t)sequences);
    int64_t *length = malloc(sizeof(int64_t) * (size_t)sequences);
    for (int64_t s = 0; s < sequences; s++) src_index[s] = 0, src_offset[s] = s * per, position[s] = s * per, length[s] = per;
    void *dev[4];
    for (int f = 0; f < 4; f++) {
        cudaMalloc(&dev[f], (size_t)tokens * sizes[f]);
        cudaMemcpy(dev[f], host[f], (size_t)tokens * sizes[f], cudaMemcpyHostToDevice);
    }
    const int32_t field_index[4] = {0, 1, 2, 3};
    const int64_t elem[4] = {8, 8, 8, 4};
    int32_t *d_si, *d_fields;
    int64_t *d_so, *d_pos, *d_len, *d_elem;
    const void **d_src;
    uint64_t *d_out;
    cudaMalloc((void **)&d_si, sizeof(int32_t) * (size_t)sequences);
    cudaMalloc((void **)&d_so, sizeof(int64_t) * (size_t)sequences);
    cudaMalloc((void **)&d_pos, sizeof(int64_t) * (size_t)sequences);
    cudaMalloc((void **)&d_len, sizeof(int64_t) * (size_t)sequences);
    cudaMalloc((void **)&d_fields, sizeof field_index);
    cudaMalloc((void **)&d_elem, sizeof elem);
    cudaMalloc((void **)&d_src, sizeof(void *) * 4);
    cudaMalloc((void **)&d_out, 8);
    cudaMemcpy(d_si, src_index, sizeof(int32_t) * (size_t)sequences, cudaMemcpyHostToDevice);
    cudaMemcpy(d_so, src_offset, sizeof(int64_t) * (size_t)sequences, cudaMemcpyHostToDevice);
    cudaMemcpy(d_pos, position, sizeof(int64_t) * (size_t)sequences, cudaMemcpyHostToDevice);
    cudaMemcpy(d_len, length, sizeof(int64_t) * (size_t)sequences, cudaMemcpyHostToDevice);
    cudaMemcpy(d_fields, field_index, sizeof field_index, cudaMemcpyHostToDevice);
    cudaMemcpy(d_elem, elem, sizeof elem, cudaMemcpyHostToDevice);
    cudaMemcpy((void *)d_src, dev, sizeof(void *) * 4, cudaMemcpyHostToDevice);
    dcp__segment_table table = {sequences, d_si, d_so, NULL, d_pos, d_len, NULL};
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    uint64_t gpu = 0;
    for (int r = -WARMUP; r < RUNS; r++) {
        cudaEventRecord(a, 0);
        if (dcp__digest_cuda(&table, (const void *const *)d_src, 1, d_fields, d_elem, 4, d_out, NULL) != 0) {
            fprintf(stderr, "digest kernel failed\n");
            return 1;
        }
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 0) t[r] = ms;
    }
    cudaMemcpy(&gpu, d_out, 8, cudaMemcpyDeviceToHost);
    /* one source table per field: src[k * sources + 0] */
    double gpu_ms = median(t, RUNS);
    printf("gpu:  %8.3f ms  %7.1f GB/s read  (digest %016llx, %s the CPU's)\n", gpu_ms, bytes / gpu_ms / 1e6,
           (unsigned long long)gpu, gpu == cpu ? "equal to" : "DIFFERENT FROM");
    return gpu == cpu ? 0 : 1;
#else
    printf("gpu:  skipped: built without CUDA\n");
    return 0;
#endif
}
