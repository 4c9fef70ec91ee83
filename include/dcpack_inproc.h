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
 * Pairing.  The k-th collective a rank calls meets the k-th collective of
 * every other rank; every call counts, including one that fails early.
 * Each collective is a rendezvous: a rank announces its buffers and sizes,
 * waits until all ranks have announced, copies what it receives straight
 * from its peers' buffers, and leaves once every rank has copied (so no send
 * buffer is reused while a peer still reads it).  No collective allocates.
 *
 * Outcome.  A collective ends in exactly one of three ways, and every rank
 * that takes part in it, early, on time or late, returns the same status:
 *  - DCP_OK: all ranks announced consistent sizes; the data was copied.
 *  - DCP_ERR_CORRUPT_INPUT: all ranks announced, but the announcements
 *    disagree: a different operation, allgather bytes that differ,
 *    allgatherv recv_bytes[r] != what r sends, alltoallv send_bytes[p] on r !=
 *    recv_bytes[r] on p, broadcast bytes or root that differ, a root outside
 *    [0, size), or a sender that provides fewer bytes than it announced
 *    (DCP_FAULT_TRUNCATE).  Nothing is copied.
 *  - aborted: before all ranks announced, one rank gave up and every rank
 *    gets that rank's status.  A rank gives up when its own arguments are
 *    unusable (DCP_ERR_NULL_POINTER, DCP_ERR_OVERFLOW), when it is told to
 *    fail (DCP_FAULT_RETURN_ERROR: DCP_ERR_COMM), or when it has waited
 *    timeout_ms for its peers (DCP_ERR_TIMEOUT).  The first rank to give up
 *    decides; nothing is copied.  Ranks waiting in the collective wake at
 *    once; a rank that arrives after the abort returns the same status at
 *    once instead of waiting (whatever its own arguments or fault), and its
 *    next collective meets its peers' next one, so the world stays usable.  A rank more than 64 collectives behind
 *    its peers finds the outcome forgotten and gets DCP_ERR_TIMEOUT.
 *
 * Timeouts.  A waiting rank's clock runs from the later of its own call and
 * the moment the world finished its previous collective; after timeout_ms
 * the rank aborts the collective the world is assembling with
 * DCP_ERR_TIMEOUT.  Normally that is the rank's own collective, and the
 * ranks missing from it are those that have not called it yet.  A rank that
 * got ahead (DCP_FAULT_NEVER_ARRIVE: it skipped a collective without joining)
 * waits until the world has finished the collective it skipped; its clock
 * restarts whenever the world moves on, and if its time runs out first it
 * aborts the skipped collective itself.  timeout_ms = 0 waits forever.  Once
 * all ranks have announced, nothing times out: copies always finish.
 *
 * One thread per rank.  A rank's handle is used by one thread at a time: a
 * second thread that calls a collective through a handle whose rank is
 * already inside one (a caller bug, e.g. rank 1 took rank 0's handle) gets
 * DCP_ERR_INVALID_ARGUMENT at once without taking part, and describe_failure
 * says so; the first thread goes on and, missing the real rank, times out.
 * No wait outlives timeout_ms.
 *
 * agree() follows the same rules: it returns DCP_OK with the agreed status
 * when all ranks took part, otherwise the collective's failure status, which
 * it also writes to *agreed, with the rank that caused it in *failed_rank
 * (a rank that gave up: itself; a timeout: the lowest-numbered rank that had
 * not called the collective, or the rank that had skipped it, when its time
 * ran out first; DCP_ERR_CORRUPT_INPUT: the lowest-numbered rank in a
 * disagreement, or the rank that truncated; DCP_FAULT_NEVER_ARRIVE on the
 * faulty rank itself: itself).
 * *failed_rank is -1 when every rank passed DCP_OK.
 */
typedef struct dcp_inproc_world dcp_inproc_world;

/* Create a world of `size` >= 1 ranks (allocates; not a step operation); timeout_ms >= 0. */
dcp_status dcp_inproc_world_create(int32_t size, int32_t timeout_ms, dcp_inproc_world **world);
/* Release a world no rank is using any more.  NULL is a no-op. */
void dcp_inproc_world_destroy(dcp_inproc_world *world);
/* The communicator handle of one rank of the world; `comm` is caller storage. */
dcp_status dcp_inproc_comm(dcp_inproc_world *world, int32_t rank, dcp_comm *comm);

/*
 * Run fn(rank, arg) on `size` new threads, one per rank, and join them all.
 * The threads start together: if one cannot be created, none runs fn and
 * DCP_ERR_ALLOC is returned.  Allocates (thread handles); not a step operation.
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
dcp_status dcp_inproc_inject_fault(dcp_inproc_world *world, int32_t rank, dcp_inproc_fault fault);

#ifdef __cplusplus
}
#endif

#endif /* DCPACK_INPROC_H */
