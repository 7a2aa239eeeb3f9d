/* Layer-complete paged KV storage. */
#include "kv/kv_store.h"

#include <stdlib.h>
#include <string.h>

const char *kv_dtype_name(enum kv_dtype dt) { return dt == KV_DTYPE_F32 ? "f32" : "bf16"; }

enum hr_status kv_dtype_parse(const char *s, enum kv_dtype *out, char *err, size_t errlen)
{
    if (!strcmp(s, "bf16")) {
        *out = KV_DTYPE_BF16;
        return HR_OK;
    }
    if (!strcmp(s, "f32")) {
        *out = KV_DTYPE_F32;
        return HR_OK;
    }
    return hr_err(err, errlen, HR_ERR_INVALID, "kv dtype must be bf16 or f32, got '%s'", s);
}

size_t kv_store_bytes_per_token(int n_layers, int n_kv_heads, int head_dim, enum kv_dtype dtype)
{
    size_t elem = dtype == KV_DTYPE_F32 ? 4 : 2;
    return (size_t)n_layers * 2 * (size_t)n_kv_heads * (size_t)head_dim * elem;
}

enum hr_status kv_store_layout(struct kv_store *kv, int n_layers, int n_kv_heads, int head_dim, enum kv_dtype dtype,
                               int block_size, size_t budget_bytes, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (block_size < KV_BLOCK_SIZE_MIN || block_size > KV_BLOCK_SIZE_MAX)
        return hr_err(err, errlen, HR_ERR_INVALID, "block size must be in %d..%d, got %d", KV_BLOCK_SIZE_MIN,
                      KV_BLOCK_SIZE_MAX, block_size);
    if (n_layers < 1 || n_kv_heads < 1 || head_dim < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "KV store: %d layers, %d KV heads, head_dim %d", n_layers,
                      n_kv_heads, head_dim);
    kv->dtype = dtype;
    kv->n_layers = n_layers;
    kv->n_kv_heads = n_kv_heads;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->elem_size = dtype == KV_DTYPE_F32 ? 4 : 2;
    kv->head_bytes = (size_t)block_size * (size_t)head_dim * kv->elem_size;
    kv->layer_bytes = 2 * (size_t)n_kv_heads * kv->head_bytes;
    kv->block_bytes = (size_t)n_layers * kv->layer_bytes;
    size_t n = budget_bytes / kv->block_bytes;
    if (n < 1)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "KV budget of %zu bytes is below one block (%zu bytes)", budget_bytes, kv->block_bytes);
    if (n > (1u << 30))
        n = 1u << 30;
    kv->n_blocks = (int)n;
    return HR_OK;
}

void kv_store_copy_block(struct kv_store *kv, int dst, int src)
{
    for (int l = 0; l < kv->n_layers; l++)
        memcpy(kv_store_slice(kv, dst, l), kv_store_slice(kv, src, l), kv->layer_bytes);
}

void kv_store_export_block(const struct kv_store *kv, int id, void *dst)
{
    for (int l = 0; l < kv->n_layers; l++)
        memcpy((uint8_t *)dst + (size_t)l * kv->layer_bytes, kv_store_slice(kv, id, l), kv->layer_bytes);
}

void kv_store_import_block(struct kv_store *kv, int id, const void *src)
{
    for (int l = 0; l < kv->n_layers; l++)
        memcpy(kv_store_slice(kv, id, l), (const uint8_t *)src + (size_t)l * kv->layer_bytes, kv->layer_bytes);
}
