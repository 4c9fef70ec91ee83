/*
 * bucket.c - sort sequences by length (descending, stable) and give each its
 * minimal CP size.  LSD radix sort on the complemented length: four stable
 * byte passes, O(n), no comparisons, the same order on every platform.
 */
#include "stages.h"

#include <string.h>

int32_t dcp_min_cp_size(int64_t length, int32_t max_seqlen_per_rank, int32_t min_cp_size, int32_t num_ranks)
{
    if (length <= 0 || max_seqlen_per_rank <= 0 || num_ranks <= 0) return 0;
    if (length > (int64_t)num_ranks * max_seqlen_per_rank) return 0;
    int64_t needed = (length + max_seqlen_per_rank - 1) / max_seqlen_per_rank;
    int64_t cp = min_cp_size > 1 ? min_cp_size : 1;
    while (cp < needed) cp *= 2;
    if (cp > num_ranks) cp = num_ranks; /* not a power of two: the whole group */
    return (int32_t)cp;
}

size_t dcp_bucket_scratch_size(const dcp_config *config)
{
    return dcp_size_add(DCP_ARENA_BYTES(int32_t, config->max_sequences), DCP_ARENA_BYTES(uint32_t, 256));
}

dcp_status dcp_bucket(const int32_t *lengths, int32_t n, const dcp_config *config, int32_t *sorted_ids,
                      int32_t *min_cp, dcp_arena *scratch, dcp_error *err)
{
    const int32_t ranks = dcp_config_num_ranks(config);
    const int32_t group = config->scheduler == DCP_SCHEDULER_DP_BALANCED ? config->context_parallel_size : ranks;
    const int32_t m = config->max_seqlen_per_rank;
    if (n > config->max_sequences)
        return dcp_fail(err, DCP_ERR_CAPACITY, "%d sequences exceed max_sequences = %d", n, config->max_sequences);
    for (int32_t i = 0; i < n; i++) {
        int32_t s = lengths[i];
        if (s <= 0)
            return dcp_fail(err, DCP_ERR_BAD_LENGTH, "sequence %d has length %d; lengths must be >= 1", i, s);
        int32_t cp = dcp_min_cp_size(s, m, config->min_cp_size, group);
        if (cp == 0)
            return dcp_fail(err, DCP_ERR_BAD_LENGTH,
                            "sequence %d has length %d, more than %d ranks x max_seqlen_per_rank %d = %lld tokens",
                            i, s, group, m, (long long)group * m);
        if (config->scheduler == DCP_SCHEDULER_DP_BALANCED) cp = group;
        min_cp[i] = cp;
        sorted_ids[i] = i;
    }
    if (n == 0) return DCP_OK;
    int32_t *tmp = DCP_ARENA_NEW(scratch, int32_t, n);
    uint32_t *count = DCP_ARENA_NEW(scratch, uint32_t, 256);
    if (!tmp || !count)
        return dcp_fail(err, DCP_ERR_CAPACITY, "bucket scratch too small for %d sequences", n);
    int32_t *src = sorted_ids, *dst = tmp;
    for (int pass = 0; pass < 4; pass++) {
        int shift = 8 * pass;
        memset(count, 0, 256 * sizeof *count);
        for (int32_t i = 0; i < n; i++) count[(~(uint32_t)lengths[src[i]] >> shift) & 0xFFu]++;
        if (count[(~(uint32_t)lengths[src[0]] >> shift) & 0xFFu] == (uint32_t)n) continue; /* one bucket: order unchanged */
        uint32_t sum = 0;
        for (int b = 0; b < 256; b++) {
            uint32_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int32_t i = 0; i < n; i++) dst[count[(~(uint32_t)lengths[src[i]] >> shift) & 0xFFu]++] = src[i];
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != sorted_ids) memcpy(sorted_ids, src, (size_t)n * sizeof *sorted_ids);
    return DCP_OK;
}
