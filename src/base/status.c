/* Status strings and message helpers. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hr_status_str(enum hr_status st)
{
    switch (st) {
    case HR_OK: return "ok";
    case HR_ERR_IO: return "i/o error";
    case HR_ERR_FORMAT: return "format error";
    case HR_ERR_INVALID: return "invalid argument";
    case HR_ERR_UNSUPPORTED: return "unsupported";
    case HR_ERR_NOMEM: return "out of memory";
    case HR_ERR_FULL: return "full";
    case HR_ERR_NOT_FOUND: return "not found";
    case HR_ERR_CANCELLED: return "cancelled";
    case HR_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

enum hr_status hr_err(char *err, size_t errlen, enum hr_status st, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

void hr_err_prefix(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    char old[HR_ERRLEN];
    snprintf(old, sizeof old, "%s", err);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, "%s", old);
}

void hr_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "hearth: internal invariant violated: %s (%s:%d)\n", expr, file, line);
    abort();
}
