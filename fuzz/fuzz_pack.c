/*
 * fuzz_pack.c - the data plane's round trip over in-process ranks: lengths and
 * a layout (DP, CP, TP, PP, VPP, scheduler, CP partition, THD tail and
 * padding, sequence cap, pre-packed or one sequence per sample, which TP
 * ranks hold data, MTP stages) from bytes; two dcp_step() calls on every rank
 * (programs/harness/step_harness.c, threads), every microbatch of every rank
 * and virtual stage compared field by field with the independent oracle
 * (programs/harness/oracle.c), which packs, pads and CP-slices the whole
 * samples the reference's way.
 * Matching it on every rank means the plan + pack + CP slice delivered every
 * token of every sequence to exactly its place; the oracle is what unslicing
 * and unpacking would have to give back.
 *
 * Properties:
 *  - planning succeeds or fails with a documented input error;
 *  - every rank returns the same status in every step;
 *  - a successful step matches the oracle everywhere (no mismatches);
 *  - with a fault planted on one rank in the first step (corrupt cu_seqlens, a
 *    length that disagrees with its buffer, a missing field, too many samples,
 *    CP siblings that differ), every rank fails that step with the same
 *    documented status and the second step succeeds and matches the oracle.
 *
 * Input layout:
 *   [0] dp-1 (2 bits) | log2 cp (2 bits) | tp-1 (1 bit) | pp-1 (1 bit) | VPP on (1 bit) | pre-packed (1 bit)
 *   [1] scheduler (2 bits, mod 3) | contiguous | extend_last | pad mode (2 bits: none, alignment, M) |
 *       every TP rank holds data | MTP on the last stage
 *   [2..3] M-1 (mod 4096)   [4] pad alignment   [5] sequences per microbatch cap (4 bits) | fault (4 bits, mod 8)
 *   [6] fault rank   then lengths, 2 bytes each (1 + u16 % (M * ranks))
 */
#include "fuzz_common.h"
#include "step_harness.h"

#include <stdlib.h>

#define MAX_LENGTHS 48

static int32_t lengths[MAX_LENGTHS];
static int scheduler_built[3];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (int s = 0; s < 3; s++) scheduler_built[s] = fuzz_scheduler_built((dcp_scheduler)s);
    return 0;
}

static int documented_step_error(dcp_status st)
{
    return st == DCP_ERR_CORRUPT_INPUT || st == DCP_ERR_FIELD_MISMATCH || st == DCP_ERR_CAPACITY ||
           st == DCP_ERR_BAD_LENGTH || st == DCP_ERR_NULL_POINTER || st == DCP_ERR_INVALID_ARGUMENT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t b0 = fuzz_u8(&r), b1 = fuzz_u8(&r);
    const uint16_t m = fuzz_u16(&r);
    const uint8_t alignment = fuzz_u8(&r), b5 = fuzz_u8(&r), fault_rank = fuzz_u8(&r);

    dcp_harness_options o;
    dcp_harness_options_default(&o);
    dcp_config *c = &o.config;
    c->data_parallel_size = 1 + (b0 & 3);
    c->context_parallel_size = 1 << ((b0 >> 2) & 3);
    if (c->data_parallel_size * c->context_parallel_size > 8) c->context_parallel_size = 8 / c->data_parallel_size;
    if (c->context_parallel_size < 1) c->context_parallel_size = 1;
    c->tensor_parallel_size = 1 + ((b0 >> 4) & 1);
    c->pipeline_parallel_size = 1 + ((b0 >> 5) & 1);
    if ((b0 & 0x40) && c->pipeline_parallel_size > 1) {
        c->virtual_pipeline_size = 2;
        c->microbatch_group_size_per_vp_stage = 2;
    }
    o.prepacked = (b0 >> 7) & 1;
    c->scheduler = (dcp_scheduler)((b1 & 3) % 3);
    if (!scheduler_built[c->scheduler]) return 0;
    c->cp_partition = (b1 & 4) ? DCP_CP_CONTIGUOUS : DCP_CP_ZIGZAG;
    c->thd_tail_policy = (b1 & 8) ? DCP_THD_TAIL_EXTEND_LAST : DCP_THD_TAIL_APPEND_DUMMY;
    const int pad_mode = (b1 >> 4) & 3;
    if (pad_mode == 1) c->pad_alignment = 1 + alignment;
    if (pad_mode >= 2) c->pad_to_max_seqlen = 1;
    o.tp_ranks_hold_data = (b1 >> 6) & 1;
    if (b1 & 0x80) {
        o.mtp_pipeline_rank = c->pipeline_parallel_size - 1;
        o.mtp_virtual_stages = 1u << (c->virtual_pipeline_size - 1);
    }
    /* small enough that 16 in-process ranks' workspaces stay far from the memory limit */
    c->max_seqlen_per_rank = 1 + m % 4096;
    if (c->data_parallel_size * c->context_parallel_size * c->tensor_parallel_size * c->pipeline_parallel_size > 16)
        c->tensor_parallel_size = 1;
    c->max_sequences_per_microbatch = b5 & 15;
    const int32_t ranks = c->data_parallel_size * c->context_parallel_size;
    int32_t n = 0;
    while (fuzz_remaining(&r) >= 2 && n < MAX_LENGTHS)
        lengths[n++] = 1 + (int32_t)(fuzz_u16(&r) % ((uint32_t)c->max_seqlen_per_rank * (uint32_t)ranks));
    if (n == 0) return 0;
    c->max_sequences = n + 8;

    o.lengths = lengths;
    o.num_lengths = n;
    o.steps = 2;
    o.check = 1;
    o.timeout_ms = 8000;
    o.fault = (dcp_harness_fault)((b5 >> 4) % 8);
    /* on a rank that reads input: TP rank 0 of some PP stage (any TP rank when all hold data);
       world rank = (pp * TP + tp) * N + dpxcp */
    {
        const int32_t tp = c->tensor_parallel_size, pp = c->pipeline_parallel_size;
        const int32_t stage = fault_rank % pp, tp_rank = o.tp_ranks_hold_data ? (fault_rank / pp) % tp : 0;
        o.fault_world_rank = (stage * tp + tp_rank) * ranks + (fault_rank / (pp * tp)) % ranks;
    }
    o.fault_step = 0;
    /* a fault needs data on the faulty rank; sibling inputs can only differ with CP > 1 */
    if (n < c->data_parallel_size) o.fault = DCP_HARNESS_FAULT_NONE;
    if (o.fault == DCP_HARNESS_FAULT_SIBLINGS_DIFFER && c->context_parallel_size < 2) o.fault = DCP_HARNESS_FAULT_NONE;
    if (o.fault == DCP_HARNESS_FAULT_SIBLINGS_DIFFER && n < 2 * c->data_parallel_size) o.fault = DCP_HARNESS_FAULT_NONE;

    dcp_harness_result res;
    dcp_status st = dcp_harness_run(&o, &res);
    if (getenv("DCP_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_pack: world %d, %d sequences, fault %d: run %s, steps %s %s, verified %d: %s\n",
                res.world_size, n, (int)o.fault, dcp_status_str(st), dcp_status_str(res.step_status[0]),
                dcp_status_str(res.step_status[1]), res.verified, res.message);
    if (st != DCP_OK) {
        /* the harness's own planning call (or the configuration) refused the batch */
        DCP_FUZZ_ASSERT(fuzz_is_input_error(st) || st == DCP_ERR_INVALID_CONFIG, "harness: %s: %s",
                        dcp_status_str(st), res.message);
        dcp_harness_result_free(&res);
        return 0;
    }
    DCP_FUZZ_ASSERT(res.statuses_agree, "ranks disagree on a step's status: %s", res.message);
    DCP_FUZZ_ASSERT(res.mismatches == 0, "%lld mismatches against the oracle: %s", (long long)res.mismatches,
                    res.message);
    const dcp_status first = res.step_status[0], second = res.step_status[1];
    if (o.fault == DCP_HARNESS_FAULT_NONE) {
        DCP_FUZZ_ASSERT(first == second, "the same step twice: %s then %s", dcp_status_str(first),
                        dcp_status_str(second));
        /* a plan's padded spans can still exceed a padding target or the cu_seqlens capacity */
        DCP_FUZZ_ASSERT(first == DCP_OK || first == DCP_ERR_CAPACITY || first == DCP_ERR_BAD_LENGTH, "step: %s: %s",
                        dcp_status_str(first), res.message);
        if (first == DCP_OK) DCP_FUZZ_ASSERT(res.verified, "not verified: %s", res.message);
    } else {
        DCP_FUZZ_ASSERT(first != DCP_OK && documented_step_error(first), "fault %d: step returned %s: %s",
                        (int)o.fault, dcp_status_str(first), res.message);
        DCP_FUZZ_ASSERT(second == DCP_OK || second == DCP_ERR_CAPACITY || second == DCP_ERR_BAD_LENGTH,
                        "the step after a fault: %s: %s", dcp_status_str(second), res.message);
    }
    dcp_harness_result_free(&res);
    return 0;
}
