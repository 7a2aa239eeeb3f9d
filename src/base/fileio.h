/* Whole-file reads and small path helpers. */
#ifndef HEARTH_BASE_FILEIO_H
#define HEARTH_BASE_FILEIO_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Reads the whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL).
 * max_bytes guards against absurd inputs (0: no limit). */
enum hr_status fileio_read_all(const char *path, size_t max_bytes, char **out, size_t *len,
                               char *err, size_t errlen);
/* Writes len bytes atomically enough for our uses (write to path). */
enum hr_status fileio_write_all(const char *path, const void *data, size_t len, char *err, size_t errlen);
bool fileio_exists(const char *path);
/* snprintf(buf, n, "%s/%s", dir, name) with a truncation check. */
enum hr_status fileio_join(char *buf, size_t n, const char *dir, const char *name, char *err, size_t errlen);

#endif
