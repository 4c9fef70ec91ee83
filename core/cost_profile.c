/*
 * cost_profile.c - the cost-profile text format (docs/program.md, cost profiles): the one reader and
 * writer behind `dcpack --cost/--profile` and the Python package (dcpack.calibrate), so both accept
 * the same files and say the same thing about the others.
 *
 * The rules are byte-level and ASCII, with no locale: lines end at LF (a CR before it is dropped);
 * outside comments only space and tab separate; keys are ASCII words and values ASCII digits.  The
 * file is UTF-8 (comments may hold any character; invalid UTF-8 is named), may start with a
 * byte-order mark, and holds no NUL byte.
 */
#include "dcpack.h"
#include "error.h"
#include "int128.h"

#include <stdio.h>
#include <string.h>

enum { LINE_CHARS = 1022 }; /* the longest line read */

/* The plausibility rule (dcp_cost_profile_parse, docs/program.md): a microbatch of 2^17 tokens costs below 2^56. */
#define PLAUSIBLE_TOKENS ((int64_t)1 << 17)
#define PLAUSIBLE_LIMIT ((dcp__i128)1 << 56)

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (message && message_size &&                                                             \
            (size_t)snprintf(message, message_size, __VA_ARGS__) >= message_size)                 \
            dcp__message_cut(message, message_size);                                               \
        return DCP_ERR_INVALID_CONFIG;                                                             \
    } while (0)

static int is_blank(unsigned char c) { return c == ' ' || c == '\t'; }

/*
 * The length of the UTF-8 sequence at s (at most `left` bytes), or 0 when it is not valid UTF-8
 * (overlong forms, surrogates and code points above U+10FFFF included); its code point in *cp.
 */
static size_t utf8_char(const unsigned char *s, size_t left, uint32_t *cp)
{
    const unsigned char c = s[0];
    size_t n;
    uint32_t v, least;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) n = 2, v = c & 0x1f, least = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 3, v = c & 0x0f, least = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, v = c & 0x07, least = 0x10000;
    else return 0;
    if (n > left) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < least || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return n;
}

/*
 * `text` for a message: control characters as \xNN (a form feed, a tab: invisible otherwise), the
 * rest as it is (valid UTF-8 by then).
 */
static const char *shown(const char *text, char *out, size_t size)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 5 < size; p++) {
        if (*p < 0x20 || *p == 0x7f) o += (size_t)snprintf(out + o, size - o, "\\x%02x", *p);
        else out[o++] = (char)*p;
    }
    out[o] = '\0';
    return out;
}

/*
 * Why a word is not ASCII, for a message: " (U+0665 at column 13 is not ASCII)" for its first
 * character outside printable ASCII, or "" when it has none.  `line` is where the line starts.
 */
static const char *why_not_ascii(const char *word, const char *line, char *out, size_t size)
{
    out[0] = '\0';
    for (const unsigned char *p = (const unsigned char *)word; *p; p++) {
        if (*p >= 0x20 && *p < 0x7f) continue;
        uint32_t cp = 0;
        if (!utf8_char(p, strlen((const char *)p), &cp)) cp = *p;
        const size_t column = (size_t)((const char *)p - line) + 1;
        if (cp < 0x20 || cp == 0x7f)
            snprintf(out, size, " (U+%04X, a control character, at column %zu: only spaces and tabs separate)",
                     (unsigned)cp, column);
        else
            snprintf(out, size, " (U+%04X at column %zu is not ASCII)", (unsigned)cp, column);
        break;
    }
    return out;
}

/* A value of ASCII digits: 0 with it in *out; -1 for no digits or another character; -2 above INT64_MAX. */
static int digits_value(const char *text, int64_t *out)
{
    int64_t v = 0;
    int over = 0;
    if (!*text) return -1;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v > (INT64_MAX - (*p - '0')) / 10) over = 1;
        else v = v * 10 + (*p - '0');
    }
    if (over) return -2;
    *out = v;
    return 0;
}

/* log2 of a power of two cp in [2, 2^DCP_MAX_LOG2_CP] written in ASCII digits, or -1. */
static int cp_log2(const char *text)
{
    int64_t cp = 0;
    if (digits_value(text, &cp) != 0 || cp < 2 || cp > ((int64_t)1 << DCP_MAX_LOG2_CP) || (cp & (cp - 1))) return -1;
    int k = 0;
    while (((int64_t)1 << k) < cp) k++;
    return k;
}

static const char *const schedule_names[] = {"1f1b", "interleaved"};

/* Scalar coefficients: key, field, and the line that set it last (for the plausibility message). */
enum { Q, LIN, LAT, OVER, KNEE, SLOPE, FIRST, LAST, NUM_SCALARS };
static const char *const scalar_keys[NUM_SCALARS] = {"quadratic", "linear", "round_latency", "microbatch_overhead",
                                                     "small_knee", "small_slope", "first_stage_per_token",
                                                     "last_stage_per_token"};

static int64_t *scalar_field(dcp_cost_model *m, int which)
{
    switch (which) {
    case Q: return &m->quadratic;
    case LIN: return &m->linear;
    case LAT: return &m->round_latency;
    case OVER: return &m->microbatch_overhead;
    case KNEE: return &m->small_knee;
    case SLOPE: return &m->small_slope;
    case FIRST: return &m->first_stage_per_token;
    default: return &m->last_stage_per_token;
    }
}

static dcp__i128 nonneg(int64_t v) { return v > 0 ? v : 0; }

/*
 * The plausibility rule: for every CP size 2^k (k = 0..16), one microbatch of one sequence of 2^17
 * tokens on it costs below 2^56 units, counting every term (dcp_cost's, the gather, the most the
 * hinge can add, the overhead, the pipeline's per-token work).  Returns -1 when it holds, else the
 * term that weighs most at the worst CP size: a scalar index, or NUM_SCALARS + k for kv[k],
 * NUM_SCALARS + 17 + k for cp_gather[k]; *cp_out and *total_out say where and how much.
 */
static int implausible(const dcp_cost_model *m, int64_t *cp_out, dcp__i128 *total_out)
{
    const dcp__i128 s = PLAUSIBLE_TOKENS;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        const dcp__i128 cp = (dcp__i128)1 << k;
        dcp__i128 term[NUM_SCALARS + 2] = {0};
        term[Q] = nonneg(m->quadratic) * s * s / cp;
        term[LIN] = nonneg(m->linear) * s / cp;
        term[LAT] = k > 0 ? nonneg(m->round_latency) * (cp - 1) : 0;
        term[OVER] = nonneg(m->microbatch_overhead);
        term[KNEE] = 0;
        term[SLOPE] = nonneg(m->small_slope) * nonneg(m->small_knee); /* the hinge's most */
        term[FIRST] = nonneg(m->first_stage_per_token) * s;
        term[LAST] = nonneg(m->last_stage_per_token) * s;
        term[NUM_SCALARS] = k > 0 ? nonneg(m->kv[k]) * s * (cp - 1) / cp : 0;
        term[NUM_SCALARS + 1] = k > 0 ? nonneg(m->cp_gather[k]) * s : 0;
        dcp__i128 total = 0;
        int worst = 0;
        for (int t = 0; t < NUM_SCALARS + 2; t++) {
            total += term[t]; /* each below 2^63 * 2^34: no overflow */
            if (term[t] > term[worst]) worst = t;
        }
        if (total >= PLAUSIBLE_LIMIT) {
            *cp_out = (int64_t)cp;
            *total_out = total;
            if (worst == NUM_SCALARS) return NUM_SCALARS + k;
            if (worst == NUM_SCALARS + 1) return NUM_SCALARS + 17 + k;
            return worst;
        }
    }
    return -1;
}

/* A 128-bit count in decimal. */
static const char *decimal128(dcp__i128 v, char *out, size_t size)
{
    char tmp[48];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v > 0 && n < (int)sizeof tmp);
    size_t o = 0;
    while (n > 0 && o + 1 < size) out[o++] = tmp[--n];
    out[o] = '\0';
    return out;
}

dcp_status dcp_cost_profile_parse(const char *text, size_t length, const char *name, dcp_cost_model *model,
                                  int64_t *time_unit_ps, char *message, size_t message_size)
{
    if (message && message_size) message[0] = '\0';
    if (!model || !time_unit_ps || (!text && length > 0)) {
        if (message && message_size) snprintf(message, message_size, "cost profile: a NULL argument");
        return DCP_ERR_NULL_POINTER;
    }
    if (!name) name = "<profile>";
    dcp_cost_model m = *model;
    int64_t unit_ps = 0;
    int scalar_line[NUM_SCALARS] = {0}, kv_line[DCP_MAX_LOG2_CP + 1] = {0}, gather_line[DCP_MAX_LOG2_CP + 1] = {0};
    const unsigned char *p = (const unsigned char *)text, *end = p ? p + length : p; /* NULL text: length 0 */
    if (length >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) p += 3; /* a byte-order mark */
    char line[LINE_CHARS + 2], show[LINE_CHARS * 4 + 8], note[96];
    for (int number = 1; p < end; number++) {
        const unsigned char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((eol ? eol : end) - p);
        const unsigned char *next = eol ? eol + 1 : end;
        if (n > 0 && p[n - 1] == '\r') n--; /* CRLF */
        const unsigned char *nul = memchr(p, '\0', n);
        if (nul) FAIL("%s:%d: a NUL byte at column %zu: not a cost profile (text)", name, number, (size_t)(nul - p) + 1);
        if (n > LINE_CHARS) FAIL("%s:%d: line longer than %d characters", name, number, LINE_CHARS);
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t len = utf8_char(p + i, n - i, &cp);
            if (!len)
                FAIL("%s:%d: invalid UTF-8 (byte 0x%02x) at column %zu: a cost profile is UTF-8 text", name, number,
                     p[i], i + 1);
            i += len;
        }
        memcpy(line, p, n);
        line[n] = '\0';
        p = next;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = line;
        while (is_blank((unsigned char)*s)) s++;
        size_t len = strlen(s);
        while (len && is_blank((unsigned char)s[len - 1])) s[--len] = '\0';
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq)
            FAIL("%s:%d: '%s' is not `key = value`%s", name, number, shown(s, show, sizeof show),
                 why_not_ascii(s, line, note, sizeof note));
        char *key = s, *value = eq + 1;
        char *key_end = eq;
        while (key_end > key && is_blank((unsigned char)key_end[-1])) key_end--;
        *key_end = '\0';
        while (is_blank((unsigned char)*value)) value++;
        if (strcmp(key, "step_model") == 0) {
            dcp_step_model sm;
            if (dcp_step_model_from_name(value, &sm) != DCP_OK)
                FAIL("%s:%d: step_model = '%s' is not barrier or dependency%s", name, number,
                     shown(value, show, sizeof show), why_not_ascii(value, line, note, sizeof note));
            m.step_model = (int32_t)sm;
            continue;
        }
        if (strcmp(key, "pipeline_schedule") == 0) {
            int found = -1;
            for (int i = 0; i < 2; i++)
                if (strcmp(value, schedule_names[i]) == 0) found = i;
            if (found < 0)
                FAIL("%s:%d: pipeline_schedule = '%s' is not 1f1b or interleaved%s", name, number,
                     shown(value, show, sizeof show), why_not_ascii(value, line, note, sizeof note));
            m.pipeline_schedule = found;
            continue;
        }
        int64_t v = 0;
        const int got = digits_value(value, &v);
        if (got == -2)
            FAIL("%s:%d: %s = '%s' is above INT64_MAX (9223372036854775807)", name, number,
                 shown(key, show, sizeof show), value);
        if (got != 0) {
            char key_shown[LINE_CHARS * 4 + 8];
            FAIL("%s:%d: %s = '%s': values are non-negative integers in ASCII digits%s", name, number,
                 shown(key, key_shown, sizeof key_shown), shown(value, show, sizeof show),
                 why_not_ascii(value, line, note, sizeof note));
        }
        int scalar = -1;
        for (int i = 0; i < NUM_SCALARS; i++)
            if (strcmp(key, scalar_keys[i]) == 0) scalar = i;
        if (scalar >= 0) {
            *scalar_field(&m, scalar) = v;
            scalar_line[scalar] = number;
        } else if (strcmp(key, "time_unit_ps") == 0) {
            if (v == 0) FAIL("%s:%d: time_unit_ps = 0: picoseconds per cost unit must be at least 1", name, number);
            unit_ps = v;
        } else if (strcmp(key, "hidden") == 0) {
            if (v > INT64_MAX / 12) FAIL("%s:%d: hidden = %lld: 12 * hidden overflows int64", name, number, (long long)v);
            m.linear = 12 * v;
            scalar_line[LIN] = number;
        } else if (strcmp(key, "margin_ppm") == 0) {
            if (v >= 1000000)
                FAIL("%s:%d: margin_ppm = %lld: a margin is below 1000000 parts per million (all of the makespan)",
                     name, number, (long long)v);
            m.margin_ppm = v;
        } else if (strcmp(key, "forward_ppm") == 0) {
            if (v < 1 || v > 999999)
                FAIL("%s:%d: forward_ppm = %lld: the forward share of a microbatch is 1 to 999999 parts per million",
                     name, number, (long long)v);
            m.forward_ppm = (int32_t)v;
        } else if (strcmp(key, "kv") == 0 || strcmp(key, "cp_gather") == 0) {
            const int gather = key[0] == 'c';
            /* kv sets kv[0] too, as it always has; cp_gather[0] (CP 1) means nothing and stays as it is */
            for (int k = gather; k <= DCP_MAX_LOG2_CP; k++) {
                (gather ? m.cp_gather : m.kv)[k] = v;
                (gather ? gather_line : kv_line)[k] = number;
            }
        } else if (strncmp(key, "kv.", 3) == 0 || strncmp(key, "cp_gather.", 10) == 0) {
            const int gather = key[0] == 'c';
            const char *size_text = key + (gather ? 10 : 3);
            char cp_text[32];
            size_t cn = strlen(size_text);
            const int and_above = cn > 0 && size_text[cn - 1] == '+';
            if (and_above) cn--;
            int k = -1;
            if (cn < sizeof cp_text) {
                memcpy(cp_text, size_text, cn);
                cp_text[cn] = '\0';
                k = cp_log2(cp_text);
            }
            if (k < 0)
                FAIL("%s:%d: %s: the CP size after '%s' must be a power of two from 2 to %d%s", name, number,
                     shown(key, show, sizeof show), gather ? "cp_gather." : "kv.", 1 << DCP_MAX_LOG2_CP,
                     why_not_ascii(key, line, note, sizeof note));
            for (int j = k; j <= (and_above ? DCP_MAX_LOG2_CP : k); j++) {
                (gather ? m.cp_gather : m.kv)[j] = v;
                (gather ? gather_line : kv_line)[j] = number;
            }
        } else {
            FAIL("%s:%d: unknown key '%s'%s (quadratic, linear, hidden, round_latency, microbatch_overhead, kv, "
                 "kv.<cp>, kv.<cp>+, cp_gather, cp_gather.<cp>, cp_gather.<cp>+, small_knee, small_slope, margin_ppm, "
                 "step_model, pipeline_schedule, forward_ppm, first_stage_per_token, last_stage_per_token, "
                 "time_unit_ps)",
                 name, number, shown(key, show, sizeof show), why_not_ascii(key, line, note, sizeof note));
        }
    }
    int64_t at_cp = 0;
    dcp__i128 total = 0;
    const int worst = implausible(&m, &at_cp, &total);
    if (worst >= 0) {
        char key[32], amount[48];
        int64_t value;
        int number;
        if (worst < NUM_SCALARS) {
            snprintf(key, sizeof key, "%s", scalar_keys[worst == KNEE ? SLOPE : worst]);
            value = *scalar_field(&m, worst);
            number = scalar_line[worst];
        } else if (worst < NUM_SCALARS + 17) {
            snprintf(key, sizeof key, "kv.%d", 1 << (worst - NUM_SCALARS));
            value = m.kv[worst - NUM_SCALARS];
            number = kv_line[worst - NUM_SCALARS];
        } else {
            snprintf(key, sizeof key, "cp_gather.%d", 1 << (worst - NUM_SCALARS - 17));
            value = m.cp_gather[worst - NUM_SCALARS - 17];
            number = gather_line[worst - NUM_SCALARS - 17];
        }
        char line_text[16] = "";
        if (number > 0) snprintf(line_text, sizeof line_text, ":%d", number); /* 0: the base model's value */
        FAIL("%s%s: %s = %lld: one microbatch of 131072 tokens at CP %lld would cost %s units, 2^56 or more (the "
             "most a profile may give it, so that a step's sums stay below INT64_MAX): a unit slip?",
             name, line_text, key, (long long)value, (long long)at_cp, decimal128(total, amount, sizeof amount));
    }
    *model = m;
    *time_unit_ps = unit_ps;
    return DCP_OK;
}

/* Appends to buf as snprintf would, counting what does not fit. */
typedef struct {
    char *buf;
    size_t size, used;
} out_text;

static void put(out_text *o, const char *key, long long v)
{
    const size_t room = o->used < o->size ? o->size - o->used : 0;
    const int n = snprintf(room ? o->buf + o->used : NULL, room, "%s = %lld\n", key, v);
    if (n > 0) o->used += (size_t)n;
}

static void put_word(out_text *o, const char *key, const char *word)
{
    const size_t room = o->used < o->size ? o->size - o->used : 0;
    const int n = snprintf(room ? o->buf + o->used : NULL, room, "%s = %s\n", key, word);
    if (n > 0) o->used += (size_t)n;
}

dcp_status dcp_cost_profile_format(const dcp_cost_model *m, int64_t time_unit_ps, char *buf, size_t size,
                                   size_t *written)
{
    if (!m || (!buf && size > 0)) return DCP_ERR_NULL_POINTER;
    if (m->pipeline_schedule != DCP_PIPELINE_1F1B && m->pipeline_schedule != DCP_PIPELINE_INTERLEAVED)
        return DCP_ERR_INVALID_CONFIG;
    if (m->step_model != DCP_STEP_MODEL_BARRIER && m->step_model != DCP_STEP_MODEL_DEPENDENCY)
        return DCP_ERR_INVALID_CONFIG;
    out_text o = {buf, size, 0};
    if (buf && size) buf[0] = '\0';
    char key[32];
    if (time_unit_ps > 0) put(&o, "time_unit_ps", time_unit_ps);
    put(&o, "quadratic", m->quadratic);
    put(&o, "linear", m->linear);
    put(&o, "round_latency", m->round_latency);
    put(&o, "microbatch_overhead", m->microbatch_overhead);
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) {
        snprintf(key, sizeof key, "kv.%d", 1 << k);
        put(&o, key, m->kv[k]);
    }
    put_word(&o, "step_model", dcp_step_model_name((dcp_step_model)m->step_model));
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) {
        snprintf(key, sizeof key, "cp_gather.%d", 1 << k);
        put(&o, key, m->cp_gather[k]);
    }
    put(&o, "small_knee", m->small_knee);
    put(&o, "small_slope", m->small_slope);
    put(&o, "margin_ppm", m->margin_ppm);
    put_word(&o, "pipeline_schedule", schedule_names[m->pipeline_schedule]);
    put(&o, "forward_ppm", m->forward_ppm);
    put(&o, "first_stage_per_token", m->first_stage_per_token);
    put(&o, "last_stage_per_token", m->last_stage_per_token);
    if (written) *written = o.used;
    return o.used < size ? DCP_OK : DCP_ERR_CAPACITY;
}
