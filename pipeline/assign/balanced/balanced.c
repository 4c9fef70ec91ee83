/*
 * balanced.c - the `balanced` scheduler's entry point (pipeline/stages.h):
 * the scratch layout and its exact size, the problem read in length-
 * descending order, which construction passes run, and the best plan
 * emitted.  balanced_internal.h describes the algorithm and the files of its
 * phases.
 *
 * State: writes all of it: lays every part out, fills in (read_problem,
 * set_join_allowance), shortcut's switches, rp.polish_work and the table's
 * clearing; reads kept and shortcut's counts when the passes are done.
 */
#include "balanced_internal.h"
#include "../../../core/plan.h"

/* The problem by position, and the kept plans' arrays. */
static int layout_problem(balanced *b, dcp__arena *a, size_t un)
{
    b->in.len = DCP_ARENA_NEW(a, int32_t, un);
    b->in.min_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->in.run_end = DCP_ARENA_NEW(a, int32_t, un);
    b->sizes.next_cost = DCP_ARENA_NEW(a, int64_t, un);
    b->in.min_cost = DCP_ARENA_NEW(a, int64_t, un);
    int ok = b->in.len && b->in.min_cp && b->in.run_end && b->sizes.next_cost && b->in.min_cost;
    for (int j = 0; j < NUM_KEPT; j++) {
        b->kept.plan[j].item_group = DCP_ARENA_NEW(a, int32_t, un);
        b->kept.plan[j].g_mb = DCP_ARENA_NEW(a, int32_t, un);
        b->kept.plan[j].g_cp = DCP_ARENA_NEW(a, int32_t, un);
        ok = ok && b->kept.plan[j].item_group && b->kept.plan[j].g_mb && b->kept.plan[j].g_cp;
    }
    return ok;
}

/* A pass's arrays, cp to cursor: the region the candidate's plan is made in once the passes are over. */
static int layout_pass(balanced *b, dcp__arena *a, size_t un, int32_t local)
{
    b->pass.cp = DCP_ARENA_NEW(a, int32_t, un);
    b->sizes.cp = DCP_ARENA_NEW(a, int32_t, un);
    b->sizes.cost = DCP_ARENA_NEW(a, int64_t, un);
    b->pass.cost = DCP_ARENA_NEW(a, int64_t, un);
    b->pass.order = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.class_list = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.item_group = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.item_next = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.free_groups = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.g_mb = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.g_cp = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.g_head = DCP_ARENA_NEW(a, int32_t, un + 1); /* + 1: group starts when emitting */
    b->pass.g_tail = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.g_count = DCP_ARENA_NEW(a, int32_t, un);
    b->pass.g_load = DCP_ARENA_NEW(a, int64_t, un);
    b->pass.g_tokens = DCP_ARENA_NEW(a, int64_t, un);
    b->pass.g_key = DCP_ARENA_NEW(a, int64_t, un);
    b->pass.mb_free = DCP_ARENA_NEW(a, int32_t, 2 * un);
    b->pass.mb_cap = DCP_ARENA_NEW(a, int64_t, 2 * un);
    b->pass.mb_level = DCP_ARENA_NEW(a, int64_t, 2 * un);
    b->pass.mb_order = DCP_ARENA_NEW(a, int32_t, 2 * un);
    b->pass.mb_first = DCP_ARENA_NEW(a, int32_t, 2 * un + 1);
    b->pass.mb_groups = DCP_ARENA_NEW(a, int32_t, un);
    b->work.heap = DCP_ARENA_NEW(a, heap_entry, dcp__size_mul(un, 2)); /* heap and park: one block, the pooled packing's groups */
    b->work.park = b->work.heap ? b->work.heap + un : NULL;
    b->work.local = DCP_ARENA_NEW(a, heap_entry, (size_t)local);
    b->work.cursor = DCP_ARENA_NEW(a, int32_t, 2 * un);
    const balanced_pass *ps = &b->pass;
    return ps->cp && b->sizes.cp && b->sizes.cost && ps->cost && ps->order && ps->class_list && ps->item_group &&
           ps->item_next && ps->free_groups && ps->g_mb && ps->g_cp && ps->g_head && ps->g_tail && ps->g_count &&
           ps->g_load && ps->g_tokens && ps->g_key && ps->mb_free && ps->mb_cap && ps->mb_level && ps->mb_order &&
           ps->mb_first && ps->mb_groups && b->work.heap && b->work.park && b->work.cursor && b->work.local;
}

/*
 * Every array from cp to cursor is rebuilt from a kept plan before it is
 * read again once the passes are over: the candidate's plan is made there
 * (balanced_reference.c), in as many bytes more after them as it needs
 * beyond them.  `region_start` is the arena's mark at cp.
 */
static int layout_reference_region(balanced *b, dcp__arena *a, const dcp_config *config, int32_t n,
                                   int32_t num_ranks, const dcp__scheduler *candidate, size_t region_start)
{
    b->kept.ref_region = NULL;
    b->kept.ref_region_size = 0;
    if (!candidate) return 1;
    dcp__arena need;
    dcp__arena_init_measure(&need);
    dcp_plan tables;
    int32_t *position;
    dcp__balanced_reference_tables(&tables, &position, &need, n);
    (void)DCP_ARENA_NEW(&need, int64_t, (size_t)num_ranks); /* the margin rule's finish times */
    dcp_config sized = *config;
    sized.max_sequences = n;
    const size_t reference = candidate->scratch_size(&sized);
    const size_t used = dcp__arena_mark(a) - region_start;
    if (reference > SIZE_MAX - need.used) return 0;
    const size_t more = need.used + reference > used ? need.used + reference - used : 0;
    if (more > 0 && !DCP_ARENA_NEW(a, unsigned char, more)) return 0;
    b->kept.ref_region = (unsigned char *)b->pass.cp;
    b->kept.ref_region_size = dcp__arena_mark(a) - region_start;
    return 1;
}

/* Repacking's arrays (microbatches of up to 2N sequences, at most REPACK_MAX) and the cost table. */
static int layout_repack(balanced *b, dcp__arena *a, int32_t n, int32_t num_ranks)
{
    size_t un = (size_t)n;
    int32_t limit = num_ranks < REPACK_MAX / 2 ? 2 * num_ranks : REPACK_MAX;
    if (limit > n) limit = n;
    b->rp.limit = limit;
    size_t ul = (size_t)limit;
    b->rp.items = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.of = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.size = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.count = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.load = DCP_ARENA_NEW(a, int64_t, ul);
    b->rp.tokens = DCP_ARENA_NEW(a, int64_t, ul);
    b->rp.cost = DCP_ARENA_NEW(a, int64_t, dcp__size_mul(ul, NUM_CLASSES));
    b->rp.row = DCP_ARENA_NEW(a, const int64_t *, ul);
    b->rp.bits = DCP_ARENA_NEW_ZERO(a, uint64_t, (un + 63) / 64);
    b->rp.seg = DCP_ARENA_NEW(a, int32_t, dcp__size_mul(ul, NUM_CLASSES));
    b->rp.head = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.memo = DCP_ARENA_NEW(a, repack_memo, REPACK_MEMO);
    int64_t table_n = 16 * (int64_t)num_ranks - 1;
    if (table_n > n) table_n = n;
    if (n > COST_TABLE_WHOLE && table_n > COST_TABLE_MAX) table_n = COST_TABLE_MAX; /* the other rows are computed as they go */
    b->table.n = (int32_t)table_n;
    b->table.cost = DCP_ARENA_NEW(a, int64_t, dcp__size_mul((size_t)table_n, NUM_CLASSES));
    b->table.cheapest = DCP_ARENA_NEW(a, int64_t, (size_t)table_n);
    b->table.least = DCP_ARENA_NEW(a, dcp__i128, (size_t)table_n);
    b->rp.tail = DCP_ARENA_NEW(a, int32_t, ul);
    b->rp.next = DCP_ARENA_NEW(a, int32_t, ul);
    return b->rp.items && b->rp.of && b->rp.size && b->rp.count && b->rp.load && b->rp.tokens && b->rp.cost &&
           b->rp.row && b->rp.bits && b->rp.seg && b->rp.head && b->rp.tail && b->rp.next && b->rp.memo &&
           (table_n == 0 || (b->table.cost && b->table.cheapest && b->table.least));
}

/* The sequential pass's arrays, the merge sorts and the regrouping's saved microbatches. */
static int layout_construction(balanced_work *w, dcp__arena *a, size_t un, int32_t local)
{
    w->alive_next = DCP_ARENA_NEW(a, int32_t, un + 1);
    w->g_slot = DCP_ARENA_NEW(a, int32_t, un);
    w->room_leaves = 1;
    while (w->room_leaves < local) w->room_leaves *= 2;
    w->room_tree = DCP_ARENA_NEW(a, int64_t, 2 * (size_t)w->room_leaves);
    w->sort_a = DCP_ARENA_NEW(a, int32_t, un);
    w->sort_b = DCP_ARENA_NEW(a, int32_t, un);
    w->saved_mb = DCP_ARENA_NEW(a, int32_t, un);
    return w->alive_next && w->g_slot && w->room_tree && w->sort_a && w->sort_b &&
           w->saved_mb;
}

/* The pooled packing's cost cache and room buckets; its trial arrays are the passes' (balanced_state.h). */
static int layout_pool(balanced *b, dcp__arena *a, size_t un)
{
    b->pk.k0 = DCP_ARENA_NEW(a, int8_t, un);
    b->pk.cost = DCP_ARENA_NEW(a, int64_t, dcp__size_mul(un, POOL_WINDOW));
    /* dynamic_cp's plan is kept where the pooled packing's costs were (read after every pass) */
    b->kept.plan[NUM_KEPT].item_group = (int32_t *)b->pk.cost;
    b->kept.plan[NUM_KEPT].g_mb = b->pk.cost ? (int32_t *)b->pk.cost + un : NULL;
    b->kept.plan[NUM_KEPT].g_cp = b->pk.cost ? (int32_t *)b->pk.cost + 2 * un : NULL;
    b->pk.bhead = DCP_ARENA_NEW(a, int32_t, (size_t)NUM_CLASSES * POOL_BUCKETS);
    b->pk.bits = DCP_ARENA_NEW(a, uint64_t, (size_t)NUM_CLASSES * POOL_BUCKETS / 64);
    /* the pooled packing is done before any pass starts: its trial arrays are theirs */
    b->pk.grp = (pool_group *)b->work.heap;
    b->pk.of = b->pass.order;
    b->pk.keep_of = b->pass.class_list;
    b->pk.keep_size = b->work.alive_next;
    return b->pk.k0 && b->pk.cost && b->pk.bhead && b->pk.bits;
}

/*
 * The phases that run once the passes are done, in the passes' arrays
 * (balanced_state.h): the local search runs after every pass and polish
 * and needs none of their working arrays; the dependency layout runs at emit.
 */
static void share_with_later_phases(balanced *b, size_t un, int32_t local)
{
    b->ds.heap = b->pass.order;
    b->ds.pos = b->pass.class_list;
    b->ds.leaf = b->work.alive_next;
    b->ds.slack = (int64_t *)b->work.heap;
    b->ds.room = (int64_t *)b->work.park;
    b->work.local_cap = local;
    b->pl.load = b->pass.g_load;
    b->pl.done = b->pass.g_key;
    b->pl.index = b->work.sort_a;
    b->pl.greedy = b->work.sort_b;
    b->pl.rank = b->work.saved_mb;
    b->pl.tmp = b->pass.mb_free;
    b->pl.first = b->pass.mb_first;
    b->pl.level = b->pass.mb_level;
    b->pl.slack = b->pass.mb_cap;
    b->pl.seen = b->work.cursor;
    b->pl.best_rank = b->work.heap ? (int32_t *)b->work.heap : NULL;       /* heap_entry[2n]: room for 8n int32 */
    b->pl.best_order = b->work.heap ? (int32_t *)b->work.heap + un : NULL;
    b->pl.order = b->pass.mb_order;
    b->pl.block_cap = local;
}

/* With a VPP group, the state a pass keeps for its second alignment (NULL arrays otherwise). */
static int layout_before_vpp(balanced_before_vpp *v, dcp__arena *a, size_t un, int vpp)
{
    memset(v, 0, sizeof *v);
    if (vpp <= 1) return 1;
    v->cp = DCP_ARENA_NEW(a, int32_t, un);
    v->item_group = DCP_ARENA_NEW(a, int32_t, un);
    v->item_next = DCP_ARENA_NEW(a, int32_t, un);
    v->free_groups = DCP_ARENA_NEW(a, int32_t, un);
    v->mb_free = DCP_ARENA_NEW(a, int32_t, un); /* after compaction a microbatch holds a group */
    v->cost = DCP_ARENA_NEW(a, int64_t, un);
    v->g_mb = DCP_ARENA_NEW(a, int32_t, un);
    v->g_cp = DCP_ARENA_NEW(a, int32_t, un);
    v->g_head = DCP_ARENA_NEW(a, int32_t, un);
    v->g_tail = DCP_ARENA_NEW(a, int32_t, un);
    v->g_count = DCP_ARENA_NEW(a, int32_t, un);
    v->g_load = DCP_ARENA_NEW(a, int64_t, un);
    v->g_tokens = DCP_ARENA_NEW(a, int64_t, un);
    return v->cp && v->item_group && v->item_next && v->free_groups &&
           v->mb_free && v->cost && v->g_mb && v->g_cp &&
           v->g_head && v->g_tail && v->g_count && v->g_load &&
           v->g_tokens;
}

/* The dependency model's per-rank arrays, its own (laid out only under that model). */
static int layout_dependency(balanced_place *pl, dcp__arena *a, int32_t num_ranks, int32_t local)
{
    pl->finish = DCP_ARENA_NEW(a, int64_t, (size_t)num_ranks);
    pl->max = DCP_ARENA_NEW(a, int64_t, (size_t)num_ranks);
    pl->at = DCP_ARENA_NEW(a, int32_t, (size_t)num_ranks);
    pl->blocks = DCP_ARENA_NEW(a, uint64_t, 2 * (size_t)local); /* + the radix sort's buffer */
    pl->next = DCP_ARENA_NEW(a, int32_t, (size_t)local);
    return pl->finish && pl->max && pl->at && pl->blocks && pl->next;
}

/*
 * Lay out the scratch for up to `n` sequences on `num_ranks` ranks (a
 * measuring arena gives the size); the dependency model's layout adds its
 * per-rank arrays at the end, so the barrier model's scratch is unchanged,
 * and a VPP group adds the state a pass keeps for its second alignment.
 * Every part is laid out, in this order, whether or not one before failed.
 */
static int balanced_layout(balanced *b, dcp__arena *a, const dcp_config *config, int32_t n, int32_t num_ranks,
                           const dcp__scheduler *candidate)
{
    const size_t un = (size_t)n;
    const int32_t local = n < num_ranks ? n : num_ranks;
    int ok = layout_problem(b, a, un);
    const size_t region_start = dcp__arena_mark(a);
    ok &= layout_pass(b, a, un, local);
    if (!layout_reference_region(b, a, config, n, num_ranks, candidate, region_start)) return 0;
    ok &= layout_repack(b, a, n, num_ranks);
    ok &= layout_construction(&b->work, a, un, local);
    ok &= layout_pool(b, a, un);
    share_with_later_phases(b, un, local);
    ok &= layout_before_vpp(&b->before_vpp, a, un, config->microbatch_group_size_per_vp_stage);
    ok &= config->pipeline_parallel_size <= 1 || dcp__balanced_pipeline_layout(b, a, config, n);
    if (config->cost.step_model == DCP_STEP_MODEL_DEPENDENCY) ok &= layout_dependency(&b->pl, a, num_ranks, local);
    return ok;
}

size_t dcp__assign_balanced_scratch_size(const dcp_config *config, const dcp__scheduler *candidate)
{
    balanced b;
    dcp__arena measure;
    dcp__arena_init_measure(&measure);
    if (!balanced_layout(&b, &measure, config, config->max_sequences, dcp_config_num_ranks(config), candidate))
        return SIZE_MAX;
    return measure.used;
}

/* The best plan kept so far is at `least`, a lower bound of every plan's makespan (-1: none known). */
static int best_at_bound(const balanced *b, int64_t least) { return b->kept.num > 0 && b->kept.plan[0].makespan <= least; }

/*
 * Run one pass (and, when its microbatch count had to be aligned to the VPP
 * group, the same pass merging down instead of splitting up) and keep its
 * plan if it is the best so far and fits max_microbatches.  The second run
 * starts from the first one's state before its alignment where that state is
 * exactly what running the pass again would build (dcp__balanced_can_realign).
 */
static void try_pass(balanced *b, int sequential, int64_t target, const int64_t widen[2], int32_t max_microbatches,
                     int *over_capacity)
{
    int64_t (*construct)(balanced *, int64_t, int64_t, int64_t, int) =
        sequential ? dcp__balanced_sequential_pass : dcp__balanced_lpt_pass;
    for (int merge_down = 0; merge_down < 2; merge_down++) {
        b->pass.vpp_misaligned = 0;
        int64_t makespan;
        if (merge_down && b->shortcut.reuse_alignment && dcp__balanced_can_realign(b)) {
            makespan = dcp__balanced_realign_pass(b);
            b->shortcut.num_realigned++;
        } else {
            b->before_vpp.saved = 0;
            b->before_vpp.pass_start = b->rp.polish_work;
            makespan = construct(b, target, widen[0], widen[1], merge_down);
        }
        if (makespan >= 0) {
            if (b->pass.num_mbs > max_microbatches) *over_capacity = 1;
            else dcp__balanced_keep_plan(b, makespan, -1);
        }
        if (!b->pass.vpp_misaligned) break;
    }
}

/*
 * The margin rule (docs/planning.md, the margin), once balanced's plan is in `plan`: dynamic_cp's (the
 * candidate's) is made in the region the passes are done with, both are judged by the configured step
 * model with every term of the cost model (dcp_plan_stats.model_makespan: the layout emitted, the
 * hinge), and dynamic_cp's replaces balanced's unless balanced's is lower by at least margin_ppm
 * parts per million of dynamic_cp's: (D - B) * 10^6 >= D * margin_ppm, exact in 128 bits (margin 0:
 * B <= D keeps balanced's).  So the plan is never above dynamic_cp's under the model it is judged by.
 * Where the candidate has no plan, balanced's stays.
 */
static dcp_status weigh_against_dynamic_cp(const balanced *b, const dcp__schedule_input *in, dcp_plan *plan,
                                           dcp__arena *scratch_region, dcp__error *err);

static dcp_status keep_dynamic_cp_unless_lower(const balanced *b, const dcp__schedule_input *in, dcp_plan *plan,
                                               dcp__error *err)
{
    plan->source = DCP_PLAN_SOURCE_SEARCH;
    if (!in->candidate || !b->kept.ref_region) return DCP_OK;
    dcp__arena scratch;
    dcp__arena_init(&scratch, b->kept.ref_region, b->kept.ref_region_size);
    dcp_status st = weigh_against_dynamic_cp(b, in, plan, &scratch, err);
    dcp__arena_release(&scratch); /* the region is the pass state's again (the pipeline's passes run there) */
    return st;
}

/* The margin rule itself, with dynamic_cp's plan made in *scratch_region (b->kept.ref_region). */
static dcp_status weigh_against_dynamic_cp(const balanced *b, const dcp__schedule_input *in, dcp_plan *plan,
                                           dcp__arena *scratch_region, dcp__error *err)
{
    dcp__arena scratch = *scratch_region;
    dcp_plan theirs;
    memset(&theirs, 0, sizeof theirs);
    int32_t *position;
    dcp__balanced_reference_tables(&theirs, &position, &scratch, b->in.n);
    int64_t *finish = DCP_ARENA_NEW(&scratch, int64_t, (size_t)b->in.num_ranks);
    if (!theirs.microbatch_first_group || !theirs.group_first_rank || !theirs.group_cp_size ||
        !theirs.group_first_id || !theirs.ids || !finish)
        return DCP_OK; /* never for a region balanced_layout sized */
    if (plan->max_microbatches < theirs.max_microbatches) theirs.max_microbatches = plan->max_microbatches;
    dcp__plan_clear(&theirs, b->in.num_ranks);
    dcp__error ignored; /* no plan from the candidate (more microbatches than allowed): balanced's stays */
    dcp__schedule_input alone = *in;
    alone.candidate = NULL;
    if (in->candidate->assign(&alone, &theirs, &scratch, &ignored) != DCP_OK) return DCP_OK;
    const dcp_config *c = in->config;
    const int64_t ours = dcp__plan_model_makespan(plan, c, in->lengths, in->num_sequences, finish);
    const int64_t dyn = dcp__plan_model_makespan(&theirs, c, in->lengths, in->num_sequences, finish);
    if (ours < 0 || dyn < 0) return DCP_OK; /* ids out of range: the validator names them */
    const int64_t ppm = c->cost.margin_ppm > 0 ? c->cost.margin_ppm : 0;
    if (((dcp__i128)dyn - ours) * 1000000 >= (dcp__i128)dyn * ppm) return DCP_OK;
    /* dynamic_cp's plan, exactly as it made it */
    dcp__plan_clear(plan, b->in.num_ranks);
    for (int32_t m = 0; m < theirs.num_microbatches; m++) {
        dcp_status st = dcp__plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        for (int32_t g = theirs.microbatch_first_group[m]; g < theirs.microbatch_first_group[m + 1]; g++) {
            st = dcp__plan_push_group(plan, theirs.group_first_rank[g], theirs.group_cp_size[g],
                                      theirs.ids + theirs.group_first_id[g],
                                      theirs.group_first_id[g + 1] - theirs.group_first_id[g], err);
            if (st != DCP_OK) return st;
        }
        dcp__plan_close_microbatch(plan);
    }
    plan->source = DCP_PLAN_SOURCE_DYNAMIC_CP;
    return DCP_OK;
}

/*
 * Emit the best plan, then the margin rule, except under the barrier model with no hinge and no
 * margin: there the kept plans' makespans are the model's, so a plan chosen among kept plans that
 * held dynamic_cp's (the fast level; the full one with few sequences per rank, where the candidate
 * is read or the best plan is at the lower bound) is never above it, and with many sequences per
 * rank the rule is left out as before (dynamic_cp's plan costs up to 6 times balanced's own time
 * there: docs/planning.md, the margin), so the default model plans and takes as long as it did.
 */
static dcp_status emit_and_weigh(balanced *b, const dcp__schedule_input *in, dcp_plan *plan, dcp__error *err)
{
    dcp_status st = dcp__balanced_emit(b, plan, err);
    if (st != DCP_OK) return st;
    const dcp_cost_model *m = b->in.model;
    const int hinge = m->small_slope > 0 && m->small_knee > 0;
    if (!b->in.dependency && !hinge && m->margin_ppm <= 0) {
        plan->source = DCP_PLAN_SOURCE_SEARCH;
        return DCP_OK;
    }
    return keep_dynamic_cp_unless_lower(b, in, plan, err);
}

/* Emit the best plan and weigh it (the margin rule); with PP > 1 then the pipeline's choice and order (balanced_pipeline.c). */
static dcp_status emit(balanced *b, const dcp__schedule_input *in, dcp_plan *plan, dcp__error *err)
{
    dcp_status st = emit_and_weigh(b, in, plan, err);
    if (st == DCP_OK && in->config->pipeline_parallel_size > 1) st = dcp__balanced_pipeline(b, in, plan, err);
    return st;
}

dcp_status dcp__assign_balanced(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err)
{
    return dcp__assign_balanced_with(in, plan, scratch, err, DCP__BALANCED_SHORTCUTS, NULL);
}

/* The problem, by position in length-descending order: lengths, minimal sizes and their costs, the totals. */
static void read_problem(balanced *b, const dcp__schedule_input *in)
{
    const dcp_config *c = in->config;
    b->in.n = in->num_sequences;
    b->in.num_ranks = in->num_ranks;
    b->in.max_seqlen = c->max_seqlen_per_rank;
    b->in.seq_cap = c->max_sequences_per_microbatch;
    b->in.min_cp_size = c->min_cp_size;
    b->in.vpp = c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
    b->in.model = &c->cost;
    b->in.ids = in->sorted_ids;
    for (int32_t p = 0, run = 0; p < b->in.n; p++) {
        int32_t id = in->sorted_ids[p];
        b->in.len[p] = in->lengths[id];
        b->in.min_cp[p] = in->min_cp[id];
        /* lengths descend: equal ones come in runs */
        if (p > 0 && b->in.len[p] == b->in.len[p - 1] && b->in.min_cp[p] == b->in.min_cp[p - 1]) {
            b->in.min_cost[p] = b->in.min_cost[p - 1];
        } else {
            b->in.min_cost[p] = dcp__cost(b->in.model, b->in.len[p], b->in.min_cp[p]);
            b->sizes.next_cost[p] = -1;
            run = p;
        }
        b->in.run_end[run] = p + 1;
        b->in.min_work += (dcp__i128)b->in.min_cp[p] * b->in.min_cost[p];
        b->in.total_tokens += b->in.len[p];
    }
}

/*
 * The allowance for joining a wider group (1/8 more GPU time), and per class
 * the per-rank cost below which a lone sequence cannot join it (join_below).
 */
static void set_join_allowance(balanced *b)
{
    b->in.join_num = 1;
    b->in.join_den = 8;
    const int64_t latency = b->in.model->round_latency > 0 ? b->in.model->round_latency : 0;
    for (int k = 0; k < NUM_CLASSES; k++) {
        b->work.join_len[k] = -1;
        const int64_t c2 = dcp__balanced_class_size(b, k);
        const dcp__i128 ring = (dcp__i128)c2 * (c2 - 1) * latency;
        const dcp__i128 least = (ring - (c2 - 1)) * b->in.join_den;
        /*
         * h * join_num < least  <=>  h < ceil(least / join_num).  Only while the
         * ring term is far below INT64_MAX, so that no cost involved saturates
         * (a saturated cost would break the inequality); else no shortcut.
         */
        const dcp__i128 below =
            least <= 0 || ring >= ((dcp__i128)1 << 61) ? 0 : (least + b->in.join_num - 1) / b->in.join_num;
        b->in.join_below[k] = below > ((dcp__i128)1 << 61) ? (int64_t)1 << 61 : (int64_t)below;
    }
}

/* The polishing budget, and with few sequences per rank the repacking memory and the cost table, cleared. */
static void prepare_search(balanced *b)
{
    b->rp.polish_work = POLISH_WORK;
    b->in.dense = (int64_t)b->in.n < 16 * (int64_t)b->in.num_ranks;
    /* repacking runs with few sequences per rank, and in VPP alignment: only then is its memory cleared */
    if (b->in.dense || b->in.vpp > 1) memset(b->rp.memo, 0, REPACK_MEMO * sizeof *b->rp.memo);
    /* with few sequences per rank the cost table's rows are computed when first asked for */
    b->table.ready = b->in.dense && b->table.n > 0;
    if (b->table.ready) memset(b->table.cheapest, 0xff, (size_t)b->table.n * sizeof *b->table.cheapest);
}

/*
 * Few sequences per rank on a power of two of ranks: first the pooled
 * packing (balanced_pool.c) for the least microbatch count k0 and one more,
 * each kept as a candidate.  On many ranks (POOL_MIN_RANKS and more), when
 * the plan for the least count is within 1/16 of the bound for that count
 * (the GPU time at minimal sizes over its ranks, or the dearest sequence's
 * cheapest cost, whichever is higher, plus the overheads) it is the plan and
 * 1 is returned: the passes are skipped (they cost most there); else they
 * run as they would without it (they are needed where lengths are far
 * apart: one level for all is a poor fit when a few sequences cost far more
 * than the rest).  On fewer ranks the passes always run: the pooled plan
 * costs a few passes' time and is the best plan on some batches, but within
 * 1/16 of its bound is not close enough there.  Both pooled searches give up
 * when the floor needs more than 17/16 of the ranks (pool_search): such a
 * pooled plan sits far above its bound, and on no row of the benchmark was
 * one kept, while its search took up to a third of the call.
 */
static int try_pooled(balanced *b, int64_t k0, int32_t max_microbatches, int *over_capacity)
{
    if (!b->in.dense || (b->in.num_ranks & (b->in.num_ranks - 1)) != 0) return 0;
    dcp__balanced_pool_prepare(b);
    for (int t = 0; t < 2; t++) {
        const int64_t k = k0 + (int64_t)t * b->in.vpp;
        if (k > b->in.n || k > INT32_MAX) break;
        b->pass.vpp_misaligned = 0;
        const int64_t makespan = dcp__balanced_pool_pass(b, (int32_t)k);
        if (makespan < 0) continue;
        if (b->pass.num_mbs > max_microbatches) {
            *over_capacity = 1;
            continue;
        }
        dcp__balanced_keep_plan(b, makespan, -1);
        dcp__i128 level = dcp__balanced_ceil_div128(b->in.min_work, (dcp__i128)b->pass.num_mbs * b->in.num_ranks);
        if (b->pk.floor > level) level = b->pk.floor;
        const dcp__i128 near = (level + b->in.model->microbatch_overhead) * b->pass.num_mbs;
        /* only the least count is trusted: needing more is the sign of lengths far apart */
        if (b->in.num_ranks >= POOL_MIN_RANKS && t == 0 && (dcp__i128)makespan * 16 <= near * 17) return 1;
    }
    return 0;
}

/*
 * The construction passes from k0 microbatches on, until the best plan is at
 * `least_makespan` (-1: not known).  Which passes (chosen by measurement
 * over the benchmark matrix): with many sequences per rank a pass costs most
 * and three suffice, one LPT pass at the token bound and two sequential ones
 * (no widening, and widening up to 1/4 more GPU time for one microbatch
 * more); with fewer than 16 per rank, where a pass is cheap and the outcome
 * sensitive, both constructions for five target counts and four allowances.
 * A pass whose CP sizes repeat an earlier one's (for a sequential pass: any
 * earlier one's; for an LPT pass: at the same target) is skipped.
 */
static void run_passes(balanced *b, int64_t k0, int64_t least_makespan, int32_t max_microbatches, int *over_capacity)
{
    static const int64_t widen[][2] = {{0, 1}, {1, 4}, {1, 16}, {1, 0}};
    const int64_t capacity = (int64_t)b->in.num_ranks * b->in.max_seqlen;
    /*
     * The step model's bound at minimal CP sizes: the work spread over all
     * ranks plus the overhead of the microbatches the tokens need.  With many
     * sequences per rank the widened pass runs only while the best plan is
     * more than 1% above it, so skipping it gives up less than 1%.
     */
    const dcp__i128 bound =
        b->in.min_work / b->in.num_ranks +
        (dcp__i128)((b->in.total_tokens + capacity - 1) / capacity) * b->in.model->microbatch_overhead;
    for (int t = 0; t < (b->in.dense ? 5 : 2); t++) {
        const int64_t k = k0 + (int64_t)t * b->in.vpp;
        if (k > b->in.n || best_at_bound(b, least_makespan)) break;
        if (!b->in.dense && t > 0 && b->kept.num > 0 && (dcp__i128)b->kept.plan[0].makespan * 99 <= bound * 100) break;
        for (int w = 0; w < (b->in.dense ? 4 : 2); w++) {
            for (int sequential = 0; sequential < 2; sequential++) {
                if (!b->in.dense && (w != t || (!sequential && t > 0))) continue;
                if (best_at_bound(b, least_makespan)) break;
                try_pass(b, sequential, k, widen[w], max_microbatches, over_capacity);
            }
        }
    }
}

/*
 * The kept plans improved: with few sequences per rank every one polished
 * (unless the pooled plan is the plan) and searched locally; with many, the
 * local search on the best one when there are enough sequences for it to pay
 * (below that the search costs more than the plan).
 */
static void improve_kept(balanced *b, int pooled_done, int64_t least_makespan, int32_t max_microbatches)
{
    if (b->in.dense && !pooled_done)
        for (int j = 0; j < b->kept.num && !best_at_bound(b, least_makespan); j++)
            dcp__balanced_polish_plan(b, j, max_microbatches);
    if (b->in.dense) {
        for (int j = 0; j < b->kept.num && !best_at_bound(b, least_makespan); j++)
            dcp__balanced_descend_plan(b, j, DESCENT_WORK_DENSE * (int64_t)b->in.n + 4096);
    } else if (b->in.n >= DESCENT_MIN_SEQUENCES && b->kept.num > 0) {
        int best = 0;
        for (int j = 1; j < b->kept.num; j++)
            if (b->kept.plan[j].makespan < b->kept.plan[best].makespan) best = j;
        dcp__balanced_descend_plan(b, best, DESCENT_WORK_MANY * (int64_t)b->in.n);
    }
}

static void fill_report(const balanced *b, dcp__balanced_report *report)
{
    report->realigned = b->shortcut.num_realigned;
    report->merges_skipped = b->shortcut.merges_skipped;
    report->trials_implied = b->shortcut.trials_implied;
    report->merge_choices = b->shortcut.merge_choices;
    report->budget_ran_out = b->rp.polish_work <= 0;
}

dcp_status dcp__assign_balanced_with(const dcp__schedule_input *in, dcp_plan *plan, dcp__arena *scratch, dcp__error *err,
                                     unsigned shortcuts, dcp__balanced_report *report)
{
    const dcp_config *c = in->config;
    balanced b;
    memset(&b, 0, sizeof b);
    b.shortcut.reuse_alignment = (shortcuts & DCP__BALANCED_REUSE_ALIGNMENT) != 0;
    b.shortcut.bound_merges = (shortcuts & DCP__BALANCED_BOUND_MERGES) != 0;
    b.shortcut.implied_trials = (shortcuts & DCP__BALANCED_IMPLIED_TRIALS) != 0;
    b.in.dependency = c->cost.step_model == DCP_STEP_MODEL_DEPENDENCY;
    if (!balanced_layout(&b, scratch, c, in->num_sequences, in->num_ranks, in->candidate))
        return dcp__fail(err, DCP_ERR_CAPACITY, "balanced scratch too small for %d sequences on %d ranks",
                        in->num_sequences, in->num_ranks);
    read_problem(&b, in);
    const int64_t capacity = (int64_t)b.in.num_ranks * b.in.max_seqlen;
    int64_t k0 = (b.in.total_tokens + capacity - 1) / capacity;
    if (k0 < 1) k0 = 1;
    k0 = (k0 + b.in.vpp - 1) / b.in.vpp * b.in.vpp;
    if (k0 > b.in.n)
        return dcp__fail(err, DCP_ERR_INFEASIBLE,
                        "%d sequences cannot fill %lld microbatches (a multiple of the VPP group %d)", b.in.n,
                        (long long)k0, b.in.vpp);
    set_join_allowance(&b);
    prepare_search(&b);
    int over_capacity = 0;
    /*
     * The fast effort level (dcp_config.plan_effort): dynamic_cp's plan and
     * the local search on it, within FAST_DESCENT_WORK units a sequence: never
     * above dynamic_cp's makespan (the search lowers a plan or leaves it;
     * with a VPP group dynamic_cp's plan is aligned and the search keeps its
     * microbatches).  Where dynamic_cp has no plan, the whole search below
     * runs.
     */
    if (c->plan_effort == DCP_PLAN_EFFORT_FAST) {
        const int slot = dcp__balanced_read_reference(&b, in, plan->max_microbatches);
        if (slot >= 0) {
            dcp__balanced_descend_plan(&b, slot, FAST_DESCENT_WORK * (int64_t)b.in.n);
            return emit(&b, in, plan, err);
        }
    }
    const int pooled_done = try_pooled(&b, k0, plan->max_microbatches, &over_capacity);
    /*
     * With few sequences per rank the passes are many: none of them runs once
     * the best plan is at the cost model's lower bound (core/stats.c), as no
     * plan can be lower.  Exact, so the makespan is the one the remaining
     * passes, polishing and search would have reached.  Only under the
     * barrier model: under the dependency model every kept plan is a
     * candidate for the layout at emit, and a plan at the barrier bound need
     * not have the least dependency makespan.
     */
    const int64_t least_makespan =
        b.in.dense && !b.in.dependency
            ? dcp__cost_lower_bound_quick(b.in.model, b.in.len, b.in.n, b.in.num_ranks, b.in.max_seqlen)
            : -1;
    if (!pooled_done) run_passes(&b, k0, least_makespan, plan->max_microbatches, &over_capacity);
    improve_kept(&b, pooled_done, least_makespan, plan->max_microbatches);
    /*
     * With few sequences per rank: the candidate's plan (dynamic_cp's, as
     * the driver offers it) as one more candidate, so that the plan is never
     * above it (the passes can miss what its construction finds).  Last, so
     * that everything before runs as it would without it; not polished (that
     * lowered a few plans by up to 6% for 10% more time over the benchmark
     * matrix).
     */
    if (in->candidate && b.in.dense && !best_at_bound(&b, least_makespan))
        dcp__balanced_read_reference(&b, in, plan->max_microbatches);
    if (report) fill_report(&b, report);
    if (b.kept.num == 0 && over_capacity)
        return dcp__fail(err, DCP_ERR_CAPACITY, "balanced: the plan needs more than max_microbatches = %d microbatches",
                        plan->max_microbatches);
    if (b.kept.num == 0)
        return dcp__fail(err, DCP_ERR_INFEASIBLE, "balanced: no plan for %d sequences on %d ranks", b.in.n,
                        b.in.num_ranks);
    return emit(&b, in, plan, err);
}
