/* Refcounted KV blocks over a struct kv_store: allocation, sharing and copy-on-write.
 *
 * A block's refcount counts the holders of its id (sequences' block tables, prefix-cache
 * nodes, leases). A block with refcount > 1 is shared and must never be written: a writer
 * calls block_pool_make_writable first, which copies the block (every layer) when shared.
 * The pool is owned by the engine thread; nothing here is thread-safe.
 * The order of ids handed out is deterministic, but no result may depend on it.  It
 * favours runs: a block follows its predecessor in the caller's table when that id is
 * free, else the lowest free id is taken, so that a row's blocks tend to be one run of
 * the layer-major KV store (decode attention reads runs much faster than scattered
 * blocks). */
#ifndef HEARTH_KV_BLOCK_POOL_H
#define HEARTH_KV_BLOCK_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kv/kv_store.h"

struct block_pool {
    struct kv_store *kv;  /* not owned; must outlive the pool */
    int capacity;         /* kv->n_blocks */
    int n_free;
    int n_words;
    int low_word;         /* no free block lies in a word below this one */
    int32_t *refcount;    /* [capacity]; 0 = free */
    uint64_t *free_bits;  /* [n_words]; bit id % 64 of word id / 64 set = free */
};

/* Every block of kv starts free. Allocates the pool's bookkeeping (nothing after this). */
enum hr_status block_pool_init(struct block_pool *pool, struct kv_store *kv, char *err, size_t errlen);
/* No-op on NULL or a zeroed pool. Does not free the kv store. */
void block_pool_free(struct block_pool *pool);

/* Allocates n blocks (refcount 1 each) into out[0..n): all or nothing.  after: the id
 * that out[0] follows in the caller's block table, or -1 (only a preference).
 * HR_ERR_FULL (nothing changed) when fewer than n are free; HR_ERR_INVALID when n < 0. */
enum hr_status block_pool_alloc(struct block_pool *pool, int after, int *out, int n, char *err, size_t errlen);

/* One more reference to an allocated block. Retaining a free block is a bug (assert). */
void block_pool_retain(struct block_pool *pool, int id);
/* Drops one reference; the block is free again at zero. A double release is a bug (assert). */
void block_pool_release(struct block_pool *pool, int id);
/* Releases each of ids[0..n) once. */
void block_pool_release_n(struct block_pool *pool, const int *ids, int n);

int block_pool_refcount(const struct block_pool *pool, int id); /* 0 when free */
int block_pool_n_free(const struct block_pool *pool);
int block_pool_capacity(const struct block_pool *pool);

/* Copy-on-write. When *id is shared (refcount > 1): allocates a fresh block, copies every layer
 * of *id into it, releases the caller's reference to the old block and stores the new id in *id.
 * Otherwise does nothing. HR_ERR_FULL (nothing changed) when no block is free. */
enum hr_status block_pool_make_writable(struct block_pool *pool, int *id, char *err, size_t errlen);

/* Copies all layers of an allocated block to dst [kv->block_bytes] (preemption, cache tiers). */
void block_pool_export(const struct block_pool *pool, int id, void *dst);
/* Overwrites all layers of a block from src [kv->block_bytes]; the block must be writable
 * (refcount exactly 1: importing into a shared block is a bug, assert). */
void block_pool_import(struct block_pool *pool, int id, const void *src);

#endif
