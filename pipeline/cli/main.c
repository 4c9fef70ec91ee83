/*
 * main.c - the dcpack program: `dcpack <command> [arguments]`.
 * Each command lives in its own cmd_<name>.c as int dcp_cli_<name>(argc, argv),
 * argv[0] being the command's name.
 */
#include <stdio.h>
#include <string.h>

int dcp_cli_step(int argc, char **argv);

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"step", dcp_cli_step, "run one data-plane step over in-process ranks, optionally checked (--check)"},
};

int main(int argc, char **argv)
{
    if (argc >= 2)
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "usage: dcpack <command> [arguments]\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "  %-8s %s\n", commands[i].name, commands[i].summary);
    return 2;
}
