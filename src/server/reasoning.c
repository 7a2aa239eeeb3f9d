/* qwen3 reasoning parser (see reasoning.h). */
#define _GNU_SOURCE /* memmem */
#include "server/reasoning.h"

#include <string.h>

static const char reasoning_open_tag[] = "<think>";
static const char reasoning_close_tag[] = "</think>";

void reasoning_init(struct reasoning *r, bool enabled, bool opened)
{
    memset(r, 0, sizeof *r);
    r->state = !enabled ? REASONING_STATE_OFF : opened ? REASONING_STATE_THINK : REASONING_STATE_START;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t reasoning_partial_suffix(const char *s, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, tag, k))
            return k;
    return 0;
}

static enum hr_status reasoning_step(struct reasoning *r, const char *s, size_t n, struct strbuf *ro,
                                     struct strbuf *co)
{
    enum hr_status st = HR_OK;
    while (n > 0 && st == HR_OK) {
        switch (r->state) {
        case REASONING_STATE_OFF:
        case REASONING_STATE_CONTENT:
            return strbuf_append(co, s, n);
        case REASONING_STATE_START: {
            size_t tl = strlen(reasoning_open_tag);
            size_t m = n < tl ? n : tl;
            if (memcmp(s, reasoning_open_tag, m) != 0) {
                r->state = REASONING_STATE_CONTENT;
                continue;
            }
            if (n < tl) { /* a prefix of the tag: wait for more */
                memcpy(r->hold, s, n);
                r->n_hold = n;
                return HR_OK;
            }
            r->state = REASONING_STATE_THINK;
            s += tl;
            n -= tl;
            continue;
        }
        case REASONING_STATE_THINK: {
            const char *end = memmem(s, n, reasoning_close_tag, strlen(reasoning_close_tag));
            if (end) {
                st = strbuf_append(ro, s, (size_t)(end - s));
                size_t used = (size_t)(end - s) + strlen(reasoning_close_tag);
                s += used;
                n -= used;
                r->state = REASONING_STATE_CONTENT;
                continue;
            }
            size_t k = reasoning_partial_suffix(s, n, reasoning_close_tag);
            st = strbuf_append(ro, s, n - k);
            memcpy(r->hold, s + n - k, k);
            r->n_hold = k;
            return st;
        }
        }
    }
    return st;
}

enum hr_status reasoning_feed(struct reasoning *r, const char *s, size_t n, struct strbuf *reasoning_out,
                              struct strbuf *content_out)
{
    if (r->n_hold == 0)
        return reasoning_step(r, s, n, reasoning_out, content_out);
    /* the held bytes come first: a tag may straddle the two feeds */
    struct strbuf cur = {0};
    strbuf_append(&cur, r->hold, r->n_hold);
    strbuf_append(&cur, s, n);
    r->n_hold = 0;
    enum hr_status st = cur.oom ? HR_ERR_NOMEM : reasoning_step(r, cur.data, cur.len, reasoning_out, content_out);
    strbuf_free(&cur);
    return st;
}

enum hr_status reasoning_flush(struct reasoning *r, struct strbuf *reasoning_out, struct strbuf *content_out)
{
    size_t n = r->n_hold;
    r->n_hold = 0;
    if (!n)
        return HR_OK;
    if (r->state == REASONING_STATE_THINK)
        return strbuf_append(reasoning_out, r->hold, n);
    return strbuf_append(content_out, r->hold, n);
}
