/* Layer-complete paged KV storage: one slab allocated at start-up, cut into blocks of
 * block_size tokens; one block id addresses the K and V of every layer.
 * The slab is layer-major: each layer has a region of n_blocks slices, and a block's
 * slice of a layer holds K then V, each [n_kv_heads, block_size, head_dim].  A row
 * whose blocks have consecutive ids (what the block pool prefers to hand out) thus
 * keeps each layer's K and V in one run of memory, which decode attention reads at
 * a much higher rate than slices scattered a whole block apart. */
#ifndef HEARTH_KV_KV_STORE_H
#define HEARTH_KV_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Tokens per block: the one definition of the range. */
#define KV_BLOCK_SIZE_MIN 1
#define KV_BLOCK_SIZE_MAX 1024

enum kv_dtype {
    KV_DTYPE_BF16,
    KV_DTYPE_F32,
};

struct kv_store {
    enum kv_dtype dtype;
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size;           /* tokens per block */
    int n_blocks;
    size_t elem_size;         /* 2 (bf16) or 4 (f32) */
    size_t head_bytes;        /* one head of K (or V) in one block: block_size * head_dim * elem */
    size_t layer_bytes;       /* K + V of one layer in one block: one slice */
    size_t block_bytes;       /* all layers of one block: n_layers slices */
    /* [n_layers, n_blocks, 2, n_kv_heads, block_size, head_dim]: backend memory, allocated
     * by the backend (kv_alloc); only the backend's own code may dereference it. */
    uint8_t *slab;
    void *be_slab;            /* the backend's own bookkeeping of the slab (its mapping) */
};

const char *kv_dtype_name(enum kv_dtype dt);
enum hr_status kv_dtype_parse(const char *s, enum kv_dtype *out, char *err, size_t errlen);

/* The geometry of a store of n_layers layers of n_kv_heads heads of head_dim, sized
 * from a byte budget: as many whole blocks as fit (at least 1).  Allocates nothing:
 * the backend allocates the slab (its kv_alloc op). */
enum hr_status kv_store_layout(struct kv_store *kv, int n_layers, int n_kv_heads, int head_dim, enum kv_dtype dtype,
                               int block_size, size_t budget_bytes, char *err, size_t errlen);

/* Bytes of K+V of all layers for one token. */
size_t kv_store_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, enum kv_dtype dtype);

/* Bytes of the whole slab. */
static inline size_t kv_store_slab_bytes(const struct kv_store *kv)
{
    return (size_t)kv->n_blocks * kv->block_bytes;
}

/* K (kv = 0) or V (kv = 1) of one head of one layer in one block:
 * [block_size, head_dim] elements of the store's dtype. */
static inline void *kv_store_head(const struct kv_store *kv, int block, int layer, int kvsel, int head)
{
    return kv->slab + ((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * kv->layer_bytes +
           ((size_t)kvsel * (size_t)kv->n_kv_heads + (size_t)head) * kv->head_bytes;
}

/* One layer's slice of a block: K then V [2, n_kv_heads, block_size, head_dim]. */
static inline void *kv_store_slice(const struct kv_store *kv, int block, int layer)
{
    return kv_store_head(kv, block, layer, 0, 0);
}

/* Host-memory helpers for a backend whose slab the CPU can address. */
/* Copies every layer of block src to block dst (copy-on-write). */
void kv_store_copy_block(struct kv_store *kv, int dst, int src);
/* Every layer of a block to or from dst/src [block_bytes] (layer after layer). */
void kv_store_export_block(const struct kv_store *kv, int id, void *dst);
void kv_store_import_block(struct kv_store *kv, int id, const void *src);

#endif
