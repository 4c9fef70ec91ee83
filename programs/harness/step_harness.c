/*
 * step_harness.c - in-process multi-rank runs of dcp_step() (see step_harness.h).
 *
 * Ranks are threads.  Their communicators come from a small in-process group
 * defined here: every collective posts pointers, meets at a barrier, copies
 * what it needs from its peers' buffers and meets again, so a collective
 * never allocates.  World rank w = (pp * TP + tp) * N + dpxcp.
 *
 * Synthetic data: sequence id's element j is real when j < original[id]; the
 * slots after it carry garbage the data plane must clear.  DP rank p holds
 * ids [p*n/dp, (p+1)*n/dp), so gathered ids equal trace line numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include "step_harness.h"
#include "gpu_harness.h"
#include "oracle.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef DCP_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* ------------------------------------------------------------------------ */
/* In-process communicators, with a fault planted at a chosen collective     */
/* ------------------------------------------------------------------------ */

/*
 * Every CPU rank talks through dcpack's in-process backend (one world per
 * group).  Each of its communicators is wrapped so that the harness can plant
 * a communicator fault on the k-th collective the rank makes in a step,
 * whichever communicator that collective goes through.
 */
typedef struct fault_comm {
    dcp_comm inner;
    dcp_inproc_world *world;
    int32_t *calls;    /* this rank's collectives so far in this step, over all its communicators */
    const int32_t *fault_at; /* -1: none */
    const dcp_inproc_fault *fault;
} fault_comm;

#define FC(comm) ((fault_comm *)(comm)->impl)

static dcp_comm *fault_comm_next(dcp_comm *comm)
{
    fault_comm *f = FC(comm);
    if ((*f->calls)++ == *f->fault_at) dcp_inproc_inject_fault(f->world, f->inner.rank, *f->fault);
    return &f->inner;
}

static dcp_status f_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    dcp_comm *c = fault_comm_next(comm);
    return c->ops->allgather(c, send, bytes, recv);
}

static dcp_status f_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                               const size_t *recv_bytes, const size_t *recv_offsets)
{
    dcp_comm *c = fault_comm_next(comm);
    return c->ops->allgatherv(c, send, send_bytes, recv, recv_bytes, recv_offsets);
}

static dcp_status f_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                              void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    dcp_comm *c = fault_comm_next(comm);
    return c->ops->alltoallv(c, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
}

static dcp_status f_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    dcp_comm *c = fault_comm_next(comm);
    return c->ops->broadcast(c, buffer, bytes, root);
}

static dcp_status f_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    dcp_comm *c = fault_comm_next(comm);
    return c->ops->agree(c, local, agreed, failed_rank);
}

static const char *f_describe_failure(dcp_comm *c)
{
    dcp_comm *inner = &FC(c)->inner;
    return inner->ops->describe_failure ? inner->ops->describe_failure(inner) : "";
}

static const dcp_comm_ops fault_comm_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), f_allgather, f_allgatherv, f_alltoallv, f_broadcast, f_agree,
    f_describe_failure,
};

static dcp_status fault_comm_init(fault_comm *f, dcp_inproc_world *world, int32_t rank, int32_t *calls,
                                  const int32_t *fault_at, const dcp_inproc_fault *fault, dcp_comm *comm)
{
    f->world = world, f->calls = calls, f->fault_at = fault_at, f->fault = fault;
    dcp_status s = dcp_inproc_comm(world, rank, &f->inner);
    comm->ops = &fault_comm_ops;
    comm->rank = f->inner.rank;
    comm->size = f->inner.size;
    comm->impl = f;
    return s;
}

/* ------------------------------------------------------------------------ */
/* Synthetic data                                                            */
/* ------------------------------------------------------------------------ */

static int64_t token_value(int64_t id, int64_t j) { return id * 131071 + j * 7 + 1; }

typedef struct dataset {
    int32_t n;
    int32_t *padded, *original;
    int64_t *offset; /* [n + 1] into the field arrays */
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
    const int64_t **tokens_of, **labels_of, **position_ids_of;
    const float **loss_mask_of;
} dataset;

/* 0, or -1 when out of memory (then dataset_free() releases what was taken) */
static int dataset_build(dataset *d, const int32_t *lengths, int32_t n, int32_t span_multiple, int prepacked)
{
    memset(d, 0, sizeof *d);
    d->padded = calloc((size_t)n + 1, sizeof *d->padded);
    d->original = calloc((size_t)n + 1, sizeof *d->original);
    d->offset = calloc((size_t)n + 1, sizeof *d->offset);
    if (!d->padded || !d->original || !d->offset) return -1;
    d->n = n;
    for (int32_t i = 0; i < n; i++) {
        int32_t len = lengths[i] > 0 ? lengths[i] : 1;
        d->padded[i] = (len + span_multiple - 1) / span_multiple * span_multiple;
        d->original[i] = prepacked ? d->padded[i] : len;
        d->offset[i + 1] = d->offset[i] + d->padded[i];
    }
    size_t total = (size_t)d->offset[n] + 1;
    d->tokens = malloc(total * sizeof *d->tokens);
    d->labels = malloc(total * sizeof *d->labels);
    d->position_ids = malloc(total * sizeof *d->position_ids);
    d->loss_mask = malloc(total * sizeof *d->loss_mask);
    d->tokens_of = calloc((size_t)n + 1, sizeof *d->tokens_of);
    d->labels_of = calloc((size_t)n + 1, sizeof *d->labels_of);
    d->position_ids_of = calloc((size_t)n + 1, sizeof *d->position_ids_of);
    d->loss_mask_of = calloc((size_t)n + 1, sizeof *d->loss_mask_of);
    if (!d->tokens || !d->labels || !d->position_ids || !d->loss_mask || !d->tokens_of || !d->labels_of ||
        !d->position_ids_of || !d->loss_mask_of)
        return -1;
    for (int32_t i = 0; i < n; i++) {
        int64_t at = d->offset[i];
        d->tokens_of[i] = d->tokens + at;
        d->labels_of[i] = d->labels + at;
        d->position_ids_of[i] = d->position_ids + at;
        d->loss_mask_of[i] = d->loss_mask + at;
        for (int64_t j = 0; j < d->padded[i]; j++) {
            int real = j < d->original[i];
            d->tokens[at + j] = real ? token_value(i, j) : -(int64_t)(i + 1);
            d->labels[at + j] = real ? token_value(i, j + 1) : -3;
            d->position_ids[at + j] = real ? j : -5;
            d->loss_mask[at + j] = real ? 0.25f + 0.25f * (float)((i + j) % 4) : -1.0f;
        }
    }
    return 0;
}

static void dataset_free(dataset *d)
{
    free(d->padded), free(d->original), free(d->offset), free(d->tokens), free(d->labels), free(d->position_ids);
    free(d->loss_mask), free(d->tokens_of), free(d->labels_of), free(d->position_ids_of), free(d->loss_mask_of);
}

/* One DP rank's samples: one sequence each, or pre-packed 4 to a sample with an empty sub-sample in every other one. */
typedef struct dp_input {
    dcp_sample *samples;
    int32_t num_samples;
    int32_t *cu; /* storage for pre-packed cu_seqlens */
} dp_input;

/* 0, or -1 when out of memory */
static int dp_input_build(dp_input *in, const dataset *d, int32_t first, int32_t last, int prepacked)
{
    int32_t count = last - first;
    in->samples = calloc((size_t)count + 1, sizeof *in->samples);
    in->cu = calloc((size_t)count * 2 + 8, sizeof *in->cu);
    in->num_samples = 0;
    if (!in->samples || !in->cu) return -1;
    int32_t *cu_at = in->cu;
    for (int32_t i = first; i < last;) {
        dcp_sample *s = &in->samples[in->num_samples++];
        s->tokens = d->tokens_of[i];
        s->labels = d->labels_of[i];
        s->position_ids = d->position_ids_of[i];
        s->loss_mask = d->loss_mask_of[i];
        if (!prepacked) {
            s->num_tokens = d->padded[i];
            s->padded_length = d->padded[i];
            s->original_length = d->original[i];
            i++;
            continue;
        }
        int32_t take = last - i < 4 ? last - i : 4, entries = 0;
        s->cu_seqlens = cu_at;
        cu_at[entries++] = 0;
        for (int32_t k = 0; k < take; k++) {
            cu_at[entries] = cu_at[entries - 1] + d->padded[i + k];
            entries++;
            if (k == 0 && in->num_samples % 2 == 0) {
                cu_at[entries] = cu_at[entries - 1]; /* an empty sub-sample: dropped */
                entries++;
            }
        }
        s->num_cu_seqlens = entries;
        s->num_tokens = cu_at[entries - 1] + 3; /* trailing slots past the last boundary are ignored */
        cu_at += entries;
        i += take;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Ranks                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct shared {
    const dcp_harness_options *opt;
    dcp_config config;
    int32_t world, n, tp, pp;
    dataset data;
    dp_input *inputs; /* [dp] */
    dp_input faulty;  /* the planted bad input */
    uint32_t faulty_fields;
    dcp_plan *plan;   /* single-process plan for the oracle */
    dcp_inproc_world *world_group;
    dcp_inproc_world **lanes; /* [pp * tp] */
    dcp_inproc_world **tps;   /* [pp * n] */
    pthread_barrier_t start;
    dcp_gpu_world *gpu;      /* gpu mode */
    int64_t device_delta;
    uint64_t nccl_call_heap;
    int64_t heap_beyond_nccl;
    /* results */
    pthread_mutex_t lock;
    dcp_status *status;      /* [steps * world] */
    double *seconds;         /* [steps * world] */
    uint64_t heap_max, heap_calls_max;
    int64_t mismatches;
    char message[768];
    int32_t microbatches;
    int out_of_memory;       /* a rank's workspace or the oracle could not be allocated (what: oom_message) */
    char oom_message[128];
    int no_workspace;        /* a rank's workspace could not be allocated: no rank steps */
    dcp_harness_result *result;
} shared;

static void note(shared *sh, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void note(shared *sh, const char *format, ...)
{
    pthread_mutex_lock(&sh->lock);
    if (!sh->message[0]) {
        va_list args;
        va_start(args, format);
        vsnprintf(sh->message, sizeof sh->message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&sh->lock);
}

static void out_of_memory(shared *sh, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void out_of_memory(shared *sh, const char *format, ...)
{
    pthread_mutex_lock(&sh->lock);
    if (!sh->out_of_memory) {
        sh->out_of_memory = 1;
        va_list args;
        va_start(args, format);
        vsnprintf(sh->oom_message, sizeof sh->oom_message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&sh->lock);
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int64_t compare_bytes(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) != 0; }

/* Compare one rank's step output with the oracle; returns the number of mismatching items. */
static int64_t verify_rank(shared *sh, int32_t pp, int32_t dpxcp, uint32_t mtp, const dcp_step_output *out)
{
    const dcp_config *c = &sh->config;
    const dcp_plan *plan = sh->plan;
    int64_t bad = 0;
    if (out->num_microbatches != plan->num_microbatches || out->num_virtual_stages != c->virtual_pipeline_size) {
        note(sh, "rank %d: %d microbatches x %d stages, expected %d x %d", dpxcp, out->num_microbatches,
             out->num_virtual_stages, plan->num_microbatches, c->virtual_pipeline_size);
        return 1;
    }
    int64_t sum = 0, squared = 0;
    for (int32_t i = 0; i < sh->data.n; i++) sum += sh->data.padded[i], squared += (int64_t)sh->data.padded[i] * sh->data.padded[i];
    if (out->seqlen_sum != sum || out->seqlen_squared_sum != squared || out->num_sequences != sh->data.n) {
        note(sh, "FLOPs scalars %lld/%lld, expected %lld/%lld", (long long)out->seqlen_sum,
             (long long)out->seqlen_squared_sum, (long long)sum, (long long)squared);
        bad++;
    }
    dcp_oracle_batch batch = {sh->data.n, sh->data.padded, sh->data.original, sh->data.tokens_of, sh->data.labels_of,
                              sh->data.loss_mask_of, sh->data.position_ids_of};
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        dcp_oracle_microbatch want;
        char msg[200];
        dcp_status os = dcp_oracle_microbatch_compute(c, plan, &batch, m, dpxcp, &want, msg, sizeof msg);
        if (os == DCP_ERR_ALLOC) { /* not a mismatch: this rank's outputs went unchecked */
            out_of_memory(sh, "the oracle of rank %d, microbatch %d", dpxcp, m);
            return bad;
        }
        if (os != DCP_OK) {
            note(sh, "oracle refuses microbatch %d on rank %d (%s) but the step succeeded", m, dpxcp, msg);
            return bad + 1;
        }
        for (int32_t v = 0; v < c->virtual_pipeline_size; v++) {
            const dcp_microbatch *got = &out->microbatches[(size_t)v * (size_t)out->num_microbatches + (size_t)m];
            int first = pp == 0 && v == 0, last = pp == c->pipeline_parallel_size - 1 && v == c->virtual_pipeline_size - 1;
            int stage_mtp = (mtp >> v) & 1u;
            int inputs = first || stage_mtp, targets = last || stage_mtp;
            int64_t before = bad;
            if (got->num_tokens != want.num_tokens || got->num_cu_seqlens != want.num_cu_seqlens ||
                got->max_seqlen != want.max_seqlen || got->local_cp_size != want.local_cp_size ||
                got->cp_rank != want.cp_rank || got->num_sequences != want.num_sequences) {
                note(sh, "rank %d mb %d vstage %d: tokens %lld/%lld cu %d/%d max %d/%d cp %d/%d cp_rank %d/%d", dpxcp, m,
                     v, (long long)got->num_tokens, (long long)want.num_tokens, got->num_cu_seqlens, want.num_cu_seqlens,
                     got->max_seqlen, want.max_seqlen, got->local_cp_size, want.local_cp_size, got->cp_rank, want.cp_rank);
                bad++;
                continue;
            }
            size_t t = (size_t)want.num_tokens;
            bad += compare_bytes(got->cu_seqlens, want.cu_seqlens, (size_t)want.num_cu_seqlens * 4);
            bad += compare_bytes(got->cu_seqlens_padded, want.cu_seqlens_padded, (size_t)want.num_cu_seqlens * 4);
            bad += compare_bytes(got->padding_mask, want.padding_mask, t);
            bad += inputs ? (!got->tokens || compare_bytes(got->tokens, want.tokens, t * 8)) : got->tokens != NULL;
            bad += inputs ? (!got->position_ids || compare_bytes(got->position_ids, want.position_ids, t * 8))
                          : got->position_ids != NULL;
            bad += targets ? (!got->labels || compare_bytes(got->labels, want.labels, t * 8)) : got->labels != NULL;
            bad += targets ? (!got->loss_mask || compare_bytes(got->loss_mask, want.loss_mask, t * 4))
                           : got->loss_mask != NULL;
            if (bad != before) note(sh, "rank %d (pp %d) mb %d vstage %d: arrays differ from the oracle", dpxcp, pp, m, v);
        }
        dcp_oracle_microbatch_free(&want);
    }
    return bad;
}

/* 0, or -1 when out of memory */
static int plant_fault(shared *sh, int32_t dp_rank)
{
    const dcp_harness_options *o = sh->opt;
    const dp_input *src = &sh->inputs[dp_rank];
    dp_input *f = &sh->faulty;
    int32_t extra = o->fault == DCP_HARNESS_FAULT_CAPACITY ? sh->config.max_sequences + 1 : 0;
    f->num_samples = src->num_samples + extra;
    f->samples = calloc((size_t)f->num_samples + 1, sizeof *f->samples);
    f->cu = calloc(64, sizeof *f->cu);
    if (!f->samples || !f->cu) return -1;
    memcpy(f->samples, src->samples, (size_t)src->num_samples * sizeof *src->samples);
    sh->faulty_fields = sh->config.fields;
    dcp_sample *s0 = &f->samples[0];
    switch (o->fault) {
    case DCP_HARNESS_FAULT_CU_DECREASING:
    case DCP_HARNESS_FAULT_CU_NOT_ZERO:
    case DCP_HARNESS_FAULT_CU_PAST_BUFFER: {
        int32_t len = (int32_t)s0->num_tokens;
        f->cu[0] = o->fault == DCP_HARNESS_FAULT_CU_NOT_ZERO ? 1 : 0;
        f->cu[1] = o->fault == DCP_HARNESS_FAULT_CU_DECREASING ? len : len / 2;
        f->cu[2] = o->fault == DCP_HARNESS_FAULT_CU_DECREASING ? len / 2
                   : o->fault == DCP_HARNESS_FAULT_CU_PAST_BUFFER ? len + 1 : len;
        s0->cu_seqlens = f->cu;
        s0->num_cu_seqlens = 3;
        break;
    }
    case DCP_HARNESS_FAULT_LENGTH_MISMATCH:
        s0->cu_seqlens = NULL;
        s0->padded_length = (int32_t)s0->num_tokens + 1;
        s0->original_length = 1;
        break;
    case DCP_HARNESS_FAULT_FIELD_MISMATCH: sh->faulty_fields &= ~(uint32_t)DCP_FIELD_LABELS; break;
    case DCP_HARNESS_FAULT_CAPACITY:
        for (int32_t i = src->num_samples; i < f->num_samples; i++) f->samples[i] = src->samples[0];
        break;
    case DCP_HARNESS_FAULT_SIBLINGS_DIFFER: f->num_samples = src->num_samples - 1; break;
    default: break;
    }
    return 0;
}

static void rank_main(int32_t w, void *p)
{
    shared *sh = p;
    const dcp_harness_options *o = sh->opt;
    const int32_t n = sh->n, tp_size = sh->tp;
    const int32_t dpxcp = w % n, tp = (w / n) % tp_size, pp = w / (n * tp_size);
    const int32_t cp = sh->config.context_parallel_size, dp_rank = dpxcp / cp;

    dcp_comm world, lane, tpc;
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    int holds = o->tp_ranks_hold_data || tp == 0;
    dcp_status gs = DCP_OK;
#ifdef DCP_HAVE_NCCL
    dcp_gpu_rank gr;
    memset(&gr, 0, sizeof gr);
    if (o->gpu) {
        gs = dcp_gpu_rank_begin(sh->gpu, w, holds ? pp * tp_size + tp : -1, dpxcp,
                                !o->tp_ranks_hold_data && tp_size > 1, pp * n + dpxcp, tp,
                                dcp_nccl_staging_bytes(&sh->config), o->timeout_ms > 0 ? o->timeout_ms : 60000, &gr);
        if (gs != DCP_OK) note(sh, "world rank %d: GPU set-up: %s", w, dcp_status_str(gs));
        world = gr.world, lane = gr.lane, tpc = gr.tp;
        args.cuda_stream = gr.stream;
    }
#endif
    fault_comm fworld, flane, ftp;
    int32_t calls = 0, fault_at = -1;
    const dcp_inproc_fault comm_fault = o->comm_fault;
    if (!o->gpu) {
        gs = fault_comm_init(&fworld, sh->world_group, w, &calls, &fault_at, &comm_fault, &world);
        if (gs == DCP_OK && holds)
            gs = fault_comm_init(&flane, sh->lanes[pp * tp_size + tp], dpxcp, &calls, &fault_at, &comm_fault, &lane);
        if (gs == DCP_OK && !o->tp_ranks_hold_data && tp_size > 1)
            gs = fault_comm_init(&ftp, sh->tps[pp * n + dpxcp], tp, &calls, &fault_at, &comm_fault, &tpc);
        if (gs != DCP_OK) note(sh, "world rank %d: communicators: %s", w, dcp_status_str(gs));
    }
    args.world = &world;
    if (holds) args.data_context_parallel = &lane;
    if (!o->tp_ranks_hold_data && tp_size > 1) args.tensor_parallel = &tpc;
    args.pipeline_rank = pp;
    args.mtp_virtual_stages = pp == o->mtp_pipeline_rank ? o->mtp_virtual_stages : 0;
    args.tp_ranks_hold_data = o->tp_ranks_hold_data;

    /* the workspace starts out as garbage, so a slot the step forgets to write shows up */
    dcp_context *ctx = NULL;
    size_t workspace = 0;
    void *memory = NULL;
    dcp_status cs = dcp_workspace_size(&sh->config, &workspace);
    if (cs == DCP_OK && !(memory = malloc(workspace))) {
        cs = DCP_ERR_ALLOC;
        out_of_memory(sh, "world rank %d's workspace (%zu bytes)", w, workspace);
        pthread_mutex_lock(&sh->lock);
        sh->no_workspace = 1;
        pthread_mutex_unlock(&sh->lock);
    }
    if (cs == DCP_OK) {
        memset(memory, 0xA5, workspace);
        cs = dcp_context_init_static(memory, workspace, &sh->config, &ctx);
    }
    if (cs == DCP_OK && gs != DCP_OK) cs = gs;
#ifdef DCP_HAVE_NCCL
    const dcp_sample *device_samples = NULL;
    if (cs == DCP_OK && o->gpu) {
        cs = dcp_gpu_rank_attach(&gr, ctx, &sh->config);
        if (cs == DCP_OK && holds)
            cs = dcp_gpu_rank_upload(&gr, sh->inputs[dp_rank].samples, sh->inputs[dp_rank].num_samples,
                                     sh->config.fields);
        if (cs != DCP_OK)
            note(sh, "world rank %d: GPU attach or upload: %s%s%s", w, dcp_status_str(cs), gr.message[0] ? ": " : "",
                 gr.message);
        device_samples = gr.samples;
    }
    int64_t free_after_warmup = 0;
    uint64_t nccl_call_heap = 0;
    if (o->gpu && gs == DCP_OK) {
        nccl_call_heap = dcp_gpu_rank_nccl_call_heap(&gr);
        pthread_mutex_lock(&sh->lock);
        if (nccl_call_heap > sh->nccl_call_heap) sh->nccl_call_heap = nccl_call_heap;
        pthread_mutex_unlock(&sh->lock);
    }
#endif
    if (cs != DCP_OK) note(sh, "world rank %d: context: %s", w, dcp_status_str(cs));
    /* plan ahead: a planning-only context, and what a faulty rank plans instead of the batch */
    dcp_context *planner = NULL, *misplanner = NULL;
    int32_t *other = NULL;
    const int plan_fault = o->fault >= DCP_HARNESS_FAULT_PLAN_OTHER_LENGTHS && w == o->fault_world_rank;
    if (cs == DCP_OK && o->plan_ahead && holds) {
        dcp_config pc = sh->config;
        pc.max_tokens_per_rank = 0;
        cs = dcp_context_create(&pc, &planner);
        pc.plan_effort = pc.plan_effort == DCP_PLAN_EFFORT_FULL ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
        if (cs == DCP_OK && plan_fault && o->fault == DCP_HARNESS_FAULT_PLAN_OTHER_CONFIG)
            cs = dcp_context_create(&pc, &misplanner);
        if (cs == DCP_OK && plan_fault && !(other = malloc((size_t)sh->data.n * sizeof *other))) cs = DCP_ERR_ALLOC;
        if (other) {
            memcpy(other, sh->data.padded, (size_t)sh->data.n * sizeof *other);
            for (int32_t i = 1; i < sh->data.n; i++)
                if (other[i] != other[0]) {
                    int32_t t = other[i];
                    other[i] = other[0], other[0] = t;
                    break;
                }
        }
        if (cs != DCP_OK) note(sh, "world rank %d: planning context: %s", w, dcp_status_str(cs));
    }

    /* every rank is set up: one without a workspace would leave the others waiting in their first collective */
    pthread_barrier_wait(&sh->start);
    pthread_mutex_lock(&sh->lock);
    const int32_t steps = sh->no_workspace ? 0 : o->steps;
    pthread_mutex_unlock(&sh->lock);
    for (int32_t step = 0; step < steps; step++) {
        dcp_step_input input = {sh->inputs[dp_rank].samples, sh->inputs[dp_rank].num_samples, sh->config.fields};
#ifdef DCP_HAVE_NCCL
        if (o->gpu) input.samples = device_samples;
#endif
        if (o->fault != DCP_HARNESS_FAULT_NONE && step == o->fault_step && w == o->fault_world_rank) {
            input.samples = sh->faulty.samples;
            input.num_samples = sh->faulty.num_samples;
            input.fields = sh->faulty_fields;
        }
        calls = 0;
        fault_at = o->comm_fault != DCP_FAULT_NONE && step == o->fault_step && w == o->fault_world_rank
                       ? o->comm_fault_call : -1;
        pthread_barrier_wait(&sh->start);
        const dcp_step_output *out = NULL;
        dcp_status s = cs;
        uint64_t allocated = 0, deallocated = 0;
        double t0 = now_seconds();
        if (ctx) {
#ifdef DCP_HAVE_JEMALLOC
            uint64_t *ap = NULL, *dp = NULL;
            size_t len = sizeof ap;
            mallctl("thread.allocatedp", &ap, &len, NULL, 0);
            len = sizeof dp;
            mallctl("thread.deallocatedp", &dp, &len, NULL, 0);
            uint64_t a0 = ap ? *ap : 0, d0 = dp ? *dp : 0;
#endif
            if (planner) { /* the plan made ahead, outside the timed step (its allocations count) */
                const int faulty = plan_fault && step == o->fault_step;
                const int32_t *lengths = faulty && o->fault == DCP_HARNESS_FAULT_PLAN_OTHER_LENGTHS ? other : sh->data.padded;
                dcp_context *by = faulty && misplanner ? misplanner : planner;
                s = dcp_plan_compute(by, lengths, sh->data.n, &args.plan);
                if (s != DCP_OK) {
                    note(sh, "world rank %d step %d: plan ahead: %s", w, step, dcp_context_last_error(by));
                    args.plan = NULL;
                } else if (faulty && o->fault == DCP_HARNESS_FAULT_PLAN_CHANGED && args.plan->num_ids > 1) {
                    int32_t *ids = args.plan->ids, last = args.plan->num_ids - 1, t = ids[0];
                    ids[0] = ids[last], ids[last] = t;
                }
            }
            t0 = now_seconds();
            s = dcp_step(ctx, &args, holds ? &input : NULL, &out);
#ifdef DCP_HAVE_JEMALLOC
            allocated = ap ? *ap - a0 : 0;
            deallocated = dp ? *dp - d0 : 0;
#endif
        }
        double t1 = now_seconds();
#ifdef DCP_HAVE_NCCL
        if (o->gpu && step == 0) free_after_warmup = dcp_gpu_free_bytes();
        if (o->gpu && step == o->steps - 1 && step > 0) {
            int64_t lost = free_after_warmup - dcp_gpu_free_bytes();
            pthread_mutex_lock(&sh->lock);
            if (lost > sh->device_delta) sh->device_delta = lost;
            pthread_mutex_unlock(&sh->lock);
        }
#endif
        pthread_mutex_lock(&sh->lock);
        sh->status[step * sh->world + w] = s;
        sh->result->rank_collectives[w] = calls;
        sh->seconds[step * sh->world + w] = t1 - t0;
        /* on GPUs the first step is a warm-up: NCCL connects its peers lazily */
        if (!(o->gpu && step == 0) && allocated + deallocated > sh->heap_max) sh->heap_max = allocated + deallocated;
#ifdef DCP_HAVE_NCCL
        if (o->gpu && step > 0 && s == DCP_OK) {
            int64_t beyond = (int64_t)(allocated + deallocated) - (int64_t)out->stats.collectives * (int64_t)nccl_call_heap;
            if (beyond > sh->heap_beyond_nccl) sh->heap_beyond_nccl = beyond;
        }
#endif
        pthread_mutex_unlock(&sh->lock);
        if (s != DCP_OK) {
            if (!((o->fault != DCP_HARNESS_FAULT_NONE || o->comm_fault != DCP_FAULT_NONE) && step == o->fault_step))
                note(sh, "world rank %d step %d: %s: %s", w, step, dcp_status_str(s), dcp_context_last_error(ctx));
            continue;
        }
        sh->result->step_stats[(size_t)step * (size_t)sh->world + (size_t)w] = out->stats;
        if (step == o->steps - 1) {
            sh->result->rank_stats[w] = out->stats;
            sh->result->rank_pipeline[w] = pp, sh->result->rank_tensor[w] = tp, sh->result->rank_dpxcp[w] = dpxcp;
            pthread_mutex_lock(&sh->lock);
            sh->microbatches = out->num_microbatches;
            pthread_mutex_unlock(&sh->lock);
        }
#ifdef DCP_HAVE_NCCL
        if (o->gpu && o->check) {
            dcp_status ds = dcp_gpu_rank_download(&gr, out);
            if (ds != DCP_OK || gr.cu_mismatches) {
                note(sh, "world rank %d: download: %s%s%s, %lld device cu_seqlens arrays differ from the host's", w,
                     dcp_status_str(ds), gr.message[0] ? ": " : "", gr.message, (long long)gr.cu_mismatches);
                pthread_mutex_lock(&sh->lock);
                sh->mismatches += 1 + gr.cu_mismatches;
                pthread_mutex_unlock(&sh->lock);
                continue;
            }
            out = &gr.host_output;
        }
#endif
        if (o->check) {
            int64_t bad = verify_rank(sh, pp, dpxcp, args.mtp_virtual_stages, out);
            pthread_mutex_lock(&sh->lock);
            sh->mismatches += bad;
            pthread_mutex_unlock(&sh->lock);
        }
    }
    dcp_context_destroy(ctx);
    dcp_context_destroy(planner);
    dcp_context_destroy(misplanner);
    free(other);
    free(memory);
#ifdef DCP_HAVE_NCCL
    if (o->gpu) dcp_gpu_rank_end(&gr);
#endif
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                    */
/* ------------------------------------------------------------------------ */

void dcp_harness_options_default(dcp_harness_options *o)
{
    memset(o, 0, sizeof *o);
    dcp_config_default(&o->config);
    o->mtp_pipeline_rank = -1;
    o->steps = 1;
    o->check = 1;
    o->fault_world_rank = -1;
}

int32_t dcp_harness_fields_bytes(uint32_t fields)
{
    return ((fields & DCP_FIELD_TOKENS) ? 8 : 0) + ((fields & DCP_FIELD_LABELS) ? 8 : 0) +
           ((fields & DCP_FIELD_POSITION_IDS) ? 8 : 0) + ((fields & DCP_FIELD_LOSS_MASK) ? 4 : 0);
}

int32_t dcp_harness_read_trace(const char *path, int32_t *out, int32_t capacity)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int32_t n = 0;
    long v;
    while (n < capacity && fscanf(f, "%ld", &v) == 1) out[n++] = (int32_t)v;
    fclose(f);
    return n;
}

/* DCP_ERR_ALLOC, with "out of memory: <what>" as the result's message. */
static dcp_status harness_out_of_memory(dcp_harness_result *result, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static dcp_status harness_out_of_memory(dcp_harness_result *result, const char *format, ...)
{
    char what[400];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    snprintf(result->message, sizeof result->message, "out of memory: %s", what);
    return DCP_ERR_ALLOC;
}

/*
 * The most output slots one DPxCP rank holds over all of the plan's
 * microbatches: per microbatch its group's packed spans over cp (rounded up),
 * padded as the THD settings pad them (to max_seqlen_per_rank exactly, or up
 * to pad_alignment).  Sized from the batch, not from max_seqlen_per_rank x
 * microbatches, which for a large --max-seqlen is far more than any rank
 * holds.  0, or -1 when out of memory.
 */
static int plan_output_bound(const dcp_config *c, const dcp_plan *plan, const int32_t *padded, int32_t ranks,
                             int64_t *bound)
{
    int64_t *held = calloc((size_t)ranks, sizeof *held);
    if (!held) return -1;
    const int64_t a = c->pad_alignment;
    for (int32_t m = 0; m < plan->num_microbatches; m++)
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            int64_t packed = 0;
            for (int32_t k = plan->group_first_id[g]; k < plan->group_first_id[g + 1]; k++) packed += padded[plan->ids[k]];
            const int64_t cp = plan->group_cp_size[g];
            int64_t slots = (packed + cp - 1) / cp;
            if (c->pad_to_max_seqlen) slots = c->max_seqlen_per_rank;
            else if (a > 0) slots = (slots + a - 1) / a * a;
            for (int64_t r = plan->group_first_rank[g]; r < plan->group_first_rank[g] + cp && r < ranks; r++)
                held[r] += slots;
        }
    *bound = 0;
    for (int32_t r = 0; r < ranks; r++)
        if (held[r] > *bound) *bound = held[r];
    free(held);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

dcp_status dcp_harness_run(const dcp_harness_options *o, dcp_harness_result *result)
{
    memset(result, 0, sizeof *result);
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.opt = o;
    sh.config = o->config;
    char message[512];
    dcp_status st = dcp_config_validate(&sh.config, message, sizeof message);
    if (st != DCP_OK) {
        snprintf(result->message, sizeof result->message, "config: %s", message);
        return st;
    }
    if (o->steps < 1 || !o->lengths || o->num_lengths < 1) return DCP_ERR_INVALID_ARGUMENT;
    const dcp_config *c = &sh.config;
    sh.n = dcp_config_num_ranks(c);
    sh.tp = c->tensor_parallel_size;
    sh.pp = c->pipeline_parallel_size;
    sh.world = sh.n * sh.tp * sh.pp;
    result->world_size = sh.world;

    const int32_t dp = c->data_parallel_size;
    dcp_context *planner = NULL;
    double *per_step = NULL;
    int barrier_ready = 0, lock_ready = 0;

    /* spans divisible by 2 * (largest CP group) so zigzag can always cut them */
    sh.inputs = calloc((size_t)dp, sizeof *sh.inputs);
    if (!sh.inputs || dataset_build(&sh.data, o->lengths, o->num_lengths, 2 * sh.n, o->prepacked) != 0) {
        st = harness_out_of_memory(result, "the synthetic batch (%d sequences)", o->num_lengths);
        goto cleanup;
    }
    result->total_tokens = sh.data.offset[sh.data.n];
    int64_t max_input = 0;
    for (int32_t p = 0; p < dp; p++) {
        int32_t first = (int32_t)((int64_t)sh.data.n * p / dp), last = (int32_t)((int64_t)sh.data.n * (p + 1) / dp);
        if (dp_input_build(&sh.inputs[p], &sh.data, first, last, o->prepacked) != 0) {
            st = harness_out_of_memory(result, "DP rank %d's samples", p);
            goto cleanup;
        }
        int64_t tokens = sh.data.offset[last] - sh.data.offset[first];
        if (tokens > max_input) max_input = tokens;
    }

    /* the plan, computed once in this process, for the oracle and for sizing */
    dcp_config plan_config = *c;
    plan_config.max_tokens_per_rank = 0;
    st = dcp_context_create(&plan_config, &planner);
    const dcp_plan *plan = NULL;
    if (st == DCP_OK) st = dcp_plan_compute(planner, sh.data.padded, sh.data.n, &plan);
    if (st != DCP_OK) {
        snprintf(result->message, sizeof result->message, "plan: %s: %s", dcp_status_str(st),
                 planner ? dcp_context_last_error(planner) : "");
        goto cleanup;
    }
    sh.plan = (dcp_plan *)plan;
    if (sh.config.max_tokens_per_rank == 0) {
        int64_t out_bound = 0;
        if (plan_output_bound(c, plan, sh.data.padded, sh.n, &out_bound) != 0) {
            st = harness_out_of_memory(result, "the output sizes of %d ranks", sh.n);
            goto cleanup;
        }
        sh.config.max_tokens_per_rank = (max_input > out_bound ? max_input : out_bound) + 64;
    }

    /*
     * Every rank of this process takes its own workspace and writes all of it: refuse up front what
     * the machine cannot hold, rather than be killed by the kernel half-way through.
     */
    size_t workspace = 0;
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (dcp_workspace_size(&sh.config, &workspace) == DCP_OK && pages > 0 && page_size > 0) {
        const double physical = (double)pages * (double)page_size, total = (double)workspace * sh.world;
        if (total > physical) {
            st = harness_out_of_memory(result,
                                       "%d ranks x %zu bytes of workspace = %.0f bytes, more than this machine's "
                                       "%.0f bytes of memory",
                                       sh.world, workspace, total, physical);
            goto cleanup;
        }
    }

    if (o->fault != DCP_HARNESS_FAULT_NONE && o->fault_world_rank >= 0 &&
        plant_fault(&sh, (o->fault_world_rank % sh.n) / c->context_parallel_size) != 0) {
        st = harness_out_of_memory(result, "the planted bad input");
        goto cleanup;
    }

    int32_t timeout = o->timeout_ms > 0 ? o->timeout_ms : 60000;
    if (o->gpu) {
#ifdef DCP_HAVE_NCCL
        st = dcp_gpu_world_create(sh.world, &sh.gpu, result->message, sizeof result->message);
#else
        snprintf(result->message, sizeof result->message, "built without NCCL");
        st = DCP_ERR_UNSUPPORTED;
#endif
        if (st != DCP_OK) goto cleanup;
    }
    /*
     * Every communicator waits the same timeout, as a trainer would set them:
     * a rank that waits out one collective for a missing peer reaches the
     * next one late, and the step's agreements still give every rank one
     * status (an agreement that fails returns its own outcome on every rank
     * that took part).
     */
    sh.lanes = calloc((size_t)sh.pp * (size_t)sh.tp, sizeof *sh.lanes);
    sh.tps = calloc((size_t)sh.pp * (size_t)sh.n, sizeof *sh.tps);
    dcp_status ws = sh.lanes && sh.tps ? dcp_inproc_world_create(sh.world, timeout, &sh.world_group) : DCP_ERR_ALLOC;
    for (int32_t i = 0; ws == DCP_OK && i < sh.pp * sh.tp; i++) ws = dcp_inproc_world_create(sh.n, timeout, &sh.lanes[i]);
    for (int32_t i = 0; ws == DCP_OK && i < sh.pp * sh.n; i++) ws = dcp_inproc_world_create(sh.tp, timeout, &sh.tps[i]);
    if (ws != DCP_OK) {
        snprintf(result->message, sizeof result->message, "in-process communicators: %s%s", dcp_status_str(ws),
                 ws == DCP_ERR_ALLOC ? " (out of memory)" : "");
        st = ws;
        goto cleanup;
    }
    barrier_ready = pthread_barrier_init(&sh.start, NULL, (unsigned)sh.world) == 0;
    lock_ready = pthread_mutex_init(&sh.lock, NULL) == 0;
    sh.status = calloc((size_t)o->steps * (size_t)sh.world, sizeof *sh.status);
    sh.seconds = calloc((size_t)o->steps * (size_t)sh.world, sizeof *sh.seconds);
    sh.result = result;
    result->rank_stats = calloc((size_t)sh.world, sizeof *result->rank_stats);
    result->step_stats = calloc((size_t)o->steps * (size_t)sh.world, sizeof *result->step_stats);
    result->rank_pipeline = calloc((size_t)sh.world, sizeof(int32_t));
    result->rank_tensor = calloc((size_t)sh.world, sizeof(int32_t));
    result->rank_dpxcp = calloc((size_t)sh.world, sizeof(int32_t));
    result->rank_collectives = calloc((size_t)sh.world, sizeof(int32_t));
    result->rank_step_status = sh.status;
    per_step = calloc((size_t)o->steps, sizeof *per_step);
    if (!barrier_ready || !lock_ready || !sh.status || !sh.seconds || !result->rank_stats || !result->rank_pipeline ||
        !result->rank_tensor || !result->rank_dpxcp || !result->rank_collectives || !per_step) {
        st = harness_out_of_memory(result, "the results of %d ranks", sh.world);
        goto cleanup;
    }

    /* all ranks or none: one that never started would leave the others waiting at the start barrier */
    if (dcp_inproc_run(sh.world, rank_main, &sh) != DCP_OK) {
        snprintf(result->message, sizeof result->message,
                 "cannot start %d rank threads: out of memory or too many threads", sh.world);
        st = DCP_ERR_ALLOC;
        goto cleanup;
    }

    result->statuses_agree = 1;
    for (int32_t s = 0; s < o->steps; s++) {
        if (s < 8) result->step_status[s] = sh.status[s * sh.world];
        for (int32_t w = 0; w < sh.world; w++) {
            if (sh.status[s * sh.world + w] != sh.status[s * sh.world]) result->statuses_agree = 0;
            if (sh.seconds[s * sh.world + w] > per_step[s]) per_step[s] = sh.seconds[s * sh.world + w];
        }
    }
    qsort(per_step, (size_t)o->steps, sizeof *per_step, cmp_double);
    result->step_seconds_min = per_step[0];
    result->step_seconds_median = per_step[o->steps / 2];
    result->num_microbatches = sh.microbatches;
    result->heap_bytes_max = sh.heap_max;
#ifdef DCP_HAVE_JEMALLOC
    {
        /* a jemalloc built without statistics has no thread.allocatedp: the byte counts above stayed 0 */
        uint64_t *counter = NULL;
        size_t len = sizeof counter;
        result->heap_measured = mallctl("thread.allocatedp", &counter, &len, NULL, 0) == 0 && counter != NULL;
    }
#endif
    result->device_bytes_delta = sh.device_delta;
    result->nccl_heap_per_call = sh.nccl_call_heap;
    result->heap_bytes_beyond_nccl = sh.heap_beyond_nccl;
    result->mismatches = sh.mismatches;
    int all_ok = 1;
    for (int32_t s = 0; s < o->steps; s++)
        if (sh.status[s * sh.world] != DCP_OK) all_ok = 0;
    result->verified = o->check && sh.mismatches == 0 && (all_ok || o->fault != DCP_HARNESS_FAULT_NONE || o->comm_fault != DCP_FAULT_NONE);
    memcpy(result->message, sh.message, sizeof result->message);
    if (sh.out_of_memory) st = harness_out_of_memory(result, "%s", sh.oom_message);

cleanup:
    if (st != DCP_OK) { /* the message stays; the per-rank tables go */
        free(result->rank_stats), free(result->rank_pipeline), free(result->rank_tensor), free(result->rank_dpxcp);
        free(result->rank_collectives), free(result->rank_step_status);
        result->rank_stats = NULL, result->rank_pipeline = result->rank_tensor = result->rank_dpxcp = NULL;
        result->rank_collectives = NULL, result->rank_step_status = NULL;
    }
    free(per_step);
    if (barrier_ready) pthread_barrier_destroy(&sh.start);
    if (lock_ready) pthread_mutex_destroy(&sh.lock);
    dcp_inproc_world_destroy(sh.world_group);
#ifdef DCP_HAVE_NCCL
    dcp_gpu_world_destroy(sh.gpu);
#endif
    for (int32_t i = 0; sh.lanes && i < sh.pp * sh.tp; i++) dcp_inproc_world_destroy(sh.lanes[i]);
    for (int32_t i = 0; sh.tps && i < sh.pp * sh.n; i++) dcp_inproc_world_destroy(sh.tps[i]);
    free(sh.lanes), free(sh.tps), free(sh.seconds);
    free(sh.faulty.samples), free(sh.faulty.cu);
    dcp_context_destroy(planner);
    for (int32_t p = 0; sh.inputs && p < dp; p++) free(sh.inputs[p].samples), free(sh.inputs[p].cu);
    free(sh.inputs);
    dataset_free(&sh.data);
    return st;
}

void dcp_harness_result_free(dcp_harness_result *r)
{
    free(r->rank_stats), free(r->step_stats), free(r->rank_pipeline), free(r->rank_tensor), free(r->rank_dpxcp);
    free(r->rank_collectives), free(r->rank_step_status);
    memset(r, 0, sizeof *r);
}
