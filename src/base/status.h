/* Status codes and error messages: the one definition site.
 * Every fallible function returns enum hr_status and writes a human message into
 * a caller buffer (char *err, size_t errlen); HR_ASSERT is for our own bugs only. */
#ifndef HEARTH_BASE_STATUS_H
#define HEARTH_BASE_STATUS_H

#include <stddef.h>

enum hr_status {
    HR_OK = 0,
    HR_ERR_IO,          /* a file could not be opened, read or mapped */
    HR_ERR_FORMAT,      /* a file or message is malformed */
    HR_ERR_INVALID,     /* a parameter or request is invalid */
    HR_ERR_UNSUPPORTED, /* valid but not supported by hearth */
    HR_ERR_NOMEM,       /* out of memory (start-up or admission only) */
    HR_ERR_FULL,        /* a pool or queue is full; retry later */
    HR_ERR_NOT_FOUND,   /* a named thing does not exist */
    HR_ERR_CANCELLED,   /* the work was cancelled */
    HR_ERR_INTERNAL,    /* a failure injected by a test hook or an unexpected condition */
};

#define HR_ERRLEN 512

const char *hr_status_str(enum hr_status st);

/* Writes the formatted message into err (when non-NULL) and returns st. */
enum hr_status hr_err(char *err, size_t errlen, enum hr_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes an existing message in err with more context ("file.json: " + old). */
void hr_err_prefix(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void hr_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define HR_ASSERT(c) do { if (!(c)) hr_assert_fail(#c, __FILE__, __LINE__); } while (0)

#endif
