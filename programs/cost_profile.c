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
#define _DEFAULT_SOURCE /* readlink, opendir */
#include "cli.h"

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Profiles are a few hundred bytes: a file larger than this is not one (and is not read into memory). */
#define PROFILE_MAX_BYTES ((size_t)16 << 20)

/*
 * The folders that hold the profiles shipped with dcpack, in the order a bare name is looked up:
 * beside the installed program (<prefix>/share/dcpack/profiles, found from /proc/self/exe) and the
 * source tree's bench/profiles (for a program run from its build folder).
 */
static int profile_dir(int which, char *dir, size_t size)
{
    if (which == 0) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return 0;
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (!slash) return 0;
        *slash = '\0';
        return snprintf(dir, size, "%s/../share/dcpack/profiles", exe) < (int)size;
    }
#ifdef DCP_SOURCE_PROFILE_DIR
    if (which == 1) return snprintf(dir, size, "%s", DCP_SOURCE_PROFILE_DIR) < (int)size;
#endif
    return 0;
}

/* A bare name (no '/') that is not a file: the shipped profile of that name (".profile" optional). */
static FILE *open_shipped(const char *name, char *found, size_t size)
{
    if (strchr(name, '/')) return NULL;
    const size_t len = strlen(name);
    const int has_suffix = len > 8 && strcmp(name + len - 8, ".profile") == 0;
    char dir[PATH_MAX];
    for (int which = 0; which < 2; which++) {
        if (!profile_dir(which, dir, sizeof dir)) continue;
        if (snprintf(found, size, "%s/%s%s", dir, name, has_suffix ? "" : ".profile") >= (int)size) continue;
        FILE *f = fopen(found, "rb");
        if (f) return f;
    }
    return NULL;
}

/* ", or a shipped profile: NAME, NAME" for the message of a name that opened nothing. */
static void shipped_names(char *out, size_t size)
{
    size_t o = 0;
    out[0] = '\0';
    char dir[PATH_MAX];
    for (int which = 0; which < 2 && o == 0; which++) {
        if (!profile_dir(which, dir, sizeof dir)) continue;
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n <= 8 || strcmp(e->d_name + n - 8, ".profile") != 0) continue;
            int w = snprintf(out + o, size - o, "%s%.*s", o == 0 ? "; shipped profiles: " : ", ", (int)(n - 8),
                             e->d_name);
            if (w < 0 || (size_t)w >= size - o) break;
            o += (size_t)w;
        }
        closedir(d);
    }
}

int dcp_cli_cost_profile_load(const char *command, const char *path, dcp_cost_model *model, int64_t *time_unit_ps)
{
    char shipped[PATH_MAX + 64];
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT && (f = open_shipped(path, shipped, sizeof shipped)) != NULL) path = shipped;
    if (!f) { /* out of memory is no fault of the file's */
        int err = errno;
        char names[512];
        shipped_names(names, sizeof names);
        return dcp_cli_fail(err == ENOMEM ? DCP_EXIT_ERROR : DCP_EXIT_INPUT, command, "cannot open cost profile %s: %s%s",
                            path, strerror(err), err == ENOENT ? names : "");
    }
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
