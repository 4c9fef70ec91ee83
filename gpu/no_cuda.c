/*
 * no_cuda.c - the CUDA entry points in builds without CUDA: no device, every
 * device call reports DCP_ERR_UNSUPPORTED, and a context never gets a CUDA
 * mover (it steps on the host).
 */
#include "dcpack.h"
#include "mover_cuda.h"


int32_t dcp_cuda_device_count(void) { return 0; }

dcp_status dcp_mtp_roll_cuda(dcp_comm *comm, uint64_t step_id, int32_t first, int32_t cp, dcp_cp_partition partition,
                             const int32_t *cu, int32_t num_cu,
                             int64_t num_tokens, const void *const *fields, void *const *out, const size_t *elem_size,
                             int32_t num_fields, void *exchange, void *host_scratch, void *stream)
{
    (void)comm, (void)step_id, (void)partition, (void)first, (void)cp, (void)cu, (void)num_cu, (void)num_tokens, (void)fields, (void)out;
    (void)elem_size, (void)num_fields, (void)exchange, (void)host_scratch, (void)stream;
    return DCP_ERR_UNSUPPORTED;
}

dcp_status dcp_gdn_pad_cuda(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, const int32_t *cu,
                            int32_t num_cu, void *out, int64_t capacity, int32_t *out_cu, void *stream)
{
    (void)in, (void)rows, (void)row_bytes, (void)alignment, (void)cu, (void)num_cu, (void)out, (void)capacity;
    (void)out_cu, (void)stream;
    return DCP_ERR_UNSUPPORTED;
}

dcp_status dcp_gdn_strip_cuda(const void *padded, int64_t rows, size_t row_bytes, void *out, void *stream)
{
    (void)padded, (void)rows, (void)row_bytes, (void)out, (void)stream;
    return DCP_ERR_UNSUPPORTED;
}

dcp_status dcp__mover_cuda_workspace_size(const dcp__mover_sizes *z, size_t *device_bytes, size_t *host_bytes)
{
    (void)z, (void)device_bytes, (void)host_bytes;
    return DCP_ERR_UNSUPPORTED;
}

dcp_status dcp__mover_cuda_create(dcp__mover *m, const dcp__mover_sizes *z, void *device_memory, size_t device_bytes,
                                  void *host_memory, size_t host_bytes, dcp__error *err)
{
    (void)m, (void)z, (void)device_memory, (void)device_bytes, (void)host_memory, (void)host_bytes;
    return dcp__fail(err, DCP_ERR_UNSUPPORTED, "attach_cuda: built without CUDA");
}

const dcp__mover_backend dcp__mover_backend_cuda = {"cuda", dcp__mover_cuda_workspace_size, dcp__mover_cuda_create};
