/* CORS (src/server/cors.c): which origins are allowed and which headers a reply and a
 * preflight carry. */
#include <string.h>

#include "server/cors.h"
#include "test.h"

static const char *hdr(const struct cors_header *h, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(h[i].name, name))
            return h[i].value;
    return NULL;
}

static void test_any_origin(void)
{
    char err[HR_ERRLEN];
    struct cors c;
    CHECK_OK(cors_init(&c, NULL, NULL, NULL, false, err, sizeof err), err);
    struct cors_header h[CORS_MAX_HEADERS];
    CHECK(cors_headers(&c, NULL, false, NULL, NULL, h) == 0); /* not cross-origin */
    int n = cors_headers(&c, "http://a.test", false, NULL, NULL, h);
    CHECK(n == 1 && !strcmp(hdr(h, n, "Access-Control-Allow-Origin"), "*"));
    n = cors_headers(&c, "http://a.test", true, "POST", "authorization, content-type", h);
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Methods"), "POST"));
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Headers"), "authorization, content-type"));
    CHECK(hdr(h, n, "Access-Control-Max-Age") != NULL);
    CHECK(hdr(h, n, "Access-Control-Allow-Credentials") == NULL);
    cors_free(&c);
}

static void test_listed_origins(void)
{
    char err[HR_ERRLEN];
    struct cors c;
    CHECK_OK(cors_init(&c, "http://a.test, https://b.test:8443", "GET,POST", "content-type", true, err, sizeof err),
             err);
    struct cors_header h[CORS_MAX_HEADERS];
    CHECK(cors_origin_allowed(&c, "https://B.test:8443"));
    CHECK(!cors_origin_allowed(&c, "http://evil.test"));
    CHECK(!cors_origin_allowed(&c, "http://a.test.evil"));
    CHECK(cors_headers(&c, "http://evil.test", true, "POST", NULL, h) == 0);
    int n = cors_headers(&c, "http://a.test", true, "DELETE", "x-other", h);
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Origin"), "http://a.test"));
    CHECK(!strcmp(hdr(h, n, "Vary"), "Origin"));
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Credentials"), "true"));
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Methods"), "GET,POST"));
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Headers"), "content-type"));
    cors_free(&c);
    /* "*" with credentials echoes the origin (browsers refuse "*" with credentials) */
    CHECK_OK(cors_init(&c, "*", NULL, NULL, true, err, sizeof err), err);
    n = cors_headers(&c, "http://x.test", false, NULL, NULL, h);
    CHECK(!strcmp(hdr(h, n, "Access-Control-Allow-Origin"), "http://x.test"));
    cors_free(&c);
    CHECK(cors_init(&c, "http://a.test,,http://b.test", NULL, NULL, false, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "empty entry") != NULL);
    CHECK(cors_init(&c, "*", "", NULL, false, err, sizeof err) == HR_ERR_INVALID);
}

int main(void)
{
    TEST_RUN(test_any_origin);
    TEST_RUN(test_listed_origins);
    TEST_END();
}
