/* cmd_generate.c - `dcpack generate SPEC`: print a generated trace, one length per line. */
#include "cli.h"

#include <string.h>

static const char generate_usage[] =
    "usage: dcpack generate SPEC [--step K]\n"
    "\n"
    "Print a generated global batch, one length per line (the text trace format).\n"
    "SPEC is FAMILY[:key=value,...]:\n"
    "  mlmdefault   lognormal mean 1024, sigma 1.5, clipped to [128, 8192]   (keys n, seed)\n"
    "  longsft      lognormal mean 4096, sigma 1.2, clipped to [256, 131072] (keys n, seed)\n"
    "  bimodal      90%: lognormal(ln 1024 - 0.125, 0.5) in [256, 4096]; 10%: uniform [32768, 131072]\n"
    "  uniform32k   uniform in [1, 32768]                                     (keys n, seed)\n"
    "  lognormal    keys mean, sigma, min, max, n, seed (defaults 1024, 1.5, 128, 8192, 1024, 1)\n"
    "  uniform      keys min, max, n, seed (defaults 1, 32768, 1024, 1)\n"
    "n defaults to 1024 and seed to 1. The draws are Python's: random.Random(\"FAMILY/N/SEED\") with\n"
    "lognormvariate and randint, so mlmdefault, longsft, bimodal and uniform32k reproduce the\n"
    "reference benchmark's traces exactly (copies: tests/data/workloads/ in the source tree);\n"
    "a lognormal length is int(min(max(x, min), max)) with x = lognormvariate(ln(mean) - sigma^2/2,\n"
    "sigma).\n"
    "\n"
    "  --step K     add K to the seed (batch K of `dcpack compare --generate SPEC --steps N`)\n"
    "  -h, --help   this help\n"
    "\n"
    "examples:\n"
    "  dcpack generate mlmdefault:n=4096,seed=2 > batch.txt\n"
    "  dcpack generate lognormal:mean=2048,sigma=1.0,min=64,max=32768,n=8192 | dcpack plan --trace -\n"
    "\n"
    "exit status: 0 ok; 1 out of memory or the output could not be written; 2 usage error\n"
    "(unknown family or key, bad value).\n";

int dcp_cli_generate(int argc, char **argv)
{
    const char *spec = NULL;
    int64_t step = 0;
    dcp_cli_args args = {argc, argv, 1, "generate"};
    for (; args.i < argc; args.i++) {
        const char *v = NULL;
        int got;
        if (dcp_cli_flag(&args, "-h") || dcp_cli_flag(&args, "--help")) {
            fputs(generate_usage, stdout);
            return DCP_EXIT_OK;
        }
        if ((got = dcp_cli_option(&args, "--step", &v)) != 0) {
            if (got < 0 || dcp_cli_parse_int("generate", "--step", v, 0, 1 << 30, &step) != DCP_EXIT_OK)
                return DCP_EXIT_USAGE;
            continue;
        }
        if (argv[args.i][0] == '-' || spec)
            return dcp_cli_fail(DCP_EXIT_USAGE, "generate", "unexpected argument '%s' (see dcpack generate --help)",
                                argv[args.i]);
        spec = argv[args.i];
    }
    if (!spec) return dcp_cli_fail(DCP_EXIT_USAGE, "generate", "missing SPEC (see dcpack generate --help)");
    dcp_cli_trace trace;
    int st = dcp_cli_trace_generate("generate", spec, (int32_t)step, &trace);
    if (st != DCP_EXIT_OK) return st;
    for (int32_t i = 0; i < trace.count; i++) printf("%d\n", trace.lengths[i]);
    dcp_cli_trace_free(&trace);
    if (dcp_cli_output_status("generate") != DCP_EXIT_OK) return DCP_EXIT_ERROR;
    return DCP_EXIT_OK;
}
