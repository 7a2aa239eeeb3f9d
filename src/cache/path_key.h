/* The identity of a block's token path inside a namespace, shared by the prefix
 * cache (memory) and the disk tier (file names and headers).
 *
 * key(root) = XXH3-128 of the namespace description and the cache_salt;
 * key(block) = XXH3-128 of its parent's key and its own tokens.  So a key names the
 * whole path from the root (every token before the block's end) and its namespace;
 * the disk tier still compares the namespace, salt, parent key and tokens exactly. */
#ifndef HEARTH_CACHE_PATH_KEY_H
#define HEARTH_CACHE_PATH_KEY_H

#include <stdbool.h>
#include <stdint.h>

struct path_key {
    uint64_t lo, hi;
};

/* ns: the engine's namespace description (model fingerprint, KV dtype, block size,
 * kernel variant); salt: the request's cache_salt ("" or NULL for none). */
struct path_key path_key_root(const char *ns, const char *salt);
/* tokens [block_size] of the child of parent. */
struct path_key path_key_child(struct path_key parent, const int32_t *tokens, int block_size);

static inline bool path_key_eq(struct path_key a, struct path_key b) { return a.lo == b.lo && a.hi == b.hi; }

/* 32 lowercase hex digits and a NUL. */
#define PATH_KEY_HEX 33
void path_key_hex(struct path_key k, char out[PATH_KEY_HEX]);
/* Parses exactly 32 hex digits; false otherwise. */
bool path_key_parse(const char *s, struct path_key *out);

#endif
