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
 * ranks exchange their step times: rank 0 prints the slowest rank's.
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
 * Only the public header is used from dcpack.
 */
#define _POSIX_C_SOURCE 200809L
#include <dcpack.h>

#include "shm_comm.h"
#include "thd_oracle.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef DCP_EXAMPLE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

enum {
    RC_OK = 0,
    RC_MISMATCH = 1,
    RC_USAGE = 2,
    RC_PEER_LOST = 3,
    RC_STEP_FAILED = 4,
    RC_SETUP = 5,
    RC_DIED = 9
};

/* ------------------------------------------------------------------------ */
/* Options and layout                                                        */
/* ------------------------------------------------------------------------ */

typedef struct options {
    int32_t dp, cp, tp, pp, vpp;
    int mtp;
    const char *trace;
    int32_t batch, steps;
    const char *comm; /* "nccl" or "shm" */
    int32_t timeout_ms, init_timeout_ms;
    const char *rendezvous, *job_id;
    dcp_scheduler scheduler;
    int32_t max_seqlen_per_rank, pad_alignment;
    int32_t die_step, die_rank, die_call;
    int die_kill;
    int verbose;
} options;

typedef struct layout {
    int32_t world, rank, local_rank;
    int32_t dp, cp, tp, pp, vpp, n; /* n = DP*CP */
    int32_t tp_rank, cp_rank, dp_rank, pp_rank, dpxcp;
    int holds_data; /* TP rank 0 holds the batch and broadcasts the step's outputs to its TP peers */
    uint32_t mtp_virtual_stages;
} layout;

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

static int usage_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "dcpack_train_data_loop: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n(--help for usage)\n");
    va_end(args);
    return RC_USAGE;
}

static int parse_int(const char *text, int64_t lo, int64_t hi, int32_t *out)
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

static int parse_options(int argc, char **argv, options *o)
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
            const char *comms = "shm nccl";
#else
            const char *comms = "shm";
#endif
            printf("dcpack_train_data_loop (dcpack %d.%d.%d): comm %s; %d CUDA devices visible\n", DCP_VERSION_MAJOR,
                   DCP_VERSION_MINOR, DCP_VERSION_PATCH, comms, dcp_cuda_device_count());
            exit(RC_OK);
        } else if (!strcmp(a, "--mtp")) {
            o->mtp = 1;
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
                 !strcmp(a, "--job-id") || !strcmp(a, "--scheduler") || !strcmp(a, "--die-how")) {
            if (!v) return usage_error("%s needs a value", a);
            if (!strcmp(a, "--trace")) o->trace = v;
            else if (!strcmp(a, "--comm")) o->comm = v;
            else if (!strcmp(a, "--rendezvous")) o->rendezvous = v;
            else if (!strcmp(a, "--job-id")) o->job_id = v;
            else if (!strcmp(a, "--scheduler")) {
                if (dcp_scheduler_from_name(v, &o->scheduler) != DCP_OK) return usage_error("unknown scheduler '%s'", v);
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

static int make_layout(const options *o, layout *L)
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

/* ------------------------------------------------------------------------ */
/* Trace and batches                                                         */
/* ------------------------------------------------------------------------ */

static int32_t *read_trace(const char *path, int32_t *count)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dcpack_train_data_loop: cannot open trace %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int32_t n = 0, cap = 1024;
    int32_t *lengths = malloc((size_t)cap * sizeof *lengths);
    char line[128];
    int line_no = 0, bad = !lengths;
    while (!bad && fgets(line, sizeof line, f)) {
        line_no++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || *p == '\0') continue;
        p[strcspn(p, " \t\r\n")] = '\0';
        int32_t v;
        if (!parse_int(p, 1, INT32_MAX, &v)) {
            fprintf(stderr, "dcpack_train_data_loop: %s:%d: '%s' is not a length\n", path, line_no, p);
            bad = 1;
            break;
        }
        if (n == cap) {
            int32_t *more = realloc(lengths, (size_t)cap * 2 * sizeof *lengths);
            if (!more) {
                bad = 1;
                break;
            }
            lengths = more, cap *= 2;
        }
        lengths[n++] = v;
    }
    fclose(f);
    if (!bad && n == 0) fprintf(stderr, "dcpack_train_data_loop: trace %s holds no length\n", path), bad = 1;
    if (bad) {
        free(lengths);
        return NULL;
    }
    *count = n;
    return lengths;
}

/* One global batch: G sequences, ids in DP-rank order (the order dcp_step gathers them in). */
typedef struct batch {
    int32_t n, step;
    int32_t *padded, *original;
    int64_t *source;
    int32_t *first; /* [dp + 1]: DP rank p holds ids first[p] .. first[p+1]-1 */
} batch;

static int batch_alloc(batch *b, int32_t n, int32_t dp)
{
    memset(b, 0, sizeof *b);
    b->padded = calloc((size_t)n, sizeof *b->padded);
    b->original = calloc((size_t)n, sizeof *b->original);
    b->source = calloc((size_t)n, sizeof *b->source);
    b->first = calloc((size_t)dp + 1, sizeof *b->first);
    return b->padded && b->original && b->source && b->first;
}

static void batch_free(batch *b) { free(b->padded), free(b->original), free(b->source), free(b->first); }

/* Step k: lines k*G .. k*G+G-1 of the trace (wrapping); spans padded to a multiple of 2*DPxCP so zigzag cuts them. */
static void batch_fill(batch *b, const int32_t *trace, int32_t trace_count, int32_t step, int32_t g, int32_t dp, int32_t n)
{
    b->n = g;
    b->step = step;
    const int64_t multiple = 2 * (int64_t)n;
    for (int32_t i = 0; i < g; i++) {
        const int64_t src = ((int64_t)step * g + i) % trace_count;
        b->source[i] = src;
        b->original[i] = trace[src];
        int64_t padded = (trace[src] + multiple - 1) / multiple * multiple;
        b->padded[i] = padded > INT32_MAX ? INT32_MAX : (int32_t)padded;
    }
    for (int32_t p = 0; p <= dp; p++) b->first[p] = (int32_t)((int64_t)g * p / dp);
}

/* A DP rank's loader output: one sample per sequence, its padding slots holding garbage the step must clear. */
typedef struct loader {
    int64_t capacity; /* tokens */
    int64_t *tokens, *labels, *positions;
    float *loss_mask;
    dcp_sample *samples;
    int32_t num_samples;
    int64_t num_tokens;
} loader;

static int loader_alloc(loader *l, int64_t capacity, int32_t max_samples)
{
    memset(l, 0, sizeof *l);
    l->capacity = capacity;
    size_t c = (size_t)(capacity > 0 ? capacity : 1);
    l->tokens = malloc(c * sizeof *l->tokens);
    l->labels = malloc(c * sizeof *l->labels);
    l->positions = malloc(c * sizeof *l->positions);
    l->loss_mask = malloc(c * sizeof *l->loss_mask);
    l->samples = calloc((size_t)max_samples + 1, sizeof *l->samples);
    return l->tokens && l->labels && l->positions && l->loss_mask && l->samples;
}

static void loader_free(loader *l)
{
    free(l->tokens), free(l->labels), free(l->positions), free(l->loss_mask), free(l->samples);
}

static void loader_fill(loader *l, const batch *b, int32_t dp_rank)
{
    int64_t at = 0;
    l->num_samples = 0;
    for (int32_t id = b->first[dp_rank]; id < b->first[dp_rank + 1]; id++) {
        const int64_t src = b->source[id], span = b->padded[id], real = b->original[id];
        for (int64_t j = 0; j < span; j++) {
            const int is_real = j < real;
            l->tokens[at + j] = is_real ? oracle_token(src, b->step, j) : oracle_garbage_token(src);
            l->labels[at + j] = is_real ? oracle_label(src, b->step, j) : ORACLE_GARBAGE_LABEL;
            l->positions[at + j] = is_real ? oracle_position(j) : ORACLE_GARBAGE_POSITION;
            l->loss_mask[at + j] = is_real ? oracle_loss_mask(src, j) : ORACLE_GARBAGE_LOSS_MASK;
        }
        dcp_sample *s = &l->samples[l->num_samples++];
        memset(s, 0, sizeof *s);
        s->tokens = l->tokens + at;
        s->labels = l->labels + at;
        s->loss_mask = l->loss_mask + at;
        s->position_ids = l->positions + at;
        s->num_tokens = span;
        s->padded_length = (int32_t)span;
        s->original_length = (int32_t)real;
        at += span;
    }
    l->num_tokens = at;
}

/* ------------------------------------------------------------------------ */
/* Rendezvous: rank 0 publishes a line in a file (temporary name, rename)    */
/* ------------------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int publish(const char *path, const char *job, const char *comm, const char *payload)
{
    char tmp[4096];
    const int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) { /* a cut name would publish some other file */
        fprintf(stderr, "rank 0: cannot publish %s: the path is too long\n", path);
        return 0;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "rank 0: cannot write %s: %s\n", tmp, strerror(errno));
        return 0;
    }
    int ok = fprintf(f, "dcpack-rendezvous 1 %s %s %s\n", job, comm, payload) > 0;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "rank 0: cannot publish %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 0;
    }
    return 1;
}

/* Poll for rank 0's line of this job and communicator kind; a stale file of another job is ignored. */
static int await_rendezvous(int32_t rank, const char *path, const char *job, const char *comm, char *payload,
                            size_t payload_size, int32_t timeout_ms)
{
    const double until = now_ms() + timeout_ms;
    char line[1024], f_job[256], f_comm[16], f_payload[600];
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            int version = 0;
            int got = fgets(line, sizeof line, f) != NULL;
            fclose(f);
            if (got && sscanf(line, "dcpack-rendezvous %d %255s %15s %599s", &version, f_job, f_comm, f_payload) == 4 &&
                version == 1 && !strcmp(f_job, job) && !strcmp(f_comm, comm) && strlen(f_payload) < payload_size) {
                strcpy(payload, f_payload);
                return 1;
            }
        }
        if (now_ms() > until) {
            fprintf(stderr, "rank %d: no rendezvous from rank 0 for job %s in %s within %d ms\n", rank, job, path,
                    timeout_ms);
            return 0;
        }
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Communicators                                                             */
/* ------------------------------------------------------------------------ */

#define MAX_CP_GROUPS (DCP_MAX_LOG2_CP + 2)

typedef struct comms {
    int nccl;
    dcp_comm world, dpxcp, tp; /* tp: TP > 1 only */
    /* shm */
    shm_job *shm;
    int32_t cp_count;
    int32_t cp_size[MAX_CP_GROUPS];
    dcp_comm cp_group[MAX_CP_GROUPS];
#ifdef DCP_EXAMPLE_NCCL
    ncclComm_t nccl_world;
    cudaStream_t stream;
    dcp_nccl_cp_groups groups;
#endif
} comms;

static dcp_comm *cp_group_of(comms *c, int32_t size)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) return dcp_nccl_cp_group(&c->groups, size);
#endif
    for (int32_t i = 0; i < c->cp_count; i++)
        if (c->cp_size[i] == size) return &c->cp_group[i];
    return NULL;
}

static const char *comm_error(comms *c, dcp_comm *comm)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) return dcp_nccl_comm_last_error(comm);
#endif
    (void)c;
    return shm_comm_last_error(comm);
}

/* The same blocks dcp_nccl_cp_groups_create() builds: one per power of two up to N, plus the pool when N is not one. */
static dcp_status shm_cp_groups(comms *c, int32_t n)
{
    const int32_t rank = c->dpxcp.rank;
    dcp_status s = DCP_OK;
    for (int32_t size = 1; s == DCP_OK && size <= n; size *= 2) {
        s = shm_comm_split(&c->dpxcp, rank / size, rank % size, &c->cp_group[c->cp_count]);
        c->cp_size[c->cp_count++] = size;
        if (size > n / 2) break;
    }
    if (s == DCP_OK && (n & (n - 1)) != 0) {
        s = shm_comm_split(&c->dpxcp, 0, rank, &c->cp_group[c->cp_count]);
        c->cp_size[c->cp_count++] = n;
    }
    return s;
}

static void job_token(const options *o, char *out, size_t size)
{
    const char *id = o->job_id;
    if (!id) id = getenv("DCP_JOB_ID");
    if (!id) id = getenv("TORCHELASTIC_RUN_ID");
    if (!id) id = getenv("SLURM_JOB_ID");
    if (!id || !*id) id = "default";
    size_t i = 0;
    for (; id[i] && i + 1 < size && i < 100; i++) {
        char ch = id[i];
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                   ch == '_' || ch == '.';
        out[i] = keep ? ch : '_';
    }
    out[i] = '\0';
}

static int setup_shm(const options *o, const layout *L, const char *path, const char *job, size_t region_bytes,
                     comms *c)
{
    char name[256], message[256] = "";
    dcp_status s;
    if (L->rank == 0) {
        snprintf(name, sizeof name, "/dcpack-%s-%ld", job, (long)getpid());
        s = shm_job_open(name, L->world, 0, region_bytes, o->init_timeout_ms, &c->shm, message, sizeof message);
        if (s == DCP_OK && !publish(path, job, "shm", name)) s = DCP_ERR_COMM;
    } else {
        if (!await_rendezvous(L->rank, path, job, "shm", name, sizeof name, o->init_timeout_ms)) return 0;
        s = shm_job_open(name, L->world, L->rank, region_bytes, o->init_timeout_ms, &c->shm, message, sizeof message);
    }
    if (s == DCP_OK) s = shm_comm_world(c->shm, &c->world);
    /* DPxCP group of this rank's TP rank and PP stage; TP group of its DPxCP rank and PP stage */
    if (s == DCP_OK) s = shm_comm_split(&c->world, L->pp_rank * L->tp + L->tp_rank, L->dpxcp, &c->dpxcp);
    if (s == DCP_OK && L->tp > 1) s = shm_comm_split(&c->world, L->pp_rank * L->n + L->dpxcp, L->tp_rank, &c->tp);
    if (s == DCP_OK) s = shm_cp_groups(c, L->n);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: shared-memory communicators: %s: %s%s\n", L->rank, dcp_status_str(s), message,
                c->world.ops ? shm_comm_last_error(&c->world) : "");
        return 0;
    }
    return 1;
}

#ifdef DCP_EXAMPLE_NCCL
static int setup_nccl(const options *o, const layout *L, const char *path, const char *job, size_t staging, comms *c)
{
    int devices = 0;
    cudaError_t ce = cudaGetDeviceCount(&devices);
    if (ce != cudaSuccess || devices < 1) {
        fprintf(stderr, "rank %d: no CUDA device (%s)\n", L->rank, cudaGetErrorString(ce));
        return 0;
    }
    /* LOCAL_RANK's device; modulo the visible ones, for launchers that give each process one GPU */
    const int device = (L->local_rank >= 0 ? L->local_rank : L->rank) % devices;
    if ((ce = cudaSetDevice(device)) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", L->rank, device, cudaGetErrorString(ce));
        return 0;
    }
    ncclUniqueId id;
    char hex[2 * sizeof id.internal + 1];
    if (L->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetErrorString(r));
            return 0;
        }
        for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
        if (!publish(path, job, "nccl", hex)) return 0;
    } else {
        if (!await_rendezvous(L->rank, path, job, "nccl", hex, sizeof hex, o->init_timeout_ms)) return 0;
        for (size_t i = 0; i < sizeof id.internal; i++) {
            unsigned v = 0;
            sscanf(hex + 2 * i, "%2x", &v);
            id.internal[i] = (char)v;
        }
    }
    /*
     * Split children share the world's resources, its abort flag among them: aborting one communicator then
     * stops the kernels of all of them.  After a lost peer several communicators can hold a kernel that waits for
     * it (all on one stream), and freeing device memory waits for every kernel, so aborting them one by one with
     * private flags could wait forever on a kernel of a communicator not aborted yet.
     */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.splitShare = 1;
    config.blocking = 1; /* dcpack's backend makes blocking NCCL calls, whatever NCCL_COMM_BLOCKING says */
    ncclResult_t r = ncclCommInitRankConfig(&c->nccl_world, L->world, id, L->rank, &config);
#else
    ncclResult_t r = ncclCommInitRank(&c->nccl_world, L->world, id, L->rank);
#endif
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", L->rank, ncclGetErrorString(r));
        c->nccl_world = NULL;
        return 0;
    }
    if ((ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaStreamCreate: %s\n", L->rank, cudaGetErrorString(ce));
        return 0;
    }
    dcp_nccl_options opt;
    dcp_nccl_options_default(&opt);
    opt.timeout_ms = o->timeout_ms;
    opt.host_staging_bytes = staging;
    dcp_status s = dcp_nccl_comm_init(&c->world, c->nccl_world, c->stream, &opt);
    if (s == DCP_OK) s = dcp_nccl_comm_split(&c->world, L->pp_rank * L->tp + L->tp_rank, L->dpxcp, &c->dpxcp);
    if (s == DCP_OK && L->tp > 1) s = dcp_nccl_comm_split(&c->world, L->pp_rank * L->n + L->dpxcp, L->tp_rank, &c->tp);
    if (s == DCP_OK) s = dcp_nccl_cp_groups_create(&c->dpxcp, &c->groups);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: NCCL communicators: %s: %s\n", L->rank, dcp_status_str(s),
                dcp_nccl_comm_last_error(&c->world));
        return 0;
    }
    return 1;
}
#endif

/* What the communicators say about a failure (which peer went missing, NCCL's message). */
static void print_comm_failure(comms *c, int32_t rank)
{
    if (c->shm) {
        char message[256];
        if (shm_job_failure(c->shm, message, sizeof message) != DCP_OK)
            fprintf(stderr, "rank %d: shared memory: %s\n", rank, message);
        return;
    }
#ifdef DCP_EXAMPLE_NCCL
    dcp_comm *all[3] = {&c->world, &c->dpxcp, &c->tp};
    const char *names[3] = {"world", "DPxCP", "TP"};
    for (int i = 0; i < 3; i++)
        if (all[i]->ops && dcp_nccl_comm_last_error(all[i])[0])
            fprintf(stderr, "rank %d: NCCL %s communicator: %s\n", rank, names[i], dcp_nccl_comm_last_error(all[i]));
#endif
}

/* After a lost peer: abort every communicator (NCCL: ncclCommAbort; shm: mark the job failed). */
static void comms_abort(comms *c)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) {
        for (int32_t i = 0; i < MAX_CP_GROUPS; i++)
            if (c->groups.group[i].ops) dcp_nccl_comm_abort(&c->groups.group[i]);
        memset(&c->groups, 0, sizeof c->groups);
        if (c->tp.ops) dcp_nccl_comm_abort(&c->tp);
        if (c->dpxcp.ops) dcp_nccl_comm_abort(&c->dpxcp);
        if (c->world.ops) dcp_nccl_comm_abort(&c->world); /* aborts the world's ncclComm_t too */
        else if (c->nccl_world) ncclCommAbort(c->nccl_world);
        c->nccl_world = NULL;
        if (c->stream) cudaStreamDestroy(c->stream);
        c->stream = NULL;
        return;
    }
#endif
    for (int32_t i = 0; i < c->cp_count; i++)
        if (c->cp_group[i].ops) shm_comm_abort(&c->cp_group[i]);
    if (c->tp.ops) shm_comm_abort(&c->tp);
    if (c->dpxcp.ops) shm_comm_abort(&c->dpxcp);
    if (c->world.ops) shm_comm_abort(&c->world);
    shm_job_close(c->shm);
    c->shm = NULL;
}

static void comms_destroy(comms *c)
{
#ifdef DCP_EXAMPLE_NCCL
    if (c->nccl) {
        dcp_nccl_cp_groups_destroy(&c->groups);
        dcp_nccl_comm_destroy(&c->tp);
        dcp_nccl_comm_destroy(&c->dpxcp);
        dcp_nccl_comm_destroy(&c->world);
        if (c->nccl_world) ncclCommDestroy(c->nccl_world);
        c->nccl_world = NULL;
        if (c->stream) cudaStreamDestroy(c->stream);
        c->stream = NULL;
        return;
    }
#endif
    for (int32_t i = 0; i < c->cp_count; i++) shm_comm_destroy(&c->cp_group[i]);
    shm_comm_destroy(&c->tp);
    shm_comm_destroy(&c->dpxcp);
    shm_comm_destroy(&c->world);
    shm_job_close(c->shm);
    c->shm = NULL;
}

/* ------------------------------------------------------------------------ */
/* The failure drill: a communicator wrapper that leaves mid-step            */
/* ------------------------------------------------------------------------ */

static struct {
    int armed, kill, in_step;
    int32_t rank, at_step, at_call, step, calls;
} fate;

static void before_collective(void)
{
    if (!fate.in_step) return;
    if (fate.armed && fate.step == fate.at_step && fate.calls == fate.at_call) {
        fprintf(stderr, "rank %d: leaving before collective %d of step %d (%s)\n", fate.rank, fate.at_call,
                fate.at_step, fate.kill ? "SIGKILL" : "_exit(9)");
        fflush(stdout);
        fflush(stderr);
        if (fate.kill) raise(SIGKILL);
        _exit(RC_DIED);
    }
    fate.calls++;
}

#define INNER(comm) ((dcp_comm *)(comm)->impl)

static dcp_status w_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    before_collective();
    return INNER(comm)->ops->allgather(INNER(comm), send, bytes, recv);
}

static dcp_status w_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                               const size_t *recv_bytes, const size_t *recv_offsets)
{
    before_collective();
    return INNER(comm)->ops->allgatherv(INNER(comm), send, send_bytes, recv, recv_bytes, recv_offsets);
}

static dcp_status w_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                              void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    before_collective();
    return INNER(comm)->ops->alltoallv(INNER(comm), send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
}

static dcp_status w_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    before_collective();
    return INNER(comm)->ops->broadcast(INNER(comm), buffer, bytes, root);
}

static dcp_status w_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    before_collective();
    return INNER(comm)->ops->agree(INNER(comm), local, agreed, failed_rank);
}

static const char *w_describe_failure(dcp_comm *comm)
{
    dcp_comm *inner = INNER(comm);
    return inner->ops->describe_failure ? inner->ops->describe_failure(inner) : "";
}

static const dcp_comm_ops counted_ops = {w_allgather, w_allgatherv, w_alltoallv, w_broadcast, w_agree,
                                         w_describe_failure};

static void counted(dcp_comm *inner, dcp_comm *outer)
{
    memset(outer, 0, sizeof *outer);
    if (!inner->ops) return;
    outer->ops = &counted_ops;
    outer->rank = inner->rank;
    outer->size = inner->size;
    outer->impl = inner;
}

/* ------------------------------------------------------------------------ */
/* Outputs on the GPU: a host copy to check                                  */
/* ------------------------------------------------------------------------ */

#ifdef DCP_EXAMPLE_NCCL
typedef struct host_output {
    dcp_step_output out;
    dcp_microbatch *views;
    void **blocks;
    int32_t num_blocks, capacity;
    int failed;
} host_output;

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

static void host_output_free(host_output *h)
{
    for (int32_t i = 0; i < h->num_blocks; i++) free(h->blocks[i]);
    free(h->blocks), free(h->views);
    memset(h, 0, sizeof *h);
}

static int host_output_make(host_output *h, const dcp_step_output *out)
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

/* The loader's fields on the device, uploaded every step (what a GPU data loader hands the step). */
typedef struct device_input {
    void *field[4];
    dcp_sample *samples;
} device_input;

static int device_input_alloc(device_input *d, int64_t capacity, int32_t max_samples)
{
    memset(d, 0, sizeof *d);
    const size_t sizes[4] = {8, 8, 4, 8};
    for (int f = 0; f < 4; f++)
        if (cudaMalloc(&d->field[f], (size_t)(capacity > 0 ? capacity : 1) * sizes[f]) != cudaSuccess) return 0;
    d->samples = calloc((size_t)max_samples + 1, sizeof *d->samples);
    return d->samples != NULL;
}

static void device_input_free(device_input *d)
{
    for (int f = 0; f < 4; f++) cudaFree(d->field[f]);
    free(d->samples);
    memset(d, 0, sizeof *d);
}

static int device_input_upload(device_input *d, const loader *l, cudaStream_t stream)
{
    const void *host[4] = {l->tokens, l->labels, l->loss_mask, l->positions};
    const size_t sizes[4] = {8, 8, 4, 8};
    /* on the step's stream, and waited for: the loader reuses its host buffers next step */
    for (int f = 0; f < 4; f++)
        if (l->num_tokens && cudaMemcpyAsync(d->field[f], host[f], (size_t)l->num_tokens * sizes[f],
                                             cudaMemcpyHostToDevice, stream) != cudaSuccess)
            return 0;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 0;
    for (int32_t i = 0; i < l->num_samples; i++) {
        const int64_t at = l->samples[i].tokens - l->tokens;
        d->samples[i] = l->samples[i];
        d->samples[i].tokens = (const int64_t *)d->field[0] + at;
        d->samples[i].labels = (const int64_t *)d->field[1] + at;
        d->samples[i].loss_mask = (const float *)d->field[2] + at;
        d->samples[i].position_ids = (const int64_t *)d->field[3] + at;
    }
    return 1;
}
#endif

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

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

/* What each rank reports after a step (all-gathered over the world). */
enum { REPORT_STEP_NS, REPORT_PLAN_NS, REPORT_STAGE_NS, REPORT_EXCHANGE_NS, REPORT_PACK_NS, REPORT_MISMATCHES,
       REPORT_TOKENS, REPORT_MAX_CP, REPORT_FIELDS };

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;
    layout L;
    if ((rc = make_layout(&o, &L)) >= 0) return rc;
    const int use_nccl = !strcmp(o.comm, "nccl");
#ifndef DCP_EXAMPLE_NCCL
    if (use_nccl)
        return usage_error("this build has no NCCL (dcp_nccl_available() = %d): use --comm shm", dcp_nccl_available());
#endif
    /* the rendezvous file: rank 0 removes a previous job's at once (the others also check the job id in it) */
    char job[128], path[4096];
    job_token(&o, job, sizeof job);
    const char *rv = o.rendezvous ? o.rendezvous : getenv("DCP_RENDEZVOUS_FILE");
    if (rv) snprintf(path, sizeof path, "%s", rv);
    else snprintf(path, sizeof path, "/tmp/dcpack-rendezvous-%s", job);
    if (L.rank == 0) unlink(path);
    int32_t trace_count = 0;
    int32_t *trace = read_trace(o.trace, &trace_count);
    if (!trace) return RC_USAGE;

    /* the configuration: the same on every rank, sized from the whole run's plans */
    dcp_config config;
    dcp_config_default(&config);
    config.world_size = L.world;
    config.data_parallel_size = L.dp;
    config.context_parallel_size = L.cp;
    config.tensor_parallel_size = L.tp;
    config.pipeline_parallel_size = L.pp;
    config.virtual_pipeline_size = L.vpp;
    config.microbatch_group_size_per_vp_stage = L.vpp > 1 ? L.pp : 0;
    config.scheduler = o.scheduler;
    config.max_sequences = o.batch;
    config.max_seqlen_per_rank = o.max_seqlen_per_rank;
    config.pad_alignment = o.pad_alignment;
    config.fields = DCP_FIELD_ALL;
    const oracle_config ocfg = {L.n, o.scheduler == DCP_SCHEDULER_DP_BALANCED ? L.cp : 0, o.max_seqlen_per_rank,
                                o.pad_alignment, config.microbatch_group_size_per_vp_stage, L.pp, L.vpp};
    char message[512];
    if (dcp_config_validate(&config, message, sizeof message) != DCP_OK) {
        free(trace);
        return usage_error("configuration: %s", message);
    }
    dcp_context *planner = NULL; /* planning only: the oracle's plan, and the sizing below */
    dcp_status s = dcp_context_create(&config, &planner);
    batch b;
    if (s != DCP_OK || !batch_alloc(&b, o.batch, L.dp)) {
        fprintf(stderr, "rank %d: planning context: %s\n", L.rank, dcp_status_str(s));
        return RC_SETUP;
    }
    int64_t max_in = 0, max_out = 0;
    int32_t max_microbatches = 0;
    for (int32_t step = 0; step < o.steps; step++) {
        batch_fill(&b, trace, trace_count, step, o.batch, L.dp, L.n);
        const dcp_plan *plan = NULL;
        s = dcp_plan_compute(planner, b.padded, b.n, &plan);
        if (s != DCP_OK) {
            fprintf(stderr, "rank %d: step %d's batch cannot be planned: %s: %s\n", L.rank, step, dcp_status_str(s),
                    dcp_context_last_error(planner));
            return RC_USAGE;
        }
        if (plan->num_microbatches > max_microbatches) max_microbatches = plan->num_microbatches;
        for (int32_t p = 0; p < L.dp; p++) {
            int64_t in = 0;
            for (int32_t id = b.first[p]; id < b.first[p + 1]; id++) in += b.padded[id];
            if (in > max_in) max_in = in;
        }
        for (int32_t r = 0; r < L.n; r++) {
            int64_t out = 0;
            for (int32_t m = 0; m < plan->num_microbatches; m++) out += oracle_rank_slots(&ocfg, plan, b.padded, m, r);
            if (out > max_out) max_out = out;
        }
    }
    config.max_tokens_per_rank = max_in > max_out ? max_in : max_out;
    const size_t report_bytes = (size_t)REPORT_FIELDS * sizeof(int64_t);
    /* shm: what one rank sends in one collective at most (its exchange, or its TP broadcast of every output) */
    const size_t region_bytes = (size_t)config.max_tokens_per_rank * 48 +
                                (size_t)max_microbatches * ((size_t)o.batch + 4) * 16 +
                                (size_t)L.world * (report_bytes + 64) + ((size_t)1 << 20);

    /* communicators */
    signal(SIGALRM, on_init_alarm);
    alarm((unsigned)((o.init_timeout_ms + 999) / 1000));
    comms c;
    memset(&c, 0, sizeof c);
    c.nccl = use_nccl;
    int ok = 0;
#ifdef DCP_EXAMPLE_NCCL
    if (use_nccl)
        ok = setup_nccl(&o, &L, path, job,
                        dcp_nccl_staging_bytes(&config) + (size_t)L.world * report_bytes + (size_t)L.n * 4 + 4096, &c);
    else
#endif
        ok = setup_shm(&o, &L, path, job, region_bytes, &c);
    if (!ok) {
        comms_abort(&c);
        return RC_SETUP;
    }

    /* the step's context: dcp_context_create() is the only call that allocates; a CUDA workspace on GPUs */
    dcp_context *ctx = NULL;
    loader in;
    memset(&in, 0, sizeof in);
    s = dcp_context_create(&config, &ctx);
#ifdef DCP_EXAMPLE_NCCL
    device_input dev;
    memset(&dev, 0, sizeof dev);
    if (s == DCP_OK && use_nccl) {
        s = dcp_context_attach_cuda(ctx, NULL, 0, NULL, 0);
        if (s == DCP_OK && L.holds_data && !device_input_alloc(&dev, config.max_tokens_per_rank, o.batch))
            s = DCP_ERR_CUDA;
    }
#endif
    if (s == DCP_OK && L.holds_data && !loader_alloc(&in, config.max_tokens_per_rank, o.batch)) s = DCP_ERR_ALLOC;
    /* every rank is ready: one agreement over the world, then the rendezvous is no longer needed */
    dcp_status agreed = DCP_OK;
    int32_t failed_rank = -1;
    dcp_status bs = c.world.ops->agree(&c.world, s, &agreed, &failed_rank);
    if (s != DCP_OK || bs != DCP_OK || agreed != DCP_OK) {
        fprintf(stderr, "rank %d: set-up failed: %s%s%s (rank %d: %s)\n", L.rank, dcp_status_str(s),
                ctx ? ": " : "", ctx ? dcp_context_last_error(ctx) : "", failed_rank,
                dcp_status_str(bs != DCP_OK ? bs : agreed));
        comms_abort(&c);
        return RC_SETUP;
    }
    alarm(0);
    if (c.shm) shm_job_set_timeout(c.shm, o.timeout_ms); /* set-up waited up to --init-timeout-ms; steps wait less */
    if (L.rank == 0) {
        unlink(path);
        if (c.shm) shm_job_unlink(c.shm);
        printf("dcpack_train_data_loop: %d processes, comm %s, DP %d x CP %d x TP %d x PP %d, VPP %d%s, scheduler %s, "
               "%d steps of %d sequences from %s, max_tokens_per_rank %lld, timeout %d ms\n",
               L.world, o.comm, L.dp, L.cp, L.tp, L.pp, L.vpp, o.mtp ? ", MTP on the last stage" : "",
               dcp_scheduler_name(o.scheduler), o.steps, o.batch, o.trace, (long long)config.max_tokens_per_rank,
               o.timeout_ms);
    }

    /* the communicators dcp_step talks through, counted for the failure drill */
    dcp_comm step_world, step_dpxcp, step_tp;
    counted(&c.world, &step_world);
    counted(&c.dpxcp, &step_dpxcp);
    counted(&c.tp, &step_tp);
    fate.armed = o.die_step >= 0 && o.die_rank == L.rank;
    fate.kill = o.die_kill;
    fate.rank = L.rank;
    fate.at_step = o.die_step;
    fate.at_call = o.die_call;

    int64_t *report = calloc((size_t)L.world * REPORT_FIELDS + REPORT_FIELDS, sizeof *report);
    int64_t *slowest = calloc((size_t)o.steps + 1, sizeof *slowest);
    int32_t *members = calloc((size_t)L.n + 1, sizeof *members);
    int64_t my_mismatches = 0, all_mismatching_steps = 0, tokens_computed = 0;
    rc = RC_OK;
    if (!report || !slowest || !members) {
        fprintf(stderr, "rank %d: out of memory\n", L.rank);
        comms_abort(&c);
        return RC_SETUP;
    }
    for (int32_t step = 0; step < o.steps && rc == RC_OK; step++) {
        /* this step's batch, this DP rank's share of it */
        batch_fill(&b, trace, trace_count, step, o.batch, L.dp, L.n);
        dcp_step_input input = {NULL, 0, DCP_FIELD_ALL};
        if (L.holds_data) {
            loader_fill(&in, &b, L.dp_rank);
            input.samples = in.samples;
            input.num_samples = in.num_samples;
#ifdef DCP_EXAMPLE_NCCL
            if (use_nccl) {
                if (!device_input_upload(&dev, &in, c.stream)) {
                    fprintf(stderr, "rank %d: upload of step %d's input failed\n", L.rank, step);
                    rc = RC_SETUP;
                    break;
                }
                input.samples = dev.samples;
            }
#endif
        }
        dcp_step_args args;
        memset(&args, 0, sizeof args);
        args.world = &step_world;
        args.data_context_parallel = L.holds_data ? &step_dpxcp : NULL;
        args.tensor_parallel = L.tp > 1 ? &step_tp : NULL;
        args.pipeline_rank = L.pp_rank;
        args.mtp_virtual_stages = L.mtp_virtual_stages;
        args.tp_ranks_hold_data = 0;
        args.step_id = (uint64_t)step + 1;
#ifdef DCP_EXAMPLE_NCCL
        args.cuda_stream = use_nccl ? (void *)c.stream : NULL;
#endif
        fate.step = step;
        fate.calls = 0;
        fate.in_step = 1;
        const dcp_step_output *out = NULL;
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

        /* check everything this rank received against the oracle */
        const dcp_plan *plan = NULL;
        int64_t bad = 0;
        message[0] = '\0';
        s = dcp_plan_compute(planner, b.padded, b.n, &plan);
        if (s != DCP_OK) {
            snprintf(message, sizeof message, "the oracle's plan: %s", dcp_status_str(s));
            bad++;
        } else if (oracle_check_plan(&ocfg, plan, b.padded, b.n, message, sizeof message)) {
            bad++;
        } else if (out->plan && dcp_plan_hash(out->plan) != dcp_plan_hash(plan)) {
            snprintf(message, sizeof message, "the step's plan differs from the plan of the whole batch");
            bad++;
        } else if ((out->plan == NULL) == L.holds_data) {
            snprintf(message, sizeof message, "plan %s on a rank that %s", out->plan ? "present" : "missing",
                     L.holds_data ? "holds the data" : "receives by broadcast");
            bad++;
        }
        if (!bad) {
            const dcp_step_output *host = out;
#ifdef DCP_EXAMPLE_NCCL
            host_output h;
            memset(&h, 0, sizeof h);
            if (use_nccl) {
                if (!host_output_make(&h, out)) snprintf(message, sizeof message, "download of the outputs failed"), bad++;
                host = &h.out;
            }
#endif
            if (!bad) {
                oracle_batch ob = {b.n, b.padded, b.original, b.source, step};
                bad += oracle_compare(&ocfg, plan, &ob, L.dpxcp, L.pp_rank, L.mtp_virtual_stages, host, message,
                                      sizeof message);
            }
#ifdef DCP_EXAMPLE_NCCL
            if (use_nccl) host_output_free(&h);
#endif
        }
        /* each microbatch's CP group communicator holds exactly the ranks of its CP group */
        dcp_status gs = DCP_OK;
        for (int32_t m = 0; m < out->num_microbatches && gs == DCP_OK; m++) {
            const dcp_microbatch *mb = &out->microbatches[m];
            dcp_comm *g = cp_group_of(&c, mb->local_cp_size);
            if (!g || g->size != mb->local_cp_size || g->rank != mb->cp_rank) {
                if (!bad)
                    snprintf(message, sizeof message, "microbatch %d: no CP group communicator of %d ranks with rank %d",
                             m, mb->local_cp_size, mb->cp_rank);
                bad++;
                break;
            }
            const int32_t mine = L.dpxcp;
            gs = g->ops->allgather(g, &mine, sizeof mine, members);
            for (int32_t i = 0; gs == DCP_OK && i < g->size; i++)
                if (members[i] != L.dpxcp - mb->cp_rank + i) {
                    if (!bad)
                        snprintf(message, sizeof message, "microbatch %d: CP group member %d is DPxCP rank %d, expected %d",
                                 m, i, members[i], L.dpxcp - mb->cp_rank + i);
                    bad++;
                    break;
                }
            if (gs != DCP_OK)
                fprintf(stderr, "rank %d: step %d: CP group all-gather: %s: %s\n", L.rank, step, dcp_status_str(gs),
                        comm_error(&c, g));
        }
        if (bad) fprintf(stderr, "rank %d: step %d: %lld mismatches: %s\n", L.rank, step, (long long)bad, message);
        my_mismatches += bad;
        tokens_computed += out->stats.tokens_computed;
        if (o.verbose)
            printf("rank %d: step %d %s: %d microbatches, %lld tokens computed, %d collectives, %.3f ms\n", L.rank, step,
                   bad ? "MISMATCH" : "ok", out->num_microbatches, (long long)out->stats.tokens_computed,
                   out->stats.collectives, (double)(t1 - t0) * 1e-6);
        if (gs != DCP_OK) {
            rc = peer_lost(gs) ? RC_PEER_LOST : RC_STEP_FAILED;
            break;
        }

        /* every rank's time and verdict, to every rank (and a barrier before the next step) */
        int32_t widest = 0;
        for (int32_t m = 0; m < out->num_microbatches; m++)
            if (out->microbatches[m].local_cp_size > widest) widest = out->microbatches[m].local_cp_size;
        int64_t mine[REPORT_FIELDS] = {t1 - t0, out->stats.time_plan_ns, out->stats.time_stage_ns,
                                       out->stats.time_exchange_ns, out->stats.time_pack_ns, bad,
                                       out->stats.tokens_computed, widest};
        s = c.world.ops->allgather(&c.world, mine, sizeof mine, report);
        if (s != DCP_OK) {
            fprintf(stderr, "rank %d: step %d: report all-gather: %s: %s\n", L.rank, step, dcp_status_str(s),
                    comm_error(&c, &c.world));
            rc = peer_lost(s) ? RC_PEER_LOST : RC_STEP_FAILED;
            break;
        }
        /* the slowest rank's step time, and each phase's slowest rank (TP peers that receive by broadcast
           spend no time in the phases) */
        int32_t slow = 0, mismatching = 0;
        int64_t phase[REPORT_FIELDS] = {0};
        for (int32_t r = 0; r < L.world; r++) {
            const int64_t *rep = report + (size_t)r * REPORT_FIELDS;
            if (rep[REPORT_STEP_NS] > report[(size_t)slow * REPORT_FIELDS + REPORT_STEP_NS]) slow = r;
            mismatching += rep[REPORT_MISMATCHES] != 0;
            for (int f = REPORT_PLAN_NS; f < REPORT_FIELDS; f++)
                if (rep[f] > phase[f]) phase[f] = rep[f];
        }
        slowest[step] = report[(size_t)slow * REPORT_FIELDS + REPORT_STEP_NS];
        all_mismatching_steps += mismatching != 0;
        if (L.rank == 0)
            printf("step %d: %.3f ms on the slowest rank (%d); slowest plan %.3f, stage %.3f, exchange %.3f, "
                   "pack %.3f ms; %d microbatches, CP groups up to %lld ranks; outputs match the oracle on %d/%d ranks\n",
                   step, (double)slowest[step] * 1e-6, slow, (double)phase[REPORT_PLAN_NS] * 1e-6,
                   (double)phase[REPORT_STAGE_NS] * 1e-6, (double)phase[REPORT_EXCHANGE_NS] * 1e-6,
                   (double)phase[REPORT_PACK_NS] * 1e-6, out->num_microbatches, (long long)phase[REPORT_MAX_CP],
                   L.world - mismatching, L.world);
    }

    if (rc == RC_OK) {
        if (my_mismatches) rc = RC_MISMATCH;
        char tokens[64];
        if (L.holds_data) snprintf(tokens, sizeof tokens, "%lld tokens computed", (long long)tokens_computed);
        else snprintf(tokens, sizeof tokens, "outputs received from TP rank 0");
        printf("rank %d (DPxCP %d, TP %d, PP %d): %d steps, %s, %s\n", L.rank, L.dpxcp, L.tp_rank, L.pp_rank, o.steps,
               tokens, my_mismatches ? "OUTPUTS DIFFER FROM THE ORACLE" : "every output matches the oracle");
        if (L.rank == 0)
            printf("summary: %d steps on %d ranks (%s): %s; slowest-rank step time median %.3f ms%s%.3f ms\n", o.steps,
                   L.world, o.comm,
                   all_mismatching_steps ? "SOME OUTPUTS DIFFER FROM THE ORACLE" : "every rank's outputs match the oracle",
                   median_ms(slowest, o.steps), o.steps > 1 ? ", without the first step " : "",
                   o.steps > 1 ? median_ms(slowest + 1, o.steps - 1) : 0.0);
        comms_destroy(&c);
    } else if (rc == RC_STEP_FAILED) {
        /* an agreed failure: every rank failed alike and the communicators still work */
        comms_destroy(&c);
        fprintf(stderr, "rank %d: exiting with status %d\n", L.rank, rc);
    } else {
        /* a lost peer (or a failure of this rank alone, which its peers will see as one); some NCCL versions
           can wait in ncclCommAbort for a peer that is gone: leave anyway after a while */
        print_comm_failure(&c, L.rank);
        signal(SIGALRM, on_abort_alarm);
        alarm((unsigned)(10 + o.timeout_ms / 1000));
        comms_abort(&c);
        alarm(0);
        fprintf(stderr, "rank %d: %s: communicators aborted, exiting with status %d\n", L.rank,
                rc == RC_PEER_LOST ? "a peer was lost" : "this rank failed", rc);
#ifdef DCP_EXAMPLE_NCCL
        /* leave the GPU as it is: freeing device memory would wait for kernels of the aborted communicators */
        if (use_nccl) {
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
#endif
    }
    dcp_context_destroy(ctx);
#ifdef DCP_EXAMPLE_NCCL
    device_input_free(&dev);
#endif
    dcp_context_destroy(planner);
    loader_free(&in);
    batch_free(&b);
    free(trace), free(report), free(slowest), free(members);
    return rc;
}
