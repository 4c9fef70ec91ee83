/*
 * bucket.c - sort sequences by length (descending, stable) and give each its
 * minimal CP size.  LSD radix sort on the complemented length: stable
 * passes of at most 11 bits over the bits where lengths differ (as few passes
 * as that takes, each digit as narrow as they allow), O(n), no comparisons,
 * the same order on every platform.
 */
#include "stages.h"

#include <string.h>

/* dcp__min_cp_size(), inlined into the bucket loop (called once per sequence). */
static inline int32_t min_cp_size_of(int64_t length, int32_t max_seqlen_per_rank, int32_t min_cp_size,
                                     int32_t num_ranks)
{
    if (length <= 0 || max_seqlen_per_rank <= 0 || num_ranks <= 0) return 0;
    if (length > (int64_t)num_ranks * max_seqlen_per_rank) return 0;
    /* the least power of two (from min_cp_size) with cp * max_seqlen_per_rank >= length, without a division */
    int64_t cp = min_cp_size > 1 ? min_cp_size : 1;
    if ((cp & (cp - 1)) == 0 && (max_seqlen_per_rank & (max_seqlen_per_rank - 1)) == 0) {
        /* powers of two (the usual configuration): ranks needed by a shift, rounded up by clz */
        int64_t needed = (length + max_seqlen_per_rank - 1) >> __builtin_ctz((uint32_t)max_seqlen_per_rank);
        int64_t pow2 = needed <= 1 ? 1 : (int64_t)1 << (64 - __builtin_clzll((uint64_t)needed - 1));
        if (pow2 > cp) cp = pow2;
    } else {
        while (cp * max_seqlen_per_rank < length) cp *= 2;
    }
    if (cp > num_ranks) cp = num_ranks; /* not a power of two: the whole group */
    return (int32_t)cp;
}

/* Digits of the radix sort: 11 bits (lengths below 2^22 take two passes), 8 below 1024 sequences. */
enum { DIGIT_BITS = 11, DIGITS = 1 << DIGIT_BITS, MAX_PASSES = 3 /* 32 key bits */ };

int32_t dcp__min_cp_size(int64_t length, int32_t max_seqlen_per_rank, int32_t min_cp_size, int32_t num_ranks)
{
    return min_cp_size_of(length, max_seqlen_per_rank, min_cp_size, num_ranks);
}

size_t dcp__bucket_scratch_size(const dcp_config *config)
{
    size_t keys = DCP_ARENA_BYTES(uint64_t, config->max_sequences);
    return dcp__size_add(dcp__size_add(keys, keys), DCP_ARENA_BYTES(uint32_t, MAX_PASSES * DIGITS));
}

dcp_status dcp__bucket(const int32_t *lengths, int32_t n, const dcp_config *config, int32_t *sorted_ids,
                      int32_t *min_cp, dcp__arena *scratch, dcp__error *err)
{
    const int32_t ranks = dcp_config_num_ranks(config);
    const int32_t group = config->scheduler == DCP_SCHEDULER_DP_BALANCED ? config->context_parallel_size : ranks;
    const int32_t m = config->max_seqlen_per_rank;
    if (n > config->max_sequences)
        return dcp__fail(err, DCP_ERR_CAPACITY, "%d sequences exceed max_sequences = %d", n, config->max_sequences);
    for (int32_t i = 0; i < n; i++) {
        int32_t s = lengths[i];
        if (s <= 0)
            return dcp__fail(err, DCP_ERR_BAD_LENGTH, "sequence %d has length %d; lengths must be >= 1", i, s);
        int32_t cp = min_cp_size_of(s, m, config->min_cp_size, group);
        if (cp == 0)
            return dcp__fail(err, DCP_ERR_BAD_LENGTH,
                            "sequence %d has length %d, more than %d ranks x max_seqlen_per_rank %d = %lld tokens",
                            i, s, group, m, (long long)group * m);
        if (config->scheduler == DCP_SCHEDULER_DP_BALANCED) cp = group;
        min_cp[i] = cp;
    }
    if (n == 0) return DCP_OK;
    uint64_t *src = DCP_ARENA_NEW(scratch, uint64_t, n), *dst = DCP_ARENA_NEW(scratch, uint64_t, n);
    uint32_t *count = DCP_ARENA_NEW(scratch, uint32_t, MAX_PASSES * DIGITS);
    if (!src || !dst || !count)
        return dcp__fail(err, DCP_ERR_CAPACITY, "bucket scratch too small for %d sequences", n);
    /*
     * Key: the complemented length above the id, so the passes read one
     * array in order; they cover only the length bits where the keys differ,
     * and the ids below keep equal lengths in id order (the passes are stable).
     */
    uint32_t all_or = 0, all_and = ~0u;
    for (int32_t i = 0; i < n; i++) {
        uint32_t key = ~(uint32_t)lengths[i];
        src[i] = (uint64_t)key << 32 | (uint32_t)i;
        all_or |= key;
        all_and &= key;
    }
    uint32_t differ = all_or ^ all_and;
    /* as few passes as 11-bit digits need (8-bit below 1024 sequences), the digits as narrow as those passes allow */
    const int low = differ ? __builtin_ctz(differ) : 32, span = differ ? 32 - __builtin_clz(differ) - low : 0;
    const int widest = n >= 1024 ? DIGIT_BITS : 8, passes = (span + widest - 1) / widest;
    const int bits = passes > 0 ? (span + passes - 1) / passes : widest;
    const uint32_t mask = (1u << bits) - 1;
    /* every pass's histogram in one read of the keys (a pass permutes keys, not their digits' counts) */
    memset(count, 0, (size_t)passes * (mask + 1) * sizeof *count);
    for (int32_t i = 0; i < n && passes > 0; i++) { /* all lengths equal: no pass, and low is 32 */
        const uint32_t key = (uint32_t)(src[i] >> 32) >> low;
        for (int p = 0; p < passes; p++) count[(size_t)p * (mask + 1) + ((key >> (p * bits)) & mask)]++;
    }
    for (int p = 0; p < passes; p++) {
        const int at = 32 + low + p * bits;
        uint32_t *c = count + (size_t)p * (mask + 1), sum = 0;
        for (uint32_t d = 0; d <= mask; d++) {
            uint32_t k = c[d];
            c[d] = sum;
            sum += k;
        }
        for (int32_t i = 0; i < n; i++) dst[c[(src[i] >> at) & mask]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    for (int32_t i = 0; i < n; i++) sorted_ids[i] = (int32_t)(uint32_t)src[i];
    return DCP_OK;
}
