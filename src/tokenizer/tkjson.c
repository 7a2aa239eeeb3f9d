/* In-place JSON reader (see tkjson.h). Recursive descent with a depth limit. */
#include "tokenizer/tkjson.h"

#include <stdlib.h>
#include <string.h>

#include "base/hex.h"
#include "tokenizer/utf8.h"

#define TKJSON_MAX_DEPTH 256

struct parser {
    char *buf;
    size_t len;
    size_t pos;
    struct tkjson_node *nodes; /* [cap] */
    uint32_t n, cap;
    char *err;
    size_t errlen;
    enum hr_status st;
};

static enum hr_status fail(struct parser *p, const char *what)
{
    if (p->st == HR_OK)
        p->st = hr_err(p->err, p->errlen, HR_ERR_FORMAT, "JSON: %s at byte %zu", what, p->pos);
    return p->st;
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        char c = p->buf[p->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            break;
        p->pos++;
    }
}

static uint32_t push(struct parser *p, uint8_t type, uint32_t off, uint32_t len)
{
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 1024;
        if (cap <= p->cap) {
            fail(p, "document too large");
            return TKJSON_NONE;
        }
        struct tkjson_node *nn = realloc(p->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            p->st = hr_err(p->err, p->errlen, HR_ERR_NOMEM, "JSON: out of memory");
            return TKJSON_NONE;
        }
        p->nodes = nn;
        p->cap = cap;
    }
    uint32_t i = p->n++;
    p->nodes[i] = (struct tkjson_node){.off = off, .len = len, .end = i + 1, .type = type};
    return i;
}

static bool read_hex4(struct parser *p, uint32_t *out)
{
    if (p->len - p->pos < 4)
        return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hex_digit(p->buf[p->pos + (size_t)k]);
        if (h < 0)
            return false;
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

/* At the opening quote. Decodes in place; pushes a string node. */
static enum hr_status parse_string(struct parser *p)
{
    p->pos++;
    size_t start = p->pos, w = p->pos;
    uint8_t *b = (uint8_t *)p->buf;
    for (;;) {
        /* run of plain bytes */
        size_t r = p->pos;
        while (r < p->len && b[r] >= 0x20 && b[r] != '"' && b[r] != '\\' && b[r] < 0x80)
            r++;
        if (w != p->pos)
            memmove(b + w, b + p->pos, r - p->pos);
        w += r - p->pos;
        p->pos = r;
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        uint8_t c = b[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        if (c >= 0x80) {
            size_t n;
            if (utf8_scan(b + p->pos, p->len - p->pos, &n) != UTF8_SCAN_OK)
                return fail(p, "invalid UTF-8 in string");
            memmove(b + w, b + p->pos, n);
            w += n;
            p->pos += n;
            continue;
        }
        /* backslash escape */
        p->pos++;
        if (p->pos >= p->len)
            return fail(p, "unterminated escape");
        char e = p->buf[p->pos++];
        switch (e) {
        case '"': b[w++] = '"'; break;
        case '\\': b[w++] = '\\'; break;
        case '/': b[w++] = '/'; break;
        case 'b': b[w++] = '\b'; break;
        case 'f': b[w++] = '\f'; break;
        case 'n': b[w++] = '\n'; break;
        case 'r': b[w++] = '\r'; break;
        case 't': b[w++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (!read_hex4(p, &cp))
                return fail(p, "bad \\u escape");
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, "lone trailing surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->len - p->pos < 2 || p->buf[p->pos] != '\\' || p->buf[p->pos + 1] != 'u')
                    return fail(p, "lone leading surrogate");
                p->pos += 2;
                if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* the escape took >= 6 bytes and the encoding <= 4: w stays behind pos */
            w += utf8_encode(cp, b + w);
            break;
        }
        default:
            return fail(p, "bad escape");
        }
    }
    if (w - start > UINT32_MAX)
        return fail(p, "string too long");
    return push(p, TKJSON_TYPE_STRING, (uint32_t)start, (uint32_t)(w - start)) == TKJSON_NONE ? p->st : HR_OK;
}

static enum hr_status parse_number(struct parser *p)
{
    size_t s = p->pos;
    const char *b = p->buf;
    size_t i = s;
    if (i < p->len && b[i] == '-')
        i++;
    if (i >= p->len)
        return fail(p, "bad number");
    if (b[i] == '0') {
        i++;
    } else if (b[i] >= '1' && b[i] <= '9') {
        while (i < p->len && b[i] >= '0' && b[i] <= '9')
            i++;
    } else {
        return fail(p, "bad number");
    }
    if (i < p->len && b[i] == '.') {
        i++;
        size_t d = i;
        while (i < p->len && b[i] >= '0' && b[i] <= '9')
            i++;
        if (i == d)
            return fail(p, "bad number");
    }
    if (i < p->len && (b[i] == 'e' || b[i] == 'E')) {
        i++;
        if (i < p->len && (b[i] == '+' || b[i] == '-'))
            i++;
        size_t d = i;
        while (i < p->len && b[i] >= '0' && b[i] <= '9')
            i++;
        if (i == d)
            return fail(p, "bad number");
    }
    p->pos = i;
    return push(p, TKJSON_TYPE_NUMBER, (uint32_t)s, (uint32_t)(i - s)) == TKJSON_NONE ? p->st : HR_OK;
}

static enum hr_status parse_value(struct parser *p, int depth);

static enum hr_status parse_container(struct parser *p, int depth, bool object)
{
    if (depth >= TKJSON_MAX_DEPTH)
        return fail(p, "nesting too deep");
    uint32_t self = push(p, object ? TKJSON_TYPE_OBJECT : TKJSON_TYPE_ARRAY, (uint32_t)p->pos, 0);
    if (self == TKJSON_NONE)
        return p->st;
    p->pos++;
    char close = object ? '}' : ']';
    uint32_t count = 0;
    skip_ws(p);
    if (p->pos < p->len && p->buf[p->pos] == close) {
        p->pos++;
        p->nodes[self].end = p->n;
        return HR_OK;
    }
    for (;;) {
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->buf[p->pos] != '"')
                return fail(p, "expected a member name");
            if (parse_string(p) != HR_OK)
                return p->st;
            skip_ws(p);
            if (p->pos >= p->len || p->buf[p->pos] != ':')
                return fail(p, "expected ':'");
            p->pos++;
        }
        if (parse_value(p, depth + 1) != HR_OK)
            return p->st;
        count++;
        skip_ws(p);
        if (p->pos >= p->len)
            return fail(p, "unterminated container");
        char c = p->buf[p->pos++];
        if (c == close)
            break;
        if (c != ',')
            return fail(p, "expected ',' or a closing bracket");
    }
    p->nodes[self].len = count;
    p->nodes[self].end = p->n;
    return HR_OK;
}

static enum hr_status parse_value(struct parser *p, int depth)
{
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, "unexpected end");
    char c = p->buf[p->pos];
    switch (c) {
    case '{': return parse_container(p, depth, true);
    case '[': return parse_container(p, depth, false);
    case '"': return parse_string(p);
    case 't':
        if (p->len - p->pos >= 4 && !memcmp(p->buf + p->pos, "true", 4)) {
            p->pos += 4;
            return push(p, TKJSON_TYPE_TRUE, 0, 0) == TKJSON_NONE ? p->st : HR_OK;
        }
        return fail(p, "bad literal");
    case 'f':
        if (p->len - p->pos >= 5 && !memcmp(p->buf + p->pos, "false", 5)) {
            p->pos += 5;
            return push(p, TKJSON_TYPE_FALSE, 0, 0) == TKJSON_NONE ? p->st : HR_OK;
        }
        return fail(p, "bad literal");
    case 'n':
        if (p->len - p->pos >= 4 && !memcmp(p->buf + p->pos, "null", 4)) {
            p->pos += 4;
            return push(p, TKJSON_TYPE_NULL, 0, 0) == TKJSON_NONE ? p->st : HR_OK;
        }
        return fail(p, "bad literal");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return parse_number(p);
        return fail(p, "unexpected character");
    }
}

enum hr_status tkjson_parse(struct tkjson *j, char *buf, size_t len, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    if (len >= UINT32_MAX)
        return hr_err(err, errlen, HR_ERR_FORMAT, "JSON: document larger than 4 GiB");
    struct parser p = {.buf = buf, .len = len, .err = err, .errlen = errlen, .st = HR_OK};
    /* a first guess that avoids most regrowth on tokenizer files */
    p.cap = (uint32_t)(len / 12 + 1024);
    p.nodes = malloc((size_t)p.cap * sizeof *p.nodes);
    if (!p.nodes)
        return hr_err(err, errlen, HR_ERR_NOMEM, "JSON: out of memory");
    if (parse_value(&p, 0) == HR_OK) {
        skip_ws(&p);
        if (p.pos != p.len)
            fail(&p, "trailing characters");
    }
    if (p.st != HR_OK) {
        free(p.nodes);
        return p.st;
    }
    j->buf = buf;
    j->nodes = p.nodes;
    j->n_nodes = p.n;
    return HR_OK;
}

void tkjson_free(struct tkjson *j)
{
    if (!j)
        return;
    free(j->nodes);
    memset(j, 0, sizeof *j);
}

uint32_t tkjson_first(const struct tkjson *j, uint32_t i)
{
    if (i == TKJSON_NONE || i >= j->n_nodes)
        return TKJSON_NONE;
    const struct tkjson_node *n = &j->nodes[i];
    if ((n->type != TKJSON_TYPE_ARRAY && n->type != TKJSON_TYPE_OBJECT) || n->end == i + 1)
        return TKJSON_NONE;
    return i + 1;
}

uint32_t tkjson_next(const struct tkjson *j, uint32_t i, uint32_t c)
{
    uint32_t nx = j->nodes[c].end;
    if (j->nodes[i].type == TKJSON_TYPE_OBJECT)
        nx = j->nodes[nx].end; /* skip the value that follows key c */
    return nx < j->nodes[i].end ? nx : TKJSON_NONE;
}

uint32_t tkjson_get(const struct tkjson *j, uint32_t i, const char *key)
{
    if (i == TKJSON_NONE || j->nodes[i].type != TKJSON_TYPE_OBJECT)
        return TKJSON_NONE;
    for (uint32_t k = tkjson_first(j, i); k != TKJSON_NONE; k = tkjson_next(j, i, k))
        if (tkjson_str_eq(j, k, key))
            return k + 1;
    return TKJSON_NONE;
}

const char *tkjson_str(const struct tkjson *j, uint32_t i, size_t *len)
{
    if (i == TKJSON_NONE || j->nodes[i].type != TKJSON_TYPE_STRING)
        return NULL;
    *len = j->nodes[i].len;
    return j->buf + j->nodes[i].off;
}

bool tkjson_str_eq(const struct tkjson *j, uint32_t i, const char *s)
{
    size_t n;
    const char *v = tkjson_str(j, i, &n);
    return v && strlen(s) == n && !memcmp(v, s, n);
}

bool tkjson_int(const struct tkjson *j, uint32_t i, int64_t *out)
{
    if (i == TKJSON_NONE || j->nodes[i].type != TKJSON_TYPE_NUMBER)
        return false;
    const char *s = j->buf + j->nodes[i].off;
    uint32_t n = j->nodes[i].len;
    uint32_t k = 0;
    bool neg = false;
    if (s[0] == '-') {
        neg = true;
        k = 1;
    }
    if (n - k > 18)
        return false;
    int64_t v = 0;
    for (; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return false; /* a fraction or an exponent */
        v = v * 10 + (s[k] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

bool tkjson_bool(const struct tkjson *j, uint32_t i, bool dflt)
{
    if (i == TKJSON_NONE)
        return dflt;
    if (j->nodes[i].type == TKJSON_TYPE_TRUE)
        return true;
    if (j->nodes[i].type == TKJSON_TYPE_FALSE)
        return false;
    return dflt;
}
