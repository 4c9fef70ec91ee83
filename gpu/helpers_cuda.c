/*
 * helpers_cuda.c - the public device entry points of the model-side helpers
 * (MTP roll, GDN padding): argument checks on the host, then the kernels of
 * gpu/mtp_roll.cu and gpu/gdn_pad.cu on the caller's stream.  Builds
 * without CUDA compile no_cuda.c instead.
 */
#include "dcpack.h"
#include "../core/model/gdn_pad.h"
#include "../core/model/mtp_roll.h"

#include "kernels.h"

#include <cuda_runtime.h>

int32_t dcp_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error for the caller */
        return 0;
    }
    return (int32_t)count;
}

dcp_status dcp_mtp_roll_cuda(dcp_comm *comm, uint64_t step_id, int32_t first, int32_t cp, dcp_cp_partition partition,
                             const int32_t *cu, int32_t num_cu,
                             int64_t num_tokens, const void *const *fields, void *const *out, const size_t *elem_size,
                             int32_t num_fields, void *exchange, void *host_scratch, void *stream)
{
    dcp_status s = cu ? dcp__mtp_roll_check(comm, first, cp, partition, NULL, num_cu, num_tokens, fields, out,
                                           elem_size, num_fields, NULL)
                      : DCP_ERR_NULL_POINTER;
    if (s == DCP_OK && partition == DCP_CP_CONTIGUOUS && cp > 1)
        s = DCP_ERR_UNSUPPORTED; /* the device kernels roll the zigzag layout only: roll on the host */
    if (s == DCP_OK && comm && (!exchange || !host_scratch)) s = DCP_ERR_NULL_POINTER;
    const int32_t n = num_cu - 1, r = comm ? comm->rank - first : 0;
    dcp__mtp_roll_layout l = {0};
    unsigned char *x = (unsigned char *)exchange;
    if (s == DCP_OK) {
        dcp__mtp_roll_layout_compute(n, elem_size, num_fields, &l);
        for (int32_t f = 0; f < num_fields && cp > 1 && s == DCP_OK; f++)
            if (dcp__mtp_roll_boundary_cuda(fields[f], elem_size[f], cu, n, cp, x + l.to_prev + l.field_offset[f],
                                           x + l.to_next + l.field_offset[f], stream) != 0)
                s = DCP_ERR_CUDA;
        /* the exchange may run on another stream: the boundary values must be in place first */
        if (s == DCP_OK && comm && cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess) s = DCP_ERR_CUDA;
    }
    const dcp_status local = s;
    uint64_t call = 0;
    s = dcp__mtp_roll_agree(comm, step_id, partition, local, &call);
    if (s == DCP_OK) s = local;
    if (s != DCP_OK) return s;
    if (comm) {
        s = dcp__mtp_roll_exchange(comm, first, cp, &l, x, (size_t *)host_scratch, NULL);
        if (s != DCP_OK) return s;
    }
    for (int32_t f = 0; f < num_fields; f++) {
        size_t o = l.field_offset[f];
        if (dcp__mtp_roll_apply_cuda(fields[f], out[f], elem_size[f], cu, n, num_tokens, cp, r,
                                    x ? x + l.to_next + o : NULL, x ? x + l.from_next + o : NULL,
                                    x ? x + l.from_prev + o : NULL, stream) != 0)
            return DCP_ERR_CUDA;
    }
    return DCP_OK;
}

dcp_status dcp_gdn_pad_cuda(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, const int32_t *cu,
                            int32_t num_cu, void *out, int64_t capacity, int32_t *out_cu, void *stream)
{
    dcp_status s = dcp__gdn_pad_check(in, rows, row_bytes, alignment, cu != NULL, num_cu, out, capacity, out_cu, NULL);
    if (s != DCP_OK) return s;
    int64_t pad = dcp_gdn_padded_rows(rows, alignment) - rows;
    return dcp__gdn_pad_kernel_cuda(in, rows, pad, row_bytes, cu, cu ? num_cu : 0, out, cu ? out_cu : NULL, stream) == 0
               ? DCP_OK
               : DCP_ERR_CUDA;
}

dcp_status dcp_gdn_strip_cuda(const void *padded, int64_t rows, size_t row_bytes, void *out, void *stream)
{
    if (rows < 0 || row_bytes == 0) return DCP_ERR_INVALID_ARGUMENT;
    if (rows == 0 || out == padded) return DCP_OK;
    if (!padded || !out) return DCP_ERR_NULL_POINTER;
    if ((uint64_t)rows > SIZE_MAX / row_bytes) return DCP_ERR_OVERFLOW;
    return cudaMemcpyAsync(out, padded, (size_t)rows * row_bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream) ==
                   cudaSuccess
               ? DCP_OK
               : DCP_ERR_CUDA;
}
