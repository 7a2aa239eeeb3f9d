/* Growable byte buffer (see strbuf.h). */
#include "server/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum hr_status strbuf_reserve(struct strbuf *b, size_t extra)
{
    if (b->oom)
        return HR_ERR_NOMEM;
    if (extra > (size_t)-1 / 2 - b->len) {
        b->oom = true;
        return HR_ERR_NOMEM;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return HR_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return HR_ERR_NOMEM;
    }
    b->data = p;
    b->cap = cap;
    return HR_OK;
}

enum hr_status strbuf_append(struct strbuf *b, const char *s, size_t n)
{
    enum hr_status st = strbuf_reserve(b, n);
    if (st != HR_OK)
        return st;
    if (n)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return HR_OK;
}

enum hr_status strbuf_puts(struct strbuf *b, const char *s)
{
    return strbuf_append(b, s, strlen(s));
}

enum hr_status strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return HR_ERR_NOMEM;
    }
    enum hr_status st = strbuf_reserve(b, (size_t)n);
    if (st != HR_OK)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return HR_OK;
}

void strbuf_consume(struct strbuf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data)
        b->data[b->len] = 0;
}

void strbuf_clear(struct strbuf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = 0;
}

char *strbuf_take(struct strbuf *b, size_t *len)
{
    if (b->oom) {
        strbuf_free(b);
        return NULL;
    }
    if (!b->data && strbuf_reserve(b, 0) != HR_OK)
        return NULL;
    if (!b->data)
        return NULL;
    b->data[b->len] = 0;
    char *p = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void strbuf_free(struct strbuf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}
