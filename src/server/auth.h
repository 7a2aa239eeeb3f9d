/* API keys: "Authorization: Bearer KEY" against the --api-key list and the
 * --admin-api-key list (none of either: no auth).  Tenant keys reach the API; admin keys
 * reach it too, plus the admin endpoints (cache reset, reload, stats).  With salt_per_key each key gets its own prefix-cache namespace (cache_salt), derived
 * from a hash of the key so that the key itself never becomes a label. */
#ifndef HEARTH_SERVER_AUTH_H
#define HEARTH_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct auth {
    char **keys;   /* [n_keys] tenant keys first, then the admin keys */
    char **salts;  /* [n_keys] "key-<hash>", when salt_per_key */
    int n_keys;
    int n_tenant;  /* keys[0..n_tenant) are tenant keys, the rest admin keys */
    bool salt_per_key;
};

enum hr_status auth_init(struct auth *a, const char *const *keys, int n_keys, const char *const *admin_keys,
                         int n_admin, bool salt_per_key, char *err, size_t errlen);
void auth_free(struct auth *a);
bool auth_enabled(const struct auth *a);
/* The index of the key an Authorization header value presents, or -1 (missing, not
 * Bearer, or unknown).  Compares in time independent of where keys differ. */
int auth_check(const struct auth *a, const char *header);
/* Key index k is an admin key. */
bool auth_is_admin(const struct auth *a, int k);
/* Some admin key is configured. */
bool auth_has_admin(const struct auth *a);
/* The cache_salt forced for key index k, or NULL when keys share the client's salt. */
const char *auth_salt(const struct auth *a, int k);

#endif
