/* Whole-file reads and small path helpers. */
#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum hr_status fileio_read_all(const char *path, size_t max_bytes, char **out, size_t *len,
                               char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return hr_err(err, errlen, HR_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return hr_err(err, errlen, HR_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (max_bytes && size > max_bytes) {
        fclose(f);
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: file too large (%zu bytes, limit %zu)", path,
                      size, max_bytes);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    if (got != size) {
        free(buf);
        return hr_err(err, errlen, HR_ERR_IO, "%s: short read", path);
    }
    buf[size] = 0;
    *out = buf;
    *len = size;
    return HR_OK;
}

enum hr_status fileio_write_all(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return hr_err(err, errlen, HR_ERR_IO, "%s: %s", path, strerror(errno));
    size_t put = fwrite(data, 1, len, f);
    int rc = fclose(f);
    if (put != len || rc != 0)
        return hr_err(err, errlen, HR_ERR_IO, "%s: write failed", path);
    return HR_OK;
}

bool fileio_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

enum hr_status fileio_join(char *buf, size_t n, const char *dir, const char *name, char *err, size_t errlen)
{
    int k = snprintf(buf, n, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= n)
        return hr_err(err, errlen, HR_ERR_INVALID, "path too long: %s/%s", dir, name);
    return HR_OK;
}
