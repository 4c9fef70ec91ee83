/*
 * test_mtp_roll.c - the MTP packed-sequence roll on host memory: the
 * reference's documented example, then generated microbatches over CP groups
 * of 1 to 8 ranks (empty sequences, tails, several groups sharing one
 * communicator) against an oracle that rolls the whole unsliced sequence and
 * then cuts each rank's zigzag slice.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcp_test.h"
#include "dcpack.h"
#include "../core/model/mtp_roll.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

DCP_TEST(reference_example_without_cp)
{
    /* two sequences [1,2,3] and [4,5] -> [2,3,0] and [5,0]; two tail slots roll on their own */
    const int64_t in[] = {1, 2, 3, 4, 5, 6, 7};
    const float mask_in[] = {1, 1, 1, 1, 1, 1, 1};
    int64_t out[7];
    float mask_out[7];
    const int32_t cu[] = {0, 3, 5};
    const void *fields[] = {in, mask_in};
    void *outs[] = {out, mask_out};
    const size_t sizes[] = {8, 4};
    DCP_REQUIRE_OK(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, cu, 3, 7, fields, outs, sizes, 2, NULL));
    const int64_t want[] = {2, 3, 0, 5, 0, 7, 0};
    const float want_mask[] = {1, 1, 0, 1, 0, 1, 0};
    for (int i = 0; i < 7; i++) {
        DCP_CHECK_EQ_INT(out[i], want[i]);
        DCP_CHECK(mask_out[i] == want_mask[i]);
    }
}

DCP_TEST(bad_arguments)
{
    int64_t in[8] = {0}, out[8];
    const void *fields[] = {in};
    void *outs[] = {out};
    size_t size8[] = {8}, size3[] = {3};
    const int32_t cu[] = {0, 4, 8}, down[] = {0, 6, 4}, not_zero[] = {2, 8}, odd[] = {0, 6};
    char exchange[1024];
    dcp_inproc_world *g = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, 60000, &g));
    dcp_comm comm;
    DCP_CHECK_STATUS(dcp_inproc_comm(g, 0, &comm), DCP_OK);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, NULL, 3, 8, fields, outs, size8, 1, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 2, DCP_CP_ZIGZAG, cu, 3, 4, fields, outs, size8, 1, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 3, DCP_CP_ZIGZAG, cu, 3, 8, fields, outs, size8, 1, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, cu, 3, 8, fields, outs, size3, 1, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, cu, 3, 8, fields, outs, size8, 0, NULL), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, down, 3, 8, fields, outs, size8, 1, NULL), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, not_zero, 2, 8, fields, outs, size8, 1, NULL), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 1, DCP_CP_ZIGZAG, cu, 3, 7, fields, outs, size8, 1, NULL), DCP_ERR_CORRUPT_INPUT);
    /* a 2-rank group needs spans divisible by 4, and must hold the communicator's rank */
    DCP_CHECK_STATUS(dcp_mtp_roll(&comm, 0, 0, 2, DCP_CP_ZIGZAG, odd, 2, 3, fields, outs, size8, 1, exchange), DCP_ERR_INVALID_ARGUMENT);
    dcp_inproc_world_destroy(g);
}

/* ---- generated cases ---------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define NUM_FIELDS 4
static const size_t sizes[NUM_FIELDS] = {8, 4, 2, 1};

/* One CP group's microbatch: global packed fields, each rank's slice and tail. */
typedef struct group_case {
    int32_t first, cp, n;
    int32_t *cu;            /* [n + 1] global */
    int64_t local, tail;    /* slice tokens per rank, tail slots per rank */
    unsigned char *global[NUM_FIELDS]; /* [cu[n]] */
    unsigned char *input[8][NUM_FIELDS], *want[8][NUM_FIELDS], *got[8][NUM_FIELDS]; /* per rank [local + tail] */
} group_case;

/* Global position of rank r's local slot j (j < local). */
static int64_t global_of(const group_case *gc, int32_t r, int64_t j)
{
    if (gc->cp == 1) return j;
    int32_t k = 0;
    while (k + 1 < gc->n && gc->cu[k + 1] / gc->cp <= j) k++;
    int64_t start = gc->cu[k], chunk = (gc->cu[k + 1] - start) / (2 * gc->cp), off = j - start / gc->cp;
    return off < chunk ? start + r * chunk + off : start + (2 * gc->cp - 1 - r) * chunk + off - chunk;
}

static void group_case_build(group_case *gc, int32_t first, int32_t cp)
{
    memset(gc, 0, sizeof *gc);
    gc->first = first;
    gc->cp = cp;
    gc->n = 1 + (int32_t)(rnd() % 12);
    gc->cu = calloc((size_t)gc->n + 1, sizeof *gc->cu);
    for (int32_t k = 0; k < gc->n; k++) {
        int32_t units = rnd() % 5 == 0 ? 0 : 1 + (int32_t)(rnd() % 6); /* every fifth sequence empty */
        gc->cu[k + 1] = gc->cu[k] + units * 2 * cp;
    }
    int64_t total = gc->cu[gc->n];
    gc->local = total / cp;
    gc->tail = rnd() % 3 == 0 ? 0 : (int64_t)(rnd() % 9);
    for (int f = 0; f < NUM_FIELDS; f++) {
        gc->global[f] = malloc((size_t)total * sizes[f] + 1);
        for (int64_t b = 0; b < total * (int64_t)sizes[f]; b++) gc->global[f][b] = (unsigned char)(1 + rnd() % 255);
    }
    for (int32_t r = 0; r < cp; r++)
        for (int f = 0; f < NUM_FIELDS; f++) {
            size_t e = sizes[f], bytes = (size_t)(gc->local + gc->tail) * e + 1;
            gc->input[r][f] = malloc(bytes);
            gc->want[r][f] = malloc(bytes);
            gc->got[r][f] = malloc(bytes);
            memset(gc->got[r][f], 0xEE, bytes);
            for (int64_t j = 0; j < gc->local; j++) {
                int64_t p = global_of(gc, r, j);
                memcpy(gc->input[r][f] + j * e, gc->global[f] + p * e, e);
                /* the oracle: the next position of the same sequence, or 0 at its end */
                int32_t k = 0;
                while (gc->cu[k + 1] <= p) k++;
                if (p + 1 < gc->cu[k + 1]) memcpy(gc->want[r][f] + j * e, gc->global[f] + (p + 1) * e, e);
                else memset(gc->want[r][f] + j * e, 0, e);
            }
            for (int64_t j = gc->local; j < gc->local + gc->tail; j++)
                for (size_t b = 0; b < e; b++) gc->input[r][f][j * e + b] = (unsigned char)(1 + rnd() % 255);
            for (int64_t j = gc->local; j < gc->local + gc->tail; j++) {
                if (j + 1 < gc->local + gc->tail) memcpy(gc->want[r][f] + j * e, gc->input[r][f] + (j + 1) * e, e);
                else memset(gc->want[r][f] + j * e, 0, e);
            }
        }
}

static void group_case_free(group_case *gc)
{
    free(gc->cu);
    for (int f = 0; f < NUM_FIELDS; f++) free(gc->global[f]);
    for (int32_t r = 0; r < gc->cp; r++)
        for (int f = 0; f < NUM_FIELDS; f++) free(gc->input[r][f]), free(gc->want[r][f]), free(gc->got[r][f]);
}

typedef struct rank_job {
    dcp_inproc_world *g;
    group_case *gc;
    int32_t rank;
    dcp_status status;
} rank_job;

static void *rank_run(void *p)
{
    rank_job *job = (rank_job *)p;
    group_case *gc = job->gc;
    int32_t r = job->rank - gc->first;
    dcp_comm comm;
    DCP_CHECK_STATUS(dcp_inproc_comm(job->g, job->rank, &comm), DCP_OK);
    const void *fields[NUM_FIELDS];
    void *outs[NUM_FIELDS];
    for (int f = 0; f < NUM_FIELDS; f++) fields[f] = gc->input[r][f], outs[f] = gc->got[r][f];
    size_t bytes = dcp_mtp_roll_exchange_bytes(gc->n + 1, sizes, NUM_FIELDS, comm.size);
    void *exchange = malloc(bytes);
    job->status = dcp_mtp_roll(&comm, 0, gc->first, gc->cp, DCP_CP_ZIGZAG, gc->cu, gc->n + 1, gc->local + gc->tail, fields, outs, sizes,
                               NUM_FIELDS, exchange);
    free(exchange);
    return NULL;
}

/* Groups laid over one communicator of `ranks` ranks, as dcp plans them: sizes[i] ranks each, consecutive. */
static void run_layout(const int32_t *group_sizes, int32_t groups)
{
    int32_t ranks = 0;
    for (int32_t i = 0; i < groups; i++) ranks += group_sizes[i];
    dcp_inproc_world *g = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(ranks, 60000, &g));
    group_case *cases = calloc((size_t)groups, sizeof *cases);
    rank_job *jobs = calloc((size_t)ranks, sizeof *jobs);
    pthread_t *threads = calloc((size_t)ranks, sizeof *threads);
    int32_t at = 0;
    for (int32_t i = 0; i < groups; i++) {
        group_case_build(&cases[i], at, group_sizes[i]);
        for (int32_t r = 0; r < group_sizes[i]; r++) jobs[at + r] = (rank_job){g, &cases[i], at + r, DCP_ERR_COMM};
        at += group_sizes[i];
    }
    for (int32_t q = 0; q < ranks; q++) pthread_create(&threads[q], NULL, rank_run, &jobs[q]);
    for (int32_t q = 0; q < ranks; q++) pthread_join(threads[q], NULL);
    for (int32_t q = 0; q < ranks; q++) {
        DCP_CHECK_STATUS(jobs[q].status, DCP_OK);
        group_case *gc = jobs[q].gc;
        int32_t r = q - gc->first;
        for (int f = 0; f < NUM_FIELDS; f++) {
            size_t bytes = (size_t)(gc->local + gc->tail) * sizes[f];
            if (memcmp(gc->got[r][f], gc->want[r][f], bytes) != 0)
                dcp_test_fail(__FILE__, __LINE__, "rank %d of a %d-rank group, field %d (%zu-byte): roll differs", r,
                              gc->cp, f, sizes[f]);
        }
    }
    for (int32_t i = 0; i < groups; i++) group_case_free(&cases[i]);
    free(cases), free(jobs), free(threads);
    dcp_inproc_world_destroy(g);
}

DCP_TEST(generated_groups_of_one_to_eight_ranks)
{
    for (int round = 0; round < 40; round++) {
        const int32_t one[] = {1}, two[] = {2}, four[] = {4}, eight[] = {8};
        run_layout(one, 1);
        run_layout(two, 1);
        run_layout(four, 1);
        run_layout(eight, 1);
    }
}

DCP_TEST(several_groups_share_one_communicator)
{
    /* a dynamic-CP microbatch over 8 DPxCP ranks: groups of 4, 2, 1 and 1 */
    for (int round = 0; round < 40; round++) {
        const int32_t layout[] = {4, 2, 1, 1}, other[] = {1, 1, 2, 4};
        run_layout(layout, 4);
        run_layout(other, 4);
    }
}

/* ---- the contiguous layout ---------------------------------------------- */

/*
 * A microbatch cut with DCP_CP_CONTIGUOUS: rank r holds global slots [r * width, (r+1) * width).  Sequences
 * of any length (no divisibility), the last boundary anywhere up to cp * width (the rest is the tail, rolled
 * as one sequence).  The oracle rolls the whole packed microbatch, then cuts each rank's slice.
 */
typedef struct contiguous_case {
    int32_t cp, n;
    int32_t cu[16];
    int64_t width;
    int64_t in[8][64], want[8][64], got[8][64];
    dcp_status status[8];
    dcp_inproc_world *world;
} contiguous_case;

static void contiguous_rank(int32_t rank, void *arg)
{
    contiguous_case *c = arg;
    dcp_comm comm;
    dcp_inproc_comm(c->world, rank, &comm);
    const void *fields[1] = {c->in[rank]};
    void *outs[1] = {c->got[rank]};
    const size_t size8[1] = {8};
    unsigned char exchange[2048];
    c->status[rank] = DCP_ERR_CAPACITY;
    if (dcp_mtp_roll_exchange_bytes(c->n + 1, size8, 1, comm.size) > sizeof exchange) return;
    c->status[rank] = dcp_mtp_roll(&comm, 5, 0, c->cp, DCP_CP_CONTIGUOUS, c->cu, c->n + 1, c->width, fields, outs,
                                   size8, 1, exchange);
}

DCP_TEST(contiguous_layout_matches_the_unsliced_roll)
{
    static contiguous_case c;
    for (int round = 0; round < 200; round++) {
        memset(&c, 0, sizeof c);
        c.cp = 1 << (rnd() % 4);
        c.width = 1 + (int64_t)(rnd() % 8);
        const int64_t total = c.cp * c.width;
        c.n = (int32_t)(rnd() % 6);
        for (int32_t k = 0; k < c.n; k++) c.cu[k + 1] = c.cu[k] + (int32_t)(rnd() % 5); /* empty ones too */
        if (c.cu[c.n] > total) { /* keep the last boundary inside the microbatch */
            for (int32_t k = 1; k <= c.n; k++) c.cu[k] = (int32_t)(c.cu[k] * total / c.cu[c.n]);
        }
        int64_t global[64], rolled[64];
        for (int64_t g = 0; g < total; g++) global[g] = 1000 + round * 64 + g;
        for (int64_t g = 0; g < total; g++) {
            int64_t end = total; /* the tail, unless g is in a sequence */
            for (int32_t k = 0; k < c.n; k++)
                if (g >= c.cu[k] && g < c.cu[k + 1]) end = c.cu[k + 1];
            rolled[g] = g + 1 < end ? global[g + 1] : 0;
        }
        for (int32_t r = 0; r < c.cp; r++)
            for (int64_t j = 0; j < c.width; j++) {
                c.in[r][j] = global[r * c.width + j];
                c.want[r][j] = rolled[r * c.width + j];
                c.got[r][j] = -1;
            }
        DCP_REQUIRE_OK(dcp_inproc_world_create(c.cp, 30000, &c.world));
        DCP_REQUIRE_OK(dcp_inproc_run(c.cp, contiguous_rank, &c));
        dcp_inproc_world_destroy(c.world);
        for (int32_t r = 0; r < c.cp; r++) {
            DCP_CHECK_STATUS(c.status[r], DCP_OK);
            for (int64_t j = 0; j < c.width; j++)
                if (c.got[r][j] != c.want[r][j]) {
                    dcp_test_fail(__FILE__, __LINE__, "round %d, cp %d, rank %d slot %lld: %lld, want %lld", round,
                                  c.cp, r, (long long)j, (long long)c.got[r][j], (long long)c.want[r][j]);
                    return;
                }
        }
    }
}

DCP_TEST(contiguous_spans_need_no_divisibility_but_zigzag_ones_do)
{
    /* one 6-token sequence over CP 2: contiguous rolls it (3 slots a rank), zigzag refuses 6 % 4 != 0 */
    static contiguous_case c;
    memset(&c, 0, sizeof c);
    c.cp = 2;
    c.width = 3;
    c.n = 1;
    c.cu[1] = 6;
    for (int32_t r = 0; r < 2; r++)
        for (int j = 0; j < 3; j++) c.in[r][j] = 10 + 3 * r + j;
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &c.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, contiguous_rank, &c));
    dcp_inproc_world_destroy(c.world);
    const int64_t want[2][3] = {{11, 12, 13}, {14, 15, 0}}; /* rank 0's last slot is rank 1's first token */
    for (int32_t r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(c.status[r], DCP_OK);
        for (int j = 0; j < 3; j++) DCP_CHECK_EQ_INT(c.got[r][j], want[r][j]);
    }
    const void *fields[1] = {c.in[0]};
    void *outs[1] = {c.got[0]};
    const size_t size8[1] = {8};
    unsigned char exchange[2048];
    dcp_inproc_world *one = NULL;
    DCP_REQUIRE_OK(dcp_inproc_world_create(1, 30000, &one));
    dcp_comm comm;
    DCP_REQUIRE_OK(dcp_inproc_comm(one, 0, &comm));
    DCP_CHECK_STATUS(dcp_mtp_roll(NULL, 0, 0, 2, (dcp_cp_partition)7, c.cu, 2, 3, fields, outs, size8, 1, exchange),
                     DCP_ERR_INVALID_ARGUMENT);
    dcp_inproc_world_destroy(one);
}

/* ---- the contiguous layout, on what dcp_step hands out ---- */

typedef struct step_roll {
    dcp_inproc_world *world;
    dcp_status status[2];
    int checked[2];
} step_roll;

/* Sequence k holds tokens 1000 (k + 1) + i; its roll at token i is the next token of k, or 0 at k's end. */
static const int32_t step_roll_lengths[3] = {5, 9, 4};

static void step_roll_rank(int32_t rank, void *arg)
{
    step_roll *t = arg;
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.context_parallel_size = 2;
    c.cp_partition = DCP_CP_CONTIGUOUS;
    c.pad_alignment = 4;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 64;
    c.max_tokens_per_rank = 64;
    dcp_context *ctx = NULL;
    t->status[rank] = DCP_ERR_ALLOC;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return;
    dcp_comm comm;
    dcp_inproc_comm(t->world, rank, &comm);
    int64_t tokens[3][16], labels[3][16], positions[3][16];
    float mask[3][16];
    dcp_sample samples[3];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < step_roll_lengths[k]; i++) {
            tokens[k][i] = 1000 * (k + 1) + i;
            labels[k][i] = positions[k][i] = i;
            mask[k][i] = 1.0f;
        }
        samples[k] = (dcp_sample){tokens[k], labels[k], mask[k], positions[k], step_roll_lengths[k], NULL, 0,
                                  step_roll_lengths[k], step_roll_lengths[k]};
    }
    dcp_step_input in = {samples, 3, DCP_FIELD_ALL};
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &comm;
    args.data_context_parallel = &comm;
    const dcp_step_output *out = NULL;
    t->status[rank] = dcp_step(ctx, &args, &in, &out);
    for (int32_t m = 0; t->status[rank] == DCP_OK && m < out->num_microbatches; m++) {
        const dcp_microbatch *mb = &out->microbatches[m];
        int64_t rolled[64];
        const void *fields[1] = {mb->tokens};
        void *outs[1] = {rolled};
        const size_t size8[1] = {8};
        unsigned char exchange[4096];
        if (mb->num_tokens > 64 || dcp_mtp_roll_exchange_bytes(mb->num_cu_seqlens, size8, 1, 2) > sizeof exchange) {
            t->status[rank] = DCP_ERR_CAPACITY;
            break;
        }
        t->status[rank] = dcp_mtp_roll(&comm, 1, rank - mb->cp_rank, mb->local_cp_size, DCP_CP_CONTIGUOUS,
                                       mb->cu_seqlens_padded_host, mb->num_cu_seqlens, mb->num_tokens, fields, outs,
                                       size8, 1, exchange);
        for (int64_t j = 0; t->status[rank] == DCP_OK && j < mb->num_tokens; j++) {
            if (mb->padding_mask[j]) continue;
            const int64_t v = mb->tokens[j], k = v / 1000 - 1, i = v % 1000;
            const int64_t want = i + 1 < step_roll_lengths[k] ? v + 1 : 0;
            if (rolled[j] != want) {
                dcp_test_fail(__FILE__, __LINE__, "rank %d microbatch %d slot %lld (token %lld): rolled %lld, want %lld",
                              rank, m, (long long)j, (long long)v, (long long)rolled[j], (long long)want);
                break;
            }
            t->checked[rank]++;
        }
    }
    dcp_context_destroy(ctx);
}

DCP_TEST(contiguous_roll_of_a_contiguous_step)
{
    step_roll t;
    memset(&t, 0, sizeof t);
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 30000, &t.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, step_roll_rank, &t));
    dcp_inproc_world_destroy(t.world);
    for (int r = 0; r < 2; r++) DCP_CHECK_STATUS(t.status[r], DCP_OK);
    DCP_CHECK_EQ_INT(t.checked[0] + t.checked[1], 5 + 9 + 4); /* every real token, once */
}
