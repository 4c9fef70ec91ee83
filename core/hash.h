/*
 * hash.h - the one 64-bit FNV-1a and the one finaliser the library hashes
 * with.  Internal.
 *
 * FNV-1a feeds bytes one at a time; a value is fed as its bytes from the
 * least significant up (by shifts, not by its bytes in memory), so a hash of
 * values is the same on every host.  Plan hashes, configuration digests and
 * the call tags ranks compare are all built from these, so a change here
 * changes every one of them.
 */
#ifndef DCP_HASH_H
#define DCP_HASH_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define DCP_HOST_DEVICE __host__ __device__
#else
#define DCP_HOST_DEVICE
#endif

#define DCP_FNV1A64_OFFSET 14695981039346656037ull
#define DCP_FNV1A64_PRIME 1099511628211ull

/* h with n bytes of p fed in order. */
static inline uint64_t dcp__fnv1a_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * DCP_FNV1A64_PRIME;
    return h;
}

/* h with the 4 bytes of v fed, least significant first. */
static inline uint64_t dcp__fnv1a_u32(uint64_t h, uint32_t v)
{
    for (int i = 0; i < 4; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * DCP_FNV1A64_PRIME;
    return h;
}

/* h with the 8 bytes of v fed, least significant first. */
static inline uint64_t dcp__fnv1a_u64(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * DCP_FNV1A64_PRIME;
    return h;
}

/*
 * The word-at-a-time forms: a whole 64-bit word per step, not its bytes, so
 * they are NOT byte FNV-1a and never equal dcp__fnv1a_u64 of the same value.
 * They key what stays in one job's processes: balanced's memo keys, size
 * signatures and merge-choice digest (dcp__fnv1a_word); the hashes of the
 * lengths, pairs and times ranks gather and compare, and the seal on a plan
 * made ahead (dcp__hash_word).  Ranks compare these values and plans carry
 * them: a change here changes them all.
 */

/* FNV-1a's step on a whole word. */
static inline uint64_t dcp__fnv1a_word(uint64_t h, uint64_t v) { return (h ^ v) * DCP_FNV1A64_PRIME; }

/* A word times the golden ratio's odd constant, its high bits folded down (a multiply alone leaves them unmixed). */
static inline uint64_t dcp__hash_word(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* splitmix64's finaliser: every input bit reaches every output bit. */
static inline DCP_HOST_DEVICE uint64_t dcp__mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
