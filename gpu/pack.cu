/*
 * pack.cu - the segment-table copy kernel: every piece of every field a step
 * moves, in one launch (twin: dcp_segment_table_pack_cpu, core/segments.c),
 * and dcp_pack_cpu / dcp_padding_mask_from_layout_cpu as special cases.
 *
 * The grid is (tiles, fields): block (x, f) handles elements
 * [x * kTile, (x + 1) * kTile) of the table's concatenated segments for field
 * f, finds the first segment by binary search over work_offset and walks the
 * segments that overlap its tile.  So every block moves the same number of
 * bytes whatever the segment lengths, and long segments are cut across many
 * blocks.  Within a segment piece the block's threads move 16-byte units
 * where source and destination share their alignment (copy.cuh).
 */
#include "kernels.h"
#include "copy.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 4096; /* elements per block and tile */

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

__global__ void __launch_bounds__(kThreads) segment_pack_kernel(Table t, Fields fields, int64_t total)
{
    const Field f = fields.f[blockIdx.y];
    const int64_t tiles = (total + kTile - 1) / kTile;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t t0 = tile * kTile, t1 = t0 + kTile < total ? t0 + kTile : total;
        int64_t lo = 0, hi = t.n - 1; /* last segment starting at or before t0 */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) >> 1;
            if (t.work[mid] <= t0) lo = mid;
            else hi = mid - 1;
        }
        for (int64_t s = lo; s < t.n; s++) {
            const int64_t w0 = t.work[s];
            if (w0 >= t1) break;
            const int64_t w1 = t.work[s + 1];
            const int64_t a = t0 > w0 ? t0 : w0, b = t1 < w1 ? t1 : w1;
            if (a >= b) continue;
            const int64_t off = a - w0, bytes = (b - a) * f.elem;
            const int32_t si = t.src_index ? t.src_index[s] : 0, di = t.dst_index ? t.dst_index[s] : 0;
            unsigned char *dst = (f.dst ? f.dst[di] : f.dst_single) + (t.dst_offset[s] + off) * f.elem;
            if (!f.src) dcp_gpu::fill_bytes(dst, si < 0 ? 1 : 0, bytes, threadIdx.x, blockDim.x);
            else if (si < 0) dcp_gpu::fill_bytes(dst, 0, bytes, threadIdx.x, blockDim.x);
            else
                dcp_gpu::copy_bytes(dst, f.src[si] + (t.src_offset[s] + off) * f.elem, bytes, threadIdx.x, blockDim.x);
        }
    }
}

int launch(const Table &t, const Fields &fields, int32_t num_fields, int64_t total, void *stream)
{
    if (t.n <= 0 || total <= 0 || num_fields <= 0) return (int)cudaSuccess;
    if (num_fields > DCP_SEGMENT_MAX_FIELDS) return (int)cudaErrorInvalidValue;
    int64_t tiles = (total + kTile - 1) / kTile;
    dim3 grid((unsigned int)(tiles < 65535 ? tiles : 65535), (unsigned int)num_fields);
    segment_pack_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(t, fields, total);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int dcp_segment_table_pack_cuda(const dcp_segment_table *table, int64_t total, const dcp_segment_field *fields,
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

extern "C" int dcp_pack_cuda(const dcp_pack_layout *layout, const int64_t *work_offset, int64_t total,
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

extern "C" int dcp_padding_mask_from_layout_cuda(const dcp_pack_layout *layout, const int64_t *work_offset,
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
