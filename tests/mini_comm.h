/*
 * mini_comm.h - a minimal in-process communicator for tests of helpers that
 * exchange data (the MTP roll): ranks are threads, every collective posts
 * its buffers and meets at a barrier twice.  Only what those tests use is
 * implemented: all-to-all-v and agree; the rest report DCP_ERR_UNSUPPORTED.
 * Header-only; include it from one test file.
 */
#ifndef DCP_MINI_COMM_H
#define DCP_MINI_COMM_H

#include "dcpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct mini_group {
    int32_t size;
    pthread_barrier_t barrier;
    const unsigned char **send;
    const size_t **send_bytes, **send_offsets;
    dcp_status *status;
} mini_group;

static mini_group *mini_group_create(int32_t size)
{
    mini_group *g = (mini_group *)calloc(1, sizeof *g);
    g->size = size;
    pthread_barrier_init(&g->barrier, NULL, (unsigned)size);
    g->send = (const unsigned char **)calloc((size_t)size, sizeof *g->send);
    g->send_bytes = (const size_t **)calloc((size_t)size, sizeof *g->send_bytes);
    g->send_offsets = (const size_t **)calloc((size_t)size, sizeof *g->send_offsets);
    g->status = (dcp_status *)calloc((size_t)size, sizeof *g->status);
    return g;
}

static void mini_group_destroy(mini_group *g)
{
    pthread_barrier_destroy(&g->barrier);
    free(g->send), free(g->send_bytes), free(g->send_offsets), free(g->status), free(g);
}

static dcp_status mini_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                                 void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    mini_group *g = (mini_group *)comm->impl;
    const int32_t me = comm->rank;
    g->send[me] = (const unsigned char *)send;
    g->send_bytes[me] = send_bytes;
    g->send_offsets[me] = send_offsets;
    pthread_barrier_wait(&g->barrier);
    dcp_status s = DCP_OK;
    for (int32_t p = 0; p < g->size; p++) {
        if (!recv_bytes[p]) continue;
        if (g->send_bytes[p][me] != recv_bytes[p]) s = DCP_ERR_COMM;
        else memcpy((unsigned char *)recv + recv_offsets[p], g->send[p] + g->send_offsets[p][me], recv_bytes[p]);
    }
    pthread_barrier_wait(&g->barrier);
    return s;
}

static dcp_status mini_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed)
{
    mini_group *g = (mini_group *)comm->impl;
    g->status[comm->rank] = local;
    pthread_barrier_wait(&g->barrier);
    *agreed = DCP_OK;
    *failed = -1;
    for (int32_t p = 0; p < g->size; p++)
        if (g->status[p] != DCP_OK) {
            *agreed = g->status[p];
            *failed = p;
            break;
        }
    pthread_barrier_wait(&g->barrier);
    return DCP_OK;
}

static dcp_status mini_allgather(dcp_comm *c, const void *s, size_t b, void *r)
{
    (void)c, (void)s, (void)b, (void)r;
    return DCP_ERR_UNSUPPORTED;
}
static dcp_status mini_allgatherv(dcp_comm *c, const void *s, size_t sb, void *r, const size_t *rb, const size_t *ro)
{
    (void)c, (void)s, (void)sb, (void)r, (void)rb, (void)ro;
    return DCP_ERR_UNSUPPORTED;
}
static dcp_status mini_broadcast(dcp_comm *c, void *b, size_t n, int32_t root)
{
    (void)c, (void)b, (void)n, (void)root;
    return DCP_ERR_UNSUPPORTED;
}

static const dcp_comm_ops mini_ops = {mini_allgather, mini_allgatherv, mini_alltoallv, mini_broadcast, mini_agree};

static void mini_comm(mini_group *g, int32_t rank, dcp_comm *comm)
{
    comm->ops = &mini_ops;
    comm->rank = rank;
    comm->size = g->size;
    comm->impl = g;
}

#endif
