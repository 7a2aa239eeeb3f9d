/* Refcounted KV block ids: allocation, sharing and copy-on-write bookkeeping.  The
 * blocks' contents live in the backend's KV store; the pool never touches them.
 *
 * A block's refcount counts the holders of its id (sequences' block tables, prefix-cache
 * nodes, leases). A block with refcount > 1 is shared and must never be written: a writer
 * calls block_pool_make_writable first, which swaps a shared block for a fresh one and
 * names the copy (every layer) the backend must make before the step's kernels run.
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

struct block_pool {
    int capacity;         /* blocks of the KV store */
    int n_free;
    int n_words;
    int low_word;         /* no free block lies in a word below this one */
    int32_t *refcount;    /* [capacity]; 0 = free */
    uint64_t *free_bits;  /* [n_words]; bit id % 64 of word id / 64 set = free */
};

/* n_blocks ids, every one free. Allocates the pool's bookkeeping (nothing after this). */
enum hr_status block_pool_init(struct block_pool *pool, int n_blocks, char *err, size_t errlen);
/* No-op on NULL or a zeroed pool. */
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

/* Copy-on-write. When *id is shared (refcount > 1): allocates a fresh block, releases the
 * caller's reference to the old one, stores the new id in *id and the old one in
 * *copy_from: the caller has the backend copy every layer of *copy_from into *id before
 * the next kernel runs (the step's block copies).  Otherwise *copy_from = -1 and nothing
 * changes. HR_ERR_FULL (nothing changed) when no block is free. */
enum hr_status block_pool_make_writable(struct block_pool *pool, int *id, int *copy_from, char *err, size_t errlen);

#endif
