/* The regex translator: recursive descent over the pattern, writing GBNF as it goes. */
#include "grammar/regex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGEX_MAX_REPEAT 1000
#define REGEX_MAX_NESTING 64
#define REGEX_MAX_RANGES 256

struct rx {
    const char *s;
    size_t n, i;
    bool json;
    int depth;
    enum hr_status st;
    char *err;
    size_t errlen;
};

struct rset {
    uint32_t lo[REGEX_MAX_RANGES], hi[REGEX_MAX_RANGES];
    int n;
};

__attribute__((format(printf, 2, 3))) static void rx_fail(struct rx *r, const char *fmt, ...)
{
    if (r->st != HR_OK)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->st = hr_err(r->err, r->errlen, HR_ERR_INVALID, "regex error at offset %zu: %s", r->i, msg);
}

static int rx_peek(const struct rx *r)
{
    return r->i < r->n ? (unsigned char)r->s[r->i] : -1;
}

static void rset_add(struct rx *r, struct rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n >= REGEX_MAX_RANGES) {
        rx_fail(r, "character class too large");
        return;
    }
    s->lo[s->n] = lo;
    s->hi[s->n++] = hi;
}

static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorted, merged ranges. */
static void rset_norm(struct rset *s)
{
    uint32_t pairs[REGEX_MAX_RANGES][2];
    for (int i = 0; i < s->n; i++) {
        pairs[i][0] = s->lo[i];
        pairs[i][1] = s->hi[i];
    }
    qsort(pairs, (size_t)s->n, sizeof pairs[0], cmp_u32pair);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m > 0 && pairs[i][0] <= s->hi[m - 1] + 1) {
            if (pairs[i][1] > s->hi[m - 1])
                s->hi[m - 1] = pairs[i][1];
        } else {
            s->lo[m] = pairs[i][0];
            s->hi[m++] = pairs[i][1];
        }
    }
    s->n = m;
}

static void rset_negate(struct rset *s)
{
    rset_norm(s);
    struct rset t = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] > next) {
            t.lo[t.n] = next;
            t.hi[t.n++] = s->lo[i] - 1;
        }
        next = s->hi[i] + 1;
    }
    if (next <= 0x10FFFF) {
        t.lo[t.n] = next;
        t.hi[t.n++] = 0x10FFFF;
    }
    *s = t;
}

static void rset_union(struct rx *r, struct rset *d, const struct rset *s)
{
    for (int i = 0; i < s->n; i++)
        rset_add(r, d, s->lo[i], s->hi[i]);
}

static const uint32_t space_ranges[][2] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                           {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                           {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

/* \d \w \s and their negations into s; false when c is not one of them. */
static bool class_escape(struct rx *r, int c, struct rset *s)
{
    struct rset t = {.n = 0};
    switch (c | 0x20) {
    case 'd':
        rset_add(r, &t, '0', '9');
        break;
    case 'w':
        rset_add(r, &t, '0', '9');
        rset_add(r, &t, 'A', 'Z');
        rset_add(r, &t, '_', '_');
        rset_add(r, &t, 'a', 'z');
        break;
    case 's':
        for (size_t i = 0; i < sizeof space_ranges / sizeof space_ranges[0]; i++)
            rset_add(r, &t, space_ranges[i][0], space_ranges[i][1]);
        break;
    default:
        return false;
    }
    if (c >= 'A' && c <= 'Z')
        rset_negate(&t);
    rset_union(r, s, &t);
    return true;
}

static uint32_t read_utf8(struct rx *r)
{
    const unsigned char *u = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    int len = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > left) {
        rx_fail(r, "invalid UTF-8");
        return 0;
    }
    uint32_t cp = len == 1 ? u[0] : len == 2 ? (u[0] & 0x1Fu) : len == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) {
            rx_fail(r, "invalid UTF-8");
            return 0;
        }
        cp = cp << 6 | (u[k] & 0x3Fu);
    }
    r->i += (size_t)len;
    return cp;
}

static int hexv(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* An escape after the backslash: a code point, or a class (returns -1, s filled). */
static int64_t read_escape(struct rx *r, struct rset *s)
{
    int c = rx_peek(r);
    if (c < 0) {
        rx_fail(r, "a trailing backslash");
        return 0;
    }
    r->i++;
    if (class_escape(r, c, s))
        return -1;
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'b': case 'B':
        rx_fail(r, "word boundaries (\\%c) are not supported", c);
        return 0;
    case 'p': case 'P':
        rx_fail(r, "Unicode property escapes (\\%c{...}) are not supported", c);
        return 0;
    default:
        if (c >= '1' && c <= '9') {
            rx_fail(r, "backreferences are not supported");
            return 0;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            rx_fail(r, "unknown escape \\%c", c);
            return 0;
        }
        r->i--;
        return read_utf8(r);
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexv(rx_peek(r));
        if (h < 0) {
            rx_fail(r, "\\%c needs %d hex digits", c, digits);
            return 0;
        }
        v = v << 4 | (uint32_t)h;
        r->i++;
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
        rx_fail(r, "surrogate code points are not supported");
        return 0;
    }
    return v;
}

static bool json_must_escape(uint32_t cp)
{
    return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F;
}

static void put_cp_escaped(struct gbuf *o, uint32_t cp)
{
    if (cp < 0x10000)
        gbuf_fmt(o, "\\u%04X", cp);
    else
        gbuf_fmt(o, "\\U%08X", cp);
}

/* One literal character. */
static void emit_cp(struct rx *r, struct gbuf *o, uint32_t cp)
{
    if (r->json && json_must_escape(cp)) {
        char esc[8];
        const char *m = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '\n' ? "\\n" : cp == '\t' ? "\\t"
                        : cp == '\r' ? "\\r" : NULL;
        if (m)
            snprintf(esc, sizeof esc, "%s", m);
        else
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        gbuf_literal(o, esc, strlen(esc));
        return;
    }
    gbuf_str(o, "[");
    put_cp_escaped(o, cp);
    gbuf_str(o, "]");
}

static void emit_set(struct rx *r, struct gbuf *o, struct rset *s)
{
    rset_norm(s);
    struct rset plain = {.n = 0};
    uint32_t esc[40];
    int n_esc = 0;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->lo[i], hi = s->hi[i];
        if (r->json) {
            for (uint32_t cp = lo; cp <= hi && cp < 0x80; cp++)
                if (json_must_escape(cp) && n_esc < 40)
                    esc[n_esc++] = cp;
            /* The range minus the characters JSON escapes. */
            uint32_t a = lo;
            while (a <= hi) {
                while (a <= hi && a < 0x80 && json_must_escape(a))
                    a++;
                if (a > hi)
                    break;
                uint32_t b = a;
                while (b < hi && !(b + 1 < 0x80 && json_must_escape(b + 1)))
                    b++;
                plain.lo[plain.n] = a;
                plain.hi[plain.n++] = b;
                a = b + 1;
            }
        } else {
            plain.lo[plain.n] = lo;
            plain.hi[plain.n++] = hi;
        }
    }
    gbuf_str(o, "(");
    bool first = true;
    if (plain.n) {
        gbuf_str(o, "[");
        for (int i = 0; i < plain.n; i++) {
            put_cp_escaped(o, plain.lo[i]);
            if (plain.hi[i] != plain.lo[i]) {
                gbuf_str(o, "-");
                put_cp_escaped(o, plain.hi[i]);
            }
        }
        gbuf_str(o, "]");
        first = false;
    }
    for (int i = 0; i < n_esc; i++) {
        if (!first)
            gbuf_str(o, " | ");
        first = false;
        emit_cp(r, o, esc[i]);
    }
    if (first)
        gbuf_str(o, "[^\\x00-\\U0010FFFF]"); /* the empty set */
    gbuf_str(o, ")");
}

static void parse_class(struct rx *r, struct gbuf *o)
{
    r->i++; /* [ */
    bool neg = false;
    if (rx_peek(r) == '^') {
        neg = true;
        r->i++;
    }
    struct rset s = {.n = 0};
    bool first = true;
    while (r->st == HR_OK) {
        int c = rx_peek(r);
        if (c < 0) {
            rx_fail(r, "unterminated character class");
            return;
        }
        if (c == ']' && !first)
            break;
        first = false;
        int64_t lo;
        if (c == '\\') {
            r->i++;
            lo = read_escape(r, &s);
        } else {
            lo = read_utf8(r);
        }
        if (lo < 0)
            continue;
        int64_t hi = lo;
        if (rx_peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
            r->i++;
            if (rx_peek(r) == '\\') {
                r->i++;
                struct rset dummy = {.n = 0};
                hi = read_escape(r, &dummy);
                if (hi < 0) {
                    rx_fail(r, "a class escape cannot end a range");
                    return;
                }
            } else {
                hi = read_utf8(r);
            }
            if (hi < lo) {
                rx_fail(r, "class range out of order");
                return;
            }
        }
        rset_add(r, &s, (uint32_t)lo, (uint32_t)hi);
    }
    r->i++; /* ] */
    if (neg)
        rset_negate(&s);
    emit_set(r, o, &s);
}

static void parse_alt(struct rx *r, struct gbuf *o);

static long read_num(struct rx *r)
{
    long v = 0;
    int d = 0;
    while (rx_peek(r) >= '0' && rx_peek(r) <= '9') {
        v = v * 10 + (rx_peek(r) - '0');
        if (v > REGEX_MAX_REPEAT) {
            rx_fail(r, "repetition count above %d", REGEX_MAX_REPEAT);
            return -1;
        }
        r->i++;
        d++;
    }
    return d ? v : -1;
}

static void parse_seq(struct rx *r, struct gbuf *o)
{
    bool any = false;
    while (r->st == HR_OK) {
        int c = rx_peek(r);
        if (c < 0 || c == '|' || c == ')')
            break;
        size_t item = o->len;
        if (any)
            gbuf_str(o, " ");
        item = o->len;
        if (c == '(') {
            r->i++;
            if (rx_peek(r) == '?') {
                r->i++;
                int k = rx_peek(r);
                if (k == ':') {
                    r->i++;
                } else if (k == '<' && r->i + 1 < r->n && r->s[r->i + 1] != '=' && r->s[r->i + 1] != '!') {
                    while (rx_peek(r) >= 0 && rx_peek(r) != '>')
                        r->i++;
                    r->i++;
                } else {
                    rx_fail(r, "lookaround and (?%c groups are not supported", k < 0 ? '?' : k);
                    return;
                }
            }
            if (++r->depth > REGEX_MAX_NESTING) {
                rx_fail(r, "groups nested deeper than %d", REGEX_MAX_NESTING);
                return;
            }
            gbuf_str(o, "(");
            parse_alt(r, o);
            gbuf_str(o, ")");
            r->depth--;
            if (rx_peek(r) != ')') {
                rx_fail(r, "missing ')'");
                return;
            }
            r->i++;
        } else if (c == '[') {
            parse_class(r, o);
        } else if (c == '.') {
            r->i++;
            struct rset s = {.n = 0};
            rset_add(r, &s, '\n', '\n');
            rset_negate(&s);
            emit_set(r, o, &s);
        } else if (c == '^') {
            r->i++;
            if (item != 0 && !(item == 1 && o->s[0] == '(')) {
                /* only at the very start */
            }
            if (r->i != 1) {
                rx_fail(r, "'^' is supported only at the start of the pattern");
                return;
            }
            if (o->len > item)
                o->len = item;
            continue;
        } else if (c == '$') {
            r->i++;
            if (r->i != r->n) {
                rx_fail(r, "'$' is supported only at the end of the pattern");
                return;
            }
            continue;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            rx_fail(r, "'%c' has nothing to repeat", c);
            return;
        } else if (c == '\\') {
            r->i++;
            struct rset s = {.n = 0};
            int64_t cp = read_escape(r, &s);
            if (cp < 0)
                emit_set(r, o, &s);
            else
                emit_cp(r, o, (uint32_t)cp);
        } else {
            emit_cp(r, o, read_utf8(r));
        }
        any = true;
        /* Quantifiers. */
        c = rx_peek(r);
        if (c == '*' || c == '+' || c == '?') {
            r->i++;
            char q[2] = {(char)c, 0};
            gbuf_str(o, q);
        } else if (c == '{') {
            size_t save = r->i;
            r->i++;
            long lo = read_num(r), hi = lo;
            if (lo >= 0 && rx_peek(r) == ',') {
                r->i++;
                hi = rx_peek(r) == '}' ? -2 : read_num(r);
            }
            if (lo < 0 || hi == -1 || rx_peek(r) != '}') {
                if (r->st != HR_OK)
                    return;
                r->i = save; /* a literal '{' */
                rx_fail(r, "malformed quantifier");
                return;
            }
            r->i++;
            if (hi >= 0 && hi < lo) {
                rx_fail(r, "quantifier {%ld,%ld} out of order", lo, hi);
                return;
            }
            if (hi == -2)
                gbuf_fmt(o, "{%ld,}", lo);
            else
                gbuf_fmt(o, "{%ld,%ld}", lo, hi);
        } else {
            continue;
        }
        if (rx_peek(r) == '?')
            r->i++; /* lazy: the same language */
        c = rx_peek(r);
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            rx_fail(r, "a quantifier after a quantifier");
            return;
        }
    }
    if (!any)
        gbuf_str(o, "\"\"");
}

static void parse_alt(struct rx *r, struct gbuf *o)
{
    parse_seq(r, o);
    while (r->st == HR_OK && rx_peek(r) == '|') {
        r->i++;
        gbuf_str(o, " | ");
        parse_seq(r, o);
    }
}

enum hr_status regex_to_gbnf(const char *re, size_t len, bool json_string, struct gbuf *out, char *err,
                             size_t errlen)
{
    if (len > REGEX_MAX_BYTES)
        return hr_err(err, errlen, HR_ERR_INVALID, "regex: %zu bytes (at most %d)", len, REGEX_MAX_BYTES);
    struct rx r = {.s = re, .n = len, .json = json_string, .err = err, .errlen = errlen};
    gbuf_str(out, "(");
    parse_alt(&r, out);
    gbuf_str(out, ")");
    if (r.st == HR_OK && r.i != r.n)
        rx_fail(&r, "unmatched ')'");
    if (r.st == HR_OK && out->oom)
        return hr_err(err, errlen, HR_ERR_NOMEM, "regex: out of memory");
    return r.st;
}

enum hr_status regex_grammar(const char *re, size_t len, char **gbnf, char *err, size_t errlen)
{
    *gbnf = NULL;
    struct gbuf o = {0};
    gbuf_str(&o, "root ::= ");
    enum hr_status st = regex_to_gbnf(re, len, false, &o, err, errlen);
    gbuf_str(&o, "\n");
    if (st == HR_OK && o.oom)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "regex: out of memory");
    if (st != HR_OK) {
        gbuf_free(&o);
        return st;
    }
    *gbnf = o.s;
    return HR_OK;
}
