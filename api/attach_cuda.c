/*
 * attach_cuda.c - the public entry points that bind gpu/'s CUDA mover to
 * pipeline/'s context.  This layer sits above both: pipeline/ never names a
 * gpu/ backend, it takes one through core/mover.h's dcp__mover_backend table.
 */
#include "dcpack.h"
#include "../gpu/mover_cuda.h"
#include "../pipeline/context.h"

dcp_status dcp_cuda_workspace_size(const dcp_config *c, size_t *device_bytes, size_t *host_bytes)
{
    return dcp__mover_workspace_size(c, &dcp__mover_backend_cuda, device_bytes, host_bytes);
}

dcp_status dcp_context_attach_cuda(dcp_context *ctx, void *device_memory, size_t device_bytes, void *host_memory,
                                   size_t host_bytes)
{
    return dcp__context_attach_mover(ctx, &dcp__mover_backend_cuda, device_memory, device_bytes, host_memory,
                                     host_bytes);
}
