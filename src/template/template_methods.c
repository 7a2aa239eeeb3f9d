/* Methods of template values (Python's str, dict and list methods that a sandboxed template
 * may call, and loop.cycle) and the global functions (range, namespace, dict,
 * raise_exception, strftime_now). String methods count and index in code points. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/template_internal.h"

/* Jinja's sandbox caps range() at this many items. */
#define RANGE_MAX 100000

static const char *const STR_METHODS[] = {
    "upper", "lower", "title", "capitalize", "swapcase", "strip", "lstrip", "rstrip", "startswith",
    "endswith", "split", "rsplit", "splitlines", "replace", "find", "rfind", "index", "rindex", "count",
    "join", "format", "isalpha", "isdigit", "isnumeric", "isdecimal", "isalnum", "isspace", "islower",
    "isupper", "istitle", "zfill", "center", "ljust", "rjust", "removeprefix", "removesuffix",
    "partition", "rpartition",
};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy"};
static const char *const LIST_METHODS[] = {"index", "count", "copy"};
static const char *const LOOP_METHODS[] = {"cycle"};

static const char *find_in(const char *const *names, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], name, len))
            return names[i];
    return NULL;
}

#define FIND(tbl) find_in(tbl, sizeof tbl / sizeof tbl[0], name, len)

const char *template_method_lookup(const struct template_value *v, const char *name, size_t len)
{
    switch (v->type) {
    case TEMPLATE_T_STR: return FIND(STR_METHODS);
    case TEMPLATE_T_DICT: return FIND(DICT_METHODS);
    case TEMPLATE_T_LIST: return FIND(LIST_METHODS);
    case TEMPLATE_T_LOOP: return FIND(LOOP_METHODS);
    default: return NULL;
    }
}

/* ============================================================== shared string helpers */

static bool in_chars(uint32_t c, const struct template_value *chars)
{
    if (!chars || chars->type != TEMPLATE_T_STR)
        return template_is_space(c);
    size_t i = 0, adv;
    while (i < chars->u.str.len) {
        if (template_utf8_decode(chars->u.str.s + i, chars->u.str.len - i, &adv) == c)
            return true;
        i += adv;
    }
    return false;
}

struct template_value *template_str_strip(struct template_render *r, const struct template_value *s,
                                          const struct template_value *chars, bool left, bool right)
{
    const char *p = s->u.str.s;
    size_t a = 0, b = s->u.str.len, adv;
    if (!template_charge(r, b))
        return NULL;
    if (left)
        while (a < b) {
            uint32_t c = template_utf8_decode(p + a, b - a, &adv);
            if (!in_chars(c, chars))
                break;
            a += adv;
        }
    if (right)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80 && b - st < 4)
                st--;
            uint32_t c = template_utf8_decode(p + st, b - st, &adv);
            if (st + adv != b) {
                st = b - 1;
                c = 0xDC00 + (unsigned char)p[st];
            }
            if (!in_chars(c, chars))
                break;
            b = st;
        }
    return template_str(r, p + a, b - a);
}

struct template_value *template_str_replace(struct template_render *r, const struct template_node *at,
                                            const struct template_value *s, const struct template_value *old,
                                            const struct template_value *new_, int64_t count)
{
    (void)at;
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, ol = old->u.str.len;
    struct template_buf b = {.r = r};
    bool ok = template_charge(r, n);
    if (count < 0)
        count = INT64_MAX;
    if (ol == 0) {
        /* Python inserts new before every character and at the end */
        size_t i = 0, adv;
        int64_t done = 0;
        while (ok && i <= n) {
            if (done < count) {
                ok = template_buf_put(&b, new_->u.str.s, new_->u.str.len);
                done++;
            }
            if (i == n)
                break;
            template_utf8_decode(p + i, n - i, &adv);
            ok = ok && template_buf_put(&b, p + i, adv);
            i += adv;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (ok && i < n) {
            const char *hit = done < count ? memmem(p + i, n - i, old->u.str.s, ol) : NULL;
            if (!hit) {
                ok = template_buf_put(&b, p + i, n - i);
                break;
            }
            ok = template_buf_put(&b, p + i, (size_t)(hit - (p + i))) &&
                 template_buf_put(&b, new_->u.str.s, new_->u.str.len) && template_charge(r, new_->u.str.len);
            i = (size_t)(hit - p) + ol;
            done++;
        }
    }
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

struct template_value *template_str_case(struct template_render *r, const struct template_value *s, int mode)
{
    struct template_buf b = {.r = r};
    bool ok = template_charge(r, s->u.str.len);
    size_t i = 0, adv;
    bool first = true, prev_cased = false;
    while (ok && i < s->u.str.len) {
        uint32_t c = template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv);
        uint32_t o;
        switch (mode) {
        case 0: o = template_to_lower(c); break;
        case 1: o = template_to_upper(c); break;
        case 2: o = first ? template_to_upper(c) : template_to_lower(c); break;
        default: /* str.title(): upper after an uncased character, lower after a cased one */
            o = prev_cased ? template_to_lower(c) : template_to_upper(c);
            prev_cased = template_is_cased(c);
            break;
        }
        ok = (o == c) ? template_buf_put(&b, s->u.str.s + i, adv) : template_buf_put_cp(&b, o);
        first = false;
        i += adv;
    }
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

/* ===================================================================== str methods */

static bool need_str(struct template_render *r, const struct template_node *at, const char *what,
                     const struct template_value *v)
{
    if (v && v->type == TEMPLATE_T_STR)
        return true;
    return template_fail(r, at, HR_ERR_INVALID, "%s() argument must be str, not %s", what,
                         v ? template_type_name(v) : "nothing");
}

static bool want_int(struct template_render *r, const struct template_node *at, const char *what,
                     const struct template_value *v, int64_t *out)
{
    if (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_BOOL) {
        *out = v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i;
        return true;
    }
    if (v->type == TEMPLATE_T_NONE)
        return true;
    return template_fail(r, at, HR_ERR_INVALID, "%s must be an integer, not %s", what, template_type_name(v));
}

static bool push_str(struct template_render *r, struct template_value *l, const char *s, size_t n)
{
    return template_list_push(r, l, template_str(r, s, n));
}

/* The character ending at byte end (> 0): its code point; *start is where it begins. */
static uint32_t prev_char(const char *p, size_t end, size_t *start)
{
    size_t st = end - 1, adv;
    while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80 && end - st < 4)
        st--;
    uint32_t c = template_utf8_decode(p + st, end - st, &adv);
    if (st + adv != end) {
        st = end - 1;
        c = 0xDC00 + (unsigned char)p[st];
    }
    *start = st;
    return c;
}

/* Python str.split / str.rsplit. */
static struct template_value *split(struct template_render *r, const struct template_node *at,
                                    const struct template_value *s, const struct template_value *sep,
                                    int64_t maxsplit, bool from_right)
{
    const char *p = s->u.str.s;
    size_t n = s->u.str.len, adv;
    if (!template_charge(r, n))
        return NULL;
    struct template_value *l = template_list(r, 0);
    if (!l)
        return NULL;
    bool ok = true;
    if (maxsplit < 0)
        maxsplit = INT64_MAX;
    if (!sep || sep->type == TEMPLATE_T_NONE) {
        /* runs of whitespace separate; no empty strings at either end */
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            while (ok && i < n) {
                while (i < n && template_is_space(template_utf8_decode(p + i, n - i, &adv)))
                    i += adv;
                if (i >= n)
                    break;
                if (splits >= maxsplit) {
                    ok = push_str(r, l, p + i, n - i);
                    break;
                }
                size_t st = i;
                while (i < n && !template_is_space(template_utf8_decode(p + i, n - i, &adv)))
                    i += adv;
                ok = push_str(r, l, p + st, i - st);
                splits++;
            }
        } else {
            /* from the right; the remainder keeps its leading whitespace */
            size_t end = n;
            int64_t splits = 0;
            struct template_value *rev = template_list(r, 0);
            ok = rev != NULL;
            while (ok) {
                size_t st = end;
                while (st > 0 && template_is_space(prev_char(p, st, &st)))
                    end = st;
                if (end == 0)
                    break;
                if (splits >= maxsplit) {
                    ok = push_str(r, rev, p, end);
                    break;
                }
                size_t ws = end, cs = end;
                while (ws > 0 && !template_is_space(prev_char(p, ws, &cs)))
                    ws = cs;
                ok = push_str(r, rev, p + ws, end - ws);
                end = ws;
                splits++;
            }
            for (size_t k = rev ? rev->u.list.n : 0; ok && k-- > 0;)
                ok = template_list_push(r, l, template_ref(rev->u.list.items[k]));
            template_unref(r, rev);
        }
    } else {
        size_t sl = sep->u.str.len;
        if (sl == 0) {
            template_unref(r, l);
            template_fail(r, at, HR_ERR_INVALID, "empty separator");
            return NULL;
        }
        if (!from_right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                const char *hit = splits < maxsplit ? memmem(p + i, n - i, sep->u.str.s, sl) : NULL;
                if (!hit) {
                    ok = push_str(r, l, p + i, n - i);
                    break;
                }
                if (!(ok = push_str(r, l, p + i, (size_t)(hit - (p + i)))))
                    break;
                i = (size_t)(hit - p) + sl;
                splits++;
            }
        } else {
            /* find hits from the right, then emit left to right */
            size_t end = n;
            int64_t splits = 0;
            struct template_value *rev = template_list(r, 0);
            ok = rev != NULL;
            while (ok) {
                const char *hit = NULL;
                if (splits < maxsplit && end >= sl)
                    for (size_t k = end - sl + 1; k-- > 0;)
                        if (!memcmp(p + k, sep->u.str.s, sl)) {
                            hit = p + k;
                            break;
                        }
                if (!hit) {
                    ok = push_str(r, rev, p, end);
                    break;
                }
                ok = push_str(r, rev, hit + sl, (size_t)(p + end - (hit + sl)));
                end = (size_t)(hit - p);
                splits++;
            }
            for (size_t k = rev ? rev->u.list.n : 0; ok && k-- > 0;)
                ok = template_list_push(r, l, template_ref(rev->u.list.items[k]));
            template_unref(r, rev);
        }
    }
    if (!ok) {
        template_unref(r, l);
        return NULL;
    }
    return l;
}

/* Byte offset -> code point index. */
static int64_t cp_index(const char *s, size_t off)
{
    return (int64_t)template_utf8_count(s, off);
}

static bool is_digit_str(uint32_t c) { return template_is_digit(c); }

typedef bool (*char_pred)(uint32_t);

static bool all_chars(const struct template_value *s, char_pred pred)
{
    if (s->u.str.len == 0)
        return false;
    size_t i = 0, adv;
    while (i < s->u.str.len) {
        if (!pred(template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv)))
            return false;
        i += adv;
    }
    return true;
}

static bool is_alnum(uint32_t c) { return template_is_alpha(c) || template_is_digit(c); }

static struct template_value *pad(struct template_render *r, const struct template_node *at,
                                  const struct template_value *s, int64_t width, const struct template_value *fill,
                                  int align /* -1 left, 0 center, 1 right, 2 zfill */)
{
    int64_t len = (int64_t)template_utf8_count(s->u.str.s, s->u.str.len);
    if (width <= len)
        return template_str(r, s->u.str.s, s->u.str.len);
    if ((uint64_t)width > r->lim->max_output) {
        template_limit(r, at, "width too large");
        return NULL;
    }
    const char *f = " ";
    size_t fl = 1;
    if (fill) {
        if (fill->type != TEMPLATE_T_STR || template_utf8_count(fill->u.str.s, fill->u.str.len) != 1) {
            template_fail(r, at, HR_ERR_INVALID, "the fill character must be exactly one character long");
            return NULL;
        }
        f = fill->u.str.s;
        fl = fill->u.str.len;
    }
    int64_t marg = width - len, left;
    if (align == -1)
        left = 0;
    else if (align == 1 || align == 2)
        left = marg;
    else
        left = marg / 2 + (marg & width & 1);
    struct template_buf b = {.r = r};
    bool ok = true;
    size_t body = 0;
    if (align == 2) {
        f = "0";
        fl = 1;
        if (s->u.str.len && (s->u.str.s[0] == '+' || s->u.str.s[0] == '-')) {
            ok = template_buf_putc(&b, s->u.str.s[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; ok && i < left; i++)
        ok = template_buf_put(&b, f, fl);
    ok = ok && template_buf_put(&b, s->u.str.s + body, s->u.str.len - body);
    for (int64_t i = 0; ok && i < marg - left; i++)
        ok = template_buf_put(&b, f, fl);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

/* str.format: {} {0} {name} with .attr / [key] lookups, !r / !s and a simple format spec
 * ([[fill]align][width][.precision][type] for s, d, f, e, g, x, %). */
static struct template_value *str_format(struct template_render *r, const struct template_node *at,
                                         const struct template_value *fmt, const struct template_callargs *a)
{
    struct template_buf b = {.r = r};
    const char *s = fmt->u.str.s;
    size_t n = fmt->u.str.len, auto_idx = 0;
    bool ok = template_charge(r, n);
    for (size_t i = 0; ok && i < n; i++) {
        char c = s[i];
        if (c == '}' ) {
            if (i + 1 < n && s[i + 1] == '}') {
                ok = template_buf_putc(&b, '}');
                i++;
                continue;
            }
            ok = template_fail(r, at, HR_ERR_INVALID, "single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            ok = template_buf_putc(&b, c);
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            ok = template_buf_putc(&b, '{');
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && s[j] != '}')
            j++;
        if (j >= n) {
            ok = template_fail(r, at, HR_ERR_INVALID, "single '{' encountered in format string");
            break;
        }
        /* field [!conv] [:spec] */
        const char *f = s + i + 1, *fend = s + j;
        const char *colon = memchr(f, ':', (size_t)(fend - f));
        const char *spec = colon ? colon + 1 : fend;
        const char *bang = memchr(f, '!', (size_t)((colon ? colon : fend) - f));
        const char *name_end = bang ? bang : colon ? colon : fend;
        char conv = bang && bang + 1 < fend ? bang[1] : 's';
        /* the first part of the field name */
        const char *q = f;
        while (q < name_end && *q != '.' && *q != '[')
            q++;
        struct template_value *v = NULL;
        if (q == f) {
            if (auto_idx >= a->npos) {
                ok = template_fail(r, at, HR_ERR_INVALID, "format(): replacement index %zu out of range", auto_idx);
                break;
            }
            v = template_ref(a->pos[auto_idx++]);
        } else if (*f >= '0' && *f <= '9') {
            size_t idx = 0;
            for (const char *d = f; d < q; d++)
                idx = idx * 10 + (size_t)(*d - '0');
            if (idx >= a->npos) {
                ok = template_fail(r, at, HR_ERR_INVALID, "format(): replacement index %zu out of range", idx);
                break;
            }
            v = template_ref(a->pos[idx]);
        } else {
            for (size_t k = 0; k < a->nkw && !v; k++)
                if (a->kw[k].len == (size_t)(q - f) && !memcmp(a->kw[k].name, f, a->kw[k].len))
                    v = template_ref(a->kw[k].val);
            if (!v) {
                ok = template_fail(r, at, HR_ERR_INVALID, "format(): no argument named '%.*s'", (int)(q - f), f);
                break;
            }
        }
        while (ok && v && q < name_end) {
            struct template_value *next = NULL;
            if (*q == '.') {
                const char *e = ++q;
                while (e < name_end && *e != '.' && *e != '[')
                    e++;
                next = template_getattr(r, at, v, q, (size_t)(e - q));
                q = e;
            } else {
                const char *e = memchr(q, ']', (size_t)(name_end - q));
                if (!e) {
                    ok = template_fail(r, at, HR_ERR_INVALID, "format(): missing ']' in field name");
                    break;
                }
                struct template_value *key = template_str(r, q + 1, (size_t)(e - q - 1));
                next = key ? template_getitem(r, at, v, key) : NULL;
                template_unref(r, key);
                q = e + 1;
            }
            template_unref(r, v);
            v = next;
        }
        if (!ok || !v) {
            template_unref(r, v);
            ok = false;
            break;
        }
        /* spec */
        char fill = ' ', align = 0, type = 0;
        int64_t width = 0, prec = -1;
        const char *sp = spec;
        if (fend - sp >= 2 && strchr("<>^=", sp[1])) {
            fill = sp[0];
            align = sp[1];
            sp += 2;
        } else if (sp < fend && strchr("<>^=", sp[0])) {
            align = *sp++;
        }
        while (sp < fend && sp[0] >= '0' && sp[0] <= '9' && width < 100000)
            width = width * 10 + (*sp++ - '0');
        if (sp < fend && *sp == '.') {
            prec = 0;
            for (sp++; sp < fend && *sp >= '0' && *sp <= '9' && prec < 1000; sp++)
                prec = prec * 10 + (*sp - '0');
        }
        if (sp < fend)
            type = *sp++;
        if (sp != fend) {
            template_unref(r, v);
            ok = template_fail(r, at, HR_ERR_INVALID, "format(): unsupported format spec '%.*s'",
                               (int)(fend - spec), spec);
            break;
        }
        struct template_buf t = {.r = r};
        if (type && strchr("dxXo", type) && (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_BOOL)) {
            char f2[8] = {'%', 'l', 'l', type == 'd' ? 'd' : type, 0};
            ok = template_buf_printf(&t, f2, (long long)(v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i));
        } else if (type && strchr("feEgG%", type) &&
                   (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_FLOAT || v->type == TEMPLATE_T_BOOL)) {
            double x = v->type == TEMPLATE_T_FLOAT ? v->u.f : v->type == TEMPLATE_T_BOOL ? v->u.b : (double)v->u.i;
            if (type == '%')
                x *= 100;
            char f2[16];
            snprintf(f2, sizeof f2, "%%.%d%c", (int)(prec < 0 ? 6 : prec), type == '%' ? 'f' : type);
            ok = template_buf_printf(&t, f2, x) && (type != '%' || template_buf_putc(&t, '%'));
        } else if (!type || type == 's') {
            ok = conv == 'r' ? template_to_repr(r, &t, v) : template_to_str(r, &t, v);
            if (ok && prec >= 0 && (size_t)prec < t.len)
                t.len = template_utf8_offset(t.data, t.len, (size_t)prec);
        } else {
            ok = template_fail(r, at, HR_ERR_INVALID, "format(): unknown format code '%c' for a %s", type,
                               template_type_name(v));
        }
        template_unref(r, v);
        if (ok && width > 0) {
            struct template_value tmp = {.type = TEMPLATE_T_STR, .refs = TEMPLATE_REFS_IMMORTAL};
            tmp.u.str.s = t.data ? t.data : (char *)"";
            tmp.u.str.len = t.len;
            char fs[2] = {fill, 0};
            struct template_value fv = {.type = TEMPLATE_T_STR, .refs = TEMPLATE_REFS_IMMORTAL};
            fv.u.str.s = fs;
            fv.u.str.len = 1;
            bool numeric = type && type != 's';
            int al = align == '<' ? -1 : align == '^' ? 0 : align == '>' ? 1 : (numeric ? 1 : -1);
            struct template_value *padded = pad(r, at, &tmp, width, &fv, al);
            ok = padded && template_buf_put(&b, padded->u.str.s, padded->u.str.len);
            template_unref(r, padded);
        } else if (ok) {
            ok = template_buf_put(&b, t.data ? t.data : "", t.len);
        }
        template_buf_free(&t);
        i = j;
    }
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *prefix_test(struct template_render *r, const struct template_node *at,
                                          const struct template_value *s, const struct template_value *arg,
                                          bool suffix)
{
    const char *what = suffix ? "endswith" : "startswith";
    if (!arg) {
        template_fail(r, at, HR_ERR_INVALID, "%s() takes at least 1 argument (0 given)", what);
        return NULL;
    }
    const struct template_value *const *cands = &arg;
    size_t nc = 1;
    if (arg->type == TEMPLATE_T_LIST) {
        cands = (const struct template_value *const *)arg->u.list.items;
        nc = arg->u.list.n;
    }
    for (size_t i = 0; i < nc; i++) {
        const struct template_value *c = cands[i];
        if (c->type != TEMPLATE_T_STR) {
            template_fail(r, at, HR_ERR_INVALID, "%s first arg must be str or a tuple of str, not %s", what,
                          template_type_name(c));
            return NULL;
        }
        size_t cl = c->u.str.len;
        if (cl <= s->u.str.len &&
            !memcmp(s->u.str.s + (suffix ? s->u.str.len - cl : 0), c->u.str.s, cl))
            return &template_true;
    }
    return &template_false;
}

static struct template_value *str_method(struct template_render *r, const struct template_node *at,
                                         struct template_value *s, const char *m, const struct template_callargs *a)
{
    struct template_value *arg[3];
#define ARGS(...)                                                                                  \
    do {                                                                                           \
        static const char *const p_[] = {__VA_ARGS__};                                             \
        if (!template_bind(r, at, m, a, p_, sizeof p_ / sizeof p_[0], 0, arg))                    \
            return NULL;                                                                           \
    } while (0)
#define NOARGS()                                                                                   \
    do {                                                                                           \
        if (a->npos || a->nkw) {                                                                   \
            template_fail(r, at, HR_ERR_INVALID, "%s() takes no arguments", m);                   \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize")) {
        NOARGS();
        int mode = !strcmp(m, "lower") ? 0 : !strcmp(m, "upper") ? 1 : !strcmp(m, "capitalize") ? 2 : 3;
        return template_str_case(r, s, mode);
    }
    if (!strcmp(m, "swapcase")) {
        NOARGS();
        struct template_buf b = {.r = r};
        size_t i = 0, adv;
        bool ok = true;
        while (ok && i < s->u.str.len) {
            uint32_t c = template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv);
            uint32_t u = template_to_upper(c);
            ok = template_buf_put_cp(&b, u != c ? u : template_to_lower(c));
            i += adv;
        }
        if (!ok) {
            template_buf_free(&b);
            return NULL;
        }
        return template_str_take(r, &b);
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        ARGS("chars");
        if (arg[0] && arg[0]->type != TEMPLATE_T_NONE && !need_str(r, at, m, arg[0]))
            return NULL;
        return template_str_strip(r, s, arg[0], m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        ARGS("prefix");
        return prefix_test(r, at, s, arg[0], m[0] == 'e');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        ARGS("sep", "maxsplit");
        int64_t maxsplit = -1;
        if (arg[0] && arg[0]->type != TEMPLATE_T_NONE && !need_str(r, at, m, arg[0]))
            return NULL;
        if (arg[1] && !want_int(r, at, "maxsplit", arg[1], &maxsplit))
            return NULL;
        return split(r, at, s, arg[0], maxsplit, m[0] == 'r');
    }
    if (!strcmp(m, "splitlines")) {
        ARGS("keepends");
        bool keep = arg[0] && template_truthy(arg[0]);
        struct template_value *l = template_list(r, 0);
        const char *p = s->u.str.s;
        size_t n = s->u.str.len, i = 0, st = 0, adv;
        while (l && i < n) {
            uint32_t c = template_utf8_decode(p + i, n - i, &adv);
            bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                       c == 0x2028 || c == 0x2029;
            if (!brk) {
                i += adv;
                continue;
            }
            size_t e = i + adv;
            if (c == '\r' && e < n && p[e] == '\n')
                e++;
            if (!push_str(r, l, p + st, (keep ? e : i) - st)) {
                template_unref(r, l);
                return NULL;
            }
            i = st = e;
        }
        if (l && st < n && !push_str(r, l, p + st, n - st)) {
            template_unref(r, l);
            return NULL;
        }
        return l;
    }
    if (!strcmp(m, "replace")) {
        ARGS("old", "new", "count");
        int64_t count = -1;
        if (!need_str(r, at, m, arg[0]) || !need_str(r, at, m, arg[1]))
            return NULL;
        if (arg[2] && !want_int(r, at, "count", arg[2], &count))
            return NULL;
        return template_str_replace(r, at, s, arg[0], arg[1], count);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") ||
        !strcmp(m, "count")) {
        ARGS("sub");
        if (!need_str(r, at, m, arg[0]) || !template_charge(r, s->u.str.len))
            return NULL;
        const char *p = s->u.str.s, *sub = arg[0]->u.str.s;
        size_t n = s->u.str.len, sl = arg[0]->u.str.len;
        if (!strcmp(m, "count")) {
            if (sl == 0)
                return template_int(r, (int64_t)template_utf8_count(p, n) + 1);
            int64_t c = 0;
            for (const char *h = p; (h = memmem(h, (size_t)(p + n - h), sub, sl)); h += sl)
                c++;
            return template_int(r, c);
        }
        const char *hit = NULL;
        if (m[0] == 'r') {
            for (size_t k = n >= sl ? n - sl + 1 : 0; k-- > 0;)
                if (!memcmp(p + k, sub, sl)) {
                    hit = p + k;
                    break;
                }
        } else {
            hit = sl == 0 ? p : memmem(p, n, sub, sl);
        }
        if (hit)
            return template_int(r, cp_index(p, (size_t)(hit - p)));
        if (strstr(m, "index")) {
            template_fail(r, at, HR_ERR_INVALID, "substring not found");
            return NULL;
        }
        return template_int(r, -1);
    }
    if (!strcmp(m, "join")) {
        ARGS("iterable");
        if (!arg[0]) {
            template_fail(r, at, HR_ERR_INVALID, "join() takes exactly one argument");
            return NULL;
        }
        struct template_value *items = template_iterate(r, at, arg[0]);
        if (!items)
            return NULL;
        struct template_buf b = {.r = r};
        bool ok = true;
        for (size_t i = 0; ok && i < items->u.list.n; i++) {
            const struct template_value *it = items->u.list.items[i];
            if (it->type != TEMPLATE_T_STR) {
                ok = template_fail(r, at, HR_ERR_INVALID, "sequence item %zu: expected str instance, %s found", i,
                                   template_type_name(it));
                break;
            }
            ok = (i == 0 || template_buf_put(&b, s->u.str.s, s->u.str.len)) &&
                 template_buf_put(&b, it->u.str.s, it->u.str.len);
        }
        template_unref(r, items);
        if (!ok) {
            template_buf_free(&b);
            return NULL;
        }
        return template_str_take(r, &b);
    }
    if (!strcmp(m, "format"))
        return str_format(r, at, s, a);
    if (!strncmp(m, "is", 2)) {
        NOARGS();
        bool res;
        if (!strcmp(m, "isalpha"))
            res = all_chars(s, template_is_alpha);
        else if (!strcmp(m, "isalnum"))
            res = all_chars(s, is_alnum);
        else if (!strcmp(m, "isspace"))
            res = all_chars(s, template_is_space);
        else if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal"))
            res = all_chars(s, is_digit_str);
        else {
            /* islower / isupper / istitle */
            bool cased = false, ok = true, prev_cased = false;
            size_t i = 0, adv;
            while (i < s->u.str.len) {
                uint32_t c = template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv);
                bool up = template_to_lower(c) != c, low = template_to_upper(c) != c;
                if (!strcmp(m, "islower") && up)
                    ok = false;
                if (!strcmp(m, "isupper") && low)
                    ok = false;
                if (!strcmp(m, "istitle") && ((up && prev_cased) || (low && !prev_cased)))
                    ok = false;
                cased |= up || low;
                prev_cased = up || low;
                i += adv;
            }
            res = ok && cased;
        }
        return template_bool(res);
    }
    if (!strcmp(m, "zfill") || !strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust")) {
        ARGS("width", "fillchar");
        int64_t width = 0;
        if (!arg[0]) {
            template_fail(r, at, HR_ERR_INVALID, "%s() missing required argument 'width'", m);
            return NULL;
        }
        if (!want_int(r, at, "width", arg[0], &width))
            return NULL;
        int align = m[0] == 'z' ? 2 : m[0] == 'c' ? 0 : m[0] == 'l' ? -1 : 1;
        return pad(r, at, s, width, m[0] == 'z' ? NULL : arg[1], align);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        ARGS("affix");
        if (!need_str(r, at, m, arg[0]))
            return NULL;
        size_t al = arg[0]->u.str.len, n = s->u.str.len;
        bool suffix = m[6] == 's';
        if (al <= n && !memcmp(s->u.str.s + (suffix ? n - al : 0), arg[0]->u.str.s, al))
            return template_str(r, s->u.str.s + (suffix ? 0 : al), n - al);
        return template_ref(s);
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        ARGS("sep");
        if (!need_str(r, at, m, arg[0]))
            return NULL;
        size_t sl = arg[0]->u.str.len, n = s->u.str.len;
        if (sl == 0) {
            template_fail(r, at, HR_ERR_INVALID, "empty separator");
            return NULL;
        }
        const char *p = s->u.str.s, *hit = NULL;
        if (m[0] == 'r') {
            for (size_t k = n >= sl ? n - sl + 1 : 0; k-- > 0;)
                if (!memcmp(p + k, arg[0]->u.str.s, sl)) {
                    hit = p + k;
                    break;
                }
        } else {
            hit = memmem(p, n, arg[0]->u.str.s, sl);
        }
        struct template_value *t = template_list(r, 3);
        if (!t)
            return NULL;
        t->u.list.is_tuple = true;
        bool ok;
        if (hit)
            ok = push_str(r, t, p, (size_t)(hit - p)) && push_str(r, t, hit, sl) &&
                 push_str(r, t, hit + sl, (size_t)(p + n - hit - sl));
        else if (m[0] == 'r')
            ok = push_str(r, t, "", 0) && push_str(r, t, "", 0) && push_str(r, t, p, n);
        else
            ok = push_str(r, t, p, n) && push_str(r, t, "", 0) && push_str(r, t, "", 0);
        if (!ok) {
            template_unref(r, t);
            return NULL;
        }
        return t;
    }
#undef ARGS
#undef NOARGS
    template_fail(r, at, HR_ERR_INVALID, "'str' object has no method '%s'", m);
    return NULL;
}

/* ============================================================= dict / list / loop */

static struct template_value *dict_method(struct template_render *r, const struct template_node *at,
                                          struct template_value *d, const char *m, const struct template_callargs *a)
{
    if (!strcmp(m, "get")) {
        static const char *const p[] = {"key", "default"};
        struct template_value *arg[2];
        if (!template_bind(r, at, "get", a, p, 2, 1, arg))
            return NULL;
        struct template_value *v = arg[0]->type == TEMPLATE_T_STR
                                       ? template_dict_get(d, arg[0]->u.str.s, arg[0]->u.str.len)
                                       : NULL;
        return template_ref(v ? v : arg[1] ? arg[1] : &template_none);
    }
    if (a->npos || a->nkw) {
        template_fail(r, at, HR_ERR_INVALID, "%s() takes no arguments", m);
        return NULL;
    }
    if (!strcmp(m, "copy"))
        return template_ref(d);
    struct template_value *l = template_list(r, d->u.dict.n);
    if (l)
        l->u.list.view = !strcmp(m, "keys") ? TEMPLATE_VIEW_KEYS : !strcmp(m, "values") ? TEMPLATE_VIEW_VALUES
                                                                                         : TEMPLATE_VIEW_ITEMS;
    for (size_t i = 0; l && i < d->u.dict.n; i++) {
        struct template_value *x;
        if (!strcmp(m, "keys")) {
            x = template_ref(d->u.dict.e[i].key);
        } else if (!strcmp(m, "values")) {
            x = template_ref(d->u.dict.e[i].val);
        } else {
            x = template_list(r, 2);
            if (x) {
                x->u.list.is_tuple = true;
                if (!template_list_push(r, x, template_ref(d->u.dict.e[i].key)) ||
                    !template_list_push(r, x, template_ref(d->u.dict.e[i].val))) {
                    template_unref(r, x);
                    x = NULL;
                }
            }
        }
        if (!template_list_push(r, l, x)) {
            template_unref(r, l);
            return NULL;
        }
    }
    return l;
}

static struct template_value *list_method(struct template_render *r, const struct template_node *at,
                                          struct template_value *l, const char *m, const struct template_callargs *a)
{
    if (!strcmp(m, "copy"))
        return template_ref(l);
    static const char *const p[] = {"value"};
    if (l->u.list.view) {
        template_fail(r, at, HR_ERR_INVALID, "'%s' object has no attribute '%s'", template_type_name(l), m);
        return NULL;
    }
    struct template_value *arg[1];
    if (!template_bind(r, at, m, a, p, 1, 1, arg))
        return NULL;
    int64_t count = 0;
    for (size_t i = 0; i < l->u.list.n; i++)
        if (template_equal(l->u.list.items[i], arg[0])) {
            if (!strcmp(m, "index"))
                return template_int(r, (int64_t)i);
            count++;
        }
    if (!strcmp(m, "index")) {
        template_fail(r, at, HR_ERR_INVALID, "value is not in list");
        return NULL;
    }
    return template_int(r, count);
}

struct template_value *template_call_method(struct template_render *r, const struct template_node *at,
                                            struct template_value *self, const char *name,
                                            const struct template_callargs *a)
{
    switch (self->type) {
    case TEMPLATE_T_STR: return str_method(r, at, self, name, a);
    case TEMPLATE_T_DICT: return dict_method(r, at, self, name, a);
    case TEMPLATE_T_LIST: return list_method(r, at, self, name, a);
    case TEMPLATE_T_LOOP:
        if (!a->npos) {
            template_fail(r, at, HR_ERR_INVALID, "no items for cycling given");
            return NULL;
        }
        return template_ref(a->pos[self->u.loop.index0 % (int64_t)a->npos]);
    default:
        template_fail(r, at, HR_ERR_INVALID, "'%s' object has no method '%s'", template_type_name(self), name);
        return NULL;
    }
}

/* ========================================================================= globals */

static bool kwargs_into(struct template_render *r, struct template_value *d, const struct template_callargs *a)
{
    for (size_t k = 0; k < a->nkw; k++)
        if (!template_dict_set(r, d, a->kw[k].name, a->kw[k].len, template_ref(a->kw[k].val)))
            return false;
    return true;
}

static bool mapping_into(struct template_render *r, const struct template_node *at, struct template_value *d,
                         const struct template_value *src, const char *what)
{
    if (src->type == TEMPLATE_T_DICT || src->type == TEMPLATE_T_NAMESPACE) {
        for (size_t i = 0; i < src->u.dict.n; i++) {
            const struct template_value *k = src->u.dict.e[i].key;
            if (!template_dict_set(r, d, k->u.str.s, k->u.str.len, template_ref(src->u.dict.e[i].val)))
                return false;
        }
        return true;
    }
    if (src->type == TEMPLATE_T_LIST) {
        for (size_t i = 0; i < src->u.list.n; i++) {
            const struct template_value *pair = src->u.list.items[i];
            if (pair->type != TEMPLATE_T_LIST || pair->u.list.n != 2 ||
                pair->u.list.items[0]->type != TEMPLATE_T_STR)
                return template_fail(r, at, HR_ERR_INVALID, "%s() needs a mapping or (key, value) pairs", what);
            const struct template_value *k = pair->u.list.items[0];
            if (!template_dict_set(r, d, k->u.str.s, k->u.str.len, template_ref(pair->u.list.items[1])))
                return false;
        }
        return true;
    }
    return template_fail(r, at, HR_ERR_INVALID, "'%s' object is not iterable", template_type_name(src));
}

struct template_value *template_call_builtin(struct template_render *r, const struct template_node *at,
                                             enum template_builtin b, const struct template_callargs *a)
{
    switch (b) {
    case TEMPLATE_BUILTIN_RANGE: {
        if (a->nkw || a->npos < 1 || a->npos > 3) {
            template_fail(r, at, HR_ERR_INVALID, "range() takes 1 to 3 integer arguments");
            return NULL;
        }
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->npos; i++) {
            const struct template_value *x = a->pos[i];
            if (x->type != TEMPLATE_T_INT && x->type != TEMPLATE_T_BOOL) {
                template_fail(r, at, HR_ERR_INVALID, "range() arguments must be integers, not %s",
                              template_type_name(x));
                return NULL;
            }
            v[i] = x->type == TEMPLATE_T_BOOL ? x->u.b : x->u.i;
        }
        int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
        if (step == 0) {
            template_fail(r, at, HR_ERR_INVALID, "range() arg 3 must not be zero");
            return NULL;
        }
        double count = step > 0 ? ((double)stop - (double)start) / (double)step
                                : ((double)start - (double)stop) / -(double)step;
        if (count > RANGE_MAX) {
            template_fail(r, at, HR_ERR_INVALID, "range() too big: more than %d items", RANGE_MAX);
            return NULL;
        }
        struct template_value *l = template_list(r, count > 0 ? (size_t)count + 1 : 0);
        for (int64_t i = start; l && (step > 0 ? i < stop : i > stop); i += step)
            if (!template_list_push(r, l, template_int(r, i))) {
                template_unref(r, l);
                return NULL;
            }
        return l;
    }
    case TEMPLATE_BUILTIN_NAMESPACE:
    case TEMPLATE_BUILTIN_DICT: {
        const char *what = b == TEMPLATE_BUILTIN_DICT ? "dict" : "namespace";
        if (a->npos > 1) {
            template_fail(r, at, HR_ERR_INVALID, "%s() takes at most one positional argument", what);
            return NULL;
        }
        struct template_value *d = b == TEMPLATE_BUILTIN_DICT ? template_dict(r, 0) : template_namespace(r);
        if (d && ((a->npos && !mapping_into(r, at, d, a->pos[0], what)) || !kwargs_into(r, d, a))) {
            template_unref(r, d);
            return NULL;
        }
        return d;
    }
    case TEMPLATE_BUILTIN_RAISE_EXCEPTION: {
        struct template_buf msg = {.r = r};
        if (a->npos)
            template_to_str(r, &msg, a->pos[0]);
        if (r->status == HR_OK)
            template_fail(r, at, HR_ERR_INVALID, "%s", msg.data ? msg.data : "raise_exception() called");
        template_buf_free(&msg);
        return NULL;
    }
    case TEMPLATE_BUILTIN_STRFTIME_NOW: {
        if (a->npos != 1 || a->pos[0]->type != TEMPLATE_T_STR || a->nkw) {
            template_fail(r, at, HR_ERR_INVALID, "strftime_now() takes one format string");
            return NULL;
        }
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char out[512];
        size_t n = a->pos[0]->u.str.len ? strftime(out, sizeof out, a->pos[0]->u.str.s, &tm) : 0;
        return template_str(r, out, n);
    }
    default:
        break;
    }
    template_fail(r, at, HR_ERR_INTERNAL, "internal error: unknown builtin");
    return NULL;
}
