/* Cross-origin requests (CORS), as vLLM's --allowed-origins / --allowed-methods /
 * --allowed-headers / --allow-credentials: a browser's preflight (OPTIONS with
 * Access-Control-Request-Method) is answered 204 without authentication, and every
 * reply to an allowed Origin carries Access-Control-Allow-Origin.  Lists are comma
 * separated; "*" allows any origin, method or header (the default, as vLLM's). */
#ifndef HEARTH_SERVER_CORS_H
#define HEARTH_SERVER_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct cors {
    char **origins;      /* [n_origins] exact origins ("https://app.example:8080") */
    int n_origins;
    bool any_origin;     /* "*" among them */
    char *methods;       /* NULL: any ("*"), else the list as given */
    char *headers;       /* NULL: any ("*"), else the list as given */
    bool credentials;    /* Access-Control-Allow-Credentials: true */
};

/* NULL lists take the default "*".  HR_ERR_INVALID for an empty entry. */
enum hr_status cors_init(struct cors *c, const char *origins, const char *methods, const char *headers,
                         bool credentials, char *err, size_t errlen);
void cors_free(struct cors *c);

bool cors_origin_allowed(const struct cors *c, const char *origin);

#define CORS_MAX_HEADERS 6

struct cors_header {
    const char *name;
    const char *value;   /* borrowed from c or from the request's own headers */
};

/* The headers of a reply to a request from origin (NULL: not a cross-origin request,
 * nothing to add).  preflight: the answer to OPTIONS, which also names the methods and
 * headers (a "*" list echoes what the browser asks for: req_method, req_headers).
 * Returns how many were written into out[CORS_MAX_HEADERS]; 0 for a refused origin. */
int cors_headers(const struct cors *c, const char *origin, bool preflight, const char *req_method,
                 const char *req_headers, struct cors_header *out);

#endif
