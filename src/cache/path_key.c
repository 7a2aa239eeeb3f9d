/* Block path keys (see path_key.h). */
#include "cache/path_key.h"

#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

struct path_key path_key_root(const char *ns, const char *salt)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    /* The NUL between them keeps ("ab", "c") apart from ("a", "bc"). */
    XXH3_128bits_update(&st, ns, strlen(ns) + 1);
    if (salt)
        XXH3_128bits_update(&st, salt, strlen(salt));
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (struct path_key){.lo = h.low64, .hi = h.high64};
}

struct path_key path_key_child(struct path_key parent, const int32_t *tokens, int block_size)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint64_t p[2] = {parent.lo, parent.hi};
    XXH3_128bits_update(&st, p, sizeof p);
    XXH3_128bits_update(&st, tokens, (size_t)block_size * sizeof *tokens);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (struct path_key){.lo = h.low64, .hi = h.high64};
}

void path_key_hex(struct path_key k, char out[PATH_KEY_HEX])
{
    snprintf(out, PATH_KEY_HEX, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

static int path_key_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool path_key_parse(const char *s, struct path_key *out)
{
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        int v = path_key_nibble(s[i]);
        if (v < 0)
            return false;
        w[i / 16] = w[i / 16] << 4 | (uint64_t)v;
    }
    out->hi = w[0];
    out->lo = w[1];
    return true;
}
