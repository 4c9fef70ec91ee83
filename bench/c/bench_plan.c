/*
 * bench_plan.c - planning quality and speed of the three schedulers.
 *
 *   bench_plan [--traces DIR] [--repeats R] [--quick] [--hashes] [--makespans] [--no-matrix] [--no-scaling]
 *              [--scheduler NAME] [--trace NAME] [--config INDEX] [--row INDEX] [--step-model barrier|dependency] [--effort full|fast] [--effort-table]
 *
 * Matrix: every trace of DIR (default tests/data/workloads: the four
 * families at 256, 1024, 4096 and 16384 sequences) x every configuration below, planned by dp_balanced
 * (static CP: the smallest power of two that holds the longest sequence),
 * dynamic_cp and balanced.  Per cell: microbatches, step-model makespan,
 * efficiency (lower bound / makespan) and plan time (median of R runs of
 * dcp_plan_compute, validation included).  Summary: balanced / dynamic_cp
 * makespan per configuration, median and minimum efficiency per scheduler.
 *
 * Speed targets: per scheduler, the slowest matrix cell at 4096 sequences on
 * 128 ranks (target <= 0.5 ms), at 16384 sequences on 512 ranks and over
 * every cell (<= 5 ms); after the scaling table, the slowest row of up to
 * 16384 sequences on up to 16384 ranks (<= 5 ms) and of 65536 sequences on
 * 65536 ranks (<= 50 ms).
 *
 * Scaling: each scheduler's plan time, microbatches and efficiency against
 * the number of sequences (a mlmdefault-like synthetic trace, 1024..131072,
 * on 128 ranks), the number of ranks (16384 sequences on 8..16384 ranks,
 * 65536 and 131072 on 2048..65536: ranks are only numbers to the planner),
 * and long-context rows (longsft- and bimodal-like lengths with
 * max_seqlen_per_rank 8192..32768).
 *
 * --row INDEX runs only that row of the scaling table (0-based, as printed).
 *
 * --hashes prints each matrix cell's plan hash and makespan instead (one line
 * a cell), so two builds' plans can be compared bit for bit with diff;
 * --makespans does the same for the matrix and every scaling row.
 *
 * --effort full|fast sets config.plan_effort (balanced's effort level) for
 * every plan.  --effort-table times dynamic_cp and balanced at both levels in
 * turn on the scaling rows from 16384 sequences on 2048 ranks up, and prints
 * each level's time (this thread's CPU time) against dynamic_cp's and its makespan relative to
 * dynamic_cp's (docs/planning.md, effort levels), and the time of the check a step makes of the full
 * level's plan when it is handed in, made ahead (dcp_plan_matches).
 *
 * --step-model sets config.cost.step_model for every plan (default barrier):
 * makespan and efficiency are then the model's (model_makespan,
 * model_lower_bound / model_makespan), and `balanced` lays its plans out for
 * the dependency model when that is the one configured; the matrix summary
 * then also compares balanced's dependency makespan with that of the plan it
 * makes under the barrier model (planned once more per cell, untimed).
 *
 * One thread; times from CLOCK_MONOTONIC.
 */
#define _POSIX_C_SOURCE 200809L
#include "dcpack.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_config {
    int32_t ranks, max_seqlen, vpp_group;
} bench_config;

/* The golden files' dynamic-CP configurations, plus 8 ranks x 8192 (dp_balanced's golden) and 512 ranks. */
static const bench_config configs[] = {
    {8, 2048, 0},   {8, 8192, 0},   {32, 4096, 0},   {32, 8192, 0},
    {32, 8192, 4},  {128, 4096, 0}, {512, 4096, 0},  {512, 8192, 0},
};
#define NUM_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

static const dcp_scheduler schedulers[] = {DCP_SCHEDULER_DP_BALANCED, DCP_SCHEDULER_DYNAMIC_CP,
                                           DCP_SCHEDULER_BALANCED};
#define NUM_SCHEDULERS 3

#define MAX_TRACES 64

/* --step-model: the step model of every configuration */
static dcp_step_model step_model = DCP_STEP_MODEL_BARRIER;
/* --effort: balanced's effort level in every configuration */
static dcp_plan_effort plan_effort = DCP_PLAN_EFFORT_FULL;

typedef struct trace {
    char name[128];
    int32_t *lengths;
    int32_t n;
    int32_t longest;
} trace;

typedef struct cell {
    int ran;          /* 1: planned; 0: skipped */
    char why[96];     /* why skipped */
    int32_t microbatches;
    int64_t makespan, lower_bound;
    double efficiency, plan_ms;
    uint64_t hash;    /* dcp_plan_hash of the plan */
    int64_t barrier_plan_d; /* --step-model dependency, balanced: the dependency makespan of its barrier-model plan */
} cell;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int cmp_name(const void *a, const void *b) { return strcmp(((const trace *)a)->name, ((const trace *)b)->name); }

static int read_trace(const char *path, trace *t)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int32_t cap = 1024;
    t->lengths = malloc((size_t)cap * sizeof *t->lengths);
    t->n = 0;
    t->longest = 0;
    long v;
    while (fscanf(f, "%ld", &v) == 1) {
        if (t->n == cap) {
            cap *= 2;
            t->lengths = realloc(t->lengths, (size_t)cap * sizeof *t->lengths);
        }
        t->lengths[t->n++] = (int32_t)v;
        if (v > t->longest) t->longest = (int32_t)v;
    }
    fclose(f);
    return t->n > 0 ? 0 : -1;
}

static int load_traces(const char *dir, const char *only, trace *traces)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < MAX_TRACES) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".txt") != 0) continue;
        if (only && !strstr(e->d_name, only)) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        trace *t = &traces[count];
        snprintf(t->name, sizeof t->name, "%.*s", (int)(len - 4), e->d_name);
        if (read_trace(path, t) == 0) count++;
    }
    closedir(d);
    qsort(traces, (size_t)count, sizeof *traces, cmp_name);
    return count;
}

/* The configuration one scheduler runs under; 0 when it cannot run (why in `why`). */
static int make_config(const bench_config *bc, dcp_scheduler s, const trace *t, dcp_config *c, char *why,
                       size_t why_size)
{
    dcp_config_default(c);
    c->scheduler = s;
    c->max_sequences = t->n;
    c->max_seqlen_per_rank = bc->max_seqlen;
    c->data_parallel_size = bc->ranks;
    c->context_parallel_size = 1;
    c->cost.step_model = (int32_t)step_model;
    c->plan_effort = plan_effort;
    if (bc->vpp_group > 1) {
        c->pipeline_parallel_size = 2;
        c->virtual_pipeline_size = 2;
        c->microbatch_group_size_per_vp_stage = bc->vpp_group;
    }
    if ((int64_t)t->longest > (int64_t)bc->ranks * bc->max_seqlen) {
        snprintf(why, why_size, "longest %d > %d ranks x %d", t->longest, bc->ranks, bc->max_seqlen);
        return 0;
    }
    if (s == DCP_SCHEDULER_DP_BALANCED) {
        int32_t cp = 1;
        while ((int64_t)cp * bc->max_seqlen < t->longest) cp *= 2;
        if (cp > bc->ranks || bc->ranks % cp != 0) {
            snprintf(why, why_size, "static cp %d does not divide %d ranks", cp, bc->ranks);
            return 0;
        }
        c->context_parallel_size = cp;
        c->data_parallel_size = bc->ranks / cp;
    }
    return 1;
}

/*
 * The machine the numbers are from: CPU model and online cores (Linux's
 * /proc/cpuinfo and sysconf), compiler, whether optimised, and the date.
 */
static void print_machine(void)
{
    char model[160] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            const char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(model, sizeof model, "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
#ifdef __OPTIMIZE__
    const char *optimised = "optimised";
#else
    const char *optimised = "not optimised";
#endif
#if defined(__clang__)
    const char *compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *compiler = "gcc " __VERSION__;
#else
    const char *compiler = "an unknown compiler";
#endif
    printf("machine: %s, %ld cores online; compiler %s, %s; %s; one thread\n", model, cores, compiler, optimised,
           date);
}

/* Plan once for the result, then `repeats` more times for the median time. */
static void run_cell(const bench_config *bc, dcp_scheduler s, const trace *t, int repeats, cell *out)
{
    memset(out, 0, sizeof *out);
    dcp_config c;
    if (!make_config(bc, s, t, &c, out->why, sizeof out->why)) return;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&c, &ctx);
    if (st != DCP_OK) {
        snprintf(out->why, sizeof out->why, "context: %s", dcp_status_str(st));
        return;
    }
    const dcp_plan *plan = NULL;
    st = dcp_plan_compute(ctx, t->lengths, t->n, &plan);
    if (st != DCP_OK) {
        snprintf(out->why, sizeof out->why, "%s: %.70s", dcp_status_str(st), dcp_context_last_error(ctx));
        dcp_context_destroy(ctx);
        return;
    }
    dcp_plan_stats stats;
    dcp_plan_stats_compute(ctx, plan, t->lengths, t->n, &stats);
    double times[64];
    if (repeats > 64) repeats = 64;
    for (int r = 0; r < repeats; r++) {
        double t0 = now_ms();
        dcp_plan_compute(ctx, t->lengths, t->n, &plan);
        times[r] = now_ms() - t0;
    }
    out->ran = 1;
    out->hash = dcp_plan_hash(plan);
    out->microbatches = stats.num_microbatches;
    out->makespan = stats.model_makespan;
    out->lower_bound = stats.model_lower_bound;
    out->efficiency = stats.model_makespan > 0 ? (double)stats.model_lower_bound / (double)stats.model_makespan : 0;
    out->plan_ms = repeats > 0 ? median(times, repeats) : 0;
    dcp_context_destroy(ctx);
    /* balanced lays its plans out for the dependency model: what the barrier model's plan gives there */
    if (step_model == DCP_STEP_MODEL_DEPENDENCY && s == DCP_SCHEDULER_BALANCED) {
        c.cost.step_model = DCP_STEP_MODEL_BARRIER;
        if (dcp_context_create(&c, &ctx) != DCP_OK) return;
        if (dcp_plan_compute(ctx, t->lengths, t->n, &plan) == DCP_OK &&
            dcp_plan_stats_compute(ctx, plan, t->lengths, t->n, &stats) == DCP_OK)
            out->barrier_plan_d = stats.dependency_makespan;
        dcp_context_destroy(ctx);
    }
}

static void config_label(const bench_config *bc, char *buf, size_t size)
{
    if (bc->vpp_group > 1) snprintf(buf, size, "r%d m%d vpp%d", bc->ranks, bc->max_seqlen, bc->vpp_group);
    else snprintf(buf, size, "r%d m%d", bc->ranks, bc->max_seqlen);
}

/* --hashes: one line per matrix cell with its plan hash, to compare two builds' plans bit for bit. */
static void print_hashes(trace *traces, int num_traces, int only_scheduler, int only_config)
{
    for (int ti = 0; ti < num_traces; ti++)
        for (int ci = 0; ci < NUM_CONFIGS; ci++) {
            if (only_config >= 0 && ci != only_config) continue;
            char label[48];
            config_label(&configs[ci], label, sizeof label);
            for (int si = 0; si < NUM_SCHEDULERS; si++) {
                if (only_scheduler >= 0 && (int)schedulers[si] != only_scheduler) continue;
                cell x;
                run_cell(&configs[ci], schedulers[si], &traces[ti], 0, &x);
                if (x.ran)
                    printf("%s|%s|%s|%016llx|%lld\n", traces[ti].name, label, dcp_scheduler_name(schedulers[si]),
                           (unsigned long long)x.hash, (long long)x.makespan);
                else
                    printf("%s|%s|%s|skipped\n", traces[ti].name, label, dcp_scheduler_name(schedulers[si]));
            }
        }
}

static void run_matrix(trace *traces, int num_traces, int repeats, int only_scheduler, int only_config)
{
    static cell cells[MAX_TRACES][NUM_CONFIGS][NUM_SCHEDULERS];
    printf("%-26s %-16s | %-40s | %-40s | %-40s\n", "trace", "config", "dp_balanced: mbs makespan eff ms",
           "dynamic_cp: mbs makespan eff ms", "balanced: mbs makespan eff ms");
    for (int ti = 0; ti < num_traces; ti++) {
        for (int ci = 0; ci < NUM_CONFIGS; ci++) {
            if (only_config >= 0 && ci != only_config) continue;
            char label[48];
            config_label(&configs[ci], label, sizeof label);
            printf("%-26s %-16s", traces[ti].name, label);
            for (int si = 0; si < NUM_SCHEDULERS; si++) {
                cell *x = &cells[ti][ci][si];
                if (only_scheduler >= 0 && (int)schedulers[si] != only_scheduler) {
                    memset(x, 0, sizeof *x);
                    snprintf(x->why, sizeof x->why, "not selected");
                } else {
                    run_cell(&configs[ci], schedulers[si], &traces[ti], repeats, x);
                }
                if (x->ran)
                    printf(" | %5d %15lld %6.4f %9.3f  ", x->microbatches, (long long)x->makespan, x->efficiency,
                           x->plan_ms);
                else
                    printf(" | skipped: %-30.30s   ", x->why);
            }
            printf("\n");
            fflush(stdout);
        }
    }

    printf("\nSummary per configuration (cells where both ran): balanced / dynamic_cp makespan\n");
    printf("%-16s %6s %9s %9s %9s | %s\n", "config", "cells", "worst", "median", "best", "efficiency median/min: dp_balanced  dynamic_cp  balanced");
    double all_eff[NUM_SCHEDULERS][MAX_TRACES * NUM_CONFIGS];
    int all_n[NUM_SCHEDULERS] = {0};
    double all_min[NUM_SCHEDULERS] = {1e9, 1e9, 1e9};
    double worst_all = 0;
    int worse_cells = 0, compared = 0;
    for (int ci = 0; ci < NUM_CONFIGS; ci++) {
        if (only_config >= 0 && ci != only_config) continue;
        double ratios[MAX_TRACES], eff[NUM_SCHEDULERS][MAX_TRACES];
        int nr = 0, ne[NUM_SCHEDULERS] = {0};
        double emin[NUM_SCHEDULERS] = {1e9, 1e9, 1e9};
        for (int ti = 0; ti < num_traces; ti++) {
            for (int si = 0; si < NUM_SCHEDULERS; si++) {
                cell *x = &cells[ti][ci][si];
                if (!x->ran) continue;
                eff[si][ne[si]++] = x->efficiency;
                all_eff[si][all_n[si]++] = x->efficiency;
                if (x->efficiency < emin[si]) emin[si] = x->efficiency;
                if (x->efficiency < all_min[si]) all_min[si] = x->efficiency;
            }
            cell *d = &cells[ti][ci][1], *b = &cells[ti][ci][2];
            if (d->ran && b->ran) {
                double r = (double)b->makespan / (double)d->makespan;
                ratios[nr++] = r;
                if (r > worst_all) worst_all = r;
                if (b->makespan >= d->makespan) worse_cells++;
                compared++;
            }
        }
        char label[48];
        config_label(&configs[ci], label, sizeof label);
        double worst = 0, best = 1e9;
        for (int i = 0; i < nr; i++) {
            if (ratios[i] > worst) worst = ratios[i];
            if (ratios[i] < best) best = ratios[i];
        }
        printf("%-16s %6d", label, nr);
        if (nr) printf(" %9.4f %9.4f %9.4f |", worst, median(ratios, nr), best);
        else printf(" %9s %9s %9s |", "-", "-", "-");
        for (int si = 0; si < NUM_SCHEDULERS; si++) {
            if (ne[si]) printf("  %5.3f/%5.3f", median(eff[si], ne[si]), emin[si]);
            else printf("  %11s", "-");
        }
        printf("\n");
    }
    printf("\nOverall: cells compared %d, balanced not better than dynamic_cp in %d, worst ratio %.4f\n", compared,
           worse_cells, worst_all);
    if (step_model == DCP_STEP_MODEL_DEPENDENCY) {
        /* balanced's dependency makespan against that of the plan it makes under the barrier model */
        double gain[MAX_TRACES * NUM_CONFIGS];
        int ng = 0, lower = 0, equal = 0, higher = 0;
        for (int ti = 0; ti < num_traces; ti++)
            for (int ci = 0; ci < NUM_CONFIGS; ci++) {
                const cell *x = &cells[ti][ci][2];
                if (!x->ran || x->barrier_plan_d <= 0) continue;
                gain[ng++] = 1.0 - (double)x->makespan / (double)x->barrier_plan_d;
                lower += x->makespan < x->barrier_plan_d;
                equal += x->makespan == x->barrier_plan_d;
                higher += x->makespan > x->barrier_plan_d;
            }
        if (ng) {
            double best = 0;
            for (int i = 0; i < ng; i++)
                if (gain[i] > best) best = gain[i];
            printf("balanced against its barrier-model plan's dependency makespan: cells %d, lower %d, equal %d, higher %d;"
                   " gain median %.4f%%, best %.4f%%\n",
                   ng, lower, equal, higher, 100 * median(gain, ng), 100 * best);
        }
    }
    for (int si = 0; si < NUM_SCHEDULERS; si++)
        if (all_n[si])
            printf("  %-12s cells %4d  efficiency median %.4f  min %.4f\n", dcp_scheduler_name(schedulers[si]),
                   all_n[si], median(all_eff[si], all_n[si]), all_min[si]);

    /*
     * Speed targets: the slowest matrix cell of each scheduler at 4096 sequences on 128 ranks, 16384 on 512,
     * and over every cell (n = 0: any count; all are at most 16384 sequences on at most 512 ranks).
     */
    static const struct {
        int32_t n, ranks;
        double limit_ms;
    } speed[] = {{4096, 128, 0.5}, {16384, 512, 5.0}, {0, 0, 5.0}};
    printf("\nSpeed targets (slowest cell over traces and max_seqlen_per_rank; plan time, validation included)\n");
    for (size_t k = 0; k < sizeof speed / sizeof speed[0]; k++) {
        for (int si = 0; si < NUM_SCHEDULERS; si++) {
            int count = 0;
            double slowest = 0;
            const char *where = "";
            char label[48] = "";
            for (int ti = 0; ti < num_traces; ti++)
                for (int ci = 0; ci < NUM_CONFIGS; ci++) {
                    const cell *x = &cells[ti][ci][si];
                    if ((only_config >= 0 && ci != only_config) || !x->ran ||
                        (speed[k].n && (traces[ti].n != speed[k].n || configs[ci].ranks != speed[k].ranks)))
                        continue;
                    count++;
                    if (x->plan_ms > slowest) {
                        slowest = x->plan_ms;
                        where = traces[ti].name;
                        config_label(&configs[ci], label, sizeof label);
                    }
                }
            if (count == 0) continue;
            char what[48];
            if (speed[k].n) snprintf(what, sizeof what, "%5d sequences on %3d ranks", speed[k].n, speed[k].ranks);
            else snprintf(what, sizeof what, "%-27s", "any cell");
            printf("  %s  %-12s cells %3d  slowest %7.3f ms (%s %s)  target <= %g ms: %s\n", what,
                   dcp_scheduler_name(schedulers[si]), count, slowest, where, label, speed[k].limit_ms,
                   slowest <= speed[k].limit_ms ? "met" : "MISSED");
        }
    }
}

/*
 * Synthetic traces without libm: the exponent of a length is a bell (the sum
 * of four uniform 16-bit draws, Irwin-Hall) mapped linearly, and 2^exponent is
 * interpolated between powers of two.
 */
typedef enum family { FAMILY_MLMDEFAULT, FAMILY_LONGSFT, FAMILY_BIMODAL } family;
static const char *const family_names[] = {"mlmdefault", "longsft", "bimodal"};

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* 2^(e16 / 65536), linearly between powers of two. */
static int64_t pow2_fixed(int64_t e16)
{
    int32_t e = (int32_t)(e16 >> 16);
    int64_t frac = e16 & 0xFFFF;
    return ((int64_t)1 << e) + ((((int64_t)1 << e) * frac) >> 16);
}

/* A length whose log2 is about mu16 / 65536 with spread `scale` per unit of the bell (in 1/4 units). */
static int64_t bell_length(uint64_t *x, int64_t mu16, int64_t scale4)
{
    int64_t acc = 0;
    for (int j = 0; j < 4; j++) acc += (int64_t)(xorshift(x) >> 40) & 0xFFFF;
    /* acc in [0, 4*65535], mean 2*65536, standard deviation about 0.58*65536 */
    return pow2_fixed(mu16 + (acc - 2 * 65536) * scale4 / 4);
}

/*
 * Deterministic lengths of one family:
 *   mlmdefault  lognormal-like in [128, 8192] with a peak near 2^9.5 (the mlmdefault shape)
 *   longsft     lognormal-like around 2^11 (median 2048, mean about 4096) in [256, 131072]
 *   bimodal     90% lognormal-like around 1024 in [256, 4096], 10% uniform in [32768, 131072]
 * The tests/data/workloads families of the same names have the same shapes.
 */
static void synthetic_lengths(family f, int32_t *out, int32_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1 + (uint64_t)f * 0x632BE59BD9B4E019ull;
    for (int32_t i = 0; i < n; i++) {
        int64_t len = 0, lo = 1, hi = 1;
        switch (f) {
        case FAMILY_MLMDEFAULT:
            /* exponent in [7, 13] with a peak near 9.5: the bell mapped onto 6 octaves */
            len = bell_length(&x, 10 * 65536, 6);
            lo = 128, hi = 8192;
            break;
        case FAMILY_LONGSFT:
            /* sigma 1.2 is 1.73 octaves: 3 octaves per unit of the bell */
            len = bell_length(&x, 11 * 65536, 12);
            lo = 256, hi = 131072;
            break;
        case FAMILY_BIMODAL:
            if ((xorshift(&x) >> 40) % 10 == 0) {
                len = 32768 + (int64_t)((xorshift(&x) >> 20) % (131072 - 32768 + 1));
                lo = 32768, hi = 131072;
            } else {
                /* sigma 0.5 is 0.72 octaves: 1.25 per unit of the bell */
                len = bell_length(&x, 10 * 65536, 5);
                lo = 256, hi = 4096;
            }
            break;
        }
        if (len < lo) len = lo;
        if (len > hi) len = hi;
        out[i] = (int32_t)len;
    }
}

/* The configuration one scheduler runs a scaling row with (dp_balanced: static CP, the smallest power of two holding `longest`); 0 when it cannot. */
static int scaling_config(dcp_scheduler s, int32_t ranks, int32_t max_seqlen, int32_t n, int32_t longest, dcp_config *c)
{
    dcp_config_default(c);
    c->scheduler = s;
    c->max_sequences = n;
    c->max_seqlen_per_rank = max_seqlen;
    c->data_parallel_size = ranks;
    c->cost.step_model = (int32_t)step_model;
    c->plan_effort = plan_effort;
    if (s == DCP_SCHEDULER_DP_BALANCED) {
        int32_t cp = 1;
        while ((int64_t)cp * max_seqlen < longest) cp *= 2;
        if (cp > ranks) return 0;
        c->context_parallel_size = cp;
        c->data_parallel_size = ranks / cp;
    }
    return 1;
}

/* Plan a scaling row once (hash, microbatches, makespan, efficiency), then `repeats` times for the median time; -1 when it cannot plan. */
static double time_plan(dcp_scheduler s, int32_t ranks, int32_t max_seqlen, const int32_t *lengths, int32_t n,
                        int32_t longest, int repeats, int32_t *microbatches, double *efficiency, int64_t *makespan,
                        uint64_t *hash)
{
    dcp_config c;
    if (!scaling_config(s, ranks, max_seqlen, n, longest, &c)) return -1;
    dcp_context *ctx = NULL;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return -1;
    const dcp_plan *plan = NULL;
    if (dcp_plan_compute(ctx, lengths, n, &plan) != DCP_OK) {
        dcp_context_destroy(ctx);
        return -1;
    }
    dcp_plan_stats stats;
    dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    *microbatches = stats.num_microbatches;
    *efficiency = (double)stats.model_lower_bound / (double)stats.model_makespan;
    *makespan = stats.model_makespan;
    *hash = dcp_plan_hash(plan);
    double times[64];
    if (repeats > 64) repeats = 64;
    for (int r = 0; r < repeats; r++) {
        double t0 = now_ms();
        dcp_plan_compute(ctx, lengths, n, &plan);
        times[r] = now_ms() - t0;
    }
    dcp_context_destroy(ctx);
    return median(times, repeats);
}

/* The scaling table: one trace family, sequence count, rank count and max_seqlen_per_rank a row. */
typedef struct scaling_row_spec {
    family fam;
    int32_t n, ranks, max_seqlen;
} scaling_row_spec;

static const scaling_row_spec scaling_rows[] = {
    /* sequences on 128 ranks */
    {FAMILY_MLMDEFAULT, 1024, 128, 4096},
    {FAMILY_MLMDEFAULT, 4096, 128, 4096},
    {FAMILY_MLMDEFAULT, 16384, 128, 4096},
    {FAMILY_MLMDEFAULT, 65536, 128, 4096},
    {FAMILY_MLMDEFAULT, 131072, 128, 4096},
    /* 16384 sequences on 8 .. 16384 ranks (ranks are only numbers to the planner) */
    {FAMILY_MLMDEFAULT, 16384, 8, 4096},
    {FAMILY_MLMDEFAULT, 16384, 32, 4096},
    {FAMILY_MLMDEFAULT, 16384, 128, 4096},
    {FAMILY_MLMDEFAULT, 16384, 512, 4096},
    {FAMILY_MLMDEFAULT, 16384, 2048, 4096},
    {FAMILY_MLMDEFAULT, 16384, 8192, 4096},
    {FAMILY_MLMDEFAULT, 16384, 16384, 4096},
    /* 65536 and 131072 sequences on 2048 .. 65536 ranks */
    {FAMILY_MLMDEFAULT, 65536, 2048, 4096},
    {FAMILY_MLMDEFAULT, 65536, 8192, 4096},
    {FAMILY_MLMDEFAULT, 65536, 16384, 4096},
    {FAMILY_MLMDEFAULT, 65536, 65536, 4096},
    {FAMILY_MLMDEFAULT, 131072, 2048, 4096},
    {FAMILY_MLMDEFAULT, 131072, 8192, 4096},
    {FAMILY_MLMDEFAULT, 131072, 32768, 4096},
    {FAMILY_MLMDEFAULT, 131072, 65536, 4096},
    /* long context: longsft- and bimodal-like lengths, max_seqlen_per_rank 8192 .. 32768 */
    {FAMILY_LONGSFT, 16384, 512, 16384},
    {FAMILY_LONGSFT, 16384, 2048, 8192},
    {FAMILY_LONGSFT, 16384, 2048, 16384},
    {FAMILY_LONGSFT, 16384, 2048, 32768},
    {FAMILY_LONGSFT, 16384, 16384, 16384},
    {FAMILY_LONGSFT, 65536, 8192, 16384},
    {FAMILY_LONGSFT, 65536, 65536, 32768},
    {FAMILY_BIMODAL, 16384, 512, 16384},
    {FAMILY_BIMODAL, 16384, 2048, 16384},
    {FAMILY_BIMODAL, 16384, 8192, 32768},
    {FAMILY_BIMODAL, 65536, 16384, 32768},
    {FAMILY_BIMODAL, 65536, 65536, 16384},
};
#define NUM_SCALING_ROWS ((int)(sizeof scaling_rows / sizeof scaling_rows[0]))

static int32_t *scaling_lengths(const scaling_row_spec *row, int32_t *longest)
{
    int32_t *lengths = malloc((size_t)row->n * sizeof *lengths);
    if (!lengths) return NULL;
    synthetic_lengths(row->fam, lengths, row->n, 1);
    *longest = 0;
    for (int32_t i = 0; i < row->n; i++)
        if (lengths[i] > *longest) *longest = lengths[i];
    return lengths;
}

static void run_scaling(int repeats, int only_scheduler, int only_row)
{
    /* speed targets over the rows: up to 16384 sequences on up to 16384 ranks, and 65536 on 65536 */
    double slowest_small[NUM_SCHEDULERS] = {0}, slowest_large[NUM_SCHEDULERS] = {0};
    int where_small[NUM_SCHEDULERS] = {0}, failed[NUM_SCHEDULERS] = {0};
    printf("\nScaling: plan time in ms (median of %d, validation included), microbatches, efficiency (lower bound /\n"
           "makespan); synthetic traces (dp_balanced: static CP, the smallest power of two holding the longest sequence)\n",
           repeats);
    printf("%-10s %-10s %-8s %-6s | %-24s | %-24s | %-24s\n", "family", "sequences", "ranks", "M",
           "dp_balanced: ms mbs eff", "dynamic_cp: ms mbs eff", "balanced: ms mbs eff");
    for (int r = 0; r < NUM_SCALING_ROWS; r++) {
        if (only_row >= 0 && r != only_row) continue;
        const scaling_row_spec *row = &scaling_rows[r];
        int32_t longest = 0;
        int32_t *lengths = scaling_lengths(row, &longest);
        if (!lengths) continue;
        printf("%-10s %-10d %-8d %-6d", family_names[row->fam], row->n, row->ranks, row->max_seqlen);
        for (int si = 0; si < NUM_SCHEDULERS; si++) {
            if (only_scheduler >= 0 && (int)schedulers[si] != only_scheduler) {
                printf(" | %10s %5s %6s", "-", "-", "-");
                continue;
            }
            int32_t mbs = 0;
            double eff = 0;
            int64_t makespan = 0;
            uint64_t hash = 0;
            double ms = time_plan(schedulers[si], row->ranks, row->max_seqlen, lengths, row->n, longest, repeats, &mbs,
                                  &eff, &makespan, &hash);
            if (ms < 0) printf(" | %10s %5s %6s", "-", "-", "-");
            else printf(" | %10.3f %5d %6.4f", ms, mbs, eff);
            if (ms < 0 && schedulers[si] != DCP_SCHEDULER_DP_BALANCED) failed[si]++;
            if (row->n <= 16384 && row->ranks <= 16384 && ms > slowest_small[si]) {
                slowest_small[si] = ms;
                where_small[si] = r;
            }
            if (row->n == 65536 && row->ranks == 65536 && ms > slowest_large[si]) slowest_large[si] = ms;
            fflush(stdout);
        }
        printf("\n");
        free(lengths);
    }
    if (only_row >= 0) return; /* one row says nothing of the slowest */
    printf("\nSpeed targets over the rows (plan time, validation included)\n");
    for (int si = 0; si < NUM_SCHEDULERS; si++) {
        if (only_scheduler >= 0 && (int)schedulers[si] != only_scheduler) continue;
        const scaling_row_spec *w = &scaling_rows[where_small[si]];
        printf("  %-12s up to 16384 sequences on up to 16384 ranks: slowest %8.3f ms (%s %d x %d, M %d)  target <= 5 ms: %s\n",
               dcp_scheduler_name(schedulers[si]), slowest_small[si], family_names[w->fam], w->n, w->ranks,
               w->max_seqlen, slowest_small[si] <= 5.0 ? "met" : "MISSED");
        printf("  %-12s 65536 sequences on 65536 ranks: slowest %8.3f ms  target <= 50 ms: %s%s\n",
               dcp_scheduler_name(schedulers[si]), slowest_large[si], slowest_large[si] <= 50.0 ? "met" : "MISSED",
               failed[si] ? "  (some rows failed to plan)" : "");
    }
}

/* --makespans: every matrix cell (as --hashes) and every scaling row, one line each: plan hash and makespan. */
static void print_makespans(trace *traces, int num_traces, int only_scheduler, int only_config)
{
    print_hashes(traces, num_traces, only_scheduler, only_config);
    for (int r = 0; r < NUM_SCALING_ROWS; r++) {
        const scaling_row_spec *row = &scaling_rows[r];
        int32_t longest = 0;
        int32_t *lengths = scaling_lengths(row, &longest);
        if (!lengths) continue;
        for (int si = 0; si < NUM_SCHEDULERS; si++) {
            if (only_scheduler >= 0 && (int)schedulers[si] != only_scheduler) continue;
            int32_t mbs = 0;
            double eff = 0;
            int64_t makespan = 0;
            uint64_t hash = 0;
            double ms = time_plan(schedulers[si], row->ranks, row->max_seqlen, lengths, row->n, longest, 0, &mbs, &eff,
                                  &makespan, &hash);
            if (ms < 0)
                printf("scaling:%s_n%d|r%d m%d|%s|skipped\n", family_names[row->fam], row->n, row->ranks,
                       row->max_seqlen, dcp_scheduler_name(schedulers[si]));
            else
                printf("scaling:%s_n%d|r%d m%d|%s|%016llx|%lld\n", family_names[row->fam], row->n, row->ranks,
                       row->max_seqlen, dcp_scheduler_name(schedulers[si]), (unsigned long long)hash,
                       (long long)makespan);
            fflush(stdout);
        }
        free(lengths);
    }
}

/*
 * --effort-table: balanced's effort levels on the scaling rows from 16384 sequences on 2048 ranks up:
 * dynamic_cp, balanced fast and balanced full planned in turn, `repeats` rounds, the median time of
 * each; the makespans (the configured step model's) and the ratios to dynamic_cp's.
 */
static double thread_cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void run_effort_table(int repeats, int only_row)
{
    printf("\nEffort levels: plan time in ms of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID: a shared machine's\n"
           "other processes do not count), median of %d rounds, dynamic_cp / fast / full planned in turn in each\n"
           "round, validation included; makespan relative to dynamic_cp's; check ms: dcp_plan_matches() of the\n"
           "full level's plan, what a step handed that plan made ahead does instead of planning\n", repeats);
    printf("%-10s %-9s %-6s %-6s | %9s | %9s %6s %9s | %9s %9s | %8s\n", "family", "sequences", "ranks", "M", "dcp ms",
           "fast ms", "x dcp", "makespan", "full ms", "makespan", "check ms");
    for (int r = 0; r < NUM_SCALING_ROWS; r++) {
        const scaling_row_spec *row = &scaling_rows[r];
        if ((only_row >= 0 && r != only_row) || row->n < 16384 || row->ranks < 2048) continue;
        int32_t longest = 0;
        int32_t *lengths = scaling_lengths(row, &longest);
        if (!lengths) continue;
        dcp_context *ctx[3] = {NULL, NULL, NULL};
        int64_t makespan[3] = {0, 0, 0};
        int ok = 1;
        for (int k = 0; k < 3 && ok; k++) {
            dcp_config c;
            scaling_config(k == 0 ? DCP_SCHEDULER_DYNAMIC_CP : DCP_SCHEDULER_BALANCED, row->ranks, row->max_seqlen,
                           row->n, longest, &c);
            c.plan_effort = k == 1 ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
            const dcp_plan *plan = NULL;
            dcp_plan_stats stats;
            ok = dcp_context_create(&c, &ctx[k]) == DCP_OK && dcp_plan_compute(ctx[k], lengths, row->n, &plan) == DCP_OK &&
                 dcp_plan_stats_compute(ctx[k], plan, lengths, row->n, &stats) == DCP_OK;
            makespan[k] = ok ? stats.model_makespan : 0;
        }
        double times[4][64];
        const int rounds = repeats > 64 ? 64 : repeats < 1 ? 1 : repeats;
        for (int i = 0; ok && i < rounds; i++) {
            const dcp_plan *plan = NULL;
            for (int k = 0; k < 3; k++) {
                const double t0 = thread_cpu_ms();
                dcp_plan_compute(ctx[k], lengths, row->n, &plan);
                times[k][i] = thread_cpu_ms() - t0;
            }
            /* what a step does instead of planning when handed the full level's plan made ahead */
            const double t0 = thread_cpu_ms();
            ok = dcp_plan_matches(ctx[2], plan, lengths, row->n) == DCP_OK;
            times[3][i] = thread_cpu_ms() - t0;
        }
        if (ok) {
            const double d = median(times[0], rounds), f = median(times[1], rounds), u = median(times[2], rounds);
            printf("%-10s %-9d %-6d %-6d | %9.3f | %9.3f %6.2f %9.4f | %9.3f %9.4f | %8.3f\n", family_names[row->fam],
                   row->n, row->ranks, row->max_seqlen, d, f, f / d, (double)makespan[1] / (double)makespan[0], u,
                   (double)makespan[2] / (double)makespan[0], median(times[3], rounds));
        } else {
            printf("%-10s %-9d %-6d %-6d | cannot plan\n", family_names[row->fam], row->n, row->ranks, row->max_seqlen);
        }
        fflush(stdout);
        for (int k = 0; k < 3; k++) dcp_context_destroy(ctx[k]);
        free(lengths);
    }
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *only_trace = NULL;
    int repeats = 5, matrix = 1, scaling = 1, only_scheduler = -1, only_config = -1, only_row = -1, hashes = 0,
        makespans = 0, effort_table = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--traces") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) repeats = 1;
        else if (!strcmp(argv[i], "--hashes")) hashes = 1;
        else if (!strcmp(argv[i], "--makespans")) makespans = 1;
        else if (!strcmp(argv[i], "--no-matrix")) matrix = 0;
        else if (!strcmp(argv[i], "--no-scaling")) scaling = 0;
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) only_trace = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) only_config = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--row") && i + 1 < argc) only_row = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--effort-table")) effort_table = 1;
        else if (!strcmp(argv[i], "--effort") && i + 1 < argc) {
            const char *e = argv[++i];
            if (strcmp(e, "full") && strcmp(e, "fast")) {
                fprintf(stderr, "unknown effort %s (full or fast)\n", e);
                return 2;
            }
            plan_effort = strcmp(e, "fast") ? DCP_PLAN_EFFORT_FULL : DCP_PLAN_EFFORT_FAST;
        }
        else if (!strcmp(argv[i], "--step-model") && i + 1 < argc) {
            if (dcp_step_model_from_name(argv[++i], &step_model) != DCP_OK) {
                fprintf(stderr, "unknown step model %s (barrier or dependency)\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--scheduler") && i + 1 < argc) {
            dcp_scheduler s;
            if (dcp_scheduler_from_name(argv[++i], &s) != DCP_OK) {
                fprintf(stderr, "unknown scheduler %s\n", argv[i]);
                return 2;
            }
            only_scheduler = (int)s;
        } else {
            fprintf(stderr,
                    "usage: %s [--traces DIR] [--repeats R] [--quick] [--hashes] [--makespans] [--no-matrix] [--no-scaling] "
                    "[--scheduler NAME] [--trace NAME] [--config INDEX] [--row INDEX] [--step-model barrier|dependency] [--effort full|fast] [--effort-table]\n",
                    argv[0]);
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    static trace traces[MAX_TRACES];
    int num_traces = 0;
    if (effort_table) {
        print_machine();
        run_effort_table(repeats, only_row);
        return 0;
    }
    if (matrix) {
        if (!dir) dir = DCP_SOURCE_DIR "/tests/data/workloads";
        num_traces = load_traces(dir, only_trace, traces);
        if (num_traces <= 0) {
            fprintf(stderr, "no traces (*.txt) in %s\n", dir ? dir : "(none)");
            return 1;
        }
        if (makespans) {
            print_makespans(traces, num_traces, only_scheduler, only_config);
            for (int i = 0; i < num_traces; i++) free(traces[i].lengths);
            return 0;
        }
        if (hashes) {
            print_hashes(traces, num_traces, only_scheduler, only_config);
            for (int i = 0; i < num_traces; i++) free(traces[i].lengths);
            return 0;
        }
        printf("bench_plan: %d traces from %s, %d configurations, median of %d runs, %s step model\n", num_traces,
               dir, NUM_CONFIGS, repeats, dcp_step_model_name(step_model));
        print_machine();
        printf("\n");
        run_matrix(traces, num_traces, repeats, only_scheduler, only_config);
    }
    if (scaling) {
        if (!matrix) print_machine();
        run_scaling(repeats, only_scheduler, only_row);
    }
    for (int i = 0; i < num_traces; i++) free(traces[i].lengths);
    return 0;
}
