/* The benchmark subcommands of `hearth bench`: each is `int bench_<name>(argc, argv)`
 * with argv[0] its name, listed in cmd_bench.c. */
#ifndef HEARTH_CLI_BENCH_H
#define HEARTH_CLI_BENCH_H

int bench_prefix(int argc, char **argv);
int bench_throughput(int argc, char **argv);
int bench_forward(int argc, char **argv);
int bench_kernels(int argc, char **argv);
int bench_grammar(int argc, char **argv);

#endif
