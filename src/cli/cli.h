/* Subcommands of the hearth binary: each is `int cli_<name>(int argc, char **argv)`,
 * argv[0] being the subcommand's name; returns the process exit status. */
#ifndef HEARTH_CLI_CLI_H
#define HEARTH_CLI_CLI_H

int cli_serve(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_template(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_mkmodel(int argc, char **argv);

#endif
