/*
 * mover.h - the token-mover interface: how a step stages, lands and reads
 * back tokens, whatever memory they live in.  Internal.
 *
 * The step driver (pipeline/step.c) decides which pieces of which sample go
 * to which rank and where each received piece lands; a mover only copies.
 * It is an ops table, like dcp_comm_ops for collectives, so the driver never
 * names a backend:
 *
 *   CPU mover   core/mover_cpu.c   host memory; the CPU twin of the kernels
 *   CUDA mover  gpu/mover_cuda.c   device memory, one segment-kernel launch
 *                                  per copy (gpu/no_cuda.c without CUDA)
 *
 * Both land every token the same way: one segment table (dcp__landing_segments)
 * over two source tables, the peers' blocks of the receive buffer and the
 * caller's samples, so a token this rank keeps goes from its sample straight
 * to its slot and one that travels is copied once into the send buffer and
 * once out of the receive buffer.  The CUDA mover runs that table as one
 * kernel launch, the CPU mover as the kernel's CPU twin, so the step's oracle
 * tests hold for either.  Piece tables are SoA arrays built by the reroute
 * stage, defined once below.
 */
#ifndef DCP_MOVER_H
#define DCP_MOVER_H

#include "dcpack.h"
#include "body.h"
#include "error.h"
#include "../alloc/arena.h"

/*
 * The piece tables: one definition each, written by the reroute stage into
 * its tables (pipeline/stages.h holds them as members) and read by a mover,
 * which takes them const.
 */

/* This rank's outgoing pieces, in exchange order. */
typedef struct dcp__send_pieces {
    int64_t count;
    int32_t *sample; /* the input sample a piece comes from */
    int64_t *src;    /* its first element in that sample */
    int32_t *peer;   /* the receiving rank */
    int64_t *cursor; /* its token offset in that peer's block */
    int64_t *length; /* tokens */
} dcp__send_pieces;

/* This rank's incoming pieces, by destination (increasing, disjoint). */
typedef struct dcp__recv_pieces {
    int64_t count;
    int32_t *sender; /* the sending rank */
    int64_t *cursor; /* token offset in that sender's block */
    int64_t *dst;    /* token offset in the body */
    int64_t *length; /* tokens */
} dcp__recv_pieces;

/*
 * The pieces this rank keeps: its own DP rank's tokens that it computes on,
 * landed from its samples without staging or a self-send.  By destination
 * (increasing, disjoint from each other and from the received pieces).
 */
typedef struct dcp__own_pieces {
    int64_t count;
    int32_t *sample; /* the input sample a piece comes from */
    int64_t *src;    /* its first element in that sample */
    int64_t *dst;    /* token offset in the body */
    int64_t *length; /* tokens */
} dcp__own_pieces;

/*
 * The per-peer blocks of the send and receive buffers.  A peer's block holds
 * each kept field's run of tokens in field order, 8-byte aligned.
 */
typedef struct dcp__exchange_blocks {
    int32_t num_peers;
    const size_t *send_offsets, *recv_offsets; /* [num_peers] bytes */
    const int64_t *tokens_to, *tokens_from;    /* [num_peers] tokens */
    size_t send_total, recv_total;             /* bytes */
} dcp__exchange_blocks;

/*
 * The spans of the caller's samples a rank brings into a step, as the step's
 * gather lists them (capacity max_sequences): span k, one sequence, is
 * pairs[2k] elements of sample[k] from start[k].  The step gathers, routes
 * and digests this one table.
 */
typedef struct dcp__input_spans {
    int32_t count;
    int32_t *sample;         /* the input sample each comes from */
    int64_t *start;          /* its first element in that sample */
    int32_t *pairs;          /* [2 * count]: (padded, original) lengths */
    int64_t tokens;          /* sum of padded lengths */
    int64_t original_tokens; /* sum of original lengths */
} dcp__input_spans;

typedef struct dcp__mover dcp__mover;

typedef struct dcp__mover_ops {
    const char *name;
    /* The send and receive buffers of one exchange (scratch on the host, staging on a device). */
    dcp_status (*buffers)(dcp__mover *m, const dcp__exchange_blocks *x, dcp__arena *scratch, unsigned char **send,
                          unsigned char **recv, dcp__error *err);
    /* Copy the outgoing pieces (never this rank's own) of `kept` fields from the caller's samples into `send`; complete on return. */
    dcp_status (*stage)(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                        const dcp__send_pieces *pieces, const dcp__exchange_blocks *x, unsigned char *send,
                        dcp__arena *scratch, dcp__error *err);
    /*
     * Land the received pieces (from `recv`) and this rank's own pieces (from
     * the samples of `in`) in the body laid out as `b` over `total_tokens`:
     * first the host prefix (rows, cu arrays) where the body is elsewhere, then
     * every piece to its slot, 0 in every other slot of [0, total_tokens), the
     * padding mask 1 where no piece landed; every output byte written once, by
     * one pass over the table of dcp__landing_segments.  Complete on return.
     */
    dcp_status (*land)(dcp__mover *m, void *stream, uint32_t kept, const dcp__recv_pieces *received,
                       const dcp__exchange_blocks *x, const unsigned char *recv, const dcp__own_pieces *own,
                       const dcp_step_input *in, const dcp__body_layout *b, int64_t total_tokens, dcp__arena *scratch,
                       dcp__error *err);
    /* The digest (core/digest.h) of the `kept` fields over the spans, in span order. */
    dcp_status (*digest)(dcp__mover *m, void *stream, const dcp_step_input *in, uint32_t kept,
                         const dcp__input_spans *spans, uint64_t *digest, dcp__error *err);
    /* After a broadcast into body(): the prefix's bytes into the host body (a no-op where they are the same). */
    dcp_status (*read_back)(dcp__mover *m, void *stream, size_t prefix_bytes, dcp__error *err);
    /* Hand back what the mover took at creation; the mover is the CPU one again afterwards. */
    void (*release)(dcp__mover *m);
} dcp__mover_ops;

struct dcp__mover {
    const dcp__mover_ops *ops;
    void *state;               /* the backend's */
    unsigned char *host_body;  /* the host body: rows and cu arrays always (for the CUDA mover only those, in
                                  its pinned block), the fields too for the CPU mover */
    size_t body_capacity;      /* bytes of the body the outputs point into */
    unsigned char *body;       /* where the outputs point: host_body, or device memory */
};

/*
 * The landing table both movers run (core/landing.c): the received and own
 * pieces merged by destination, each preceded by a fill (src_index -1) of the
 * gap before it, and a fill of the tail, so the segments tile [0,
 * total_tokens).  A received piece reads source `sender` at element `cursor`
 * (the peer's run of the field in the receive buffer), an own piece source
 * `num_peers + sample` at element `src` (the sample's buffer of the field).
 * The arrays hold 2 * (received + own) + 1 entries.  Returns the segments
 * written, or -1 when a piece lies before the one landed last (overlap or
 * disorder) or past total_tokens (*bad names it: received i, or own
 * -1 - i).
 */
int64_t dcp__landing_segments(const dcp__recv_pieces *received, const dcp__own_pieces *own, int32_t num_peers,
                              int64_t total_tokens, int32_t *src_index, int64_t *src_offset, int64_t *dst_offset,
                              int64_t *length, int64_t *bad);

/* The error both movers give when dcp__landing_segments refuses: DCP_ERR_INVALID_PLAN naming the piece `bad`. */
dcp_status dcp__landing_refuse(dcp__error *err, int64_t bad, int64_t total_tokens);

/* The CPU mover over a host body of `capacity` bytes. */
void dcp__mover_cpu_init(dcp__mover *m, unsigned char *host_body, size_t capacity);

/*
 * The most scratch the CPU mover's buffers, stage and land take in one step,
 * one after the other: two exchange buffers of `staging` bytes, `send_pieces`
 * pieces staged from `samples` samples to `ranks` peers, and `land_pieces`
 * received and own pieces landed (at most 2 max_sequences).  Measured by
 * running the operations' own takes on a measuring arena; SIZE_MAX when it
 * overflows.  A device mover takes no host scratch.
 */
size_t dcp__mover_cpu_scratch_size(size_t staging, int32_t ranks, int32_t samples, int64_t send_pieces,
                                   int64_t land_pieces);

/* What a device mover must hold for a configuration (see pipeline/context.c). */
typedef struct dcp__mover_sizes {
    size_t staging;   /* one exchange buffer, send or receive */
    size_t body;
    size_t prefix;    /* the largest body prefix (rows and cu arrays) */
    int64_t segments; /* the most segments one copy can have */
    int64_t sources;  /* the most source buffers per field (samples, or peers and samples) */
    int64_t ranks;    /* DPxCP */
} dcp__mover_sizes;

/*
 * A device mover backend: an ops table, as dcp_comm_ops is for collectives,
 * so that the context (pipeline/context.c) binds a device mover without
 * naming one.  workspace_size gives the device and pinned bytes a backend
 * needs for the sizes; create binds that memory (or allocates what is NULL)
 * and turns `m` into the backend's mover over the same host body.  The
 * backends (gpu/mover_cuda.h) and the public entry points that choose one
 * (api/attach_cuda.c) sit above core/.
 */
typedef struct dcp__mover_backend {
    const char *name;
    dcp_status (*workspace_size)(const dcp__mover_sizes *z, size_t *device_bytes, size_t *host_bytes);
    dcp_status (*create)(dcp__mover *m, const dcp__mover_sizes *z, void *device_memory, size_t device_bytes,
                         void *host_memory, size_t host_bytes, dcp__error *err);
} dcp__mover_backend;

#endif
