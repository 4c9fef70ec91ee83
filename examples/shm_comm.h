/*
 * shm_comm.h - a dcp_comm backend between processes of one host, over POSIX
 * shared memory (docs/examples.md, "The shared-memory communicator").
 *
 * One segment per job holds, for every world rank, a slot (a descriptor of
 * the collective it is in and two counters per communicator) and a data
 * region.  A collective is a rendezvous: each rank copies what it sends into
 * its own region and announces its descriptor; once every member of the
 * group has announced, each checks the descriptors (the same check on every
 * rank, so every rank reaches the same verdict), copies what it receives out
 * of its peers' regions, says it has done so, and leaves when every member
 * has.  Only the owner writes a slot, so no lock is needed: the counters are
 * C11 atomics and a waiting rank sleeps on a futex over a wake-up counter
 * that every change bumps (a short sleep where there is no futex).  A peer
 * that dies leaves nothing locked behind.
 *
 * Every wait has a deadline (timeout_ms).  When it passes, the waiting rank
 * marks the whole job failed with DCP_ERR_TIMEOUT, naming the rank that did
 * not arrive, and wakes everyone: every pending and later operation of any
 * communicator of the job returns DCP_ERR_TIMEOUT at once (as every
 * communicator of an NCCL job would have to be aborted).  A collective whose
 * descriptors disagree (operation, sizes, root) returns DCP_ERR_CORRUPT_INPUT
 * on every rank; one whose arguments are unusable on some rank (NULL
 * buffers, more bytes than the region holds) returns that rank's status, the
 * lowest such rank's, on every rank.  Neither breaks the job.
 *
 * Communicators are split from the world communicator and from each other
 * with shm_comm_split(), collectively over the parent, as MPI_Comm_split does.
 * Every rank must make the same sequence of splits (a rank left out of a
 * child still takes part): the k-th split names the same communicator on
 * every rank.  At most SHM_COMM_MAX communicators per job.
 *
 * The data regions are host memory: the step's buffers must be host memory
 * (no CUDA workspace).  Creating the job and splitting allocate; operations
 * do not.
 */
#ifndef DCP_EXAMPLE_SHM_COMM_H
#define DCP_EXAMPLE_SHM_COMM_H

#include <dcpack.h>

#include <stddef.h>
#include <stdint.h>

#define SHM_COMM_MAX 32         /* communicators per job, the world included */
#define SHM_COMM_MAX_RANKS 1024 /* world size */

typedef struct shm_job shm_job;

/*
 * Rank 0 creates the segment `name` (a POSIX shared-memory name, "/...": an
 * existing one of that name is replaced) for `world_size` ranks with
 * `region_bytes` of data region each: it creates the name empty, sizes it,
 * sets it up, and only then publishes it (a magic stored with release
 * order).  The others wait, up to `timeout_ms` (0: forever), until the name
 * exists, holds its full size and is published, so they never map a segment
 * rank 0 has not finished.  Errors: DCP_ERR_INVALID_ARGUMENT, DCP_ERR_COMM
 * (the system call's message in `message`), DCP_ERR_INVALID_CONFIG (the
 * segment was made for another world size or region size), DCP_ERR_TIMEOUT
 * (rank 0 did not publish it in time), DCP_ERR_ALLOC.
 */
dcp_status shm_job_open(const char *name, int32_t world_size, int32_t rank, size_t region_bytes, int32_t timeout_ms,
                        shm_job **job, char *message, size_t message_size);
/* Change the deadline of every later wait (e.g. a longer one while the ranks start up); 0 waits forever. */
void shm_job_set_timeout(shm_job *job, int32_t timeout_ms);
/* Remove the segment's name (rank 0, once every rank has opened it); the mapping stays valid. */
void shm_job_unlink(shm_job *job);
/* Unmap the segment and release the job; its communicators must be destroyed first. */
void shm_job_close(shm_job *job);

/* The world communicator of the job; `comm` is caller storage, released with shm_comm_destroy(). */
dcp_status shm_comm_world(shm_job *job, dcp_comm *comm);
/*
 * Collective over `parent`: the ranks passing the same color >= 0 form a
 * child, ordered by key (then parent rank).  color < 0 leaves the rank out
 * (child->ops is then NULL).  Errors: the parent's collective errors,
 * DCP_ERR_CAPACITY (more than SHM_COMM_MAX communicators), DCP_ERR_ALLOC.
 */
dcp_status shm_comm_split(dcp_comm *parent, int32_t color, int32_t key, dcp_comm *child);
/* Message of the communicator's last failure ("" if none). */
const char *shm_comm_last_error(const dcp_comm *comm);
/*
 * Abort: mark the job failed (peers still waiting on this rank wake with
 * DCP_ERR_COMM unless it already failed with a timeout) and release the
 * handle.  The shared-memory counterpart of dcp_nccl_comm_abort().
 */
dcp_status shm_comm_abort(dcp_comm *comm);
/* Release the handle.  NULL and a handle without operations are no-ops. */
void shm_comm_destroy(dcp_comm *comm);

/* The job's failure status (DCP_OK while it works) and its message. */
dcp_status shm_job_failure(const shm_job *job, char *message, size_t message_size);

#endif
