/* The grammar builder and its checks: definitions, productivity, left recursion. */
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

void grammar_free(struct grammar *g)
{
    if (!g)
        return;
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->classes);
    for (int i = 0; i < g->n_rules && g->rule_names; i++)
        free(g->rule_names[i]);
    free(g->rule_names);
    memset(g, 0, sizeof *g);
}

void grammar_builder_init(struct grammar_builder *b)
{
    memset(b, 0, sizeof *b);
}

void grammar_builder_free(struct grammar_builder *b)
{
    for (int i = 0; i < b->n_rules; i++) {
        struct grammar_brule *r = &b->rules[i];
        for (int a = 0; a < r->n_alts; a++)
            free(r->alts[a].e);
        free(r->alts);
        free(r->name);
    }
    free(b->rules);
    free(b->classes);
    memset(b, 0, sizeof *b);
}

static int builder_new_rule(struct grammar_builder *b, const char *name, size_t len)
{
    if (b->n_rules >= GRAMMAR_MAX_RULES) {
        b->oom = true;
        return -1;
    }
    size_t cap = (size_t)b->cap;
    if (!vec_reserve((void **)&b->rules, &cap, (size_t)b->n_rules + 1, sizeof *b->rules, 16)) {
        b->oom = true;
        return -1;
    }
    b->cap = (int)cap;
    struct grammar_brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(len + 1))) {
        b->oom = true;
        return -1;
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return b->n_rules++;
}

int grammar_builder_rule(struct grammar_builder *b, const char *name, size_t len)
{
    for (int i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && memcmp(b->rules[i].name, name, len) == 0)
            return i;
    return builder_new_rule(b, name, len);
}

int grammar_builder_anon(struct grammar_builder *b, const char *base)
{
    char name[96];
    int n = snprintf(name, sizeof name, "%.64s-%d", base, b->n_rules);
    int r = builder_new_rule(b, name, (size_t)n);
    if (r >= 0)
        b->rules[r].defined = true;
    return r;
}

int grammar_builder_alt(struct grammar_builder *b, int r)
{
    if (r < 0 || b->oom)
        return -1;
    struct grammar_brule *rr = &b->rules[r];
    rr->defined = true;
    size_t cap = (size_t)rr->cap;
    if (!vec_reserve((void **)&rr->alts, &cap, (size_t)rr->n_alts + 1, sizeof *rr->alts, 2)) {
        b->oom = true;
        return -1;
    }
    rr->cap = (int)cap;
    memset(&rr->alts[rr->n_alts], 0, sizeof rr->alts[0]);
    b->n_elems++; /* its END */
    return rr->n_alts++;
}

static void builder_push(struct grammar_builder *b, int r, int alt, uint8_t kind, int32_t arg)
{
    if (r < 0 || alt < 0 || b->oom)
        return;
    if (b->n_elems >= GRAMMAR_MAX_ELEMS) {
        b->oom = true;
        return;
    }
    struct grammar_balt *a = &b->rules[r].alts[alt];
    size_t cap = (size_t)a->cap;
    if (!vec_reserve((void **)&a->e, &cap, (size_t)a->n + 1, sizeof *a->e, 4)) {
        b->oom = true;
        return;
    }
    a->cap = (int)cap;
    a->e[a->n++] = (struct grammar_elem){.kind = kind, .arg = arg};
    b->n_elems++;
}

static int builder_class_id(struct grammar_builder *b, const struct grammar_class *c)
{
    for (int i = b->n_classes - 1; i >= 0; i--)
        if (memcmp(&b->classes[i], c, sizeof *c) == 0)
            return i;
    size_t cap = (size_t)b->cap_classes;
    if (!vec_reserve((void **)&b->classes, &cap, (size_t)b->n_classes + 1, sizeof *b->classes, 32)) {
        b->oom = true;
        return -1;
    }
    b->cap_classes = (int)cap;
    b->classes[b->n_classes] = *c;
    return b->n_classes++;
}

void grammar_builder_push_class(struct grammar_builder *b, int r, int alt, const struct grammar_class *c)
{
    int id = builder_class_id(b, c);
    if (id >= 0)
        builder_push(b, r, alt, GRAMMAR_ELEM_BYTES, id);
}

void grammar_builder_push_byte(struct grammar_builder *b, int r, int alt, uint8_t byte)
{
    struct grammar_class c = {{0}};
    c.bits[byte >> 6] |= 1ull << (byte & 63);
    grammar_builder_push_class(b, r, alt, &c);
}

void grammar_builder_push_rule(struct grammar_builder *b, int r, int alt, int ref)
{
    if (ref < 0) {
        b->oom = true;
        return;
    }
    builder_push(b, r, alt, GRAMMAR_ELEM_RULE, ref);
}

void grammar_builder_push_bytes(struct grammar_builder *b, int r, int alt, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        grammar_builder_push_byte(b, r, alt, (uint8_t)s[i]);
}

/* ------------------------------------------------------------------ UTF-8 ranges */

static int utf8_encode(uint32_t cp, uint8_t *o)
{
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static void class_range(struct grammar_class *c, unsigned lo, unsigned hi)
{
    for (unsigned x = lo; x <= hi; x++)
        c->bits[x >> 6] |= 1ull << (x & 63);
}

/* [lo, hi] within one encoded length: split until every byte position is one range. */
static void utf8_split(struct grammar_builder *b, int rule, uint32_t lo, uint32_t hi)
{
    int n = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, rule, lo, lo | m);
                utf8_split(b, rule, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, rule, lo, (hi & ~m) - 1);
                utf8_split(b, rule, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t l[4], h[4];
    utf8_encode(lo, l);
    utf8_encode(hi, h);
    int alt = grammar_builder_alt(b, rule);
    for (int i = 0; i < n; i++) {
        struct grammar_class c = {{0}};
        class_range(&c, l[i], h[i]);
        grammar_builder_push_class(b, rule, alt, &c);
    }
}

void grammar_builder_push_ranges(struct grammar_builder *b, int r, int alt, const uint32_t *lo, const uint32_t *hi,
                                 int n)
{
    struct grammar_class ascii = {{0}};
    bool any_ascii = false, multi = false;
    for (int i = 0; i < n; i++) {
        if (lo[i] < 0x80) {
            class_range(&ascii, lo[i], hi[i] < 0x80 ? hi[i] : 0x7F);
            any_ascii = true;
        }
        if (hi[i] >= 0x80)
            multi = true;
    }
    if (!multi) {
        grammar_builder_push_class(b, r, alt, &ascii); /* may be empty: an unproductive element */
        return;
    }
    int sub = grammar_builder_anon(b, r >= 0 && r < b->n_rules ? b->rules[r].name : "class");
    if (sub < 0)
        return;
    if (any_ascii) {
        int a = grammar_builder_alt(b, sub);
        grammar_builder_push_class(b, sub, a, &ascii);
    }
    static const uint32_t bounds[][2] = {{0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            uint32_t a = lo[i] > bounds[k][0] ? lo[i] : bounds[k][0];
            uint32_t z = hi[i] < bounds[k][1] ? hi[i] : bounds[k][1];
            if (a <= z)
                utf8_split(b, sub, a, z);
        }
    grammar_builder_push_rule(b, r, alt, sub);
}

/* ------------------------------------------------------------------ finish */

static bool class_empty(const struct grammar_class *c)
{
    return !(c->bits[0] | c->bits[1] | c->bits[2] | c->bits[3]);
}

static bool elem_productive(const struct grammar_builder *b, const struct grammar_elem *e, const bool *prod)
{
    return e->kind == GRAMMAR_ELEM_BYTES ? !class_empty(&b->classes[e->arg]) : prod[e->arg];
}

/* Depth-first search for a cycle of leftmost references; colour 1 = on the path. */
static int left_cycle(const struct grammar_builder *b, const bool *nullable, int r, uint8_t *colour)
{
    if (colour[r] == 1)
        return r;
    if (colour[r] == 2)
        return -1;
    colour[r] = 1;
    const struct grammar_brule *rr = &b->rules[r];
    for (int a = 0; a < rr->n_alts; a++)
        for (int i = 0; i < rr->alts[a].n; i++) {
            const struct grammar_elem *e = &rr->alts[a].e[i];
            if (e->kind != GRAMMAR_ELEM_RULE)
                break;
            int c = left_cycle(b, nullable, e->arg, colour);
            if (c >= 0)
                return c;
            if (!nullable[e->arg])
                break;
        }
    colour[r] = 2;
    return -1;
}

/* Inlining: a reference to a small rule whose alternatives hold only byte classes (or a
 * one-alternative rule that does not refer to itself) is replaced by its alternatives. Besides
 * shallower stacks, this keeps loops such as a string's characters inside one rule, where the
 * mask precomputation sees them whole (a token that stays inside a rule is decided there). */
#define INLINE_MAX_ALTS 64   /* alternatives of the rule inlined into, after inlining */
#define INLINE_MAX_ELEMS 16  /* elements of an alternative of the rule inlined */

static bool rule_inlinable(const struct grammar_builder *b, int x)
{
    const struct grammar_brule *xr = &b->rules[x];
    if (xr->n_alts == 0)
        return false;
    bool terminal = true, tail_only = true;
    for (int a = 0; a < xr->n_alts; a++) {
        if (xr->alts[a].n > INLINE_MAX_ELEMS)
            return false;
        for (int i = 0; i < xr->alts[a].n; i++)
            if (xr->alts[a].e[i].kind == GRAMMAR_ELEM_RULE) {
                terminal = false;
                tail_only = tail_only && i == xr->alts[a].n - 1;
                if (xr->alts[a].e[i].arg == x)
                    return false;
            }
    }
    /* One alternative with a reference only at its end: inlining keeps that reference a tail
     * call (a reference moved into the middle of a longer alternative would lose the single
     * return position the mask precomputation uses). */
    return terminal ? xr->n_alts <= 16 : xr->n_alts == 1 && tail_only;
}

/* One pass over every rule; returns whether something was inlined. */
static bool inline_pass(struct grammar_builder *b)
{
    bool changed = false;
    for (int r = 0; r < b->n_rules && !b->oom; r++) {
        struct grammar_brule *rr = &b->rules[r];
        for (int a = 0; a < rr->n_alts && !b->oom; a++) {
            for (int i = 0; i < rr->alts[a].n; i++) {
                struct grammar_elem e = rr->alts[a].e[i];
                if (e.kind != GRAMMAR_ELEM_RULE || e.arg == r || !rule_inlinable(b, e.arg))
                    continue;
                const struct grammar_brule *xr = &b->rules[e.arg];
                /* Several alternatives multiply: only into a short alternative (a loop body
                 * "x R", or "x" alone), so the stacks of a state do not multiply. */
                if (xr->n_alts > 1 && rr->alts[a].n > 2)
                    continue;
                if (rr->n_alts - 1 + xr->n_alts > INLINE_MAX_ALTS || b->n_elems > GRAMMAR_MAX_ELEMS / 2)
                    continue;
                /* Alternative a becomes prefix + x's alternative k + suffix, for each k. */
                struct grammar_balt old = rr->alts[a];
                int nx = xr->n_alts;
                size_t cap = (size_t)rr->cap;
                if (!vec_reserve((void **)&rr->alts, &cap, (size_t)rr->n_alts + (size_t)nx, sizeof *rr->alts, 2)) {
                    b->oom = true;
                    return false;
                }
                rr->cap = (int)cap;
                xr = &b->rules[e.arg];
                memmove(&rr->alts[a + nx], &rr->alts[a + 1], (size_t)(rr->n_alts - a - 1) * sizeof *rr->alts);
                for (int k = 0; k < nx; k++) {
                    const struct grammar_balt *xa = &xr->alts[k];
                    int n = old.n - 1 + xa->n;
                    struct grammar_balt na = {.e = malloc(((size_t)n + 1) * sizeof *na.e), .n = n, .cap = n + 1};
                    if (!na.e) {
                        b->oom = true;
                        na.n = 0;
                    } else {
                        if (i > 0)
                            memcpy(na.e, old.e, (size_t)i * sizeof *na.e);
                        if (xa->n > 0)
                            memcpy(na.e + i, xa->e, (size_t)xa->n * sizeof *na.e);
                        if (old.n - i - 1 > 0)
                            memcpy(na.e + i + xa->n, old.e + i + 1, (size_t)(old.n - i - 1) * sizeof *na.e);
                    }
                    rr->alts[a + k] = na;
                    b->n_elems += n + 1;
                }
                rr->n_alts += nx - 1;
                b->n_elems -= old.n + 1;
                free(old.e);
                changed = true;
                i = -1; /* rescan the new alternative a */
                if (b->oom)
                    return false;
            }
        }
    }
    return changed;
}

enum hr_status grammar_builder_finish(struct grammar_builder *b, const char *root, struct grammar *g, char *err,
                                      size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (b->oom || b->n_elems >= GRAMMAR_MAX_ELEMS)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar too large (at most %d elements and %d rules)",
                      GRAMMAR_MAX_ELEMS, GRAMMAR_MAX_RULES);
    int root_id = -1;
    for (int i = 0; i < b->n_rules; i++) {
        if (!b->rules[i].defined)
            return hr_err(err, errlen, HR_ERR_INVALID, "grammar: rule '%s' is used but never defined",
                          b->rules[i].name);
        if (strcmp(b->rules[i].name, root) == 0)
            root_id = i;
    }
    if (root_id < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: no rule named '%s' (the start rule)", root);

    int nr = b->n_rules;
    bool *prod = calloc((size_t)nr, sizeof *prod);
    bool *nullable = calloc((size_t)nr, sizeof *nullable);
    uint8_t *colour = calloc((size_t)nr, 1);
    if (!prod || !nullable || !colour) {
        free(prod);
        free(nullable);
        free(colour);
        return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
    }
    /* Productive and nullable rules: fixpoints. */
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < nr; r++) {
            const struct grammar_brule *rr = &b->rules[r];
            for (int a = 0; a < rr->n_alts && (!prod[r] || !nullable[r]); a++) {
                bool p = true, nl = true;
                for (int i = 0; i < rr->alts[a].n; i++) {
                    const struct grammar_elem *e = &rr->alts[a].e[i];
                    p = p && elem_productive(b, e, prod);
                    nl = nl && e->kind == GRAMMAR_ELEM_RULE && nullable[e->arg];
                }
                if (p && !prod[r])
                    prod[r] = changed = true;
                if (nl && !nullable[r])
                    nullable[r] = changed = true;
            }
        }
    }
    enum hr_status st = HR_OK;
    if (!prod[root_id]) {
        st = hr_err(err, errlen, HR_ERR_INVALID, "grammar accepts nothing: rule '%s' derives no string", root);
        goto out;
    }
    /* Unproductive alternatives can never finish: drop them. */
    for (int r = 0; r < nr; r++) {
        struct grammar_brule *rr = &b->rules[r];
        int k = 0;
        for (int a = 0; a < rr->n_alts; a++) {
            bool p = true;
            for (int i = 0; i < rr->alts[a].n && p; i++)
                p = elem_productive(b, &rr->alts[a].e[i], prod);
            if (p)
                rr->alts[k++] = rr->alts[a];
            else
                free(rr->alts[a].e);
        }
        rr->n_alts = k;
    }
    for (int r = 0; r < nr; r++) {
        int c = left_cycle(b, nullable, r, colour);
        if (c >= 0) {
            st = hr_err(err, errlen, HR_ERR_INVALID,
                        "grammar: left recursion through rule '%s' (rewrite it with repetition, e.g. x ::= y (\",\" y)*)",
                        b->rules[c].name);
            goto out;
        }
    }
    for (int pass = 0; pass < 8 && inline_pass(b); pass++)
        ;
    /* Rules the root cannot reach need no masks: drop their alternatives. */
    memset(colour, 0, (size_t)nr);
    {
        int *work = malloc((size_t)nr * sizeof *work);
        int nw = 0;
        if (!work) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
            goto out;
        }
        colour[root_id] = 1;
        work[nw++] = root_id;
        while (nw > 0) {
            const struct grammar_brule *rr = &b->rules[work[--nw]];
            for (int a = 0; a < rr->n_alts; a++)
                for (int i = 0; i < rr->alts[a].n; i++) {
                    const struct grammar_elem *e = &rr->alts[a].e[i];
                    if (e->kind == GRAMMAR_ELEM_RULE && !colour[e->arg]) {
                        colour[e->arg] = 1;
                        work[nw++] = e->arg;
                    }
                }
        }
        free(work);
        for (int r = 0; r < nr; r++)
            if (!colour[r]) {
                for (int a = 0; a < b->rules[r].n_alts; a++)
                    free(b->rules[r].alts[a].e);
                b->rules[r].n_alts = 0;
            }
    }
    if (b->oom) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    int n_alts = 0, n_elems = 3;
    for (int r = 0; r < nr; r++) {
        n_alts += b->rules[r].n_alts;
        for (int a = 0; a < b->rules[r].n_alts; a++)
            n_elems += b->rules[r].alts[a].n + 1;
    }
    g->elems = malloc((size_t)n_elems * sizeof *g->elems);
    g->alt_start = malloc(((size_t)n_alts + 1) * sizeof *g->alt_start);
    g->rule_alt = malloc(((size_t)nr + 1) * sizeof *g->rule_alt);
    g->classes = malloc(((size_t)b->n_classes + 1) * sizeof *g->classes);
    g->rule_names = calloc((size_t)nr, sizeof *g->rule_names);
    if (!g->elems || !g->alt_start || !g->rule_alt || !g->classes || !g->rule_names) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    g->n_rules = nr;
    g->root = root_id;
    g->elems[0] = (struct grammar_elem){.kind = GRAMMAR_ELEM_SENTINEL};
    g->elems[1] = (struct grammar_elem){.kind = GRAMMAR_ELEM_RULE, .arg = root_id};
    g->elems[2] = (struct grammar_elem){.kind = GRAMMAR_ELEM_END};
    int ne = 3, na = 0;
    for (int r = 0; r < nr; r++) {
        g->rule_alt[r] = na;
        const struct grammar_brule *rr = &b->rules[r];
        for (int a = 0; a < rr->n_alts; a++) {
            g->alt_start[na++] = ne;
            if (rr->alts[a].n > 0)
                memcpy(g->elems + ne, rr->alts[a].e, (size_t)rr->alts[a].n * sizeof *g->elems);
            ne += rr->alts[a].n;
            g->elems[ne++] = (struct grammar_elem){.kind = GRAMMAR_ELEM_END};
        }
        if (!(g->rule_names[r] = strdup(rr->name))) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
            goto out;
        }
    }
    g->rule_alt[nr] = na;
    g->n_alts = na;
    g->n_elems = ne;
    if (b->n_classes > 0)
        memcpy(g->classes, b->classes, (size_t)b->n_classes * sizeof *g->classes);
    g->n_classes = b->n_classes;
out:
    free(prod);
    free(nullable);
    free(colour);
    if (st != HR_OK)
        grammar_free(g);
    return st;
}
