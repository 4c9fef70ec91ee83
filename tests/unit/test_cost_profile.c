/* test_cost_profile.c - the cost-profile reader and writer (core/cost_profile.c): keys, byte-level rules, messages. */
#include "dcp_test.h"

#include <string.h>

static dcp_status parse(const char *text, dcp_cost_model *m, int64_t *unit, char *message, size_t size)
{
    dcp_cost_model_default(m);
    *unit = -1;
    return dcp_cost_profile_parse(text, strlen(text), "p", m, unit, message, size);
}

DCP_TEST(every_key_reads_into_its_field)
{
    const char *text = "# a calibrated profile\n"
                       "time_unit_ps = 1\n"
                       "quadratic = 88   # per token pair\n"
                       "hidden = 4096\n"
                       "round_latency = 7\r\n"
                       "microbatch_overhead = 4000000\n"
                       "kv = 11\n"
                       "kv.16+ = 12\n"
                       "kv.4 = 13\n"
                       "cp_gather = 70000\n"
                       "cp_gather.8+ = 80000\n"
                       "cp_gather.2 = 75000\n"
                       "\tsmall_knee = 4096\n"
                       "small_slope = 1100\n"
                       "margin_ppm = 20000\n"
                       "step_model = dependency\n"
                       "pipeline_schedule = interleaved\n"
                       "forward_ppm = 400000\n"
                       "first_stage_per_token = 5\n"
                       "last_stage_per_token = 9"; /* no final newline */
    dcp_cost_model m;
    int64_t unit;
    char message[512];
    DCP_CHECK_STATUS(parse(text, &m, &unit, message, sizeof message), DCP_OK);
    DCP_CHECK_EQ_INT(unit, 1);
    DCP_CHECK_EQ_INT(m.quadratic, 88);
    DCP_CHECK_EQ_INT(m.linear, 12 * 4096);
    DCP_CHECK_EQ_INT(m.round_latency, 7);
    DCP_CHECK_EQ_INT(m.microbatch_overhead, 4000000);
    DCP_CHECK_EQ_INT(m.kv[0], 11);
    DCP_CHECK_EQ_INT(m.kv[1], 11);
    DCP_CHECK_EQ_INT(m.kv[2], 13);
    DCP_CHECK_EQ_INT(m.kv[3], 11);
    DCP_CHECK_EQ_INT(m.kv[4], 12);
    DCP_CHECK_EQ_INT(m.kv[16], 12);
    DCP_CHECK_EQ_INT(m.cp_gather[0], 0); /* cp_gather = v leaves CP 1 alone (kv = v sets kv[0], as always) */
    DCP_CHECK_EQ_INT(m.cp_gather[1], 75000);
    DCP_CHECK_EQ_INT(m.cp_gather[2], 70000);
    DCP_CHECK_EQ_INT(m.cp_gather[3], 80000);
    DCP_CHECK_EQ_INT(m.cp_gather[16], 80000);
    DCP_CHECK_EQ_INT(m.small_knee, 4096);
    DCP_CHECK_EQ_INT(m.small_slope, 1100);
    DCP_CHECK_EQ_INT(m.margin_ppm, 20000);
    DCP_CHECK_EQ_INT(m.step_model, DCP_STEP_MODEL_DEPENDENCY);
    DCP_CHECK_EQ_INT(m.pipeline_schedule, DCP_PIPELINE_INTERLEAVED);
    DCP_CHECK_EQ_INT(m.forward_ppm, 400000);
    DCP_CHECK_EQ_INT(m.first_stage_per_token, 5);
    DCP_CHECK_EQ_INT(m.last_stage_per_token, 9);
    /* an empty profile keeps the model and has no time unit */
    DCP_CHECK_STATUS(parse("", &m, &unit, message, sizeof message), DCP_OK);
    dcp_cost_model d;
    dcp_cost_model_default(&d);
    DCP_CHECK(memcmp(&m, &d, sizeof m) == 0);
    DCP_CHECK_EQ_INT(unit, 0);
}

DCP_TEST(written_profiles_read_back_to_the_same_model)
{
    dcp_cost_model m;
    dcp_cost_model_default(&m);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        m.kv[k] = 100 + k;
        m.cp_gather[k] = 7000 + 3 * k;
    }
    m.kv[0] = 0; /* CP 1 is never written: it keeps the base's */
    m.cp_gather[0] = 0;
    m.small_knee = 4096;
    m.small_slope = 1100;
    m.margin_ppm = 15000;
    m.step_model = DCP_STEP_MODEL_DEPENDENCY;
    m.pipeline_schedule = DCP_PIPELINE_INTERLEAVED;
    m.forward_ppm = 300000;
    m.first_stage_per_token = 3;
    m.last_stage_per_token = 4;
    char text[2048];
    size_t written = 0;
    DCP_CHECK_STATUS(dcp_cost_profile_format(&m, 1000, text, sizeof text, &written), DCP_OK);
    DCP_CHECK_EQ_INT(written, strlen(text));
    DCP_CHECK(strncmp(text, "time_unit_ps = 1000\n", 20) == 0);
    DCP_CHECK_CONTAINS(text, "\ncp_gather.65536 = 7048\n");
    DCP_CHECK_CONTAINS(text, "\npipeline_schedule = interleaved\n");
    dcp_cost_model back;
    memset(&back, 0, sizeof back); /* kv[0] and cp_gather[0] come from here */
    back.forward_ppm = 1;
    int64_t unit = 0;
    char message[256];
    DCP_CHECK_STATUS(dcp_cost_profile_parse(text, written, "w", &back, &unit, message, sizeof message), DCP_OK);
    DCP_CHECK(memcmp(&back, &m, sizeof m) == 0);
    DCP_CHECK_EQ_INT(unit, 1000);
    /* too small a buffer: DCP_ERR_CAPACITY with the length it needs; no unit: no time_unit_ps line */
    size_t need = 0;
    DCP_CHECK_STATUS(dcp_cost_profile_format(&m, 0, text, 10, &need), DCP_ERR_CAPACITY);
    DCP_CHECK_EQ_INT(strlen(text), 9);
    DCP_CHECK_STATUS(dcp_cost_profile_format(&m, 0, text, need + 1, &written), DCP_OK);
    DCP_CHECK_EQ_INT(written, need);
    DCP_CHECK(strstr(text, "time_unit_ps") == NULL);
    DCP_CHECK_STATUS(dcp_cost_profile_format(&m, 0, text, need, &written), DCP_ERR_CAPACITY);
    m.pipeline_schedule = 5;
    DCP_CHECK_STATUS(dcp_cost_profile_format(&m, 0, text, sizeof text, &written), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_STATUS(dcp_cost_profile_format(NULL, 0, text, sizeof text, &written), DCP_ERR_NULL_POINTER);
}

typedef struct {
    const char *text;
    const char *message;
} bad_case;

/* Every refusal names the line, the key and the value; nothing of the model changes. */
DCP_TEST(hostile_profiles_are_refused_by_name)
{
    const bad_case cases[] = {
        {"quadratic = \xd9\xa5\n", "p:1: quadratic = '\xd9\xa5': values are non-negative integers in ASCII digits "
                                   "(U+0665 at column 13 is not ASCII)"},
        {"kv.\xd9\xa8 = 7\n", "p:1: kv.\xd9\xa8: the CP size after 'kv.' must be a power of two from 2 to 65536 "
                              "(U+0668 at column 4 is not ASCII)"},
        {"quadratic = 1\f2\n", "p:1: quadratic = '1\\x0c2': values are non-negative integers in ASCII digits "
                               "(U+000C, a control character, at column 14: only spaces and tabs separate)"},
        {"quadratic = 5\v\n", "U+000B, a control character, at column 14"},
        {"quadratic =\xc2\xa0" "5\n", "(U+00A0 at column 12 is not ASCII)"},
        {"quadratic = \xc2\xb2\n", "p:1: quadratic = '\xc2\xb2': values are non-negative integers in ASCII digits (U+00B2"},
        {"# fine\nquadratic = 5 # \xff\n", "p:2: invalid UTF-8 (byte 0xff) at column 17: a cost profile is UTF-8 text"},
        {"quadratic = \xc0\xb5\n", "p:1: invalid UTF-8 (byte 0xc0) at column 13"},      /* overlong */
        {"linear = 1 \xed\xa0\x80\n", "p:1: invalid UTF-8 (byte 0xed) at column 12"},    /* a surrogate */
        {"\xef\xbb\xbf\xef\xbb\xbfquadratic = 1\n", "p:1: unknown key '\xef\xbb\xbfquadratic' (U+FEFF at column 1"},
        {"quadratic = 1\0 2\n", "p:1: a NUL byte at column 14: not a cost profile (text)"},
        {"quadratic = 99999999999999999999\n", "p:1: quadratic = '99999999999999999999' is above INT64_MAX"},
        {"quadratic = -1\n", "p:1: quadratic = '-1': values are non-negative integers"},
        {"quadratic\n", "p:1: 'quadratic' is not `key = value`"},
        {"speed = 5\n", "p:1: unknown key 'speed' (quadratic,"},
        {"kv.3 = 5\n", "p:1: kv.3: the CP size after 'kv.' must be a power of two"},
        {"cp_gather.1 = 5\n", "p:1: cp_gather.1: the CP size after 'cp_gather.' must be a power of two"},
        {"cp_gather.131072 = 5\n", "p:1: cp_gather.131072: the CP size"},
        {"step_model = fast\n", "p:1: step_model = 'fast' is not barrier or dependency"},
        {"pipeline_schedule = gpipe\n", "p:1: pipeline_schedule = 'gpipe' is not 1f1b or interleaved"},
        {"margin_ppm = 1000000\n", "p:1: margin_ppm = 1000000: a margin is below 1000000 parts per million"},
        {"forward_ppm = 0\n", "p:1: forward_ppm = 0: the forward share of a microbatch is 1 to 999999"},
        {"forward_ppm = 1000000\n", "p:1: forward_ppm = 1000000:"},
        {"time_unit_ps = 0\n", "p:1: time_unit_ps = 0: picoseconds per cost unit must be at least 1"},
        {"hidden = 999999999999999999\n", "p:1: hidden = 999999999999999999: 12 * hidden overflows int64"},
        /* implausible: a unit slip (one second per token pair), named where it was set last */
        {"quadratic = 5\nquadratic = 1000000000000\n",
         "p:2: quadratic = 1000000000000: one microbatch of 131072 tokens at CP 1 would cost "
         "17179869184006443270144 units, 2^56 or more"},
        {"cp_gather.16+ = 1000000000000\n", "p:1: cp_gather.16 = 1000000000000: one microbatch of 131072 tokens at CP 16"},
        {"kv = 1000000000000000\n", "p:1: kv.2 = 1000000000000000: one microbatch of 131072 tokens at CP 2"},
        {"microbatch_overhead = 72057594037927936\n", "p:1: microbatch_overhead = 72057594037927936: one microbatch"},
        {"round_latency = 2199023255552\n", "p:1: round_latency = 2199023255552: one microbatch of 131072 tokens at CP 65536"},
        {"small_knee = 4096\nsmall_slope = 17592186044416\n", "p:2: small_slope = 17592186044416: one microbatch"},
        {"last_stage_per_token = 549755813888\n", "p:1: last_stage_per_token = 549755813888: one microbatch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dcp_cost_model m, before;
        dcp_cost_model_default(&before);
        m = before;
        int64_t unit = -7;
        char message[512];
        size_t length = strlen(cases[i].text);
        if (strstr(cases[i].message, "NUL")) length = 17; /* the text goes on past its NUL */
        dcp_status st = dcp_cost_profile_parse(cases[i].text, length, "p", &m, &unit, message, sizeof message);
        if (st != DCP_ERR_INVALID_CONFIG)
            dcp_test_fail(__FILE__, __LINE__, "case %zu: got %s (%s)", i, dcp_status_str(st), message);
        DCP_CHECK_CONTAINS(message, cases[i].message);
        DCP_CHECK(memcmp(&m, &before, sizeof m) == 0);
        DCP_CHECK_EQ_INT(unit, -7);
    }
}

DCP_TEST(plausible_profiles_up_to_the_limit)
{
    dcp_cost_model m;
    int64_t unit;
    char message[512];
    /* 2^56 - 1 in all at CP 1: quadratic 2^22 (2^56 at 2^17 tokens) is one too many; the rest default */
    DCP_CHECK_STATUS(parse("quadratic = 4194304\n", &m, &unit, message, sizeof message), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_STATUS(parse("quadratic = 4194303\nlinear = 0\nmicrobatch_overhead = 0\n", &m, &unit, message,
                           sizeof message),
                     DCP_OK);
    DCP_CHECK_EQ_INT(m.quadratic, 4194303);
    /* a 405B-class calibration in picoseconds (44 ns a token pair, 4 ms a microbatch) is far inside */
    DCP_CHECK_STATUS(parse("time_unit_ps = 1\nquadratic = 44352\nlinear = 400000000\ncp_gather = 80000\n"
                           "microbatch_overhead = 4000000000\nsmall_knee = 4096\nsmall_slope = 1100000\n",
                           &m, &unit, message, sizeof message),
                     DCP_OK);
    /* the sum counts: each term alone below 2^56, together above it */
    DCP_CHECK_STATUS(parse("quadratic = 2000000\nmicrobatch_overhead = 40000000000000000\n", &m, &unit, message,
                           sizeof message),
                     DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_CONTAINS(message, "p:2: microbatch_overhead = 40000000000000000: one microbatch of 131072 tokens at CP 1");
    /* a BOM at the start is the text's encoding, not a key; lines may end in CR LF */
    DCP_CHECK_STATUS(parse("\xef\xbb\xbfquadratic = 3\r\nkv.2 = 4\r\n", &m, &unit, message, sizeof message), DCP_OK);
    DCP_CHECK_EQ_INT(m.quadratic, 3);
    DCP_CHECK_EQ_INT(m.kv[1], 4);
    /* comments hold any UTF-8 */
    DCP_CHECK_STATUS(parse("quadratic = 3 # 88 ps \xc2\xb7 H200 \xe2\x80\x94 \xf0\x9f\x99\x82\n", &m, &unit, message,
                           sizeof message),
                     DCP_OK);
    /* a line of 1022 bytes is read, one of 1023 is not */
    char longer[1100];
    memset(longer, ' ', sizeof longer);
    memcpy(longer, "quadratic = 3", 13);
    longer[1022] = '\0';
    DCP_CHECK_STATUS(parse(longer, &m, &unit, message, sizeof message), DCP_OK);
    longer[1022] = ' ';
    longer[1023] = '\0';
    DCP_CHECK_STATUS(parse(longer, &m, &unit, message, sizeof message), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK_CONTAINS(message, "p:1: line longer than 1022 characters");
    /* a short message buffer is cut on a word; NULL arguments */
    char tiny[24];
    DCP_CHECK_STATUS(parse("speed = 5\n", &m, &unit, tiny, sizeof tiny), DCP_ERR_INVALID_CONFIG);
    DCP_CHECK(strlen(tiny) < sizeof tiny && strstr(tiny, "...") != NULL);
    DCP_CHECK_STATUS(dcp_cost_profile_parse("x", 1, "p", NULL, &unit, NULL, 0), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_cost_profile_parse(NULL, 1, "p", &m, &unit, NULL, 0), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_cost_profile_parse(NULL, 0, NULL, &m, &unit, NULL, 0), DCP_OK);
}
