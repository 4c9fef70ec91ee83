/*
 * cmd_step.c - `dcpack step`: one whole step over in-process ranks on
 * synthetic token data, optionally every rank checked against the oracle;
 * prints JSON.
 *
 *   dcpack step --trace FILE --dp D --cp C --tp T --pp P [--vpp V] [--scheduler S] [--check]
 *               [--max-seqlen M] [--max-sequences N] [--pad-alignment A | --pad-to-max]
 *               [--tail append_dummy|extend_last] [--cp-partition zigzag|contiguous]
 *               [--microbatch-group G] [--mtp-stage P] [--mtp-virtual-stages MASK]
 *               [--max-sequences-per-microbatch K] [--prepacked] [--tp-ranks-hold-data] [--steps K]
 *
 * Exit status: 0 when every step succeeded (and verified, with --check), 1 otherwise, 2 on bad usage,
 * 3 when the trace cannot be read.
 */
#include "dcpack.h"
#include "step_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dcp_cli_step(int argc, char **argv);

static void usage_to(FILE *out)
{
    fprintf(out,
            "usage: dcpack step --trace FILE --dp D --cp C --tp T --pp P [--vpp V] [--scheduler S] [--check]\n"
            "       [--max-seqlen M] [--max-sequences N] [--pad-alignment A | --pad-to-max]\n"
            "       [--tail append_dummy|extend_last] [--cp-partition zigzag|contiguous] [--microbatch-group G]\n"
            "       [--mtp-stage P] [--mtp-virtual-stages MASK] [--max-sequences-per-microbatch K]\n"
            "       [--prepacked] [--tp-ranks-hold-data] [--steps K]\n");
}

static void usage(void) { usage_to(stderr); }

static int parse_int(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int dcp_cli_step(int argc, char **argv)
{
    dcp_harness_options o;
    dcp_harness_options_default(&o);
    o.check = 0;
    o.steps = 3;
    o.config.max_seqlen_per_rank = 8192;
    const char *trace = NULL;
    int group_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage_to(stdout);
            printf("\nexample:\n  dcpack step --trace lengths.txt --dp 2 --cp 2 --tp 2 --pp 2 --check\n"
                   "\nexit status: 0 every step succeeded (and verified, with --check); 1 otherwise; 2 usage error;\n"
                   "3 a trace that cannot be read.\n");
            return 0;
        }
#define INT_ARG(name, lo, hi, dst)                                                                                 \
    if (strcmp(a, name) == 0) {                                                                                    \
        if (!v || parse_int(v, lo, hi, &x) != 0) {                                                                 \
            fprintf(stderr, "dcpack step: %s needs an integer in [%ld, %ld]\n", name, (long)(lo), (long)(hi));     \
            return 2;                                                                                              \
        }                                                                                                          \
        dst = (int32_t)x;                                                                                          \
        i++;                                                                                                       \
        continue;                                                                                                  \
    }
        INT_ARG("--dp", 1, 1 << 16, o.config.data_parallel_size)
        INT_ARG("--cp", 1, 1 << 16, o.config.context_parallel_size)
        INT_ARG("--tp", 1, 1 << 10, o.config.tensor_parallel_size)
        INT_ARG("--pp", 1, 1 << 10, o.config.pipeline_parallel_size)
        INT_ARG("--vpp", 1, 64, o.config.virtual_pipeline_size)
        INT_ARG("--max-seqlen", 1, 1 << 30, o.config.max_seqlen_per_rank)
        INT_ARG("--max-sequences", 1, 1 << 24, o.config.max_sequences)
        INT_ARG("--pad-alignment", 0, 1 << 20, o.config.pad_alignment)
        INT_ARG("--max-sequences-per-microbatch", 0, 1 << 24, o.config.max_sequences_per_microbatch)
        INT_ARG("--mtp-stage", -1, 1 << 10, o.mtp_pipeline_rank)
        INT_ARG("--steps", 1, 1000, o.steps)
        if (strcmp(a, "--microbatch-group") == 0) {
            if (!v || parse_int(v, 0, 1 << 16, &x) != 0) return usage(), 2;
            o.config.microbatch_group_size_per_vp_stage = (int32_t)x;
            group_set = 1;
            i++;
            continue;
        }
        if (strcmp(a, "--mtp-virtual-stages") == 0) {
            if (!v || parse_int(v, 0, 0x7fffffff, &x) != 0) return usage(), 2;
            o.mtp_virtual_stages = (uint32_t)x;
            i++;
            continue;
        }
        if (strcmp(a, "--trace") == 0 && v) {
            trace = v;
            i++;
            continue;
        }
        if (strcmp(a, "--scheduler") == 0 && v) {
            if (dcp_scheduler_from_name(v, &o.config.scheduler) != DCP_OK) {
                fprintf(stderr, "dcpack step: unknown scheduler %s (dp_balanced, dynamic_cp, balanced)\n", v);
                return 2;
            }
            i++;
            continue;
        }
        if (strcmp(a, "--tail") == 0 && v) {
            if (strcmp(v, "append_dummy") == 0) o.config.thd_tail_policy = DCP_THD_TAIL_APPEND_DUMMY;
            else if (strcmp(v, "extend_last") == 0) o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
            else return usage(), 2;
            i++;
            continue;
        }
        if (strcmp(a, "--cp-partition") == 0 && v) {
            if (strcmp(v, "zigzag") == 0) o.config.cp_partition = DCP_CP_ZIGZAG;
            else if (strcmp(v, "contiguous") == 0) o.config.cp_partition = DCP_CP_CONTIGUOUS;
            else return usage(), 2;
            i++;
            continue;
        }
        if (strcmp(a, "--pad-to-max") == 0) { o.config.pad_to_max_seqlen = 1; continue; }
        if (strcmp(a, "--check") == 0) { o.check = 1; continue; }
        if (strcmp(a, "--prepacked") == 0) { o.prepacked = 1; continue; }
        if (strcmp(a, "--tp-ranks-hold-data") == 0) { o.tp_ranks_hold_data = 1; continue; }
        fprintf(stderr, "dcpack step: unknown argument %s\n", a);
        usage();
        return 2;
#undef INT_ARG
    }
    if (!trace) {
        usage();
        return 2;
    }
    if (o.config.virtual_pipeline_size > 1 && !group_set)
        o.config.microbatch_group_size_per_vp_stage = o.config.pipeline_parallel_size;

    int32_t capacity = o.config.max_sequences > 0 ? o.config.max_sequences : 4096;
    int32_t *lengths = malloc(sizeof *lengths * (size_t)capacity);
    int32_t n = lengths ? dcp_harness_read_trace(trace, lengths, capacity) : -1;
    if (n <= 0) {
        fprintf(stderr, "dcpack step: cannot read %s (at most %d lengths)\n", trace, capacity);
        free(lengths);
        return 3; /* bad input, as for every command */
    }
    o.lengths = lengths;
    o.num_lengths = n;

    dcp_harness_result r;
    dcp_status st = dcp_harness_run(&o, &r);
    if (st != DCP_OK) {
        printf("{\"error\": \"%s\", \"message\": \"%s\"}\n", dcp_status_str(st), r.message);
        free(lengths);
        dcp_harness_result_free(&r);
        return 1;
    }
    int ok = r.statuses_agree && r.step_status[0] == DCP_OK && (!o.check || r.verified);
    int64_t ours = 0, reference = 0, computed = 0;
    printf("{\n  \"trace\": \"%s\",\n  \"sequences\": %d,\n  \"tokens\": %lld,\n", trace, n, (long long)r.total_tokens);
    printf("  \"dp\": %d, \"cp\": %d, \"tp\": %d, \"pp\": %d, \"vpp\": %d, \"scheduler\": \"%s\",\n",
           o.config.data_parallel_size, o.config.context_parallel_size, o.config.tensor_parallel_size,
           o.config.pipeline_parallel_size, o.config.virtual_pipeline_size, dcp_scheduler_name(o.config.scheduler));
    printf("  \"status\": \"%s\",\n  \"statuses_agree\": %s,\n", dcp_status_str(r.step_status[0]),
           r.statuses_agree ? "true" : "false");
    if (o.check) printf("  \"verified\": %s,\n  \"mismatches\": %lld,\n", r.verified ? "true" : "false", (long long)r.mismatches);
    else printf("  \"verified\": null,\n");
    /* jemalloc counts bytes per thread: 0 bytes allocated or freed inside every dcp_step means 0 allocations */
    printf("  \"heap_bytes_per_step\": %llu,\n  \"heap_allocations_per_step\": %s,\n",
           (unsigned long long)r.heap_bytes_max, r.heap_bytes_max == 0 ? "0" : "\"nonzero: see heap_bytes_per_step\"");
    printf("  \"microbatches\": %d,\n  \"steps\": %d,\n", r.num_microbatches, o.steps);
    printf("  \"step_seconds_min\": %.6f,\n  \"step_seconds_median\": %.6f,\n", r.step_seconds_min, r.step_seconds_median);
    printf("  \"ranks\": [\n");
    for (int32_t w = 0; w < r.world_size; w++) {
        const dcp_step_stats *s = &r.rank_stats[w];
        ours += s->exchange_bytes_received;
        reference += s->reference_bytes_received;
        computed += s->tokens_computed;
        printf("    {\"world_rank\": %d, \"pp\": %d, \"tp\": %d, \"dpxcp\": %d, \"tokens_computed\": %lld, "
               "\"tokens_out\": %lld, \"bytes_received\": %lld, \"bytes_sent\": %lld, \"bytes_local\": %lld, "
               "\"reference_bytes_received\": %lld, \"metadata_bytes_received\": %lld, \"broadcast_bytes\": %lld, "
               "\"collectives\": %d}%s\n",
               w, r.rank_pipeline[w], r.rank_tensor[w], r.rank_dpxcp[w], (long long)s->tokens_computed,
               (long long)s->tokens_out, (long long)s->exchange_bytes_received, (long long)s->exchange_bytes_sent,
               (long long)s->exchange_bytes_local, (long long)s->reference_bytes_received,
               (long long)s->metadata_bytes_received, (long long)s->broadcast_bytes, s->collectives,
               w + 1 < r.world_size ? "," : "");
    }
    printf("  ],\n  \"bytes_received_total\": %lld,\n  \"reference_bytes_received_total\": %lld,\n", (long long)ours,
           (long long)reference);
    printf("  \"tokens_computed_total\": %lld,\n", (long long)computed);
    printf("  \"reference_over_dcpack\": %.3f\n", ours > 0 ? (double)reference / (double)ours : 0.0);
    printf("}\n");
    if (!ok && r.message[0]) fprintf(stderr, "dcpack step: %s\n", r.message);
    free(lengths);
    dcp_harness_result_free(&r);
    return ok ? 0 : 1;
}
