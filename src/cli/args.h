/* Small helpers for the subcommands' option parsing. */
#ifndef HEARTH_CLI_ARGS_H
#define HEARTH_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* The value of option argv[*i] ("--name VALUE" or "--name=VALUE"); advances *i.
 * NULL (with a message on stderr) when the value is missing. */
const char *args_value(int argc, char **argv, int *i);
/* argv[i] is "--name" or "--name=...". */
bool args_is(const char *arg, const char *name);
/* Strict integer/float parsing; false (with a message naming the option) on junk or range. */
bool args_int(const char *opt, const char *s, long lo, long hi, long *out);
bool args_double(const char *opt, const char *s, double lo, double hi, double *out);

#endif
