/* A growable text buffer for the grammar generators (JSON Schema, regex, choice → GBNF);
 * an allocation failure is sticky and reported once at the end. */
#ifndef HEARTH_GRAMMAR_GBUF_H
#define HEARTH_GRAMMAR_GBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

struct gbuf {
    char *s;    /* [cap], NUL-terminated at len */
    size_t len, cap;
    bool oom;
};

static inline void gbuf_add(struct gbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (!vec_reserve((void **)&b->s, &b->cap, b->len + n + 1, 1, 256)) {
        b->oom = true;
        return;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static inline void gbuf_str(struct gbuf *b, const char *s)
{
    gbuf_add(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static inline void gbuf_fmt(struct gbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        gbuf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gbuf_add(b, big, (size_t)n);
    free(big);
}

/* Appends s[0..n) as a GBNF string literal (quotes included), escaping what GBNF needs. */
static inline void gbuf_literal(struct gbuf *b, const char *s, size_t n)
{
    gbuf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            gbuf_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            gbuf_fmt(b, "\\x%02X", c);
        } else {
            gbuf_add(b, (const char *)&s[i], 1);
        }
    }
    gbuf_add(b, "\"", 1);
}

static inline void gbuf_free(struct gbuf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

#endif
