/* The byte-level matcher: a top-down pushdown automaton over a struct grammar.
 *
 * A state is a set of stacks. A stack lists grammar positions (element indices), the
 * bottom ones being where to return to in enclosing rules, the top a byte class still
 * to match; an empty stack means the whole input so far is a complete sentence. A rule
 * reference at the top is expanded into its alternatives (a reference in tail position
 * pushes nothing, so right recursion such as x* runs in constant depth). Advancing by a
 * byte keeps the stacks whose top class holds the byte. Ambiguity is allowed: identical
 * stacks are merged. Left recursion is refused when the grammar is built.
 *
 * Bounds: a stack holds at most MATCHER_MAX_DEPTH positions and a set at most its
 * buffer's capacity; beyond either the set is marked `overflow` (the caller rejects the
 * input) instead of growing, so matching allocates nothing. */
#ifndef HEARTH_GRAMMAR_MATCHER_H
#define HEARTH_GRAMMAR_MATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"

#define MATCHER_MAX_DEPTH 256
#define MATCHER_SET_INTS 4096 /* the default set capacity, in int32 */

struct matcher_set {
    int32_t *buf;   /* [cap] stacks back to back, each: depth, hash, positions bottom..top */
    int cap, len;   /* in int32 */
    int n;          /* stacks */
    bool overflow;
};

enum hr_status matcher_set_init(struct matcher_set *s, int cap, char *err, size_t errlen);
void matcher_set_free(struct matcher_set *s);

static inline void matcher_set_clear(struct matcher_set *s)
{
    s->len = s->n = 0;
    s->overflow = false;
}

/* dst = src; false (dst overflowed) when it does not fit. */
bool matcher_set_copy(struct matcher_set *dst, const struct matcher_set *src);

/* Adds the expansion of one stack (positions bottom..top, depth of them) to out. */
void matcher_push_stack(const struct grammar *g, const int32_t *stack, int depth, struct matcher_set *out);

/* The start state: the expansion of the root rule. */
void matcher_start(const struct grammar *g, struct matcher_set *out);

/* out = the stacks of in that take byte, advanced and expanded. Returns out->n > 0 && !overflow. */
bool matcher_advance(const struct grammar *g, const struct matcher_set *in, uint8_t byte, struct matcher_set *out);

/* The input so far is a complete sentence. */
bool matcher_accepting(const struct matcher_set *s);

/* Some stack is just the SENTINEL (mask precomputation: the rule under test has ended). */
bool matcher_has_sentinel(const struct matcher_set *s);

/* An order-independent hash of the set (the mask cache's key). */
uint64_t matcher_set_hash(const struct matcher_set *s);

/* The sets hold the same stacks (in any order). */
bool matcher_set_equal(const struct matcher_set *a, const struct matcher_set *b);

/* Iteration: stack k starts at offset; matcher_stack_next moves to the next one. */
static inline int matcher_stack_depth(const struct matcher_set *s, int off) { return s->buf[off]; }
static inline const int32_t *matcher_stack_elems(const struct matcher_set *s, int off) { return s->buf + off + 2; }
static inline int matcher_stack_next(const struct matcher_set *s, int off) { return off + 2 + s->buf[off]; }

#endif
