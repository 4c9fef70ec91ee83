/*
 * gdn_pad.c - GDN causal-conv padding on host memory: the CPU twin of
 * gpu/gdn_pad.cu.  The padded buffer is [rows real rows][pad zero rows]; only
 * the last cu_seqlens entry moves, as in the reference, so the padding joins
 * the last sequence (or, with repeated final entries, becomes a sequence of
 * its own) and no real row's conv output changes.
 */
#include "gdn_pad.h"

#include <string.h>

int64_t dcp_gdn_padded_rows(int64_t rows, int32_t alignment)
{
    if (rows <= 0 || alignment <= 0) return rows < 0 ? 0 : rows;
    const int64_t a = alignment, rest = rows % a;
    if (rest == 0) return rows;
    /* the next multiple of a above rows, or INT64_MAX when there is none: never a signed overflow */
    return rows > INT64_MAX - (a - rest) ? INT64_MAX : rows + (a - rest);
}

dcp_status dcp__gdn_pad_check(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, int has_cu,
                             int32_t num_cu, const void *out, int64_t capacity, const void *out_cu, dcp__error *err)
{
    if (rows < 0 || row_bytes == 0)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "gdn_pad: %lld rows of %zu bytes", (long long)rows, row_bytes);
    if ((rows > 0 && !in) || !out) return dcp__fail(err, DCP_ERR_NULL_POINTER, "gdn_pad: in and out are required");
    int64_t padded = dcp_gdn_padded_rows(rows, alignment);
    if (padded > capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY, "gdn_pad: %lld padded rows exceed the output's %lld",
                        (long long)padded, (long long)capacity);
    if ((uint64_t)padded > SIZE_MAX / row_bytes)
        return dcp__fail(err, DCP_ERR_OVERFLOW, "gdn_pad: %lld rows of %zu bytes", (long long)padded, row_bytes);
    if (has_cu) {
        if (num_cu < 1) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "gdn_pad: %d cu_seqlens entries", num_cu);
        if (!out_cu) return dcp__fail(err, DCP_ERR_NULL_POINTER, "gdn_pad: cu_seqlens given without an output for them");
        if (padded > INT32_MAX)
            return dcp__fail(err, DCP_ERR_OVERFLOW, "gdn_pad: %lld padded rows do not fit int32 cu_seqlens",
                            (long long)padded);
    }
    return DCP_OK;
}

dcp_status dcp_gdn_pad(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, const int32_t *cu,
                       int32_t num_cu, void *out, int64_t capacity, int32_t *out_cu)
{
    dcp_status s = dcp__gdn_pad_check(in, rows, row_bytes, alignment, cu != NULL, num_cu, out, capacity, out_cu, NULL);
    if (s != DCP_OK) return s;
    int64_t pad = dcp_gdn_padded_rows(rows, alignment) - rows;
    if (cu) {
        /* cu_seqlens describe these rows: they start at 0, never decrease and end at `rows` (else the
           padded last entry would point past the buffer, or short of its last real rows) */
        if (cu[0] != 0 || (int64_t)cu[num_cu - 1] != rows) return DCP_ERR_CORRUPT_INPUT;
        for (int32_t k = 1; k < num_cu; k++)
            if (cu[k] < cu[k - 1]) return DCP_ERR_CORRUPT_INPUT;
        if ((int64_t)cu[num_cu - 1] + pad > INT32_MAX) return DCP_ERR_OVERFLOW;
    }
    if (out != in && rows > 0) memmove(out, in, (size_t)rows * row_bytes);
    if (pad > 0) memset((unsigned char *)out + (size_t)rows * row_bytes, 0, (size_t)pad * row_bytes);
    if (cu) {
        if (out_cu != cu) memmove(out_cu, cu, (size_t)num_cu * sizeof *cu);
        out_cu[num_cu - 1] = (int32_t)(cu[num_cu - 1] + pad);
    }
    return DCP_OK;
}

dcp_status dcp_gdn_strip(const void *padded, int64_t rows, size_t row_bytes, void *out)
{
    if (rows < 0 || row_bytes == 0) return DCP_ERR_INVALID_ARGUMENT;
    if (rows == 0) return DCP_OK;
    if (!padded || !out) return DCP_ERR_NULL_POINTER;
    if ((uint64_t)rows > SIZE_MAX / row_bytes) return DCP_ERR_OVERFLOW;
    if (out != padded) memmove(out, padded, (size_t)rows * row_bytes);
    return DCP_OK;
}
