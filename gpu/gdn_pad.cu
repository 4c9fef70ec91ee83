/*
 * gdn_pad.cu - GDN causal-conv padding (twin: dcp_gdn_pad, core/model/gdn_pad.c):
 * one launch copies the real rows (unless padding in place), zeroes the pad
 * rows and writes cu_seqlens with the last entry grown by the pad.
 */
#include "kernels.h"
#include "copy.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void gdn_pad_kernel(const unsigned char *in, unsigned char *out, int64_t copy_bytes, int64_t zero_start,
                               int64_t zero_bytes, const int32_t *cu, int32_t num_cu, int32_t *out_cu, int32_t pad)
{
    const int64_t index = dcp_gpu::grid_index(), count = dcp_gpu::grid_count();
    if (copy_bytes > 0) dcp_gpu::copy_bytes<0>(out, in, copy_bytes, index, count);
    if (zero_bytes > 0) dcp_gpu::fill_bytes(out + zero_start, 0, zero_bytes, index, count);
    if (cu) {
        if (out_cu != cu)
            for (int64_t k = index; k < num_cu - 1; k += count) out_cu[k] = cu[k];
        if (index == 0) out_cu[num_cu - 1] = cu[num_cu - 1] + pad;
    }
}

} // namespace

extern "C" int dcp__gdn_pad_kernel_cuda(const void *in, int64_t rows, int64_t pad_rows, size_t row_bytes, const int32_t *cu,
                                       int32_t num_cu, void *out, int32_t *out_cu, void *stream)
{
    int64_t copy = (out == in) ? 0 : rows * (int64_t)row_bytes, zero = pad_rows * (int64_t)row_bytes;
    if (copy == 0 && zero == 0 && !cu) return (int)cudaSuccess;
    int64_t units = (copy > zero ? copy : zero) / 16 + 1;
    gdn_pad_kernel<<<dcp_gpu::grid_blocks(units, kThreads, 4096), kThreads, 0, (cudaStream_t)stream>>>(
        static_cast<const unsigned char *>(in), static_cast<unsigned char *>(out), copy, rows * (int64_t)row_bytes, zero,
        cu, num_cu, out_cu, (int32_t)pad_rows);
    return (int)cudaGetLastError();
}
