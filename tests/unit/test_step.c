/*
 * test_step.c - dcp_step() over in-process ranks, every rank's output checked
 * element by element against the oracle (programs/harness/oracle.c).
 */
#include "dcp_test.h"
#include "step_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t trace[4096];

static int32_t load(const char *name, int32_t n)
{
    char rel[128];
    snprintf(rel, sizeof rel, "workloads/%s", name);
    int32_t got = dcp_harness_read_trace(dcp_test_data_path(rel), trace, n);
    return got;
}

/* Run and require: every step OK on every rank, every rank verified, no allocation inside a step. */
static int run_checked(dcp_harness_options *o, const char *what)
{
    dcp_harness_result r;
    dcp_status st = dcp_harness_run(o, &r);
    int ok = st == DCP_OK && r.statuses_agree && r.step_status[0] == DCP_OK && r.verified && r.mismatches == 0;
    if (!ok)
        dcp_test_fail(__FILE__, __LINE__, "%s: harness %s, step %s, agree %d, verified %d, mismatches %lld: %s", what,
                      dcp_status_str(st), dcp_status_str(r.step_status[0]), r.statuses_agree, r.verified,
                      (long long)r.mismatches, r.message);
    if (ok && r.heap_bytes_max != 0)
        dcp_test_fail(__FILE__, __LINE__, "%s: a step allocated %llu bytes", what, (unsigned long long)r.heap_bytes_max);
    dcp_harness_result_free(&r);
    return ok;
}

static void base_options(dcp_harness_options *o, int32_t n, int32_t dp, int32_t cp, int32_t tp, int32_t pp)
{
    dcp_harness_options_default(o);
    o->config.data_parallel_size = dp;
    o->config.context_parallel_size = cp;
    o->config.tensor_parallel_size = tp;
    o->config.pipeline_parallel_size = pp;
    o->config.max_sequences = 512;
    o->config.max_seqlen_per_rank = 4096;
    o->lengths = trace;
    o->num_lengths = n;
}

DCP_TEST(dp2_dp_balanced_one_sequence_per_sample)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 64);
    DCP_REQUIRE(n == 64);
    dcp_harness_options o;
    base_options(&o, n, 2, 1, 1, 1);
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    run_checked(&o, "dp2");
}

DCP_TEST(layout_16_ranks_dp_balanced_zigzag_dummy_prepacked)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 256);
    DCP_REQUIRE(n == 256);
    dcp_harness_options o;
    base_options(&o, n, 2, 2, 2, 2); /* DP2 x CP2 x TP2 x PP2 */
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.config.pad_alignment = 16;
    o.prepacked = 1;
    run_checked(&o, "dp_balanced zigzag append_dummy prepacked");
}

DCP_TEST(layout_16_ranks_vpp_mtp_on_middle_stage)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 256);
    DCP_REQUIRE(n == 256);
    dcp_harness_options o;
    base_options(&o, n, 2, 2, 1, 4); /* DP2 x CP2 x PP4, VPP2, MTP on PP stage 2, virtual stage 1 */
    o.config.virtual_pipeline_size = 2;
    o.config.microbatch_group_size_per_vp_stage = 2;
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 8;
    o.mtp_pipeline_rank = 2;
    o.mtp_virtual_stages = 2;
    run_checked(&o, "dynamic_cp vpp mtp");
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    run_checked(&o, "dp_balanced vpp mtp extend_last");
}

DCP_TEST(layout_16_ranks_dynamic_cp_contiguous_extend_last_pad_to_max)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 256);
    DCP_REQUIRE(n == 256);
    dcp_harness_options o;
    base_options(&o, n, 4, 2, 2, 1); /* DP4 x CP2 x TP2 */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.cp_partition = DCP_CP_CONTIGUOUS;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    o.config.pad_to_max_seqlen = 1;
    run_checked(&o, "dynamic_cp contiguous extend_last max");
    o.config.thd_tail_policy = DCP_THD_TAIL_APPEND_DUMMY;
    o.prepacked = 1;
    run_checked(&o, "dynamic_cp contiguous append_dummy max prepacked");
}

DCP_TEST(layout_dynamic_cp_fixed_cu_capacity_and_no_padding)
{
    int32_t n = load("longsft_n256_seed1.txt", 128);
    DCP_REQUIRE(n == 128);
    dcp_harness_options o;
    base_options(&o, n, 4, 2, 1, 2); /* DP4 x CP2 x PP2 */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.max_seqlen_per_rank = 16384;
    o.config.pad_alignment = 32;
    o.config.max_sequences_per_microbatch = 6;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    run_checked(&o, "dynamic_cp fixed capacity extend_last");
    o.config.thd_tail_policy = DCP_THD_TAIL_APPEND_DUMMY;
    run_checked(&o, "dynamic_cp fixed capacity append_dummy");
    o.config.pad_alignment = 0;
    o.config.max_sequences_per_microbatch = 0;
    run_checked(&o, "dynamic_cp no padding");
}

/* One DPxCP rank (one GPU's shape): every token is the rank's own, landed from its samples; nothing is exchanged. */
DCP_TEST(layout_one_rank_keeps_every_token_without_an_exchange)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 256);
    DCP_REQUIRE(n == 256);
    dcp_harness_options o;
    base_options(&o, n, 1, 1, 1, 1);
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.max_seqlen_per_rank = 8192;
    o.config.pad_alignment = 64;
    o.steps = 2;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    DCP_CHECK(r.verified && r.mismatches == 0 && r.step_status[0] == DCP_OK);
    const dcp_step_stats *s = &r.rank_stats[0];
    DCP_CHECK_EQ_INT(s->exchange_bytes_sent, 0);
    DCP_CHECK_EQ_INT(s->exchange_bytes_received, 0);
    DCP_CHECK_EQ_INT(s->exchange_bytes_local, s->tokens_computed * 28);
    DCP_CHECK_EQ_INT(s->tokens_computed, s->tokens_in);
    DCP_CHECK(r.num_microbatches > 1);
    dcp_harness_result_free(&r);
    o.prepacked = 1;
    o.config.cp_partition = DCP_CP_CONTIGUOUS;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    run_checked(&o, "one rank, prepacked, extend_last");
}

DCP_TEST(layout_every_tp_rank_holds_data)
{
    int32_t n = load("bimodal_n256_seed1.txt", 48);
    DCP_REQUIRE(n == 48);
    dcp_harness_options o;
    base_options(&o, n, 2, 2, 4, 1); /* DP2 x CP2 x TP4, RL-style: no broadcast */
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 65536;
    o.config.cp_partition = DCP_CP_CONTIGUOUS;
    o.config.pad_alignment = 64;
    o.tp_ranks_hold_data = 1;
    run_checked(&o, "tp ranks hold data");
}

/* A bad input on one rank: every rank returns the same status in that step, and the next step verifies. */
static void check_fault(dcp_harness_fault fault, int32_t world_rank, dcp_status expected, int prepacked)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 128);
    dcp_harness_options o;
    base_options(&o, n, 2, 2, 2, 1); /* DP2 x CP2 x TP2 */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 8;
    o.prepacked = prepacked;
    o.steps = 2;
    o.fault = fault;
    o.fault_world_rank = world_rank;
    o.fault_step = 0;
    o.timeout_ms = 20000;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    DCP_CHECK(r.statuses_agree);
    if (r.step_status[0] != expected)
        dcp_test_fail(__FILE__, __LINE__, "fault %d: step 0 returned %s, expected %s", (int)fault,
                      dcp_status_str(r.step_status[0]), dcp_status_str(expected));
    DCP_CHECK_EQ_INT(r.step_status[1], DCP_OK);
    DCP_CHECK(r.verified);
    DCP_CHECK_EQ_INT(r.mismatches, 0);
    dcp_harness_result_free(&r);
}

DCP_TEST(bad_input_is_agreed_and_the_next_step_works)
{
    check_fault(DCP_HARNESS_FAULT_CU_DECREASING, 3, DCP_ERR_CORRUPT_INPUT, 1);
    check_fault(DCP_HARNESS_FAULT_CU_NOT_ZERO, 0, DCP_ERR_CORRUPT_INPUT, 1);
    check_fault(DCP_HARNESS_FAULT_CU_PAST_BUFFER, 2, DCP_ERR_CORRUPT_INPUT, 0);
    check_fault(DCP_HARNESS_FAULT_LENGTH_MISMATCH, 1, DCP_ERR_CORRUPT_INPUT, 0);
    check_fault(DCP_HARNESS_FAULT_FIELD_MISMATCH, 2, DCP_ERR_FIELD_MISMATCH, 0);
    check_fault(DCP_HARNESS_FAULT_CAPACITY, 3, DCP_ERR_CAPACITY, 0);
    check_fault(DCP_HARNESS_FAULT_SIBLINGS_DIFFER, 1, DCP_ERR_CORRUPT_INPUT, 0);
}

/*
 * A communicator fault on one rank at its k-th collective of a step, for every
 * k the step makes and each fault the in-process backend can plant: every rank
 * returns an error in that step (the same one, except that a rank which
 * never arrived at the world's own agreement knows only its local failure),
 * and the next step verifies on every rank.  A truncation where the faulty
 * rank has nothing to send changes nothing: that step must then verify too.
 */
static int32_t time_scale(void)
{
    const char *s = getenv("DCP_TEST_TIME_SCALE"); /* set by the sanitizer and valgrind jobs */
    int v = s ? atoi(s) : 1;
    return v >= 1 ? v : 1;
}

static void comm_fault_options(dcp_harness_options *o, int32_t n)
{
    base_options(o, n, 2, 2, 2, 1); /* DP2 x CP2 x TP2: lanes, TP broadcasts and world agreements */
    o->config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o->config.pad_alignment = 8;
    o->timeout_ms = 150 * time_scale();
}

static void check_comm_fault(int32_t n, int32_t world_rank, dcp_inproc_fault fault, int32_t call)
{
    dcp_harness_options o;
    comm_fault_options(&o, n);
    o.steps = 2;
    o.comm_fault = fault;
    o.comm_fault_call = call;
    o.fault_world_rank = world_rank;
    o.fault_step = 0;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    const int32_t world = r.world_size;
    dcp_status first_other = DCP_OK;
    int others_agree = 1, some_ok = 0, some_failed = 0;
    for (int32_t w = 0; w < world; w++) {
        dcp_status s = r.rank_step_status[w];
        if (s == DCP_OK) some_ok = 1;
        else some_failed = 1;
        if (w == world_rank) continue;
        if (first_other == DCP_OK && w == (world_rank == 0 ? 1 : 0)) first_other = s;
        else if (s != first_other) others_agree = 0;
    }
    dcp_status faulty = r.rank_step_status[world_rank];
    if (some_ok && some_failed)
        dcp_test_fail(__FILE__, __LINE__, "fault %d at rank %d call %d: some ranks succeeded, some failed (%s on rank %d)",
                      (int)fault, world_rank, call, dcp_status_str(faulty), world_rank);
    if (!others_agree)
        dcp_test_fail(__FILE__, __LINE__, "fault %d at rank %d call %d: the other ranks disagree", (int)fault,
                      world_rank, call);
    switch (fault) {
    case DCP_FAULT_RETURN_ERROR:
        DCP_CHECK_EQ_INT(faulty, DCP_ERR_COMM);
        DCP_CHECK_EQ_INT(first_other, DCP_ERR_COMM);
        break;
    case DCP_FAULT_NEVER_ARRIVE:
        /* the missing rank is seen as a timeout; the agreement names the lowest failing rank's status, and when
           the agreement itself times out its outcome is the same on every rank that took part (the others_agree
           check above, with every communicator on the same timeout) */
        DCP_CHECK(first_other == DCP_ERR_TIMEOUT || first_other == DCP_ERR_COMM);
        DCP_CHECK(faulty == DCP_ERR_TIMEOUT || faulty == DCP_ERR_COMM);
        break;
    case DCP_FAULT_TRUNCATE:
        DCP_CHECK(faulty == first_other);
        DCP_CHECK(faulty == DCP_OK || faulty == DCP_ERR_CORRUPT_INPUT);
        break;
    default: break;
    }
    for (int32_t w = 0; w < world; w++)
        if (r.rank_step_status[world + w] != DCP_OK)
            dcp_test_fail(__FILE__, __LINE__, "fault %d at rank %d call %d: rank %d's next step returned %s", (int)fault,
                          world_rank, call, w, dcp_status_str(r.rank_step_status[world + w]));
    if (!r.verified || r.mismatches != 0)
        dcp_test_fail(__FILE__, __LINE__, "fault %d at rank %d call %d: verified %d, %lld mismatches: %s", (int)fault,
                      world_rank, call, r.verified, (long long)r.mismatches, r.message);
    dcp_harness_result_free(&r);
}

DCP_TEST(communicator_faults_at_every_collective_are_agreed_and_the_next_step_works)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 128);
    dcp_harness_options o;
    comm_fault_options(&o, n);
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    DCP_REQUIRE(r.step_status[0] == DCP_OK && r.verified);
    /* world rank 1: TP rank 0 of a lane (gathers, exchanges, broadcasts); world rank 6: a TP rank that receives */
    const int32_t ranks[2] = {1, 6};
    int32_t calls[2] = {r.rank_collectives[1], r.rank_collectives[6]};
    DCP_CHECK_EQ_INT(r.rank_tensor[1], 0);
    DCP_CHECK_EQ_INT(r.rank_tensor[6], 1);
    DCP_CHECK(calls[0] > calls[1] && calls[1] >= 4); /* three agreements and the TP broadcasts at least */
    dcp_harness_result_free(&r);
    const int slow = time_scale() > 1;
    for (int i = 0; i < 2; i++)
        for (int32_t k = 0; k < calls[i]; k++) {
            check_comm_fault(n, ranks[i], DCP_FAULT_RETURN_ERROR, k);
            check_comm_fault(n, ranks[i], DCP_FAULT_TRUNCATE, k);
            /* each waits out timeouts: under slow tools only the first and last collective */
            if (!slow || k == 0 || k == calls[i] - 1) check_comm_fault(n, ranks[i], DCP_FAULT_NEVER_ARRIVE, k);
        }
}

/*
 * DP 2 x TP 2, every communicator on the same timeout (300 ms, then 1 s), the TP root of DP rank 0 never
 * arriving at one of its collectives (each in turn, the all-to-all-v ten times): every rank without the fault
 * returns one status, whichever place it waited in.
 */
static void check_one_status(int32_t n, int32_t timeout_ms, int32_t call, int runs)
{
    for (int run = 0; run < runs; run++) {
        dcp_harness_options o;
        base_options(&o, n, 2, 1, 2, 1);
        o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
        o.timeout_ms = timeout_ms;
        o.steps = 1;
        o.comm_fault = DCP_FAULT_NEVER_ARRIVE;
        o.comm_fault_call = call;
        o.fault_world_rank = 0;
        o.fault_step = 0;
        dcp_harness_result r;
        DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
        /* the ranks without the fault agree; the faulty rank fails too (when it skipped an agreement it knows only
           its own failure) */
        for (int32_t w = 2; w < r.world_size; w++)
            if (r.rank_step_status[w] != r.rank_step_status[1])
                dcp_test_fail(__FILE__, __LINE__, "timeout %d ms, call %d, run %d: rank %d returned %s, rank 1 %s",
                              timeout_ms, call, run, w, dcp_status_str(r.rank_step_status[w]),
                              dcp_status_str(r.rank_step_status[1]));
        DCP_CHECK(r.rank_step_status[0] != DCP_OK && r.rank_step_status[1] != DCP_OK);
        dcp_harness_result_free(&r);
    }
}

DCP_TEST(a_missing_peer_gives_every_rank_one_status_with_equal_timeouts)
{
    int32_t n = load("mlmdefault_n256_seed1.txt", 64);
    dcp_harness_options o;
    base_options(&o, n, 2, 1, 2, 1);
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    int32_t calls = r.rank_collectives[0];
    DCP_REQUIRE(r.step_status[0] == DCP_OK && r.rank_tensor[0] == 0 && calls >= 7);
    dcp_harness_result_free(&r);
    /* its collectives: call agreement, headers, lengths, agreement, the all-to-all-v (4), TP header, body, agreement */
    const int32_t exchange = 4;
    check_one_status(n, 300 * time_scale(), exchange, 10);
    check_one_status(n, 1000 * time_scale(), exchange, 2);
    for (int32_t k = 0; k < calls; k++)
        if (k != exchange) check_one_status(n, 300 * time_scale(), k, 1);
}

DCP_TEST(zero_heap_allocations_for_a_4096_sequence_step)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    int32_t n = load("mlmdefault_n4096_seed1.txt", 4096);
    DCP_REQUIRE(n == 4096);
    dcp_harness_options o;
    base_options(&o, n, 4, 2, 1, 1); /* 8 ranks */
    o.config.max_sequences = 4096;
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 16;
    o.steps = 3;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r));
    DCP_CHECK(r.statuses_agree);
    DCP_CHECK_EQ_INT(r.step_status[0], DCP_OK);
    DCP_CHECK(r.verified);
    DCP_CHECK_EQ_INT(r.heap_bytes_max, 0);
    DCP_CHECK(r.num_microbatches > 1);
    /* each rank receives only the tokens it computes on, well under the reference's all-gather */
    for (int32_t w = 0; w < r.world_size; w++) {
        const dcp_step_stats *s = &r.rank_stats[w];
        DCP_CHECK(s->exchange_bytes_received + s->exchange_bytes_local == s->tokens_computed * 28);
        DCP_CHECK(s->exchange_bytes_received < s->reference_bytes_received / 2);
    }
    dcp_harness_result_free(&r);
}

DCP_TEST(flops_scalars_are_exact_where_float32_rounds)
{
    /* the reference sends sum(s^2) to the other TP ranks as float32: 24-bit mantissa */
    static int32_t lengths[64];
    for (int i = 0; i < 64; i++) lengths[i] = 100001 + 2 * i; /* the sum needs 40 bits */
    dcp_harness_options o;
    dcp_harness_options_default(&o);
    o.config.data_parallel_size = 2;
    o.config.tensor_parallel_size = 2;
    o.config.max_sequences = 64;
    o.config.max_seqlen_per_rank = 131072;
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.lengths = lengths;
    o.num_lengths = 64;
    dcp_harness_result r;
    DCP_REQUIRE_OK(dcp_harness_run(&o, &r)); /* verify_rank checks both sums exactly on every rank, TP peers too */
    DCP_CHECK(r.verified);
    int64_t exact = 0;
    for (int i = 0; i < 64; i++) {
        int64_t padded = (lengths[i] + 3) / 4 * 4; /* the harness pads spans to 2 * DPxCP ranks */
        exact += padded * padded;
    }
    float as_float32 = (float)(double)exact;
    DCP_CHECK((int64_t)as_float32 != exact);
    DCP_CHECK(exact > (1 << 24));
    dcp_harness_result_free(&r);
}

DCP_TEST(planning_only_context_refuses_a_step)
{
    dcp_config c;
    dcp_config_default(&c); /* max_tokens_per_rank 0: no data-plane buffers */
    dcp_context *ctx = NULL;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    const dcp_step_output *out = NULL;
    DCP_CHECK_STATUS(dcp_step(ctx, &args, NULL, &out), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(dcp_context_last_error(ctx), "max_tokens_per_rank");
    DCP_CHECK(out == NULL);
    dcp_context_destroy(ctx);
    /* with the data plane on, a step without a world communicator is refused before anything moves */
    c.max_tokens_per_rank = 4096;
    DCP_REQUIRE_OK(dcp_context_create(&c, &ctx));
    DCP_CHECK_STATUS(dcp_step(ctx, &args, NULL, &out), DCP_ERR_NULL_POINTER);
    DCP_CHECK(out == NULL);
    dcp_context_destroy(ctx);
}
