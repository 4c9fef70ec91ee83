/* device_none.c - device.h in builds without CUDA: no device, every allocation fails. */
#include "device.h"

enum { NO_DEVICE = 100 }; /* cudaErrorNoDevice's value, so a message reads the same */

int dcp__device_alloc(void **memory, size_t bytes)
{
    (void)bytes;
    *memory = NULL;
    return NO_DEVICE;
}

void dcp__device_free(void *memory) { (void)memory; }

int dcp__pinned_alloc(void **memory, size_t bytes)
{
    (void)bytes;
    *memory = NULL;
    return NO_DEVICE;
}

void dcp__pinned_free(void *memory) { (void)memory; }

const char *dcp__device_error_string(int code)
{
    (void)code;
    return "built without CUDA";
}
