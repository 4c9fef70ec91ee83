/*
 * dcpack_inproc.h - the in-process communicator: N ranks as threads of one process (tests,
 * CPU-only runs, the `dcpack step` command), with fault injection for tests.
 * Part of the public API: dcpack.h includes it, so including dcpack.h is
 * enough; it includes dcpack.h for the types it uses.
 */
#ifndef DCPACK_INPROC_H
#define DCPACK_INPROC_H

#include "dcpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * In-process backend: one "world" of n ranks that are threads of this
 * process (tests, CPU-only runs, the `dcpack step` command).
 *
 * The k-th collective a rank calls meets the k-th collective of every other
 * rank; every call counts, including one that fails early.  A collective is
 * a rendezvous: ranks announce their buffers and sizes, copy straight from
 * their peers' buffers, and leave once every rank has copied.  It ends in one
 * of three ways, the same on every rank that takes part, early, on time or
 * late: DCP_OK (the data was copied); DCP_ERR_CORRUPT_INPUT (the
 * announcements disagree; nothing is copied); or aborted with the status of
 * the first rank that gave up (its own unusable arguments, an injected fault,
 * or DCP_ERR_TIMEOUT after timeout_ms; nothing is copied).  A rank that
 * arrives after an abort returns the same status at once and its next
 * collective meets its peers' next one, so the world stays usable; a rank
 * more than 64 collectives behind its peers gets DCP_ERR_TIMEOUT.  agree()
 * follows the same rules and names the rank that caused a failure in
 * *failed_rank (-1 when every rank passed DCP_OK).
 * Thread safety: one thread per rank; a second thread calling through a
 * handle whose rank is already inside a collective gets
 * DCP_ERR_INVALID_ARGUMENT at once.  No wait outlives timeout_ms (0 = forever).
 * Allocation: no collective allocates.
 * See docs/step.md#the-in-process-communicator for the outcomes, the
 * timeout clock and agree()'s *failed_rank in full.
 */
typedef struct dcp_inproc_world dcp_inproc_world;

/*
 * Create a world of `size` >= 1 ranks; timeout_ms >= 0 (0 waits forever).
 *
 * Allocation: allocates; not a step operation.
 */
dcp_status dcp_inproc_world_create(int32_t size, int32_t timeout_ms, dcp_inproc_world **world);
/* Release a world no rank is using any more.  NULL is a no-op. */
void dcp_inproc_world_destroy(dcp_inproc_world *world);
/* Fill `comm` (caller storage) with the communicator handle of one rank of the world. */
dcp_status dcp_inproc_comm(dcp_inproc_world *world, int32_t rank, dcp_comm *comm);

/*
 * Run fn(rank, arg) on `size` new threads, one per rank, and join them all.
 *
 * The threads start together: if one cannot be created, none runs fn.
 * Returns: DCP_OK; DCP_ERR_ALLOC (a thread could not be created).
 * Allocation: allocates (thread handles); not a step operation.
 */
dcp_status dcp_inproc_run(int32_t size, void (*fn)(int32_t rank, void *arg), void *arg);

/* Fault injection for tests (in-process backend only); applies to the rank's next collective. */
typedef enum dcp_inproc_fault {
    DCP_FAULT_NONE = 0,         /* clear a pending fault */
    DCP_FAULT_RETURN_ERROR = 1, /* the rank fails locally and aborts the collective: DCP_ERR_COMM on every rank */
    DCP_FAULT_NEVER_ARRIVE = 2, /* the rank returns DCP_ERR_COMM without joining; the others time out
                                   (with timeout_ms = 0 they, and the rank's next collective, wait forever) */
    DCP_FAULT_TRUNCATE = 3      /* the rank provides half the bytes it announces: DCP_ERR_CORRUPT_INPUT
                                   on every rank (a rank with nothing to send truncates nothing) */
} dcp_inproc_fault;

/* Set the fault `rank`'s next collective suffers (DCP_FAULT_NONE clears it); tests only. */
dcp_status dcp_inproc_inject_fault(dcp_inproc_world *world, int32_t rank, dcp_inproc_fault fault);

#ifdef __cplusplus
}
#endif

#endif /* DCPACK_INPROC_H */
