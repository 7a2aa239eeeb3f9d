/* A context-free grammar over bytes: the one representation every constraint
 * (GBNF, JSON Schema, regex, choice) is compiled into, and what the matcher runs.
 *
 * Rules are lists of alternatives; an alternative is a sequence of elements, each a
 * byte class (a set of bytes) or a reference to a rule. Unicode lives above this
 * level: a code point class becomes alternatives of UTF-8 byte sequences, so the
 * matcher works on the raw bytes of tokens, which may split a character.
 *
 * Built with struct grammar_builder, then grammar_builder_finish checks it: every
 * referenced rule defined, no left recursion (the matcher is a top-down pushdown
 * automaton), the root derives some string, and unproductive alternatives (those
 * that can never finish) removed, so every live matcher state can still complete. */
#ifndef HEARTH_GRAMMAR_GRAMMAR_H
#define HEARTH_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define GRAMMAR_MAX_ELEMS (1 << 20)  /* elements of one grammar at most */
#define GRAMMAR_MAX_RULES (1 << 18)

enum grammar_elem_kind {
    GRAMMAR_ELEM_END = 0,   /* ends an alternative */
    GRAMMAR_ELEM_BYTES,     /* one byte from class arg */
    GRAMMAR_ELEM_RULE,      /* rule arg */
    GRAMMAR_ELEM_SENTINEL,  /* the bottom of a stack in mask precomputation: matches no byte */
};

struct grammar_elem {
    uint8_t kind;           /* enum grammar_elem_kind */
    int32_t arg;            /* BYTES: class id; RULE: rule id */
};

struct grammar_class {
    uint64_t bits[4];       /* byte b is in the class when bit b is set */
};

static inline bool grammar_class_has(const struct grammar_class *c, uint8_t b)
{
    return (c->bits[b >> 6] >> (b & 63)) & 1;
}

struct grammar {
    struct grammar_elem *elems;   /* [n_elems]: alternatives back to back, each ended by END;
                                     elems[0] is the SENTINEL, elems[1..2] = RULE root, END */
    int n_elems;
    int32_t *alt_start;           /* [n_alts] first element of each alternative */
    int n_alts;
    int32_t *rule_alt;            /* [n_rules + 1]: rule r's alternatives are alt_start[rule_alt[r]..rule_alt[r+1]) */
    int n_rules;
    struct grammar_class *classes; /* [n_classes] */
    int n_classes;
    char **rule_names;            /* [n_rules] */
    int root;
};

#define GRAMMAR_SENTINEL_ELEM 0
#define GRAMMAR_ROOT_ELEM 1

void grammar_free(struct grammar *g); /* no-op on a zeroed grammar */

/* ------------------------------------------------------------------ builder */

struct grammar_balt {
    struct grammar_elem *e;       /* [n] */
    int n, cap;
};

struct grammar_brule {
    char *name;
    bool defined;
    struct grammar_balt *alts;    /* [n_alts] */
    int n_alts, cap;
};

struct grammar_builder {
    struct grammar_brule *rules;  /* [n_rules] */
    int n_rules, cap;
    struct grammar_class *classes; /* [n_classes] */
    int n_classes, cap_classes;
    int n_elems;                  /* elements so far (the size limit) */
    bool oom;
};

void grammar_builder_init(struct grammar_builder *b);
void grammar_builder_free(struct grammar_builder *b);
/* The rule called name (created undefined when new); -1 when out of memory or too many. */
int grammar_builder_rule(struct grammar_builder *b, const char *name, size_t len);
/* A fresh anonymous rule named after base ("base-3"). */
int grammar_builder_anon(struct grammar_builder *b, const char *base);
/* Starts a new alternative of rule r; returns its index. */
int grammar_builder_alt(struct grammar_builder *b, int r);
void grammar_builder_push_class(struct grammar_builder *b, int r, int alt, const struct grammar_class *c);
void grammar_builder_push_byte(struct grammar_builder *b, int r, int alt, uint8_t byte);
void grammar_builder_push_rule(struct grammar_builder *b, int r, int alt, int ref);
/* Appends UTF-8 bytes s[0..n) as single-byte elements. */
void grammar_builder_push_bytes(struct grammar_builder *b, int r, int alt, const char *s, size_t n);
/* Appends one code point set, [lo[i], hi[i]] for i < n (sorted, disjoint), as UTF-8: an inline
 * byte class when all are ASCII, else a reference to a new rule of byte sequences. */
void grammar_builder_push_ranges(struct grammar_builder *b, int r, int alt, const uint32_t *lo, const uint32_t *hi,
                                 int n);

/* Checks and flattens into g (see the file comment); root names the start rule. */
enum hr_status grammar_builder_finish(struct grammar_builder *b, const char *root, struct grammar *g, char *err,
                                      size_t errlen);

#endif
