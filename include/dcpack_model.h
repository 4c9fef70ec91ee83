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
 * MTP roll (as Megatron-LM's reference does): shift packed fields left by one token within each sequence.
 *
 * Each sequence's last position gets 0, so no value crosses into the next
 * sequence; slots past the last boundary (THD tail padding) roll as one more
 * sequence.  `cu_seqlens_padded` are the microbatch's global boundaries
 * (before CP slicing; num_cu_seqlens entries, starting at 0, non-decreasing)
 * as dcp_step hands them out.  `partition` is the microbatch's
 * (dcp_config.cp_partition): under zigzag with cp > 1 every span is a
 * multiple of 2*cp and one exchange carries two values per sequence to each
 * CP neighbour; under DCP_CP_CONTIGUOUS rank r holds global slots
 * [r * num_tokens, (r+1) * num_tokens) and sends one value per field to the
 * previous rank.  The group is ranks [group_first_rank, group_first_rank + cp)
 * of `comm`: the DPxCP communicator with the microbatch's local_cp_size and
 * rank - cp_rank, or the CP group's own communicator with 0.  fields[f] of
 * elem_size[f] bytes (1, 2, 4 or 8) hold num_tokens elements (this rank's
 * slots); out[f] gets the rolled field and overlaps no input (labels and
 * loss_mask roll together in one call).  `exchange` is one host buffer of
 * dcp_mtp_roll_exchange_bytes(num_cu_seqlens, elem_size, num_fields, comm
 * size) bytes.  `step_id` (0 = none) travels with the count of rolls made
 * over the handle (dcp_comm.calls) and the partition.
 *
 * Returns: DCP_OK; DCP_ERR_NULL_POINTER; DCP_ERR_INVALID_ARGUMENT (cp not a
 * power of two or outside comm, elem_size, num_fields outside [1, 4], an
 * unknown partition); DCP_ERR_CORRUPT_INPUT (cu_seqlens not starting at 0 or
 * decreasing, a zigzag span not divisible by 2*cp, a last boundary past
 * cp * num_tokens); DCP_ERR_OUT_OF_STEP (ranks whose roll count, step_id or
 * partition differ); DCP_ERR_COMM (exchanged values, sealed with sender, roll
 * count and hash, that did not arrive intact: never DCP_OK with a wrong
 * boundary value); the communicator's.
 * Collective: with comm != NULL every rank of comm calls it for the same
 * microbatch (each with its own group; cp == 1 ranks too, moving no bytes),
 * and errors are agreed before the exchange, so every rank returns the
 * lowest-numbered failing rank's status.  With cp == 1, comm may be NULL and
 * nothing is exchanged.
 * Allocation: none.
 * See docs/step.md#model-side-helpers-mtp-roll-and-gdn-padding;
 * dcp_mtp_roll_cuda (dcpack_cuda.h) is the device roll.
 */
#define DCP_MTP_ROLL_MAX_FIELDS 4
size_t dcp_mtp_roll_exchange_bytes(int32_t num_cu_seqlens, const size_t *elem_size, int32_t num_fields,
                                   int32_t comm_size);
dcp_status dcp_mtp_roll(dcp_comm *comm, uint64_t step_id, int32_t group_first_rank, int32_t cp,
                        dcp_cp_partition partition, const int32_t *cu_seqlens_padded, int32_t num_cu_seqlens, int64_t num_tokens, const void *const *fields, void *const *out,
                        const size_t *elem_size, int32_t num_fields, void *exchange);

/*
 * GDN causal-conv padding (as Megatron-LM's reference does): pad a packed buffer with zero rows.
 *
 * `rows` rows of row_bytes bytes are padded up to a multiple of `alignment`
 * (DCP_GDN_ALIGNMENT by default; <= 0: none), and the last cu_seqlens entry
 * grows by as many rows.  cu_seqlens may be NULL (a buffer that is one
 * sequence, the case the reference crashed on): only the rows are padded.
 * out may equal in; it holds dcp_gdn_padded_rows() rows (out_capacity_rows),
 * which saturates at INT64_MAX.  dcp_gdn_strip() copies the first `rows` rows
 * of a padded conv output to `out` (nothing when out == padded).
 * Returns: DCP_OK; DCP_ERR_NULL_POINTER; DCP_ERR_INVALID_ARGUMENT (rows < 0,
 * row_bytes 0, num_cu_seqlens < 1); DCP_ERR_CAPACITY (out_capacity_rows too
 * small); DCP_ERR_OVERFLOW (the padded last entry past INT32_MAX);
 * DCP_ERR_CORRUPT_INPUT (host version: cu_seqlens that do not describe the
 * rows, checked before anything is written).
 * Allocation: none.
 * See docs/step.md#model-side-helpers-mtp-roll-and-gdn-padding.
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
