/* Tokenizer: loading tokenizer.json and the encoding pipeline. Decoding is in detok.c. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "tokenizer/tkjson.h"
#include "tokenizer/utf8.h"

#define TOKENIZER_MAX_FILE (1u << 30)

/* ------------------------------------------------------------- ids ---- */

void tokenizer_ids_free(struct tokenizer_ids *ids)
{
    if (!ids)
        return;
    free(ids->ids);
    memset(ids, 0, sizeof *ids);
}

static bool ids_reserve(struct tokenizer_ids *ids, size_t extra)
{
    if (ids->n + extra <= ids->cap)
        return true;
    size_t c = ids->cap ? ids->cap : 64;
    while (c < ids->n + extra)
        c *= 2;
    int32_t *p = realloc(ids->ids, c * sizeof *p);
    if (!p)
        return false;
    ids->ids = p;
    ids->cap = c;
    return true;
}

enum hr_status tokenizer_ids_push(struct tokenizer_ids *ids, int32_t id, char *err, size_t errlen)
{
    if (!ids_reserve(ids, 1))
        return hr_err(err, errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    ids->ids[ids->n++] = id;
    return HR_OK;
}

size_t tokenizer_utf8_valid_prefix(const char *s, size_t n) { return utf8_valid_prefix((const uint8_t *)s, n); }

/* ------------------------------------------------------------ loading ---- */

static enum hr_status load_post_processor(struct tokenizer *tk, const struct tkjson *j, uint32_t node, int depth,
                                          char *err, size_t errlen)
{
    if (node == TKJSON_NONE || tkjson_type(j, node) == TKJSON_TYPE_NULL)
        return HR_OK;
    if (depth > 4 || tkjson_type(j, node) != TKJSON_TYPE_OBJECT)
        return hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: expected an object");
    uint32_t type = tkjson_get(j, node, "type");
    if (tkjson_str_eq(j, type, "ByteLevel"))
        return HR_OK; /* only trims offsets, which hearth does not report */
    if (tkjson_str_eq(j, type, "Sequence")) {
        uint32_t arr = tkjson_get(j, node, "processors");
        for (uint32_t c = tkjson_first(j, arr); c != TKJSON_NONE; c = tkjson_next(j, arr, c)) {
            enum hr_status st = load_post_processor(tk, j, c, depth + 1, err, errlen);
            if (st != HR_OK)
                return st;
        }
        return HR_OK;
    }
    if (!tkjson_str_eq(j, type, "TemplateProcessing")) {
        size_t tl = 0;
        const char *t = tkjson_str(j, type, &tl);
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "post_processor type \"%.*s\" is not supported", (int)tl,
                      t ? t : "?");
    }
    if (tk->n_post_prefix || tk->n_post_suffix)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "post_processor: more than one TemplateProcessing");
    /* the "single" template: special tokens around sequence A */
    uint32_t single = tkjson_get(j, node, "single"), specials = tkjson_get(j, node, "special_tokens");
    if (single == TKJSON_NONE || tkjson_type(j, single) != TKJSON_TYPE_ARRAY)
        return hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: TemplateProcessing without \"single\"");
    bool seen_a = false; /* ids before sequence A are a prefix, after it a suffix */
    for (uint32_t it = tkjson_first(j, single); it != TKJSON_NONE; it = tkjson_next(j, single, it)) {
        uint32_t sp = tkjson_get(j, tkjson_get(j, it, "SpecialToken"), "id");
        if (sp != TKJSON_NONE) {
            size_t nl;
            const char *name = tkjson_str(j, sp, &nl);
            uint32_t def = TKJSON_NONE;
            for (uint32_t k = tkjson_first(j, specials); k != TKJSON_NONE; k = tkjson_next(j, specials, k)) {
                size_t kl;
                const char *ks = tkjson_str(j, k, &kl);
                if (name && ks && kl == nl && !memcmp(ks, name, nl))
                    def = k + 1;
            }
            uint32_t ids = tkjson_get(j, def, "ids");
            if (!name || ids == TKJSON_NONE || tkjson_type(j, ids) != TKJSON_TYPE_ARRAY)
                return hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: special token without ids");
            for (uint32_t e = tkjson_first(j, ids); e != TKJSON_NONE; e = tkjson_next(j, ids, e)) {
                int64_t v;
                if (!tkjson_int(j, e, &v) || v < 0 || v > INT32_MAX)
                    return hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: bad id");
                int32_t **arr = seen_a ? &tk->post_suffix : &tk->post_prefix;
                size_t *n = seen_a ? &tk->n_post_suffix : &tk->n_post_prefix;
                int32_t *p = realloc(*arr, (*n + 1) * sizeof *p);
                if (!p)
                    return hr_err(err, errlen, HR_ERR_NOMEM, "post_processor: out of memory");
                p[(*n)++] = (int32_t)v;
                *arr = p;
            }
        } else if (tkjson_get(j, it, "Sequence") != TKJSON_NONE) {
            seen_a = true;
        } else {
            return hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: bad template item");
        }
    }
    return HR_OK;
}

static enum hr_status load_decoder(struct tokenizer *tk, const struct tkjson *j, uint32_t node, char *err,
                                   size_t errlen)
{
    tk->decoder = TOKENIZER_DECODER_NONE;
    if (node == TKJSON_NONE || tkjson_type(j, node) == TKJSON_TYPE_NULL)
        return HR_OK;
    uint32_t type = tkjson_get(j, node, "type");
    if (tkjson_str_eq(j, type, "ByteLevel")) {
        tk->decoder = TOKENIZER_DECODER_BYTE_LEVEL;
        return HR_OK;
    }
    size_t tl = 0;
    const char *t = tkjson_str(j, type, &tl);
    return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "decoder type \"%.*s\" is not supported", (int)tl, t ? t : "?");
}

/* Decoded bytes of a token under the decoder: ByteLevel characters back to bytes, or the
 * token's own bytes when one of its characters is outside the alphabet (as the reference). */
static size_t decode_token(const struct tokenizer *tk, const char *s, size_t n, char *out)
{
    if (tk->decoder == TOKENIZER_DECODER_BYTE_LEVEL) {
        size_t o = 0;
        bool ok = true;
        for (size_t i = 0; i < n && ok;) {
            uint32_t cp;
            size_t cl;
            if (utf8_scan((const uint8_t *)s + i, n - i, &cl) != UTF8_SCAN_OK) {
                ok = false;
                break;
            }
            utf8_decode((const uint8_t *)s + i, &cp);
            int b = pretok_byte_level_byte(cp);
            if (b < 0)
                ok = false;
            else
                out[o++] = (char)b;
            i += cl;
        }
        if (ok)
            return o;
    }
    memcpy(out, s, n);
    return n;
}

static enum hr_status build_decode_table(struct tokenizer *tk, char *err, size_t errlen)
{
    size_t n = (size_t)tk->vocab_size, total = 0;
    tk->dec_off = malloc((n + 1) * sizeof *tk->dec_off);
    tk->dec_len = calloc(n + 1, sizeof *tk->dec_len);
    if (!tk->dec_off || !tk->dec_len)
        return hr_err(err, errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t id = 0; id < n; id++) {
        size_t len;
        if (tokenizer_token_str(tk, (int32_t)id, &len))
            total += len;
    }
    tk->dec_pool = malloc(total + 1);
    if (!tk->dec_pool)
        return hr_err(err, errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    size_t off = 0;
    tk->max_token_bytes = 0;
    for (size_t id = 0; id < n; id++) {
        size_t len;
        const char *s = tokenizer_token_str(tk, (int32_t)id, &len);
        if (!s) {
            tk->dec_off[id] = UINT32_MAX;
            continue;
        }
        size_t d = decode_token(tk, s, len, tk->dec_pool + off);
        tk->dec_off[id] = (uint32_t)off;
        tk->dec_len[id] = (uint32_t)d;
        if (d > tk->max_token_bytes)
            tk->max_token_bytes = d;
        off += d;
    }
    tk->dec_pool_len = off;
    tk->special = calloc(n + 1, 1);
    if (!tk->special)
        return hr_err(err, errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    for (int k = 0; k < tk->added.n; k++)
        tk->special[tk->added.by_id[k].id] = added_vocab_is_special(&tk->added, tk->added.by_id[k].id);
    return HR_OK;
}

static enum hr_status load(struct tokenizer *tk, char *buf, size_t len, char *err, size_t errlen)
{
    struct tkjson j;
    enum hr_status st = tkjson_parse(&j, buf, len, err, errlen);
    if (st != HR_OK)
        return st;
    if (tkjson_type(&j, 0) != TKJSON_TYPE_OBJECT) {
        st = hr_err(err, errlen, HR_ERR_FORMAT, "tokenizer.json: the top level is not an object");
        goto done;
    }
    uint32_t ver = tkjson_get(&j, 0, "version");
    if (ver != TKJSON_NONE && !tkjson_str_eq(&j, ver, "1.0")) {
        st = hr_err(err, errlen, HR_ERR_UNSUPPORTED, "tokenizer.json: unknown version (expected \"1.0\")");
        goto done;
    }
    /* "truncation" and "padding" are ignored: transformers turns both off before encoding unless
     * a caller asks, and a server must neither cut nor pad a prompt behind its back */
    if ((st = normalizer_init_json(&tk->normalizer, &j, tkjson_get(&j, 0, "normalizer"), err, errlen)) != HR_OK)
        goto done;
    if ((st = bpe_init_json(&tk->model, &j, tkjson_get(&j, 0, "model"), err, errlen)) != HR_OK)
        goto done;
    if ((st = added_vocab_init_json(&tk->added, &j, tkjson_get(&j, 0, "added_tokens"), &tk->model, &tk->normalizer,
                                    err, errlen)) != HR_OK)
        goto done;
    if ((st = pretok_init_json(&tk->pretok, &j, tkjson_get(&j, 0, "pre_tokenizer"), err, errlen)) != HR_OK)
        goto done;
    if ((st = load_decoder(tk, &j, tkjson_get(&j, 0, "decoder"), err, errlen)) != HR_OK)
        goto done;
    if ((st = load_post_processor(tk, &j, tkjson_get(&j, 0, "post_processor"), 0, err, errlen)) != HR_OK)
        goto done;
    tk->vocab_size = tk->model.n_ids;
    for (int k = 0; k < tk->added.n; k++)
        if (tk->added.by_id[k].id >= tk->vocab_size)
            tk->vocab_size = tk->added.by_id[k].id + 1;
    for (size_t k = 0; k < tk->n_post_prefix; k++)
        if (tk->post_prefix[k] >= tk->vocab_size)
            st = hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: id %d beyond the vocabulary", tk->post_prefix[k]);
    for (size_t k = 0; k < tk->n_post_suffix; k++)
        if (tk->post_suffix[k] >= tk->vocab_size)
            st = hr_err(err, errlen, HR_ERR_FORMAT, "post_processor: id %d beyond the vocabulary", tk->post_suffix[k]);
    if (st == HR_OK)
        st = build_decode_table(tk, err, errlen);
done:
    tkjson_free(&j);
    return st;
}

enum hr_status tokenizer_init_json(struct tokenizer *tk, const char *json, size_t len, char *err, size_t errlen)
{
    memset(tk, 0, sizeof *tk);
    char *buf = malloc(len + 1);
    if (!buf)
        return hr_err(err, errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(buf, json, len);
    buf[len] = 0;
    enum hr_status st = load(tk, buf, len, err, errlen);
    free(buf);
    if (st != HR_OK)
        tokenizer_free(tk);
    return st;
}

enum hr_status tokenizer_init(struct tokenizer *tk, const char *path, char *err, size_t errlen)
{
    memset(tk, 0, sizeof *tk);
    char *buf;
    size_t len;
    enum hr_status st = fileio_read_all(path, TOKENIZER_MAX_FILE, &buf, &len, err, errlen);
    if (st != HR_OK)
        return st;
    st = load(tk, buf, len, err, errlen);
    free(buf);
    if (st != HR_OK) {
        hr_err_prefix(err, errlen, "%s: ", path);
        tokenizer_free(tk);
    }
    return st;
}

void tokenizer_free(struct tokenizer *tk)
{
    if (!tk)
        return;
    bpe_free(&tk->model);
    pretok_free(&tk->pretok);
    added_vocab_free(&tk->added);
    free(tk->post_prefix);
    free(tk->post_suffix);
    free(tk->dec_pool);
    free(tk->dec_off);
    free(tk->dec_len);
    free(tk->special);
    normalizer_free(&tk->normalizer);
    memset(tk, 0, sizeof *tk);
}

/* ------------------------------------------------------------ lookups ---- */

int32_t tokenizer_token_id(const struct tokenizer *tk, const char *token)
{
    size_t n = strlen(token);
    int32_t id = added_vocab_id(&tk->added, token, n);
    return id >= 0 ? id : bpe_token_id(&tk->model, token, n);
}

const char *tokenizer_token_str(const struct tokenizer *tk, int32_t id, size_t *len)
{
    const struct added_vocab_token *t = added_vocab_by_id(&tk->added, id);
    if (t) {
        *len = t->form_len;
        return t->form;
    }
    return bpe_token_str(&tk->model, id, len);
}

const char *tokenizer_token_bytes(const struct tokenizer *tk, int32_t id, size_t *len)
{
    if (id < 0 || id >= tk->vocab_size || tk->dec_off[id] == UINT32_MAX)
        return NULL;
    *len = tk->dec_len[id];
    return tk->dec_pool + tk->dec_off[id];
}

bool tokenizer_id_is_special(const struct tokenizer *tk, int32_t id)
{
    return id >= 0 && id < tk->vocab_size && tk->special[id];
}

int32_t tokenizer_vocab_size(const struct tokenizer *tk) { return tk->vocab_size; }

/* ------------------------------------------------------------ encoding ---- */

struct encoder {
    const struct tokenizer *tk;
    struct tokenizer_ids *out;
    struct normalizer_scratch ns;
    struct pretok_scratch ps;
    struct bpe_scratch bs;
    struct added_vocab_segment *seg_raw, *seg_norm; /* [cap_raw], [cap_norm] */
    size_t cap_raw, cap_norm;
    char *err;
    size_t errlen;
    size_t n0;      /* out->n before this text */
    size_t max_ids; /* ids this text may add at most (0: no bound) */
};

/* Past the caller's bound: stop (the rest of the text is not looked at). */
static enum hr_status encoder_check_bound(struct encoder *e)
{
    if (e->max_ids && e->out->n - e->n0 > e->max_ids)
        return hr_err(e->err, e->errlen, HR_ERR_FULL, "the text has more than %zu tokens", e->max_ids);
    return HR_OK;
}

static enum hr_status emit_word(void *ctx, const char *w, size_t n)
{
    struct encoder *e = ctx;
    const int32_t *ids;
    size_t k;
    enum hr_status st = bpe_encode_word(&e->tk->model, w, n, &e->bs, &ids, &k, e->err, e->errlen);
    if (st != HR_OK || k == 0)
        return st;
    if (!ids_reserve(e->out, k))
        return hr_err(e->err, e->errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(e->out->ids + e->out->n, ids, k * sizeof *ids);
    e->out->n += k;
    return encoder_check_bound(e);
}

static enum hr_status push_ids(struct encoder *e, const int32_t *ids, size_t n)
{
    if (n == 0)
        return HR_OK;
    if (!ids_reserve(e->out, n))
        return hr_err(e->err, e->errlen, HR_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(e->out->ids + e->out->n, ids, n * sizeof *ids);
    e->out->n += n;
    return encoder_check_bound(e);
}

/* A piece of the raw text between added tokens: normalize, split again, pre-tokenize, merge. */
static enum hr_status encode_piece(struct encoder *e, const char *s, size_t n)
{
    const char *ns;
    size_t nn;
    enum hr_status st = normalizer_apply(&e->tk->normalizer, s, n, &e->ns, &ns, &nn, e->err, e->errlen);
    if (st != HR_OK)
        return st;
    size_t nseg;
    st = added_vocab_split(&e->tk->added, true, ns, nn, &e->seg_norm, &e->cap_norm, &nseg, e->err, e->errlen);
    for (size_t k = 0; st == HR_OK && k < nseg; k++) {
        const struct added_vocab_segment *g = &e->seg_norm[k];
        if (g->id >= 0)
            st = push_ids(e, &g->id, 1);
        else
            st = pretok_run(&e->tk->pretok, ns + g->start, g->end - g->start, &e->ps, emit_word, e, e->err,
                            e->errlen);
    }
    return st;
}

enum hr_status tokenizer_encode_ex(const struct tokenizer *tk, const char *text, size_t len, bool add_special,
                                   struct tokenizer_ids *out, char *err, size_t errlen)
{
    return tokenizer_encode_max(tk, text, len, add_special, 0, out, err, errlen);
}

enum hr_status tokenizer_encode_max(const struct tokenizer *tk, const char *text, size_t len, bool add_special,
                                    size_t max_ids, struct tokenizer_ids *out, char *err, size_t errlen)
{
    size_t bad = utf8_valid_prefix((const uint8_t *)text, len);
    if (bad != len)
        return hr_err(err, errlen, HR_ERR_INVALID, "invalid UTF-8 in the text at byte offset %zu", bad);
    /* Every token stands for at most max_token_bytes bytes, and normalization (NFC and
     * the like) shrinks text at most threefold (Hangul jamo to syllables), so a text this
     * long has more than max_ids tokens whatever it says: no need to look. */
    if (max_ids && tk->max_token_bytes && len / 3 / tk->max_token_bytes > max_ids + tk->n_post_prefix + tk->n_post_suffix)
        return hr_err(err, errlen, HR_ERR_FULL, "the text has more than %zu tokens", max_ids);
    size_t n0 = out->n;
    struct encoder e = {.tk = tk, .out = out, .err = err, .errlen = errlen, .n0 = n0, .max_ids = max_ids};
    enum hr_status st = HR_OK;
    if (add_special)
        st = push_ids(&e, tk->post_prefix, tk->n_post_prefix);
    size_t nseg = 0;
    if (st == HR_OK)
        st = added_vocab_split(&tk->added, false, text, len, &e.seg_raw, &e.cap_raw, &nseg, err, errlen);
    for (size_t k = 0; st == HR_OK && k < nseg; k++) {
        const struct added_vocab_segment *g = &e.seg_raw[k];
        if (g->id >= 0)
            st = push_ids(&e, &g->id, 1);
        else
            st = encode_piece(&e, text + g->start, g->end - g->start);
    }
    if (st == HR_OK && add_special)
        st = push_ids(&e, tk->post_suffix, tk->n_post_suffix);
    normalizer_scratch_free(&e.ns);
    pretok_scratch_free(&e.ps);
    bpe_scratch_free(&e.bs);
    free(e.seg_raw);
    free(e.seg_norm);
    if (st != HR_OK)
        out->n = n0;
    return st;
}

enum hr_status tokenizer_encode(const struct tokenizer *tk, const char *text, size_t len, struct tokenizer_ids *out,
                                char *err, size_t errlen)
{
    return tokenizer_encode_ex(tk, text, len, true, out, err, errlen);
}
