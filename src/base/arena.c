/* Bump allocator. */
#include "base/arena.h"

#include <stdint.h>
#include <stdlib.h>

enum hr_status arena_init(struct arena *a, size_t cap, char *err, size_t errlen)
{
    a->used = a->high_water = 0;
    a->cap = cap;
    a->base = NULL;
    a->owned = 1;
    if (cap && posix_memalign((void **)&a->base, 64, cap) != 0) {
        a->cap = 0;
        return hr_err(err, errlen, HR_ERR_NOMEM, "arena: cannot allocate %zu bytes", cap);
    }
    return HR_OK;
}

void arena_init_at(struct arena *a, void *base, size_t cap)
{
    a->base = base;
    a->cap = cap;
    a->used = a->high_water = 0;
    a->owned = 0;
}

void arena_free(struct arena *a)
{
    if (!a)
        return;
    if (a->owned)
        free(a->base);
    a->base = NULL;
    a->cap = a->used = 0;
}

void *arena_alloc(struct arena *a, size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t off = (a->used + align - 1) & ~(align - 1);
    if (off > a->cap || size > a->cap - off)
        return NULL;
    a->used = off + size;
    if (a->used > a->high_water)
        a->high_water = a->used;
    return a->base + off;
}

void arena_reset(struct arena *a) { a->used = 0; }
