/*
 * test_lost_peer.c - a peer that is gone, behind a communicator that lies.
 *
 * A real backend whose peer died can hand back "success" with an output that
 * is not data: NCCL kernels that return early after an abort or an
 * asynchronous error write nothing, or part.  A fault-injecting communicator
 * (lying_comm) wraps the in-process backend.  One rank, the victim, "dies"
 * at its g-th collective: from then on it makes no call any peer can see.
 * Each survivor's collectives on a group that holds the victim, from the one
 * the victim never joined, then "succeed" without the victim: their outputs
 * are zeros, garbage, nothing written, another rank's stale output, or only
 * this rank's own contribution; agree() reports every rank OK.  Over
 * dcp_step (DP 2; DP 2 x CP 2; CP 2 x TP 2 with a broadcast), dcp_gather and
 * dcp_mtp_roll, for every g and both the first and last rank as the victim,
 * no survivor may crash or return DCP_OK with anything but what a run
 * without a fault gives it.  Then the agreement functions on their own, over
 * a scripted communicator: records that do not check out, and a backend that
 * reports "every rank OK" to a rank that failed.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcp_test.h"
#include "../core/comm/agree.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum lie { LIE_NONE, LIE_ZEROS, LIE_GARBAGE, LIE_NOTHING, LIE_STALE, LIE_OWN, LIE_COUNT };
static const char *const lie_name[LIE_COUNT] = {"none", "zeros", "garbage", "nothing", "stale", "own only"};

#define MAX_RANKS 4
#define MAX_GROUPS 6
#define SAVED 65536

/* What every rank's wrappers share for one run. */
typedef struct lie_world {
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    int32_t victim;              /* world rank */
    int32_t dies_at;             /* the victim's collective (over all its groups, from 0) it never joins */
    enum lie lie;
    int dead;
    int32_t victim_calls;        /* collectives the victim made */
    int64_t victim_in[MAX_GROUPS]; /* collectives the victim entered on each group */
    unsigned char saved[MAX_GROUPS][MAX_RANKS][SAVED]; /* each rank's last output on each group */
    size_t saved_bytes[MAX_GROUPS][MAX_RANKS];
} lie_world;

/* One rank's handle on one group. */
typedef struct lying_comm {
    dcp_comm comm; /* first: the dcp_comm the library sees */
    dcp_comm inner;
    lie_world *w;
    int32_t group;       /* index into the shared arrays */
    int32_t world_rank;
    int victim_inside;   /* the group holds the victim */
    int64_t calls;       /* collectives made on this group */
    uint64_t noise;
} lying_comm;

#define LC(c) ((lying_comm *)(c))

/* 1: the victim is gone for this call (its peers fabricate; it fails); 0: call the backend. */
static int gone(lying_comm *c)
{
    lie_world *w = c->w;
    const int64_t k = c->calls++;
    int out = 0;
    pthread_mutex_lock(&w->mutex);
    if (c->world_rank == w->victim) {
        if (!w->dead && w->victim_calls == w->dies_at) w->dead = 1;
        if (!w->dead) {
            w->victim_calls++;
            w->victim_in[c->group] = k + 1;
        }
        out = w->dead;
        pthread_cond_broadcast(&w->changed);
    } else if (c->victim_inside && w->lie != LIE_NONE) {
        /* wait until the victim joined this call, or died before it */
        while (!w->dead && w->victim_in[c->group] <= k) pthread_cond_wait(&w->changed, &w->mutex);
        out = w->victim_in[c->group] <= k;
    }
    pthread_mutex_unlock(&w->mutex);
    return out;
}

static void save(lying_comm *c, const void *out, size_t bytes)
{
    if (!out) return;
    if (bytes > SAVED) bytes = SAVED;
    pthread_mutex_lock(&c->w->mutex);
    memcpy(c->w->saved[c->group][c->comm.rank], out, bytes);
    c->w->saved_bytes[c->group][c->comm.rank] = bytes;
    pthread_mutex_unlock(&c->w->mutex);
}

/* The lie, into [out, out + bytes); `own` (own_bytes at own_at) is this rank's contribution. */
static void fabricate(lying_comm *c, unsigned char *out, size_t bytes, const void *own, size_t own_bytes,
                      size_t own_at)
{
    if (!out || bytes == 0) return;
    switch (c->w->lie) {
    case LIE_ZEROS: memset(out, 0, bytes); break;
    case LIE_GARBAGE:
        for (size_t i = 0; i < bytes; i++) {
            c->noise = c->noise * 6364136223846793005ull + 1442695040888963407ull;
            out[i] = (unsigned char)(c->noise >> 56);
        }
        break;
    case LIE_STALE: { /* the next rank's last output on this group */
        const int32_t other = (c->comm.rank + 1) % c->comm.size;
        pthread_mutex_lock(&c->w->mutex);
        size_t have = c->w->saved_bytes[c->group][other];
        memcpy(out, c->w->saved[c->group][other], have < bytes ? have : bytes);
        pthread_mutex_unlock(&c->w->mutex);
        break;
    }
    case LIE_OWN: /* this rank's own bytes everywhere it can put them */
        if (own && own_bytes)
            for (size_t at = own_at; at + own_bytes <= bytes; at += own_bytes) memmove(out + at, own, own_bytes);
        break;
    default: break; /* LIE_NOTHING */
    }
}

static dcp_status l_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    lying_comm *c = LC(comm);
    size_t total = bytes * (size_t)comm->size;
    if (gone(c)) {
        if (c->world_rank == c->w->victim) return DCP_ERR_COMM;
        fabricate(c, recv, total, send, bytes, 0);
        return DCP_OK;
    }
    dcp_status s = c->inner.ops->allgather(&c->inner, send, bytes, recv);
    if (s == DCP_OK) save(c, recv, total);
    return s;
}

static size_t extent_of(const size_t *bytes, const size_t *offsets, int32_t n)
{
    size_t e = 0;
    for (int32_t p = 0; p < n; p++)
        if (bytes[p] && offsets[p] + bytes[p] > e) e = offsets[p] + bytes[p];
    return e;
}

static dcp_status l_allgatherv(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                               const size_t *recv_bytes, const size_t *recv_offsets)
{
    lying_comm *c = LC(comm);
    size_t extent = extent_of(recv_bytes, recv_offsets, comm->size);
    if (gone(c)) {
        if (c->world_rank == c->w->victim) return DCP_ERR_COMM;
        fabricate(c, recv, extent, send, send_bytes, recv_offsets[comm->rank]);
        return DCP_OK;
    }
    dcp_status s = c->inner.ops->allgatherv(&c->inner, send, send_bytes, recv, recv_bytes, recv_offsets);
    if (s == DCP_OK) save(c, recv, extent);
    return s;
}

static dcp_status l_alltoallv(dcp_comm *comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                              void *recv, const size_t *recv_bytes, const size_t *recv_offsets)
{
    lying_comm *c = LC(comm);
    size_t extent = extent_of(recv_bytes, recv_offsets, comm->size);
    if (gone(c)) {
        if (c->world_rank == c->w->victim) return DCP_ERR_COMM;
        const int32_t me = comm->rank;
        fabricate(c, recv, extent, send ? (const unsigned char *)send + send_offsets[me] : NULL, send_bytes[me],
                  recv_offsets[me]);
        return DCP_OK;
    }
    dcp_status s = c->inner.ops->alltoallv(&c->inner, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
    if (s == DCP_OK) save(c, recv, extent);
    return s;
}

static dcp_status l_broadcast(dcp_comm *comm, void *buffer, size_t bytes, int32_t root)
{
    lying_comm *c = LC(comm);
    if (gone(c)) {
        if (c->world_rank == c->w->victim) return DCP_ERR_COMM;
        if (comm->rank != root) fabricate(c, buffer, bytes, NULL, 0, 0);
        return DCP_OK;
    }
    dcp_status s = c->inner.ops->broadcast(&c->inner, buffer, bytes, root);
    if (s == DCP_OK) save(c, buffer, bytes);
    return s;
}

static dcp_status l_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    lying_comm *c = LC(comm);
    if (gone(c)) {
        if (c->world_rank == c->w->victim) return DCP_ERR_COMM;
        if (c->w->lie != LIE_NOTHING && agreed && failed_rank) { /* "every rank OK" */
            *agreed = DCP_OK;
            *failed_rank = -1;
        }
        return DCP_OK;
    }
    return c->inner.ops->agree(&c->inner, local, agreed, failed_rank);
}

static const char *l_describe(dcp_comm *comm)
{
    lying_comm *c = LC(comm);
    return c->inner.ops->describe_failure(&c->inner);
}

static const dcp_comm_ops lying_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), l_allgather, l_allgatherv, l_alltoallv, l_broadcast, l_agree,
    l_describe,
};

static void lying_init(lying_comm *c, lie_world *w, dcp_inproc_world *inner, int32_t inner_rank, int32_t group,
                       int32_t world_rank, int victim_inside)
{
    memset(c, 0, sizeof *c);
    dcp_inproc_comm(inner, inner_rank, &c->inner);
    c->comm.ops = &lying_ops;
    c->comm.rank = c->inner.rank;
    c->comm.size = c->inner.size;
    c->w = w;
    c->group = group;
    c->world_rank = world_rank;
    c->victim_inside = victim_inside;
    c->noise = 0x9E3779B97F4A7C15ull * (uint64_t)(world_rank + 1) + (uint64_t)group;
}

static lie_world *lie_world_new(int32_t victim, int32_t dies_at, enum lie lie)
{
    lie_world *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mutex, NULL);
    pthread_cond_init(&w->changed, NULL);
    w->victim = victim;
    w->dies_at = lie == LIE_NONE ? -1 : dies_at;
    w->lie = lie;
    return w;
}

static void lie_world_free(lie_world *w)
{
    pthread_cond_destroy(&w->changed);
    pthread_mutex_destroy(&w->mutex);
    free(w);
}

/* ------------------------------------------------------------------------ */
/* The drill                                                                 */
/* ------------------------------------------------------------------------ */

/* What every run records; each call's run struct starts with it. */
typedef struct run_head {
    int32_t param; /* the layout or the rank count */
    int32_t n;     /* ranks */
    lie_world *w;
    dcp_status status[MAX_RANKS];
} run_head;

/* One call under the drill: run it on every rank over `w`; did a survivor get what the oracle got? */
typedef struct drill {
    const char *what;
    int (*once)(void *run, int32_t param, lie_world *w); /* 0: the harness itself failed */
    int (*same)(const void *run, const void *oracle, int32_t rank);
    void *run, *oracle;
} drill;

/*
 * For the first and the last rank as the victim: a run without a fault (the oracle, which also counts the
 * victim's collectives), then one run per collective g the victim can die at (and one past its last) and per
 * lie.  A survivor must fail, or return what the oracle returned.  Returns the survivors' failures.
 */
static int run_drill(const drill *d, int32_t param)
{
    int failures = 0;
    run_head *oracle = d->oracle, *t = d->run;
    lie_world *w = lie_world_new(0, -1, LIE_NONE);
    if (!w || !d->once(oracle, param, w)) {
        dcp_test_fail(__FILE__, __LINE__, "%s (%d): the fault-free run did not run", d->what, param);
        return 0;
    }
    lie_world_free(w);
    const int32_t n = oracle->n;
    for (int32_t victim = 0; victim < n; victim += n - 1) {
        w = lie_world_new(victim, -1, LIE_NONE);
        if (!w || !d->once(oracle, param, w)) return failures;
        const int32_t calls = w->victim_calls;
        lie_world_free(w);
        for (int32_t r = 0; r < n; r++)
            if (oracle->status[r] != DCP_OK)
                dcp_test_fail(__FILE__, __LINE__, "%s (%d): rank %d failed without a fault: %s", d->what, param, r,
                              dcp_status_str(oracle->status[r]));
        for (int32_t g = 0; g <= calls; g++)
            for (int lie = LIE_ZEROS; lie < LIE_COUNT; lie++) {
                w = lie_world_new(victim, g, (enum lie)lie);
                int ran = w && d->once(t, param, w);
                if (w) lie_world_free(w);
                if (!ran) {
                    dcp_test_fail(__FILE__, __LINE__, "%s (%d): a run did not run", d->what, param);
                    return failures;
                }
                for (int32_t r = 0; r < n; r++) {
                    if (r == victim) continue;
                    if (t->status[r] != DCP_OK) failures++;
                    else if (!d->same(t, oracle, r))
                        dcp_test_fail(__FILE__, __LINE__,
                                      "%s (%d), rank %d gone at its collective %d of %d, the communicator lying with "
                                      "%s: rank %d returned DCP_OK with data no fault-free run gives it",
                                      d->what, param, victim, g, calls, lie_name[lie], r);
                }
            }
    }
    return failures;
}

/* ------------------------------------------------------------------------ */
/* dcp_step                                                                  */
/* ------------------------------------------------------------------------ */

#define TOKENS 16

typedef enum layout { DP2, DP2_CP2, CP2_TP2 } layout;

static int32_t ranks_of(layout l) { return l == DP2 ? 2 : 4; }

typedef struct step_run {
    run_head h;
    dcp_inproc_world *world, *lane[2], *tp[2];
    int64_t tokens[MAX_RANKS][4 * TOKENS];
    int32_t count[MAX_RANKS], microbatches[MAX_RANKS];
} step_run;

static dcp_config step_config(layout l)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = l == CP2_TP2 ? 1 : 2;
    c.context_parallel_size = l == DP2 ? 1 : 2;
    c.tensor_parallel_size = l == CP2_TP2 ? 2 : 1;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 64;
    c.max_tokens_per_rank = 64;
    return c;
}

static void step_rank(int32_t rank, void *arg)
{
    step_run *t = arg;
    const layout l = (layout)t->h.param;
    t->h.status[rank] = DCP_ERR_ALLOC;
    dcp_config c = step_config(l);
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    const int32_t victim = t->h.w->victim;
    lying_comm world, lane, tp;
    lying_init(&world, t->h.w, t->world, rank, 0, rank, 1);
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world.comm;
    int32_t dp_rank = 0;
    if (l == CP2_TP2) {
        /* world rank = cp * 2 + tp; TP rank 0 of each CP slot holds the data */
        const int32_t cp = rank / 2, tpr = rank % 2;
        lying_init(&tp, t->h.w, t->tp[cp], tpr, 1 + cp, rank, victim / 2 == cp);
        args.tensor_parallel = &tp.comm;
        if (tpr == 0) {
            lying_init(&lane, t->h.w, t->lane[0], cp, 3, rank, victim % 2 == 0);
            args.data_context_parallel = &lane.comm;
        }
    } else {
        args.data_context_parallel = &world.comm; /* the world is the DPxCP group */
        dp_rank = l == DP2 ? rank : rank / 2;
    }
    int64_t tokens[TOKENS], labels[TOKENS], positions[TOKENS];
    float mask[TOKENS];
    for (int i = 0; i < TOKENS; i++) {
        tokens[i] = 1000 * (dp_rank + 1) + i;
        labels[i] = tokens[i] + 1;
        positions[i] = i;
        mask[i] = 1.0f;
    }
    dcp_sample s = {tokens, labels, mask, positions, TOKENS, NULL, 0, TOKENS, TOKENS};
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    const dcp_step_output *out = NULL;
    t->h.status[rank] = dcp_step(ctx, &args, args.data_context_parallel ? &in : NULL, &out);
    if (t->h.status[rank] == DCP_OK) {
        t->microbatches[rank] = out->num_microbatches;
        for (int32_t m = 0; m < out->num_microbatches; m++)
            for (int64_t i = 0; i < out->microbatches[m].num_tokens && t->count[rank] < 4 * TOKENS; i++)
                t->tokens[rank][t->count[rank]++] = out->microbatches[m].tokens[i];
    }
    dcp_context_destroy(ctx);
}

static int step_once(void *run, int32_t param, lie_world *w)
{
    step_run *t = run;
    const layout l = (layout)param;
    memset(t, 0, sizeof *t);
    t->h = (run_head){param, ranks_of(l), w, {0}};
    int ok = dcp_inproc_world_create(t->h.n, 2000, &t->world) == DCP_OK;
    if (l == CP2_TP2) {
        ok = ok && dcp_inproc_world_create(2, 2000, &t->lane[0]) == DCP_OK;
        ok = ok && dcp_inproc_world_create(2, 2000, &t->tp[0]) == DCP_OK;
        ok = ok && dcp_inproc_world_create(2, 2000, &t->tp[1]) == DCP_OK;
    }
    ok = ok && dcp_inproc_run(t->h.n, step_rank, t) == DCP_OK;
    dcp_inproc_world_destroy(t->world);
    dcp_inproc_world_destroy(t->lane[0]);
    dcp_inproc_world_destroy(t->tp[0]);
    dcp_inproc_world_destroy(t->tp[1]);
    return ok;
}

static int step_same(const void *run, const void *oracle, int32_t r)
{
    const step_run *t = run, *o = oracle;
    return t->count[r] == o->count[r] && t->microbatches[r] == o->microbatches[r] &&
           !memcmp(t->tokens[r], o->tokens[r], sizeof(int64_t) * (size_t)t->count[r]);
}

DCP_TEST(a_gone_peer_behind_a_lying_communicator_never_passes_a_step)
{
    static step_run run, oracle;
    const drill d = {"dcp_step, layout (0: DP 2, 1: DP 2 x CP 2, 2: CP 2 x TP 2 with a broadcast)", step_once, step_same, &run, &oracle};
    int failures = 0;
    for (int32_t l = DP2; l <= CP2_TP2; l++) failures += run_drill(&d, l);
    DCP_CHECK(failures > 100); /* the drill reaches failures, not only steps the victim finished */
}

/* ------------------------------------------------------------------------ */
/* dcp_gather                                                                */
/* ------------------------------------------------------------------------ */

typedef struct gather_run {
    run_head h;
    dcp_inproc_world *world;
    int32_t lengths[MAX_RANKS][16], num[MAX_RANKS];
} gather_run;

static void gather_rank(int32_t rank, void *arg)
{
    gather_run *t = arg;
    t->h.status[rank] = DCP_ERR_ALLOC;
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = t->h.n;
    c.max_sequences = 16;
    c.max_seqlen_per_rank = 64;
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    lying_comm comm;
    lying_init(&comm, t->h.w, t->world, rank, 0, rank, 1);
    const int32_t local[3] = {10 + rank, 20 + rank, 30 + rank};
    const int32_t *global = NULL, *offsets = NULL;
    int32_t num = 0;
    t->h.status[rank] = dcp_gather(ctx, &comm.comm, 7, local, 3, &global, &num, &offsets);
    if (t->h.status[rank] == DCP_OK && num <= 16) {
        t->num[rank] = num;
        memcpy(t->lengths[rank], global, sizeof(int32_t) * (size_t)num);
    }
    dcp_context_destroy(ctx);
}

static int gather_once(void *run, int32_t n, lie_world *w)
{
    gather_run *t = run;
    memset(t, 0, sizeof *t);
    t->h = (run_head){n, n, w, {0}};
    int ok = dcp_inproc_world_create(n, 2000, &t->world) == DCP_OK;
    ok = ok && dcp_inproc_run(n, gather_rank, t) == DCP_OK;
    dcp_inproc_world_destroy(t->world);
    return ok;
}

static int gather_same(const void *run, const void *oracle, int32_t r)
{
    const gather_run *t = run, *o = oracle;
    return t->num[r] == o->num[r] && !memcmp(t->lengths[r], o->lengths[r], sizeof(int32_t) * (size_t)t->num[r]);
}

DCP_TEST(a_gone_peer_behind_a_lying_communicator_never_passes_a_gather)
{
    static gather_run run, oracle;
    const drill d = {"dcp_gather, DP ranks", gather_once, gather_same, &run, &oracle};
    int failures = run_drill(&d, 2) + run_drill(&d, 4);
    DCP_CHECK_EQ_INT(oracle.num[0], 12); /* the last oracle: 4 ranks x 3 lengths */
    DCP_CHECK(failures > 0);
}

/* ------------------------------------------------------------------------ */
/* dcp_mtp_roll                                                              */
/* ------------------------------------------------------------------------ */

typedef struct roll_run {
    run_head h;
    dcp_inproc_world *world;
    int64_t out[MAX_RANKS][8];
} roll_run;

static void roll_rank(int32_t rank, void *arg)
{
    roll_run *t = arg;
    lying_comm comm;
    lying_init(&comm, t->h.w, t->world, rank, 0, rank, 1);
    /* groups of 2 ranks: two sequences of 8 and 8 slots over CP 2, 8 slots a rank */
    const int32_t cu[3] = {0, 8, 16};
    int64_t field[8];
    for (int i = 0; i < 8; i++) field[i] = 100 * (rank + 1) + i;
    const void *fields[1] = {field};
    void *outs[1] = {t->out[rank]};
    const size_t sizes[1] = {8};
    unsigned char exchange[4096];
    t->h.status[rank] = DCP_ERR_CAPACITY;
    if (dcp_mtp_roll_exchange_bytes(3, sizes, 1, comm.comm.size) > sizeof exchange) return;
    t->h.status[rank] = dcp_mtp_roll(&comm.comm, 11, rank - rank % 2, 2, DCP_CP_ZIGZAG, cu, 3, 8, fields, outs, sizes,
                                     1, exchange);
}

static int roll_once(void *run, int32_t n, lie_world *w)
{
    roll_run *t = run;
    memset(t, 0, sizeof *t);
    t->h = (run_head){n, n, w, {0}};
    int ok = dcp_inproc_world_create(n, 2000, &t->world) == DCP_OK;
    ok = ok && dcp_inproc_run(n, roll_rank, t) == DCP_OK;
    dcp_inproc_world_destroy(t->world);
    return ok;
}

static int roll_same(const void *run, const void *oracle, int32_t r)
{
    const roll_run *t = run, *o = oracle;
    return !memcmp(t->out[r], o->out[r], sizeof t->out[r]);
}

DCP_TEST(a_gone_peer_behind_a_lying_communicator_never_passes_an_mtp_roll)
{
    static roll_run run, oracle;
    const drill d = {"dcp_mtp_roll, ranks", roll_once, roll_same, &run, &oracle};
    int failures = run_drill(&d, 2) + run_drill(&d, 4);
    DCP_CHECK(failures > 0);
}

/* ------------------------------------------------------------------------ */
/* The agreement functions on their own                                      */
/* ------------------------------------------------------------------------ */

/* A one-rank communicator whose agree() reports what the test sets, and whose all-gather writes what it sets. */
typedef struct scripted {
    dcp_comm comm;
    dcp_status agreed;
    int32_t failed;
    const void *allgather_result; /* NULL: writes nothing */
    size_t allgather_bytes;
} scripted;

static dcp_status s_allgather(dcp_comm *comm, const void *send, size_t bytes, void *recv)
{
    scripted *s = (scripted *)comm;
    (void)send;
    size_t total = bytes * (size_t)comm->size;
    if (s->allgather_result) memcpy(recv, s->allgather_result, total < s->allgather_bytes ? total : s->allgather_bytes);
    return DCP_OK;
}

static dcp_status s_agree(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank)
{
    scripted *s = (scripted *)comm;
    (void)local;
    *agreed = s->agreed;
    *failed_rank = s->failed;
    return DCP_OK;
}

static dcp_status s_unused(void) { return DCP_ERR_UNSUPPORTED; }

static const char *s_describe(dcp_comm *comm)
{
    (void)comm;
    return "";
}

static const dcp_comm_ops scripted_ops = {
    DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), s_allgather, (void *)s_unused, (void *)s_unused, (void *)s_unused,
    s_agree, s_describe,
};

DCP_TEST(an_agreement_is_never_ok_where_this_rank_failed)
{
    scripted s;
    memset(&s, 0, sizeof s);
    s.comm.ops = &scripted_ops;
    s.comm.size = 2;
    dcp__error err;
    /* the backend claims every rank OK while this rank failed: not believed */
    s.agreed = DCP_OK;
    s.failed = -1;
    dcp__fail(&err, DCP_ERR_BAD_LENGTH, "length 3 is -1");
    DCP_CHECK_STATUS(dcp__agree(&s.comm, DCP_ERR_BAD_LENGTH, &err, "step", "rank"), DCP_ERR_COMM);
    DCP_CHECK_CONTAINS(err.message, "length 3 is -1");
    /* a value that is no status, or a failure naming no rank of the group */
    s.agreed = (dcp_status)12345;
    DCP_CHECK_STATUS(dcp__agree(&s.comm, DCP_OK, &err, "step", "rank"), DCP_ERR_COMM);
    s.agreed = DCP_ERR_CAPACITY;
    s.failed = 7;
    DCP_CHECK_STATUS(dcp__agree(&s.comm, DCP_OK, &err, "step", "rank"), DCP_ERR_COMM);
    /* a believable outcome passes */
    s.failed = 1;
    DCP_CHECK_STATUS(dcp__agree(&s.comm, DCP_OK, &err, "step", "rank"), DCP_ERR_CAPACITY);
    s.agreed = DCP_OK;
    s.failed = -1;
    DCP_CHECK_STATUS(dcp__agree(&s.comm, DCP_OK, &err, "step", "rank"), DCP_OK);
}

DCP_TEST(call_records_that_do_not_check_out_fail_the_agreement)
{
    scripted s;
    memset(&s, 0, sizeof s);
    s.comm.ops = &scripted_ops;
    s.comm.size = 2;
    s.comm.rank = 0;
    dcp__call_tag mine, peer, got[2], tags[2];
    dcp__error err;
    dcp__call_tag_init(&mine, DCP_CALL_STEP, 4, 9, 77);
    peer = mine;
    peer.rank = 1;
    dcp__call_tag_seal(&peer);
    /* what an honest backend returns: both records */
    mine.rank = 0;
    dcp__call_tag_seal(&mine);
    got[0] = mine;
    got[1] = peer;
    s.allgather_result = got;
    s.allgather_bytes = sizeof got;
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_OK);
    /* nothing written, zeros, a flipped bit, another rank's record in a slot, another phase's record */
    s.allgather_result = NULL;
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    DCP_CHECK_CONTAINS(err.message, "cannot be trusted");
    dcp__call_tag bad[2];
    memcpy(bad, got, sizeof bad);
    memset(&bad[1], 0, sizeof bad[1]);
    s.allgather_result = bad;
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    memcpy(bad, got, sizeof bad);
    bad[1].count ^= 1;
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    bad[1] = got[0];
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    memcpy(bad, got, sizeof bad);
    bad[1].phase = 1;
    dcp__call_tag_seal(&bad[1]);
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    /* this rank's own record altered on the way (its status read as OK although it had failed) */
    dcp__call_tag failed_mine = mine;
    failed_mine.status = DCP_ERR_BAD_LENGTH;
    memcpy(bad, got, sizeof bad); /* slot 0 holds the OK record */
    s.allgather_result = bad;
    dcp__fail(&err, DCP_ERR_BAD_LENGTH, "own failure");
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &failed_mine, tags, &err, "step", "rank"), DCP_ERR_COMM);
    /* honest records of a failed rank: its own status */
    failed_mine.rank = 0;
    dcp__call_tag_seal(&failed_mine);
    bad[0] = failed_mine;
    dcp__fail(&err, DCP_ERR_BAD_LENGTH, "own failure");
    DCP_CHECK_STATUS(dcp__agree_call(&s.comm, &failed_mine, tags, &err, "step", "rank"), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(err.message, "own failure");
}
