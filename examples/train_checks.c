/*
 * train_checks.c - after every step, on every rank: everything it received
 * against the oracle (thd_oracle.c: it shares no code with the library), its
 * CP group communicator of every microbatch; then the ranks exchange their
 * step times and verdicts and rank 0 prints the step's line.  With NCCL the
 * outputs are copied to the host first.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plan, then every microbatch, against the oracle's. */
static int64_t check_outputs(dcp_context *planner, const oracle_config *ocfg, const batch *b, const layout *L,
                             int use_nccl, const dcp_step_output *out, char *message, size_t message_size)
{
    const dcp_plan *plan = NULL;
    dcp_status s = dcp_plan_compute(planner, b->padded, b->n, &plan);
    if (s != DCP_OK) {
        snprintf(message, message_size, "the oracle's plan: %s", dcp_status_str(s));
        return 1;
    }
    if (oracle_check_plan(ocfg, plan, b->padded, b->n, message, message_size)) return 1;
    if (out->plan && dcp_plan_hash(out->plan) != dcp_plan_hash(plan)) {
        snprintf(message, message_size, "the step's plan differs from the plan of the whole batch");
        return 1;
    }
    if ((out->plan == NULL) == L->holds_data) {
        snprintf(message, message_size, "plan %s on a rank that %s", out->plan ? "present" : "missing",
                 L->holds_data ? "holds the data" : "receives by broadcast");
        return 1;
    }
    const dcp_step_output *host = out;
    int64_t bad = 0;
#ifdef DCP_EXAMPLE_NCCL
    host_output h;
    memset(&h, 0, sizeof h);
    if (use_nccl) {
        if (!host_output_make(&h, out)) snprintf(message, message_size, "download of the outputs failed"), bad++;
        host = &h.out;
    }
#else
    (void)use_nccl;
#endif
    if (!bad) {
        oracle_batch ob = {b->n, b->padded, b->original, b->source, b->step};
        bad += oracle_compare(ocfg, plan, &ob, L->dpxcp, L->pp_rank, L->mtp_virtual_stages, host, message,
                              message_size);
    }
#ifdef DCP_EXAMPLE_NCCL
    if (use_nccl) host_output_free(&h);
#endif
    return bad;
}

/* Each microbatch's CP group communicator holds exactly the ranks of its CP group. */
static int64_t check_cp_groups(const layout *L, comms *c, const dcp_step_output *out, int64_t bad, char *message,
                               size_t message_size, dcp_status *cs)
{
    int32_t members[64 + 1];
    int32_t *all = members;
    if (L->n > 64 && !(all = calloc((size_t)L->n + 1, sizeof *all))) {
        snprintf(message, message_size, "out of memory");
        return bad + 1;
    }
    dcp_status gs = DCP_OK;
    for (int32_t m = 0; m < out->num_microbatches && gs == DCP_OK; m++) {
        const dcp_microbatch *mb = &out->microbatches[m];
        dcp_comm *g = cp_group_of(c, mb->local_cp_size);
        if (!g || g->size != mb->local_cp_size || g->rank != mb->cp_rank) {
            if (!bad)
                snprintf(message, message_size, "microbatch %d: no CP group communicator of %d ranks with rank %d", m,
                         mb->local_cp_size, mb->cp_rank);
            bad++;
            break;
        }
        const int32_t mine = L->dpxcp;
        gs = g->ops->allgather(g, &mine, sizeof mine, all);
        for (int32_t i = 0; gs == DCP_OK && i < g->size; i++)
            if (all[i] != L->dpxcp - mb->cp_rank + i) {
                if (!bad)
                    snprintf(message, message_size, "microbatch %d: CP group member %d is DPxCP rank %d, expected %d", m,
                             i, all[i], L->dpxcp - mb->cp_rank + i);
                bad++;
                break;
            }
        if (gs != DCP_OK) fprintf(stderr, "rank %d: CP group all-gather: %s: %s\n", L->rank, dcp_status_str(gs), comm_error(c, g));
    }
    if (all != members) free(all);
    *cs = gs;
    return bad;
}

int64_t check_step(dcp_context *planner, const oracle_config *ocfg, const batch *b, const layout *L, comms *c,
                   int use_nccl, const dcp_step_output *out, char *message, size_t message_size, dcp_status *cs)
{
    message[0] = '\0';
    int64_t bad = check_outputs(planner, ocfg, b, L, use_nccl, out, message, message_size);
    return check_cp_groups(L, c, out, bad, message, message_size, cs);
}

dcp_status report_step(comms *c, const layout *L, int32_t step, const dcp_step_output *out, int64_t step_ns,
                       int64_t ahead_ns, int64_t bad, int64_t *report, int64_t *slowest, int32_t *mismatching)
{
    int32_t widest = 0;
    for (int32_t m = 0; m < out->num_microbatches; m++)
        if (out->microbatches[m].local_cp_size > widest) widest = out->microbatches[m].local_cp_size;
    int64_t mine[REPORT_FIELDS] = {step_ns, out->stats.time_plan_ns, out->stats.time_stage_ns,
                                   out->stats.time_exchange_ns, out->stats.time_pack_ns, ahead_ns, bad,
                                   out->stats.tokens_computed, widest};
    dcp_status s = c->world.ops->allgather(&c->world, mine, sizeof mine, report);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: step %d: report all-gather: %s: %s\n", L->rank, step, dcp_status_str(s),
                comm_error(c, &c->world));
        return s;
    }
    /* the slowest rank's step time, and each phase's slowest rank (TP peers that receive by broadcast
       spend no time in the phases) */
    int32_t slow = 0;
    int64_t phase[REPORT_FIELDS] = {0};
    *mismatching = 0;
    for (int32_t r = 0; r < L->world; r++) {
        const int64_t *rep = report + (size_t)r * REPORT_FIELDS;
        if (rep[REPORT_STEP_NS] > report[(size_t)slow * REPORT_FIELDS + REPORT_STEP_NS]) slow = r;
        *mismatching += rep[REPORT_MISMATCHES] != 0;
        for (int f = REPORT_PLAN_NS; f < REPORT_FIELDS; f++)
            if (rep[f] > phase[f]) phase[f] = rep[f];
    }
    *slowest = report[(size_t)slow * REPORT_FIELDS + REPORT_STEP_NS];
    char ahead[64] = "";
    if (phase[REPORT_AHEAD_NS] > 0) /* --plan-ahead: the planning that ran on a thread, off the step */
        snprintf(ahead, sizeof ahead, " (planned ahead %.3f)", (double)phase[REPORT_AHEAD_NS] * 1e-6);
    if (L->rank == 0)
        printf("step %d: %.3f ms on the slowest rank (%d); slowest plan %.3f%s, stage %.3f, exchange %.3f, "
               "pack %.3f ms; %d microbatches, CP groups up to %lld ranks; outputs match the oracle on %d/%d ranks\n",
               step, (double)*slowest * 1e-6, slow, (double)phase[REPORT_PLAN_NS] * 1e-6, ahead,
               (double)phase[REPORT_STAGE_NS] * 1e-6, (double)phase[REPORT_EXCHANGE_NS] * 1e-6,
               (double)phase[REPORT_PACK_NS] * 1e-6, out->num_microbatches, (long long)phase[REPORT_MAX_CP],
               L->world - *mismatching, L->world);
    return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Outputs on the GPU: a host copy to check                                  */
/* ------------------------------------------------------------------------ */

#ifdef DCP_EXAMPLE_NCCL
static const void *download(host_output *h, const void *device, size_t bytes)
{
    if (!device) return NULL;
    if (h->num_blocks == h->capacity) {
        int32_t cap = h->capacity ? 2 * h->capacity : 64;
        void **more = realloc(h->blocks, (size_t)cap * sizeof *more);
        if (!more) {
            h->failed = 1;
            return NULL;
        }
        h->blocks = more, h->capacity = cap;
    }
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
        h->failed = 1;
        return NULL;
    }
    h->blocks[h->num_blocks++] = host;
    if (bytes && cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) h->failed = 1;
    return host;
}

void host_output_free(host_output *h)
{
    for (int32_t i = 0; i < h->num_blocks; i++) free(h->blocks[i]);
    free(h->blocks), free(h->views);
    memset(h, 0, sizeof *h);
}

int host_output_make(host_output *h, const dcp_step_output *out)
{
    memset(h, 0, sizeof *h);
    h->out = *out;
    const size_t views = (size_t)out->num_virtual_stages * (size_t)out->num_microbatches;
    h->views = calloc(views + 1, sizeof *h->views);
    if (!h->views) return 0;
    for (size_t i = 0; i < views; i++) {
        const dcp_microbatch *d = &out->microbatches[i];
        dcp_microbatch *v = &h->views[i];
        *v = *d;
        const size_t t = (size_t)d->num_tokens, cu = (size_t)d->num_cu_seqlens * sizeof(int32_t);
        v->tokens = download(h, d->tokens, t * 8);
        v->labels = download(h, d->labels, t * 8);
        v->loss_mask = download(h, d->loss_mask, t * 4);
        v->position_ids = download(h, d->position_ids, t * 8);
        v->padding_mask = download(h, d->padding_mask, t);
        v->cu_seqlens = download(h, d->cu_seqlens, cu);
        v->cu_seqlens_padded = download(h, d->cu_seqlens_padded, cu);
    }
    h->out.microbatches = h->views;
    return !h->failed;
}

#endif
