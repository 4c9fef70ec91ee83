/*
 * bench_gpu.c - the data plane on GPUs.
 *
 *   bench_gpu [--trace FILE] [--gpus N] [--steps K] [--pack-tokens T] [--no-pack] [--no-step]
 *   bench_gpu --pack-only MEAN ALIGNED VARIANT [--pack-tokens T] [--reps R]   (one table, one build: for a profiler)
 *
 * 1. Pack kernel bandwidth: one launch of the segment-table kernel moving the
 *    four fields (28 bytes a token) of T tokens (default 16M: 470 MB, many
 *    times the L2) in pieces of a given mean length from 16 source buffers to
 *    shuffled places of one destination, against cudaMemcpyAsync
 *    device-to-device of the same number of bytes.  Pieces start at arbitrary
 *    element offsets (as CP slices do), or 16-byte aligned in one row.  Each
 *    row is one kernel build (gpu/kernels.h: variant 0 is the library's, 8200
 *    the former choice), its output checked against the former choice's byte
 *    for byte, and a flat 16-byte copy kernel of the same bytes shows the
 *    ceiling of a kernel of this kind.  Bytes count read + written; CUDA
 *    events, median of 30 after 5 warm-ups.
 * 2. Whole step: dcp_step for the trace's sequences (default 4096 of
 *    mlmdefault) on N GPUs (one thread each, NCCL), DP = N, dynamic CP; first
 *    verified against the oracle once, then K timed steps (default 30).
 *    Reported: median step time (slowest rank), and each phase's median over
 *    the steps after the first (the slowest rank's in each step): plan
 *    (gather + plan + geometry), stage (tables + gather kernel), exchange
 *    (the all-to-all-v), pack (landing kernel).  Beside it the yardstick:
 *    the host part + one device copy of the bytes the outputs hold + a bare
 *    NCCL exchange (grouped send/recv) of the bytes that travel, and the
 *    step's ratio to it.
 * 3. Reroute against the reference's volume: the same GPUs run ncclAllGather
 *    of what the reference's per-field DP all-gathers move for this step
 *    (each rank's send = the largest rank's tokens x bytes a token), once as
 *    one call and once as one call per field (the reference's way), timed
 *    like the exchange.
 * Without CUDA and NCCL, or without a GPU, it prints "skipped: no GPU".
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"
#include "step_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_HAVE_NCCL
#include "../core/thd/pack_cpu.h"
#include "../gpu/kernels.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#define CK(call)                                                                                           \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));          \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- 1. pack kernel bandwidth ------------------------------------------- */

/* Kernel builds part 1 measures (gpu/kernels.h): 0 is the library's, 8200 the former choice, 202 and 203 other builds of the persistent kernel. */
static const int64_t pack_variants[] = {0, 8200, 202, 203};
#define PACK_VARIANTS ((int)(sizeof pack_variants / sizeof pack_variants[0]))

/* Host copies of every field's destination, to check each build against the former choice's output. */
static unsigned char *host_copy(void *const *dst, const int64_t *elem, int fields, int64_t total)
{
    size_t bytes = 0;
    for (int f = 0; f < fields; f++) bytes += (size_t)total * (size_t)elem[f];
    unsigned char *h = malloc(bytes), *at = h;
    for (int f = 0; f < fields; f++) {
        CK(cudaMemcpy(at, dst[f], (size_t)total * (size_t)elem[f], cudaMemcpyDeviceToHost));
        at += (size_t)total * (size_t)elem[f];
    }
    return h;
}

/*
 * One table, every kernel build in `variants` (count of them): median of
 * `reps` after 5 warm-ups, each build's output checked against the former
 * choice's (variant 8200) byte for byte.
 */
static void bench_pack(int64_t tokens, int64_t mean_piece, int aligned, const int64_t *variants, int count, int reps)
{
    enum { SOURCES = 16, FIELDS = 4 };
    const int64_t elem[FIELDS] = {8, 8, 8, 4};
    /* pieces: lengths around mean_piece, sources round-robin, destination order shuffled */
    int64_t cap = tokens / (mean_piece / 2 > 0 ? mean_piece / 2 : 1) + 2, n = 0, left = tokens;
    int32_t *src_index = malloc((size_t)cap * 4), *dst_index = calloc((size_t)cap, 4);
    int64_t *src_offset = malloc((size_t)cap * 8), *dst_offset = malloc((size_t)cap * 8);
    int64_t *length = malloc((size_t)cap * 8), *work = malloc((size_t)(cap + 1) * 8);
    int64_t per_source = tokens / SOURCES + mean_piece * 2, source_at[SOURCES] = {0};
    while (left > 0 && n < cap) {
        int64_t len = mean_piece / 2 + (int64_t)(rnd() % (uint64_t)(mean_piece > 1 ? mean_piece : 1)) + 1;
        if (aligned) len = (len + 3) & ~(int64_t)3; /* 4 elements: 16 bytes of every field */
        if (len > left) len = left;
        int32_t s = (int32_t)(n % SOURCES);
        if (source_at[s] + len > per_source) source_at[s] = 0;
        src_index[n] = s;
        src_offset[n] = source_at[s];
        source_at[s] += len + (aligned ? 0 : (int64_t)(rnd() % 3)); /* misaligned starts, as CP slices are */
        length[n] = len;
        left -= len;
        n++;
    }
    /* destination: the pieces in a shuffled order, back to back */
    int64_t *order = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rnd() % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) dst_offset[order[i]] = at, at += length[order[i]];
    int64_t total = dcp__segment_work_offsets(length, n, work);

    void *dev[7];
    const size_t dev_bytes[6] = {(size_t)n * 4, (size_t)n * 4, (size_t)n * 8, (size_t)n * 8, (size_t)n * 8,
                                 (size_t)(n + 1) * 8};
    for (int i = 0; i < 6; i++) CK(cudaMalloc(&dev[i], dev_bytes[i]));
    CK(cudaMemcpy(dev[0], src_index, (size_t)n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev[1], dst_index, (size_t)n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev[2], src_offset, (size_t)n * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev[3], dst_offset, (size_t)n * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev[4], length, (size_t)n * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev[5], work, (size_t)(n + 1) * 8, cudaMemcpyHostToDevice));
    dcp__segment_table table = {n, dev[0], dev[2], dev[1], dev[3], dev[4], dev[5]};
    dcp__segment_field fields[FIELDS];
    void *sources[FIELDS][SOURCES], *dst[FIELDS];
    size_t bytes = 0;
    for (int f = 0; f < FIELDS; f++) {
        for (int s = 0; s < SOURCES; s++) {
            CK(cudaMalloc(&sources[f][s], (size_t)per_source * (size_t)elem[f]));
            CK(cudaMemset(sources[f][s], 0x11 * (f + 1), (size_t)per_source * (size_t)elem[f]));
        }
        CK(cudaMalloc(&dst[f], (size_t)total * (size_t)elem[f]));
        void *table_src, *table_dst;
        CK(cudaMalloc(&table_src, sizeof sources[f]));
        CK(cudaMemcpy(table_src, sources[f], sizeof sources[f], cudaMemcpyHostToDevice));
        CK(cudaMalloc(&table_dst, sizeof(void *)));
        CK(cudaMemcpy(table_dst, &dst[f], sizeof(void *), cudaMemcpyHostToDevice));
        fields[f].src = table_src;
        fields[f].dst = table_dst;
        fields[f].elem_size = elem[f];
        bytes += (size_t)total * (size_t)elem[f];
    }
    void *copy_src, *copy_dst;
    CK(cudaMalloc(&copy_src, bytes));
    CK(cudaMalloc(&copy_dst, bytes));
    CK(cudaMemset(copy_src, 0x5A, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    enum { WARM = 5, MAX_REPS = 64 };
    if (reps > MAX_REPS) reps = MAX_REPS;
    if (reps < 1) reps = 1;
    /* the former choice's output: what every build must write */
    unsigned char *want = NULL;
    if (count > 1) {
        if (dcp__segment_table_pack_tile_cuda(&table, total, fields, FIELDS, 8200, NULL) != 0) exit(1);
        CK(cudaDeviceSynchronize());
        want = host_copy(dst, elem, FIELDS, total);
    }
    for (int k = 0; k < count; k++) {
        float pack_ms[MAX_REPS], copy_ms[MAX_REPS];
        for (int f = 0; f < FIELDS; f++) CK(cudaMemset(dst[f], 0xA5, (size_t)total * (size_t)elem[f]));
        for (int i = 0; i < WARM + reps; i++) {
            CK(cudaEventRecord(e0, 0));
            if (dcp__segment_table_pack_tile_cuda(&table, total, fields, FIELDS, variants[k], NULL) != 0) exit(1);
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            if (i >= WARM) CK(cudaEventElapsedTime(&pack_ms[i - WARM], e0, e1));
            CK(cudaEventRecord(e0, 0));
            CK(cudaMemcpyAsync(copy_dst, copy_src, bytes, cudaMemcpyDeviceToDevice, 0));
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            if (i >= WARM) CK(cudaEventElapsedTime(&copy_ms[i - WARM], e0, e1));
        }
        const char *check = "";
        if (want) {
            unsigned char *got = host_copy(dst, elem, FIELDS, total);
            check = memcmp(got, want, bytes) == 0 ? " | output = former's" : " | OUTPUT DIFFERS";
            free(got);
        }
        qsort(pack_ms, (size_t)reps, sizeof(float), cmp_float);
        qsort(copy_ms, (size_t)reps, sizeof(float), cmp_float);
        double p = pack_ms[reps / 2] * 1e-3, c = copy_ms[reps / 2] * 1e-3;
        printf("pack  | %10lld tokens | %8lld pieces (mean %5lld%s) | variant %4lld | %7.1f MB | kernel %8.3f ms %7.0f GB/s | "
               "memcpy %8.3f ms %7.0f GB/s | kernel/memcpy %5.1f%%%s\n",
               (long long)total, (long long)n, (long long)(total / (n ? n : 1)), aligned ? ", 16B-aligned" : "",
               (long long)variants[k], bytes / 1e6,
               p * 1e3, 2.0 * bytes / p / 1e9, c * 1e3, 2.0 * bytes / c / 1e9, 100.0 * c / p, check);
    }
    free(want);
    if (mean_piece == 4096 && !aligned && count > 1) {
        /* the ceiling of a kernel of this shape: one flat 16-byte copy of the same bytes */
        enum { REPS = 30 };
        for (int v = 0; v < 4; v++) {
            float ms[REPS];
            for (int i = 0; i < WARM + REPS; i++) {
                CK(cudaEventRecord(e0, 0));
                if (dcp__flat_copy_probe_cuda(copy_dst, copy_src, bytes & ~(size_t)15, v, NULL) != 0) exit(1);
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                if (i >= WARM) CK(cudaEventElapsedTime(&ms[i - WARM], e0, e1));
            }
            qsort(ms, REPS, sizeof(float), cmp_float);
            printf("flat  | %7.1f MB | variant %d | kernel %8.3f ms %7.0f GB/s\n", bytes / 1e6, v, ms[REPS / 2],
                   2.0 * bytes / (ms[REPS / 2] * 1e-3) / 1e9);
        }
    }
    for (int f = 0; f < FIELDS; f++) {
        for (int s = 0; s < SOURCES; s++) cudaFree(sources[f][s]);
        cudaFree(dst[f]), cudaFree((void *)fields[f].src), cudaFree((void *)fields[f].dst);
    }
    for (int i = 0; i < 6; i++) cudaFree(dev[i]);
    cudaFree(copy_src), cudaFree(copy_dst);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    free(src_index), free(dst_index), free(src_offset), free(dst_offset), free(length), free(work), free(order);
}

/* ---- 3. the reference's all-gather volume -------------------------------- */

typedef struct gather_arg {
    ncclComm_t comm;
    int32_t rank, gpus, reps;
    size_t field_bytes[6]; /* per rank, per field */
    int32_t num_fields;
    float one_ms, per_field_ms;
} gather_arg;

static void *gather_rank(void *p)
{
    gather_arg *a = (gather_arg *)p;
    CK(cudaSetDevice(a->rank));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t total = 0;
    for (int f = 0; f < a->num_fields; f++) total += a->field_bytes[f];
    void *send, *recv;
    CK(cudaMalloc(&send, total + 256));
    CK(cudaMalloc(&recv, (total + 256) * (size_t)a->gpus));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *one = calloc((size_t)a->reps, sizeof(float)), *many = calloc((size_t)a->reps, sizeof(float));
    for (int i = 0; i < a->reps + 3; i++) {
        CK(cudaEventRecord(e0, s));
        ncclAllGather(send, recv, total, ncclUint8, a->comm, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&one[i - 3], e0, e1));
        CK(cudaEventRecord(e0, s));
        size_t at = 0;
        for (int f = 0; f < a->num_fields; f++) {
            ncclAllGather((char *)send + at, (char *)recv + at * (size_t)a->gpus, a->field_bytes[f], ncclUint8, a->comm, s);
            at += a->field_bytes[f];
        }
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&many[i - 3], e0, e1));
    }
    qsort(one, (size_t)a->reps, sizeof(float), cmp_float);
    qsort(many, (size_t)a->reps, sizeof(float), cmp_float);
    a->one_ms = one[a->reps / 2];
    a->per_field_ms = many[a->reps / 2];
    free(one), free(many);
    cudaFree(send), cudaFree(recv);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    return NULL;
}

static void bench_reference_gather(int32_t gpus, const size_t *field_bytes, int32_t num_fields, float *one,
                                   float *per_field)
{
    ncclComm_t comms[8];
    if (ncclCommInitAll(comms, gpus, NULL) != ncclSuccess) exit(1);
    pthread_t t[8];
    gather_arg a[8];
    for (int32_t r = 0; r < gpus; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].comm = comms[r], a[r].rank = r, a[r].gpus = gpus, a[r].reps = 20, a[r].num_fields = num_fields;
        memcpy(a[r].field_bytes, field_bytes, sizeof a[r].field_bytes);
        pthread_create(&t[r], NULL, gather_rank, &a[r]);
    }
    *one = 0, *per_field = 0;
    for (int32_t r = 0; r < gpus; r++) {
        pthread_join(t[r], NULL);
        if (a[r].one_ms > *one) *one = a[r].one_ms;
        if (a[r].per_field_ms > *per_field) *per_field = a[r].per_field_ms;
        cudaSetDevice(r);
        ncclCommDestroy(comms[r]);
    }
}

/* ---- 2b. the yardstick's parts: one copy of the bytes, a bare exchange ---- */

/* Median ms of one cudaMemcpyAsync device-to-device of `bytes` on GPU 0. */
static float copy_ms(size_t bytes)
{
    if (bytes == 0) return 0;
    CK(cudaSetDevice(0));
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 0x5A, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    enum { REPS = 21 };
    float ms[REPS];
    for (int i = 0; i < REPS + 3; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    qsort(ms, REPS, sizeof(float), cmp_float);
    cudaFree(a), cudaFree(b);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms[REPS / 2];
}

typedef struct exchange_arg {
    ncclComm_t comm;
    int32_t rank, gpus;
    size_t per_peer;
    float ms;
} exchange_arg;

/* Grouped ncclSend/ncclRecv of per_peer bytes to and from every other rank: what the step's exchange moves, bare. */
static void *exchange_rank(void *p)
{
    exchange_arg *a = (exchange_arg *)p;
    CK(cudaSetDevice(a->rank));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t total = a->per_peer * (size_t)a->gpus + 256;
    void *send, *recv;
    CK(cudaMalloc(&send, total));
    CK(cudaMalloc(&recv, total));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    enum { REPS = 21 };
    float ms[REPS];
    for (int i = 0; i < REPS + 3; i++) {
        CK(cudaEventRecord(e0, s));
        ncclGroupStart();
        for (int32_t q = 0; q < a->gpus; q++) {
            if (q == a->rank) continue;
            ncclSend((char *)send + a->per_peer * (size_t)q, a->per_peer, ncclUint8, q, a->comm, s);
            ncclRecv((char *)recv + a->per_peer * (size_t)q, a->per_peer, ncclUint8, q, a->comm, s);
        }
        ncclGroupEnd();
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    qsort(ms, REPS, sizeof(float), cmp_float);
    a->ms = ms[REPS / 2];
    cudaFree(send), cudaFree(recv);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    return NULL;
}

/* Median ms of the bare exchange on `gpus` GPUs (slowest rank); 0 on one GPU, where nothing travels. */
static float exchange_ms(int32_t gpus, size_t per_peer)
{
    if (gpus < 2 || per_peer == 0) return 0;
    ncclComm_t comms[8];
    if (ncclCommInitAll(comms, gpus, NULL) != ncclSuccess) exit(1);
    pthread_t t[8];
    exchange_arg a[8];
    for (int32_t r = 0; r < gpus; r++) {
        a[r] = (exchange_arg){comms[r], r, gpus, per_peer, 0};
        pthread_create(&t[r], NULL, exchange_rank, &a[r]);
    }
    float slowest = 0;
    for (int32_t r = 0; r < gpus; r++) {
        pthread_join(t[r], NULL);
        if (a[r].ms > slowest) slowest = a[r].ms;
        cudaSetDevice(r);
        ncclCommDestroy(comms[r]);
    }
    return slowest;
}

/* ---- 2. whole step -------------------------------------------------------- */

static void bench_step(const char *trace_path, int32_t gpus, int32_t steps)
{
    static int32_t lengths[1 << 16];
    int32_t n = dcp_harness_read_trace(trace_path, lengths, 1 << 16);
    if (n <= 0) {
        fprintf(stderr, "cannot read %s\n", trace_path);
        exit(1);
    }
    dcp_harness_options o;
    dcp_harness_options_default(&o);
    o.config.data_parallel_size = gpus;
    o.config.context_parallel_size = 1;
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.max_sequences = n;
    o.config.max_seqlen_per_rank = 16384;
    o.config.pad_alignment = 64;
    o.lengths = lengths;
    o.num_lengths = n;
    o.gpu = 1;
    o.steps = 2;
    o.check = 1;
    dcp_harness_result r;
    dcp_status st = dcp_harness_run(&o, &r);
    int verified = st == DCP_OK && r.verified && r.mismatches == 0;
    if (!verified) {
        printf("step  | verification FAILED: %s %s\n", dcp_status_str(st), r.message);
        dcp_harness_result_free(&r);
        return;
    }
    dcp_harness_result_free(&r);
    o.check = 0;
    o.steps = steps;
    st = dcp_harness_run(&o, &r);
    if (st != DCP_OK || r.step_status[0] != DCP_OK) {
        printf("step  | timing run failed: %s %s\n", dcp_status_str(st), r.message);
        dcp_harness_result_free(&r);
        return;
    }
    int32_t slow = 0;
    int64_t slowest = 0, max_received = 0, max_reference = 0;
    for (int32_t w = 0; w < r.world_size; w++) {
        const dcp_step_stats *s = &r.rank_stats[w];
        int64_t t = s->time_plan_ns + s->time_stage_ns + s->time_exchange_ns + s->time_pack_ns;
        if (t > slowest) slowest = t, slow = w;
        if (s->exchange_bytes_received > max_received) max_received = s->exchange_bytes_received;
        if (s->reference_bytes_received > max_reference) max_reference = s->reference_bytes_received;
    }
    const dcp_step_stats *s = &r.rank_stats[slow];
    /* each phase's median over the timed steps (the first is a warm-up), the slowest rank's in each step */
    double phase[4] = {0, 0, 0, 0};
    {
        int32_t timed = steps > 1 ? steps - 1 : 1;
        double *v = calloc((size_t)timed, sizeof *v);
        for (int k = 0; k < 4; k++) {
            for (int32_t t = 0; t < timed; t++) {
                int32_t step = steps > 1 ? t + 1 : t;
                double worst = 0;
                for (int32_t w = 0; w < r.world_size; w++) {
                    const dcp_step_stats *x = &r.step_stats[(size_t)step * (size_t)r.world_size + (size_t)w];
                    int64_t ns = k == 0 ? x->time_plan_ns : k == 1 ? x->time_stage_ns : k == 2 ? x->time_exchange_ns
                                                                                         : x->time_pack_ns;
                    if (ns * 1e-6 > worst) worst = ns * 1e-6;
                }
                v[t] = worst;
            }
            qsort(v, (size_t)timed, sizeof *v, cmp_double);
            phase[k] = v[timed / 2];
        }
        free(v);
    }
    printf("step  | %d sequences, %lld tokens, %d GPUs (DP%d dynamic_cp), %d microbatches | verified | per step after "
           "warm-up: heap %llu B = %d collectives x NCCL's %llu B + %lld B, device memory %lld B\n",
           n, (long long)r.total_tokens, gpus, gpus, r.num_microbatches, (unsigned long long)r.heap_bytes_max,
           r.rank_stats[0].collectives, (unsigned long long)r.nccl_heap_per_call, (long long)r.heap_bytes_beyond_nccl,
           (long long)r.device_bytes_delta);
    printf("step  | median %.3f ms, min %.3f ms over %d steps | phase medians (slowest rank): plan %.3f, stage %.3f, "
           "exchange %.3f, pack %.3f ms, rest %.3f ms\n",
           r.step_seconds_median * 1e3, r.step_seconds_min * 1e3, steps, phase[0], phase[1], phase[2], phase[3],
           r.step_seconds_median * 1e3 - phase[0] - phase[1] - phase[2] - phase[3]);
    /*
     * The yardstick: the host part (gather + plan + geometry, as measured), one
     * device copy of the bytes the rank's outputs hold (every kept field and the
     * mask of every slot), and a bare NCCL exchange of the bytes that travel
     * (the busiest rank's sent bytes, spread evenly over its peers).
     */
    const size_t body_bytes = (size_t)s->tokens_out * (size_t)(dcp_harness_fields_bytes(o.config.fields) + 1);
    int64_t max_sent = 0;
    for (int32_t w = 0; w < r.world_size; w++)
        if (r.rank_stats[w].exchange_bytes_sent > max_sent) max_sent = r.rank_stats[w].exchange_bytes_sent;
    const float copy = copy_ms(body_bytes);
    const float bare = exchange_ms(gpus, gpus > 1 ? (size_t)max_sent / (size_t)(gpus - 1) : 0);
    const double yard = phase[0] + copy + bare;
    printf("yardstick | host part %.3f ms + one copy of %.1f MB %.3f ms + bare NCCL exchange of %.1f MB a rank %.3f ms = "
           "%.3f ms | step median / yardstick %.2f\n",
           phase[0], body_bytes / 1e6, copy, max_sent / 1e6, bare, yard,
           yard > 0 ? r.step_seconds_median * 1e3 / yard : 0.0);
    /* the reference: every field all-gathered over DP, each rank sending the largest rank's tokens */
    size_t per_rank = (size_t)(max_reference / (gpus > 1 ? gpus - 1 : 1));
    size_t field_bytes[6];
    /* tokens, labels, loss_mask, position_ids in proportion 8:8:4:8 of the token part, lengths 8 + 8 */
    size_t token_part = per_rank, numel = token_part / 28;
    field_bytes[0] = numel * 8, field_bytes[1] = numel * 8, field_bytes[2] = numel * 4, field_bytes[3] = numel * 8;
    field_bytes[4] = (size_t)n / (size_t)gpus * 8, field_bytes[5] = (size_t)n / (size_t)gpus * 8;
    float one = 0, per_field = 0;
    if (gpus > 1) bench_reference_gather(gpus, field_bytes, 6, &one, &per_field);
    printf("reroute | exchange %.3f ms receiving %.1f MB/rank | reference volume %.1f MB/rank: ncclAllGather %.3f ms "
           "(one call), %.3f ms (per field) | exchange/all-gather %.2f\n",
           s->time_exchange_ns * 1e-6, max_received / 1e6, max_reference / 1e6, one, per_field,
           one > 0 ? s->time_exchange_ns * 1e-6 / one : 0.0);
    dcp_harness_result_free(&r);
}

int main(int argc, char **argv)
{
    const char *trace = "tests/data/workloads/mlmdefault_n4096_seed1.txt";
    int32_t gpus = dcp_cuda_device_count(), steps = 30;
    int64_t pack_tokens = 16 << 20, only_mean = 0, only_variant = 0;
    int parts = 3, only_aligned = 0, only_reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-pack")) parts &= ~1;
        else if (!strcmp(argv[i], "--no-step")) parts &= ~2;
        else if (!strcmp(argv[i], "--pack-only") && i + 3 < argc) { /* for a profiler: one table, one build, few launches */
            only_mean = atoll(argv[i + 1]);
            only_aligned = atoi(argv[i + 2]);
            only_variant = atoll(argv[i + 3]);
            i += 3;
        } else if (i + 1 < argc) {
            if (!strcmp(argv[i], "--trace")) trace = argv[i + 1];
            else if (!strcmp(argv[i], "--gpus")) gpus = atoi(argv[i + 1]);
            else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
            else if (!strcmp(argv[i], "--pack-tokens")) pack_tokens = atoll(argv[i + 1]);
            else if (!strcmp(argv[i], "--reps")) only_reps = atoi(argv[i + 1]);
            i++;
        }
    }
    if (dcp_cuda_device_count() < 1) {
        printf("skipped: no GPU\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device | %s, %d SMs, %.0f GB, %d visible\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1e9, dcp_cuda_device_count());
    CK(cudaSetDevice(0));
    if (only_mean > 0) {
        bench_pack(pack_tokens, only_mean, only_aligned, &only_variant, 1, only_reps);
        return 0;
    }
    const int64_t pieces[] = {64, 512, 1024, 4096};
    if (parts & 1) {
        for (int i = 0; i < 4; i++) bench_pack(pack_tokens, pieces[i], 0, pack_variants, PACK_VARIANTS, 30);
        bench_pack(pack_tokens, 1024, 1, pack_variants, PACK_VARIANTS, 30);
    }
    if ((parts & 2) && gpus >= 1) bench_step(trace, gpus, steps);
    return 0;
}

#else
int main(void)
{
    printf("skipped: no GPU (built without CUDA and NCCL)\n");
    return 0;
}
#endif
