/*
 * main.c - the dcpack program: `dcpack <command> [arguments]`.
 * Each command lives in its own cmd_<name>.c as int dcp_cli_<name>(argc, argv),
 * argv[0] being the command's name, and answers --help on standard output.
 */
#include "cli.h"

#include <string.h>

#ifdef DCP_HAVE_JEMALLOC
/*
 * jemalloc, linked in as malloc, is not safe for a new thread when memory runs
 * out: jemalloc 5.3 dereferences the arena it could not create for the thread
 * (in the thread's first malloc), and flushes a thread cache it could not set
 * up (when the thread ends); either way the program dies of SIGSEGV.  With one
 * automatic arena and no thread caches neither is made per thread, and a
 * failed allocation returns NULL, which the program reports (exit status 1).
 * The rank threads of `dcpack step` allocate before and after their steps
 * only; contexts allocate from arenas of their own.
 */
const char *malloc_conf = "narenas:1,tcache:false";
#endif

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"plan", dcp_cli_plan, "plan one global batch; with no arguments, compare every scheduler on the default trace"},
    {"compare", dcp_cli_compare, "compare schedulers or configurations over many global batches"},
    {"cost", dcp_cli_cost, "show the cost model (defaults or a --profile file) and sample costs per CP size"},
    {"generate", dcp_cli_generate, "print a generated trace (lognormal, uniform, mlmdefault, ...), one length per line"},
    {"step", dcp_cli_step, "run data-plane steps over in-process ranks on a trace, optionally checked (--check)"},
};
enum { COMMAND_COUNT = sizeof commands / sizeof commands[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: dcpack <command> [arguments]      dcpack <command> --help for its options\n\n");
    for (int i = 0; i < COMMAND_COUNT; i++) fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\nexamples:\n"
            "  dcpack plan                      compare the schedulers on the embedded default batch\n"
            "  dcpack plan --trace lengths.txt --ranks 64 --scheduler dynamic_cp --format json\n"
            "  dcpack compare --generate mlmdefault:n=4096 --steps 20 --ranks 64\n"
            "  dcpack cost --profile my_model.txt\n"
            "  dcpack step --trace lengths.txt --dp 2 --cp 2 --tp 2 --pp 2 --check\n"
            "\nexit status (every command):\n"
            "  0  success\n"
            "  1  failure: the library could not plan a batch (infeasible), a step failed or did not verify,\n"
            "     a planning context could not be created, out of memory, or an output could not be written\n"
            "  2  usage error: unknown option, missing or malformed value, conflicting options, or a\n"
            "     configuration the library rejects\n"
            "  3  bad input: a trace or cost profile that cannot be read or holds a bad value, or a batch\n"
            "     the configuration cannot hold (a sequence longer than its ranks hold together, more\n"
            "     sequences than --max-sequences); the message names the file, the line and the value\n"
            "\ndcpack %d.%d.%d\n",
            DCP_VERSION_MAJOR, DCP_VERSION_MINOR, DCP_VERSION_PATCH);
}

/* Whatever a command (or a help text) printed must have been written: a full disk is a failure too. */
static int finish(const char *command, int status)
{
    if (dcp_cli_output_status(command) != DCP_EXIT_OK && status == DCP_EXIT_OK) return DCP_EXIT_ERROR;
    return status;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return DCP_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        usage(stdout);
        return DCP_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("dcpack %d.%d.%d\n", DCP_VERSION_MAJOR, DCP_VERSION_MINOR, DCP_VERSION_PATCH);
        return DCP_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return DCP_EXIT_OK;
        }
        for (int i = 0; i < COMMAND_COUNT; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                static char help_flag[] = "--help";
                char *help_argv[] = {argv[2], help_flag, NULL};
                return commands[i].run(2, help_argv);
            }
        fprintf(stderr, "dcpack: no command '%s'\n", argv[2]);
        return DCP_EXIT_USAGE;
    }
    for (int i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "dcpack: unknown command '%s'\n\n", name);
    usage(stderr);
    return DCP_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    int status = run(argc, argv);
    return finish(argc >= 2 && argv[1][0] != '-' ? argv[1] : "", status);
}
