/* Added tokens ("added_tokens" of tokenizer.json): special or not, found in the text before
 * pre-tokenization by leftmost-longest matching, honouring lstrip / rstrip / single_word /
 * normalized the way Hugging Face tokenizers' AddedVocabulary does (ids are assigned the same
 * way too: a content already in the vocabulary keeps its id). Read-only after init. */
#ifndef HEARTH_TOKENIZER_ADDED_VOCAB_H
#define HEARTH_TOKENIZER_ADDED_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tkjson.h"

struct added_vocab_token {
    char *content; /* [len] */
    size_t len;
    char *form;    /* [form_len] what the id decodes to: content, normalized when normalized is set */
    size_t form_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
};

struct added_vocab_trie {
    struct added_vocab_trie_node *nodes; /* [n_nodes], node 0 is the root */
    uint32_t n_nodes;
    struct added_vocab_trie_edge *edges; /* [edge_mask + 1] hash of (node, byte) -> child */
    uint32_t edge_mask;
    bool first[256]; /* bytes that start some pattern */
};

/* A piece of text between matches (id < 0) or a matched token (start..end may include
 * stripped spaces, and may overlap the previous piece after an rstrip, as in the reference). */
struct added_vocab_segment {
    uint32_t start, end;
    int32_t id;
};

struct added_vocab {
    struct added_vocab_token *by_id; /* [n] sorted by id, one per id: what it decodes to; its flags rule matching */
    int n;
    char **special;                  /* [n_special] contents of the special tokens */
    size_t *special_len;             /* [n_special] */
    int n_special;
    struct added_vocab_trie raw;     /* patterns matched on the text as given */
    struct added_vocab_trie norm;    /* normalized patterns, matched after normalization */
    void *re_word;                   /* regex_t*: one \w character (single_word) */
    void *re_space;                  /* regex_t*: one \s character (lstrip/rstrip) */
};

/* Reads "added_tokens" (node may be TKJSON_NONE); ids resolve against model m; contents of
 * normalized tokens are normalized with nz to build their patterns. */
enum hr_status added_vocab_init_json(struct added_vocab *av, const struct tkjson *j, uint32_t node,
                                     const struct bpe *m, const struct normalizer *nz, char *err, size_t errlen);
void added_vocab_free(struct added_vocab *av);

/* The added token with this id, or NULL. */
const struct added_vocab_token *added_vocab_by_id(const struct added_vocab *av, int32_t id);
/* Id of the added token with this content, or -1. */
int32_t added_vocab_id(const struct added_vocab *av, const char *s, size_t n);
/* Whether decoding with skip_special drops id: its decoded form is a special token's content. */
bool added_vocab_is_special(const struct added_vocab *av, int32_t id);

/* Splits s[0..n) with the raw (normalized = false) or normalized patterns into *segs (a
 * growable array, *cap entries); sets *n_segs. An empty s gives no segments. */
enum hr_status added_vocab_split(const struct added_vocab *av, bool normalized, const char *s, size_t n,
                                 struct added_vocab_segment **segs, size_t *cap, size_t *n_segs, char *err,
                                 size_t errlen);

#endif
