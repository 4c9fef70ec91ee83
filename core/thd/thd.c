/*
 * thd.c - THD padding and CP-slicing geometry of one microbatch: where the
 * reference pads, how long each rank's buffer is, what its cu_seqlens say and
 * which real tokens land where.  Integer arithmetic only; no data touched.
 *
 * The order follows get_batch_on_this_rank_for_sequence_packing: the tail is
 * attached before CP slicing when it belongs to the last sequence
 * (extend_last) or when contiguous slicing must fix every rank's width first;
 * otherwise the slice is cut from the packed spans and each rank pads its own
 * buffer afterwards (append_dummy), the tail becoming a dummy sequence.
 */
#include "thd.h"

static int64_t round_up(int64_t value, int64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

void dcp__cu_seqlens_cpu(const int32_t *original, const int32_t *padded, int32_t n, int32_t *cu_seqlens,
                        int32_t *cu_seqlens_padded, int32_t *max_seqlen)
{
    int32_t longest = 0;
    cu_seqlens[0] = 0;
    cu_seqlens_padded[0] = 0;
    for (int32_t k = 0; k < n; k++) {
        cu_seqlens[k + 1] = cu_seqlens[k] + original[k];
        cu_seqlens_padded[k + 1] = cu_seqlens_padded[k] + padded[k];
        if (padded[k] > longest) longest = padded[k];
    }
    *max_seqlen = longest;
}

void dcp__thd_params_from_config(const dcp_config *c, int32_t cp, dcp__thd_params *p)
{
    p->cp = cp;
    p->partition = c->cp_partition;
    p->target = c->pad_to_max_seqlen ? c->max_seqlen_per_rank : 0;
    p->alignment = p->target > 0 ? 0 : c->pad_alignment;
    p->tail = c->thd_tail_policy;
    int padding = p->target > 0 || p->alignment > 0;
    int32_t cap = c->max_sequences_per_microbatch;
    int64_t s = (padding && cap > 0) ? (int64_t)cap + (p->tail == DCP_THD_TAIL_APPEND_DUMMY ? 1 : 0) : 0;
    p->max_packed_sequences = (int32_t)(s < INT32_MAX ? s : INT32_MAX); /* INT32_MAX: no cap in practice */
}

dcp_status dcp__thd_geometry_compute(const dcp__thd_params *p, const int32_t *original, const int32_t *padded, int32_t n,
                                    dcp__thd_geometry *g, dcp__error *err)
{
    const int64_t cp = p->cp;
    if (cp < 1 || n < 1)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "THD geometry: %d sequences on a CP group of %lld", n,
                        (long long)cp);
    int64_t packed = 0, longest_original = 0;
    int32_t longest = 0;
    for (int32_t k = 0; k < n; k++) {
        if (padded[k] < 1 || original[k] < 0 || original[k] > padded[k])
            return dcp__fail(err, DCP_ERR_BAD_LENGTH, "THD geometry: sequence %d has original length %d, padded %d", k,
                            original[k], padded[k]);
        packed += padded[k];
        if (padded[k] > longest) longest = padded[k];
        if (original[k] > longest_original) longest_original = original[k];
    }
    const int padding = p->target > 0 || p->alignment > 0;
    const int zigzag = cp > 1 && p->partition == DCP_CP_ZIGZAG;

    /* contiguous slicing with padding fixes each rank's width before cutting */
    int64_t contiguous_local = 0;
    if (cp > 1 && p->partition == DCP_CP_CONTIGUOUS && padding)
        contiguous_local = p->target > 0 ? p->target : round_up((packed + cp - 1) / cp, p->alignment);

    int64_t last_end = packed, partition_total = packed, max_seqlen = longest;
    if (padding && p->tail == DCP_THD_TAIL_EXTEND_LAST) {
        int64_t local_target = p->target > 0            ? p->target
                               : contiguous_local > 0    ? contiguous_local
                                                         : round_up((packed + cp - 1) / cp, p->alignment);
        int64_t global_target = local_target * cp;
        if (packed > global_target)
            return dcp__fail(err, DCP_ERR_CAPACITY, "THD padding: %lld packed tokens exceed the target of %lld",
                            (long long)packed, (long long)global_target);
        if (zigzag && global_target % (2 * cp) != 0)
            return dcp__fail(err, DCP_ERR_BAD_LENGTH, "THD padding: target %lld is not divisible by 2*cp = %lld",
                            (long long)global_target, (long long)(2 * cp));
        if (packed < global_target) {
            last_end = global_target;
            int64_t last_span = global_target - (packed - padded[n - 1]);
            if (last_span > max_seqlen) max_seqlen = last_span;
        }
        partition_total = global_target;
    } else if (contiguous_local > 0) {
        partition_total = contiguous_local * cp;
        if (packed > partition_total)
            return dcp__fail(err, DCP_ERR_CAPACITY, "THD padding: %lld packed tokens exceed the target of %lld",
                            (long long)packed, (long long)partition_total);
    }
    if (last_end > INT32_MAX || partition_total > INT32_MAX)
        return dcp__fail(err, DCP_ERR_OVERFLOW, "THD geometry: %lld tokens overflow int32 cu_seqlens",
                        (long long)partition_total);

    if (cp > 1 && p->partition == DCP_CP_CONTIGUOUS && partition_total % cp != 0)
        return dcp__fail(err, DCP_ERR_BAD_LENGTH, "contiguous CP slicing: %lld tokens not divisible by cp = %lld",
                        (long long)partition_total, (long long)cp);
    if (zigzag) {
        int64_t start = 0;
        for (int32_t k = 0; k < n; k++) {
            int64_t span = (k == n - 1) ? last_end - start : padded[k];
            if (span % (2 * cp) != 0)
                return dcp__fail(err, DCP_ERR_BAD_LENGTH,
                                "zigzag CP slicing: sequence %d spans %lld slots, not divisible by 2*cp = %lld", k,
                                (long long)span, (long long)(2 * cp));
            start += span;
        }
    }

    int64_t local = partition_total / cp, num_tokens = local, dummy = 0, entries = (int64_t)n + 1;
    if (padding) {
        num_tokens = p->target > 0 ? p->target : round_up(local, p->alignment);
        if (num_tokens < local)
            return dcp__fail(err, DCP_ERR_CAPACITY, "THD padding: %lld local tokens exceed the target of %lld",
                            (long long)local, (long long)num_tokens);
        int64_t global_target = num_tokens * cp;
        if (global_target > INT32_MAX)
            return dcp__fail(err, DCP_ERR_OVERFLOW, "THD padding: target %lld overflows int32 cu_seqlens",
                            (long long)global_target);
        if (longest_original > global_target)
            return dcp__fail(err, DCP_ERR_CAPACITY, "THD padding: a sequence of %lld tokens exceeds the target %lld",
                            (long long)longest_original, (long long)global_target);
        if (global_target > last_end && p->tail == DCP_THD_TAIL_APPEND_DUMMY) {
            dummy = global_target - last_end;
            if (zigzag && dummy % (2 * cp) != 0)
                return dcp__fail(err, DCP_ERR_BAD_LENGTH,
                                "THD padding: dummy sequence of %lld tokens not divisible by 2*cp = %lld; use an "
                                "even CP-local alignment",
                                (long long)dummy, (long long)(2 * cp));
            entries++;
        }
        if (p->max_packed_sequences > 0) {
            if (entries > (int64_t)p->max_packed_sequences + 1)
                return dcp__fail(err, DCP_ERR_CAPACITY,
                                "THD padding: %lld sequences (dummy included) exceed the fixed capacity of %d",
                                (long long)(entries - 1), p->max_packed_sequences);
            entries = (int64_t)p->max_packed_sequences + 1;
            max_seqlen = global_target;
        } else if (dummy > max_seqlen) {
            max_seqlen = dummy;
        }
    }
    g->num_sequences = n;
    g->packed_tokens = packed;
    g->partition_total = partition_total;
    g->local_tokens = local;
    g->num_tokens = num_tokens;
    g->last_padded_end = (int32_t)last_end;
    g->dummy_length = (int32_t)dummy;
    g->num_cu_seqlens = (int32_t)entries;
    g->max_seqlen = (int32_t)max_seqlen;
    return DCP_OK;
}

void dcp__thd_cu_seqlens_write(const dcp__thd_geometry *g, const int32_t *original, const int32_t *padded, int32_t n,
                              int32_t *cu_seqlens, int32_t *cu_seqlens_padded)
{
    int32_t longest;
    dcp__cu_seqlens_cpu(original, padded, n, cu_seqlens, cu_seqlens_padded, &longest);
    cu_seqlens_padded[n] = g->last_padded_end;
    int32_t used = n + 1;
    if (g->dummy_length > 0) {
        cu_seqlens[n + 1] = cu_seqlens[n] + g->dummy_length;
        cu_seqlens_padded[n + 1] = cu_seqlens_padded[n] + g->dummy_length;
        used++;
    }
    for (int32_t i = used; i < g->num_cu_seqlens; i++) {
        cu_seqlens[i] = cu_seqlens[used - 1];
        cu_seqlens_padded[i] = cu_seqlens_padded[used - 1];
    }
}

int32_t dcp__thd_real_pieces(const dcp__thd_geometry *g, const dcp__thd_params *p, const int32_t *original,
                            const int32_t *cu_seqlens_padded, int32_t cp_rank, int32_t *seq, int64_t *seq_offset,
                            int64_t *local_offset, int64_t *length)
{
    const int32_t n = g->num_sequences;
    const int64_t cp = p->cp;
    int32_t count = 0;
    if (cp > 1 && p->partition == DCP_CP_ZIGZAG) {
        for (int32_t k = 0; k < n; k++) {
            int64_t start = cu_seqlens_padded[k];
            int64_t chunk = ((int64_t)cu_seqlens_padded[k + 1] - start) / (2 * cp);
            for (int half = 0; half < 2; half++) {
                int64_t first = (half == 0 ? cp_rank : 2 * cp - 1 - cp_rank) * chunk;
                int64_t real = original[k] - first;
                if (real <= 0) continue;
                seq[count] = k;
                seq_offset[count] = first;
                local_offset[count] = start / cp + half * chunk;
                length[count] = real < chunk ? real : chunk;
                count++;
            }
        }
        return count;
    }
    /* one window of the packed buffer: [lo, hi) */
    int64_t lo = (int64_t)cp_rank * g->local_tokens, hi = lo + g->local_tokens;
    for (int32_t k = 0; k < n; k++) {
        int64_t a = cu_seqlens_padded[k], b = a + original[k];
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        seq[count] = k;
        seq_offset[count] = a - cu_seqlens_padded[k];
        local_offset[count] = a - lo;
        length[count] = b - a;
        count++;
    }
    return count;
}
