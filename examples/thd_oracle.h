/*
 * thd_oracle.h - what one rank should receive from a step, worked out on its
 * own from the batch and the plan (docs/examples.md, "What it checks").
 *
 * It shares no code with the library: it reads only the plan's public
 * arrays and the batch, and writes the THD arithmetic out again, slot by
 * slot, the straightforward way: a rank of a CP group of cp ranks holds
 * chunks r and 2*cp-1-r of every sequence's padded span (zigzag), its slice
 * is padded at the tail to a multiple of pad_alignment, and the padding
 * becomes one more (dummy) sequence in cu_seqlens.  That is the
 * configuration the example runs: zigzag, append_dummy, pad_alignment >= 0,
 * no fixed cu_seqlens capacity, no padding to max_seqlen_per_rank.
 */
#ifndef DCP_EXAMPLE_THD_ORACLE_H
#define DCP_EXAMPLE_THD_ORACLE_H

#include <dcpack.h>

#include <stddef.h>
#include <stdint.h>

/*
 * The synthetic data a loader hands the step: sequence `source` (its trace
 * line) in step `step`, position j.  Slots at and after the sequence's real
 * length hold garbage that must come out as padding (0, mask 1).
 */
int64_t oracle_token(int64_t source, int32_t step, int64_t j);
int64_t oracle_label(int64_t source, int32_t step, int64_t j);
float oracle_loss_mask(int64_t source, int64_t j);
int64_t oracle_position(int64_t j);
#define ORACLE_GARBAGE_LABEL (-3)
#define ORACLE_GARBAGE_POSITION (-5)
#define ORACLE_GARBAGE_LOSS_MASK (-1.0f)
int64_t oracle_garbage_token(int64_t source);

/* One global batch, by global id (the order of the gathered lengths). */
typedef struct oracle_batch {
    int32_t num_sequences;
    const int32_t *padded;   /* [num_sequences] padded spans, as the samples' num_tokens */
    const int32_t *original; /* [num_sequences] real tokens at the start of each span */
    const int64_t *source;   /* [num_sequences] trace line of each sequence */
    int32_t step;
} oracle_batch;

typedef struct oracle_config {
    int32_t num_ranks;           /* DPxCP */
    int32_t static_cp;           /* dp_balanced: its CP size; 0 for the dynamic schedulers */
    int32_t max_seqlen_per_rank;
    int32_t pad_alignment;       /* 0: no THD padding */
    int32_t vpp_group;           /* microbatch count must be a multiple of it (0 or 1: no constraint) */
    int32_t pipeline_parallel_size, virtual_pipeline_size;
} oracle_config;

/* Check the plan's invariants on its own: 0 when they hold, else 1 with a message. */
int oracle_check_plan(const oracle_config *config, const dcp_plan *plan, const int32_t *padded, int32_t num_sequences,
                      char *message, size_t message_size);

/* Slots DPxCP rank `rank` holds in microbatch m (its CP slice plus tail padding); -1 if it holds nothing. */
int64_t oracle_rank_slots(const oracle_config *config, const dcp_plan *plan, const int32_t *padded, int32_t m,
                          int32_t rank);

/*
 * Compare one rank's step output (host memory: every array of every
 * microbatch) with what it should be: DPxCP rank `rank` of PP stage
 * `pipeline_rank` with MTP bits `mtp_virtual_stages`.  Returns the number of
 * differing items (0: all match) and describes the first in `message`.
 */
int64_t oracle_compare(const oracle_config *config, const dcp_plan *plan, const oracle_batch *batch, int32_t rank,
                       int32_t pipeline_rank, uint32_t mtp_virtual_stages, const dcp_step_output *output,
                       char *message, size_t message_size);

#endif
