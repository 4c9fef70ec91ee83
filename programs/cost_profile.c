/*
 * cost_profile.c - cost-model coefficients from a text file, so users plan
 * with a profile of their own model (the README's "Cost model", dcp_cost_model).
 *
 * Format: one `key = value` per line; '#' starts a comment; blank lines are
 * ignored; values are non-negative integers, digits only (no sign), as is
 * the CP size in kv.<cp>; a later line overrides an earlier one; keys not
 * given keep the defaults.
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

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* A non-negative integer written as digits only (no sign, no spaces): 0 with the value in *out, -1 otherwise. */
static int digits_value(const char *text, int64_t *out)
{
    int64_t v = 0;
    if (!*text) return -1;
    for (const char *p = text; *p; p++) {
        if (!isdigit((unsigned char)*p) || v > (INT64_MAX - (*p - '0')) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 0;
}

/* log2 of a power of two cp in [2, 2^DCP_MAX_LOG2_CP], or -1. */
static int cp_log2(const char *text)
{
    int64_t cp = 0;
    if (digits_value(text, &cp) != 0 || cp < 2 || cp > ((int64_t)1 << DCP_MAX_LOG2_CP) || (cp & (cp - 1)))
        return -1;
    int k = 0;
    while (((int64_t)1 << k) < cp) k++;
    return k;
}

/*
 * One line into `line` (without its '\n'): 1, or 0 at the end of the file, -1 for a line longer than
 * size - 2 characters, -2 for a NUL byte (no text holds one; fgets would end the line there), its
 * 1-based column in *column.
 */
static int read_line(FILE *f, char *line, size_t size, size_t *column)
{
    size_t n = 0;
    int c = EOF;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0') {
            *column = n + 1;
            return -2;
        }
        if (n + 2 >= size) return -1;
        line[n++] = (char)c;
    }
    line[n] = '\0';
    return c == EOF && n == 0 ? 0 : 1;
}

int dcp_cli_cost_profile_load(const char *command, const char *path, dcp_cost_model *model, int64_t *time_unit_ps)
{
    FILE *f = fopen(path, "r");
    if (!f) /* out of memory is no fault of the file's */
        return dcp_cli_fail(errno == ENOMEM ? DCP_EXIT_ERROR : DCP_EXIT_INPUT, command, "cannot open cost profile %s: %s",
                            path, strerror(errno));
    dcp_cost_model m = *model;
    int64_t unit_ps = 0; /* none unless the profile says */
    char line[1024];
    int number = 0, status = DCP_EXIT_OK;
    int got;
    size_t column = 0;
    while (status == DCP_EXIT_OK && (got = read_line(f, line, sizeof line, &column)) != 0) {
        number++;
        if (got == -2) {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: a NUL byte at column %zu: not a cost profile (text)",
                                  path, number, column);
            break;
        }
        if (got < 0) {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: line longer than %d characters", path, number,
                                  (int)sizeof line - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: '%s' is not `key = value`", path, number, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *text = trim(eq + 1);
        if (strcmp(key, "step_model") == 0) {
            dcp_step_model sm;
            if (dcp_step_model_from_name(text, &sm) != DCP_OK) {
                status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: step_model = '%s' is not barrier or dependency",
                                      path, number, text);
                break;
            }
            m.step_model = (int32_t)sm;
            continue;
        }
        int64_t v = 0;
        if (digits_value(text, &v) != 0) {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: %s = '%s': values are non-negative integers", path,
                                  number, key, text);
            break;
        }
        if (strcmp(key, "time_unit_ps") == 0) {
            if (v == 0) {
                status = dcp_cli_fail(DCP_EXIT_INPUT, command,
                                      "%s:%d: time_unit_ps = 0: picoseconds per cost unit must be at least 1", path,
                                      number);
                break;
            }
            unit_ps = v;
        } else if (strcmp(key, "quadratic") == 0) m.quadratic = v;
        else if (strcmp(key, "linear") == 0) m.linear = v;
        else if (strcmp(key, "hidden") == 0) {
            if (v > INT64_MAX / 12) {
                status = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%d: hidden = %lld: 12 * hidden overflows int64",
                                      path, number, (long long)v);
                break;
            }
            m.linear = 12 * v;
        } else if (strcmp(key, "round_latency") == 0) m.round_latency = v;
        else if (strcmp(key, "microbatch_overhead") == 0) m.microbatch_overhead = v;
        else if (strcmp(key, "kv") == 0) {
            for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) m.kv[k] = v;
        } else if (strncmp(key, "kv.", 3) == 0) {
            char cp_text[32];
            size_t n = strlen(key + 3);
            int and_above = n > 0 && key[3 + n - 1] == '+';
            if (and_above) n--;
            int k = -1;
            if (n < sizeof cp_text) {
                memcpy(cp_text, key + 3, n);
                cp_text[n] = '\0';
                k = cp_log2(cp_text);
            }
            if (k < 0) {
                status = dcp_cli_fail(DCP_EXIT_INPUT, command,
                                      "%s:%d: %s: the CP size after 'kv.' must be a power of two from 2 to %d", path,
                                      number, key, 1 << DCP_MAX_LOG2_CP);
                break;
            }
            for (int j = k; j <= (and_above ? DCP_MAX_LOG2_CP : k); j++) m.kv[j] = v;
        } else {
            status = dcp_cli_fail(DCP_EXIT_INPUT, command,
                                  "%s:%d: unknown key '%s' (quadratic, linear, hidden, round_latency, "
                                  "microbatch_overhead, kv, kv.<cp>, kv.<cp>+, step_model, time_unit_ps)",
                                  path, number, key);
            break;
        }
    }
    if (status == DCP_EXIT_OK && ferror(f)) status = dcp_cli_fail(DCP_EXIT_INPUT, command, "cannot read %s", path);
    fclose(f);
    if (status == DCP_EXIT_OK) {
        *model = m;
        *time_unit_ps = unit_ps;
    }
    return status;
}

void dcp_cli_cost_profile_write(FILE *out, const dcp_cost_model *m, int64_t time_unit_ps)
{
    if (time_unit_ps > 0) fprintf(out, "time_unit_ps = %lld\n", (long long)time_unit_ps);
    fprintf(out, "quadratic = %lld\n", (long long)m->quadratic);
    fprintf(out, "linear = %lld\n", (long long)m->linear);
    fprintf(out, "round_latency = %lld\n", (long long)m->round_latency);
    fprintf(out, "microbatch_overhead = %lld\n", (long long)m->microbatch_overhead);
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) fprintf(out, "kv.%d = %lld\n", 1 << k, (long long)m->kv[k]);
    fprintf(out, "step_model = %s\n", dcp_step_model_name((dcp_step_model)m->step_model));
}

double dcp_cli_units_ms(int64_t units, int64_t time_unit_ps) { return (double)units * (double)time_unit_ps * 1e-9; }
