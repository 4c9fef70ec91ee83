/*
 * balanced_pipeline.c - with pipeline parallelism (pipeline_parallel_size >
 * 1) the step is the pipeline's (core/pipeline_model.h), not the sum of the
 * microbatches: balanced's emitted plan and dynamic_cp's plan are both
 * candidates, each in the microbatch order that gives it the least pipeline
 * makespan found, and the lowest is emitted.  dynamic_cp's plan in its own
 * order (the order Megatron-LM runs it in) is one of the orders weighed, so
 * the plan emitted is never above dynamic_cp's pipeline makespan.
 *
 * Where the passes can make them, plans for more microbatches are
 * candidates too (a pipeline's fill and drain shrink with smaller
 * microbatches, while every microbatch pays its overhead): one LPT pass
 * (balanced_lpt.c) per target count and CP-widening allowance, 5/4 to 8
 * times the emitted plan's, aligned to the VPP group and to the interleaved
 * schedule's group.
 *
 * The order search is deterministic and bounded in work units (ops the
 * pipeline model runs), never in time: a few orders by cost (as planned,
 * descending, ascending, the dearest in the middle, two class orders),
 * then, on the plan chosen, pairwise swaps that lower the makespan while the budget lasts.
 *
 * State: reads in, kept and rp.polish_work; writes pp, and for plans for
 * more microbatches pass, before_vpp, kept and sizes.num_seen (LPT passes, with
 * in.dependency cleared while it runs and emits).
 */
#include "balanced_internal.h"
#include "../../../core/pipeline_model.h"
#include "../../../core/plan.h"

/*
 * Ops of the pipeline model the pairwise swaps may run, once, on the plan chosen: some 260 thousand
 * (several milliseconds).  Every candidate is weighed in its four starting orders only.
 */
enum { PIPE_SWAP_WORK = 1 << 18 };

typedef struct pipe_candidate {
    int64_t *cost, *tokens; /* [K] per microbatch, plan order */
    int32_t *order;         /* [K] the best order found */
    int32_t K;
    int64_t makespan;       /* of `order` */
} pipe_candidate;

int dcp__balanced_pipeline_layout(balanced *b, dcp__arena *a, const dcp_config *config, int32_t n)
{
    dcp__pipeline pipe;
    dcp__pipeline_of(config, &pipe);
    const size_t un = (size_t)n;
    b->pp.cost = DCP_ARENA_NEW(a, int64_t, 4 * un);
    b->pp.order = DCP_ARENA_NEW(a, int32_t, 4 * un);
    b->pp.model = DCP_ARENA_NEW(a, unsigned char, dcp__pipeline_scratch_size(&pipe, n));
    /* a copy of the emitted plan's tables, to lay it out again in another order */
    b->pp.tables = DCP_ARENA_NEW(a, int32_t, dcp__size_add(dcp__size_mul(5, un), 2));
    /* the tables of a plan with another microbatch count, n of each (a plan has at most n groups and microbatches) */
    b->pp.alt = DCP_ARENA_NEW(a, int32_t, dcp__size_add(dcp__size_mul(5, un), 2));
    b->pp.class_sum = DCP_ARENA_NEW(a, int64_t, (size_t)pipe.stages);
    b->pp.class_fill = DCP_ARENA_NEW(a, int32_t, (size_t)pipe.stages);
    b->pp.class_slot = DCP_ARENA_NEW(a, int32_t, (size_t)pipe.stages);
    b->pp.class_of = DCP_ARENA_NEW(a, int32_t, un);
    return b->pp.cost && b->pp.order && b->pp.model && b->pp.tables && b->pp.alt && b->pp.class_sum &&
           b->pp.class_fill && b->pp.class_slot && b->pp.class_of;
}

/* Sort ids[0..K) by cost (descending when `down`), ties by id: an insertion sort (K is small, and deterministic). */
static void sort_by_cost(int32_t *ids, int32_t K, const int64_t *cost, int down)
{
    for (int32_t i = 0; i < K; i++) ids[i] = i;
    for (int32_t i = 1; i < K; i++) {
        const int32_t x = ids[i];
        int32_t j = i;
        while (j > 0) {
            const int32_t y = ids[j - 1];
            const int after = down ? (cost[y] < cost[x] || (cost[y] == cost[x] && y > x))
                                   : (cost[y] > cost[x] || (cost[y] == cost[x] && y > x));
            if (!after) break;
            ids[j] = y;
            j--;
        }
        ids[j] = x;
    }
}

/*
 * The class orders (1F1B): microbatches m, m + P, m + 2P, ... follow one another through every stage
 * (stage 0 runs m + P's forward only after m's backward), so each such class's summed cost bounds the
 * step.  Dearest first, each microbatch joins the class of least sum with a place left (when P does
 * not divide K, r = K mod P classes hold one more, and they take residues 0..r-1); classes of a size
 * by sum descending take the lower residues.  `sorted` is by cost descending.
 */
static void class_assign(const balanced_pipeline *pp, const int32_t *sorted, int32_t K, int32_t P, const int64_t *cost)
{
    const int32_t q = K / P, r = K % P;
    for (int32_t c = 0; c < P; c++) pp->class_sum[c] = 0, pp->class_fill[c] = 0;
    for (int32_t i = 0; i < K; i++) {
        const int32_t m = sorted[i];
        int32_t best = -1;
        for (int32_t c = 0; c < P; c++)
            if (pp->class_fill[c] < q + (c < r) && (best < 0 || pp->class_sum[c] < pp->class_sum[best])) best = c;
        pp->class_of[m] = best;
        pp->class_fill[best]++;
        pp->class_sum[best] = dcp__sat_add_i64(pp->class_sum[best], cost[m]);
    }
    /* residues: among classes of one size, a larger sum (ties: lower class) takes a lower residue */
    for (int32_t c = 0; c < P; c++) {
        const int32_t lo = c < r ? 0 : r, hi = c < r ? r : P;
        int32_t slot = lo;
        for (int32_t d = lo; d < hi; d++)
            if (pp->class_sum[d] > pp->class_sum[c] || (pp->class_sum[d] == pp->class_sum[c] && d < c)) slot++;
        pp->class_slot[c] = slot;
    }
}

/* The order of class_assign's classes, members dearest first (`ascending` 0) or cheapest first; writes out[K]. */
static void class_place(const balanced_pipeline *pp, int32_t *out, const int32_t *sorted, int32_t K, int32_t P,
                        int ascending)
{
    const int32_t q = K / P, r = K % P;
    for (int32_t c = 0; c < P; c++) pp->class_fill[c] = 0;
    for (int32_t i = 0; i < K; i++) {
        const int32_t m = sorted[i], c = pp->class_of[m], size = q + (c < r), j = pp->class_fill[c]++;
        out[pp->class_slot[c] + (ascending ? size - 1 - j : j) * P] = m;
    }
}

/* Evaluate `trial` and keep it in c->order when it is lower; returns whether it was. */
static int try_order(const dcp__pipeline *pipe, pipe_candidate *c, const int32_t *trial, void *model, int64_t *work,
                     int64_t per_eval)
{
    *work -= per_eval;
    const int64_t m = dcp__pipeline_makespan(pipe, c->cost, c->tokens, trial, c->K, model);
    if (m < 0 || m >= c->makespan) return 0;
    c->makespan = m;
    memcpy(c->order, trial, (size_t)c->K * sizeof *trial);
    return 1;
}

/*
 * The least pipeline makespan over a few orders of c's microbatches and, within `swap_work` ops of
 * the model, the pairwise swaps that lower it; the best order is left in c->order.  `trial` and
 * `sorted` are scratch of K each.
 */
static void search_order(const balanced_pipeline *pp, const dcp__pipeline *pipe, pipe_candidate *c, int32_t *trial,
                         int32_t *sorted, int64_t swap_work)
{
    void *model = pp->model;
    const int32_t K = c->K;
    const int64_t per_eval = 2 * (int64_t)pipe->stages * pipe->chunks * K + 1;
    int64_t work = 6 * per_eval + swap_work;
    for (int32_t i = 0; i < K; i++) c->order[i] = i;
    c->makespan = dcp__pipeline_makespan(pipe, c->cost, c->tokens, c->order, K, model);
    if (c->makespan < 0) c->makespan = INT64_MAX; /* never: kept so a bad number is never chosen */
    if (K < 2 || c->makespan == INT64_MAX) return;
    sort_by_cost(sorted, K, c->cost, 1);
    /* descending, ascending, and the dearest in the middle (then outwards, alternating sides) */
    if (work >= per_eval) try_order(pipe, c, sorted, model, &work, per_eval);
    for (int32_t i = 0; i < K; i++) trial[i] = sorted[K - 1 - i];
    if (work >= per_eval) try_order(pipe, c, trial, model, &work, per_eval);
    const int32_t mid = K / 2;
    for (int32_t i = 0; i < K; i++) {
        const int32_t off = (i + 1) / 2;
        trial[i % 2 == 1 ? mid - off : mid + off] = sorted[i];
    }
    if (work >= per_eval) try_order(pipe, c, trial, model, &work, per_eval);
    const int32_t classes = pipe->stages < K ? pipe->stages : K;
    class_assign(pp, sorted, K, classes, c->cost);
    for (int ascending = 0; ascending < 2; ascending++) {
        class_place(pp, trial, sorted, K, classes, ascending);
        if (work >= per_eval) try_order(pipe, c, trial, model, &work, per_eval);
    }
    /* pairwise swaps of the best order, first improvement, sweep after sweep while one lowers it */
    memcpy(trial, c->order, (size_t)K * sizeof *trial);
    for (int improved = 1; improved && work >= per_eval;) {
        improved = 0;
        for (int32_t i = 0; i < K - 1 && work >= per_eval; i++)
            for (int32_t j = i + 1; j < K && work >= per_eval; j++) {
                if (c->cost[trial[i]] == c->cost[trial[j]] && c->tokens[trial[i]] == c->tokens[trial[j]]) continue;
                const int32_t t = trial[i];
                trial[i] = trial[j];
                trial[j] = t;
                if (try_order(pipe, c, trial, model, &work, per_eval)) {
                    improved = 1;
                } else {
                    trial[j] = trial[i];
                    trial[i] = t;
                }
            }
    }
}

/* A plan's table copy in `tables` (K + 3G + 2 + ids <= 5n + 2 int32, as K <= G <= n): first groups, first ranks, CP sizes, first ids, ids. */
typedef struct plan_copy {
    int32_t *first_group, *first_rank, *cp_size, *first_id, *ids;
} plan_copy;

static void copy_plan(const dcp_plan *plan, int32_t *tables, plan_copy *out)
{
    const int32_t K = plan->num_microbatches, G = plan->num_groups, I = plan->group_first_id[G];
    out->first_group = tables;
    out->first_rank = out->first_group + K + 1;
    out->cp_size = out->first_rank + G;
    out->first_id = out->cp_size + G;
    out->ids = out->first_id + G + 1;
    memcpy(out->first_group, plan->microbatch_first_group, (size_t)(K + 1) * sizeof(int32_t));
    memcpy(out->first_rank, plan->group_first_rank, (size_t)G * sizeof(int32_t));
    memcpy(out->cp_size, plan->group_cp_size, (size_t)G * sizeof(int32_t));
    memcpy(out->first_id, plan->group_first_id, (size_t)(G + 1) * sizeof(int32_t));
    memcpy(out->ids, plan->ids, (size_t)I * sizeof(int32_t));
}

/* Write the microbatches of `src` into `plan` (cleared first) in `order`, each as it was. */
static dcp_status emit_in_order(dcp_plan *plan, const plan_copy *src, const int32_t *order, int32_t K,
                                int32_t num_ranks, dcp__error *err)
{
    dcp__plan_clear(plan, num_ranks);
    for (int32_t i = 0; i < K; i++) {
        const int32_t m = order[i];
        dcp_status st = dcp__plan_open_microbatch(plan, err);
        if (st != DCP_OK) return st;
        for (int32_t g = src->first_group[m]; g < src->first_group[m + 1]; g++) {
            st = dcp__plan_push_group(plan, src->first_rank[g], src->cp_size[g], src->ids + src->first_id[g],
                                      src->first_id[g + 1] - src->first_id[g], err);
            if (st != DCP_OK) return st;
        }
        dcp__plan_close_microbatch(plan);
    }
    return DCP_OK;
}

/* An empty plan over n-entry tables in `t` (5n + 2 int32). */
static void alt_tables(dcp_plan *p, int32_t *t, int32_t n, int32_t max_microbatches)
{
    p->microbatch_first_group = t;
    p->group_first_rank = t + n + 1;
    p->group_cp_size = p->group_first_rank + n;
    p->group_first_id = p->group_cp_size + n;
    p->ids = p->group_first_id + n + 1;
    p->max_microbatches = max_microbatches < n ? max_microbatches : n;
    p->max_groups = p->max_ids = n;
}

/*
 * The margin rule (docs/planning.md, the margin) under the pipeline: a plan other than dynamic_cp's
 * replaces it only when lower by at least margin_ppm parts per million of dynamic_cp's pipeline
 * makespan `ref` (INT64_MAX: no such plan, any plan may win).
 */
static int beats_reference(int64_t makespan, int64_t ref, int64_t margin_ppm)
{
    if (ref == INT64_MAX) return makespan < INT64_MAX;
    const int64_t ppm = margin_ppm > 0 ? margin_ppm : 0;
    return ((dcp__i128)ref - makespan) * 1000000 >= (dcp__i128)ref * ppm;
}

/*
 * One LPT pass for `target` microbatches at CP-widening allowance widen[0] / widen[1] (and, when
 * its count had to be aligned to the VPP group, the same merging down): its plan, in its best
 * order, replaces `plan` when below *best and, against dynamic_cp's `ref`, by the margin.
 */
static dcp_status try_target(balanced *b, const dcp__schedule_input *in, const dcp__pipeline *pipe, dcp_plan *plan,
                             int64_t target, const int64_t widen[2], int32_t base, int64_t ref, int64_t *best,
                             dcp__error *err)
{
    const size_t un = (size_t)b->in.n;
    int32_t *trial = b->pp.order + 2 * un, *sorted = b->pp.order + 3 * un;
    for (int merge_down = 0; merge_down < 2; merge_down++) {
        b->pass.vpp_misaligned = 0;
        b->before_vpp.saved = 0;
        b->before_vpp.pass_start = b->rp.polish_work;
        const int64_t makespan = dcp__balanced_lpt_pass(b, target, widen[0], widen[1], merge_down);
        const int misaligned = b->pass.vpp_misaligned;
        if (makespan >= 0 && b->pass.num_mbs <= plan->max_microbatches && b->pass.num_mbs > base) {
            b->kept.num = 1;
            dcp__balanced_keep_plan(b, makespan, 0);
            dcp_plan alt;
            alt_tables(&alt, b->pp.alt, b->in.n, plan->max_microbatches);
            dcp__plan_clear(&alt, b->in.num_ranks);
            dcp__error ignored;
            pipe_candidate c = {b->pp.cost, b->pp.cost + un, b->pp.order, 0, INT64_MAX};
            if (dcp__balanced_emit(b, &alt, &ignored) == DCP_OK &&
                dcp__pipeline_plan_inputs(&alt, in->config, in->lengths, in->num_sequences, c.cost, c.tokens) ==
                    DCP_OK) {
                c.K = alt.num_microbatches;
                search_order(&b->pp, pipe, &c, trial, sorted, 0);
                if (c.makespan < *best && beats_reference(c.makespan, ref, in->config->cost.margin_ppm)) {
                    plan_copy copy;
                    copy_plan(&alt, b->pp.tables, &copy);
                    const dcp_status st = emit_in_order(plan, &copy, c.order, c.K, b->in.num_ranks, err);
                    if (st != DCP_OK) return st;
                    plan->source = DCP_PLAN_SOURCE_SEARCH;
                    *best = c.makespan;
                }
            }
        }
        if (!misaligned) break;
    }
    return DCP_OK;
}

/*
 * Plans for more microbatches than `base`: for each target count (5/4 to 8 times base, aligned), one
 * LPT pass at each CP-widening allowance: none, 1/4 more GPU time, and any (a sequence widens while
 * that lowers its per-rank cost above the target's level).  The barrier model's passes widen little,
 * as a wider group costs GPU time; under a pipeline a microbatch's cost is what the other stages
 * wait for, and plans of many cheap microbatches pay.  The record of the search's passes is cleared
 * (a pass it ran kept only the plan best for the barrier model; here the same pass is weighed again).
 * The passes' state is free once the plan is emitted (balanced_pipeline runs last).
 */
static dcp_status more_microbatches(balanced *b, const dcp__schedule_input *in, const dcp__pipeline *pipe,
                                    dcp_plan *plan, int64_t best, int32_t base, int64_t ref, dcp__error *err)
{
    static const int32_t grow[][2] = {{5, 4}, {3, 2}, {2, 1}, {3, 1}, {4, 1}, {6, 1}, {8, 1}};
    static const int64_t widen[][2] = {{0, 1}, {1, 4}, {1, 0}};
    int64_t align = b->in.vpp > 1 ? b->in.vpp : 1;
    if (pipe->chunks > 1 && pipe->group % align == 0) align = pipe->group;
    else if (pipe->chunks > 1) align *= pipe->group; /* a multiple of both */
    int32_t last = base;
    const int dependency = b->in.dependency;
    b->in.dependency = 0; /* the barrier emission: groups by size from rank 0 */
    b->sizes.num_seen = 0;
    dcp_status st = DCP_OK;
    for (size_t t = 0; t < sizeof grow / sizeof grow[0] && st == DCP_OK; t++) {
        int64_t target = ((int64_t)base * grow[t][0] + grow[t][1] - 1) / grow[t][1];
        target = (target + align - 1) / align * align;
        if (target <= last || target > b->in.n || target > plan->max_microbatches) continue;
        last = (int32_t)target;
        for (size_t w = 0; w < sizeof widen / sizeof widen[0] && st == DCP_OK; w++)
            st = try_target(b, in, pipe, plan, target, widen[w], base, ref, &best, err);
    }
    b->in.dependency = dependency;
    return st;
}

dcp_status dcp__balanced_pipeline(balanced *b, const dcp__schedule_input *in, dcp_plan *plan, dcp__error *err)
{
    const dcp_config *config = in->config;
    dcp__pipeline pipe;
    dcp__pipeline_of(config, &pipe);
    const size_t un = (size_t)b->in.n;
    const int32_t source = plan->source; /* the margin rule's choice (balanced.c) */
    int32_t *trial = b->pp.order + 2 * un, *sorted = b->pp.order + 3 * un;
    /* balanced's plan as emitted */
    pipe_candidate own = {b->pp.cost, b->pp.cost + un, b->pp.order, plan->num_microbatches, INT64_MAX};
    if (dcp__pipeline_plan_inputs(plan, config, in->lengths, in->num_sequences, own.cost, own.tokens) != DCP_OK)
        return dcp__fail(err, DCP_ERR_INVALID_PLAN, "balanced: an emitted id is outside the batch");
    search_order(&b->pp, &pipe, &own, trial, sorted, 0);
    /* dynamic_cp's plan, made where balanced_reference.c makes it */
    pipe_candidate ref = {b->pp.cost + 2 * un, b->pp.cost + 3 * un, b->pp.order + un, 0, INT64_MAX};
    dcp_plan other;
    int have_other = 0;
    dcp__arena region;
    if (in->candidate && b->kept.ref_region) {
        dcp__arena_init(&region, b->kept.ref_region, b->kept.ref_region_size);
        int32_t *position;
        dcp__balanced_reference_tables(&other, &position, &region, b->in.n);
        if (other.microbatch_first_group && other.group_first_rank && other.group_cp_size && other.group_first_id &&
            other.ids) {
            if (plan->max_microbatches < other.max_microbatches) other.max_microbatches = plan->max_microbatches;
            dcp__plan_clear(&other, b->in.num_ranks);
            dcp__error ignored; /* dynamic_cp without a plan only means no such candidate */
            dcp__schedule_input alone = *in;
            alone.candidate = NULL;
            have_other = in->candidate->assign(&alone, &other, &region, &ignored) == DCP_OK &&
                         dcp__pipeline_plan_inputs(&other, config, in->lengths, in->num_sequences, ref.cost,
                                                   ref.tokens) == DCP_OK;
        }
    }
    if (have_other) {
        ref.K = other.num_microbatches;
        search_order(&b->pp, &pipe, &ref, trial, sorted, 0); /* its own order is the first weighed */
    }
    /* the lower wins; on a tie balanced's own plan */
    plan_copy copy;
    dcp_status st = DCP_OK;
    int64_t best = own.makespan;
    const int64_t reference = have_other ? ref.makespan : INT64_MAX;
    if (have_other && (ref.makespan < own.makespan || !beats_reference(own.makespan, reference, config->cost.margin_ppm))) {
        copy_plan(&other, b->pp.tables, &copy);
        st = emit_in_order(plan, &copy, ref.order, ref.K, b->in.num_ranks, err);
        plan->source = DCP_PLAN_SOURCE_DYNAMIC_CP;
        best = ref.makespan;
    } else {
        int moved = 0;
        for (int32_t i = 0; i < own.K; i++) moved |= own.order[i] != i;
        if (moved) {
            copy_plan(plan, b->pp.tables, &copy);
            st = emit_in_order(plan, &copy, own.order, own.K, b->in.num_ranks, err);
            plan->source = source;
        }
    }
    /* dynamic_cp's plan is read: its region holds the pass state again, which the passes below rebuild */
    if (in->candidate && b->kept.ref_region) dcp__arena_release(&region);
    if (st == DCP_OK) st = more_microbatches(b, in, &pipe, plan, best, own.K, reference, err);
    if (st != DCP_OK) return st;
    /* the swaps, on the plan chosen (its order as it stands is the first weighed: never above it) */
    pipe_candidate last = {b->pp.cost, b->pp.cost + un, b->pp.order, plan->num_microbatches, INT64_MAX};
    if (dcp__pipeline_plan_inputs(plan, config, in->lengths, in->num_sequences, last.cost, last.tokens) != DCP_OK)
        return dcp__fail(err, DCP_ERR_INVALID_PLAN, "balanced: an emitted id is outside the batch");
    search_order(&b->pp, &pipe, &last, trial, sorted, PIPE_SWAP_WORK);
    int moved = 0;
    for (int32_t i = 0; i < last.K; i++) moved |= last.order[i] != i;
    if (!moved) return DCP_OK;
    const int32_t chosen = plan->source;
    copy_plan(plan, b->pp.tables, &copy);
    st = emit_in_order(plan, &copy, last.order, last.K, b->in.num_ranks, err);
    plan->source = chosen;
    return st;
}
