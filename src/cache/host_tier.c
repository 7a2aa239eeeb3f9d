/* The host-RAM tier (see host_tier.h).
 *
 * Storage: slots in one array sized at start-up; the index chains them from buckets
 * keyed by their path key; the LRU list links the held ones; the free ones are chained
 * through the same link as the buckets.  A held block's cache_salt is interned in a
 * table of at most n_slots + 2 strings (one per distinct salt held, one coming in
 * before a victim's goes, and "", which the tier holds from start-up: requests without
 * a salt never allocate), refcounted by the slots holding blocks of it. */
#include "cache/host_tier.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct host_slot {
    struct path_key key, parent;
    int32_t chain;             /* next in the bucket, or in the free list */
    int32_t lru_prev, lru_next;
    int32_t salt;              /* index into salts */
    uint64_t fill_seq;         /* pending while > the tier's settled_seq */
    bool used;
    bool held;                 /* not a victim (host_tier_hold) */
};

struct host_salt {
    char *s;                   /* NULL: free */
    uint64_t hash;
    int32_t refs;
    int32_t chain;             /* next in the bucket, or in the free list */
};

/* ------------------------------------------------------------------ salts */

static int host_salt_bucket(const struct host_tier *ht, uint64_t h)
{
    return (int)(h & (uint64_t)(ht->n_buckets - 1));
}

/* The interned copy of salt with one more reference, or -1 (out of memory). */
static int host_salt_get(struct host_tier *ht, const char *salt)
{
    size_t n = strlen(salt);
    uint64_t h = XXH3_64bits(salt, n);
    int32_t *bk = &ht->salt_buckets[host_salt_bucket(ht, h)];
    for (int i = *bk; i >= 0; i = ht->salts[i].chain)
        if (ht->salts[i].hash == h && !strcmp(ht->salts[i].s, salt)) {
            ht->salts[i].refs++;
            return i;
        }
    int i = ht->salt_free;
    HR_ASSERT(i >= 0); /* one per held slot at most, and a slot is being filled */
    char *copy = malloc(n + 1);
    if (!copy)
        return -1;
    memcpy(copy, salt, n + 1);
    struct host_salt *s = &ht->salts[i];
    ht->salt_free = s->chain;
    *s = (struct host_salt){.s = copy, .hash = h, .refs = 1, .chain = *bk};
    *bk = i;
    ht->n_salts++;
    return i;
}

static void host_salt_put(struct host_tier *ht, int i)
{
    struct host_salt *s = &ht->salts[i];
    if (--s->refs > 0)
        return;
    int32_t *p = &ht->salt_buckets[host_salt_bucket(ht, s->hash)];
    while (*p != i)
        p = &ht->salts[*p].chain;
    *p = s->chain;
    free(s->s);
    s->s = NULL;
    s->chain = ht->salt_free;
    ht->salt_free = i;
    ht->n_salts--;
}

/* ------------------------------------------------------------------ index */

static int host_bucket(const struct host_tier *ht, struct path_key k)
{
    return (int)((k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)) & (uint64_t)(ht->n_buckets - 1));
}

static int host_lookup(const struct host_tier *ht, struct path_key k)
{
    if (!ht->n_buckets)
        return -1;
    for (int i = ht->buckets[host_bucket(ht, k)]; i >= 0; i = ht->slots[i].chain)
        if (path_key_eq(ht->slots[i].key, k))
            return i;
    return -1;
}

static void host_lru_unlink(struct host_tier *ht, int i)
{
    struct host_slot *e = &ht->slots[i];
    if (e->lru_prev >= 0)
        ht->slots[e->lru_prev].lru_next = e->lru_next;
    else
        ht->lru_head = e->lru_next;
    if (e->lru_next >= 0)
        ht->slots[e->lru_next].lru_prev = e->lru_prev;
    else
        ht->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = -1;
}

static void host_lru_push(struct host_tier *ht, int i)
{
    struct host_slot *e = &ht->slots[i];
    e->lru_prev = ht->lru_tail;
    e->lru_next = -1;
    if (ht->lru_tail >= 0)
        ht->slots[ht->lru_tail].lru_next = i;
    else
        ht->lru_head = i;
    ht->lru_tail = i;
}

static bool host_pending(const struct host_tier *ht, int i) { return ht->slots[i].fill_seq > ht->settled_seq; }

/* Frees a held slot (its bytes stay as they are until the slot is filled again). */
static void host_release(struct host_tier *ht, int i)
{
    struct host_slot *e = &ht->slots[i];
    HR_ASSERT(e->used);
    int32_t *p = &ht->buckets[host_bucket(ht, e->key)];
    while (*p != i)
        p = &ht->slots[*p].chain;
    *p = e->chain;
    host_lru_unlink(ht, i);
    host_salt_put(ht, e->salt);
    e->used = false;
    e->held = false;
    e->fill_seq = 0;
    e->chain = ht->free_head;
    ht->free_head = i;
    ht->st.blocks--;
    ht->st.bytes -= (int64_t)ht->block_bytes;
}

/* ------------------------------------------------------------------ API */

enum hr_status host_tier_init(struct host_tier *ht, void *arena, size_t arena_bytes, int block_size,
                              size_t block_bytes, char *err, size_t errlen)
{
    memset(ht, 0, sizeof *ht);
    ht->free_head = ht->lru_head = ht->lru_tail = ht->salt_free = -1;
    if (block_bytes == 0 || arena_bytes < block_bytes)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "--kv-cache-host-mib: %zu bytes hold no KV block (one block is %zu bytes here)", arena_bytes,
                      block_bytes);
    size_t n = arena_bytes / block_bytes;
    if (n > (size_t)1 << 28)
        return hr_err(err, errlen, HR_ERR_INVALID, "--kv-cache-host-mib: %zu blocks are more than the tier indexes",
                      n);
    ht->arena = arena;
    ht->block_bytes = block_bytes;
    ht->block_size = block_size;
    ht->n_slots = (int)n;
    ht->n_buckets = 1;
    while (ht->n_buckets < 2 * ht->n_slots)
        ht->n_buckets <<= 1;
    ht->slots = calloc(n, sizeof *ht->slots);
    ht->tokens = malloc(n * (size_t)block_size * sizeof *ht->tokens);
    ht->buckets = malloc((size_t)ht->n_buckets * sizeof *ht->buckets);
    ht->salts = calloc(n + 2, sizeof *ht->salts);
    ht->salt_buckets = malloc((size_t)ht->n_buckets * sizeof *ht->salt_buckets);
    if (!ht->slots || !ht->tokens || !ht->buckets || !ht->salts || !ht->salt_buckets) {
        host_tier_free(ht);
        return hr_err(err, errlen, HR_ERR_NOMEM, "host tier: out of memory for the index of %zu blocks", n);
    }
    for (int i = 0; i < ht->n_buckets; i++)
        ht->buckets[i] = ht->salt_buckets[i] = -1;
    for (int i = ht->n_slots + 1; i >= 0; i--) {
        ht->salts[i].chain = ht->salt_free;
        ht->salt_free = i;
        if (i >= ht->n_slots)
            continue;
        ht->slots[i] = (struct host_slot){.chain = ht->free_head, .lru_prev = -1, .lru_next = -1};
        ht->free_head = i;
    }
    if (host_salt_get(ht, "") < 0) { /* the tier's own reference: never freed */
        host_tier_free(ht);
        return hr_err(err, errlen, HR_ERR_NOMEM, "host tier: out of memory");
    }
    ht->st.enabled = true;
    ht->st.capacity_blocks = ht->n_slots;
    ht->st.capacity_bytes = (int64_t)n * (int64_t)block_bytes;
    return HR_OK;
}

void host_tier_free(struct host_tier *ht)
{
    if (!ht)
        return;
    if (ht->salts)
        for (int i = 0; i < ht->n_slots + 2; i++)
            free(ht->salts[i].s);
    free(ht->slots);
    free(ht->tokens);
    free(ht->buckets);
    free(ht->salts);
    free(ht->salt_buckets);
    memset(ht, 0, sizeof *ht);
    ht->free_head = ht->lru_head = ht->lru_tail = ht->salt_free = -1;
}

int host_tier_find(struct host_tier *ht, const char *salt, struct path_key key, struct path_key parent,
                   const int32_t *tokens)
{
    int i = host_lookup(ht, key);
    if (i < 0)
        return -1;
    const struct host_slot *e = &ht->slots[i];
    if (!path_key_eq(e->parent, parent) || strcmp(ht->salts[e->salt].s, salt ? salt : "") != 0 ||
        memcmp(ht->tokens + (size_t)i * (size_t)ht->block_size, tokens, (size_t)ht->block_size * sizeof *tokens)) {
        ht->st.mismatches_total++; /* a key that names another block: never used */
        return -1;
    }
    if (ht->lru_tail != i) {
        host_lru_unlink(ht, i);
        host_lru_push(ht, i);
    }
    return i;
}

bool host_tier_has(const struct host_tier *ht, struct path_key key) { return host_lookup(ht, key) >= 0; }

int host_tier_victim(const struct host_tier *ht)
{
    if (ht->free_head >= 0)
        return ht->free_head;
    int i = ht->lru_head;
    while (i >= 0 && ht->slots[i].held)
        i = ht->slots[i].lru_next;
    return i;
}

void host_tier_hold(struct host_tier *ht, int slot, bool held)
{
    HR_ASSERT(slot >= 0 && slot < ht->n_slots);
    ht->slots[slot].held = held && ht->slots[slot].used;
}

bool host_tier_get(const struct host_tier *ht, int slot, struct host_block *out)
{
    if (slot < 0 || slot >= ht->n_slots || !ht->slots[slot].used)
        return false;
    const struct host_slot *e = &ht->slots[slot];
    *out = (struct host_block){.salt = ht->salts[e->salt].s, .key = e->key, .parent = e->parent,
                               .tokens = ht->tokens + (size_t)slot * (size_t)ht->block_size,
                               .data = host_tier_data(ht, slot), .pending = host_pending(ht, slot),
                               .held = e->held};
    return true;
}

int host_tier_insert(struct host_tier *ht, int slot, const char *salt, struct path_key key, struct path_key parent,
                     const int32_t *tokens)
{
    HR_ASSERT(slot >= 0 && slot < ht->n_slots && !ht->slots[slot].held && host_lookup(ht, key) < 0);
    int s = host_salt_get(ht, salt ? salt : "");
    if (s < 0)
        return -1;
    if (ht->slots[slot].used) {
        host_release(ht, slot);
        ht->st.evicted_blocks_total++;
    }
    /* take slot off the free list */
    int32_t *p = &ht->free_head;
    while (*p != slot) {
        HR_ASSERT(*p >= 0);
        p = &ht->slots[*p].chain;
    }
    *p = ht->slots[slot].chain;
    struct host_slot *e = &ht->slots[slot];
    int b = host_bucket(ht, key);
    *e = (struct host_slot){.key = key, .parent = parent, .chain = ht->buckets[b], .lru_prev = -1, .lru_next = -1,
                            .salt = s, .used = true};
    ht->buckets[b] = slot;
    memcpy(ht->tokens + (size_t)slot * (size_t)ht->block_size, tokens, (size_t)ht->block_size * sizeof *tokens);
    host_lru_push(ht, slot);
    ht->st.blocks++;
    ht->st.bytes += (int64_t)ht->block_bytes;
    return slot;
}

void *host_tier_data(const struct host_tier *ht, int slot)
{
    return ht->arena + (size_t)slot * ht->block_bytes;
}

void host_tier_remove(struct host_tier *ht, int slot)
{
    if (slot >= 0 && slot < ht->n_slots && ht->slots[slot].used)
        host_release(ht, slot);
}

void host_tier_clear(struct host_tier *ht)
{
    while (ht->lru_head >= 0)
        host_release(ht, ht->lru_head);
}

void host_tier_mark_pending(struct host_tier *ht, int slot)
{
    HR_ASSERT(ht->slots[slot].used);
    ht->slots[slot].fill_seq = ++ht->fill_seq;
}

bool host_tier_any_pending(const struct host_tier *ht) { return ht->fill_seq > ht->settled_seq; }

void host_tier_settle(struct host_tier *ht) { ht->settled_seq = ht->fill_seq; }

void host_tier_drop_pending(struct host_tier *ht)
{
    for (int i = ht->lru_head, next; i >= 0; i = next) {
        next = ht->slots[i].lru_next;
        if (host_pending(ht, i))
            host_release(ht, i);
    }
    ht->settled_seq = ht->fill_seq;
}

void host_tier_for_each(const struct host_tier *ht, void (*fn)(void *ctx, const struct host_block *b), void *ctx)
{
    for (int i = ht->lru_head; i >= 0; i = ht->slots[i].lru_next) {
        struct host_block b;
        host_tier_get(ht, i, &b);
        fn(ctx, &b);
    }
}
