/* Template values: reference-counted, immutable except namespaces; conversion from JSON;
 * Python's truthiness, equality, ordering, str(), repr() and HF's tojson. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* Containers nested deeper than this are refused (bounds every recursion over values). */
#define VALUE_MAX_DEPTH 200

struct template_value template_undefined = {.type = TEMPLATE_T_UNDEFINED, .refs = TEMPLATE_REFS_IMMORTAL};
struct template_value template_none = {.type = TEMPLATE_T_NONE, .refs = TEMPLATE_REFS_IMMORTAL};
struct template_value template_true = {.type = TEMPLATE_T_BOOL, .refs = TEMPLATE_REFS_IMMORTAL, .u.b = true};
struct template_value template_false = {.type = TEMPLATE_T_BOOL, .refs = TEMPLATE_REFS_IMMORTAL, .u.b = false};

static struct template_value builtins[TEMPLATE_BUILTIN_COUNT_] = {
    {.type = TEMPLATE_T_BUILTIN, .refs = TEMPLATE_REFS_IMMORTAL, .u.builtin = TEMPLATE_BUILTIN_RANGE},
    {.type = TEMPLATE_T_BUILTIN, .refs = TEMPLATE_REFS_IMMORTAL, .u.builtin = TEMPLATE_BUILTIN_NAMESPACE},
    {.type = TEMPLATE_T_BUILTIN, .refs = TEMPLATE_REFS_IMMORTAL, .u.builtin = TEMPLATE_BUILTIN_DICT},
    {.type = TEMPLATE_T_BUILTIN, .refs = TEMPLATE_REFS_IMMORTAL, .u.builtin = TEMPLATE_BUILTIN_RAISE_EXCEPTION},
    {.type = TEMPLATE_T_BUILTIN, .refs = TEMPLATE_REFS_IMMORTAL, .u.builtin = TEMPLATE_BUILTIN_STRFTIME_NOW},
};

static const char *const BUILTIN_NAMES[TEMPLATE_BUILTIN_COUNT_] = {
    "range", "namespace", "dict", "raise_exception", "strftime_now",
};

struct template_value *template_builtin_value(enum template_builtin b)
{
    return &builtins[b];
}

/* ========================================================================= lifetime */

struct template_value *template_ref(struct template_value *v)
{
    if (v && v->refs != TEMPLATE_REFS_IMMORTAL)
        v->refs++;
    return v;
}

void template_unref(struct template_render *r, struct template_value *v)
{
    if (!v || v->refs == TEMPLATE_REFS_IMMORTAL || --v->refs > 0)
        return;
    switch (v->type) {
    case TEMPLATE_T_STR:
        free(v->u.str.s);
        break;
    case TEMPLATE_T_LIST:
        for (size_t i = 0; i < v->u.list.n; i++)
            template_unref(r, v->u.list.items[i]);
        free(v->u.list.items);
        free(v->u.list.pending);
        break;
    case TEMPLATE_T_DICT:
    case TEMPLATE_T_NAMESPACE:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            template_unref(r, v->u.dict.e[i].key);
            template_unref(r, v->u.dict.e[i].val);
        }
        free(v->u.dict.e);
        break;
    case TEMPLATE_T_METHOD:
        template_unref(r, v->u.method.self);
        break;
    case TEMPLATE_T_LOOP:
        template_unref(r, v->u.loop.items);
        break;
    default:
        break;
    }
    template_mem(r, -(ptrdiff_t)v->acct);
    free(v);
}

struct template_value *template_value_new(struct template_render *r, enum template_type type, size_t extra)
{
    size_t acct = sizeof(struct template_value) + extra;
    if (!template_mem(r, (ptrdiff_t)acct))
        return NULL;
    struct template_value *v = calloc(1, sizeof *v);
    if (!v) {
        template_mem(r, -(ptrdiff_t)acct);
        template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->type = type;
    v->refs = 1;
    v->acct = acct;
    return v;
}

static struct template_value *alloc_value(struct template_render *r, enum template_type type, size_t extra)
{
    /* every value made is a step: building big lists over and over is work, too */
    if (r->lim && ++r->steps > r->lim->max_steps) {
        template_limit(r, NULL, "template rendering exceeds %llu steps", (unsigned long long)r->lim->max_steps);
        return NULL;
    }
    return template_value_new(r, type, extra);
}

struct template_value *template_int(struct template_render *r, int64_t i)
{
    struct template_value *v = alloc_value(r, TEMPLATE_T_INT, 0);
    if (v)
        v->u.i = i;
    return v;
}

struct template_value *template_float(struct template_render *r, double f)
{
    struct template_value *v = alloc_value(r, TEMPLATE_T_FLOAT, 0);
    if (v)
        v->u.f = f;
    return v;
}

struct template_value *template_bool(bool b)
{
    return b ? &template_true : &template_false;
}

struct template_value *template_str(struct template_render *r, const char *s, size_t n)
{
    if (r->lim && n > r->lim->max_output) {
        template_limit(r, NULL, "string exceeds the limit of %zu bytes", r->lim->max_output);
        return NULL;
    }
    struct template_value *v = alloc_value(r, TEMPLATE_T_STR, n + 1);
    if (!v)
        return NULL;
    v->u.str.s = malloc(n + 1);
    if (!v->u.str.s) {
        template_unref(r, v);
        template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (n)
        memcpy(v->u.str.s, s, n);
    v->u.str.s[n] = 0;
    v->u.str.len = n;
    return v;
}

struct template_value *template_str_take(struct template_render *r, struct template_buf *b)
{
    if (!b->data) {
        template_buf_free(b);
        return template_str(r, "", 0);
    }
    /* a buffer bound to r has its capacity counted already: the value inherits it */
    size_t cap = b->cap;
    if (!b->r && !template_mem(r, (ptrdiff_t)cap)) {
        template_buf_free(b);
        return NULL;
    }
    struct template_value *v = alloc_value(r, TEMPLATE_T_STR, 0);
    if (!v) {
        if (!b->r)
            template_mem(r, -(ptrdiff_t)cap);
        template_buf_free(b);
        return NULL;
    }
    size_t len;
    v->u.str.s = template_buf_take(b, &len);
    v->u.str.len = len;
    v->acct += cap;
    return v;
}

struct template_value *template_list(struct template_render *r, size_t cap)
{
    struct template_value *v = alloc_value(r, TEMPLATE_T_LIST, 0);
    if (!v || cap == 0)
        return v;
    if (cap > SIZE_MAX / sizeof(struct template_value *) / 2 ||
        !template_mem(r, (ptrdiff_t)(cap * sizeof(struct template_value *)))) {
        template_unref(r, v);
        return NULL;
    }
    v->acct += cap * sizeof(struct template_value *);
    v->u.list.items = malloc(cap * sizeof(struct template_value *));
    if (!v->u.list.items) {
        template_unref(r, v);
        template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->u.list.cap = cap;
    return v;
}

static bool deepen(struct template_render *r, struct template_value *container, const struct template_value *child)
{
    uint32_t d = child->depth + 1;
    if (d > VALUE_MAX_DEPTH)
        return template_limit(r, NULL, "values nested more than %d levels deep", VALUE_MAX_DEPTH);
    if (d > container->depth)
        container->depth = d;
    return true;
}

bool template_list_push(struct template_render *r, struct template_value *l, struct template_value *v)
{
    if (!v)
        return false;
    if (!deepen(r, l, v)) {
        template_unref(r, v);
        return false;
    }
    if (l->u.list.n == l->u.list.cap) {
        size_t cap = l->u.list.cap ? l->u.list.cap * 2 : 4;
        size_t grow = (cap - l->u.list.cap) * sizeof(struct template_value *);
        if (!template_mem(r, (ptrdiff_t)grow)) {
            template_unref(r, v);
            return false;
        }
        struct template_value **items = realloc(l->u.list.items, cap * sizeof *items);
        if (!items) {
            template_mem(r, -(ptrdiff_t)grow);
            template_unref(r, v);
            return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        }
        l->acct += grow;
        l->u.list.items = items;
        l->u.list.cap = cap;
    }
    l->u.list.items[l->u.list.n++] = v;
    return true;
}

struct template_value *template_dict(struct template_render *r, size_t cap)
{
    struct template_value *v = alloc_value(r, TEMPLATE_T_DICT, 0);
    (void)cap;
    return v;
}

struct template_value *template_namespace(struct template_render *r)
{
    struct template_value *v = alloc_value(r, TEMPLATE_T_NAMESPACE, 0);
    if (!v)
        return NULL;
    /* the render keeps a reference so reference cycles through namespaces are broken at the end */
    if (r->nns == r->capns) {
        size_t cap = r->capns ? r->capns * 2 : 8;
        struct template_value **a = realloc(r->namespaces, cap * sizeof *a);
        if (!a) {
            template_unref(r, v);
            template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
            return NULL;
        }
        r->namespaces = a;
        r->capns = cap;
    }
    r->namespaces[r->nns++] = template_ref(v);
    return v;
}

struct template_value *template_dict_get(const struct template_value *d, const char *key, size_t klen)
{
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const struct template_value *k = d->u.dict.e[i].key;
        if (k->u.str.len == klen && memcmp(k->u.str.s, key, klen) == 0)
            return d->u.dict.e[i].val;
    }
    return NULL;
}

bool template_dict_set(struct template_render *r, struct template_value *d, const char *key, size_t klen,
                       struct template_value *v)
{
    if (!v)
        return false;
    if (!deepen(r, d, v)) {
        template_unref(r, v);
        return false;
    }
    for (size_t i = 0; i < d->u.dict.n; i++) {
        struct template_value *k = d->u.dict.e[i].key;
        if (k->u.str.len == klen && memcmp(k->u.str.s, key, klen) == 0) {
            struct template_value *old = d->u.dict.e[i].val;
            d->u.dict.e[i].val = v;
            template_unref(r, old);
            return true;
        }
    }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? d->u.dict.cap * 2 : 4;
        size_t grow = (cap - d->u.dict.cap) * sizeof(struct template_entry);
        if (!template_mem(r, (ptrdiff_t)grow)) {
            template_unref(r, v);
            return false;
        }
        struct template_entry *e = realloc(d->u.dict.e, cap * sizeof *e);
        if (!e) {
            template_mem(r, -(ptrdiff_t)grow);
            template_unref(r, v);
            return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        }
        d->acct += grow;
        d->u.dict.e = e;
        d->u.dict.cap = cap;
    }
    struct template_value *k = template_str(r, key, klen);
    if (!k) {
        template_unref(r, v);
        return false;
    }
    d->u.dict.e[d->u.dict.n].key = k;
    d->u.dict.e[d->u.dict.n].val = v;
    d->u.dict.n++;
    return true;
}

struct template_value *template_const_str(struct template_pool *p, const char *s, size_t n)
{
    struct template_value *v = template_pool_alloc(p, sizeof *v);
    char *c = v ? template_pool_alloc(p, n + 1) : NULL;
    if (!c)
        return NULL;
    if (n)
        memcpy(c, s, n);
    c[n] = 0;
    v->type = TEMPLATE_T_STR;
    v->refs = TEMPLATE_REFS_IMMORTAL;
    v->u.str.s = c;
    v->u.str.len = n;
    return v;
}

struct template_value *template_const_num(struct template_pool *p, bool is_float, int64_t i, double f)
{
    struct template_value *v = template_pool_alloc(p, sizeof *v);
    if (!v)
        return NULL;
    v->refs = TEMPLATE_REFS_IMMORTAL;
    if (is_float) {
        v->type = TEMPLATE_T_FLOAT;
        v->u.f = f;
    } else {
        v->type = TEMPLATE_T_INT;
        v->u.i = i;
    }
    return v;
}

/* ============================================================================= JSON */

struct template_value *template_from_json(struct template_render *r, const json_t *j, uint32_t depth)
{
    if (depth > VALUE_MAX_DEPTH) {
        template_limit(r, NULL, "context JSON nested more than %d levels deep", VALUE_MAX_DEPTH);
        return NULL;
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        return &template_none;
    case JSON_TRUE:
        return &template_true;
    case JSON_FALSE:
        return &template_false;
    case JSON_INTEGER:
        return template_int(r, (int64_t)json_integer_value(j));
    case JSON_REAL:
        return template_float(r, json_real_value(j));
    case JSON_STRING:
        return template_str(r, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct template_value *l = template_list(r, n);
        if (!l)
            return NULL;
        for (size_t i = 0; i < n; i++)
            if (!template_list_push(r, l, template_from_json(r, json_array_get(j, i), depth + 1))) {
                template_unref(r, l);
                return NULL;
            }
        return l;
    }
    case JSON_OBJECT: {
        struct template_value *d = template_dict(r, json_object_size(j));
        if (!d)
            return NULL;
        const char *key;
        json_t *val;
        void *iter = json_object_iter((json_t *)j);
        while (iter) {
            key = json_object_iter_key(iter);
            val = json_object_iter_value(iter);
            if (!template_dict_set(r, d, key, strlen(key), template_from_json(r, val, depth + 1))) {
                template_unref(r, d);
                return NULL;
            }
            iter = json_object_iter_next((json_t *)j, iter);
        }
        return d;
    }
    }
    return &template_undefined;
}

/* ================================================================== Python semantics */

const char *template_type_name(const struct template_value *v)
{
    switch (v->type) {
    case TEMPLATE_T_UNDEFINED: return "Undefined";
    case TEMPLATE_T_NONE: return "NoneType";
    case TEMPLATE_T_BOOL: return "bool";
    case TEMPLATE_T_INT: return "int";
    case TEMPLATE_T_FLOAT: return "float";
    case TEMPLATE_T_STR: return "str";
    case TEMPLATE_T_LIST:
        switch (v->u.list.view) {
        case TEMPLATE_VIEW_GENERATOR: return "generator";
        case TEMPLATE_VIEW_REVERSED: return "list_reverseiterator";
        case TEMPLATE_VIEW_REVERSED_KEYS: return "dict_reversekeyiterator";
        case TEMPLATE_VIEW_KEYS: return "dict_keys";
        case TEMPLATE_VIEW_VALUES: return "dict_values";
        case TEMPLATE_VIEW_ITEMS: return "dict_items";
        default: return v->u.list.is_tuple ? "tuple" : "list";
        }
    case TEMPLATE_T_DICT: return "dict";
    case TEMPLATE_T_NAMESPACE: return "Namespace";
    case TEMPLATE_T_MACRO: return "Macro";
    case TEMPLATE_T_BUILTIN: return "builtin_function_or_method";
    case TEMPLATE_T_METHOD: return "builtin_function_or_method";
    case TEMPLATE_T_LOOP: return "LoopContext";
    }
    return "object";
}

bool template_truthy(const struct template_value *v)
{
    switch (v->type) {
    case TEMPLATE_T_UNDEFINED:
    case TEMPLATE_T_NONE: return false;
    case TEMPLATE_T_BOOL: return v->u.b;
    case TEMPLATE_T_INT: return v->u.i != 0;
    case TEMPLATE_T_FLOAT: return v->u.f != 0.0;
    case TEMPLATE_T_STR: return v->u.str.len > 0;
    case TEMPLATE_T_LIST: return template_is_iterator(v) || v->u.list.n > 0;
    case TEMPLATE_T_DICT: return v->u.dict.n > 0;
    default: return true;
    }
}

bool template_is_iterator(const struct template_value *v)
{
    return v->type == TEMPLATE_T_LIST &&
           (v->u.list.view == TEMPLATE_VIEW_GENERATOR || v->u.list.view == TEMPLATE_VIEW_REVERSED ||
            v->u.list.view == TEMPLATE_VIEW_REVERSED_KEYS);
}

static bool is_number(const struct template_value *v)
{
    return v->type == TEMPLATE_T_INT || v->type == TEMPLATE_T_FLOAT || v->type == TEMPLATE_T_BOOL;
}

static int cmp_numbers(const struct template_value *a, const struct template_value *b)
{
    if (a->type != TEMPLATE_T_FLOAT && b->type != TEMPLATE_T_FLOAT) {
        int64_t x = a->type == TEMPLATE_T_BOOL ? a->u.b : a->u.i;
        int64_t y = b->type == TEMPLATE_T_BOOL ? b->u.b : b->u.i;
        return x < y ? -1 : x > y;
    }
    double x = a->type == TEMPLATE_T_FLOAT ? a->u.f : a->type == TEMPLATE_T_BOOL ? a->u.b : (double)a->u.i;
    double y = b->type == TEMPLATE_T_FLOAT ? b->u.f : b->type == TEMPLATE_T_BOOL ? b->u.b : (double)b->u.i;
    if (isnan(x) || isnan(y))
        return 2; /* unordered */
    return x < y ? -1 : x > y;
}

static bool equal_depth(const struct template_value *a, const struct template_value *b, int depth)
{
    if (a == b)
        return a->type != TEMPLATE_T_FLOAT || !isnan(a->u.f);
    if (depth > VALUE_MAX_DEPTH)
        return false;
    if (is_number(a) && is_number(b))
        return cmp_numbers(a, b) == 0;
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case TEMPLATE_T_UNDEFINED:
    case TEMPLATE_T_NONE: return true;
    case TEMPLATE_T_STR:
        return a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
    case TEMPLATE_T_LIST:
        if (a->u.list.is_tuple != b->u.list.is_tuple || a->u.list.view != b->u.list.view ||
            template_is_iterator(a) || a->u.list.n != b->u.list.n)
            return false;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!equal_depth(a->u.list.items[i], b->u.list.items[i], depth + 1))
                return false;
        return true;
    case TEMPLATE_T_DICT:
        if (a->u.dict.n != b->u.dict.n)
            return false;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            const struct template_value *k = a->u.dict.e[i].key;
            const struct template_value *bv = template_dict_get(b, k->u.str.s, k->u.str.len);
            if (!bv || !equal_depth(a->u.dict.e[i].val, bv, depth + 1))
                return false;
        }
        return true;
    case TEMPLATE_T_BUILTIN: return a->u.builtin == b->u.builtin;
    default: return false; /* identity only */
    }
}

bool template_equal(const struct template_value *a, const struct template_value *b)
{
    return equal_depth(a, b, 0);
}

static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);
    if (c)
        return c < 0 ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

static int cmp_lower(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0, j = 0, ai, bj;
    while (i < na && j < nb) {
        uint32_t x = template_to_lower(template_utf8_decode(a + i, na - i, &ai));
        uint32_t y = template_to_lower(template_utf8_decode(b + j, nb - j, &bj));
        if (x != y)
            return x < y ? -1 : 1;
        i += ai;
        j += bj;
    }
    return (i < na) - (j < nb);
}

static bool compare_depth(struct template_render *r, const struct template_node *at,
                          const struct template_value *a, const struct template_value *b, bool ci,
                          int *cmp, int depth)
{
    if (depth > VALUE_MAX_DEPTH)
        return template_fail(r, at, HR_ERR_INVALID, "values nested too deeply to compare");
    if (is_number(a) && is_number(b)) {
        int c = cmp_numbers(a, b);
        *cmp = c == 2 ? 0 : c;
        return true;
    }
    if (a->type == TEMPLATE_T_STR && b->type == TEMPLATE_T_STR) {
        *cmp = ci ? cmp_lower(a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len)
                  : cmp_bytes(a->u.str.s, a->u.str.len, b->u.str.s, b->u.str.len);
        return true;
    }
    if (a->type == TEMPLATE_T_LIST && b->type == TEMPLATE_T_LIST && a->u.list.is_tuple == b->u.list.is_tuple &&
        !a->u.list.view && !b->u.list.view) {
        size_t n = a->u.list.n < b->u.list.n ? a->u.list.n : b->u.list.n;
        for (size_t i = 0; i < n; i++) {
            if (equal_depth(a->u.list.items[i], b->u.list.items[i], depth + 1))
                continue;
            return compare_depth(r, at, a->u.list.items[i], b->u.list.items[i], ci, cmp, depth + 1);
        }
        *cmp = a->u.list.n < b->u.list.n ? -1 : a->u.list.n > b->u.list.n;
        return true;
    }
    return template_fail(r, at, HR_ERR_INVALID, "cannot order values of types '%s' and '%s'",
                         template_type_name(a), template_type_name(b));
}

bool template_compare(struct template_render *r, const struct template_node *at, const struct template_value *a,
                      const struct template_value *b, bool case_insensitive, int *cmp)
{
    return compare_depth(r, at, a, b, case_insensitive, cmp, 0);
}

/* ======================================================================= formatting */

static bool fmt_value(struct template_render *r, struct template_buf *b, const struct template_value *v,
                      bool repr, int depth)
{
    if (depth > VALUE_MAX_DEPTH)
        return template_fail(r, NULL, HR_ERR_INVALID, "values nested too deeply to print (a cycle?)");
    char tmp[32];
    switch (v->type) {
    case TEMPLATE_T_UNDEFINED:
        return repr ? template_buf_puts(b, "Undefined") : true;
    case TEMPLATE_T_NONE:
        return template_buf_puts(b, "None");
    case TEMPLATE_T_BOOL:
        return template_buf_puts(b, v->u.b ? "True" : "False");
    case TEMPLATE_T_INT:
        return template_buf_printf(b, "%lld", (long long)v->u.i);
    case TEMPLATE_T_FLOAT:
        template_format_float(v->u.f, tmp);
        return template_buf_puts(b, tmp);
    case TEMPLATE_T_STR:
        if (repr)
            return template_repr_str(b, v->u.str.s, v->u.str.len);
        if (!template_charge(r, v->u.str.len))
            return false;
        return template_buf_put(b, v->u.str.s, v->u.str.len);
    case TEMPLATE_T_LIST: {
        bool tuple = v->u.list.is_tuple;
        static const char *const prefix[] = {"", "", "", "", "dict_keys(", "dict_values(", "dict_items("};
        if (template_is_iterator(v))
            return template_buf_printf(b, "<%s object>", template_type_name(v));
        if (v->u.list.view && !template_buf_puts(b, prefix[v->u.list.view]))
            return false;
        if (!template_buf_putc(b, tuple ? '(' : '['))
            return false;
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i && !template_buf_put(b, ", ", 2))
                return false;
            if (!fmt_value(r, b, v->u.list.items[i], true, depth + 1))
                return false;
        }
        if (tuple && v->u.list.n == 1 && !template_buf_putc(b, ','))
            return false;
        if (!template_buf_putc(b, tuple ? ')' : ']'))
            return false;
        return v->u.list.view ? template_buf_putc(b, ')') : true;
    }
    case TEMPLATE_T_DICT:
    case TEMPLATE_T_NAMESPACE: {
        if (v->type == TEMPLATE_T_NAMESPACE && !template_buf_puts(b, "<Namespace "))
            return false;
        if (!template_buf_putc(b, '{'))
            return false;
        for (size_t i = 0; i < v->u.dict.n; i++) {
            if (i && !template_buf_put(b, ", ", 2))
                return false;
            if (!fmt_value(r, b, v->u.dict.e[i].key, true, depth + 1) || !template_buf_put(b, ": ", 2) ||
                !fmt_value(r, b, v->u.dict.e[i].val, true, depth + 1))
                return false;
        }
        if (!template_buf_putc(b, '}'))
            return false;
        return v->type == TEMPLATE_T_NAMESPACE ? template_buf_putc(b, '>') : true;
    }
    case TEMPLATE_T_MACRO: {
        const struct template_node *n = v->u.macro.node;
        if (n->kind == TEMPLATE_N_CALL_BLOCK)
            return template_buf_puts(b, "<Macro 'caller'>");
        return template_buf_printf(b, "<Macro '%.*s'>", (int)n->name.len, n->name.s);
    }
    case TEMPLATE_T_BUILTIN:
        return template_buf_printf(b, "<function %s>", BUILTIN_NAMES[v->u.builtin]);
    case TEMPLATE_T_METHOD:
        return template_buf_printf(b, "<built-in method %s of %s object>", v->u.method.name,
                                   template_type_name(v->u.method.self));
    case TEMPLATE_T_LOOP:
        return template_buf_printf(b, "<LoopContext %lld/%lld>", (long long)v->u.loop.index0 + 1,
                                   (long long)v->u.loop.length);
    }
    return true;
}

bool template_to_str(struct template_render *r, struct template_buf *b, const struct template_value *v)
{
    return fmt_value(r, b, v, false, 0);
}

bool template_to_repr(struct template_render *r, struct template_buf *b, const struct template_value *v)
{
    return fmt_value(r, b, v, true, 0);
}

static bool json_newline(struct template_buf *b, const struct template_json_opts *o, int level)
{
    if (!template_buf_putc(b, '\n'))
        return false;
    for (int i = 0; i < level; i++) {
        if (o->indent_str) {
            if (!template_buf_puts(b, o->indent_str))
                return false;
        } else {
            for (int k = 0; k < o->indent; k++)
                if (!template_buf_putc(b, ' '))
                    return false;
        }
    }
    return true;
}

static int entry_cmp(const void *x, const void *y)
{
    const struct template_entry *a = *(const struct template_entry *const *)x;
    const struct template_entry *b = *(const struct template_entry *const *)y;
    return cmp_bytes(a->key->u.str.s, a->key->u.str.len, b->key->u.str.s, b->key->u.str.len);
}

static bool json_value(struct template_render *r, struct template_buf *b, const struct template_value *v,
                       const struct template_json_opts *o, int level)
{
    if (level > VALUE_MAX_DEPTH)
        return template_fail(r, NULL, HR_ERR_INVALID, "values nested too deeply for tojson (a cycle?)");
    bool indent = o->indent >= 0 || o->indent_str;
    const char *item_sep = o->item_sep ? o->item_sep : indent ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    char tmp[32];
    switch (v->type) {
    case TEMPLATE_T_UNDEFINED:
    case TEMPLATE_T_NONE:
        return template_buf_puts(b, "null");
    case TEMPLATE_T_BOOL:
        return template_buf_puts(b, v->u.b ? "true" : "false");
    case TEMPLATE_T_INT:
        return template_buf_printf(b, "%lld", (long long)v->u.i);
    case TEMPLATE_T_FLOAT:
        if (isnan(v->u.f))
            return template_buf_puts(b, "NaN");
        if (isinf(v->u.f))
            return template_buf_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        template_format_float(v->u.f, tmp);
        return template_buf_puts(b, tmp);
    case TEMPLATE_T_STR:
        return template_charge(r, v->u.str.len) && template_json_str(b, v->u.str.s, v->u.str.len, o->ensure_ascii);
    case TEMPLATE_T_LIST:
        if (v->u.list.view)
            return template_fail(r, NULL, HR_ERR_INVALID, "object of type '%s' is not JSON serializable",
                                 template_type_name(v));
        if (v->u.list.n == 0)
            return template_buf_puts(b, "[]");
        if (!template_buf_putc(b, '['))
            return false;
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i && !template_buf_puts(b, item_sep))
                return false;
            if (indent && !json_newline(b, o, level + 1))
                return false;
            if (!json_value(r, b, v->u.list.items[i], o, level + 1))
                return false;
        }
        if (indent && !json_newline(b, o, level))
            return false;
        return template_buf_putc(b, ']');
    case TEMPLATE_T_DICT:
    case TEMPLATE_T_NAMESPACE: {
        size_t n = v->u.dict.n;
        if (n == 0)
            return template_buf_puts(b, "{}");
        const struct template_entry **order = malloc(n * sizeof *order);
        if (!order)
            return template_fail(r, NULL, HR_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++)
            order[i] = &v->u.dict.e[i];
        if (o->sort_keys)
            qsort(order, n, sizeof *order, entry_cmp);
        bool ok = template_buf_putc(b, '{');
        for (size_t i = 0; ok && i < n; i++) {
            if (i)
                ok = template_buf_puts(b, item_sep);
            if (ok && indent)
                ok = json_newline(b, o, level + 1);
            ok = ok && template_json_str(b, order[i]->key->u.str.s, order[i]->key->u.str.len, o->ensure_ascii) &&
                 template_buf_puts(b, key_sep) && json_value(r, b, order[i]->val, o, level + 1);
        }
        free(order);
        if (ok && indent)
            ok = json_newline(b, o, level);
        return ok && template_buf_putc(b, '}');
    }
    default:
        return template_fail(r, NULL, HR_ERR_INVALID, "object of type '%s' is not JSON serializable",
                             template_type_name(v));
    }
}

bool template_to_json(struct template_render *r, struct template_buf *b, const struct template_value *v,
                      const struct template_json_opts *o)
{
    return json_value(r, b, v, o, 0);
}
