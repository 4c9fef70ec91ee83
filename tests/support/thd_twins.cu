/*
 * thd_twins.cu - THD metadata and element-wise kernels the tests run (see
 * thd_twins.h): the cu_seqlens scan and the THD-padded cu_seqlens, the
 * reference's padding mask, pad-slot sanitising, and CP slicing (as
 * segments, or directly per slot).  Twins: thd_twins_cpu.c and
 * core/thd/thd.c.  Integer arithmetic throughout, so equality is exact.
 */
#include "thd_twins.h"
#include "../../gpu/copy.cuh"

namespace {

constexpr int kScanThreads = 1024;
constexpr int kThreads = 256;

/* Inclusive sum over the block of two int32 values per thread, and the block max of a third. */
struct ScanShared {
    int32_t a[kScanThreads / 32], b[kScanThreads / 32], m[kScanThreads / 32];
};

__device__ void block_scan(int32_t &a, int32_t &b, int32_t &m, ScanShared &sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int d = 1; d < 32; d <<= 1) {
        int32_t ua = __shfl_up_sync(0xffffffffu, a, d), ub = __shfl_up_sync(0xffffffffu, b, d);
        int32_t om = __shfl_xor_sync(0xffffffffu, m, d);
        if (lane >= d) a += ua, b += ub;
        m = m > om ? m : om;
    }
    if (lane == 31) sh.a[warp] = a, sh.b[warp] = b;
    if (lane == 0) sh.m[warp] = m;
    __syncthreads();
    if (warp == 0) {
        int32_t wa = lane < warps ? sh.a[lane] : 0, wb = lane < warps ? sh.b[lane] : 0;
        int32_t wm = lane < warps ? sh.m[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            int32_t ua = __shfl_up_sync(0xffffffffu, wa, d), ub = __shfl_up_sync(0xffffffffu, wb, d);
            int32_t om = __shfl_xor_sync(0xffffffffu, wm, d);
            if (lane >= d) wa += ua, wb += ub;
            wm = wm > om ? wm : om;
        }
        if (lane < warps) sh.a[lane] = wa, sh.b[lane] = wb;
        if (lane == 0) sh.m[0] = wm;
    }
    __syncthreads();
    if (warp > 0) a += sh.a[warp - 1], b += sh.b[warp - 1];
    m = sh.m[0];
}

/*
 * One block: cu[k+1] = cu[k] + original[k], cup[k+1] = cup[k] + padded[k];
 * then, when `entries` > 0, the THD fix-ups of dcp__thd_cu_seqlens_write.
 */
__global__ void __launch_bounds__(kScanThreads)
    cu_seqlens_kernel(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu, int32_t *cup,
                      int32_t *max_seqlen, int32_t last_padded_end, int32_t dummy, int32_t entries)
{
    __shared__ ScanShared sh;
    const int32_t per = (n + (int32_t)blockDim.x - 1) / (int32_t)blockDim.x;
    const int32_t lo = min(n, (int32_t)threadIdx.x * per), hi = min(n, lo + per);
    int32_t so = 0, sp = 0, m = 0;
    for (int32_t i = lo; i < hi; i++) {
        so += original[i];
        sp += padded[i];
        m = padded[i] > m ? padded[i] : m;
    }
    int32_t io = so, ip = sp;
    block_scan(io, ip, m, sh);
    int32_t co = io - so, cq = ip - sp; /* exclusive */
    for (int32_t i = lo; i < hi; i++) {
        co += original[i];
        cq += padded[i];
        cu[i + 1] = co;
        cup[i + 1] = cq;
    }
    if (threadIdx.x == 0) {
        cu[0] = 0;
        cup[0] = 0;
        if (max_seqlen) *max_seqlen = m;
    }
    if (entries <= 0) return;
    __syncthreads();
    __shared__ int32_t used_shared;
    if (threadIdx.x == 0) {
        cup[n] = last_padded_end;
        int32_t used = n + 1;
        if (dummy > 0) {
            cu[n + 1] = cu[n] + dummy;
            cup[n + 1] = cup[n] + dummy;
            used++;
        }
        used_shared = used;
    }
    __syncthreads();
    const int32_t used = used_shared;
    const int32_t last_cu = cu[used - 1], last_cup = cup[used - 1];
    for (int32_t i = used + threadIdx.x; i < entries; i += blockDim.x) {
        cu[i] = last_cu;
        cup[i] = last_cup;
    }
}

__global__ void thd_padding_mask_kernel(const int32_t *cu, const int32_t *cup, int32_t n, int64_t num_tokens,
                                        uint8_t *mask)
{
    for (int32_t k = blockIdx.x; k < n; k += gridDim.x) {
        int64_t start = cup[k];
        int64_t valid_end = start + (int64_t)(cu[k + 1] - cu[k]);
        if (valid_end > cup[k + 1]) valid_end = cup[k + 1];
        if (valid_end > num_tokens) valid_end = num_tokens;
        for (int64_t x = start + threadIdx.x; x < valid_end; x += blockDim.x) mask[x] = 0;
    }
}

__global__ void sanitize_kernel(const uint8_t *mask, int64_t n, unsigned char *field, int64_t elem)
{
    for (int64_t t = dcp_gpu::grid_index(); t < n; t += dcp_gpu::grid_count())
        if (mask[t]) dcp_gpu::zero_element(field + t * elem, elem);
}

__global__ void __launch_bounds__(kScanThreads)
    cp_slice_layout_kernel(const int32_t *cup, int32_t n, int64_t total, int32_t cp, int32_t r, int zigzag,
                           int64_t *src, int64_t *dst, int64_t *len, int64_t *count)
{
    /* the argument checks of the twin are uniform over the block */
    if (cp < 1 || r < 0 || r >= cp || total < 0) {
        if (threadIdx.x == 0) *count = -1;
        return;
    }
    if (cp == 1 || !zigzag) {
        if (threadIdx.x != 0) return;
        if (cp == 1) {
            src[0] = 0, dst[0] = 0, len[0] = total, *count = 1;
        } else if (total % cp != 0) {
            *count = -1;
        } else {
            int64_t local = total / cp;
            src[0] = (int64_t)r * local, dst[0] = 0, len[0] = local, *count = 1;
        }
        return;
    }
    if (total != cup[n]) {
        if (threadIdx.x == 0) *count = -1;
        return;
    }
    int bad = 0;
    const int64_t two_cp = 2 * (int64_t)cp;
    for (int32_t k = threadIdx.x; k < n; k += blockDim.x) {
        int64_t span = (int64_t)cup[k + 1] - cup[k];
        if (span < 0 || span % two_cp != 0 || cup[k] % two_cp != 0) bad = 1;
    }
    if (__syncthreads_or(bad)) {
        if (threadIdx.x == 0) *count = -1;
        return;
    }
    for (int32_t k = threadIdx.x; k < n; k += blockDim.x) {
        int64_t start = cup[k], chunk = ((int64_t)cup[k + 1] - start) / two_cp, local = start / cp;
        src[2 * k] = start + (int64_t)r * chunk;
        dst[2 * k] = local;
        len[2 * k] = chunk;
        src[2 * k + 1] = start + (two_cp - 1 - r) * chunk;
        dst[2 * k + 1] = local + chunk;
        len[2 * k + 1] = chunk;
    }
    if (threadIdx.x == 0) *count = 2 * (int64_t)n;
}

/* Last k in [0, n) with cup[k] / cp <= j (cup non-decreasing). */
__device__ __forceinline__ int32_t sequence_of(const int32_t *cup, int32_t n, int32_t cp, int64_t j)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) >> 1;
        if ((int64_t)(cup[mid] / cp) <= j) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__global__ void cp_slice_kernel(const unsigned char *packed, int32_t n, const int32_t *cup, int64_t total, int32_t cp,
                                int32_t r, int zigzag, unsigned char *out, int64_t elem)
{
    const int64_t local = total / cp;
    for (int64_t j = dcp_gpu::grid_index(); j < local; j += dcp_gpu::grid_count()) {
        int64_t source;
        if (cp == 1) {
            source = j;
        } else if (!zigzag) {
            source = (int64_t)r * local + j;
        } else {
            int32_t k = sequence_of(cup, n, cp, j);
            int64_t start = cup[k], chunk = ((int64_t)cup[k + 1] - start) / (2 * (int64_t)cp), off = j - start / cp;
            source = off < chunk ? start + (int64_t)r * chunk + off
                                 : start + (2 * (int64_t)cp - 1 - r) * chunk + (off - chunk);
        }
        dcp_gpu::copy_element(out + j * elem, packed + source * elem, elem);
    }
}

} // namespace

extern "C" int dcp__cu_seqlens_cuda(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu_seqlens,
                                   int32_t *cu_seqlens_padded, int32_t *max_seqlen, void *stream)
{
    if (n < 0) return (int)cudaErrorInvalidValue;
    cu_seqlens_kernel<<<1, kScanThreads, 0, (cudaStream_t)stream>>>(original, padded, n, cu_seqlens, cu_seqlens_padded,
                                                                    max_seqlen, 0, 0, 0);
    return (int)cudaGetLastError();
}

extern "C" int dcp__thd_cu_seqlens_write_cuda(const dcp__thd_geometry *g, const int32_t *original, const int32_t *padded,
                                             int32_t n, int32_t *cu_seqlens, int32_t *cu_seqlens_padded, void *stream)
{
    if (n < 0 || g->num_cu_seqlens < n + 1) return (int)cudaErrorInvalidValue;
    cu_seqlens_kernel<<<1, kScanThreads, 0, (cudaStream_t)stream>>>(original, padded, n, cu_seqlens, cu_seqlens_padded,
                                                                    nullptr, g->last_padded_end, g->dummy_length,
                                                                    g->num_cu_seqlens);
    return (int)cudaGetLastError();
}

extern "C" int dcp__thd_padding_mask_cuda(const int32_t *cu, const int32_t *cup, int32_t n, int64_t num_tokens,
                                         uint8_t *mask, void *stream)
{
    if (num_tokens <= 0) return (int)cudaSuccess;
    cudaError_t e = cudaMemsetAsync(mask, 1, (size_t)num_tokens, (cudaStream_t)stream);
    if (e != cudaSuccess || n <= 0) return (int)e;
    unsigned int blocks = (unsigned int)(n < 65535 ? n : 65535);
    thd_padding_mask_kernel<<<blocks, kThreads, 0, (cudaStream_t)stream>>>(cu, cup, n, num_tokens, mask);
    return (int)cudaGetLastError();
}

extern "C" int dcp__thd_sanitize_cuda(const uint8_t *mask, int64_t num_tokens, void *field, size_t elem_size, void *stream)
{
    if (num_tokens <= 0) return (int)cudaSuccess;
    sanitize_kernel<<<dcp_gpu::grid_blocks(num_tokens, kThreads, 8192), kThreads, 0, (cudaStream_t)stream>>>(
        mask, num_tokens, static_cast<unsigned char *>(field), (int64_t)elem_size);
    return (int)cudaGetLastError();
}

extern "C" int dcp__cp_slice_layout_cuda(const int32_t *cup, int32_t n, int64_t total, int32_t cp, int32_t cp_rank,
                                        dcp_cp_partition partition, int64_t *src_offset, int64_t *dst_offset,
                                        int64_t *length, int64_t *count, void *stream)
{
    if (n < 0) return (int)cudaErrorInvalidValue;
    cp_slice_layout_kernel<<<1, kScanThreads, 0, (cudaStream_t)stream>>>(
        cup, n, total, cp, cp_rank, partition == DCP_CP_ZIGZAG, src_offset, dst_offset, length, count);
    return (int)cudaGetLastError();
}

extern "C" int dcp__cp_slice_cuda(const void *packed, int32_t n, const int32_t *cup, int64_t total, int32_t cp,
                                 int32_t cp_rank, dcp_cp_partition partition, void *out, size_t elem_size, void *stream)
{
    if (cp < 1 || total < 0) return (int)cudaErrorInvalidValue;
    int64_t local = total / cp;
    if (local == 0) return (int)cudaSuccess;
    if (cp > 1 && partition == DCP_CP_ZIGZAG && n < 1) return (int)cudaErrorInvalidValue;
    cp_slice_kernel<<<dcp_gpu::grid_blocks(local, kThreads, 8192), kThreads, 0, (cudaStream_t)stream>>>(
        static_cast<const unsigned char *>(packed), n, cup, total, cp, cp_rank, partition == DCP_CP_ZIGZAG,
        static_cast<unsigned char *>(out), (int64_t)elem_size);
    return (int)cudaGetLastError();
}
