/* Error messages and the invariant check.  The status codes themselves (enum
 * hr_status) are defined once, in include/hearth.h.  Every fallible function returns
 * enum hr_status and writes a human message into a caller buffer (char *err, size_t
 * errlen); HR_ASSERT is for our own bugs only. */
#ifndef HEARTH_BASE_STATUS_H
#define HEARTH_BASE_STATUS_H

#include <stddef.h>

#include <hearth.h>

#define HR_ERRLEN 512

/* Writes the formatted message into err (when non-NULL) and returns st. */
enum hr_status hr_err(char *err, size_t errlen, enum hr_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes an existing message in err with more context ("file.json: " + old). */
void hr_err_prefix(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void hr_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define HR_ASSERT(c) do { if (!(c)) hr_assert_fail(#c, __FILE__, __LINE__); } while (0)

#endif
