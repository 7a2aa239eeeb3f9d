/* Unicode normalizers of tokenizer.json: NFC, NFD, NFKC, NFKD and Sequence of them.
 * Tables are Unicode 9.0, the version Hugging Face tokenizers normalizes with
 * (tools/gen_unicode_tables.py explains why and how). */
#ifndef HEARTH_TOKENIZER_NORMALIZER_H
#define HEARTH_TOKENIZER_NORMALIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tkjson.h"

enum normalizer_form {
    NORMALIZER_FORM_NFC,
    NORMALIZER_FORM_NFD,
    NORMALIZER_FORM_NFKC,
    NORMALIZER_FORM_NFKD,
};

#define NORMALIZER_MAX_STEPS 8

struct normalizer {
    enum normalizer_form steps[NORMALIZER_MAX_STEPS]; /* [n_steps] applied in order */
    int n_steps;                                      /* 0: identity */
};

/* Per-call working memory (one per encoding call; not shared between threads). */
struct normalizer_scratch {
    uint32_t *cps;  /* [cps_cap] code points being normalized */
    size_t cps_cap;
    char *out[2];   /* [out_cap[k]] UTF-8 results, two to ping-pong between steps */
    size_t out_cap[2];
};

/* Reads the "normalizer" value of tokenizer.json (node may be TKJSON_NONE or a JSON null). */
enum hr_status normalizer_init_json(struct normalizer *nz, const struct tkjson *j, uint32_t node,
                                    char *err, size_t errlen);
/* Nothing to release today; kept so every init has its free. */
void normalizer_free(struct normalizer *nz);
/* Normalizes s[0..n) (valid UTF-8). *out points either at s (nothing changed) or into the
 * scratch, valid until the next call with the same scratch. */
enum hr_status normalizer_apply(const struct normalizer *nz, const char *s, size_t n,
                                struct normalizer_scratch *sc, const char **out, size_t *out_len,
                                char *err, size_t errlen);
void normalizer_scratch_free(struct normalizer_scratch *sc);

#endif
