/* The tokenizer: Hugging Face tokenizer.json (BPE model, byte-level), encoding and decoding
 * exactly as Hugging Face tokenizers does.
 *
 * Encoding: added tokens are found in the raw text first; the rest is normalized (NFC...),
 * searched again for normalized added tokens, pre-tokenized (Split regex with Oniguruma,
 * ByteLevel) and merged by the BPE model; a TemplateProcessing post-processor, when present,
 * adds its special tokens. The file's "truncation" and "padding" are ignored (as transformers
 * does); other component types than these are refused at load with HR_ERR_UNSUPPORTED.
 *
 * Threads: after tokenizer_init, every function here may be called from many threads at
 * once on the same tokenizer (the only shared mutable state, the word cache, is locked). */
#ifndef HEARTH_TOKENIZER_TOKENIZER_H
#define HEARTH_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretok.h"

/* A growable id buffer owned by the caller: zero-initialize it, reuse it, free it. */
struct tokenizer_ids {
    int32_t *ids; /* [cap], the first n in use */
    size_t n;
    size_t cap;
};

enum tokenizer_decoder {
    TOKENIZER_DECODER_NONE,       /* tokens joined with spaces */
    TOKENIZER_DECODER_BYTE_LEVEL, /* ByteLevel alphabet back to bytes */
};

struct tokenizer {
    struct bpe model;
    struct normalizer normalizer;
    struct pretok pretok;
    struct added_vocab added;
    enum tokenizer_decoder decoder;
    int32_t *post_prefix; /* [n_post_prefix] ids the post-processor puts before the text */
    size_t n_post_prefix;
    int32_t *post_suffix; /* [n_post_suffix] ids it puts after */
    size_t n_post_suffix;
    int32_t vocab_size;   /* max id + 1 over the model and the added tokens */
    char *dec_pool;       /* [dec_pool_len] each id's decoded bytes, back to back */
    size_t dec_pool_len;
    uint32_t *dec_off;    /* [vocab_size] offset into dec_pool; UINT32_MAX: no token */
    uint32_t *dec_len;    /* [vocab_size] */
    uint8_t *special;     /* [vocab_size] 1: a special added token (skipped by skip_special) */
    size_t max_token_bytes;
};

/* Loads path (a tokenizer.json). */
enum hr_status tokenizer_init(struct tokenizer *tk, const char *path, char *err, size_t errlen);
/* Loads a tokenizer.json held in memory. */
enum hr_status tokenizer_init_json(struct tokenizer *tk, const char *json, size_t len, char *err, size_t errlen);
void tokenizer_free(struct tokenizer *tk);

/* Appends the ids of text[0..len) to out, as Hugging Face encode(text) does (special tokens of
 * the post-processor included). Invalid UTF-8: HR_ERR_INVALID naming the byte offset; out is
 * then left as it was. */
enum hr_status tokenizer_encode(const struct tokenizer *tk, const char *text, size_t len, struct tokenizer_ids *out,
                                char *err, size_t errlen);
/* Same, choosing whether the post-processor adds its special tokens (add_special_tokens). */
enum hr_status tokenizer_encode_ex(const struct tokenizer *tk, const char *text, size_t len, bool add_special,
                                   struct tokenizer_ids *out, char *err, size_t errlen);
/* Same, stopping with HR_ERR_FULL as soon as the text gives more than max_ids ids (0: no
 * bound), so the work on a long text is bounded by what the caller can use. */
enum hr_status tokenizer_encode_max(const struct tokenizer *tk, const char *text, size_t len, bool add_special,
                                    size_t max_ids, struct tokenizer_ids *out, char *err, size_t errlen);
void tokenizer_ids_free(struct tokenizer_ids *ids);
enum hr_status tokenizer_ids_push(struct tokenizer_ids *ids, int32_t id, char *err, size_t errlen);

/* Offset of the first byte of s that is not part of valid UTF-8 (n when s is valid). */
size_t tokenizer_utf8_valid_prefix(const char *s, size_t n);

/* Decodes ids to a malloc'd NUL-terminated string (*len excludes the NUL), as Hugging Face
 * decode(ids, skip_special_tokens) does: invalid UTF-8 becomes U+FFFD. An id outside
 * [0, vocab_size) is HR_ERR_INVALID; an id inside it that names no token is skipped. */
enum hr_status tokenizer_decode(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                                char **out, size_t *len, char *err, size_t errlen);

/* Id of a token given by its vocabulary string (added tokens first), or -1. */
int32_t tokenizer_token_id(const struct tokenizer *tk, const char *token);
/* Vocabulary string of id ("Ġworld", "<|im_end|>"), or NULL. */
const char *tokenizer_token_str(const struct tokenizer *tk, int32_t id, size_t *len);
/* Bytes id decodes to on its own (may be part of a UTF-8 character), or NULL. */
const char *tokenizer_token_bytes(const struct tokenizer *tk, int32_t id, size_t *len);
bool tokenizer_id_is_special(const struct tokenizer *tk, int32_t id);
int32_t tokenizer_vocab_size(const struct tokenizer *tk);

/* The streaming detokenizer belongs to the same API. */
#include "tokenizer/detok.h"

#endif
