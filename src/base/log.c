/* Leveled logging (see log.h); the level may come from $HEARTH_LOG (debug|info|warn|error|off)
 * and the format from $HEARTH_LOG_FORMAT (text|json). */
#include "base/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int log_level_cur = -1;
static int log_format_cur = -1;

void log_set_level(enum log_level lvl) { log_level_cur = (int)lvl; }
void log_set_format(enum log_format fmt) { log_format_cur = (int)fmt; }

static int log_level_get(void)
{
    if (log_level_cur < 0) {
        const char *e = getenv("HEARTH_LOG");
        log_level_cur = LOG_LEVEL_INFO;
        if (e) {
            static const char *names[] = {"debug", "info", "warn", "error", "off"};
            for (int i = 0; i < 5; i++)
                if (!strcmp(e, names[i]))
                    log_level_cur = i;
        }
    }
    return log_level_cur;
}

static int log_format_get(void)
{
    if (log_format_cur < 0) {
        const char *e = getenv("HEARTH_LOG_FORMAT");
        log_format_cur = e && !strcmp(e, "json") ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
    }
    return log_format_cur;
}

bool log_enabled(enum log_level lvl) { return (int)lvl >= log_level_get() && lvl != LOG_LEVEL_OFF; }

/* ---------------------------------------------------------------- the line */

/* A line being built: on the stack, on the heap once it outgrows that. */
struct log_line {
    char *data;   /* [cap] */
    size_t len, cap;
    bool heap;
    bool oom;     /* a piece was dropped: the line is cut short */
};

static void log_put(struct log_line *l, const char *s, size_t n)
{
    if (l->oom)
        return;
    if (l->len + n + 1 > l->cap) {
        size_t cap = l->cap * 2;
        while (cap < l->len + n + 1)
            cap *= 2;
        char *d = l->heap ? realloc(l->data, cap) : malloc(cap);
        if (!d) {
            l->oom = true;
            return;
        }
        if (!l->heap)
            memcpy(d, l->data, l->len);
        l->data = d;
        l->cap = cap;
        l->heap = true;
    }
    memcpy(l->data + l->len, s, n);
    l->len += n;
}

static void log_puts(struct log_line *l, const char *s) { log_put(l, s, strlen(s)); }

static void log_printf(struct log_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_printf(struct log_line *l, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        log_put(l, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of the valid UTF-8 sequence at s (0: not valid). */
static size_t log_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return k;
}

/* s between double quotes, JSON-escaped; bytes that are not UTF-8 become U+FFFD, so a
 * JSON line stays valid whatever a client sent.  Text lines use the same escapes. */
static void log_put_quoted(struct log_line *l, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    log_put(l, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            log_put(l, e, 2);
            i++;
        } else if (c == '\n') {
            log_puts(l, "\\n");
            i++;
        } else if (c == '\t') {
            log_puts(l, "\\t");
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            log_printf(l, "\\u%04x", c);
            i++;
        } else {
            size_t k = log_utf8_len(s + i, n - i);
            if (k == 0) {
                log_puts(l, "\\ufffd");
                i++;
            } else {
                log_put(l, (const char *)s + i, k);
                i += k;
            }
        }
    }
    log_put(l, "\"", 1);
}

/* A text value: bare when it is plain, quoted (escaped) otherwise. */
static void log_put_text_value(struct log_line *l, const char *s)
{
    bool plain = *s != 0;
    for (const char *p = s; *p && plain; p++)
        plain = (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f && *p != '"' && *p != '=' && *p != '\\';
    if (plain)
        log_puts(l, s);
    else
        log_put_quoted(l, s);
}

static const char *const log_tags[] = {"debug", "info", "warn", "error", ""};

static void log_line_emit(enum log_level lvl, const char *msg, const struct log_field *f, int n)
{
    char stack[1024];
    struct log_line l = {.data = stack, .cap = sizeof stack};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    bool json = log_format_get() == LOG_FORMAT_JSON;
    if (json) {
        log_printf(&l, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",", tm.tm_year + 1900, tm.tm_mon + 1,
                   tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
        log_printf(&l, "\"level\":\"%s\",\"msg\":", log_tags[lvl]);
        log_put_quoted(&l, msg);
    } else {
        log_printf(&l, "%02d:%02d:%02d.%03ld hearth %s: ", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                   log_tags[lvl]);
        log_puts(&l, msg);
    }
    for (int i = 0; i < n; i++) {
        log_printf(&l, json ? ",\"%s\":" : " %s=", f[i].key);
        switch (f[i].type) {
        case LOG_FIELD_STR:
            if (!f[i].str)
                log_puts(&l, json ? "null" : "-");
            else if (json)
                log_put_quoted(&l, f[i].str);
            else
                log_put_text_value(&l, f[i].str);
            break;
        case LOG_FIELD_INT:
            log_printf(&l, "%lld", f[i].i);
            break;
        case LOG_FIELD_BOOL:
            log_puts(&l, f[i].i ? "true" : "false");
            break;
        case LOG_FIELD_NUM:
            if (isfinite(f[i].num))
                log_printf(&l, "%.3f", f[i].num);
            else
                log_puts(&l, json ? "null" : "-");
            break;
        }
    }
    log_puts(&l, json ? "}\n" : "\n");
    if (l.oom) { /* cut short: say so rather than print half a JSON object */
        static const char cut[] = "hearth: a log line did not fit in memory\n";
        fwrite(cut, 1, sizeof cut - 1, stderr);
    } else {
        fwrite(l.data, 1, l.len, stderr); /* one write: lines of concurrent threads do not mix */
    }
    if (l.heap)
        free(l.data);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    if (!log_enabled(lvl))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line_emit(lvl, msg, NULL, 0);
}

void log_fields(enum log_level lvl, const char *msg, const struct log_field *fields, int n_fields)
{
    if (!log_enabled(lvl))
        return;
    log_line_emit(lvl, msg, fields, n_fields);
}
