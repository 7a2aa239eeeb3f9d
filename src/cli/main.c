/* hearth: the command-line entry point; dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include <hearth.h>

#include "cli/cli.h"

/* Weak so that the binary links while a subcommand is still being written;
 * a missing one says so instead of crashing. */
#pragma weak cli_serve
#pragma weak cli_generate
#pragma weak cli_chat
#pragma weak cli_bench
#pragma weak cli_eval
#pragma weak cli_tokenize
#pragma weak cli_template
#pragma weak cli_info
#pragma weak cli_mkmodel

struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static void usage(const struct cli_command *cmds, int n)
{
    fprintf(stderr, "usage: hearth <command> [options]\n\ncommands:\n");
    for (int i = 0; i < n; i++)
        if (cmds[i].fn)
            fprintf(stderr, "  %-10s %s\n", cmds[i].name, cmds[i].help);
    fprintf(stderr, "\nhearth <command> --help describes each command's options; hearth --version prints the version.\n");
}

int main(int argc, char **argv)
{
    const struct cli_command cmds[] = {
        {"serve", cli_serve, "serve a model over an OpenAI-compatible HTTP API"},
        {"generate", cli_generate, "generate text from a prompt, streamed to stdout"},
        {"chat", cli_chat, "interactive chat with the model's chat template"},
        {"bench", cli_bench, "benchmarks: prefix (exact reuse), throughput, forward, kernels"},
        {"eval", cli_eval, "compare the forward with reference logits (expected.safetensors)"},
        {"tokenize", cli_tokenize, "print the token ids of a text (--decode: the inverse)"},
        {"template", cli_template, "render a conversation with the model's chat template"},
        {"info", cli_info, "architecture, parameters, dtypes, weight and KV memory of a model"},
        {"mkmodel", cli_mkmodel, "write a random-weight checkpoint with real Qwen3 shapes"},
    };
    int n = (int)(sizeof cmds / sizeof cmds[0]);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))) {
        printf("hearth %s\n", HEARTH_VERSION);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(cmds, n);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(argv[1], cmds[i].name) != 0)
            continue;
        if (!cmds[i].fn) {
            fprintf(stderr, "hearth: '%s' is not available in this build yet\n", argv[1]);
            return 2;
        }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "hearth: unknown command '%s'\n\n", argv[1]);
    usage(cmds, n);
    return 2;
}
