/*
 * balanced_reference.c - with few sequences per rank, the plan of the
 * scheduler the driver offers as a candidate (dynamic_cp's:
 * pipeline/assign/assign.c) as one more candidate.  It is read into a kept slot of
 * its own once every pass, polish and search has run (so they run as they
 * would without it): the plan emitted is never above either, under the
 * barrier model (the least makespan is emitted) and under the dependency
 * model (its layouts are among those balanced_place.c weighs).
 *
 * State: reads in; writes its kept slot (kept.plan[NUM_KEPT]) and pass,
 * from which it is kept; makes dynamic_cp's plan in kept.ref_region.
 */
#include "balanced_internal.h"
#include "../../../core/plan.h"

/* The candidate's plan tables and each id's position, for n sequences, from `a` (NULL where they do not fit). */
void dcp__balanced_reference_tables(dcp_plan *plan, int32_t **position, dcp__arena *a, int32_t n)
{
    const size_t un = (size_t)n;
    plan->microbatch_first_group = DCP_ARENA_NEW(a, int32_t, un + 1);
    plan->group_first_rank = DCP_ARENA_NEW(a, int32_t, un);
    plan->group_cp_size = DCP_ARENA_NEW(a, int32_t, un);
    plan->group_first_id = DCP_ARENA_NEW(a, int32_t, un + 1);
    plan->ids = DCP_ARENA_NEW(a, int32_t, un);
    plan->max_microbatches = plan->max_groups = plan->max_ids = n;
    *position = DCP_ARENA_NEW(a, int32_t, un);
}

/*
 * Plan the batch with in->candidate and read its plan into kept slot
 * b->kept.num, counted in.  Its tables and scratch are b->kept.ref_region, whose
 * arrays restore_plan() rebuilds right after.  Returns the slot, or -1 when
 * the candidate has no plan for the batch.
 */
int dcp__balanced_read_reference(balanced *b, const dcp__schedule_input *in, int32_t max_microbatches)
{
    dcp__arena scratch;
    dcp__arena_init(&scratch, b->kept.ref_region, b->kept.ref_region_size);
    dcp_plan plan;
    int32_t *position;
    dcp__balanced_reference_tables(&plan, &position, &scratch, b->in.n);
    dcp_status st = DCP_ERR_CAPACITY;
    if (plan.microbatch_first_group && plan.group_first_rank && plan.group_cp_size && plan.group_first_id && plan.ids &&
        position) {
        if (max_microbatches < plan.max_microbatches) plan.max_microbatches = max_microbatches;
        dcp__plan_clear(&plan, b->in.num_ranks);
        dcp__error ignored; /* no plan from the candidate (more microbatches than allowed) only means no such candidate */
        dcp__schedule_input alone = *in;
        alone.candidate = NULL;
        st = in->candidate->assign(&alone, &plan, &scratch, &ignored);
    }
    if (st != DCP_OK) {
        dcp__arena_release(&scratch);
        return -1;
    }
    for (int32_t p = 0; p < b->in.n; p++) position[b->in.ids[p]] = p;
    const int slot = b->kept.num;
    saved_plan *k = &b->kept.plan[slot];
    k->num_groups = plan.num_groups;
    k->num_mbs = plan.num_microbatches;
    for (int32_t m = 0; m < plan.num_microbatches; m++) {
        for (int32_t g = plan.microbatch_first_group[m]; g < plan.microbatch_first_group[m + 1]; g++) {
            k->g_mb[g] = m;
            k->g_cp[g] = plan.group_cp_size[g];
            for (int32_t x = plan.group_first_id[g]; x < plan.group_first_id[g + 1]; x++)
                k->item_group[position[plan.ids[x]]] = g;
        }
    }
    dcp__arena_release(&scratch); /* the region is the pass state's again */
    dcp__balanced_restore_plan(b, k);
    int32_t live = 0;
    k->makespan = dcp__balanced_evaluate(b, &live);
    b->kept.num++;
    return slot;
}
