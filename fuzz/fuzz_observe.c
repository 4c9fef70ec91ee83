/*
 * fuzz_observe.c - bytes -> observation input -> online calibration
 * (dcpack.h, "Online calibration").
 *
 * Two contexts of one configuration take the same observations: groups
 * given directly (dcp_observe_groups: CP sizes, lengths and times straight
 * from the bytes, any of them wrong) and the times of a plan the context made
 * (dcp_observe_matrix: any int64 per cell).  Properties checked on every
 * input:
 *  - an observation is taken exactly when every value in it is one the
 *    header allows (checked here independently); otherwise the call fails
 *    with a message and the model, the rows and the digest are unchanged;
 *  - a refit model passes dcp_config_validate (non-negative, margin below
 *    all of the makespan) and plans;
 *  - both contexts hold bit-identical models and digests after every call;
 *  - predictions are times (>= 0) or DCP_OBSERVE_MISSING exactly where a
 *    rank holds nothing.
 *
 * Input layout:
 *   [0] DPxCP ranks - 1 (3 bits) | scheduler (bits 3-4)   [1] number of group steps (2 bits)
 *   then per group step: [count] groups, each: [cp byte] [n byte] n lengths (2 bytes) [time: 8 bytes]
 *   then the matrix times, 8 bytes each, for a plan of lengths 100 * (1 + i % 37)
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_GROUPS 64
#define MAX_PER_GROUP 16
#define MAX_MB 128
#define MAX_RANKS 8

static int32_t cps[MAX_GROUPS], first[MAX_GROUPS + 1], lens[MAX_GROUPS * MAX_PER_GROUP];
static int64_t times[MAX_GROUPS], matrix[MAX_MB * MAX_RANKS], predicted[MAX_MB * MAX_RANKS];

static uint64_t fuzz_u64(fuzz_reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)fuzz_u8(r) << (8 * i);
    return v;
}

static int time_ok(int64_t t) { return t == DCP_OBSERVE_MISSING || (t >= 0 && t <= DCP_OBSERVE_MAX_TIME); }

static void same_state(dcp_context *a, dcp_context *b)
{
    dcp_observe_report ra, rb;
    dcp_observe_status(a, &ra);
    dcp_observe_status(b, &rb);
    DCP_FUZZ_ASSERT(memcmp(&dcp_context_config(a)->cost, &dcp_context_config(b)->cost, sizeof(dcp_cost_model)) == 0,
                    "two contexts fed alike hold different models");
    DCP_FUZZ_ASSERT(ra.digest == rb.digest && ra.steps == rb.steps, "digests differ");
    DCP_FUZZ_ASSERT(dcp_config_validate(dcp_context_config(a), NULL, 0) == DCP_OK, "a refit model does not validate: %s",
                    dcp_context_last_error(a));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t b0 = fuzz_u8(&r), b1 = fuzz_u8(&r);
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = 1 + (b0 & 7);
    c.scheduler = (dcp_scheduler)(((b0 >> 3) & 3) % 3);
    c.max_sequences = MAX_GROUPS * MAX_PER_GROUP;
    c.max_microbatches = MAX_MB;
    c.max_seqlen_per_rank = 4096;
    c.max_observations = 32;
    dcp_context *a = NULL, *b = NULL;
    if (dcp_context_create(&c, &a) != DCP_OK || dcp_context_create(&c, &b) != DCP_OK) {
        dcp_context_destroy(a);
        dcp_context_destroy(b);
        return 0;
    }
    for (int step = 0; step < 1 + (b1 & 3); step++) {
        const int32_t g = fuzz_u8(&r) % (MAX_GROUPS + 1);
        int expect = 1, rows = 0;
        first[0] = 0;
        for (int32_t k = 0; k < g; k++) {
            cps[k] = (int32_t)(int8_t)fuzz_u8(&r);
            const int32_t n = fuzz_u8(&r) % (MAX_PER_GROUP + 1);
            first[k + 1] = first[k] + n;
            for (int32_t i = 0; i < n; i++) {
                lens[first[k] + i] = (int32_t)fuzz_u16(&r) - 8;
                if (lens[first[k] + i] < 1) expect = 0;
            }
            times[k] = (int64_t)fuzz_u64(&r);
            if (cps[k] < 1 || (cps[k] & (cps[k] - 1)) != 0 || n == 0 || !time_ok(times[k])) expect = 0;
            if (times[k] > 0) rows++;
        }
        dcp_observe_report before;
        dcp_observe_status(a, &before);
        const dcp_cost_model model = dcp_context_config(a)->cost;
        dcp_status sa = dcp_observe_groups(a, g, cps, first, lens, times);
        dcp_status sb = dcp_observe_groups(b, g, cps, first, lens, times);
        DCP_FUZZ_ASSERT(sa == sb, "the same groups gave %s and %s", dcp_status_str(sa), dcp_status_str(sb));
        DCP_FUZZ_ASSERT((sa == DCP_OK) == expect, "groups: %s where the input is %s (%s)", dcp_status_str(sa),
                        expect ? "good" : "bad", dcp_context_last_error(a));
        dcp_observe_report after;
        dcp_observe_status(a, &after);
        if (sa != DCP_OK) {
            DCP_FUZZ_ASSERT(dcp_context_last_error(a)[0] != '\0', "a refused observation without a message");
            DCP_FUZZ_ASSERT(after.digest == before.digest && memcmp(&model, &dcp_context_config(a)->cost, sizeof model) == 0,
                            "a refused observation changed the state");
        } else {
            DCP_FUZZ_ASSERT(after.steps == before.steps + (rows > 0), "steps %lld -> %lld with %d rows",
                            (long long)before.steps, (long long)after.steps, rows);
        }
        same_state(a, b);
    }
    /* a plan under the refit model, and its times from the bytes */
    int32_t batch[64];
    const int32_t nb = 8 + (int32_t)(b0 >> 5) * 7;
    for (int32_t i = 0; i < nb; i++) batch[i] = 100 * (1 + i % 37);
    const dcp_plan *pa, *pb;
    dcp_status pa_st = dcp_plan_compute(a, batch, nb, &pa), pb_st = dcp_plan_compute(b, batch, nb, &pb);
    DCP_FUZZ_ASSERT(pa_st == pb_st, "plans differ in status");
    if (pa_st == DCP_OK) {
        DCP_FUZZ_ASSERT(dcp_plan_hash(pa) == dcp_plan_hash(pb), "two contexts fed alike plan apart");
        const int32_t cells = pa->num_microbatches * pa->num_ranks;
        int expect = 1;
        for (int32_t i = 0; i < cells; i++) {
            uint8_t kind = fuzz_u8(&r);
            matrix[i] = kind < 200 ? (int64_t)(kind + 1) * 1000000 : (int64_t)fuzz_u64(&r);
            const int held = dcp_plan_group_of_rank(pa, i / pa->num_ranks, i % pa->num_ranks) >= 0;
            if (!time_ok(matrix[i]) || (!held && matrix[i] > 0)) expect = 0;
        }
        DCP_FUZZ_ASSERT(dcp_observe_predict(a, pa, batch, nb, predicted) == DCP_OK, "predict: %s",
                        dcp_context_last_error(a));
        for (int32_t i = 0; i < cells; i++) {
            const int held = dcp_plan_group_of_rank(pa, i / pa->num_ranks, i % pa->num_ranks) >= 0;
            DCP_FUZZ_ASSERT(held ? predicted[i] >= 0 : predicted[i] == DCP_OBSERVE_MISSING, "prediction %lld",
                            (long long)predicted[i]);
        }
        dcp_status sa = dcp_observe_matrix(a, pa, batch, nb, matrix);
        dcp_status sb = dcp_observe_matrix(b, pb, batch, nb, matrix);
        DCP_FUZZ_ASSERT(sa == sb && (sa == DCP_OK) == expect, "matrix: %s / %s where the input is %s (%s)",
                        dcp_status_str(sa), dcp_status_str(sb), expect ? "good" : "bad", dcp_context_last_error(a));
        same_state(a, b);
    }
    dcp_context_destroy(a);
    dcp_context_destroy(b);
    return 0;
}
