/*
 * train_options.c - dcpack_train_data_loop's options, and the rank's place from the environment
 * (RANK, WORLD_SIZE, LOCAL_RANK as torchrun sets them).
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: RANK=r WORLD_SIZE=n [LOCAL_RANK=l] dcpack_train_data_loop --trace FILE [options]\n"
    "  one process per rank (GPU); see docs/examples.md.  Start N of them on one host with\n"
    "  examples/launch.sh N [options].\n"
    "layout (DP*CP*TP*PP = WORLD_SIZE; --dp defaults to WORLD_SIZE / (CP*TP*PP)):\n"
    "  --dp D --cp C --tp T --pp P      parallel sizes (1)\n"
    "  --vpp V                          virtual pipeline stages per PP stage (1)\n"
    "  --mtp                            the last PP stage's last virtual stage holds MTP layers\n"
    "data:\n"
    "  --trace FILE                     sequence lengths, one per line (tests/data/workloads/*.txt)\n"
    "  --batch G                        sequences per global batch (64); step k takes lines\n"
    "                                   k*G .. k*G+G-1 (wrapping), DP rank p an equal consecutive share\n"
    "  --steps K                        steps (4)\n"
    "  --scheduler NAME                 dynamic_cp (default), dp_balanced or balanced\n"
    "  --effort full|fast               balanced's search (dcp_config.plan_effort; full)\n"
    "  --plan-ahead                     plan each step's batch while the step before runs, on a thread,\n"
    "                                   and hand the plan to dcp_step (dcp_step_args.plan)\n"
    "  --max-seqlen-per-rank M          tokens one DPxCP rank holds in a microbatch (4096)\n"
    "  --pad-alignment A                THD padding of each rank's slice, even (8; 0 = none)\n"
    "communication:\n"
    "  --comm nccl|shm                  NCCL on the GPUs (default), or shared memory on the CPU\n"
    "  --timeout-ms T                   every collective gives up after T ms (60000)\n"
    "  --init-timeout-ms T              rendezvous and communicator set-up limit (120000)\n"
    "  --rendezvous FILE                where rank 0 publishes the job's rendezvous\n"
    "                                   (default $DCP_RENDEZVOUS_FILE, else /tmp/dcpack-rendezvous-JOB)\n"
    "  --job-id ID                      (default $DCP_JOB_ID, $TORCHELASTIC_RUN_ID, $SLURM_JOB_ID, 'default')\n"
    "failure drill:\n"
    "  --die-at-step K --die-rank R     rank R leaves in the middle of step K (0-based) ...\n"
    "  --die-at-call C                  ... just before its collective C of that step (1: after the first)\n"
    "  --die-how exit|kill              _exit(9) (default) or SIGKILL itself\n"
    "  --verbose                        every rank prints every step\n"
    "  --version                        the communicators this build has, the CUDA devices it sees\n"
    "exit status: 0 ok, 1 oracle mismatch, 2 usage, 3 peer lost (communicators aborted),\n"
    "  4 step failed, 5 set-up failed, 9 told to die\n";

int usage_error(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "dcpack_train_data_loop: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n(--help for usage)\n");
    va_end(args);
    return RC_USAGE;
}

int parse_int(const char *text, int64_t lo, int64_t hi, int32_t *out)
{
    if (!text || !*text) return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

static int env_int(const char *name, int32_t *out, int required)
{
    const char *v = getenv(name);
    if (!v) return required ? 0 : 1;
    return parse_int(v, 0, INT32_MAX, out);
}

int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->cp = o->tp = o->pp = o->vpp = 1;
    o->batch = 64;
    o->steps = 4;
    o->comm = "nccl";
    o->timeout_ms = 60000;
    o->init_timeout_ms = 120000;
    o->scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o->max_seqlen_per_rank = 4096;
    o->pad_alignment = 8;
    o->die_step = o->die_rank = -1;
    o->die_call = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int32_t *target = NULL;
        int64_t lo = 1, hi = INT32_MAX;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            exit(RC_OK);
        } else if (!strcmp(a, "--version")) {
#ifdef DCP_EXAMPLE_NCCL
            const char *kinds = "shm nccl";
#else
            const char *kinds = "shm";
#endif
            printf("dcpack_train_data_loop (dcpack %d.%d.%d): comm %s; %d CUDA devices visible\n", DCP_VERSION_MAJOR,
                   DCP_VERSION_MINOR, DCP_VERSION_PATCH, kinds, dcp_cuda_device_count());
            exit(RC_OK);
        } else if (!strcmp(a, "--mtp")) {
            o->mtp = 1;
            continue;
        } else if (!strcmp(a, "--plan-ahead")) {
            o->plan_ahead = 1;
            continue;
        } else if (!strcmp(a, "--verbose")) {
            o->verbose = 1;
            continue;
        } else if (!strcmp(a, "--dp")) target = &o->dp;
        else if (!strcmp(a, "--cp")) target = &o->cp;
        else if (!strcmp(a, "--tp")) target = &o->tp;
        else if (!strcmp(a, "--pp")) target = &o->pp;
        else if (!strcmp(a, "--vpp")) target = &o->vpp;
        else if (!strcmp(a, "--batch")) target = &o->batch;
        else if (!strcmp(a, "--steps")) target = &o->steps;
        else if (!strcmp(a, "--timeout-ms")) target = &o->timeout_ms, lo = 0;
        else if (!strcmp(a, "--init-timeout-ms")) target = &o->init_timeout_ms;
        else if (!strcmp(a, "--max-seqlen-per-rank")) target = &o->max_seqlen_per_rank;
        else if (!strcmp(a, "--pad-alignment")) target = &o->pad_alignment, lo = 0;
        else if (!strcmp(a, "--die-at-step")) target = &o->die_step, lo = 0;
        else if (!strcmp(a, "--die-rank")) target = &o->die_rank, lo = 0;
        else if (!strcmp(a, "--die-at-call")) target = &o->die_call, lo = 0;
        else if (!strcmp(a, "--trace") || !strcmp(a, "--comm") || !strcmp(a, "--rendezvous") ||
                 !strcmp(a, "--job-id") || !strcmp(a, "--scheduler") || !strcmp(a, "--die-how") ||
                 !strcmp(a, "--effort")) {
            if (!v) return usage_error("%s needs a value", a);
            if (!strcmp(a, "--trace")) o->trace = v;
            else if (!strcmp(a, "--comm")) o->comm = v;
            else if (!strcmp(a, "--rendezvous")) o->rendezvous = v;
            else if (!strcmp(a, "--job-id")) o->job_id = v;
            else if (!strcmp(a, "--scheduler")) {
                if (dcp_scheduler_from_name(v, &o->scheduler) != DCP_OK) return usage_error("unknown scheduler '%s'", v);
            } else if (!strcmp(a, "--effort")) {
                if (strcmp(v, "full") && strcmp(v, "fast")) return usage_error("--effort takes full or fast, not '%s'", v);
                o->effort = strcmp(v, "fast") ? DCP_PLAN_EFFORT_FULL : DCP_PLAN_EFFORT_FAST;
            } else {
                if (strcmp(v, "exit") && strcmp(v, "kill")) return usage_error("--die-how takes exit or kill, not '%s'", v);
                o->die_kill = !strcmp(v, "kill");
            }
            i++;
            continue;
        } else
            return usage_error("unknown option '%s'", a);
        if (!parse_int(v, lo, hi, target)) return usage_error("%s needs an integer in [%lld, %lld]", a, (long long)lo, (long long)hi);
        i++;
    }
    if (!o->trace) return usage_error("--trace FILE is required");
    if (strcmp(o->comm, "nccl") && strcmp(o->comm, "shm")) return usage_error("--comm takes nccl or shm, not '%s'", o->comm);
    if (o->pad_alignment % 2) return usage_error("--pad-alignment must be even (zigzag cuts the tail padding in 2*cp chunks)");
    if ((o->die_step >= 0) != (o->die_rank >= 0)) return usage_error("--die-at-step and --die-rank go together");
    return -1;
}

int make_layout(const options *o, layout *L)
{
    memset(L, 0, sizeof *L);
    L->local_rank = -1;
    if (!env_int("RANK", &L->rank, 1) || !env_int("WORLD_SIZE", &L->world, 1) || L->world < 1 || L->rank >= L->world)
        return usage_error("RANK and WORLD_SIZE must be set (0 <= RANK < WORLD_SIZE), as torchrun sets them");
    if (!env_int("LOCAL_RANK", &L->local_rank, 0)) return usage_error("LOCAL_RANK is not a number");
    L->cp = o->cp, L->tp = o->tp, L->pp = o->pp, L->vpp = o->vpp;
    const int64_t others = (int64_t)o->cp * o->tp * o->pp;
    L->dp = o->dp ? o->dp : (int32_t)(L->world / others);
    if ((int64_t)L->dp * others != L->world)
        return usage_error("DP*CP*TP*PP = %d*%d*%d*%d is not WORLD_SIZE %d", L->dp, o->cp, o->tp, o->pp, L->world);
    if (o->vpp > 1 && o->pp < 2) return usage_error("--vpp needs --pp 2 or more");
    if (o->die_rank >= L->world) return usage_error("--die-rank %d is not a rank of %d", o->die_rank, L->world);
    L->n = L->dp * L->cp;
    L->tp_rank = L->rank % L->tp;
    L->cp_rank = (L->rank / L->tp) % L->cp;
    L->dp_rank = (L->rank / (L->tp * L->cp)) % L->dp;
    L->pp_rank = L->rank / (L->tp * L->cp * L->dp);
    L->dpxcp = L->dp_rank * L->cp + L->cp_rank;
    L->holds_data = L->tp_rank == 0;
    L->mtp_virtual_stages = o->mtp && L->pp_rank == L->pp - 1 ? 1u << (L->vpp - 1) : 0u;
    return -1;
}
