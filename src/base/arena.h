/* Bump allocator for per-step scratch: one buffer allocated at start-up, reset each step. */
#ifndef HEARTH_BASE_ARENA_H
#define HEARTH_BASE_ARENA_H

#include <stddef.h>

#include "base/status.h"

struct arena {
    unsigned char *base; /* [cap] */
    size_t cap;
    size_t used;
    size_t high_water;
    int owned;           /* base was allocated by arena_init (else the caller's) */
};

enum hr_status arena_init(struct arena *a, size_t cap, char *err, size_t errlen);
/* An arena over memory the caller owns (a backend's, say): arena_free only forgets it. */
void arena_init_at(struct arena *a, void *base, size_t cap);
void arena_free(struct arena *a);
/* NULL when the arena is exhausted (the caller sized it wrong: a bug or a bad size). */
void *arena_alloc(struct arena *a, size_t size, size_t align);
void arena_reset(struct arena *a);

#endif
