/*
 * train_plan_ahead.c - --plan-ahead (dcpack.h, "Planning a step ahead"):
 * once step k's dcp_step() has returned, each rank that holds data gathers
 * step k+1's lengths over its DP group on a planning-only context (a
 * collective, on the training thread), then plans them there on a thread of
 * its own while the rest of step k (here: the checks and the report; in a
 * trainer: forward and backward) runs.  Step k+1 joins the thread and hands
 * the plan to dcp_step(), which checks it against the lengths it gathers
 * instead of planning.  dcpack starts no thread: this file does.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <stdlib.h>
#include <string.h>

dcp_status plan_ahead_open(plan_ahead *a, const dcp_config *config, dcp_comm *dp)
{
    memset(a, 0, sizeof *a);
    dcp_config planning = *config;
    planning.max_tokens_per_rank = 0; /* plans, holds no data: the step's configuration otherwise */
    a->dp = dp;
    return dcp_context_create(&planning, &a->ctx);
}

static void *plan_on_thread(void *p)
{
    plan_ahead *a = p;
    const int64_t t0 = now_ns();
    a->status = dcp_plan_compute(a->ctx, a->lengths, a->n, &a->plan); /* no collective: any thread */
    a->plan_ns = now_ns() - t0;
    return NULL;
}

dcp_status plan_ahead_start(plan_ahead *a, const batch *b, int32_t dp_rank, int32_t step)
{
    const int32_t first = b->first[dp_rank], count = b->first[dp_rank + 1] - first;
    const int32_t *offsets = NULL;
    a->plan = NULL;
    /* the padded lengths of this DP rank's samples, in the order it hands them to dcp_step */
    a->status = dcp_gather(a->ctx, a->dp, (uint64_t)step + 1, b->padded + first, count, &a->lengths, &a->n, &offsets);
    if (a->status != DCP_OK) return a->status;
    if (pthread_create(&a->thread, NULL, plan_on_thread, a) != 0) return a->status = DCP_ERR_ALLOC;
    a->running = 1;
    return DCP_OK;
}

const dcp_plan *plan_ahead_take(plan_ahead *a)
{
    if (a->running) pthread_join(a->thread, NULL);
    a->running = 0;
    return a->status == DCP_OK ? a->plan : NULL;
}

void plan_ahead_close(plan_ahead *a)
{
    plan_ahead_take(a);
    dcp_context_destroy(a->ctx);
    memset(a, 0, sizeof *a);
}
