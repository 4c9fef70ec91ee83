/*
 * mtp_roll.h - the MTP packed-sequence roll, in pieces.  Internal.
 *
 * dcp_mtp_roll() (host) and dcp_mtp_roll_cuda() (device) run the same three
 * steps: gather each sequence's two chunk-first values (what the CP
 * neighbours need), exchange them, apply the roll.  The functions below are
 * the host forms of the two kernels, with the kernels' arguments, plus the
 * checks and the exchange shared by both.
 *
 * Layout of a rank's slots for sequence k of a group of cp ranks (zigzag):
 * s = cu[k] / cp, L = (cu[k+1] - cu[k]) / cp, c = L / 2.  Local [s, s+c) is
 * global chunk cp_rank, [s+c, s+2c) global chunk 2*cp-1-cp_rank.  With cp == 1
 * the span [s, s+L) is the whole sequence.  Slots at or past cu[n] / cp
 * (n = num_cu_seqlens - 1) are the tail, rolled as one more sequence.
 *
 * Contiguous layout (DCP_CP_CONTIGUOUS): rank r holds global slots
 * [r * num_tokens, (r+1) * num_tokens) of the packed microbatch.  A sequence
 * (or the tail, [cu[n], cp * num_tokens)) that runs on past this rank's last
 * slot needs the next rank's first slot: each rank sends its first value of
 * each field to the previous rank (to_prev[0]); nothing else travels.
 *
 * Every section ends with a sealed trailer (the sender's rank, the roll's
 * call count, a hash of the section's values): a section that arrives
 * zeroed, stale or garbled from a communicator that "succeeded" without its
 * peer fails the roll (DCP_ERR_COMM) instead of rolling wrong values in.
 * The host roll checks it; the device roll cannot read its sections without
 * a synchronisation and trusts them.
 */
#ifndef DCP_MTP_ROLL_H
#define DCP_MTP_ROLL_H

#include "dcpack.h"
#include "../error.h"

#include <stddef.h>
#include <stdint.h>

/* Where each part of the exchange scratch sits (bytes from its start). */
typedef struct dcp__mtp_roll_layout {
    int32_t num_sequences;
    int32_t num_fields;
    size_t field_offset[DCP_MTP_ROLL_MAX_FIELDS]; /* within a section */
    size_t section;                               /* bytes of one section: every field's n values, 8-aligned,
                                                     then the trailer */
    size_t trailer;                               /* where the trailer sits within a section */
    size_t to_prev, to_next, from_prev, from_next;  /* section starts */
    size_t data_bytes;                            /* 4 sections */
} dcp__mtp_roll_layout;

void dcp__mtp_roll_layout_compute(int32_t num_sequences, const size_t *elem_size, int32_t num_fields,
                                 dcp__mtp_roll_layout *layout);

/* A section's trailer (see above). */
typedef struct dcp__mtp_roll_trailer {
    uint32_t magic;
    int32_t sender;
    uint64_t call;
    uint64_t hash;
    uint64_t check;
} dcp__mtp_roll_trailer;

/* Seal the section at `section` (host memory) as sent by `sender` in roll `call`. */
void dcp__mtp_roll_seal(unsigned char *section, const dcp__mtp_roll_layout *layout, int32_t sender, uint64_t call);
/* DCP_OK when the section at `section` was sealed by `sender` in roll `call` and arrived whole; else DCP_ERR_COMM. */
dcp_status dcp__mtp_roll_unseal(const unsigned char *section, const dcp__mtp_roll_layout *layout, int32_t sender,
                                uint64_t call);

/* The contiguous roll (host): see the layout above.  from_next: the next rank's first value (NULL on the last). */
void dcp__mtp_roll_apply_contiguous_cpu(const void *field, void *out, size_t elem_size, const int32_t *cu, int32_t n,
                                       int64_t num_tokens, int32_t cp, int32_t cp_rank, const void *from_next);

/* Host-side checks of the arguments and of cu_seqlens_padded (when not NULL). */
dcp_status dcp__mtp_roll_check(const dcp_comm *comm, int32_t group_first_rank, int32_t cp,
                              dcp_cp_partition partition, const int32_t *cu,
                              int32_t num_cu_seqlens, int64_t num_tokens, const void *const *fields,
                              void *const *out, const size_t *elem_size, int32_t num_fields, dcp__error *err);

/*
 * Kernel 1: for each sequence k < n: to_prev[k] = field[s] (chunk 0's first
 * value), to_next[k] = field[s + c] (chunk 1's first value); zero bytes for an
 * empty span.  With cp == 1 nothing is needed and nothing is written.
 */
void dcp__mtp_roll_boundary_cpu(const void *field, size_t elem_size, const int32_t *cu, int32_t n, int32_t cp,
                               void *to_prev, void *to_next);

/*
 * Kernel 2: out[j] = field[j+1] inside a chunk (or a cp == 1 span, or the
 * tail); a span's or the tail's last slot 0; with cp > 1, chunk 0's last slot
 * = from_next[k] (own to_next[k] on the group's last rank) and chunk 1's last
 * slot = from_prev[k] (0 on the group's first rank).
 */
void dcp__mtp_roll_apply_cpu(const void *field, void *out, size_t elem_size, const int32_t *cu, int32_t n,
                            int64_t num_tokens, int32_t cp, int32_t cp_rank, const void *own_to_next,
                            const void *from_next, const void *from_prev);

/*
 * The exchange: one all-to-all-v over comm; the rank sends its to_prev
 * section to the previous rank of its group and its to_next section to the
 * next, and receives their sections into from_next / from_prev.  `exchange`
 * holds the layout's sections (host or device memory, as comm accepts);
 * counts is 4 * comm->size size_t of host scratch.
 */
dcp_status dcp__mtp_roll_exchange(dcp_comm *comm, int32_t group_first_rank, int32_t cp,
                                 const dcp__mtp_roll_layout *layout, void *exchange, size_t *counts, dcp__error *err);

/*
 * Before the exchange every rank of comm passes its local status (argument
 * checks, the boundary gather) and gets the same answer: the lowest failing
 * rank's status, or the communicator's failure.  A rank that cannot take part
 * in the exchange thus never leaves its peers pairing their exchange with its
 * next call.  The agreement carries the count of rolls made over this handle
 * (dcp_comm.calls), the caller's step id and the partition, so ranks whose
 * counts or step ids differ (one skipped a roll) all return
 * DCP_ERR_OUT_OF_STEP.  Without comm (cp 1): the local status.  *call is the
 * roll's count (for the trailers).
 */
dcp_status dcp__mtp_roll_agree(dcp_comm *comm, uint64_t step_id, dcp_cp_partition partition, dcp_status local,
                               uint64_t *call);

#endif
