/* alloc_probe.c - jemalloc per-thread allocation counters for the tests. */
#include "dcp_test.h"

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

int dcp_alloc_probe_available(void)
{
#ifdef DCP_HAVE_JEMALLOC
    uint64_t *p = NULL;
    size_t len = sizeof p;
    return mallctl("thread.allocatedp", &p, &len, NULL, 0) == 0 && p != NULL;
#else
    return 0;
#endif
}

void dcp_alloc_probe_begin(dcp_alloc_probe *probe)
{
    memset(probe, 0, sizeof *probe);
#ifdef DCP_HAVE_JEMALLOC
    size_t len = sizeof probe->allocated;
    if (mallctl("thread.allocatedp", &probe->allocated, &len, NULL, 0) != 0) probe->allocated = NULL;
    len = sizeof probe->deallocated;
    if (mallctl("thread.deallocatedp", &probe->deallocated, &len, NULL, 0) != 0) probe->deallocated = NULL;
    /* read the start values last: mallctl itself must not count */
    probe->allocated_start = probe->allocated ? *probe->allocated : 0;
    probe->deallocated_start = probe->deallocated ? *probe->deallocated : 0;
#endif
}

uint64_t dcp_alloc_probe_allocated(const dcp_alloc_probe *probe)
{
    return probe->allocated ? *probe->allocated - probe->allocated_start : 0;
}

uint64_t dcp_alloc_probe_deallocated(const dcp_alloc_probe *probe)
{
    return probe->deallocated ? *probe->deallocated - probe->deallocated_start : 0;
}
