/* Temporary directories and small file helpers for the loader tests. */
#ifndef HEARTH_TESTFS_H
#define HEARTH_TESTFS_H

#include <stddef.h>
#include <stdint.h>

/* Creates a fresh directory under $TMPDIR (or /tmp); returns buf or NULL. */
char *testfs_mkdtemp(char *buf, size_t n, const char *tag);
/* Removes dir and everything below it. */
void testfs_rmtree(const char *dir);
/* Writes len bytes to dir/name; 0 on success. */
int testfs_write(const char *dir, const char *name, const void *data, size_t len);
/* Writes a NUL-terminated string to dir/name. */
int testfs_write_str(const char *dir, const char *name, const char *text);
/* Copies src_dir/name to dst_dir/name; 0 on success. */
int testfs_copy(const char *src_dir, const char *dst_dir, const char *name);
/* A safetensors image: 8-byte little-endian header_len, the header, then data_len
 * bytes of a counting pattern.  header_len = strlen(header) unless forced >= 0. */
int testfs_write_st(const char *dir, const char *name, const char *header, long long forced_len,
                    size_t data_len);

#endif
