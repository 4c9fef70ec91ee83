/*
 * fuzz_pipeline_model.c - the pipeline step model (core/pipeline_model.h) on
 * arbitrary pipelines and microbatches.
 *
 * The input draws P (1..8), V (1..4), the interleaved group (P..P+7), the
 * forward share, the first and last stages' work per token, up to 24
 * microbatches (costs and tokens from small values to INT64_MAX) and an
 * order.  Properties:
 *  - a count the schedule runs gives a makespan >= 0 (the graph always
 *    finishes), one it does not run INT64_MAX;
 *  - the makespan equals a relaxation of the same graph that knows nothing
 *    of the model's worklist: every op's end = max(previous op on its stage,
 *    the op it waits for) + its time, swept until nothing changes;
 *  - the lower bound is at most the makespan, and the same for any order;
 *  - a dearer microbatch never lowers the makespan (saturating integers are
 *    monotone).
 */
#include "fuzz_common.h"
#include "../core/pipeline_model.h"

#include <stdlib.h>

enum { MAX_P = 8, MAX_V = 4, MAX_K = 24, MAX_OPS = 2 * MAX_V * MAX_K };

static unsigned char scratch[(2 * MAX_P * MAX_V * MAX_K + MAX_P) * 8 + 3 * MAX_P * 4 + 64];
static int64_t fend[MAX_P * MAX_V * MAX_K], bend[MAX_P * MAX_V * MAX_K];

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

/* The relaxation: ends start at -1 (unknown); sweeps over every stage's ops in order until a fixed point. */
static int64_t relax(const dcp__pipeline *p, const int64_t *cost, const int64_t *tokens, const int32_t *order, int32_t K)
{
    const int32_t P = p->stages, V = p->chunks, KV = P * V, ops = 2 * V * K;
    for (int32_t i = 0; i < KV * K; i++) fend[i] = bend[i] = -1;
    int changed = 1, complete = 0;
    int64_t makespan = 0;
    for (int sweep = 0; changed && sweep < 4 * MAX_OPS * MAX_P; sweep++) {
        changed = 0;
        complete = 1;
        makespan = 0;
        for (int32_t r = 0; r < P; r++) {
            int64_t clock = 0;
            for (int32_t j = 0; j < ops; j++) {
                int fwd;
                int32_t pos, chunk;
                dcp__pipeline_op(p, K, r, j, &fwd, &pos, &chunk);
                const int32_t k = chunk * P + r;
                const int64_t need = fwd ? (k == 0 ? 0 : fend[(k - 1) * K + pos])
                                         : (k == KV - 1 ? fend[k * K + pos] : bend[(k + 1) * K + pos]);
                if (need < 0) {
                    complete = 0;
                    break; /* the rest of this stage waits */
                }
                int64_t f, b;
                dcp__pipeline_op_times(p, cost[order[pos]], tokens[order[pos]], k, &f, &b);
                const int64_t end = sat_add(need > clock ? need : clock, fwd ? f : b);
                int64_t *slot = fwd ? &fend[k * K + pos] : &bend[k * K + pos];
                if (*slot != end) {
                    *slot = end;
                    changed = 1;
                }
                clock = end;
            }
            if (clock > makespan) makespan = clock;
        }
    }
    return complete ? makespan : -1;
}

static int64_t pick_cost(fuzz_reader *r)
{
    switch (fuzz_u8(r) & 7) {
    case 0: return 0;
    case 1: return fuzz_u8(r);
    case 2: return INT64_MAX - fuzz_u8(r);
    case 3: return (int64_t)((uint64_t)fuzz_u32(r) << (fuzz_u8(r) % 32)) & INT64_MAX;
    default: return fuzz_u32(r) % 1000000;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    dcp__pipeline p;
    p.stages = 1 + fuzz_u8(&r) % MAX_P;
    p.chunks = p.stages > 1 ? 1 + fuzz_u8(&r) % MAX_V : 1;
    p.group = p.stages + fuzz_u8(&r) % 8;
    p.forward_ppm = (int32_t)(fuzz_u32(&r) % 1000001);
    p.first_per_token = fuzz_u8(&r) & 1 ? pick_cost(&r) : 0;
    p.last_per_token = fuzz_u8(&r) & 1 ? pick_cost(&r) : 0;
    const int32_t K = 1 + fuzz_u8(&r) % MAX_K;
    int64_t cost[MAX_K], tokens[MAX_K];
    int32_t order[MAX_K], identity[MAX_K];
    for (int32_t m = 0; m < K; m++) {
        cost[m] = pick_cost(&r);
        tokens[m] = fuzz_u8(&r) & 1 ? pick_cost(&r) : fuzz_u8(&r);
        order[m] = identity[m] = m;
    }
    for (int32_t m = K - 1; m > 0; m--) {
        const int32_t j = fuzz_u8(&r) % (m + 1), t = order[m];
        order[m] = order[j];
        order[j] = t;
    }
    DCP_FUZZ_ASSERT(dcp__pipeline_scratch_size(&p, K) <= sizeof scratch, "scratch %zu", dcp__pipeline_scratch_size(&p, K));
    const int64_t got = dcp__pipeline_makespan(&p, cost, tokens, order, K, scratch);
    if (!dcp__pipeline_runs(&p, K)) {
        DCP_FUZZ_ASSERT(got == INT64_MAX, "P %d V %d K %d group %d: %lld", p.stages, p.chunks, K, p.group,
                        (long long)got);
        return 0;
    }
    DCP_FUZZ_ASSERT(got >= 0, "P %d V %d K %d group %d: the graph did not finish", p.stages, p.chunks, K, p.group);
    const int64_t want = relax(&p, cost, tokens, order, K);
    DCP_FUZZ_ASSERT(got == want, "P %d V %d K %d: model %lld, relaxation %lld", p.stages, p.chunks, K,
                    (long long)got, (long long)want);
    int64_t pc[MAX_K], pt[MAX_K];
    for (int32_t m = 0; m < K; m++) {
        pc[m] = cost[order[m]];
        pt[m] = tokens[order[m]];
    }
    const int64_t bound = dcp__pipeline_lower_bound(&p, cost, tokens, K);
    DCP_FUZZ_ASSERT(bound <= got, "bound %lld above makespan %lld", (long long)bound, (long long)got);
    DCP_FUZZ_ASSERT(bound == dcp__pipeline_lower_bound(&p, pc, pt, K), "the bound depends on the order");
    DCP_FUZZ_ASSERT(got == dcp__pipeline_makespan(&p, pc, pt, identity, K, scratch), "order and permuted arrays differ");
    /* one microbatch dearer */
    const int32_t which = fuzz_u8(&r) % K;
    cost[which] = sat_add(cost[which], 1 + fuzz_u8(&r));
    const int64_t dearer = dcp__pipeline_makespan(&p, cost, tokens, order, K, scratch);
    DCP_FUZZ_ASSERT(dearer >= got, "a dearer microbatch lowered the makespan: %lld < %lld", (long long)dearer,
                    (long long)got);
    return 0;
}
