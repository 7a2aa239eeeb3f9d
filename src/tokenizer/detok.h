/* Streaming detokenizer: feed ids one at a time, get text that never ends in half a UTF-8
 * character. Bytes of an incomplete character are held until they complete; a sequence that
 * can no longer become valid is emitted as U+FFFD, exactly where a whole decode (Hugging Face
 * decode, Rust's from_utf8_lossy) puts it, so the concatenated output equals tokenizer_decode.
 * One detok per stream; it holds no heap memory. */
#ifndef HEARTH_TOKENIZER_DETOK_H
#define HEARTH_TOKENIZER_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tokenizer;

struct detok {
    const struct tokenizer *tk;
    bool skip_special;
    bool started;       /* a token was emitted (the space-joining decoder needs it) */
    uint8_t pending[4]; /* [n_pending] start of an incomplete character */
    size_t n_pending;
};

/* skip_special: leave out special added tokens, as decode(skip_special_tokens) does. */
enum hr_status detok_init(struct detok *d, const struct tokenizer *tk, bool skip_special, char *err, size_t errlen);
void detok_free(struct detok *d);
/* Output room that is always enough for one detok_push or detok_flush. */
size_t detok_max_output(const struct tokenizer *tk);
/* Adds token id; writes the text now complete to out[0..*n_out) (not NUL-terminated).
 * HR_ERR_INVALID, state unchanged and nothing written: an id outside the vocabulary, or cap
 * too small for this token's text (the status alone: these are the caller's bugs). */
enum hr_status detok_push(struct detok *d, int32_t id, char *out, size_t cap, size_t *n_out);
/* Ends the stream: held bytes come out as one U+FFFD (needs cap >= 3 then). The detok is
 * then empty, ready for a new stream. */
enum hr_status detok_flush(struct detok *d, char *out, size_t cap, size_t *n_out);

#endif
