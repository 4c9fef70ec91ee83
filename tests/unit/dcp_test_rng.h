/*
 * dcp_test_rng.h - the tests' random numbers: a 64-bit xorshift, the high
 * half of each state.  A test file defines DCP_TEST_RNG_SEED (its own seed,
 * so its batches stay what they were) before including this, and may set
 * rng_state again between cases.
 */
#ifndef DCP_TEST_RNG_H
#define DCP_TEST_RNG_H

#include <stdint.h>

#ifndef DCP_TEST_RNG_SEED
#define DCP_TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t rng_state = DCP_TEST_RNG_SEED;

static inline uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* Uniform-ish in [lo, hi] (modulo bias is irrelevant here). */
static inline int32_t rng_range(int32_t lo, int32_t hi) { return lo + (int32_t)(rng() % (uint32_t)(hi - lo + 1)); }

#endif
