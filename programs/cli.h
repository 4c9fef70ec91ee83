/*
 * cli.h - the pieces the dcpack program's commands share: exit statuses,
 * option parsing, traces (read or generated), cost profiles, running and
 * timing plans, and the plan's derived metrics.
 *
 * The program may allocate freely; the library calls it makes are the public
 * API (dcp_context_create, dcp_plan_compute, dcp_plan_stats_compute).
 */
#ifndef DCP_CLI_H
#define DCP_CLI_H

#include "dcpack.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define DCP_CLI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DCP_CLI_PRINTF(fmt, args)
#endif

/* Exit statuses of every command (`dcpack --help` lists them). */
enum {
    DCP_EXIT_OK = 0,    /* success */
    DCP_EXIT_ERROR = 1, /* the library could not plan (infeasible) or a step failed, a context could not be
                           created, out of memory, or an output could not be written */
    DCP_EXIT_USAGE = 2, /* bad command line: unknown option, missing or malformed value, conflicting options,
                           a configuration the library rejects */
    DCP_EXIT_INPUT = 3  /* a trace or cost profile that cannot be read or holds a bad value (file:line named),
                           or a batch the configuration cannot hold: a sequence longer than its ranks hold,
                           more sequences than --max-sequences */
};

/* "dcpack <command>: <message>" ("dcpack: <message>" for command "") on stderr; returns `status` so a failure
   site is one line. */
int dcp_cli_fail(int status, const char *command, const char *format, ...) DCP_CLI_PRINTF(3, 4);

/*
 * Flush standard output: DCP_EXIT_OK when everything printed there was written,
 * else DCP_EXIT_ERROR with "dcpack <command>: cannot write the output" on stderr.
 */
int dcp_cli_output_status(const char *command);

/* ---- options ---- */

/*
 * Walks argv.  dcp_cli_option() matches `--name VALUE` and `--name=VALUE`:
 * 1 with *value set, 0 when argv[i] is another option, -1 (message printed)
 * when the value is missing.
 */
typedef struct dcp_cli_args {
    int argc;
    char **argv;
    int i;
    const char *command;
} dcp_cli_args;

int dcp_cli_option(dcp_cli_args *args, const char *name, const char **value);
int dcp_cli_flag(const dcp_cli_args *args, const char *name);
/* Integer in [lo, hi] from `text`, or DCP_EXIT_USAGE with a message naming the option. */
int dcp_cli_parse_int(const char *command, const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out);
/* Whole-string integer parse; 0 on success. */
int dcp_cli_strtoi64(const char *text, int64_t *out);
/*
 * The next item of a comma-separated list, cut in place from *rest (NULL: the list is done):
 * 1 with *item set, 0 when there are no more, -1 for an empty item (a leading, doubled or
 * trailing comma; strtok skipped them silently).  An empty list is one empty item.
 */
int dcp_cli_next_item(char **rest, char **item);

/* ---- traces ---- */

typedef struct dcp_cli_trace {
    int32_t *lengths; /* [count], by id */
    int32_t *lines;   /* [count], 1-based source line of each length (0 for generated traces) */
    int32_t count;
    char name[512];   /* file name, "<stdin>", or the generator spec */
} dcp_cli_trace;

/* Most sequences one trace may hold. */
#define DCP_CLI_MAX_SEQUENCES (1 << 24)

/*
 * Read a trace.  path "-" is standard input.  format: NULL/"auto", "text",
 * "csv" or "jsonl"; csv and jsonl need `column`.  Returns DCP_EXIT_OK or
 * DCP_EXIT_INPUT / DCP_EXIT_USAGE with the file, line and value in the message.
 */
int dcp_cli_trace_read(const char *command, const char *path, const char *format, const char *column,
                       dcp_cli_trace *trace);

/* Generate a trace from a spec (family[:key=value,...]); `step` is added to its seed. */
int dcp_cli_trace_generate(const char *command, const char *spec, int32_t step, dcp_cli_trace *trace);

/* The embedded default trace: mlmdefault, 1024 sequences, seed 1. */
int dcp_cli_trace_default(dcp_cli_trace *trace);
extern const int32_t dcp_cli_default_lengths[];
extern const int32_t dcp_cli_default_count;

void dcp_cli_trace_free(dcp_cli_trace *trace);
int64_t dcp_cli_trace_tokens(const dcp_cli_trace *trace);
int32_t dcp_cli_trace_longest(const dcp_cli_trace *trace);
/* "FILE:LINE" (or "FILE, sequence ID" where there is no line) of sequence `id`, into buf. */
const char *dcp_cli_trace_where(const dcp_cli_trace *trace, int32_t id, char *buf, size_t size);

/* ---- Python-compatible random numbers (pyrandom.c, sha512.c) ---- */

#define DCP_CLI_SEED_MAX 256

typedef struct dcp_cli_random {
    uint32_t state[624];
    int index;
} dcp_cli_random;

void dcp_cli_sha512(const void *data, size_t size, unsigned char digest[64]);
void dcp_cli_random_seed(dcp_cli_random *r, const char *text);
uint32_t dcp_cli_random_u32(dcp_cli_random *r);
double dcp_cli_random_double(dcp_cli_random *r);
double dcp_cli_random_lognormal(dcp_cli_random *r, double mu, double sigma);
int64_t dcp_cli_random_int(dcp_cli_random *r, int64_t lo, int64_t hi);

/* ---- cost profiles ---- */

/*
 * Load `key = value` lines over *model; DCP_EXIT_INPUT with file:line on a bad line (then
 * nothing is changed).  *time_unit_ps gets the profile's time_unit_ps (picoseconds per cost
 * unit: its coefficients are times), 0 when it names none.
 */
int dcp_cli_cost_profile_load(const char *command, const char *path, dcp_cost_model *model, int64_t *time_unit_ps);
/* Write a model in the profile format (loads back to the same model and time unit; 0 = none). */
void dcp_cli_cost_profile_write(FILE *out, const dcp_cost_model *model, int64_t time_unit_ps);
/* A makespan of `units` cost units in milliseconds, with time_unit_ps picoseconds per unit. */
double dcp_cli_units_ms(int64_t units, int64_t time_unit_ps);

/* ---- planning ---- */

/* What a command plans with, before it is turned into a dcp_config for a trace. */
typedef struct dcp_cli_setup {
    dcp_scheduler scheduler;
    int32_t ranks;                        /* N: DPxCP ranks */
    int32_t max_seqlen_per_rank;          /* M */
    int32_t cp;                           /* dp_balanced's static CP size; 0 = smallest that fits */
    int32_t min_cp_size;
    int32_t vpp_group;                    /* microbatch_group_size_per_vp_stage */
    int32_t pp;                           /* --pp: pipeline_parallel_size (default 1) */
    int32_t vpp;                          /* --vpp: virtual_pipeline_size (default 1) */
    int32_t schedule;                     /* --schedule: a dcp_pipeline_schedule; -1 = by --vpp */
    int32_t max_sequences_per_microbatch; /* 0 = unlimited */
    int32_t max_sequences;                /* capacity; 0 = the trace's count rounded up */
    dcp_cost_model cost;
    int32_t step_model;                   /* --step-model: overrides cost.step_model (profiles' too); -1 = none */
    dcp_plan_effort plan_effort;          /* --effort full|fast: balanced's search (default full) */
    int64_t time_unit_ps;                 /* the --cost profile's picoseconds per cost unit; 0 = none */
    char label[64];                       /* how tables name this configuration */
} dcp_cli_setup;

void dcp_cli_setup_default(dcp_cli_setup *setup);

/*
 * One configuration option at args->i (--ranks, --max-seqlen-per-rank, --cp,
 * --min-cp-size, --vpp-group, --max-sequences-per-microbatch, --max-sequences,
 * --pp, --vpp, --schedule, --cost, --step-model, --effort): 1 when consumed, 0 when argv[i] is not one of them, -1 on a bad
 * value with *status set (DCP_EXIT_USAGE, or DCP_EXIT_INPUT for a bad profile).
 * *cost_path gets --cost's file.
 */
int dcp_cli_setup_option(dcp_cli_args *args, dcp_cli_setup *setup, const char **cost_path, int *status);

/* Where a command's sequences come from. */
typedef struct dcp_cli_input {
    const char *trace;        /* --trace FILE or - */
    const char *column;       /* --column NAME (csv, jsonl) */
    const char *input_format; /* --input-format auto|text|csv|jsonl */
    const char *generate;     /* --generate SPEC */
} dcp_cli_input;

/* --trace, --column, --input-format, --generate: same contract as dcp_cli_setup_option. */
int dcp_cli_input_option(dcp_cli_args *args, dcp_cli_input *input, int *status);

/* Write s as a JSON string literal: every string the program writes into JSON goes through here. */
void dcp_cli_json_string(FILE *out, const char *s);

/*
 * The dcp_config for planning `trace` with `setup` (dp_balanced: dp = N/C,
 * cp = C; otherwise dp = N, cp = 1).  Checks every length against the group
 * that must hold it and the capacity, naming file:line and value.  Returns
 * DCP_EXIT_OK, or DCP_EXIT_USAGE (an impossible configuration) or
 * DCP_EXIT_INPUT with the reason in message (nothing printed).
 * *cp_used gets dp_balanced's CP size (0 for the dynamic schedulers).
 */
int dcp_cli_config_make(const dcp_cli_setup *setup, const dcp_cli_trace *const *traces, int num_traces,
                        dcp_config *config, int32_t *cp_used, char *message, size_t message_size);

/*
 * What a group of `ranks` ranks of max_seqlen_per_rank `m` holds, for "length L exceeds ...":
 * "what all 4 ranks hold together: 4 x max_seqlen_per_rank 4096 = 16384 tokens", or for one rank
 * "what the one rank holds: max_seqlen_per_rank 4096 tokens"; with `static_cp`, "the static CP
 * group: 2 ranks x max_seqlen_per_rank ..." ("the static CP group: one rank of ...").  Returns buffer.
 */
const char *dcp_cli_ranks_hold(int64_t ranks, int64_t m, int static_cp, char *buffer, size_t size);

/*
 * The context capacity for traces: `requested` (--max-sequences), or when 0
 * the largest count rounded up to a multiple of 256.  DCP_EXIT_INPUT with the
 * reason in message (nothing printed) when a trace holds more.
 */
int dcp_cli_capacity(int32_t requested, const dcp_cli_trace *const *traces, int num_traces, int32_t *capacity,
                     char *message, size_t message_size);

/* One planning context and the timings of its runs. */
typedef struct dcp_cli_planner {
    dcp_context *context;
    dcp_config config;
} dcp_cli_planner;

/* DCP_EXIT_OK or DCP_EXIT_ERROR (message printed). */
int dcp_cli_planner_create(const char *command, const dcp_config *config, dcp_cli_planner *planner);
void dcp_cli_planner_destroy(dcp_cli_planner *planner);

/*
 * Plan `repeat` times, each run timed alone (wall clock, monotonic); seconds[r]
 * gets run r.  On success *plan and *stats describe the last run's plan.
 * Returns the library status; the context's message says why on failure.
 */
dcp_status dcp_cli_plan_timed(dcp_cli_planner *planner, const dcp_cli_trace *trace, int32_t repeat,
                              double *seconds, const dcp_plan **plan, dcp_plan_stats *stats);

/* Plan-derived numbers the commands print (definitions in the README's "The dcpack program" section). */
typedef struct dcp_cli_metrics {
    double efficiency;    /* model_lower_bound / model_makespan: lower bound / makespan under the configured step model */
    double imbalance;     /* max_rank_sum / (busy_sum / N): slowest rank over the mean rank, summed over microbatches */
    double idle_fraction; /* 1 - busy_sum / (N * max_rank_sum): rank time spent waiting for the slowest rank */
    double padding_waste; /* 1 - total_tokens / (microbatches * N * M): token slots left empty */
    double mean_cp_size;  /* cp_size_sum / sequences */
} dcp_cli_metrics;

void dcp_cli_metrics_compute(const dcp_plan_stats *stats, int32_t ranks, int32_t max_seqlen_per_rank,
                             int32_t sequences, dcp_cli_metrics *metrics);

/* Median and p99 (nearest rank) of n values; sorts them. */
double dcp_cli_median(double *values, int64_t n);
double dcp_cli_percentile(double *values, int64_t n, double p);

/* Human time ("412 us", "1.23 ms", "2.05 s"). */
const char *dcp_cli_format_seconds(double seconds, char *buf, size_t size);

/* Per-rank cost (slowest rank in a group) of microbatch m's group g under the config's cost model. */
int64_t dcp_cli_group_cost(const dcp_cost_model *model, const dcp_plan *plan, const int32_t *lengths, int32_t g);

/* ---- SVG ---- */

/* Draw a plan (time axis in ms when time_unit_ps > 0); DCP_EXIT_OK or DCP_EXIT_ERROR when the file cannot be written. */
int dcp_cli_svg_write(const char *command, const char *path, const dcp_plan *plan, const dcp_cli_trace *trace,
                      const dcp_config *config, const dcp_plan_stats *stats, const char *title, int64_t time_unit_ps);

/* ---- commands ---- */

int dcp_cli_plan(int argc, char **argv);
int dcp_cli_compare(int argc, char **argv);
int dcp_cli_cost(int argc, char **argv);
int dcp_cli_generate(int argc, char **argv);
int dcp_cli_step(int argc, char **argv);

#endif
