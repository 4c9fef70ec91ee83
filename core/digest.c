/* digest.c - the CPU twin of the input digest (see digest.h). */
#include "digest.h"

#include <string.h>

uint64_t dcp__digest_run_cpu(const void *elements, size_t elem_size, int64_t count, int64_t first, int32_t f)
{
    const unsigned char *p = (const unsigned char *)elements;
    uint64_t sum = 0;
    for (int64_t i = 0; i < count; i++) {
        uint64_t bits = 0;
        if (elem_size == 8) {
            memcpy(&bits, p + (size_t)i * 8, 8);
        } else {
            uint32_t b32;
            memcpy(&b32, p + (size_t)i * 4, 4);
            bits = b32;
        }
        sum += dcp__digest_term(bits, first + i, f);
    }
    return sum;
}
