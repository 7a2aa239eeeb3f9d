/* Added tokens: id assignment, pattern tries, and splitting text around matches. */
#include "tokenizer/added_vocab.h"

#include <oniguruma.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"
#include "tokenizer/utf8.h"

struct added_vocab_trie_node {
    int32_t id; /* token id of the pattern ending here, -1 if none */
};

struct added_vocab_trie_edge {
    uint32_t node1; /* parent node + 1; 0: empty slot */
    uint32_t child;
    uint8_t byte;
};

/* ------------------------------------------------------------- tries ---- */

static inline uint32_t edge_slot(uint32_t node, uint8_t b, uint32_t mask)
{
    return (uint32_t)((((uint64_t)node << 8 | b) * 0x9E3779B97F4A7C15ull) >> 40) & mask;
}

static int64_t trie_child(const struct added_vocab_trie *t, uint32_t node, uint8_t b)
{
    for (uint32_t i = edge_slot(node, b, t->edge_mask);; i = (i + 1) & t->edge_mask) {
        const struct added_vocab_trie_edge *e = &t->edges[i];
        if (!e->node1)
            return -1;
        if (e->node1 == node + 1 && e->byte == b)
            return e->child;
    }
}

/* Builds a trie over n patterns; an earlier pattern keeps its id when two are equal. */
static enum hr_status trie_build(struct added_vocab_trie *t, char *const *pat, const size_t *len, const int32_t *ids,
                                 int n, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t total = 1;
    for (int k = 0; k < n; k++)
        total += len[k];
    uint32_t cap = 16;
    while (cap < total * 2)
        cap <<= 1;
    t->edge_mask = cap - 1;
    t->edges = calloc(cap, sizeof *t->edges);
    t->nodes = malloc(total * sizeof *t->nodes);
    if (!t->edges || !t->nodes)
        return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
    t->nodes[0].id = -1;
    t->n_nodes = 1;
    for (int k = 0; k < n; k++) {
        if (len[k] == 0)
            continue;
        uint32_t node = 0;
        for (size_t i = 0; i < len[k]; i++) {
            uint8_t b = (uint8_t)pat[k][i];
            int64_t c = trie_child(t, node, b);
            if (c < 0) {
                uint32_t nn = t->n_nodes++;
                t->nodes[nn].id = -1;
                uint32_t s = edge_slot(node, b, t->edge_mask);
                while (t->edges[s].node1)
                    s = (s + 1) & t->edge_mask;
                t->edges[s] = (struct added_vocab_trie_edge){.node1 = node + 1, .child = nn, .byte = b};
                c = nn;
            }
            node = (uint32_t)c;
        }
        if (t->nodes[node].id < 0)
            t->nodes[node].id = ids[k];
        t->first[(uint8_t)pat[k][0]] = true;
    }
    return HR_OK;
}

static void trie_free(struct added_vocab_trie *t)
{
    free(t->nodes);
    free(t->edges);
    memset(t, 0, sizeof *t);
}

/* Leftmost-longest match at or after *pos; returns false when none. */
static bool trie_find(const struct added_vocab_trie *t, const uint8_t *s, size_t n, size_t from, size_t *ms, size_t *me,
                      int32_t *id)
{
    if (t->n_nodes <= 1)
        return false;
    for (size_t i = from; i < n; i++) {
        if (!t->first[s[i]])
            continue;
        uint32_t node = 0;
        int32_t best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            int64_t c = trie_child(t, node, s[j]);
            if (c < 0)
                break;
            node = (uint32_t)c;
            if (t->nodes[node].id >= 0) {
                best = t->nodes[node].id;
                best_end = j + 1;
            }
        }
        if (best >= 0) {
            *ms = i;
            *me = best_end;
            *id = best;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------ config ---- */

struct entry {
    char *content;
    size_t len;
    bool special, lstrip, rstrip, single_word, normalized;
};

static bool same_token(const struct entry *a, const struct added_vocab_token *b)
{
    return a->len == b->len && !memcmp(a->content, b->content, a->len) && a->special == b->special &&
           a->lstrip == b->lstrip && a->rstrip == b->rstrip && a->single_word == b->single_word &&
           a->normalized == b->normalized;
}

struct builder {
    /* content -> id ("added_tokens_map") */
    char **map_content;
    size_t *map_len;
    int32_t *map_id;
    int n_map;
    /* patterns in the reference's order: special tokens first, then the others */
    struct entry *specials;
    int n_specials;
    struct entry *others;
    int n_others;
};

static int32_t map_get(const struct builder *b, const char *s, size_t n)
{
    for (int k = 0; k < b->n_map; k++)
        if (b->map_len[k] == n && !memcmp(b->map_content[k], s, n))
            return b->map_id[k];
    return -1;
}

static bool is_special_content(const struct added_vocab *av, const char *s, size_t n)
{
    for (int k = 0; k < av->n_special; k++)
        if (av->special_len[k] == n && !memcmp(av->special[k], s, n))
            return true;
    return false;
}

static char *dup_bytes(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static enum hr_status build_tries(struct added_vocab *av, struct builder *b, const struct bpe *m,
                                  const struct normalizer *nz, char *err, size_t errlen)
{
    int total = b->n_specials + b->n_others;
    char **rp = calloc((size_t)total + 1, sizeof *rp), **np = calloc((size_t)total + 1, sizeof *np);
    size_t *rl = calloc((size_t)total + 1, sizeof *rl), *nl = calloc((size_t)total + 1, sizeof *nl);
    int32_t *ri = calloc((size_t)total + 1, sizeof *ri), *ni = calloc((size_t)total + 1, sizeof *ni);
    char **owned = calloc((size_t)total + 1, sizeof *owned);
    int nr = 0, nn = 0, no = 0;
    enum hr_status st = HR_OK;
    struct normalizer_scratch sc = {0};
    if (!rp || !np || !rl || !nl || !ri || !ni || !owned) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        goto done;
    }
    for (int k = 0; k < total; k++) {
        const struct entry *e = k < b->n_specials ? &b->specials[k] : &b->others[k - b->n_specials];
        int32_t id = map_get(b, e->content, e->len);
        if (id < 0)
            id = bpe_token_id(m, e->content, e->len);
        if (id < 0) {
            st = hr_err(err, errlen, HR_ERR_INTERNAL, "added tokens: lost the id of a token");
            goto done;
        }
        if (!e->normalized) {
            rp[nr] = e->content;
            rl[nr] = e->len;
            ri[nr++] = id;
            continue;
        }
        const char *out;
        size_t out_len;
        st = normalizer_apply(nz, e->content, e->len, &sc, &out, &out_len, err, errlen);
        if (st != HR_OK)
            goto done;
        char *c = dup_bytes(out, out_len);
        if (!c) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
            goto done;
        }
        owned[no++] = c;
        np[nn] = c;
        nl[nn] = out_len;
        ni[nn++] = id;
    }
    st = trie_build(&av->raw, rp, rl, ri, nr, err, errlen);
    if (st == HR_OK)
        st = trie_build(&av->norm, np, nl, ni, nn, err, errlen);
done:
    normalizer_scratch_free(&sc);
    for (int k = 0; k < no; k++)
        free(owned[k]);
    free(owned);
    free(rp);
    free(np);
    free(rl);
    free(nl);
    free(ri);
    free(ni);
    return st;
}

static enum hr_status add_one(struct added_vocab *av, struct builder *b, const struct bpe *m, struct entry *e,
                              char *err, size_t errlen)
{
    /* special tokens are remembered first, whether or not the token is added below */
    if (e->special && e->len && !is_special_content(av, e->content, e->len)) {
        char *c = dup_bytes(e->content, e->len);
        if (!c)
            return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        av->special[av->n_special] = c;
        av->special_len[av->n_special++] = e->len;
        b->specials[b->n_specials++] = *e;
    }
    if (!e->len)
        return HR_OK;
    for (int k = 0; k < av->n; k++)
        if (same_token(e, &av->by_id[k]))
            return HR_OK;
    int32_t id = map_get(b, e->content, e->len);
    if (id < 0)
        id = bpe_token_id(m, e->content, e->len);
    if (id < 0) {
        int32_t max = -1;
        for (int k = 0; k < b->n_map; k++)
            if (b->map_id[k] > max)
                max = b->map_id[k];
        if (max < 0)
            id = m->vocab_size;
        else if (max >= m->vocab_size || m->vocab_size == 0)
            id = max + 1;
        else
            id = m->vocab_size;
    }
    /* content -> id */
    bool found = false;
    for (int k = 0; k < b->n_map; k++)
        if (b->map_len[k] == e->len && !memcmp(b->map_content[k], e->content, e->len)) {
            b->map_id[k] = id;
            found = true;
        }
    if (!found) {
        b->map_content[b->n_map] = e->content;
        b->map_len[b->n_map] = e->len;
        b->map_id[b->n_map++] = id;
    }
    /* id -> token */
    struct added_vocab_token *t = NULL;
    for (int k = 0; k < av->n; k++)
        if (av->by_id[k].id == id)
            t = &av->by_id[k];
    if (!t) {
        t = &av->by_id[av->n++];
    } else {
        free(t->content);
    }
    t->content = dup_bytes(e->content, e->len);
    if (!t->content)
        return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
    t->len = e->len;
    t->id = id;
    t->special = e->special;
    t->lstrip = e->lstrip;
    t->rstrip = e->rstrip;
    t->single_word = e->single_word;
    t->normalized = e->normalized;
    if (!is_special_content(av, e->content, e->len))
        b->others[b->n_others++] = *e;
    return HR_OK;
}

static int cmp_by_id(const void *a, const void *b)
{
    int32_t x = ((const struct added_vocab_token *)a)->id, y = ((const struct added_vocab_token *)b)->id;
    return x < y ? -1 : x > y;
}

enum hr_status added_vocab_init_json(struct added_vocab *av, const struct tkjson *j, uint32_t node,
                                     const struct bpe *m, const struct normalizer *nz, char *err, size_t errlen)
{
    memset(av, 0, sizeof *av);
    /* the regex crate's Unicode \\w and \\s, which the reference uses for these checks */
    static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
    static const char space[] = "\\p{White_Space}";
    enum hr_status st = pretok_regex_compile(word, sizeof word - 1, &av->re_word, err, errlen);
    if (st != HR_OK)
        return st;
    st = pretok_regex_compile(space, sizeof space - 1, &av->re_space, err, errlen);
    if (st != HR_OK) {
        added_vocab_free(av);
        return st;
    }
    int n = 0;
    if (node != TKJSON_NONE && tkjson_type(j, node) != TKJSON_TYPE_NULL) {
        if (tkjson_type(j, node) != TKJSON_TYPE_ARRAY) {
            added_vocab_free(av);
            return hr_err(err, errlen, HR_ERR_FORMAT, "\"added_tokens\" must be an array");
        }
        n = (int)j->nodes[node].len;
    }
    struct builder b = {0};
    struct entry *entries = calloc((size_t)n + 1, sizeof *entries);
    b.map_content = calloc((size_t)n + 1, sizeof *b.map_content);
    b.map_len = calloc((size_t)n + 1, sizeof *b.map_len);
    b.map_id = calloc((size_t)n + 1, sizeof *b.map_id);
    b.specials = calloc((size_t)n + 1, sizeof *b.specials);
    b.others = calloc((size_t)n + 1, sizeof *b.others);
    av->by_id = calloc((size_t)n + 1, sizeof *av->by_id);
    av->special = calloc((size_t)n + 1, sizeof *av->special);
    av->special_len = calloc((size_t)n + 1, sizeof *av->special_len);
    if (!entries || !b.map_content || !b.map_len || !b.map_id || !b.specials || !b.others || !av->by_id ||
        !av->special || !av->special_len) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        goto done;
    }
    int k = 0;
    for (uint32_t c = tkjson_first(j, node); c != TKJSON_NONE; c = tkjson_next(j, node, c), k++) {
        struct entry *e = &entries[k];
        size_t len;
        const char *content = tkjson_str(j, tkjson_get(j, c, "content"), &len);
        if (!content) {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "added_tokens[%d]: missing \"content\"", k);
            goto done;
        }
        /* contents point into the parsed document, which outlives this function */
        e->content = (char *)content;
        e->len = len;
        e->special = tkjson_bool(j, tkjson_get(j, c, "special"), false);
        e->lstrip = tkjson_bool(j, tkjson_get(j, c, "lstrip"), false);
        e->rstrip = tkjson_bool(j, tkjson_get(j, c, "rstrip"), false);
        e->single_word = tkjson_bool(j, tkjson_get(j, c, "single_word"), false);
        e->normalized = tkjson_bool(j, tkjson_get(j, c, "normalized"), !e->special);
        st = add_one(av, &b, m, e, err, errlen);
        if (st != HR_OK)
            goto done;
    }
    st = build_tries(av, &b, m, nz, err, errlen);
    /* decoding uses the normalized form of normalized tokens (the reference caches it) */
    struct normalizer_scratch sc = {0};
    for (int t = 0; st == HR_OK && t < av->n; t++) {
        struct added_vocab_token *tok = &av->by_id[t];
        const char *f = tok->content;
        size_t fl = tok->len;
        if (tok->normalized)
            st = normalizer_apply(nz, tok->content, tok->len, &sc, &f, &fl, err, errlen);
        if (st == HR_OK && !(tok->form = dup_bytes(f, fl)))
            st = hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        tok->form_len = fl;
    }
    normalizer_scratch_free(&sc);
    if (st == HR_OK)
        qsort(av->by_id, (size_t)av->n, sizeof *av->by_id, cmp_by_id);
done:
    free(entries);
    free(b.map_content);
    free(b.map_len);
    free(b.map_id);
    free(b.specials);
    free(b.others);
    if (st != HR_OK)
        added_vocab_free(av);
    return st;
}

void added_vocab_free(struct added_vocab *av)
{
    if (!av)
        return;
    for (int k = 0; k < av->n && av->by_id; k++) {
        free(av->by_id[k].content);
        free(av->by_id[k].form);
    }
    free(av->by_id);
    for (int k = 0; k < av->n_special; k++)
        free(av->special[k]);
    free(av->special);
    free(av->special_len);
    trie_free(&av->raw);
    trie_free(&av->norm);
    pretok_regex_free(av->re_word);
    pretok_regex_free(av->re_space);
    memset(av, 0, sizeof *av);
}

const struct added_vocab_token *added_vocab_by_id(const struct added_vocab *av, int32_t id)
{
    int lo = 0, hi = av->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (av->by_id[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < av->n && av->by_id[lo].id == id ? &av->by_id[lo] : NULL;
}

int32_t added_vocab_id(const struct added_vocab *av, const char *s, size_t n)
{
    /* by_id holds the last token given each id; its content maps back to that id */
    for (int k = 0; k < av->n; k++)
        if (av->by_id[k].len == n && !memcmp(av->by_id[k].content, s, n))
            return av->by_id[k].id;
    return -1;
}

bool added_vocab_is_special(const struct added_vocab *av, int32_t id)
{
    const struct added_vocab_token *t = added_vocab_by_id(av, id);
    return t && t->form && is_special_content(av, t->form, t->form_len);
}

/* ------------------------------------------------------------ splitting ---- */

/* Does regex re match the single character at s[i]? */
static bool char_matches(void *re, const uint8_t *s, size_t i, size_t n)
{
    size_t cl;
    if (utf8_scan(s + i, n - i, &cl) != UTF8_SCAN_OK)
        return false;
    int r = onig_match((regex_t *)re, s, s + n, s + i, NULL, ONIG_OPTION_NONE);
    return r == (int)cl;
}

/* Start of the character that ends at byte i (i > 0). */
static size_t prev_char(const uint8_t *s, size_t i)
{
    do
        i--;
    while (i > 0 && (s[i] & 0xC0) == 0x80);
    return i;
}

static bool push_seg(struct added_vocab_segment **segs, size_t *cap, size_t *n, uint32_t a, uint32_t b, int32_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct added_vocab_segment *ns = realloc(*segs, c * sizeof *ns);
        if (!ns)
            return false;
        *segs = ns;
        *cap = c;
    }
    (*segs)[(*n)++] = (struct added_vocab_segment){a, b, id};
    return true;
}

enum hr_status added_vocab_split(const struct added_vocab *av, bool normalized, const char *text, size_t n,
                                 struct added_vocab_segment **segs, size_t *cap, size_t *n_segs, char *err,
                                 size_t errlen)
{
    const struct added_vocab_trie *t = normalized ? &av->norm : &av->raw;
    const uint8_t *s = (const uint8_t *)text;
    *n_segs = 0;
    if (n == 0)
        return HR_OK;
    if (n > UINT32_MAX)
        return hr_err(err, errlen, HR_ERR_INVALID, "text too long (%zu bytes)", n);
    size_t start_offset = 0, from = 0, ms, me;
    int32_t id;
    while (trie_find(t, s, n, from, &ms, &me, &id)) {
        from = me;
        const struct added_vocab_token *tok = added_vocab_by_id(av, id);
        size_t start = ms, stop = me;
        if (tok && tok->single_word) {
            bool start_space = start == 0 || !char_matches(av->re_word, s, prev_char(s, start), n);
            bool stop_space = stop == n || !char_matches(av->re_word, s, stop, n);
            if (!start_space || !stop_space)
                continue;
        }
        if (tok && tok->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t p = prev_char(s, ns);
                if (!char_matches(av->re_space, s, p, n))
                    break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (tok && tok->rstrip) {
            while (stop < n && char_matches(av->re_space, s, stop, n)) {
                size_t cl;
                utf8_scan(s + stop, n - stop, &cl);
                stop += cl;
            }
        }
        if (start_offset < start && !push_seg(segs, cap, n_segs, (uint32_t)start_offset, (uint32_t)start, -1))
            return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        if (!push_seg(segs, cap, n_segs, (uint32_t)start, (uint32_t)stop, id))
            return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
        start_offset = stop;
    }
    if (start_offset != n && !push_seg(segs, cap, n_segs, (uint32_t)start_offset, (uint32_t)n, -1))
        return hr_err(err, errlen, HR_ERR_NOMEM, "added tokens: out of memory");
    return HR_OK;
}
