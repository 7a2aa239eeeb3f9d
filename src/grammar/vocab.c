#define _GNU_SOURCE
/* The sorted token list of the masks. */
#include "grammar/vocab.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

void grammar_vocab_free(struct grammar_vocab *v)
{
    if (!v)
        return;
    free(v->ids);
    free(v->off);
    free(v->len);
    free(v->lcp);
    free(v->pool);
    free(v->rank);
    memset(v, 0, sizeof *v);
}

static int cmp_tok(const void *a, const void *b, void *arg)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const struct grammar_vocab *v = arg;
    size_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->pool + v->off[x], v->pool + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

enum hr_status grammar_vocab_init(struct grammar_vocab *v, int n_vocab, const char *const *bytes,
                                  const size_t *lens, const bool *skip, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    size_t total = 0;
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!bytes[i] || lens[i] == 0 || (skip && skip[i]))
            continue;
        if (lens[i] > 1024)
            return hr_err(err, errlen, HR_ERR_INVALID, "vocabulary: token %d has %zu bytes (at most 1024)", i,
                          lens[i]);
        total += lens[i];
        n++;
    }
    v->n_vocab = n_vocab;
    v->n_tok = n;
    /* Indexed by id while sorting, then permuted into byte order. */
    uint32_t *off_id = malloc(((size_t)n_vocab + 1) * sizeof *off_id);
    uint16_t *len_id = malloc(((size_t)n_vocab + 1) * sizeof *len_id);
    v->ids = malloc(((size_t)n + 1) * sizeof *v->ids);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->len = malloc(((size_t)n + 1) * sizeof *v->len);
    v->lcp = malloc(((size_t)n + 1) * sizeof *v->lcp);
    v->pool = malloc(total + 1);
    v->rank = malloc(((size_t)n_vocab + 1) * sizeof *v->rank);
    if (!off_id || !len_id || !v->ids || !v->off || !v->len || !v->lcp || !v->pool || !v->rank) {
        free(off_id);
        free(len_id);
        grammar_vocab_free(v);
        return hr_err(err, errlen, HR_ERR_NOMEM, "vocabulary: out of memory");
    }
    size_t at = 0;
    int k = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->rank[i] = -1;
        off_id[i] = 0;
        len_id[i] = 0;
        if (!bytes[i] || lens[i] == 0 || (skip && skip[i]))
            continue;
        memcpy(v->pool + at, bytes[i], lens[i]);
        off_id[i] = (uint32_t)at;
        len_id[i] = (uint16_t)lens[i];
        at += lens[i];
        v->ids[k++] = i;
    }
    /* cmp_tok reads off/len by id: point them at the by-id arrays for the sort. */
    uint32_t *off_sorted = v->off;
    uint16_t *len_sorted = v->len;
    v->off = off_id;
    v->len = len_id;
    qsort_r(v->ids, (size_t)n, sizeof *v->ids, cmp_tok, v);
    v->off = off_sorted;
    v->len = len_sorted;
    v->max_len = 0;
    for (int j = 0; j < n; j++) {
        int32_t id = v->ids[j];
        v->off[j] = off_id[id];
        v->len[j] = len_id[id];
        v->rank[id] = j;
        if (v->len[j] > v->max_len)
            v->max_len = v->len[j];
        int l = 0;
        if (j > 0) {
            int m = v->len[j] < v->len[j - 1] ? v->len[j] : v->len[j - 1];
            const uint8_t *a = v->pool + v->off[j], *b = v->pool + v->off[j - 1];
            while (l < m && a[l] == b[l])
                l++;
        }
        v->lcp[j] = (uint16_t)l;
    }
    free(off_id);
    free(len_id);
    return HR_OK;
}

enum hr_status grammar_vocab_from_tokenizer(struct grammar_vocab *v, const struct tokenizer *tk, int n_vocab,
                                            char *err, size_t errlen)
{
    const char **bytes = calloc((size_t)n_vocab + 1, sizeof *bytes);
    size_t *lens = calloc((size_t)n_vocab + 1, sizeof *lens);
    bool *skip = calloc((size_t)n_vocab + 1, sizeof *skip);
    if (!bytes || !lens || !skip) {
        free(bytes);
        free(lens);
        free(skip);
        return hr_err(err, errlen, HR_ERR_NOMEM, "vocabulary: out of memory");
    }
    int tv = tokenizer_vocab_size(tk);
    for (int i = 0; i < n_vocab && i < tv; i++) {
        bytes[i] = tokenizer_token_bytes(tk, i, &lens[i]);
        skip[i] = tokenizer_id_is_special(tk, i);
    }
    enum hr_status st = grammar_vocab_init(v, n_vocab, bytes, lens, skip, err, errlen);
    free(bytes);
    free(lens);
    free(skip);
    return st;
}
