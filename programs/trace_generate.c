/*
 * trace_generate.c - `--generate FAMILY[:key=value,...]`: the trace families
 * of the reference benchmark's workloads.py (not part of this repository; its
 * traces are copied in tests/data/workloads/), drawn with Python's own
 * random.Random algorithms (pyrandom.c), so each family reproduces those
 * traces exactly.
 *
 *   mlmdefault  lognormal mean 1024, sigma 1.5, in [128, 8192]   keys: n, seed
 *   longsft     lognormal mean 4096, sigma 1.2, in [256, 131072]  keys: n, seed
 *   bimodal     90% lognormal(ln 1024 - 0.125, 0.5) in [256, 4096], 10% uniform [32768, 131072]
 *   uniform32k  uniform in [1, 32768]                             keys: n, seed
 *   lognormal   keys mean, sigma, min, max, n, seed (defaults 1024, 1.5, 128, 8192, 1024, 1)
 *   uniform     keys min, max, n, seed (defaults 1, 32768, 1024, 1)
 *
 * The generator is seeded with the string "FAMILY/N/SEED" like workloads.py
 * (random.Random(f"{family}/{n}/{seed}")); step k of `dcpack compare --steps`
 * uses SEED + k.  A lognormal draw is int(min(max(lognormvariate(mu, sigma),
 * min), max)) with mu = ln(mean) - sigma^2/2.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum family {
    FAMILY_MLMDEFAULT,
    FAMILY_LONGSFT,
    FAMILY_BIMODAL,
    FAMILY_UNIFORM32K,
    FAMILY_LOGNORMAL,
    FAMILY_UNIFORM
} family;

static const char *const family_names[] = {"mlmdefault", "longsft", "bimodal", "uniform32k", "lognormal", "uniform"};

typedef struct params {
    double mean, sigma;
    int64_t min, max, n, seed;
} params;

static int32_t clipped_lognormal(dcp_cli_random *rng, double mu, double sigma, int64_t lo, int64_t hi)
{
    double x = dcp_cli_random_lognormal(rng, mu, sigma);
    /* Python's max(x, lo) keeps x unless lo > x; min(., hi) keeps it unless hi < it; int() truncates */
    if ((double)lo > x) x = (double)lo;
    if ((double)hi < x) x = (double)hi;
    return (int32_t)x;
}

static int parse_double(const char *command, const char *key, const char *text, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (!*text || *end || !isfinite(v))
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: %s='%s' is not a number", key, text);
    *out = v;
    return DCP_EXIT_OK;
}

int dcp_cli_trace_generate(const char *command, const char *spec, int32_t step, dcp_cli_trace *trace)
{
    memset(trace, 0, sizeof *trace);
    char buf[512];
    if (strlen(spec) >= sizeof buf) return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: spec too long");
    strcpy(buf, spec);
    char *keys = strchr(buf, ':');
    if (keys) *keys++ = '\0';
    int fam = -1;
    for (int f = 0; f < (int)(sizeof family_names / sizeof family_names[0]); f++)
        if (strcmp(buf, family_names[f]) == 0) fam = f;
    if (fam < 0)
        return dcp_cli_fail(DCP_EXIT_USAGE, command,
                            "--generate: unknown family '%s' (mlmdefault, longsft, bimodal, uniform32k, lognormal, "
                            "uniform)",
                            buf);
    params p = {1024, 1.5, 128, 8192, 1024, 1};
    if (fam == FAMILY_UNIFORM) p.min = 1, p.max = 32768;
    int generic = fam == FAMILY_LOGNORMAL || fam == FAMILY_UNIFORM;
    /* every item is key=value: an empty one (a trailing or doubled comma) and a key given twice are refused */
    static const char *const key_names[] = {"n", "seed", "min", "max", "mean", "sigma"};
    unsigned seen = 0;
    char *kv = NULL;
    for (int got; (got = dcp_cli_next_item(&keys, &kv)) != 0;) {
        if (got < 0)
            return dcp_cli_fail(DCP_EXIT_USAGE, command,
                                "--generate: '%s' has an empty key=value item (a stray ',' or ':')", spec);
        char *eq = strchr(kv, '=');
        if (!eq) return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: '%s' is not key=value", kv);
        *eq = '\0';
        const char *key = kv, *value = eq + 1;
        for (unsigned k = 0; k < sizeof key_names / sizeof key_names[0]; k++)
            if (strcmp(key, key_names[k]) == 0) {
                if (seen & (1u << k))
                    return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: '%s' gives %s twice", spec, key);
                seen |= 1u << k;
            }
        int st = DCP_EXIT_OK, known = 1;
        if (strcmp(key, "n") == 0) st = dcp_cli_parse_int(command, "--generate n", value, 1, DCP_CLI_MAX_SEQUENCES, &p.n);
        else if (strcmp(key, "seed") == 0)
            st = dcp_cli_parse_int(command, "--generate seed", value, -((int64_t)1 << 53), (int64_t)1 << 53, &p.seed);
        else if (generic && strcmp(key, "min") == 0)
            st = dcp_cli_parse_int(command, "--generate min", value, 1, INT32_MAX, &p.min);
        else if (generic && strcmp(key, "max") == 0)
            st = dcp_cli_parse_int(command, "--generate max", value, 1, INT32_MAX, &p.max);
        else if (fam == FAMILY_LOGNORMAL && strcmp(key, "mean") == 0) st = parse_double(command, key, value, &p.mean);
        else if (fam == FAMILY_LOGNORMAL && strcmp(key, "sigma") == 0) st = parse_double(command, key, value, &p.sigma);
        else known = 0;
        if (!known)
            return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: %s takes %s; '%s' is not one of them",
                                family_names[fam],
                                fam == FAMILY_LOGNORMAL ? "mean, sigma, min, max, n, seed"
                                : fam == FAMILY_UNIFORM ? "min, max, n, seed"
                                                        : "n and seed (use lognormal:... or uniform:... for other shapes)",
                                key);
        if (st != DCP_EXIT_OK) return st;
    }
    if (p.min > p.max)
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: min %lld exceeds max %lld", (long long)p.min,
                            (long long)p.max);
    if (fam == FAMILY_LOGNORMAL && (p.mean <= 0 || p.sigma < 0))
        return dcp_cli_fail(DCP_EXIT_USAGE, command, "--generate: lognormal needs mean > 0 and sigma >= 0 (got %g, %g)",
                            p.mean, p.sigma);
    int64_t seed = p.seed + step;

    char seed_text[DCP_CLI_SEED_MAX];
    snprintf(seed_text, sizeof seed_text, "%s/%lld/%lld", family_names[fam], (long long)p.n, (long long)seed);
    if (fam == FAMILY_LOGNORMAL)
        snprintf(trace->name, sizeof trace->name, "lognormal:mean=%g,sigma=%g,min=%lld,max=%lld,n=%lld,seed=%lld",
                 p.mean, p.sigma, (long long)p.min, (long long)p.max, (long long)p.n, (long long)seed);
    else if (fam == FAMILY_UNIFORM)
        snprintf(trace->name, sizeof trace->name, "uniform:min=%lld,max=%lld,n=%lld,seed=%lld", (long long)p.min,
                 (long long)p.max, (long long)p.n, (long long)seed);
    else
        snprintf(trace->name, sizeof trace->name, "%s:n=%lld,seed=%lld", family_names[fam], (long long)p.n,
                 (long long)seed);

    trace->lengths = malloc(sizeof *trace->lengths * (size_t)p.n);
    trace->lines = calloc((size_t)p.n, sizeof *trace->lines);
    if (!trace->lengths || !trace->lines) {
        dcp_cli_trace_free(trace);
        return dcp_cli_fail(DCP_EXIT_ERROR, command, "--generate: out of memory for %lld lengths", (long long)p.n);
    }
    dcp_cli_random rng;
    dcp_cli_random_seed(&rng, seed_text);
    for (int64_t i = 0; i < p.n; i++) {
        int32_t s = 0;
        switch ((family)fam) {
        case FAMILY_MLMDEFAULT: s = clipped_lognormal(&rng, log(1024.0) - 1.5 * 1.5 / 2, 1.5, 128, 8192); break;
        case FAMILY_LONGSFT: s = clipped_lognormal(&rng, log(4096.0) - 1.2 * 1.2 / 2, 1.2, 256, 131072); break;
        case FAMILY_BIMODAL:
            if (dcp_cli_random_double(&rng) < 0.9) s = clipped_lognormal(&rng, log(1024.0) - 0.125, 0.5, 256, 4096);
            else s = (int32_t)dcp_cli_random_int(&rng, 32768, 131072);
            break;
        case FAMILY_UNIFORM32K: s = (int32_t)dcp_cli_random_int(&rng, 1, 32768); break;
        case FAMILY_LOGNORMAL: {
            double mu = log(p.mean) - p.sigma * p.sigma / 2;
            s = clipped_lognormal(&rng, mu, p.sigma, p.min, p.max);
            break;
        }
        case FAMILY_UNIFORM: s = (int32_t)dcp_cli_random_int(&rng, p.min, p.max); break;
        }
        trace->lengths[i] = s;
    }
    trace->count = (int32_t)p.n;
    return DCP_EXIT_OK;
}

int dcp_cli_trace_default(dcp_cli_trace *trace)
{
    memset(trace, 0, sizeof *trace);
    snprintf(trace->name, sizeof trace->name, "embedded default (mlmdefault:n=1024,seed=1)");
    trace->lengths = malloc(sizeof *trace->lengths * (size_t)dcp_cli_default_count);
    trace->lines = malloc(sizeof *trace->lines * (size_t)dcp_cli_default_count);
    if (!trace->lengths || !trace->lines) {
        dcp_cli_trace_free(trace);
        return DCP_EXIT_ERROR;
    }
    for (int32_t i = 0; i < dcp_cli_default_count; i++) {
        trace->lengths[i] = dcp_cli_default_lengths[i];
        trace->lines[i] = 0;
    }
    trace->count = dcp_cli_default_count;
    return DCP_EXIT_OK;
}
