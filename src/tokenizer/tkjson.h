/* A small, fast, in-place JSON reader for tokenizer.json.
 * jansson needs ~250 ms to parse and free the 11 MB Qwen3 tokenizer.json; the load budget is
 * 200 ms for everything. This reader decodes strings in place in the caller's buffer and keeps
 * the document as a flat array of nodes (one per value and per object key, in document order),
 * so a parse is one pass and one allocation. Read-only after parsing: safe to share. */
#ifndef HEARTH_TOKENIZER_TKJSON_H
#define HEARTH_TOKENIZER_TKJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define TKJSON_NONE UINT32_MAX

enum tkjson_type {
    TKJSON_TYPE_NULL,
    TKJSON_TYPE_FALSE,
    TKJSON_TYPE_TRUE,
    TKJSON_TYPE_NUMBER,
    TKJSON_TYPE_STRING,
    TKJSON_TYPE_ARRAY,
    TKJSON_TYPE_OBJECT,
};

struct tkjson_node {
    uint32_t off;  /* string: decoded bytes at buf + off; number: its text */
    uint32_t len;  /* string/number: byte length; array: elements; object: members */
    uint32_t end;  /* index one past this node's subtree (next sibling) */
    uint8_t type;  /* enum tkjson_type */
};

struct tkjson {
    char *buf;                 /* [len] the caller's text, strings decoded in place */
    struct tkjson_node *nodes; /* [n_nodes] document order; an object's members are key, value */
    uint32_t n_nodes;
};

/* Parses buf[0..len) (modified in place; must outlive j). Root is node 0.
 * Strict JSON: UTF-8 checked, surrogate pairs joined, lone surrogates rejected, depth <= 256. */
enum hr_status tkjson_parse(struct tkjson *j, char *buf, size_t len, char *err, size_t errlen);
void tkjson_free(struct tkjson *j);

static inline enum tkjson_type tkjson_type(const struct tkjson *j, uint32_t i)
{
    return (enum tkjson_type)j->nodes[i].type;
}
/* Member value of object i named key, or TKJSON_NONE (also when i is not an object). */
uint32_t tkjson_get(const struct tkjson *j, uint32_t i, const char *key);
/* First child (array element, or first key of an object); TKJSON_NONE when empty. */
uint32_t tkjson_first(const struct tkjson *j, uint32_t i);
/* Next sibling of child c inside container i; for objects pass a key, get the next key. */
uint32_t tkjson_next(const struct tkjson *j, uint32_t i, uint32_t c);
/* String bytes (not NUL-terminated; may contain NUL) or NULL when not a string. */
const char *tkjson_str(const struct tkjson *j, uint32_t i, size_t *len);
/* True when node i is a string equal to s. */
bool tkjson_str_eq(const struct tkjson *j, uint32_t i, const char *s);
/* Integer value of a number node without fraction or exponent that fits int64. */
bool tkjson_int(const struct tkjson *j, uint32_t i, int64_t *out);
/* Boolean value of node i; dflt when i is TKJSON_NONE or not a boolean. */
bool tkjson_bool(const struct tkjson *j, uint32_t i, bool dflt);

#endif
