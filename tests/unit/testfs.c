/* Temporary directories and small file helpers for the loader tests. */
#include "testfs.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *testfs_mkdtemp(char *buf, size_t n, const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/hearth_%s_XXXXXX", t && *t ? t : "/tmp", tag);
    return mkdtemp(buf);
}

void testfs_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                testfs_rmtree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int testfs_write(const char *dir, const char *name, const void *data, size_t len)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    size_t put = len ? fwrite(data, 1, len, f) : 0;
    return (fclose(f) == 0 && put == len) ? 0 : -1;
}

int testfs_write_str(const char *dir, const char *name, const char *text)
{
    return testfs_write(dir, name, text, strlen(text));
}

int testfs_copy(const char *src_dir, const char *dst_dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", src_dir, name);
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    int rc = (buf && got == (size_t)n) ? testfs_write(dst_dir, name, buf, (size_t)n) : -1;
    free(buf);
    return rc;
}

int testfs_write_st(const char *dir, const char *name, const char *header, long long forced_len,
                    size_t data_len)
{
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_len;
    uint8_t *buf = malloc(total);
    if (!buf)
        return -1;
    uint64_t len = forced_len >= 0 ? (uint64_t)forced_len : (uint64_t)hl;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(len >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + hl + i] = (uint8_t)i;
    int rc = testfs_write(dir, name, buf, total);
    free(buf);
    return rc;
}
