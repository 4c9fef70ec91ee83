/*
 * cmd_compare.c - `dcpack compare`: several schedulers or configurations
 * over many global batches (a directory of traces, trace files, or
 * generated steps), one context per configuration sized for the largest
 * batch, and a table of aggregate results.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char compare_usage[] =
    "usage: dcpack compare [input] [configurations] [options]\n"
    "\n"
    "Plan many global batches with several schedulers or configurations and compare them.\n"
    "\n"
    "input (default: --generate mlmdefault:n=1024 --steps 10):\n"
    "  --traces DIR            every file in DIR (not starting with '.'), by name, is one batch\n"
    "  --trace FILE            one batch per file; repeat the option for more\n"
    "  --generate SPEC         generated batches (see dcpack generate --help) ...\n"
    "  --steps K               ... K of them; batch k uses seed + k (default 10)\n"
    "  --column NAME, --input-format F   as for dcpack plan, for every file\n"
    "\n"
    "configurations (default: every scheduler):\n"
    "  --scheduler LIST        comma-separated: dp_balanced,dynamic_cp,balanced\n"
    "  --config SPEC           SCHEDULER[:key=value,...]; repeat for more. keys: cp, ranks,\n"
    "                          max_seqlen_per_rank, min_cp_size, vpp_group,\n"
    "                          max_sequences_per_microbatch, cost (a profile file)\n"
    "  --ranks N, --max-seqlen-per-rank M, --cp C, --min-cp-size K, --vpp-group G,\n"
    "  --max-sequences-per-microbatch K, --max-sequences K, --cost FILE, --step-model NAME,\n"
    "  --effort full|fast (balanced's search)\n"
    "                          defaults for every configuration (as for dcpack plan)\n"
    "\n"
    "options:\n"
    "  --repeat R              plan each batch R times (default 1); plan time median and p99\n"
    "                          are over every run\n"
    "  --format text|json      text (default): one table row per configuration\n"
    "  --no-timing             text: print '-' for plan times\n"
    "  --no-progress           no progress bar (it is drawn only when stderr is a terminal)\n"
    "  -h, --help              this help\n"
    "\n"
    "columns: makespan and lower bound are summed over batches, then reported per batch;\n"
    "makespan: every rank waits for each microbatch's slowest rank (barrier); dependency/b.: the\n"
    "makespan when a rank waits only for the ranks of its CP groups; efficiency = total lower\n"
    "bound / total makespan under each configuration's step model (its cost profile's\n"
    "step_model, barrier by default), which also picks the best; imbalance = total slowest-rank time /\n"
    "total mean-rank time; mean CP = CP sizes summed over sequences / sequences; padding =\n"
    "token slots left empty / (microbatches x ranks x max_seqlen_per_rank), over every batch.\n"
    "\n"
    "examples:\n"
    "  dcpack compare --generate mlmdefault:n=4096 --steps 20 --ranks 64\n"
    "  dcpack compare --traces batches/ --ranks 128 --max-seqlen-per-rank 8192 --scheduler dynamic_cp,balanced\n"
    "  dcpack compare --generate longsft:n=2048 --steps 8 --ranks 64 --max-seqlen-per-rank 16384 \\\n"
    "      --config dp_balanced:cp=8 --config dynamic_cp --config dynamic_cp:min_cp_size=2\n"
    "\n"
    "exit status: 0 ok; 1 some batch could not be planned (the table still prints) or an output\n"
    "not written; 2 usage error or a configuration the library rejects; 3 bad input: a trace or\n"
    "profile that cannot be read or holds a bad value, a sequence longer than its ranks hold,\n"
    "more sequences than --max-sequences (the file, line and value are named).\n";

#define MAX_CONFIGS 32
#define MAX_FILES 100000

typedef struct config_row {
    char label[128];
    dcp_cli_setup setup;
    const char *cost_path;
    char cost_file[256];
    dcp_config config;
    int32_t cp;
    /* totals over batches */
    int32_t planned, failed;
    dcp_status first_status;
    char first_error[1100]; /* a batch name (512), the library's message (512) and a status name */
    int64_t microbatches, sequences, cp_size_sum, tokens;
    double makespan, lower_bound, busy, max_rank, slots;
    double dependency_makespan, dependency_lower_bound; /* the dependency step model's */
    double model_makespan, model_lower_bound;           /* the configured step model's: efficiency and "best" */
    /* exact sums, for the printed means and "best"; a batch whose value saturated (INT64_MAX: only known to be
       at least that) marks its sum saturated: said, never printed as a number, compared or made a ratio */
    __int128 makespan_exact, lower_bound_exact, dependency_exact, dependency_lower_exact, model_exact;
    int makespan_saturated, lower_bound_saturated, dependency_saturated, dependency_lower_saturated;
    int model_saturated, balance_saturated;
    double *seconds;
    int64_t num_seconds;
    double median, p99;
} config_row;

static int parse_config_spec(const char *spec, const dcp_cli_setup *defaults, const char *default_cost,
                             config_row *row)
{
    memset(row, 0, sizeof *row);
    row->setup = *defaults;
    row->cost_path = default_cost;
    snprintf(row->label, sizeof row->label, "%s", spec);
    char buf[512];
    if (strlen(spec) >= sizeof buf) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config: spec too long");
    strcpy(buf, spec);
    char *keys = strchr(buf, ':');
    if (keys) *keys++ = '\0';
    if (dcp_scheduler_from_name(buf, &row->setup.scheduler) != DCP_OK)
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config %s: '%s' is not dp_balanced, dynamic_cp or balanced",
                            spec, buf);
    if (row->setup.scheduler != DCP_SCHEDULER_DP_BALANCED) row->setup.cp = 0;
    /* every item is key=value: an empty one (a stray comma) and a key given twice are refused */
    char *kv = NULL;
    unsigned seen = 0; /* bit k: ints[k] given; bit 31: cost */
    for (int got; (got = dcp_cli_next_item(&keys, &kv)) != 0;) {
        if (got < 0)
            return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config %s: an empty key=value item (a stray ',' or ':')",
                                spec);
        char *eq = strchr(kv, '=');
        if (!eq) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config %s: '%s' is not key=value", spec, kv);
        *eq = '\0';
        const char *key = kv, *value = eq + 1;
        if (strcmp(key, "cost") == 0) {
            if (seen & (1u << 31))
                return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config %s: %s is given twice", spec, key);
            seen |= 1u << 31;
            dcp_cost_model_default(&row->setup.cost); /* a configuration's profile loads over the defaults */
            int st = dcp_cli_cost_profile_load("compare", value, &row->setup.cost, &row->setup.time_unit_ps);
            if (st != DCP_EXIT_OK) return st;
            if (row->setup.step_model >= 0) row->setup.cost.step_model = (dcp_step_model)row->setup.step_model;
            snprintf(row->cost_file, sizeof row->cost_file, "%s", value);
            row->cost_path = row->cost_file;
            continue;
        }
        static const struct {
            const char *name;
            int64_t lo, hi;
            size_t offset;
        } ints[] = {
            {"cp", 1, 1 << 20, offsetof(dcp_cli_setup, cp)},
            {"ranks", 1, 1 << 20, offsetof(dcp_cli_setup, ranks)},
            {"max_seqlen_per_rank", 1, INT32_MAX, offsetof(dcp_cli_setup, max_seqlen_per_rank)},
            {"min_cp_size", 1, 1 << 20, offsetof(dcp_cli_setup, min_cp_size)},
            {"vpp_group", 0, 1 << 16, offsetof(dcp_cli_setup, vpp_group)},
            {"max_sequences_per_microbatch", 0, 1 << 24, offsetof(dcp_cli_setup, max_sequences_per_microbatch)},
        };
        size_t k = 0;
        while (k < sizeof ints / sizeof ints[0] && strcmp(ints[k].name, key) != 0) k++;
        if (k == sizeof ints / sizeof ints[0])
            return dcp_cli_fail(DCP_EXIT_USAGE, "compare",
                                "--config %s: unknown key '%s' (cp, ranks, max_seqlen_per_rank, min_cp_size, "
                                "vpp_group, max_sequences_per_microbatch, cost)",
                                spec, key);
        if (seen & (1u << k)) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--config %s: %s is given twice", spec, key);
        seen |= 1u << k;
        char name[96];
        snprintf(name, sizeof name, "--config %s", key);
        int64_t v = 0;
        if (dcp_cli_parse_int("compare", name, value, ints[k].lo, ints[k].hi, &v) != DCP_EXIT_OK) return DCP_EXIT_USAGE;
        *(int32_t *)((char *)&row->setup + ints[k].offset) = (int32_t)v;
    }
    return DCP_EXIT_OK;
}

static int name_order(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Paths of the regular files in dir, sorted; *out is malloc'd (free each and the array). */
static int list_directory(const char *dir, char ***out, int *count)
{
    DIR *d = opendir(dir);
    if (!d) /* out of memory is no fault of the directory's */
        return dcp_cli_fail(errno == ENOMEM ? DCP_EXIT_ERROR : DCP_EXIT_INPUT, "compare", "cannot open directory %s: %s",
                            dir, strerror(errno));
    char **paths = NULL;
    int n = 0, cap = 0, status = DCP_EXIT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            status = dcp_cli_fail(DCP_EXIT_ERROR, "compare", "out of memory");
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == MAX_FILES) {
            free(path);
            status = dcp_cli_fail(DCP_EXIT_INPUT, "compare", "%s: more than %d files", dir, MAX_FILES);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(paths, sizeof *paths * (size_t)cap);
            if (!grown) {
                free(path);
                status = dcp_cli_fail(DCP_EXIT_ERROR, "compare", "out of memory");
                break;
            }
            paths = grown;
        }
        paths[n++] = path;
    }
    closedir(d);
    if (status == DCP_EXIT_OK && n == 0) status = dcp_cli_fail(DCP_EXIT_INPUT, "compare", "%s holds no trace files", dir);
    if (status != DCP_EXIT_OK) {
        for (int i = 0; i < n; i++) free(paths[i]);
        free(paths);
        return status;
    }
    qsort(paths, (size_t)n, sizeof *paths, name_order);
    *out = paths;
    *count = n;
    return DCP_EXIT_OK;
}

static void progress(int enabled, int64_t done, int64_t total, const char *label)
{
    if (!enabled) return;
    const int width = 30;
    int filled = total > 0 ? (int)(width * done / total) : width;
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%lld %-28.28s", (long long)done, (long long)total, label);
    fflush(stderr);
}

static void print_grouped(double v, int width)
{
    char digits[40], grouped[64];
    int n = snprintf(digits, sizeof digits, "%.0f", v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && digits[i - 1] != '-' && (n - i) % 3 == 0) grouped[o++] = ',';
        grouped[o++] = digits[i];
    }
    grouped[o] = '\0';
    printf("%*s", width, grouped);
}

/* The mean of an exact sum over `n` batches, rounded, grouped; "saturated" for a saturated one. */
static void print_mean(__int128 sum, int32_t n, int sat, int width)
{
    if (sat) {
        printf("%*s", width, "saturated");
        return;
    }
    char digits[48], grouped[64];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)((sum + n / 2) / n)), o = 0; /* <= one batch's */
    for (int i = 0; i < len; i++) {
        if (i > 0 && digits[i - 1] != '-' && (len - i) % 3 == 0) grouped[o++] = ',';
        grouped[o++] = digits[i];
    }
    grouped[o] = '\0';
    printf("%*s", width, grouped);
}

/* ... in JSON: one decimal, exact; null for a saturated one. */
static void print_mean_json(const char *key, __int128 sum, int32_t n, int sat)
{
    if (sat || n <= 0) {
        printf("\"%s\": null", key);
        return;
    }
    __int128 tenths = (sum * 10 + n / 2) / n;
    printf("\"%s\": %lld.%d", key, (long long)(tenths / 10), (int)(tenths % 10));
}

/* What the command line asks for: the input, the configurations and how to show them. */
typedef struct compare_options {
    dcp_cli_input input;
    dcp_cli_setup defaults;
    const char *default_cost, *traces_dir, *scheduler_list;
    const char *trace_files[256];
    int num_trace_files;
    const char *config_specs[MAX_CONFIGS];
    int num_config_specs, json, no_timing, no_progress, steps_set;
    int64_t steps, repeat;
} compare_options;

/* Parse argv into *o; *help is set when the usage was printed (nothing left to do). */
static int parse_options(int argc, char **argv, compare_options *o, int *help)
{
    memset(o, 0, sizeof *o);
    dcp_cli_setup_default(&o->defaults);
    o->steps = 10;
    o->repeat = 1;
    *help = 0;
    dcp_cli_args args = {argc, argv, 1, "compare"};
    for (; args.i < argc; args.i++) {
        const char *v = NULL;
        int st = DCP_EXIT_OK, got;
        if (dcp_cli_flag(&args, "-h") || dcp_cli_flag(&args, "--help")) {
            fputs(compare_usage, stdout);
            *help = 1;
            return DCP_EXIT_OK;
        }
        if ((got = dcp_cli_option(&args, "--trace", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (o->num_trace_files == (int)(sizeof o->trace_files / sizeof o->trace_files[0]))
                return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "too many --trace options: use --traces DIR");
            o->trace_files[o->num_trace_files++] = v;
            continue;
        }
        if ((got = dcp_cli_input_option(&args, &o->input, &st)) != 0 ||
            (got = dcp_cli_setup_option(&args, &o->defaults, &o->default_cost, &st)) != 0) {
            if (got < 0) return st;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--traces", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            o->traces_dir = v;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--steps", &v)) != 0) {
            if (got < 0 || dcp_cli_parse_int("compare", "--steps", v, 1, 100000, &o->steps) != DCP_EXIT_OK)
                return DCP_EXIT_USAGE;
            o->steps_set = 1;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--repeat", &v)) != 0) {
            if (got < 0 || dcp_cli_parse_int("compare", "--repeat", v, 1, 100000, &o->repeat) != DCP_EXIT_OK)
                return DCP_EXIT_USAGE;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--scheduler", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            o->scheduler_list = v;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--config", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (o->num_config_specs == MAX_CONFIGS)
                return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "at most %d --config options", MAX_CONFIGS);
            o->config_specs[o->num_config_specs++] = v;
            continue;
        }
        if ((got = dcp_cli_option(&args, "--format", &v)) != 0) {
            if (got < 0) return DCP_EXIT_USAGE;
            if (strcmp(v, "json") == 0) o->json = 1;
            else if (strcmp(v, "text") == 0) o->json = 0;
            else return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--format: '%s' is not text or json", v);
            continue;
        }
        if (dcp_cli_flag(&args, "--no-timing")) {
            o->no_timing = 1;
            continue;
        }
        if (dcp_cli_flag(&args, "--no-progress")) {
            o->no_progress = 1;
            continue;
        }
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "unknown argument '%s' (see dcpack compare --help)",
                            argv[args.i]);
    }
    int inputs = (o->traces_dir != NULL) + (o->num_trace_files > 0) + (o->input.generate != NULL);
    if (inputs > 1) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "give one of --traces, --trace and --generate");
    if (o->steps_set && (o->traces_dir || o->num_trace_files))
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--steps counts generated batches: it needs --generate");
    if (o->scheduler_list && o->num_config_specs)
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "give --scheduler or --config, not both");
    if ((o->input.column || o->input.input_format) && !(o->traces_dir || o->num_trace_files))
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--column and --input-format describe trace files");
    return DCP_EXIT_OK;
}

/* The generator spec of generated batches (the default input). */
static const char *generate_spec(const compare_options *o)
{
    return o->input.generate ? o->input.generate : "mlmdefault:n=1024";
}

/* One row per --config, or per scheduler of --scheduler (default: every scheduler). */
static int make_rows(const compare_options *o, config_row *rows, int *num_rows)
{
    *num_rows = 0;
    if (o->num_config_specs) {
        for (int k = 0; k < o->num_config_specs; k++) {
            int st = parse_config_spec(o->config_specs[k], &o->defaults, o->default_cost, &rows[*num_rows]);
            if (st != DCP_EXIT_OK) return st;
            (*num_rows)++;
        }
        return DCP_EXIT_OK;
    }
    char list[256], *rest = list, *name = NULL;
    const char *given = o->scheduler_list ? o->scheduler_list : "dp_balanced,dynamic_cp,balanced";
    if (strlen(given) >= sizeof list)
        return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--scheduler: the list is longer than %d characters",
                            (int)sizeof list - 1);
    snprintf(list, sizeof list, "%s", given);
    for (int got; (got = dcp_cli_next_item(&rest, &name)) != 0;) {
        if (got < 0) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--scheduler %s: an empty name (a stray ',')", given);
        if (*num_rows == MAX_CONFIGS) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "too many schedulers");
        config_row *row = &rows[*num_rows];
        memset(row, 0, sizeof *row);
        row->setup = o->defaults;
        row->cost_path = o->default_cost;
        if (dcp_scheduler_from_name(name, &row->setup.scheduler) != DCP_OK)
            return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--scheduler: '%s' is not dp_balanced, dynamic_cp or balanced",
                                name);
        if (row->setup.scheduler != DCP_SCHEDULER_DP_BALANCED) row->setup.cp = 0;
        snprintf(row->label, sizeof row->label, "%s", name);
        (*num_rows)++;
    }
    if (*num_rows == 0) return dcp_cli_fail(DCP_EXIT_USAGE, "compare", "--scheduler: empty list");
    return DCP_EXIT_OK;
}

/*
 * Read or generate every batch.  *batches (calloc'd) holds the *num_batches
 * read before a failure too: the caller frees them whatever the status.
 */
static int read_batches(const compare_options *o, dcp_cli_trace **batches, int *num_batches)
{
    *batches = NULL;
    *num_batches = 0;
    char **dir_files = NULL;
    int num_dir_files = 0, status = DCP_EXIT_OK;
    if (o->traces_dir) {
        status = list_directory(o->traces_dir, &dir_files, &num_dir_files);
        if (status != DCP_EXIT_OK) return status;
    }
    int total = o->traces_dir ? num_dir_files : o->num_trace_files ? o->num_trace_files : (int)o->steps;
    *batches = calloc((size_t)total, sizeof **batches);
    if (!*batches) status = dcp_cli_fail(DCP_EXIT_ERROR, "compare", "out of memory");
    for (int b = 0; b < total && status == DCP_EXIT_OK; b++) {
        dcp_cli_trace *batch = &(*batches)[b];
        if (o->traces_dir) status = dcp_cli_trace_read("compare", dir_files[b], o->input.input_format, o->input.column, batch);
        else if (o->num_trace_files)
            status = dcp_cli_trace_read("compare", o->trace_files[b], o->input.input_format, o->input.column, batch);
        else status = dcp_cli_trace_generate("compare", generate_spec(o), b, batch);
        if (status == DCP_EXIT_OK) (*num_batches)++;
    }
    for (int i = 0; i < num_dir_files; i++) free(dir_files[i]);
    free(dir_files);
    return status;
}

/* A context per configuration, sized for the largest batch, and room for its plan times. */
static int size_rows(const compare_options *o, config_row *rows, int num_rows, const dcp_cli_trace **views,
                     int num_batches)
{
    int status = DCP_EXIT_OK;
    for (int k = 0; k < num_rows && status == DCP_EXIT_OK; k++) {
        char message[700];
        int st = dcp_cli_config_make(&rows[k].setup, views, num_batches, &rows[k].config, &rows[k].cp, message,
                                     sizeof message);
        if (st != DCP_EXIT_OK) status = dcp_cli_fail(st, "compare", "%s: %s", rows[k].label, message);
        else if (!o->num_config_specs && rows[k].cp)
            snprintf(rows[k].label, sizeof rows[k].label, "%s (cp %d)", dcp_scheduler_name(rows[k].setup.scheduler),
                     rows[k].cp);
        rows[k].seconds = malloc(sizeof *rows[k].seconds * (size_t)num_batches * (size_t)o->repeat);
        if (status == DCP_EXIT_OK && !rows[k].seconds) status = dcp_cli_fail(DCP_EXIT_ERROR, "compare", "out of memory");
    }
    return status;
}

/* Plan every batch under every configuration, adding each plan's statistics to its row. */
static int plan_rows(const compare_options *o, config_row *rows, int num_rows, const dcp_cli_trace *batches,
                     int num_batches)
{
    int status = DCP_EXIT_OK;
    int show_progress = !o->no_progress && isatty(STDERR_FILENO);
    int64_t done = 0, work = (int64_t)num_rows * num_batches;
    for (int k = 0; k < num_rows && status == DCP_EXIT_OK; k++) {
        config_row *row = &rows[k];
        dcp_cli_planner planner;
        status = dcp_cli_planner_create("compare", &row->config, &planner);
        if (status != DCP_EXIT_OK) break;
        const int32_t ranks = dcp_config_num_ranks(&row->config);
        for (int b = 0; b < num_batches; b++) {
            const dcp_plan *plan = NULL;
            dcp_plan_stats s;
            dcp_status st = dcp_cli_plan_timed(&planner, &batches[b], (int32_t)o->repeat,
                                               row->seconds + row->num_seconds, &plan, &s);
            if (st == DCP_OK) {
                row->num_seconds += o->repeat;
                row->planned++;
                row->microbatches += s.num_microbatches;
                row->sequences += batches[b].count;
                row->cp_size_sum += s.cp_size_sum;
                row->tokens += s.total_tokens;
                row->makespan_exact += s.makespan;
                row->lower_bound_exact += s.lower_bound;
                row->dependency_exact += s.dependency_makespan;
                row->dependency_lower_exact += s.dependency_lower_bound;
                row->model_exact += s.model_makespan;
                row->makespan_saturated |= s.makespan == INT64_MAX;
                row->lower_bound_saturated |= s.lower_bound == INT64_MAX;
                row->dependency_saturated |= s.dependency_makespan == INT64_MAX;
                row->dependency_lower_saturated |= s.dependency_lower_bound == INT64_MAX;
                row->model_saturated |= s.model_makespan == INT64_MAX || s.model_lower_bound == INT64_MAX;
                row->balance_saturated |= s.busy_sum == INT64_MAX || s.max_rank_sum == INT64_MAX;
                row->makespan += (double)s.makespan;
                row->lower_bound += (double)s.lower_bound;
                row->dependency_makespan += (double)s.dependency_makespan;
                row->dependency_lower_bound += (double)s.dependency_lower_bound;
                row->model_makespan += (double)s.model_makespan;
                row->model_lower_bound += (double)s.model_lower_bound;
                row->busy += (double)s.busy_sum;
                row->max_rank += (double)s.max_rank_sum;
                row->slots += (double)s.num_microbatches * ranks * row->config.max_seqlen_per_rank;
            } else {
                if (row->failed++ == 0) row->first_status = st;
                if (row->failed == 1)
                    snprintf(row->first_error, sizeof row->first_error, "%s: %s (%s)", batches[b].name,
                             dcp_context_last_error(planner.context), dcp_status_str(st));
            }
            progress(show_progress, ++done, work, row->label);
        }
        dcp_cli_planner_destroy(&planner);
        row->median = dcp_cli_median(row->seconds, row->num_seconds);
        row->p99 = dcp_cli_percentile(row->seconds, row->num_seconds, 99.0);
    }
    if (show_progress) fprintf(stderr, "\r\033[K");
    return status;
}

static void print_json(const config_row *rows, int num_rows, int best, int saturated, const dcp_cli_trace *batches,
                       int num_batches)
{
    printf("{\n  \"batches\": [");
    for (int b = 0; b < num_batches; b++) {
        printf("%s", b ? ", " : "");
        dcp_cli_json_string(stdout, batches[b].name);
    }
    printf("],\n  \"configurations\": [\n");
    for (int k = 0; k < num_rows; k++) {
        const config_row *r = &rows[k];
        double per = r->planned ? 1.0 / r->planned : 0.0;
        printf("    {\"label\": ");
        dcp_cli_json_string(stdout, r->label);
        printf(", \"scheduler\": ");
        dcp_cli_json_string(stdout, dcp_scheduler_name(r->setup.scheduler));
        printf(", \"ranks\": %d, \"cp\": %d, \"max_seqlen_per_rank\": %d, \"min_cp_size\": %d, "
               "\"vpp_group\": %d, \"cost_model\": ",
               r->setup.ranks, r->cp, r->setup.max_seqlen_per_rank, r->setup.min_cp_size, r->setup.vpp_group);
        dcp_cli_json_string(stdout, r->cost_path ? r->cost_path : "default");
        printf(",\n     \"batches\": %d, \"planned\": %d, \"failed\": %d, \"microbatches_mean\": %.6f, ", num_batches,
               r->planned, r->failed, r->microbatches * per);
        print_mean_json("makespan_mean", r->makespan_exact, r->planned, r->makespan_saturated);
        printf(", ");
        print_mean_json("lower_bound_mean", r->lower_bound_exact, r->planned, r->lower_bound_saturated);
        if (r->model_saturated) printf(", \"efficiency\": null");
        else printf(", \"efficiency\": %.6f", r->model_makespan > 0 ? r->model_lower_bound / r->model_makespan : 0.0);
        if (r->balance_saturated) printf(", \"imbalance\": null");
        else printf(", \"imbalance\": %.6f", r->busy > 0 ? r->max_rank * r->setup.ranks / r->busy : 0.0);
        printf(", \"mean_cp_size\": %.6f, \"padding_waste\": %.6f,\n     \"plan_seconds_median\": %.9f, "
               "\"plan_seconds_p99\": %.9f, \"saturated\": %s, \"first_error\": ",
               r->sequences ? (double)r->cp_size_sum / (double)r->sequences : 0.0,
               r->slots > 0 ? 1.0 - (double)r->tokens / r->slots : 0.0, r->median, r->p99,
               r->makespan_saturated || r->lower_bound_saturated || r->dependency_saturated ||
                       r->dependency_lower_saturated || r->model_saturated || r->balance_saturated
                   ? "true"
                   : "false");
        if (r->failed) dcp_cli_json_string(stdout, r->first_error);
        else printf("null");
        printf(",\n     \"step_model\": ");
        dcp_cli_json_string(stdout, dcp_step_model_name((dcp_step_model)r->setup.cost.step_model));
        printf(", ");
        print_mean_json("dependency_makespan_mean", r->dependency_exact, r->planned, r->dependency_saturated);
        printf(", ");
        print_mean_json("dependency_lower_bound_mean", r->dependency_lower_exact, r->planned,
                        r->dependency_lower_saturated);
        printf(", ");
        print_mean_json("model_makespan_mean", r->model_exact, r->planned, r->model_saturated);
        if (r->model_saturated) printf(", \"model_lower_bound_mean\": null");
        else printf(", \"model_lower_bound_mean\": %.1f", r->model_lower_bound * per);
        printf("}%s\n", k + 1 < num_rows ? "," : "");
    }
    printf("  ],\n  \"best\": ");
    if (best >= 0) dcp_cli_json_string(stdout, rows[best].label);
    else printf("null");
    printf(",\n  \"saturated\": %s\n}\n", saturated ? "true" : "false");
}

static void print_table(const compare_options *o, const config_row *rows, int num_rows, int best, int saturated,
                        const dcp_cli_trace *batches, int num_batches)
{
    int64_t seqs = 0;
    for (int b = 0; b < num_batches; b++) seqs += batches[b].count;
    printf("dcpack compare: %d batches (%s), %lld sequences in all\n", num_batches,
           o->traces_dir ? o->traces_dir : o->num_trace_files ? "trace files" : generate_spec(o), (long long)seqs);
    printf("ranks %d, max_seqlen_per_rank %d unless a configuration says otherwise; cost model: %s, step "
           "model %s\n\n",
           o->defaults.ranks, o->defaults.max_seqlen_per_rank,
           o->default_cost ? o->default_cost : "defaults (docs/planning.md, Cost model)",
           dcp_step_model_name((dcp_step_model)o->defaults.cost.step_model));
    printf("%-28s %7s %9s %16s %16s %10s %9s %7s %7s %10s %10s\n", "configuration", "batches", "microbat.",
           "makespan/batch", "dependency/b.", "efficiency", "imbalance", "mean CP", "padding", "plan med.",
           "plan p99");
    for (int k = 0; k < num_rows; k++) {
        const config_row *r = &rows[k];
        printf("%-28s ", r->label);
        if (r->planned == 0) {
            printf("%7s  %s: %s\n", "0", r->first_status == DCP_ERR_UNSUPPORTED ? "not available" : "failed",
                   r->first_error);
            continue;
        }
        char planned[16], med[32], p99[32];
        snprintf(planned, sizeof planned, r->failed ? "%d/%d" : "%d", r->planned, num_batches);
        double per = 1.0 / r->planned;
        printf("%7s %9.1f ", planned, r->microbatches * per);
        print_mean(r->makespan_exact, r->planned, r->makespan_saturated, 16);
        printf(" ");
        print_mean(r->dependency_exact, r->planned, r->dependency_saturated, 16);
        char eff[16], imb[16];
        if (r->model_saturated) snprintf(eff, sizeof eff, "saturated");
        else snprintf(eff, sizeof eff, "%.3f", r->model_makespan > 0 ? r->model_lower_bound / r->model_makespan : 0.0);
        if (r->balance_saturated) snprintf(imb, sizeof imb, "saturated");
        else snprintf(imb, sizeof imb, "%.3f", r->busy > 0 ? r->max_rank * r->setup.ranks / r->busy : 0.0);
        printf(" %10s %9s %7.2f %7.3f %10s %10s\n", eff, imb,
               (double)r->cp_size_sum / (double)r->sequences, 1.0 - (double)r->tokens / r->slots,
               o->no_timing ? "-" : dcp_cli_format_seconds(r->median, med, sizeof med),
               o->no_timing ? "-" : dcp_cli_format_seconds(r->p99, p99, sizeof p99));
    }
    printf("\n");
    if (saturated) {
        printf("no best: the makespans of some configurations that planned every batch saturate int64 (shown\n"
               "\"saturated\": the cost model's coefficients are too large for these lengths), so they cannot be\n"
               "compared; use a model whose costs fit (docs/planning.md, Cost model).\n");
        return;
    }
    if (best < 0) {
        printf("no configuration planned every batch.\n");
        return;
    }
    int second = -1;
    for (int k = 0; k < num_rows; k++)
        if (k != best && rows[k].planned == num_batches && !rows[k].model_saturated &&
            (second < 0 || rows[k].model_exact < rows[second].model_exact))
            second = k;
    const config_row *b = &rows[best];
    int others_saturated = 0;
    for (int k = 0; k < num_rows; k++)
        others_saturated += k != best && rows[k].planned == num_batches && rows[k].model_saturated;
    if (second < 0 && others_saturated)
        printf("%s has the lowest total makespan (%.1f%% above the lower bound); every other configuration's "
               "saturates int64.\n",
               b->label, 100.0 * (b->model_makespan / b->model_lower_bound - 1.0));
    else if (second < 0)
        printf("%s is the only configuration that planned every batch: efficiency %.3f.\n", b->label,
               b->model_lower_bound / b->model_makespan);
    else
        printf("%s has the lowest total makespan: %.1f%% below %s and %.1f%% above the lower bound.\n", b->label,
               100.0 * (1.0 - b->model_makespan / rows[second].model_makespan), rows[second].label,
               100.0 * (b->model_makespan / b->model_lower_bound - 1.0));
}

/*
 * Report the rows: failures on stderr, then the table or JSON; the best is the
 * configuration with the lowest total makespan (its step model's) among those
 * that planned every batch.
 */
static int report(const compare_options *o, const config_row *rows, int num_rows, const dcp_cli_trace *batches,
                  int num_batches)
{
    int best = -1, any_failed = 0, saturated = 0;
    for (int k = 0; k < num_rows; k++) {
        /* a scheduler this build lacks is left out of the default set, not a failure */
        int unavailable = !o->scheduler_list && !o->num_config_specs && rows[k].planned == 0 &&
                          rows[k].first_status == DCP_ERR_UNSUPPORTED;
        if (rows[k].failed && !unavailable) {
            any_failed = 1;
            fprintf(stderr, "dcpack compare: %s failed on %d of %d batches; first: %s\n", rows[k].label,
                    rows[k].failed, num_batches, rows[k].first_error);
        }
        if (rows[k].planned == num_batches && !rows[k].model_saturated &&
            (best < 0 || rows[k].model_exact < rows[best].model_exact))
            best = k;
    }
    /* a saturated sum is only a lower bound of the true one: a configuration with one is beaten only by a sum
       below that bound; else no best can be named */
    for (int k = 0; k < num_rows; k++)
        if (rows[k].planned == num_batches && rows[k].model_saturated &&
            (best < 0 || rows[k].model_exact <= rows[best].model_exact))
            saturated = 1;
    if (saturated) best = -1;
    if (o->json) print_json(rows, num_rows, best, saturated, batches, num_batches);
    else print_table(o, rows, num_rows, best, saturated, batches, num_batches);
    int status = dcp_cli_output_status("compare");
    if (status == DCP_EXIT_OK && any_failed) status = DCP_EXIT_ERROR;
    return status;
}

int dcp_cli_compare(int argc, char **argv)
{
    compare_options o;
    int help = 0;
    int status = parse_options(argc, argv, &o, &help);
    if (status != DCP_EXIT_OK || help) return status;

    static config_row rows[MAX_CONFIGS];
    int num_rows = 0;
    status = make_rows(&o, rows, &num_rows);
    if (status != DCP_EXIT_OK) return status;

    dcp_cli_trace *batches = NULL;
    int num_batches = 0;
    status = read_batches(&o, &batches, &num_batches);
    if (status != DCP_EXIT_OK && !batches) return status;
    const dcp_cli_trace **views = malloc(sizeof *views * (size_t)(num_batches ? num_batches : 1));
    if (status == DCP_EXIT_OK && !views) status = dcp_cli_fail(DCP_EXIT_ERROR, "compare", "out of memory");
    for (int b = 0; b < num_batches && views; b++) views[b] = &batches[b];

    if (status == DCP_EXIT_OK) status = size_rows(&o, rows, num_rows, views, num_batches);
    if (status == DCP_EXIT_OK) status = plan_rows(&o, rows, num_rows, batches, num_batches);
    if (status == DCP_EXIT_OK) status = report(&o, rows, num_rows, batches, num_batches);

    for (int k = 0; k < num_rows; k++) free(rows[k].seconds);
    for (int b = 0; b < num_batches; b++) dcp_cli_trace_free(&batches[b]);
    free(batches);
    free(views);
    return status;
}
