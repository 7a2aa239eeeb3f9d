/* The host-RAM tier of the prefix cache (--kv-cache-host-mib): full KV blocks evicted
 * from the pool, kept in a fixed arena of block-sized slots of host memory (the
 * backend's host_alloc: pinned on a GPU), with an index keyed by path key
 * (path_key.h) and LRU eviction.  Everything is allocated at start-up; afterwards only
 * a cache_salt other than "" is copied, when the tier holds no block of it yet, as the
 * prefix cache's new namespace roots are.
 *
 * A block is found only when its key, its parent's key, its tokens and its
 * namespace's cache_salt all equal those asked (the disk tier's rule; the namespace
 * description — model fingerprint, KV dtype, block size, kernel variant — is inside
 * every key).  The tier keeps the books and the bytes; the engine (kv_restore.c)
 * queues the copies into and out of the slots.  A slot whose copy in is queued but not
 * known to be done is pending (host_tier_mark_pending): its bytes may be read by the
 * device (a later queued copy runs after it) but not by the CPU until host_tier_settle.
 * Owned by the engine thread; nothing is thread-safe. */
#ifndef HEARTH_CACHE_HOST_TIER_H
#define HEARTH_CACHE_HOST_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hearth.h>

#include "base/status.h"
#include "cache/path_key.h"

struct host_slot;
struct host_salt;

/* What a slot holds. */
struct host_block {
    const char *salt;          /* its namespace's cache_salt ("" for none); the tier's copy */
    struct path_key key, parent;
    const int32_t *tokens;     /* [block_size] */
    void *data;                /* [block_bytes] in the arena */
    bool pending;              /* its copy in is not known to be done */
    bool held;                 /* never a victim (host_tier_hold) */
};

struct host_tier {
    unsigned char *arena;      /* [n_slots, block_bytes]: host memory, not owned */
    size_t block_bytes;
    int block_size;
    int n_slots;
    struct host_slot *slots;   /* [n_slots] */
    int32_t *tokens;           /* [n_slots, block_size] */
    int32_t *buckets;          /* [n_buckets]: slots by key, chained */
    int n_buckets;             /* power of two */
    int free_head;             /* free slots, chained */
    int lru_head, lru_tail;    /* held slots, least recently used at the head */
    struct host_salt *salts;   /* [n_slots + 2]: the cache_salts of held blocks, refcounted, and "" */
    int32_t *salt_buckets;     /* [n_buckets] */
    int salt_free;
    int n_salts;               /* interned now ("" included) */
    uint64_t fill_seq;         /* copies in marked pending so far */
    uint64_t settled_seq;      /* ... of which every one up to this is done */
    struct hearth_host_cache_stats st;
};

/* arena: arena_bytes of host memory (the caller's); as many slots of block_bytes as
 * fit, at least one (else HR_ERR_INVALID saying how much one block needs). */
enum hr_status host_tier_init(struct host_tier *ht, void *arena, size_t arena_bytes, int block_size,
                              size_t block_bytes, char *err, size_t errlen);
/* Safe on a zeroed tier. */
void host_tier_free(struct host_tier *ht);

/* The slot holding exactly this block, or -1.  A hit becomes the most recently used. */
int host_tier_find(struct host_tier *ht, const char *salt, struct path_key key, struct path_key parent,
                   const int32_t *tokens);
/* Whether a block of this key is held (no LRU change). */
bool host_tier_has(const struct host_tier *ht, struct path_key key);

/* The slot the next host_tier_insert takes: a free one, else the least recently used
 * one not held; -1 when every slot is held. */
int host_tier_victim(const struct host_tier *ht);
/* Holds a slot (it is never a victim) or lets it go: the blocks an admission is about
 * to copy back stay while the admission makes room in the pool. */
void host_tier_hold(struct host_tier *ht, int slot, bool held);
/* What slot holds; false when it is free. */
bool host_tier_get(const struct host_tier *ht, int slot, struct host_block *out);
/* Puts a block into slot (host_tier_victim's; what it held is evicted and counted) as
 * the most recently used; its bytes are the caller's to fill (host_tier_data).  -1
 * when a new cache_salt cannot be copied (out of memory: nothing changed). */
int host_tier_insert(struct host_tier *ht, int slot, const char *salt, struct path_key key, struct path_key parent,
                     const int32_t *tokens);
void *host_tier_data(const struct host_tier *ht, int slot);
/* Forgets what slot holds (a copy into it failed). */
void host_tier_remove(struct host_tier *ht, int slot);
/* Forgets every block (a cache reset, a reload). */
void host_tier_clear(struct host_tier *ht);

/* Pending copies: slot's copy in was just queued; every copy queued so far is done
 * (after the backend's kv_copies_wait); the wait failed: every pending slot is dropped. */
void host_tier_mark_pending(struct host_tier *ht, int slot);
bool host_tier_any_pending(const struct host_tier *ht);
void host_tier_settle(struct host_tier *ht);
void host_tier_drop_pending(struct host_tier *ht);

/* Calls fn with every block held, least recently used first. */
void host_tier_for_each(const struct host_tier *ht, void (*fn)(void *ctx, const struct host_block *b), void *ctx);

#endif
