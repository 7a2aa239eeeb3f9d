/* API key checks (see auth.h). */
#include "server/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

enum hr_status auth_init(struct auth *a, const char *const *keys, int n_keys, bool salt_per_key, char *err,
                         size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->salt_per_key = salt_per_key;
    if (n_keys <= 0)
        return HR_OK;
    a->keys = calloc((size_t)n_keys, sizeof *a->keys);
    a->salts = calloc((size_t)n_keys, sizeof *a->salts);
    if (!a->keys || !a->salts) {
        auth_free(a);
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for API keys");
    }
    a->n_keys = n_keys;
    for (int i = 0; i < n_keys; i++) {
        if (!keys[i] || !*keys[i]) {
            auth_free(a);
            return hr_err(err, errlen, HR_ERR_INVALID, "--api-key: a key must not be empty");
        }
        char salt[40];
        snprintf(salt, sizeof salt, "key-%016llx", (unsigned long long)XXH3_64bits(keys[i], strlen(keys[i])));
        a->keys[i] = strdup(keys[i]);
        a->salts[i] = strdup(salt);
        if (!a->keys[i] || !a->salts[i]) {
            auth_free(a);
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for API keys");
        }
    }
    return HR_OK;
}

void auth_free(struct auth *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n_keys; i++) {
        free(a->keys ? a->keys[i] : NULL);
        free(a->salts ? a->salts[i] : NULL);
    }
    free(a->keys);
    free(a->salts);
    memset(a, 0, sizeof *a);
}

bool auth_enabled(const struct auth *a)
{
    return a->n_keys > 0;
}

/* Equal strings, without stopping at the first differing byte. */
static bool auth_equal(const char *a, size_t an, const char *b, size_t bn)
{
    unsigned char d = an != bn;
    size_t n = an < bn ? an : bn;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

int auth_check(const struct auth *a, const char *header)
{
    if (!header)
        return -1;
    while (*header == ' ' || *header == '\t')
        header++;
    if (strncasecmp(header, "Bearer", 6) != 0 || (header[6] != ' ' && header[6] != '\t'))
        return -1;
    const char *k = header + 6;
    while (*k == ' ' || *k == '\t')
        k++;
    size_t n = strlen(k);
    while (n && (k[n - 1] == ' ' || k[n - 1] == '\t'))
        n--;
    int found = -1;
    for (int i = 0; i < a->n_keys; i++)
        if (auth_equal(k, n, a->keys[i], strlen(a->keys[i])) && found < 0)
            found = i;
    return found;
}

const char *auth_salt(const struct auth *a, int k)
{
    if (!a->salt_per_key || k < 0 || k >= a->n_keys)
        return NULL;
    return a->salts[k];
}
