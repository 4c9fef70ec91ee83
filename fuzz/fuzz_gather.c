/*
 * fuzz_gather.c - untrusted pre-packed input: arbitrary cu_seqlens and token
 * counts into dcp_gather_packed(), over a one-rank communicator.
 *
 * The cu_seqlens array is copied into a heap block of exactly the size passed
 * in, so AddressSanitizer reports any read past it.  Properties:
 *  - DCP_OK exactly when the input is well formed (starts at 0,
 *    non-decreasing, last entry <= total_tokens, at most max_sequences
 *    non-empty sub-samples), and then the gathered lengths are the non-zero
 *    differences, in order, with rank offsets {0, count};
 *  - otherwise DCP_ERR_CORRUPT_INPUT (or DCP_ERR_CAPACITY when there are too
 *    many sub-samples) with a message, and the context still gathers and
 *    plans a good input afterwards.
 *
 * Input layout: [0] flags  [1..8] total_tokens (int64 LE)  [9..] cu_seqlens (int32 LE each)
 *   flags bit 0: pass cu_seqlens = NULL; bits 1-3: capacity below the count;
 *   bits 4-5: pass up to 3 fewer entries than there are.
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_ENTRIES 8192

static int32_t expected[MAX_ENTRIES];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void gather_good_input(dcp_context *ctx, dcp_comm *comm)
{
    const int32_t cu[4] = {0, 5, 5, 12};
    const int32_t *lengths, *offsets;
    int32_t count = -1;
    dcp_status st = dcp_gather_packed(ctx, comm, 0, cu, 4, 12, &lengths, &count, &offsets);
    DCP_FUZZ_ASSERT(st == DCP_OK, "good input after a failure: %s: %s", dcp_status_str(st),
                    dcp_context_last_error(ctx));
    DCP_FUZZ_ASSERT(count == 2 && lengths[0] == 5 && lengths[1] == 7 && offsets[0] == 0 && offsets[1] == 2,
                    "good input gathered wrongly (%d sequences)", count);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t flags = fuzz_u8(&r);
    int64_t total_tokens = (int64_t)((uint64_t)fuzz_u32(&r) | (uint64_t)fuzz_u32(&r) << 32);
    size_t entries = fuzz_remaining(&r) / 4;
    if (entries > MAX_ENTRIES) entries = MAX_ENTRIES;
    int32_t *cu = entries ? malloc(entries * sizeof *cu) : NULL;
    for (size_t i = 0; i < entries; i++) cu[i] = (int32_t)fuzz_u32(&r);
    int32_t passed = (int32_t)entries - ((flags >> 4) & 3);
    if (passed < 0) passed = 0;
    const int null_pointer = flags & 1;

    /* the oracle: what a well-formed input would give */
    int well_formed = passed >= 1 && total_tokens >= 0 && !null_pointer && cu[0] == 0;
    int32_t count = 0;
    for (int32_t i = 1; i < passed && well_formed; i++) {
        if (cu[i] < cu[i - 1] || cu[i] > total_tokens) well_formed = 0;
        else if (cu[i] > cu[i - 1]) expected[count++] = cu[i] - cu[i - 1];
    }

    dcp_config config;
    dcp_config_default(&config);
    config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    config.max_seqlen_per_rank = INT32_MAX;
    const int32_t shortfall = (flags >> 1) & 7;
    config.max_sequences = count - shortfall >= 4 ? count - shortfall : 4;
    dcp_context *ctx = NULL;
    DCP_FUZZ_ASSERT(dcp_context_create(&config, &ctx) == DCP_OK, "context");
    dcp_comm comm;
    fuzz_solo_comm(&comm);

    const int32_t *lengths = NULL, *offsets = NULL;
    int32_t num = -1;
    dcp_status st =
        dcp_gather_packed(ctx, &comm, 0, null_pointer ? NULL : cu, passed, total_tokens, &lengths, &num, &offsets);
    if (well_formed && count <= config.max_sequences) {
        DCP_FUZZ_ASSERT(st == DCP_OK, "well-formed input refused: %s: %s", dcp_status_str(st),
                        dcp_context_last_error(ctx));
        DCP_FUZZ_ASSERT(num == count, "gathered %d sequences, expected %d", num, count);
        DCP_FUZZ_ASSERT(offsets[0] == 0 && offsets[1] == count, "rank offsets {%d, %d}", offsets[0], offsets[1]);
        for (int32_t i = 0; i < count; i++)
            DCP_FUZZ_ASSERT(lengths[i] == expected[i], "length %d: %d, expected %d", i, lengths[i], expected[i]);
        if (count > 0) {
            /* what was gathered plans, or is refused for a clear reason */
            const dcp_plan *plan;
            dcp_status ps = dcp_plan_compute(ctx, lengths, num, &plan);
            DCP_FUZZ_ASSERT(ps == DCP_OK || fuzz_is_input_error(ps), "planning gathered lengths: %s: %s",
                            dcp_status_str(ps), dcp_context_last_error(ctx));
        }
    } else {
        dcp_status want = null_pointer && passed > 0 ? DCP_ERR_NULL_POINTER : DCP_ERR_CORRUPT_INPUT;
        if (well_formed) want = DCP_ERR_CAPACITY;
        /* a capacity error can be found before a later corrupt entry */
        DCP_FUZZ_ASSERT(st == want || (st == DCP_ERR_CAPACITY && want == DCP_ERR_CORRUPT_INPUT),
                        "bad input: got %s, expected %s", dcp_status_str(st), dcp_status_str(want));
        DCP_FUZZ_ASSERT(dcp_context_last_error(ctx)[0] != '\0', "%s without a message", dcp_status_str(st));
        DCP_FUZZ_ASSERT(num == -1 && lengths == NULL, "outputs written on failure");
        gather_good_input(ctx, &comm);
    }
    dcp_context_destroy(ctx);
    free(cu);
    return 0;
}
