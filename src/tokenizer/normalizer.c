/* Unicode normalization forms (UAX #15) for the tokenizer's normalizer step. */
#include "tokenizer/normalizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "tokenizer/unicode_data.h"
#include "tokenizer/utf8.h"

/* ---------------------------------------------------------------- tables ---- */

#define HANGUL_S_BASE 0xAC00u
#define HANGUL_L_BASE 0x1100u
#define HANGUL_V_BASE 0x1161u
#define HANGUL_T_BASE 0x11A7u
#define HANGUL_L_COUNT 19u
#define HANGUL_V_COUNT 21u
#define HANGUL_T_COUNT 28u
#define HANGUL_N_COUNT (HANGUL_V_COUNT * HANGUL_T_COUNT)
#define HANGUL_S_COUNT (HANGUL_L_COUNT * HANGUL_N_COUNT)

static inline uint16_t props(uint32_t cp)
{
    if (cp >= 0x110000)
        return 0;
    return unidata_stage2[(size_t)unidata_stage1[cp / UNIDATA_BLOCK] * UNIDATA_BLOCK + cp % UNIDATA_BLOCK];
}

static inline uint8_t ccc(uint32_t cp) { return (uint8_t)(props(cp) & 0xFF); }

static const struct unidata_decomp *find_decomp(uint32_t cp)
{
    size_t lo = 0, hi = sizeof unidata_decomps / sizeof unidata_decomps[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (unidata_decomps[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = sizeof unidata_decomps / sizeof unidata_decomps[0];
    return lo < n && unidata_decomps[lo].cp == cp ? &unidata_decomps[lo] : NULL;
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L_BASE && a < HANGUL_L_BASE + HANGUL_L_COUNT && b >= HANGUL_V_BASE &&
        b < HANGUL_V_BASE + HANGUL_V_COUNT)
        return HANGUL_S_BASE + ((a - HANGUL_L_BASE) * HANGUL_V_COUNT + (b - HANGUL_V_BASE)) * HANGUL_T_COUNT;
    if (a >= HANGUL_S_BASE && a < HANGUL_S_BASE + HANGUL_S_COUNT && (a - HANGUL_S_BASE) % HANGUL_T_COUNT == 0 &&
        b > HANGUL_T_BASE && b < HANGUL_T_BASE + HANGUL_T_COUNT)
        return a + (b - HANGUL_T_BASE);
    uint64_t key = (uint64_t)a << 21 | b;
    size_t lo = 0, hi = sizeof unidata_comps / sizeof unidata_comps[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (unidata_comps[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = sizeof unidata_comps / sizeof unidata_comps[0];
    return lo < n && unidata_comps[lo].key == key ? unidata_comps[lo].cp : 0;
}

/* ----------------------------------------------------------- one form ---- */

static uint16_t quick_flag(enum normalizer_form f)
{
    switch (f) {
    case NORMALIZER_FORM_NFC: return UNIDATA_F_NFC;
    case NORMALIZER_FORM_NFD: return UNIDATA_F_NFD;
    case NORMALIZER_FORM_NFKC: return UNIDATA_F_NFKC;
    case NORMALIZER_FORM_NFKD: return UNIDATA_F_NFKD;
    }
    return UNIDATA_F_NFC;
}

/* True when s is already in form f by the quick check (no flagged character). */
static bool quick_yes(enum normalizer_form f, const uint8_t *s, size_t n)
{
    uint16_t flag = quick_flag(f);
    size_t i = 0;
    while (i < n) {
        i = utf8_skip_ascii_words(s, i, n);
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += utf8_decode(s + i, &cp);
        if (props(cp) & flag)
            return false;
    }
    return true;
}

/* Normalizes s into sc->out[slot]; returns false when out of memory. */
static bool apply_form(enum normalizer_form f, const uint8_t *s, size_t n, struct normalizer_scratch *sc,
                       int slot, size_t *out_len)
{
    bool compat = f == NORMALIZER_FORM_NFKC || f == NORMALIZER_FORM_NFKD;
    bool compose = f == NORMALIZER_FORM_NFC || f == NORMALIZER_FORM_NFKC;
    /* full decompositions are at most 18 code points (U+FDFA) */
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_decode(s + i, &cp);
        if (!vec_reserve((void **)&sc->cps, &sc->cps_cap, m + 32, sizeof *sc->cps, 256))
            return false;
        uint16_t pr = props(cp);
        if (cp >= HANGUL_S_BASE && cp < HANGUL_S_BASE + HANGUL_S_COUNT) {
            uint32_t si = cp - HANGUL_S_BASE;
            sc->cps[m++] = HANGUL_L_BASE + si / HANGUL_N_COUNT;
            sc->cps[m++] = HANGUL_V_BASE + (si % HANGUL_N_COUNT) / HANGUL_T_COUNT;
            if (si % HANGUL_T_COUNT)
                sc->cps[m++] = HANGUL_T_BASE + si % HANGUL_T_COUNT;
            continue;
        }
        const struct unidata_decomp *d = NULL;
        if (pr & (compat ? UNIDATA_F_NFKD : UNIDATA_F_NFD))
            d = find_decomp(cp);
        if (d && compat) {
            memcpy(sc->cps + m, unidata_decomp_data + d->compat_off, d->compat_len * sizeof(uint32_t));
            m += d->compat_len;
        } else if (d && d->canon_len) {
            memcpy(sc->cps + m, unidata_decomp_data + d->canon_off, d->canon_len * sizeof(uint32_t));
            m += d->canon_len;
        } else {
            sc->cps[m++] = cp;
        }
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < m; i++) {
        uint32_t c = sc->cps[i];
        uint8_t cc = ccc(c);
        if (!cc)
            continue;
        size_t k = i;
        while (k > 0) {
            uint8_t pc = ccc(sc->cps[k - 1]);
            if (pc <= cc || pc == 0)
                break;
            sc->cps[k] = sc->cps[k - 1];
            k--;
        }
        sc->cps[k] = c;
    }
    if (compose && m > 0) {
        size_t o = 0;
        long starter = -1;
        int last_cc = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t c = sc->cps[i];
            uint16_t pr = props(c);
            int cc = pr & 0xFF;
            /* unblocked: nothing kept since the starter (last_cc == 0), or every kept mark
             * sorts strictly before c */
            if (starter >= 0 && (pr & UNIDATA_F_NFC) && (last_cc < cc || last_cc == 0)) {
                uint32_t comp = compose_pair(sc->cps[starter], c);
                if (comp) {
                    sc->cps[starter] = comp;
                    continue;
                }
            }
            if (cc == 0)
                starter = (long)o;
            last_cc = cc;
            sc->cps[o++] = c;
        }
        m = o;
    }
    if (!vec_reserve((void **)&sc->out[slot], &sc->out_cap[slot], m * 4 + 1, 1, 256))
        return false;
    uint8_t *w = (uint8_t *)sc->out[slot];
    size_t len = 0;
    for (size_t i = 0; i < m; i++)
        len += utf8_encode(sc->cps[i], w + len);
    *out_len = len;
    return true;
}

/* ---------------------------------------------------------------- API ---- */

static enum hr_status parse_one(struct normalizer *nz, const struct tkjson *j, uint32_t node, int depth,
                                char *err, size_t errlen)
{
    if (depth > 4)
        return hr_err(err, errlen, HR_ERR_FORMAT, "normalizer: nesting too deep");
    uint32_t type = tkjson_get(j, node, "type");
    size_t tl;
    const char *t = tkjson_str(j, type, &tl);
    if (!t)
        return hr_err(err, errlen, HR_ERR_FORMAT, "normalizer: missing \"type\"");
    if (tkjson_str_eq(j, type, "Sequence")) {
        uint32_t arr = tkjson_get(j, node, "normalizers");
        if (arr == TKJSON_NONE || tkjson_type(j, arr) != TKJSON_TYPE_ARRAY)
            return hr_err(err, errlen, HR_ERR_FORMAT, "normalizer: Sequence without \"normalizers\"");
        for (uint32_t c = tkjson_first(j, arr); c != TKJSON_NONE; c = tkjson_next(j, arr, c)) {
            enum hr_status st = parse_one(nz, j, c, depth + 1, err, errlen);
            if (st != HR_OK)
                return st;
        }
        return HR_OK;
    }
    enum normalizer_form f;
    if (tkjson_str_eq(j, type, "NFC"))
        f = NORMALIZER_FORM_NFC;
    else if (tkjson_str_eq(j, type, "NFD"))
        f = NORMALIZER_FORM_NFD;
    else if (tkjson_str_eq(j, type, "NFKC"))
        f = NORMALIZER_FORM_NFKC;
    else if (tkjson_str_eq(j, type, "NFKD"))
        f = NORMALIZER_FORM_NFKD;
    else
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "normalizer type \"%.*s\" is not supported", (int)tl, t);
    if (nz->n_steps == NORMALIZER_MAX_STEPS)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "normalizer: more than %d steps", NORMALIZER_MAX_STEPS);
    nz->steps[nz->n_steps++] = f;
    return HR_OK;
}

enum hr_status normalizer_init_json(struct normalizer *nz, const struct tkjson *j, uint32_t node,
                                    char *err, size_t errlen)
{
    memset(nz, 0, sizeof *nz);
    if (node == TKJSON_NONE || tkjson_type(j, node) == TKJSON_TYPE_NULL)
        return HR_OK;
    if (tkjson_type(j, node) != TKJSON_TYPE_OBJECT)
        return hr_err(err, errlen, HR_ERR_FORMAT, "normalizer: expected an object");
    return parse_one(nz, j, node, 0, err, errlen);
}

void normalizer_free(struct normalizer *nz)
{
    if (nz)
        memset(nz, 0, sizeof *nz);
}

enum hr_status normalizer_apply(const struct normalizer *nz, const char *s, size_t n,
                                struct normalizer_scratch *sc, const char **out, size_t *out_len,
                                char *err, size_t errlen)
{
    const char *cur = s;
    size_t cur_len = n;
    int slot = 0;
    for (int k = 0; k < nz->n_steps; k++) {
        if (quick_yes(nz->steps[k], (const uint8_t *)cur, cur_len))
            continue;
        size_t len;
        if (!apply_form(nz->steps[k], (const uint8_t *)cur, cur_len, sc, slot, &len))
            return hr_err(err, errlen, HR_ERR_NOMEM, "normalizer: out of memory");
        cur = sc->out[slot];
        cur_len = len;
        slot ^= 1;
    }
    *out = cur;
    *out_len = cur_len;
    return HR_OK;
}

void normalizer_scratch_free(struct normalizer_scratch *sc)
{
    if (!sc)
        return;
    free(sc->cps);
    free(sc->out[0]);
    free(sc->out[1]);
    memset(sc, 0, sizeof *sc);
}
