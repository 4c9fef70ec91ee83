/*
 * pipeline_model.c - the pipeline step model (core/pipeline_model.h,
 * docs/planning.md, pipeline step model): the order of each stage's ops
 * under Megatron-LM's 1F1B and interleaved 1F1B schedules, the exact
 * makespan of that order as a longest path, and its lower bound.
 */
#include "pipeline_model.h"
#include "cost.h"
#include "int128.h"

#include <string.h>

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

void dcp__pipeline_of(const dcp_config *config, dcp__pipeline *pipe)
{
    const dcp_cost_model *m = &config->cost;
    pipe->stages = config->pipeline_parallel_size > 1 ? config->pipeline_parallel_size : 1;
    pipe->chunks = pipe->stages > 1 && config->virtual_pipeline_size > 1 ? config->virtual_pipeline_size : 1;
    pipe->group = config->microbatch_group_size_per_vp_stage >= pipe->stages ? config->microbatch_group_size_per_vp_stage
                                                                             : pipe->stages;
    pipe->forward_ppm = m->forward_ppm < 0 ? 0 : m->forward_ppm > 1000000 ? 1000000 : m->forward_ppm;
    pipe->first_per_token = m->first_stage_per_token > 0 ? m->first_stage_per_token : 0;
    pipe->last_per_token = m->last_stage_per_token > 0 ? m->last_stage_per_token : 0;
}

void dcp__pipeline_op_times(const dcp__pipeline *pipe, int64_t c, int64_t t, int32_t k, int64_t *forward,
                            int64_t *backward)
{
    int64_t w = (c > 0 ? c : 0) / pipe->chunks;
    if (k == 0) w = dcp__sat_add_i64(w, sat_mul(pipe->first_per_token, t));
    if (k == pipe->stages * pipe->chunks - 1) w = dcp__sat_add_i64(w, sat_mul(pipe->last_per_token, t));
    const int64_t f = (int64_t)((dcp__i128)w * pipe->forward_ppm / 1000000);
    *forward = f;
    *backward = w - f;
}

/*
 * Megatron-LM's schedule table (schedules.py, get_schedule_table): virtual
 * microbatch v runs (microbatch, chunk).  The microbatches go in groups of
 * `group` (the last group holds what is left, at most `group`); within a
 * group every chunk takes the group's microbatches in turn, chunk 0 first.
 * With one chunk it is the identity.
 */
static void table_entry(const dcp__pipeline *pipe, int32_t K, int32_t v, int32_t *position, int32_t *chunk)
{
    const int32_t V = pipe->chunks;
    if (V == 1) {
        *position = v;
        *chunk = 0;
        return;
    }
    const int32_t G = pipe->group < K ? pipe->group : K;
    const int32_t last_start = (K - 1) / G * G; /* the last group's first microbatch */
    const int64_t full = (int64_t)G * V;
    const int64_t gi = v / full;
    if (gi * G < last_start) {
        const int32_t within = (int32_t)(v - gi * full);
        *chunk = within / G;
        *position = (int32_t)(gi * G) + within % G;
    } else {
        const int32_t off = v - last_start * V, size = K - last_start;
        *chunk = off / size;
        *position = last_start + off % size;
    }
}

/* The warm-up forwards of stage r (get_pp_rank_microbatches), at most V * K. */
static int64_t warmup(const dcp__pipeline *pipe, int32_t K, int32_t r)
{
    const int64_t total = (int64_t)K * pipe->chunks;
    int64_t w = pipe->chunks == 1 ? (int64_t)pipe->stages - r - 1
                                  : ((int64_t)pipe->stages - r - 1) * 2 + (int64_t)(pipe->chunks - 1) * pipe->group;
    return w < total ? w : total;
}

void dcp__pipeline_op(const dcp__pipeline *pipe, int32_t K, int32_t r, int32_t j, int *forward, int32_t *position,
                      int32_t *chunk)
{
    /* warm-up forwards, then one forward one backward, then the cool-down's backwards */
    const int64_t total = (int64_t)K * pipe->chunks, w = warmup(pipe, K, r), steady = 2 * (total - w);
    int64_t v;
    if (j < w) {
        *forward = 1;
        v = j;
    } else if (j - w < steady) {
        const int64_t q = j - w;
        *forward = (q & 1) == 0;
        v = *forward ? w + q / 2 : q / 2;
    } else {
        *forward = 0;
        v = (total - w) + (j - w - steady);
    }
    table_entry(pipe, K, (int32_t)v, position, chunk);
    if (!*forward) *chunk = pipe->chunks - 1 - *chunk; /* backwards take the chunks in reverse */
}

/* Scratch: forward and backward ends per (virtual stage, position), then per stage its clock, next op, stack flag. */
size_t dcp__pipeline_scratch_size(const dcp__pipeline *pipe, int32_t max_microbatches)
{
    const size_t P = (size_t)pipe->stages, ends = 2 * P * (size_t)pipe->chunks * (size_t)(max_microbatches > 0 ? max_microbatches : 0);
    return (ends + P) * sizeof(int64_t) + 3 * P * sizeof(int32_t);
}

int dcp__pipeline_runs(const dcp__pipeline *pipe, int32_t K)
{
    if (pipe->chunks == 1 || K <= 0) return 1;
    const int32_t rest = K % pipe->group;
    return K >= pipe->group && (rest == 0 || rest >= pipe->stages);
}

int64_t dcp__pipeline_makespan(const dcp__pipeline *pipe, const int64_t *cost, const int64_t *tokens,
                               const int32_t *order, int32_t K, void *scratch)
{
    if (K <= 0) return 0;
    if (!dcp__pipeline_runs(pipe, K)) return INT64_MAX;
    const int32_t P = pipe->stages, V = pipe->chunks, KV = P * V;
    const size_t slots = (size_t)KV * (size_t)K;
    int64_t *fend = (int64_t *)scratch, *bend = fend + slots, *clock = bend + slots;
    int32_t *next = (int32_t *)(clock + P), *stack = next + P, *queued = stack + P;
    memset(fend, 0xff, 2 * slots * sizeof *fend); /* -1: not run yet */
    const int32_t ops = 2 * V * K;
    int32_t top = 0;
    for (int32_t r = P - 1; r >= 0; r--) {
        clock[r] = 0;
        next[r] = 0;
        queued[r] = 1;
        stack[top++] = r;
    }
    int64_t done = 0;
    /*
     * Each stage runs its ops in order as far as their inputs are ready; an op
     * that finishes may unblock the stage of the op that waits for it (the
     * next virtual stage's forward, the previous one's backward), which is
     * put back on the stack.  Every op runs once: O(P * V * K).
     */
    while (top > 0) {
        const int32_t r = stack[--top];
        queued[r] = 0;
        while (next[r] < ops) {
            int fwd;
            int32_t pos, chunk;
            dcp__pipeline_op(pipe, K, r, next[r], &fwd, &pos, &chunk);
            const int32_t k = chunk * P + r;
            int64_t ready;
            if (fwd) ready = k == 0 ? 0 : fend[(size_t)(k - 1) * K + pos];
            else ready = k == KV - 1 ? fend[(size_t)k * K + pos] : bend[(size_t)(k + 1) * K + pos];
            if (ready < 0) break;
            const int32_t id = order ? order[pos] : pos;
            int64_t f, b;
            dcp__pipeline_op_times(pipe, cost[id], tokens ? tokens[id] : 0, k, &f, &b);
            const int64_t start = ready > clock[r] ? ready : clock[r];
            const int64_t end = dcp__sat_add_i64(start, fwd ? f : b);
            clock[r] = end;
            next[r]++;
            done++;
            int32_t wake = -1;
            if (fwd) {
                fend[(size_t)k * K + pos] = end;
                if (k + 1 < KV) wake = (r + 1) % P;
            } else {
                bend[(size_t)k * K + pos] = end;
                if (k > 0) wake = (r + P - 1) % P;
            }
            if (wake >= 0 && wake != r && !queued[wake]) {
                queued[wake] = 1;
                stack[top++] = wake;
            }
        }
    }
    if (done != (int64_t)ops * P) return -1;
    int64_t makespan = 0;
    for (int32_t r = 0; r < P; r++)
        if (clock[r] > makespan) makespan = clock[r];
    return makespan;
}

int64_t dcp__pipeline_lower_bound(const dcp__pipeline *pipe, const int64_t *cost, const int64_t *tokens, int32_t K)
{
    if (K <= 0) return 0;
    const int32_t P = pipe->stages, V = pipe->chunks;
    int64_t bound = 0;
    /* the longest microbatch's chain: every op of it runs one after another */
    for (int32_t m = 0; m < K; m++) {
        int64_t chain = 0;
        for (int32_t k = 0; k < P * V; k++) {
            int64_t f, b;
            dcp__pipeline_op_times(pipe, cost[m], tokens ? tokens[m] : 0, k, &f, &b);
            chain = dcp__sat_add_i64(chain, dcp__sat_add_i64(f, b));
        }
        if (chain > bound) bound = chain;
    }
    /*
     * Stage r's first op is a chunk-0 forward of the order's first
     * microbatch, which waits for its forwards on stages 0..r-1; its last op
     * is a chunk-0 backward of the order's last microbatch (the table's last
     * entry, chunk V-1 reversed for the backward), after which that
     * microbatch's backwards on stages r-1..0 still run.  In between the
     * stage runs all of its work.  With K >= 2 the first and the last are two
     * microbatches, so the head and the tail are charged to two different ones.
     */
    for (int32_t r = 0; r < P; r++) {
        int64_t work = 0;
        int64_t head[2] = {INT64_MAX, INT64_MAX}, tail[2] = {INT64_MAX, INT64_MAX}; /* the two least */
        int32_t head_of = -1, tail_of = -1;                                         /* who has the least */
        for (int32_t m = 0; m < K; m++) {
            /*
             * Stages 0..r-1 of chunk 0: stage 0 with its per-token extra, the
             * rest alike (none of them is the last virtual stage), so the sum
             * is closed-form and the bound O(P * V * K), not O(P^2 * K).
             */
            int64_t fh = 0, bt = 0;
            if (r > 0) {
                const int64_t t = tokens ? tokens[m] : 0;
                int64_t f0, b0, fm = 0, bm = 0;
                dcp__pipeline_op_times(pipe, cost[m], t, 0, &f0, &b0);
                if (r > 1) dcp__pipeline_op_times(pipe, cost[m], t, 1, &fm, &bm);
                fh = dcp__sat_add_i64(f0, sat_mul(r - 1, fm));
                bt = dcp__sat_add_i64(b0, sat_mul(r - 1, bm));
            }
            if (fh < head[0]) { head[1] = head[0]; head[0] = fh; head_of = m; }
            else if (fh < head[1]) head[1] = fh;
            if (bt < tail[0]) { tail[1] = tail[0]; tail[0] = bt; tail_of = m; }
            else if (bt < tail[1]) tail[1] = bt;
            for (int32_t c = 0; c < V; c++) {
                int64_t f, b;
                dcp__pipeline_op_times(pipe, cost[m], tokens ? tokens[m] : 0, c * P + r, &f, &b);
                work = dcp__sat_add_i64(work, dcp__sat_add_i64(f, b));
            }
        }
        int64_t ends = dcp__sat_add_i64(head[0], tail[0]);
        if (K >= 2 && head_of == tail_of) {   /* one microbatch has both least: the other end is another's */
            const int64_t a = dcp__sat_add_i64(head[0], tail[1]), b = dcp__sat_add_i64(head[1], tail[0]);
            ends = a < b ? a : b;
        }
        const int64_t stage = dcp__sat_add_i64(ends, work);
        if (stage > bound) bound = stage;
    }
    return bound;
}

dcp_status dcp__pipeline_plan_inputs(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                                     int32_t num_lengths, int64_t *cost, int64_t *tokens)
{
    const dcp_cost_model *model = &config->cost;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int64_t slowest = 0, most = 0;
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            const int32_t cp = plan->group_cp_size[g];
            int64_t c = 0, t = 0;
            for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
                const int32_t id = plan->ids[i];
                if (id < 0 || id >= num_lengths) return DCP_ERR_INVALID_PLAN;
                c = dcp__sat_add_i64(c, dcp_cost(model, lengths[id], cp));
                t += lengths[id]; /* at most max_sequences * 2^31 */
            }
            const int64_t per_rank = cp > 0 ? (t + cp - 1) / cp : t;
            c = dcp__group_cost(model, c, cp > 0 ? t / cp : t); /* the small-microbatch hinge, as statistics charge it */
            if (c > slowest) slowest = c;
            if (per_rank > most) most = per_rank;
        }
        cost[m] = dcp__sat_add_i64(slowest, model->microbatch_overhead > 0 ? model->microbatch_overhead : 0);
        tokens[m] = most;
    }
    return DCP_OK;
}
