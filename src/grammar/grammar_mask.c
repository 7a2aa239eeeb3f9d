/* Mask precomputation per grammar position, the run-time mask, the per-sequence state. */
#include "grammar/grammar_mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum walk_result {
    WALK_REJECT,
    WALK_ACCEPT,
    WALK_UNCERTAIN,
};

struct walk_sink {
    /* precomputation */
    int32_t *acc;  /* [n_tok] */
    int n_acc;
    int32_t *unc;  /* [n_tok] */
    int n_unc;
    /* run time */
    uint64_t *bits;
    const struct grammar_vocab *v;
};

static inline void bit_set(uint64_t *b, int32_t t)
{
    b[t >> 6] |= 1ull << (t & 63);
}

static void sink_emit(struct walk_sink *k, int rank, enum walk_result r)
{
    if (k->bits) {
        if (r == WALK_ACCEPT)
            bit_set(k->bits, k->v->ids[rank]);
        return;
    }
    if (r == WALK_ACCEPT)
        k->acc[k->n_acc++] = k->v->ids[rank];
    else if (r == WALK_UNCERTAIN)
        k->unc[k->n_unc++] = rank;
}

static int common_prefix(const struct grammar_vocab *v, int a, int b)
{
    int m = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
    const uint8_t *x = grammar_vocab_bytes(v, a), *y = grammar_vocab_bytes(v, b);
    int l = 0;
    while (l < m && x[l] == y[l])
        l++;
    return l;
}

/* Walks the tokens of ranks list[0..n) (every token in order when list is NULL), each from
 * start: a token whose bytes the matcher takes is accepted. With sentinel, a token that
 * fails after the rule under test could have ended is uncertain instead of rejected. The
 * per-depth sets of the previous token are reused for the prefix the next one shares. */
static void walk(struct grammar_compiled *c, const struct matcher_set *start, const int32_t *list, int n,
                 bool sentinel, struct walk_sink *sink)
{
    const struct grammar_vocab *v = c->v;
    struct matcher_set *sets = c->walk;
    matcher_set_copy(&sets[0], start);
    c->exposed[0] = false;
    int valid = 0;        /* sets[0..valid] hold the previous token's prefixes */
    int dead_at = -1;     /* the previous token's prefix of this length matched nothing */
    int prev = -1;
    for (int j = 0; j < n; j++) {
        int k = list ? list[j] : j;
        int l = prev < 0 ? 0 : list ? common_prefix(v, prev, k) : v->lcp[k];
        prev = k;
        if (dead_at >= 0 && l >= dead_at) {
            sink_emit(sink, k, c->exposed[dead_at] ? WALK_UNCERTAIN : WALK_REJECT);
            continue;
        }
        int d = l < valid ? l : valid;
        int L = v->len[k];
        const uint8_t *bytes = grammar_vocab_bytes(v, k);
        dead_at = -1;
        for (; d < L; d++) {
            c->exposed[d + 1] = c->exposed[d] || (sentinel && matcher_has_sentinel(&sets[d]));
            if (!matcher_advance(&c->g, &sets[d], bytes[d], &sets[d + 1])) {
                dead_at = d + 1;
                break;
            }
        }
        valid = dead_at >= 0 ? dead_at : L;
        if (dead_at >= 0)
            sink_emit(sink, k, c->exposed[dead_at] ? WALK_UNCERTAIN : WALK_REJECT);
        else
            sink_emit(sink, k, WALK_ACCEPT);
    }
}

static void pos_free(struct grammar_pos_mask *p)
{
    free(p->accept_bits);
    free(p->accept);
    free(p->unc);
}

void grammar_compiled_ref(struct grammar_compiled *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void grammar_compiled_unref(struct grammar_compiled *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (int i = 0; c->pos && i < c->g.n_elems; i++) {
        for (int k = 0; k < c->pos[i].n; k++)
            pos_free(&c->pos[i].m[k]);
        free(c->pos[i].m);
    }
    free(c->pos);
    for (int i = 0; c->walk && i <= c->v->max_len; i++)
        matcher_set_free(&c->walk[i]);
    free(c->walk);
    free(c->exposed);
    for (int i = 0; c->slot_state && i < GRAMMAR_MASK_CACHE_SLOTS; i++)
        matcher_set_free(&c->slot_state[i]);
    free(c->slot_state);
    free(c->slot_hash);
    free(c->slot_used);
    free(c->slot_bits);
    pthread_mutex_destroy(&c->mu);
    grammar_free(&c->g);
    free(c);
}

static bool ret_add(struct grammar_ret *r, int32_t v)
{
    if (r->n < 0)
        return false;
    for (int i = 0; i < r->n; i++)
        if (r->v[i] == v)
            return false;
    if (r->n == GRAMMAR_RET_MAXSET)
        r->n = -1;
    else
        r->v[r->n++] = v;
    return true;
}

struct grammar_ret *grammar_return_contexts(const struct grammar *g, int32_t **rule_of_out)
{
    int nr = g->n_rules;
    struct grammar_ret *ret = calloc((size_t)nr + 1, sizeof *ret);
    int32_t *rule_of = malloc(((size_t)g->n_elems + 1) * sizeof *rule_of);
    if (!ret || !rule_of) {
        free(ret);
        free(rule_of);
        return NULL;
    }
    for (int e = 0; e < g->n_elems; e++)
        rule_of[e] = -1;
    for (int r = 0; r < nr; r++)
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (int e = g->alt_start[a]; g->elems[e].kind != GRAMMAR_ELEM_END; e++)
                rule_of[e] = r;
    /* A fixpoint of growing sets: a reference followed by more of its alternative returns
     * there; one in tail position returns wherever its own rule does. */
    for (bool changed = true; changed;) {
        changed = false;
        for (int q = 0; q < g->n_elems; q++) {
            if (g->elems[q].kind != GRAMMAR_ELEM_RULE)
                continue;
            struct grammar_ret *r = &ret[g->elems[q].arg];
            if (q == GRAMMAR_ROOT_ELEM) {
                changed |= ret_add(r, GRAMMAR_RET_BOTTOM);
            } else if (g->elems[q + 1].kind != GRAMMAR_ELEM_END) {
                changed |= ret_add(r, q + 1);
            } else if (rule_of[q] >= 0) {
                const struct grammar_ret *up = &ret[rule_of[q]];
                if (up->n < 0) {
                    if (r->n >= 0) {
                        r->n = -1;
                        changed = true;
                    }
                } else {
                    for (int i = 0; i < up->n; i++)
                        changed |= ret_add(r, up->v[i]);
                }
            }
        }
    }
    *rule_of_out = rule_of;
    return ret;
}

/* The precomputation of one (position, context) pair into pm. */
static enum hr_status pos_precompute(struct grammar_compiled *c, const int32_t *stk, int n, int32_t *acc,
                                     int32_t *unc, struct matcher_set *start, struct grammar_pos_mask *pm,
                                     char *err, size_t errlen)
{
    const struct grammar_vocab *v = c->v;
    matcher_set_clear(start);
    matcher_push_stack(&c->g, stk, n, start);
    struct walk_sink sink = {.acc = acc, .unc = unc, .v = v};
    walk(c, start, NULL, v->n_tok, true, &sink);
    pm->n_accept = sink.n_acc;
    if ((int64_t)sink.n_acc * 32 > (int64_t)c->words * 64) {
        if (!(pm->accept_bits = calloc((size_t)c->words, sizeof *pm->accept_bits)))
            return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        for (int k = 0; k < sink.n_acc; k++)
            bit_set(pm->accept_bits, acc[k]);
        c->bytes += (size_t)c->words * 8;
    } else if (sink.n_acc > 0) {
        if (!(pm->accept = malloc((size_t)sink.n_acc * sizeof *pm->accept)))
            return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        memcpy(pm->accept, acc, (size_t)sink.n_acc * sizeof *acc);
        c->bytes += (size_t)sink.n_acc * 4;
    }
    pm->n_unc = sink.n_unc;
    if (sink.n_unc > 0) {
        if (!(pm->unc = malloc((size_t)sink.n_unc * sizeof *pm->unc)))
            return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        memcpy(pm->unc, unc, (size_t)sink.n_unc * sizeof *unc);
        c->bytes += (size_t)sink.n_unc * 4;
    }
    return HR_OK;
}

/* Mask positions g needs: each byte position once per return context of its rule. */
static int64_t count_positions(const struct grammar *g, const struct grammar_ret *ret, const int32_t *rule_of)
{
    int64_t n = 0;
    for (int p = 0; p < g->n_elems; p++)
        if (g->elems[p].kind == GRAMMAR_ELEM_BYTES)
            n += ret[rule_of[p]].n > 0 ? ret[rule_of[p]].n : 1;
    return n;
}

enum hr_status grammar_compile(struct grammar *g, const struct grammar_vocab *v, int max_positions,
                               struct grammar_compiled **out, char *err, size_t errlen)
{
    *out = NULL;
    struct grammar_compiled *c = calloc(1, sizeof *c);
    if (!c) {
        grammar_free(g);
        return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
    }
    atomic_init(&c->refs, 1);
    c->g = *g;
    memset(g, 0, sizeof *g);
    c->v = v;
    c->words = (v->n_vocab + 63) / 64;
    pthread_mutex_init(&c->mu, NULL);
    enum hr_status st = HR_OK;
    int depth = v->max_len + 1;
    c->pos = calloc((size_t)c->g.n_elems, sizeof *c->pos);
    c->walk = calloc((size_t)depth, sizeof *c->walk);
    c->exposed = calloc((size_t)depth, sizeof *c->exposed);
    c->slot_state = calloc(GRAMMAR_MASK_CACHE_SLOTS, sizeof *c->slot_state);
    c->slot_hash = calloc(GRAMMAR_MASK_CACHE_SLOTS, sizeof *c->slot_hash);
    c->slot_used = calloc(GRAMMAR_MASK_CACHE_SLOTS, sizeof *c->slot_used);
    c->slot_bits = calloc((size_t)GRAMMAR_MASK_CACHE_SLOTS * (size_t)c->words, sizeof *c->slot_bits);
    int32_t *acc = malloc(((size_t)v->n_tok + 1) * sizeof *acc);
    int32_t *unc = malloc(((size_t)v->n_tok + 1) * sizeof *unc);
    struct matcher_set start = {0};
    struct grammar_ret *ret = NULL;
    int32_t *rule_of = NULL;
    if (!c->pos || !c->walk || !c->exposed || !c->slot_state || !c->slot_hash || !c->slot_used || !c->slot_bits ||
        !acc || !unc) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    for (int i = 0; i < depth && st == HR_OK; i++)
        st = matcher_set_init(&c->walk[i], GRAMMAR_MASK_WALK_INTS, err, errlen);
    for (int i = 0; i < GRAMMAR_MASK_CACHE_SLOTS && st == HR_OK; i++)
        st = matcher_set_init(&c->slot_state[i], GRAMMAR_MASK_STATE_INTS, err, errlen);
    if (st == HR_OK)
        st = matcher_set_init(&start, 16, err, errlen);
    if (st != HR_OK)
        goto out;
    c->bytes = sizeof *c + (size_t)c->g.n_elems * (sizeof *c->pos + sizeof *c->g.elems) +
               (size_t)depth * GRAMMAR_MASK_WALK_INTS * 4 +
               (size_t)GRAMMAR_MASK_CACHE_SLOTS * ((size_t)c->words * 8 + GRAMMAR_MASK_STATE_INTS * 4);
    if (!(ret = grammar_return_contexts(&c->g, &rule_of))) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    int64_t n_pos = count_positions(&c->g, ret, rule_of);
    int limit = max_positions > 0 ? max_positions : GRAMMAR_MAX_POSITIONS;
    if (n_pos > limit) {
        st = hr_err(err, errlen, HR_ERR_INVALID,
                    "grammar: too large: it needs %lld token-mask positions (byte positions, each per context it "
                    "is reached from), and the limit on grammar positions is %d; use a smaller schema or grammar "
                    "(shorter or fewer property names, enums, length bounds)",
                    (long long)n_pos, limit);
        goto out;
    }
    for (int p = 0; p < c->g.n_elems && st == HR_OK; p++) {
        if (c->g.elems[p].kind != GRAMMAR_ELEM_BYTES)
            continue;
        /* One entry per position the stack may hold directly below p (the return positions of
         * p's rule), each with the context under it as far as it is fixed; unknown: a sentinel. */
        const struct grammar_ret *rs = &ret[rule_of[p]];
        int n_ent = rs->n > 0 ? rs->n : 1;
        struct grammar_pos *gp = &c->pos[p];
        if (!(gp->m = calloc((size_t)n_ent, sizeof *gp->m))) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
            break;
        }
        gp->n = n_ent;
        for (int k = 0; k < n_ent && st == HR_OK; k++) {
            int32_t stk[GRAMMAR_MASK_CONTEXT + 3], ctx[GRAMMAR_MASK_CONTEXT + 1];
            int n = 0, nc = 0;
            bool bottom = false;
            int32_t first = rs->n > 0 ? rs->v[k] : GRAMMAR_RET_MANY;
            gp->m[k].ctx = first;
            if (first == GRAMMAR_RET_BOTTOM)
                bottom = true;
            else if (first >= 0) {
                ctx[nc++] = first;
                for (int r = rule_of[first]; nc < GRAMMAR_MASK_CONTEXT && ret[r].n == 1;) {
                    int32_t q = ret[r].v[0];
                    if (q == GRAMMAR_RET_BOTTOM) {
                        bottom = true;
                        break;
                    }
                    ctx[nc++] = q;
                    r = rule_of[q];
                }
            }
            if (!bottom)
                stk[n++] = GRAMMAR_SENTINEL_ELEM;
            for (int i = nc - 1; i >= 0; i--)
                stk[n++] = ctx[i];
            stk[n++] = p;
            st = pos_precompute(c, stk, n, acc, unc, &start, &gp->m[k], err, errlen);
        }
    }
out:
    free(acc);
    free(unc);
    free(ret);
    free(rule_of);
    matcher_set_free(&start);
    if (st != HR_OK) {
        grammar_compiled_unref(c);
        return st;
    }
    *out = c;
    return HR_OK;
}

/* Computes the mask of state into bits (the lock held). */
static void mask_compute(struct grammar_compiled *c, const struct matcher_set *state, uint64_t *bits)
{
    memset(bits, 0, (size_t)c->words * sizeof *bits);
    struct matcher_set one = {0};
    int32_t onebuf[MATCHER_MAX_DEPTH + 2];
    one.buf = onebuf;
    one.cap = MATCHER_MAX_DEPTH + 2;
    for (int off = 0; off < state->len; off = matcher_stack_next(state, off)) {
        int depth = matcher_stack_depth(state, off);
        if (depth == 0)
            continue;
        const int32_t *e = matcher_stack_elems(state, off);
        const struct grammar_pos *gp = &c->pos[e[depth - 1]];
        int32_t below = depth >= 2 ? e[depth - 2] : GRAMMAR_RET_BOTTOM;
        const struct grammar_pos_mask *pm = NULL;
        for (int k = 0; k < gp->n && !pm; k++)
            if (gp->m[k].ctx == GRAMMAR_RET_MANY || gp->m[k].ctx == below)
                pm = &gp->m[k];
        if (!pm) {
            /* Not a context the analysis foresaw (it always should): every token from the stack. */
            matcher_set_clear(&one);
            memcpy(onebuf + 2, e, (size_t)depth * sizeof *e);
            onebuf[0] = depth;
            onebuf[1] = 0;
            one.len = depth + 2;
            one.n = 1;
            struct walk_sink all = {.bits = bits, .v = c->v};
            walk(c, &one, NULL, c->v->n_tok, false, &all);
            continue;
        }
        if (pm->accept_bits) {
            for (int w = 0; w < c->words; w++)
                bits[w] |= pm->accept_bits[w];
        } else {
            for (int k = 0; k < pm->n_accept; k++)
                bit_set(bits, pm->accept[k]);
        }
        if (pm->n_unc == 0)
            continue;
        matcher_set_clear(&one);
        memcpy(onebuf + 2, e, (size_t)depth * sizeof *e);
        onebuf[0] = depth;
        onebuf[1] = 0;
        one.len = depth + 2;
        one.n = 1;
        struct walk_sink sink = {.bits = bits, .v = c->v};
        walk(c, &one, pm->unc, pm->n_unc, false, &sink);
        c->stats.uncertain_checked += pm->n_unc;
    }
}

void grammar_compiled_mask(struct grammar_compiled *c, const struct matcher_set *state, uint64_t *bits)
{
    pthread_mutex_lock(&c->mu);
    c->stats.masks++;
    uint64_t h = matcher_set_hash(state);
    int victim = 0;
    for (int i = 0; i < GRAMMAR_MASK_CACHE_SLOTS; i++) {
        if (c->slot_used[i] && c->slot_hash[i] == h && matcher_set_equal(&c->slot_state[i], state)) {
            memcpy(bits, c->slot_bits + (size_t)i * (size_t)c->words, (size_t)c->words * sizeof *bits);
            c->slot_used[i] = ++c->tick;
            c->stats.cache_hits++;
            pthread_mutex_unlock(&c->mu);
            return;
        }
        if (c->slot_used[i] < c->slot_used[victim])
            victim = i;
    }
    mask_compute(c, state, bits);
    if (state->len <= GRAMMAR_MASK_STATE_INTS && matcher_set_copy(&c->slot_state[victim], state)) {
        c->slot_hash[victim] = h;
        c->slot_used[victim] = ++c->tick;
        memcpy(c->slot_bits + (size_t)victim * (size_t)c->words, bits, (size_t)c->words * sizeof *bits);
    } else {
        c->slot_used[victim] = 0;
    }
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------ per sequence */

enum hr_status grammar_seq_init(struct grammar_seq *s, struct grammar_compiled *c, int32_t wait_token, char *err,
                                size_t errlen)
{
    memset(s, 0, sizeof *s);
    enum hr_status st = matcher_set_init(&s->cur, MATCHER_SET_INTS, err, errlen);
    if (st == HR_OK)
        st = matcher_set_init(&s->tmp, MATCHER_SET_INTS, err, errlen);
    if (st == HR_OK && !(s->bits = malloc((size_t)c->words * sizeof *s->bits)))
        st = hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
    if (st != HR_OK) {
        grammar_seq_free(s);
        return st;
    }
    grammar_compiled_ref(c);
    s->c = c;
    s->wait_token = wait_token;
    s->active = wait_token < 0;
    matcher_start(&c->g, &s->cur);
    if (s->cur.overflow) {
        grammar_seq_free(s);
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: the start state exceeds the matcher's limits");
    }
    return HR_OK;
}

void grammar_seq_free(struct grammar_seq *s)
{
    if (!s)
        return;
    matcher_set_free(&s->cur);
    matcher_set_free(&s->tmp);
    free(s->bits);
    grammar_compiled_unref(s->c);
    memset(s, 0, sizeof *s);
}

bool grammar_seq_accepting(const struct grammar_seq *s)
{
    return !s->active || matcher_accepting(&s->cur);
}

enum hr_status grammar_mask_apply(struct grammar_seq *s, float *logits, int vocab, const int32_t *stop_ids,
                                  int n_stop, char *err, size_t errlen)
{
    if (!s->active)
        return HR_OK;
    struct grammar_compiled *c = s->c;
    grammar_compiled_mask(c, &s->cur, s->bits);
    bool accepting = matcher_accepting(&s->cur);
    bool any = false;
    for (int w = 0; w < c->words && !any; w++)
        any = s->bits[w] != 0;
    if (!any && accepting && n_stop == 0)
        return hr_err(err, errlen, HR_ERR_NOT_FOUND, "grammar: the output is complete");
    if (!any && !accepting)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: no token of the vocabulary can continue the output");
    for (int i = 0; i < n_stop; i++)
        if (stop_ids[i] >= 0 && stop_ids[i] < c->v->n_vocab) {
            if (accepting)
                bit_set(s->bits, stop_ids[i]);
            else
                s->bits[stop_ids[i] >> 6] &= ~(1ull << (stop_ids[i] & 63));
        }
    int n = vocab < c->v->n_vocab ? vocab : c->v->n_vocab;
    for (int w = 0; w * 64 < n; w++) {
        uint64_t z = ~s->bits[w];
        int hi = n - w * 64 < 64 ? n - w * 64 : 64;
        if (hi < 64)
            z &= (1ull << hi) - 1;
        float *row = logits + (int64_t)w * 64;
        if (z == ~0ull) {
            for (int b = 0; b < 64; b++)
                row[b] = -INFINITY;
            continue;
        }
        while (z) { /* only the forbidden tokens */
            row[__builtin_ctzll(z)] = -INFINITY;
            z &= z - 1;
        }
    }
    for (int t = n; t < vocab; t++)
        logits[t] = -INFINITY;
    return HR_OK;
}

enum hr_status grammar_seq_advance(struct grammar_seq *s, int32_t token, bool is_stop, char *err, size_t errlen)
{
    const struct grammar_vocab *v = s->c->v;
    if (!s->active) {
        if (token == s->wait_token)
            s->active = true;
        return HR_OK;
    }
    if (is_stop) {
        if (!matcher_accepting(&s->cur))
            return hr_err(err, errlen, HR_ERR_INVALID, "grammar: stop token %d before the output is complete", token);
        return HR_OK;
    }
    int rank = token >= 0 && token < v->n_vocab ? v->rank[token] : -1;
    if (rank < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: token %d has no bytes the grammar can match", token);
    const uint8_t *b = grammar_vocab_bytes(v, rank);
    for (int i = 0; i < v->len[rank]; i++) {
        if (!matcher_advance(&s->c->g, &s->cur, b[i], &s->tmp))
            return hr_err(err, errlen, HR_ERR_INVALID,
                          s->tmp.overflow ? "grammar: the matcher's state exceeds its limits at token %d"
                                          : "grammar: token %d is not allowed here",
                          token);
        struct matcher_set t = s->cur;
        s->cur = s->tmp;
        s->tmp = t;
    }
    return HR_OK;
}
