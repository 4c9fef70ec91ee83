/*
 * gdn_pad.h - GDN causal-conv padding: the checks both versions share.  Internal.
 */
#ifndef DCP_GDN_PAD_H
#define DCP_GDN_PAD_H

#include "dcpack.h"
#include "../error.h"

/* Arguments of dcp_gdn_pad / dcp_gdn_pad_cuda (cu_seqlens content is checked only by the host version). */
dcp_status dcp__gdn_pad_check(const void *in, int64_t rows, size_t row_bytes, int32_t alignment, int has_cu,
                             int32_t num_cu_seqlens, const void *out, int64_t out_capacity_rows, const void *out_cu,
                             dcp__error *err);

#endif
