/* dcp-test-label: gpu */
/*
 * test_gpu_step.c - dcp_step() on real GPUs: one thread per GPU, NCCL
 * communicators, input in device memory, a CUDA workspace per context.  Every
 * rank's outputs are downloaded and checked element by element against the
 * CPU in-process oracle (programs/harness/oracle.c), for dynamic CP and dp_balanced, with
 * VPP and MTP, TP broadcast and pre-packed input.  After a warm-up step, no
 * step takes device memory (cudaMemGetInfo) or allocates on the heap beyond
 * what NCCL itself allocates and frees inside each collective call (jemalloc
 * counters on each rank's thread; NCCL's per-call bytes measured in the same
 * run).  Layouts need 2 or 4 GPUs and are
 * skipped with fewer.
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
    return dcp_harness_read_trace(dcp_test_data_path(rel), trace, n);
}

#define REQUIRE_GPUS(count)                                                                                \
    do {                                                                                                   \
        int32_t have_ = dcp_cuda_device_count();                                                           \
        if (have_ < 1) DCP_SKIP("no GPU");                                                                 \
        if (!dcp_nccl_available()) DCP_SKIP("built without NCCL");                                         \
        if (have_ < (count)) DCP_SKIP("needs " #count " GPUs");                                            \
    } while (0)

static void run_checked(dcp_harness_options *o, const char *what)
{
    o->gpu = 1;
    o->steps = 3; /* a warm-up, then two measured steps */
    dcp_harness_result r;
    dcp_status st = dcp_harness_run(o, &r);
    int ok = st == DCP_OK && r.statuses_agree && r.step_status[0] == DCP_OK && r.step_status[1] == DCP_OK &&
             r.step_status[2] == DCP_OK && r.verified && r.mismatches == 0;
    if (!ok)
        dcp_test_fail(__FILE__, __LINE__, "%s: harness %s, step %s, agree %d, verified %d, mismatches %lld: %s", what,
                      dcp_status_str(st), dcp_status_str(r.step_status[0]), r.statuses_agree, r.verified,
                      (long long)r.mismatches, r.message);
    /* NCCL 2.27+ allocates and frees a group job in every ncclGroupEnd; nothing else in a step may allocate.
       Under compute-sanitizer (DCP_TEST_UNDER_SANITIZER set) the tool itself allocates on the thread: not counted. */
    if (ok && r.heap_bytes_beyond_nccl > 0 && !getenv("DCP_TEST_UNDER_SANITIZER"))
        dcp_test_fail(__FILE__, __LINE__, "%s: a step after the warm-up allocated %lld heap bytes beyond NCCL's own "
                      "%llu per collective", what, (long long)r.heap_bytes_beyond_nccl,
                      (unsigned long long)r.nccl_heap_per_call);
    if (ok && r.device_bytes_delta != 0)
        dcp_test_fail(__FILE__, __LINE__, "%s: free device memory fell by %lld bytes over the measured steps", what,
                      (long long)r.device_bytes_delta);
    printf("%s: %d microbatches, %d ranks, step median %.3f ms, heap %llu B per step (NCCL: %llu B per collective, "
           "beyond NCCL: %lld B), device %lld B\n",
           what, r.num_microbatches, r.world_size, r.step_seconds_median * 1e3, (unsigned long long)r.heap_bytes_max,
           (unsigned long long)r.nccl_heap_per_call, (long long)r.heap_bytes_beyond_nccl, (long long)r.device_bytes_delta);
    dcp_harness_result_free(&r);
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

DCP_TEST(two_gpus_dynamic_cp_zigzag)
{
    REQUIRE_GPUS(2);
    DCP_REQUIRE(load("mlmdefault_n256_seed1.txt", 256) == 256);
    dcp_harness_options o;
    base_options(&o, 256, 1, 2, 1, 1); /* one pool of 2 DPxCP ranks */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 16;
    run_checked(&o, "2 GPUs dynamic_cp zigzag append_dummy");
    o.prepacked = 1;
    o.config.max_sequences_per_microbatch = 12;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    run_checked(&o, "2 GPUs dynamic_cp prepacked fixed cu capacity extend_last");
}

DCP_TEST(two_gpus_dp_balanced)
{
    REQUIRE_GPUS(2);
    DCP_REQUIRE(load("mlmdefault_n256_seed1.txt", 256) == 256);
    dcp_harness_options o;
    base_options(&o, 256, 2, 1, 1, 1);
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.prepacked = 1;
    run_checked(&o, "2 GPUs DP2 dp_balanced prepacked");
    base_options(&o, 256, 1, 2, 1, 1);
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.config.cp_partition = DCP_CP_CONTIGUOUS;
    o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    o.config.pad_to_max_seqlen = 1;
    run_checked(&o, "2 GPUs CP2 dp_balanced contiguous extend_last max");
}

DCP_TEST(two_gpus_vpp_and_mtp)
{
    REQUIRE_GPUS(2);
    DCP_REQUIRE(load("mlmdefault_n256_seed1.txt", 256) == 256);
    dcp_harness_options o;
    base_options(&o, 256, 1, 1, 1, 2); /* PP2, VPP2, MTP on the last stage's first virtual stage */
    o.config.max_seqlen_per_rank = 8192; /* one DPxCP rank: it must hold the longest sequence */
    o.config.virtual_pipeline_size = 2;
    o.config.microbatch_group_size_per_vp_stage = 2;
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.pad_alignment = 8;
    o.mtp_pipeline_rank = 1;
    o.mtp_virtual_stages = 1;
    run_checked(&o, "2 GPUs PP2 VPP2 MTP dp_balanced");
    /* one DPxCP rank: dynamic CP has no CP groups to split for the VPP alignment, so none is asked for */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.microbatch_group_size_per_vp_stage = 1;
    run_checked(&o, "2 GPUs PP2 VPP2 MTP dynamic_cp");
}

DCP_TEST(two_gpus_tensor_parallel_broadcast)
{
    REQUIRE_GPUS(2);
    DCP_REQUIRE(load("longsft_n256_seed1.txt", 128) == 128);
    dcp_harness_options o;
    base_options(&o, 128, 1, 1, 2, 1); /* TP rank 0 holds the data, rank 1 receives the device body */
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.max_seqlen_per_rank = 65536;
    o.config.pad_alignment = 64;
    run_checked(&o, "2 GPUs TP2 broadcast");
}

DCP_TEST(four_gpus_dynamic_cp_and_dp_balanced)
{
    REQUIRE_GPUS(4);
    DCP_REQUIRE(load("mlmdefault_n1024_seed1.txt", 1024) == 1024);
    dcp_harness_options o;
    base_options(&o, 1024, 2, 2, 1, 1);
    o.config.max_sequences = 1024;
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 32;
    run_checked(&o, "4 GPUs DP2xCP2 dynamic_cp");
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.prepacked = 1;
    run_checked(&o, "4 GPUs DP2xCP2 dp_balanced prepacked");
}

DCP_TEST(four_gpus_vpp_mtp_and_tp)
{
    REQUIRE_GPUS(4);
    DCP_REQUIRE(load("mlmdefault_n256_seed1.txt", 256) == 256);
    dcp_harness_options o;
    base_options(&o, 256, 1, 2, 1, 2); /* CP2 x PP2, VPP2, MTP on stage 1 */
    o.config.virtual_pipeline_size = 2;
    o.config.microbatch_group_size_per_vp_stage = 2;
    o.config.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    o.config.pad_alignment = 8;
    o.mtp_pipeline_rank = 1;
    o.mtp_virtual_stages = 1;
    run_checked(&o, "4 GPUs CP2xPP2 VPP2 MTP dynamic_cp");
    base_options(&o, 256, 2, 1, 2, 1); /* DP2 x TP2 */
    o.config.scheduler = DCP_SCHEDULER_DP_BALANCED;
    o.config.max_seqlen_per_rank = 8192;
    o.config.pad_alignment = 16;
    run_checked(&o, "4 GPUs DP2xTP2 dp_balanced");
}
