/* Token masks: a grammar compiled against a vocabulary, and the per-sequence state the
 * engine advances token by token.
 *
 * Precomputation (grammar_compile, off the engine thread): for every byte-class position
 * p of the grammar, the matcher walks the sorted vocabulary from the stack
 * [SENTINEL, c1..ck, p], once for each position ck a stack can hold directly below p (the
 * return positions of p's rule, up to GRAMMAR_RET_MAXSET of them), with the positions under
 * ck as far as the grammar fixes them (rules entered from one place only); with more, or
 * none known, just [SENTINEL, p]; where the context reaches the bottom, no sentinel: the
 * exact stack. Each token is then
 *   accepted  - it is consumed inside p's rule: allowed whatever the real stack is;
 *   rejected  - it fails inside the rule: never allowed at p;
 *   uncertain - it runs past the known context with bytes left: it depends on the stack.
 * At run time the mask of a state is the union over its stacks of the accepted set of
 * the stack's top, plus those of its uncertain tokens the matcher accepts from the full
 * stack (walked in byte order, sharing prefixes). Masks of recent states are kept in a
 * small LRU keyed by the exact state, so a state seen again (the inside of a string, a
 * run of digits) costs a copy.
 *
 * The mask is a function of the sequence's matcher state alone (the cache stores exact
 * results), so a constrained request's tokens do not depend on the batch or the cache.
 *
 * Threads: a struct grammar_compiled is immutable after grammar_compile except for its
 * mask cache and walk scratch, which a mutex guards; references are atomic. A struct
 * grammar_seq belongs to one thread at a time (the engine thread). */
#ifndef HEARTH_GRAMMAR_GRAMMAR_MASK_H
#define HEARTH_GRAMMAR_GRAMMAR_MASK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"

#define GRAMMAR_MASK_CACHE_SLOTS 32   /* masks of recent states kept per grammar */
#define GRAMMAR_MASK_STATE_INTS 512   /* a state larger than this is not cached */
#define GRAMMAR_MASK_WALK_INTS 2048   /* capacity of each per-depth set of a walk */
#define GRAMMAR_MASK_CONTEXT 8        /* return positions below p fixed by the grammar, at most */

/* Mask positions a grammar may need at most: byte positions, each counted once per context
 * it is precomputed for. Each walks the whole vocabulary at compile time (some milliseconds
 * on the Qwen3 vocabulary), on the submitting thread, so this bounds what one request can
 * make the server compute (a schema far under JSON_SCHEMA_MAX_BYTES can otherwise need
 * hundreds of thousands). The largest schemas of the test corpus and the bench need ~3,000. */
#define GRAMMAR_MAX_POSITIONS 8192

#define GRAMMAR_RET_MAXSET 4          /* return positions of a rule told apart, at most */
#define GRAMMAR_RET_MANY (-1)
#define GRAMMAR_RET_BOTTOM (-3)

/* The positions a rule returns to: what a stack holds directly below the rule's positions
 * (GRAMMAR_RET_BOTTOM: nothing, the root's). */
struct grammar_ret {
    int n;                              /* -1: more than GRAMMAR_RET_MAXSET (unknown) */
    int32_t v[GRAMMAR_RET_MAXSET];
};

/* Every rule's return positions ([n_rules], malloc'd); *rule_of gets the rule of each element
 * (malloc'd). NULL when out of memory. */
struct grammar_ret *grammar_return_contexts(const struct grammar *g, int32_t **rule_of);

struct grammar_pos_mask {
    int32_t ctx;            /* the position below p this entry is for (GRAMMAR_RET_MANY: any) */
    int32_t n_accept;
    uint64_t *accept_bits;  /* [words] by token id, when dense (else NULL) */
    int32_t *accept;        /* [n_accept] token ids, when sparse */
    int32_t n_unc;
    int32_t *unc;           /* [n_unc] sorted ranks (grammar_vocab order) of the uncertain tokens */
};

/* A position's entries, one per return position of its rule. */
struct grammar_pos {
    int n;
    struct grammar_pos_mask *m; /* [n] */
};

struct grammar_mask_stats {
    int64_t masks, cache_hits, uncertain_checked;
};

struct grammar_compiled {
    atomic_int refs;
    struct grammar g;
    const struct grammar_vocab *v;  /* borrowed: must outlive the compiled grammar */
    int words;                      /* (n_vocab + 63) / 64 */
    struct grammar_pos *pos;        /* [g.n_elems]; filled for BYTES elements */
    size_t bytes;                   /* memory held, for the cache's budget */
    pthread_mutex_t mu;             /* guards everything below */
    struct matcher_set *walk;       /* [v->max_len + 1] per-depth sets */
    bool *exposed;                  /* [v->max_len + 1] */
    struct matcher_set *slot_state; /* [GRAMMAR_MASK_CACHE_SLOTS] cached states */
    uint64_t *slot_hash;            /* [GRAMMAR_MASK_CACHE_SLOTS] */
    int64_t *slot_used;             /* [GRAMMAR_MASK_CACHE_SLOTS] last use (0: empty) */
    uint64_t *slot_bits;            /* [GRAMMAR_MASK_CACHE_SLOTS, words] */
    int64_t tick;
    struct grammar_mask_stats stats;
};

/* Takes ownership of *g (zeroed on return, success or not) and precomputes the masks.
 * HR_ERR_INVALID, before any precomputation, when the grammar needs more than max_positions
 * mask positions (0: GRAMMAR_MAX_POSITIONS); the message names the limit. */
enum hr_status grammar_compile(struct grammar *g, const struct grammar_vocab *v, int max_positions,
                               struct grammar_compiled **out, char *err, size_t errlen);
void grammar_compiled_ref(struct grammar_compiled *c);
void grammar_compiled_unref(struct grammar_compiled *c); /* frees at zero; NULL is a no-op */

/* The mask of a matcher state: bits [c->words], bit t set when token t may follow (stop tokens
 * not included: see grammar_mask_apply). */
void grammar_compiled_mask(struct grammar_compiled *c, const struct matcher_set *state, uint64_t *bits);

/* ------------------------------------------------------------------ per sequence */

struct grammar_seq {
    struct grammar_compiled *c;  /* one reference */
    struct matcher_set cur;      /* the state after the tokens accepted so far */
    struct matcher_set tmp;
    uint64_t *bits;              /* [c->words] scratch for the mask */
    int32_t wait_token;          /* -1, or the token after which the constraint starts (</think>) */
    bool active;                 /* the constraint applies (wait_token seen, or none) */
};

enum hr_status grammar_seq_init(struct grammar_seq *s, struct grammar_compiled *c, int32_t wait_token, char *err,
                                size_t errlen);
void grammar_seq_free(struct grammar_seq *s); /* no-op on a zeroed one */

/* Sets every logit the grammar forbids to -inf in logits [vocab]. The stop tokens
 * stop_ids [n_stop] are allowed exactly where the grammar may end. When no token at all is
 * allowed (the logits are then unchanged): HR_ERR_NOT_FOUND when the output is complete and
 * there is no stop token to end it (the caller ends it), HR_ERR_INVALID otherwise (err says
 * why: the state is a dead end for this vocabulary). */
enum hr_status grammar_mask_apply(struct grammar_seq *s, float *logits, int vocab, const int32_t *stop_ids,
                                  int n_stop, char *err, size_t errlen);

/* Advances by a sampled token (a stop token ends the sentence: only checked). HR_ERR_INVALID
 * when the grammar does not allow it. */
enum hr_status grammar_seq_advance(struct grammar_seq *s, int32_t token, bool is_stop, char *err, size_t errlen);

/* The tokens so far form a complete sentence (or the constraint has not started). */
bool grammar_seq_accepting(const struct grammar_seq *s);

#endif
