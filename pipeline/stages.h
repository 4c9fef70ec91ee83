/*
 * stages.h - every stage of the library, each a function over SoA arrays
 * plus scratch; none calls another.  Only the drivers sequence them:
 * dcp_plan_compute() (plan_compute.c) the planning stages, dcp_step()
 * (step.c) the step stages, planning included.
 *
 *   planning
 *     gather    every DP rank's lengths -> one global list
 *               (dcp_gather(), dcp_gather_packed(): gather_drivers.c)
 *     bucket    ids sorted by length, minimal CP size            bucket.c
 *     assign    the plan, by the configured scheduler           assign/
 *     validate  every invariant                                 core/validate.c
 *   step
 *     gather    this rank's sequences from its samples (gather_local), then
 *               every DPxCP rank's header and lengths (gather_step)  gather.c
 *     plan      bucket -> assign -> validate on the gathered lengths
 *     strip     the fields this PP stage keeps                    strip.c
 *     reroute   this rank's THD geometry, the receive (and own) and
 *               send piece tables, the per-peer blocks, the one
 *               exchange of the tokens that travel                 reroute.c
 *     pack      received and own tokens into their slots (through the
 *               token mover, one pass), the per-VPP-stage views    pack.c
 *     broadcast the outputs to the TP group in one block           broadcast.c
 *
 * Every stage takes its scratch from an arena it may fill and never frees:
 * the caller resets the arena to a mark afterwards.  Each stage's
 * *_scratch_size() is an upper bound of what it takes for the largest input
 * the configuration allows; dcp_workspace_size() reserves the maximum.
 */
#ifndef DCP_STAGES_H
#define DCP_STAGES_H

#include "dcpack.h"
#include "../core/error.h"
#include "../alloc/arena.h"
#include "../core/body.h"
#include "../core/mover.h"
#include "../core/thd/thd.h"

/* ==== the planning stages ==== */

/* ---- gather (gather_drivers.c: dcp_gather(), dcp_gather_packed()) ---- */
size_t dcp__gather_scratch_size(const dcp_config *config);

/* ---- bucket (bucket.c) ---- */

/*
 * Minimal CP size of a sequence: the smallest power of two >= ceil(s / M),
 * at least min_cp_size; num_ranks itself when that power of two exceeds a
 * num_ranks that is not a power of two (the reference's full-group fallback).
 * Returns 0 when s does not fit on `limit_ranks` ranks at all.
 */
int32_t dcp__min_cp_size(int64_t length, int32_t max_seqlen_per_rank, int32_t min_cp_size, int32_t num_ranks);

/*
 * Check lengths (1 <= s <= what the largest allowed group holds), sort ids by
 * length descending (stable: equal lengths keep id order) and compute each
 * id's minimal CP size.  With dp_balanced the largest group is the static CP
 * size; otherwise all DPxCP ranks.
 */
dcp_status dcp__bucket(const int32_t *lengths, int32_t num_sequences, const dcp_config *config,
                      int32_t *sorted_ids, int32_t *min_cp, dcp__arena *scratch, dcp__error *err);
size_t dcp__bucket_scratch_size(const dcp_config *config);

/* ---- assign (assign/) ---- */

struct dcp__scheduler;

typedef struct dcp__schedule_input {
    const int32_t *lengths;    /* [num_sequences], by global id; all validated by dcp__bucket */
    int32_t num_sequences;
    const int32_t *sorted_ids; /* [num_sequences], by length descending, stable */
    const int32_t *min_cp;     /* [num_sequences], by global id */
    int32_t num_ranks;         /* DPxCP */
    const dcp_config *config;
    /* a scheduler whose plan this one may take as one more candidate, offered by dcp__assign (NULL: none) */
    const struct dcp__scheduler *candidate;
} dcp__schedule_input;

/*
 * One scheduler, as the assign stage picks it (pipeline/assign/assign.c holds
 * the table, in the way zstd selects a block compressor by strategy):
 * scratch_size is an upper bound of the scratch one call takes for the
 * largest input the configuration allows, with the candidate the driver
 * offers it; assign plans into a cleared plan.
 */
typedef struct dcp__scheduler {
    const char *name;
    size_t (*scratch_size)(const dcp_config *config);
    dcp_status (*assign)(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err);
} dcp__scheduler;

/* The table's entry for `which`; NULL for a value that names no scheduler. */
const dcp__scheduler *dcp__scheduler_of(dcp_scheduler which);
/* The scheduler whose plan dcp__assign offers `which` as a candidate; NULL when none. */
const dcp__scheduler *dcp__scheduler_candidate_of(dcp_scheduler which);

/*
 * Plan with config->scheduler, offering it its candidate's plan.  The plan is
 * cleared first; on error its contents are unspecified.
 */
dcp_status dcp__assign(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err);
size_t dcp__assign_scratch_size(const dcp_config *config);

dcp_status dcp__assign_dp_balanced(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch,
                                  dcp__error *err);
size_t dcp__assign_dp_balanced_scratch_size(const dcp_config *config);

dcp_status dcp__assign_dynamic_cp(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch,
                                 dcp__error *err);
size_t dcp__assign_dynamic_cp_scratch_size(const dcp_config *config);

/*
 * balanced takes in->candidate's plan as one more candidate when it has few
 * sequences per rank (pipeline/assign/balanced/balanced_reference.c); its
 * scratch makes room for that candidate's when `candidate` is not NULL.
 */
dcp_status dcp__assign_balanced(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch,
                               dcp__error *err);
size_t dcp__assign_balanced_scratch_size(const dcp_config *config, const dcp__scheduler *candidate);
/*
 * dcp__assign_balanced with its shortcuts switched for tests; each must leave
 * the plan as it is without it:
 *   DCP__BALANCED_REUSE_ALIGNMENT: a pass whose VPP alignment changed its
 *     microbatch count merges down from its saved state instead of running
 *     again in full;
 *   DCP__BALANCED_BOUND_MERGES: merge searches whose gain cannot win are not
 *     run.  It spares the polishing budget, so the plan is the same as without
 *     it whenever the budget lasts the call without it;
 *   DCP__BALANCED_IMPLIED_TRIALS: a repacking trial whose every step an
 *     earlier trial of the same search took alike is not run (nor the last
 *     trial rebuilt when the groups it left are those at the chosen level).
 * dcp__assign_balanced takes all three.  *report (unless NULL) says how often
 * each was taken and whether the polishing budget ran out.
 */
enum {
    DCP__BALANCED_REUSE_ALIGNMENT = 1,
    DCP__BALANCED_BOUND_MERGES = 2,
    DCP__BALANCED_IMPLIED_TRIALS = 4,
    DCP__BALANCED_SHORTCUTS = 7
};
typedef struct dcp__balanced_report {
    int32_t realigned;      /* passes whose second run started from the saved state */
    int64_t merges_skipped; /* merge searches not run */
    int64_t trials_implied; /* repacking trials not run: an earlier one implied them */
    uint64_t merge_choices; /* a hash of every merge round's choice (pair and gain), in call order */
    int budget_ran_out;     /* the polishing budget was used up during the call */
} dcp__balanced_report;
dcp_status dcp__assign_balanced_with(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err,
                                     unsigned shortcuts, dcp__balanced_report *report);

/* ==== the step stages ==== */

/* ---- gather (gather.c) ---- */

/*
 * This rank's sequences from its input: every check of the samples (fields,
 * NULL buffers, lengths against buffers, cu_seqlens order) and capacities;
 * empty sub-samples are dropped.  `needed` are the fields this PP stage needs.
 * `out` (core/mover.h's table, capacity max_sequences) is what the step
 * digests, gathers and routes.
 */
dcp_status dcp__gather_local(const dcp_step_input *in, uint32_t needed, const dcp_config *config,
                             int64_t token_capacity, dcp__input_spans *out, dcp__error *err);

/* The gathered batch: by global id, with each DP rank's first id. */
typedef struct dcp__step_lengths {
    int32_t *padded;        /* [max_sequences] (the context's global_lengths) */
    int32_t *original;      /* [max_sequences] */
    int32_t *rank_offsets;  /* [data_parallel_size + 1] */
    int32_t num_sequences;
    int64_t sum, squared_sum; /* of padded lengths, exact */
    int64_t max_rank_tokens, max_rank_count; /* over DP ranks, for the reference's volume */
} dcp__step_lengths;

/*
 * All-gather every DPxCP rank's header (fields, count, a digest of its
 * lengths, `data_digest` of its bytes or 0, tokens) and the DP ranks'
 * (padded, original) pairs over `lane`, checking that fields agree and CP
 * siblings hold the same sequences (lengths and, where digested, contents).
 */
size_t dcp__gather_step_scratch_size(const dcp_config *config);

/* A hash of `count` (padded, original) pairs: CP siblings, PP stages and TP peers that hold data compare it. */
uint64_t dcp__pairs_hash(const int32_t *pairs, int32_t count);
dcp_status dcp__gather_step(dcp_comm *lane, uint32_t fields, const dcp__input_spans *local,
                            uint64_t data_digest, const dcp_config *config, dcp__step_lengths *out,
                            dcp__arena *scratch, dcp_step_stats *stats, dcp__error *err);

/* ---- strip (strip.c) ---- */

/* Fields PP stage `pipeline_rank` keeps (as Megatron-LM's reference does); MTP stages keep all. */
uint32_t dcp__strip_fields(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages);

/* Which of the kept fields virtual stage v's views show: inputs on the first stage, targets on the last. */
uint32_t dcp__strip_view_fields(const dcp_config *config, int32_t pipeline_rank, uint32_t mtp_virtual_stages,
                                int32_t v, uint32_t kept);

/* ---- reroute (reroute.c) ---- */

/* Per-group scratch the route tables reuse: [max_sequences] lengths, [cu bound] cu arrays, [2 max_sequences] pieces. */
typedef struct dcp__group_scratch {
    int32_t *original, *padded, *cu, *cu_padded, *seq;
    int64_t *seq_offset, *local_offset, *length;
} dcp__group_scratch;
dcp_status dcp__group_scratch_take(const dcp_config *config, dcp__arena *scratch, dcp__group_scratch *gs);

/*
 * This rank's place in the plan, from one pass over its microbatches: its
 * group and THD geometry in each, the lengths of those groups' sequences
 * (kept for the receive side, which needs them again) and the totals.
 */
typedef struct dcp__rank_geometry {
    dcp__thd_geometry *microbatch; /* [num_microbatches] */
    int32_t *group;               /* [num_microbatches]: this rank's group in each */
    int32_t *first;               /* [num_microbatches + 1]: where each one's lengths start below */
    int32_t *original, *padded;   /* [max_sequences]: its groups' lengths in plan order, microbatch after microbatch */
    int64_t total_tokens, total_cu;
} dcp__rank_geometry;

/* Take the geometry's arrays for `microbatches` microbatches from scratch; DCP_ERR_CAPACITY when they do not fit. */
dcp_status dcp__rank_geometry_take(const dcp_config *config, int32_t microbatches, dcp__arena *scratch,
                                   dcp__rank_geometry *geometry);

dcp_status dcp__reroute_geometry(const dcp_plan *plan, const dcp_config *config, const dcp__step_lengths *lengths,
                                 int32_t rank, int64_t token_capacity, int64_t cu_capacity, dcp__rank_geometry *geometry,
                                 dcp__error *err);

/*
 * The receive side: every microbatch's row and cu arrays (into the body
 * prefix), and where each real piece comes from: another rank (received, by
 * the exchange) or this rank's own samples (own: its DP rank's sequences,
 * never sent to itself).  Both lists by destination.
 */
typedef struct dcp__receive_table {
    dcp__body_row *rows;           /* [num_microbatches] */
    int32_t *cu, *cu_padded;      /* [total_cu] */
    dcp__recv_pieces received;    /* [2 max_sequences] (core/mover.h) */
    int64_t *tokens_from;         /* [num_ranks]: received tokens by sender (0 from this rank) */
    dcp__own_pieces own;          /* [2 max_sequences] */
    int64_t own_tokens;
} dcp__receive_table;

/* `local` is this rank's sequence table (gather_local): where its own pieces start in its samples. */
void dcp__reroute_receive(const dcp_plan *plan, const dcp_config *config, const dcp__step_lengths *lengths,
                          int32_t rank, const dcp__input_spans *local, const dcp__rank_geometry *geometry,
                          dcp__group_scratch *gs, dcp__receive_table *out);

/* The send side: the pieces of this DP rank's sequences this CP sibling sends to other ranks (none to itself). */
typedef struct dcp__send_table {
    dcp__send_pieces pieces;      /* [send bound] (core/mover.h) */
    int64_t capacity;
    int64_t *tokens_to;           /* [num_ranks] */
} dcp__send_table;

/* Each peer's block bytes and offsets in both buffers, [num_ranks] each. */
typedef struct dcp__block_arrays {
    size_t *send_bytes, *send_offsets, *recv_bytes, *recv_offsets;
} dcp__block_arrays;

/*
 * Take the route tables' arrays from scratch (the receive table's piece
 * arrays, not its rows and cu arrays, which live in the body), the send
 * table's [send piece bound] arrays, and the block arrays; DCP_ERR_CAPACITY
 * when they do not fit.
 */
dcp_status dcp__reroute_tables_take(const dcp_config *config, dcp__arena *scratch, dcp__receive_table *received,
                                    dcp__send_table *send, dcp__block_arrays *blocks);

/*
 * The scratch reroute takes, at most: the geometry (for the largest number
 * of microbatches), the group scratch and the tables, measured by running
 * their take functions on a measuring arena.
 */
size_t dcp__reroute_scratch_size(const dcp_config *config);

dcp_status dcp__reroute_send(const dcp_plan *plan, const dcp_config *config, const dcp__step_lengths *lengths,
                             int32_t rank, const dcp__input_spans *local, dcp__group_scratch *gs,
                             dcp__send_table *out, dcp__error *err);

/*
 * Per-peer blocks of both buffers (8-byte aligned runs of `per_token` bytes a
 * token); byte counts into stats, with the `own_tokens` this rank keeps as
 * exchange_bytes_local (they land from its samples and take no block).
 */
void dcp__reroute_blocks(const int64_t *tokens_to, const int64_t *tokens_from, int32_t num_ranks, int32_t rank,
                         int64_t own_tokens, size_t per_token, size_t *send_bytes, size_t *send_offsets,
                         size_t *recv_bytes, size_t *recv_offsets, dcp__exchange_blocks *blocks,
                         dcp_step_stats *stats);

/* The one exchange: every other peer's block to it, over `lane` (a lane of one rank has nothing to exchange). */
dcp_status dcp__reroute_exchange(dcp_comm *lane, const unsigned char *send, const size_t *send_bytes,
                                 const size_t *send_offsets, unsigned char *recv, const size_t *recv_bytes,
                                 const size_t *recv_offsets, dcp_step_stats *stats, dcp__error *err);

/* ---- pack (pack.c) ---- */

/*
 * Every token into the body (through the mover, one pass): received pieces
 * from `recv`, own pieces from the samples of `input`, each to its slot; 0
 * and mask 1 elsewhere.
 */
dcp_status dcp__pack_land(dcp__mover *mover, void *stream, uint32_t kept, const dcp__receive_table *received,
                          const dcp__exchange_blocks *blocks, const unsigned char *recv, const dcp_step_input *input,
                          const dcp__body_layout *b, int64_t total_tokens, dcp__arena *scratch, dcp__error *err);

/*
 * One virtual stage's views, [microbatches], over a body laid out as `b`
 * (rows read from the host body), showing the fields in `shown` (what
 * dcp__strip_view_fields decides for that stage; the driver passes it on).
 */
void dcp__pack_views(int32_t microbatches, uint32_t shown, const dcp__body_layout *b, const unsigned char *host_body,
                     const unsigned char *body, dcp_microbatch *views);

/* ---- broadcast (broadcast.c) ---- */

/* What TP rank 0 broadcasts first: enough for its peers to lay out the body. */
typedef struct dcp__broadcast_header {
    int64_t status, microbatches, cu, tokens, kept, sequences, sum, squared_sum, body_bytes;
} dcp__broadcast_header;

/*
 * Broadcast the header, then (when rank 0 announced success) the used body,
 * over the TP group; a peer lays out `b` from the header, checks it against
 * its capacities and reads the body's prefix back to the host through the
 * mover.  Rank 0's `b` is its own layout, not read.
 */
dcp_status dcp__broadcast(dcp_comm *tp, int holds_data, dcp__broadcast_header *header, dcp__body_layout *b,
                          dcp__mover *mover, int32_t max_microbatches, void *stream, dcp_step_stats *stats,
                          dcp__error *err);

#endif
