/*
 * cmd_step.c - `dcpack step`: whole data-plane steps over in-process ranks on
 * synthetic token data, optionally every rank checked against the oracle;
 * prints JSON.  The trace is read as `dcpack plan` reads it.
 */
#include "cli.h"
#include "step_harness.h"

#include <stdlib.h>
#include <string.h>

static const char step_usage[] =
    "usage: dcpack step [input] [configuration] [--steps K] [--check]\n"
    "\n"
    "Run whole dcp_step() calls over in-process ranks, one thread per rank of DP x CP x TP x PP,\n"
    "on synthetic token data, and print a JSON report: per-rank exchange bytes, step times and\n"
    "heap use. Each length is rounded up to a multiple of 2 x DP x CP (so zigzag can cut it).\n"
    "\n"
    "input (one of; default: the embedded default batch, mlmdefault:n=1024,seed=1, as dcpack plan):\n"
    "  --trace FILE|-          lengths from FILE ('-': standard input), read as dcpack plan reads them\n"
    "  --column NAME           the length column of a CSV file or the key of a JSON Lines file\n"
    "  --input-format F        auto (default), text (one length per line), csv, jsonl\n"
    "  --generate SPEC         a generated trace (see dcpack generate --help)\n"
    "\n"
    "configuration:\n"
    "  --dp D, --cp C          data- and context-parallel sizes: D x C DPxCP ranks (default 1, 1)\n"
    "  --tp T, --pp P          tensor- and pipeline-parallel sizes (default 1, 1)\n"
    "  --vpp V                 virtual pipeline stages per PP stage (default 1: none)\n"
    "  --microbatch-group G    microbatch count must be a multiple of G (default: P with --vpp > 1,\n"
    "                          else 0: none)\n"
    "  --scheduler S           dp_balanced, dynamic_cp (default) or balanced; with dp_balanced,\n"
    "                          --cp is the static CP size\n"
    "  --max-seqlen M          tokens one DPxCP rank holds in a microbatch (default 8192)\n"
    "  --max-sequences K       capacity of the contexts (default: the trace's count rounded up);\n"
    "                          a trace with more sequences is bad input\n"
    "  --max-sequences-per-microbatch K   per rank (default 0: unlimited)\n"
    "  --pad-alignment A       pad each rank's THD tensors to a multiple of A (default 0: no padding)\n"
    "  --pad-to-max            pad each rank's THD tensors to --max-seqlen exactly (wins over\n"
    "                          --pad-alignment)\n"
    "  --tail T                where the padding goes: append_dummy (default: one more, dummy,\n"
    "                          sequence) or extend_last (the last real sequence's padded end)\n"
    "  --cp-partition P        how a sequence is cut over its CP group: zigzag (default) or contiguous\n"
    "  --mtp-stage P           the PP stage that holds MTP layers, 0 to --pp minus 1 (default -1: none)\n"
    "  --mtp-virtual-stages MASK   on that stage, bit v: virtual stage v holds them, v below --vpp\n"
    "                          (needed with --mtp-stage; 1 with --vpp 1)\n"
    "  --prepacked             samples arrive pre-packed (4 sequences each, with cu_seqlens)\n"
    "  --tp-ranks-hold-data    every TP rank brings the batch and runs the step (default: TP rank 0\n"
    "                          does and broadcasts the outputs)\n"
    "\n"
    "run:\n"
    "  --steps K               steps to run (default 3); the times are the slowest rank's, over steps\n"
    "  --check                 after each step, compare every rank's outputs with an independent\n"
    "                          reference (\"verified\", \"mismatches\")\n"
    "  -h, --help              this help\n"
    "\n"
    "output: one JSON object {\"trace\", \"sequences\", \"tokens\" (padded), \"dp\", \"cp\", \"tp\", \"pp\",\n"
    "\"vpp\", \"scheduler\", \"status\", \"statuses_agree\", \"verified\" (null without --check),\n"
    "[\"mismatches\",] \"heap_bytes_per_step\", \"heap_allocations_per_step\", \"microbatches\",\n"
    "\"steps\", \"step_seconds_min\", \"step_seconds_median\", \"ranks\": [{...} per world rank],\n"
    "\"bytes_received_total\", \"reference_bytes_received_total\", \"tokens_computed_total\",\n"
    "\"reference_over_dcpack\"}. heap_bytes_per_step is the most heap bytes one rank allocated\n"
    "plus freed inside one dcp_step() (jemalloc's per-thread counters), null when they cannot be\n"
    "read (a build without jemalloc); heap_allocations_per_step is 0 when that is 0 bytes, and\n"
    "null otherwise (the counters count bytes, not calls). When the step cannot run at all the\n"
    "object is {\"trace\", \"error\": {\"status\", \"message\"}}.\n"
    "\n"
    "examples:\n"
    "  dcpack step --trace lengths.txt --dp 2 --cp 2 --tp 2 --pp 2 --check\n"
    "  dcpack step --trace batch.csv --column seq_len --dp 4 --cp 2 --scheduler dp_balanced --check\n"
    "  dcpack step --generate mlmdefault:n=256 --dp 2 --pp 4 --vpp 2 --mtp-stage 3 --mtp-virtual-stages 2\n"
    "\n"
    "exit status: 0 every step succeeded (and verified, with --check); 1 a step failed, the ranks'\n"
    "statuses differ or a rank did not verify (the JSON still prints), or the steps could not run\n"
    "(out of memory, or a thread for every rank could not be started);\n"
    "2 usage error or an invalid configuration; 3 bad input (a trace that cannot be read or holds\n"
    "a bad value, more sequences than --max-sequences, a sequence longer than its ranks hold).\n";

/* A length no group of ranks may hold: named by file:line, as plan names it. */
static int check_lengths(const dcp_harness_options *o, const dcp_cli_trace *trace)
{
    const dcp_config *c = &o->config;
    const int64_t ranks = (int64_t)c->data_parallel_size * c->context_parallel_size;
    const int64_t group = c->scheduler == DCP_SCHEDULER_DP_BALANCED ? c->context_parallel_size : ranks;
    const int64_t m = c->max_seqlen_per_rank;
    char where[600], hold[160];
    for (int32_t i = 0; i < trace->count; i++) {
        if (trace->lengths[i] <= group * m) continue;
        dcp_cli_trace_where(trace, i, where, sizeof where);
        if (c->scheduler == DCP_SCHEDULER_DP_BALANCED)
            return dcp_cli_fail(DCP_EXIT_INPUT, "step", "%s: length %d exceeds %s (raise --cp or --max-seqlen)", where,
                                trace->lengths[i], dcp_cli_ranks_hold(group, m, 1, hold, sizeof hold));
        return dcp_cli_fail(DCP_EXIT_INPUT, "step", "%s: length %d exceeds %s", where, trace->lengths[i],
                            dcp_cli_ranks_hold(ranks, m, 0, hold, sizeof hold));
    }
    return DCP_EXIT_OK;
}

/*
 * The first failed step's status over every rank (the table is step-major:
 * step_status only holds rank 0's first 8), else DCP_OK.
 */
static dcp_status steps_status(const dcp_harness_options *o, const dcp_harness_result *r)
{
    if (!r->rank_step_status) {
        const int32_t n = o->steps < 8 ? o->steps : 8;
        for (int32_t i = 0; i < n; i++)
            if (r->step_status[i] != DCP_OK) return r->step_status[i];
        return DCP_OK;
    }
    for (int64_t i = 0; i < (int64_t)o->steps * r->world_size; i++)
        if (r->rank_step_status[i] != DCP_OK) return r->rank_step_status[i];
    return DCP_OK;
}

static void print_report(const dcp_harness_options *o, const dcp_harness_result *r, const dcp_cli_trace *trace)
{
    int64_t ours = 0, reference = 0, computed = 0;
    printf("{\n  \"trace\": ");
    dcp_cli_json_string(stdout, trace->name);
    printf(",\n  \"sequences\": %d,\n  \"tokens\": %lld,\n", trace->count, (long long)r->total_tokens);
    printf("  \"dp\": %d, \"cp\": %d, \"tp\": %d, \"pp\": %d, \"vpp\": %d, \"scheduler\": ",
           o->config.data_parallel_size, o->config.context_parallel_size, o->config.tensor_parallel_size,
           o->config.pipeline_parallel_size, o->config.virtual_pipeline_size);
    dcp_cli_json_string(stdout, dcp_scheduler_name(o->config.scheduler));
    printf(",\n  \"status\": ");
    dcp_cli_json_string(stdout, dcp_status_str(steps_status(o, r)));
    printf(",\n  \"statuses_agree\": %s,\n", r->statuses_agree ? "true" : "false");
    if (o->check)
        printf("  \"verified\": %s,\n  \"mismatches\": %lld,\n", r->verified ? "true" : "false", (long long)r->mismatches);
    else printf("  \"verified\": null,\n");
    /* the counters count bytes: 0 bytes is 0 allocations, any other amount an unknown number of them */
    if (r->heap_measured)
        printf("  \"heap_bytes_per_step\": %llu,\n  \"heap_allocations_per_step\": %s,\n",
               (unsigned long long)r->heap_bytes_max, r->heap_bytes_max == 0 ? "0" : "null");
    else printf("  \"heap_bytes_per_step\": null,\n  \"heap_allocations_per_step\": null,\n");
    printf("  \"microbatches\": %d,\n  \"steps\": %d,\n", r->num_microbatches, o->steps);
    printf("  \"step_seconds_min\": %.6f,\n  \"step_seconds_median\": %.6f,\n", r->step_seconds_min,
           r->step_seconds_median);
    printf("  \"ranks\": [\n");
    for (int32_t w = 0; w < r->world_size; w++) {
        const dcp_step_stats *s = &r->rank_stats[w];
        ours += s->exchange_bytes_received;
        reference += s->reference_bytes_received;
        computed += s->tokens_computed;
        printf("    {\"world_rank\": %d, \"pp\": %d, \"tp\": %d, \"dpxcp\": %d, \"tokens_computed\": %lld, "
               "\"tokens_out\": %lld, \"bytes_received\": %lld, \"bytes_sent\": %lld, \"bytes_local\": %lld, "
               "\"reference_bytes_received\": %lld, \"metadata_bytes_received\": %lld, \"broadcast_bytes\": %lld, "
               "\"collectives\": %d}%s\n",
               w, r->rank_pipeline[w], r->rank_tensor[w], r->rank_dpxcp[w], (long long)s->tokens_computed,
               (long long)s->tokens_out, (long long)s->exchange_bytes_received, (long long)s->exchange_bytes_sent,
               (long long)s->exchange_bytes_local, (long long)s->reference_bytes_received,
               (long long)s->metadata_bytes_received, (long long)s->broadcast_bytes, s->collectives,
               w + 1 < r->world_size ? "," : "");
    }
    printf("  ],\n  \"bytes_received_total\": %lld,\n  \"reference_bytes_received_total\": %lld,\n", (long long)ours,
           (long long)reference);
    printf("  \"tokens_computed_total\": %lld,\n", (long long)computed);
    printf("  \"reference_over_dcpack\": %.3f\n", ours > 0 ? (double)reference / (double)ours : 0.0);
    printf("}\n");
}

int dcp_cli_step(int argc, char **argv)
{
    dcp_harness_options o;
    dcp_harness_options_default(&o);
    o.check = 0;
    o.steps = 3;
    o.config.max_seqlen_per_rank = 8192;
    dcp_cli_input input;
    memset(&input, 0, sizeof input);
    int32_t max_sequences = 0, mtp_virtual_stages = 0;
    int group_set = 0;
    const struct {
        const char *name;
        int64_t lo, hi;
        int32_t *field;
    } ints[] = {
        {"--dp", 1, 1 << 16, &o.config.data_parallel_size},
        {"--cp", 1, 1 << 16, &o.config.context_parallel_size},
        {"--tp", 1, 1 << 10, &o.config.tensor_parallel_size},
        {"--pp", 1, 1 << 10, &o.config.pipeline_parallel_size},
        {"--vpp", 1, 64, &o.config.virtual_pipeline_size},
        {"--max-seqlen", 1, 1 << 30, &o.config.max_seqlen_per_rank},
        {"--max-sequences", 1, DCP_CLI_MAX_SEQUENCES, &max_sequences},
        {"--pad-alignment", 0, 1 << 20, &o.config.pad_alignment},
        {"--max-sequences-per-microbatch", 0, 1 << 24, &o.config.max_sequences_per_microbatch},
        {"--microbatch-group", 0, 1 << 16, &o.config.microbatch_group_size_per_vp_stage},
        {"--mtp-stage", -1, 1 << 10, &o.mtp_pipeline_rank},
        {"--mtp-virtual-stages", 0, INT32_MAX, &mtp_virtual_stages},
        {"--steps", 1, 1000, &o.steps},
    };
    dcp_cli_args args = {argc, argv, 1, "step"};
    for (; args.i < argc; args.i++) {
        const char *v = NULL;
        int st = DCP_EXIT_OK, got;
        if (dcp_cli_flag(&args, "-h") || dcp_cli_flag(&args, "--help")) {
            fputs(step_usage, stdout);
            return DCP_EXIT_OK;
        }
        if ((got = dcp_cli_input_option(&args, &input, &st)) != 0) {
            if (got < 0) return st;
            continue;
        }
        size_t k = 0;
        for (; k < sizeof ints / sizeof ints[0]; k++)
            if ((got = dcp_cli_option(&args, ints[k].name, &v)) != 0) break;
        if (k < sizeof ints / sizeof ints[0]) {
            int64_t x = 0;
            if (got < 0 || dcp_cli_parse_int("step", ints[k].name, v, ints[k].lo, ints[k].hi, &x) != DCP_EXIT_OK)
                return DCP_EXIT_USAGE;
            *ints[k].field = (int32_t)x;
            if (ints[k].field == &o.config.microbatch_group_size_per_vp_stage) group_set = 1;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--scheduler", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (dcp_scheduler_from_name(v, &o.config.scheduler) != DCP_OK)
                return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--scheduler: '%s' is not dp_balanced, dynamic_cp or balanced",
                                    v);
            continue;
        }
        if ((got = dcp_cli_option(&args, "--tail", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (strcmp(v, "append_dummy") == 0) o.config.thd_tail_policy = DCP_THD_TAIL_APPEND_DUMMY;
            else if (strcmp(v, "extend_last") == 0) o.config.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
            else return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--tail: '%s' is not append_dummy or extend_last", v);
            continue;
        }
        if ((got = dcp_cli_option(&args, "--cp-partition", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (strcmp(v, "zigzag") == 0) o.config.cp_partition = DCP_CP_ZIGZAG;
            else if (strcmp(v, "contiguous") == 0) o.config.cp_partition = DCP_CP_CONTIGUOUS;
            else return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--cp-partition: '%s' is not zigzag or contiguous", v);
            continue;
        }
        if (dcp_cli_flag(&args, "--pad-to-max")) o.config.pad_to_max_seqlen = 1;
        else if (dcp_cli_flag(&args, "--check")) o.check = 1;
        else if (dcp_cli_flag(&args, "--prepacked")) o.prepacked = 1;
        else if (dcp_cli_flag(&args, "--tp-ranks-hold-data")) o.tp_ranks_hold_data = 1;
        else return dcp_cli_fail(DCP_EXIT_USAGE, "step", "unknown argument '%s' (see dcpack step --help)", argv[args.i]);
    }
    if (input.trace && input.generate)
        return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--trace and --generate are two inputs: give one");
    if ((input.column || input.input_format) && !input.trace)
        return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--column and --input-format describe a --trace file");
    /* MTP options that would be ignored are refused: a stage past --pp, a mask without a stage or naming none of its
       virtual stages */
    const int32_t pp = o.config.pipeline_parallel_size, vpp = o.config.virtual_pipeline_size;
    if (o.mtp_pipeline_rank >= pp)
        return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--mtp-stage %d: the PP stages are 0 to %d (--pp %d)",
                            o.mtp_pipeline_rank, pp - 1, pp);
    if (mtp_virtual_stages != 0 && o.mtp_pipeline_rank < 0)
        return dcp_cli_fail(DCP_EXIT_USAGE, "step", "--mtp-virtual-stages %d needs --mtp-stage P", mtp_virtual_stages);
    if (o.mtp_pipeline_rank >= 0 && mtp_virtual_stages == 0)
        return dcp_cli_fail(DCP_EXIT_USAGE, "step",
                            "--mtp-stage %d needs --mtp-virtual-stages MASK (bit v: virtual stage v holds MTP layers; "
                            "1 with --vpp 1)",
                            o.mtp_pipeline_rank);
    if (vpp < 31 && mtp_virtual_stages >= (1 << vpp))
        return dcp_cli_fail(DCP_EXIT_USAGE, "step",
                            "--mtp-virtual-stages %d names virtual stages past %d (--vpp %d: bits 0 to %d)",
                            mtp_virtual_stages, vpp - 1, vpp, vpp - 1);
    o.mtp_virtual_stages = (uint32_t)mtp_virtual_stages;
    if (o.config.virtual_pipeline_size > 1 && !group_set)
        o.config.microbatch_group_size_per_vp_stage = o.config.pipeline_parallel_size;

    dcp_cli_trace trace;
    /* without an input, the embedded default batch, as `dcpack plan` takes it */
    int st = input.trace      ? dcp_cli_trace_read("step", input.trace, input.input_format, input.column, &trace)
             : input.generate ? dcp_cli_trace_generate("step", input.generate, 0, &trace)
                              : dcp_cli_trace_default(&trace);
    if (st != DCP_EXIT_OK) {
        if (!input.trace && !input.generate) /* the default's only failure: its two arrays */
            return dcp_cli_fail(st, "step", "out of memory for the embedded default batch");
        return st;
    }
    char message[700], why[512];
    const dcp_cli_trace *traces[1] = {&trace};
    st = dcp_cli_capacity(max_sequences, traces, 1, &o.config.max_sequences, message, sizeof message);
    if (st != DCP_EXIT_OK) st = dcp_cli_fail(st, "step", "%s", message);
    else if (dcp_config_validate(&o.config, why, sizeof why) != DCP_OK)
        st = dcp_cli_fail(DCP_EXIT_USAGE, "step", "invalid configuration: %s", why);
    else st = check_lengths(&o, &trace);
    if (st != DCP_EXIT_OK) {
        dcp_cli_trace_free(&trace);
        return st;
    }
    o.lengths = trace.lengths;
    o.num_lengths = trace.count;

    dcp_harness_result r;
    dcp_status hs = dcp_harness_run(&o, &r);
    if (hs == DCP_ERR_BAD_LENGTH) { /* a length the plan refused (after rounding up): bad input, as for plan */
        st = dcp_cli_fail(DCP_EXIT_INPUT, "step", "%s: %s", trace.name, r.message);
    } else if (hs != DCP_OK) {
        printf("{\n  \"trace\": ");
        dcp_cli_json_string(stdout, trace.name);
        printf(",\n  \"error\": {\"status\": ");
        dcp_cli_json_string(stdout, dcp_status_str(hs));
        printf(", \"message\": ");
        dcp_cli_json_string(stdout, r.message);
        printf("}\n}\n");
        st = dcp_cli_fail(DCP_EXIT_ERROR, "step", "%s: %s (%s)", trace.name, r.message, dcp_status_str(hs));
    } else {
        print_report(&o, &r, &trace);
        int ok = r.statuses_agree && steps_status(&o, &r) == DCP_OK && (!o.check || r.verified);
        st = dcp_cli_output_status("step");
        if (st == DCP_EXIT_OK && !ok)
            st = dcp_cli_fail(DCP_EXIT_ERROR, "step", "%s", r.message[0] ? r.message : "a step failed or did not verify");
    }
    dcp_cli_trace_free(&trace);
    dcp_harness_result_free(&r);
    return st;
}
