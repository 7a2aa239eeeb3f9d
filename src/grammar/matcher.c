/* The pushdown automaton's expansion and byte step. */
#include "grammar/matcher.h"

#include <stdlib.h>
#include <string.h>

#define MATCHER_MAX_EXPAND 100000 /* expansion steps per pushed stack (a guard against blow-up) */

/* One expansion's bookkeeping.  Every path through an empty alternative goes on with the
 * stack below it, stk[0..d); where two paths reach that with the same stack (a repeated
 * group of two nullable alternatives: (a?|b?){20}), the second would add exactly the stacks
 * the first did, so it is skipped: without that the paths double at every repetition.  The
 * stack is the same when nothing below d was written since the first path's expansion
 * ended (each level restores what it wrote, so at that end stk[0..d) is as it was at its
 * start); `gen` dates the writes.  Only skips work: the set of stacks is the same. */
struct expand_ctx {
    int budget;
    int32_t clock;                       /* writes to stk so far */
    int hi;                              /* done[0..hi] hold values of this call */
    int32_t gen[MATCHER_MAX_DEPTH + 2];  /* [i]: the clock of stk[i]'s last write */
    int32_t done[MATCHER_MAX_DEPTH + 2]; /* [d]: the clock when an expansion of stk[0..d) from an
                                          * empty alternative last ended (-1: none) */
};

static void ctx_init(struct expand_ctx *x)
{
    x->clock = 0;
    x->hi = -1;
}

/* stk[i] = v, dated */
static inline void ctx_write(struct expand_ctx *x, int32_t *stk, int i, int32_t v)
{
    stk[i] = v;
    x->gen[i] = ++x->clock;
}

/* A stack copied into stk[0..depth) for a new expansion: its positions written now. */
static void ctx_load(struct expand_ctx *x, int depth)
{
    ++x->clock;
    for (int i = 0; i < depth; i++)
        x->gen[i] = x->clock;
    x->budget = MATCHER_MAX_EXPAND;
}

/* stk[0..d) was expanded from an empty alternative and is unchanged since */
static bool ctx_seen(const struct expand_ctx *x, int d)
{
    if (d > x->hi || x->done[d] < 0)
        return false;
    for (int i = 0; i < d; i++)
        if (x->gen[i] > x->done[d])
            return false;
    return true;
}

static void ctx_mark(struct expand_ctx *x, int d)
{
    while (x->hi < d)
        x->done[++x->hi] = -1;
    x->done[d] = x->clock;
}

enum hr_status matcher_set_init(struct matcher_set *s, int cap, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (cap < 16)
        cap = 16;
    if (!(s->buf = malloc((size_t)cap * sizeof *s->buf)))
        return hr_err(err, errlen, HR_ERR_NOMEM, "grammar matcher: out of memory");
    s->cap = cap;
    return HR_OK;
}

void matcher_set_free(struct matcher_set *s)
{
    if (!s)
        return;
    free(s->buf);
    memset(s, 0, sizeof *s);
}

bool matcher_set_copy(struct matcher_set *dst, const struct matcher_set *src)
{
    matcher_set_clear(dst);
    if (src->len > dst->cap) {
        dst->overflow = true;
        return false;
    }
    memcpy(dst->buf, src->buf, (size_t)src->len * sizeof *src->buf);
    dst->len = src->len;
    dst->n = src->n;
    dst->overflow = src->overflow;
    return !dst->overflow;
}

static uint32_t stack_hash(const int32_t *e, int depth)
{
    uint32_t h = 2166136261u ^ (uint32_t)depth;
    for (int i = 0; i < depth; i++)
        h = (h ^ (uint32_t)e[i]) * 16777619u;
    return h;
}

static void set_add(struct matcher_set *out, const int32_t *e, int depth)
{
    uint32_t h = stack_hash(e, depth);
    for (int off = 0; off < out->len; off = matcher_stack_next(out, off))
        if (out->buf[off] == depth && (uint32_t)out->buf[off + 1] == h &&
            memcmp(out->buf + off + 2, e, (size_t)depth * sizeof *e) == 0)
            return;
    if (out->len + 2 + depth > out->cap) {
        out->overflow = true;
        return;
    }
    int32_t *d = out->buf + out->len;
    d[0] = depth;
    d[1] = (int32_t)h;
    memcpy(d + 2, e, (size_t)depth * sizeof *e);
    out->len += 2 + depth;
    out->n++;
}

/* stk[0..depth) with a rule reference or nothing on top: expands until every stack's top is
 * a byte class (or the sentinel, or the stack is empty). stk has room for MATCHER_MAX_DEPTH + 1;
 * each level restores stk[depth - 1] on return, so the caller's stack is unchanged. */
static void expand(const struct grammar *g, int32_t *stk, int depth, struct matcher_set *out, struct expand_ctx *x)
{
    if (out->overflow)
        return;
    if (--x->budget < 0) {
        out->overflow = true;
        return;
    }
    if (depth == 0) {
        set_add(out, stk, 0);
        return;
    }
    int32_t pos = stk[depth - 1];
    const struct grammar_elem *e = &g->elems[pos];
    if (e->kind != GRAMMAR_ELEM_RULE) {
        set_add(out, stk, depth);
        return;
    }
    int base = depth - 1;
    if (g->elems[pos + 1].kind != GRAMMAR_ELEM_END)
        ctx_write(x, stk, base++, pos + 1);
    if (base >= MATCHER_MAX_DEPTH) {
        out->overflow = true;
        ctx_write(x, stk, depth - 1, pos);
        return;
    }
    int r = e->arg;
    for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        int32_t start = g->alt_start[a];
        if (g->elems[start].kind == GRAMMAR_ELEM_END) {
            if (!ctx_seen(x, base)) {
                expand(g, stk, base, out, x);
                ctx_mark(x, base);
            }
        } else {
            int32_t saved = stk[base];
            ctx_write(x, stk, base, start);
            expand(g, stk, base + 1, out, x);
            ctx_write(x, stk, base, saved);
        }
    }
    ctx_write(x, stk, depth - 1, pos);
}

void matcher_push_stack(const struct grammar *g, const int32_t *stack, int depth, struct matcher_set *out)
{
    int32_t stk[MATCHER_MAX_DEPTH + 2];
    if (depth > MATCHER_MAX_DEPTH) {
        out->overflow = true;
        return;
    }
    memcpy(stk, stack, (size_t)depth * sizeof *stk);
    struct expand_ctx x;
    ctx_init(&x);
    ctx_load(&x, depth);
    expand(g, stk, depth, out, &x);
}

void matcher_start(const struct grammar *g, struct matcher_set *out)
{
    matcher_set_clear(out);
    int32_t root = GRAMMAR_ROOT_ELEM;
    matcher_push_stack(g, &root, 1, out);
}

bool matcher_advance(const struct grammar *g, const struct matcher_set *in, uint8_t byte, struct matcher_set *out)
{
    matcher_set_clear(out);
    int32_t stk[MATCHER_MAX_DEPTH + 2];
    struct expand_ctx x;
    ctx_init(&x);
    for (int off = 0; off < in->len; off = matcher_stack_next(in, off)) {
        int depth = in->buf[off];
        if (depth == 0)
            continue;
        const int32_t *e = in->buf + off + 2;
        int32_t top = e[depth - 1];
        const struct grammar_elem *el = &g->elems[top];
        if (el->kind != GRAMMAR_ELEM_BYTES || !grammar_class_has(&g->classes[el->arg], byte))
            continue;
        memcpy(stk, e, (size_t)depth * sizeof *stk);
        int d = depth;
        if (g->elems[top + 1].kind == GRAMMAR_ELEM_END)
            d--;
        else
            stk[d - 1] = top + 1;
        ctx_load(&x, d);
        expand(g, stk, d, out, &x);
        if (out->overflow)
            break;
    }
    return out->n > 0 && !out->overflow;
}

bool matcher_accepting(const struct matcher_set *s)
{
    for (int off = 0; off < s->len; off = matcher_stack_next(s, off))
        if (s->buf[off] == 0)
            return true;
    return false;
}

bool matcher_has_sentinel(const struct matcher_set *s)
{
    for (int off = 0; off < s->len; off = matcher_stack_next(s, off))
        if (s->buf[off] == 1 && s->buf[off + 2] == GRAMMAR_SENTINEL_ELEM)
            return true;
    return false;
}

uint64_t matcher_set_hash(const struct matcher_set *s)
{
    uint64_t h = (uint64_t)s->n * 0x9E3779B97F4A7C15ull;
    for (int off = 0; off < s->len; off = matcher_stack_next(s, off)) {
        uint64_t x = (uint32_t)s->buf[off + 1] * 0xBF58476D1CE4E5B9ull;
        x ^= x >> 31;
        h += x; /* a sum: the order of the stacks does not matter */
    }
    return h;
}

bool matcher_set_equal(const struct matcher_set *a, const struct matcher_set *b)
{
    if (a->n != b->n || a->len != b->len)
        return false;
    for (int off = 0; off < a->len; off = matcher_stack_next(a, off)) {
        bool found = false;
        for (int o2 = 0; o2 < b->len && !found; o2 = matcher_stack_next(b, o2))
            found = a->buf[off] == b->buf[o2] && a->buf[off + 1] == b->buf[o2 + 1] &&
                    memcmp(a->buf + off + 2, b->buf + o2 + 2, (size_t)a->buf[off] * sizeof *a->buf) == 0;
        if (!found)
            return false;
    }
    return true;
}
