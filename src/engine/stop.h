/* Stop strings on streamed text (OpenAI semantics: generation ends at the first stop string,
 * and the stop string itself is not part of the output).
 *
 * Text arrives in deltas of UTF-8 bytes. A push returns the part that is safe to show now:
 * never a byte that might turn out to belong to a stop string (a suffix that is a prefix of
 * some stop string is held back), and never a split UTF-8 character. On a match the emitted
 * text ends just before the stop string and nothing after it is ever emitted.
 *
 * Which match wins: the one that completes first in the byte stream; when several complete at
 * the same byte, the longest (it starts earliest). This does not depend on how the text is cut
 * into deltas. Matching is incremental (one KMP automaton per stop string): each byte costs
 * O(number of stop strings), whatever their lengths.
 *
 * Nothing is allocated after init; a push writes into a caller buffer. */
#ifndef HEARTH_ENGINE_STOP_H
#define HEARTH_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define STOP_MAX_STRINGS 64
#define STOP_MAX_LEN 1024 /* bytes per stop string */

struct stop_matcher {
    int n_stops;          /* non-empty stop strings kept */
    char **stops;         /* [n_stops] owned copies */
    size_t *stop_len;     /* [n_stops] */
    int32_t **fail;       /* [n_stops][stop_len]: KMP failure function */
    size_t *state;        /* [n_stops]: length of the longest prefix of stop i that ends the text */
    int *orig_index;      /* [n_stops]: position in the caller's list */
    size_t max_len;
    char *held;           /* [held_cap] text not yet emitted */
    size_t n_held, held_cap;
    bool stopped;
    int matched;          /* caller's index of the stop string that matched, -1 */
};

/* stops[0..n): the stop strings; lens NULL means NUL-terminated, else lens[i] bytes each.
 * Empty strings are ignored. Errors (HR_ERR_INVALID) name the offending index: more than
 * STOP_MAX_STRINGS, longer than STOP_MAX_LEN, or not valid UTF-8. n = 0 is fine (never stops). */
enum hr_status stop_matcher_init(struct stop_matcher *m, const char *const *stops, const size_t *lens, int n,
                                 char *err, size_t errlen);
void stop_matcher_free(struct stop_matcher *m); /* no-op on NULL or zeroed */

/* Forgets the text seen so far (same stop strings). */
void stop_matcher_reset(struct stop_matcher *m);

/* The buffer a push of n bytes needs: n + what may be held back. */
size_t stop_matcher_out_cap(const struct stop_matcher *m, size_t n);

/* Feeds delta[0..n). Writes the text safe to emit now into out (cap must be at least
 * stop_matcher_out_cap(m, n); out must not overlap delta) and its length into *out_len.
 * Returns true when a stop string has matched (now or before): the output then ends just
 * before it, and later pushes emit nothing. */
bool stop_matcher_push(struct stop_matcher *m, const char *delta, size_t n, char *out, size_t cap,
                       size_t *out_len);

/* End of the stream: releases the held-back text into out (cap >= stop_matcher_out_cap(m, 0))
 * and returns its length (possibly an incomplete character: the stream is over); 0 after a
 * match. The text seen so far is then forgotten; a match stays reported. */
size_t stop_matcher_flush(struct stop_matcher *m, char *out, size_t cap);

/* The caller's index of the matched stop string, or -1. */
int stop_matcher_matched(const struct stop_matcher *m);

#endif
