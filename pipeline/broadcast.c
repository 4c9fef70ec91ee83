/*
 * broadcast.c - the step's outputs from TP rank 0 to its TP peers.
 *
 * Rank 0 broadcasts a header first (its status and the four numbers that
 * lay out the body), then, when it succeeded, the used part of the body in
 * one piece.  A peer checks the header against its own capacities before the
 * body comes, and the body follows whenever rank 0 announced success, so no
 * peer waits for it in vain.  With a device body the peers read its prefix
 * (rows, cu arrays) back to the host through the token mover.  Rank 0 lays
 * out its body before the broadcast; a peer lays out its own from the
 * header, once, for the driver's views.
 */
#include "stages.h"
#include "../core/comm/agree.h"

dcp_status dcp__broadcast(dcp_comm *tp, int holds_data, dcp__broadcast_header *h, dcp__body_layout *b,
                          dcp__mover *mover, int32_t max_microbatches, void *stream, dcp_step_stats *stats,
                          dcp__error *err)
{
    dcp_status s = holds_data ? (dcp_status)h->status : DCP_OK;
    char why[128];
    stats->collectives++;
    dcp_status bs = tp->ops->broadcast(tp, h, sizeof *h, 0);
    if (bs != DCP_OK && s == DCP_OK) s = dcp__fail(err, bs, "step: TP broadcast of the header failed: %s%s", dcp_status_str(bs),
                                                 dcp__comm_why(tp, why, sizeof why));
    if (s == DCP_OK && h->status != DCP_OK)
        s = dcp__fail(err, (dcp_status)h->status, "step: TP rank 0 failed with %s", dcp_status_str((dcp_status)h->status));
    if (!holds_data) dcp__body_layout_compute(h->microbatches, h->cu, h->tokens, (uint32_t)h->kept, b);
    if (s == DCP_OK && !holds_data) {
        if (h->microbatches < 0 || h->microbatches > max_microbatches || b->used != (size_t)h->body_bytes ||
            b->used > mover->body_capacity)
            s = dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "step: TP header describes %lld bytes, capacity %zu",
                          (long long)h->body_bytes, mover->body_capacity);
    }
    if (h->status == DCP_OK && bs == DCP_OK) {
        int64_t used = h->body_bytes;
        if (used < 0 || (size_t)used > mover->body_capacity) used = 0;
        stats->collectives++;
        dcp_status body_status = tp->ops->broadcast(tp, mover->body, (size_t)used, 0);
        if (body_status != DCP_OK && s == DCP_OK)
            s = dcp__fail(err, body_status, "step: TP broadcast of the outputs failed: %s%s", dcp_status_str(body_status),
                          dcp__comm_why(tp, why, sizeof why));
        if (!holds_data && s == DCP_OK) s = mover->ops->read_back(mover, stream, b->prefix, err);
        stats->broadcast_bytes = (int64_t)sizeof *h + used;
    }
    return s;
}
