/*
 * copy.cuh - cooperative byte copies and fills for the data-plane kernels.
 * Internal to gpu/.
 *
 * A group of `count` threads (a block, or a whole grid) moves `bytes` bytes,
 * thread `index` taking every count-th unit.  The unit is the widest access
 * both ends can share: 16 bytes when source and destination agree modulo 16
 * (the head up to the first 16-byte boundary and the tail go byte by byte),
 * else 8, 4 or 1.  Each thread keeps 64 bytes of loads in flight before its
 * first store.
 */
#ifndef DCP_GPU_COPY_CUH
#define DCP_GPU_COPY_CUH

#include <cstdint>
#include <cuda_runtime.h>

namespace dcp_gpu {

template <typename V>
__device__ __forceinline__ V load_nc(const V *p) { return __ldg(p); }

/* Streaming forms: each byte is touched once, so keep it from evicting what is reused (tables, pointers). */
template <typename V>
__device__ __forceinline__ V load_stream(const V *p) { return __ldcs(p); }
template <typename V>
__device__ __forceinline__ void store_stream(V *p, V v) { __stcs(p, v); }

/*
 * `units` units of V, thread `index` of `count` taking every count-th one, U
 * at a time: U loads in flight before the first store, and the last partial
 * round predicated, so a short run costs one round, not a loop.  C > 0 fixes
 * count at compile time (a warp: 32), so the U addresses are one register and
 * immediate offsets.
 */
template <typename V, int U, int C, bool S = false>
__device__ __forceinline__ void copy_units(unsigned char *dst, const unsigned char *src, int64_t units,
                                           int64_t index, int64_t count_arg)
{
    const int64_t count = C > 0 ? C : count_arg;
    const V *s = reinterpret_cast<const V *>(src) + index;
    V *d = reinterpret_cast<V *>(dst) + index;
    int64_t left = units - index; /* units at and after this thread's next one */
    for (; left > 0; left -= U * count, s += U * count, d += U * count) {
        V r[U];
#pragma unroll
        for (int k = 0; k < U; k++)
            if (k * count < left) r[k] = S ? load_stream(s + k * count) : load_nc(s + k * count);
#pragma unroll
        for (int k = 0; k < U; k++)
            if (k * count < left) {
                if (S) store_stream(d + k * count, r[k]);
                else d[k * count] = r[k];
            }
    }
}

/*
 * Source and destination agree modulo sizeof(V): the bytes before the first
 * aligned unit and after the last (at most 2 * (sizeof(V) - 1) of them) are
 * loaded one per thread before the units and stored after them, so they add
 * no round of their own.
 */
template <typename V, int U, int C, bool S = false>
__device__ __forceinline__ void copy_aligned(unsigned char *dst, const unsigned char *src, int64_t bytes,
                                             int64_t index, int64_t count_arg)
{
    const int64_t count = C > 0 ? C : count_arg;
    const int64_t w = (int64_t)sizeof(V);
    int64_t head = (w - (int64_t)(reinterpret_cast<uintptr_t>(dst) & (uintptr_t)(w - 1))) & (w - 1);
    if (head > bytes) head = bytes;
    const int64_t units = (bytes - head) / w, tail_start = head + units * w, edges = head + bytes - tail_start;
    int64_t edge_at = -1;
    unsigned char edge = 0;
    if (index < edges) {
        edge_at = index < head ? index : tail_start + (index - head);
        edge = src[edge_at];
    }
    copy_units<V, U, C, S>(dst + head, src + head, units, index, count);
    for (int64_t e = index + count; e < edges; e += count) { /* only when fewer threads than edge bytes */
        int64_t at = e < head ? e : tail_start + (e - head);
        dst[at] = src[at];
    }
    if (edge_at >= 0) dst[edge_at] = edge;
}

/* The widest path source and destination allow; C as above; U16 16-byte loads in flight a thread. */
template <int C, bool S = false, int U16 = 4>
__device__ __forceinline__ void copy_bytes(unsigned char *dst, const unsigned char *src, int64_t bytes, int64_t index,
                                           int64_t count)
{
    const uintptr_t x = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
    if ((x & 15) == 0) copy_aligned<uint4, U16, C, S>(dst, src, bytes, index, count);
    else if ((x & 7) == 0) copy_aligned<uint2, 8, C, S>(dst, src, bytes, index, count);
    else if ((x & 3) == 0) copy_aligned<unsigned int, 8, C, S>(dst, src, bytes, index, count);
    else
        for (int64_t i = index; i < bytes; i += count) dst[i] = src[i];
}

/* Four words starting at word `shift` of the 32 bytes a:b. */
__device__ __forceinline__ uint4 funnel(uint4 a, uint4 b, int shift)
{
    switch (shift) {
    case 1: return make_uint4(a.y, a.z, a.w, b.x);
    case 2: return make_uint4(a.z, a.w, b.x, b.y);
    case 3: return make_uint4(a.w, b.x, b.y, b.z);
    default: return a;
    }
}

/*
 * 16-byte units to a 16-byte aligned destination from a source that is only
 * word (4-byte) aligned: each unit is assembled from the two aligned 16-byte
 * blocks it straddles, so loads and stores are 16 bytes wide whatever the two
 * alignments.  A unit whose blocks would reach outside [lo, hi) (the first and
 * last of a piece) reads its four words one by one instead, so nothing
 * outside the piece is read.
 */
template <int U, int C, bool S>
__device__ __forceinline__ void copy_word_units(unsigned char *dst, const unsigned char *src, int64_t units,
                                                int64_t index, int64_t count_arg, const unsigned char *lo,
                                                const unsigned char *hi)
{
    const int64_t count = C > 0 ? C : count_arg;
    const int shift = (int)((reinterpret_cast<uintptr_t>(src) & 15u) >> 2);
    const uint4 *blocks = reinterpret_cast<const uint4 *>(reinterpret_cast<uintptr_t>(src) & ~(uintptr_t)15);
    const unsigned int *words = reinterpret_cast<const unsigned int *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    for (int64_t i = index; i < units; i += U * count) {
        uint4 r[U];
#pragma unroll
        for (int k = 0; k < U; k++) {
            const int64_t u = i + k * count;
            if (u >= units) continue;
            const uint4 *block = blocks + u;
            if (shift == 0) {
                r[k] = S ? load_stream(block) : load_nc(block);
            } else if (reinterpret_cast<const unsigned char *>(block) >= lo &&
                       reinterpret_cast<const unsigned char *>(block + 2) <= hi) {
                const uint4 a = S ? load_stream(block) : load_nc(block), b = load_nc(block + 1);
                r[k] = funnel(a, b, shift);
            } else {
                const unsigned int *w = words + 4 * u;
                r[k] = make_uint4(load_nc(w), load_nc(w + 1), load_nc(w + 2), load_nc(w + 3));
            }
        }
#pragma unroll
        for (int k = 0; k < U; k++) {
            const int64_t u = i + k * count;
            if (u >= units) continue;
            if (S) store_stream(d + u, r[k]);
            else d[u] = r[k];
        }
    }
}

/*
 * Word-aligned source and destination (every field of 4 or 8 bytes): the
 * destination's head up to 16-byte alignment and its tail go byte by byte as
 * in copy_aligned, the rest as 16-byte units via copy_word_units.  Anything
 * else falls back to copy_bytes.
 */
template <int C, bool S>
__device__ __forceinline__ void copy_bytes_wide(unsigned char *dst, const unsigned char *src, int64_t bytes,
                                                int64_t index, int64_t count_arg)
{
    const int64_t count = C > 0 ? C : count_arg;
    if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 3u) != 0) {
        for (int64_t i = index; i < bytes; i += count) dst[i] = src[i];
        return;
    }
    int64_t head = (16 - (int64_t)(reinterpret_cast<uintptr_t>(dst) & 15u)) & 15;
    if (head > bytes) head = bytes;
    const int64_t units = (bytes - head) / 16, tail_start = head + units * 16, edges = head + bytes - tail_start;
    int64_t edge_at = -1;
    unsigned char edge = 0;
    if (index < edges) {
        edge_at = index < head ? index : tail_start + (index - head);
        edge = src[edge_at];
    }
    copy_word_units<4, C, S>(dst + head, src + head, units, index, count, src, src + bytes);
    for (int64_t e = index + count; e < edges; e += count) {
        int64_t at = e < head ? e : tail_start + (e - head);
        dst[at] = src[at];
    }
    if (edge_at >= 0) dst[edge_at] = edge;
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
