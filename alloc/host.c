/*
 * host.c - small host objects made at init (see host.h).  The workspace
 * block lives in host_block_jemalloc.c or host_block_libc.c, whichever the
 * build picks.
 */
#include "host.h"

#include <stdlib.h>

void *dcp__host_calloc(size_t count, size_t size) { return calloc(count, size); }

void dcp__host_free(void *memory) { free(memory); }
