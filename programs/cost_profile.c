/*
 * cost_profile.c - cost-model coefficients from a text file, so users plan
 * with a profile of their own model (the README's "Cost model", dcp_cost_model).
 *
 * The format is the library's (dcp_cost_profile_parse / dcp_cost_profile_format, core/cost_profile.c,
 * which the Python package uses too): one `key = value` per line; '#' starts a comment; blank lines
 * are ignored; values are non-negative integers in ASCII digits (no sign), as is the CP size in
 * kv.<cp>; a later line overrides an earlier one; keys not given keep the defaults.  Besides the
 * keys below: cp_gather, cp_gather.<cp>, cp_gather.<cp>+, small_knee, small_slope, margin_ppm,
 * pipeline_schedule (1f1b|interleaved), forward_ppm, first_stage_per_token, last_stage_per_token
 * (docs/program.md).  This file reads the file and prints what the library says.
 *
 *   quadratic = 1               s^2 coefficient
 *   linear = 49152              s coefficient (12 * hidden size)
 *   hidden = 4096               shorthand: linear = 12 * hidden
 *   round_latency = 491520      per ring-attention round, times (cp - 1)
 *   microbatch_overhead = 819200  per microbatch
 *   kv = 492                    exposed-KV coefficient for every CP size
 *   kv.16 = 3934                ... for CP size 16 only (a power of two, 2 to 65536)
 *   kv.16+ = 3934               ... for CP sizes 16 and above
 *   step_model = barrier        how microbatches follow one another: barrier (every rank waits for a
 *                               microbatch's slowest rank) or dependency (a rank waits only for its CP groups);
 *                               the one value that is a word
 *   time_unit_ps = 1            the coefficients are times: one cost unit is this many picoseconds
 *                               (a positive integer; a calibrated profile, python -m dcpack.calibrate).
 *                               Not part of dcp_cost_model: it changes no plan, only how commands
 *                               print makespans (milliseconds beside cost units)
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Profiles are a few hundred bytes: a file larger than this is not one (and is not read into memory). */
#define PROFILE_MAX_BYTES ((size_t)16 << 20)

int dcp_cli_cost_profile_load(const char *command, const char *path, dcp_cost_model *model, int64_t *time_unit_ps)
{
    FILE *f = fopen(path, "rb");
    if (!f) /* out of memory is no fault of the file's */
        return dcp_cli_fail(errno == ENOMEM ? DCP_EXIT_ERROR : DCP_EXIT_INPUT, command, "cannot open cost profile %s: %s",
                            path, strerror(errno));
    size_t size = 0, cap = 4096;
    char *text = malloc(cap);
    int status = DCP_EXIT_OK;
    while (text) {
        if (size == cap) {
            if (cap >= PROFILE_MAX_BYTES) {
                status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s: larger than %zu MiB: not a cost profile", path,
                                      PROFILE_MAX_BYTES >> 20);
                break;
            }
            char *more = realloc(text, cap * 2);
            if (!more) break;
            text = more;
            cap *= 2;
        }
        const size_t got = fread(text + size, 1, cap - size, f);
        size += got;
        if (got == 0) break;
    }
    if (!text || (status == DCP_EXIT_OK && size == cap && !feof(f)))
        status = dcp_cli_fail(DCP_EXIT_ERROR, command, "out of memory reading %s", path);
    else if (status == DCP_EXIT_OK && ferror(f))
        status = dcp_cli_fail(DCP_EXIT_INPUT, command, "cannot read %s", path);
    fclose(f);
    if (status == DCP_EXIT_OK) {
        char message[1024];
        dcp_cost_model m = *model;
        int64_t unit_ps = 0;
        if (dcp_cost_profile_parse(text, size, path, &m, &unit_ps, message, sizeof message) != DCP_OK) {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s", message);
        } else {
            *model = m;
            *time_unit_ps = unit_ps;
        }
    }
    free(text);
    return status;
}

void dcp_cli_cost_profile_write(FILE *out, const dcp_cost_model *m, int64_t time_unit_ps)
{
    char text[4096];
    size_t written = 0;
    /* a model that validated always has names and fits: say so rather than print a partial profile */
    if (dcp_cost_profile_format(m, time_unit_ps, text, sizeof text, &written) != DCP_OK)
        fprintf(out, "# this model has no profile text (step_model %d, pipeline_schedule %d)\n", (int)m->step_model,
                (int)m->pipeline_schedule);
    else
        fputs(text, out);
}

double dcp_cli_units_ms(int64_t units, int64_t time_unit_ps) { return (double)units * (double)time_unit_ps * 1e-9; }
