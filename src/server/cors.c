/* Cross-origin requests (see cors.h). */
#include "server/cors.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool cors_is_space(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* Splits a comma-separated list into trimmed copies. */
static enum hr_status cors_split(const char *list, char ***out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    int cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    char **v = calloc((size_t)cap, sizeof *v);
    if (!v)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && cors_is_space(*a))
            a++;
        while (b > a && cors_is_space(b[-1]))
            b--;
        if (a == b) {
            for (int i = 0; i < *n; i++)
                free(v[i]);
            free(v);
            *n = 0;
            return hr_err(err, errlen, HR_ERR_INVALID, "--allowed-origins: empty entry in '%s'", list);
        }
        if (!(v[*n] = strndup(a, (size_t)(b - a)))) {
            for (int i = 0; i < *n; i++)
                free(v[i]);
            free(v);
            *n = 0;
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        }
        (*n)++;
        if (!*end)
            break;
        p = end + 1;
    }
    *out = v;
    return HR_OK;
}

static bool cors_is_any(const char *list)
{
    if (!list)
        return true;
    while (cors_is_space(*list))
        list++;
    return list[0] == '*' && list[1 + strspn(list + 1, " \t")] == 0;
}

enum hr_status cors_init(struct cors *c, const char *origins, const char *methods, const char *headers,
                         bool credentials, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->credentials = credentials;
    enum hr_status st = cors_split(origins ? origins : "*", &c->origins, &c->n_origins, err, errlen);
    if (st != HR_OK)
        return st;
    for (int i = 0; i < c->n_origins; i++)
        c->any_origin = c->any_origin || !strcmp(c->origins[i], "*");
    if ((methods && !*methods) || (headers && !*headers)) {
        cors_free(c);
        return hr_err(err, errlen, HR_ERR_INVALID, "--allowed-methods and --allowed-headers must not be empty");
    }
    if (!cors_is_any(methods) && !(c->methods = strdup(methods)))
        st = HR_ERR_NOMEM;
    if (st == HR_OK && !cors_is_any(headers) && !(c->headers = strdup(headers)))
        st = HR_ERR_NOMEM;
    if (st != HR_OK) {
        cors_free(c);
        return hr_err(err, errlen, st, "out of memory");
    }
    return HR_OK;
}

void cors_free(struct cors *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_origins; i++)
        free(c->origins[i]);
    free(c->origins);
    free(c->methods);
    free(c->headers);
    memset(c, 0, sizeof *c);
}

bool cors_origin_allowed(const struct cors *c, const char *origin)
{
    if (!origin)
        return false;
    if (c->any_origin)
        return true;
    for (int i = 0; i < c->n_origins; i++)
        if (!strcasecmp(c->origins[i], origin)) /* scheme and host are case-insensitive */
            return true;
    return false;
}

int cors_headers(const struct cors *c, const char *origin, bool preflight, const char *req_method,
                 const char *req_headers, struct cors_header *out)
{
    if (!cors_origin_allowed(c, origin))
        return 0;
    int n = 0;
    /* "*" cannot go with credentials (browsers refuse it): echo the origin then */
    bool echo = !c->any_origin || c->credentials;
    out[n++] = (struct cors_header){"Access-Control-Allow-Origin", echo ? origin : "*"};
    if (echo)
        out[n++] = (struct cors_header){"Vary", "Origin"};
    if (c->credentials)
        out[n++] = (struct cors_header){"Access-Control-Allow-Credentials", "true"};
    if (preflight) {
        out[n++] = (struct cors_header){"Access-Control-Allow-Methods",
                                        c->methods ? c->methods
                                        : req_method && *req_method ? req_method
                                                                    : "GET, POST, OPTIONS"};
        if (c->headers || (req_headers && *req_headers))
            out[n++] = (struct cors_header){"Access-Control-Allow-Headers", c->headers ? c->headers : req_headers};
        out[n++] = (struct cors_header){"Access-Control-Max-Age", "600"};
    }
    return n;
}
