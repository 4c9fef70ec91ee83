/*
 * cost.h - the cost model's common case, inline: dcp_cost() (core/config.c)
 * in int64 arithmetic, for the schedulers, which evaluate it per sequence
 * and candidate CP size in their inner loops.  dcp__cost() returns exactly
 * what dcp_cost() returns.  dcp__group_cost() adds the small-microbatch
 * hinge to a group's summed cost.
 */
#ifndef DCP_CORE_COST_H
#define DCP_CORE_COST_H

#include "dcpack.h"
#include "int128.h"

/* The least k with 2^k >= v (v >= 1): log2 of a power of two, rounded up otherwise. */
static inline int dcp__log2_ceil(int32_t v)
{
    return v <= 1 ? 0 : 32 - __builtin_clz((uint32_t)v - 1u);
}

/*
 * The same cost in int64 when no product or sum overflows (every realistic
 * model and length): the scheduler calls dcp_cost per sequence and candidate
 * CP size, and 128-bit division dominates otherwise.  Returns 0 and leaves
 * *cost alone when the wide path is needed.
 */
static inline int dcp__cost_int64(const dcp_cost_model *model, int64_t length, int32_t cp, int64_t *cost)
{
    if (model->quadratic < 0 || model->linear < 0) return 0;
    int64_t t, quad, linear, work, fixed = 0;
    if (__builtin_mul_overflow(model->quadratic, length, &t) || __builtin_mul_overflow(t, length, &quad) ||
        __builtin_mul_overflow(model->linear, length, &linear) || __builtin_add_overflow(quad, linear, &work))
        return 0;
    if (cp > 1) {
        int k = dcp__log2_ceil(cp);
        if (k > DCP_MAX_LOG2_CP) k = DCP_MAX_LOG2_CP;
        int64_t kv_bytes, kv_total;
        if (model->kv[k] < 0 || model->round_latency < 0) return 0;
        if (__builtin_mul_overflow(model->kv[k], length, &kv_bytes) ||
            __builtin_mul_overflow(kv_bytes, (int64_t)cp - 1, &kv_total) ||
            __builtin_mul_overflow(model->round_latency, (int64_t)cp - 1, &fixed))
            return 0;
        int64_t exposed = kv_total - quad; /* both >= 0: no overflow */
        if (exposed > 0 && __builtin_add_overflow(work, exposed, &work)) return 0;
        /* the gathered K/V: every rank pays for the whole sequence, so it is added after the division */
        int64_t gather;
        if (model->cp_gather[k] < 0 || __builtin_mul_overflow(model->cp_gather[k], length, &gather) ||
            __builtin_add_overflow(fixed, gather, &fixed))
            return 0;
    }
    /* work >= 0: a power-of-two size divides by a shift (a 64-bit division costs tens of cycles) */
    int64_t per_rank = (cp & (cp - 1)) == 0 ? work >> __builtin_ctz((uint32_t)cp) : work / cp;
    if (__builtin_add_overflow(per_rank, fixed, &per_rank)) return 0;
    *cost = per_rank;
    return 1;
}

/* dcp_cost(), with its common case inline. */
static inline int64_t dcp__cost(const dcp_cost_model *model, int64_t length, int32_t cp)
{
    int64_t cost;
    if (model && length > 0 && cp > 0 && dcp__cost_int64(model, length, cp, &cost)) return cost;
    return dcp_cost(model, length, cp);
}

/*
 * A group's cost on each of its ranks in one microbatch: cost_sum (the
 * saturated sum of dcp_cost() over its sequences) plus the small-microbatch
 * hinge small_slope * max(0, small_knee - tokens_per_rank), tokens_per_rank
 * the group's token slots per rank (the sum of its sequences' lengths over
 * cp, rounded down, as the token-capacity invariant counts them).  The hinge
 * is >= 0, so a group never costs less than its sequences: every lower bound
 * of core/stats.c, built from dcp_cost() alone, stays one.  Saturates at
 * INT64_MAX; negative coefficients (dcp_config_validate rejects them) count
 * as 0.
 */
static inline int64_t dcp__group_cost(const dcp_cost_model *m, int64_t cost_sum, int64_t tokens_per_rank)
{
    if (m->small_slope <= 0 || tokens_per_rank >= m->small_knee) return cost_sum;
    const dcp__i128 hinge = (dcp__i128)m->small_slope * (m->small_knee - (tokens_per_rank > 0 ? tokens_per_rank : 0));
    const dcp__i128 total = (dcp__i128)cost_sum + hinge;
    return dcp__i128_cap(total);
}

#endif
