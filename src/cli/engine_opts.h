/* Engine options shared by the subcommands that run the engine (serve, generate,
 * chat, bench): --model --threads --kernel --kv-dtype --kv-cache-mib --block-size
 * --max-num-seqs --max-batched-tokens --max-waiting --prefix-cache on|off
 * --prefix-cache-max-entries --schedule --max-wait-steps. */
#ifndef HEARTH_CLI_ENGINE_OPTS_H
#define HEARTH_CLI_ENGINE_OPTS_H

#include <hearth.h>

#include <stdbool.h>

/* Defaults for the CLI (threads: the machine's cores). */
void engine_opts_default(struct hearth_engine_params *p);

/* If argv[*i] is an engine option, consumes it (and its value) into p and returns 1;
 * returns 0 when it is not one; -1 (message on stderr, naming the flag) when its value
 * is bad. */
int engine_opts_parse(struct hearth_engine_params *p, int argc, char **argv, int *i);

/* The help text of the options above. */
extern const char engine_opts_help[];

#endif
