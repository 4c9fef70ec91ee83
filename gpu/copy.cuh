/*
 * copy.cuh - cooperative byte copies and fills for the data-plane kernels.
 * Internal to gpu/.
 *
 * A group of `count` threads (a block, or a whole grid) moves `bytes` bytes,
 * thread `index` taking every count-th unit.  The unit is the widest access
 * both ends can share: 16 bytes when source and destination agree modulo 16
 * (the head up to the first 16-byte boundary and the tail go byte by byte),
 * else 8, 4 or 1.  Loads are issued four at a time so several are in flight
 * before the first store.
 */
#ifndef DCP_GPU_COPY_CUH
#define DCP_GPU_COPY_CUH

#include <cstdint>
#include <cuda_runtime.h>

namespace dcp_gpu {

template <typename V>
__device__ __forceinline__ V load_nc(const V *p) { return __ldg(p); }

template <typename V>
__device__ __forceinline__ void copy_units(unsigned char *dst, const unsigned char *src, int64_t units,
                                           int64_t index, int64_t count)
{
    const V *s = reinterpret_cast<const V *>(src);
    V *d = reinterpret_cast<V *>(dst);
    int64_t i = index;
    for (; i + 3 * count < units; i += 4 * count) {
        V a = load_nc(s + i), b = load_nc(s + i + count), c = load_nc(s + i + 2 * count), e = load_nc(s + i + 3 * count);
        d[i] = a;
        d[i + count] = b;
        d[i + 2 * count] = c;
        d[i + 3 * count] = e;
    }
    for (; i < units; i += count) d[i] = load_nc(s + i);
}

template <typename V>
__device__ __forceinline__ void copy_aligned(unsigned char *dst, const unsigned char *src, int64_t bytes,
                                             int64_t index, int64_t count)
{
    const int64_t w = (int64_t)sizeof(V);
    int64_t head = (w - (int64_t)(reinterpret_cast<uintptr_t>(dst) & (uintptr_t)(w - 1))) & (w - 1);
    if (head > bytes) head = bytes;
    for (int64_t i = index; i < head; i += count) dst[i] = src[i];
    const int64_t units = (bytes - head) / w;
    copy_units<V>(dst + head, src + head, units, index, count);
    for (int64_t i = head + units * w + index; i < bytes; i += count) dst[i] = src[i];
}

__device__ __forceinline__ void copy_bytes(unsigned char *dst, const unsigned char *src, int64_t bytes, int64_t index,
                                           int64_t count)
{
    const uintptr_t x = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
    if ((x & 15) == 0) copy_aligned<uint4>(dst, src, bytes, index, count);
    else if ((x & 7) == 0) copy_aligned<uint2>(dst, src, bytes, index, count);
    else if ((x & 3) == 0) copy_aligned<unsigned int>(dst, src, bytes, index, count);
    else
        for (int64_t i = index; i < bytes; i += count) dst[i] = src[i];
}

__device__ __forceinline__ void fill_bytes(unsigned char *dst, unsigned char value, int64_t bytes, int64_t index,
                                           int64_t count)
{
    int64_t head = (16 - (int64_t)(reinterpret_cast<uintptr_t>(dst) & 15u)) & 15;
    if (head > bytes) head = bytes;
    for (int64_t i = index; i < head; i += count) dst[i] = value;
    const int64_t units = (bytes - head) / 16;
    const unsigned int word = 0x01010101u * value;
    const uint4 v = make_uint4(word, word, word, word);
    uint4 *d = reinterpret_cast<uint4 *>(dst + head);
    for (int64_t i = index; i < units; i += count) d[i] = v;
    for (int64_t i = head + units * 16 + index; i < bytes; i += count) dst[i] = value;
}

/* Copy one element of `size` bytes (1, 2, 4, 8 or other) between element-aligned addresses. */
__device__ __forceinline__ void copy_element(unsigned char *dst, const unsigned char *src, int64_t size)
{
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & (uintptr_t)(size - 1)) != 0)
        size = -size; /* misaligned: byte by byte below */
    switch (size) {
    case 8: *reinterpret_cast<uint64_t *>(dst) = *reinterpret_cast<const uint64_t *>(src); break;
    case 4: *reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<const uint32_t *>(src); break;
    case 2: *reinterpret_cast<uint16_t *>(dst) = *reinterpret_cast<const uint16_t *>(src); break;
    default:
        for (int64_t b = 0, n = size < 0 ? -size : size; b < n; b++) dst[b] = src[b];
    }
}

__device__ __forceinline__ void zero_element(unsigned char *dst, int64_t size)
{
    if ((reinterpret_cast<uintptr_t>(dst) & (uintptr_t)(size - 1)) != 0) size = -size;
    switch (size) {
    case 8: *reinterpret_cast<uint64_t *>(dst) = 0; break;
    case 4: *reinterpret_cast<uint32_t *>(dst) = 0; break;
    case 2: *reinterpret_cast<uint16_t *>(dst) = 0; break;
    default:
        for (int64_t b = 0, n = size < 0 ? -size : size; b < n; b++) dst[b] = 0;
    }
}

/* Grid-stride helpers. */
__device__ __forceinline__ int64_t grid_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_count() { return (int64_t)gridDim.x * blockDim.x; }

/* Blocks for a grid-stride loop over `items`, at most `cap`. */
static inline unsigned int grid_blocks(int64_t items, int threads, int64_t cap)
{
    int64_t b = (items + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > cap) b = cap;
    return (unsigned int)b;
}

} // namespace dcp_gpu

#endif
