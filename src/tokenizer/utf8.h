/* UTF-8 helpers of the tokenizer (header-only, static inline). */
#ifndef HEARTH_TOKENIZER_UTF8_H
#define HEARTH_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

enum utf8_scan {
    UTF8_SCAN_OK,         /* a whole, valid character */
    UTF8_SCAN_INVALID,    /* a maximal subpart of an ill-formed sequence (one U+FFFD) */
    UTF8_SCAN_INCOMPLETE, /* a valid start cut short by the end of the input */
};

/* Classifies the sequence at s[0..n) (n >= 1) and sets *len to its length. The invalid
 * lengths follow Unicode's "maximal subpart" practice, the one Rust's from_utf8_lossy uses. */
static inline enum utf8_scan utf8_scan(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *len = 1;
        return UTF8_SCAN_OK;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        *len = 1;
        return UTF8_SCAN_INVALID;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = i;
            return UTF8_SCAN_INCOMPLETE;
        }
        uint8_t c = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (c < l || c > h) {
            *len = i;
            return UTF8_SCAN_INVALID;
        }
    }
    *len = need;
    return UTF8_SCAN_OK;
}

/* i moved past the whole 8-byte words of ASCII that start at it (the fast path of
 * every scan over mostly-ASCII text). */
static inline size_t utf8_skip_ascii_words(const uint8_t *s, size_t i, size_t n)
{
    while (i + 8 <= n) {
        uint64_t w;
        __builtin_memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            break;
        i += 8;
    }
    return i;
}

/* Offset of the first byte that does not start a whole valid character (n when all valid). */
static inline size_t utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        i = utf8_skip_ascii_words(s, i, n);
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        if (utf8_scan(s + i, n - i, &len) != UTF8_SCAN_OK)
            return i;
        i += len;
    }
    return n;
}

/* Decodes the valid character at s; returns its length. */
static inline size_t utf8_decode(const uint8_t *s, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0) {
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Encodes cp (a scalar value) into out[0..4); returns the length. */
static inline size_t utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
