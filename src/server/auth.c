/* API key checks (see auth.h). */
#include "server/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

enum hr_status auth_init(struct auth *a, const char *const *tenant_keys, int n_tenant, const char *const *admin_keys,
                         int n_admin, bool salt_per_key, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->salt_per_key = salt_per_key;
    n_tenant = n_tenant > 0 ? n_tenant : 0;
    n_admin = n_admin > 0 ? n_admin : 0;
    int n_keys = n_tenant + n_admin;
    a->n_tenant = n_tenant;
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
        const char *key = i < n_tenant ? tenant_keys[i] : admin_keys[i - n_tenant];
        if (!key || !*key) {
            auth_free(a);
            return hr_err(err, errlen, HR_ERR_INVALID, "%s: a key must not be empty",
                          i < n_tenant ? "--api-key" : "--admin-api-key");
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(a->keys[k], key)) {
                auth_free(a);
                return hr_err(err, errlen, HR_ERR_INVALID, "--api-key / --admin-api-key: a key is given twice");
            }
        char salt[40];
        snprintf(salt, sizeof salt, "key-%016llx", (unsigned long long)XXH3_64bits(key, strlen(key)));
        a->keys[i] = strdup(key);
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

bool auth_is_admin(const struct auth *a, int k)
{
    return k >= a->n_tenant && k < a->n_keys;
}

bool auth_has_admin(const struct auth *a)
{
    return a->n_keys > a->n_tenant;
}

const char *auth_salt(const struct auth *a, int k)
{
    if (!a->salt_per_key || k < 0 || k >= a->n_keys)
        return NULL;
    return a->salts[k];
}
