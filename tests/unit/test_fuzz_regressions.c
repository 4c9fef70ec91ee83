/*
 * test_fuzz_regressions.c - inputs the fuzz targets (fuzz/) found a bug with,
 * reduced to plain cases so the fix stays fixed without a fuzzer.
 */
#include "dcp_test.h"

#include <stdio.h>
#include <stdlib.h>

/*
 * fuzz_plan: dp_balanced with a static CP size that is not a power of two
 * (DP 2 x CP 3) produced plans of 3-rank groups, which the validator rejected
 * as DCP_ERR_INVALID_PLAN on every batch.  A static CP group (CP ranks
 * starting at a multiple of CP) is a valid block; a 3-rank block anywhere
 * else is not.
 */
DCP_TEST(dp_balanced_static_cp_not_power_of_two)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    c.data_parallel_size = 2;
    c.context_parallel_size = 3;
    c.max_sequences = 16;
    c.max_seqlen_per_rank = 100;
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    const int32_t lengths[] = {250, 10, 20, 300, 40, 50};
    const dcp_plan *plan = NULL;
    DCP_REQUIRE_OK(dcp_plan_compute(ctx, lengths, 6, &plan));
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, lengths, 6, NULL), DCP_OK);
    DCP_REQUIRE(plan->num_groups >= 2);
    for (int32_t g = 0; g < plan->num_groups; g++) {
        DCP_CHECK_EQ_INT(plan->group_cp_size[g], 3);
        DCP_CHECK_EQ_INT(plan->group_first_rank[g] % 3, 0);
    }

    /* a 3-rank group off the CP grid is not a block: ranks {0}, [1,4), [4,6) */
    static int32_t mb[3], first_rank[4], cp[4], first_id[5], ids[6];
    dcp_plan bad = {.num_ranks = 6, .num_microbatches = 1, .num_groups = 3, .num_ids = 6,
                    .microbatch_first_group = mb, .group_first_rank = first_rank, .group_cp_size = cp,
                    .group_first_id = first_id, .ids = ids, .max_microbatches = 2, .max_groups = 4, .max_ids = 6};
    const int32_t small[] = {250, 10, 20, 30, 40, 50};
    const int32_t off_grid[3][2] = {{0, 1}, {1, 3}, {4, 2}}, off_starts[4] = {0, 2, 3, 6}, off_ids[6] = {1, 2, 0, 3, 4, 5};
    mb[0] = 0;
    mb[1] = 3;
    for (int g = 0; g < 3; g++) {
        first_rank[g] = off_grid[g][0];
        cp[g] = off_grid[g][1];
    }
    for (int g = 0; g < 4; g++) first_id[g] = off_starts[g];
    for (int i = 0; i < 6; i++) ids[i] = off_ids[i];
    dcp_plan_violation v;
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, &bad, small, 6, &v), DCP_ERR_INVALID_PLAN);
    DCP_CHECK_EQ_INT(v.invariant, DCP_INVARIANT_BLOCK_SHAPE);
    DCP_CHECK_CONTAINS(v.message, "size 3");
    /* on the grid a 3-rank group is accepted: [0,3) holds id 0, rank 3 ids 1 and 2, [4,6) ids 3..5 */
    const int32_t on_grid[3][2] = {{0, 3}, {3, 1}, {4, 2}}, on_starts[4] = {0, 1, 3, 6};
    for (int g = 0; g < 3; g++) {
        first_rank[g] = on_grid[g][0];
        cp[g] = on_grid[g][1];
    }
    for (int g = 0; g < 4; g++) first_id[g] = on_starts[g];
    for (int i = 0; i < 6; i++) ids[i] = i;
    DCP_CHECK_STATUS(dcp_plan_validate(ctx, &bad, small, 6, &v), DCP_OK);
    dcp_context_destroy(ctx);
}

/*
 * fuzz_config: balanced on DP 8 x CP 65535 ranks indexed its per-CP-size
 * tables (one class per power of two up to 2^16, and one for "all N ranks")
 * past their end once a group grew beyond 65536 ranks: a 2^17-rank group
 * shared the class of the whole pool and a 2^18-rank group read past the
 * tables.  dcp_config_validate() allows 2^20 ranks, so CP groups go up to
 * 2^20 ranks.  Here sequences whose minimal CP sizes are 2^17, 2^18 and the
 * whole pool, on 2^20 ranks (the most dcp_config_validate() accepts) and on
 * 3 x 2^17 (not a power of two), with M = 1.
 */
DCP_TEST(balanced_cp_groups_beyond_65536_ranks)
{
    const int32_t pools[2] = {1 << 20, 3 << 17};
    for (int i = 0; i < 2; i++) {
        const int32_t ranks = pools[i];
        const int32_t lengths[5] = {1 << 18, 1 << 17, 100000, 1 << 17, ranks};
        for (int s = DCP_SCHEDULER_DYNAMIC_CP; s <= DCP_SCHEDULER_BALANCED; s++) {
            dcp_config c;
            dcp_config_default(&c);
            c.scheduler = (dcp_scheduler)s;
            c.data_parallel_size = ranks;
            c.max_sequences = 8;
            c.max_seqlen_per_rank = 1;
            dcp_context *ctx = NULL;
            DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
            const dcp_plan *plan = NULL;
            dcp_status st = dcp_plan_compute(ctx, lengths, 5, &plan);
            if (st != DCP_OK)
                dcp_test_fail(__FILE__, __LINE__, "%s on %d ranks: %s: %s", dcp_scheduler_name(c.scheduler), ranks,
                              dcp_status_str(st), dcp_context_last_error(ctx));
            else {
                DCP_CHECK_STATUS(dcp_plan_validate(ctx, plan, lengths, 5, NULL), DCP_OK);
                int32_t widest = 0;
                for (int32_t g = 0; g < plan->num_groups; g++)
                    if (plan->group_cp_size[g] > widest) widest = plan->group_cp_size[g];
                DCP_CHECK(widest >= (1 << 18));
            }
            dcp_context_destroy(ctx);
        }
    }
}

/*
 * fuzz_config: dynamic_cp with PP 251 needs a scratch region that is not a
 * whole number of 64-byte blocks (stage times for PP x microbatches).  The
 * arena keeps whole blocks only, so at some misalignments
 * dcp_context_init_static refused the exact dcp_workspace_size bytes
 * (DCP_ERR_WORKSPACE_TOO_SMALL).  Every offset must take the exact size, for
 * every scheduler and pipeline size.
 */
DCP_TEST(init_static_exact_size_with_a_scratch_of_partial_blocks)
{
    for (int s = 0; s < 3; s++)
        for (int32_t pp = 1; pp <= 256; pp += (pp < 8 ? 1 : 13)) {
            dcp_config c;
            dcp_config_default(&c);
            c.scheduler = (dcp_scheduler)s;
            c.pipeline_parallel_size = pp;
            c.microbatch_group_size_per_vp_stage = 7364607;
            c.max_sequences = 64;
            c.max_seqlen_per_rank = 4096;
            size_t need = 0;
            DCP_REQUIRE_OK(dcp_workspace_size(&c, &need));
            unsigned char *memory = malloc(need + 64);
            DCP_REQUIRE(memory);
            for (size_t offset = 0; offset < 64; offset++) {
                dcp_context *ctx = NULL;
                dcp_status st = dcp_context_init_static(memory + offset, need, &c, &ctx);
                if (st != DCP_OK) {
                    DCP_CHECK_STATUS(st, DCP_OK);
                    fprintf(stderr, "scheduler %d PP %d offset %zu: %zu bytes refused\n", s, (int)pp, offset, need);
                    break;
                }
                DCP_CHECK(dcp_context_workspace_bytes(ctx) <= need);
                dcp_context_destroy(ctx);
            }
            free(memory);
        }
}
