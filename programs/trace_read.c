/*
 * trace_read.c - sequence lengths from a file or standard input.
 *
 * Three formats, all one record per line:
 *   text   one length per line; id = 0-based line number, so a blank line
 *          is an error except at the end of the file
 *   csv    a header line naming the columns, then rows; --column picks the
 *          length; fields may be "quoted" ("" inside quotes is one ")
 *   jsonl  one JSON object per line; --column names the key of the length
 * Every bad record is reported as FILE:LINE with the offending text.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const char *command;
    const char *name;
    dcp_cli_trace *trace;
    int32_t capacity;
} reader;

/* Printable excerpt of bad input, for messages. */
static const char *excerpt(const char *text, size_t len, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i >= 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 32 && c < 127) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

static int read_all(const char *command, const char *path, char **data, size_t *size)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return dcp_cli_fail(DCP_EXIT_INPUT, command, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            if (f != stdin) fclose(f);
            return dcp_cli_fail(DCP_EXIT_ERROR, command, "%s: out of memory", path);
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown) free(buf);
        buf = grown;
    }
    int failed = ferror(f);
    if (f != stdin) fclose(f);
    if (failed) {
        free(buf);
        return dcp_cli_fail(DCP_EXIT_INPUT, command, "cannot read %s", path);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return DCP_EXIT_OK;
}

static int push(reader *r, int32_t length, int32_t line)
{
    dcp_cli_trace *t = r->trace;
    if (t->count == DCP_CLI_MAX_SEQUENCES)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: more than %d sequences in one trace", r->name, line,
                            DCP_CLI_MAX_SEQUENCES);
    if (t->count == r->capacity) {
        int32_t cap = r->capacity ? r->capacity * 2 : 4096;
        int32_t *l = realloc(t->lengths, sizeof *l * (size_t)cap);
        if (l) t->lengths = l;
        int32_t *ln = realloc(t->lines, sizeof *ln * (size_t)cap);
        if (ln) t->lines = ln;
        if (!l || !ln) return dcp_cli_fail(DCP_EXIT_ERROR, r->command, "%s: out of memory", r->name);
        r->capacity = cap;
    }
    t->lengths[t->count] = length;
    t->lines[t->count] = line;
    t->count++;
    return DCP_EXIT_OK;
}

/* A length from text[0..len): one integer in [1, INT32_MAX], spaces around it allowed. */
static int parse_length(reader *r, const char *text, size_t len, int32_t line, const char *what)
{
    while (len && isspace((unsigned char)*text)) text++, len--;
    while (len && isspace((unsigned char)text[len - 1])) len--;
    char shown[200];
    excerpt(text, len, shown, sizeof shown);
    size_t sign = len && (text[0] == '-' || text[0] == '+');
    size_t digits = 0;
    while (sign + digits < len && isdigit((unsigned char)text[sign + digits])) digits++;
    if (digits == 0 || sign + digits != len)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: '%s' is not a length (%s)", r->name, line, shown,
                            what);
    if (text[0] == '-') {
        for (size_t i = 1; i < len; i++)
            if (text[i] != '0')
                return dcp_cli_fail(DCP_EXIT_INPUT, r->command,
                                    "%s:%d: length %s is negative: every sequence needs at least one token", r->name,
                                    line, shown);
    }
    int64_t v = 0;
    for (size_t i = sign; i < len && v <= INT32_MAX; i++) v = v * 10 + (text[i] - '0');
    if (v == 0)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command,
                            "%s:%d: length %s is zero: every sequence needs at least one token", r->name, line, shown);
    if (v > INT32_MAX)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: length %s is too large (at most %d)", r->name, line,
                            shown, INT32_MAX);
    return push(r, (int32_t)v, line);
}

/* Line iteration: [*start, *end) of the next line, without '\n' and a trailing '\r'. */
typedef struct line_cursor {
    const char *p, *limit;
    int32_t number;
} line_cursor;

static int next_line(line_cursor *c, const char **start, size_t *len)
{
    if (c->p >= c->limit) return 0;
    const char *s = c->p, *e = memchr(s, '\n', (size_t)(c->limit - s));
    if (!e) e = c->limit;
    c->p = e < c->limit ? e + 1 : c->limit;
    c->number++;
    if (e > s && e[-1] == '\r') e--;
    *start = s;
    *len = (size_t)(e - s);
    return 1;
}

static int blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* A blank line is allowed only when nothing but blank lines follows. */
static int blank_line_error(reader *r, line_cursor c, int32_t line, const char *what)
{
    const char *s;
    size_t len;
    while (next_line(&c, &s, &len))
        if (!blank(s, len))
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: empty line (%s)", r->name, line, what);
    return -1; /* the rest is blank: stop reading */
}

static int read_text(reader *r, const char *data, size_t size)
{
    line_cursor c = {data, data + size, 0};
    const char *s;
    size_t len;
    while (next_line(&c, &s, &len)) {
        if (blank(s, len)) {
            int st = blank_line_error(r, c, c.number, "every line holds one length; ids are line numbers");
            if (st == -1) break;
            return st;
        }
        int st = parse_length(r, s, len, c.number, "one integer per line");
        if (st != DCP_EXIT_OK) return st;
    }
    return DCP_EXIT_OK;
}

/* ---- CSV ---- */

/*
 * Field `index` of a CSV line into out (unquoted, at most out_size - 1 bytes);
 * *out_len is the field's full length, which the caller compares with
 * out_size (a longer field does not fit and must not be read truncated).
 * Returns the number of fields seen, -1 on a broken quote.
 */
static int csv_field(const char *s, size_t len, int index, char *out, size_t out_size, size_t *out_len)
{
    int field = 0;
    size_t i = 0, o = 0, full = 0;
    *out_len = 0;
    for (;;) {
        int quoted = 0;
        while (i < len && (s[i] == ' ' || s[i] == '\t')) i++;
        if (i < len && s[i] == '"') {
            quoted = 1;
            i++;
        }
        for (;;) {
            if (i >= len) {
                if (quoted) return -1;
                break;
            }
            char ch = s[i];
            if (quoted && ch == '"') {
                if (i + 1 < len && s[i + 1] == '"') {
                    i++;
                } else {
                    quoted = 0;
                    i++;
                    continue;
                }
            } else if (!quoted && ch == ',') {
                break;
            }
            if (field == index) {
                if (o + 1 < out_size) out[o++] = ch;
                full++;
            }
            i++;
        }
        if (field == index) *out_len = full;
        field++;
        if (i >= len) return field;
        i++; /* the comma */
    }
}

static int read_csv(reader *r, const char *data, size_t size, const char *column)
{
    line_cursor c = {data, data + size, 0};
    const char *s;
    size_t len;
    if (!next_line(&c, &s, &len) || blank(s, len))
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: expected a CSV header line naming the columns",
                            r->name);
    int index = -1, fields = 0;
    char name[256], all[512] = "";
    for (int f = 0;; f++) {
        size_t n = 0;
        int seen = csv_field(s, len, f, name, sizeof name, &n);
        if (seen < 0) return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: unterminated quote in the header", r->name);
        if (f >= seen) break;
        if (n >= sizeof name) n = 0; /* a name too long to hold matches no --column */
        while (n && isspace((unsigned char)name[n - 1])) n--;
        name[n] = '\0';
        if (index < 0 && strcmp(name, column) == 0) index = f;
        if (strlen(all) + n + 3 < sizeof all) {
            if (f) strcat(all, ", ");
            strcat(all, name);
        }
        fields = seen;
    }
    if (index < 0)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: no column '%s' in the header (columns: %s)", r->name,
                            column, all);
    (void)fields;
    while (next_line(&c, &s, &len)) {
        if (blank(s, len)) {
            int st = blank_line_error(r, c, c.number, "every row is one sequence");
            if (st == -1) break;
            return st;
        }
        char value[128];
        size_t n = 0;
        int seen = csv_field(s, len, index, value, sizeof value, &n);
        if (seen < 0) return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: unterminated quote", r->name, c.number);
        if (seen <= index)
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: the row has %d fields; column '%s' is field %d",
                                r->name, c.number, seen, column, index + 1);
        if (n >= sizeof value)
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: column '%s' holds %zu characters, more than a "
                                "length can (%zu)", r->name, c.number, column, n, sizeof value - 1);
        int st = parse_length(r, value, n, c.number, "column values must be integers");
        if (st != DCP_EXIT_OK) return st;
    }
    return DCP_EXIT_OK;
}

/* ---- JSON Lines ---- */

typedef struct json {
    const char *p, *end;
} json;

static void json_space(json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')) j->p++;
}

/* A string; its raw content (escapes kept) in [*s, *s + *n). */
static int json_string(json *j, const char **s, size_t *n)
{
    if (j->p >= j->end || *j->p != '"') return -1;
    const char *start = ++j->p;
    while (j->p < j->end && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20) return -1;
        if (*j->p == '\\') j->p++;
        j->p++;
    }
    if (j->p >= j->end) return -1;
    *s = start;
    *n = (size_t)(j->p - start);
    j->p++;
    return 0;
}

static int json_skip(json *j, int depth)
{
    if (depth > 64) return -1;
    json_space(j);
    if (j->p >= j->end) return -1;
    char c = *j->p;
    const char *s;
    size_t n;
    if (c == '"') return json_string(j, &s, &n);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        json_space(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                json_space(j);
                if (json_string(j, &s, &n) != 0) return -1;
                json_space(j);
                if (j->p >= j->end || *j->p != ':') return -1;
                j->p++;
            }
            if (json_skip(j, depth + 1) != 0) return -1;
            json_space(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return 0;
            }
            return -1;
        }
    }
    const char *start = j->p;
    while (j->p < j->end && (isalnum((unsigned char)*j->p) || *j->p == '-' || *j->p == '+' || *j->p == '.')) j->p++;
    return j->p > start ? 0 : -1;
}

/* Key equality with the simple escapes (\" \\ \/) undone. */
static int json_key_is(const char *s, size_t n, const char *key)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++, k++) {
        char ch = s[i];
        if (ch == '\\' && i + 1 < n) ch = s[++i];
        if (key[k] != ch) return 0;
    }
    return key[k] == '\0';
}

static int read_jsonl(reader *r, const char *data, size_t size, const char *column)
{
    line_cursor c = {data, data + size, 0};
    const char *s;
    size_t len;
    while (next_line(&c, &s, &len)) {
        if (blank(s, len)) {
            int st = blank_line_error(r, c, c.number, "every line is one JSON object, one sequence");
            if (st == -1) break;
            return st;
        }
        json j = {s, s + len};
        json_space(&j);
        char shown[200];
        if (j.p >= j.end || *j.p != '{')
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: not a JSON object: '%s'", r->name, c.number,
                                excerpt(s, len, shown, sizeof shown));
        j.p++;
        const char *value = NULL;
        size_t value_len = 0;
        int ok = 1;
        json_space(&j);
        if (j.p < j.end && *j.p == '}') {
            j.p++;
        } else {
            for (;;) {
                const char *k;
                size_t kn;
                json_space(&j);
                if (json_string(&j, &k, &kn) != 0) { ok = 0; break; }
                json_space(&j);
                if (j.p >= j.end || *j.p != ':') { ok = 0; break; }
                j.p++;
                json_space(&j);
                const char *v = j.p;
                if (json_skip(&j, 1) != 0) { ok = 0; break; }
                if (!value && json_key_is(k, kn, column)) {
                    value = v;
                    value_len = (size_t)(j.p - v);
                }
                json_space(&j);
                if (j.p < j.end && *j.p == ',') { j.p++; continue; }
                if (j.p < j.end && *j.p == '}') { j.p++; break; }
                ok = 0;
                break;
            }
        }
        json_space(&j);
        if (!ok || j.p != j.end)
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: malformed JSON at column %d: '%s'", r->name,
                                c.number, (int)(j.p - s) + 1, excerpt(s, len, shown, sizeof shown));
        if (!value)
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: no \"%s\" key in this record", r->name, c.number,
                                column);
        if (value[0] == '"')
            return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: \"%s\" is a string (%s), not a number", r->name,
                                c.number, column, excerpt(value, value_len, shown, sizeof shown));
        int st = parse_length(r, value, value_len, c.number, "JSON values must be integers");
        if (st != DCP_EXIT_OK) return st;
    }
    return DCP_EXIT_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int dcp_cli_trace_read(const char *command, const char *path, const char *format, const char *column,
                       dcp_cli_trace *trace)
{
    memset(trace, 0, sizeof *trace);
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    snprintf(trace->name, sizeof trace->name, "%s", name);
    if (!format) format = "auto";
    if (strcmp(format, "auto") && strcmp(format, "text") && strcmp(format, "csv") && strcmp(format, "jsonl"))
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "--input-format: '%s' is not auto, text, csv or jsonl", format);
    if (strcmp(format, "text") == 0 && column)
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "--column applies to csv and jsonl input, not text");
    if ((strcmp(format, "csv") == 0 || strcmp(format, "jsonl") == 0) && !column)
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "%s input needs --column NAME (the length column)", format);

    char *data = NULL;
    size_t size = 0;
    int st = read_all(command, path, &data, &size);
    if (st != DCP_EXIT_OK) return st;
    if (size >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0) { /* a UTF-8 byte order mark is not data */
        memmove(data, data + 3, size - 2);
        size -= 3;
    }
    const char *first = data;
    while (*first && isspace((unsigned char)*first)) first++;
    if (strcmp(format, "auto") == 0) {
        if (column) {
            if (ends_with(path, ".csv")) format = "csv";
            else if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json")) format = "jsonl";
            else format = *first == '{' ? "jsonl" : "csv";
        } else {
            size_t line_len = strcspn(data, "\n");
            format = "text";
            if (*first == '{' || memchr(data, ',', line_len)) {
                const char *kind = *first == '{' ? "JSON Lines" : "CSV";
                free(data);
                return dcp_cli_fail(DCP_EXIT_INPUT, command,
                                    "%s:1: looks like %s, not one length per line: name the length column with "
                                    "--column NAME",
                                    name, kind);
            }
        }
    }
    reader r = {command, trace->name, trace, 0};
    if (strcmp(format, "csv") == 0) st = read_csv(&r, data, size, column);
    else if (strcmp(format, "jsonl") == 0) st = read_jsonl(&r, data, size, column);
    else st = read_text(&r, data, size);
    free(data);
    if (st == DCP_EXIT_OK && trace->count == 0)
        st = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s: empty trace: no sequence lengths", name);
    if (st != DCP_EXIT_OK) dcp_cli_trace_free(trace);
    return st;
}

void dcp_cli_trace_free(dcp_cli_trace *trace)
{
    free(trace->lengths);
    free(trace->lines);
    trace->lengths = NULL;
    trace->lines = NULL;
    trace->count = 0;
}

int64_t dcp_cli_trace_tokens(const dcp_cli_trace *trace)
{
    int64_t sum = 0;
    for (int32_t i = 0; i < trace->count; i++) sum += trace->lengths[i];
    return sum;
}

int32_t dcp_cli_trace_longest(const dcp_cli_trace *trace)
{
    int32_t longest = 0;
    for (int32_t i = 0; i < trace->count; i++)
        if (trace->lengths[i] > longest) longest = trace->lengths[i];
    return longest;
}

const char *dcp_cli_trace_where(const dcp_cli_trace *trace, int32_t id, char *buf, size_t size)
{
    if (trace->lines && trace->lines[id] > 0) snprintf(buf, size, "%s:%d", trace->name, trace->lines[id]);
    else snprintf(buf, size, "%s, sequence %d", trace->name, id);
    return buf;
}
