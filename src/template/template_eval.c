/* Template evaluator: scopes, statements and expressions, with Python Jinja2's semantics
 * (scoping of set/for/macro, loop variable, macros with defaults, call blocks, chained
 * comparisons, Python arithmetic). Every render owns its values; the AST is only read, so one
 * parsed template serves any number of threads. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* =============================================================== errors and budgets */

bool template_failv(struct template_render *r, const struct template_node *at, enum hr_status st,
                    const char *fmt, va_list ap)
{
    if (r->status != HR_OK)
        return false;
    r->status = st;
    const struct template_node *n = at ? at : r->at;
    char msg[HR_ERRLEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (n)
        hr_err(r->err, r->errlen, st, "line %u, column %u: %s", n->line, n->col, msg);
    else
        hr_err(r->err, r->errlen, st, "%s", msg);
    return false;
}

bool template_fail(struct template_render *r, const struct template_node *at, enum hr_status st,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    template_failv(r, at, st, fmt, ap);
    va_end(ap);
    return false;
}

bool template_limit(struct template_render *r, const struct template_node *at, const char *fmt, ...)
{
    if (r->status == HR_OK)
        r->limit_hit = true;
    va_list ap;
    va_start(ap, fmt);
    template_failv(r, at, HR_ERR_INVALID, fmt, ap);
    va_end(ap);
    return false;
}

bool template_check_pending(struct template_render *r, const struct template_value *v)
{
    if (v->type != TEMPLATE_T_LIST || !v->u.list.pending)
        return true;
    if (r->status == HR_OK) {
        r->status = HR_ERR_INVALID;
        hr_err(r->err, r->errlen, HR_ERR_INVALID, "%s", v->u.list.pending);
    }
    return false;
}

bool template_mem(struct template_render *r, ptrdiff_t bytes)
{
    if (!r)
        return true;
    if (bytes < 0) {
        size_t b = (size_t)(-bytes);
        r->mem = r->mem > b ? r->mem - b : 0;
        return true;
    }
    if (r->lim && r->mem + (size_t)bytes > r->lim->max_memory)
        return template_limit(r, NULL, "template rendering needs more than %zu bytes of memory",
                             r->lim->max_memory);
    r->mem += (size_t)bytes;
    return true;
}

bool template_charge(struct template_render *r, size_t bytes)
{
    r->steps += bytes / 256;
    if (r->lim && r->steps > r->lim->max_steps)
        return template_limit(r, NULL, "template rendering exceeds %llu steps",
                             (unsigned long long)r->lim->max_steps);
    return true;
}

static bool enter(struct template_render *r, const struct template_node *n)
{
    r->at = n;
    if (++r->depth > r->lim->max_depth)
        return template_limit(r, n, "template evaluation nested more than %u levels deep",
                             r->lim->max_depth);
    if (++r->steps > r->lim->max_steps)
        return template_limit(r, n, "template rendering exceeds %llu steps",
                             (unsigned long long)r->lim->max_steps);
    return true;
}

static void leave(struct template_render *r)
{
    r->depth--;
}

static bool count_iteration(struct template_render *r, const struct template_node *n)
{
    if (++r->iterations > r->lim->max_loop_iterations)
        return template_limit(r, n,
                             "more than %llu loop iterations and macro calls (a runaway loop?)",
                             (unsigned long long)r->lim->max_loop_iterations);
    return true;
}

/* ============================================================================ scopes */

struct template_var {
    char *name;
    size_t len;
    struct template_value *val;
};

struct template_scope {
    struct template_scope *parent;
    struct template_var *vars; /* [n] */
    size_t n, cap;
    bool captured;             /* a macro closes over it: freed at the end of the render */
};

static struct template_scope *scope_new(struct template_render *r, struct template_scope *parent)
{
    struct template_scope *s = calloc(1, sizeof *s);
    if (!s) {
        template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->parent = parent;
    return s;
}

static void scope_destroy(struct template_render *r, struct template_scope *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->vars[i].name);
        template_unref(r, s->vars[i].val);
    }
    free(s->vars);
    free(s);
}

/* Frees a scope that goes out of use, or keeps it for the end when a macro captured it. */
static void scope_release(struct template_render *r, struct template_scope *s)
{
    if (!s)
        return;
    if (!s->captured) {
        scope_destroy(r, s);
        return;
    }
    if (r->nkept == r->capkept) {
        size_t cap = r->capkept ? r->capkept * 2 : 8;
        struct template_scope **k = realloc(r->kept, cap * sizeof *k);
        if (!k) {
            /* cannot keep it: leaking is better than a dangling closure */
            template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
            return;
        }
        r->kept = k;
        r->capkept = cap;
    }
    r->kept[r->nkept++] = s;
}

static void scope_capture(struct template_scope *s)
{
    for (; s && !s->captured; s = s->parent)
        s->captured = true;
}

static struct template_value *scope_lookup(const struct template_scope *s, const char *name, size_t len)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0)
                return s->vars[i].val;
    return NULL;
}

/* Binds name in s to v (taking the reference). */
static bool scope_set(struct template_render *r, struct template_scope *s, const char *name, size_t len,
                      struct template_value *v)
{
    if (!v)
        return false;
    for (size_t i = 0; i < s->n; i++)
        if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0) {
            struct template_value *old = s->vars[i].val;
            s->vars[i].val = v;
            template_unref(r, old);
            return true;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct template_var *a = realloc(s->vars, cap * sizeof *a);
        if (!a) {
            template_unref(r, v);
            return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        }
        s->vars = a;
        s->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        template_unref(r, v);
        return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
    }
    memcpy(copy, name, len);
    copy[len] = 0;
    s->vars[s->n].name = copy;
    s->vars[s->n].len = len;
    s->vars[s->n].val = v;
    s->n++;
    return true;
}

static bool name_is(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static struct template_value *lookup_name(struct template_scope *s, const char *name, size_t len)
{
    struct template_value *v = scope_lookup(s, name, len);
    if (v)
        return template_ref(v);
    if (name_is(name, len, "range"))
        return template_builtin_value(TEMPLATE_BUILTIN_RANGE);
    if (name_is(name, len, "namespace"))
        return template_builtin_value(TEMPLATE_BUILTIN_NAMESPACE);
    if (name_is(name, len, "dict"))
        return template_builtin_value(TEMPLATE_BUILTIN_DICT);
    if (name_is(name, len, "raise_exception"))
        return template_builtin_value(TEMPLATE_BUILTIN_RAISE_EXCEPTION);
    if (name_is(name, len, "strftime_now"))
        return template_builtin_value(TEMPLATE_BUILTIN_STRFTIME_NOW);
    return &template_undefined;
}

/* ======================================================================= arguments */

/* Evaluated arguments with the references they hold. */
struct evargs {
    struct template_callargs a;
    struct template_value **own; /* [nown] */
    size_t nown;
};

static struct template_value *eval(struct template_render *r, const struct template_node *n,
                                   struct template_scope *s);

static void evargs_free(struct template_render *r, struct evargs *e)
{
    for (size_t i = 0; i < e->nown; i++)
        template_unref(r, e->own[i]);
    free(e->own);
    free(e->a.pos);
    free(e->a.kw);
    memset(e, 0, sizeof *e);
}

static bool evargs_hold(struct template_render *r, struct evargs *e, struct template_value *v, size_t cap)
{
    (void)cap;
    struct template_value **o = realloc(e->own, (e->nown + 1) * sizeof *o);
    if (!o) {
        template_unref(r, v);
        return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
    }
    e->own = o;
    e->own[e->nown++] = v;
    return true;
}

static bool evargs_pos(struct template_render *r, struct evargs *e, struct template_value *v)
{
    struct template_value **p = realloc(e->a.pos, (e->a.npos + 1) * sizeof *p);
    if (!p)
        return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
    e->a.pos = p;
    e->a.pos[e->a.npos++] = v;
    return true;
}

static bool evargs_kw(struct template_render *r, const struct template_node *at, struct evargs *e,
                      const char *name, size_t len, struct template_value *v)
{
    for (size_t i = 0; i < e->a.nkw; i++)
        if (e->a.kw[i].len == len && memcmp(e->a.kw[i].name, name, len) == 0)
            return template_fail(r, at, HR_ERR_INVALID, "got multiple values for keyword argument '%.*s'",
                                 (int)len, name);
    struct template_kwarg *k = realloc(e->a.kw, (e->a.nkw + 1) * sizeof *k);
    if (!k)
        return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
    e->a.kw = k;
    e->a.kw[e->a.nkw].name = name;
    e->a.kw[e->a.nkw].len = len;
    e->a.kw[e->a.nkw].val = v;
    e->a.nkw++;
    return true;
}

static bool eval_args(struct template_render *r, const struct template_node *at,
                      const struct template_args_node *an, struct template_scope *s, struct evargs *e)
{
    memset(e, 0, sizeof *e);
    for (size_t i = 0; i < an->npos; i++) {
        struct template_value *v = eval(r, an->pos[i], s);
        if (!v || !evargs_hold(r, e, v, an->npos) || !evargs_pos(r, e, v))
            return false;
    }
    if (an->star) {
        struct template_value *v = eval(r, an->star, s);
        if (!v || !evargs_hold(r, e, v, 1))
            return false;
        struct template_value *items = template_iterate(r, an->star, v);
        if (!items || !evargs_hold(r, e, items, 1))
            return false;
        for (size_t i = 0; i < items->u.list.n; i++)
            if (!evargs_pos(r, e, items->u.list.items[i]))
                return false;
    }
    for (size_t i = 0; i < an->nkw; i++) {
        struct template_value *v = eval(r, an->kwval[i], s);
        if (!v || !evargs_hold(r, e, v, an->nkw) ||
            !evargs_kw(r, at, e, an->kwname[i].s, an->kwname[i].len, v))
            return false;
    }
    if (an->star2) {
        struct template_value *v = eval(r, an->star2, s);
        if (!v || !evargs_hold(r, e, v, 1))
            return false;
        if (v->type != TEMPLATE_T_DICT)
            return template_fail(r, an->star2, HR_ERR_INVALID, "argument after ** must be a mapping, not %s",
                                 template_type_name(v));
        for (size_t i = 0; i < v->u.dict.n; i++) {
            const struct template_value *k = v->u.dict.e[i].key;
            if (!evargs_kw(r, at, e, k->u.str.s, k->u.str.len, v->u.dict.e[i].val))
                return false;
        }
    }
    return true;
}

bool template_bind(struct template_render *r, const struct template_node *at, const char *what,
                   const struct template_callargs *a, const char *const *params, size_t nparams,
                   size_t nrequired, struct template_value **out)
{
    for (size_t i = 0; i < nparams; i++)
        out[i] = NULL;
    if (a->npos > nparams)
        return template_fail(r, at, HR_ERR_INVALID, "%s() takes at most %zu argument%s (%zu given)", what,
                             nparams, nparams == 1 ? "" : "s", a->npos);
    for (size_t i = 0; i < a->npos; i++)
        out[i] = a->pos[i];
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < nparams; i++)
            if (name_is(a->kw[k].name, a->kw[k].len, params[i]))
                break;
        if (i == nparams)
            return template_fail(r, at, HR_ERR_INVALID, "%s() got an unexpected keyword argument '%.*s'", what,
                                 (int)a->kw[k].len, a->kw[k].name);
        if (out[i])
            return template_fail(r, at, HR_ERR_INVALID, "%s() got multiple values for argument '%s'", what,
                                 params[i]);
        out[i] = a->kw[k].val;
    }
    for (size_t i = 0; i < nrequired; i++)
        if (!out[i])
            return template_fail(r, at, HR_ERR_INVALID, "%s() missing required argument '%s'", what, params[i]);
    return true;
}

/* ============================================================ attributes and items */

static struct template_value *loop_attr(struct template_render *r, struct template_value *lp,
                                        const char *name, size_t len)
{
    int64_t i = lp->u.loop.index0, n = lp->u.loop.length;
    const struct template_value *items = lp->u.loop.items;
    if (name_is(name, len, "index"))
        return template_int(r, i + 1);
    if (name_is(name, len, "index0"))
        return template_int(r, i);
    if (name_is(name, len, "revindex"))
        return template_int(r, n - i);
    if (name_is(name, len, "revindex0"))
        return template_int(r, n - i - 1);
    if (name_is(name, len, "first"))
        return template_bool(i == 0);
    if (name_is(name, len, "last"))
        return template_bool(i == n - 1);
    if (name_is(name, len, "length"))
        return template_int(r, n);
    if (name_is(name, len, "depth"))
        return template_int(r, 1);
    if (name_is(name, len, "depth0"))
        return template_int(r, 0);
    if (name_is(name, len, "previtem"))
        return i > 0 ? template_ref(items->u.list.items[i - 1]) : &template_undefined;
    if (name_is(name, len, "nextitem"))
        return i + 1 < n ? template_ref(items->u.list.items[i + 1]) : &template_undefined;
    return NULL;
}

static struct template_value *method_value(struct template_render *r, struct template_value *self, const char *m)
{
    struct template_value *v = template_value_new(r, TEMPLATE_T_METHOD, 0);
    if (!v)
        return NULL;
    v->u.method.self = template_ref(self);
    v->u.method.name = m;
    return v;
}

struct template_value *template_getattr(struct template_render *r, const struct template_node *at,
                                        struct template_value *obj, const char *name, size_t len)
{
    (void)at;
    const char *m;
    switch (obj->type) {
    case TEMPLATE_T_DICT:
        if ((m = template_method_lookup(obj, name, len)))
            return method_value(r, obj, m);
        /* fall through */
    case TEMPLATE_T_NAMESPACE: {
        struct template_value *v = template_dict_get(obj, name, len);
        return v ? template_ref(v) : &template_undefined;
    }
    case TEMPLATE_T_STR:
    case TEMPLATE_T_LIST:
        if ((m = template_method_lookup(obj, name, len)))
            return method_value(r, obj, m);
        return &template_undefined;
    case TEMPLATE_T_LOOP: {
        if ((m = template_method_lookup(obj, name, len)))
            return method_value(r, obj, m);
        struct template_value *v = loop_attr(r, obj, name, len);
        return v ? v : (r->status == HR_OK ? &template_undefined : NULL);
    }
    case TEMPLATE_T_MACRO:
        if (name_is(name, len, "name") && obj->u.macro.node->kind == TEMPLATE_N_MACRO)
            return template_str(r, obj->u.macro.node->name.s, obj->u.macro.node->name.len);
        return &template_undefined;
    default:
        return &template_undefined;
    }
}

static bool index_of(const struct template_value *key, int64_t n, int64_t *idx)
{
    int64_t i;
    if (key->type == TEMPLATE_T_INT)
        i = key->u.i;
    else if (key->type == TEMPLATE_T_BOOL)
        i = key->u.b;
    else
        return false;
    if (i < 0)
        i += n;
    if (i < 0 || i >= n)
        return false;
    *idx = i;
    return true;
}

struct template_value *template_getitem(struct template_render *r, const struct template_node *at,
                                        struct template_value *obj, struct template_value *key)
{
    int64_t i;
    switch (obj->type) {
    case TEMPLATE_T_DICT:
    case TEMPLATE_T_NAMESPACE:
        if (key->type == TEMPLATE_T_STR) {
            struct template_value *v = template_dict_get(obj, key->u.str.s, key->u.str.len);
            if (v)
                return template_ref(v);
            return template_getattr(r, at, obj, key->u.str.s, key->u.str.len);
        }
        return &template_undefined;
    case TEMPLATE_T_LIST:
        /* views and generators are not subscriptable: Jinja turns that TypeError into undefined */
        if (!obj->u.list.view && index_of(key, (int64_t)obj->u.list.n, &i))
            return template_ref(obj->u.list.items[i]);
        break;
    case TEMPLATE_T_STR:
        if (key->type == TEMPLATE_T_INT || key->type == TEMPLATE_T_BOOL) {
            size_t n = template_utf8_count(obj->u.str.s, obj->u.str.len);
            if (!template_charge(r, obj->u.str.len))
                return NULL;
            if (index_of(key, (int64_t)n, &i)) {
                size_t off = template_utf8_offset(obj->u.str.s, obj->u.str.len, (size_t)i), adv;
                template_utf8_decode(obj->u.str.s + off, obj->u.str.len - off, &adv);
                return template_str(r, obj->u.str.s + off, adv);
            }
        }
        break;
    default:
        break;
    }
    if (key->type == TEMPLATE_T_STR)
        return template_getattr(r, at, obj, key->u.str.s, key->u.str.len);
    return &template_undefined;
}

struct template_value *template_iterate(struct template_render *r, const struct template_node *at,
                                        struct template_value *v)
{
    switch (v->type) {
    case TEMPLATE_T_LIST:
        return template_check_pending(r, v) ? template_ref(v) : NULL;
    case TEMPLATE_T_UNDEFINED:
        return template_list(r, 0);
    case TEMPLATE_T_DICT: {
        struct template_value *l = template_list(r, v->u.dict.n);
        for (size_t i = 0; l && i < v->u.dict.n; i++)
            if (!template_list_push(r, l, template_ref(v->u.dict.e[i].key))) {
                template_unref(r, l);
                return NULL;
            }
        return l;
    }
    case TEMPLATE_T_STR: {
        if (!template_charge(r, v->u.str.len))
            return NULL;
        struct template_value *l = template_list(r, 0);
        size_t i = 0, adv;
        while (l && i < v->u.str.len) {
            template_utf8_decode(v->u.str.s + i, v->u.str.len - i, &adv);
            if (!template_list_push(r, l, template_str(r, v->u.str.s + i, adv))) {
                template_unref(r, l);
                return NULL;
            }
            i += adv;
        }
        return l;
    }
    default:
        template_fail(r, at, HR_ERR_INVALID, "'%s' object is not iterable", template_type_name(v));
        return NULL;
    }
}

/* Python slice of a list or string; like Jinja's getitem, what cannot be sliced (a number, a
 * view, non-integer bounds) gives undefined, and only a zero step is an error. */
static struct template_value *slice(struct template_render *r, const struct template_node *at,
                                    struct template_value *obj, struct template_value *vs[3])
{
    int64_t vals[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; k++) {
        if (!vs[k] || vs[k]->type == TEMPLATE_T_NONE || vs[k]->type == TEMPLATE_T_UNDEFINED)
            continue;
        if (vs[k]->type != TEMPLATE_T_INT && vs[k]->type != TEMPLATE_T_BOOL)
            return &template_undefined;
        vals[k] = vs[k]->type == TEMPLATE_T_BOOL ? vs[k]->u.b : vs[k]->u.i;
        given[k] = true;
    }
    int64_t step = vals[2];
    if (step == 0) {
        template_fail(r, at, HR_ERR_INVALID, "slice step cannot be zero");
        return NULL;
    }
    if (step == INT64_MIN)
        step = -INT64_MAX;
    bool is_str = obj->type == TEMPLATE_T_STR;
    if (!is_str && (obj->type != TEMPLATE_T_LIST || obj->u.list.view))
        return &template_undefined;
    size_t *offs = NULL; /* code point offsets of a string, [n + 1] */
    int64_t n;
    if (is_str) {
        if (!template_charge(r, obj->u.str.len))
            return NULL;
        size_t cnt = template_utf8_count(obj->u.str.s, obj->u.str.len);
        offs = malloc((cnt + 1) * sizeof *offs);
        if (!offs) {
            template_fail(r, at, HR_ERR_NOMEM, "out of memory");
            return NULL;
        }
        size_t i = 0, k = 0, adv;
        while (i < obj->u.str.len) {
            offs[k++] = i;
            template_utf8_decode(obj->u.str.s + i, obj->u.str.len - i, &adv);
            i += adv;
        }
        offs[k] = obj->u.str.len;
        n = (int64_t)cnt;
    } else {
        n = (int64_t)obj->u.list.n;
    }
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
    int64_t start, stop;
    if (!given[0]) {
        start = step > 0 ? lower : upper;
    } else {
        start = vals[0];
        if (start < 0) {
            start = start < -n ? lower : start + n;
            if (start < lower)
                start = lower;
        } else if (start > upper) {
            start = upper;
        }
    }
    if (!given[1]) {
        stop = step > 0 ? upper : lower;
    } else {
        stop = vals[1];
        if (stop < 0) {
            stop = stop < -n ? lower : stop + n;
            if (stop < lower)
                stop = lower;
        } else if (stop > upper) {
            stop = upper;
        }
    }
    struct template_value *res;
    if (is_str) {
        struct template_buf b = {.r = r};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (!template_buf_put(&b, obj->u.str.s + offs[i], offs[i + 1] - offs[i])) {
                template_buf_free(&b);
                free(offs);
                return NULL;
            }
            if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step)
                break;
        }
        free(offs);
        return template_str_take(r, &b);
    }
    res = template_list(r, 0);
    if (!res)
        return NULL;
    res->u.list.is_tuple = obj->u.list.is_tuple;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (!template_list_push(r, res, template_ref(obj->u.list.items[i]))) {
            template_unref(r, res);
            return NULL;
        }
        if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step)
            break;
    }
    return res;
}

/* ===================================================================== operators */

static bool is_num(const struct template_value *v)
{
    return v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_FLOAT || v->type == TEMPLATE_T_BOOL;
}

static double num_f(const struct template_value *v)
{
    return v->type == TEMPLATE_T_FLOAT ? v->u.f : v->type == TEMPLATE_T_BOOL ? (double)v->u.b : (double)v->u.i;
}

static int64_t num_i(const struct template_value *v)
{
    return v->type == TEMPLATE_T_BOOL ? v->u.b : v->u.i;
}

static const char *op_symbol(enum template_op op)
{
    switch (op) {
    case TEMPLATE_OP_ADD: return "+";
    case TEMPLATE_OP_SUB: return "-";
    case TEMPLATE_OP_MUL: return "*";
    case TEMPLATE_OP_DIV: return "/";
    case TEMPLATE_OP_FLOORDIV: return "//";
    case TEMPLATE_OP_MOD: return "%";
    case TEMPLATE_OP_POW: return "**";
    default: return "?";
    }
}

static struct template_value *type_error(struct template_render *r, const struct template_node *at,
                                         enum template_op op, const struct template_value *a,
                                         const struct template_value *b)
{
    if (a->type == TEMPLATE_T_UNDEFINED || b->type == TEMPLATE_T_UNDEFINED)
        template_fail(r, at, HR_ERR_INVALID, "undefined value used with '%s' (operands '%s' and '%s')",
                      op_symbol(op), template_type_name(a), template_type_name(b));
    else
        template_fail(r, at, HR_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op_symbol(op),
                      template_type_name(a), template_type_name(b));
    return NULL;
}

static struct template_value *repeat(struct template_render *r, const struct template_node *at,
                                     const struct template_value *seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq->type == TEMPLATE_T_STR) {
        if (seq->u.str.len && (uint64_t)times > r->lim->max_output / seq->u.str.len) {
            template_limit(r, at, "string repetition exceeds the limit of %zu bytes",
                          r->lim->max_output);
            return NULL;
        }
        struct template_buf b = {.r = r};
        for (int64_t i = 0; i < times; i++)
            if (!template_buf_put(&b, seq->u.str.s, seq->u.str.len)) {
                template_buf_free(&b);
                return NULL;
            }
        if (!template_charge(r, b.len)) {
            template_buf_free(&b);
            return NULL;
        }
        return template_str_take(r, &b);
    }
    if (seq->u.list.n && (uint64_t)times > r->lim->max_memory / 8 / seq->u.list.n) {
        template_limit(r, at, "list repetition too large");
        return NULL;
    }
    struct template_value *l = template_list(r, 0);
    if (!l)
        return NULL;
    l->u.list.is_tuple = seq->u.list.is_tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq->u.list.n; k++)
            if (!template_list_push(r, l, template_ref(seq->u.list.items[k]))) {
                template_unref(r, l);
                return NULL;
            }
    return l;
}

/* "%s" % x: printf-style formatting (%s %r %d %i %f %x %%, with flags, width, precision). */
static struct template_value *percent_format(struct template_render *r, const struct template_node *at,
                                             const struct template_value *fmt, struct template_value *args)
{
    struct template_value *const *items;
    size_t nitems, next = 0;
    struct template_value *single = args;
    if (args->type == TEMPLATE_T_LIST && args->u.list.is_tuple) {
        items = args->u.list.items;
        nitems = args->u.list.n;
    } else {
        items = &single;
        nitems = 1;
    }
    struct template_buf b = {.r = r};
    const char *s = fmt->u.str.s;
    size_t n = fmt->u.str.len;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            if (!template_buf_putc(&b, s[i]))
                goto fail;
            continue;
        }
        size_t j = i + 1;
        char spec[32] = "%";
        size_t sl = 1;
        while (j < n && strchr("-+ 0#", s[j]) && sl < 8)
            spec[sl++] = s[j++];
        size_t digits = 0;
        while (j < n && s[j] >= '0' && s[j] <= '9' && sl < 16) {
            spec[sl++] = s[j++];
            digits++;
        }
        if (j < n && s[j] == '.') {
            spec[sl++] = s[j++];
            size_t pd = 0;
            while (j < n && s[j] >= '0' && s[j] <= '9' && sl < 24) {
                spec[sl++] = s[j++];
                pd++;
            }
            digits = pd > digits ? pd : digits;
        }
        if (digits > 4) {
            template_limit(r, at, "format width or precision too large");
            goto fail;
        }
        if (j >= n) {
            template_fail(r, at, HR_ERR_INVALID, "incomplete format");
            goto fail;
        }
        char conv = s[j];
        i = j;
        if (conv == '%') {
            if (!template_buf_putc(&b, '%'))
                goto fail;
            continue;
        }
        if (next >= nitems) {
            template_fail(r, at, HR_ERR_INVALID, "not enough arguments for format string");
            goto fail;
        }
        struct template_value *a = items[next++];
        bool ok;
        if (conv == 's' || conv == 'r') {
            struct template_buf t = {.r = r};
            ok = conv == 's' ? template_to_str(r, &t, a) : template_to_repr(r, &t, a);
            if (ok) {
                spec[sl++] = '.';
                spec[sl] = 0;
                /* width/flags apply to the whole string */
                char f2[32];
                snprintf(f2, sizeof f2, "%.*s%s", (int)(sl - 1), spec, "s");
                ok = template_buf_printf(&b, f2, t.data ? t.data : "");
            }
            template_buf_free(&t);
        } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
            if (!is_num(a)) {
                template_fail(r, at, HR_ERR_INVALID, "%%%c format: a number is required, not %s", conv,
                              template_type_name(a));
                goto fail;
            }
            int64_t v = a->type == TEMPLATE_T_FLOAT ? (int64_t)a->u.f : num_i(a);
            memcpy(spec + sl, "ll", 2);
            sl += 2;
            spec[sl++] = conv == 'i' ? 'd' : conv;
            spec[sl] = 0;
            ok = template_buf_printf(&b, spec, (long long)v);
        } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
            if (!is_num(a)) {
                template_fail(r, at, HR_ERR_INVALID, "%%%c format: a number is required, not %s", conv,
                              template_type_name(a));
                goto fail;
            }
            spec[sl++] = conv;
            spec[sl] = 0;
            ok = template_buf_printf(&b, spec, num_f(a));
        } else {
            template_fail(r, at, HR_ERR_INVALID, "unsupported format character '%c'", conv);
            goto fail;
        }
        if (!ok)
            goto fail;
    }
    /* Python treats an argument with __getitem__ (list, dict, Undefined) as a mapping: leftovers
     * are an error only for the others */
    bool mapping_like = args->type == TEMPLATE_T_DICT || args->type == TEMPLATE_T_UNDEFINED ||
                        (args->type == TEMPLATE_T_LIST && !args->u.list.is_tuple && !template_is_iterator(args));
    if (next < nitems && !mapping_like) {
        template_fail(r, at, HR_ERR_INVALID, "not all arguments converted during string formatting");
        goto fail;
    }
    return template_str_take(r, &b);
fail:
    template_buf_free(&b);
    return NULL;
}

static struct template_value *arith(struct template_render *r, const struct template_node *at,
                                    enum template_op op, struct template_value *a, struct template_value *b)
{
    if (is_num(a) && is_num(b)) {
        bool fl = a->type == TEMPLATE_T_FLOAT || b->type == TEMPLATE_T_FLOAT;
        int64_t x = fl ? 0 : num_i(a), y = fl ? 0 : num_i(b), z;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case TEMPLATE_OP_ADD:
            if (fl)
                return template_float(r, fx + fy);
            if (__builtin_add_overflow(x, y, &z))
                goto overflow;
            return template_int(r, z);
        case TEMPLATE_OP_SUB:
            if (fl)
                return template_float(r, fx - fy);
            if (__builtin_sub_overflow(x, y, &z))
                goto overflow;
            return template_int(r, z);
        case TEMPLATE_OP_MUL:
            if (fl)
                return template_float(r, fx * fy);
            if (__builtin_mul_overflow(x, y, &z))
                goto overflow;
            return template_int(r, z);
        case TEMPLATE_OP_DIV:
            if (fy == 0.0)
                goto zero;
            return template_float(r, fx / fy);
        case TEMPLATE_OP_FLOORDIV:
            if (fl) {
                if (fy == 0.0)
                    goto zero;
                return template_float(r, floor(fx / fy));
            }
            if (y == 0)
                goto zero;
            if (x == INT64_MIN && y == -1)
                goto overflow;
            z = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                z--;
            return template_int(r, z);
        case TEMPLATE_OP_MOD:
            if (fl) {
                if (fy == 0.0)
                    goto zero;
                double m = fmod(fx, fy);
                if (m != 0.0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return template_float(r, m);
            }
            if (y == 0)
                goto zero;
            if (y == -1)
                return template_int(r, 0);
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0)))
                z += y;
            return template_int(r, z);
        case TEMPLATE_OP_POW:
            if (!fl && y >= 0) {
                int64_t res = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1 && __builtin_mul_overflow(res, base, &res))
                        goto overflow;
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base))
                        goto overflow;
                }
                return template_int(r, res);
            }
            if (fx == 0.0 && fy < 0) {
                template_fail(r, at, HR_ERR_INVALID, "zero cannot be raised to a negative power");
                return NULL;
            }
            if (fx < 0 && fy != floor(fy)) {
                template_fail(r, at, HR_ERR_INVALID, "negative number raised to a fractional power");
                return NULL;
            }
            return template_float(r, pow(fx, fy));
        default:
            break;
        }
    }
    if (op == TEMPLATE_OP_ADD && a->type == TEMPLATE_T_STR && b->type == TEMPLATE_T_STR) {
        if (a->u.str.len + b->u.str.len > r->lim->max_output) {
            template_limit(r, at, "string exceeds the limit of %zu bytes", r->lim->max_output);
            return NULL;
        }
        struct template_buf buf = {.r = r};
        if (!template_charge(r, a->u.str.len + b->u.str.len) || !template_buf_put(&buf, a->u.str.s, a->u.str.len) ||
            !template_buf_put(&buf, b->u.str.s, b->u.str.len)) {
            template_buf_free(&buf);
            return NULL;
        }
        return template_str_take(r, &buf);
    }
    if (op == TEMPLATE_OP_ADD && a->type == TEMPLATE_T_LIST && b->type == TEMPLATE_T_LIST &&
        a->u.list.is_tuple == b->u.list.is_tuple && !a->u.list.view && !b->u.list.view) {
        struct template_value *l = template_list(r, a->u.list.n + b->u.list.n);
        if (!l)
            return NULL;
        l->u.list.is_tuple = a->u.list.is_tuple;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!template_list_push(r, l, template_ref(a->u.list.items[i])))
                goto list_fail;
        for (size_t i = 0; i < b->u.list.n; i++)
            if (!template_list_push(r, l, template_ref(b->u.list.items[i])))
                goto list_fail;
        return l;
    list_fail:
        template_unref(r, l);
        return NULL;
    }
    if (op == TEMPLATE_OP_MUL && !(a->type == TEMPLATE_T_LIST && a->u.list.view) &&
        !(b->type == TEMPLATE_T_LIST && b->u.list.view)) {
        if ((a->type == TEMPLATE_T_STR || a->type == TEMPLATE_T_LIST) &&
            (b->type == TEMPLATE_T_INT || b->type == TEMPLATE_T_BOOL))
            return repeat(r, at, a, num_i(b));
        if ((b->type == TEMPLATE_T_STR || b->type == TEMPLATE_T_LIST) &&
            (a->type == TEMPLATE_T_INT || a->type == TEMPLATE_T_BOOL))
            return repeat(r, at, b, num_i(a));
    }
    if (op == TEMPLATE_OP_MOD && a->type == TEMPLATE_T_STR)
        return percent_format(r, at, a, b);
    return type_error(r, at, op, a, b);
overflow:
    template_fail(r, at, HR_ERR_INVALID, "integer overflow in '%s'", op_symbol(op));
    return NULL;
zero:
    template_fail(r, at, HR_ERR_INVALID, "division by zero");
    return NULL;
}

bool template_contains(struct template_render *r, const struct template_node *at, const struct template_value *needle,
                       const struct template_value *hay, bool *res)
{
    switch (hay->type) {
    case TEMPLATE_T_STR:
        if (needle->type != TEMPLATE_T_STR)
            return template_fail(r, at, HR_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                                 template_type_name(needle));
        if (!template_charge(r, hay->u.str.len))
            return false;
        *res = needle->u.str.len == 0 ||
               memmem(hay->u.str.s, hay->u.str.len, needle->u.str.s, needle->u.str.len) != NULL;
        return true;
    case TEMPLATE_T_LIST:
        if (!template_check_pending(r, hay))
            return false;
        *res = false;
        for (size_t i = 0; i < hay->u.list.n && !*res; i++)
            *res = template_equal(needle, hay->u.list.items[i]);
        return template_charge(r, hay->u.list.n * 16);
    case TEMPLATE_T_DICT:
        *res = needle->type == TEMPLATE_T_STR && template_dict_get(hay, needle->u.str.s, needle->u.str.len);
        return true;
    case TEMPLATE_T_UNDEFINED:
        *res = false;
        return true;
    default:
        return template_fail(r, at, HR_ERR_INVALID, "argument of type '%s' is not iterable",
                             template_type_name(hay));
    }
}

static bool compare_op(struct template_render *r, const struct template_node *at, enum template_op op,
                       const struct template_value *a, const struct template_value *b, bool *res)
{
    int c;
    switch (op) {
    case TEMPLATE_OP_EQ: *res = template_equal(a, b); return true;
    case TEMPLATE_OP_NE: *res = !template_equal(a, b); return true;
    case TEMPLATE_OP_IN: return template_contains(r, at, a, b, res);
    case TEMPLATE_OP_NOTIN:
        if (!template_contains(r, at, a, b, res))
            return false;
        *res = !*res;
        return true;
    default:
        break;
    }
    if ((a->type == TEMPLATE_T_FLOAT && isnan(a->u.f)) || (b->type == TEMPLATE_T_FLOAT && isnan(b->u.f))) {
        if (is_num(a) && is_num(b)) {
            *res = false;
            return true;
        }
    }
    if (!template_compare(r, at, a, b, false, &c))
        return false;
    switch (op) {
    case TEMPLATE_OP_LT: *res = c < 0; break;
    case TEMPLATE_OP_LTEQ: *res = c <= 0; break;
    case TEMPLATE_OP_GT: *res = c > 0; break;
    case TEMPLATE_OP_GTEQ: *res = c >= 0; break;
    default: *res = false; break;
    }
    return true;
}

/* ===================================================================== expressions */

static struct template_value *invoke_macro(struct template_render *r, const struct template_node *at,
                                           struct template_value *fn, const struct template_callargs *a,
                                           struct template_value *caller);

static struct template_value *eval_call(struct template_render *r, const struct template_node *n,
                                        struct template_scope *s, struct template_value *caller)
{
    struct template_value *fn;
    const struct template_node *callee = n->a;
    if (callee->kind == TEMPLATE_N_GETATTR) {
        struct template_value *obj = eval(r, callee->a, s);
        if (!obj)
            return NULL;
        fn = template_getattr(r, callee, obj, callee->name.s, callee->name.len);
        if (fn && fn->type == TEMPLATE_T_UNDEFINED) {
            static const char *const mutators[] = {"append", "extend", "insert", "pop", "remove", "clear",
                                                   "update", "setdefault", "popitem", "sort", "reverse"};
            bool unsafe = false;
            if (obj->type == TEMPLATE_T_LIST || obj->type == TEMPLATE_T_DICT)
                for (size_t i = 0; i < sizeof mutators / sizeof *mutators; i++)
                    unsafe |= name_is(callee->name.s, callee->name.len, mutators[i]);
            if (unsafe)
                template_fail(r, callee, HR_ERR_INVALID,
                              "access to attribute '%.*s' of '%s' object is unsafe (templates cannot modify values)",
                              (int)callee->name.len, callee->name.s, template_type_name(obj));
            else if (obj->type == TEMPLATE_T_UNDEFINED || obj->type == TEMPLATE_T_NONE ||
                     obj->type == TEMPLATE_T_DICT || obj->type == TEMPLATE_T_NAMESPACE)
                template_fail(r, callee, HR_ERR_INVALID, "'%.*s' is undefined (called on a '%s' value)",
                              (int)callee->name.len, callee->name.s, template_type_name(obj));
            else
                template_fail(r, callee, HR_ERR_INVALID, "'%s' object has no method '%.*s'",
                              template_type_name(obj), (int)callee->name.len, callee->name.s);
            template_unref(r, obj);
            return NULL;
        }
        template_unref(r, obj);
    } else {
        fn = eval(r, callee, s);
        if (fn && fn->type == TEMPLATE_T_UNDEFINED) {
            if (callee->kind == TEMPLATE_N_NAME)
                template_fail(r, callee, HR_ERR_INVALID, "'%.*s' is undefined", (int)callee->name.len,
                              callee->name.s);
            else
                template_fail(r, callee, HR_ERR_INVALID, "called an undefined value");
            return NULL;
        }
    }
    if (!fn)
        return NULL;
    struct evargs e;
    struct template_value *res = NULL;
    if (eval_args(r, n, &n->args, s, &e))
        res = template_call_value(r, n, fn, &e.a, caller);
    evargs_free(r, &e);
    template_unref(r, fn);
    return res;
}

struct template_value *template_call_value(struct template_render *r, const struct template_node *at,
                                           struct template_value *fn, const struct template_callargs *a,
                                           struct template_value *caller)
{
    switch (fn->type) {
    case TEMPLATE_T_MACRO:
        return invoke_macro(r, at, fn, a, caller);
    case TEMPLATE_T_BUILTIN:
        return template_call_builtin(r, at, fn->u.builtin, a);
    case TEMPLATE_T_METHOD:
        return template_call_method(r, at, fn->u.method.self, fn->u.method.name, a);
    default:
        template_fail(r, at, HR_ERR_INVALID, "'%s' object is not callable", template_type_name(fn));
        return NULL;
    }
}

/* Applies a filter chain (FILTER nodes, innermost operand NULL) to input. */
static struct template_value *apply_chain(struct template_render *r, const struct template_node *f,
                                          struct template_value *input, struct template_scope *s)
{
    struct template_value *v = f->a ? apply_chain(r, f->a, input, s) : template_ref(input);
    if (!v)
        return NULL;
    struct evargs e;
    struct template_value *res = NULL;
    if (eval_args(r, f, &f->args, s, &e))
        res = template_apply_filter(r, f, f->name.s, f->name.len, v, &e.a);
    evargs_free(r, &e);
    template_unref(r, v);
    return res;
}

static struct template_value *eval_inner(struct template_render *r, const struct template_node *n,
                                         struct template_scope *s)
{
    switch (n->kind) {
    case TEMPLATE_N_CONST:
        return template_ref(n->value);
    case TEMPLATE_N_NAME:
        return lookup_name(s, n->name.s, n->name.len);
    case TEMPLATE_N_LIST:
    case TEMPLATE_N_TUPLE: {
        struct template_value *l = template_list(r, n->nitems);
        if (!l)
            return NULL;
        l->u.list.is_tuple = n->kind == TEMPLATE_N_TUPLE;
        for (size_t i = 0; i < n->nitems; i++)
            if (!template_list_push(r, l, eval(r, n->items[i], s))) {
                template_unref(r, l);
                return NULL;
            }
        return l;
    }
    case TEMPLATE_N_DICT: {
        struct template_value *d = template_dict(r, n->nitems);
        if (!d)
            return NULL;
        for (size_t i = 0; i < n->nitems; i++) {
            struct template_value *k = eval(r, n->items[i], s);
            if (!k) {
                template_unref(r, d);
                return NULL;
            }
            if (k->type != TEMPLATE_T_STR) {
                template_fail(r, n->items[i], HR_ERR_UNSUPPORTED, "dict keys must be strings, not %s",
                              template_type_name(k));
                template_unref(r, k);
                template_unref(r, d);
                return NULL;
            }
            bool ok = template_dict_set(r, d, k->u.str.s, k->u.str.len, eval(r, n->items2[i], s));
            template_unref(r, k);
            if (!ok) {
                template_unref(r, d);
                return NULL;
            }
        }
        return d;
    }
    case TEMPLATE_N_GETATTR: {
        struct template_value *obj = eval(r, n->a, s);
        if (!obj)
            return NULL;
        struct template_value *v = template_getattr(r, n, obj, n->name.s, n->name.len);
        template_unref(r, obj);
        return v;
    }
    case TEMPLATE_N_GETITEM: {
        struct template_value *obj = eval(r, n->a, s);
        if (!obj)
            return NULL;
        struct template_value *v = NULL;
        if (n->b->kind == TEMPLATE_N_SLICE) {
            struct template_value *parts[3] = {NULL, NULL, NULL};
            const struct template_node *pn[3] = {n->b->a, n->b->b, n->b->c};
            bool ok = true;
            for (int k = 0; k < 3 && ok; k++)
                if (pn[k] && !(parts[k] = eval(r, pn[k], s)))
                    ok = false;
            if (ok)
                v = slice(r, n, obj, parts);
            for (int k = 0; k < 3; k++)
                template_unref(r, parts[k]);
        } else {
            struct template_value *key = eval(r, n->b, s);
            if (key)
                v = template_getitem(r, n, obj, key);
            template_unref(r, key);
        }
        template_unref(r, obj);
        return v;
    }
    case TEMPLATE_N_CALL:
        return eval_call(r, n, s, NULL);
    case TEMPLATE_N_FILTER: {
        struct template_value *v = n->a ? eval(r, n->a, s) : template_ref(&template_undefined);
        if (!v)
            return NULL;
        struct evargs e;
        struct template_value *res = NULL;
        if (eval_args(r, n, &n->args, s, &e))
            res = template_apply_filter(r, n, n->name.s, n->name.len, v, &e.a);
        evargs_free(r, &e);
        template_unref(r, v);
        return res;
    }
    case TEMPLATE_N_TEST: {
        struct template_value *v = eval(r, n->a, s);
        if (!v)
            return NULL;
        struct evargs e;
        bool result = false, ok = eval_args(r, n, &n->args, s, &e) &&
                                  template_apply_test(r, n, n->name.s, n->name.len, v, &e.a, &result);
        evargs_free(r, &e);
        template_unref(r, v);
        return ok ? template_bool(result) : NULL;
    }
    case TEMPLATE_N_NOT: {
        struct template_value *v = eval(r, n->a, s);
        if (!v)
            return NULL;
        bool t = template_truthy(v);
        template_unref(r, v);
        return template_bool(!t);
    }
    case TEMPLATE_N_NEG:
    case TEMPLATE_N_POS: {
        struct template_value *v = eval(r, n->a, s), *res = NULL;
        if (!v)
            return NULL;
        if (!is_num(v)) {
            template_fail(r, n, HR_ERR_INVALID, "bad operand type for unary %c: '%s'",
                          n->kind == TEMPLATE_N_NEG ? '-' : '+', template_type_name(v));
        } else if (v->type == TEMPLATE_T_FLOAT) {
            res = template_float(r, n->kind == TEMPLATE_N_NEG ? -v->u.f : v->u.f);
        } else if (n->kind == TEMPLATE_N_NEG && num_i(v) == INT64_MIN) {
            template_fail(r, n, HR_ERR_INVALID, "integer overflow in unary '-'");
        } else {
            res = template_int(r, n->kind == TEMPLATE_N_NEG ? -num_i(v) : num_i(v));
        }
        template_unref(r, v);
        return res;
    }
    case TEMPLATE_N_AND:
    case TEMPLATE_N_OR: {
        struct template_value *v = eval(r, n->a, s);
        if (!v)
            return NULL;
        bool t = template_truthy(v);
        if ((n->kind == TEMPLATE_N_AND) == t) {
            template_unref(r, v);
            return eval(r, n->b, s);
        }
        return v;
    }
    case TEMPLATE_N_BINOP: {
        struct template_value *a = eval(r, n->a, s);
        if (!a)
            return NULL;
        struct template_value *b = eval(r, n->b, s), *res = NULL;
        if (b)
            res = arith(r, n, n->op, a, b);
        template_unref(r, a);
        template_unref(r, b);
        return res;
    }
    case TEMPLATE_N_CONCAT: {
        struct template_buf b = {.r = r};
        for (size_t i = 0; i < n->nitems; i++) {
            struct template_value *v = eval(r, n->items[i], s);
            bool ok = v && template_to_str(r, &b, v);
            template_unref(r, v);
            if (!ok) {
                template_buf_free(&b);
                return NULL;
            }
        }
        return template_str_take(r, &b);
    }
    case TEMPLATE_N_COMPARE: {
        struct template_value *left = eval(r, n->a, s);
        if (!left)
            return NULL;
        bool res = true;
        for (size_t i = 0; i < n->nitems && res; i++) {
            struct template_value *right = eval(r, n->items[i], s);
            if (!right || !compare_op(r, n, n->ops[i], left, right, &res)) {
                template_unref(r, left);
                template_unref(r, right);
                return NULL;
            }
            template_unref(r, left);
            left = right;
        }
        template_unref(r, left);
        return template_bool(res);
    }
    case TEMPLATE_N_COND: {
        struct template_value *t = eval(r, n->a, s);
        if (!t)
            return NULL;
        bool yes = template_truthy(t);
        template_unref(r, t);
        if (yes)
            return eval(r, n->b, s);
        return n->c ? eval(r, n->c, s) : &template_undefined;
    }
    default:
        template_fail(r, n, HR_ERR_INTERNAL, "internal error: statement used as an expression");
        return NULL;
    }
}

static struct template_value *eval(struct template_render *r, const struct template_node *n,
                                   struct template_scope *s)
{
    if (!enter(r, n))
        return NULL;
    struct template_value *v = eval_inner(r, n, s);
    leave(r);
    return v;
}

/* ====================================================================== statements */

static bool exec_list(struct template_render *r, struct template_node *const *body, size_t n,
                      struct template_scope *s, struct template_buf *out);

/* Binds an assignment target (a name or a tuple of targets) to v. */
static bool bind_target(struct template_render *r, const struct template_node *t, struct template_scope *s,
                        struct template_value *v)
{
    if (t->kind == TEMPLATE_N_NAME)
        return scope_set(r, s, t->name.s, t->name.len, template_ref(v));
    struct template_value *items = NULL;
    if (v->type == TEMPLATE_T_LIST || v->type == TEMPLATE_T_STR)
        items = template_iterate(r, t, v);
    else
        return template_fail(r, t, HR_ERR_INVALID, "cannot unpack non-iterable %s object", template_type_name(v));
    if (!items)
        return false;
    bool ok = true;
    if (items->u.list.n != t->nitems)
        ok = template_fail(r, t, HR_ERR_INVALID, "%s values to unpack (expected %zu, got %zu)",
                           items->u.list.n > t->nitems ? "too many" : "not enough", t->nitems, items->u.list.n);
    for (size_t i = 0; ok && i < t->nitems; i++)
        ok = bind_target(r, t->items[i], s, items->u.list.items[i]);
    template_unref(r, items);
    return ok;
}

static struct template_value *new_loop(struct template_render *r, struct template_value *items, size_t i, size_t n)
{
    struct template_value *v = template_value_new(r, TEMPLATE_T_LOOP, 0);
    if (!v)
        return NULL;
    v->depth = items->depth + 1;
    v->u.loop.index0 = (int64_t)i;
    v->u.loop.length = (int64_t)n;
    v->u.loop.items = template_ref(items);
    return v;
}

/* Python Jinja2 scoping: the filter, the else block and every iteration get a scope of their
 * own, so a variable set in one iteration is gone in the next and nothing leaks out. */
static bool exec_for(struct template_render *r, const struct template_node *n, struct template_scope *s,
                     struct template_buf *out)
{
    struct template_value *it = eval(r, n->b, s);
    if (!it)
        return false;
    struct template_value *items = template_iterate(r, n->b, it);
    template_unref(r, it);
    if (!items)
        return false;
    bool ok = true;
    if (n->c) { /* for x in xs if cond: filter first (loop.length counts the kept items) */
        struct template_scope *fs = scope_new(r, s);
        struct template_value *kept = fs ? template_list(r, 0) : NULL;
        ok = kept != NULL;
        for (size_t i = 0; ok && i < items->u.list.n; i++) {
            struct template_value *item = items->u.list.items[i];
            ok = count_iteration(r, n) && bind_target(r, n->a, fs, item);
            struct template_value *c = ok ? eval(r, n->c, fs) : NULL;
            ok = ok && c;
            if (ok && template_truthy(c))
                ok = template_list_push(r, kept, template_ref(item));
            template_unref(r, c);
        }
        scope_release(r, fs);
        template_unref(r, items);
        items = kept;
        if (!ok) {
            template_unref(r, items);
            return false;
        }
    }
    size_t len = items->u.list.n;
    if (len == 0 && n->nelse) {
        struct template_scope *es = scope_new(r, s);
        ok = es && exec_list(r, n->else_body, n->nelse, es, out);
        scope_release(r, es);
    }
    for (size_t i = 0; ok && i < len; i++) {
        struct template_scope *is = scope_new(r, s);
        ok = is && count_iteration(r, n) && bind_target(r, n->a, is, items->u.list.items[i]) &&
             scope_set(r, is, "loop", 4, new_loop(r, items, i, len)) && exec_list(r, n->body, n->nbody, is, out);
        scope_release(r, is);
        if (r->flow == TEMPLATE_FLOW_BREAK) {
            r->flow = TEMPLATE_FLOW_NONE;
            break;
        }
        r->flow = TEMPLATE_FLOW_NONE;
    }
    template_unref(r, items);
    return ok;
}

static struct template_value *make_macro(struct template_render *r, const struct template_node *n,
                                         struct template_scope *closure)
{
    struct template_value *v = template_value_new(r, TEMPLATE_T_MACRO, 0);
    if (!v)
        return NULL;
    v->u.macro.node = n;
    v->u.macro.closure = closure;
    scope_capture(closure);
    return v;
}

/* Renders body into a new string value. */
static struct template_value *render_to_str(struct template_render *r, struct template_node *const *body,
                                            size_t nbody, struct template_scope *s)
{
    struct template_buf b = {.r = r};
    if (!exec_list(r, body, nbody, s, &b)) {
        template_buf_free(&b);
        return NULL;
    }
    return template_str_take(r, &b);
}

static struct template_value *invoke_macro(struct template_render *r, const struct template_node *at,
                                           struct template_value *fn, const struct template_callargs *a,
                                           struct template_value *caller)
{
    const struct template_node *m = fn->u.macro.node;
    const char *what = m->kind == TEMPLATE_N_MACRO ? m->name.s : "caller";
    if (!count_iteration(r, at) || !enter(r, at))
        return NULL;
    struct template_scope *ms = scope_new(r, fn->u.macro.closure);
    struct template_value *res = NULL, *varargs = NULL, *kwargs = NULL;
    bool ok = ms != NULL;
    bool *given = ok ? calloc(m->nparams + 1, sizeof *given) : NULL;
    if (ok && !given)
        ok = template_fail(r, at, HR_ERR_NOMEM, "out of memory");
    /* positional, then keywords, then the rest into varargs / kwargs */
    for (size_t i = 0; ok && i < a->npos && i < m->nparams; i++) {
        ok = scope_set(r, ms, m->params[i].s, m->params[i].len, template_ref(a->pos[i]));
        given[i] = true;
    }
    if (ok)
        ok = (varargs = template_list(r, 0)) && (kwargs = template_dict(r, 0));
    if (varargs)
        varargs->u.list.is_tuple = true; /* Python passes extra positionals as a tuple */
    for (size_t i = m->nparams; ok && i < a->npos; i++)
        ok = template_list_push(r, varargs, template_ref(a->pos[i]));
    for (size_t k = 0; ok && k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < m->nparams; i++)
            if (m->params[i].len == a->kw[k].len && !memcmp(m->params[i].s, a->kw[k].name, a->kw[k].len))
                break;
        if (i < m->nparams) {
            if (given[i]) {
                ok = template_fail(r, at, HR_ERR_INVALID, "macro '%s' got multiple values for argument '%s'", what,
                                   m->params[i].s);
                break;
            }
            ok = scope_set(r, ms, m->params[i].s, m->params[i].len, template_ref(a->kw[k].val));
            given[i] = true;
        } else {
            ok = template_dict_set(r, kwargs, a->kw[k].name, a->kw[k].len, template_ref(a->kw[k].val));
        }
    }
    /* every parameter is bound before any default is evaluated, so a default never sees an
     * outer variable of the same name */
    for (size_t i = 0; ok && i < m->nparams; i++)
        if (!given[i])
            ok = scope_set(r, ms, m->params[i].s, m->params[i].len, &template_undefined);
    if (ok) {
        bool set_varargs = scope_set(r, ms, "varargs", 7, varargs); /* both consume their value */
        bool set_kwargs = scope_set(r, ms, "kwargs", 6, kwargs);
        ok = set_varargs && set_kwargs;
    } else {
        template_unref(r, varargs);
        template_unref(r, kwargs);
    }
    if (ok && caller)
        ok = scope_set(r, ms, "caller", 6, template_ref(caller));
    for (size_t i = 0; ok && i < m->nparams; i++)
        if (!given[i] && m->defaults && m->defaults[i])
            ok = scope_set(r, ms, m->params[i].s, m->params[i].len, eval(r, m->defaults[i], ms));
    if (ok)
        res = render_to_str(r, m->body, m->nbody, ms);
    r->flow = TEMPLATE_FLOW_NONE;
    free(given);
    scope_release(r, ms);
    leave(r);
    return res;
}

static bool output(struct template_render *r, struct template_buf *out, const struct template_value *v)
{
    if (v->type == TEMPLATE_T_STR)
        return template_buf_put(out, v->u.str.s, v->u.str.len);
    return template_to_str(r, out, v);
}

static bool exec_stmt(struct template_render *r, const struct template_node *n, struct template_scope *s,
                      struct template_buf *out)
{
    switch (n->kind) {
    case TEMPLATE_N_TEXT:
        return template_buf_put(out, n->value->u.str.s, n->value->u.str.len);
    case TEMPLATE_N_OUTPUT: {
        struct template_value *v = eval(r, n->a, s);
        bool ok = v && output(r, out, v);
        template_unref(r, v);
        return ok;
    }
    case TEMPLATE_N_IF: {
        struct template_value *t = eval(r, n->a, s);
        if (!t)
            return false;
        bool yes = template_truthy(t);
        template_unref(r, t);
        return yes ? exec_list(r, n->body, n->nbody, s, out) : exec_list(r, n->else_body, n->nelse, s, out);
    }
    case TEMPLATE_N_FOR:
        return exec_for(r, n, s, out);
    case TEMPLATE_N_SET: {
        struct template_value *v = eval(r, n->b, s);
        if (!v)
            return false;
        bool ok;
        if (n->a->kind == TEMPLATE_N_NSREF) {
            struct template_value *ns = scope_lookup(s, n->a->name.s, n->a->name.len);
            if (!ns || ns->type != TEMPLATE_T_NAMESPACE) {
                template_unref(r, v);
                return template_fail(r, n, HR_ERR_INVALID,
                                     "cannot assign attribute '%s' on '%s': not a namespace object", n->a->name2.s,
                                     n->a->name.s);
            }
            return template_dict_set(r, ns, n->a->name2.s, n->a->name2.len, v);
        }
        ok = bind_target(r, n->a, s, v);
        template_unref(r, v);
        return ok;
    }
    case TEMPLATE_N_SET_BLOCK: {
        struct template_value *v = render_to_str(r, n->body, n->nbody, s);
        if (v && n->c) {
            struct template_value *f = apply_chain(r, n->c, v, s);
            template_unref(r, v);
            v = f;
        }
        if (!v)
            return false;
        if (n->a->kind == TEMPLATE_N_NSREF) {
            struct template_value *ns = scope_lookup(s, n->a->name.s, n->a->name.len);
            if (!ns || ns->type != TEMPLATE_T_NAMESPACE) {
                template_unref(r, v);
                return template_fail(r, n, HR_ERR_INVALID, "cannot assign attribute on a non-namespace object");
            }
            return template_dict_set(r, ns, n->a->name2.s, n->a->name2.len, v);
        }
        bool ok = bind_target(r, n->a, s, v);
        template_unref(r, v);
        return ok;
    }
    case TEMPLATE_N_MACRO:
        return scope_set(r, s, n->name.s, n->name.len, make_macro(r, n, s));
    case TEMPLATE_N_CALL_BLOCK: {
        struct template_value *caller = make_macro(r, n, s);
        if (!caller)
            return false;
        struct template_value *v = eval_call(r, n->a, s, caller);
        template_unref(r, caller);
        bool ok = v && output(r, out, v);
        template_unref(r, v);
        return ok;
    }
    case TEMPLATE_N_FILTER_BLOCK: {
        struct template_value *v = render_to_str(r, n->body, n->nbody, s);
        if (!v)
            return false;
        struct template_value *f = apply_chain(r, n->c, v, s);
        template_unref(r, v);
        bool ok = f && output(r, out, f);
        template_unref(r, f);
        return ok;
    }
    case TEMPLATE_N_WITH: {
        struct template_scope *ws = scope_new(r, s);
        bool ok = ws != NULL;
        for (size_t i = 0; ok && i < n->nparams; i++)
            ok = scope_set(r, ws, n->params[i].s, n->params[i].len, eval(r, n->defaults[i], s));
        ok = ok && exec_list(r, n->body, n->nbody, ws, out);
        scope_release(r, ws);
        return ok;
    }
    case TEMPLATE_N_SCOPE:
        return exec_list(r, n->body, n->nbody, s, out);
    case TEMPLATE_N_BREAK:
        r->flow = TEMPLATE_FLOW_BREAK;
        return true;
    case TEMPLATE_N_CONTINUE:
        r->flow = TEMPLATE_FLOW_CONTINUE;
        return true;
    default:
        return template_fail(r, n, HR_ERR_INTERNAL, "internal error: expression used as a statement");
    }
}

static bool exec_list(struct template_render *r, struct template_node *const *body, size_t n,
                      struct template_scope *s, struct template_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (!enter(r, body[i]))
            return false;
        bool ok = exec_stmt(r, body[i], s, out);
        leave(r);
        if (!ok)
            return false;
        if (r->flow != TEMPLATE_FLOW_NONE)
            return true;
    }
    return true;
}

/* ========================================================================== render */

enum hr_status chat_template_render(const struct chat_template *ct, const json_t *context, char **out,
                                    size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!ct || !ct->prog)
        return hr_err(err, errlen, HR_ERR_INVALID, "chat template is not initialised");
    if (context && !json_is_object(context))
        return hr_err(err, errlen, HR_ERR_INVALID, "template context must be a JSON object");
    struct template_render r = {.lim = &ct->limits, .status = HR_OK, .err = err, .errlen = errlen};
    struct template_buf buf = {.r = &r};
    r.global = scope_new(&r, NULL);
    bool ok = r.global != NULL;
    if (ok && context) {
        const char *key;
        json_t *val;
        void *iter = json_object_iter((json_t *)context);
        while (ok && iter) {
            key = json_object_iter_key(iter);
            val = json_object_iter_value(iter);
            ok = scope_set(&r, r.global, key, strlen(key), template_from_json(&r, val, 0));
            iter = json_object_iter_next((json_t *)context, iter);
        }
    }
    if (ok)
        ok = exec_list(&r, ct->prog->body, ct->prog->nbody, r.global, &buf);
    if (ok) {
        *out = template_buf_take(&buf, len);
        if (!*out)
            ok = false;
    }
    /* break reference cycles through namespaces, then free everything */
    for (size_t i = 0; i < r.nns; i++) {
        struct template_value *ns = r.namespaces[i];
        size_t n = ns->u.dict.n;
        struct template_entry *e = ns->u.dict.e;
        ns->u.dict.n = 0;
        ns->u.dict.e = NULL;
        ns->u.dict.cap = 0;
        for (size_t k = 0; k < n; k++) {
            template_unref(&r, e[k].key);
            template_unref(&r, e[k].val);
        }
        free(e);
    }
    if (r.global)
        scope_destroy(&r, r.global);
    for (size_t i = 0; i < r.nkept; i++)
        if (r.kept[i] != r.global)
            scope_destroy(&r, r.kept[i]);
    free(r.kept);
    for (size_t i = 0; i < r.nns; i++)
        template_unref(&r, r.namespaces[i]);
    free(r.namespaces);
    template_buf_free(&buf);
    if (!ok) {
        free(*out);
        *out = NULL;
        if (len)
            *len = 0;
        if (r.status == HR_OK)
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory rendering the template");
        return r.status;
    }
    return HR_OK;
}
