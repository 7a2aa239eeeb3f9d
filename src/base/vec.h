/* Growable arrays: capacity doubling from a first size, for scratch buffers that
 * grow to the largest input seen and are then reused. */
#ifndef HEARTH_BASE_VEC_H
#define HEARTH_BASE_VEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* Makes *p hold at least need elements of elem bytes (*cap counts elements; a new
 * array starts at first). False, with *p and *cap unchanged, when out of memory. */
static inline bool vec_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : first;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return false;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem)
        return false;
    void *np = realloc(*p, c * elem);
    if (!np)
        return false;
    *p = np;
    *cap = c;
    return true;
}

#endif
