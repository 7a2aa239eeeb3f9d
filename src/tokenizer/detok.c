/* Decoding ids to text, whole (tokenizer_decode) or streamed (struct detok). */
#include "tokenizer/detok.h"

#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/utf8.h"

static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

/* Copies the valid characters of s[0..n) to out, U+FFFD for each maximal invalid subpart.
 * With hold, an incomplete sequence at the end is left out and its length returned in *held;
 * without, it becomes one U+FFFD. Returns the bytes written (at most 3 * n); with out NULL,
 * only counts them. */
static size_t lossy_copy(const uint8_t *s, size_t n, bool hold, size_t *held, uint8_t *out)
{
    size_t o = 0, i = 0;
    *held = 0;
    while (i < n) {
        size_t len;
        enum utf8_scan r = utf8_scan(s + i, n - i, &len);
        if (r == UTF8_SCAN_OK) {
            if (out)
                memcpy(out + o, s + i, len);
            o += len;
        } else if (r == UTF8_SCAN_INCOMPLETE && hold) {
            *held = len;
            return o;
        } else {
            if (out)
                memcpy(out + o, REPLACEMENT, 3);
            o += 3;
        }
        i += len;
    }
    return o;
}

/* ------------------------------------------------------------ whole decode ---- */

enum hr_status tokenizer_decode(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                                char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= tk->vocab_size)
            return hr_err(err, errlen, HR_ERR_INVALID, "token id %d at position %zu is outside the vocabulary (%d)",
                          id, k, tk->vocab_size);
        if (tk->dec_off[id] != UINT32_MAX && !(skip_special && tk->special[id]))
            total += tk->dec_len[id] + 1;
    }
    uint8_t *bytes = malloc(total + 1);
    uint8_t *text = malloc(3 * total + 1);
    if (!bytes || !text) {
        free(bytes);
        free(text);
        return hr_err(err, errlen, HR_ERR_NOMEM, "decode: out of memory");
    }
    size_t b = 0;
    bool first = true;
    for (size_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (tk->dec_off[id] == UINT32_MAX || (skip_special && tk->special[id]))
            continue;
        if (tk->decoder == TOKENIZER_DECODER_NONE && !first)
            bytes[b++] = ' ';
        memcpy(bytes + b, tk->dec_pool + tk->dec_off[id], tk->dec_len[id]);
        b += tk->dec_len[id];
        first = false;
    }
    size_t held;
    size_t o = lossy_copy(bytes, b, false, &held, text);
    free(bytes);
    text[o] = 0;
    *out = (char *)text;
    *len = o;
    return HR_OK;
}

/* -------------------------------------------------------------- streaming ---- */

enum hr_status detok_init(struct detok *d, const struct tokenizer *tk, bool skip_special, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (!tk || !tk->dec_off)
        return hr_err(err, errlen, HR_ERR_INVALID, "detok: no tokenizer loaded");
    d->tk = tk;
    d->skip_special = skip_special;
    return HR_OK;
}

void detok_free(struct detok *d)
{
    if (d)
        memset(d, 0, sizeof *d);
}

size_t detok_max_output(const struct tokenizer *tk)
{
    /* held bytes + separator + token, each byte possibly a U+FFFD */
    return 3 * (tk->max_token_bytes + 5) + 1;
}

enum hr_status detok_push(struct detok *d, int32_t id, char *out, size_t cap, size_t *n_out)
{
    const struct tokenizer *tk = d->tk;
    *n_out = 0;
    if (!tk || id < 0 || id >= tk->vocab_size)
        return HR_ERR_INVALID;
    if (tk->dec_off[id] == UINT32_MAX || (d->skip_special && tk->special[id]))
        return HR_OK;
    /* gather held bytes + token, then emit all but an incomplete tail; the tail fits in
     * pending because an incomplete sequence is at most 3 bytes */
    size_t tl = tk->dec_len[id];
    uint8_t stackbuf[256];
    size_t need = d->n_pending + 1 + tl;
    uint8_t *buf = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!buf)
        return HR_ERR_NOMEM;
    size_t b = 0;
    memcpy(buf, d->pending, d->n_pending);
    b = d->n_pending;
    if (tk->decoder == TOKENIZER_DECODER_NONE && d->started)
        buf[b++] = ' ';
    memcpy(buf + b, tk->dec_pool + tk->dec_off[id], tl);
    b += tl;
    size_t held;
    if (lossy_copy(buf, b, true, &held, NULL) > cap) {
        if (buf != stackbuf)
            free(buf);
        return HR_ERR_INVALID;
    }
    size_t o = lossy_copy(buf, b, true, &held, (uint8_t *)out);
    memcpy(d->pending, buf + b - held, held);
    d->n_pending = held;
    d->started = true;
    if (buf != stackbuf)
        free(buf);
    *n_out = o;
    return HR_OK;
}

enum hr_status detok_flush(struct detok *d, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    if (d->n_pending && cap < 3)
        return HR_ERR_INVALID;
    size_t held;
    *n_out = lossy_copy(d->pending, d->n_pending, false, &held, (uint8_t *)out);
    d->n_pending = 0;
    d->started = false;
    return HR_OK;
}
