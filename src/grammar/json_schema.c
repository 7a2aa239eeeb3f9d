/* JSON Schema compiler: one GBNF rule per schema node that needs one, written as the
 * schema is walked; $ref targets get a rule each, named before their body is written,
 * so recursive schemas refer to themselves. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbuf.h"
#include "grammar/regex.h"

#define JSC_MAX_DEPTH 64
#define JSC_MAX_REFS 1024
#define JSC_MAX_STRS 64

struct jsc_str {
    long lo, hi;
    int id;
};

struct jsc_ref {
    char *ref;
    int rule;
};

struct jsc {
    struct gbuf out;          /* rule definitions */
    int n_rules;
    const json_t *root;
    struct jsc_ref refs[JSC_MAX_REFS];
    int n_refs;
    struct jsc_str strs[JSC_MAX_STRS];
    int n_strs;
    int depth;
    int merges;               /* anyOf branches merged with their siblings, bounded */
    bool dates_done;
    enum hr_status st;
    char *err;
    size_t errlen;
};

#define JSON_PRIMS \
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n" \
    "json-object ::= \"{\" (json-string \":\" json-value (\",\" json-string \":\" json-value)*)? \"}\"\n" \
    "json-array ::= \"[\" (json-value (\",\" json-value)*)? \"]\"\n" \
    "json-string ::= \"\\\"\" json-tail\n" \
    "json-tail ::= \"\\\"\" | json-char json-tail\n" \
    "json-char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n" \
    "json-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n" \
    "json-number ::= json-int (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n"

#define JSON_OBJECT_MODE \
    "root ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n" \
    "pair ::= json-string ws \":\" ws value ws\n" \
    "value ::= object | array | json-string | json-number | \"true\" | \"false\" | \"null\"\n" \
    "object ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n" \
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n" \
    "ws ::= [ \\n]{0,2}\n"

const char *json_schema_object_gbnf(void)
{
    return JSON_OBJECT_MODE JSON_PRIMS;
}

__attribute__((format(printf, 2, 3))) static void jsc_fail(struct jsc *c, const char *fmt, ...)
{
    if (c->st != HR_OK)
        return;
    char msg[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = hr_err(c->err, c->errlen, HR_ERR_INVALID, "json schema: %s", msg);
}

static int jsc_rule(struct jsc *c)
{
    return c->n_rules++;
}

static void gen(struct jsc *c, const json_t *s, const char *path, struct gbuf *e);

/* A JSON value as a GBNF literal of its compact serialization. */
static void literal_value(struct jsc *c, const json_t *v, struct gbuf *e)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!t) {
        jsc_fail(c, "out of memory");
        return;
    }
    gbuf_literal(e, t, strlen(t));
    free(t);
}

static bool is_annotation(const char *k)
{
    static const char *ann[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", NULL};
    for (int i = 0; ann[i]; i++)
        if (strcmp(k, ann[i]) == 0)
            return true;
    return false;
}

static bool is_supported(const char *k)
{
    static const char *sup[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems",
                                "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minItems", "maxItems",
                                "minLength", "maxLength", "format", "pattern", "minimum", "maximum",
                                "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; sup[i]; i++)
        if (strcmp(k, sup[i]) == 0)
            return true;
    return is_annotation(k);
}

/* A JSON pointer ("#/a/b", with ~0 and ~1) into the root document. */
static const json_t *resolve(struct jsc *c, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, tok);
        else if (json_is_array(cur))
            cur = json_array_get(cur, (size_t)strtoul(tok, NULL, 10));
        else
            cur = NULL;
        if (!cur)
            return NULL;
    }
    return *p ? NULL : cur;
}

static void gen_ref(struct jsc *c, const char *ref, const char *path, struct gbuf *e)
{
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) {
            gbuf_fmt(e, "r%d", c->refs[i].rule);
            return;
        }
    const json_t *t = resolve(c, ref);
    if (!t) {
        jsc_fail(c, "$ref '%s' at %s: only references into this schema (\"#/...\") are supported, and this one "
                    "names nothing",
                 ref, path);
        return;
    }
    if (c->n_refs >= JSC_MAX_REFS) {
        jsc_fail(c, "more than %d distinct $ref targets", JSC_MAX_REFS);
        return;
    }
    int r = jsc_rule(c);
    c->refs[c->n_refs].ref = strdup(ref);
    c->refs[c->n_refs++].rule = r;
    gbuf_fmt(e, "r%d", r);
    struct gbuf body = {0};
    gen(c, t, ref, &body);
    gbuf_fmt(&c->out, "r%d ::= %s\n", r, body.s ? body.s : "\"\"");
    gbuf_free(&body);
}

/* ------------------------------------------------------------------ integers */

/* Decimal strings a..b of the same length n (a <= b), as alternatives. */
static void range_same_len(struct gbuf *e, const char *a, const char *b, int n)
{
    if (n == 0) {
        gbuf_str(e, "\"\"");
        return;
    }
    if (n == 1) {
        gbuf_fmt(e, "[%c-%c]", a[0], b[0]);
        return;
    }
    /* a = d000.., b = e999..: [d-e] then any digits (keeps the alternatives linear in n). */
    bool all_zero = true, all_nine = true;
    for (int k = 1; k < n; k++) {
        all_zero = all_zero && a[k] == '0';
        all_nine = all_nine && b[k] == '9';
    }
    if (all_zero && all_nine) {
        gbuf_fmt(e, "[%c-%c] [0-9]{%d}", a[0], b[0], n - 1);
        return;
    }
    if (a[0] == b[0]) {
        gbuf_fmt(e, "\"%c\" (", a[0]);
        range_same_len(e, a + 1, b + 1, n - 1);
        gbuf_str(e, ")");
        return;
    }
    char nines[32], zeros[32];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    gbuf_fmt(e, "(\"%c\" (", a[0]);
    range_same_len(e, a + 1, nines, n - 1);
    gbuf_str(e, ")");
    if (a[0] + 1 <= b[0] - 1)
        gbuf_fmt(e, " | [%c-%c] [0-9]{%d}", a[0] + 1, b[0] - 1, n - 1);
    gbuf_fmt(e, " | \"%c\" (", b[0]);
    range_same_len(e, zeros, b + 1, n - 1);
    gbuf_str(e, "))");
}

/* Non-negative integers in [a, b] without leading zeros. */
static void range_nonneg(struct gbuf *e, int64_t a, int64_t b)
{
    char sa[32], sb[32];
    bool first = true;
    gbuf_str(e, "(");
    for (int64_t lo = a; lo <= b;) {
        int len = snprintf(sa, sizeof sa, "%lld", (long long)lo);
        int64_t top = 9;
        for (int k = 1; k < len; k++)
            top = top * 10 + 9;
        int64_t hi = b < top ? b : top;
        snprintf(sb, sizeof sb, "%0*lld", len, (long long)hi);
        if (!first)
            gbuf_str(e, " | ");
        first = false;
        range_same_len(e, sa, sb, len);
        if (hi == b)
            break;
        lo = hi + 1;
    }
    gbuf_str(e, ")");
}

#define JSC_INT_DIGITS 15
static const int64_t jsc_int_max = 999999999999999LL; /* 15 digits */

static void gen_integer(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        const json_t *v = json_object_get(s, keys[k]);
        if (!v)
            continue;
        if (!json_is_number(v)) {
            jsc_fail(c, "'%s' at %s must be a number", keys[k], path);
            return;
        }
        double d = json_number_value(v);
        if (fabs(d) > (double)jsc_int_max) {
            jsc_fail(c, "'%s' at %s: bounds beyond 15 digits are not supported", keys[k], path);
            return;
        }
        int64_t x = k < 2 ? (int64_t)ceil(d) : (int64_t)floor(d);
        if (k == 1 && (double)x == d)
            x++;
        if (k == 3 && (double)x == d)
            x--;
        if (k < 2) {
            if (!has_lo || x > lo)
                lo = x;
            has_lo = true;
        } else {
            if (!has_hi || x < hi)
                hi = x;
            has_hi = true;
        }
    }
    if (!has_lo && !has_hi) {
        gbuf_str(e, "json-int");
        return;
    }
    if (!has_lo)
        lo = -jsc_int_max;
    if (!has_hi)
        hi = jsc_int_max;
    if (lo > hi) {
        jsc_fail(c, "at %s: no integer lies between the minimum and the maximum", path);
        return;
    }
    gbuf_str(e, "(");
    bool any = false;
    if (lo < 0) {
        int64_t nlo = hi < 0 ? -hi : 1, nhi = -lo; /* magnitudes of the negative part */
        gbuf_str(e, "\"-\" ");
        range_nonneg(e, nlo, nhi);
        any = true;
    }
    if (hi >= 0) {
        if (any)
            gbuf_str(e, " | ");
        range_nonneg(e, lo > 0 ? lo : 0, hi);
    }
    gbuf_str(e, ")");
}

/* ------------------------------------------------------------------ strings */

static const char *fmt_date = "[0-9]{4} \"-\" (\"0\" [13578] \"-\" d31 | \"1\" [02] \"-\" d31 | \"0\" [469] \"-\" d30 | "
                              "\"11-\" d30 | \"02-\" d28)";
static const char *fmt_time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,3})? "
                              "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";

static void need_dates(struct jsc *c)
{
    if (c->dates_done)
        return;
    c->dates_done = true;
    gbuf_str(&c->out, "d31 ::= \"0\" [1-9] | [12] [0-9] | \"3\" [01]\n"
                      "d30 ::= \"0\" [1-9] | [12] [0-9] | \"30\"\n"
                      "d28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n");
}

static void gen_string(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    const json_t *fmt = json_object_get(s, "format");
    const json_t *pat = json_object_get(s, "pattern");
    const json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) {
            jsc_fail(c, "'format' at %s must be a string", path);
            return;
        }
        if (pat || mn || mx) {
            jsc_fail(c, "at %s: 'format' together with pattern/minLength/maxLength is not supported", path);
            return;
        }
        if (strcmp(f, "date") == 0 || strcmp(f, "date-time") == 0)
            need_dates(c);
        if (strcmp(f, "date") == 0)
            gbuf_fmt(e, "\"\\\"\" %s \"\\\"\"", fmt_date);
        else if (strcmp(f, "time") == 0)
            gbuf_fmt(e, "\"\\\"\" %s \"\\\"\"", fmt_time);
        else if (strcmp(f, "date-time") == 0)
            gbuf_fmt(e, "\"\\\"\" %s \"T\" %s \"\\\"\"", fmt_date, fmt_time);
        else if (strcmp(f, "uuid") == 0)
            gbuf_str(e, "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} "
                        "\"\\\"\"");
        else if (strcmp(f, "email") == 0)
            /* A subset of what ajv-formats accepts, short bounds to keep the grammar small. */
            gbuf_str(e, "\"\\\"\" [a-z0-9_+-]{1,12} (\".\" [a-z0-9_+-]{1,8})? \"@\" ([a-z0-9] ([a-z0-9-]{0,6} "
                        "[a-z0-9])? \".\"){1,2} [a-z]{2,6} \"\\\"\"");
        else
            jsc_fail(c, "unsupported string format '%s' at %s (supported: date, time, date-time, uuid, email)", f,
                     path);
        return;
    }
    if (pat) {
        const char *p = json_string_value(pat);
        if (!p) {
            jsc_fail(c, "'pattern' at %s must be a string", path);
            return;
        }
        if (mn || mx) {
            jsc_fail(c, "at %s: 'pattern' together with minLength/maxLength is not supported", path);
            return;
        }
        struct gbuf re = {0};
        char rerr[HR_ERRLEN];
        enum hr_status st = regex_to_gbnf(p, strlen(p), true, &re, rerr, sizeof rerr);
        if (st != HR_OK)
            jsc_fail(c, "'pattern' at %s: %s", path, rerr);
        else
            gbuf_fmt(e, "\"\\\"\" (%s) \"\\\"\"", re.s ? re.s : "\"\"");
        gbuf_free(&re);
        return;
    }
    long lo = 0, hi = -1;
    if (mn) {
        if (!json_is_integer(mn) || json_integer_value(mn) < 0) {
            jsc_fail(c, "'minLength' at %s must be a non-negative integer", path);
            return;
        }
        lo = (long)json_integer_value(mn);
    }
    if (mx) {
        if (!json_is_integer(mx) || json_integer_value(mx) < 0) {
            jsc_fail(c, "'maxLength' at %s must be a non-negative integer", path);
            return;
        }
        hi = (long)json_integer_value(mx);
    }
    if (lo > JSON_SCHEMA_MAX_LENGTH || hi > JSON_SCHEMA_MAX_LENGTH) {
        jsc_fail(c, "minLength/maxLength at %s: at most %d is supported", path, JSON_SCHEMA_MAX_LENGTH);
        return;
    }
    if (hi >= 0 && hi < lo) {
        jsc_fail(c, "at %s: maxLength is below minLength", path);
        return;
    }
    if (lo == 0 && hi < 0) {
        gbuf_str(e, "json-string");
        return;
    }
    /* Rules sN-j: j characters written so far; the closing quote lies inside the chain, so a
     * token that runs past maxLength fails inside it (decided by the precomputed masks). */
    for (int i = 0; i < c->n_strs; i++)
        if (c->strs[i].lo == lo && c->strs[i].hi == hi) {
            gbuf_fmt(e, "\"\\\"\" s%d-0", c->strs[i].id);
            return;
        }
    if (c->n_strs >= JSC_MAX_STRS) {
        jsc_fail(c, "more than %d distinct string length bounds", JSC_MAX_STRS);
        return;
    }
    int id = c->n_strs;
    c->strs[c->n_strs++] = (struct jsc_str){.lo = lo, .hi = hi, .id = id};
    long top = hi >= 0 ? hi : lo;
    for (long j = 0; j <= top; j++) {
        gbuf_fmt(&c->out, "s%d-%ld ::= ", id, j);
        bool alt = false;
        if (j >= lo) {
            gbuf_str(&c->out, "\"\\\"\"");
            alt = true;
        }
        if (hi < 0 && j == top)
            gbuf_fmt(&c->out, "%sjson-char s%d-%ld", alt ? " | " : "", id, j);
        else if (j < top)
            gbuf_fmt(&c->out, "%sjson-char s%d-%ld", alt ? " | " : "", id, j + 1);
        gbuf_str(&c->out, "\n");
    }
    gbuf_fmt(e, "\"\\\"\" s%d-0", id);
}

/* ------------------------------------------------------------------ objects, arrays */

static void path_push(char *out, size_t n, const char *path, const char *seg)
{
    snprintf(out, n, "%s/%s", path, seg);
}

/* The expression of schema v, named as a rule of its own when it is long (it is used twice). */
static void gen_short(struct jsc *c, const json_t *v, const char *path, struct gbuf *e)
{
    struct gbuf x = {0};
    gen(c, v, path, &x);
    if (x.len > 48) {
        int r = jsc_rule(c);
        gbuf_fmt(&c->out, "r%d ::= %s\n", r, x.s);
        gbuf_fmt(e, "r%d", r);
    } else if (x.s) {
        gbuf_str(e, x.s);
    }
    gbuf_free(&x);
}

static void gen_object(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        jsc_fail(c, "'properties' at %s must be an object", path);
        return;
    }
    if (req && !json_is_array(req)) {
        jsc_fail(c, "'required' at %s must be an array", path);
        return;
    }
    size_t np = props ? json_object_size(props) : 0;
    /* Every required name must be a listed property (else it could never be emitted). */
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!r) {
            jsc_fail(c, "'required' at %s must hold strings", path);
            return;
        }
        if (!props || !json_object_get(props, r)) {
            jsc_fail(c, "at %s: required property '%s' is not in 'properties' (not supported)", path, r);
            return;
        }
    }
    bool extra = addl && !json_is_false(addl);
    int base = c->n_rules;
    c->n_rules += 2 * ((int)np + 1);
    /* Rule F(i): at property i, nothing emitted yet; R(i): something emitted (a comma first). */
    const char *key;
    const json_t *val;
    int i = 0;
    struct gbuf kv = {0};
    json_object_foreach((json_t *)props, key, val) {
        bool required = false;
        for (size_t k = 0; req && k < json_array_size(req); k++)
            if (strcmp(json_string_value(json_array_get(req, k)), key) == 0)
                required = true;
        char sub[512];
        char pk[300];
        snprintf(pk, sizeof pk, "properties/%.256s", key);
        path_push(sub, sizeof sub, path, pk);
        kv.len = 0;
        if (kv.s)
            kv.s[0] = 0;
        json_t *ks = json_string(key);
        literal_value(c, ks, &kv);
        json_decref(ks);
        gbuf_str(&kv, " \":\" ");
        gen_short(c, val, sub, &kv);
        if (c->st != HR_OK)
            break;
        gbuf_fmt(&c->out, "r%d ::= %s r%d%s", base + 2 * i, kv.s, base + 2 * (i + 1) + 1,
                 required ? "" : " | ");
        if (!required)
            gbuf_fmt(&c->out, "r%d", base + 2 * (i + 1));
        gbuf_str(&c->out, "\n");
        gbuf_fmt(&c->out, "r%d ::= \",\" %s r%d%s", base + 2 * i + 1, kv.s, base + 2 * (i + 1) + 1,
                 required ? "" : " | ");
        if (!required)
            gbuf_fmt(&c->out, "r%d", base + 2 * (i + 1) + 1);
        gbuf_str(&c->out, "\n");
        i++;
    }
    gbuf_free(&kv);
    if (c->st != HR_OK)
        return;
    int last = base + 2 * (int)np;
    if (extra) {
        struct gbuf v = {0};
        char sub[512];
        path_push(sub, sizeof sub, path, "additionalProperties");
        if (json_is_true(addl))
            gbuf_str(&v, "json-value");
        else
            gen_short(c, addl, sub, &v);
        gbuf_fmt(&c->out, "r%d ::= (json-string \":\" %s (\",\" json-string \":\" %s)*)?\n", last, v.s, v.s);
        gbuf_fmt(&c->out, "r%d ::= (\",\" json-string \":\" %s)*\n", last + 1, v.s);
        gbuf_free(&v);
    } else {
        gbuf_fmt(&c->out, "r%d ::= \"\"\nr%d ::= \"\"\n", last, last + 1);
    }
    gbuf_fmt(e, "\"{\" r%d \"}\"", base);
}

static void gen_array(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    long lo = 0, maxn = -1;
    if (mn) {
        if (!json_is_integer(mn) || json_integer_value(mn) < 0) {
            jsc_fail(c, "'minItems' at %s must be a non-negative integer", path);
            return;
        }
        lo = (long)json_integer_value(mn);
    }
    if (mx) {
        if (!json_is_integer(mx) || json_integer_value(mx) < 0) {
            jsc_fail(c, "'maxItems' at %s must be a non-negative integer", path);
            return;
        }
        maxn = (long)json_integer_value(mx);
    }
    if (lo > JSON_SCHEMA_MAX_LENGTH || maxn > JSON_SCHEMA_MAX_LENGTH) {
        jsc_fail(c, "minItems/maxItems at %s: at most %d is supported", path, JSON_SCHEMA_MAX_LENGTH);
        return;
    }
    if (prefix && !json_is_array(prefix)) {
        jsc_fail(c, "'prefixItems' at %s must be an array", path);
        return;
    }
    long np = prefix ? (long)json_array_size(prefix) : 0;
    bool more = !(items && json_is_false(items));
    long cap = more ? maxn : (maxn >= 0 && maxn < np ? maxn : np);
    if (cap >= 0 && lo > cap) {
        jsc_fail(c, "at %s: no array satisfies prefixItems, items and minItems/maxItems", path);
        return;
    }
    char sub[512];
    struct gbuf it = {0};
    if (more) {
        path_push(sub, sizeof sub, path, "items");
        if (!items || json_is_true(items))
            gbuf_str(&it, "json-value");
        else
            gen_short(c, items, sub, &it);
    }
    /* Rule A(k): the rest of an array that has k items already (then each begins with ","). */
    int base = c->n_rules;
    c->n_rules += (int)np + 1;
    for (long k = 0; k < np && c->st == HR_OK; k++) {
        struct gbuf x = {0};
        char idx[48];
        snprintf(idx, sizeof idx, "prefixItems/%ld", k);
        path_push(sub, sizeof sub, path, idx);
        gen(c, json_array_get(prefix, (size_t)k), sub, &x);
        bool go = cap < 0 || k < cap;
        gbuf_fmt(&c->out, "r%ld ::= ", base + k);
        if (go)
            gbuf_fmt(&c->out, "%s%s r%ld", k ? "\",\" " : "", x.s ? x.s : "\"\"", base + k + 1);
        if (k >= lo)
            gbuf_fmt(&c->out, "%s\"\"", go ? " | " : "");
        gbuf_str(&c->out, "\n");
        gbuf_free(&x);
    }
    long need = lo > np ? lo - np : 0;
    long room = cap >= 0 ? cap - np : -1; /* items after the prefix at most (-1: no limit) */
    gbuf_fmt(&c->out, "r%ld ::= ", base + np);
    if (!more || room == 0) {
        gbuf_str(&c->out, "\"\"");
    } else if (np > 0) {
        if (room < 0)
            gbuf_fmt(&c->out, "(\",\" %s){%ld,}", it.s, need);
        else
            gbuf_fmt(&c->out, "(\",\" %s){%ld,%ld}", it.s, need, room);
    } else {
        long n1 = need > 0 ? need - 1 : 0;
        if (room < 0)
            gbuf_fmt(&c->out, "%s (\",\" %s){%ld,}", it.s, it.s, n1);
        else
            gbuf_fmt(&c->out, "%s (\",\" %s){%ld,%ld}", it.s, it.s, n1, room - 1);
        if (need == 0)
            gbuf_str(&c->out, " | \"\"");
    }
    gbuf_str(&c->out, "\n");
    gbuf_free(&it);
    gbuf_fmt(e, "\"[\" r%d \"]\"", base);
}

/* ------------------------------------------------------------------ the walk */

static bool has_object_shape(const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    return json_object_get(s, "properties") || json_object_get(s, "required") ||
           json_object_get(s, "additionalProperties") || (json_is_string(t) && strcmp(json_string_value(t), "object") == 0);
}

/* Whether a schema's 'type' (absent, a name or a list of names) admits instances of type t
 * ("number" admits integers). */
static bool type_admits(const json_t *type, const char *t)
{
    if (!type)
        return true;
    if (json_is_string(type)) {
        const char *n = json_string_value(type);
        return strcmp(n, t) == 0 || (strcmp(n, "number") == 0 && strcmp(t, "integer") == 0);
    }
    size_t i;
    const json_t *x;
    json_array_foreach(type, i, x) if (json_is_string(x) && type_admits(x, t)) return true;
    return false;
}

/* Follows a chain of plain {"$ref": ...} schemas (annotations beside them allowed) to the
 * schema it names; NULL with the error set when it names nothing or goes round. */
static const json_t *deref(struct jsc *c, const json_t *part, const char *path)
{
    for (int hops = 0; json_is_object(part) && json_object_get(part, "$ref"); hops++) {
        const char *ref = json_string_value(json_object_get(part, "$ref"));
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)part, k, v) if (strcmp(k, "$ref") != 0 && !is_annotation(k)) {
            jsc_fail(c, "keyword '%s' beside '$ref' at %s is not supported", k, path);
            return NULL;
        }
        const json_t *t = ref && hops < 16 ? resolve(c, ref) : NULL;
        if (!t) {
            jsc_fail(c, "'$ref' at %s names nothing (or a chain of 16 references)", path);
            return NULL;
        }
        part = t;
    }
    return part;
}

/* allOf of object schemas: one object with the properties of all, required of all. Refused
 * (never merged loosely) where the merge would not be the intersection: a part that is not an
 * object schema, a property two parts define differently, a part that forbids additional
 * properties while another adds some, nested allOf. */
static void gen_all_of(struct jsc *c, const json_t *s, const json_t *all, const char *path, struct gbuf *e)
{
    json_t *merged = json_object();
    json_t *props = json_object(), *req = json_array();
    json_object_set_new(merged, "type", json_string("object"));
    size_t n = json_array_size(all);
    const json_t **parts = calloc(n + 1, sizeof *parts);
    if (!parts || !merged || !props || !req)
        jsc_fail(c, "out of memory");
    for (size_t i = 0; i <= n && c->st == HR_OK; i++) {
        const json_t *part = i < n ? deref(c, json_array_get(all, i), path) : s;
        if (c->st != HR_OK)
            break;
        parts[i] = part;
        if (!json_is_object(part) || (i < n && !has_object_shape(part)) ||
            !type_admits(json_object_get(part, "type"), "object")) {
            jsc_fail(c, "'allOf' at %s: only allOf of object schemas is supported", path);
            break;
        }
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)part, k, v) {
            if (strcmp(k, "properties") == 0 && json_is_object(v)) {
                const char *pk;
                const json_t *pv;
                json_object_foreach((json_t *)v, pk, pv) {
                    const json_t *old = json_object_get(props, pk);
                    if (old && !json_equal((json_t *)old, (json_t *)pv)) {
                        jsc_fail(c, "'allOf' at %s: property '%.128s' is defined differently by two parts (not "
                                    "supported)", path, pk);
                        break;
                    }
                    json_object_set(props, pk, (json_t *)pv);
                }
            } else if (strcmp(k, "required") == 0 && json_is_array(v)) {
                for (size_t q = 0; q < json_array_size(v); q++)
                    json_array_append(req, json_array_get(v, q));
            } else if (strcmp(k, "additionalProperties") == 0 || strcmp(k, "type") == 0 || is_annotation(k) ||
                       (i == n && strcmp(k, "allOf") == 0)) {
                continue;
            } else if (strcmp(k, "allOf") == 0) {
                jsc_fail(c, "'allOf' at %s: a nested 'allOf' in part %zu is not supported", path, i);
                break;
            } else {
                jsc_fail(c, "'allOf' at %s: keyword '%s' in a part is not supported", path, k);
                break;
            }
            if (c->st != HR_OK)
                break;
        }
    }
    /* additionalProperties: a part's false (or schema) must hold for every merged property. */
    const json_t *addl = NULL;
    for (size_t i = 0; i <= n && c->st == HR_OK; i++) {
        const json_t *a = json_object_get(parts[i], "additionalProperties");
        if (!a || json_is_true(a))
            continue;
        const json_t *own = json_object_get(parts[i], "properties");
        const char *pk;
        const json_t *pv;
        json_object_foreach(props, pk, pv) if (!json_object_get(own, pk)) {
            jsc_fail(c, "'allOf' at %s: a part has additionalProperties %s and another adds property '%.128s' (not "
                        "supported)", path, json_is_false(a) ? "false" : "as a schema", pk);
            break;
        }
        if (addl && !json_equal((json_t *)addl, (json_t *)a))
            jsc_fail(c, "'allOf' at %s: parts with different additionalProperties (not supported)", path);
        addl = a;
    }
    if (!addl)
        for (size_t i = 0; i <= n && c->st == HR_OK && !addl; i++)
            if (json_is_true(json_object_get(parts[i], "additionalProperties")))
                addl = json_object_get(parts[i], "additionalProperties");
    json_object_set_new(merged, "properties", props);
    json_object_set_new(merged, "required", req);
    if (addl)
        json_object_set(merged, "additionalProperties", (json_t *)addl);
    if (c->st == HR_OK)
        gen_object(c, merged, path, e);
    json_decref(merged);
    free(parts);
}

/* ------------------------------------------------------------------ enum, const */

static bool value_has_type(const json_t *v, const char *t)
{
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(t, "null"))
        return json_is_null(v);
    if (!strcmp(t, "object"))
        return json_is_object(v);
    if (!strcmp(t, "array"))
        return json_is_array(v);
    return false;
}

/* enum and/or const, with an optional 'type': the listed values that satisfy both. Any other
 * keyword beside them is refused by name (it would have to be checked against each value). */
static void gen_values(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    const json_t *cn = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *type = json_object_get(s, "type");
    const char *what = en ? "enum" : "const";
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) if (strcmp(k, "const") && strcmp(k, "enum") && strcmp(k, "type") &&
                                               !is_annotation(k)) {
        jsc_fail(c, "'%s' together with '%s' at %s is not supported", what, k, path);
        return;
    }
    if (en && (!json_is_array(en) || json_array_size(en) == 0)) {
        jsc_fail(c, "'enum' at %s must be a non-empty array", path);
        return;
    }
    if (type && !json_is_string(type) && !json_is_array(type)) {
        jsc_fail(c, "'type' at %s must be a string or an array", path);
        return;
    }
    size_t nt = json_is_array(type) ? json_array_size(type) : 1;
    for (size_t t = 0; type && t < nt; t++) {
        const json_t *tn = json_is_array(type) ? json_array_get(type, t) : type;
        static const char *known[] = {"string", "integer", "number", "boolean", "null", "object", "array", NULL};
        bool ok = false;
        for (int q = 0; json_is_string(tn) && known[q]; q++)
            ok = ok || !strcmp(json_string_value(tn), known[q]);
        if (!ok) {
            jsc_fail(c, "unknown type %s%s%s at %s", json_is_string(tn) ? "'" : "",
                     json_is_string(tn) ? json_string_value(tn) : "(not a string)", json_is_string(tn) ? "'" : "",
                     path);
            return;
        }
    }
    size_t n = en ? json_array_size(en) : 1;
    int kept = 0;
    struct gbuf alts = {0};
    for (size_t i = 0; i < n; i++) {
        const json_t *x = en ? json_array_get(en, i) : cn;
        if (cn && !json_equal((json_t *)x, (json_t *)cn))
            continue;
        bool typed = !type;
        for (size_t t = 0; !typed && t < nt; t++)
            typed = value_has_type(x, json_string_value(json_is_array(type) ? json_array_get(type, t) : type));
        if (!typed)
            continue;
        if (kept++)
            gbuf_str(&alts, " | ");
        literal_value(c, x, &alts);
    }
    if (alts.oom || (kept && !alts.s))
        jsc_fail(c, "out of memory");
    else if (kept > 1)
        gbuf_fmt(e, "(%s)", alts.s);
    else if (kept == 1)
        gbuf_str(e, alts.s);
    gbuf_free(&alts);
    if (!kept)
        jsc_fail(c, "at %s: no value of '%s' satisfies %s", path, what,
                 en && cn ? "both 'const' and 'enum' (and 'type')" : "'type'");
}

/* ------------------------------------------------------------------ anyOf with siblings */

/* The intersection of two 'type's (names or lists; "integer" inside "number"); NULL when
 * empty. A new reference. */
static json_t *type_meet(const json_t *a, const json_t *b)
{
    static const char *plain[] = {"string", "boolean", "null", "object", "array", NULL};
    json_t *out = json_array();
    for (int q = 0; plain[q]; q++)
        if (type_admits(a, plain[q]) && type_admits(b, plain[q]))
            json_array_append_new(out, json_string(plain[q]));
    /* type_admits(t, "number") holds only where t names "number" (non-integers too) */
    if (type_admits(a, "number") && type_admits(b, "number"))
        json_array_append_new(out, json_string("number"));
    else if (type_admits(a, "integer") && type_admits(b, "integer"))
        json_array_append_new(out, json_string("integer"));
    if (json_array_size(out) == 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

#define JSC_MAX_MERGES 1024

/* Branch b of an anyOf/oneOf (key akey) of s, with the keywords beside the anyOf merged in:
 * a branch holds exactly where b and those keywords both hold. Keywords both define are
 * merged where that is exact ('properties' with disjoint or equal entries, 'required' as a
 * union, 'type' as the intersection) and refused by name otherwise. NULL with no error: the
 * branch admits nothing (disjoint types), leave it out. A new reference. */
static json_t *merge_branch(struct jsc *c, const json_t *s, const char *akey, const json_t *b, size_t i,
                            const char *path)
{
    if (++c->merges > JSC_MAX_MERGES) {
        jsc_fail(c, "at %s: more than %d anyOf branches merged with the keywords beside them", path, JSC_MAX_MERGES);
        return NULL;
    }
    b = deref(c, b, path);
    if (c->st != HR_OK || json_is_false(b))
        return NULL;
    if (!json_is_true(b) && !json_is_object(b)) {
        jsc_fail(c, "the schema at %s/%s/%zu must be an object or a boolean", path, akey, i);
        return NULL;
    }
    json_t *m = json_is_object(b) ? json_copy((json_t *)b) : json_object();
    const char *k;
    const json_t *sv;
    json_object_foreach((json_t *)s, k, sv) {
        if (!strcmp(k, akey) || is_annotation(k))
            continue;
        json_t *bv = json_object_get(m, k);
        if (!bv) {
            json_object_set(m, k, (json_t *)sv);
        } else if (json_equal(bv, (json_t *)sv)) {
            continue;
        } else if (!strcmp(k, "type")) {
            json_t *t = type_meet(bv, sv);
            if (!t) {
                json_decref(m);
                return NULL;
            }
            json_object_set_new(m, k, t);
        } else if (!strcmp(k, "properties") && json_is_object(bv) && json_is_object(sv)) {
            json_t *u = json_copy(bv);
            const char *pk;
            const json_t *pv;
            json_object_foreach((json_t *)sv, pk, pv) {
                const json_t *old = json_object_get(u, pk);
                if (old && !json_equal((json_t *)old, (json_t *)pv)) {
                    jsc_fail(c, "at %s: property '%.128s' is defined both beside '%s' and in its branch %zu, "
                                "differently (not supported)", path, pk, akey, i);
                    break;
                }
                json_object_set(u, pk, (json_t *)pv);
            }
            json_object_set_new(m, k, u);
        } else if (!strcmp(k, "required") && json_is_array(bv) && json_is_array(sv)) {
            json_t *u = json_copy(bv);
            json_array_extend(u, (json_t *)sv);
            json_object_set_new(m, k, u);
        } else {
            jsc_fail(c, "at %s: '%s' both beside '%s' and in its branch %zu, with different values, is not "
                        "supported", path, k, akey, i);
        }
        if (c->st != HR_OK)
            break;
    }
    /* additionalProperties (false or a schema) on one side speaks of that side's properties
     * only: a property the other side adds would have to satisfy it, so refuse that. */
    const json_t *merged_props = json_object_get(m, "properties");
    for (int side = 0; side < 2 && c->st == HR_OK && json_is_object(b); side++) {
        const json_t *own = side ? s : b;
        const json_t *a = json_object_get(own, "additionalProperties");
        if (!a || json_is_true(a))
            continue;
        const char *pk;
        const json_t *pv;
        json_object_foreach((json_t *)merged_props, pk, pv) if (!json_object_get(json_object_get(own, "properties"), pk)) {
            if (side)
                jsc_fail(c, "at %s: property '%.128s' of branch %zu of '%s' is not allowed by the "
                            "additionalProperties beside it (not supported)", path, pk, i, akey);
            else
                jsc_fail(c, "at %s: property '%.128s' beside '%s' is not allowed by the additionalProperties of its "
                            "branch %zu (not supported)", path, pk, akey, i);
            break;
        }
    }
    if (c->st != HR_OK) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* anyOf/oneOf: the alternatives of the branches (oneOf's exclusivity is not enforced); with
 * other keywords beside it, each branch intersected with them (merge_branch). */
static void gen_any_of(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    const char *akey = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
    const json_t *any = json_object_get(s, akey);
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) {
        jsc_fail(c, "'anyOf' together with 'oneOf' at %s is not supported", path);
        return;
    }
    if (!json_is_array(any) || json_array_size(any) == 0) {
        jsc_fail(c, "'%s' at %s must be a non-empty array", akey, path);
        return;
    }
    bool siblings = false;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) siblings = siblings || (strcmp(k, akey) && !is_annotation(k));
    int kept = 0;
    gbuf_str(e, "(");
    for (size_t i = 0; i < json_array_size(any) && c->st == HR_OK; i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, akey, i);
        json_t *m = siblings ? merge_branch(c, s, akey, json_array_get(any, i), i, path) : NULL;
        if (siblings && !m)
            continue;
        if (kept++)
            gbuf_str(e, " | ");
        gen(c, m ? m : json_array_get(any, i), sub, e);
        json_decref(m);
    }
    gbuf_str(e, ")");
    if (c->st == HR_OK && !kept)
        jsc_fail(c, "at %s: no branch of '%s' is compatible with the keywords beside it", path, akey);
}

static void gen_type(struct jsc *c, const json_t *s, const char *type, const char *path, struct gbuf *e)
{
    if (strcmp(type, "object") == 0)
        gen_object(c, s, path, e);
    else if (strcmp(type, "array") == 0)
        gen_array(c, s, path, e);
    else if (strcmp(type, "string") == 0)
        gen_string(c, s, path, e);
    else if (strcmp(type, "integer") == 0)
        gen_integer(c, s, path, e);
    else if (strcmp(type, "number") == 0) {
        static const char *bounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        for (int k = 0; k < 4; k++)
            if (json_object_get(s, bounds[k])) {
                jsc_fail(c, "unsupported keyword '%s' at %s on type number (supported on integers)", bounds[k], path);
                return;
            }
        gbuf_str(e, "json-number");
    } else if (strcmp(type, "boolean") == 0)
        gbuf_str(e, "(\"true\" | \"false\")");
    else if (strcmp(type, "null") == 0)
        gbuf_str(e, "\"null\"");
    else
        jsc_fail(c, "unknown type '%s' at %s", type, path);
}

static void gen(struct jsc *c, const json_t *s, const char *path, struct gbuf *e)
{
    if (c->st != HR_OK)
        return;
    if (++c->depth > JSC_MAX_DEPTH) {
        jsc_fail(c, "schema nested deeper than %d at %s", JSC_MAX_DEPTH, path);
        return;
    }
    if (json_is_true(s)) {
        gbuf_str(e, "json-value");
        goto out;
    }
    if (json_is_false(s)) {
        jsc_fail(c, "the schema at %s is false: nothing is valid", path);
        goto out;
    }
    if (!json_is_object(s)) {
        jsc_fail(c, "the schema at %s must be an object or a boolean", path);
        goto out;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_supported(k)) {
            jsc_fail(c, "unsupported keyword '%s' at %s", k, path);
            goto out;
        }
    }
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any)
        any = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    const json_t *en = json_object_get(s, "enum");
    const json_t *cn = json_object_get(s, "const");
    const json_t *type = json_object_get(s, "type");
    if (ref) {
        if (!json_is_string(ref)) {
            jsc_fail(c, "'$ref' at %s must be a string", path);
            goto out;
        }
        json_object_foreach((json_t *)s, k, v) if (strcmp(k, "$ref") != 0 && !is_annotation(k)) {
            jsc_fail(c, "keyword '%s' beside '$ref' at %s is not supported", k, path);
            goto out;
        }
        gen_ref(c, json_string_value(ref), path, e);
    } else if (cn || en) {
        gen_values(c, s, path, e);
    } else if (any) {
        gen_any_of(c, s, path, e);
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) == 0) {
            jsc_fail(c, "'allOf' at %s must be a non-empty array", path);
            goto out;
        }
        if (json_array_size(all) == 1 && json_object_size(s) == 1)
            gen(c, json_array_get(all, 0), path, e);
        else
            gen_all_of(c, s, all, path, e);
    } else if (json_is_array(type)) {
        gbuf_str(e, "(");
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (!t) {
                jsc_fail(c, "'type' at %s must hold strings", path);
                goto out;
            }
            if (i)
                gbuf_str(e, " | ");
            gen_type(c, s, t, path, e);
        }
        gbuf_str(e, ")");
    } else if (type) {
        if (!json_is_string(type)) {
            jsc_fail(c, "'type' at %s must be a string or an array", path);
            goto out;
        }
        gen_type(c, s, json_string_value(type), path, e);
    } else if (has_object_shape(s)) {
        gen_object(c, s, path, e);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        gen_array(c, s, path, e);
    } else {
        /* No type: keywords of one type restrict the output to that type (a subset of what
         * the schema allows, so every output validates); keywords of two types are refused. */
        static const char *str_k[] = {"minLength", "maxLength", "pattern", "format", NULL};
        static const char *arr_k[] = {"minItems", "maxItems", NULL};
        static const char *int_k[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        const char **kinds[] = {str_k, arr_k, int_k};
        const char *first[3] = {NULL, NULL, NULL};
        int n_kinds = 0;
        for (int q = 0; q < 3; q++) {
            for (int i = 0; kinds[q][i] && !first[q]; i++)
                if (json_object_get(s, kinds[q][i]))
                    first[q] = kinds[q][i];
            n_kinds += first[q] != NULL;
        }
        if (n_kinds > 1)
            jsc_fail(c, "at %s: keywords of different types ('%s' and '%s') without 'type' are not supported", path,
                     first[0] ? first[0] : first[1], first[2] ? first[2] : first[1]);
        else if (first[0])
            gen_string(c, s, path, e);
        else if (first[1])
            gen_array(c, s, path, e);
        else if (first[2])
            gen_integer(c, s, path, e);
        else
            gbuf_str(e, "json-value");
    }
out:
    c->depth--;
}

enum hr_status json_schema_to_gbnf(const json_t *schema, char **gbnf, char *err, size_t errlen)
{
    return json_schema_to_gbnf_ex(schema, true, gbnf, err, errlen);
}

const char *json_schema_prims_gbnf(void)
{
    return JSON_PRIMS;
}

enum hr_status json_schema_to_gbnf_ex(const json_t *schema, bool with_prims, char **gbnf, char *err, size_t errlen)
{
    *gbnf = NULL;
    struct jsc *c = calloc(1, sizeof *c);
    if (!c)
        return hr_err(err, errlen, HR_ERR_NOMEM, "json schema: out of memory");
    c->root = schema;
    c->err = err;
    c->errlen = errlen;
    struct gbuf root = {0};
    gen(c, schema, "#", &root);
    if (c->st == HR_OK) {
        gbuf_fmt(&c->out, "root ::= %s\n", root.s ? root.s : "\"\"");
        if (with_prims)
            gbuf_str(&c->out, JSON_PRIMS);
        if (c->out.oom || root.oom)
            c->st = hr_err(err, errlen, HR_ERR_NOMEM, "json schema: out of memory");
    }
    enum hr_status st = c->st;
    if (st == HR_OK) {
        *gbnf = c->out.s;
        c->out.s = NULL;
    }
    gbuf_free(&c->out);
    gbuf_free(&root);
    for (int i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c);
    return st;
}

enum hr_status json_schema_text_to_gbnf(const char *text, size_t len, char **gbnf, char *err, size_t errlen)
{
    *gbnf = NULL;
    if (len > JSON_SCHEMA_MAX_BYTES)
        return hr_err(err, errlen, HR_ERR_INVALID, "json schema: %zu bytes (at most %d)", len, JSON_SCHEMA_MAX_BYTES);
    json_error_t je;
    json_t *s = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!s)
        return hr_err(err, errlen, HR_ERR_INVALID, "json schema is not valid JSON: %s at line %d, column %d", je.text,
                      je.line, je.column);
    enum hr_status st = json_schema_to_gbnf(s, gbnf, err, errlen);
    json_decref(s);
    return st;
}
