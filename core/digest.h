/*
 * digest.h - a digest of the bytes a rank brings into a step.  Internal.
 *
 * CP siblings must hold identical inputs; comparing their lengths is not
 * enough (the same lengths can carry different tokens).  Each sibling
 * digests every element of the fields it moves, over its sequences in order,
 * and the siblings compare the digests.  The digest is a sum, modulo 2^64,
 * of one mixed term per element:
 *
 *     digest = sum over fields f, positions p of  mix(bits(x[f][p]) + mix(p * K + f + 1))
 *
 * where p counts elements over the concatenation of the rank's sequences and
 * bits() is the element's 8 (int64 fields) or 4 (loss_mask) bytes as an
 * unsigned integer, so -0.0f and 0.0f differ.  A sum of independent terms can
 * be computed in any order and split over threads, so the CUDA kernel
 * (gpu/digest.cu) and the CPU twin here give the same value bit for bit.
 */
#ifndef DCP_DIGEST_H
#define DCP_DIGEST_H

#include "hash.h"

#include <stddef.h>
#include <stdint.h>

/* The term of one element: its bits, at position p of field f (0..3, the order of core/body.h). */
static inline DCP_HOST_DEVICE uint64_t dcp__digest_term(uint64_t bits, int64_t p, int32_t f)
{
    return dcp__mix64(bits + dcp__mix64((uint64_t)p * 0x9e3779b97f4a7c15ull + (uint64_t)f + 1u));
}

/* The digest of `count` elements of `elem_size` (4 or 8) bytes at positions first .. first+count-1 of field f. */
uint64_t dcp__digest_run_cpu(const void *elements, size_t elem_size, int64_t count, int64_t first, int32_t f);

#endif
