/* libFuzzer target: one HTTP request as hearth's glue sees it, over arbitrary bytes: the
 * head (gate.c finds its end and checks it as nginx would), the route its request line
 * names, the body its Content-Length frames, and the OpenAI parse of a generation
 * route's body.  Built by tests/fuzz/build.sh; replayed over tests/fuzz/corpus/http by
 * tests/unit/test_fuzz_replay.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/gate.h"
#include "server/openai.h"

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

/* HR_OK when the head is accepted and, on a generation route, the body parses. */
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
    size_t tl = (size_t)(sp2 - sp1 - 1);
    int ep = -1;
    if (tl == 15 && !memcmp(sp1 + 1, "/v1/completions", 15))
        ep = OPENAI_ENDPOINT_COMPLETIONS;
    else if (tl == 20 && !memcmp(sp1 + 1, "/v1/chat/completions", 20))
        ep = OPENAI_ENDPOINT_CHAT;
    if (ep < 0)
        return HR_OK;
    size_t bl = fuzz_http_body(buf, hl, size - hl);
    const struct openai_limits lim = {
        .model_names = fuzz_http_models, .n_model_names = 2, .max_n = 8, .max_prompts = 16, .vocab_size = 1000};
    struct openai_request rq;
    char param[128], err[HR_ERRLEN];
    /* an exact-size copy of the body, as the server keeps it */
    char *body = malloc(bl ? bl : 1);
    if (!body)
        return HR_ERR_NOMEM;
    memcpy(body, buf + hl, bl);
    enum hr_status st = openai_request_parse(&rq, (enum openai_endpoint)ep, body, bl, &lim, param, sizeof param,
                                             err, sizeof err);
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
