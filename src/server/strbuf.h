/* A growable byte buffer for building response bodies and SSE frames.  Allocation
 * failure is sticky: the buffer stops growing, every later append reports
 * HR_ERR_NOMEM, and the caller checks once at the end. */
#ifndef HEARTH_SERVER_STRBUF_H
#define HEARTH_SERVER_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct strbuf {
    char *data; /* [cap], NUL-terminated after len once anything was appended */
    size_t len;
    size_t cap;
    bool oom;   /* an append failed: the contents are incomplete */
};

enum hr_status strbuf_append(struct strbuf *b, const char *s, size_t n);
enum hr_status strbuf_puts(struct strbuf *b, const char *s);
enum hr_status strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes (what a client has been sent). */
void strbuf_consume(struct strbuf *b, size_t n);
void strbuf_clear(struct strbuf *b);
/* Hands the data over (malloc'd, NUL-terminated; "" when empty) and empties b; NULL on oom. */
char *strbuf_take(struct strbuf *b, size_t *len);
void strbuf_free(struct strbuf *b);

#endif
