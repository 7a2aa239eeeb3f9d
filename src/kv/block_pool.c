/* Refcounted KV blocks with copy-on-write over the layer-complete KV store. */
#include "kv/block_pool.h"

#include <stdlib.h>
#include <string.h>

enum hr_status block_pool_init(struct block_pool *pool, struct kv_store *kv, char *err, size_t errlen)
{
    memset(pool, 0, sizeof *pool);
    if (!kv || !kv->slab || kv->n_blocks < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "block pool: the KV store is not initialised");
    size_t n = (size_t)kv->n_blocks;
    pool->refcount = calloc(n, sizeof *pool->refcount);
    pool->free_ids = malloc(n * sizeof *pool->free_ids);
    if (!pool->refcount || !pool->free_ids) {
        block_pool_free(pool);
        return hr_err(err, errlen, HR_ERR_NOMEM, "block pool: cannot allocate bookkeeping for %d blocks",
                      kv->n_blocks);
    }
    pool->kv = kv;
    pool->capacity = kv->n_blocks;
    /* Stack order such that the first allocations hand out 0, 1, 2, ... */
    for (int i = 0; i < pool->capacity; i++)
        pool->free_ids[i] = pool->capacity - 1 - i;
    pool->n_free = pool->capacity;
    return HR_OK;
}

void block_pool_free(struct block_pool *pool)
{
    if (!pool)
        return;
    free(pool->refcount);
    free(pool->free_ids);
    memset(pool, 0, sizeof *pool);
}

static void check_id(const struct block_pool *pool, int id)
{
    HR_ASSERT(id >= 0 && id < pool->capacity);
}

enum hr_status block_pool_alloc(struct block_pool *pool, int *out, int n, char *err, size_t errlen)
{
    if (n < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "block pool: cannot allocate %d blocks", n);
    if (n > pool->n_free)
        return hr_err(err, errlen, HR_ERR_FULL, "KV pool: %d blocks needed, %d of %d free", n,
                      pool->n_free, pool->capacity);
    for (int i = 0; i < n; i++) {
        int id = pool->free_ids[--pool->n_free];
        HR_ASSERT(pool->refcount[id] == 0);
        pool->refcount[id] = 1;
        out[i] = id;
    }
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
        pool->free_ids[pool->n_free++] = id;
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

enum hr_status block_pool_make_writable(struct block_pool *pool, int *id, char *err, size_t errlen)
{
    int old = *id;
    check_id(pool, old);
    HR_ASSERT(pool->refcount[old] > 0);
    if (pool->refcount[old] == 1)
        return HR_OK;
    int fresh = -1;
    enum hr_status st = block_pool_alloc(pool, &fresh, 1, err, errlen);
    if (st != HR_OK)
        return st;
    kv_store_copy_block(pool->kv, fresh, old);
    /* Shared, so the old block stays alive for its other holders. */
    block_pool_release(pool, old);
    *id = fresh;
    return HR_OK;
}

void block_pool_export(const struct block_pool *pool, int id, void *dst)
{
    check_id(pool, id);
    HR_ASSERT(pool->refcount[id] > 0);
    memcpy(dst, kv_store_block(pool->kv, id), pool->kv->block_bytes);
}

void block_pool_import(struct block_pool *pool, int id, const void *src)
{
    check_id(pool, id);
    HR_ASSERT(pool->refcount[id] == 1);
    memcpy(kv_store_block(pool->kv, id), src, pool->kv->block_bytes);
}
