/* Byte-pair encoding: vocabulary and merge tables, the merge loop, the word cache. */
#include "tokenizer/bpe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/vec.h"
#include "tokenizer/utf8.h"

#define BPE_MAX_IDS (1 << 24) /* refuse absurd ids instead of allocating for them */
#define BPE_CHAR_TABLE 2048

struct bpe_symbol {
    int32_t id;
    int32_t prev; /* index of the previous live symbol, -1 at the start */
    int32_t next; /* index of the next live symbol, -1 at the end */
    int32_t live; /* 0 once merged into its left neighbour */
};

struct bpe_heap_item {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
};

/* ---------------------------------------------------------- word cache ---- */

#define CACHE_SHARDS 16
#define CACHE_SETS 2048 /* per shard, direct-mapped */
#define CACHE_WORD 30   /* longest cached word in bytes */
#define CACHE_IDS 8     /* most ids of a cached word */

struct cache_entry {
    uint64_t h;
    uint8_t wlen; /* 0: empty */
    uint8_t nids;
    char word[CACHE_WORD];
    int32_t ids[CACHE_IDS];
};

struct cache_shard {
    pthread_mutex_t mu;
    uint64_t lookups, hits;
    struct cache_entry *e; /* [CACHE_SETS] */
    char pad[64];          /* keep shards' locks on separate cache lines */
};

struct bpe_cache {
    struct cache_shard shard[CACHE_SHARDS];
};

static struct bpe_cache *cache_new(void)
{
    struct bpe_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    for (int s = 0; s < CACHE_SHARDS; s++) {
        pthread_mutex_init(&c->shard[s].mu, NULL);
        c->shard[s].e = calloc(CACHE_SETS, sizeof(struct cache_entry));
        if (!c->shard[s].e) {
            for (int k = 0; k <= s; k++) {
                free(c->shard[k].e);
                pthread_mutex_destroy(&c->shard[k].mu);
            }
            free(c);
            return NULL;
        }
    }
    return c;
}

static void cache_free(struct bpe_cache *c)
{
    if (!c)
        return;
    for (int s = 0; s < CACHE_SHARDS; s++) {
        free(c->shard[s].e);
        pthread_mutex_destroy(&c->shard[s].mu);
    }
    free(c);
}

static bool cache_get(struct bpe_cache *c, uint64_t h, const char *w, size_t n, int32_t *ids, size_t *nids)
{
    struct cache_shard *s = &c->shard[h >> 60];
    struct cache_entry *e = &s->e[h & (CACHE_SETS - 1)];
    bool hit = false;
    pthread_mutex_lock(&s->mu);
    s->lookups++;
    if (e->h == h && e->wlen == n && !memcmp(e->word, w, n)) {
        memcpy(ids, e->ids, e->nids * sizeof *ids);
        *nids = e->nids;
        s->hits++;
        hit = true;
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

static void cache_put(struct bpe_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t nids)
{
    struct cache_shard *s = &c->shard[h >> 60];
    struct cache_entry *e = &s->e[h & (CACHE_SETS - 1)];
    pthread_mutex_lock(&s->mu);
    e->h = h;
    e->wlen = (uint8_t)n;
    e->nids = (uint8_t)nids;
    memcpy(e->word, w, n);
    memcpy(e->ids, ids, nids * sizeof *ids);
    pthread_mutex_unlock(&s->mu);
}

void bpe_cache_stats(const struct bpe *m, uint64_t *lookups, uint64_t *hits)
{
    *lookups = *hits = 0;
    if (!m->cache)
        return;
    for (int s = 0; s < CACHE_SHARDS; s++) {
        struct cache_shard *sh = &m->cache->shard[s];
        pthread_mutex_lock(&sh->mu);
        *lookups += sh->lookups;
        *hits += sh->hits;
        pthread_mutex_unlock(&sh->mu);
    }
}

/* -------------------------------------------------------- hash tables ---- */

static inline uint64_t str_hash(const char *s, size_t n) { return XXH3_64bits(s, n); }

static inline uint32_t pair_slot(uint64_t key, uint32_t mask)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
}

int32_t bpe_token_id(const struct bpe *m, const char *s, size_t n)
{
    uint64_t h = str_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->vocab_mask;; i = (i + 1) & m->vocab_mask) {
        const struct bpe_vocab_slot *sl = &m->vocab_slots[i];
        if (!sl->id1)
            return -1;
        if (sl->tag == tag) {
            int32_t id = (int32_t)sl->id1 - 1;
            if (m->tok_len[id] == n && !memcmp(m->pool + m->tok_off[id], s, n))
                return id;
        }
    }
}

const char *bpe_token_str(const struct bpe *m, int32_t id, size_t *len)
{
    if (id < 0 || id >= m->n_ids || m->tok_off[id] == UINT32_MAX)
        return NULL;
    *len = m->tok_len[id];
    return m->pool + m->tok_off[id];
}

/* Inserts token id (already in the pool) unless its bytes are present; returns the id the
 * bytes map to afterwards (a later duplicate key replaces the earlier id, as in a JSON map). */
static void vocab_insert(struct bpe *m, int32_t id, const char *s, size_t n, int32_t *replaced)
{
    uint64_t h = str_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    *replaced = -1;
    for (uint32_t i = (uint32_t)h & m->vocab_mask;; i = (i + 1) & m->vocab_mask) {
        struct bpe_vocab_slot *sl = &m->vocab_slots[i];
        if (!sl->id1) {
            sl->tag = tag;
            sl->id1 = (uint32_t)id + 1;
            return;
        }
        if (sl->tag == tag) {
            int32_t old = (int32_t)sl->id1 - 1;
            if (m->tok_len[old] == n && !memcmp(m->pool + m->tok_off[old], s, n)) {
                *replaced = old;
                sl->id1 = (uint32_t)id + 1;
                return;
            }
        }
    }
}

static const struct bpe_merge_slot *merge_find(const struct bpe *m, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = pair_slot(key, m->merge_mask);; i = (i + 1) & m->merge_mask) {
        const struct bpe_merge_slot *sl = &m->merge_slots[i];
        if (sl->key == key)
            return sl;
        if (sl->key == UINT64_MAX)
            return NULL;
    }
}

static void merge_insert(struct bpe *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = pair_slot(key, m->merge_mask);; i = (i + 1) & m->merge_mask) {
        struct bpe_merge_slot *sl = &m->merge_slots[i];
        if (sl->key == key || sl->key == UINT64_MAX) {
            /* a repeated pair takes its last line, as a map built line by line does */
            sl->key = key;
            sl->rank = rank;
            sl->new_id = new_id;
            return;
        }
    }
}

/* ---------------------------------------------------------------- init ---- */

static uint32_t pow2_at_least(uint64_t n)
{
    uint64_t c = 1024;
    while (c < n)
        c <<= 1;
    return (uint32_t)c;
}

/* Slots for n keys of a linear-probing table: a load of at most 2/3 keeps probes
 * short (151k Qwen3 tokens and merges: 256k slots each, not 512k: 6 MiB less). */
static uint64_t table_room(size_t n)
{
    return (uint64_t)n + (uint64_t)n / 2 + 1;
}

static enum hr_status opt_string(const struct tkjson *j, uint32_t node, const char *key, char **out, size_t *len,
                                 char *err, size_t errlen)
{
    uint32_t v = tkjson_get(j, node, key);
    *out = NULL;
    *len = 0;
    if (v == TKJSON_NONE || tkjson_type(j, v) == TKJSON_TYPE_NULL)
        return HR_OK;
    size_t n;
    const char *s = tkjson_str(j, v, &n);
    if (!s)
        return hr_err(err, errlen, HR_ERR_FORMAT, "model: \"%s\" must be a string or null", key);
    *out = malloc(n + 1);
    if (!*out)
        return hr_err(err, errlen, HR_ERR_NOMEM, "model: out of memory");
    memcpy(*out, s, n);
    (*out)[n] = 0;
    *len = n;
    return HR_OK;
}

static enum hr_status load_vocab(struct bpe *m, const struct tkjson *j, uint32_t vocab, char *err, size_t errlen)
{
    if (vocab == TKJSON_NONE || tkjson_type(j, vocab) != TKJSON_TYPE_OBJECT)
        return hr_err(err, errlen, HR_ERR_FORMAT, "model: missing \"vocab\" object");
    size_t n_entries = j->nodes[vocab].len, pool = 0;
    int64_t max_id = -1;
    for (uint32_t k = tkjson_first(j, vocab); k != TKJSON_NONE; k = tkjson_next(j, vocab, k)) {
        int64_t id;
        if (!tkjson_int(j, k + 1, &id) || id < 0 || id >= BPE_MAX_IDS) {
            size_t kl;
            const char *ks = tkjson_str(j, k, &kl);
            return hr_err(err, errlen, HR_ERR_FORMAT, "model: vocab entry \"%.*s\" has a bad id",
                          (int)(kl > 64 ? 64 : kl), ks);
        }
        if (id > max_id)
            max_id = id;
        pool += j->nodes[k].len;
    }
    if (pool >= UINT32_MAX)
        return hr_err(err, errlen, HR_ERR_FORMAT, "model: vocabulary too large");
    m->n_ids = (int32_t)(max_id + 1);
    m->pool = malloc(pool + 1);
    m->tok_off = malloc(((size_t)m->n_ids + 1) * sizeof *m->tok_off);
    m->tok_len = calloc((size_t)m->n_ids + 1, sizeof *m->tok_len);
    m->vocab_mask = pow2_at_least(table_room(n_entries)) - 1;
    m->vocab_slots = calloc((size_t)m->vocab_mask + 1, sizeof *m->vocab_slots);
    if (!m->pool || !m->tok_off || !m->tok_len || !m->vocab_slots)
        return hr_err(err, errlen, HR_ERR_NOMEM, "model: out of memory");
    memset(m->tok_off, 0xFF, ((size_t)m->n_ids + 1) * sizeof *m->tok_off);
    size_t off = 0;
    m->vocab_size = 0;
    for (uint32_t k = tkjson_first(j, vocab); k != TKJSON_NONE; k = tkjson_next(j, vocab, k)) {
        int64_t id;
        tkjson_int(j, k + 1, &id);
        size_t kl;
        const char *ks = tkjson_str(j, k, &kl);
        memcpy(m->pool + off, ks, kl);
        /* a later entry with the same id takes the id -> token direction */
        m->tok_off[id] = (uint32_t)off;
        m->tok_len[id] = (uint32_t)kl;
        int32_t replaced;
        vocab_insert(m, (int32_t)id, m->pool + off, kl, &replaced);
        if (replaced < 0)
            m->vocab_size++;
        off += kl;
    }
    m->pool_len = off;
    return HR_OK;
}

/* Splits a legacy "a b" merge line at its single space. */
static bool split_merge_line(const char *s, size_t n, size_t *space)
{
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
        return false;
    *space = (size_t)(sp - s);
    return true;
}

static enum hr_status load_merges(struct bpe *m, const struct tkjson *j, uint32_t merges, char *err, size_t errlen)
{
    if (merges == TKJSON_NONE || tkjson_type(j, merges) == TKJSON_TYPE_NULL) {
        m->merge_mask = 1023;
    } else if (tkjson_type(j, merges) != TKJSON_TYPE_ARRAY) {
        return hr_err(err, errlen, HR_ERR_FORMAT, "model: \"merges\" must be an array");
    } else {
        m->merge_mask = pow2_at_least(table_room(j->nodes[merges].len)) - 1;
    }
    m->merge_slots = malloc(((size_t)m->merge_mask + 1) * sizeof *m->merge_slots);
    if (!m->merge_slots)
        return hr_err(err, errlen, HR_ERR_NOMEM, "model: out of memory");
    memset(m->merge_slots, 0xFF, ((size_t)m->merge_mask + 1) * sizeof *m->merge_slots);
    if (merges == TKJSON_NONE || tkjson_type(j, merges) == TKJSON_TYPE_NULL)
        return HR_OK;
    char *cat = NULL;
    size_t cat_cap = 0;
    uint32_t rank = 0, line = 0;
    enum hr_status st = HR_OK;
    for (uint32_t c = tkjson_first(j, merges); c != TKJSON_NONE; c = tkjson_next(j, merges, c), line++) {
        const char *a, *b;
        size_t al, bl;
        if (tkjson_type(j, c) == TKJSON_TYPE_STRING) {
            size_t n, sp;
            const char *s = tkjson_str(j, c, &n);
            if (n >= 8 && !memcmp(s, "#version", 8))
                continue; /* header line of merges.txt files */
            if (!split_merge_line(s, n, &sp)) {
                st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u is not \"left right\"", line);
                break;
            }
            a = s;
            al = sp;
            b = s + sp + 1;
            bl = n - sp - 1;
        } else if (tkjson_type(j, c) == TKJSON_TYPE_ARRAY && j->nodes[c].len == 2) {
            uint32_t e0 = tkjson_first(j, c), e1 = tkjson_next(j, c, e0);
            a = tkjson_str(j, e0, &al);
            b = tkjson_str(j, e1, &bl);
            if (!a || !b) {
                st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u is not a pair of strings", line);
                break;
            }
        } else {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u is neither \"a b\" nor [\"a\", \"b\"]", line);
            break;
        }
        int32_t ia = bpe_token_id(m, a, al), ib = bpe_token_id(m, b, bl);
        if (ia < 0 || ib < 0) {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u uses a token not in the vocabulary: \"%.*s\"",
                        line, (int)(ia < 0 ? (al > 64 ? 64 : al) : (bl > 64 ? 64 : bl)), ia < 0 ? a : b);
            break;
        }
        /* the merged token drops prefix-length bytes of the right part (its continuing-subword
         * prefix), unchecked, as the reference does */
        size_t cut = m->prefix_len;
        if (bl < cut) {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u: right part shorter than the subword prefix",
                        line);
            break;
        }
        size_t need = al + bl - cut;
        if (need > cat_cap) {
            size_t nc = need * 2 + 64;
            char *np = realloc(cat, nc);
            if (!np) {
                st = hr_err(err, errlen, HR_ERR_NOMEM, "model: out of memory");
                break;
            }
            cat = np;
            cat_cap = nc;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b + cut, bl - cut);
        int32_t inew = bpe_token_id(m, cat, need);
        if (inew < 0) {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "model: merge %u makes \"%.*s\", not in the vocabulary", line,
                        (int)(need > 64 ? 64 : need), cat);
            break;
        }
        merge_insert(m, ia, ib, rank, inew);
        rank++;
    }
    free(cat);
    return st;
}

enum hr_status bpe_init_json(struct bpe *m, const struct tkjson *j, uint32_t node, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    enum hr_status st;
    if (node == TKJSON_NONE || tkjson_type(j, node) != TKJSON_TYPE_OBJECT)
        return hr_err(err, errlen, HR_ERR_FORMAT, "missing \"model\" object");
    uint32_t type = tkjson_get(j, node, "type");
    if (type != TKJSON_NONE && !tkjson_str_eq(j, type, "BPE")) {
        size_t tl = 0;
        const char *t = tkjson_str(j, type, &tl);
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "model type \"%.*s\" is not supported (only BPE)", (int)tl,
                      t ? t : "?");
    }
    uint32_t dropout = tkjson_get(j, node, "dropout");
    if (dropout != TKJSON_NONE && tkjson_type(j, dropout) != TKJSON_TYPE_NULL) {
        int64_t d;
        if (!(tkjson_int(j, dropout, &d) && d == 0) && !(tkjson_type(j, dropout) == TKJSON_TYPE_NUMBER &&
                                                        strtod(j->buf + j->nodes[dropout].off, NULL) == 0.0))
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "model: BPE dropout is not supported (not deterministic)");
    }
    m->fuse_unk = tkjson_bool(j, tkjson_get(j, node, "fuse_unk"), false);
    m->byte_fallback = tkjson_bool(j, tkjson_get(j, node, "byte_fallback"), false);
    m->ignore_merges = tkjson_bool(j, tkjson_get(j, node, "ignore_merges"), false);
    if ((st = opt_string(j, node, "continuing_subword_prefix", &m->prefix, &m->prefix_len, err, errlen)) != HR_OK)
        goto fail;
    if ((st = opt_string(j, node, "end_of_word_suffix", &m->suffix, &m->suffix_len, err, errlen)) != HR_OK)
        goto fail;
    if ((st = load_vocab(m, j, tkjson_get(j, node, "vocab"), err, errlen)) != HR_OK)
        goto fail;
    if ((st = load_merges(m, j, tkjson_get(j, node, "merges"), err, errlen)) != HR_OK)
        goto fail;
    char *unk;
    size_t unk_len;
    if ((st = opt_string(j, node, "unk_token", &unk, &unk_len, err, errlen)) != HR_OK)
        goto fail;
    if (unk) {
        m->unk_id = bpe_token_id(m, unk, unk_len);
        if (m->unk_id < 0)
            st = hr_err(err, errlen, HR_ERR_FORMAT, "model: unk_token \"%.*s\" is not in the vocabulary",
                        (int)(unk_len > 64 ? 64 : unk_len), unk);
        free(unk);
        if (st != HR_OK)
            goto fail;
    }
    m->char_id = malloc(BPE_CHAR_TABLE * sizeof *m->char_id);
    m->cache = cache_new();
    if (!m->char_id || !m->cache) {
        st = hr_err(err, errlen, HR_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    for (uint32_t cp = 0; cp < BPE_CHAR_TABLE; cp++) {
        uint8_t u[4];
        size_t n = utf8_encode(cp, u);
        m->char_id[cp] = bpe_token_id(m, (const char *)u, n);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_fallback_id[b] = bpe_token_id(m, name, 6);
    }
    return HR_OK;
fail:
    bpe_free(m);
    return st;
}

void bpe_free(struct bpe *m)
{
    if (!m)
        return;
    free(m->pool);
    free(m->tok_off);
    free(m->tok_len);
    free(m->vocab_slots);
    free(m->merge_slots);
    free(m->char_id);
    free(m->prefix);
    free(m->suffix);
    cache_free(m->cache);
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
}

void bpe_scratch_free(struct bpe_scratch *sc)
{
    if (!sc)
        return;
    free(sc->sym);
    free(sc->heap);
    free(sc->ids);
    free(sc->tmp);
    memset(sc, 0, sizeof *sc);
}

/* ------------------------------------------------------------- merging ---- */

static inline bool heap_less(const struct bpe_heap_item *a, const struct bpe_heap_item *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct bpe_heap_item *h, size_t *n, struct bpe_heap_item it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static struct bpe_heap_item heap_pop(struct bpe_heap_item *h, size_t *n)
{
    struct bpe_heap_item top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && heap_less(&h[c + 1], &h[c]))
            c++;
        if (!heap_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

/* Id of character ch (bytes c[0..cl)) with the prefix/suffix the model asks for, or -1. */
static int32_t char_token(const struct bpe *m, const char *c, size_t cl, bool first, bool last,
                          struct bpe_scratch *sc, bool *oom)
{
    bool pre = !first && m->prefix_len, suf = last && m->suffix_len;
    if (!pre && !suf) {
        if (cl <= 2) {
            uint32_t cp;
            utf8_decode((const uint8_t *)c, &cp);
            return m->char_id[cp];
        }
        return bpe_token_id(m, c, cl);
    }
    size_t n = (pre ? m->prefix_len : 0) + cl + (suf ? m->suffix_len : 0);
    if (!vec_reserve((void **)&sc->tmp, &sc->tmp_cap, n, 1, 64)) {
        *oom = true;
        return -1;
    }
    size_t o = 0;
    if (pre) {
        memcpy(sc->tmp, m->prefix, m->prefix_len);
        o = m->prefix_len;
    }
    memcpy(sc->tmp + o, c, cl);
    o += cl;
    if (suf)
        memcpy(sc->tmp + o, m->suffix, m->suffix_len);
    return bpe_token_id(m, sc->tmp, n);
}

static enum hr_status merge_word(const struct bpe *m, const char *w, size_t n, struct bpe_scratch *sc,
                                 size_t *n_out, char *err, size_t errlen)
{
    /* symbols: one per character (or per byte with byte_fallback), at most n of them */
    if (!vec_reserve((void **)&sc->sym, &sc->sym_cap, n + 1, sizeof *sc->sym, 64) ||
        !vec_reserve((void **)&sc->heap, &sc->heap_cap, 2 * n + 2, sizeof *sc->heap, 64) ||
        !vec_reserve((void **)&sc->ids, &sc->ids_cap, n + 1, sizeof *sc->ids, 64))
        return hr_err(err, errlen, HR_ERR_NOMEM, "bpe: out of memory");
    struct bpe_symbol *sym = sc->sym;
    int32_t ns = 0;
    int32_t unk_pending = 0; /* an unknown run waiting to be emitted (fuse_unk) */
    bool oom = false;
#define ADD_SYM(tid)                                                                                          \
    do {                                                                                                      \
        sym[ns] = (struct bpe_symbol){.id = (tid), .prev = ns - 1, .next = -1, .live = 1};                    \
        if (ns > 0)                                                                                           \
            sym[ns - 1].next = ns;                                                                            \
        ns++;                                                                                                 \
    } while (0)
    for (size_t i = 0; i < n;) {
        size_t cl;
        if (utf8_scan((const uint8_t *)w + i, n - i, &cl) != UTF8_SCAN_OK)
            return hr_err(err, errlen, HR_ERR_INTERNAL, "bpe: invalid UTF-8 inside a word");
        int32_t id = char_token(m, w + i, cl, i == 0, i + cl == n, sc, &oom);
        if (oom)
            return hr_err(err, errlen, HR_ERR_NOMEM, "bpe: out of memory");
        if (id >= 0) {
            if (unk_pending) {
                ADD_SYM(m->unk_id);
                unk_pending = 0;
            }
            ADD_SYM(id);
        } else {
            bool done = false;
            if (m->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < cl; k++)
                    all = all && m->byte_fallback_id[(uint8_t)w[i + k]] >= 0;
                if (all) {
                    /* the pending unknown stays pending, as in the reference */
                    for (size_t k = 0; k < cl; k++)
                        ADD_SYM(m->byte_fallback_id[(uint8_t)w[i + k]]);
                    done = true;
                }
            }
            if (!done && m->unk_id >= 0) {
                if (unk_pending && !m->fuse_unk)
                    ADD_SYM(m->unk_id);
                unk_pending = 1;
            }
            /* no unk token: the character is dropped */
        }
        i += cl;
    }
    if (unk_pending)
        ADD_SYM(m->unk_id);
#undef ADD_SYM
    /* merge by rank, lowest first, leftmost among equals; stale entries are skipped */
    struct bpe_heap_item *heap = sc->heap;
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        const struct bpe_merge_slot *mg = merge_find(m, sym[i].id, sym[i + 1].id);
        if (mg)
            heap_push(heap, &hn, (struct bpe_heap_item){mg->rank, (uint32_t)i, mg->new_id});
    }
    while (hn > 0) {
        struct bpe_heap_item top = heap_pop(heap, &hn);
        struct bpe_symbol *s = &sym[top.pos];
        if (!s->live || s->next < 0)
            continue;
        struct bpe_symbol *r = &sym[s->next];
        const struct bpe_merge_slot *cur = merge_find(m, s->id, r->id);
        if (!cur || cur->new_id != top.new_id)
            continue;
        s->id = top.new_id;
        r->live = 0;
        s->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = (int32_t)top.pos;
        if (hn + 2 > sc->heap_cap) {
            if (!vec_reserve((void **)&sc->heap, &sc->heap_cap, hn + 2, sizeof *sc->heap, 64))
                return hr_err(err, errlen, HR_ERR_NOMEM, "bpe: out of memory");
            heap = sc->heap;
        }
        if (s->prev >= 0) {
            const struct bpe_merge_slot *mg = merge_find(m, sym[s->prev].id, s->id);
            if (mg)
                heap_push(heap, &hn, (struct bpe_heap_item){mg->rank, (uint32_t)s->prev, mg->new_id});
        }
        if (s->next >= 0) {
            const struct bpe_merge_slot *mg = merge_find(m, s->id, sym[s->next].id);
            if (mg)
                heap_push(heap, &hn, (struct bpe_heap_item){mg->rank, top.pos, mg->new_id});
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i < ns; i++)
        if (sym[i].live)
            sc->ids[k++] = sym[i].id;
    *n_out = k;
    return HR_OK;
}

enum hr_status bpe_encode_word(const struct bpe *m, const char *w, size_t n, struct bpe_scratch *sc,
                               const int32_t **ids, size_t *n_out, char *err, size_t errlen)
{
    *n_out = 0;
    *ids = sc->ids;
    if (n == 0)
        return HR_OK;
    if (!vec_reserve((void **)&sc->ids, &sc->ids_cap, CACHE_IDS + 1, sizeof *sc->ids, 64))
        return hr_err(err, errlen, HR_ERR_NOMEM, "bpe: out of memory");
    *ids = sc->ids;
    if (m->ignore_merges) {
        int32_t id = bpe_token_id(m, w, n);
        if (id >= 0) {
            sc->ids[0] = id;
            *n_out = 1;
            return HR_OK;
        }
    }
    uint64_t h = 0;
    bool cacheable = n <= CACHE_WORD;
    if (cacheable) {
        h = str_hash(w, n);
        if (cache_get(m->cache, h, w, n, sc->ids, n_out))
            return HR_OK;
    }
    enum hr_status st = merge_word(m, w, n, sc, n_out, err, errlen);
    *ids = sc->ids;
    if (st == HR_OK && cacheable && *n_out <= CACHE_IDS)
        cache_put(m->cache, h, w, n, sc->ids, *n_out);
    return st;
}
