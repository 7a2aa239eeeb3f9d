/* Block files (see disk_file.h). */
#define _GNU_SOURCE
#include "cache/disk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define DISK_FILE_MAGIC "HEARTHKV"
#define DISK_FILE_VERSION 1u
#define DISK_FILE_FIXED 64

void disk_file_name(struct path_key key, char out[DISK_FILE_NAME_MAX])
{
    char hex[PATH_KEY_HEX];
    path_key_hex(key, hex);
    snprintf(out, DISK_FILE_NAME_MAX, "%s%s", hex, DISK_FILE_SUFFIX);
}

static size_t disk_file_header_bytes(const struct disk_block_id *id)
{
    return DISK_FILE_FIXED + strlen(id->ns) + strlen(id->salt) + (size_t)id->block_size * sizeof(int32_t);
}

size_t disk_file_size(const struct disk_block_id *id)
{
    return disk_file_header_bytes(id) + id->data_bytes + sizeof(uint64_t);
}

/* The header of id into buf [disk_file_header_bytes(id)]. */
static void disk_file_header(const struct disk_block_id *id, unsigned char *buf)
{
    uint32_t ns_len = (uint32_t)strlen(id->ns), salt_len = (uint32_t)strlen(id->salt);
    uint32_t version = DISK_FILE_VERSION, bs = (uint32_t)id->block_size;
    uint64_t data = id->data_bytes;
    uint64_t keys[4] = {id->key.lo, id->key.hi, id->parent.lo, id->parent.hi};
    memset(buf, 0, DISK_FILE_FIXED);
    memcpy(buf, DISK_FILE_MAGIC, 8);
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 12, &ns_len, 4);
    memcpy(buf + 16, &salt_len, 4);
    memcpy(buf + 20, &bs, 4);
    memcpy(buf + 24, &data, 8);
    memcpy(buf + 32, keys, sizeof keys);
    unsigned char *p = buf + DISK_FILE_FIXED;
    memcpy(p, id->ns, ns_len);
    p += ns_len;
    memcpy(p, id->salt, salt_len);
    p += salt_len;
    memcpy(p, id->tokens, (size_t)bs * sizeof(int32_t));
}

static bool disk_file_write_full(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool disk_file_read_full(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

enum hr_status disk_file_write(const char *dir, const struct disk_block_id *id, const void *data, uint64_t tag,
                               char *err, size_t errlen)
{
    char name[DISK_FILE_NAME_MAX], path[PATH_MAX], tmp[PATH_MAX];
    disk_file_name(id->key, name);
    int n1 = snprintf(path, sizeof path, "%s/%s", dir, name);
    int n2 = snprintf(tmp, sizeof tmp, "%s/%s%s%ld.%llu", dir, name, DISK_FILE_TMP, (long)getpid(),
                      (unsigned long long)tag);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof path || (size_t)n2 >= sizeof tmp)
        return hr_err(err, errlen, HR_ERR_INVALID, "disk cache: path too long under %s", dir);
    size_t hb = disk_file_header_bytes(id);
    unsigned char *head = malloc(hb);
    if (!head)
        return hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory");
    disk_file_header(id, head);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    XXH3_64bits_update(&hs, head, hb);
    XXH3_64bits_update(&hs, data, id->data_bytes);
    uint64_t sum = XXH3_64bits_digest(&hs);

    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(head);
        return hr_err(err, errlen, HR_ERR_IO, "disk cache: %s: %s", tmp, strerror(errno));
    }
    bool ok = disk_file_write_full(fd, head, hb) && disk_file_write_full(fd, data, id->data_bytes) &&
              disk_file_write_full(fd, &sum, sizeof sum);
    int saved = errno;
    /* The data must be durable before the name appears: a crash leaves a complete
     * file or a temporary one (removed at the next start). */
    if (ok && fsync(fd) != 0) {
        ok = false;
        saved = errno;
    }
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    free(head);
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        return hr_err(err, errlen, HR_ERR_IO, "disk cache: writing %s: %s", path,
                      saved ? strerror(saved) : "short write");
    }
    /* The rename itself is durable once the directory is: without this a power loss
     * could take back a name just given (never leave a torn file).  A directory that
     * cannot be synced keeps the file all the same. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return HR_OK;
}

enum hr_status disk_file_read(const char *dir, const struct disk_block_id *want, void *dst, char *err,
                              size_t errlen)
{
    char name[DISK_FILE_NAME_MAX], path[PATH_MAX];
    disk_file_name(want->key, name);
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return hr_err(err, errlen, HR_ERR_INVALID, "disk cache: path too long under %s", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hr_err(err, errlen, errno == ENOENT ? HR_ERR_NOT_FOUND : HR_ERR_IO, "disk cache: %s: %s", path,
                      strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hr_err(err, errlen, HR_ERR_IO, "disk cache: %s: not a regular file", path);
    }
    /* The size follows from what we want: anything else is not our block. */
    if ((uint64_t)sb.st_size != (uint64_t)disk_file_size(want)) {
        close(fd);
        return hr_err(err, errlen, HR_ERR_FORMAT, "disk cache: %s: %lld bytes, expected %zu (truncated or foreign)",
                      path, (long long)sb.st_size, disk_file_size(want));
    }
    size_t hb = disk_file_header_bytes(want);
    unsigned char *got = malloc(hb), *exp = malloc(hb);
    enum hr_status st = HR_OK;
    uint64_t sum = 0;
    if (!got || !exp) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory");
    } else if (!disk_file_read_full(fd, got, hb) || !disk_file_read_full(fd, dst, want->data_bytes) ||
               !disk_file_read_full(fd, &sum, sizeof sum)) {
        st = hr_err(err, errlen, HR_ERR_FORMAT, "disk cache: %s: short read", path);
    } else {
        disk_file_header(want, exp);
        XXH3_state_t hs;
        XXH3_64bits_reset(&hs);
        XXH3_64bits_update(&hs, got, hb);
        XXH3_64bits_update(&hs, dst, want->data_bytes);
        if (memcmp(got, exp, hb) != 0)
            st = hr_err(err, errlen, HR_ERR_FORMAT,
                        "disk cache: %s: header differs from the block asked (another namespace, salt or path)",
                        path);
        else if (XXH3_64bits_digest(&hs) != sum)
            st = hr_err(err, errlen, HR_ERR_FORMAT, "disk cache: %s: checksum mismatch (corrupt)", path);
    }
    free(got);
    free(exp);
    close(fd);
    return st;
}
