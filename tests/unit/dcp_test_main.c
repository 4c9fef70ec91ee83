/* dcp_test_main.c - registry and runner of DCP_TEST cases; see dcp_test.h. */
#include "dcp_test.h"

#include <stdarg.h>
#include <stdlib.h>

#define MAX_TESTS 512

static struct {
    const char *name;
    dcp_test_fn fn;
} tests[MAX_TESTS];
static int num_tests;
static int failures;
static int skipped;

void dcp_test_register(const char *name, dcp_test_fn fn)
{
    if (num_tests < MAX_TESTS) {
        tests[num_tests].name = name;
        tests[num_tests].fn = fn;
        num_tests++;
    }
}

void dcp_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    failures++;
}

void dcp_test_skip(const char *reason)
{
    printf("skipped: %s\n", reason);
    skipped = 1;
}

int dcp_test_failed(void) { return failures; }

int dcp_test_read_trace(const char *path, int32_t *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    long v;
    while (n < cap && fscanf(f, "%ld", &v) == 1) out[n++] = (int32_t)v;
    fclose(f);
    return n;
}

const char *dcp_test_data_path(const char *relative)
{
    static char path[1024];
    const char *root = getenv("DCP_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/%s", root ? root : ".", relative);
    return path;
}

int main(int argc, char **argv)
{
    int ran = 0, any_skipped = 0, any_failed = 0;
    for (int i = 0; i < num_tests; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
        failures = 0;
        skipped = 0;
        tests[i].fn();
        ran++;
        if (failures) {
            printf("FAIL %s (%d failures)\n", tests[i].name, failures);
            any_failed = 1;
        } else if (skipped) {
            any_skipped = 1;
        } else {
            printf("ok   %s\n", tests[i].name);
        }
    }
    if (ran == 0) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)");
        return 2;
    }
    if (any_failed) return 1;
    return (any_skipped && ran == 1) ? 77 : 0;
}

int64_t dcp_test_simulate_dependency(const dcp_plan *p, const dcp_cost_model *model, const int32_t *lengths,
                                     int64_t *finish)
{
    for (int32_t r = 0; r < p->num_ranks; r++) finish[r] = 0;
    for (int32_t m = 0; m < p->num_microbatches; m++)
        for (int32_t g = p->microbatch_first_group[m]; g < p->microbatch_first_group[m + 1]; g++) {
            int32_t a = p->group_first_rank[g], b = a + p->group_cp_size[g];
            int64_t start = 0, cost = 0;
            for (int32_t r = a; r < b; r++)
                if (finish[r] > start) start = finish[r];
            for (int32_t i = p->group_first_id[g]; i < p->group_first_id[g + 1]; i++)
                cost += dcp_cost(model, lengths[p->ids[i]], p->group_cp_size[g]);
            for (int32_t r = a; r < b; r++) finish[r] = start + cost + model->microbatch_overhead;
        }
    int64_t last = 0;
    for (int32_t r = 0; r < p->num_ranks; r++)
        if (finish[r] > last) last = finish[r];
    return last;
}
