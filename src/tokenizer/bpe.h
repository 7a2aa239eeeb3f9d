/* The BPE model of tokenizer.json: vocabulary, merges and ranks, merging, a word cache.
 * Read-only after init except the word cache, which is sharded and locked: bpe_encode_word
 * may run on many threads at once. */
#ifndef HEARTH_TOKENIZER_BPE_H
#define HEARTH_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tkjson.h"

struct bpe_cache;

struct bpe_vocab_slot {
    uint32_t tag; /* high bits of the hash */
    uint32_t id1; /* id + 1; 0: empty */
};

struct bpe_merge_slot {
    uint64_t key;   /* left id << 32 | right id; UINT64_MAX: empty */
    uint32_t rank;  /* line number in "merges" */
    int32_t new_id; /* id of the merged token */
};

struct bpe {
    char *pool;                        /* [pool_len] every token's bytes, back to back */
    size_t pool_len;
    uint32_t *tok_off;                 /* [n_ids] offset into pool; UINT32_MAX: no such id */
    uint32_t *tok_len;                 /* [n_ids] */
    int32_t n_ids;                     /* max id + 1 */
    int32_t vocab_size;                /* entries in "vocab" */
    struct bpe_vocab_slot *vocab_slots; /* [vocab_mask + 1] token bytes -> id */
    uint32_t vocab_mask;
    struct bpe_merge_slot *merge_slots; /* [merge_mask + 1] (left, right) -> rank, new id */
    uint32_t merge_mask;
    int32_t *char_id;                  /* [2048] id of the one-character token for code points < 2048, or -1 */
    char *prefix;                      /* continuing_subword_prefix (may be empty) */
    size_t prefix_len;
    char *suffix;                      /* end_of_word_suffix (may be empty) */
    size_t suffix_len;
    int32_t unk_id;                    /* -1: no unk_token */
    bool fuse_unk;
    bool byte_fallback;
    bool ignore_merges;
    int32_t byte_fallback_id[256];     /* ids of "<0xXX>" tokens, -1 when absent */
    struct bpe_cache *cache;           /* word -> ids, locked shards */
};

/* Per-call working memory. */
struct bpe_scratch {
    struct bpe_symbol *sym; /* [sym_cap] */
    size_t sym_cap;
    struct bpe_heap_item *heap; /* [heap_cap] */
    size_t heap_cap;
    int32_t *ids; /* [ids_cap] result of the last word */
    size_t ids_cap;
    char *tmp; /* [tmp_cap] prefixed/suffixed characters */
    size_t tmp_cap;
};

/* Reads the "model" object (type BPE). */
enum hr_status bpe_init_json(struct bpe *m, const struct tkjson *j, uint32_t node, char *err, size_t errlen);
void bpe_free(struct bpe *m);

/* Id of the token with these bytes, or -1. */
int32_t bpe_token_id(const struct bpe *m, const char *s, size_t n);
/* Bytes of token id, or NULL. */
const char *bpe_token_str(const struct bpe *m, int32_t id, size_t *len);

/* Tokenizes one word; *ids (n_out of them) stay valid until the next call with sc. */
enum hr_status bpe_encode_word(const struct bpe *m, const char *w, size_t n, struct bpe_scratch *sc,
                               const int32_t **ids, size_t *n_out, char *err, size_t errlen);
void bpe_scratch_free(struct bpe_scratch *sc);

/* Statistics of the word cache since init: lookups and hits (for benchmarks). */
void bpe_cache_stats(const struct bpe *m, uint64_t *lookups, uint64_t *hits);

#endif
