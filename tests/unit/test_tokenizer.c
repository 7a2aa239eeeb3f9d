/* Tokenizer tests: the Qwen3 tokenizer.json against ids produced by Hugging Face tokenizers
 * (tests/data/qwen3: vectors.json, encode_cases.json; decoded texts from the same oracle in
 * tests/data/tokenizer), streaming detokenization, invalid UTF-8, normalization forms (UAX #15
 * examples), small hand-computed tokenizers (both merge forms, ranks, ignore_merges, added-token
 * flags, post-processor), bad files, and concurrent encoding.
 * Needs tests/.cache/qwen3/tokenizer.json (bash scripts/testdata.sh); fails when it is missing. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"

static struct tokenizer qwen;
static bool qwen_ok;
static json_t *vectors, *cases, *decoded;

/* ------------------------------------------------------------- helpers ---- */

static json_t *load_json(const char *dir, const char *rel)
{
    char path[1024];
    json_error_t je;
    json_t *j = json_load_file(test_path(path, sizeof path, dir, rel), 0, &je);
    if (!j)
        fprintf(stderr, "  cannot read %s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

/* An independent UTF-8 check (RFC 3629), not the tokenizer's own. */
static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return false;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static bool ids_equal(const struct tokenizer_ids *got, json_t *want)
{
    if (got->n != json_array_size(want))
        return false;
    for (size_t k = 0; k < got->n; k++)
        if (got->ids[k] != json_integer_value(json_array_get(want, k)))
            return false;
    return true;
}

static void print_ids(const char *label, const struct tokenizer_ids *ids)
{
    fprintf(stderr, "    %s:", label);
    for (size_t k = 0; k < ids->n && k < 40; k++)
        fprintf(stderr, " %d", ids->ids[k]);
    fprintf(stderr, "\n");
}

/* Encodes text and compares with the expected ids; returns true when equal. */
static bool check_encode(const struct tokenizer *tk, const char *text, size_t len, json_t *want)
{
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN] = "";
    enum hr_status st = tokenizer_encode(tk, text, len, &ids, err, sizeof err);
    bool ok = st == HR_OK && ids_equal(&ids, want);
    if (!ok) {
        fprintf(stderr, "  encode mismatch for \"%.80s\" (%s %s)\n", text, hr_status_str(st), err);
        print_ids("got", &ids);
    }
    tokenizer_ids_free(&ids);
    return ok;
}

/* Decodes ids whole and streamed one id at a time; every streamed piece must be valid UTF-8
 * and the pieces must add up to the whole decode, which must equal want (when given). */
static bool check_decode(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip, const char *want,
                         size_t want_len)
{
    char err[HR_ERRLEN];
    char *whole = NULL;
    size_t wl = 0;
    if (tokenizer_decode(tk, ids, n, skip, &whole, &wl, err, sizeof err) != HR_OK) {
        fprintf(stderr, "  decode failed: %s\n", err);
        return false;
    }
    bool ok = true;
    if (want && (wl != want_len || memcmp(whole, want, wl))) {
        fprintf(stderr, "  decode mismatch: got \"%.80s\" want \"%.80s\"\n", whole, want);
        ok = false;
    }
    struct detok d;
    if (detok_init(&d, tk, skip, err, sizeof err) != HR_OK) {
        free(whole);
        return false;
    }
    size_t cap = detok_max_output(tk);
    char *piece = malloc(cap);
    char *acc = malloc(3 * wl + 16);
    size_t al = 0;
    for (size_t k = 0; k < n && ok; k++) {
        size_t pn;
        if (detok_push(&d, ids[k], piece, cap, &pn) != HR_OK) {
            fprintf(stderr, "  detok_push failed at %zu\n", k);
            ok = false;
            break;
        }
        if (!valid_utf8((const unsigned char *)piece, pn)) {
            fprintf(stderr, "  detok emitted a partial character at id %zu\n", k);
            ok = false;
        }
        if (al + pn > 3 * wl + 16) {
            ok = false;
            break;
        }
        memcpy(acc + al, piece, pn);
        al += pn;
    }
    size_t pn = 0;
    if (ok && detok_flush(&d, piece, cap, &pn) == HR_OK && al + pn <= 3 * wl + 16) {
        memcpy(acc + al, piece, pn);
        al += pn;
    }
    if (ok && (al != wl || memcmp(acc, whole, wl))) {
        fprintf(stderr, "  streamed text differs from the whole decode: \"%.*s\" vs \"%s\"\n", (int)al, acc, whole);
        ok = false;
    }
    detok_free(&d);
    free(piece);
    free(acc);
    free(whole);
    return ok;
}

static int32_t *json_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t k = 0; k < *n; k++)
        ids[k] = (int32_t)json_integer_value(json_array_get(arr, k));
    return ids;
}

/* ------------------------------------------------------- Qwen3 vectors ---- */

static void test_qwen3_loads(void)
{
    CHECK_MSG(qwen_ok, "tests/.cache/qwen3/tokenizer.json did not load: run `bash scripts/testdata.sh`");
    if (!qwen_ok)
        return;
    CHECK(tokenizer_vocab_size(&qwen) == 151669);
    CHECK(tokenizer_token_id(&qwen, "<|im_end|>") == 151645);
    CHECK(tokenizer_token_id(&qwen, "<|endoftext|>") == 151643);
    CHECK(tokenizer_token_id(&qwen, "</think>") == 151668);
    CHECK(tokenizer_token_id(&qwen, "Ġworld") == 1879);
    CHECK(tokenizer_token_id(&qwen, "no such token") == -1);
    CHECK(tokenizer_id_is_special(&qwen, 151645));
    CHECK(tokenizer_id_is_special(&qwen, 151643));
    CHECK(!tokenizer_id_is_special(&qwen, 151667)); /* <think> is added but not special */
    CHECK(!tokenizer_id_is_special(&qwen, 1879));
    CHECK(!tokenizer_id_is_special(&qwen, -1));
    size_t len;
    const char *s = tokenizer_token_str(&qwen, 1879, &len);
    CHECK(s && len == 7 && !memcmp(s, "Ġworld", 7));
    s = tokenizer_token_bytes(&qwen, 1879, &len);
    CHECK(s && len == 6 && !memcmp(s, " world", 6));
    CHECK(tokenizer_token_str(&qwen, 151669, &len) == NULL);
}

static void test_qwen3_vectors(void)
{
    if (!qwen_ok || !vectors)
        {
        CHECK_MSG(false, "missing Qwen3 tokenizer or vectors.json");
        return;
    }
    json_t *vs = json_object_get(vectors, "vectors");
    CHECK(json_array_size(vs) == 22);
    size_t i;
    json_t *v;
    json_array_foreach(vs, i, v) {
        const char *text = json_string_value(json_object_get(v, "text"));
        size_t tl = json_string_length(json_object_get(v, "text"));
        json_t *want = json_object_get(v, "ids");
        CHECK_MSG(check_encode(&qwen, text, tl, want), "vector %zu", i);
        /* the vocabulary strings of the ids */
        json_t *toks = json_object_get(v, "tokens");
        for (size_t k = 0; k < json_array_size(toks); k++) {
            size_t len;
            const char *t = tokenizer_token_str(&qwen, (int32_t)json_integer_value(json_array_get(want, k)), &len);
            const char *w = json_string_value(json_array_get(toks, k));
            CHECK_MSG(t && len == strlen(w) && !memcmp(t, w, len), "vector %zu token %zu", i, k);
        }
        size_t n;
        int32_t *ids = json_ids(want, &n);
        const char *dec = json_string_value(json_object_get(v, "decoded"));
        CHECK_MSG(check_decode(&qwen, ids, n, false, dec, json_string_length(json_object_get(v, "decoded"))),
                  "vector %zu decode", i);
        free(ids);
    }
    json_t *div = json_object_get(vectors, "known_divergences");
    CHECK(json_array_size(div) == 3);
    json_array_foreach(div, i, v) {
        json_t *t = json_object_get(v, "text");
        CHECK_MSG(check_encode(&qwen, json_string_value(t), json_string_length(t),
                               json_object_get(v, "hf_tokenizers_0_23_2_ids")),
                  "known divergence %zu (U+FEFF is not \\s)", i);
    }
    json_t *chats = json_object_get(vectors, "chat_template_vectors");
    CHECK(json_array_size(chats) == 3);
    json_array_foreach(chats, i, v) {
        json_t *t = json_object_get(v, "rendered");
        CHECK_MSG(check_encode(&qwen, json_string_value(t), json_string_length(t), json_object_get(v, "ids")),
                  "chat vector %zu", i);
    }
}

static void test_qwen3_encode_cases(void)
{
    if (!qwen_ok || !cases)
        {
        CHECK_MSG(false, "missing Qwen3 tokenizer or encode_cases.json");
        return;
    }
    json_t *cs = json_object_get(cases, "cases");
    CHECK(json_array_size(cs) == 1740);
    size_t i, bad = 0;
    json_t *c;
    json_array_foreach(cs, i, c) {
        json_t *t = json_object_get(c, "text");
        if (!check_encode(&qwen, json_string_value(t), json_string_length(t), json_object_get(c, "ids")) && ++bad > 5)
            break;
    }
    CHECK_MSG(bad == 0, "%zu encode_cases differ", bad);
}

static void test_qwen3_decode_cases(void)
{
    if (!qwen_ok || !cases || !decoded)
        {
        CHECK_MSG(false, "missing Qwen3 tokenizer, encode_cases.json or encode_cases_decoded.json");
        return;
    }
    json_t *cs = json_object_get(cases, "cases"), *ds = json_object_get(decoded, "cases");
    CHECK(json_array_size(cs) == json_array_size(ds));
    size_t bad = 0, changed = 0;
    for (size_t i = 0; i < json_array_size(cs) && i < json_array_size(ds) && bad < 5; i++) {
        json_t *c = json_array_get(cs, i), *d = json_array_get(ds, i);
        size_t n;
        int32_t *ids = json_ids(json_object_get(c, "ids"), &n);
        json_t *w = json_object_get(d, "decoded"), *ws = json_object_get(d, "decoded_skip");
        if (!check_decode(&qwen, ids, n, false, json_string_value(w), json_string_length(w)))
            bad++;
        if (!check_decode(&qwen, ids, n, true, json_string_value(ws), json_string_length(ws)))
            bad++;
        /* decode(encode(text)) is the text, up to NFC */
        if (strcmp(json_string_value(w), json_string_value(json_object_get(c, "text"))))
            changed++;
        free(ids);
    }
    CHECK_MSG(bad == 0, "%zu decodes differ", bad);
    CHECK_MSG(changed == 31, "%zu texts change under decode(encode()), expected the 31 not in NFC", changed);
}

static void test_streaming_by_hand(void)
{
    if (!qwen_ok)
        {
        CHECK_MSG(false, "no Qwen3 tokenizer");
        return;
    }
    char err[HR_ERRLEN], buf[4096];
    struct detok d;
    size_t n;
    CHECK_OK(detok_init(&d, &qwen, false, err, sizeof err), err);
    CHECK(detok_max_output(&qwen) <= sizeof buf);
    /* "emoji 🤖 test": 🤖 (F0 9F A4 96) is spread over ĠðŁ, ¤, ĸ */
    CHECK(detok_push(&d, 37523, buf, sizeof buf, &n) == HR_OK && n == 5 && !memcmp(buf, "emoji", 5));
    CHECK(detok_push(&d, 11162, buf, sizeof buf, &n) == HR_OK && n == 1 && buf[0] == ' ');
    CHECK(detok_push(&d, 97, buf, sizeof buf, &n) == HR_OK && n == 0);
    CHECK(detok_push(&d, 244, buf, sizeof buf, &n) == HR_OK && n == 4 && !memcmp(buf, "\xF0\x9F\xA4\x96", 4));
    CHECK(detok_push(&d, 1273, buf, sizeof buf, &n) == HR_OK && n == 5 && !memcmp(buf, " test", 5));
    CHECK(detok_flush(&d, buf, sizeof buf, &n) == HR_OK && n == 0);
    /* a lead byte then a byte that cannot continue it: U+FFFD at once, then the byte */
    int32_t lead = tokenizer_token_id(&qwen, "ðŁ"); /* F0 9F */
    int32_t bang = tokenizer_token_id(&qwen, "!");
    CHECK(lead >= 0 && bang >= 0);
    CHECK(detok_push(&d, lead, buf, sizeof buf, &n) == HR_OK && n == 0);
    CHECK(detok_push(&d, bang, buf, sizeof buf, &n) == HR_OK && n == 4 && !memcmp(buf, "\xEF\xBF\xBD!", 4));
    /* a cut character at the end of the stream: one U+FFFD from flush */
    CHECK(detok_push(&d, lead, buf, sizeof buf, &n) == HR_OK && n == 0);
    CHECK(detok_flush(&d, buf, sizeof buf, &n) == HR_OK && n == 3 && !memcmp(buf, "\xEF\xBF\xBD", 3));
    /* special tokens: kept, or skipped */
    CHECK(detok_push(&d, 151645, buf, sizeof buf, &n) == HR_OK && n == 10 && !memcmp(buf, "<|im_end|>", 10));
    detok_free(&d);
    CHECK_OK(detok_init(&d, &qwen, true, err, sizeof err), err);
    CHECK(detok_push(&d, 151645, buf, sizeof buf, &n) == HR_OK && n == 0);
    CHECK(detok_push(&d, 151667, buf, sizeof buf, &n) == HR_OK && n == 7 && !memcmp(buf, "<think>", 7));
    /* misuse: bad id, small buffer */
    CHECK(detok_push(&d, 151669, buf, sizeof buf, &n) == HR_ERR_INVALID && n == 0);
    CHECK(detok_push(&d, -1, buf, sizeof buf, &n) == HR_ERR_INVALID);
    CHECK(detok_push(&d, 1879, buf, 4, &n) == HR_ERR_INVALID && n == 0); /* " world" needs 6 */
    CHECK(detok_push(&d, 1879, buf, 6, &n) == HR_OK && n == 6 && !memcmp(buf, " world", 6));
    detok_free(&d);
    /* whole decode: ids out of range are an error, ids are otherwise decoded like HF */
    int32_t bad_ids[] = {9707, 151669};
    char *out;
    size_t len;
    CHECK(tokenizer_decode(&qwen, bad_ids, 2, false, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    int32_t mixed[] = {151644, 872, 198, 6023, 151645};
    CHECK(tokenizer_decode(&qwen, mixed, 5, true, &out, &len, err, sizeof err) == HR_OK);
    CHECK(len == 7 && !memcmp(out, "user\nhi", 7));
    free(out);
    CHECK(tokenizer_decode(&qwen, mixed, 0, true, &out, &len, err, sizeof err) == HR_OK && len == 0 && out[0] == 0);
    free(out);
}

static void test_invalid_utf8(void)
{
    if (!qwen_ok)
        {
        CHECK_MSG(false, "no Qwen3 tokenizer");
        return;
    }
    static const struct {
        const char *s;
        size_t len, offset;
    } bad[] = {
        {"abc\x80", 4, 3},
        {"\xC3(", 2, 0},
        {"h\xC3\xA9llo\xED\xA0\x80", 9, 6},     /* a UTF-16 surrogate encoded in UTF-8 */
        {"\xF4\x90\x80\x80", 4, 0},             /* above U+10FFFF */
        {"ok \xC0\xAF", 5, 3},                  /* overlong '/' */
        {"ab\xE4\xB8", 4, 2},                   /* cut at the end */
        {"<|im_end|>\xFF<|im_end|>", 21, 10},   /* next to a special token */
        {"\xE0\x9F\xBF", 3, 0},                 /* overlong 3-byte */
        {"\xF0\x9F\xA4", 3, 0},
        {"x\0y\xFE", 4, 3},                     /* NUL is valid, 0xFE is not */
    };
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    CHECK_OK(tokenizer_encode(&qwen, "keep", 4, &ids, err, sizeof err), err);
    size_t before = ids.n;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err[0] = 0;
        enum hr_status st = tokenizer_encode(&qwen, bad[k].s, bad[k].len, &ids, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu", bad[k].offset);
        CHECK_MSG(st == HR_ERR_INVALID && strstr(err, want), "case %zu: %s %s", k, hr_status_str(st), err);
        CHECK(ids.n == before);
        CHECK(tokenizer_utf8_valid_prefix(bad[k].s, bad[k].len) == bad[k].offset);
    }
    /* NUL bytes are text like any other */
    ids.n = 0;
    CHECK_OK(tokenizer_encode(&qwen, "a\0b", 3, &ids, err, sizeof err), err);
    CHECK(ids.n == 3 && ids.ids[1] == tokenizer_token_id(&qwen, "Ā"));
    tokenizer_ids_free(&ids);
}

/* Random bytes (biased toward UTF-8 sequences): encoding succeeds exactly on valid UTF-8, and
 * then decode(encode(x)) is valid text that encodes to the same ids (it is x in NFC). */
static void test_random_bytes(void)
{
    if (!qwen_ok) {
        CHECK_MSG(false, "no Qwen3 tokenizer");
        return;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    struct tokenizer_ids a = {0}, b = {0};
    char err[HR_ERRLEN];
    unsigned char buf[96];
    size_t bad_status = 0, bad_round = 0, n_valid = 0;
    static const char *const pieces[] = {"<|im_end|>", "<think>", " ", "\n", "e\xCC\x81", "\xF0\x9F\xA4\x96",
                                         "\xE4\xB8\xAD", "\xCE\xB1", "'s", "123", "\xCD\xBE", "\xEF\xBB\xBF"};
    for (int it = 0; it < 3000; it++) {
        size_t n = 0;
        while (n < 80) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            unsigned r = (unsigned)(s >> 32);
            if (r % 7 == 0)
                break;
            if (r % 3 == 0) {
                const char *p = pieces[(r >> 8) % (sizeof pieces / sizeof pieces[0])];
                size_t pl = strlen(p);
                memcpy(buf + n, p, pl);
                n += pl;
            } else if (r % 5 == 0) {
                buf[n++] = (unsigned char)(r >> 16); /* any byte, often invalid */
            } else {
                buf[n++] = (unsigned char)('a' + (r >> 16) % 26);
            }
        }
        bool valid = valid_utf8(buf, n);
        a.n = 0;
        enum hr_status st = tokenizer_encode(&qwen, (const char *)buf, n, &a, err, sizeof err);
        if ((st == HR_OK) != valid || (!valid && st != HR_ERR_INVALID)) {
            bad_status++;
            continue;
        }
        if (!valid)
            continue;
        n_valid++;
        char *text;
        size_t tl;
        if (tokenizer_decode(&qwen, a.ids, a.n, false, &text, &tl, err, sizeof err) != HR_OK) {
            bad_round++;
            continue;
        }
        b.n = 0;
        if (!valid_utf8((unsigned char *)text, tl) ||
            tokenizer_encode(&qwen, text, tl, &b, err, sizeof err) != HR_OK || a.n != b.n ||
            (a.n && memcmp(a.ids, b.ids, a.n * sizeof *a.ids)))
            bad_round++;
        free(text);
    }
    CHECK_MSG(bad_status == 0, "%zu inputs with a wrong status", bad_status);
    CHECK_MSG(bad_round == 0, "%zu inputs that do not round-trip", bad_round);
    CHECK(n_valid > 500);
    tokenizer_ids_free(&a);
    tokenizer_ids_free(&b);
}

/* Encoding appends to the caller's buffer and grows it. */
static void test_ids_buffer(void)
{
    if (!qwen_ok)
        {
        CHECK_MSG(false, "no Qwen3 tokenizer");
        return;
    }
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    CHECK_OK(tokenizer_encode(&qwen, "Hello world", 11, &ids, err, sizeof err), err);
    CHECK_OK(tokenizer_encode(&qwen, "<|im_end|>", 10, &ids, err, sizeof err), err);
    CHECK(ids.n == 3 && ids.ids[0] == 9707 && ids.ids[1] == 1879 && ids.ids[2] == 151645);
    CHECK_OK(tokenizer_encode_ex(&qwen, "", 0, false, &ids, err, sizeof err), err);
    CHECK(ids.n == 3);
    /* a long text: many growth steps, one word repeated (the cache path) */
    size_t n = 6 * 40000;
    char *big = malloc(n);
    for (size_t k = 0; k < n; k++)
        big[k] = "hello "[k % 6];
    ids.n = 0;
    CHECK_OK(tokenizer_encode(&qwen, big, n, &ids, err, sizeof err), err);
    /* "hello", then "Ġhello" for each next word, then the trailing space "Ġ" alone */
    CHECK(ids.n == n / 6 + 1);
    CHECK(ids.ids[0] == 14990 && ids.ids[1] == 23811 && ids.ids[ids.n - 2] == 23811 && ids.ids[ids.n - 1] == 220);
    free(big);
    tokenizer_ids_free(&ids);
    tokenizer_ids_free(&ids); /* freeing twice is harmless */
}

/* --------------------------------------------------------------- NFC ---- */

static bool norm_is(enum normalizer_form f, const char *in, const char *want)
{
    struct normalizer nz = {.n_steps = 1};
    nz.steps[0] = f;
    struct normalizer_scratch sc = {0};
    const char *out;
    size_t len;
    char err[HR_ERRLEN];
    bool ok = normalizer_apply(&nz, in, strlen(in), &sc, &out, &len, err, sizeof err) == HR_OK &&
              len == strlen(want) && !memcmp(out, want, len);
    if (!ok)
        fprintf(stderr, "  normalize(%d, \"%s\") gave \"%.*s\", want \"%s\"\n", (int)f, in, (int)len, out, want);
    normalizer_scratch_free(&sc);
    return ok;
}

static void test_normalization_forms(void)
{
    /* examples from UAX #15 and the Unicode data files, computed by hand */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "e\xCC\x81", "\xC3\xA9"));                 /* e + U+0301 -> é */
    CHECK(norm_is(NORMALIZER_FORM_NFD, "\xC3\xA9", "e\xCC\x81"));
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xE2\x84\xAB", "\xC3\x85"));              /* Angstrom sign -> Å */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xE2\x84\xA6", "\xCE\xA9"));              /* Ohm sign -> Ω */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81")); /* L V T -> 각 */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81"));  /* LV + T -> LVT */
    CHECK(norm_is(NORMALIZER_FORM_NFD, "\xEA\xB0\x81", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"));
    /* canonical ordering: U+0316 (ccc 220) sorts before U+0301 (230); á then composes */
    CHECK(norm_is(NORMALIZER_FORM_NFD, "a\xCC\x81\xCC\x96", "a\xCC\x96\xCC\x81"));
    CHECK(norm_is(NORMALIZER_FORM_NFC, "a\xCC\x81\xCC\x96", "\xC3\xA1\xCC\x96"));
    /* ẛ̣ (U+1E9B U+0323): NFC keeps it, NFKC gives ṩ (U+1E69) */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xE1\xBA\x9B\xCC\xA3", "\xE1\xBA\x9B\xCC\xA3"));
    CHECK(norm_is(NORMALIZER_FORM_NFKC, "\xE1\xBA\x9B\xCC\xA3", "\xE1\xB9\xA9"));
    CHECK(norm_is(NORMALIZER_FORM_NFD, "\xE1\xBA\x9B\xCC\xA3", "\xC5\xBF\xCC\xA3\xCC\x87"));
    CHECK(norm_is(NORMALIZER_FORM_NFKD, "\xE1\xBA\x9B\xCC\xA3", "s\xCC\xA3\xCC\x87"));
    /* composition exclusion: क़ (U+0958) stays decomposed */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"));
    CHECK(norm_is(NORMALIZER_FORM_NFKC, "\xEF\xAC\x81", "fi"));                  /* ligature ﬁ */
    CHECK(norm_is(NORMALIZER_FORM_NFKC, "\xE2\x91\xA0", "1"));                   /* ① */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xEF\xAC\x81", "\xEF\xAC\x81"));
    /* Unicode 9.0 tables, as the reference: Dives Akuru (13.0) does not compose */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0"));
    /* but Grantha (7.0) does: U+11347 U+1133E -> U+1134B */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xF0\x91\x8D\x87\xF0\x91\x8C\xBE", "\xF0\x91\x8D\x8B"));
    CHECK(norm_is(NORMALIZER_FORM_NFC, "plain ascii", "plain ascii"));
    CHECK(norm_is(NORMALIZER_FORM_NFC, "", ""));
    /* a leading combining mark has no starter to join */
    CHECK(norm_is(NORMALIZER_FORM_NFC, "\xCC\x81" "e", "\xCC\x81" "e"));
}

/* ------------------------------------------------ hand-made tokenizers ---- */

static bool tiny(struct tokenizer *tk, const char *json)
{
    char err[HR_ERRLEN];
    enum hr_status st = tokenizer_init_json(tk, json, strlen(json), err, sizeof err);
    if (st != HR_OK)
        fprintf(stderr, "  tiny tokenizer: %s: %s\n", hr_status_str(st), err);
    return st == HR_OK;
}

/* ids of text as a compact string "0 7 3" */
static const char *enc(const struct tokenizer *tk, const char *text)
{
    static char buf[600];
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    if (tokenizer_encode(tk, text, strlen(text), &ids, err, sizeof err) != HR_OK) {
        snprintf(buf, sizeof buf, "ERR %.500s", err);
    } else {
        size_t o = 0;
        buf[0] = 0;
        for (size_t k = 0; k < ids.n && o < sizeof buf - 16; k++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, k ? " %d" : "%d", ids.ids[k]);
    }
    tokenizer_ids_free(&ids);
    return buf;
}

#define TINY_VOCAB "{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"ab\":4,\"cd\":5,\"abcd\":6,\"bc\":7,\" \":8}"
#define TINY(merges, extra)                                                                                   \
    "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,"                    \
    "\"post_processor\":null,\"decoder\":null,\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB             \
    ",\"merges\":" merges extra "}}"

static void test_merge_forms(void)
{
    struct tokenizer a, b, c, d;
    /* ranks: "b c" 0, "a b" 1, "c d" 2, "ab cd" 3 */
    CHECK(tiny(&a, TINY("[\"b c\",\"a b\",\"c d\",\"ab cd\"]", "")));
    CHECK(tiny(&b, TINY("[[\"b\",\"c\"],[\"a\",\"b\"],[\"c\",\"d\"],[\"ab\",\"cd\"]]", "")));
    CHECK(tiny(&c, TINY("[\"#version: 0.2\",\"a b\",\"c d\",\"ab cd\",\"b c\"]", "")));
    CHECK(tiny(&d, TINY("[\"b c\",\"a b\",\"c d\",\"ab cd\"]", ",\"ignore_merges\":true")));
    /* abcd: b+c has the lowest rank, then nothing applies: a bc d */
    CHECK(!strcmp(enc(&a, "abcd"), "0 7 3"));
    CHECK(!strcmp(enc(&b, "abcd"), "0 7 3"));
    /* with "a b" first: ab, cd, then abcd */
    CHECK(!strcmp(enc(&c, "abcd"), "6"));
    /* ignore_merges: a whole word in the vocabulary is taken as it is */
    CHECK(!strcmp(enc(&d, "abcd"), "6"));
    CHECK(!strcmp(enc(&d, "abab"), "4 4"));
    /* equal ranks merge left first: a b a b -> ab a b -> ab ab */
    CHECK(!strcmp(enc(&a, "abab"), "4 4"));
    CHECK(!strcmp(enc(&a, "cdab"), "5 4"));
    CHECK(!strcmp(enc(&b, "cdab"), "5 4"));
    CHECK(!strcmp(enc(&a, "dcba"), "3 2 1 0"));
    CHECK(!strcmp(enc(&a, "a b"), "0 8 1"));
    /* an unknown character with no unk_token is dropped (as the reference does): a, b merge */
    CHECK(!strcmp(enc(&a, "axb"), "4"));
    /* the null decoder joins tokens with spaces */
    int32_t ids[] = {0, 7, 3};
    char *out, err[HR_ERRLEN];
    size_t len;
    CHECK(tokenizer_decode(&a, ids, 3, false, &out, &len, err, sizeof err) == HR_OK && !strcmp(out, "a bc d"));
    free(out);
    CHECK(check_decode(&a, ids, 3, false, "a bc d", 6));
    CHECK(tokenizer_vocab_size(&a) == 9);
    /* truncation and padding in the file are ignored, as transformers does */
    struct tokenizer tr;
    const char *trunc = "{\"truncation\":{\"direction\":\"Right\",\"max_length\":2,\"strategy\":\"LongestFirst\","
                        "\"stride\":0},\"padding\":{\"strategy\":{\"Fixed\":8},\"direction\":\"Right\","
                        "\"pad_to_multiple_of\":null,\"pad_id\":8,\"pad_type_id\":0,\"pad_token\":\" \"},"
                        "\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[\"a b\"]}}";
    CHECK(tiny(&tr, trunc));
    CHECK(!strcmp(enc(&tr, "abcd"), "4 2 3"));
    tokenizer_free(&tr);
    tokenizer_free(&a);
    tokenizer_free(&b);
    tokenizer_free(&c);
    tokenizer_free(&d);
}

static void test_added_token_flags(void)
{
    struct tokenizer t;
    /* vocabulary 0..10; added: <x> 11 strips spaces on both sides, dd 12 only as a single word,
     * ﬁ 13 matched after NFKC (as "fi"), ab keeps its vocabulary id 4, <y> 14 plain, [S] 15
     * special and put first by the post-processor */
#define ADDED(id, content, sw, l, r, norm, special)                                                           \
    "{\"id\":" #id ",\"content\":\"" content "\",\"single_word\":" #sw ",\"lstrip\":" #l ",\"rstrip\":" #r \
    ",\"normalized\":" #norm ",\"special\":" #special "}"
    const char *json =
        "{\"version\":\"1.0\",\"normalizer\":{\"type\":\"NFKC\"},\"pre_tokenizer\":null,"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[S]\","
        "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"[S]\":"
        "{\"id\":\"[S]\",\"ids\":[15],\"tokens\":[\"[S]\"]}}},\"decoder\":null,\"added_tokens\":["
        ADDED(11, "<x>", false, true, true, false, false) ","
        ADDED(12, "dd", true, false, false, false, false) ","
        ADDED(13, "\xEF\xAC\x81", false, false, false, true, false) ","
        ADDED(4, "ab", false, false, false, false, false) ","
        ADDED(14, "<y>", false, false, false, false, false) ","
        ADDED(15, "[S]", false, false, false, false, true) "],"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"ab\":4,\"cd\":5,\"abcd\":6,"
        "\"bc\":7,\" \":8,\"f\":9,\"i\":10},\"merges\":[\"a b\",\"c d\"]}}";
#undef ADDED
    if (!tiny(&t, json)) {
        CHECK(false);
        return;
    }
    CHECK(!strcmp(enc(&t, "a <x> b"), "15 0 11 1"));
    CHECK(!strcmp(enc(&t, "a  <x>  b"), "15 0 11 1"));
    CHECK(!strcmp(enc(&t, "a <y> b"), "15 0 8 14 8 1"));
    /* dd alone is the token; inside a word it is left to the model */
    CHECK(!strcmp(enc(&t, "dd"), "15 12"));
    CHECK(!strcmp(enc(&t, "a dd b"), "15 0 8 12 8 1"));
    CHECK(!strcmp(enc(&t, "add"), "15 0 3 3"));
    CHECK(!strcmp(enc(&t, "dda"), "15 3 3 0"));
    CHECK(!strcmp(enc(&t, "dd_"), "15 3 3"));  /* '_' is a word character; unknown to the model */
    /* normalized pattern: "ﬁ" and "fi" both match after NFKC */
    CHECK(!strcmp(enc(&t, "\xEF\xAC\x81"), "15 13"));
    CHECK(!strcmp(enc(&t, "afi"), "15 0 13"));
    /* the id of a content already in the vocabulary is the vocabulary's */
    CHECK(!strcmp(enc(&t, "cab"), "15 2 4"));
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    CHECK_OK(tokenizer_encode_ex(&t, "a <x> b", 7, false, &ids, err, sizeof err), err);
    CHECK(ids.n == 3 && ids.ids[0] == 0 && ids.ids[1] == 11 && ids.ids[2] == 1);
    tokenizer_ids_free(&ids);
    CHECK(tokenizer_id_is_special(&t, 15) && !tokenizer_id_is_special(&t, 11));
    CHECK(tokenizer_vocab_size(&t) == 16);
    CHECK(tokenizer_token_id(&t, "<x>") == 11 && tokenizer_token_id(&t, "ab") == 4);
    /* a normalized added token decodes to its normalized form ("fi"), as the reference does */
    int32_t dec[] = {15, 13, 11, 0};
    char *out;
    size_t len;
    CHECK(tokenizer_decode(&t, dec, 4, true, &out, &len, err, sizeof err) == HR_OK && !strcmp(out, "fi <x> a"));
    free(out);
    tokenizer_free(&t);
}

/* ----------------------------------------------------------- bad files ---- */

static void test_bad_files(void)
{
    struct tokenizer t;
    char err[HR_ERRLEN];
    CHECK(tokenizer_init(&t, "/nonexistent/tokenizer.json", err, sizeof err) == HR_ERR_IO);
    static const struct {
        const char *json;
        enum hr_status want;
    } bad[] = {
        {"", HR_ERR_FORMAT},
        {"{", HR_ERR_FORMAT},
        {"[]", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"ab\"]}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5}}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999}}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", HR_ERR_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"normalizer\":{\"type\":\"Lowercase\"}}",
         HR_ERR_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\",\"invert\":false}}",
         HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0}}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xff\":0}}}", HR_ERR_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}} x", HR_ERR_FORMAT},
        {"{\"added_tokens\":[{\"id\":0}],\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", HR_ERR_FORMAT},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err[0] = 0;
        enum hr_status st = tokenizer_init_json(&t, bad[k].json, strlen(bad[k].json), err, sizeof err);
        CHECK_MSG(st == bad[k].want, "case %zu: got %s (%s), want %s", k, hr_status_str(st), err,
                  hr_status_str(bad[k].want));
        CHECK(err[0] != 0);
        tokenizer_free(&t); /* a failed init leaves a zeroed tokenizer */
    }
    /* deep nesting does not overflow the stack */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = 0;
    CHECK(tokenizer_init_json(&t, deep, 2 * depth, err, sizeof err) == HR_ERR_FORMAT);
    free(deep);
    /* a truncated real file */
    if (qwen_ok) {
        char path[1024];
        FILE *f = fopen(test_path(path, sizeof path, test_cache_dir(), "qwen3/tokenizer.json"), "rb");
        char *head = malloc(1 << 20);
        size_t n = f ? fread(head, 1, 1 << 20, f) : 0;
        if (f)
            fclose(f);
        CHECK(tokenizer_init_json(&t, head, n, err, sizeof err) == HR_ERR_FORMAT);
        free(head);
    }
    tokenizer_free(NULL);
}

/* ------------------------------------------------------------- threads ---- */

struct worker {
    size_t mismatches;
};

static void *encode_all(void *arg)
{
    struct worker *w = arg;
    json_t *cs = json_object_get(cases, "cases");
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    for (int rep = 0; rep < 2; rep++)
        for (size_t i = 0; i < json_array_size(cs); i++) {
            json_t *c = json_array_get(cs, i), *t = json_object_get(c, "text");
            ids.n = 0;
            if (tokenizer_encode(&qwen, json_string_value(t), json_string_length(t), &ids, err, sizeof err) != HR_OK ||
                !ids_equal(&ids, json_object_get(c, "ids")))
                w->mismatches++;
        }
    tokenizer_ids_free(&ids);
    return NULL;
}

static void test_concurrent_encoding(void)
{
    if (!qwen_ok || !cases)
        {
        CHECK_MSG(false, "missing Qwen3 tokenizer or encode_cases.json");
        return;
    }
    enum { N = 4 };
    pthread_t th[N];
    struct worker w[N] = {{0}};
    for (int k = 0; k < N; k++)
        CHECK(pthread_create(&th[k], NULL, encode_all, &w[k]) == 0);
    for (int k = 0; k < N; k++) {
        pthread_join(th[k], NULL);
        CHECK_MSG(w[k].mismatches == 0, "thread %d: %zu mismatches", k, w[k].mismatches);
    }
}

int main(void)
{
    char path[1024], err[HR_ERRLEN];
    test_path(path, sizeof path, test_cache_dir(), "qwen3/tokenizer.json");
    qwen_ok = tokenizer_init(&qwen, path, err, sizeof err) == HR_OK;
    if (!qwen_ok)
        fprintf(stderr, "FATAL: %s\n  the Qwen3 tokenizer is needed: run `bash scripts/testdata.sh`\n", err);
    vectors = load_json(test_data_dir(), "qwen3/vectors.json");
    cases = load_json(test_data_dir(), "qwen3/encode_cases.json");
    decoded = load_json(test_data_dir(), "tokenizer/encode_cases_decoded.json");

    TEST_RUN(test_qwen3_loads);
    TEST_RUN(test_qwen3_vectors);
    TEST_RUN(test_qwen3_encode_cases);
    TEST_RUN(test_qwen3_decode_cases);
    TEST_RUN(test_streaming_by_hand);
    TEST_RUN(test_invalid_utf8);
    TEST_RUN(test_random_bytes);
    TEST_RUN(test_ids_buffer);
    TEST_RUN(test_normalization_forms);
    TEST_RUN(test_merge_forms);
    TEST_RUN(test_added_token_flags);
    TEST_RUN(test_bad_files);
    TEST_RUN(test_concurrent_encoding);

    json_decref(vectors);
    json_decref(cases);
    json_decref(decoded);
    if (qwen_ok)
        tokenizer_free(&qwen);
    TEST_END();
}
