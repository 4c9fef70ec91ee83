/*
 * fuzz_common.h - helpers shared by the libFuzzer targets.
 *
 * A target turns its bytes into a configuration and inputs with a byte
 * reader that never fails (reads past the end give zeros), runs the public
 * API, and calls DCP_FUZZ_ASSERT on every property it checks: a broken
 * property prints what broke and traps, which libFuzzer reports as a crash
 * with the input saved.
 */
#ifndef DCP_FUZZ_COMMON_H
#define DCP_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dcpack.h"

#define DCP_FUZZ_ASSERT(cond, ...)                                                                         \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                                  \
            fputc('\n', stderr);                                                                           \
            __builtin_trap();                                                                              \
        }                                                                                                  \
    } while (0)

typedef struct fuzz_reader {
    const uint8_t *data;
    size_t size;
    size_t pos;
} fuzz_reader;

static inline void fuzz_reader_init(fuzz_reader *r, const uint8_t *data, size_t size)
{
    r->data = data;
    r->size = size;
    r->pos = 0;
}

static inline size_t fuzz_remaining(const fuzz_reader *r) { return r->size - r->pos; }

static inline uint8_t fuzz_u8(fuzz_reader *r) { return r->pos < r->size ? r->data[r->pos++] : 0; }

static inline uint16_t fuzz_u16(fuzz_reader *r)
{
    uint16_t lo = fuzz_u8(r);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(r) << 8);
}

static inline uint32_t fuzz_u24(fuzz_reader *r)
{
    uint32_t v = fuzz_u16(r);
    return v | (uint32_t)fuzz_u8(r) << 16;
}

static inline uint32_t fuzz_u32(fuzz_reader *r)
{
    uint32_t v = fuzz_u16(r);
    return v | (uint32_t)fuzz_u16(r) << 16;
}

/* The statuses a planning call may return for bad input (anything else is a bug). */
static inline int fuzz_is_input_error(dcp_status st)
{
    return st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_CAPACITY || st == DCP_ERR_BAD_LENGTH ||
           st == DCP_ERR_INFEASIBLE;
}

/*
 * Whether a scheduler is built: a placeholder answers DCP_ERR_UNSUPPORTED even
 * for a trivial batch.  Targets tolerate UNSUPPORTED only from those.
 */
static inline int fuzz_scheduler_built(dcp_scheduler scheduler)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = scheduler;
    c.data_parallel_size = 2;
    c.max_sequences = 16;
    c.max_seqlen_per_rank = 16;
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return 0;
    const int32_t lengths[4] = {3, 5, 7, 9};
    const dcp_plan *plan;
    int built = dcp_plan_compute(ctx, lengths, 4, &plan) != DCP_ERR_UNSUPPORTED;
    if (!built)
        fprintf(stderr, "fuzz: scheduler %s not built yet (%s); skipped\n", dcp_scheduler_name(scheduler),
                dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
    return built;
}

/*
 * A one-rank communicator: every collective is a local copy and the error
 * agreement returns the rank's own status.  Enough to drive the gather entry
 * points with data_parallel_size = 1 without threads.
 */
static dcp_status fuzz_solo_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    (void)comm;
    if (bytes) memmove(recv, send, bytes);
    return DCP_OK;
}

static dcp_status fuzz_solo_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                                       const size_t *recv_bytes, const size_t *recv_offsets)
{
    (void)comm;
    DCP_FUZZ_ASSERT(recv_bytes[0] == send_bytes, "allgatherv announced %zu bytes, sends %zu", recv_bytes[0],
                    send_bytes);
    if (send_bytes) memmove((char *)recv + recv_offsets[0], send, send_bytes);
    return DCP_OK;
}

static dcp_status fuzz_solo_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes,
                                      const size_t *send_offsets, void *recv, const size_t *recv_bytes,
                                      const size_t *recv_offsets)
{
    (void)comm;
    DCP_FUZZ_ASSERT(recv_bytes[0] == send_bytes[0], "alltoallv: %zu bytes sent, %zu expected", send_bytes[0],
                    recv_bytes[0]);
    if (send_bytes[0]) memmove((char *)recv + recv_offsets[0], (const char *)send + send_offsets[0], send_bytes[0]);
    return DCP_OK;
}

static dcp_status fuzz_solo_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    (void)comm;
    (void)buffer;
    (void)bytes;
    DCP_FUZZ_ASSERT(root == 0, "broadcast from root %d in a one-rank group", root);
    return DCP_OK;
}

static dcp_status fuzz_solo_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    (void)comm;
    *agreed = local;
    *failed_rank = local == DCP_OK ? -1 : 0;
    return DCP_OK;
}

static const dcp_comm_ops fuzz_solo_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), fuzz_solo_allgather, fuzz_solo_allgatherv, fuzz_solo_alltoallv,
    fuzz_solo_broadcast, fuzz_solo_agree, NULL,
};

static inline void fuzz_solo_comm(dcp_comm *comm)
{
    comm->ops = &fuzz_solo_ops;
    comm->rank = 0;
    comm->size = 1;
    comm->impl = NULL;
}

#endif
