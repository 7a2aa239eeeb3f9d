/* One KV block as a file of the disk tier.
 *
 * Layout (little-endian, as the host writes it): a 64-byte fixed header — magic
 * "HEARTHKV", version, the lengths of the namespace and salt, block size, data bytes,
 * the block's path key and its parent's — then the namespace description, the salt,
 * the block's tokens [block_size], the KV data [data_bytes] (every layer, as the
 * backend's kv_export writes it), and last an XXH3-64 of everything before it.
 *
 * A file is written under a temporary name, fsync'd, then renamed: a reader sees a
 * complete file or none.  A read compares every header field with the block it
 * wants (namespace and salt byte for byte, keys, tokens, sizes) and the checksum
 * over header and data before it hands the data over. */
#ifndef HEARTH_CACHE_DISK_FILE_H
#define HEARTH_CACHE_DISK_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cache/path_key.h"

/* What a block file is (or must be). */
struct disk_block_id {
    const char *ns;            /* namespace description (path_key_root's ns) */
    const char *salt;          /* cache_salt, "" for none */
    struct path_key key, parent;
    const int32_t *tokens;     /* [block_size] */
    int block_size;
    size_t data_bytes;
};

#define DISK_FILE_SUFFIX ".kvb"
#define DISK_FILE_TMP ".tmp."  /* in the names of files being written */
/* "<32 hex digits>.kvb" and a NUL */
#define DISK_FILE_NAME_MAX 40

void disk_file_name(struct path_key key, char out[DISK_FILE_NAME_MAX]);
/* Bytes of the file of id. */
size_t disk_file_size(const struct disk_block_id *id);

/* Writes dir/<name> atomically (temporary name, fsync, rename); tag makes the
 * temporary name unique among concurrent writers.  HR_ERR_IO with the reason (a full
 * disk, a read-only directory); nothing is left behind on failure. */
enum hr_status disk_file_write(const char *dir, const struct disk_block_id *id, const void *data, uint64_t tag,
                               char *err, size_t errlen);

/* Reads dir/<name of want->key> into dst [want->data_bytes] if it is exactly the block
 * want describes and its checksum holds.  HR_ERR_NOT_FOUND: no such file; HR_ERR_IO:
 * it cannot be read; HR_ERR_FORMAT: it is not that block (truncated, torn, foreign,
 * corrupt) and dst must not be used. */
enum hr_status disk_file_read(const char *dir, const struct disk_block_id *want, void *dst, char *err,
                              size_t errlen);

#endif
