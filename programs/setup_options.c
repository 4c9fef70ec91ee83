/* setup_options.c - the input and configuration options `plan` and `compare` share. */
#include "cli.h"

#include <string.h>

int dcp_cli_setup_option(dcp_cli_args *args, dcp_cli_setup *s, const char **cost_path, int *status)
{
    static const struct {
        const char *name;
        int64_t lo, hi;
        size_t offset;
    } ints[] = {
        {"--ranks", 1, 1 << 20, offsetof(dcp_cli_setup, ranks)},
        {"--max-seqlen-per-rank", 1, INT32_MAX, offsetof(dcp_cli_setup, max_seqlen_per_rank)},
        {"--cp", 1, 1 << 20, offsetof(dcp_cli_setup, cp)},
        {"--min-cp-size", 1, 1 << 20, offsetof(dcp_cli_setup, min_cp_size)},
        {"--vpp-group", 0, 1 << 16, offsetof(dcp_cli_setup, vpp_group)},
        {"--max-sequences-per-microbatch", 0, 1 << 24, offsetof(dcp_cli_setup, max_sequences_per_microbatch)},
        {"--max-sequences", 1, DCP_CLI_MAX_SEQUENCES, offsetof(dcp_cli_setup, max_sequences)},
        {"--pp", 1, 1 << 10, offsetof(dcp_cli_setup, pp)},
        {"--vpp", 1, 64, offsetof(dcp_cli_setup, vpp)},
    };
    const char *value = NULL;
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int got = dcp_cli_option(args, ints[k].name, &value);
        if (got == 0) continue;
        int64_t v = 0;
        if (got < 0 || (*status = dcp_cli_parse_int(args->command, ints[k].name, value, ints[k].lo, ints[k].hi, &v)) !=
                           DCP_EXIT_OK) {
            *status = DCP_EXIT_USAGE;
            return -1;
        }
        int32_t *field = (int32_t *)((char *)s + ints[k].offset);
        *field = (int32_t)v;
        if (strcmp(ints[k].name, "--min-cp-size") == 0 && (v & (v - 1))) {
            *status = dcp_cli_fail(DCP_EXIT_USAGE, args->command, "--min-cp-size: %lld is not a power of two",
                                   (long long)v);
            return -1;
        }
        return 1;
    }
    int got = dcp_cli_option(args, "--cost", &value);
    if (got < 0) {
        *status = DCP_EXIT_USAGE;
        return -1;
    }
    if (got > 0) {
        *status = dcp_cli_cost_profile_load(args->command, value, &s->cost, &s->time_unit_ps);
        if (*status != DCP_EXIT_OK) return -1;
        if (s->step_model >= 0) s->cost.step_model = (dcp_step_model)s->step_model; /* wherever --step-model came */
        *cost_path = value;
        return 1;
    }
    got = dcp_cli_option(args, "--step-model", &value);
    if (got < 0) {
        *status = DCP_EXIT_USAGE;
        return -1;
    }
    if (got > 0) {
        dcp_step_model model;
        if (dcp_step_model_from_name(value, &model) != DCP_OK) {
            *status = dcp_cli_fail(DCP_EXIT_USAGE, args->command, "--step-model: '%s' is not barrier or dependency",
                                   value);
            return -1;
        }
        s->step_model = (int32_t)model;
        s->cost.step_model = model;
        return 1;
    }
    got = dcp_cli_option(args, "--schedule", &value);
    if (got < 0) {
        *status = DCP_EXIT_USAGE;
        return -1;
    }
    if (got > 0) {
        if (strcmp(value, "1f1b") != 0 && strcmp(value, "interleaved") != 0) {
            *status = dcp_cli_fail(DCP_EXIT_USAGE, args->command, "--schedule: '%s' is not 1f1b or interleaved", value);
            return -1;
        }
        s->schedule = strcmp(value, "1f1b") == 0 ? DCP_PIPELINE_1F1B : DCP_PIPELINE_INTERLEAVED;
        return 1;
    }
    got = dcp_cli_option(args, "--effort", &value);
    if (got < 0) {
        *status = DCP_EXIT_USAGE;
        return -1;
    }
    if (got > 0) {
        if (strcmp(value, "full") != 0 && strcmp(value, "fast") != 0) {
            *status = dcp_cli_fail(DCP_EXIT_USAGE, args->command, "--effort: '%s' is not full or fast", value);
            return -1;
        }
        s->plan_effort = strcmp(value, "fast") == 0 ? DCP_PLAN_EFFORT_FAST : DCP_PLAN_EFFORT_FULL;
        return 1;
    }
    return 0;
}

int dcp_cli_input_option(dcp_cli_args *args, dcp_cli_input *in, int *status)
{
    static const char *const names[] = {"--trace", "--column", "--input-format", "--generate"};
    const char **fields[] = {&in->trace, &in->column, &in->input_format, &in->generate};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *value = NULL;
        int got = dcp_cli_option(args, names[k], &value);
        if (got == 0) continue;
        if (got < 0) {
            *status = DCP_EXIT_USAGE;
            return -1;
        }
        *fields[k] = value;
        return 1;
    }
    return 0;
}

void dcp_cli_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}
