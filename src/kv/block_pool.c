/* Refcounted KV blocks with copy-on-write over the layer-complete KV store; a bitmap of
 * free ids so that a block can be handed out after its predecessor. */
#include "kv/block_pool.h"

#include <stdlib.h>
#include <string.h>

enum hr_status block_pool_init(struct block_pool *pool, int n_blocks, char *err, size_t errlen)
{
    memset(pool, 0, sizeof *pool);
    if (n_blocks < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "block pool: %d blocks (at least 1)", n_blocks);
    size_t n = (size_t)n_blocks;
    pool->n_words = (int)((n + 63) / 64);
    pool->refcount = calloc(n, sizeof *pool->refcount);
    pool->free_bits = malloc((size_t)pool->n_words * sizeof *pool->free_bits);
    if (!pool->refcount || !pool->free_bits) {
        block_pool_free(pool);
        return hr_err(err, errlen, HR_ERR_NOMEM, "block pool: cannot allocate bookkeeping for %d blocks",
                      n_blocks);
    }
    pool->capacity = n_blocks;
    for (int w = 0; w < pool->n_words; w++) {
        int left = pool->capacity - w * 64;
        pool->free_bits[w] = left >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << left) - 1;
    }
    pool->n_free = pool->capacity;
    return HR_OK;
}

void block_pool_free(struct block_pool *pool)
{
    if (!pool)
        return;
    free(pool->refcount);
    free(pool->free_bits);
    memset(pool, 0, sizeof *pool);
}

static void check_id(const struct block_pool *pool, int id)
{
    HR_ASSERT(id >= 0 && id < pool->capacity);
}

static int is_free(const struct block_pool *pool, int id)
{
    return (pool->free_bits[id / 64] >> (id % 64)) & 1;
}

/* One block, n_free > 0: after + 1 when free, else the lowest free id. */
static int alloc_one(struct block_pool *pool, int after)
{
    int id = after + 1;
    if (after < 0 || id >= pool->capacity || !is_free(pool, id)) {
        int w = pool->low_word;
        while (!pool->free_bits[w])
            w++;
        pool->low_word = w;
        id = w * 64 + __builtin_ctzll(pool->free_bits[w]);
    }
    HR_ASSERT(pool->refcount[id] == 0);
    pool->free_bits[id / 64] &= ~((uint64_t)1 << (id % 64));
    pool->refcount[id] = 1;
    pool->n_free--;
    return id;
}

enum hr_status block_pool_alloc(struct block_pool *pool, int after, int *out, int n, char *err, size_t errlen)
{
    if (n < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "block pool: cannot allocate %d blocks", n);
    if (n > pool->n_free)
        return hr_err(err, errlen, HR_ERR_FULL, "KV pool: %d blocks needed, %d of %d free", n,
                      pool->n_free, pool->capacity);
    for (int i = 0; i < n; i++)
        after = out[i] = alloc_one(pool, after);
    return HR_OK;
}

void block_pool_retain(struct block_pool *pool, int id)
{
    check_id(pool, id);
    HR_ASSERT(pool->refcount[id] > 0);        /* retain of a free block */
    HR_ASSERT(pool->refcount[id] < INT32_MAX);
    pool->refcount[id]++;
}

void block_pool_release(struct block_pool *pool, int id)
{
    check_id(pool, id);
    HR_ASSERT(pool->refcount[id] > 0);        /* double release */
    if (--pool->refcount[id] == 0) {
        HR_ASSERT(pool->n_free < pool->capacity);
        pool->free_bits[id / 64] |= (uint64_t)1 << (id % 64);
        if (id / 64 < pool->low_word)
            pool->low_word = id / 64;
        pool->n_free++;
    }
}

void block_pool_release_n(struct block_pool *pool, const int *ids, int n)
{
    for (int i = 0; i < n; i++)
        block_pool_release(pool, ids[i]);
}

int block_pool_refcount(const struct block_pool *pool, int id)
{
    check_id(pool, id);
    return pool->refcount[id];
}

int block_pool_n_free(const struct block_pool *pool) { return pool->n_free; }

int block_pool_capacity(const struct block_pool *pool) { return pool->capacity; }

enum hr_status block_pool_make_writable(struct block_pool *pool, int *id, int *copy_from, char *err, size_t errlen)
{
    int old = *id;
    check_id(pool, old);
    HR_ASSERT(pool->refcount[old] > 0);
    *copy_from = -1;
    if (pool->refcount[old] == 1)
        return HR_OK;
    int fresh = -1;
    enum hr_status st = block_pool_alloc(pool, -1, &fresh, 1, err, errlen);
    if (st != HR_OK)
        return st;
    /* Shared, so the old block stays alive for its other holders.  Its contents do
     * not change before the step's copies run (they run before any kernel writes),
     * even if every holder lets go of it in the meantime. */
    block_pool_release(pool, old);
    *id = fresh;
    *copy_from = old;
    return HR_OK;
}
