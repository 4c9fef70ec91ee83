/*
 * oracle.c - the reference's per-rank batch, computed literally (see oracle.h).
 * Every step names the reference function it stands for.
 */
#include "oracle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dcp_status fail(char *message, size_t size, dcp_status status, const char *format, ...)
{
    if (message && size) {
        va_list args;
        va_start(args, format);
        vsnprintf(message, size, format, args);
        va_end(args);
    }
    return status;
}

static int64_t round_up(int64_t v, int64_t a) { return ((v + a - 1) / a) * a; }

/* sample_id_groups[m][r] of the reference: the ids rank r holds in microbatch m */
static int32_t rank_ids(const dcp_plan *plan, int32_t m, int32_t r, const int32_t **ids)
{
    for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
        if (r >= plan->group_first_rank[g] && r < plan->group_first_rank[g] + plan->group_cp_size[g]) {
            *ids = plan->ids + plan->group_first_id[g];
            return plan->group_first_id[g + 1] - plan->group_first_id[g];
        }
    }
    *ids = NULL;
    return 0;
}

static int contains(const int32_t *ids, int32_t n, int32_t id)
{
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* torch.searchsorted(sorted, value, right=True) */
static int64_t searchsorted_right(const int32_t *sorted, int64_t n, int64_t value)
{
    int64_t count = 0;
    while (count < n && sorted[count] <= value) count++;
    return count;
}

/* TransformerEngine's binary_search in thd_partition_indices_kernel */
static int te_binary_search(int target, const int *array, int len)
{
    int left = 1, right = len - 1;
    while (left < right) {
        int mid = (left + right) / 2;
        if (array[mid] <= target) left = mid + 1;
        else right = mid;
    }
    return left - 1;
}

typedef struct tensors {
    int64_t length;
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
    uint8_t *mask;
} tensors;

static void tensors_free(tensors *t)
{
    free(t->tokens), free(t->labels), free(t->position_ids), free(t->loss_mask), free(t->mask);
    memset(t, 0, sizeof *t);
}

/* 0, or -1 when out of memory (t then holds nothing) */
static int tensors_alloc(tensors *t, int64_t length)
{
    t->length = length;
    size_t n = (size_t)(length > 0 ? length : 1);
    t->tokens = calloc(n, sizeof(int64_t));
    t->labels = calloc(n, sizeof(int64_t));
    t->position_ids = calloc(n, sizeof(int64_t));
    t->loss_mask = calloc(n, sizeof(float));
    t->mask = calloc(n, 1);
    if (t->tokens && t->labels && t->position_ids && t->loss_mask && t->mask) return 0;
    tensors_free(t);
    return -1;
}

/*
 * new tensors of `length` slots: the first min(length, old) copied, the rest 0 and mask True;
 * -1 when out of memory (t unchanged)
 */
static int tensors_resize(tensors *t, int64_t length)
{
    tensors n;
    if (tensors_alloc(&n, length) != 0) return -1;
    int64_t keep = t->length < length ? t->length : length;
    for (int64_t i = 0; i < length; i++) n.mask[i] = 1;
    memcpy(n.tokens, t->tokens, (size_t)keep * 8);
    memcpy(n.labels, t->labels, (size_t)keep * 8);
    memcpy(n.position_ids, t->position_ids, (size_t)keep * 8);
    memcpy(n.loss_mask, t->loss_mask, (size_t)keep * 4);
    memcpy(n.mask, t->mask, (size_t)keep);
    tensors_free(t);
    *t = n;
    return 0;
}

dcp_status dcp_oracle_microbatch_compute(const dcp_config *c, const dcp_plan *plan, const dcp_oracle_batch *batch,
                                         int32_t m, int32_t rank, dcp_oracle_microbatch *out, char *msg, size_t msz)
{
    memset(out, 0, sizeof *out);
    const int32_t *mine;
    int32_t n = rank_ids(plan, m, rank, &mine);
    if (n == 0) return fail(msg, msz, DCP_ERR_INVALID_PLAN, "oracle: rank %d empty in microbatch %d", rank, m);

    /* build_packed_microbatches: local_cp_size = ranks whose list holds this rank's first id */
    int32_t cp = 0, cp_rank = 0;
    for (int32_t r = 0; r < plan->num_ranks; r++) {
        const int32_t *ids;
        int32_t k = rank_ids(plan, m, r, &ids);
        if (contains(ids, k, mine[0])) {
            if (r < rank) cp_rank++;
            cp++;
        }
    }

    /* _pack_sequences: concatenate whole samples; cu_seqlens from original, cu_seqlens_padded from padded */
    int64_t packed = 0;
    for (int32_t k = 0; k < n; k++) packed += batch->padded[mine[k]];
    tensors t;
    dcp_status status = DCP_OK;
    int ok = tensors_alloc(&t, packed) == 0;
    int32_t *cu = calloc((size_t)n + 2 + (size_t)c->max_sequences_per_microbatch + 2, sizeof *cu);
    int32_t *cup = calloc((size_t)n + 2 + (size_t)c->max_sequences_per_microbatch + 2, sizeof *cup);
    if (!ok || !cu || !cup) goto out_of_memory;
    int32_t entries = n + 1, max_seqlen = 0;
    int64_t at = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = mine[k], len = batch->padded[id];
        memcpy(t.tokens + at, batch->tokens[id], (size_t)len * 8);
        memcpy(t.labels + at, batch->labels[id], (size_t)len * 8);
        memcpy(t.position_ids + at, batch->position_ids[id], (size_t)len * 8);
        memcpy(t.loss_mask + at, batch->loss_mask[id], (size_t)len * 4);
        at += len;
        cu[k + 1] = cu[k] + batch->original[id];
        cup[k + 1] = cup[k] + len;
        if (len > max_seqlen) max_seqlen = len;
    }

    /* get_thd_padding_kwargs; thd_max_packed_sequences = K, plus the dummy's slot under append_dummy */
    const int padding = c->pad_to_max_seqlen || c->pad_alignment > 0;
    const int64_t target_len = c->pad_to_max_seqlen ? c->max_seqlen_per_rank : -1;
    const int64_t alignment = (!c->pad_to_max_seqlen && c->pad_alignment > 0) ? c->pad_alignment : -1;
    const int dummy_policy = c->thd_tail_policy == DCP_THD_TAIL_APPEND_DUMMY;
    const int64_t max_num_seqs = (padding && c->max_sequences_per_microbatch > 0)
                                     ? c->max_sequences_per_microbatch + (dummy_policy ? 1 : 0)
                                     : -1;
    const int zigzag = c->cp_partition == DCP_CP_ZIGZAG;
    int64_t contiguous_local = -1;
    if (cp > 1 && !zigzag && padding)
        contiguous_local = target_len >= 0 ? target_len : round_up((cup[n] + cp - 1) / cp, alignment);

    /* _build_thd_padding_mask and _sanitize_thd_padding_values, before slicing */
    for (int64_t x = 0; x < packed; x++) {
        int64_t k = searchsorted_right(cup + 1, n, x);
        int64_t valid_end = k < n ? cup[k] + (cu[k + 1] - cu[k]) : 0;
        t.mask[x] = k >= n || x >= valid_end;
        if (t.mask[x]) t.tokens[x] = t.labels[x] = t.position_ids[x] = 0, t.loss_mask[x] = 0.0f;
    }

    /* extend_thd_padding_before_cp_slice */
    int64_t non_dummy_target = -1;
    if (padding && !dummy_policy) {
        int64_t local_t = target_len >= 0 ? target_len
                          : contiguous_local >= 0 ? contiguous_local
                                                  : round_up((cup[n] + cp - 1) / cp, alignment);
        int64_t gt = local_t * cp;
        if (cup[n] > gt) {
            status = fail(msg, msz, DCP_ERR_CAPACITY, "oracle: packed %d exceeds target %lld", cup[n], (long long)gt);
            goto done;
        }
        if (cp > 1 && zigzag && gt % (2 * cp) != 0) {
            status = fail(msg, msz, DCP_ERR_BAD_LENGTH, "oracle: target %lld vs 2*cp", (long long)gt);
            goto done;
        }
        if (cup[n] < gt) {
            cup[n] = (int32_t)gt;
            if (cup[n] - cup[n - 1] > max_seqlen) max_seqlen = cup[n] - cup[n - 1];
        }
        non_dummy_target = gt;
    }

    /* get_cp_slice_for_thd */
    int64_t partition_total = non_dummy_target >= 0 ? non_dummy_target : contiguous_local >= 0 ? contiguous_local * cp : -1;
    int64_t total = partition_total >= 0 ? partition_total : cup[n];
    if (partition_total >= 0) {
        if (partition_total < t.length) {
            status = fail(msg, msz, DCP_ERR_CAPACITY, "oracle: partition total below the packed length");
            goto done;
        }
        if (tensors_resize(&t, partition_total) != 0) goto out_of_memory;
    }
    if (cp > 1) {
        tensors s;
        if (!zigzag) {
            if (total % cp != 0) {
                status = fail(msg, msz, DCP_ERR_BAD_LENGTH, "oracle: %lld not divisible by cp %d", (long long)total, cp);
                goto done;
            }
            int64_t rows = total / cp;
            if (tensors_alloc(&s, rows) != 0) goto out_of_memory;
            for (int64_t i = 0; i < rows; i++) {
                int64_t x = cp_rank * rows + i;
                s.tokens[i] = t.tokens[x], s.labels[i] = t.labels[x], s.position_ids[i] = t.position_ids[x];
                s.loss_mask[i] = t.loss_mask[x], s.mask[i] = t.mask[x];
            }
        } else {
            int *cu_s = calloc((size_t)n + 1, sizeof *cu_s);
            if (!cu_s) goto out_of_memory;
            for (int32_t i = 0; i <= n; i++) {
                if (cup[i] % (2 * cp) != 0) {
                    free(cu_s);
                    status = fail(msg, msz, DCP_ERR_BAD_LENGTH, "oracle: cu_seqlens_padded[%d] = %d vs 2*cp", i, cup[i]);
                    goto done;
                }
                cu_s[i] = cup[i] / cp;
            }
            int64_t rows = total / cp;
            if (tensors_alloc(&s, rows) != 0) {
                free(cu_s);
                goto out_of_memory;
            }
            for (int token_id = 0; token_id < rows; token_id++) {
                int seq = te_binary_search(token_id, cu_s, n + 1);
                int seq_len = cu_s[seq + 1] - cu_s[seq];
                int index = token_id - cu_s[seq];
                int offset = index < seq_len / 2 ? cp_rank : (cp - 1) * 2 - cp_rank;
                index += cu_s[seq] * cp + seq_len / 2 * offset;
                s.tokens[token_id] = t.tokens[index], s.labels[token_id] = t.labels[index];
                s.position_ids[token_id] = t.position_ids[index], s.loss_mask[token_id] = t.loss_mask[index];
                s.mask[token_id] = t.mask[index];
            }
            free(cu_s);
        }
        tensors_free(&t);
        t = s;
    }
    int64_t total_tokens = contiguous_local >= 0 ? contiguous_local : cup[n] / cp; /* what TP rank 0 broadcasts */
    if (total_tokens != t.length) {
        status = fail(msg, msz, DCP_ERR_INVALID_ARGUMENT, "oracle: total_tokens %lld vs %lld rows",
                      (long long)total_tokens, (long long)t.length);
        goto done;
    }

    /* pad_sequence_for_thd */
    if (padding) {
        int64_t local_actual = t.length;
        int64_t local_target = target_len >= 0 ? target_len : round_up(local_actual, alignment);
        int64_t gt = local_target * cp, ga = cup[n];
        for (int32_t k = 0; k < n; k++)
            if (cu[k + 1] - cu[k] > gt) {
                status = fail(msg, msz, DCP_ERR_CAPACITY, "oracle: request longer than the target");
                goto done;
            }
        if (local_actual > local_target) {
            status = fail(msg, msz, DCP_ERR_CAPACITY, "oracle: %lld rows exceed target %lld", (long long)local_actual,
                          (long long)local_target);
            goto done;
        }
        if (tensors_resize(&t, local_target) != 0) goto out_of_memory;
        int64_t dummy = 0, last_padded = 0;
        if (gt > ga && dummy_policy) {
            dummy = gt - ga;
            if (cp > 1 && zigzag && dummy % (2 * cp) != 0) {
                status = fail(msg, msz, DCP_ERR_BAD_LENGTH, "oracle: dummy %lld vs 2*cp", (long long)dummy);
                goto done;
            }
            cu[entries] = cu[entries - 1] + (int32_t)dummy; /* pad_between_seqs is True */
            cup[entries] = (int32_t)gt;
            entries++;
        } else if (gt > ga) {
            if (cp != 1) {
                status = fail(msg, msz, DCP_ERR_INVALID_ARGUMENT, "oracle: non-dummy tail after slicing with cp > 1");
                goto done;
            }
            cup[entries - 1] = (int32_t)gt;
            last_padded = cup[entries - 1] - cup[entries - 2];
        }
        if (max_num_seqs >= 0) {
            if (entries > max_num_seqs + 1) {
                status = fail(msg, msz, DCP_ERR_CAPACITY, "oracle: %d sequences exceed thd_max_packed_sequences %lld",
                              entries - 1, (long long)max_num_seqs);
                goto done;
            }
            while (entries < max_num_seqs + 1) {
                cu[entries] = cu[entries - 1];
                cup[entries] = cup[entries - 1];
                entries++;
            }
            max_seqlen = (int32_t)gt;
        } else {
            if (dummy > max_seqlen) max_seqlen = (int32_t)dummy;
            if (last_padded > max_seqlen) max_seqlen = (int32_t)last_padded;
        }
    }

    out->num_tokens = t.length;
    out->tokens = t.tokens, out->labels = t.labels, out->position_ids = t.position_ids;
    out->loss_mask = t.loss_mask, out->padding_mask = t.mask;
    out->cu_seqlens = cu, out->cu_seqlens_padded = cup;
    out->num_cu_seqlens = entries, out->max_seqlen = max_seqlen;
    out->local_cp_size = cp, out->cp_rank = cp_rank, out->num_sequences = n;
    return DCP_OK;
out_of_memory:
    status = fail(msg, msz, DCP_ERR_ALLOC, "oracle: out of memory");
done:
    tensors_free(&t);
    free(cu), free(cup);
    return status;
}

void dcp_oracle_microbatch_free(dcp_oracle_microbatch *o)
{
    free(o->tokens), free(o->labels), free(o->position_ids), free(o->loss_mask), free(o->padding_mask);
    free(o->cu_seqlens), free(o->cu_seqlens_padded);
    memset(o, 0, sizeof *o);
}
