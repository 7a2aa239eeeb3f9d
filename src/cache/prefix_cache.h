/* The prefix cache: a radix tree whose nodes are full KV blocks.
 *
 * A node stands for one block of block_size tokens under its parent's path; it
 * holds one reference to its KV block.  Every namespace (the model fingerprint, KV
 * dtype, block size, kernel variant, epoch and the request's cache_salt) has a root
 * of its own, and children are keyed by their parent, so namespaces never share a
 * node.  Children are found through a 64-bit XXH3 of the block's tokens used as a
 * bucket key only: a match also compares the tokens exactly; hash-equal blocks with
 * other tokens are counted as collisions and never matched.
 *
 * Lookups hand out leases: the matched blocks are retained (one reference each)
 * until the lease commits — the references pass to the sequence's block table — or
 * aborts — they are released.  Owned by the engine thread; nothing is thread-safe. */
#ifndef HEARTH_CACHE_PREFIX_CACHE_H
#define HEARTH_CACHE_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cache/path_key.h"
#include "kv/block_pool.h"

struct prefix_node;

struct prefix_cache_stats {
    int64_t entries;           /* block nodes in the tree */
    int64_t open_leases;
    int64_t lookups_total, hits_total, misses_total;
    int64_t lookup_tokens_total, hit_tokens_total;
    int64_t inserted_blocks_total, evicted_blocks_total;
    int64_t collisions_total, invalidations_total;
};

/* A cached block as the tiers below the pool see it. */
struct prefix_block {
    const char *salt;          /* its namespace's cache_salt ("" for none) */
    struct path_key key, parent; /* path keys (path_key.h) of the block and its parent */
    const int32_t *tokens;     /* [block_size] */
    int block;                 /* the KV block */
};

#define PREFIX_NS_DESC_MAX 256

struct prefix_cache {
    struct block_pool *pool;   /* not owned */
    char ns_desc[PREFIX_NS_DESC_MAX]; /* what ns_base hashes, the root of every path key */
    /* Called with every block evicted to make room, before its reference goes (the
     * disk tier writes it); never on invalidation. */
    void (*on_evict)(void *ctx, const struct prefix_block *b);
    void *evict_ctx;
    int block_size;
    int max_entries;           /* block nodes at most (>= 1) */
    uint64_t ns_base;          /* hash of what every namespace of this engine shares */
    uint64_t epoch;
    struct prefix_node *nodes; /* [cap] node storage */
    int32_t *tokens;           /* [cap, block_size] tokens of each node */
    int cap;
    int free_head;             /* free list through prefix_node.next_free */
    int32_t *buckets;          /* [n_buckets] chain heads (node index, -1) */
    int n_buckets;             /* power of two */
    int lru_head, lru_tail;    /* block nodes, least recently used at the head */
    uint64_t tick;
    struct prefix_cache_stats st;
    bool hook_hash_collide;    /* test hook: every block hashes alike */
};

enum prefix_lease_state {
    PREFIX_LEASE_NONE = 0,
    PREFIX_LEASE_OPEN,         /* blocks matched and retained */
    PREFIX_LEASE_PREPARED,     /* the rest of the sequence's blocks are allocated */
    PREFIX_LEASE_COMMITTED,    /* references passed to the block table */
    PREFIX_LEASE_ABORTED,      /* references released */
};

struct prefix_lease {
    enum prefix_lease_state state;
    const void *owner;         /* who may prepare/commit it */
    int32_t *blocks;           /* [n_blocks] the matched blocks (the caller's block table) */
    int n_blocks;
};

/* ns_base: a hash of the model fingerprint, KV dtype, block size and kernel variant. */
enum hr_status prefix_cache_init(struct prefix_cache *pc, struct block_pool *pool, int block_size, int max_entries,
                                 uint64_t ns_base, char *err, size_t errlen);
/* Releases every block the tree holds. */
void prefix_cache_free(struct prefix_cache *pc);

/* Longest cached prefix of tokens, in whole blocks, up to floor((n - 1) / bs) blocks
 * (at least one prompt token is always computed).  Retains the matched blocks into
 * blocks[0..k) and opens lease (owned by owner).  Returns k. */
int prefix_cache_lookup(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n, int32_t *blocks,
                        struct prefix_lease *lease, const void *owner);
/* The same match without retaining anything or counting a lookup (scheduling order). */
int prefix_cache_match_len(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n);
/* The same, and *key: the path key of the last block matched (the namespace root's
 * when none is), from which the tiers below continue the path. */
int prefix_cache_match_key(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n,
                           struct path_key *key);

void prefix_cache_lease_prepare(struct prefix_cache *pc, struct prefix_lease *lease, const void *owner);
void prefix_cache_lease_commit(struct prefix_cache *pc, struct prefix_lease *lease, const void *owner);
void prefix_cache_lease_abort(struct prefix_cache *pc, struct prefix_lease *lease);

/* Inserts the first n_blocks full blocks of a sequence (tokens [n_blocks * bs],
 * blocks [n_blocks] its table) under the namespace's root.  Blocks already on the
 * path are left as they are (inserting an existing path is a no-op).  Returns how
 * many nodes were added.  May evict to stay within max_entries. */
int prefix_cache_insert(struct prefix_cache *pc, const char *salt, const int32_t *tokens, int n_blocks,
                        const int32_t *blocks);

/* Evicts least recently used leaves whose block nobody but the cache references,
 * until `want` pool blocks are free or nothing more can go.  Returns blocks freed. */
int prefix_cache_evict(struct prefix_cache *pc, int want);

/* Evicts one such leaf other than node `keep` (-1: any); returns its block or -1. */
int prefix_cache_evict_one(struct prefix_cache *pc, int keep);

/* The namespace description path keys start from (prefix_cache_init leaves it ""). */
void prefix_cache_set_ns_desc(struct prefix_cache *pc, const char *desc);

/* Calls fn with every cached block. */
void prefix_cache_for_each(struct prefix_cache *pc, void (*fn)(void *ctx, const struct prefix_block *b), void *ctx);

/* Drops every node (a reset or a reload): bumps the epoch. */
void prefix_cache_invalidate(struct prefix_cache *pc);


/* Blocks the tree references. */
int64_t prefix_cache_blocks_held(const struct prefix_cache *pc);

#endif
