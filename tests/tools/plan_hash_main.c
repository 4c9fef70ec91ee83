/*
 * plan_hash_main.c - dcp_plan_hash: print the plan hash of every scheduler on
 * every trace given, for a fixed set of configurations.
 *
 *   dcp_plan_hash TRACE...
 *
 * One line per (trace, configuration, scheduler; balanced also at the fast
 * effort level, "balanced/fast"): the status, the plan hash
 * (dcp_plan_hash: FNV-1a over the plan's arrays) and the step-model makespan.
 * tests/cli/cli_determinism.sh builds this program with several compilers and
 * optimisation levels and requires identical output: the planning path is
 * integer-only, so every build must compute the same plans.
 */
#include "dcpack.h"
#include "../core/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LENGTHS = 1 << 16 };

static const struct {
    int32_t ranks, max_seqlen, vpp_group, min_cp, seq_cap;
} configs[] = {
    {8, 2048, 0, 1, 0}, {32, 4096, 0, 1, 0}, {32, 8192, 4, 1, 0}, {128, 4096, 0, 1, 0},
    {512, 4096, 0, 1, 0}, {24, 4096, 0, 2, 0}, {32, 4096, 0, 1, 3},
};

static int32_t lengths[MAX_LENGTHS];

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TRACE...\n", argv[0]);
        return 2;
    }
    for (int t = 1; t < argc; t++) {
        FILE *f = fopen(argv[t], "r");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", argv[t]);
            return 1;
        }
        int32_t n = 0;
        long v;
        while (n < MAX_LENGTHS && fscanf(f, "%ld", &v) == 1) lengths[n++] = (int32_t)v;
        fclose(f);
        const char *name = strrchr(argv[t], '/') ? strrchr(argv[t], '/') + 1 : argv[t];
        for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
            for (int s = DCP_SCHEDULER_DP_BALANCED; s <= DCP_SCHEDULER_BALANCED + 1; s++) {
                /* the three schedulers, then balanced at the fast effort level */
                const int fast = s > DCP_SCHEDULER_BALANCED;
                dcp_config config;
                dcp_config_default(&config);
                config.scheduler = fast ? DCP_SCHEDULER_BALANCED : (dcp_scheduler)s;
                config.plan_effort = fast ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
                config.max_sequences = n;
                config.max_seqlen_per_rank = configs[c].max_seqlen;
                config.min_cp_size = configs[c].min_cp;
                config.max_sequences_per_microbatch = configs[c].seq_cap;
                config.data_parallel_size = configs[c].ranks;
                if (s == DCP_SCHEDULER_DP_BALANCED) { /* static CP 8 */
                    config.data_parallel_size = configs[c].ranks / 8;
                    config.context_parallel_size = 8;
                }
                if (configs[c].vpp_group > 1) {
                    config.pipeline_parallel_size = 2;
                    config.virtual_pipeline_size = 2;
                    config.microbatch_group_size_per_vp_stage = configs[c].vpp_group;
                }
                dcp_context *ctx = NULL;
                dcp_status st = dcp_context_create(&config, &ctx);
                uint64_t hash = 0;
                dcp_plan_stats stats;
                memset(&stats, 0, sizeof stats);
                if (st == DCP_OK) {
                    const dcp_plan *plan = NULL;
                    st = dcp_plan_compute(ctx, lengths, n, &plan);
                    if (st == DCP_OK) {
                        hash = dcp_plan_hash(plan);
                        dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
                    }
                    dcp_context_destroy(ctx);
                }
                printf("%s r%d m%d vpp%d min_cp%d cap%d %-11s %-20s %016llx %lld\n", name, configs[c].ranks,
                       configs[c].max_seqlen, configs[c].vpp_group, configs[c].min_cp, configs[c].seq_cap,
                       fast ? "balanced/fast" : dcp_scheduler_name((dcp_scheduler)s), dcp_status_str(st),
                       (unsigned long long)hash,
                       (long long)stats.makespan);
            }
        }
    }
    return 0;
}
