/* Pre-tokenizers: Split and ByteLevel, run with Oniguruma like Hugging Face tokenizers. */
#include "tokenizer/pretok.h"

#include <oniguruma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "tokenizer/onig_delta.h"
#include "tokenizer/utf8.h"

/* The regex ByteLevel splits with when use_regex is true (GPT-2's). */
static const char BYTE_LEVEL_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------- regexes ---- */

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t onig_compile_mu = PTHREAD_MUTEX_INITIALIZER;
static int onig_init_rc;

static void onig_setup(void)
{
    OnigEncoding encs[1] = {ONIG_ENCODING_UTF8};
    onig_init_rc = onig_initialize(encs, 1);
}

/* The property patch for the Oniguruma we run on (see onig_delta.h), or NULL. */
static const struct unidelta_prop *delta_table(void)
{
    int a = 0, b = 0, c = 0;
    if (sscanf(onig_version(), "%d.%d.%d", &a, &b, &c) != 3)
        return unidelta_14_0;
    long v = a * 10000L + b * 100L + c;
    if (v >= 60910)
        return NULL; /* Unicode 16.0 already */
    return v == 60909 ? unidelta_15_1 : unidelta_14_0;
}

static const struct unidelta_prop *delta_find(const struct unidelta_prop *t, const char *name)
{
    for (; t && t->names; t++)
        for (const char *n = t->names; *n; n += strlen(n) + 1)
            if (!strcmp(n, name))
                return t;
    return NULL;
}

struct strbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct strbuf *sb, const char *s, size_t n)
{
    if (sb->oom)
        return;
    if (sb->n + n + 1 > sb->cap) {
        size_t c = sb->cap ? sb->cap : 256;
        while (c < sb->n + n + 1)
            c *= 2;
        char *np = realloc(sb->p, c);
        if (!np) {
            sb->oom = true;
            return;
        }
        sb->p = np;
        sb->cap = c;
    }
    memcpy(sb->p + sb->n, s, n);
    sb->n += n;
    sb->p[sb->n] = 0;
}

static void sb_ranges(struct strbuf *sb, const uint32_t *r, uint32_t n)
{
    char tmp[48];
    for (uint32_t k = 0; k < n; k++) {
        int len = r[2 * k] == r[2 * k + 1] ? snprintf(tmp, sizeof tmp, "\\x{%x}", r[2 * k])
                                           : snprintf(tmp, sizeof tmp, "\\x{%x}-\\x{%x}", r[2 * k], r[2 * k + 1]);
        sb_put(sb, tmp, (size_t)len);
    }
}

/* Writes a class equal to `positive` under Unicode 16.0, negated when asked. Nested classes
 * are valid inside brackets too, so the same text serves in and out of [...]. */
static void sb_class(struct strbuf *sb, const char *positive, size_t plen, bool negate,
                     const struct unidelta_prop *d)
{
    if (negate)
        sb_put(sb, "[^", 2);
    if (d->n_remove)
        sb_put(sb, "[", 1);
    sb_put(sb, "[", 1);
    sb_put(sb, positive, plen);
    sb_ranges(sb, d->add, d->n_add);
    sb_put(sb, "]", 1);
    if (d->n_remove) {
        sb_put(sb, "&&[^", 4);
        sb_ranges(sb, d->remove, d->n_remove);
        sb_put(sb, "]]", 2);
    }
    if (negate)
        sb_put(sb, "]", 1);
}

/* Rewrites \p{..}, \P{..}, \p{^..}, \d, \D, \w, \W so that the system Oniguruma matches what
 * the reference's Unicode 16.0 Oniguruma matches. Returns NULL when out of memory. */
static char *patch_unicode(const char *pat, size_t len, const struct unidelta_prop *t, size_t *out_len)
{
    struct strbuf sb = {0};
    sb_put(&sb, "", 0);
    for (size_t i = 0; i < len;) {
        if (pat[i] != '\\' || i + 1 >= len) {
            sb_put(&sb, pat + i, 1);
            i++;
            continue;
        }
        char d = pat[i + 1];
        if ((d == 'p' || d == 'P') && i + 2 < len && pat[i + 2] == '{') {
            const char *close = memchr(pat + i + 3, '}', len - i - 3);
            if (close) {
                const char *name = pat + i + 3;
                size_t nl = (size_t)(close - name);
                bool negate = d == 'P';
                if (nl && name[0] == '^') {
                    negate = !negate;
                    name++;
                    nl--;
                }
                char norm[64];
                size_t k = 0;
                for (size_t q = 0; q < nl && k + 1 < sizeof norm; q++) {
                    char ch = name[q];
                    if (ch == '_' || ch == '-' || ch == ' ')
                        continue;
                    norm[k++] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
                }
                norm[k] = 0;
                const struct unidelta_prop *dp = k < sizeof norm - 1 ? delta_find(t, norm) : NULL;
                if (dp) {
                    char positive[80];
                    int pl = snprintf(positive, sizeof positive, "\\p{%.*s}", (int)nl, name);
                    sb_class(&sb, positive, (size_t)pl, negate, dp);
                    i = (size_t)(close - pat) + 1;
                    continue;
                }
            }
        } else if (d == 'd' || d == 'D' || d == 'w' || d == 'W') {
            const char *key = (d == 'd' || d == 'D') ? "\\d" : "\\w";
            const struct unidelta_prop *dp = delta_find(t, key);
            if (dp) {
                sb_class(&sb, key, 2, d == 'D' || d == 'W', dp);
                i += 2;
                continue;
            }
        }
        sb_put(&sb, pat + i, 2); /* any other escape, \\ included, stays as it is */
        i += 2;
    }
    if (sb.oom) {
        free(sb.p);
        return NULL;
    }
    *out_len = sb.n;
    return sb.p;
}

enum hr_status pretok_regex_compile(const char *pattern, size_t len, void **re, char *err, size_t errlen)
{
    *re = NULL;
    pthread_once(&onig_once, onig_setup);
    if (onig_init_rc != ONIG_NORMAL)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "oniguruma: initialization failed (%d)", onig_init_rc);
    const struct unidelta_prop *t = delta_table();
    size_t plen = len;
    char *patched = NULL;
    if (t) {
        patched = patch_unicode(pattern, len, t, &plen);
        if (!patched)
            return hr_err(err, errlen, HR_ERR_NOMEM, "regex: out of memory");
    }
    const char *src = patched ? patched : pattern;
    regex_t *r = NULL;
    OnigErrorInfo einfo;
    pthread_mutex_lock(&onig_compile_mu);
    int rc = onig_new(&r, (const UChar *)src, (const UChar *)src + plen, ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                      ONIG_SYNTAX_DEFAULT, &einfo);
    pthread_mutex_unlock(&onig_compile_mu);
    free(patched);
    if (rc != ONIG_NORMAL) {
        UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo);
        return hr_err(err, errlen, HR_ERR_FORMAT, "regex /%.*s/: %s", (int)(len > 200 ? 200 : len), pattern,
                      (const char *)msg);
    }
    *re = r;
    return HR_OK;
}

void pretok_regex_free(void *re)
{
    if (re)
        onig_free((regex_t *)re);
}

/* ------------------------------------------------------------ ByteLevel ---- */

static bool byte_is_printable(uint8_t b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t pretok_byte_level_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    /* the others are numbered from 256 in byte order: 0x00-0x20, 0x7F-0xA0, 0xAD */
    if (b <= 0x20)
        return 256u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int pretok_byte_level_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(0x7F + (cp - 256 - 33));
    if (cp == 256 + 67)
        return 0xAD;
    return -1;
}

/* ------------------------------------------------------------- config ---- */

static enum hr_status parse_step(struct pretok *pt, const struct tkjson *j, uint32_t node, int depth, char *err,
                                 size_t errlen)
{
    if (depth > 4)
        return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer: nesting too deep");
    if (tkjson_type(j, node) != TKJSON_TYPE_OBJECT)
        return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer: expected an object");
    uint32_t type = tkjson_get(j, node, "type");
    size_t tl;
    const char *t = tkjson_str(j, type, &tl);
    if (!t)
        return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer: missing \"type\"");
    if (tkjson_str_eq(j, type, "Sequence")) {
        uint32_t arr = tkjson_get(j, node, "pretokenizers");
        if (arr == TKJSON_NONE || tkjson_type(j, arr) != TKJSON_TYPE_ARRAY)
            return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer: Sequence without \"pretokenizers\"");
        for (uint32_t c = tkjson_first(j, arr); c != TKJSON_NONE; c = tkjson_next(j, arr, c)) {
            enum hr_status st = parse_step(pt, j, c, depth + 1, err, errlen);
            if (st != HR_OK)
                return st;
        }
        return HR_OK;
    }
    if (pt->n_steps == PRETOK_MAX_STEPS)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "pre_tokenizer: more than %d steps", PRETOK_MAX_STEPS);
    struct pretok_step *s = &pt->steps[pt->n_steps];
    memset(s, 0, sizeof *s);
    if (tkjson_str_eq(j, type, "ByteLevel")) {
        s->kind = PRETOK_KIND_BYTE_LEVEL;
        s->add_prefix_space = tkjson_bool(j, tkjson_get(j, node, "add_prefix_space"), true);
        s->use_regex = tkjson_bool(j, tkjson_get(j, node, "use_regex"), true);
        if (s->use_regex) {
            enum hr_status st = pretok_regex_compile(BYTE_LEVEL_REGEX, strlen(BYTE_LEVEL_REGEX), &s->re, err, errlen);
            if (st != HR_OK)
                return st;
        }
        pt->n_steps++;
        return HR_OK;
    }
    if (!tkjson_str_eq(j, type, "Split"))
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "pre_tokenizer type \"%.*s\" is not supported", (int)tl, t);
    s->kind = PRETOK_KIND_SPLIT;
    uint32_t beh = tkjson_get(j, node, "behavior");
    static const struct {
        const char *name;
        enum pretok_behavior b;
    } behaviors[] = {
        {"Removed", PRETOK_BEHAVIOR_REMOVED},
        {"Isolated", PRETOK_BEHAVIOR_ISOLATED},
        {"MergedWithPrevious", PRETOK_BEHAVIOR_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", PRETOK_BEHAVIOR_MERGED_WITH_NEXT},
        {"Contiguous", PRETOK_BEHAVIOR_CONTIGUOUS},
    };
    bool found = false;
    for (size_t k = 0; k < sizeof behaviors / sizeof behaviors[0]; k++)
        if (tkjson_str_eq(j, beh, behaviors[k].name)) {
            s->behavior = behaviors[k].b;
            found = true;
        }
    if (!found)
        return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer Split: bad or missing \"behavior\"");
    s->invert = tkjson_bool(j, tkjson_get(j, node, "invert"), false);
    uint32_t pat = tkjson_get(j, node, "pattern");
    size_t plen;
    const char *p;
    if ((p = tkjson_str(j, tkjson_get(j, pat, "Regex"), &plen))) {
        enum hr_status st = pretok_regex_compile(p, plen, &s->re, err, errlen);
        if (st != HR_OK)
            return st;
    } else if ((p = tkjson_str(j, tkjson_get(j, pat, "String"), &plen))) {
        /* a literal: escape every ASCII punctuation character for the regex engine */
        char *esc = malloc(plen * 2 + 1);
        if (!esc)
            return hr_err(err, errlen, HR_ERR_NOMEM, "pre_tokenizer: out of memory");
        size_t m = 0;
        for (size_t k = 0; k < plen; k++) {
            unsigned char c = (unsigned char)p[k];
            if (c < 0x80 && c > ' ' && !(c >= '0' && c <= '9') && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
                esc[m++] = '\\';
            esc[m++] = (char)c;
        }
        enum hr_status st = pretok_regex_compile(esc, m, &s->re, err, errlen);
        free(esc);
        if (st != HR_OK)
            return st;
    } else {
        return hr_err(err, errlen, HR_ERR_FORMAT, "pre_tokenizer Split: \"pattern\" needs \"Regex\" or \"String\"");
    }
    pt->n_steps++;
    return HR_OK;
}

enum hr_status pretok_init_json(struct pretok *pt, const struct tkjson *j, uint32_t node, char *err, size_t errlen)
{
    memset(pt, 0, sizeof *pt);
    if (node == TKJSON_NONE || tkjson_type(j, node) == TKJSON_TYPE_NULL)
        return HR_OK;
    enum hr_status st = parse_step(pt, j, node, 0, err, errlen);
    if (st != HR_OK) {
        /* the step being parsed may hold a compiled regex too */
        if (pt->n_steps < PRETOK_MAX_STEPS)
            pretok_regex_free(pt->steps[pt->n_steps].re);
        pretok_free(pt);
    }
    return st;
}

void pretok_free(struct pretok *pt)
{
    if (!pt)
        return;
    for (int k = 0; k < pt->n_steps; k++)
        pretok_regex_free(pt->steps[k].re);
    memset(pt, 0, sizeof *pt);
}

/* ------------------------------------------------------------- running ---- */

#define OOM(err, errlen) hr_err(err, errlen, HR_ERR_NOMEM, "pre_tokenizer: out of memory")

/* Fills level lv's spans with (start, end, is_match) covering s[0..n), the way the tokenizers
 * Pattern trait does for an onig regex. Returns the number of spans. */
static enum hr_status find_spans(regex_t *re, const char *s, size_t n, struct pretok_scratch *sc, int lv,
                                 size_t *n_spans, char *err, size_t errlen)
{
    const UChar *str = (const UChar *)s, *end = str + n;
    OnigRegion *region = sc->region;
    size_t k = 0;
    size_t prev = 0, pos = 0;
    long last_match_end = -1;
#define PUSH(a, b, m)                                                                                         \
    do {                                                                                                      \
        if (!vec_reserve((void **)&sc->level[lv].spans, &sc->level[lv].spans_cap, (k + 1) * 3, sizeof(uint32_t), \
                         64))                                                                                 \
            return OOM(err, errlen);                                                                          \
        sc->level[lv].spans[k * 3] = (uint32_t)(a);                                                           \
        sc->level[lv].spans[k * 3 + 1] = (uint32_t)(b);                                                       \
        sc->level[lv].spans[k * 3 + 2] = (m);                                                                 \
        k++;                                                                                                  \
    } while (0)
    if (n == 0) {
        PUSH(0, 0, 0);
        *n_spans = k;
        return HR_OK;
    }
    while (pos <= n) {
        int r = onig_search(re, str, end, str + pos, end, region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH)
            break;
        if (r < 0) {
            UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
            onig_error_code_to_str(msg, r);
            return hr_err(err, errlen, HR_ERR_INTERNAL, "regex search failed: %s", (const char *)msg);
        }
        size_t ms = (size_t)region->beg[0], me = (size_t)region->end[0];
        if (ms == me && last_match_end == (long)me) {
            /* no empty match right after the previous match: step one character */
            if (pos >= n)
                break;
            size_t cl;
            if (utf8_scan((const uint8_t *)s + pos, n - pos, &cl) != UTF8_SCAN_OK)
                cl = 1;
            pos += cl;
            continue;
        }
        if (prev != ms)
            PUSH(prev, ms, 0);
        PUSH(ms, me, 1);
        prev = me;
        pos = me;
        last_match_end = (long)me;
    }
    if (prev != n)
        PUSH(prev, n, 0);
#undef PUSH
    *n_spans = k;
    return HR_OK;
}

/* Applies the delimiter behaviour in place: spans become (start, end, keep). */
static size_t apply_behavior(uint32_t *sp, size_t n, enum pretok_behavior b, bool invert)
{
    if (invert)
        for (size_t i = 0; i < n; i++)
            sp[i * 3 + 2] ^= 1;
    size_t o = 0;
    bool prev = false;
    switch (b) {
    case PRETOK_BEHAVIOR_ISOLATED:
        for (size_t i = 0; i < n; i++)
            sp[i * 3 + 2] = 1;
        return n;
    case PRETOK_BEHAVIOR_REMOVED:
        for (size_t i = 0; i < n; i++)
            sp[i * 3 + 2] = !sp[i * 3 + 2];
        return n;
    case PRETOK_BEHAVIOR_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            bool m = sp[i * 3 + 2];
            if (o > 0 && m == prev) {
                sp[(o - 1) * 3 + 1] = sp[i * 3 + 1];
            } else {
                sp[o * 3] = sp[i * 3];
                sp[o * 3 + 1] = sp[i * 3 + 1];
                sp[o * 3 + 2] = 1;
                o++;
            }
            prev = m;
        }
        return o;
    case PRETOK_BEHAVIOR_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n; i++) {
            bool m = sp[i * 3 + 2];
            if (o > 0 && m && !prev) {
                sp[(o - 1) * 3 + 1] = sp[i * 3 + 1];
            } else {
                sp[o * 3] = sp[i * 3];
                sp[o * 3 + 1] = sp[i * 3 + 1];
                sp[o * 3 + 2] = 1;
                o++;
            }
            prev = m;
        }
        return o;
    case PRETOK_BEHAVIOR_MERGED_WITH_NEXT: {
        /* right to left, filling from the end, then shift down */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            bool m = sp[i * 3 + 2];
            uint32_t a = sp[i * 3], e = sp[i * 3 + 1];
            if (w < n && m && !prev) {
                sp[w * 3] = a;
            } else {
                w--;
                sp[w * 3] = a;
                sp[w * 3 + 1] = e;
                sp[w * 3 + 2] = 1;
            }
            prev = m;
        }
        memmove(sp, sp + w * 3, (n - w) * 3 * sizeof *sp);
        return n - w;
    }
    }
    return n;
}

static enum hr_status run_level(const struct pretok *pt, int lv, const char *s, size_t n, struct pretok_scratch *sc,
                                enum hr_status (*emit)(void *, const char *, size_t), void *ctx, char *err,
                                size_t errlen);

/* Maps s to ByteLevel characters into level lv's buffer and continues with the next step. */
static enum hr_status byte_level_map(const struct pretok *pt, int lv, const char *s, size_t n, bool prefix,
                                     struct pretok_scratch *sc, enum hr_status (*emit)(void *, const char *, size_t),
                                     void *ctx, char *err, size_t errlen)
{
    if (!vec_reserve((void **)&sc->level[lv].buf, &sc->level[lv].buf_cap, 2 * n + 2, 1, 64))
        return OOM(err, errlen);
    uint8_t *w = (uint8_t *)sc->level[lv].buf;
    size_t m = 0;
    if (prefix)
        m += utf8_encode(pretok_byte_level_cp(' '), w + m);
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if (b >= '!' && b <= '~')
            w[m++] = b;
        else
            m += utf8_encode(pretok_byte_level_cp(b), w + m);
    }
    return run_level(pt, lv + 1, (const char *)w, m, sc, emit, ctx, err, errlen);
}

static enum hr_status run_level(const struct pretok *pt, int lv, const char *s, size_t n, struct pretok_scratch *sc,
                                enum hr_status (*emit)(void *, const char *, size_t), void *ctx, char *err,
                                size_t errlen)
{
    if (n == 0)
        return HR_OK; /* empty pieces are dropped after every step */
    if (lv == pt->n_steps)
        return emit(ctx, s, n);
    const struct pretok_step *st = &pt->steps[lv];
    if (st->kind == PRETOK_KIND_BYTE_LEVEL) {
        bool prefix = st->add_prefix_space && s[0] != ' ';
        if (!st->use_regex)
            return byte_level_map(pt, lv, s, n, prefix, sc, emit, ctx, err, errlen);
        /* the prefix space goes in first, then the GPT-2 regex splits (Isolated) */
        const char *text = s;
        size_t tn = n;
        if (prefix) {
            if (!vec_reserve((void **)&sc->level[lv].pre, &sc->level[lv].pre_cap, n + 1, 1, 64))
                return OOM(err, errlen);
            sc->level[lv].pre[0] = ' ';
            memcpy(sc->level[lv].pre + 1, s, n);
            text = sc->level[lv].pre;
            tn = n + 1;
        }
        size_t ns;
        enum hr_status rc = find_spans(st->re, text, tn, sc, lv, &ns, err, errlen);
        if (rc != HR_OK)
            return rc;
        for (size_t i = 0; i < ns; i++) {
            uint32_t a = sc->level[lv].spans[i * 3], e = sc->level[lv].spans[i * 3 + 1];
            if (e == a)
                continue;
            rc = byte_level_map(pt, lv, text + a, e - a, false, sc, emit, ctx, err, errlen);
            if (rc != HR_OK)
                return rc;
        }
        return HR_OK;
    }
    size_t ns;
    enum hr_status rc = find_spans(st->re, s, n, sc, lv, &ns, err, errlen);
    if (rc != HR_OK)
        return rc;
    ns = apply_behavior(sc->level[lv].spans, ns, st->behavior, st->invert);
    for (size_t i = 0; i < ns; i++) {
        uint32_t *sp = sc->level[lv].spans + i * 3;
        if (!sp[2] || sp[1] == sp[0])
            continue;
        rc = run_level(pt, lv + 1, s + sp[0], sp[1] - sp[0], sc, emit, ctx, err, errlen);
        if (rc != HR_OK)
            return rc;
    }
    return HR_OK;
}

enum hr_status pretok_run(const struct pretok *pt, const char *s, size_t n, struct pretok_scratch *sc,
                          enum hr_status (*emit)(void *, const char *, size_t), void *ctx, char *err,
                          size_t errlen)
{
    if (n > UINT32_MAX / 2)
        return hr_err(err, errlen, HR_ERR_INVALID, "text too long for the pre-tokenizer (%zu bytes)", n);
    if (!sc->region) {
        sc->region = onig_region_new();
        if (!sc->region)
            return OOM(err, errlen);
    }
    return run_level(pt, 0, s, n, sc, emit, ctx, err, errlen);
}

void pretok_scratch_free(struct pretok_scratch *sc)
{
    if (!sc)
        return;
    for (int k = 0; k < PRETOK_MAX_STEPS; k++) {
        free(sc->level[k].spans);
        free(sc->level[k].buf);
        free(sc->level[k].pre);
    }
    if (sc->region)
        onig_region_free(sc->region, 1);
    memset(sc, 0, sizeof *sc);
}
