/* Pre-tokenization: the "pre_tokenizer" of tokenizer.json. Supported: Split (regex or string
 * pattern, every delimiter behaviour, invert), ByteLevel (add_prefix_space, use_regex) and
 * Sequence of them. Regexes run with Oniguruma, the engine Hugging Face tokenizers uses. */
#ifndef HEARTH_TOKENIZER_PRETOK_H
#define HEARTH_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tkjson.h"

#define PRETOK_MAX_STEPS 8

enum pretok_kind {
    PRETOK_KIND_SPLIT,
    PRETOK_KIND_BYTE_LEVEL,
};

enum pretok_behavior {
    PRETOK_BEHAVIOR_REMOVED,
    PRETOK_BEHAVIOR_ISOLATED,
    PRETOK_BEHAVIOR_MERGED_WITH_PREVIOUS,
    PRETOK_BEHAVIOR_MERGED_WITH_NEXT,
    PRETOK_BEHAVIOR_CONTIGUOUS,
};

struct pretok_step {
    enum pretok_kind kind;
    void *re;                      /* regex_t*: Split pattern, or ByteLevel's GPT-2 regex */
    enum pretok_behavior behavior; /* Split */
    bool invert;                   /* Split */
    bool add_prefix_space;         /* ByteLevel */
    bool use_regex;                /* ByteLevel */
};

struct pretok {
    struct pretok_step steps[PRETOK_MAX_STEPS]; /* [n_steps] */
    int n_steps;
};

/* Per-call working memory, one level per step. */
struct pretok_scratch {
    struct {
        uint32_t *spans; /* [spans_cap] start, end, is_match triples */
        size_t spans_cap;
        char *buf;       /* [buf_cap] transformed text of this level */
        size_t buf_cap;
        char *pre;       /* [pre_cap] ByteLevel: the text with its prefix space */
        size_t pre_cap;
    } level[PRETOK_MAX_STEPS];
    void *region; /* OnigRegion* */
};


/* Reads the "pre_tokenizer" value (node may be TKJSON_NONE or null: no pre-tokenization). */
enum hr_status pretok_init_json(struct pretok *pt, const struct tkjson *j, uint32_t node, char *err, size_t errlen);
void pretok_free(struct pretok *pt);
/* Splits s[0..n) into words and passes each non-empty one (UTF-8, after any ByteLevel
 * mapping) to emit, in order; a status other than HR_OK from emit stops the run. */
enum hr_status pretok_run(const struct pretok *pt, const char *s, size_t n, struct pretok_scratch *sc,
                          enum hr_status (*emit)(void *ctx, const char *word, size_t len), void *ctx, char *err,
                          size_t errlen);
void pretok_scratch_free(struct pretok_scratch *sc);

/* ByteLevel alphabet: the code point that stands for byte b, and the inverse (-1: none). */
uint32_t pretok_byte_level_cp(uint8_t b);
int pretok_byte_level_byte(uint32_t cp);

/* Compiles pattern with Oniguruma (UTF-8, default syntax, as the onig crate does); *re is a
 * regex_t*. Thread-safe (compilation is serialized); searching a compiled regex is not locked. */
enum hr_status pretok_regex_compile(const char *pattern, size_t len, void **re, char *err, size_t errlen);
void pretok_regex_free(void *re);

#endif
