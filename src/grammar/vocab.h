/* The vocabulary as the masks see it: every token's raw bytes, sorted by bytes, with the
 * length of the prefix each shares with the one before (so a walk over sorted tokens
 * reuses the matcher states of a common prefix, as a walk down a byte trie would).
 *
 * Which tokens take part: those with at least one byte that are not special added tokens
 * (<|im_end|>, <|endoftext|>, ...). Special tokens never match a grammar; the stop tokens
 * among them are allowed by the mask only where the grammar may end. Ids in the model's
 * vocabulary beyond the tokenizer's (padding rows of the embedding) are never allowed. */
#ifndef HEARTH_GRAMMAR_VOCAB_H
#define HEARTH_GRAMMAR_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tokenizer;

struct grammar_vocab {
    int n_vocab;          /* mask width: the model's vocabulary size */
    int n_tok;            /* tokens that take part */
    int32_t *ids;         /* [n_tok] token ids in byte order */
    uint32_t *off;        /* [n_tok] offset of each one's bytes in pool */
    uint16_t *len;        /* [n_tok] byte length */
    uint16_t *lcp;        /* [n_tok] bytes shared with the previous sorted token (0 for the first) */
    uint8_t *pool;        /* the bytes */
    int32_t *rank;        /* [n_vocab] sorted index of each id, -1 when it does not take part */
    int max_len;
};

/* From explicit byte strings: token i has bytes[i][0..lens[i]) (NULL or skip[i]: left out). */
enum hr_status grammar_vocab_init(struct grammar_vocab *v, int n_vocab, const char *const *bytes,
                                  const size_t *lens, const bool *skip, char *err, size_t errlen);
/* From a tokenizer, for a model vocabulary of n_vocab ids. */
enum hr_status grammar_vocab_from_tokenizer(struct grammar_vocab *v, const struct tokenizer *tk, int n_vocab,
                                            char *err, size_t errlen);
void grammar_vocab_free(struct grammar_vocab *v);

static inline const uint8_t *grammar_vocab_bytes(const struct grammar_vocab *v, int k)
{
    return v->pool + v->off[k];
}

#endif
