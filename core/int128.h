/*
 * int128.h - the 128-bit integers cost arithmetic widens to, and the ways a
 * result comes back to int64.  Internal.
 *
 * Costs, bounds and makespans are int64 that saturate at INT64_MAX rather
 * than wrap: every rank must compute the same plan, and a wrapped cost would
 * rank a huge group as a cheap one.  Products of two int64 are formed in
 * dcp__i128 and brought back with one of the clamps below.
 */
#ifndef DCP_INT128_H
#define DCP_INT128_H

#include <stdint.h>

typedef __int128 dcp__i128;
typedef unsigned __int128 dcp__u128;

/* v in [0, INT64_MAX]: a cost or bound, never negative. */
static inline int64_t dcp__i128_saturate_nonneg(dcp__i128 v)
{
    if (v > (dcp__i128)INT64_MAX) return INT64_MAX;
    if (v < 0) return 0;
    return (int64_t)v;
}

/* v in [-INT64_MAX, INT64_MAX]: a signed difference of costs. */
static inline int64_t dcp__i128_saturate(dcp__i128 v)
{
    if (v > (dcp__i128)INT64_MAX) return INT64_MAX;
    if (v < -(dcp__i128)INT64_MAX) return -INT64_MAX;
    return (int64_t)v;
}

/* v capped at INT64_MAX; v is known to be at least INT64_MIN. */
static inline int64_t dcp__i128_cap(dcp__i128 v) { return v > (dcp__i128)INT64_MAX ? INT64_MAX : (int64_t)v; }

/* a + b capped at INT64_MAX, for b >= 0: the int64 sum of the same saturation. */
static inline int64_t dcp__sat_add_i64(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

#endif
