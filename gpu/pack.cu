/*
 * pack.cu - the segment-table copy kernel: every piece of every field a step
 * moves, in one launch (twin: dcp__segment_table_pack_cpu, core/thd/pack_cpu.c),
 * and dcp__pack_cpu / dcp__padding_mask_from_layout_cpu as special cases.
 *
 * Two kernels.  The persistent kernel (persistent_pack_kernel, the library's
 * choice) fits the GPU in one wave and gives every warp an equal share of
 * the bytes; it moves word-aligned pieces as destination-aligned 16-byte
 * units and runs of short pieces several at a time.  The tile kernel
 * (segment_pack_kernel, the former choice, kept for measurements) has a grid
 * of (blocks, fields) whose warps take tiles of the table's concatenated
 * segments for their block's field; within a piece its lanes move 16-byte
 * units where source and destination share their alignment (copy.cuh).
 */
#include "kernels.h"
#include "copy.cuh"

#include <atomic>

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
 * The last segment starting at or before element t0, found by the whole warp
 * (every lane calls it): each round the 32 lanes probe evenly spaced rows and
 * a ballot keeps the last probe at or before t0 (work[lo] <= t0 throughout).
 */
__device__ __forceinline__ int64_t first_segment(const Table &t, int64_t t0, int lane)
{
    int64_t lo = 0, hi = t.n - 1;
    while (lo < hi) {
        const int64_t step = (hi - lo + 32) / 32, probe = lo + lane * step;
        const unsigned below = __ballot_sync(kAll, probe <= hi && t.work[probe] <= t0);
        lo += (int64_t)(31 - __clz(below)) * step;
        hi = lo + step - 1 < hi ? lo + step - 1 : hi;
    }
    return lo;
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
        const int64_t lo = first_segment(t, t0, lane);
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

/* ------------------------------------------------------------------------ */
/* The persistent segment kernel                                              */
/* ------------------------------------------------------------------------ */

/*
 * A grid that fits the GPU at once, every warp given the same number of
 * bytes: the fields' elements are one byte-weighted sequence, cut into equal
 * ranges, one per warp (an element belongs to the range its first byte falls
 * in), so no warp waits on a straggler of its block and no wave is left half
 * full.  Inside its range a warp walks the segments 32 at a time as above,
 * and copies them in groups of G lanes: runs of short pieces go 32 / G at a
 * time (G = 4, 8, 16), each group one piece, so several pieces' loads are in
 * flight together; a long piece takes the whole warp.
 *
 * Word-aligned pieces (4- and 8-byte fields) move as 16-byte units aligned on
 * the destination whatever the source's alignment: each lane loads aligned
 * 16-byte blocks of the source and takes the words a unit needs from its own
 * block and its neighbour's (a shuffle within the group), so loads and stores
 * are 16 bytes wide and no byte outside the piece is read (a block that
 * reaches outside it is read word by word, those words only).  The up to 3
 * words before the first aligned unit and after the last go one per lane.
 * Fills (padding, the mask) write 16-byte units; anything else (fields whose
 * elements are not whole words) takes the byte-wise path of the tile kernel.
 */

struct GroupPiece {
    unsigned char *dst;
    const unsigned char *src;
    int64_t bytes;
    int kind; /* 0 none, 1 word copy, 2 fill */
    unsigned char value;
};

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

/* The words of the 16-byte block at `a` that lie inside [lo, hi), 0 elsewhere (a piece's first or last block). */
__device__ __forceinline__ uint4 load_block_edge(uintptr_t a, uintptr_t lo, uintptr_t hi)
{
    const unsigned int *w = reinterpret_cast<const unsigned int *>(a);
    uint4 v = zero4();
    if (a >= lo && a + 4 <= hi) v.x = __ldg(w);
    if (a + 4 >= lo && a + 8 <= hi) v.y = __ldg(w + 1);
    if (a + 8 >= lo && a + 12 <= hi) v.z = __ldg(w + 2);
    if (a + 12 >= lo && a + 16 <= hi) v.w = __ldg(w + 3);
    return v;
}

/* The 16-byte block at `blk` (16-aligned): one load when it lies inside [lo, hi), else only its words that do. */
template <bool kStream>
__device__ __forceinline__ uint4 load_block(const unsigned char *blk, uintptr_t lo, uintptr_t hi)
{
    const uintptr_t a = reinterpret_cast<uintptr_t>(blk);
    if (a >= lo && a + 16 <= hi) {
        const uint4 *p = reinterpret_cast<const uint4 *>(blk);
        return kStream ? __ldcs(p) : __ldg(p);
    }
    return load_block_edge(a, lo, hi);
}

/*
 * Each group of G lanes moves its piece; `sub` is the lane's place in its
 * group.  Every lane of the warp calls this together (the shuffles span the
 * warp), whatever its piece; the round count is the warp's largest.
 */
template <int G, int U, bool kStream>
__device__ __forceinline__ void group_copy(const GroupPiece &p, int sub)
{
    if (p.kind == 2) dcp_gpu::fill_bytes(p.dst, p.value, p.bytes, sub, G);
    const bool copy = p.kind == 1;
    const uintptr_t d0 = reinterpret_cast<uintptr_t>(p.dst);
    const int64_t words = copy ? p.bytes >> 2 : 0;
    int64_t head = (int64_t)((((d0 + 15) & ~(uintptr_t)15) - d0) >> 2);
    if (head > words) head = words;
    const int64_t units = (words - head) >> 2, edges = words - 4 * units; /* head words + tail words, <= 6 */
    /* the edge words: loaded before the units, stored after them */
    unsigned int edge[(6 + G - 1) / G];
    int64_t edge_at[(6 + G - 1) / G];
#pragma unroll
    for (int e = 0; e < (6 + G - 1) / G; e++) {
        const int64_t w = sub + (int64_t)e * G;
        edge_at[e] = -1;
        if (w < edges) {
            edge_at[e] = 4 * (w < head ? w : w + 4 * units);
            edge[e] = __ldg(reinterpret_cast<const unsigned int *>(p.src + edge_at[e]));
        }
    }
    const unsigned char *first = p.src + 4 * head; /* the source of unit 0 */
    const int shift = (int)((reinterpret_cast<uintptr_t>(first) & 15u) >> 2);
    const unsigned char *blocks = reinterpret_cast<const unsigned char *>(reinterpret_cast<uintptr_t>(first) & ~(uintptr_t)15);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p.src), hi = lo + 4 * (uintptr_t)words;
    const int64_t need = units + (shift != 0 && units > 0 ? 1 : 0); /* blocks the units read */
    uint4 *out = reinterpret_cast<uint4 *>(p.dst + 4 * head);
    const unsigned rounds = __reduce_max_sync(kAll, (unsigned)((units + G * U - 1) / (G * U)));
    const bool shifted = __any_sync(kAll, copy && units > 0 && shift != 0);
    const int next = (sub + 1) & (G - 1);
    for (unsigned r = 0; r < rounds; r++) {
        const int64_t base = (int64_t)r * G * U + sub;
        uint4 v[U + 1];
#pragma unroll
        for (int k = 0; k < U; k++) v[k] = base + G * k < need ? load_block<kStream>(blocks + 16 * (base + G * k), lo, hi) : zero4();
        /* lane 0 also loads the block after the round's last: the group's last lane needs it */
        v[U] = sub == 0 && base + G * U < need ? load_block<kStream>(blocks + 16 * (base + G * U), lo, hi) : zero4();
#pragma unroll
        for (int k = 0; k < U; k++) {
            const int64_t i = base + G * k;
            uint4 unit = v[k];
            if (shifted) {
                /* unit i takes words from block i (this lane's) and block i + 1 (the next lane's; lane 0's next one) */
                const uint4 t = sub == 0 ? v[k + 1] : v[k];
                uint4 nb;
                nb.x = __shfl_sync(kAll, t.x, next, G);
                nb.y = __shfl_sync(kAll, t.y, next, G);
                nb.z = __shfl_sync(kAll, t.z, next, G);
                nb.w = __shfl_sync(kAll, t.w, next, G);
                unit = dcp_gpu::funnel(v[k], nb, shift);
            }
            if (i < units) {
                if (kStream) __stcs(out + i, unit);
                else out[i] = unit;
            }
        }
    }
#pragma unroll
    for (int e = 0; e < (6 + G - 1) / G; e++)
        if (edge_at[e] >= 0) *reinterpret_cast<unsigned int *>(p.dst + edge_at[e]) = edge[e];
}

/* One batch row's piece as a group sees it: clipped to [t0, t1). */
__device__ __forceinline__ GroupPiece piece_from(int64_t w0, int64_t w1, int64_t so, int64_t dof, int32_t si,
                                                 const unsigned char *sp, unsigned char *dp, int64_t t0, int64_t t1,
                                                 const Field &f)
{
    GroupPiece p = {nullptr, nullptr, 0, 0, 0};
    const int64_t a = t0 > w0 ? t0 : w0, b = t1 < w1 ? t1 : w1;
    if (a >= b || dp == nullptr) return p;
    const int64_t off = a - w0;
    p.dst = dp + (dof + off) * f.elem;
    p.bytes = (b - a) * f.elem;
    if (!f.src || si < 0) {
        p.kind = 2;
        p.value = !f.src && si < 0 ? 1 : 0;
    } else {
        p.src = sp + (so + off) * f.elem;
        p.kind = 1;
    }
    return p;
}

/* Lane `from`'s piece (kind and fill value travel as one word). */
__device__ __forceinline__ GroupPiece piece_of_lane(const GroupPiece &p, int from)
{
    GroupPiece x;
    x.dst = shfl_ptr(p.dst, from);
    x.src = shfl_ptr(p.src, from);
    x.bytes = shfl64(p.bytes, from);
    const int kv = __shfl_sync(kAll, p.kind | (int)p.value << 8, from);
    x.kind = kv & 0xff;
    x.value = (unsigned char)(kv >> 8);
    return x;
}

/* Pieces of G lanes each, 32 / G at a time: row j + lane / G of the batch for this lane. */
template <int G, int U, bool kStream>
__device__ __forceinline__ void copy_rows(const GroupPiece &mine, int j, int lane)
{
    group_copy<G, U, kStream>(piece_of_lane(mine, j + lane / G), lane & (G - 1));
}

/* Elements [t0, t1) of one field, by one warp. */
template <int U, bool kStream, bool kGroups>
__device__ __forceinline__ void warp_range(const Table &t, const Field &f, int64_t t0, int64_t t1, int lane)
{
    const int64_t lo = first_segment(t, t0, lane);
    constexpr int64_t kUnit = 16;
    for (int64_t base = lo; base < t.n; base += 32) {
        /* each lane reads one row and makes its piece; the warp then moves the pieces in order */
        const int64_t s = base + lane;
        const bool valid = s < t.n;
        GroupPiece mine = {nullptr, nullptr, 0, 0, 0};
        int64_t w0 = INT64_MAX;
        if (valid) {
            w0 = t.work[s];
            if (w0 < t1) {
                const int32_t si = t.src_index ? t.src_index[s] : 0, di = t.dst_index ? t.dst_index[s] : 0;
                const unsigned char *sp = f.src && si >= 0 ? f.src[si] : nullptr;
                unsigned char *dp = f.dst ? f.dst[di] : f.dst_single;
                mine = piece_from(w0, t.work[s + 1], t.src_offset[s], t.dst_offset[s], si, sp, dp, t0, t1, f);
            }
        }
        const int count = __popc(__ballot_sync(kAll, valid && w0 < t1));
        const bool wordy = mine.kind == 2 ||
                           (mine.kind == 1 && ((reinterpret_cast<uintptr_t>(mine.dst) | reinterpret_cast<uintptr_t>(mine.src) |
                                                 (uintptr_t)mine.bytes) & 3u) == 0);
        const unsigned word_rows = __ballot_sync(kAll, wordy || mine.kind == 0);
        unsigned fit4 = 0u, fit8 = 0u, fit16 = 0u; /* rows whose piece one round of a group of 4, 8, 16 lanes moves */
        if (kGroups) {
            fit4 = __ballot_sync(kAll, mine.kind == 0 || (wordy && mine.bytes <= 4 * U * kUnit));
            fit8 = __ballot_sync(kAll, mine.kind == 0 || (wordy && mine.bytes <= 8 * U * kUnit));
            fit16 = __ballot_sync(kAll, mine.kind == 0 || (wordy && mine.bytes <= 16 * U * kUnit));
        }
        for (int j = 0; j < count;) {
            const int left = count - j;
            if (kGroups && left >= 8 && ((fit4 >> j) & 0xffu) == 0xffu) {
                copy_rows<4, U, kStream>(mine, j, lane);
                j += 8;
            } else if (kGroups && left >= 4 && ((fit8 >> j) & 0xfu) == 0xfu) {
                copy_rows<8, U, kStream>(mine, j, lane);
                j += 4;
            } else if (kGroups && left >= 2 && ((fit16 >> j) & 0x3u) == 0x3u) {
                copy_rows<16, U, kStream>(mine, j, lane);
                j += 2;
            } else if ((word_rows >> j) & 1u) {
                copy_rows<32, U, kStream>(mine, j, lane);
                j += 1;
            } else { /* not whole words (fields of 1 or 2 bytes, odd places): halfwords or bytes, kept lean */
                const GroupPiece p = piece_of_lane(mine, j);
                if (((reinterpret_cast<uintptr_t>(p.dst) ^ reinterpret_cast<uintptr_t>(p.src)) & 1u) == 0)
                    dcp_gpu::copy_aligned<unsigned short, 4, 32, kStream>(p.dst, p.src, p.bytes, lane, 32);
                else
                    for (int64_t q = lane; q < p.bytes; q += 32) p.dst[q] = p.src[q];
                j += 1;
            }
        }
        if (count < 32) break;
    }
}

struct FieldTotals {
    int64_t bytes[DCP_SEGMENT_MAX_FIELDS + 1]; /* where each field starts in the byte-weighted sequence; [n] = all */
};

/* The range's end as (field, element): the element whose first byte is at or past `at`. */
__device__ __forceinline__ void locate(const FieldTotals &ft, const Fields &fields, int32_t nf, int64_t at, int32_t *field,
                                       int64_t *element)
{
    int32_t f = 0;
    while (f < nf - 1 && at >= ft.bytes[f + 1]) f++;
    const int64_t e = fields.f[f].elem;
    *field = f;
    *element = (at - ft.bytes[f] + e - 1) / e;
}

template <int U, bool kStream, bool kGroups, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
persistent_pack_kernel(Table t, Fields fields, int32_t nf, FieldTotals ft, int64_t total)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * kWarps, w = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    const int64_t all = ft.bytes[nf];
    /* this warp's share of the bytes: [all * w / W, all * (w + 1) / W), as whole elements */
    const int64_t b0 = (int64_t)((__int128)all * w / warps), b1 = (int64_t)((__int128)all * (w + 1) / warps);
    int32_t f0, f1;
    int64_t e0, e1;
    locate(ft, fields, nf, b0, &f0, &e0);
    locate(ft, fields, nf, b1, &f1, &e1);
    for (int32_t f = f0; f <= f1 && f < nf; f++) {
        const int64_t a = f == f0 ? e0 : 0, b = f == f1 ? e1 : total;
        if (a < b) warp_range<U, kStream, kGroups>(t, fields.f[f], a, b > total ? total : b, lane);
    }
}

template <int U, bool kStream, bool kGroups, int kMinBlocks>
int launch_persistent(const Table &t, const Fields &fields, int32_t num_fields, int64_t total, void *stream)
{
    FieldTotals ft;
    int64_t at = 0;
    for (int32_t f = 0; f < num_fields; f++) {
        ft.bytes[f] = at;
        at += total * fields.f[f].elem;
    }
    ft.bytes[num_fields] = at;
    /* blocks a multiprocessor holds: a property of the build and the architecture, asked once */
    static std::atomic<int> resident{0};
    int device = 0, sms = 0, per_sm = resident.load(std::memory_order_relaxed);
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess && per_sm == 0) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_pack_kernel<U, kStream, kGroups, kMinBlocks>,
                                                          kThreads, 0);
        if (e == cudaSuccess) resident.store(per_sm, std::memory_order_relaxed);
    }
    if (e != cudaSuccess) return (int)e;
    /* no more warps than there are 512-byte shares of the work */
    int64_t blocks = (int64_t)sms * (per_sm > 0 ? per_sm : 1), useful = (at / 512 + kWarps - 1) / kWarps;
    if (useful < 1) useful = 1;
    if (blocks > useful) blocks = useful;
    persistent_pack_kernel<U, kStream, kGroups, kMinBlocks>
        <<<(unsigned int)blocks, kThreads, 0, (cudaStream_t)stream>>>(t, fields, num_fields, ft, total);
    return (int)cudaGetLastError();
}

/*
 * variant 0 = the library's choice: the persistent kernel, 8 16-byte units in
 * flight a lane, short pieces in groups, 2 blocks of 256 threads a
 * multiprocessor at least.  Measured on H100 (bench/c/bench_gpu.c, docs/gpu.md).
 * Other variants, for measurements:
 *   200, 202, 203  the persistent kernel: 200 as 0; 202 4 units in flight; 203
 *             no groups (each piece the whole warp's).  (Measured and dropped:
 *             streaming cache hints, 16 units with 1 block, register caps for 3
 *             or 4 blocks: docs/gpu.md.)
 *   8200      the former choice: tiles of 8192 elements a warp, 8 16-byte loads
 *             in flight a thread where source and destination agree modulo 16,
 *             under a register cap that keeps 2 blocks on a multiprocessor;
 *   4096, 8192, 16384  that tile kernel with 4 loads in flight, 1 block; 4097
 *             4096 with streaming hints; 4102 4096 with 16-byte units
 *             assembled from word-aligned sources, 3 blocks.
 */
int launch(const Table &t, const Fields &fields, int32_t num_fields, int64_t total, void *stream, int64_t variant = 0)
{
    if (t.n <= 0 || total <= 0 || num_fields <= 0) return (int)cudaSuccess;
    if (num_fields > DCP_SEGMENT_MAX_FIELDS) return (int)cudaErrorInvalidValue;
    switch (variant) {
    case 200: return launch_persistent<8, false, true, 2>(t, fields, num_fields, total, stream);
    case 202: return launch_persistent<4, false, true, 2>(t, fields, num_fields, total, stream);
    case 203: return launch_persistent<8, false, false, 2>(t, fields, num_fields, total, stream);
    case 4096: return launch_tile<4096, false, false, 1>(t, fields, num_fields, total, stream);
    case 4096 + 1: return launch_tile<4096, true, false, 1>(t, fields, num_fields, total, stream);
    case 4096 + 6: return launch_tile<4096, false, true, 3>(t, fields, num_fields, total, stream);
    case 8192: return launch_tile<8192, false, false, 1>(t, fields, num_fields, total, stream);
    case 8200: return launch_tile<8192, false, false, 2, 8>(t, fields, num_fields, total, stream);
    case 16384: return launch_tile<16384, false, false, 1>(t, fields, num_fields, total, stream);
    default: return launch_persistent<8, false, true, 2>(t, fields, num_fields, total, stream);
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

extern "C" int dcp__segment_table_pack_tile_cuda(const dcp__segment_table *table, int64_t total,
                                                const dcp__segment_field *fields, int32_t num_fields, int64_t variant,
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

extern "C" int dcp__segment_table_pack_cuda(const dcp__segment_table *table, int64_t total, const dcp__segment_field *fields,
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

extern "C" int dcp__pack_cuda(const dcp__pack_layout *layout, const int64_t *work_offset, int64_t total,
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

extern "C" int dcp__padding_mask_from_layout_cuda(const dcp__pack_layout *layout, const int64_t *work_offset,
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
