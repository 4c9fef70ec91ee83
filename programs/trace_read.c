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
 *
 * The input is read as a stream, a line at a time, and reading stops at the
 * first bad line: input that is no trace (a device, a binary file, a bad line
 * followed by endless input) fails where it goes wrong, in bounded memory.  A
 * NUL byte is in no trace; a line longer than MAX_LINE bytes is refused.
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

/*
 * The longest line a trace may hold.  A JSON Lines record may carry a whole
 * sample besides its length, so this is generous; it bounds the memory an
 * endless line can take.
 */
#define MAX_LINE ((size_t)64 << 20)
#define CHUNK ((size_t)64 << 10) /* bytes read at a time */

/* Lines of a file or standard input, read a chunk at a time. */
typedef struct line_source {
    FILE *f;
    const char *command, *name, *path;
    char *buf;
    size_t cap;        /* bytes allocated */
    size_t start, end; /* the bytes read and not yet handed out */
    size_t scanned;    /* of those, the ones known to hold no '\n' (and no NUL) */
    int at_eof, started;
    int32_t number;    /* lines handed out */
    size_t nul_column; /* after a return of -2: 1-based column of the NUL byte, 0 for a line too long */
} line_source;

/*
 * The next line, without its '\n' and a trailing '\r', in [*s, *s + *len),
 * valid until the next call: 1; 0 at the end of the input; -1 with *status
 * set and the message printed (a read error, out of memory); -2 when line
 * number + 1 holds a NUL byte or is too long (src->nul_column says which),
 * with nothing printed: a blank line before it may be the first bad line.
 * A UTF-8 byte-order mark before the first line is skipped.
 */
static int source_next(line_source *src, const char **s, size_t *len, int *status)
{
    for (;;) {
        char *base = src->buf ? src->buf + src->start : NULL; /* NULL before the first read */
        size_t have = src->end - src->start;
        char *newline = have > src->scanned ? memchr(base + src->scanned, '\n', have - src->scanned) : NULL;
        size_t upto = newline ? (size_t)(newline - base) : have;
        const char *nul = upto > src->scanned ? memchr(base + src->scanned, '\0', upto - src->scanned) : NULL;
        if (nul) {
            src->nul_column = (size_t)(nul - base) + 1;
            return -2;
        }
        src->scanned = upto;
        if (upto > MAX_LINE) {
            src->nul_column = 0;
            return -2;
        }
        if (newline || (src->at_eof && have > 0)) {
            if (src->number == INT32_MAX) {
                *status = dcp_cli_fail(DCP_EXIT_INPUT, src->command, "%s: more than %d lines", src->name, INT32_MAX);
                return -1;
            }
            src->number++;
            src->start += newline ? upto + 1 : upto;
            src->scanned = 0;
            if (upto > 0 && base[upto - 1] == '\r') upto--;
            *s = base;
            *len = upto;
            return 1;
        }
        if (src->at_eof) return 0;
        /* read on: the partial line moves to the front, and the buffer grows when it is full */
        if (src->start > 0) {
            memmove(src->buf, base, have);
            src->start = 0;
            src->end = have;
        }
        if (src->cap - src->end < CHUNK) {
            size_t cap = src->cap ? src->cap * 2 : 2 * CHUNK;
            if (cap > MAX_LINE + CHUNK) cap = MAX_LINE + CHUNK; /* a line never holds more before it is refused */
            if (cap < src->end + CHUNK) cap = src->end + CHUNK;
            char *grown = realloc(src->buf, cap);
            if (!grown) {
                *status = dcp_cli_fail(DCP_EXIT_ERROR, src->command, "%s: out of memory", src->name);
                return -1;
            }
            src->buf = grown;
            src->cap = cap;
        }
        size_t got = fread(src->buf + src->end, 1, CHUNK, src->f);
        src->end += got;
        if (got < CHUNK) {
            if (ferror(src->f)) {
                *status = dcp_cli_fail(DCP_EXIT_INPUT, src->command, "cannot read %s: %s", src->path, strerror(errno));
                return -1;
            }
            src->at_eof = 1;
        }
        if (!src->started) { /* a UTF-8 byte order mark is not data */
            src->started = 1;
            if (src->end >= 3 && memcmp(src->buf, "\xEF\xBB\xBF", 3) == 0) src->start = 3;
        }
    }
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

/*
 * A length from text[0..len): digits (leading zeros allowed) making an integer
 * in [1, INT32_MAX], spaces around them allowed; no sign ('-' only to say that
 * a length is negative).
 */
static int parse_length(reader *r, const char *text, size_t len, int32_t line, const char *what)
{
    while (len && isspace((unsigned char)*text)) text++, len--;
    while (len && isspace((unsigned char)text[len - 1])) len--;
    char shown[200];
    excerpt(text, len, shown, sizeof shown);
    size_t sign = len && text[0] == '-';
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

static int blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
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

/* The header line: *index gets the column's field number. */
static int csv_header(reader *r, const char *s, size_t len, const char *column, int *index)
{
    char name[256], all[512] = "";
    *index = -1;
    for (int f = 0;; f++) {
        size_t n = 0;
        int seen = csv_field(s, len, f, name, sizeof name, &n);
        if (seen < 0) return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: unterminated quote in the header", r->name);
        if (f >= seen) break;
        if (n >= sizeof name) n = 0; /* a name too long to hold matches no --column */
        while (n && isspace((unsigned char)name[n - 1])) n--;
        name[n] = '\0';
        if (*index < 0 && strcmp(name, column) == 0) *index = f;
        if (strlen(all) + n + 3 < sizeof all) {
            if (f) strcat(all, ", ");
            strcat(all, name);
        }
    }
    if (*index < 0)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: no column '%s' in the header (columns: %s)", r->name,
                            column, all);
    return DCP_EXIT_OK;
}

static int csv_row(reader *r, const char *s, size_t len, int32_t line, const char *column, int index)
{
    char value[128];
    size_t n = 0;
    int seen = csv_field(s, len, index, value, sizeof value, &n);
    if (seen < 0) return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: unterminated quote", r->name, line);
    if (seen <= index)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: the row has %d fields; column '%s' is field %d",
                            r->name, line, seen, column, index + 1);
    if (n >= sizeof value)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: column '%s' holds %zu characters, more than a "
                            "length can (%zu)", r->name, line, column, n, sizeof value - 1);
    return parse_length(r, value, n, line, "column values must be integers");
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

/* Four hex digits at s (n bytes left): 0 with the value in *out. */
static int hex4(const char *s, size_t n, uint32_t *out)
{
    if (n < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)s[i];
        if (!isxdigit(c)) return -1;
        v = v * 16 + (uint32_t)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
    }
    *out = v;
    return 0;
}

/*
 * Whether the raw content of a key (escapes kept) is `key` once its escapes are
 * undone: \" \\ \/ \b \f \n \r \t and \uXXXX (surrogate pairs too) as UTF-8.
 */
static int json_key_is(const char *s, size_t n, const char *key)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char out[4];
        size_t m = 0;
        if (s[i] != '\\') {
            out[m++] = (unsigned char)s[i++];
        } else {
            if (i + 1 >= n) return 0;
            char e = s[i + 1];
            i += 2;
            if (e != 'u') {
                switch (e) {
                case '"': case '\\': case '/': out[m++] = (unsigned char)e; break;
                case 'b': out[m++] = '\b'; break;
                case 'f': out[m++] = '\f'; break;
                case 'n': out[m++] = '\n'; break;
                case 'r': out[m++] = '\r'; break;
                case 't': out[m++] = '\t'; break;
                default: return 0;
                }
            } else {
                uint32_t cp = 0, low = 0;
                if (hex4(s + i, n - i, &cp) != 0 || cp == 0) return 0; /* no key holds a NUL */
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {
                    if (i + 2 > n || s[i] != '\\' || s[i + 1] != 'u' || hex4(s + i + 2, n - i - 2, &low) != 0 ||
                        low < 0xDC00 || low >= 0xE000)
                        return 0;
                    i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    return 0;
                }
                if (cp < 0x80) out[m++] = (unsigned char)cp;
                else if (cp < 0x800) out[m++] = (unsigned char)(0xC0 | cp >> 6), out[m++] = (unsigned char)(0x80 | (cp & 0x3F));
                else if (cp < 0x10000)
                    out[m++] = (unsigned char)(0xE0 | cp >> 12), out[m++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
                    out[m++] = (unsigned char)(0x80 | (cp & 0x3F));
                else
                    out[m++] = (unsigned char)(0xF0 | cp >> 18), out[m++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
                    out[m++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), out[m++] = (unsigned char)(0x80 | (cp & 0x3F));
            }
        }
        for (size_t q = 0; q < m; q++, k++)
            if ((unsigned char)key[k] != out[q]) return 0; /* out[q] is never 0: key's end is never passed */
    }
    return key[k] == '\0';
}

/* The JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !isdigit((unsigned char)s[i])) return 0;
    if (s[i] == '0') i++;
    else
        while (i < n && isdigit((unsigned char)s[i])) i++;
    if (i < n && s[i] == '.') {
        if (++i >= n || !isdigit((unsigned char)s[i])) return 0;
        while (i < n && isdigit((unsigned char)s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !isdigit((unsigned char)s[i])) return 0;
        while (i < n && isdigit((unsigned char)s[i])) i++;
    }
    return i == n;
}

static int jsonl_record(reader *r, const char *s, size_t len, int32_t line, const char *column)
{
    json j = {s, s + len};
    json_space(&j);
    char shown[200];
    if (j.p >= j.end || *j.p != '{')
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: not a JSON object: '%s'", r->name, line,
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
            if (json_key_is(k, kn, column)) {
                if (value) { /* which one is the length? */
                    char other[200];
                    return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: the key \"%s\" appears twice (%s and %s)",
                                        r->name, line, column, excerpt(value, value_len, shown, sizeof shown),
                                        excerpt(v, (size_t)(j.p - v), other, sizeof other));
                }
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
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: malformed JSON at column %d: '%s'", r->name, line,
                            (int)(j.p - s) + 1, excerpt(s, len, shown, sizeof shown));
    if (!value)
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: no \"%s\" key in this record", r->name, line, column);
    if (value[0] == '"')
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: \"%s\" is a string (%s), not a number", r->name, line,
                            column, excerpt(value, value_len, shown, sizeof shown));
    if (!json_number(value, value_len))
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: \"%s\": '%s' is not a JSON number", r->name, line,
                            column, excerpt(value, value_len, shown, sizeof shown));
    return parse_length(r, value, value_len, line, "JSON values must be integers");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

enum format { FORMAT_AUTO, FORMAT_TEXT, FORMAT_CSV, FORMAT_JSONL };

/* A CSV trace whose first line is not its header (blank, or no line at all). */
static int missing_csv_header(const reader *r)
{
    return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:1: expected a CSV header line naming the columns", r->name);
}

/* The error for blank lines (the first at line first_blank) followed by more input. */
static int blank_line_error(const reader *r, enum format kind, int csv_index, int32_t first_blank)
{
    if (kind == FORMAT_CSV && csv_index < 0) return missing_csv_header(r);
    return dcp_cli_fail(DCP_EXIT_INPUT, r->command, "%s:%d: empty line (%s)", r->name, first_blank,
                        kind == FORMAT_TEXT  ? "every line holds one length; ids are line numbers"
                        : kind == FORMAT_CSV ? "every row is one sequence"
                        : kind == FORMAT_JSONL ? "every line is one JSON object, one sequence"
                                               : "blank lines may only end a trace");
}

/*
 * --input-format auto, decided at the first line that is not blank (line
 * `line`, its text in [s, s + len)): with --column, JSON Lines when it starts
 * with '{', else CSV; without, one length per line, unless it looks like JSON
 * Lines or (line 1 holding a comma) CSV, which need --column.
 */
static int decide_format(reader *r, const char *s, size_t len, int32_t line, const char *column, enum format *format)
{
    while (len && isspace((unsigned char)*s)) s++, len--;
    if (column) {
        *format = len && *s == '{' ? FORMAT_JSONL : FORMAT_CSV;
        return DCP_EXIT_OK;
    }
    if ((len && *s == '{') || (line == 1 && memchr(s, ',', len)))
        return dcp_cli_fail(DCP_EXIT_INPUT, r->command,
                            "%s:1: looks like %s, not one length per line: name the length column with --column NAME",
                            r->name, len && *s == '{' ? "JSON Lines" : "CSV");
    *format = FORMAT_TEXT;
    return DCP_EXIT_OK;
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

    enum format kind = strcmp(format, "text") == 0    ? FORMAT_TEXT
                       : strcmp(format, "csv") == 0   ? FORMAT_CSV
                       : strcmp(format, "jsonl") == 0 ? FORMAT_JSONL
                                                      : FORMAT_AUTO;
    if (kind == FORMAT_AUTO && column) {
        if (ends_with(path, ".csv")) kind = FORMAT_CSV;
        else if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json")) kind = FORMAT_JSONL;
    }

    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) /* out of memory is no fault of the file's */
        return dcp_cli_fail(errno == ENOMEM ? DCP_EXIT_ERROR : DCP_EXIT_INPUT, command, "cannot open %s: %s", path,
                            strerror(errno));
    line_source src = {.f = f, .command = command, .name = trace->name, .path = path};
    reader r = {command, trace->name, trace, 0};
    int st = DCP_EXIT_OK, got, csv_index = -1;
    int32_t first_blank = 0; /* the first of the blank lines just read, if any */
    const char *s;
    size_t len;
    while ((got = source_next(&src, &s, &len, &st)) == 1) {
        const int32_t line = src.number;
        /* a blank line is allowed only when nothing but blank lines follows */
        if (blank(s, len)) {
            if (!first_blank) first_blank = line;
            continue;
        }
        if (kind == FORMAT_AUTO && (st = decide_format(&r, s, len, line, column, &kind)) != DCP_EXIT_OK) break;
        if (first_blank) {
            st = blank_line_error(&r, kind, csv_index, first_blank);
        } else if (kind == FORMAT_CSV && csv_index < 0) {
            st = csv_header(&r, s, len, column, &csv_index);
        } else if (kind == FORMAT_CSV) {
            st = csv_row(&r, s, len, line, column, csv_index);
        } else if (kind == FORMAT_JSONL) {
            st = jsonl_record(&r, s, len, line, column);
        } else {
            st = parse_length(&r, s, len, line, "one integer per line");
        }
        if (st != DCP_EXIT_OK) break;
    }
    if (got == -2) { /* a line with a NUL byte or too long; blank lines before it are the first bad line */
        if (first_blank) st = blank_line_error(&r, kind, csv_index, first_blank);
        else if (src.nul_column)
            st = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%lld: a NUL byte at column %zu: not a trace", r.name,
                              (long long)src.number + 1, src.nul_column);
        else
            st = dcp_cli_fail(DCP_EXIT_INPUT, command, "%s:%lld: line longer than %zu bytes", r.name,
                              (long long)src.number + 1, MAX_LINE);
    }
    if (f != stdin) fclose(f);
    free(src.buf);
    if (st == DCP_EXIT_OK && kind == FORMAT_AUTO && column) kind = FORMAT_CSV; /* nothing but blank lines */
    if (st == DCP_EXIT_OK && kind == FORMAT_CSV && csv_index < 0)
        st = missing_csv_header(&r);
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
