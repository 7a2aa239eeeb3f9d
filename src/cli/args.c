/* Option parsing helpers. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool args_is(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

const char *args_value(int argc, char **argv, int *i)
{
    const char *eq = strchr(argv[*i], '=');
    if (eq && !strncmp(argv[*i], "--", 2))
        return eq + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "hearth: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool args_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "hearth: %s must be an integer in %ld..%ld, got '%s'\n", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool args_double(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v) || v < lo || v > hi) {
        fprintf(stderr, "hearth: %s must be a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}
