/*
 * mover_cuda.h - the CUDA token mover (gpu/mover_cuda.c; in builds without
 * CUDA gpu/no_cuda.c, whose calls return DCP_ERR_UNSUPPORTED).  Internal.
 *
 * pipeline/ never includes this: it binds a device mover through the
 * backend table (core/mover.h), which api/attach_cuda.c hands it.
 */
#ifndef DCP_MOVER_CUDA_H
#define DCP_MOVER_CUDA_H

#include "../core/mover.h"

/*
 * workspace_size gives the device and pinned bytes; create binds the
 * caller's memory, or allocates what is NULL (alloc/device.h), and turns `m`
 * into a CUDA mover over the same host body.
 */
dcp_status dcp__mover_cuda_workspace_size(const dcp__mover_sizes *z, size_t *device_bytes, size_t *host_bytes);
dcp_status dcp__mover_cuda_create(dcp__mover *m, const dcp__mover_sizes *z, void *device_memory, size_t device_bytes,
                                  void *host_memory, size_t host_bytes, dcp__error *err);

/* The CUDA mover's backend table, {"cuda", workspace_size, create}. */
extern const dcp__mover_backend dcp__mover_backend_cuda;

#endif
