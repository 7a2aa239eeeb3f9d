/* Compiled grammars, cached by (kind, source text): a bounded LRU shared by every thread
 * that submits requests, plus the vocabulary the masks are computed over (built from the
 * tokenizer on the first constrained request).
 *
 * A lookup that misses compiles on the calling thread (the HTTP or CLI thread, as with
 * tokenization) without holding the cache lock; the engine thread never compiles. Entries
 * are refcounted: eviction drops the cache's reference, requests in flight keep theirs. */
#ifndef HEARTH_GRAMMAR_GRAMMAR_CACHE_H
#define HEARTH_GRAMMAR_GRAMMAR_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hearth.h>

#include "grammar/grammar_mask.h"
#include "grammar/vocab.h"

#define GRAMMAR_CACHE_ENTRIES 64
#define GRAMMAR_CACHE_BYTES ((size_t)512 << 20)
#define GRAMMAR_SOURCE_MAX_BYTES (256 * 1024) /* grammar, schema, regex or choice text at most */

struct tokenizer;

struct grammar_cache_entry {
    enum hearth_grammar_kind kind;
    char *text;                    /* [len] the source */
    size_t len;
    struct grammar_compiled *c;    /* one reference */
    int64_t used;                  /* last use */
};

struct grammar_cache {
    pthread_mutex_t mu;
    const struct tokenizer *tk;
    int n_vocab;
    struct grammar_vocab vocab;    /* built on first use */
    bool vocab_ready;
    struct grammar_cache_entry *e; /* [n] */
    int n, max_entries;
    size_t bytes, max_bytes;
    int64_t tick;
    int64_t hits, misses;
    int max_positions;             /* per grammar (0: GRAMMAR_MAX_POSITIONS) */
};

void grammar_cache_init(struct grammar_cache *c, const struct tokenizer *tk, int n_vocab, int max_entries,
                        size_t max_bytes);
void grammar_cache_free(struct grammar_cache *c);

/* The compiled grammar for (kind, text[0..len)): *out holds a reference the caller drops
 * with grammar_compiled_unref. Errors (syntax, unsupported keyword, limits) are
 * HR_ERR_INVALID with the message for the client. */
enum hr_status grammar_cache_get(struct grammar_cache *c, enum hearth_grammar_kind kind, const char *text,
                                 size_t len, struct grammar_compiled **out, char *err, size_t errlen);

/* GBNF of a constraint's source (malloc'd, the caller frees). */
enum hr_status grammar_source_to_gbnf(enum hearth_grammar_kind kind, const char *text, size_t len, char **gbnf,
                                      char *err, size_t errlen);

/* The vocabulary (built on first call), or NULL with err when it cannot be built. */
const struct grammar_vocab *grammar_cache_vocab(struct grammar_cache *c, char *err, size_t errlen);

#endif
