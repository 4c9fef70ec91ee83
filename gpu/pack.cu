/*
 * pack.cu - the segment-table copy kernel: every piece of every field a step
 * moves, in one launch (twin: dcp__segment_table_pack_cpu, core/segments.c),
 * and dcp__pack_cpu / dcp__padding_mask_from_layout_cpu as special cases.
 *
 * The grid is (blocks, fields); every warp of it takes tiles of the table's
 * concatenated segments for its block's field (see segment_pack_kernel), so
 * every warp moves the same number of elements whatever the segment lengths.
 * Within a piece the warp's lanes move 16-byte units where source and
 * destination share their alignment (copy.cuh).
 */
#include "kernels.h"
#include "copy.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct Table {
    int64_t n;
    const int32_t *src_index;
    const int64_t *src_offset;
    const int32_t *dst_index;
    const int64_t *dst_offset;
    const int64_t *length;
    const int64_t *work;
};

struct Field {
    const unsigned char *const *src; /* NULL: padding mask */
    unsigned char *const *dst;       /* NULL: dst_single */
    unsigned char *dst_single;
    int64_t elem;
};

struct Fields {
    Field f[DCP_SEGMENT_MAX_FIELDS];
};

__device__ __forceinline__ int64_t shfl64(int64_t v, int lane)
{
    return (int64_t)__shfl_sync(kAll, (long long)v, lane);
}
template <typename P> __device__ __forceinline__ P *shfl_ptr(P *p, int lane)
{
    return reinterpret_cast<P *>(__shfl_sync(kAll, (unsigned long long)reinterpret_cast<uintptr_t>(p), lane));
}

/*
 * Each warp takes tiles of kTile elements (grid-stride).  It finds the tile's
 * first segment by a 32-way search (each lane probes one point, a ballot keeps
 * the last one at or before the tile), then walks the segments 32 at a time:
 * every lane loads one segment's row and pointers at once, and the warp
 * copies the pieces one after another, taking each row from its lane by
 * shuffle.  So a short segment costs one copy instruction, not a round of
 * dependent loads, and a long one is cut over as many warps as its tiles.
 */
template <int64_t kTile, bool kStream, bool kWide, int kMinBlocks, int kU16>
__global__ void __launch_bounds__(kThreads, kMinBlocks) segment_pack_kernel(Table t, Fields fields, int64_t total)
{
    const Field f = fields.f[blockIdx.y];
    const int lane = threadIdx.x & 31;
    const int64_t tiles = (total + kTile - 1) / kTile;
    for (int64_t tile = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); tile < tiles;
         tile += (int64_t)gridDim.x * kWarps) {
        const int64_t t0 = tile * kTile, t1 = t0 + kTile < total ? t0 + kTile : total;
        int64_t lo = 0, hi = t.n - 1; /* last segment starting at or before t0; work[lo] <= t0 throughout */
        while (lo < hi) {
            const int64_t step = (hi - lo + 32) / 32, probe = lo + lane * step;
            const unsigned below = __ballot_sync(kAll, probe <= hi && t.work[probe] <= t0);
            lo += (int64_t)(31 - __clz(below)) * step;
            hi = lo + step - 1 < hi ? lo + step - 1 : hi;
        }
        for (int64_t base = lo; base < t.n; base += 32) {
            const int64_t s = base + lane;
            const bool valid = s < t.n;
            int64_t w0 = INT64_MAX, w1 = INT64_MAX, so = 0, dof = 0;
            int32_t si = 0;
            const unsigned char *sp = nullptr;
            unsigned char *dp = nullptr;
            if (valid) {
                w0 = t.work[s];
                w1 = t.work[s + 1];
                si = t.src_index ? t.src_index[s] : 0;
                const int32_t di = t.dst_index ? t.dst_index[s] : 0;
                so = t.src_offset[s];
                dof = t.dst_offset[s];
                if (w0 < t1) {
                    if (f.src && si >= 0) sp = f.src[si];
                    dp = f.dst ? f.dst[di] : f.dst_single;
                }
            }
            /* work is non-decreasing: the segments that start inside the tile are a prefix of the batch */
            const int count = __popc(__ballot_sync(kAll, valid && w0 < t1));
            for (int j = 0; j < count; j++) {
                const int64_t a0 = shfl64(w0, j), a1 = shfl64(w1, j);
                const int64_t a = t0 > a0 ? t0 : a0, b = t1 < a1 ? t1 : a1;
                if (a >= b) continue;
                const int64_t off = a - a0, bytes = (b - a) * f.elem;
                const int32_t sj = __shfl_sync(kAll, si, j);
                unsigned char *dst = shfl_ptr(dp, j) + (shfl64(dof, j) + off) * f.elem;
                const unsigned char *src = shfl_ptr(sp, j);
                if (!f.src) dcp_gpu::fill_bytes(dst, sj < 0 ? 1 : 0, bytes, lane, 32);
                else if (sj < 0) dcp_gpu::fill_bytes(dst, 0, bytes, lane, 32);
                else if (kWide) dcp_gpu::copy_bytes_wide<32, kStream>(dst, src + (shfl64(so, j) + off) * f.elem, bytes, lane, 32);
                else dcp_gpu::copy_bytes<32, kStream, kU16>(dst, src + (shfl64(so, j) + off) * f.elem, bytes, lane, 32);
            }
            if (count < 32) break;
        }
    }
}

template <int64_t kTile, bool kStream, bool kWide, int kMinBlocks, int kU16 = 4>
int launch_tile(const Table &t, const Fields &fields, int32_t num_fields, int64_t total, void *stream)
{
    const int64_t tiles = (total + kTile - 1) / kTile, blocks = (tiles + kWarps - 1) / kWarps;
    dim3 grid((unsigned int)(blocks < 65535 ? blocks : 65535), (unsigned int)num_fields);
    segment_pack_kernel<kTile, kStream, kWide, kMinBlocks, kU16><<<grid, kThreads, 0, (cudaStream_t)stream>>>(t, fields, total);
    return (int)cudaGetLastError();
}

/*
 * variant: 0 = the library's choice: tile 8192 with 8 16-byte loads in flight
 * a thread where source and destination agree modulo 16, under a register cap
 * that keeps 2 blocks on a multiprocessor (without the cap the compiler takes
 * 150 registers and 1 block fits).  Measured on H100 (bench/bench_gpu.c)
 * against 8192, the former choice with 4 loads in flight: equal on pieces of
 * 512 elements at arbitrary offsets, 0.4 to 0.7 points of memcpy ahead on
 * longer ones, 1.4 ahead on 16-byte-aligned ones.
 * Else the tile (elements per warp), + 1 for streaming cache hints, + 6 for
 * 16-byte units assembled from word-aligned sources under a register cap
 * fitting 3 blocks per multiprocessor.
 */
int launch(const Table &t, const Fields &fields, int32_t num_fields, int64_t total, void *stream, int64_t variant = 0)
{
    if (t.n <= 0 || total <= 0 || num_fields <= 0) return (int)cudaSuccess;
    if (num_fields > DCP_SEGMENT_MAX_FIELDS) return (int)cudaErrorInvalidValue;
    switch (variant) {
    case 4096: return launch_tile<4096, false, false, 1>(t, fields, num_fields, total, stream);
    case 4096 + 1: return launch_tile<4096, true, false, 1>(t, fields, num_fields, total, stream);
    case 4096 + 6: return launch_tile<4096, false, true, 3>(t, fields, num_fields, total, stream);
    case 8192: return launch_tile<8192, false, false, 1>(t, fields, num_fields, total, stream);
    case 16384: return launch_tile<16384, false, false, 1>(t, fields, num_fields, total, stream);
    default: return launch_tile<8192, false, false, 2, 8>(t, fields, num_fields, total, stream);
    }
}

/* A flat copy of one buffer: the ceiling a kernel of this shape reaches (measurements only). */
template <int U, bool kStream>
__global__ void __launch_bounds__(kThreads) flat_copy_kernel(unsigned char *dst, const unsigned char *src, int64_t bytes)
{
    const int64_t index = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, count = (int64_t)gridDim.x * blockDim.x;
    dcp_gpu::copy_units<uint4, U, 0, kStream>(dst, src, bytes / 16, index, count);
}

} // namespace

extern "C" int dcp__segment_table_pack_tile_cuda(const dcp_segment_table *table, int64_t total,
                                                const dcp_segment_field *fields, int32_t num_fields, int64_t variant,
                                                void *stream)
{
    Table t = {table->num_segments, table->src_index, table->src_offset, table->dst_index,
               table->dst_offset,   table->length,    table->work_offset};
    Fields fs = {};
    for (int32_t f = 0; f < num_fields && f < DCP_SEGMENT_MAX_FIELDS; f++) {
        fs.f[f].src = reinterpret_cast<const unsigned char *const *>(fields[f].src);
        fs.f[f].dst = reinterpret_cast<unsigned char *const *>(fields[f].dst);
        fs.f[f].dst_single = nullptr;
        fs.f[f].elem = fields[f].elem_size;
    }
    return launch(t, fs, num_fields, total, stream, variant);
}

extern "C" int dcp__segment_table_pack_cuda(const dcp_segment_table *table, int64_t total, const dcp_segment_field *fields,
                                           int32_t num_fields, void *stream)
{
    Table t = {table->num_segments, table->src_index, table->src_offset, table->dst_index,
               table->dst_offset,   table->length,    table->work_offset};
    Fields fs = {};
    for (int32_t f = 0; f < num_fields && f < DCP_SEGMENT_MAX_FIELDS; f++) {
        fs.f[f].src = reinterpret_cast<const unsigned char *const *>(fields[f].src);
        fs.f[f].dst = reinterpret_cast<unsigned char *const *>(fields[f].dst);
        fs.f[f].dst_single = nullptr;
        fs.f[f].elem = fields[f].elem_size;
    }
    return launch(t, fs, num_fields, total, stream);
}

extern "C" int dcp__pack_cuda(const dcp_pack_layout *layout, const int64_t *work_offset, int64_t total,
                             const void *const *src_buffers, void *dst, size_t elem_size, void *stream)
{
    Table t = {layout->num_segments, layout->src_buffer, layout->src_offset, nullptr,
               layout->dst_offset,   layout->length,     work_offset};
    Fields fs = {};
    fs.f[0].src = reinterpret_cast<const unsigned char *const *>(src_buffers);
    fs.f[0].dst = nullptr;
    fs.f[0].dst_single = static_cast<unsigned char *>(dst);
    fs.f[0].elem = (int64_t)elem_size;
    return launch(t, fs, 1, total, stream);
}

extern "C" int dcp__padding_mask_from_layout_cuda(const dcp_pack_layout *layout, const int64_t *work_offset,
                                                 int64_t total, int64_t num_tokens, uint8_t *mask, void *stream)
{
    if (num_tokens > 0) {
        cudaError_t e = cudaMemsetAsync(mask, 1, (size_t)num_tokens, (cudaStream_t)stream);
        if (e != cudaSuccess) return (int)e;
    }
    /* a mask field writes 0 on every copy segment; src_index stays NULL so none is a fill */
    Table t = {layout->num_segments, nullptr, layout->src_offset, nullptr, layout->dst_offset, layout->length, work_offset};
    Fields fs = {};
    fs.f[0].src = nullptr;
    fs.f[0].dst = nullptr;
    fs.f[0].dst_single = mask;
    fs.f[0].elem = 1;
    return launch(t, fs, 1, total, stream);
}

extern "C" int dcp__flat_copy_probe_cuda(void *dst, const void *src, size_t bytes, int variant, void *stream)
{
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned int blocks = (unsigned int)sms * 8;
    unsigned char *d = static_cast<unsigned char *>(dst);
    const unsigned char *s = static_cast<const unsigned char *>(src);
    switch (variant) {
    case 1: flat_copy_kernel<8, false><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(d, s, (int64_t)bytes); break;
    case 2: flat_copy_kernel<4, true><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(d, s, (int64_t)bytes); break;
    case 3: flat_copy_kernel<8, true><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(d, s, (int64_t)bytes); break;
    default: flat_copy_kernel<4, false><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(d, s, (int64_t)bytes); break;
    }
    return (int)cudaGetLastError();
}
