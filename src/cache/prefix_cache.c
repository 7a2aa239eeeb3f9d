/* The prefix cache (see prefix_cache.h).
 *
 * Storage: nodes live in one array sized at start-up (one per KV block, plus room
 * for namespace roots); children are found through one hash table keyed by
 * (parent, XXH3 of the block's tokens), chained through the nodes.  A root is a
 * node with no block whose key is the namespace (its salt compared exactly). */
#include "cache/prefix_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define PREFIX_ROOTS_MAX 4096
#define PREFIX_NO_PARENT (-1)

struct prefix_node {
    int32_t parent;            /* node index, PREFIX_NO_PARENT for roots */
    int32_t block;             /* KV block held (one reference), -1 for roots */
    uint64_t hash;             /* XXH3 of the tokens (roots: of the namespace) */
    int32_t chain;             /* next node in the bucket */
    int32_t n_children;
    int32_t lru_prev, lru_next; /* block nodes only */
    bool used;
    char *salt;                /* roots: the namespace's cache_salt ("" when none) */
    int32_t root;              /* the namespace's root node (roots: itself) */
    struct path_key key;       /* of the path from the root (path_key.h) */
};

/* ------------------------------------------------------------------ hashing */

static uint64_t prefix_block_hash(const struct prefix_cache *pc, const int32_t *tokens)
{
    if (pc->hook_hash_collide)
        return 0x5eed;
    return XXH3_64bits(tokens, (size_t)pc->block_size * sizeof *tokens);
}

static uint64_t prefix_ns_hash(const struct prefix_cache *pc, const char *salt)
{
    unsigned char buf[16 + HEARTH_CACHE_SALT_MAX];
    size_t n = strlen(salt);
    memcpy(buf, &pc->ns_base, 8);
    memcpy(buf + 8, &pc->epoch, 8);
    memcpy(buf + 16, salt, n);
    return pc->hook_hash_collide ? 0x5eed : XXH3_64bits(buf, 16 + n);
}

static int prefix_bucket(const struct prefix_cache *pc, int32_t parent, uint64_t hash)
{
    uint64_t k = hash ^ ((uint64_t)(uint32_t)parent * 0x9e3779b97f4a7c15ull);
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return (int)(k & (uint64_t)(pc->n_buckets - 1));
}

/* ------------------------------------------------------------------ storage */

enum hr_status prefix_cache_init(struct prefix_cache *pc, struct block_pool *pool, int block_size, int max_entries,
                                 uint64_t ns_base, char *err, size_t errlen)
{
    memset(pc, 0, sizeof *pc);
    if (max_entries < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "--prefix-cache-max-entries must be >= 1, got %d", max_entries);
    pc->pool = pool;
    pc->block_size = block_size;
    pc->max_entries = max_entries;
    pc->ns_base = ns_base;
    int cap_blocks = block_pool_capacity(pool);
    pc->cap = cap_blocks + PREFIX_ROOTS_MAX;
    pc->n_buckets = 1;
    while (pc->n_buckets < 2 * pc->cap)
        pc->n_buckets <<= 1;
    pc->nodes = calloc((size_t)pc->cap, sizeof *pc->nodes);
    pc->tokens = malloc((size_t)pc->cap * (size_t)block_size * sizeof *pc->tokens);
    pc->buckets = malloc((size_t)pc->n_buckets * sizeof *pc->buckets);
    if (!pc->nodes || !pc->tokens || !pc->buckets) {
        prefix_cache_free(pc);
        return hr_err(err, errlen, HR_ERR_NOMEM, "prefix cache: out of memory");
    }
    for (int i = 0; i < pc->n_buckets; i++)
        pc->buckets[i] = -1;
    for (int i = 0; i < pc->cap; i++)
        pc->nodes[i].chain = i + 1 < pc->cap ? i + 1 : -1;
    pc->free_head = 0;
    pc->lru_head = pc->lru_tail = -1;
    return HR_OK;
}

static void prefix_unlink_bucket(struct prefix_cache *pc, int idx)
{
    struct prefix_node *n = &pc->nodes[idx];
    int b = prefix_bucket(pc, n->parent, n->hash);
    int32_t *p = &pc->buckets[b];
    while (*p != idx) {
        HR_ASSERT(*p >= 0);
        p = &pc->nodes[*p].chain;
    }
    *p = n->chain;
}

static void prefix_lru_unlink(struct prefix_cache *pc, int idx)
{
    struct prefix_node *n = &pc->nodes[idx];
    if (n->lru_prev >= 0)
        pc->nodes[n->lru_prev].lru_next = n->lru_next;
    else
        pc->lru_head = n->lru_next;
    if (n->lru_next >= 0)
        pc->nodes[n->lru_next].lru_prev = n->lru_prev;
    else
        pc->lru_tail = n->lru_prev;
    n->lru_prev = n->lru_next = -1;
}

/* Most recently used at the tail. */
static void prefix_lru_touch(struct prefix_cache *pc, int idx)
{
    struct prefix_node *n = &pc->nodes[idx];
    if (pc->lru_tail == idx)
        return;
    if (n->lru_prev >= 0 || n->lru_next >= 0 || pc->lru_head == idx)
        prefix_lru_unlink(pc, idx);
    n->lru_prev = pc->lru_tail;
    n->lru_next = -1;
    if (pc->lru_tail >= 0)
        pc->nodes[pc->lru_tail].lru_next = idx;
    else
        pc->lru_head = idx;
    pc->lru_tail = idx;
}

static int prefix_node_new(struct prefix_cache *pc, int32_t parent, uint64_t hash)
{
    int idx = pc->free_head;
    if (idx < 0)
        return -1;
    struct prefix_node *n = &pc->nodes[idx];
    pc->free_head = n->chain;
    memset(n, 0, sizeof *n);
    n->used = true;
    n->parent = parent;
    n->hash = hash;
    n->block = -1;
    n->lru_prev = n->lru_next = -1;
    int b = prefix_bucket(pc, parent, hash);
    n->chain = pc->buckets[b];
    pc->buckets[b] = idx;
    if (parent >= 0)
        pc->nodes[parent].n_children++;
    return idx;
}

/* Removes a node without children: its block reference goes back to the pool. */
static void prefix_node_drop(struct prefix_cache *pc, int idx)
{
    struct prefix_node *n = &pc->nodes[idx];
    HR_ASSERT(n->used && n->n_children == 0);
    prefix_unlink_bucket(pc, idx);
    if (n->block >= 0) {
        prefix_lru_unlink(pc, idx);
        block_pool_release(pc->pool, n->block);
        pc->st.entries--;
    }
    if (n->parent >= 0)
        pc->nodes[n->parent].n_children--;
    free(n->salt);
    n->salt = NULL;
    n->used = false;
    n->chain = pc->free_head;
    pc->free_head = idx;
}

void prefix_cache_free(struct prefix_cache *pc)
{
    if (!pc)
        return;
    if (pc->nodes) {
        for (int i = 0; i < pc->cap; i++) {
            if (!pc->nodes[i].used)
                continue;
            if (pc->nodes[i].block >= 0)
                block_pool_release(pc->pool, pc->nodes[i].block);
            free(pc->nodes[i].salt);
        }
    }
    free(pc->nodes);
    free(pc->tokens);
    free(pc->buckets);
    memset(pc, 0, sizeof *pc);
}

/* ------------------------------------------------------------------ lookup */

static const char *prefix_salt(const char *salt) { return salt ? salt : ""; }

/* The namespace's root, created when `create`; -1 when absent or out of room. */
static int prefix_root(struct prefix_cache *pc, const char *salt, bool create)
{
    salt = prefix_salt(salt);
    if (strlen(salt) > HEARTH_CACHE_SALT_MAX)
        return -1;
    uint64_t h = prefix_ns_hash(pc, salt);
    for (int i = pc->buckets[prefix_bucket(pc, PREFIX_NO_PARENT, h)]; i >= 0; i = pc->nodes[i].chain) {
        const struct prefix_node *n = &pc->nodes[i];
        if (n->parent == PREFIX_NO_PARENT && n->hash == h && !strcmp(n->salt, salt))
            return i;
    }
    if (!create)
        return -1;
    char *copy = strdup(salt);
    if (!copy)
        return -1;
    int idx = prefix_node_new(pc, PREFIX_NO_PARENT, h);
    if (idx < 0) {
        free(copy);
        return -1;
    }
    pc->nodes[idx].salt = copy;
    pc->nodes[idx].root = idx;
    pc->nodes[idx].key = path_key_root(pc->ns_desc, salt);
    return idx;
}

static int prefix_child(struct prefix_cache *pc, int parent, const int32_t *tokens, bool count_collisions)
{
    uint64_t h = prefix_block_hash(pc, tokens);
    size_t bytes = (size_t)pc->block_size * sizeof *tokens;
    for (int i = pc->buckets[prefix_bucket(pc, parent, h)]; i >= 0; i = pc->nodes[i].chain) {
        const struct prefix_node *n = &pc->nodes[i];
        if (n->parent != parent || n->hash != h)
            continue;
        if (!memcmp(pc->tokens + (size_t)i * pc->block_size, tokens, bytes))
            return i;
        if (count_collisions)
            pc->st.collisions_total++;
    }
    return -1;
}

static int prefix_max_blocks(const struct prefix_cache *pc, int n)
{
    return n >= 1 ? (n - 1) / pc->block_size : 0;
}

int prefix_cache_match_key(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n,
                           struct path_key *key)
{
    int node = prefix_root(pc, salt, false), last = node, k = 0, max = prefix_max_blocks(pc, n);
    while (node >= 0 && k < max) {
        node = prefix_child(pc, node, tokens + (size_t)k * pc->block_size, false);
        if (node >= 0) {
            k++;
            last = node;
        }
    }
    if (key)
        *key = last >= 0 ? pc->nodes[last].key : path_key_root(pc->ns_desc, prefix_salt(salt));
    return k;
}

int prefix_cache_match_len(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n)
{
    return prefix_cache_match_key(pc, salt, tokens, n, NULL);
}

int prefix_cache_lookup(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n, int32_t *blocks,
                        struct prefix_lease *lease, const void *owner)
{
    int node = prefix_root(pc, salt, false), k = 0, max = prefix_max_blocks(pc, n);
    while (node >= 0 && k < max) {
        node = prefix_child(pc, node, tokens + (size_t)k * pc->block_size, true);
        if (node < 0)
            break;
        block_pool_retain(pc->pool, pc->nodes[node].block);
        prefix_lru_touch(pc, node);
        blocks[k++] = pc->nodes[node].block;
    }
    pc->st.lookups_total++;
    pc->st.lookup_tokens_total += n;
    pc->st.hit_tokens_total += (int64_t)k * pc->block_size;
    if (k)
        pc->st.hits_total++;
    else
        pc->st.misses_total++;
    *lease = (struct prefix_lease){.state = PREFIX_LEASE_OPEN, .owner = owner, .blocks = blocks, .n_blocks = k};
    pc->st.open_leases++;
    return k;
}

/* ------------------------------------------------------------------ leases */

void prefix_cache_lease_prepare(struct prefix_cache *pc, struct prefix_lease *lease, const void *owner)
{
    (void)pc;
    HR_ASSERT(lease->state == PREFIX_LEASE_OPEN && lease->owner == owner);
    lease->state = PREFIX_LEASE_PREPARED;
}

void prefix_cache_lease_commit(struct prefix_cache *pc, struct prefix_lease *lease, const void *owner)
{
    HR_ASSERT(lease->state == PREFIX_LEASE_PREPARED && lease->owner == owner);
    lease->state = PREFIX_LEASE_COMMITTED;
    pc->st.open_leases--;
}

void prefix_cache_lease_abort(struct prefix_cache *pc, struct prefix_lease *lease)
{
    HR_ASSERT(lease->state == PREFIX_LEASE_OPEN || lease->state == PREFIX_LEASE_PREPARED);
    block_pool_release_n(pc->pool, lease->blocks, lease->n_blocks);
    lease->state = PREFIX_LEASE_ABORTED;
    pc->st.open_leases--;
}

/* ------------------------------------------------------------------ insert / evict */

int prefix_cache_insert(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n_blocks,
                        const int32_t *blocks)
{
    int node = prefix_root(pc, salt, true), added = 0;
    for (int k = 0; node >= 0 && k < n_blocks; k++) {
        const int32_t *t = tokens + (size_t)k * pc->block_size;
        int child = prefix_child(pc, node, t, true);
        if (child < 0) {
            if (pc->st.entries >= pc->max_entries && prefix_cache_evict_one(pc, node) < 0)
                break;
            child = prefix_node_new(pc, node, prefix_block_hash(pc, t));
            if (child < 0)
                break;
            memcpy(pc->tokens + (size_t)child * pc->block_size, t, (size_t)pc->block_size * sizeof *t);
            pc->nodes[child].root = pc->nodes[node].root;
            pc->nodes[child].key = path_key_child(pc->nodes[node].key, t, pc->block_size);
            pc->nodes[child].block = blocks[k];
            block_pool_retain(pc->pool, blocks[k]);
            pc->st.entries++;
            pc->st.inserted_blocks_total++;
            added++;
        }
        prefix_lru_touch(pc, child);
        node = child;
    }
    return added;
}

/* Evicts the least recently used leaf whose block only the cache holds, other than
 * `keep` (a node on the path being inserted).  Returns the freed block or -1. */
int prefix_cache_evict_one(struct prefix_cache *pc, int keep)
{
    for (int i = pc->lru_head; i >= 0; i = pc->nodes[i].lru_next) {
        struct prefix_node *n = &pc->nodes[i];
        if (i == keep || n->n_children > 0 || block_pool_refcount(pc->pool, n->block) != 1)
            continue;
        int parent = n->parent, block = n->block;
        if (pc->on_evict)
            pc->on_evict(pc->evict_ctx, &(struct prefix_block){
                .salt = pc->nodes[n->root].salt, .key = n->key, .parent = pc->nodes[parent].key,
                .tokens = pc->tokens + (size_t)i * pc->block_size, .block = block});
        prefix_node_drop(pc, i);
        pc->st.evicted_blocks_total++;
        /* A root left without children goes too (unless an insert is under way below it). */
        if (parent >= 0 && parent != keep && pc->nodes[parent].block < 0 && pc->nodes[parent].n_children == 0)
            prefix_node_drop(pc, parent);
        return block;
    }
    return -1;
}

int prefix_cache_evict(struct prefix_cache *pc, int want)
{
    int freed = 0;
    while (block_pool_n_free(pc->pool) < want && prefix_cache_evict_one(pc, -1) >= 0)
        freed++;
    return freed;
}

void prefix_cache_invalidate(struct prefix_cache *pc)
{
    for (int i = 0; i < pc->cap; i++) {
        struct prefix_node *n = &pc->nodes[i];
        if (!n->used)
            continue;
        if (n->block >= 0)
            block_pool_release(pc->pool, n->block);
        free(n->salt);
        n->salt = NULL;
        n->used = false;
    }
    for (int i = 0; i < pc->n_buckets; i++)
        pc->buckets[i] = -1;
    for (int i = 0; i < pc->cap; i++)
        pc->nodes[i].chain = i + 1 < pc->cap ? i + 1 : -1;
    pc->free_head = 0;
    pc->lru_head = pc->lru_tail = -1;
    pc->st.entries = 0;
    pc->epoch++;
    pc->st.invalidations_total++;
}

void prefix_cache_set_ns_desc(struct prefix_cache *pc, const char *desc)
{
    snprintf(pc->ns_desc, sizeof pc->ns_desc, "%s", desc);
}

void prefix_cache_for_each(struct prefix_cache *pc, void (*fn)(void *ctx, const struct prefix_block *b), void *ctx)
{
    for (int i = 0; i < pc->cap; i++) {
        const struct prefix_node *n = &pc->nodes[i];
        if (n->used && n->block >= 0)
            fn(ctx, &(struct prefix_block){.salt = pc->nodes[n->root].salt, .key = n->key,
                                           .parent = pc->nodes[n->parent].key,
                                           .tokens = pc->tokens + (size_t)i * pc->block_size, .block = n->block});
    }
}

int64_t prefix_cache_blocks_held(const struct prefix_cache *pc) { return pc->st.entries; }
