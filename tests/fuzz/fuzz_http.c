/* libFuzzer target: one HTTP request as hearth's glue sees it, over arbitrary bytes: the
 * head (gate.c finds its end and checks it as nginx would), the route its request line
 * names (the server's own api_route_find, on the path as libmicrohttpd hands it over),
 * the body its Content-Length frames, and what a generation route does with the body:
 * the OpenAI parse, after the Responses translation (responses_to_chat) for
 * /v1/responses.  Built by tests/fuzz/build.sh; replayed over tests/fuzz/corpus/http by
 * tests/unit/test_fuzz_replay.c. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/api.h"
#include "server/gate.h"
#include "server/openai.h"
#include "server/responses.h"

static const char *const fuzz_http_models[] = {"m", "/models/m"};

/* The body the head's Content-Length frames (what libmicrohttpd would hand over). */
static size_t fuzz_http_body(const char *head, size_t hl, size_t avail)
{
    size_t cl = 0;
    for (size_t i = 0; i + 15 < hl; i++) {
        if ((i == 0 || head[i - 1] == '\n') && !strncasecmp(head + i, "Content-Length:", 15)) {
            size_t k = i + 15;
            while (k < hl && (head[k] == ' ' || head[k] == '\t'))
                k++;
            while (k < hl && head[k] >= '0' && head[k] <= '9' && cl < ((size_t)1 << 40))
                cl = cl * 10 + (size_t)(head[k++] - '0');
        }
    }
    return cl < avail ? cl : avail;
}

static int fuzz_http_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* HR_OK when the head is accepted, routed and, on a generation route, the body parses. */
static enum hr_status fuzz_http_run(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t hl = gate_head_length(buf, size > GATE_MAX_HEAD_BYTES ? GATE_MAX_HEAD_BYTES : size);
    if (hl == 0)
        return HR_ERR_INVALID; /* incomplete: the gate waits (or says 431 / 408) */
    if (hl > size)
        __builtin_trap();
    struct gate_verdict v;
    gate_head_check(buf, hl, 65536, &v);
    if (v.status) {
        /* a refusal is one of nginx's answers, with a reason */
        static const int ok[] = {400, 413, 417, 431, 501, 505};
        int found = 0;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
            found |= v.status == ok[i];
        if (!found || !v.message || !*v.message || !v.code)
            __builtin_trap();
        return HR_ERR_INVALID;
    }
    /* an accepted head has a request line METHOD SP TARGET SP HTTP/1.x */
    const char *sp1 = memchr(buf, ' ', hl);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', hl - (size_t)(sp1 + 1 - buf)) : NULL;
    if (!sp1 || sp1 == buf || !sp2 || sp2 == sp1 + 1 || (size_t)(sp2 - buf) + 9 > hl || memcmp(sp2 + 1, "HTTP/1.", 7))
        __builtin_trap();
    /* the route: the method, and the target up to its query (libmicrohttpd passes the
     * path alone, %-escapes decoded) */
    char method[32], path[GATE_MAX_HEAD_BYTES + 1];
    size_t ml = (size_t)(sp1 - buf), tl = (size_t)(sp2 - sp1 - 1), pl = 0;
    if (ml >= sizeof method)
        return HR_ERR_INVALID; /* no route has such a method */
    memcpy(method, buf, ml);
    method[ml] = 0;
    for (size_t i = 0; i < tl && sp1[1 + i] != '?'; i++) {
        const char *t = sp1 + 1 + i;
        int hi, lo;
        if (*t == '%' && i + 2 < tl && (hi = fuzz_http_hex(t[1])) >= 0 && (lo = fuzz_http_hex(t[2])) >= 0) {
            path[pl++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            path[pl++] = *t;
        }
    }
    path[pl] = 0;
    const char *allow = NULL;
    const struct api_route_info *route = api_route_find(path, method, &allow);
    if (!route) {
        if (allow && !strcmp(allow, method))
            __builtin_trap(); /* 405 names the method it refused */
        return HR_ERR_NOT_FOUND; /* 404 / 405 */
    }
    enum openai_endpoint ep;
    if (route->route == API_ROUTE_COMPLETIONS)
        ep = OPENAI_ENDPOINT_COMPLETIONS;
    else if (route->route == API_ROUTE_CHAT || route->route == API_ROUTE_RESPONSES)
        ep = OPENAI_ENDPOINT_CHAT;
    else
        return HR_OK;
    size_t bl = fuzz_http_body(buf, hl, size - hl);
    /* an exact-size copy of the body, as the server keeps it */
    char *body = malloc(bl ? bl : 1);
    if (!body)
        return HR_ERR_NOMEM;
    memcpy(body, buf + hl, bl);
    char param[128], err[HR_ERRLEN];
    enum hr_status st;
    if (route->route == API_ROUTE_RESPONSES) {
        /* as responses_handle: a JSON object, translated to the chat body it parses */
        json_t *req = json_loadb(body, bl, JSON_REJECT_DUPLICATES, NULL), *chat = NULL;
        free(body);
        body = NULL;
        if (!req || !json_is_object(req)) {
            json_decref(req);
            return HR_ERR_FORMAT; /* 400 invalid_json */
        }
        err[0] = 0;
        st = responses_to_chat(req, NULL, &chat, param, sizeof param, err, sizeof err);
        json_decref(req);
        if (st != HR_OK) {
            if (!err[0] || openai_http_status(st) < 400 || chat)
                __builtin_trap();
            return st;
        }
        body = chat ? json_dumps(chat, JSON_COMPACT) : NULL;
        json_decref(chat);
        if (!body)
            return HR_ERR_NOMEM;
        bl = strlen(body);
    }
    const struct openai_limits lim = {
        .model_names = fuzz_http_models, .n_model_names = 2, .max_n = 8, .max_prompts = 16, .vocab_size = 1000};
    struct openai_request rq;
    st = openai_request_parse(&rq, ep, body, bl, &lim, param, sizeof param, err, sizeof err);
    if (st != HR_OK && (!err[0] || openai_http_status(st) < 400))
        __builtin_trap();
    openai_request_free(&rq);
    free(body);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_http_run(data, size);
    return 0;
}
