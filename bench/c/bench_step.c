/*
 * bench_step.c - one data-plane step (dcp_step) for 4096 sequences over 8
 * in-process ranks (threads), and the bytes each rank receives next to what
 * the reference's per-field DP all-gathers deliver for the same batch.
 *
 *   bench_step [TRACE] [STEPS]     default: tests/data/workloads/mlmdefault_n4096_seed1.txt, 7 steps
 *
 * Step time is the slowest rank's dcp_step() wall time (ranks start together
 * at a barrier), min and median over the steps; the steps after the first
 * see a warm workspace.  Yardstick measured in the same run: one memcpy of
 * the bytes the busiest rank computes on.  Every configuration is also
 * verified once against the oracle (a separate run, not timed).
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"
#include "step_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void machine_name(char *out, size_t size)
{
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, size, "%s", colon + 2);
                out[strcspn(out, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
}

/* Seconds to copy `bytes` once (best of 5), the floor for moving a rank's data on this machine. */
static double memcpy_seconds(size_t bytes)
{
    if (bytes == 0) return 0;
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        double t0 = now_seconds();
        memcpy(b, a, bytes);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    volatile char sink = b[bytes / 2];
    (void)sink;
    free(a), free(b);
    return best;
}

typedef struct bench_case {
    const char *name;
    int32_t dp, cp;
    dcp_scheduler scheduler;
    int32_t max_seqlen;
    dcp_cp_partition partition;
} bench_case;

int main(int argc, char **argv)
{
    const char *trace = argc > 1 ? argv[1] : DCP_SOURCE_DIR "/tests/data/workloads/mlmdefault_n4096_seed1.txt";
    int steps = argc > 2 ? atoi(argv[2]) : 7;
    static int32_t lengths[16384];
    int32_t n = dcp_harness_read_trace(trace, lengths, 16384);
    if (n <= 0) {
        fprintf(stderr, "bench_step: cannot read %s\n", trace);
        return 1;
    }
    char cpu[128];
    machine_name(cpu, sizeof cpu);
    printf("bench_step: %s, %d sequences, 8 in-process ranks (threads) on %s, %d steps\n", trace, n, cpu, steps);
    printf("one PP stage, all four fields (28 B/token); recv/rank = token bytes a rank receives from other ranks, "
           "ref/rank = what the reference's per-field DP all-gathers (fields + both lengths) deliver to it\n\n");
    printf("%-34s %5s %9s %9s %11s %13s %13s %8s %12s\n", "configuration", "mbs", "step_min", "step_med",
           "memcpy_max", "recv/rank", "ref/rank", "ref/ours", "verified");

    const bench_case cases[] = {
        {"dp8 dp_balanced", 8, 1, DCP_SCHEDULER_DP_BALANCED, 16384, DCP_CP_ZIGZAG},
        {"dp4xcp2 dp_balanced zigzag", 4, 2, DCP_SCHEDULER_DP_BALANCED, 8192, DCP_CP_ZIGZAG},
        {"dp4xcp2 dynamic_cp zigzag", 4, 2, DCP_SCHEDULER_DYNAMIC_CP, 8192, DCP_CP_ZIGZAG},
        {"dp2xcp4 dynamic_cp contiguous", 2, 4, DCP_SCHEDULER_DYNAMIC_CP, 8192, DCP_CP_CONTIGUOUS},
        {"dp8 dynamic_cp", 8, 1, DCP_SCHEDULER_DYNAMIC_CP, 8192, DCP_CP_ZIGZAG},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *bc = &cases[i];
        dcp_harness_options o;
        dcp_harness_options_default(&o);
        o.config.data_parallel_size = bc->dp;
        o.config.context_parallel_size = bc->cp;
        o.config.max_sequences = n;
        o.config.max_seqlen_per_rank = bc->max_seqlen;
        o.config.scheduler = bc->scheduler;
        o.config.cp_partition = bc->partition;
        o.config.pad_alignment = 64;
        o.lengths = lengths;
        o.num_lengths = n;

        /* verified once, then timed without the oracle */
        dcp_harness_result check;
        o.check = 1;
        o.steps = 1;
        dcp_status st = dcp_harness_run(&o, &check);
        int verified = st == DCP_OK && check.verified;
        dcp_harness_result_free(&check);

        dcp_harness_result r;
        o.check = 0;
        o.steps = steps;
        st = dcp_harness_run(&o, &r);
        if (st != DCP_OK || r.step_status[0] != DCP_OK) {
            printf("%-34s failed: %s %s\n", bc->name, dcp_status_str(st), r.message);
            failures++;
            dcp_harness_result_free(&r);
            continue;
        }
        int64_t ours = 0, reference = 0, busiest = 0;
        for (int32_t w = 0; w < r.world_size; w++) {
            ours += r.rank_stats[w].exchange_bytes_received;
            reference += r.rank_stats[w].reference_bytes_received;
            int64_t need = r.rank_stats[w].tokens_computed * 28;
            if (need > busiest) busiest = need;
        }
        double copy = memcpy_seconds((size_t)busiest);
        printf("%-34s %5d %8.1fms %8.1fms %9.2fms %11.2fMB %11.2fMB %8.1f %12s\n", bc->name, r.num_microbatches,
               1e3 * r.step_seconds_min, 1e3 * r.step_seconds_median, 1e3 * copy, ours / 8.0 / 1e6,
               reference / 8.0 / 1e6, ours > 0 ? (double)reference / (double)ours : 0.0, verified ? "yes" : "NO");
        if (!verified) failures++;
        dcp_harness_result_free(&r);
    }
    printf("\nmemcpy_max: one memcpy of the busiest rank's computed tokens x 28 B on this machine\n");
    return failures ? 1 : 0;
}
