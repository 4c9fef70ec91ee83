/* options.c - error reporting and option parsing shared by every command. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int dcp_cli_fail(int status, const char *command, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    if (command && command[0]) fprintf(stderr, "dcpack %s: ", command);
    else fprintf(stderr, "dcpack: ");
    vfprintf(stderr, format, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

int dcp_cli_output_status(const char *command)
{
    /* ferror too: a write that failed before the last flush leaves the flush itself nothing to fail on */
    if (fflush(stdout) != 0 || ferror(stdout)) return dcp_cli_fail(DCP_EXIT_ERROR, command, "cannot write the output");
    return DCP_EXIT_OK;
}

int dcp_cli_option(dcp_cli_args *args, const char *name, const char **value)
{
    const char *a = args->argv[args->i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (args->i + 1 >= args->argc) {
        dcp_cli_fail(DCP_EXIT_USAGE, args->command, "%s needs a value (see dcpack %s --help)", name, args->command);
        return -1;
    }
    *value = args->argv[++args->i];
    return 1;
}

int dcp_cli_flag(const dcp_cli_args *args, const char *name) { return strcmp(args->argv[args->i], name) == 0; }

int dcp_cli_strtoi64(const char *text, int64_t *out)
{
    /* digits with an optional '-': strtoll alone would also take leading spaces and a '+' */
    if (!text || !(*text == '-' || (*text >= '0' && *text <= '9'))) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0') return -1;
    if (errno == ERANGE) return -2; /* an integer, past int64: out of range, not "not an integer" */
    *out = (int64_t)v;
    return 0;
}

int dcp_cli_parse_int(const char *command, const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    int got = dcp_cli_strtoi64(text, &v);
    if (got == -2)
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "%s: %s is outside [%lld, %lld]", name, text, (long long)lo,
                            (long long)hi);
    if (got != 0) return dcp_cli_fail(DCP_EXIT_USAGE, command, "%s: '%s' is not an integer", name, text);
    if (v < lo || v > hi)
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "%s: %lld is outside [%lld, %lld]", name, (long long)v,
                            (long long)lo, (long long)hi);
    *out = v;
    return DCP_EXIT_OK;
}

int dcp_cli_next_item(char **rest, char **item)
{
    if (!*rest) return 0;
    char *at = *rest, *comma = strchr(at, ',');
    if (comma) *comma = '\0';
    *rest = comma ? comma + 1 : NULL;
    *item = at;
    return *at ? 1 : -1;
}
