/*
 * test_plan_effort.c - balanced's effort levels (dcp_config.plan_effort).
 *
 * The full level is the default and is today's search (its plans are the
 * goldens' and the benchmark's, bit for bit: test_golden.c, and
 * docs/planning.md says how the benchmark matrix was compared).  Here: the
 * fast level plans every batch dynamic_cp plans, with a valid plan whose
 * makespan is never above dynamic_cp's under the configured step model; it is
 * deterministic (two contexts, planned twice, another batch between); the
 * levels are distinct configurations; an unknown level is refused.
 */
#include "dcp_test.h"

#include <stdio.h>
#include <string.h>

static int32_t lengths[16384];

static const struct {
    int32_t ranks, max_seqlen, vpp_group, min_cp, seq_cap;
} configs[] = {
    {8, 2048, 0, 1, 0},   {32, 4096, 0, 1, 0}, {32, 8192, 4, 1, 0}, {128, 4096, 0, 1, 0},
    {512, 4096, 0, 1, 0}, {24, 4096, 0, 2, 0}, {32, 4096, 0, 1, 3}, {2048, 8192, 0, 1, 0},
};

static void config_of(dcp_config *c, int k, int32_t n, dcp_scheduler s, dcp_plan_effort effort, dcp_step_model model)
{
    dcp_config_default(c);
    c->scheduler = s;
    c->plan_effort = effort;
    c->cost.step_model = model;
    c->max_sequences = n;
    c->data_parallel_size = configs[k].ranks;
    c->max_seqlen_per_rank = configs[k].max_seqlen;
    c->min_cp_size = configs[k].min_cp;
    c->max_sequences_per_microbatch = configs[k].seq_cap;
    if (configs[k].vpp_group > 1) {
        c->pipeline_parallel_size = 2;
        c->virtual_pipeline_size = 2;
        c->microbatch_group_size_per_vp_stage = configs[k].vpp_group;
    }
}

/* Plan once; status, and on success the plan's hash and model makespan. */
static dcp_status plan_of(const dcp_config *c, int32_t n, uint64_t *hash, int64_t *makespan)
{
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(c, &ctx);
    if (st != DCP_OK) return st;
    const dcp_plan *plan = NULL;
    st = dcp_plan_compute(ctx, lengths, n, &plan);
    dcp_plan_stats stats;
    if (st == DCP_OK) {
        DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, lengths, n, NULL), DCP_OK);
        st = dcp_plan_stats_compute(ctx, plan, lengths, n, &stats);
    }
    if (st == DCP_OK) {
        *hash = dcp_plan_hash(plan);
        *makespan = stats.model_makespan;
    }
    dcp_context_destroy(ctx);
    return st;
}

DCP_TEST(fast_is_never_above_dynamic_cp_and_plans_whatever_it_plans)
{
    static const char *traces[] = {"mlmdefault_n1024_seed1.txt", "longsft_n1024_seed1.txt", "bimodal_n4096_seed1.txt",
                                   "uniform32k_n1024_seed1.txt", "mlmdefault_n16384_seed1.txt"};
    int lower = 0, cells = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        char rel[128];
        snprintf(rel, sizeof rel, "workloads/%s", traces[t]);
        const int32_t n = dcp_test_read_trace(dcp_test_data_path(rel), lengths, 16384);
        DCP_REQUIRE(n > 0);
        for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
            if (configs[k].ranks >= 2048 && n < 16384) continue; /* the scale row: the large trace only */
            for (int m = DCP_STEP_MODEL_BARRIER; m <= DCP_STEP_MODEL_DEPENDENCY; m++) {
                dcp_config dc, fc;
                config_of(&dc, (int)k, n, DCP_SCHEDULER_DYNAMIC_CP, DCP_PLAN_EFFORT_FULL, (dcp_step_model)m);
                config_of(&fc, (int)k, n, DCP_SCHEDULER_BALANCED, DCP_PLAN_EFFORT_FAST, (dcp_step_model)m);
                uint64_t dh = 0, fh = 0;
                int64_t dm = 0, fm = 0;
                const dcp_status ds = plan_of(&dc, n, &dh, &dm), fs = plan_of(&fc, n, &fh, &fm);
                if (ds != DCP_OK) continue; /* too long for the configuration: every scheduler refuses */
                cells++;
                if (fs != DCP_OK || fm > dm)
                    dcp_test_fail(__FILE__, __LINE__, "%s config %zu model %d: fast %s makespan %lld, dynamic_cp %lld",
                                  traces[t], k, m, dcp_status_str(fs), (long long)fm, (long long)dm);
                lower += fm < dm;
            }
        }
    }
    DCP_CHECK(cells >= 40);
    DCP_CHECK(lower * 2 > cells); /* the search finds something on most batches: not dynamic_cp's plan as it is */
}

DCP_TEST(every_level_is_deterministic_and_a_configuration_of_its_own)
{
    const int32_t n = dcp_test_read_trace(dcp_test_data_path("workloads/bimodal_n1024_seed1.txt"), lengths, 16384);
    DCP_REQUIRE(n == 1024);
    static int32_t other[64];
    for (int i = 0; i < 64; i++) other[i] = 500 + 97 * i;
    uint64_t hashes[2] = {0, 0};
    for (int e = DCP_PLAN_EFFORT_FULL; e <= DCP_PLAN_EFFORT_FAST; e++) {
        dcp_config c;
        config_of(&c, 1, n, DCP_SCHEDULER_BALANCED, (dcp_plan_effort)e, DCP_STEP_MODEL_BARRIER);
        dcp_context *a = NULL, *b = NULL;
        DCP_REQUIRE_OK(dcp_context_create(&c, &a));
        DCP_REQUIRE_OK(dcp_context_create(&c, &b));
        const dcp_plan *p = NULL;
        DCP_REQUIRE_OK(dcp_plan_compute(a, lengths, n, &p));
        hashes[e] = dcp_plan_hash(p);
        DCP_REQUIRE_OK(dcp_plan_compute(b, other, 64, &p)); /* another batch first on the other context */
        DCP_REQUIRE_OK(dcp_plan_compute(b, lengths, n, &p));
        DCP_CHECK(dcp_plan_hash(p) == hashes[e]);
        DCP_CHECK_NO_ALLOC(dcp_plan_compute(a, lengths, n, &p));
        DCP_CHECK(dcp_plan_hash(p) == hashes[e]);
        dcp_context_destroy(a);
        dcp_context_destroy(b);
    }
    DCP_CHECK(hashes[0] != hashes[1]); /* the levels search differently on this batch */

    dcp_config c;
    dcp_config_default(&c);
    DCP_CHECK_EQ_INT(c.plan_effort, DCP_PLAN_EFFORT_FULL); /* the default is the whole search */
    c.plan_effort = (dcp_plan_effort)2;
    char message[128];
    DCP_CHECK_STATUS(dcp_config_validate(&c, message, sizeof message), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_CONTAINS(message, "plan_effort 2");
    c.plan_effort = (dcp_plan_effort)-1;
    DCP_CHECK_STATUS(dcp_config_validate(&c, message, sizeof message), DCP_ERR_INVALID_CONFIG);
}

/* The levels are configurations of their own: ranks whose levels differ meet as DCP_ERR_INVALID_CONFIG. */
typedef struct levels_run {
    dcp_inproc_world *world;
    dcp_config config[2];
    dcp_status got[2];
} levels_run;

static void gather_on(int32_t rank, void *p)
{
    levels_run *run = p;
    run->got[rank] = DCP_ERR_ALLOC;
    dcp_context *ctx = NULL;
    dcp_comm comm;
    if (dcp_context_create(&run->config[rank], &ctx) != DCP_OK || dcp_inproc_comm(run->world, rank, &comm) != DCP_OK)
        return;
    const int32_t mine[2] = {100 + rank, 200};
    const int32_t *global = NULL, *offsets = NULL;
    int32_t count = 0;
    run->got[rank] = dcp_gather(ctx, &comm, 0, mine, 2, &global, &count, &offsets);
    dcp_context_destroy(ctx);
}

DCP_TEST(ranks_with_different_levels_are_told_apart)
{
    levels_run run;
    memset(&run, 0, sizeof run);
    for (int r = 0; r < 2; r++) {
        dcp_config_default(&run.config[r]);
        run.config[r].scheduler = DCP_SCHEDULER_BALANCED;
        run.config[r].data_parallel_size = 2;
        run.config[r].plan_effort = r ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
    }
    DCP_REQUIRE_OK(dcp_inproc_world_create(2, 10000, &run.world));
    DCP_REQUIRE_OK(dcp_inproc_run(2, gather_on, &run));
    DCP_CHECK_STATUS(run.got[0], DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_STATUS(run.got[1], DCP_ERR_INVALID_CONFIG);
    dcp_inproc_world_destroy(run.world);
}
