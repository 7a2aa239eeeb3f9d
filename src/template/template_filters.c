/* Template filters ({{ x | name(args) }}) and tests ({% if x is name %}) with Jinja2's
 * semantics; tojson is Hugging Face's (ensure_ascii=False, indent, separators, sort_keys). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

typedef struct template_value *(*filter_fn)(struct template_render *r, const struct template_node *at,
                                            struct template_value *v, const struct template_callargs *a);

#define BIND(name, ...)                                                                          \
    static const char *const params_[] = {__VA_ARGS__};                                          \
    struct template_value *arg[sizeof params_ / sizeof params_[0]];                             \
    if (!template_bind(r, at, name, a, params_, sizeof params_ / sizeof params_[0], 0, arg))      \
        return NULL

static bool is_true(const struct template_value *v)
{
    return v && template_truthy(v);
}

/* str(v) as a new string value (v itself when it is one). */
static struct template_value *as_str(struct template_render *r, struct template_value *v)
{
    if (v->type == TEMPLATE_T_STR)
        return template_ref(v);
    struct template_buf b = {.r = r};
    if (!template_to_str(r, &b, v)) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static bool want_int(struct template_render *r, const struct template_node *at, const char *what,
                     const struct template_value *v, int64_t *out)
{
    if (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_BOOL) {
        *out = v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i;
        return true;
    }
    return template_fail(r, at, HR_ERR_INVALID, "%s must be an integer, not %s", what, template_type_name(v));
}

/* Jinja's attribute getter: "a.b.0" looks up a, then b, then index 0 (getitem semantics). */
static struct template_value *attr_path(struct template_render *r, const struct template_node *at,
                                        struct template_value *item, const struct template_value *attr)
{
    if (attr->type == TEMPLATE_T_INT)
        return template_getitem(r, at, item, (struct template_value *)attr);
    if (attr->type != TEMPLATE_T_STR) {
        template_fail(r, at, HR_ERR_INVALID, "attribute must be a string or an integer");
        return NULL;
    }
    struct template_value *cur = template_ref(item);
    const char *s = attr->u.str.s, *end = s + attr->u.str.len;
    while (cur) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        size_t len = dot ? (size_t)(dot - s) : (size_t)(end - s);
        bool digits = len > 0;
        int64_t idx = 0;
        for (size_t i = 0; i < len && digits; i++) {
            digits = s[i] >= '0' && s[i] <= '9' && idx < INT64_MAX / 10;
            idx = idx * 10 + (s[i] - '0');
        }
        struct template_value *key = digits ? template_int(r, idx) : template_str(r, s, len);
        struct template_value *next = key ? template_getitem(r, at, cur, key) : NULL;
        template_unref(r, key);
        template_unref(r, cur);
        cur = next;
        if (!dot)
            break;
        s = dot + 1;
    }
    return cur;
}

/* Lowercases strings for the case-insensitive sorts and comparisons. */
static struct template_value *fold(struct template_render *r, struct template_value *v, bool ci)
{
    if (!v || !ci || v->type != TEMPLATE_T_STR)
        return v;
    struct template_value *l = template_str_case(r, v, 0);
    template_unref(r, v);
    return l;
}

/* Stable merge sort of items by keys (parallel arrays). */
static bool merge_sort(struct template_render *r, const struct template_node *at, struct template_value **items,
                       struct template_value **keys, size_t n, bool reverse, struct template_value **ti,
                       struct template_value **tk)
{
    if (n < 2)
        return true;
    size_t h = n / 2;
    if (!merge_sort(r, at, items, keys, h, reverse, ti, tk) ||
        !merge_sort(r, at, items + h, keys + h, n - h, reverse, ti, tk))
        return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = 0;
        if (!template_equal(keys[j], keys[i]) && !template_compare(r, at, keys[j], keys[i], false, &c))
            return false;
        if (reverse)
            c = -c;
        /* take from the right only when strictly before: equal keys keep their order */
        if (c < 0) {
            ti[k] = items[j];
            tk[k++] = keys[j++];
        } else {
            ti[k] = items[i];
            tk[k++] = keys[i++];
        }
    }
    while (i < h) {
        ti[k] = items[i];
        tk[k++] = keys[i++];
    }
    while (j < n) {
        ti[k] = items[j];
        tk[k++] = keys[j++];
    }
    memcpy(items, ti, n * sizeof *items);
    memcpy(keys, tk, n * sizeof *keys);
    return template_charge(r, n * 8);
}

/* Sorts list (a new list) by key(item) = attr path (or the item), case-folded unless ci false. */
static struct template_value *sorted(struct template_render *r, const struct template_node *at,
                                     struct template_value *list, const struct template_value *attr, bool ci,
                                     bool reverse, int key_index)
{
    size_t n = list->u.list.n;
    struct template_value **keys = calloc(n ? n : 1, sizeof *keys);
    struct template_value **items = calloc(n ? n : 1, sizeof *items);
    struct template_value **t1 = calloc(n ? n : 1, sizeof *t1);
    struct template_value **t2 = calloc(n ? n : 1, sizeof *t2);
    struct template_value *res = NULL;
    bool ok = keys && items && t1 && t2;
    if (!ok)
        template_fail(r, at, HR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; ok && i < n; i++) {
        struct template_value *it = list->u.list.items[i];
        items[i] = it;
        struct template_value *k;
        if (key_index >= 0)
            k = template_ref(it->u.list.items[key_index]);
        else if (attr && attr->type != TEMPLATE_T_NONE)
            k = attr_path(r, at, it, attr);
        else
            k = template_ref(it);
        keys[i] = fold(r, k, ci);
        ok = keys[i] != NULL;
    }
    if (ok)
        ok = merge_sort(r, at, items, keys, n, reverse, t1, t2);
    if (ok && (res = template_list(r, n)))
        for (size_t i = 0; i < n; i++)
            if (!template_list_push(r, res, template_ref(items[i]))) {
                template_unref(r, res);
                res = NULL;
                break;
            }
    for (size_t i = 0; keys && i < n; i++)
        template_unref(r, keys[i]);
    free(keys);
    free(items);
    free(t1);
    free(t2);
    return res;
}

static struct template_value *empty_generator(struct template_render *r)
{
    struct template_value *g = template_list(r, 0);
    if (g)
        g->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return g;
}

/* d.items() as a list of (key, value) tuples. */
static struct template_value *dict_items(struct template_render *r, const struct template_value *d)
{
    struct template_value *l = template_list(r, d->u.dict.n);
    for (size_t i = 0; l && i < d->u.dict.n; i++) {
        struct template_value *pair = template_list(r, 2);
        if (pair) {
            pair->u.list.is_tuple = true;
            if (!template_list_push(r, pair, template_ref(d->u.dict.e[i].key)) ||
                !template_list_push(r, pair, template_ref(d->u.dict.e[i].val))) {
                template_unref(r, pair);
                pair = NULL;
            }
        }
        if (!template_list_push(r, l, pair)) {
            template_unref(r, l);
            return NULL;
        }
    }
    return l;
}

/* ========================================================================= filters */

static struct template_value *f_abs(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    BIND("abs", "x");
    (void)arg;
    if (v->type == TEMPLATE_T_FLOAT)
        return template_float(r, fabs(v->u.f));
    if (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_BOOL) {
        int64_t i = v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i;
        if (i == INT64_MIN) {
            template_fail(r, at, HR_ERR_INVALID, "integer overflow in abs");
            return NULL;
        }
        return template_int(r, i < 0 ? -i : i);
    }
    template_fail(r, at, HR_ERR_INVALID, "bad operand type for abs(): '%s'", template_type_name(v));
    return NULL;
}

static struct template_value *f_attr(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("attr", "name");
    if (!arg[0] || arg[0]->type != TEMPLATE_T_STR) {
        template_fail(r, at, HR_ERR_INVALID, "attr() needs an attribute name");
        return NULL;
    }
    return template_getattr(r, at, v, arg[0]->u.str.s, arg[0]->u.str.len);
}

static struct template_value *f_batch(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    BIND("batch", "linecount", "fill_with");
    int64_t count = 0;
    if (!arg[0]) {
        template_fail(r, at, HR_ERR_INVALID, "batch() missing required argument 'linecount'");
        return NULL;
    }
    if (!want_int(r, at, "linecount", arg[0], &count))
        return NULL;
    if (count <= 0) {
        template_fail(r, at, HR_ERR_INVALID, "batch() linecount must be positive");
        return NULL;
    }
    struct template_value *items = template_iterate(r, at, v), *res = items ? template_list(r, 0) : NULL;
    struct template_value *cur = NULL;
    bool ok = res != NULL;
    for (size_t i = 0; ok && i < items->u.list.n; i++) {
        if (!cur && !(cur = template_list(r, (size_t)count)))
            ok = false;
        ok = ok && template_list_push(r, cur, template_ref(items->u.list.items[i]));
        if (ok && (int64_t)cur->u.list.n == count) {
            ok = template_list_push(r, res, cur);
            cur = NULL;
        }
    }
    if (ok && cur) {
        while (ok && arg[1] && (int64_t)cur->u.list.n < count)
            ok = template_list_push(r, cur, template_ref(arg[1]));
        ok = ok && template_list_push(r, res, cur);
        cur = NULL;
    }
    template_unref(r, cur);
    template_unref(r, items);
    if (!ok) {
        template_unref(r, res);
        return NULL;
    }
    res->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return res;
}

static struct template_value *f_capitalize(struct template_render *r, const struct template_node *at,
                                           struct template_value *v, const struct template_callargs *a)
{
    BIND("capitalize", "x");
    (void)arg;
    struct template_value *s = as_str(r, v), *res = s ? template_str_case(r, s, 2) : NULL;
    template_unref(r, s);
    return res;
}

static struct template_value *f_center(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("center", "width");
    int64_t width = 80;
    if (arg[0] && !want_int(r, at, "width", arg[0], &width))
        return NULL;
    struct template_value *s = as_str(r, v);
    if (!s)
        return NULL;
    int64_t len = (int64_t)template_utf8_count(s->u.str.s, s->u.str.len);
    if (width <= len)
        return s;
    if ((uint64_t)width > r->lim->max_output) {
        template_unref(r, s);
        template_limit(r, at, "center() width too large");
        return NULL;
    }
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    struct template_buf b = {.r = r};
    bool ok = true;
    for (int64_t i = 0; ok && i < left; i++)
        ok = template_buf_putc(&b, ' ');
    ok = ok && template_buf_put(&b, s->u.str.s, s->u.str.len);
    for (int64_t i = 0; ok && i < marg - left; i++)
        ok = template_buf_putc(&b, ' ');
    template_unref(r, s);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *f_default(struct template_render *r, const struct template_node *at,
                                        struct template_value *v, const struct template_callargs *a)
{
    BIND("default", "default_value", "boolean");
    if (v->type == TEMPLATE_T_UNDEFINED || (is_true(arg[1]) && !template_truthy(v)))
        return arg[0] ? template_ref(arg[0]) : template_str(r, "", 0);
    return template_ref(v);
}

static struct template_value *f_dictsort(struct template_render *r, const struct template_node *at,
                                         struct template_value *v, const struct template_callargs *a)
{
    BIND("dictsort", "case_sensitive", "by", "reverse");
    int by = 0;
    if (arg[1]) {
        if (arg[1]->type == TEMPLATE_T_STR && arg[1]->u.str.len == 5 && !memcmp(arg[1]->u.str.s, "value", 5))
            by = 1;
        else if (!(arg[1]->type == TEMPLATE_T_STR && arg[1]->u.str.len == 3 && !memcmp(arg[1]->u.str.s, "key", 3))) {
            template_fail(r, at, HR_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
            return NULL;
        }
    }
    if (v->type != TEMPLATE_T_DICT) {
        template_fail(r, at, HR_ERR_INVALID, "dictsort() needs a mapping, not %s", template_type_name(v));
        return NULL;
    }
    struct template_value *items = dict_items(r, v);
    if (!items)
        return NULL;
    struct template_value *res = sorted(r, at, items, NULL, !is_true(arg[0]), is_true(arg[2]), by);
    template_unref(r, items);
    return res;
}

static struct template_value *f_escape(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("escape", "x");
    (void)arg;
    struct template_value *s = as_str(r, v);
    if (!s)
        return NULL;
    struct template_buf b = {.r = r};
    bool ok = true;
    for (size_t i = 0; ok && i < s->u.str.len; i++) {
        char c = s->u.str.s[i];
        switch (c) {
        case '&': ok = template_buf_puts(&b, "&amp;"); break;
        case '<': ok = template_buf_puts(&b, "&lt;"); break;
        case '>': ok = template_buf_puts(&b, "&gt;"); break;
        case '"': ok = template_buf_puts(&b, "&#34;"); break;
        case '\'': ok = template_buf_puts(&b, "&#39;"); break;
        default: ok = template_buf_putc(&b, c); break;
        }
    }
    template_unref(r, s);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *f_first_last(struct template_render *r, const struct template_node *at,
                                           struct template_value *v, const struct template_callargs *a, bool last)
{
    BIND(last ? "last" : "first", "x");
    (void)arg;
    if (last && template_is_iterator(v)) {
        template_fail(r, at, HR_ERR_INVALID, "'%s' object is not reversible", template_type_name(v));
        return NULL;
    }
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *res = &template_undefined;
    if (items->u.list.n)
        res = template_ref(items->u.list.items[last ? items->u.list.n - 1 : 0]);
    template_unref(r, items);
    return res;
}

static struct template_value *f_first(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    return f_first_last(r, at, v, a, false);
}

static struct template_value *f_last(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    return f_first_last(r, at, v, a, true);
}

/* Python float(str) / int(str): surrounding whitespace allowed, nothing else. */
static bool parse_float(const char *s, size_t n, double *out)
{
    char tmp[128];
    while (n && template_is_space((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && template_is_space((unsigned char)s[n - 1]))
        n--;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_' && i > 0 && i + 1 < n && s[i - 1] >= '0' && s[i - 1] <= '9' && s[i + 1] >= '0' &&
            s[i + 1] <= '9')
            continue;
        if (k + 1 >= sizeof tmp || (s[i] == 'x' || s[i] == 'X' || s[i] == 'p' || s[i] == 'P'))
            return false;
        tmp[k++] = s[i];
    }
    tmp[k] = 0;
    if (!k)
        return false;
    char *end;
    *out = strtod(tmp, &end);
    return *end == 0;
}

/* Python int(str, base): whitespace around, a sign, '_' between digits, and a 0x / 0o / 0b
 * prefix that matches the base (base 0: any prefix, decimal otherwise). */
static bool parse_int(const char *s, size_t n, int base, int64_t *out)
{
    while (n && template_is_space((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && template_is_space((unsigned char)s[n - 1]))
        n--;
    bool neg = false;
    if (n && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++;
        n--;
    }
    if (n >= 2 && s[0] == '0') {
        char p = (char)(s[1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            s += 2;
            n -= 2;
            if (n && *s == '_') {
                s++;
                n--;
            }
        }
    }
    if (base == 0)
        base = 10;
    if (!n)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '_' && i > 0 && i + 1 < n && s[i - 1] != '_')
            continue;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : c >= 'A' && c <= 'Z' ? c - 'A' + 10 : 99;
        if (d >= base)
            return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static struct template_value *f_float(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    BIND("float", "default");
    double d;
    switch (v->type) {
    case TEMPLATE_T_FLOAT: return template_ref(v);
    case TEMPLATE_T_INT: return template_float(r, (double)v->u.i);
    case TEMPLATE_T_BOOL: return template_float(r, v->u.b);
    case TEMPLATE_T_STR:
        if (parse_float(v->u.str.s, v->u.str.len, &d))
            return template_float(r, d);
        break;
    default: break;
    }
    return arg[0] ? template_ref(arg[0]) : template_float(r, 0.0);
}

static struct template_value *f_int(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    BIND("int", "default", "base");
    int64_t base = 10, i;
    if (arg[1] && !want_int(r, at, "base", arg[1], &base))
        return NULL;
    double d;
    switch (v->type) {
    case TEMPLATE_T_INT: return template_ref(v);
    case TEMPLATE_T_BOOL: return template_int(r, v->u.b);
    case TEMPLATE_T_FLOAT:
        if (isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
            return template_int(r, (int64_t)v->u.f);
        break;
    case TEMPLATE_T_STR:
        if ((base == 0 || (base >= 2 && base <= 36)) && parse_int(v->u.str.s, v->u.str.len, (int)base, &i))
            return template_int(r, i);
        if (parse_float(v->u.str.s, v->u.str.len, &d) && isfinite(d) && fabs(d) < 9.2e18)
            return template_int(r, (int64_t)d);
        break;
    default: break;
    }
    return arg[0] ? template_ref(arg[0]) : template_int(r, 0);
}

static struct template_value *f_indent(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("indent", "width", "first", "blank");
    struct template_buf ind = {.r = r};
    if (arg[0] && arg[0]->type == TEMPLATE_T_STR) {
        if (!template_buf_put(&ind, arg[0]->u.str.s, arg[0]->u.str.len))
            return NULL;
    } else {
        int64_t w = 4;
        if (arg[0] && !want_int(r, at, "width", arg[0], &w))
            return NULL;
        if (w > 4096) {
            template_limit(r, at, "indent() width too large");
            return NULL;
        }
        for (int64_t i = 0; i < w; i++)
            if (!template_buf_putc(&ind, ' ')) {
                template_buf_free(&ind);
                return NULL;
            }
    }
    if (v->type != TEMPLATE_T_STR) { /* Python: s += "\n" fails for anything else */
        template_buf_free(&ind);
        template_fail(r, at, HR_ERR_INVALID, "indent() needs a string, not %s", template_type_name(v));
        return NULL;
    }
    struct template_value *s = template_ref(v);
    bool first = is_true(arg[1]), blank = is_true(arg[2]);
    /* Jinja splits s + "\n" with splitlines(): the lines of s, an empty last one included when s
     * ends with a newline */
    struct template_buf b = {.r = r};
    bool ok = template_charge(r, s->u.str.len);
    const char *p = s->u.str.s, *end = p + s->u.str.len;
    size_t line = 0;
    if (first && ok)
        ok = template_buf_put(&b, ind.data, ind.len);
    for (;;) {
        const char *q = p;
        while (q < end && *q != '\n' && *q != '\r' && *q != '\v' && *q != '\f')
            q++;
        if (line > 0) {
            ok = ok && template_buf_putc(&b, '\n');
            if (ok && (blank || q > p))
                ok = template_buf_put(&b, ind.data, ind.len);
        }
        ok = ok && template_buf_put(&b, p, (size_t)(q - p));
        line++;
        if (!ok || q == end)
            break;
        p = (*q == '\r' && q + 1 < end && q[1] == '\n') ? q + 2 : q + 1;
    }
    template_unref(r, s);
    template_buf_free(&ind);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *f_items(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    BIND("items", "x");
    (void)arg;
    if (v->type == TEMPLATE_T_UNDEFINED)
        return empty_generator(r);
    if (v->type != TEMPLATE_T_DICT) {
        template_fail(r, at, HR_ERR_INVALID, "can only get item pairs from a mapping, not %s",
                      template_type_name(v));
        return NULL;
    }
    struct template_value *l = dict_items(r, v);
    if (l)
        l->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return l;
}

static struct template_value *f_join(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("join", "d", "attribute");
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_buf b = {.r = r};
    bool ok = true;
    for (size_t i = 0; ok && i < items->u.list.n; i++) {
        if (i && arg[0])
            ok = template_to_str(r, &b, arg[0]);
        struct template_value *it = items->u.list.items[i];
        if (ok && arg[1] && arg[1]->type != TEMPLATE_T_NONE) {
            struct template_value *x = attr_path(r, at, it, arg[1]);
            ok = x && template_to_str(r, &b, x);
            template_unref(r, x);
        } else if (ok) {
            ok = template_to_str(r, &b, it);
        }
    }
    template_unref(r, items);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *f_length(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("length", "x");
    (void)arg;
    switch (v->type) {
    case TEMPLATE_T_STR:
        if (!template_charge(r, v->u.str.len))
            return NULL;
        return template_int(r, (int64_t)template_utf8_count(v->u.str.s, v->u.str.len));
    case TEMPLATE_T_LIST:
        if (template_is_iterator(v))
            break;
        return template_int(r, (int64_t)v->u.list.n);
    case TEMPLATE_T_DICT: return template_int(r, (int64_t)v->u.dict.n);
    case TEMPLATE_T_UNDEFINED: return template_int(r, 0);
    default:
        break;
    }
    template_fail(r, at, HR_ERR_INVALID, "object of type '%s' has no len()", template_type_name(v));
    return NULL;
}

static struct template_value *f_list(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("list", "x");
    (void)arg;
    struct template_value *items = template_iterate(r, at, v);
    if (!items || !(items->u.list.is_tuple || items->u.list.view))
        return items;
    struct template_value *l = template_list(r, items->u.list.n);
    for (size_t i = 0; l && i < items->u.list.n; i++)
        if (!template_list_push(r, l, template_ref(items->u.list.items[i]))) {
            template_unref(r, l);
            l = NULL;
        }
    template_unref(r, items);
    return l;
}

static struct template_value *f_case(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a, int mode,
                                     const char *name)
{
    BIND(name, "x");
    (void)arg;
    struct template_value *s = as_str(r, v), *res = s ? template_str_case(r, s, mode) : NULL;
    template_unref(r, s);
    return res;
}

static struct template_value *f_lower(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    return f_case(r, at, v, a, 0, "lower");
}

static struct template_value *f_upper(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    return f_case(r, at, v, a, 1, "upper");
}

static struct template_value *f_title(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    BIND("title", "x");
    (void)arg;
    /* Jinja's title: words start after '-', whitespace or an opening bracket; the first
     * character of each word is upper-cased and the rest lower-cased */
    struct template_value *s = as_str(r, v);
    if (!s)
        return NULL;
    struct template_buf b = {.r = r};
    bool ok = true, start = true;
    size_t i = 0, adv;
    while (ok && i < s->u.str.len) {
        uint32_t c = template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv);
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || template_is_space(c);
        if (sep) {
            ok = template_buf_put(&b, s->u.str.s + i, adv);
            start = true;
        } else {
            ok = template_buf_put_cp(&b, start ? template_to_upper(c) : template_to_lower(c));
            start = false;
        }
        i += adv;
    }
    template_unref(r, s);
    if (!ok) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

/* Applies a filter named by a string value to each item (map('upper')). */
static struct template_value *apply_named(struct template_render *r, const struct template_node *at,
                                          const struct template_value *name, struct template_value *item,
                                          const struct template_callargs *rest)
{
    return template_apply_filter(r, at, name->u.str.s, name->u.str.len, item, rest);
}

static struct template_value *f_map(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    if (!template_truthy(v)) /* Jinja looks at nothing, not even the arguments, for a false input */
        return empty_generator(r);
    const struct template_value *attr = NULL, *def = NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        if (a->kw[k].len == 9 && !memcmp(a->kw[k].name, "attribute", 9))
            attr = a->kw[k].val;
        else if (a->kw[k].len == 7 && !memcmp(a->kw[k].name, "default", 7))
            def = a->kw[k].val;
        else if (!a->npos) {
            template_fail(r, at, HR_ERR_INVALID, "map() got an unexpected keyword argument '%.*s'",
                          (int)a->kw[k].len, a->kw[k].name);
            return NULL;
        }
    }
    if (!attr && (!a->npos || a->pos[0]->type != TEMPLATE_T_STR)) {
        template_fail(r, at, HR_ERR_INVALID, "map() needs a filter name or attribute=");
        return NULL;
    }
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *res = template_list(r, items->u.list.n);
    struct template_callargs rest = {.pos = a->npos ? a->pos + 1 : NULL, .npos = a->npos ? a->npos - 1 : 0,
                                     .kw = a->kw, .nkw = attr ? 0 : a->nkw};
    for (size_t i = 0; res && i < items->u.list.n; i++) {
        struct template_value *x;
        if (attr) {
            x = attr_path(r, at, items->u.list.items[i], attr);
            if (x && x->type == TEMPLATE_T_UNDEFINED && def)
                x = template_ref((struct template_value *)def);
        } else {
            x = apply_named(r, at, a->pos[0], items->u.list.items[i], &rest);
        }
        if (!template_list_push(r, res, x)) {
            template_unref(r, res);
            res = NULL;
        }
    }
    template_unref(r, items);
    if (res)
        res->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return res;
}

static struct template_value *f_minmax(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a, bool want_max)
{
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *best = NULL, *best_key = NULL;
    bool ok = true, ci = !is_true(arg[0]);
    for (size_t i = 0; ok && i < items->u.list.n; i++) {
        struct template_value *it = items->u.list.items[i];
        struct template_value *k = arg[1] && arg[1]->type != TEMPLATE_T_NONE ? attr_path(r, at, it, arg[1])
                                                                             : template_ref(it);
        k = fold(r, k, ci);
        if (!k) {
            ok = false;
            break;
        }
        int c = 0;
        if (best && !(ok = template_compare(r, at, k, best_key, false, &c))) {
            template_unref(r, k);
            break;
        }
        if (!best || (want_max ? c > 0 : c < 0)) {
            best = it;
            template_unref(r, best_key);
            best_key = k;
        } else {
            template_unref(r, k);
        }
    }
    template_unref(r, best_key);
    struct template_value *res = ok ? (best ? template_ref(best) : &template_undefined) : NULL;
    template_unref(r, items);
    return res;
}

static struct template_value *f_max(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    return f_minmax(r, at, v, a, true);
}

static struct template_value *f_min(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    return f_minmax(r, at, v, a, false);
}

/* select / reject / selectattr / rejectattr */
static struct template_value *select_common(struct template_render *r, const struct template_node *at,
                                            struct template_value *v, const struct template_callargs *a,
                                            bool keep_when, bool by_attr)
{
    if (!template_truthy(v)) /* as Jinja: a false input yields nothing, whatever the arguments */
        return empty_generator(r);
    size_t first = by_attr ? 1 : 0;
    if (by_attr && (!a->npos || (a->pos[0]->type != TEMPLATE_T_STR && a->pos[0]->type != TEMPLATE_T_INT))) {
        template_fail(r, at, HR_ERR_INVALID, "%s() needs an attribute name", keep_when ? "selectattr" : "rejectattr");
        return NULL;
    }
    const struct template_value *test = a->npos > first ? a->pos[first] : NULL;
    if (test && test->type != TEMPLATE_T_STR) {
        template_fail(r, at, HR_ERR_INVALID, "the test name must be a string");
        return NULL;
    }
    if (test && !template_test_exists(test->u.str.s, test->u.str.len)) {
        template_fail(r, at, HR_ERR_INVALID, "no test named '%.*s'", (int)test->u.str.len, test->u.str.s);
        return NULL;
    }
    struct template_callargs rest = {.pos = a->npos > first + 1 ? a->pos + first + 1 : NULL,
                                     .npos = a->npos > first + 1 ? a->npos - first - 1 : 0, .kw = a->kw, .nkw = a->nkw};
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *res = template_list(r, 0);
    for (size_t i = 0; res && i < items->u.list.n; i++) {
        struct template_value *it = items->u.list.items[i];
        struct template_value *x = by_attr ? attr_path(r, at, it, a->pos[0]) : template_ref(it);
        bool t = false, ok = x != NULL;
        if (ok && test)
            ok = template_apply_test(r, at, test->u.str.s, test->u.str.len, x, &rest, &t);
        else if (ok)
            t = template_truthy(x);
        template_unref(r, x);
        if (!ok || (t == keep_when && !template_list_push(r, res, template_ref(it)))) {
            template_unref(r, res);
            res = NULL;
        }
    }
    template_unref(r, items);
    if (res)
        res->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return res;
}

static struct template_value *f_select(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    return select_common(r, at, v, a, true, false);
}

static struct template_value *f_reject(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    return select_common(r, at, v, a, false, false);
}

static struct template_value *f_selectattr(struct template_render *r, const struct template_node *at,
                                           struct template_value *v, const struct template_callargs *a)
{
    return select_common(r, at, v, a, true, true);
}

static struct template_value *f_rejectattr(struct template_render *r, const struct template_node *at,
                                           struct template_value *v, const struct template_callargs *a)
{
    return select_common(r, at, v, a, false, true);
}

static struct template_value *f_replace(struct template_render *r, const struct template_node *at,
                                        struct template_value *v, const struct template_callargs *a)
{
    static const char *const params[] = {"old", "new", "count"};
    struct template_value *arg[3];
    if (!template_bind(r, at, "replace", a, params, 3, 2, arg))
        return NULL;
    int64_t count = -1;
    if (arg[2] && arg[2]->type != TEMPLATE_T_NONE && !want_int(r, at, "count", arg[2], &count))
        return NULL;
    struct template_value *s = as_str(r, v), *o = s ? as_str(r, arg[0]) : NULL, *n = o ? as_str(r, arg[1]) : NULL;
    struct template_value *res = n ? template_str_replace(r, at, s, o, n, count) : NULL;
    template_unref(r, s);
    template_unref(r, o);
    template_unref(r, n);
    return res;
}

static struct template_value *f_reverse(struct template_render *r, const struct template_node *at,
                                        struct template_value *v, const struct template_callargs *a)
{
    BIND("reverse", "x");
    (void)arg;
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *res;
    if (v->type == TEMPLATE_T_STR) {
        struct template_buf b = {.r = r};
        bool ok = true;
        for (size_t i = items->u.list.n; ok && i-- > 0;)
            ok = template_buf_put(&b, items->u.list.items[i]->u.str.s, items->u.list.items[i]->u.str.len);
        res = ok ? template_str_take(r, &b) : NULL;
        if (!ok)
            template_buf_free(&b);
    } else {
        res = template_list(r, items->u.list.n);
        for (size_t i = items->u.list.n; res && i-- > 0;)
            if (!template_list_push(r, res, template_ref(items->u.list.items[i]))) {
                template_unref(r, res);
                res = NULL;
            }
        /* reversed(list), reversed(dict) are iterators; a generator is reversed into a list */
        if (res && !template_is_iterator(items))
            res->u.list.view = v->type == TEMPLATE_T_DICT ? TEMPLATE_VIEW_REVERSED_KEYS : TEMPLATE_VIEW_REVERSED;
    }
    template_unref(r, items);
    return res;
}

static struct template_value *f_round(struct template_render *r, const struct template_node *at,
                                      struct template_value *v, const struct template_callargs *a)
{
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (arg[0] && !want_int(r, at, "precision", arg[0], &prec))
        return NULL;
    const char *method = "common";
    if (arg[1]) {
        if (arg[1]->type != TEMPLATE_T_STR || (strcmp(arg[1]->u.str.s, "common") && strcmp(arg[1]->u.str.s, "ceil") &&
                                               strcmp(arg[1]->u.str.s, "floor"))) {
            template_fail(r, at, HR_ERR_INVALID, "method must be common, ceil or floor");
            return NULL;
        }
        method = arg[1]->u.str.s;
    }
    if (v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_BOOL) {
        if (!strcmp(method, "common") && prec >= 0)
            return template_int(r, v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i);
    } else if (v->type != TEMPLATE_T_FLOAT) {
        template_fail(r, at, HR_ERR_INVALID, "round() needs a number, not %s", template_type_name(v));
        return NULL;
    }
    double x = v->type == TEMPLATE_T_FLOAT ? v->u.f : v->type == TEMPLATE_T_BOOL ? v->u.b : (double)v->u.i;
    if (prec > 300)
        prec = 300;
    if (prec < -300)
        prec = -300;
    double scale = pow(10.0, (double)prec), y;
    if (!strcmp(method, "ceil"))
        y = ceil(x * scale) / scale;
    else if (!strcmp(method, "floor"))
        y = floor(x * scale) / scale;
    else
        y = prec == 0 ? nearbyint(x) : nearbyint(x * scale) / scale;
    return template_float(r, y);
}

static struct template_value *f_safe(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("safe", "x");
    (void)arg;
    return as_str(r, v); /* Markup(value): a string */
}

static struct template_value *f_sort(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("sort", "reverse", "case_sensitive", "attribute");
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    struct template_value *res = sorted(r, at, items, arg[2], !is_true(arg[1]), is_true(arg[0]), -1);
    template_unref(r, items);
    return res;
}

static struct template_value *f_string(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("string", "x");
    (void)arg;
    return as_str(r, v);
}

static struct template_value *f_sum(struct template_render *r, const struct template_node *at,
                                    struct template_value *v, const struct template_callargs *a)
{
    BIND("sum", "attribute", "start");
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    bool fl = arg[1] && arg[1]->type == TEMPLATE_T_FLOAT, ok = true;
    int64_t isum = 0;
    double fsum = 0;
    if (arg[1]) {
        if (arg[1]->type == TEMPLATE_T_FLOAT)
            fsum = arg[1]->u.f;
        else if (!want_int(r, at, "start", arg[1], &isum))
            ok = false;
    }
    for (size_t i = 0; ok && i < items->u.list.n; i++) {
        struct template_value *x = arg[0] && arg[0]->type != TEMPLATE_T_NONE
                                       ? attr_path(r, at, items->u.list.items[i], arg[0])
                                       : template_ref(items->u.list.items[i]);
        if (!x) {
            ok = false;
            break;
        }
        if (x->type == TEMPLATE_T_FLOAT) {
            if (!fl) {
                fsum = (double)isum;
                fl = true;
            }
            fsum += x->u.f;
        } else if (x->type == TEMPLATE_T_INT || x->type == TEMPLATE_T_BOOL) {
            int64_t y = x->type == TEMPLATE_T_BOOL ? x->u.b : x->u.i;
            if (fl)
                fsum += (double)y;
            else if (__builtin_add_overflow(isum, y, &isum))
                ok = template_fail(r, at, HR_ERR_INVALID, "integer overflow in sum");
        } else {
            ok = template_fail(r, at, HR_ERR_INVALID, "unsupported operand type(s) for +: 'int' and '%s'",
                               template_type_name(x));
        }
        template_unref(r, x);
    }
    template_unref(r, items);
    if (!ok)
        return NULL;
    return fl ? template_float(r, fsum) : template_int(r, isum);
}

static struct template_value *f_tojson(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    struct template_json_opts o = {.ensure_ascii = is_true(arg[0]), .sort_keys = is_true(arg[3]), .indent = -1};
    if (arg[1] && arg[1]->type != TEMPLATE_T_NONE) {
        if (arg[1]->type == TEMPLATE_T_STR) {
            o.indent_str = arg[1]->u.str.s;
        } else {
            int64_t ind = 0;
            if (!want_int(r, at, "indent", arg[1], &ind))
                return NULL;
            o.indent = ind < 0 ? 0 : ind > 64 ? 64 : (int)ind;
        }
    }
    if (arg[2] && arg[2]->type != TEMPLATE_T_NONE) {
        if (arg[2]->type != TEMPLATE_T_LIST || arg[2]->u.list.n != 2 ||
            arg[2]->u.list.items[0]->type != TEMPLATE_T_STR || arg[2]->u.list.items[1]->type != TEMPLATE_T_STR) {
            template_fail(r, at, HR_ERR_INVALID, "separators must be a pair of strings");
            return NULL;
        }
        o.item_sep = arg[2]->u.list.items[0]->u.str.s;
        o.key_sep = arg[2]->u.list.items[1]->u.str.s;
    }
    struct template_buf b = {.r = r};
    if (!template_to_json(r, &b, v, &o)) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *f_trim(struct template_render *r, const struct template_node *at,
                                     struct template_value *v, const struct template_callargs *a)
{
    BIND("trim", "chars");
    struct template_value *s = as_str(r, v);
    if (!s)
        return NULL;
    if (arg[0] && arg[0]->type != TEMPLATE_T_NONE && arg[0]->type != TEMPLATE_T_STR) {
        template_unref(r, s);
        template_fail(r, at, HR_ERR_INVALID, "trim() chars must be a string");
        return NULL;
    }
    struct template_value *res = template_str_strip(r, s, arg[0], true, true);
    template_unref(r, s);
    return res;
}

static struct template_value *f_unique(struct template_render *r, const struct template_node *at,
                                       struct template_value *v, const struct template_callargs *a)
{
    BIND("unique", "case_sensitive", "attribute");
    struct template_value *items = template_iterate(r, at, v);
    if (!items)
        return NULL;
    bool ci = !is_true(arg[0]);
    struct template_value *res = template_list(r, 0), *seen = template_list(r, 0);
    bool ok = res && seen;
    for (size_t i = 0; ok && i < items->u.list.n; i++) {
        struct template_value *it = items->u.list.items[i];
        struct template_value *k = arg[1] && arg[1]->type != TEMPLATE_T_NONE ? attr_path(r, at, it, arg[1])
                                                                             : template_ref(it);
        k = fold(r, k, ci);
        if (!k) {
            ok = false;
            break;
        }
        bool dup = false;
        for (size_t j = 0; j < seen->u.list.n && !dup; j++)
            dup = template_equal(k, seen->u.list.items[j]);
        ok = template_charge(r, seen->u.list.n * 16);
        if (ok && !dup)
            ok = template_list_push(r, seen, k) && template_list_push(r, res, template_ref(it));
        else
            template_unref(r, k);
    }
    template_unref(r, seen);
    template_unref(r, items);
    if (!ok) {
        template_unref(r, res);
        return NULL;
    }
    res->u.list.view = TEMPLATE_VIEW_GENERATOR;
    return res;
}

static struct template_value *f_wordcount(struct template_render *r, const struct template_node *at,
                                          struct template_value *v, const struct template_callargs *a)
{
    BIND("wordcount", "x");
    (void)arg;
    struct template_value *s = as_str(r, v);
    if (!s)
        return NULL;
    int64_t words = 0;
    bool in = false;
    size_t i = 0, adv;
    while (i < s->u.str.len) {
        bool w = template_is_word(template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv));
        if (w && !in)
            words++;
        in = w;
        i += adv;
    }
    template_unref(r, s);
    return template_int(r, words);
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

static filter_fn find_filter(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (strlen(FILTERS[i].name) == len && !memcmp(FILTERS[i].name, name, len))
            return FILTERS[i].fn;
    return NULL;
}

bool template_filter_exists(const char *name, size_t len)
{
    return find_filter(name, len) != NULL;
}

/* Jinja's generator filters: their errors surface only when the result is consumed. */
static bool is_generator_filter(filter_fn fn)
{
    return fn == f_map || fn == f_select || fn == f_reject || fn == f_selectattr || fn == f_rejectattr ||
           fn == f_unique || fn == f_batch || fn == f_items;
}

struct template_value *template_apply_filter(struct template_render *r, const struct template_node *at,
                                             const char *name, size_t len, struct template_value *v,
                                             const struct template_callargs *a)
{
    filter_fn fn = find_filter(name, len);
    if (!fn) {
        template_fail(r, at, HR_ERR_INVALID, "no filter named '%.*s'", (int)(len > 64 ? 64 : len), name);
        return NULL;
    }
    if (!is_generator_filter(fn) || r->status != HR_OK)
        return fn(r, at, v, a);
    struct template_value *res = fn(r, at, v, a);
    if (res || r->status != HR_ERR_INVALID || r->limit_hit)
        return res;
    /* a type error inside the generator: Python raises it only if the generator is consumed */
    const char *msg = r->err && r->errlen ? r->err : "error in a generator filter";
    char *copy = strdup(msg);
    r->status = HR_OK;
    struct template_value *g = copy ? template_list(r, 0) : NULL;
    if (!g) {
        free(copy);
        if (r->status == HR_OK)
            template_fail(r, at, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    g->u.list.view = TEMPLATE_VIEW_GENERATOR;
    g->u.list.pending = copy;
    return g;
}

/* =========================================================================== tests */

enum test_id {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER,
    T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_ODD, T_EVEN, T_DIVISIBLEBY,
    T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_SAMEAS, T_LOWER, T_UPPER, T_ESCAPED, T_FILTER, T_TEST,
};

static const struct {
    const char *name;
    enum test_id id;
    int nargs;
} TESTS[] = {
    {"defined", T_DEFINED, 0},     {"undefined", T_UNDEFINED, 0}, {"none", T_NONE, 0},
    {"boolean", T_BOOLEAN, 0},     {"false", T_FALSE, 0},         {"true", T_TRUE, 0},
    {"integer", T_INTEGER, 0},     {"float", T_FLOAT, 0},         {"number", T_NUMBER, 0},
    {"string", T_STRING, 0},       {"mapping", T_MAPPING, 0},     {"iterable", T_ITERABLE, 0},
    {"sequence", T_SEQUENCE, 0},   {"callable", T_CALLABLE, 0},   {"odd", T_ODD, 0},
    {"even", T_EVEN, 0},           {"divisibleby", T_DIVISIBLEBY, 1},
    {"eq", T_EQ, 1},               {"equalto", T_EQ, 1},          {"==", T_EQ, 1},
    {"ne", T_NE, 1},               {"!=", T_NE, 1},               {"lt", T_LT, 1},
    {"lessthan", T_LT, 1},         {"<", T_LT, 1},                {"le", T_LE, 1},
    {"<=", T_LE, 1},               {"gt", T_GT, 1},               {"greaterthan", T_GT, 1},
    {">", T_GT, 1},                {"ge", T_GE, 1},               {">=", T_GE, 1},
    {"in", T_IN, 1},               {"sameas", T_SAMEAS, 1},       {"lower", T_LOWER, 0},
    {"upper", T_UPPER, 0},         {"escaped", T_ESCAPED, 0},     {"filter", T_FILTER, 0},
    {"test", T_TEST, 0},
};

static int find_test(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
        if (strlen(TESTS[i].name) == len && !memcmp(TESTS[i].name, name, len))
            return (int)i;
    return -1;
}

bool template_test_exists(const char *name, size_t len)
{
    return find_test(name, len) >= 0;
}

/* Python's x % m as a double (exact for the integers the tests see), for odd (== 1), even and
 * divisibleby (== 0). */
static bool modulo(struct template_render *r, const struct template_node *at, const struct template_value *x,
                   const struct template_value *m, double *rem)
{
    if ((x->type == TEMPLATE_T_INT || x->type == TEMPLATE_T_BOOL) && (m->type == TEMPLATE_T_INT || m->type == TEMPLATE_T_BOOL)) {
        int64_t a = x->type == TEMPLATE_T_BOOL ? x->u.b : x->u.i, b = m->type == TEMPLATE_T_BOOL ? m->u.b : m->u.i;
        if (b == 0)
            return template_fail(r, at, HR_ERR_INVALID, "division by zero");
        int64_t z = b == -1 ? 0 : a % b;
        if (z != 0 && ((z < 0) != (b < 0)))
            z += b;
        *rem = (double)z;
        return true;
    }
    if ((x->type == TEMPLATE_T_FLOAT || x->type == TEMPLATE_T_INT || x->type == TEMPLATE_T_BOOL) &&
        (m->type == TEMPLATE_T_FLOAT || m->type == TEMPLATE_T_INT || m->type == TEMPLATE_T_BOOL)) {
        double a = x->type == TEMPLATE_T_FLOAT ? x->u.f : x->type == TEMPLATE_T_BOOL ? x->u.b : (double)x->u.i;
        double b = m->type == TEMPLATE_T_FLOAT ? m->u.f : m->type == TEMPLATE_T_BOOL ? m->u.b : (double)m->u.i;
        if (b == 0)
            return template_fail(r, at, HR_ERR_INVALID, "division by zero");
        double z = fmod(a, b);
        if (z != 0 && ((z < 0) != (b < 0)))
            z += b;
        *rem = z;
        return true;
    }
    return template_fail(r, at, HR_ERR_INVALID, "unsupported operand type(s) for %%: '%s' and '%s'",
                         template_type_name(x), template_type_name(m));
}

/* str(v).islower() / isupper(): some cased character and none of the other case. */
static bool case_test(struct template_render *r, struct template_value *v, bool upper, bool *res)
{
    struct template_value *s = as_str(r, v);
    if (!s)
        return false;
    bool cased = false, ok = true;
    size_t i = 0, adv;
    while (i < s->u.str.len && ok) {
        uint32_t c = template_utf8_decode(s->u.str.s + i, s->u.str.len - i, &adv);
        if (template_to_upper(c) != c || template_to_lower(c) != c) {
            bool is_up = template_to_lower(c) != c;
            if (is_up != upper)
                ok = false;
            cased = true;
        }
        i += adv;
    }
    template_unref(r, s);
    *res = ok && cased;
    return true;
}

bool template_apply_test(struct template_render *r, const struct template_node *at, const char *name, size_t len,
                         struct template_value *v, const struct template_callargs *a, bool *res)
{
    int idx = find_test(name, len);
    if (idx < 0)
        return template_fail(r, at, HR_ERR_INVALID, "no test named '%.*s'", (int)(len > 64 ? 64 : len), name);
    int nargs = TESTS[idx].nargs;
    if (a->nkw || a->npos != (size_t)nargs)
        return template_fail(r, at, HR_ERR_INVALID, "test '%s' takes %d argument%s", TESTS[idx].name, nargs,
                             nargs == 1 ? "" : "s");
    const struct template_value *x = nargs ? a->pos[0] : NULL;
    enum template_type t = v->type;
    double rem;
    switch (TESTS[idx].id) {
    case T_DEFINED: *res = t != TEMPLATE_T_UNDEFINED; return true;
    case T_UNDEFINED: *res = t == TEMPLATE_T_UNDEFINED; return true;
    case T_NONE: *res = t == TEMPLATE_T_NONE; return true;
    case T_BOOLEAN: *res = t == TEMPLATE_T_BOOL; return true;
    case T_FALSE: *res = t == TEMPLATE_T_BOOL && !v->u.b; return true;
    case T_TRUE: *res = t == TEMPLATE_T_BOOL && v->u.b; return true;
    case T_INTEGER: *res = t == TEMPLATE_T_INT; return true;
    case T_FLOAT: *res = t == TEMPLATE_T_FLOAT; return true;
    case T_NUMBER: *res = t == TEMPLATE_T_INT || t == TEMPLATE_T_FLOAT || t == TEMPLATE_T_BOOL; return true;
    case T_STRING: *res = t == TEMPLATE_T_STR; return true;
    case T_MAPPING: *res = t == TEMPLATE_T_DICT; return true;
    case T_ITERABLE:
        *res = t == TEMPLATE_T_STR || t == TEMPLATE_T_LIST || t == TEMPLATE_T_DICT || t == TEMPLATE_T_UNDEFINED;
        return true;
    case T_SEQUENCE:
        *res = t == TEMPLATE_T_STR || (t == TEMPLATE_T_LIST && !v->u.list.view) || t == TEMPLATE_T_DICT ||
               t == TEMPLATE_T_UNDEFINED;
        return true;
    case T_CALLABLE: /* Undefined has __call__ (it raises when called) */
        *res = t == TEMPLATE_T_MACRO || t == TEMPLATE_T_BUILTIN || t == TEMPLATE_T_METHOD || t == TEMPLATE_T_UNDEFINED;
        return true;
    case T_ODD:
    case T_EVEN: {
        struct template_value two = {.type = TEMPLATE_T_INT, .refs = TEMPLATE_REFS_IMMORTAL, .u.i = 2};
        if (!modulo(r, at, v, &two, &rem))
            return false;
        *res = rem == (TESTS[idx].id == T_EVEN ? 0.0 : 1.0);
        return true;
    }
    case T_DIVISIBLEBY:
        if (!modulo(r, at, v, x, &rem))
            return false;
        *res = rem == 0.0;
        return true;
    case T_EQ: *res = template_equal(v, x); return true;
    case T_NE: *res = !template_equal(v, x); return true;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        int c;
        if (!template_compare(r, at, v, x, false, &c))
            return false;
        enum test_id id = TESTS[idx].id;
        *res = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
        return true;
    }
    case T_IN: return template_contains(r, at, v, x, res);
    case T_SAMEAS:
        *res = v == x || (t == x->type && (t == TEMPLATE_T_NONE || t == TEMPLATE_T_UNDEFINED ||
                                           (t == TEMPLATE_T_BOOL && v->u.b == x->u.b)));
        return true;
    case T_LOWER: return case_test(r, v, false, res);
    case T_UPPER: return case_test(r, v, true, res);
    case T_ESCAPED: *res = false; return true;
    case T_FILTER: /* 'name' is filter: a filter of that name exists */
        *res = t == TEMPLATE_T_STR && template_filter_exists(v->u.str.s, v->u.str.len);
        return true;
    case T_TEST:
        *res = t == TEMPLATE_T_STR && template_test_exists(v->u.str.s, v->u.str.len);
        return true;
    }
    return template_fail(r, at, HR_ERR_INTERNAL, "internal error: unhandled test");
}
