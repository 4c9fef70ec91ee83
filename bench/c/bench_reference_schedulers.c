/*
 * bench_reference_schedulers.c - planning time of the two reference-compatible
 * schedulers (dp_balanced, dynamic_cp): dcp_plan_compute(), which sorts,
 * schedules and validates, on the traces of a workloads directory.
 *
 *   bench_reference_schedulers [workloads-dir] [min-seconds-per-point]
 *
 * The directory defaults to the source tree's tests/data/workloads (256- and
 * 1024-sequence traces); point it at a directory with the 4096- and
 * 16384-sequence traces (workloads/workloads.py) for the large points.  Ranks:
 * 32 for 256 sequences, 64 for 1024, 128 for 4096, 512 for 16384.  dp_balanced
 * uses the smallest power-of-two CP size that holds the longest sequence (at
 * least 8); dynamic_cp runs without and with VPP alignment (group 4).  Prints
 * the median and minimum time per plan.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int read_trace(const char *path, int32_t *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    long v;
    while (n < cap && fscanf(f, "%ld", &v) == 1) out[n++] = (int32_t)v;
    fclose(f);
    return n;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { MAX_SEQUENCES = 16384, MAX_SAMPLES = 4096 };

static void bench_point(const char *trace, const int32_t *lengths, int n, int32_t ranks, int32_t per_rank,
                        dcp_scheduler scheduler, int32_t cp, int32_t vpp_group, double min_seconds)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = scheduler;
    c.data_parallel_size = ranks / cp;
    c.context_parallel_size = cp;
    c.max_seqlen_per_rank = per_rank;
    c.microbatch_group_size_per_vp_stage = vpp_group;
    c.max_sequences = n;
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) {
        printf("%-11s %6d %5d %6d %-12s  context creation failed\n", trace, n, ranks, per_rank, dcp_scheduler_name(scheduler));
        return;
    }
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st != DCP_OK) {
        printf("%-11s %6d %5d %6d %-12s cp%-3d vpp%-2d  %s\n", trace, n, ranks, per_rank, dcp_scheduler_name(scheduler),
               scheduler == DCP_SCHEDULER_DP_BALANCED ? cp : 0, vpp_group, dcp_status_str(st));
        dcp_context_destroy(ctx);
        return;
    }
    const int32_t microbatches = plan->num_microbatches;
    static double samples[MAX_SAMPLES];
    int k = 0;
    double start = now_us();
    while (k < MAX_SAMPLES && (k < 5 || now_us() - start < min_seconds * 1e6)) {
        double t0 = now_us();
        dcp_plan_compute(ctx, lengths, n, &plan);
        samples[k++] = now_us() - t0;
    }
    qsort(samples, (size_t)k, sizeof samples[0], compare_double);
    printf("%-11s %6d %5d %6d %-12s cp%-3d vpp%-2d %5d mb %10.1f %10.1f %6d\n", trace, n, ranks, per_rank,
           dcp_scheduler_name(scheduler), scheduler == DCP_SCHEDULER_DP_BALANCED ? cp : 0, vpp_group, microbatches,
           samples[k / 2], samples[0], k);
    dcp_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : DCP_SOURCE_DIR "/tests/data/workloads";
    double min_seconds = argc > 2 ? atof(argv[2]) : 0.3;
    static const char *const traces[] = {"mlmdefault", "longsft", "bimodal", "uniform32k"};
    static const int sizes[] = {256, 1024, 4096, 16384};
    static const int32_t rank_counts[] = {32, 64, 128, 512};
    static const int32_t per_rank[] = {4096, 16384};
    static int32_t lengths[MAX_SEQUENCES];
    printf("%-11s %6s %5s %6s %-12s %-5s %-5s %8s %10s %10s %6s\n", "trace", "seqs", "ranks", "M", "scheduler", "cp",
           "vpp", "", "median_us", "min_us", "runs");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s_n%d_seed1.txt", dir, traces[t], sizes[s]);
            int n = read_trace(path, lengths, MAX_SEQUENCES);
            if (n <= 0) continue;
            int32_t longest = 0;
            for (int i = 0; i < n; i++) longest = lengths[i] > longest ? lengths[i] : longest;
            const int32_t ranks = rank_counts[s];
            for (size_t m = 0; m < sizeof per_rank / sizeof per_rank[0]; m++) {
                if ((int64_t)longest > (int64_t)ranks * per_rank[m]) continue;
                int32_t cp = 8;
                while ((int64_t)cp * per_rank[m] < longest) cp *= 2;
                if (cp <= ranks)
                    bench_point(traces[t], lengths, n, ranks, per_rank[m], DCP_SCHEDULER_DP_BALANCED, cp, 0, min_seconds);
                bench_point(traces[t], lengths, n, ranks, per_rank[m], DCP_SCHEDULER_DYNAMIC_CP, 1, 0, min_seconds);
                bench_point(traces[t], lengths, n, ranks, per_rank[m], DCP_SCHEDULER_DYNAMIC_CP, 1, 4, min_seconds);
            }
        }
    }
    return 0;
}
