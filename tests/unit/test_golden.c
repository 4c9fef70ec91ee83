/*
 * test_golden.c - dp_balanced and dynamic_cp reproduce the reference's plans.
 *
 * tests/data/golden/ holds plans computed by Megatron-LM (dev) for the 256-
 * and 1024-sequence traces in tests/data/workloads/, as JSON:
 *   {"trace", "scheduler", "ranks", "cp", "max_seqlen_per_rank", "min_cp_size",
 *    "microbatch_group_size_per_vp_stage", "plan": [microbatch][dpxcp rank][ids]}
 * Each file is one case: plan the trace with the same configuration and
 * compare, rank by rank, with the reference's plan; the plan must also pass
 * the validator, be the same when planned again, and planning must not touch
 * the heap.  golden_every_file_has_a_case fails when a file is added to the
 * directory without a case here.
 */
#include "dcp_test.h"
#include "../core/plan.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>

/* ---- a small JSON reader: objects, strings, integers, null, nested arrays ---- */

typedef struct json_reader {
    const char *p, *end;
    int error;
} json_reader;

static void skip_space(json_reader *r)
{
    while (r->p < r->end && isspace((unsigned char)*r->p)) r->p++;
}

static int expect_char(json_reader *r, char c)
{
    skip_space(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    r->error = 1;
    return 0;
}

static int peek_char(json_reader *r, char c)
{
    skip_space(r);
    return r->p < r->end && *r->p == c;
}

/* A string without escapes (all the goldens need) into buf. */
static void read_string(json_reader *r, char *buf, size_t size)
{
    if (!expect_char(r, '"')) return;
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\\') r->error = 1;
        if (n + 1 < size) buf[n++] = *r->p;
        r->p++;
    }
    buf[n] = '\0';
    if (!expect_char(r, '"')) r->error = 1;
}

/* An integer, or null (returned as `null_value`). */
static long long read_int(json_reader *r, long long null_value)
{
    skip_space(r);
    if (r->end - r->p >= 4 && strncmp(r->p, "null", 4) == 0) {
        r->p += 4;
        return null_value;
    }
    char *stop;
    long long v = strtoll(r->p, &stop, 10);
    if (stop == r->p) r->error = 1;
    r->p = stop;
    return v;
}

/* The reference's plan in rank-list form: per microbatch, per rank, a slice of `ids`. */
typedef struct golden_plan {
    int32_t num_microbatches, num_ranks_seen;
    int32_t *rank_first; /* [microbatches * ranks + 1] offsets into ids */
    int32_t *ids;
    int32_t num_ids, cap_ids, cap_slots, num_slots;
} golden_plan;

static void plan_append_id(golden_plan *g, int32_t id)
{
    if (g->num_ids == g->cap_ids) {
        g->cap_ids = g->cap_ids ? 2 * g->cap_ids : 4096;
        g->ids = realloc(g->ids, sizeof(int32_t) * (size_t)g->cap_ids);
    }
    g->ids[g->num_ids++] = id;
}

static void plan_close_slot(golden_plan *g)
{
    if (g->num_slots + 2 > g->cap_slots) {
        g->cap_slots = g->cap_slots ? 2 * g->cap_slots : 1024;
        g->rank_first = realloc(g->rank_first, sizeof(int32_t) * (size_t)g->cap_slots);
    }
    g->rank_first[++g->num_slots] = g->num_ids;
}

/* [[[ids], [ids], ...], ...]: every microbatch must list `ranks` ranks. */
static void read_plan(json_reader *r, golden_plan *g, int32_t ranks)
{
    plan_close_slot(g); /* allocates rank_first */
    g->num_slots = 0;
    g->rank_first[0] = 0;
    if (!expect_char(r, '[')) return;
    while (!r->error && !peek_char(r, ']')) {
        if (g->num_microbatches > 0 && !expect_char(r, ',')) return;
        if (!expect_char(r, '[')) return;
        int32_t seen = 0;
        while (!r->error && !peek_char(r, ']')) {
            if (seen > 0 && !expect_char(r, ',')) return;
            if (!expect_char(r, '[')) return;
            int first = 1;
            while (!r->error && !peek_char(r, ']')) {
                if (!first && !expect_char(r, ',')) return;
                first = 0;
                plan_append_id(g, (int32_t)read_int(r, -1));
            }
            expect_char(r, ']');
            plan_close_slot(g);
            seen++;
        }
        expect_char(r, ']');
        if (seen != ranks) r->error = 1;
        g->num_microbatches++;
    }
    expect_char(r, ']');
    g->num_ranks_seen = ranks;
}

typedef struct golden {
    char trace[128], scheduler[32];
    int32_t ranks, cp, max_seqlen_per_rank, min_cp_size, vpp_group;
    golden_plan plan;
} golden;

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *size = (size_t)n;
    return buf;
}

/* Parse a golden file; the keys may come in any order, but "ranks" before "plan". */
static int golden_load(const char *path, golden *out)
{
    memset(out, 0, sizeof *out);
    size_t size;
    char *text = read_file(path, &size);
    if (!text) return 0;
    json_reader r = {text, text + size, 0};
    expect_char(&r, '{');
    int first = 1;
    while (!r.error && !peek_char(&r, '}')) {
        if (!first) expect_char(&r, ',');
        first = 0;
        char key[64];
        read_string(&r, key, sizeof key);
        expect_char(&r, ':');
        if (strcmp(key, "trace") == 0) read_string(&r, out->trace, sizeof out->trace);
        else if (strcmp(key, "scheduler") == 0) read_string(&r, out->scheduler, sizeof out->scheduler);
        else if (strcmp(key, "ranks") == 0) out->ranks = (int32_t)read_int(&r, 0);
        else if (strcmp(key, "cp") == 0) out->cp = (int32_t)read_int(&r, 0);
        else if (strcmp(key, "max_seqlen_per_rank") == 0) out->max_seqlen_per_rank = (int32_t)read_int(&r, 0);
        else if (strcmp(key, "min_cp_size") == 0) out->min_cp_size = (int32_t)read_int(&r, 1);
        else if (strcmp(key, "microbatch_group_size_per_vp_stage") == 0) out->vpp_group = (int32_t)read_int(&r, 0);
        else if (strcmp(key, "plan") == 0 && out->ranks > 0) read_plan(&r, &out->plan, out->ranks);
        else r.error = 1;
    }
    expect_char(&r, '}');
    free(text);
    return !r.error && out->plan.rank_first != NULL;
}

static void golden_free(golden *g)
{
    free(g->plan.rank_first);
    free(g->plan.ids);
}

/* Every file in tests/data/golden/, each with its case below. */
static const char *const golden_files[] = {
    "bimodal_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "bimodal_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "bimodal_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "bimodal_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "bimodal_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "bimodal_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "bimodal_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "bimodal_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "longsft_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "longsft_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "longsft_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "longsft_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "longsft_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "longsft_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "longsft_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "longsft_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "mlmdefault_n1024_seed1__dp_balanced_r32_cp4_m8192_vpp0.json",
    "mlmdefault_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "mlmdefault_n1024_seed1__dp_balanced_r8_cp1_m8192_vpp0.json",
    "mlmdefault_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "mlmdefault_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "mlmdefault_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "mlmdefault_n1024_seed1__dynamic_cp_r8_cp0_m2048_vpp0.json",
    "mlmdefault_n256_seed1__dp_balanced_r32_cp4_m8192_vpp0.json",
    "mlmdefault_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "mlmdefault_n256_seed1__dp_balanced_r8_cp1_m8192_vpp0.json",
    "mlmdefault_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "mlmdefault_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "mlmdefault_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "mlmdefault_n256_seed1__dynamic_cp_r8_cp0_m2048_vpp0.json",
    "uniform32k_n1024_seed1__dp_balanced_r32_cp4_m8192_vpp0.json",
    "uniform32k_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "uniform32k_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "uniform32k_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "uniform32k_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
    "uniform32k_n256_seed1__dp_balanced_r32_cp4_m8192_vpp0.json",
    "uniform32k_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
    "uniform32k_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json",
    "uniform32k_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json",
    "uniform32k_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
};

/* ---- the comparison ---- */

static void run_golden(const char *file)
{
    int listed = 0;
    for (size_t i = 0; i < sizeof golden_files / sizeof golden_files[0]; i++) listed |= strcmp(golden_files[i], file) == 0;
    DCP_CHECK(listed);
    char relative[256];
    snprintf(relative, sizeof relative, "golden/%s", file);
    golden g;
    if (!golden_load(dcp_test_data_path(relative), &g)) {
        dcp_test_fail(__FILE__, __LINE__, "cannot read %s", dcp_test_data_path(relative));
        golden_free(&g);
        return;
    }
    snprintf(relative, sizeof relative, "workloads/%s", g.trace);
    enum { MAX_TRACE = 1 << 16 };
    static int32_t lengths[MAX_TRACE];
    int n = dcp_test_read_trace(dcp_test_data_path(relative), lengths, MAX_TRACE);
    if (n <= 0) {
        dcp_test_fail(__FILE__, __LINE__, "cannot read trace %s", dcp_test_data_path(relative));
        golden_free(&g);
        return;
    }

    dcp_config c;
    dcp_config_default(&c);
    if (strcmp(g.scheduler, "dp_balanced") == 0) {
        c.scheduler = DCP_SCHEDULER_DP_BALANCED;
        c.context_parallel_size = g.cp;
        c.data_parallel_size = g.ranks / g.cp;
    } else {
        DCP_CHECK(strcmp(g.scheduler, "dynamic_cp") == 0);
        c.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
        c.data_parallel_size = g.ranks; /* cp 0 in the file: the whole DPxCP group is one pool */
    }
    c.max_seqlen_per_rank = g.max_seqlen_per_rank;
    c.min_cp_size = g.min_cp_size;
    c.microbatch_group_size_per_vp_stage = g.vpp_group;
    c.max_sequences = n;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&c, &ctx);
    if (st != DCP_OK) {
        dcp_test_fail(__FILE__, __LINE__, "context: %s", dcp_status_str(st));
        golden_free(&g);
        return;
    }

    const dcp_plan *plan = NULL;
    st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st != DCP_OK) {
        dcp_test_fail(__FILE__, __LINE__, "%s: %s: %s", file, dcp_status_str(st), dcp_context_last_error(ctx));
        goto done;
    }
    dcp_plan_violation v;
    st = dcp_plan_validate(ctx, plan, lengths, n, &v);
    if (st != DCP_OK) dcp_test_fail(__FILE__, __LINE__, "%s: validator: %s", file, v.message);

    DCP_CHECK_EQ_INT(plan->num_ranks, g.ranks);
    DCP_CHECK_EQ_INT(plan->num_microbatches, g.plan.num_microbatches);
    int mismatches = 0;
    for (int32_t m = 0; m < plan->num_microbatches && m < g.plan.num_microbatches && mismatches < 3; m++) {
        for (int32_t rank = 0; rank < g.ranks && mismatches < 3; rank++) {
            int32_t slot = m * g.ranks + rank;
            const int32_t *want = g.plan.ids + g.plan.rank_first[slot];
            int32_t want_n = g.plan.rank_first[slot + 1] - g.plan.rank_first[slot];
            int32_t grp = dcp_plan_group_of_rank(plan, m, rank);
            const int32_t *got = grp >= 0 ? plan->ids + plan->group_first_id[grp] : NULL;
            int32_t got_n = grp >= 0 ? plan->group_first_id[grp + 1] - plan->group_first_id[grp] : 0;
            int same = got_n == want_n;
            for (int32_t i = 0; same && i < want_n; i++) same = got[i] == want[i];
            if (!same) {
                mismatches++;
                dcp_test_fail(__FILE__, __LINE__, "%s: microbatch %d rank %d: %d ids (first %d), reference %d ids (first %d)",
                              file, m, rank, got_n, got_n ? got[0] : -1, want_n, want_n ? want[0] : -1);
            }
        }
    }

    /* planning again gives the same plan, without touching the heap */
    uint64_t hash = dcp_plan_hash(plan);
    DCP_CHECK_NO_ALLOC(st = dcp_plan_compute(ctx, lengths, n, &plan));
    DCP_CHECK_STATUS(st, DCP_OK);
    if (st == DCP_OK) DCP_CHECK(dcp_plan_hash(plan) == hash);
done:
    dcp_context_destroy(ctx);
    golden_free(&g);
}

/* A golden file without a case here would go untested. */
DCP_TEST(golden_every_file_has_a_case)
{
    DIR *dir = opendir(dcp_test_data_path("golden"));
    DCP_REQUIRE(dir != NULL);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        files++;
        int listed = 0;
        for (size_t i = 0; i < sizeof golden_files / sizeof golden_files[0]; i++)
            listed |= strcmp(golden_files[i], e->d_name) == 0;
        if (!listed) dcp_test_fail(__FILE__, __LINE__, "%s has no case in test_golden.c", e->d_name);
    }
    closedir(dir);
    DCP_CHECK_EQ_INT(files, (int)(sizeof golden_files / sizeof golden_files[0]));
}

/* One case per golden file. */
DCP_TEST(golden_bimodal_n1024_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("bimodal_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_bimodal_n1024_dynamic_cp_r128_m4096) { run_golden("bimodal_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_bimodal_n1024_dynamic_cp_r32_m4096) { run_golden("bimodal_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_bimodal_n1024_dynamic_cp_r32_m8192_vpp4) { run_golden("bimodal_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_bimodal_n256_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("bimodal_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_bimodal_n256_dynamic_cp_r128_m4096) { run_golden("bimodal_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_bimodal_n256_dynamic_cp_r32_m4096) { run_golden("bimodal_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_bimodal_n256_dynamic_cp_r32_m8192_vpp4) { run_golden("bimodal_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_longsft_n1024_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("longsft_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_longsft_n1024_dynamic_cp_r128_m4096) { run_golden("longsft_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_longsft_n1024_dynamic_cp_r32_m4096) { run_golden("longsft_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_longsft_n1024_dynamic_cp_r32_m8192_vpp4) { run_golden("longsft_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_longsft_n256_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("longsft_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_longsft_n256_dynamic_cp_r128_m4096) { run_golden("longsft_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_longsft_n256_dynamic_cp_r32_m4096) { run_golden("longsft_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_longsft_n256_dynamic_cp_r32_m8192_vpp4) { run_golden("longsft_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_mlmdefault_n1024_dp_balanced_r32_cp4_m8192) { run_golden("mlmdefault_n1024_seed1__dp_balanced_r32_cp4_m8192_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n1024_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("mlmdefault_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_mlmdefault_n1024_dp_balanced_r8_cp1_m8192) { run_golden("mlmdefault_n1024_seed1__dp_balanced_r8_cp1_m8192_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n1024_dynamic_cp_r128_m4096) { run_golden("mlmdefault_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n1024_dynamic_cp_r32_m4096) { run_golden("mlmdefault_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n1024_dynamic_cp_r32_m8192_vpp4) { run_golden("mlmdefault_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_mlmdefault_n1024_dynamic_cp_r8_m2048) { run_golden("mlmdefault_n1024_seed1__dynamic_cp_r8_cp0_m2048_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n256_dp_balanced_r32_cp4_m8192) { run_golden("mlmdefault_n256_seed1__dp_balanced_r32_cp4_m8192_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n256_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("mlmdefault_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_mlmdefault_n256_dp_balanced_r8_cp1_m8192) { run_golden("mlmdefault_n256_seed1__dp_balanced_r8_cp1_m8192_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n256_dynamic_cp_r128_m4096) { run_golden("mlmdefault_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n256_dynamic_cp_r32_m4096) { run_golden("mlmdefault_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_mlmdefault_n256_dynamic_cp_r32_m8192_vpp4) { run_golden("mlmdefault_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_mlmdefault_n256_dynamic_cp_r8_m2048) { run_golden("mlmdefault_n256_seed1__dynamic_cp_r8_cp0_m2048_vpp0.json"); }
DCP_TEST(golden_uniform32k_n1024_dp_balanced_r32_cp4_m8192) { run_golden("uniform32k_n1024_seed1__dp_balanced_r32_cp4_m8192_vpp0.json"); }
DCP_TEST(golden_uniform32k_n1024_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("uniform32k_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_uniform32k_n1024_dynamic_cp_r128_m4096) { run_golden("uniform32k_n1024_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_uniform32k_n1024_dynamic_cp_r32_m4096) { run_golden("uniform32k_n1024_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_uniform32k_n1024_dynamic_cp_r32_m8192_vpp4) { run_golden("uniform32k_n1024_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
DCP_TEST(golden_uniform32k_n256_dp_balanced_r32_cp4_m8192) { run_golden("uniform32k_n256_seed1__dp_balanced_r32_cp4_m8192_vpp0.json"); }
DCP_TEST(golden_uniform32k_n256_dp_balanced_r32_cp8_m16384_vpp4) { run_golden("uniform32k_n256_seed1__dp_balanced_r32_cp8_m16384_vpp4.json"); }
DCP_TEST(golden_uniform32k_n256_dynamic_cp_r128_m4096) { run_golden("uniform32k_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_uniform32k_n256_dynamic_cp_r32_m4096) { run_golden("uniform32k_n256_seed1__dynamic_cp_r32_cp0_m4096_vpp0.json"); }
DCP_TEST(golden_uniform32k_n256_dynamic_cp_r32_m8192_vpp4) { run_golden("uniform32k_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json"); }
