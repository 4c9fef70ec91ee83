/*
 * fuzz_plan_ahead.c - bytes -> configuration + lengths + one change -> the
 * check a step makes of a plan made ahead (dcp_plan_matches, dcpack.h
 * "Planning a step ahead").
 *
 * A batch is planned on a planning-only context; a context of the same
 * configuration with a data plane (max_tokens_per_rank > 0) checks it.
 * Properties checked on every input:
 *  - the plan of the batch matches it, and is valid for it;
 *  - after one change (a length changed, two swapped, one dropped or added,
 *    an entry of one of the plan's arrays changed, the plan of other lengths,
 *    a planning configuration that differs in one field, the step context's
 *    max_tokens_per_rank changed), the check says DCP_OK exactly when
 *    nothing that decides the plan changed: the same lengths, the same
 *    arrays, a configuration that differs in max_tokens_per_rank at most.
 *    Otherwise DCP_ERR_INVALID_ARGUMENT (or DCP_ERR_CAPACITY for a plan past
 *    the context's capacities) with a message;
 *  - a plan the check accepts is valid for the lengths (dcp_plan_validate);
 *  - a failed dcp_plan_compute leaves no plan that matches anything.
 *
 * Input layout (fuzz/make_corpus.py writes seeds in it):
 *   [0] scheduler (2 bits) | effort (bit 2) | dependency model (bit 3)
 *   [1] DPxCP ranks - 1 (6 bits)   [2] log2(M / 256) (3 bits)
 *   [3] change (4 bits)   [4..5] index i   [6..7] index j or amount
 *   [8..] lengths, 2 bytes each (1 + the value)
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_LENGTHS 1024
#define HEADER_BYTES 8

enum {
    CHANGE_NONE,
    CHANGE_LENGTH,
    CHANGE_SWAP,
    CHANGE_DROP,
    CHANGE_ADD,
    CHANGE_ARRAY,
    CHANGE_OTHER_BATCH,
    CHANGE_CONFIG,
    CHANGE_DATA_PLANE,
    NUM_CHANGES
};

static int32_t lengths[MAX_LENGTHS + 1], changed[MAX_LENGTHS + 1];

/* The planning configuration with field `which` changed (what the plan depends on); 0 when it cannot be. */
static int change_config(dcp_config *c, unsigned which)
{
    switch (which % 6) {
    case 0: c->scheduler = (dcp_scheduler)((c->scheduler + 1) % 3); return 1;
    case 1: c->plan_effort = c->plan_effort == DCP_PLAN_EFFORT_FULL ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL; return 1;
    case 2: c->cost.linear += 1; return 1;
    case 3: c->max_seqlen_per_rank *= 2; return 1;
    case 4: c->pad_alignment = c->pad_alignment ? 0 : 8; return 1; /* a data-plane field: another context all the same */
    default: c->max_sequences += 1; return 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES + 2) return 0;
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t b0 = fuzz_u8(&r), b1 = fuzz_u8(&r), b2 = fuzz_u8(&r), b3 = fuzz_u8(&r);
    const uint16_t i16 = fuzz_u16(&r), j16 = fuzz_u16(&r);
    int32_t n = 0;
    while (n < MAX_LENGTHS && fuzz_remaining(&r) >= 2) lengths[n++] = 1 + (int32_t)fuzz_u16(&r);
    if (n == 0) return 0;

    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = (dcp_scheduler)((b0 & 3) % 3);
    c.plan_effort = (b0 & 4) ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
    c.cost.step_model = (b0 & 8) ? DCP_STEP_MODEL_DEPENDENCY : DCP_STEP_MODEL_BARRIER;
    const int32_t ranks = 1 + (b1 & 63);
    c.max_seqlen_per_rank = 256 << (b2 & 7);
    if (c.scheduler == DCP_SCHEDULER_DP_BALANCED && ranks % 2 == 0) {
        c.data_parallel_size = ranks / 2;
        c.context_parallel_size = 2;
    } else {
        c.data_parallel_size = ranks;
    }
    c.max_sequences = MAX_LENGTHS + 1;
    if (dcp_config_validate(&c, NULL, 0) != DCP_OK) return 0;
    dcp_config stepping = c;
    stepping.max_tokens_per_rank = 1 << 16;

    dcp_context *planner = NULL, *step = NULL, *other = NULL;
    if (dcp_context_create(&c, &planner) != DCP_OK || dcp_context_create(&stepping, &step) != DCP_OK) {
        dcp_context_destroy(planner);
        return 0;
    }
    /* a witness batch first: its plan is the context's plan, which a failed call must clear */
    static int32_t witness_lengths[64];
    for (int32_t k = 0; k < 64; k++) witness_lengths[k] = 2;
    const dcp_plan *witness = NULL, *plan = NULL;
    const int has_witness = dcp_plan_compute(planner, witness_lengths, ranks, &witness) == DCP_OK;
    dcp_status st = dcp_plan_compute(planner, lengths, n, &plan);
    if (st != DCP_OK) {
        if (has_witness) {
            DCP_FUZZ_ASSERT(dcp_plan_matches(step, witness, lengths, n) != DCP_OK, "a failed plan matches its lengths");
            DCP_FUZZ_ASSERT(dcp_plan_matches(step, witness, witness_lengths, ranks) != DCP_OK,
                            "a stale plan still matches");
        }
        goto done;
    }
    st = dcp_plan_matches(step, plan, lengths, n);
    DCP_FUZZ_ASSERT(st == DCP_OK, "the batch's own plan: %s: %s", dcp_status_str(st), dcp_context_last_error(step));

    int32_t m = n;
    memcpy(changed, lengths, (size_t)n * sizeof *changed);
    const dcp_plan *handed = plan;
    int same = 1; /* nothing that decides the plan changed */
    int32_t *array = NULL, at = 0, was = 0;
    switch ((b3 & 15) % NUM_CHANGES) {
    case CHANGE_LENGTH:
        changed[i16 % n] += (int32_t)(j16 % 7) - 3;
        if (changed[i16 % n] < 1) changed[i16 % n] = 1;
        same = changed[i16 % n] == lengths[i16 % n];
        break;
    case CHANGE_SWAP: {
        const int32_t x = i16 % n, y = j16 % n, t = changed[x];
        changed[x] = changed[y], changed[y] = t;
        same = changed[x] == changed[y];
        break;
    }
    case CHANGE_DROP: m = n - 1, same = 0; break;
    case CHANGE_ADD: changed[n] = 1 + j16, m = n + 1, same = 0; break;
    case CHANGE_ARRAY: {
        int32_t *arrays[5] = {plan->microbatch_first_group, plan->group_first_rank, plan->group_cp_size,
                              plan->group_first_id, plan->ids};
        const int32_t sizes[5] = {plan->num_microbatches + 1, plan->num_groups, plan->num_groups, plan->num_groups + 1,
                                  plan->num_ids};
        const int a = (int)(j16 % 5);
        if (sizes[a] == 0) break;
        array = arrays[a], at = i16 % sizes[a], was = array[at];
        array[at] = was + 1 + (int32_t)(j16 >> 8) % 4;
        same = 0;
        break;
    }
    case CHANGE_OTHER_BATCH: { /* the plan of other lengths, checked against these */
        for (int32_t k = 0; k < n; k++) changed[k] = lengths[(k + 1 + i16) % n];
        const dcp_plan *again = NULL;
        if (dcp_plan_compute(planner, changed, n, &again) != DCP_OK) goto done;
        handed = again;
        same = memcmp(changed, lengths, (size_t)n * sizeof *changed) == 0;
        memcpy(changed, lengths, (size_t)n * sizeof *changed);
        break;
    }
    case CHANGE_CONFIG: { /* the plan made under a configuration that differs in one field */
        dcp_config d = c;
        change_config(&d, j16);
        if (dcp_config_validate(&d, NULL, 0) != DCP_OK || dcp_context_create(&d, &other) != DCP_OK) goto done;
        const dcp_plan *there = NULL;
        if (dcp_plan_compute(other, lengths, n, &there) != DCP_OK) goto done;
        handed = there;
        same = 0;
        break;
    }
    case CHANGE_DATA_PLANE: { /* a step context whose max_tokens_per_rank differs: the plan is still its */
        dcp_config d = stepping;
        d.max_tokens_per_rank = 1 + (int64_t)j16 * 64;
        if (dcp_context_create(&d, &other) != DCP_OK) goto done;
        st = dcp_plan_matches(other, plan, lengths, n);
        DCP_FUZZ_ASSERT(st == DCP_OK, "max_tokens_per_rank alone differs: %s: %s", dcp_status_str(st),
                        dcp_context_last_error(other));
        goto done;
    }
    default: break;
    }
    st = dcp_plan_matches(step, handed, changed, m);
    DCP_FUZZ_ASSERT((st == DCP_OK) == same, "change %d: %s (%s), same %d", (b3 & 15) % NUM_CHANGES,
                    dcp_status_str(st), dcp_context_last_error(step), same);
    if (st != DCP_OK) {
        DCP_FUZZ_ASSERT(st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_CAPACITY, "status %s", dcp_status_str(st));
        DCP_FUZZ_ASSERT(dcp_context_last_error(step)[0] != '\0', "no message for %s", dcp_status_str(st));
    } else {
        st = dcp_plan_validate(step, handed, changed, m, NULL);
        DCP_FUZZ_ASSERT(st == DCP_OK, "an accepted plan is invalid: %s", dcp_context_last_error(step));
    }
    if (array) array[at] = was;
done:
    dcp_context_destroy(other);
    dcp_context_destroy(step);
    dcp_context_destroy(planner);
    return 0;
}
