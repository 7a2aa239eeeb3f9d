/* Text helpers of the chat-template engine: byte buffers, UTF-8, Python's whitespace and
 * simple case mappings, and Python's number and string formatting (repr, json.dumps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* ============================================================================ buffers */

static bool buf_grow(struct template_buf *b, size_t need)
{
    if (b->r && b->r->lim && need > b->r->lim->max_output + 1)
        return template_limit(b->r, NULL, "rendered text exceeds the limit of %zu bytes",
                             b->r->lim->max_output);
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return b->r ? template_fail(b->r, NULL, HR_ERR_NOMEM, "out of memory") : false;
        cap *= 2;
    }
    if (b->r && !template_mem(b->r, (ptrdiff_t)(cap - b->cap)))
        return false;
    char *p = realloc(b->data, cap);
    if (!p) {
        if (b->r) {
            template_mem(b->r, -(ptrdiff_t)(cap - b->cap));
            template_fail(b->r, NULL, HR_ERR_NOMEM, "out of memory");
        }
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

bool template_buf_put(struct template_buf *b, const char *s, size_t n)
{
    if (n == 0)
        return true;
    if (n > SIZE_MAX - b->len - 1 || !buf_grow(b, b->len + n + 1))
        return false;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool template_buf_puts(struct template_buf *b, const char *s)
{
    return template_buf_put(b, s, strlen(s));
}

bool template_buf_putc(struct template_buf *b, char c)
{
    return template_buf_put(b, &c, 1);
}

bool template_buf_printf(struct template_buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    if ((size_t)n < sizeof tmp)
        return template_buf_put(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return b->r ? template_fail(b->r, NULL, HR_ERR_NOMEM, "out of memory") : false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = template_buf_put(b, big, (size_t)n);
    free(big);
    return ok;
}

bool template_buf_put_cp(struct template_buf *b, uint32_t cp)
{
    char tmp[4];
    size_t n = template_utf8_encode(cp, tmp);
    return template_buf_put(b, tmp, n);
}

void template_buf_free(struct template_buf *b)
{
    if (b->r && b->cap)
        template_mem(b->r, -(ptrdiff_t)b->cap);
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *template_buf_take(struct template_buf *b, size_t *len)
{
    if (!b->data && !buf_grow(b, 1))
        return NULL;
    b->data[b->len] = 0;
    char *p = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

/* ============================================================================== UTF-8 */

uint32_t template_utf8_decode(const char *str, size_t n, size_t *adv)
{
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0];
    *adv = 1;
    if (c < 0x80)
        return c;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0xDC00 + c; /* a stray byte: kept as itself (surrogateescape) */
    }
    if (n < need + 1)
        return 0xDC00 + c;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0xDC00 + c;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0xDC00 + c;
    *adv = need + 1;
    return cp;
}

size_t template_utf8_encode(uint32_t cp, char out[4])
{
    if (cp >= 0xDC80 && cp <= 0xDCFF) { /* an escaped stray byte goes back as that byte */
        out[0] = (char)(cp - 0xDC00);
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t template_utf8_count(const char *s, size_t n)
{
    size_t count = 0, i = 0, adv;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
        } else {
            template_utf8_decode(s + i, n - i, &adv);
            i += adv;
        }
        count++;
    }
    return count;
}

size_t template_utf8_offset(const char *s, size_t n, size_t idx)
{
    size_t i = 0, adv;
    while (i < n && idx > 0) {
        template_utf8_decode(s + i, n - i, &adv);
        i += adv;
        idx--;
    }
    return i;
}

/* ============================================================ character classes and case */

bool template_is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Simple (one-to-one) case pairs for the scripts chat text meets most: Latin, Greek,
 * Cyrillic, Armenian and fullwidth Latin. Multi-character mappings (German sharp s) and
 * rarer scripts are left unchanged. */
uint32_t template_to_upper(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7))
        return c - 32;
    if (c == 0xFF)
        return 0x178;
    if (c == 0xB5)
        return 0x39C;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x131)
            return 'I';
        if (c == 0x17F)
            return 'S';
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
            return (c % 2 == 0) ? c - 1 : c;
        if (c == 0x138 || c == 0x149 || c == 0x130 || c == 0x178)
            return c;
        return (c % 2 == 1) ? c - 1 : c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2)
        return c - 32;
    if (c == 0x3C2)
        return 0x3A3;
    if (c == 0x3AC)
        return 0x386;
    if (c >= 0x3AD && c <= 0x3AF)
        return c - 37;
    if (c == 0x3CC)
        return 0x38C;
    if (c == 0x3CD || c == 0x3CE)
        return c - 63;
    if (c >= 0x430 && c <= 0x44F)
        return c - 32;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
        return (c % 2 == 1) ? c - 1 : c;
    if (c >= 0x561 && c <= 0x586)
        return c - 48;
    if (c >= 0xFF41 && c <= 0xFF5A)
        return c - 32;
    return c;
}

uint32_t template_to_lower(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7))
        return c + 32;
    if (c >= 0x100 && c <= 0x17F) {
        if (c == 0x130)
            return 'i';
        if (c == 0x178)
            return 0xFF;
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
            return (c % 2 == 1) ? c + 1 : c;
        if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F)
            return c;
        return (c % 2 == 0) ? c + 1 : c;
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
        return c + 32;
    if (c == 0x386)
        return 0x3AC;
    if (c >= 0x388 && c <= 0x38A)
        return c + 37;
    if (c == 0x38C)
        return 0x3CC;
    if (c == 0x38E || c == 0x38F)
        return c + 63;
    if (c >= 0x410 && c <= 0x42F)
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F))
        return (c % 2 == 0) ? c + 1 : c;
    if (c >= 0x531 && c <= 0x556)
        return c + 48;
    if (c >= 0xFF21 && c <= 0xFF3A)
        return c + 32;
    return c;
}

bool template_is_cased(uint32_t c)
{
    return template_to_upper(c) != c || template_to_lower(c) != c || c == 0xDF || c == 0x138 ||
           c == 0x149;
}

bool template_is_digit(uint32_t c)
{
    return (c >= '0' && c <= '9') || (c >= 0x660 && c <= 0x669) || (c >= 0x6F0 && c <= 0x6F9) ||
           (c >= 0x966 && c <= 0x96F) || (c >= 0xFF10 && c <= 0xFF19) || c == 0xB2 || c == 0xB3 ||
           c == 0xB9;
}

bool template_is_alpha(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (template_is_cased(c) || c == 0xAA || c == 0xBA)
        return true;
    return (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A) || (c >= 0x905 && c <= 0x939) ||
           (c >= 0xE01 && c <= 0xE30) || (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) ||
           (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) ||
           (c >= 0x20000 && c <= 0x2FA1F);
}

bool template_is_word(uint32_t c)
{
    return c == '_' || template_is_alpha(c) || template_is_digit(c);
}

/* ============================================================================ numbers */

void template_format_float(double x, char out[32])
{
    if (isnan(x)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX -> sign, digit string, decimal exponent */
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20)
            digits[nd++] = *p;
    int exp10 = (*p == 'e') ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp10 >= -5 + 1 && exp10 < 16) { /* Python repr: fixed notation for 1e-4 <= |x| < 1e16 */
        if (exp10 < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                *o++ = '0';
            for (int i = 0; i < nd; i++)
                *o++ = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp10 + 1) {
                for (int i = exp10 + 1; i < nd; i++)
                    *o++ = digits[i];
            } else {
                *o++ = '0';
            }
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++)
                *o++ = digits[i];
        }
        int e = exp10 < 0 ? -exp10 : exp10;
        snprintf(o, (size_t)(out + 32 - o), "e%c%02d", exp10 < 0 ? '-' : '+', e % 1000);
    }
}

/* ============================================================================ strings */

/* Python's str.isprintable(), approximated for the characters chat text meets. */
static bool is_printable(uint32_t c)
{
    if (c < 0x20 || c == 0x7F)
        return false;
    if (c < 0x7F)
        return true;
    if (c <= 0xA0 || c == 0xAD)
        return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB))
        return false;
    if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000)
        return false;
    return true;
}

bool template_repr_str(struct template_buf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (!template_buf_putc(b, q))
        return false;
    size_t i = 0, adv;
    while (i < n) {
        uint32_t c = template_utf8_decode(s + i, n - i, &adv);
        bool ok;
        if (c == (uint32_t)q || c == '\\') {
            char e[2] = {'\\', (char)c};
            ok = template_buf_put(b, e, 2);
        } else if (c == '\n') {
            ok = template_buf_put(b, "\\n", 2);
        } else if (c == '\r') {
            ok = template_buf_put(b, "\\r", 2);
        } else if (c == '\t') {
            ok = template_buf_put(b, "\\t", 2);
        } else if (is_printable(c)) {
            ok = template_buf_put(b, s + i, adv);
        } else if (c <= 0xFF) {
            ok = template_buf_printf(b, "\\x%02x", c);
        } else if (c <= 0xFFFF) {
            ok = template_buf_printf(b, "\\u%04x", c);
        } else {
            ok = template_buf_printf(b, "\\U%08x", c);
        }
        if (!ok)
            return false;
        i += adv;
    }
    return template_buf_putc(b, q);
}

bool template_json_str(struct template_buf *b, const char *s, size_t n, bool ensure_ascii)
{
    if (!template_buf_putc(b, '"'))
        return false;
    size_t i = 0, start = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        size_t adv = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (ensure_ascii && c >= 0x80) {
            uint32_t cp = template_utf8_decode(s + i, n - i, &adv);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            esc = tmp;
        }
        if (esc) {
            if (!template_buf_put(b, s + start, i - start) || !template_buf_puts(b, esc))
                return false;
            i += adv;
            start = i;
        } else {
            i++;
        }
    }
    return template_buf_put(b, s + start, n - start) && template_buf_putc(b, '"');
}
