/*
 * cmd_cost.c - `dcpack cost`: the effective cost model (defaults, or a
 * --profile file over them) and what sample lengths cost per CP size.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char cost_usage[] =
    "usage: dcpack cost [--profile FILE] [--lengths L1,L2,...] [--max-cp C] [--format text|json|profile]\n"
    "\n"
    "Print the cost model the planner and the statistics use, and the per-rank cost of some\n"
    "sequence lengths on each CP size. For a sequence of s tokens on cp ranks, each rank spends\n"
    "\n"
    "  cost(s, cp) = (quadratic*s^2 + linear*s) / cp\n"
    "              + [cp > 1] * (max(0, kv[cp]*s*(cp-1)/cp - quadratic*s^2/cp) + round_latency*(cp-1))\n"
    "\n"
    "and a microbatch costs its slowest rank plus microbatch_overhead (integer units; divisions\n"
    "round down). The step model says how microbatches follow one another: barrier (default;\n"
    "every rank waits for each microbatch's slowest rank) or dependency (a rank waits only for\n"
    "the ranks it shares a CP group with). A profile file holds `key = value` lines ('#'\n"
    "comments, blank lines ignored, non-negative integers written as digits, no sign; later\n"
    "lines override earlier ones, missing keys keep the defaults):\n"
    "\n"
    "  quadratic = 1                s^2 coefficient\n"
    "  linear = 49152               s coefficient (12 x hidden size)\n"
    "  hidden = 4096                shorthand for linear = 12 * hidden\n"
    "  round_latency = 491520       per ring-attention round\n"
    "  microbatch_overhead = 819200 per microbatch\n"
    "  kv = 492                     exposed-KV coefficient, every CP size\n"
    "  kv.16 = 3934                 ... CP size 16 only (a power of two, 2 to 65536)\n"
    "  kv.16+ = 3934                ... CP sizes 16 and above\n"
    "  step_model = barrier         barrier or dependency\n"
    "  time_unit_ps = 1             the coefficients are times: one unit is this many picoseconds\n"
    "                               (python -m dcpack.calibrate writes it; plan then prints\n"
    "                               makespans in milliseconds too; it changes no plan)\n"
    "\n"
    "`dcpack plan --cost FILE` and `dcpack compare --cost FILE` plan with a profile.\n"
    "\n"
    "  --profile FILE   load FILE over the defaults\n"
    "  --lengths LIST   sample lengths (default 128,1024,4096,8192,32768,131072)\n"
    "  --max-cp C       largest CP size shown, a power of two (default 16)\n"
    "  --format F       text (default), json, or profile (the model alone, in the file format)\n"
    "  -h, --help       this help\n"
    "\n"
    "examples:\n"
    "  dcpack cost\n"
    "  dcpack cost --format profile > my_model.txt      (edit, then:)\n"
    "  dcpack cost --profile my_model.txt --lengths 2048,65536 --max-cp 64\n"
    "\n"
    "exit status: 0 ok; 1 the output could not be written; 2 usage error; 3 a profile that cannot\n"
    "be read or holds a bad line.\n";

#define MAX_SAMPLES 64

static void print_grouped(int64_t v, int width)
{
    char digits[32], grouped[48];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0) grouped[o++] = ',';
        grouped[o++] = digits[i];
    }
    grouped[o] = '\0';
    printf("%*s", width, grouped);
}

/*
 * dcp_cost saturates at INT64_MAX: such a cost is only known to be at least that, so it is said
 * ("saturated"), and a choice that would fall on one has no answer (0).
 */
static int saturated(int64_t cost) { return cost == INT64_MAX; }

static void print_cost(int64_t v, int width)
{
    if (saturated(v)) printf("%*s", width, "saturated");
    else print_grouped(v, width);
}

/* The CP size with the smallest per-rank cost: the fastest the sequence can run; 0 when that cost saturated. */
static int32_t fastest_cp(const dcp_cost_model *m, int64_t s, int32_t max_cp)
{
    int32_t best = 1;
    for (int32_t cp = 2; cp <= max_cp; cp *= 2)
        if (dcp_cost(m, s, cp) < dcp_cost(m, s, best)) best = cp;
    return saturated(dcp_cost(m, s, best)) ? 0 : best;
}

/*
 * The CP size whose total GPU time cp * cost(s, cp) is smallest (the lower bound's choice); 0 when the
 * smallest is a saturated cost's (its true total could be above any other).
 */
static int32_t cheapest_cp(const dcp_cost_model *m, int64_t s, int32_t max_cp)
{
    int32_t best = 1;
    __int128 best_total = -1;
    for (int32_t cp = 1; cp <= max_cp; cp *= 2) {
        __int128 total = (__int128)cp * dcp_cost(m, s, cp);
        if (best_total < 0 || total < best_total) best_total = total, best = cp;
    }
    return saturated(dcp_cost(m, s, best)) ? 0 : best;
}

/* A CP size in the text table, or "saturated" for no answer. */
static void print_choice(int32_t cp, int width)
{
    if (cp > 0) printf(" %*d", width, cp);
    else printf(" %*s", width, "saturated");
}

/* ... and in JSON: null for no answer. */
static void print_choice_json(const char *key, int32_t cp)
{
    if (cp > 0) printf("\"%s\": %d", key, cp);
    else printf("\"%s\": null", key);
}

int dcp_cli_cost(int argc, char **argv)
{
    dcp_cost_model model;
    dcp_cost_model_default(&model);
    const char *profile = NULL, *format = "text";
    int64_t lengths[MAX_SAMPLES] = {128, 1024, 4096, 8192, 32768, 131072};
    int num_lengths = 6;
    int64_t max_cp = 16, time_unit_ps = 0;
    dcp_cli_args args = {argc, argv, 1, "cost"};
    for (; args.i < argc; args.i++) {
        const char *v = NULL;
        int got;
        if (dcp_cli_flag(&args, "-h") || dcp_cli_flag(&args, "--help")) {
            fputs(cost_usage, stdout);
            return DCP_EXIT_OK;
        }
        if ((got = dcp_cli_option(&args, "--profile", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            profile = v;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--format", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (strcmp(v, "text") && strcmp(v, "json") && strcmp(v, "profile"))
                return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--format: '%s' is not text, json or profile", v);
            format = v;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--max-cp", &v)) != 0) {
            if (got < 0 || dcp_cli_parse_int("cost", "--max-cp", v, 1, (int64_t)1 << DCP_MAX_LOG2_CP, &max_cp) !=
                               DCP_EXIT_OK)
                return DCP_EXIT_USAGE;
            if (max_cp & (max_cp - 1))
                return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--max-cp: %lld is not a power of two", (long long)max_cp);
            continue;
        }
        if ((got = dcp_cli_option(&args, "--lengths", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            char list[1024], *rest = list, *item = NULL;
            if (!*v) return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--lengths: no lengths given");
            if (strlen(v) >= sizeof list) /* cut short, its last length would be read as another */
                return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--lengths: the list is longer than %d characters",
                                    (int)sizeof list - 1);
            snprintf(list, sizeof list, "%s", v);
            num_lengths = 0;
            for (int next; (next = dcp_cli_next_item(&rest, &item)) != 0;) {
                if (next < 0)
                    return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--lengths %s: an empty length (a stray ',')", v);
                if (num_lengths == MAX_SAMPLES)
                    return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--lengths: at most %d lengths", MAX_SAMPLES);
                if (dcp_cli_parse_int("cost", "--lengths", item, 1, INT32_MAX, &lengths[num_lengths]) != DCP_EXIT_OK)
                    return DCP_EXIT_USAGE;
                num_lengths++;
            }
            if (num_lengths == 0) return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "--lengths: no lengths given");
            continue;
        }
        return dcp_cli_fail(DCP_EXIT_USAGE, "cost", "unknown argument '%s' (see dcpack cost --help)", argv[args.i]);
    }
    if (profile) {
        int st = dcp_cli_cost_profile_load("cost", profile, &model, &time_unit_ps);
        if (st != DCP_EXIT_OK) return st;
    }
    const char *source = profile ? profile : "defaults (docs/planning.md, Cost model)";

    if (strcmp(format, "profile") == 0) {
        printf("# dcpack cost profile: %s\n", source);
        dcp_cli_cost_profile_write(stdout, &model, time_unit_ps);
    } else if (strcmp(format, "json") == 0) {
        printf("{\n  \"source\": ");
        dcp_cli_json_string(stdout, profile ? profile : "default");
        printf(",\n  \"model\": {\"quadratic\": %lld, \"linear\": %lld, \"round_latency\": %lld, "
               "\"microbatch_overhead\": %lld, \"step_model\": \"%s\", \"kv\": {",
               (long long)model.quadratic, (long long)model.linear, (long long)model.round_latency,
               (long long)model.microbatch_overhead, dcp_step_model_name((dcp_step_model)model.step_model));
        for (int k = 1; k <= DCP_MAX_LOG2_CP; k++)
            printf("%s\"%d\": %lld", k > 1 ? ", " : "", 1 << k, (long long)model.kv[k]);
        printf("}}");
        if (time_unit_ps > 0) printf(",\n  \"time_unit_ps\": %lld", (long long)time_unit_ps);
        printf(",\n  \"samples\": [\n");
        for (int i = 0; i < num_lengths; i++) {
            printf("    {\"length\": %lld, \"cost\": {", (long long)lengths[i]);
            for (int32_t cp = 1; cp <= max_cp; cp *= 2)
                printf("%s\"%d\": %lld", cp > 1 ? ", " : "", cp, (long long)dcp_cost(&model, lengths[i], cp));
            int any = 0;
            for (int32_t cp = 1; cp <= max_cp; cp *= 2) any |= saturated(dcp_cost(&model, lengths[i], cp));
            printf("}, ");
            print_choice_json("fastest_cp", fastest_cp(&model, lengths[i], (int32_t)max_cp));
            printf(", ");
            print_choice_json("cheapest_total_cp", cheapest_cp(&model, lengths[i], (int32_t)max_cp));
            printf(", \"saturated\": %s}%s\n", any ? "true" : "false", i + 1 < num_lengths ? "," : "");
        }
        printf("  ]\n}\n");
    } else {
        printf("dcpack cost: %s\n\neffective model (the profile format; `dcpack cost --format profile` prints it alone):\n",
               source);
        printf("  quadratic = %lld\n  linear = %lld\n  round_latency = %lld\n  microbatch_overhead = %lld\n",
               (long long)model.quadratic, (long long)model.linear, (long long)model.round_latency,
               (long long)model.microbatch_overhead);
        printf("  step_model = %s\n", dcp_step_model_name((dcp_step_model)model.step_model));
        if (time_unit_ps > 0) printf("  time_unit_ps = %lld\n", (long long)time_unit_ps);
        /* kv per CP size, runs of equal values on one line */
        for (int k = 1; k <= DCP_MAX_LOG2_CP;) {
            int end = k;
            while (end + 1 <= DCP_MAX_LOG2_CP && model.kv[end + 1] == model.kv[k]) end++;
            if (end == DCP_MAX_LOG2_CP && end > k) printf("  kv.%d+ = %lld\n", 1 << k, (long long)model.kv[k]);
            else
                for (int j = k; j <= end; j++) printf("  kv.%d = %lld\n", 1 << j, (long long)model.kv[j]);
            k = end + 1;
        }
        if (time_unit_ps > 0)
            printf("\none cost unit is %lld ps (time_unit_ps): 1 ms is %.0f units\n", (long long)time_unit_ps,
                   1e9 / (double)time_unit_ps);
        printf("\nper-rank cost of one sequence (cost units); fastest = smallest per-rank cost,\n"
               "cheapest = smallest total GPU time (cp x cost, the lower bound's choice)\n\n");
        printf("%10s", "length");
        for (int32_t cp = 1; cp <= max_cp; cp *= 2) {
            char head[16];
            snprintf(head, sizeof head, "cp %d", cp);
            printf(" %15s", head);
        }
        printf(" %8s %9s\n", "fastest", "cheapest");
        int any_saturated = 0;
        for (int i = 0; i < num_lengths; i++) {
            print_grouped(lengths[i], 10);
            for (int32_t cp = 1; cp <= max_cp; cp *= 2) {
                printf(" ");
                print_cost(dcp_cost(&model, lengths[i], cp), 15);
                any_saturated |= saturated(dcp_cost(&model, lengths[i], cp));
            }
            print_choice(fastest_cp(&model, lengths[i], (int32_t)max_cp), 8);
            print_choice(cheapest_cp(&model, lengths[i], (int32_t)max_cp), 9);
            printf("\n");
        }
        if (any_saturated)
            printf("\nsaturated: the cost exceeds int64 (dcp_cost returns INT64_MAX): the model's coefficients are too\n"
                   "large for that length; where the smallest cost is saturated no CP size is fastest or cheapest.\n");
        printf("\na microbatch adds microbatch_overhead = ");
        print_grouped(model.microbatch_overhead, 0);
        if (model.step_model == DCP_STEP_MODEL_DEPENDENCY)
            printf(" to each of its CP groups, which start\n"
                   "when their own ranks are done with the previous microbatch (step_model = dependency).\n");
        else
            printf(" to its slowest rank; every rank waits for it (step_model = barrier).\n");
    }
    if (dcp_cli_output_status("cost") != DCP_EXIT_OK) return DCP_EXIT_ERROR;
    return DCP_EXIT_OK;
}
