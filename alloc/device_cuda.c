/* device_cuda.c - device and pinned memory through the CUDA runtime (see device.h). */
#include "device.h"

#include <cuda_runtime.h>

int dcp__device_alloc(void **memory, size_t bytes) { return (int)cudaMalloc(memory, bytes); }

void dcp__device_free(void *memory)
{
    if (memory) cudaFree(memory);
}

int dcp__pinned_alloc(void **memory, size_t bytes) { return (int)cudaMallocHost(memory, bytes); }

void dcp__pinned_free(void *memory)
{
    if (memory) cudaFreeHost(memory);
}

const char *dcp__device_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
