/*
 * landing.c - the one segment table that lands a step's tokens (mover.h):
 * received pieces and this rank's own pieces merged by destination, with a
 * fill for every gap, so each slot of the body is written exactly once.
 * Both movers run it, the CUDA mover as one kernel launch and the CPU mover
 * as the kernel's twin.
 */
#include "mover.h"

int64_t dcp__landing_segments(const dcp__recv_pieces *r, const dcp__own_pieces *o, int32_t num_peers,
                              int64_t total_tokens, int32_t *src_index, int64_t *src_offset, int64_t *dst_offset,
                              int64_t *length, int64_t *bad)
{
    int64_t n = 0, at = 0, i = 0, j = 0;
    while (i < r->count || j < o->count) {
        /* the next piece by destination: received ones first on a tie (a tie is an overlap, refused below) */
        const int take_received = j >= o->count || (i < r->count && r->dst[i] <= o->dst[j]);
        const int64_t dst = take_received ? r->dst[i] : o->dst[j];
        const int64_t len = take_received ? r->length[i] : o->length[j];
        if (dst < at || len < 0 || len > total_tokens - dst) {
            *bad = take_received ? i : -1 - j;
            return -1;
        }
        if (dst > at) { /* the gap before it: padding */
            src_index[n] = -1, src_offset[n] = 0, dst_offset[n] = at, length[n] = dst - at;
            n++;
        }
        if (take_received) {
            src_index[n] = r->sender[i], src_offset[n] = r->cursor[i];
            i++;
        } else {
            src_index[n] = num_peers + o->sample[j], src_offset[n] = o->src[j];
            j++;
        }
        dst_offset[n] = dst, length[n] = len;
        n++;
        at = dst + len;
    }
    if (at < total_tokens) {
        src_index[n] = -1, src_offset[n] = 0, dst_offset[n] = at, length[n] = total_tokens - at;
        n++;
    }
    return n;
}

dcp_status dcp__landing_refuse(dcp__error *err, int64_t bad, int64_t total_tokens)
{
    return dcp__fail(err, DCP_ERR_INVALID_PLAN, "step: %s piece %lld lands over another or past %lld tokens",
                     bad >= 0 ? "received" : "own", (long long)(bad >= 0 ? bad : -1 - bad), (long long)total_tokens);
}
