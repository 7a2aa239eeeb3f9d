/* hearth bench: dispatches to the benchmark subcommands; each prints JSON. */
#include <stdio.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"

struct bench_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct bench_command bench_commands[] = {
    {"prefix", bench_prefix, "exact-reuse parity: disabled / cold / warm (or --workload chat|fewshot|rag|none)"},
    {"throughput", bench_throughput, "offline throughput and inter-token latency at 1, 8 and 32 concurrent"},
    {"forward", bench_forward, "forward pass: prefill and decode tokens/s against the machine's ceilings"},
    {"kernels", bench_kernels, "GEMM GFLOP/s for a model's real shapes against the machine's ceilings"},
    {"grammar", bench_grammar, "structured outputs: token-mask time per token, end-to-end slowdown (--model)"},
};

static void bench_usage(void)
{
    fprintf(stderr, "usage: hearth bench <benchmark> --model DIR [options]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof bench_commands / sizeof bench_commands[0]; i++)
        fprintf(stderr, "  %-11s %s\n", bench_commands[i].name, bench_commands[i].help);
}

int cli_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        bench_usage();
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof bench_commands / sizeof bench_commands[0]; i++)
        if (!strcmp(argv[1], bench_commands[i].name))
            return bench_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "hearth bench: unknown benchmark '%s'\n", argv[1]);
    bench_usage();
    return 2;
}
