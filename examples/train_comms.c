/*
 * train_comms.c - the communicators a trainer has: the world, its DPxCP group, its TP group, its
 * dynamic-CP group communicators (and, with --plan-ahead, its DP group), over NCCL or shared memory;
 * and the failure drill, a communicator wrapper that leaves mid-step.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

dcp_comm *cp_group_of(comms *c, int32_t size)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) return dcp_nccl_cp_group(&c->groups, size);
#endif
    for (int32_t i = 0; i < c->cp_count; i++)
        if (c->cp_size[i] == size) return &c->cp_group[i];
    return NULL;
}

const char *comm_error(comms *c, dcp_comm *comm)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) return dcp_nccl_comm_last_error(comm);
#endif
    (void)c;
    return shm_comm_last_error(comm);
}

/* The same blocks dcp_nccl_cp_groups_create() builds: one per power of two up to N, plus the pool when N is not one. */
static dcp_status shm_cp_groups(comms *c, int32_t n)
{
    const int32_t rank = c->dpxcp.rank;
    dcp_status s = DCP_OK;
    for (int32_t size = 1; s == DCP_OK && size <= n; size *= 2) {
        s = shm_comm_split(&c->dpxcp, rank / size, rank % size, &c->cp_group[c->cp_count]);
        c->cp_size[c->cp_count++] = size;
        if (size > n / 2) break;
    }
    if (s == DCP_OK && (n & (n - 1)) != 0) {
        s = shm_comm_split(&c->dpxcp, 0, rank, &c->cp_group[c->cp_count]);
        c->cp_size[c->cp_count++] = n;
    }
    return s;
}

int setup_shm(const options *o, const layout *L, const char *path, const char *job, size_t region_bytes,
                     comms *c)
{
    char name[256], message[256] = "";
    dcp_status s;
    if (L->rank == 0) {
        snprintf(name, sizeof name, "/dcpack-%s-%ld", job, (long)getpid());
        s = shm_job_open(name, L->world, 0, region_bytes, o->init_timeout_ms, &c->shm, message, sizeof message);
        if (s == DCP_OK && !publish(path, job, "shm", name)) s = DCP_ERR_COMM;
    } else {
        if (!await_rendezvous(L->rank, path, job, "shm", name, sizeof name, o->init_timeout_ms)) return 0;
        s = shm_job_open(name, L->world, L->rank, region_bytes, o->init_timeout_ms, &c->shm, message, sizeof message);
    }
    if (s == DCP_OK) s = shm_comm_world(c->shm, &c->world);
    /* DPxCP group of this rank's TP rank and PP stage; TP group of its DPxCP rank and PP stage */
    if (s == DCP_OK) s = shm_comm_split(&c->world, L->pp_rank * L->tp + L->tp_rank, L->dpxcp, &c->dpxcp);
    if (s == DCP_OK && L->tp > 1) s = shm_comm_split(&c->world, L->pp_rank * L->n + L->dpxcp, L->tp_rank, &c->tp);
    if (s == DCP_OK) s = shm_cp_groups(c, L->n);
    /* --plan-ahead: DP group of this rank's CP rank, TP rank and PP stage (the next batch's lengths) */
    if (s == DCP_OK && o->plan_ahead)
        s = shm_comm_split(&c->world, (L->pp_rank * L->tp + L->tp_rank) * L->cp + L->cp_rank, L->dp_rank, &c->dp);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: shared-memory communicators: %s: %s%s\n", L->rank, dcp_status_str(s), message,
                c->world.ops ? shm_comm_last_error(&c->world) : "");
        return 0;
    }
    return 1;
}

#ifdef DCP_EXAMPLE_NCCL
int setup_nccl(const options *o, const layout *L, const char *path, const char *job, size_t staging, comms *c)
{
    int devices = 0;
    cudaError_t ce = cudaGetDeviceCount(&devices);
    if (ce != cudaSuccess || devices < 1) {
        fprintf(stderr, "rank %d: no CUDA device (%s)\n", L->rank, cudaGetErrorString(ce));
        return 0;
    }
    /* LOCAL_RANK's device; modulo the visible ones, for launchers that give each process one GPU */
    const int device = (L->local_rank >= 0 ? L->local_rank : L->rank) % devices;
    if ((ce = cudaSetDevice(device)) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", L->rank, device, cudaGetErrorString(ce));
        return 0;
    }
    ncclUniqueId id;
    char hex[2 * sizeof id.internal + 1];
    if (L->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetErrorString(r));
            return 0;
        }
        for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
        if (!publish(path, job, "nccl", hex)) return 0;
    } else {
        if (!await_rendezvous(L->rank, path, job, "nccl", hex, sizeof hex, o->init_timeout_ms)) return 0;
        for (size_t i = 0; i < sizeof id.internal; i++) {
            unsigned v = 0;
            sscanf(hex + 2 * i, "%2x", &v);
            id.internal[i] = (char)v;
        }
    }
    /*
     * Split children share the world's resources, its abort flag among them: aborting one communicator then
     * stops the kernels of all of them.  After a lost peer several communicators can hold a kernel that waits for
     * it (all on one stream), and freeing device memory waits for every kernel, so aborting them one by one with
     * private flags could wait forever on a kernel of a communicator not aborted yet.
     */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.splitShare = 1;
    config.blocking = 1; /* dcpack's backend makes blocking NCCL calls, whatever NCCL_COMM_BLOCKING says */
    ncclResult_t r = ncclCommInitRankConfig(&c->nccl_world, L->world, id, L->rank, &config);
#else
    ncclResult_t r = ncclCommInitRank(&c->nccl_world, L->world, id, L->rank);
#endif
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", L->rank, ncclGetErrorString(r));
        c->nccl_world = NULL;
        return 0;
    }
    if ((ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaStreamCreate: %s\n", L->rank, cudaGetErrorString(ce));
        return 0;
    }
    dcp_nccl_options opt;
    dcp_nccl_options_default(&opt);
    opt.timeout_ms = o->timeout_ms;
    opt.host_staging_bytes = staging;
    dcp_status s = dcp_nccl_comm_init(&c->world, c->nccl_world, c->stream, &opt);
    if (s == DCP_OK) s = dcp_nccl_comm_split(&c->world, L->pp_rank * L->tp + L->tp_rank, L->dpxcp, &c->dpxcp);
    if (s == DCP_OK && L->tp > 1) s = dcp_nccl_comm_split(&c->world, L->pp_rank * L->n + L->dpxcp, L->tp_rank, &c->tp);
    if (s == DCP_OK) s = dcp_nccl_cp_groups_create(&c->dpxcp, &c->groups);
    if (s == DCP_OK && o->plan_ahead)
        s = dcp_nccl_comm_split(&c->world, (L->pp_rank * L->tp + L->tp_rank) * L->cp + L->cp_rank, L->dp_rank, &c->dp);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: NCCL communicators: %s: %s\n", L->rank, dcp_status_str(s),
                dcp_nccl_comm_last_error(&c->world));
        return 0;
    }
    return 1;
}
#endif

/* What the communicators say about a failure (which peer went missing, NCCL's message). */
void print_comm_failure(comms *c, int32_t rank)
{
    if (c->shm) {
        char message[256];
        if (shm_job_failure(c->shm, message, sizeof message) != DCP_OK)
            fprintf(stderr, "rank %d: shared memory: %s\n", rank, message);
        return;
    }
#ifdef DCP_EXAMPLE_NCCL
    dcp_comm *all[3] = {&c->world, &c->dpxcp, &c->tp};
    const char *names[3] = {"world", "DPxCP", "TP"};
    for (int i = 0; i < 3; i++)
        if (all[i]->ops && dcp_nccl_comm_last_error(all[i])[0])
            fprintf(stderr, "rank %d: NCCL %s communicator: %s\n", rank, names[i], dcp_nccl_comm_last_error(all[i]));
#endif
}

/* After a lost peer: abort every communicator (NCCL: ncclCommAbort; shm: mark the job failed). */
void comms_abort(comms *c)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) {
        for (int32_t i = 0; i < MAX_CP_GROUPS; i++)
            if (c->groups.group[i].ops) dcp_nccl_comm_abort(&c->groups.group[i]);
        memset(&c->groups, 0, sizeof c->groups);
        if (c->dp.ops) dcp_nccl_comm_abort(&c->dp);
        if (c->tp.ops) dcp_nccl_comm_abort(&c->tp);
        if (c->dpxcp.ops) dcp_nccl_comm_abort(&c->dpxcp);
        if (c->world.ops) dcp_nccl_comm_abort(&c->world); /* aborts the world's ncclComm_t too */
        else if (c->nccl_world) ncclCommAbort(c->nccl_world);
        c->nccl_world = NULL;
        if (c->stream) cudaStreamDestroy(c->stream);
        c->stream = NULL;
        return;
    }
#endif
    for (int32_t i = 0; i < c->cp_count; i++)
        if (c->cp_group[i].ops) shm_comm_abort(&c->cp_group[i]);
    if (c->dp.ops) shm_comm_abort(&c->dp);
    if (c->tp.ops) shm_comm_abort(&c->tp);
    if (c->dpxcp.ops) shm_comm_abort(&c->dpxcp);
    if (c->world.ops) shm_comm_abort(&c->world);
    shm_job_close(c->shm);
    c->shm = NULL;
}

void comms_destroy(comms *c)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) {
        dcp_nccl_cp_groups_destroy(&c->groups);
        dcp_nccl_comm_destroy(&c->dp);
        dcp_nccl_comm_destroy(&c->tp);
        dcp_nccl_comm_destroy(&c->dpxcp);
        dcp_nccl_comm_destroy(&c->world);
        if (c->nccl_world) ncclCommDestroy(c->nccl_world);
        c->nccl_world = NULL;
        if (c->stream) cudaStreamDestroy(c->stream);
        c->stream = NULL;
        return;
    }
#endif
    for (int32_t i = 0; i < c->cp_count; i++) shm_comm_destroy(&c->cp_group[i]);
    shm_comm_destroy(&c->dp);
    shm_comm_destroy(&c->tp);
    shm_comm_destroy(&c->dpxcp);
    shm_comm_destroy(&c->world);
    shm_job_close(c->shm);
    c->shm = NULL;
}

/* ------------------------------------------------------------------------ */
/* The failure drill: a communicator wrapper that leaves mid-step            */
/* ------------------------------------------------------------------------ */

drill fate;

static void before_collective(void)
{
    if (!fate.in_step) return;
    if (fate.armed && fate.step == fate.at_step && fate.calls == fate.at_call) {
        fprintf(stderr, "rank %d: leaving before collective %d of step %d (%s)\n", fate.rank, fate.at_call,
                fate.at_step, fate.kill ? "SIGKILL" : "_exit(9)");
        fflush(stdout);
        fflush(stderr);
        if (fate.kill) raise(SIGKILL);
        _exit(RC_DIED);
    }
    fate.calls++;
}

#define INNER(comm) ((dcp_comm *)(comm)->impl)

static dcp_status w_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    before_collective();
    return INNER(comm)->ops->allgather(INNER(comm), send, bytes, recv);
}

static dcp_status w_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                               const size_t *recv_bytes, const size_t *recv_offsets)
{
    before_collective();
    return INNER(comm)->ops->allgatherv(INNER(comm), send, send_bytes, recv, recv_bytes, recv_offsets);
}

static dcp_status w_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                              void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    before_collective();
    return INNER(comm)->ops->alltoallv(INNER(comm), send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
}

static dcp_status w_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    before_collective();
    return INNER(comm)->ops->broadcast(INNER(comm), buffer, bytes, root);
}

static dcp_status w_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    before_collective();
    return INNER(comm)->ops->agree(INNER(comm), local, agreed, failed_rank);
}

static const char *w_describe_failure(dcp_comm *comm)
{
    dcp_comm *inner = INNER(comm);
    return inner->ops->describe_failure ? inner->ops->describe_failure(inner) : "";
}

static const dcp_comm_ops counted_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), w_allgather, w_allgatherv, w_alltoallv, w_broadcast, w_agree,
    w_describe_failure,
};

void counted(dcp_comm *inner, dcp_comm *outer)
{
    memset(outer, 0, sizeof *outer);
    if (!inner->ops) return;
    outer->ops = &counted_ops;
    outer->rank = inner->rank;
    outer->size = inner->size;
    outer->impl = inner;
}
