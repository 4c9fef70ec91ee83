/*
 * digest.cu - the input digest (core/digest.h) on device: one block per
 * (span, field), a strided sum of the elements' terms, one 64-bit atomic add
 * per block.  Integer addition modulo 2^64 is associative, so the result is
 * the CPU twin's bit for bit whatever the order blocks finish in.
 */
#include "kernels.h"
#include "../core/digest.h"

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void digest_kernel(dcp__segment_table t, const void *const *src, int64_t sources, const int32_t *field_index,
                              const int64_t *elem_size, unsigned long long *out)
{
    const int64_t s = blockIdx.x;
    const int32_t k = blockIdx.y;
    const int64_t size = elem_size[k];
    const int32_t f = field_index[k];
    const unsigned char *base = static_cast<const unsigned char *>(src[(int64_t)k * sources + t.src_index[s]]) +
                                t.src_offset[s] * size;
    const int64_t first = t.dst_offset[s], n = t.length[s];
    uint64_t sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        uint64_t bits = size == 8 ? *reinterpret_cast<const uint64_t *>(base + i * 8)
                                  : (uint64_t)*reinterpret_cast<const uint32_t *>(base + i * 4);
        sum += dcp__digest_term(bits, first + i, f);
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    __shared__ uint64_t warp_sums[kThreads / 32];
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t total = 0;
        for (int w = 0; w < kThreads / 32; w++) total += warp_sums[w];
        atomicAdd(out, (unsigned long long)total);
    }
}

} // namespace

extern "C" int dcp__digest_cuda(const dcp__segment_table *table, const void *const *src, int64_t sources,
                                const int32_t *field_index, const int64_t *elem_size, int32_t num_fields,
                                uint64_t *out, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemsetAsync(out, 0, sizeof(uint64_t), st);
    if (e != cudaSuccess || table->num_segments == 0 || num_fields == 0) return (int)e;
    dim3 grid((unsigned)table->num_segments, (unsigned)num_fields);
    digest_kernel<<<grid, kThreads, 0, st>>>(*table, src, sources, field_index, elem_size,
                                             reinterpret_cast<unsigned long long *>(out));
    return (int)cudaGetLastError();
}
