/* Template lexer: source text -> tokens, following Jinja2's lexer as Hugging Face configures
 * it (trim_blocks, lstrip_blocks, newlines normalised to "\n", one trailing newline dropped).
 *
 * Whitespace control: "{%-" strips the whitespace before the tag, "-%}" the whitespace after;
 * "{%+" / "+%}" turn lstrip_blocks / trim_blocks off for that tag. lstrip_blocks removes spaces
 * and tabs between the start of a line and a block or comment tag; trim_blocks removes the first
 * newline after a block or comment tag. Brackets inside a tag must balance before "}}" or "%}"
 * can end it (so a dict literal may contain "}}"). */
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"
#include "base/hex.h"

struct lexer {
    const char *src; /* [n] normalised source */
    size_t n;
    size_t pos;
    uint32_t line;
    size_t line_start; /* offset of the current line's first byte */
    struct template_token *tok;
    size_t ntok, captok;
    struct template_buf text; /* token strings, referenced by offset until the end */
    char *err;
    size_t errlen;
    enum hr_status st;
};

static bool lex_fail(struct lexer *lx, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool lex_fail(struct lexer *lx, size_t at, const char *fmt, ...)
{
    if (lx->st != HR_OK)
        return false;
    /* line/column of byte offset at */
    uint32_t line = 1;
    size_t ls = 0;
    for (size_t i = 0; i < at && i < lx->n; i++)
        if (lx->src[i] == '\n') {
            line++;
            ls = i + 1;
        }
    char msg[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lx->st = HR_ERR_FORMAT;
    hr_err(lx->err, lx->errlen, HR_ERR_FORMAT, "line %u, column %zu: %s", line, at - ls + 1, msg);
    return false;
}

static void advance_to(struct lexer *lx, size_t to)
{
    for (size_t i = lx->pos; i < to; i++)
        if (lx->src[i] == '\n') {
            lx->line++;
            lx->line_start = i + 1;
        }
    lx->pos = to;
}

/* Adds a token at byte offset at; s/len (copied) for text tokens. */
static struct template_token *push(struct lexer *lx, enum template_tok type, size_t at,
                                   const char *s, size_t len)
{
    if (lx->ntok == lx->captok) {
        size_t cap = lx->captok ? lx->captok * 2 : 256;
        struct template_token *t = realloc(lx->tok, cap * sizeof *t);
        if (!t) {
            lx->st = hr_err(lx->err, lx->errlen, HR_ERR_NOMEM, "out of memory lexing the template");
            return NULL;
        }
        lx->tok = t;
        lx->captok = cap;
    }
    struct template_token *t = &lx->tok[lx->ntok++];
    memset(t, 0, sizeof *t);
    t->type = type;
    /* line of offset at: at is never before the current line start minus a few bytes, so
     * count from the tracked position */
    uint32_t line = lx->line;
    size_t ls = lx->line_start;
    for (size_t i = lx->pos; i < at; i++)
        if (lx->src[i] == '\n') {
            line++;
            ls = i + 1;
        }
    t->line = line;
    t->col = (uint32_t)(at >= ls ? at - ls + 1 : 1);
    if (s) {
        /* stored as an offset into text; fixed up into pointers at the end */
        t->s = (const char *)(uintptr_t)lx->text.len;
        t->len = len;
        if (!template_buf_put(&lx->text, s, len) || !template_buf_putc(&lx->text, 0)) {
            lx->st = hr_err(lx->err, lx->errlen, HR_ERR_NOMEM, "out of memory lexing the template");
            return NULL;
        }
    }
    return t;
}

static bool is_space_at(const struct lexer *lx, size_t i, size_t *adv)
{
    uint32_t c = template_utf8_decode(lx->src + i, lx->n - i, adv);
    return template_is_space(c);
}

static size_t skip_space(const struct lexer *lx, size_t i)
{
    size_t adv;
    while (i < lx->n && is_space_at(lx, i, &adv))
        i += adv;
    return i;
}

/* Length of the whitespace suffix of src[a..b) (Python str.rstrip()). */
static size_t rstrip_len(const struct lexer *lx, size_t a, size_t b)
{
    size_t end = b;
    while (end > a) {
        size_t s = end - 1;
        while (s > a && ((unsigned char)lx->src[s] & 0xC0) == 0x80 && end - s < 4)
            s--;
        size_t adv;
        uint32_t c = template_utf8_decode(lx->src + s, end - s, &adv);
        if (s + adv != end) { /* not a whole character: a stray byte */
            s = end - 1;
            c = 0xDC00 + (unsigned char)lx->src[s];
        }
        if (!template_is_space(c))
            break;
        end = s;
    }
    return b - end;
}

/* ------------------------------------------------------------------ string literals */

/* Python's unicode-escape decoding of a literal's body src[a..b) into out. */
static bool unescape(struct lexer *lx, size_t a, size_t b, struct template_buf *out)
{
    size_t i = a;
    while (i < b) {
        char c = lx->src[i];
        if (c != '\\' || i + 1 >= b) {
            if (!template_buf_putc(out, c))
                return false;
            i++;
            continue;
        }
        char e = lx->src[i + 1];
        const char *simple = NULL;
        switch (e) {
        case '\\': simple = "\\"; break;
        case '\'': simple = "'"; break;
        case '"': simple = "\""; break;
        case 'a': simple = "\a"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'n': simple = "\n"; break;
        case 'r': simple = "\r"; break;
        case 't': simple = "\t"; break;
        case 'v': simple = "\v"; break;
        case '\n': simple = ""; break; /* line continuation */
        default: break;
        }
        if (simple) {
            if (!template_buf_puts(out, simple))
                return false;
            i += 2;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            size_t j = i + 1;
            for (int k = 0; k < 3 && j < b && lx->src[j] >= '0' && lx->src[j] <= '7'; k++, j++)
                v = v * 8 + (uint32_t)(lx->src[j] - '0');
            if (!template_buf_put_cp(out, v))
                return false;
            i = j;
            continue;
        }
        if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = (i + 2 + (size_t)k < b) ? hex_digit(lx->src[i + 2 + (size_t)k]) : -1;
                if (h < 0)
                    return lex_fail(lx, i, "truncated \\%c escape in a string literal", e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return lex_fail(lx, i, "escape \\%c%.*s is not a Unicode scalar value", e, digits,
                                lx->src + i + 2);
            if (!template_buf_put_cp(out, v))
                return false;
            i += 2 + (size_t)digits;
            continue;
        }
        if (e == 'N')
            return lex_fail(lx, i, "\\N{...} escapes are not supported");
        /* unknown escape: Python keeps the backslash */
        if (!template_buf_putc(out, '\\'))
            return false;
        i++;
    }
    return true;
}

/* ---------------------------------------------------------------------- tag contents */

static bool is_ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static bool is_ident(unsigned char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* Matches Jinja's float literal at i: digits ('.' digits)? exponent | digits '.' digits,
 * with '_' separators. Returns its length or 0. */
static size_t match_float(const struct lexer *lx, size_t i)
{
    if (i > 0 && lx->src[i - 1] == '.')
        return 0;
    size_t j = i;
    bool any = false;
    while (j < lx->n && ((lx->src[j] >= '0' && lx->src[j] <= '9') ||
                         (lx->src[j] == '_' && any && j + 1 < lx->n && lx->src[j + 1] >= '0' &&
                          lx->src[j + 1] <= '9'))) {
        any = true;
        j++;
    }
    if (!any)
        return 0;
    bool frac = false;
    if (j + 1 < lx->n && lx->src[j] == '.' && lx->src[j + 1] >= '0' && lx->src[j + 1] <= '9') {
        frac = true;
        j++;
        while (j < lx->n && ((lx->src[j] >= '0' && lx->src[j] <= '9') ||
                             (lx->src[j] == '_' && j + 1 < lx->n && lx->src[j + 1] >= '0' &&
                              lx->src[j + 1] <= '9')))
            j++;
    }
    if (j < lx->n && (lx->src[j] == 'e' || lx->src[j] == 'E')) {
        size_t k = j + 1;
        if (k < lx->n && (lx->src[k] == '+' || lx->src[k] == '-'))
            k++;
        if (k < lx->n && lx->src[k] >= '0' && lx->src[k] <= '9') {
            while (k < lx->n && ((lx->src[k] >= '0' && lx->src[k] <= '9') || lx->src[k] == '_'))
                k++;
            return k - i;
        }
    }
    return frac ? j - i : 0;
}

static bool lex_number(struct lexer *lx)
{
    size_t i = lx->pos;
    size_t flen = match_float(lx, i);
    char tmp[128];
    if (flen) {
        size_t k = 0;
        for (size_t j = i; j < i + flen && k + 1 < sizeof tmp; j++)
            if (lx->src[j] != '_')
                tmp[k++] = lx->src[j];
        tmp[k] = 0;
        struct template_token *t = push(lx, TEMPLATE_TOK_FLOAT, i, NULL, 0);
        if (!t)
            return false;
        t->f = strtod(tmp, NULL);
        advance_to(lx, i + flen);
        return true;
    }
    int base = 10;
    size_t j = i;
    if (lx->src[i] == '0' && i + 1 < lx->n) {
        char p = lx->src[i + 1];
        if (p == 'b' || p == 'B')
            base = 2;
        else if (p == 'o' || p == 'O')
            base = 8;
        else if (p == 'x' || p == 'X')
            base = 16;
        if (base != 10)
            j += 2;
    }
    uint64_t v = 0;
    size_t digits = 0;
    if (base == 10 && lx->src[i] == '0') {
        /* "0", "0_0": a decimal zero; "012" lexes as 0 then 12, as in Jinja */
        j++;
        digits = 1;
        while (j + 1 < lx->n && lx->src[j] == '_' && lx->src[j + 1] == '0')
            j += 2;
    } else {
        while (j < lx->n) {
            char c = lx->src[j];
            int d = hex_digit(c);
            if (c == '_' && digits && j + 1 < lx->n && hex_digit(lx->src[j + 1]) >= 0 &&
                hex_digit(lx->src[j + 1]) < base) {
                j++;
                continue;
            }
            if (d < 0 || d >= base)
                break;
            if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base || v * (uint64_t)base + (uint64_t)d > INT64_MAX)
                return lex_fail(lx, i, "integer literal too large");
            v = v * (uint64_t)base + (uint64_t)d;
            digits++;
            j++;
        }
    }
    if (!digits)
        return lex_fail(lx, i, "malformed number literal");
    struct template_token *t = push(lx, TEMPLATE_TOK_INT, i, NULL, 0);
    if (!t)
        return false;
    t->i = (int64_t)v;
    advance_to(lx, j);
    return true;
}

static const struct {
    const char *op;
    enum template_tok tok;
} OPERATORS[] = {
    {"//", TEMPLATE_TOK_FLOORDIV}, {"**", TEMPLATE_TOK_POW}, {"==", TEMPLATE_TOK_EQ},
    {"!=", TEMPLATE_TOK_NE},       {">=", TEMPLATE_TOK_GTEQ}, {"<=", TEMPLATE_TOK_LTEQ},
    {"+", TEMPLATE_TOK_ADD},       {"-", TEMPLATE_TOK_SUB},   {"/", TEMPLATE_TOK_DIV},
    {"*", TEMPLATE_TOK_MUL},       {"%", TEMPLATE_TOK_MOD},   {"~", TEMPLATE_TOK_TILDE},
    {"[", TEMPLATE_TOK_LBRACKET},  {"]", TEMPLATE_TOK_RBRACKET}, {"(", TEMPLATE_TOK_LPAREN},
    {")", TEMPLATE_TOK_RPAREN},    {"{", TEMPLATE_TOK_LBRACE}, {"}", TEMPLATE_TOK_RBRACE},
    {">", TEMPLATE_TOK_GT},        {"<", TEMPLATE_TOK_LT},    {"=", TEMPLATE_TOK_ASSIGN},
    {".", TEMPLATE_TOK_DOT},       {":", TEMPLATE_TOK_COLON}, {"|", TEMPLATE_TOK_PIPE},
    {",", TEMPLATE_TOK_COMMA},     {";", TEMPLATE_TOK_SEMICOLON},
};

#define MAX_BRACKETS 256

/* Lexes the inside of a {{ }} or {% %} tag up to and including its end.
 * Sets *line_starting as Jinja does (the end tag's match ended with a newline). */
static bool lex_tag(struct lexer *lx, bool block, size_t tag_at, bool *line_starting)
{
    char stack[MAX_BRACKETS];
    size_t depth = 0;
    for (;;) {
        size_t i = skip_space(lx, lx->pos);
        advance_to(lx, i);
        if (i >= lx->n)
            return lex_fail(lx, tag_at, "unexpected end of template: the %s is never closed",
                            block ? "block tag '{%'" : "print tag '{{'");
        const char *s = lx->src + i;
        size_t left = lx->n - i;
        if (depth == 0) {
            if (block) {
                if (left >= 3 && s[0] == '+' && s[1] == '%' && s[2] == '}') {
                    if (!push(lx, TEMPLATE_TOK_BLOCK_END, i, NULL, 0))
                        return false;
                    advance_to(lx, i + 3);
                    *line_starting = false;
                    return true;
                }
                if (left >= 3 && s[0] == '-' && s[1] == '%' && s[2] == '}') {
                    if (!push(lx, TEMPLATE_TOK_BLOCK_END, i, NULL, 0))
                        return false;
                    size_t e = skip_space(lx, i + 3);
                    *line_starting = e > i + 3 && lx->src[e - 1] == '\n';
                    advance_to(lx, e);
                    return true;
                }
                if (left >= 2 && s[0] == '%' && s[1] == '}') {
                    if (!push(lx, TEMPLATE_TOK_BLOCK_END, i, NULL, 0))
                        return false;
                    size_t e = i + 2;
                    *line_starting = false;
                    if (e < lx->n && lx->src[e] == '\n') { /* trim_blocks */
                        e++;
                        *line_starting = true;
                    }
                    advance_to(lx, e);
                    return true;
                }
            } else {
                if (left >= 3 && s[0] == '-' && s[1] == '}' && s[2] == '}') {
                    if (!push(lx, TEMPLATE_TOK_VAR_END, i, NULL, 0))
                        return false;
                    size_t e = skip_space(lx, i + 3);
                    *line_starting = e > i + 3 && lx->src[e - 1] == '\n';
                    advance_to(lx, e);
                    return true;
                }
                if (left >= 2 && s[0] == '}' && s[1] == '}') {
                    if (!push(lx, TEMPLATE_TOK_VAR_END, i, NULL, 0))
                        return false;
                    advance_to(lx, i + 2);
                    *line_starting = false;
                    return true;
                }
            }
        }
        unsigned char c = (unsigned char)s[0];
        if (c >= '0' && c <= '9') {
            if (!lex_number(lx))
                return false;
            continue;
        }
        if (is_ident_start(c)) {
            size_t j = i;
            while (j < lx->n && is_ident((unsigned char)lx->src[j])) {
                size_t adv;
                if ((unsigned char)lx->src[j] >= 0x80 && is_space_at(lx, j, &adv))
                    break;
                j++;
            }
            if (!push(lx, TEMPLATE_TOK_NAME, i, s, j - i))
                return false;
            advance_to(lx, j);
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < lx->n && lx->src[j] != (char)c) {
                if (lx->src[j] == '\\' && j + 1 < lx->n)
                    j++;
                j++;
            }
            if (j >= lx->n)
                return lex_fail(lx, i, "unterminated string literal");
            struct template_buf tmp = {0};
            if (!unescape(lx, i + 1, j, &tmp)) {
                template_buf_free(&tmp);
                if (lx->st == HR_OK)
                    lx->st = hr_err(lx->err, lx->errlen, HR_ERR_NOMEM, "out of memory");
                return false;
            }
            struct template_token *t = push(lx, TEMPLATE_TOK_STRING, i, tmp.data ? tmp.data : "", tmp.len);
            template_buf_free(&tmp);
            if (!t)
                return false;
            advance_to(lx, j + 1);
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof OPERATORS / sizeof OPERATORS[0]; k++) {
            size_t ol = strlen(OPERATORS[k].op);
            if (left >= ol && memcmp(s, OPERATORS[k].op, ol) == 0)
                break;
        }
        if (k == sizeof OPERATORS / sizeof OPERATORS[0]) {
            size_t adv;
            template_utf8_decode(s, left, &adv);
            return lex_fail(lx, i, "unexpected character '%.*s'", (int)adv, s);
        }
        enum template_tok tt = OPERATORS[k].tok;
        if (tt == TEMPLATE_TOK_LPAREN || tt == TEMPLATE_TOK_LBRACKET || tt == TEMPLATE_TOK_LBRACE) {
            if (depth == MAX_BRACKETS)
                return lex_fail(lx, i, "brackets nested too deeply");
            stack[depth++] = tt == TEMPLATE_TOK_LPAREN ? ')' : tt == TEMPLATE_TOK_LBRACKET ? ']' : '}';
        } else if (tt == TEMPLATE_TOK_RPAREN || tt == TEMPLATE_TOK_RBRACKET || tt == TEMPLATE_TOK_RBRACE) {
            if (depth == 0)
                return lex_fail(lx, i, "unexpected '%c'", s[0]);
            if (stack[--depth] != s[0])
                return lex_fail(lx, i, "unexpected '%c', expected '%c'", s[0], stack[depth]);
        }
        if (!push(lx, tt, i, NULL, 0))
            return false;
        advance_to(lx, i + strlen(OPERATORS[k].op));
    }
}

/* Is there "{%[-+]? raw [-]?%}" at i? Sets *end past it and *sign. */
static bool match_raw_begin(const struct lexer *lx, size_t i, size_t *end, char *sign)
{
    size_t j = i + 2;
    *sign = 0;
    if (j < lx->n && (lx->src[j] == '-' || lx->src[j] == '+'))
        *sign = lx->src[j++];
    j = skip_space(lx, j);
    if (j + 3 > lx->n || memcmp(lx->src + j, "raw", 3) != 0)
        return false;
    j += 3;
    if (j < lx->n && is_ident((unsigned char)lx->src[j]))
        return false;
    j = skip_space(lx, j);
    if (j + 3 <= lx->n && memcmp(lx->src + j, "-%}", 3) == 0) {
        *end = skip_space(lx, j + 3);
        return true;
    }
    if (j + 2 <= lx->n && memcmp(lx->src + j, "%}", 2) == 0) {
        *end = j + 2;
        return true;
    }
    return false;
}

/* Finds "{%[-+]? endraw [-+]?%}" from i: *tag at its start, *sign its opening sign, *end past
 * it (with its own trailing whitespace control). */
static bool find_raw_end(const struct lexer *lx, size_t i, size_t *tag, char *sign, size_t *end,
                         bool *line_starting)
{
    for (size_t p = i; p + 1 < lx->n; p++) {
        if (lx->src[p] != '{' || lx->src[p + 1] != '%')
            continue;
        size_t j = p + 2;
        char sg = 0;
        if (j < lx->n && (lx->src[j] == '-' || lx->src[j] == '+'))
            sg = lx->src[j++];
        j = skip_space(lx, j);
        if (j + 6 > lx->n || memcmp(lx->src + j, "endraw", 6) != 0)
            continue;
        j = skip_space(lx, j + 6);
        *line_starting = false;
        if (j + 3 <= lx->n && memcmp(lx->src + j, "+%}", 3) == 0) {
            *end = j + 3;
        } else if (j + 3 <= lx->n && memcmp(lx->src + j, "-%}", 3) == 0) {
            *end = skip_space(lx, j + 3);
            *line_starting = *end > j + 3 && lx->src[*end - 1] == '\n';
        } else if (j + 2 <= lx->n && memcmp(lx->src + j, "%}", 2) == 0) {
            *end = j + 2;
            if (*end < lx->n && lx->src[*end] == '\n') {
                (*end)++;
                *line_starting = true;
            }
        } else {
            continue;
        }
        *tag = p;
        *sign = sg;
        return true;
    }
    return false;
}

/* Emits the data src[a..b) ending at a tag with whitespace-control sign; lstrip applies to
 * block and comment tags. */
static bool emit_data(struct lexer *lx, size_t a, size_t b, char sign, bool lstrip_ok,
                      bool line_starting)
{
    size_t end = b;
    if (sign == '-') {
        end = b - rstrip_len(lx, a, b);
    } else if (sign != '+' && lstrip_ok) {
        size_t l = b;
        while (l > a && lx->src[l - 1] != '\n')
            l--;
        if ((l > a || line_starting) && l < b && rstrip_len(lx, l, b) == b - l)
            end = l;
    }
    if (end > a && !push(lx, TEMPLATE_TOK_DATA, a, lx->src + a, end - a))
        return false;
    return true;
}

static bool lex_all(struct lexer *lx)
{
    bool line_starting = true;
    while (lx->pos < lx->n) {
        size_t start = lx->pos, i = start;
        /* next tag start */
        for (; i + 1 < lx->n; i++)
            if (lx->src[i] == '{' && (lx->src[i + 1] == '{' || lx->src[i + 1] == '%' || lx->src[i + 1] == '#'))
                break;
        if (i + 1 >= lx->n) {
            if (!push(lx, TEMPLATE_TOK_DATA, start, lx->src + start, lx->n - start))
                return false;
            advance_to(lx, lx->n);
            break;
        }
        char kind = lx->src[i + 1];
        size_t raw_end;
        char sign = 0;
        if (kind == '%' && match_raw_begin(lx, i, &raw_end, &sign)) {
            if (!emit_data(lx, start, i, sign, true, line_starting))
                return false;
            size_t tag, end;
            char esign;
            bool ls;
            if (!find_raw_end(lx, raw_end, &tag, &esign, &end, &ls))
                return lex_fail(lx, i, "missing end of raw directive");
            advance_to(lx, raw_end);
            if (!emit_data(lx, raw_end, tag, esign, true, raw_end > i + 2 && lx->src[raw_end - 1] == '\n'))
                return false;
            advance_to(lx, end);
            line_starting = ls;
            continue;
        }
        if (i + 2 < lx->n && (lx->src[i + 2] == '-' || lx->src[i + 2] == '+'))
            sign = lx->src[i + 2];
        if (!emit_data(lx, start, i, sign, kind != '{', line_starting))
            return false;
        size_t after = i + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            /* first "#}" ends the comment; a '-' or '+' right before it is its control */
            size_t j = after;
            while (j + 1 < lx->n && !(lx->src[j] == '#' && lx->src[j + 1] == '}'))
                j++;
            if (j + 1 >= lx->n)
                return lex_fail(lx, i, "missing end of comment tag");
            char esign = (j > after && (lx->src[j - 1] == '-' || lx->src[j - 1] == '+')) ? lx->src[j - 1] : 0;
            size_t e = j + 2;
            line_starting = false;
            if (esign == '-') {
                size_t k = skip_space(lx, e);
                line_starting = k > e && lx->src[k - 1] == '\n';
                e = k;
            } else if (esign == 0 && e < lx->n && lx->src[e] == '\n') {
                e++;
                line_starting = true;
            }
            advance_to(lx, e);
            continue;
        }
        bool block = kind == '%';
        if (!push(lx, block ? TEMPLATE_TOK_BLOCK_BEGIN : TEMPLATE_TOK_VAR_BEGIN, i, NULL, 0))
            return false;
        advance_to(lx, after);
        if (!lex_tag(lx, block, i, &line_starting))
            return false;
    }
    return push(lx, TEMPLATE_TOK_EOF, lx->n, NULL, 0) != NULL;
}

enum hr_status template_lex(const char *src, size_t len, struct template_tokens *out, char *err,
                            size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* normalise newlines ("\r\n" and "\r" -> "\n") and drop one trailing newline */
    char *norm = malloc(len + 1);
    if (!norm)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory lexing the template");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n > 0 && norm[n - 1] == '\n')
        n--;
    norm[n] = 0;

    struct lexer lx = {.src = norm, .n = n, .line = 1, .err = err, .errlen = errlen, .st = HR_OK};
    bool ok = lex_all(&lx);
    free(norm);
    if (!ok) {
        free(lx.tok);
        template_buf_free(&lx.text);
        return lx.st != HR_OK ? lx.st : hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    }
    size_t tl;
    out->text = template_buf_take(&lx.text, &tl);
    if (!out->text) {
        free(lx.tok);
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory lexing the template");
    }
    out->text_len = tl;
    for (size_t i = 0; i < lx.ntok; i++)
        if (lx.tok[i].type == TEMPLATE_TOK_DATA || lx.tok[i].type == TEMPLATE_TOK_NAME ||
            lx.tok[i].type == TEMPLATE_TOK_STRING)
            lx.tok[i].s = out->text + (uintptr_t)lx.tok[i].s;
    out->tok = lx.tok;
    out->n = lx.ntok;
    return HR_OK;
}

void template_tokens_free(struct template_tokens *t)
{
    if (!t)
        return;
    free(t->tok);
    free(t->text);
    memset(t, 0, sizeof *t);
}

const char *template_tok_name(enum template_tok t)
{
    switch (t) {
    case TEMPLATE_TOK_EOF: return "end of template";
    case TEMPLATE_TOK_DATA: return "template text";
    case TEMPLATE_TOK_VAR_BEGIN: return "'{{'";
    case TEMPLATE_TOK_VAR_END: return "'}}'";
    case TEMPLATE_TOK_BLOCK_BEGIN: return "'{%'";
    case TEMPLATE_TOK_BLOCK_END: return "'%}'";
    case TEMPLATE_TOK_NAME: return "name";
    case TEMPLATE_TOK_STRING: return "string";
    case TEMPLATE_TOK_INT: return "integer";
    case TEMPLATE_TOK_FLOAT: return "float";
    case TEMPLATE_TOK_ADD: return "'+'";
    case TEMPLATE_TOK_SUB: return "'-'";
    case TEMPLATE_TOK_DIV: return "'/'";
    case TEMPLATE_TOK_FLOORDIV: return "'//'";
    case TEMPLATE_TOK_MUL: return "'*'";
    case TEMPLATE_TOK_MOD: return "'%'";
    case TEMPLATE_TOK_POW: return "'**'";
    case TEMPLATE_TOK_TILDE: return "'~'";
    case TEMPLATE_TOK_LBRACKET: return "'['";
    case TEMPLATE_TOK_RBRACKET: return "']'";
    case TEMPLATE_TOK_LPAREN: return "'('";
    case TEMPLATE_TOK_RPAREN: return "')'";
    case TEMPLATE_TOK_LBRACE: return "'{'";
    case TEMPLATE_TOK_RBRACE: return "'}'";
    case TEMPLATE_TOK_EQ: return "'=='";
    case TEMPLATE_TOK_NE: return "'!='";
    case TEMPLATE_TOK_GT: return "'>'";
    case TEMPLATE_TOK_GTEQ: return "'>='";
    case TEMPLATE_TOK_LT: return "'<'";
    case TEMPLATE_TOK_LTEQ: return "'<='";
    case TEMPLATE_TOK_ASSIGN: return "'='";
    case TEMPLATE_TOK_DOT: return "'.'";
    case TEMPLATE_TOK_COLON: return "':'";
    case TEMPLATE_TOK_PIPE: return "'|'";
    case TEMPLATE_TOK_COMMA: return "','";
    case TEMPLATE_TOK_SEMICOLON: return "';'";
    }
    return "token";
}
