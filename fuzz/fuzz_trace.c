/* dcp-fuzz-sources: programs/trace_read.c programs/options.c */
/*
 * fuzz_trace.c - the dcpack program's trace reader (one length per line, CSV,
 * JSON Lines) on arbitrary files.
 *
 * Properties:
 *  - every read ends in DCP_EXIT_OK with at least one length, each in
 *    [1, INT32_MAX] with a source line number that grows, or DCP_EXIT_INPUT
 *    with nothing left allocated;
 *  - text and quote-free CSV input are read exactly as an independent reading
 *    of the format gives: the same lengths, or an error where it finds one.
 *
 * Input layout: [0] mode: 0 auto (no --column), 1 text, 2 csv --column len, 3 jsonl --column len,
 *   4 auto --column len; the rest is the file (NUL bytes become 'x').
 */
#include "fuzz_common.h"
#include "../programs/cli.h"

#include <ctype.h>
#include <stdlib.h>
#include <unistd.h>

static char path[64];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(path, sizeof path, "/tmp/dcp_fuzz_trace_%ld.txt", (long)getpid());
    devnull = fopen("/dev/null", "w");
    return devnull ? 0 : -1;
}

/* ---- the independent reading ---- */

#define MAX_EXPECTED 65536
static int32_t expected[MAX_EXPECTED];

/* One length from [s, s+n): spaces around, digits (a '-' makes it negative: refused); 0 on success. */
static int oracle_length(const char *s, size_t n, int32_t *out)
{
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    size_t i = 0;
    int negative = 0;
    if (n && s[0] == '-') negative = 1, i = 1;
    if (i == n) return -1;
    int64_t v = 0;
    for (; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        if (v <= INT32_MAX) v = v * 10 + (s[i] - '0');
    }
    if (v == 0 || negative || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

typedef struct line {
    const char *s;
    size_t n;
} line;

static size_t split_lines(const char *d, size_t size, line *lines, size_t cap)
{
    size_t count = 0, start = 0;
    while (start < size && count < cap) {
        size_t end = start;
        while (end < size && d[end] != '\n') end++;
        size_t n = end - start;
        if (n && d[start + n - 1] == '\r') n--;
        lines[count++] = (line){d + start, n};
        start = end + 1;
    }
    return count;
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* Field f of a quote-free CSV line, leading spaces and tabs skipped; -1 when the line has fewer fields. */
static int csv_plain_field(line l, int f, const char **s, size_t *n)
{
    size_t i = 0;
    for (int k = 0; k < f; k++) {
        while (i < l.n && l.s[i] != ',') i++;
        if (i >= l.n) return -1;
        i++;
    }
    while (i < l.n && (l.s[i] == ' ' || l.s[i] == '\t')) i++;
    size_t j = i;
    while (j < l.n && l.s[j] != ',') j++;
    *s = l.s + i;
    *n = j - i;
    return 0;
}

static line lines[1 << 16];

/* The lengths a reading of text (csv = 0) or quote-free CSV (csv = 1) gives; -1 on an error. */
static int64_t oracle(const char *d, size_t size, int csv)
{
    size_t nl = split_lines(d, size, lines, sizeof lines / sizeof lines[0]);
    size_t first = 0;
    int index = 0;
    if (csv) {
        if (nl == 0 || all_space(lines[0].s, lines[0].n)) return -1;
        index = -1;
        for (int f = 0; index < 0; f++) {
            const char *s;
            size_t n;
            if (csv_plain_field(lines[0], f, &s, &n) != 0) break;
            while (n && isspace((unsigned char)s[n - 1])) n--;
            if (n == 3 && memcmp(s, "len", 3) == 0) index = f;
        }
        if (index < 0) return -1;
        first = 1;
    }
    int64_t count = 0;
    for (size_t i = first; i < nl; i++) {
        if (all_space(lines[i].s, lines[i].n)) {
            for (size_t j = i + 1; j < nl; j++)
                if (!all_space(lines[j].s, lines[j].n)) return -1;
            break;
        }
        const char *s = lines[i].s;
        size_t n = lines[i].n;
        if (csv && (csv_plain_field(lines[i], index, &s, &n) != 0 || n >= 128)) return -1;
        int32_t v;
        if (oracle_length(s, n, &v) != 0) return -1;
        if (count < MAX_EXPECTED) expected[count] = v;
        count++;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 16)) return -1;
    const int mode = data[0] % 5;
    char *text = malloc(size);
    DCP_FUZZ_ASSERT(text != NULL, "malloc");
    size_t n = size - 1;
    for (size_t i = 0; i < n; i++) text[i] = data[i + 1] ? (char)data[i + 1] : 'x';
    text[n] = '\0';
    FILE *f = fopen(path, "wb");
    DCP_FUZZ_ASSERT(f != NULL, "cannot write %s", path);
    if (n) fwrite(text, 1, n, f);
    fclose(f);

    static const char *formats[5] = {NULL, "text", "csv", "jsonl", NULL};
    const char *column = (mode >= 2) ? "len" : NULL;
    dcp_cli_trace trace;
    FILE *saved = stderr;
    stderr = devnull; /* the reader reports to stderr; sanitizer reports do not go through stdio */
    int st = dcp_cli_trace_read("fuzz", path, formats[mode], column, &trace);
    stderr = saved;

    if (st == DCP_EXIT_OK) {
        DCP_FUZZ_ASSERT(trace.count >= 1 && trace.lengths && trace.lines, "OK without lengths");
        for (int32_t i = 0; i < trace.count; i++) {
            DCP_FUZZ_ASSERT(trace.lengths[i] >= 1, "length %d at %d", trace.lengths[i], i);
            DCP_FUZZ_ASSERT(trace.lines[i] >= 1 && (i == 0 || trace.lines[i] > trace.lines[i - 1]),
                            "line numbers at %d", i);
        }
    } else {
        DCP_FUZZ_ASSERT(st == DCP_EXIT_INPUT, "reader returned %d", st);
        DCP_FUZZ_ASSERT(trace.count == 0 && trace.lengths == NULL && trace.lines == NULL, "trace left on failure");
    }

    /* the independent reading, where it applies: no byte-order mark, text or quote-free CSV */
    const int bom = n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0;
    const int has_quote = memchr(text, '"', n) != NULL;
    const char *p = text;
    while (p < text + n && isspace((unsigned char)*p)) p++;
    /* auto without --column refuses what looks like JSON Lines or CSV (a comma in the first line) */
    const int looks_structured = (p < text + n && *p == '{') || memchr(text, ',', strcspn(text, "\n")) != NULL;
    int64_t want = -2;
    if (!bom && mode == 1) want = oracle(text, n, 0);
    if (!bom && mode == 0 && !looks_structured) want = oracle(text, n, 0);
    if (!bom && mode == 2 && !has_quote) want = oracle(text, n, 1);
    if (want == 0) want = -1; /* an empty trace is an error */
    if (want != -2) {
        DCP_FUZZ_ASSERT((st == DCP_EXIT_OK) == (want > 0), "mode %d: reader %s, independent reading %s", mode,
                        st == DCP_EXIT_OK ? "accepts" : "refuses", want > 0 ? "accepts" : "refuses");
        if (st == DCP_EXIT_OK) {
            DCP_FUZZ_ASSERT(trace.count == want, "%d lengths, expected %lld", trace.count, (long long)want);
            for (int32_t i = 0; i < trace.count && i < MAX_EXPECTED; i++)
                DCP_FUZZ_ASSERT(trace.lengths[i] == expected[i], "length %d: %d, expected %d", i, trace.lengths[i],
                                expected[i]);
        }
    }
    if (st == DCP_EXIT_OK) dcp_cli_trace_free(&trace);
    free(text);
    return 0;
}
