/*
 * gpu_util.h - small CUDA helpers for the GPU tests (header-only): copies to
 * and from the device that fail the test case on error.  Only included where
 * the library was built with CUDA.
 */
#ifndef DCP_GPU_UTIL_H
#define DCP_GPU_UTIL_H

#include "dcp_test.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_CHECK(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) dcp_test_fail(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

/* A device copy of `bytes` host bytes (at least 1 byte is allocated, so the pointer is never NULL). */
static inline void *to_device(const void *host, size_t bytes)
{
    void *d = NULL;
    CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes && host) CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    else if (bytes) CUDA_CHECK(cudaMemset(d, 0xCD, bytes)); /* no source: poison */
    return d;
}

/* A host copy of `bytes` device bytes (malloc'd). */
static inline void *to_host(const void *device, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (bytes) CUDA_CHECK(cudaMemcpy(h, device, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* Compare a device buffer with host bytes; returns 1 when equal. */
static inline int device_equals(const void *device, const void *host, size_t bytes)
{
    void *h = to_host(device, bytes);
    int same = memcmp(h, host, bytes) == 0;
    free(h);
    return same;
}

#endif
