/*
 * train_data_loop.c - the data side of a training loop, one process per GPU,
 * the way torchrun, Slurm or MPI start trainers (docs/examples.md).
 *
 *   RANK=r WORLD_SIZE=n LOCAL_RANK=l dcpack_train_data_loop --trace FILE \
 *       [--dp D] [--cp C] [--tp T] [--pp P] [--vpp V] [--mtp] [--comm nccl|shm] ...
 *
 * Each process is one rank.  Rank 0 publishes the job's rendezvous (the NCCL
 * unique id, or the name of the shared-memory segment) in a file, written
 * under a temporary name and renamed; the others poll for it.  Then every
 * rank builds the communicators a trainer has: the world, its DPxCP group
 * (one per TP rank and PP stage), its TP group and its dynamic-CP group
 * communicators (one per power-of-two block of the DPxCP group), and runs K
 * steps of dcp_step() over a trace: step k's global batch is `--batch`
 * consecutive lines of the trace, each DP rank holding an equal consecutive
 * share.  After every step each rank checks everything it received against
 * an oracle computed in the process (thd_oracle.c: it shares no code with the
 * library), checks its CP group communicator of every microbatch, and the
 * ranks exchange their step times: rank 0 prints the slowest rank's.  With
 * --plan-ahead each step's plan is made while the step before runs
 * (train_plan_ahead.c) and dcp_step() only checks it.
 *
 * World rank layout, Megatron-LM's default order (TP fastest, then CP, DP, PP):
 *   rank = ((pp * DP + dp) * CP + cp) * TP + tp,   DPxCP rank = dp * CP + cp.
 *
 * --comm nccl: the data lives on the GPU (LOCAL_RANK's device, a CUDA workspace
 * attached to the context), communicators are dcpack's NCCL backend.
 * --comm shm: the same loop on the CPU, between processes of one host, over
 * the shared-memory communicator of shm_comm.c; the data lives in host memory.
 *
 * Exit status: 0 every step matched the oracle; 1 a step's output differed
 * from the oracle; 2 bad options or environment; 3 a peer was lost (a step or
 * collective failed with DCP_ERR_TIMEOUT, DCP_ERR_COMM or DCP_ERR_NCCL; this
 * rank aborted its communicators); 4 a step failed with another status
 * (agreed on every rank); 5 set-up failed (rendezvous, communicators,
 * context, CUDA); 9 this rank was told to die (--die-at-step).
 *
 * This file is one rank's life: set-up, then its loop of steps; the parts are
 * in files of their own (train_loop.h lists them).  Only the public header is
 * used from dcpack.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_init_alarm(int sig)
{
    (void)sig;
    static const char message[] = "dcpack_train_data_loop: set-up did not finish within --init-timeout-ms\n";
    ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
    (void)ignored;
    _exit(RC_SETUP);
}

static void on_abort_alarm(int sig)
{
    (void)sig;
    static const char message[] =
        "dcpack_train_data_loop: aborting the communicators did not finish in time; leaving without them\n";
    ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
    (void)ignored;
    _exit(RC_PEER_LOST);
}

static int peer_lost(dcp_status s) { return s == DCP_ERR_TIMEOUT || s == DCP_ERR_COMM || s == DCP_ERR_NCCL; }

/*
 * The gather of a batch's lengths for planning ahead failed (over the DP group only: `step` is the step it
 * ran after, -1 before the first).  Said with its reason.  A lost peer ends the loop; an agreed refusal
 * (another configuration on a rank of the group: another --effort or --scheduler) does not: the step then
 * plans the batch itself, and its first agreement, over the whole world, gives every rank - those of the
 * other DP groups too, whose gathers succeeded - the same error at once instead of a wait for ranks that
 * left.
 */
static int ahead_failed(const plan_ahead *a, const layout *L, int32_t step, dcp_status s)
{
    if (step < 0)
        fprintf(stderr, "rank %d: gather of step 0's lengths to plan ahead: %s: %s\n", L->rank, dcp_status_str(s),
                dcp_context_last_error(a->ctx));
    else
        fprintf(stderr, "rank %d: step %d: gather of the next lengths to plan ahead: %s: %s\n", L->rank, step,
                dcp_status_str(s), dcp_context_last_error(a->ctx));
    if (peer_lost(s)) return RC_PEER_LOST;
    fprintf(stderr, "rank %d: the next step plans its batch itself\n", L->rank);
    return RC_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median_ms(const int64_t *ns, int32_t count)
{
    if (count <= 0) return 0.0;
    int64_t *sorted = malloc((size_t)count * sizeof *sorted);
    if (!sorted) return 0.0;
    memcpy(sorted, ns, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, cmp_i64);
    double m = count % 2 ? (double)sorted[count / 2] : 0.5 * (double)(sorted[count / 2 - 1] + sorted[count / 2]);
    free(sorted);
    return m * 1e-6;
}

/* The configuration: the same on every rank, max_tokens_per_rank sized from the whole run's plans. */
static int make_config(const options *o, const layout *L, const int32_t *trace, int32_t trace_count,
                       dcp_config *config, dcp_context **planner, batch *b, int32_t *max_microbatches)
{
    dcp_config_default(config);
    config->world_size = L->world;
    config->data_parallel_size = L->dp;
    config->context_parallel_size = L->cp;
    config->tensor_parallel_size = L->tp;
    config->pipeline_parallel_size = L->pp;
    config->virtual_pipeline_size = L->vpp;
    config->microbatch_group_size_per_vp_stage = L->vpp > 1 ? L->pp : 0;
    config->scheduler = o->scheduler;
    config->plan_effort = o->effort;
    config->max_sequences = o->batch;
    config->max_seqlen_per_rank = o->max_seqlen_per_rank;
    config->pad_alignment = o->pad_alignment;
    config->fields = DCP_FIELD_ALL;
    const oracle_config ocfg = {L->n, o->scheduler == DCP_SCHEDULER_DP_BALANCED ? L->cp : 0, o->max_seqlen_per_rank,
                                o->pad_alignment, config->microbatch_group_size_per_vp_stage, L->pp, L->vpp};
    char message[512];
    if (dcp_config_validate(config, message, sizeof message) != DCP_OK) return usage_error("configuration: %s", message);
    dcp_status s = dcp_context_create(config, planner); /* planning only: the oracle's plans, and the sizing */
    if (s != DCP_OK || !batch_alloc(b, o->batch, L->dp)) {
        fprintf(stderr, "rank %d: planning context: %s\n", L->rank, dcp_status_str(s));
        return RC_SETUP;
    }
    int64_t max_in = 0, max_out = 0;
    for (int32_t step = 0; step < o->steps; step++) {
        batch_fill(b, trace, trace_count, step, o->batch, L->dp, L->n);
        const dcp_plan *plan = NULL;
        if ((s = dcp_plan_compute(*planner, b->padded, b->n, &plan)) != DCP_OK) {
            fprintf(stderr, "rank %d: step %d's batch cannot be planned: %s: %s\n", L->rank, step, dcp_status_str(s),
                    dcp_context_last_error(*planner));
            return RC_USAGE;
        }
        if (plan->num_microbatches > *max_microbatches) *max_microbatches = plan->num_microbatches;
        for (int32_t p = 0; p < L->dp; p++) {
            int64_t in = 0;
            for (int32_t id = b->first[p]; id < b->first[p + 1]; id++) in += b->padded[id];
            if (in > max_in) max_in = in;
        }
        for (int32_t r = 0; r < L->n; r++) {
            int64_t out = 0;
            for (int32_t m = 0; m < plan->num_microbatches; m++) out += oracle_rank_slots(&ocfg, plan, b->padded, m, r);
            if (out > max_out) max_out = out;
        }
    }
    config->max_tokens_per_rank = max_in > max_out ? max_in : max_out;
    return -1;
}

/* The rank's communicators, its step context (CUDA workspace on GPUs) and loader, agreed over the world. */
static int set_up(const options *o, const layout *L, const char *job, const char *path, const dcp_config *config,
                  int32_t max_microbatches, comms *c, dcp_context **ctx, loader *in, void *device)
{
    const size_t report_bytes = (size_t)REPORT_FIELDS * sizeof(int64_t);
    /* shm: what one rank sends in one collective at most (its exchange, or its TP broadcast of every output) */
    const size_t region_bytes = (size_t)config->max_tokens_per_rank * 48 +
                                (size_t)max_microbatches * ((size_t)o->batch + 4) * 16 +
                                (size_t)L->world * (report_bytes + 64) + ((size_t)1 << 20);
    signal(SIGALRM, on_init_alarm);
    alarm((unsigned)((o->init_timeout_ms + 999) / 1000));
    memset(c, 0, sizeof *c);
    c->nccl = !strcmp(o->comm, "nccl");
    int ok = 0;
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl)
        ok = setup_nccl(o, L, path, job,
                        dcp_nccl_staging_bytes(config) + (size_t)L->world * report_bytes + (size_t)L->n * 4 + 4096, c);
    else
#endif
        ok = setup_shm(o, L, path, job, region_bytes, c);
    if (!ok) {
        comms_abort(c);
        return RC_SETUP;
    }
    /* dcp_context_create() is the only call that allocates; a CUDA workspace on GPUs */
    dcp_status s = dcp_context_create(config, ctx);
#ifdef DCP_EXAMPLE_NCCL
    device_input *dev = device;
    if (s == DCP_OK && c->nccl) {
        s = dcp_context_attach_cuda(*ctx, NULL, 0, NULL, 0);
        if (s == DCP_OK && L->holds_data && !device_input_alloc(dev, config->max_tokens_per_rank, o->batch))
            s = DCP_ERR_CUDA;
    }
#else
    (void)device;
#endif
    if (s == DCP_OK && L->holds_data && !loader_alloc(in, config->max_tokens_per_rank, o->batch)) s = DCP_ERR_ALLOC;
    /* every rank is ready: one agreement over the world, then the rendezvous is no longer needed */
    dcp_status agreed = DCP_OK;
    int32_t failed_rank = -1;
    dcp_status bs = c->world.ops->agree(&c->world, s, &agreed, &failed_rank);
    if (s != DCP_OK || bs != DCP_OK || agreed != DCP_OK) {
        fprintf(stderr, "rank %d: set-up failed: %s%s%s (rank %d: %s)\n", L->rank, dcp_status_str(s),
                *ctx ? ": " : "", *ctx ? dcp_context_last_error(*ctx) : "", failed_rank,
                dcp_status_str(bs != DCP_OK ? bs : agreed));
        comms_abort(c);
        return RC_SETUP;
    }
    alarm(0);
    if (c->shm) shm_job_set_timeout(c->shm, o->timeout_ms); /* set-up waited up to --init-timeout-ms; steps wait less */
    if (L->rank == 0) {
        unlink(path);
        if (c->shm) shm_job_unlink(c->shm);
        printf("dcpack_train_data_loop: %d processes, comm %s, DP %d x CP %d x TP %d x PP %d, VPP %d%s, scheduler %s%s%s, "
               "%d steps of %d sequences from %s, max_tokens_per_rank %lld, timeout %d ms\n",
               L->world, o->comm, L->dp, L->cp, L->tp, L->pp, L->vpp, o->mtp ? ", MTP on the last stage" : "",
               dcp_scheduler_name(o->scheduler), o->effort == DCP_PLAN_EFFORT_FAST ? " (effort fast)" : "",
               o->plan_ahead ? ", planned a step ahead" : "", o->steps, o->batch, o->trace,
               (long long)config->max_tokens_per_rank, o->timeout_ms);
    }
    return -1;
}

/* The step's arguments: the counted communicators, this rank's place; plan: the plan made ahead, or NULL. */
static dcp_step_args step_args(const layout *L, dcp_comm counted_comms[3], comms *c, int32_t step,
                               const dcp_plan *plan)
{
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &counted_comms[0];
    args.data_context_parallel = L->holds_data ? &counted_comms[1] : NULL;
    args.tensor_parallel = L->tp > 1 ? &counted_comms[2] : NULL;
    args.pipeline_rank = L->pp_rank;
    args.mtp_virtual_stages = L->mtp_virtual_stages;
    args.tp_ranks_hold_data = 0;
    args.step_id = (uint64_t)step + 1;
    args.plan = plan;
#ifdef DCP_EXAMPLE_NCCL
    args.cuda_stream = c->nccl ? (void *)c->stream : NULL;
#else
    (void)c;
#endif
    return args;
}

/* This step's input: the loader's samples of this DP rank's share (on GPUs, uploaded); 0 when the upload failed. */
static int step_input(const layout *L, comms *c, const batch *b, loader *in, void *device, dcp_step_input *input)
{
    memset(input, 0, sizeof *input);
    input->fields = DCP_FIELD_ALL;
    if (!L->holds_data) return 1;
    loader_fill(in, b, L->dp_rank);
    input->samples = in->samples;
    input->num_samples = in->num_samples;
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) {
        device_input *dev = device;
        if (!device_input_upload(dev, in, c->stream)) return 0;
        input->samples = dev->samples;
    }
#else
    (void)c, (void)device;
#endif
    return 1;
}

/* The end: a summary (every step ran), or the communicators aborted after a lost peer. */
static void finish(const options *o, const layout *L, comms *c, int rc, int64_t my_mismatches,
                   int64_t tokens_computed, const int64_t *slowest, int64_t mismatching_steps)
{
    if (rc == RC_OK || rc == RC_MISMATCH) {
        char tokens[64];
        if (L->holds_data) snprintf(tokens, sizeof tokens, "%lld tokens computed", (long long)tokens_computed);
        else snprintf(tokens, sizeof tokens, "outputs received from TP rank 0");
        printf("rank %d (DPxCP %d, TP %d, PP %d): %d steps, %s, %s\n", L->rank, L->dpxcp, L->tp_rank, L->pp_rank,
               o->steps, tokens, my_mismatches ? "OUTPUTS DIFFER FROM THE ORACLE" : "every output matches the oracle");
        if (L->rank == 0)
            printf("summary: %d steps on %d ranks (%s): %s; slowest-rank step time median %.3f ms%s%.3f ms\n", o->steps,
                   L->world, o->comm,
                   mismatching_steps ? "SOME OUTPUTS DIFFER FROM THE ORACLE" : "every rank's outputs match the oracle",
                   median_ms(slowest, o->steps), o->steps > 1 ? ", without the first step " : "",
                   o->steps > 1 ? median_ms(slowest + 1, o->steps - 1) : 0.0);
        comms_destroy(c);
    } else if (rc == RC_STEP_FAILED) {
        /* an agreed failure: every rank failed alike and the communicators still work */
        comms_destroy(c);
        fprintf(stderr, "rank %d: exiting with status %d\n", L->rank, rc);
    } else {
        /* a lost peer (or a failure of this rank alone, which its peers will see as one); some NCCL versions
           can wait in ncclCommAbort for a peer that is gone: leave anyway after a while */
        print_comm_failure(c, L->rank);
        signal(SIGALRM, on_abort_alarm);
        alarm((unsigned)(10 + o->timeout_ms / 1000));
        comms_abort(c);
        alarm(0);
        fprintf(stderr, "rank %d: %s: communicators aborted, exiting with status %d\n", L->rank,
                rc == RC_PEER_LOST ? "a peer was lost" : "this rank failed", rc);
#ifdef DCP_EXAMPLE_NCCL
        /* leave the GPU as it is: freeing device memory would wait for kernels of the aborted communicators */
        if (c->nccl) {
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
#endif
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    options o;
    layout L;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0 || (rc = make_layout(&o, &L)) >= 0) return rc;
#ifndef DCP_EXAMPLE_NCCL
    if (!strcmp(o.comm, "nccl"))
        return usage_error("this build has no NCCL (dcp_nccl_available() = %d): use --comm shm", dcp_nccl_available());
#endif
    /* the rendezvous file: rank 0 removes a previous job's at once (the others also check the job id in it) */
    char job[128], path[4096];
    job_token(&o, job, sizeof job);
    const char *rv = o.rendezvous ? o.rendezvous : getenv("DCP_RENDEZVOUS_FILE");
    if (rv) snprintf(path, sizeof path, "%s", rv);
    else snprintf(path, sizeof path, "/tmp/dcpack-rendezvous-%s", job);
    if (L.rank == 0) unlink(path);
    int32_t trace_count = 0, max_microbatches = 0;
    int32_t *trace = read_trace(o.trace, &trace_count);
    if (!trace) return RC_USAGE;
    dcp_config config;
    dcp_context *planner = NULL, *ctx = NULL;
    batch b, next;
    memset(&next, 0, sizeof next);
    if ((rc = make_config(&o, &L, trace, trace_count, &config, &planner, &b, &max_microbatches)) >= 0) return rc;
    const oracle_config ocfg = {L.n, o.scheduler == DCP_SCHEDULER_DP_BALANCED ? L.cp : 0, o.max_seqlen_per_rank,
                                o.pad_alignment, config.microbatch_group_size_per_vp_stage, L.pp, L.vpp};
    comms c;
    loader in;
    memset(&in, 0, sizeof in);
    void *device = NULL;
#ifdef DCP_EXAMPLE_NCCL
    device_input dev;
    memset(&dev, 0, sizeof dev);
    device = &dev;
#endif
    if ((rc = set_up(&o, &L, job, path, &config, max_microbatches, &c, &ctx, &in, device)) >= 0) return rc;
    dcp_comm step_comms[3]; /* what dcp_step talks through, counted for the failure drill */
    counted(&c.world, &step_comms[0]);
    counted(&c.dpxcp, &step_comms[1]);
    counted(&c.tp, &step_comms[2]);
    fate = (drill){o.die_step >= 0 && o.die_rank == L.rank, o.die_kill, 0, L.rank, o.die_step, o.die_call, 0, 0};
    plan_ahead ahead;
    memset(&ahead, 0, sizeof ahead);
    const int planning_ahead = o.plan_ahead && L.holds_data;
    dcp_status s = DCP_OK;
    if (planning_ahead && ((s = plan_ahead_open(&ahead, &config, &c.dp)) != DCP_OK || !batch_alloc(&next, o.batch, L.dp)))
        fprintf(stderr, "rank %d: planning context: %s\n", L.rank, dcp_status_str(s)), rc = RC_SETUP;
    int64_t *report = calloc((size_t)L.world * REPORT_FIELDS + REPORT_FIELDS, sizeof *report);
    int64_t *slowest = calloc((size_t)o.steps + 1, sizeof *slowest);
    if (!report || !slowest) fprintf(stderr, "rank %d: out of memory\n", L.rank), rc = RC_SETUP;
    int64_t my_mismatches = 0, mismatching_steps = 0, tokens_computed = 0;
    char message[512];
    rc = rc >= 0 ? rc : RC_OK;
    if (rc == RC_OK && planning_ahead) { /* step 0's plan: nothing runs before it to hide it behind */
        batch_fill(&next, trace, trace_count, 0, o.batch, L.dp, L.n);
        if ((s = plan_ahead_start(&ahead, &next, L.dp_rank, 0)) != DCP_OK) rc = ahead_failed(&ahead, &L, -1, s);
    }

    /* ---- one rank's loop ---- */
    for (int32_t step = 0; step < o.steps && rc == RC_OK; step++) {
        batch_fill(&b, trace, trace_count, step, o.batch, L.dp, L.n);
        dcp_step_input input;
        if (!step_input(&L, &c, &b, &in, device, &input)) {
            fprintf(stderr, "rank %d: upload of step %d's input failed\n", L.rank, step);
            rc = RC_SETUP;
            break;
        }
        const int gathered = !planning_ahead || ahead.running || ahead.status == DCP_OK;
        const dcp_plan *plan = planning_ahead ? plan_ahead_take(&ahead) : NULL; /* made while step-1 ran */
        if (planning_ahead && !plan && gathered) /* the step plans the batch itself: its error, agreed, says why */
            fprintf(stderr, "rank %d: step %d planned ahead: %s: %s\n", L.rank, step, dcp_status_str(ahead.status),
                    dcp_context_last_error(ahead.ctx));
        const int64_t ahead_ns = plan ? ahead.plan_ns : 0;
        const dcp_step_args args = step_args(&L, step_comms, &c, step, plan);
        const dcp_step_output *out = NULL;
        fate.step = step, fate.calls = 0, fate.in_step = 1;
        const int64_t t0 = now_ns();
        s = dcp_step(ctx, &args, L.holds_data ? &input : NULL, &out);
        const int64_t t1 = now_ns();
        fate.in_step = 0;
        if (s != DCP_OK) {
            fprintf(stderr, "rank %d: step %d failed after %.0f ms: %s: %s\n", L.rank, step, (double)(t1 - t0) * 1e-6,
                    dcp_status_str(s), dcp_context_last_error(ctx));
            rc = peer_lost(s) ? RC_PEER_LOST : RC_STEP_FAILED;
            break;
        }
        if (planning_ahead && step + 1 < o.steps) { /* the next batch's lengths, planned while this step goes on */
            batch_fill(&next, trace, trace_count, step + 1, o.batch, L.dp, L.n);
            if ((s = plan_ahead_start(&ahead, &next, L.dp_rank, step + 1)) != DCP_OK &&
                (rc = ahead_failed(&ahead, &L, step, s)) != RC_OK)
                break;
        }
        /* the rest of a training step (forward, backward) would run here; this loop checks the outputs */
        dcp_status cs = DCP_OK;
        const int64_t bad = check_step(planner, &ocfg, &b, &L, &c, c.nccl, out, message, sizeof message, &cs);
        if (bad) fprintf(stderr, "rank %d: step %d: %lld mismatches: %s\n", L.rank, step, (long long)bad, message);
        my_mismatches += bad;
        tokens_computed += out->stats.tokens_computed;
        if (o.verbose)
            printf("rank %d: step %d %s: %d microbatches, %lld tokens computed, %d collectives, %.3f ms\n", L.rank, step,
                   bad ? "MISMATCH" : "ok", out->num_microbatches, (long long)out->stats.tokens_computed,
                   out->stats.collectives, (double)(t1 - t0) * 1e-6);
        int32_t mismatching = 0;
        if (cs == DCP_OK) cs = report_step(&c, &L, step, out, t1 - t0, ahead_ns, bad, report, &slowest[step], &mismatching);
        if (cs != DCP_OK) {
            rc = peer_lost(cs) ? RC_PEER_LOST : RC_STEP_FAILED;
            break;
        }
        mismatching_steps += mismatching != 0;
    }

    if (rc == RC_OK && my_mismatches) rc = RC_MISMATCH;
    finish(&o, &L, &c, rc, my_mismatches, tokens_computed, slowest, mismatching_steps);
    plan_ahead_close(&ahead);
    dcp_context_destroy(ctx);
#ifdef DCP_EXAMPLE_NCCL
    device_input_free(&dev);
#endif
    dcp_context_destroy(planner);
    loader_free(&in);
    batch_free(&b);
    batch_free(&next);
    free(trace), free(report), free(slowest);
    return rc;
}
