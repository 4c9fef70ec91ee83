/*
 * dcp_test_plan.h - a plan over static arrays for tests that build plans by
 * hand (core/plan.h's builder: dcp__plan_open_microbatch, dcp__plan_push_group).
 */
#ifndef DCP_TEST_PLAN_H
#define DCP_TEST_PLAN_H

#include "../core/plan.h"

#include <string.h>

/* Room for 8 microbatches, 16 groups and 32 ids. */
typedef struct {
    int32_t mb_first[9];
    int32_t first_rank[16], cp[16], first_id[17], ids[32];
    dcp_plan plan;
} fixture;

static inline void fixture_init(fixture *f, int32_t ranks)
{
    memset(f, 0, sizeof *f);
    f->plan.microbatch_first_group = f->mb_first;
    f->plan.group_first_rank = f->first_rank;
    f->plan.group_cp_size = f->cp;
    f->plan.group_first_id = f->first_id;
    f->plan.ids = f->ids;
    f->plan.max_microbatches = 8;
    f->plan.max_groups = 16;
    f->plan.max_ids = 32;
    dcp__plan_clear(&f->plan, ranks);
}

#endif
