/*
 * device.h - device and pinned host memory, taken only at init.  Internal.
 *
 * device_cuda.c implements these with the CUDA runtime; builds without CUDA
 * compile device_none.c instead, whose calls all fail.  Results are CUDA
 * error codes as ints (0: success), so this layer needs no CUDA header and
 * its callers can name the error (dcp__device_error_string).
 */
#ifndef DCP_ALLOC_DEVICE_H
#define DCP_ALLOC_DEVICE_H

#include <stddef.h>

/* `bytes` of device memory on the current device (cudaMalloc: 256-byte aligned). */
int dcp__device_alloc(void **memory, size_t bytes);
void dcp__device_free(void *memory); /* NULL-safe */

/* `bytes` of page-locked host memory (cudaMallocHost). */
int dcp__pinned_alloc(void **memory, size_t bytes);
void dcp__pinned_free(void *memory); /* NULL-safe */

/* The text of an error code these functions returned. */
const char *dcp__device_error_string(int code);

#endif
