/*
 * step.h - the data plane: its state inside a context and its stages.
 * Internal.
 *
 * One step on one rank runs these stages, in this order, from step.c:
 *
 *   gather     this rank's sequences from its samples (gather_local), then
 *              every DPxCP rank's header and lengths (gather_step)   gather.c
 *   plan       bucket -> assign -> validate on the gathered lengths  plan.c
 *   strip      the fields this PP stage keeps                        strip.c
 *   reroute    this rank's THD geometry, the receive (and own) and
 *              send piece tables, the per-peer blocks, the one
 *              exchange of the tokens that travel                    reroute.c
 *   pack       received and own tokens into their slots (through the
 *              token mover, one pass), the per-VPP-stage views       pack.c
 *   broadcast  the outputs to the TP group in one block              broadcast.c
 *
 * Each stage is a function over the SoA arrays below plus scratch; none
 * calls another.  The step's state (dcp_step_state) holds what outlives a
 * stage: this rank's sequence table, the gathered original lengths, the body
 * the outputs live in and the views handed to the caller.
 */
#ifndef DCP_STEP_H
#define DCP_STEP_H

#include "dcpack.h"
#include "../alloc/arena.h"
#include "../core/body.h"
#include "../core/error.h"
#include "../core/mover.h"
#include "../core/pack.h"

/* This rank's sequences (capacity max_sequences), as gather_local lists them. */
typedef struct dcp_local_sequences {
    int32_t count;
    int32_t *sample;  /* the input sample each comes from */
    int64_t *start;   /* its first element in that sample */
    int32_t *pairs;   /* [2 * count]: (padded, original) lengths */
    int64_t tokens;   /* sum of padded lengths */
    int64_t original_tokens; /* sum of original lengths */
} dcp_local_sequences;

typedef struct dcp_step_state {
    int64_t token_capacity;      /* max_tokens_per_rank */
    int64_t cu_capacity;         /* cu_seqlens entries over all microbatches of a rank */
    dcp_local_sequences local;   /* arrays [max_sequences] */
    int32_t *original_lengths;   /* [max_sequences]: gathered, by global id */
    dcp_mover mover;             /* where tokens are staged and landed; the body it lands in */
    dcp_microbatch *views;       /* [virtual_pipeline_size * max_microbatches] */
    dcp_step_output output;
} dcp_step_state;

/* ---- sizes (context.c) ---- */

struct dcp_context;
/* Lay out the step's state (nothing when max_tokens_per_rank is 0). */
dcp_status dcp__step_layout(struct dcp_context *ctx, dcp_arena *arena, const dcp_config *config);
/* What one step takes from scratch, at most. */
size_t dcp__step_scratch_size(const dcp_config *config);
/* What a device mover must hold for this configuration. */
void dcp__step_mover_sizes(const dcp_config *config, dcp_mover_sizes *sizes);
/* Resolved microbatch capacity and cu_seqlens capacity of a rank. */
int32_t dcp__step_max_microbatches(const dcp_config *config);
int64_t dcp__step_cu_capacity(const dcp_config *config);
/* Pieces one rank may send in one step, at most. */
size_t dcp__step_send_piece_bound(const dcp_config *config);
/* cu_seqlens entries one microbatch may need, at most. */
size_t dcp__step_group_cu_bound(const dcp_config *config);

/* ---- gather (gather.c) ---- */

/*
 * This rank's sequences from its input: every check of the samples (fields,
 * NULL buffers, lengths against buffers, cu_seqlens order) and capacities;
 * empty sub-samples are dropped.  `needed` are the fields this PP stage needs.
 */
dcp_status dcp__gather_local(const dcp_step_input *in, uint32_t needed, const dcp_config *config,
                             int64_t token_capacity, dcp_local_sequences *out, dcp_error *err);

/* The gathered batch: by global id, with each DP rank's first id. */
typedef struct dcp_step_lengths {
    int32_t *padded;        /* [max_sequences] (the context's global_lengths) */
    int32_t *original;      /* [max_sequences] */
    int32_t *rank_offsets;  /* [data_parallel_size + 1] */
    int32_t num_sequences;
    int64_t sum, squared_sum; /* of padded lengths, exact */
    int64_t max_rank_tokens, max_rank_count; /* over DP ranks, for the reference's volume */
} dcp_step_lengths;

/*
 * All-gather every DPxCP rank's header (fields, count, a digest of its
 * lengths, `data_digest` of its bytes or 0, tokens) and the DP ranks'
 * (padded, original) pairs over `lane`, checking that fields agree and CP
 * siblings hold the same sequences (lengths and, where digested, contents).
 */
size_t dcp__gather_step_scratch_size(const dcp_config *config);

/* A hash of `count` (padded, original) pairs: CP siblings, PP stages and TP peers that hold data compare it. */
uint64_t dcp__pairs_hash(const int32_t *pairs, int32_t count);
dcp_status dcp__gather_step(dcp_comm *lane, uint32_t fields, const dcp_local_sequences *local,
                            uint64_t data_digest, const dcp_config *config, dcp_step_lengths *out,
                            dcp_arena *scratch, dcp_step_stats *stats, dcp_error *err);

/* ---- strip (strip.c) ---- */

/* Fields PP stage `pipeline_rank` keeps (as Megatron-LM's reference does); MTP stages keep all. */
uint32_t dcp__strip_fields(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages);

/* Which of the kept fields virtual stage v's views show: inputs on the first stage, targets on the last. */
uint32_t dcp__strip_view_fields(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages,
                                int32_t v, uint32_t kept);

/* ---- reroute (reroute.c) ---- */

/* Per-group scratch the route tables reuse: [max_sequences] lengths, [cu bound] cu arrays, [2 max_sequences] pieces. */
typedef struct dcp_group_scratch {
    int32_t *original, *padded, *cu, *cu_padded, *seq;
    int64_t *seq_offset, *local_offset, *length;
} dcp_group_scratch;
dcp_status dcp__group_scratch_take(const dcp_config *config, dcp_arena *scratch, dcp_group_scratch *gs);
size_t dcp__group_scratch_size(const dcp_config *config);

/*
 * This rank's place in the plan, from one pass over its microbatches: its
 * group and THD geometry in each, the lengths of those groups' sequences
 * (kept for the receive side, which needs them again) and the totals.
 */
typedef struct dcp_rank_geometry {
    dcp_thd_geometry *microbatch; /* [num_microbatches] */
    int32_t *group;               /* [num_microbatches]: this rank's group in each */
    int32_t *first;               /* [num_microbatches + 1]: where each one's lengths start below */
    int32_t *original, *padded;   /* [max_sequences]: its groups' lengths in plan order, microbatch after microbatch */
    int64_t total_tokens, total_cu;
} dcp_rank_geometry;

/* Take the geometry's arrays for `microbatches` microbatches from scratch; DCP_ERR_CAPACITY when they do not fit. */
dcp_status dcp__rank_geometry_take(const dcp_config *config, int32_t microbatches, dcp_arena *scratch,
                                   dcp_rank_geometry *geometry);
size_t dcp__rank_geometry_size(const dcp_config *config);

dcp_status dcp__reroute_geometry(const dcp_plan *plan, const dcp_config *config, const dcp_step_lengths *lengths,
                                 int32_t rank, int64_t token_capacity, int64_t cu_capacity, dcp_rank_geometry *geometry,
                                 dcp_error *err);

/*
 * The receive side: every microbatch's row and cu arrays (into the body
 * prefix), and where each real piece comes from: another rank (received, by
 * the exchange) or this rank's own samples (own: its DP rank's sequences,
 * never sent to itself).  Both lists by destination.
 */
typedef struct dcp_receive_table {
    dcp_body_row *rows;           /* [num_microbatches] */
    int32_t *cu, *cu_padded;      /* [total_cu] */
    int32_t *sender;              /* [2 max_sequences]: received pieces */
    int64_t *cursor, *dst, *length;
    int64_t count;
    int64_t *tokens_from;         /* [num_ranks]: received tokens by sender (0 from this rank) */
    int32_t *own_sample;          /* [2 max_sequences]: own pieces */
    int64_t *own_src, *own_dst, *own_length;
    int64_t own_count, own_tokens;
} dcp_receive_table;

/* `local` is this rank's sequence table (gather_local): where its own pieces start in its samples. */
void dcp__reroute_receive(const dcp_plan *plan, const dcp_config *config, const dcp_step_lengths *lengths,
                          int32_t rank, const dcp_local_sequences *local, const dcp_rank_geometry *geometry,
                          dcp_group_scratch *gs, dcp_receive_table *out);

/* The send side: the pieces of this DP rank's sequences this CP sibling sends to other ranks (none to itself). */
typedef struct dcp_send_table {
    int32_t *sample, *peer;       /* [send bound] */
    int64_t *src, *cursor, *length;
    int64_t count, capacity;
    int64_t *tokens_to;           /* [num_ranks] */
} dcp_send_table;

dcp_status dcp__reroute_send(const dcp_plan *plan, const dcp_config *config, const dcp_step_lengths *lengths,
                             int32_t rank, const dcp_local_sequences *local, dcp_group_scratch *gs,
                             dcp_send_table *out, dcp_error *err);

/*
 * Per-peer blocks of both buffers (8-byte aligned runs of `per_token` bytes a
 * token); byte counts into stats, with the `own_tokens` this rank keeps as
 * exchange_bytes_local (they land from its samples and take no block).
 */
void dcp__reroute_blocks(const int64_t *tokens_to, const int64_t *tokens_from, int32_t num_ranks, int32_t rank,
                         int64_t own_tokens, size_t per_token, size_t *send_bytes, size_t *send_offsets,
                         size_t *recv_bytes, size_t *recv_offsets, dcp_exchange_blocks *blocks,
                         dcp_step_stats *stats);

/* The one exchange: every other peer's block to it, over `lane` (a lane of one rank has nothing to exchange). */
dcp_status dcp__reroute_exchange(dcp_comm *lane, const unsigned char *send, const size_t *send_bytes,
                                 const size_t *send_offsets, unsigned char *recv, const size_t *recv_bytes,
                                 const size_t *recv_offsets, dcp_step_stats *stats, dcp_error *err);

/* ---- pack (pack.c) ---- */

/*
 * Every token into the body (through the mover, one pass): received pieces
 * from `recv`, own pieces from the samples of `input`, each to its slot; 0
 * and mask 1 elsewhere.
 */
dcp_status dcp__pack_land(dcp_mover *mover, void *stream, uint32_t kept, const dcp_receive_table *received,
                          const dcp_exchange_blocks *blocks, const unsigned char *recv, const dcp_step_input *input,
                          const dcp_body_layout *b, int64_t total_tokens, dcp_arena *scratch, dcp_error *err);

/* The views of every virtual stage over a body laid out as `b` (rows read from the host body). */
void dcp__pack_views(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages,
                     int32_t microbatches, uint32_t kept, const dcp_body_layout *b, const unsigned char *host_body,
                     const unsigned char *body, dcp_microbatch *views);

/* ---- broadcast (broadcast.c) ---- */

/* What TP rank 0 broadcasts first: enough for its peers to lay out the body. */
typedef struct dcp_broadcast_header {
    int64_t status, microbatches, cu, tokens, kept, sequences, sum, squared_sum, body_bytes;
} dcp_broadcast_header;

/*
 * Broadcast the header, then (when rank 0 announced success) the used body,
 * over the TP group; a peer checks the header against its capacities and
 * reads the body's prefix back to the host through the mover.
 */
dcp_status dcp__broadcast(dcp_comm *tp, int holds_data, dcp_broadcast_header *header, dcp_mover *mover,
                          int32_t max_microbatches, void *stream, dcp_step_stats *stats, dcp_error *err);

#endif
