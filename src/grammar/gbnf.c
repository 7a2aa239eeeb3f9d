/* The GBNF parser: recursive descent straight into the grammar builder. */
#include "grammar/gbnf.h"
#include "base/hex.h"
#include "grammar/gbuf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gbnf {
    const char *s;
    size_t n, i;
    struct grammar_builder b;
    enum hr_status st;
    char *err;
    size_t errlen;
    int depth;
};

#define GBNF_MAX_NESTING 256

__attribute__((format(printf, 2, 3))) static void gbnf_fail(struct gbnf *p, const char *fmt, ...)
{
    if (p->st != HR_OK)
        return;
    int line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)p->s[k] & 0xC0) != 0x80) {
            col++;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = hr_err(p->err, p->errlen, HR_ERR_INVALID, "grammar syntax error at line %d, column %d: %s", line, col,
                   msg);
}

static bool gbnf_ok(const struct gbnf *p)
{
    return p->st == HR_OK;
}

static int peek(const struct gbnf *p)
{
    return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

static void skip_space(struct gbnf *p, bool newlines)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* One UTF-8 character of the source, validated. */
static uint32_t read_utf8(struct gbnf *p)
{
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t cp;
    int len;
    if (u[0] < 0x80) {
        cp = u[0];
        len = 1;
    } else if ((u[0] & 0xE0) == 0xC0) {
        cp = u[0] & 0x1F;
        len = 2;
    } else if ((u[0] & 0xF0) == 0xE0) {
        cp = u[0] & 0x0F;
        len = 3;
    } else if ((u[0] & 0xF8) == 0xF0) {
        cp = u[0] & 0x07;
        len = 4;
    } else {
        gbnf_fail(p, "invalid UTF-8");
        return 0;
    }
    if ((size_t)len > left) {
        gbnf_fail(p, "invalid UTF-8");
        return 0;
    }
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) {
            gbnf_fail(p, "invalid UTF-8");
            return 0;
        }
        cp = cp << 6 | (u[k] & 0x3F);
    }
    static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < minv[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        gbnf_fail(p, "invalid UTF-8");
        return 0;
    }
    p->i += (size_t)len;
    return cp;
}

/* A character of a literal or class, escapes decoded. */
static uint32_t read_char(struct gbnf *p)
{
    if (p->i >= p->n) {
        gbnf_fail(p, "unexpected end of grammar");
        return 0;
    }
    if (p->s[p->i] != '\\')
        return read_utf8(p);
    p->i++;
    int c = peek(p);
    p->i++;
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': return '\\';
    case '"': return '"';
    case '[': return '[';
    case ']': return ']';
    case '-': return '-';
    case '^': return '^';
    case '/': return '/';
    case '.': return '.';
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        p->i--;
        gbnf_fail(p, "unknown escape '\\%c'", c < 0 ? '?' : c);
        return 0;
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hex_digit(peek(p));
        if (h < 0) {
            gbnf_fail(p, "escape needs %d hex digits", digits);
            return 0;
        }
        v = v << 4 | (uint32_t)h;
        p->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        gbnf_fail(p, "escape names no Unicode scalar value (U+%X)", v);
        return 0;
    }
    return v;
}

static int utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

struct range {
    uint32_t lo, hi;
};

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void parse_class(struct gbnf *p, int r, int alt)
{
    p->i++; /* [ */
    bool neg = false;
    if (peek(p) == '^') {
        neg = true;
        p->i++;
    }
    struct range *rs = NULL;
    int n = 0, cap = 0;
    while (gbnf_ok(p) && peek(p) != ']') {
        if (peek(p) < 0 || peek(p) == '\n') {
            gbnf_fail(p, "unterminated character class");
            break;
        }
        uint32_t lo = read_char(p), hi = lo;
        if (!gbnf_ok(p))
            break;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (gbnf_ok(p) && hi < lo)
                gbnf_fail(p, "class range is backwards (U+%04X-U+%04X)", lo, hi);
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            struct range *nr = realloc(rs, (size_t)cap * sizeof *rs);
            if (!nr) {
                gbnf_fail(p, "out of memory");
                break;
            }
            rs = nr;
        }
        rs[n++] = (struct range){lo, hi};
    }
    if (gbnf_ok(p))
        p->i++; /* ] */
    if (gbnf_ok(p)) {
        if (n > 1) /* [] has no ranges (rs NULL): qsort's pointer must not be */
            qsort(rs, (size_t)n, sizeof *rs, range_cmp);
        int m = 0;
        for (int k = 0; k < n; k++) {
            if (m > 0 && rs[k].lo <= rs[m - 1].hi + 1) {
                if (rs[k].hi > rs[m - 1].hi)
                    rs[m - 1].hi = rs[k].hi;
            } else {
                rs[m++] = rs[k];
            }
        }
        uint32_t *lo = malloc(((size_t)m + 1) * sizeof *lo), *hi = malloc(((size_t)m + 1) * sizeof *hi);
        int k2 = 0;
        if (lo && hi) {
            if (neg) {
                uint32_t next = 0;
                for (int k = 0; k < m; k++) {
                    if (rs[k].lo > next) {
                        lo[k2] = next;
                        hi[k2++] = rs[k].lo - 1;
                    }
                    next = rs[k].hi + 1;
                }
                if (next <= 0x10FFFF) {
                    lo[k2] = next;
                    hi[k2++] = 0x10FFFF;
                }
            } else {
                for (int k = 0; k < m; k++) {
                    lo[k2] = rs[k].lo;
                    hi[k2++] = rs[k].hi;
                }
            }
            grammar_builder_push_ranges(&p->b, r, alt, lo, hi, k2);
        } else {
            gbnf_fail(p, "out of memory");
        }
        free(lo);
        free(hi);
    }
    free(rs);
}

static void parse_alternatives(struct gbnf *p, int r, bool nested);

/* Makes elements [from, n) of the alternative one element (a rule reference when several). */
static void item_to_one(struct gbnf *p, int r, int alt, int from)
{
    struct grammar_builder *b = &p->b;
    int n = b->rules[r].alts[alt].n;
    if (n - from == 1)
        return;
    int sub = grammar_builder_anon(b, b->rules[r].name);
    int sa = grammar_builder_alt(b, sub);
    if (sub < 0 || sa < 0)
        return;
    for (int k = from; k < n; k++) {
        struct grammar_elem e = b->rules[r].alts[alt].e[k];
        if (e.kind == GRAMMAR_ELEM_BYTES)
            grammar_builder_push_class(b, sub, sa, &b->classes[e.arg]);
        else
            grammar_builder_push_rule(b, sub, sa, e.arg);
    }
    b->rules[r].alts[alt].n = from;
    b->n_elems -= n - from;
    grammar_builder_push_rule(b, r, alt, sub);
}

static void push_elem(struct grammar_builder *b, int r, int alt, struct grammar_elem e)
{
    if (e.kind == GRAMMAR_ELEM_BYTES)
        grammar_builder_push_class(b, r, alt, &b->classes[e.arg]);
    else
        grammar_builder_push_rule(b, r, alt, e.arg);
}

/* x* as a rule: R ::= x R | (empty). */
static int star_rule(struct grammar_builder *b, const char *base, struct grammar_elem x)
{
    int s = grammar_builder_anon(b, base);
    int a = grammar_builder_alt(b, s);
    push_elem(b, s, a, x);
    grammar_builder_push_rule(b, s, a, s);
    grammar_builder_alt(b, s);
    return s;
}

static long read_int(struct gbnf *p)
{
    long v = 0;
    if (peek(p) < '0' || peek(p) > '9') {
        gbnf_fail(p, "expected a number");
        return -1;
    }
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (peek(p) - '0');
        if (v > GBNF_MAX_REPEAT) {
            gbnf_fail(p, "repetition count above %d", GBNF_MAX_REPEAT);
            return -1;
        }
        p->i++;
    }
    return v;
}

static void apply_repeat(struct gbnf *p, int r, int alt, int from)
{
    struct grammar_builder *b = &p->b;
    int op = peek(p);
    long lo = 0, hi = -1;
    if (op == '*') {
        p->i++;
    } else if (op == '+') {
        p->i++;
        lo = 1;
    } else if (op == '?') {
        p->i++;
        hi = 1;
    } else {
        p->i++; /* { */
        skip_space(p, false);
        lo = read_int(p);
        skip_space(p, false);
        if (!gbnf_ok(p))
            return;
        if (peek(p) == ',') {
            p->i++;
            skip_space(p, false);
            if (peek(p) != '}')
                hi = read_int(p);
        } else {
            hi = lo;
        }
        skip_space(p, false);
        if (!gbnf_ok(p))
            return;
        if (peek(p) != '}') {
            gbnf_fail(p, "expected '}' to close the repetition");
            return;
        }
        p->i++;
        if (hi >= 0 && hi < lo) {
            gbnf_fail(p, "repetition {%ld,%ld}: the maximum is below the minimum", lo, hi);
            return;
        }
    }
    if (from >= b->rules[r].alts[alt].n) {
        gbnf_fail(p, "'%c' repeats nothing", op);
        return;
    }
    item_to_one(p, r, alt, from);
    if (b->oom)
        return;
    struct grammar_elem x = b->rules[r].alts[alt].e[b->rules[r].alts[alt].n - 1];
    b->rules[r].alts[alt].n--;
    b->n_elems--;
    const char *base = b->rules[r].name;
    for (long k = 0; k < lo && !b->oom; k++)
        push_elem(b, r, alt, x);
    if (hi < 0) {
        grammar_builder_push_rule(b, r, alt, star_rule(b, base, x));
    } else if (hi > lo) {
        /* Nested optionals, (x (x (x)?)?)?: one way to match each count. */
        int prev = -1;
        for (long k = 0; k < hi - lo && !b->oom; k++) {
            int o = grammar_builder_anon(b, base);
            int a = grammar_builder_alt(b, o);
            push_elem(b, o, a, x);
            if (prev >= 0)
                grammar_builder_push_rule(b, o, a, prev);
            grammar_builder_alt(b, o);
            prev = o;
        }
        grammar_builder_push_rule(b, r, alt, prev);
    }
}

static void parse_sequence(struct gbnf *p, int r, int alt, bool nested)
{
    struct grammar_builder *b = &p->b;
    int last = -1; /* first element of the last item, for a postfix operator */
    while (gbnf_ok(p)) {
        skip_space(p, nested);
        int c = peek(p);
        if (b->oom) {
            gbnf_fail(p, "grammar too large");
            return;
        }
        int here = b->rules[r].alts[alt].n;
        if (c == '"') {
            p->i++;
            while (gbnf_ok(p) && peek(p) != '"') {
                if (peek(p) < 0 || peek(p) == '\n') {
                    gbnf_fail(p, "unterminated string literal");
                    return;
                }
                char u[4];
                uint32_t cp = read_char(p);
                if (gbnf_ok(p))
                    grammar_builder_push_bytes(b, r, alt, u, (size_t)utf8_put(cp, u));
            }
            p->i++;
            last = here;
            if (b->rules[r].alts[alt].n == here)
                last = -1; /* "" is nothing to repeat */
        } else if (c == '[') {
            parse_class(p, r, alt);
            last = here;
        } else if (c == '.') {
            p->i++;
            uint32_t lo = 0, hi = 0x10FFFF;
            grammar_builder_push_ranges(b, r, alt, &lo, &hi, 1);
            last = here;
        } else if (c == '(') {
            p->i++;
            if (++p->depth > GBNF_MAX_NESTING) {
                gbnf_fail(p, "groups nested deeper than %d", GBNF_MAX_NESTING);
                return;
            }
            int sub = grammar_builder_anon(b, b->rules[r].name);
            parse_alternatives(p, sub, true);
            p->depth--;
            if (!gbnf_ok(p))
                return;
            skip_space(p, true);
            if (peek(p) != ')') {
                gbnf_fail(p, "expected ')'");
                return;
            }
            p->i++;
            grammar_builder_push_rule(b, r, alt, sub);
            last = here;
        } else if (is_name_char(c)) {
            size_t s0 = p->i;
            while (is_name_char(peek(p)))
                p->i++;
            /* A name followed by ::= starts the next rule (a rule body ended without a newline). */
            size_t save = p->i;
            skip_space(p, false);
            if (p->i + 3 <= p->n && strncmp(p->s + p->i, "::=", 3) == 0) {
                p->i = s0;
                if (nested)
                    gbnf_fail(p, "a '(' is not closed before the rule '%.*s'", (int)(save - s0), p->s + s0);
                return;
            }
            p->i = save;
            grammar_builder_push_rule(b, r, alt, grammar_builder_rule(b, p->s + s0, p->i - s0));
            last = here;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) {
                gbnf_fail(p, "'%c' has nothing before it to repeat", c);
                return;
            }
            apply_repeat(p, r, alt, last);
            last = -1;
        } else {
            return;
        }
    }
}

static void parse_alternatives(struct gbnf *p, int r, bool nested)
{
    for (;;) {
        int alt = grammar_builder_alt(&p->b, r);
        if (alt < 0) {
            gbnf_fail(p, "grammar too large");
            return;
        }
        parse_sequence(p, r, alt, nested);
        if (!gbnf_ok(p))
            return;
        skip_space(p, nested);
        if (peek(p) != '|')
            return;
        p->i++;
        skip_space(p, true);
    }
}

enum hr_status gbnf_parse(const char *text, size_t len, struct grammar *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    struct gbnf p = {.s = text, .n = len, .err = err, .errlen = errlen};
    grammar_builder_init(&p.b);
    for (size_t k = 0; k < len; k++)
        if (text[k] == 0) {
            p.i = k;
            gbnf_fail(&p, "NUL byte in the grammar");
        }
    while (gbnf_ok(&p)) {
        skip_space(&p, true);
        if (p.i >= p.n)
            break;
        size_t s0 = p.i;
        while (is_name_char(peek(&p)))
            p.i++;
        if (p.i == s0) {
            gbnf_fail(&p, "expected a rule name");
            break;
        }
        int r = grammar_builder_rule(&p.b, text + s0, p.i - s0);
        if (r < 0) {
            gbnf_fail(&p, "grammar too large");
            break;
        }
        if (p.b.rules[r].defined) {
            p.i = s0;
            gbnf_fail(&p, "rule '%s' is defined twice", p.b.rules[r].name);
            break;
        }
        skip_space(&p, false);
        if (p.i + 3 > p.n || strncmp(text + p.i, "::=", 3) != 0) {
            gbnf_fail(&p, "expected '::=' after the rule name");
            break;
        }
        p.i += 3;
        skip_space(&p, true);
        parse_alternatives(&p, r, false);
        if (!gbnf_ok(&p))
            break;
        skip_space(&p, false);
        int c = peek(&p);
        if (c >= 0 && c != '\n' && !is_name_char(c))
            gbnf_fail(&p, "unexpected '%c'", c);
    }
    enum hr_status st = p.st;
    if (st == HR_OK)
        st = grammar_builder_finish(&p.b, "root", g, err, errlen);
    grammar_builder_free(&p.b);
    return st;
}

enum hr_status gbnf_prefix_rules(const char *text, const char *prefix, const char *keep, char **out, char *err,
                                 size_t errlen)
{
    *out = NULL;
    struct gbuf o = {0};
    size_t n = strlen(text), kl = strlen(keep);
    for (size_t i = 0; i < n;) {
        char c = text[i];
        if (c == '"' || c == '[' || c == '{') {
            char close = c == '"' ? '"' : c == '[' ? ']' : '}';
            size_t j = i + 1;
            while (j < n && text[j] != close) {
                if (text[j] == '\\' && j + 1 < n)
                    j++;
                j++;
            }
            j = j < n ? j + 1 : n;
            gbuf_add(&o, text + i, j - i);
            i = j;
        } else if (c == '#') {
            size_t j = i;
            while (j < n && text[j] != '\n')
                j++;
            gbuf_add(&o, text + i, j - i);
            i = j;
        } else if (is_name_char((unsigned char)c)) {
            size_t j = i;
            while (j < n && is_name_char((unsigned char)text[j]))
                j++;
            if (!(j - i >= kl && memcmp(text + i, keep, kl) == 0))
                gbuf_str(&o, prefix);
            gbuf_add(&o, text + i, j - i);
            i = j;
        } else {
            gbuf_add(&o, &text[i], 1);
            i++;
        }
    }
    if (o.oom) {
        gbuf_free(&o);
        return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
    }
    *out = o.s ? o.s : strdup("");
    return *out ? HR_OK : hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
}
