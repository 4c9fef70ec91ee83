/*
 * dcpack_model.h - model-side helpers: the MTP packed-sequence roll and GDN conv padding.
 * Part of the public API: dcpack.h includes it, so including dcpack.h is
 * enough; it includes dcpack.h for the types it uses.
 */
#ifndef DCPACK_MODEL_H
#define DCPACK_MODEL_H

#include "dcpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Model-side helpers: the MTP packed-sequence roll and GDN conv padding     */
/* ------------------------------------------------------------------------ */

/*
 * MTP roll (as Megatron-LM's reference does): shift a packed field left by one token within
 * each sequence, writing 0 at each sequence's last position, so no value
 * crosses into the next sequence.  `cu_seqlens_padded` are the microbatch's
 * global boundaries (before CP slicing; num_cu_seqlens entries, starting at 0,
 * non-decreasing, repeated final entries allowed: they are empty sequences),
 * as dcp_step hands them out.  With a CP group of cp > 1 ranks under the
 * zigzag layout each rank holds chunks r and 2*cp-1-r of every sequence
 * (every span a multiple of 2*cp); the first token of each chunk is what the
 * neighbouring rank needs, so one exchange carries, for all sequences and all
 * fields at once, two values per sequence to each neighbour (the reference
 * exchanges sequence by sequence).  Slots past the last boundary (THD tail
 * padding) are rolled as one more sequence of their own.  `partition` is the
 * layout the microbatch was cut with (dcp_config.cp_partition): under
 * DCP_CP_CONTIGUOUS rank r holds global slots [r * num_tokens, (r+1) *
 * num_tokens), spans need no divisibility, and each rank sends one value per
 * field to the previous rank.  dcp_mtp_roll_cuda rolls zigzag only
 * (DCP_ERR_UNSUPPORTED for contiguous with cp > 1).
 *
 * `step_id` (the caller's step number, 0 = none) travels in the agreement
 * with the count of rolls made over the handle (dcp_comm.calls) and the
 * partition: ranks that differ (one skipped or repeated a roll) all return
 * DCP_ERR_OUT_OF_STEP.  The values exchanged carry a sealed trailer (sender,
 * roll count, hash) that dcp_mtp_roll checks: a communicator that reports
 * success with zeroed, stale or garbage bytes (a peer gone) makes the roll
 * DCP_ERR_COMM, never DCP_OK with a wrong boundary value.
 *
 * The group is ranks [group_first_rank, group_first_rank + cp) of `comm`
 * (consecutive, as dcp plans them): pass the DPxCP communicator with the
 * microbatch's local_cp_size and this rank's rank - cp_rank, or the CP group's
 * own communicator with group_first_rank 0.  The exchange is one all-to-all-v
 * over `comm` in which only CP neighbours exchange bytes, so every rank of
 * `comm` calls it for the same microbatch (each with its own group).  With
 * cp == 1, comm may be NULL and nothing is exchanged.
 *
 * fields[f] of elem_size[f] bytes (1, 2, 4 or 8) hold num_tokens elements (this
 * rank's slots); out[f] receives the rolled field and must not overlap any
 * input (labels and loss_mask roll together in one call).  With comm != NULL
 * every rank of comm takes part in the exchange, cp == 1 ranks too (they move
 * no bytes).  Scratch, from dcp_mtp_roll_exchange_bytes(num_cu_seqlens,
 * elem_size, num_fields, comm size): dcp_mtp_roll takes one host buffer of
 * that size as `exchange`; dcp_mtp_roll_cuda takes device_exchange of
 * (num_cu_seqlens, elem_size, num_fields, 0) bytes and host_scratch of
 * (0, NULL, 0, comm size) bytes.  Allocation-free.  Errors:
 * DCP_ERR_NULL_POINTER, DCP_ERR_INVALID_ARGUMENT (cp not a power of two or
 * outside comm, elem_size, num_fields outside [1, 4], an unknown partition),
 * DCP_ERR_CORRUPT_INPUT (cu_seqlens not starting at 0 or decreasing, a zigzag
 * span not divisible by 2*cp, a last boundary past cp * num_tokens),
 * DCP_ERR_OUT_OF_STEP, DCP_ERR_COMM (exchanged values that did not arrive
 * intact), the communicator's errors.  With comm,
 * errors are agreed over it before the exchange (one agree()): every rank of
 * comm returns the same status, the lowest-numbered failing rank's.
 */
#define DCP_MTP_ROLL_MAX_FIELDS 4
size_t dcp_mtp_roll_exchange_bytes(int32_t num_cu_seqlens, const size_t *elem_size, int32_t num_fields,
                                   int32_t comm_size);
dcp_status dcp_mtp_roll(dcp_comm *comm, uint64_t step_id, int32_t group_first_rank, int32_t cp,
                        dcp_cp_partition partition, const int32_t *cu_seqlens_padded, int32_t num_cu_seqlens, int64_t num_tokens, const void *const *fields, void *const *out,
                        const size_t *elem_size, int32_t num_fields, void *exchange);

/*
 * GDN causal-conv padding (as Megatron-LM's reference does).  A packed buffer of `rows`
 * rows of row_bytes bytes is padded with zero rows up to a multiple of
 * `alignment` (4096 by default: DCP_GDN_ALIGNMENT; <= 0 means no padding), and
 * the last cu_seqlens entry grows by the same number of rows, so the conv
 * sees few distinct lengths.  cu_seqlens may be NULL (a buffer that is one
 * sequence): then only the rows are padded and out_cu_seqlens is not written
 * -- the case the reference crashed on.  out may equal in (padding in place:
 * only the new rows are written); out must hold dcp_gdn_padded_rows() rows
 * (out_capacity_rows).  dcp_gdn_strip() copies the first `rows` rows of a
 * padded conv output to `out` (nothing when out == padded: the padded buffer's
 * prefix already is the result).  Allocation-free.  Errors:
 * DCP_ERR_NULL_POINTER, DCP_ERR_INVALID_ARGUMENT (rows < 0, row_bytes 0,
 * num_cu_seqlens < 1), DCP_ERR_CAPACITY (out_capacity_rows too small),
 * DCP_ERR_OVERFLOW (the padded last entry past INT32_MAX), and for the host
 * version DCP_ERR_CORRUPT_INPUT when cu_seqlens do not describe the rows: a
 * first entry other than 0, a decreasing entry, or a last entry other than
 * `rows` (checked before anything is written).  dcp_gdn_padded_rows()
 * saturates at INT64_MAX, which no output holds.
 */
#define DCP_GDN_ALIGNMENT 4096
int64_t dcp_gdn_padded_rows(int64_t rows, int32_t alignment);
dcp_status dcp_gdn_pad(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, const int32_t *cu_seqlens,
                       int32_t num_cu_seqlens, void *out, int64_t out_capacity_rows, int32_t *out_cu_seqlens);
dcp_status dcp_gdn_strip(const void *padded, int64_t rows, size_t row_bytes, void *out);

#ifdef __cplusplus
}
#endif

#endif /* DCPACK_MODEL_H */
