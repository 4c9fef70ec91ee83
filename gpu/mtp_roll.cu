/*
 * mtp_roll.cu - the MTP packed-sequence roll's two kernels (twins in
 * core/model/mtp_roll.c): gather each sequence's chunk-first values for the CP
 * neighbours, then roll every slot, one thread per slot, all sequences at
 * once (the reference loops over sequences, one exchange each).
 */
#include "kernels.h"
#include "copy.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void boundary_kernel(const unsigned char *field, int64_t elem, const int32_t *cu, int32_t n, int32_t cp,
                                unsigned char *to_prev, unsigned char *to_next)
{
    for (int64_t k = dcp_gpu::grid_index(); k < n; k += dcp_gpu::grid_count()) {
        int64_t s = cu[k] / cp, c = ((int64_t)cu[k + 1] - cu[k]) / (2 * (int64_t)cp);
        if (c == 0) {
            dcp_gpu::zero_element(to_prev + k * elem, elem);
            dcp_gpu::zero_element(to_next + k * elem, elem);
        } else {
            dcp_gpu::copy_element(to_prev + k * elem, field + s * elem, elem);
            dcp_gpu::copy_element(to_next + k * elem, field + (s + c) * elem, elem);
        }
    }
}

__global__ void apply_kernel(const unsigned char *field, unsigned char *out, int64_t elem, const int32_t *cu,
                             int32_t n, int64_t num_tokens, int32_t cp, int32_t r, const unsigned char *own_to_next,
                             const unsigned char *from_next, const unsigned char *from_prev)
{
    const int64_t tail = (int64_t)(cu[n] / cp);
    for (int64_t j = dcp_gpu::grid_index(); j < num_tokens; j += dcp_gpu::grid_count()) {
        const unsigned char *src = nullptr; /* NULL: zero */
        if (j >= tail) {
            if (j + 1 < num_tokens) src = field + (j + 1) * elem;
        } else {
            int32_t lo = 0, hi = n - 1; /* last sequence whose local start is at or before j */
            while (lo < hi) {
                int32_t mid = (lo + hi + 1) >> 1;
                if ((int64_t)(cu[mid] / cp) <= j) lo = mid;
                else hi = mid - 1;
            }
            const int64_t s = cu[lo] / cp, span = ((int64_t)cu[lo + 1] - cu[lo]) / cp;
            if (cp == 1) {
                if (j + 1 < s + span) src = field + (j + 1) * elem;
            } else {
                const int64_t c = span / 2, off = j - s;
                if (off == c - 1) src = (r == cp - 1 ? own_to_next : from_next) + (int64_t)lo * elem;
                else if (off == 2 * c - 1) src = r == 0 ? nullptr : from_prev + (int64_t)lo * elem;
                else src = field + (j + 1) * elem;
            }
        }
        if (src) dcp_gpu::copy_element(out + j * elem, src, elem);
        else dcp_gpu::zero_element(out + j * elem, elem);
    }
}

} // namespace

extern "C" int dcp__mtp_roll_boundary_cuda(const void *field, size_t elem_size, const int32_t *cu, int32_t n, int32_t cp,
                                          void *to_prev, void *to_next, void *stream)
{
    if (cp == 1 || n <= 0) return (int)cudaSuccess;
    boundary_kernel<<<dcp_gpu::grid_blocks(n, kThreads, 4096), kThreads, 0, (cudaStream_t)stream>>>(
        static_cast<const unsigned char *>(field), (int64_t)elem_size, cu, n, cp, static_cast<unsigned char *>(to_prev),
        static_cast<unsigned char *>(to_next));
    return (int)cudaGetLastError();
}

extern "C" int dcp__mtp_roll_apply_cuda(const void *field, void *out, size_t elem_size, const int32_t *cu, int32_t n,
                                       int64_t num_tokens, int32_t cp, int32_t cp_rank, const void *own_to_next,
                                       const void *from_next, const void *from_prev, void *stream)
{
    if (num_tokens <= 0) return (int)cudaSuccess;
    apply_kernel<<<dcp_gpu::grid_blocks(num_tokens, kThreads, 8192), kThreads, 0, (cudaStream_t)stream>>>(
        static_cast<const unsigned char *>(field), static_cast<unsigned char *>(out), (int64_t)elem_size, cu, n,
        num_tokens, cp, cp_rank, static_cast<const unsigned char *>(own_to_next),
        static_cast<const unsigned char *>(from_next), static_cast<const unsigned char *>(from_prev));
    return (int)cudaGetLastError();
}
