/* Layer-complete paged KV storage. */
#include "kv/kv_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KV_STORE_TOUCH_THREADS 16

struct kv_store_touch_part {
    unsigned char *p;
    size_t n;
};

static void *kv_store_touch_run(void *arg)
{
    struct kv_store_touch_part *t = arg;
    memset(t->p, 0, t->n);
    return NULL;
}

/* Touches (zeroes) the slab so that start-up, not the first steps, pays for the
 * pages: one thread per core, each over its own run of 2 MiB, since the page faults
 * of a large pool cost seconds on one thread.  Falls back to this thread alone. */
static void kv_store_touch(unsigned char *slab, size_t bytes)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores < 1 ? 1 : cores > KV_STORE_TOUCH_THREADS ? KV_STORE_TOUCH_THREADS : (int)cores;
    size_t huge = (size_t)2 << 20, part = (bytes / (size_t)n + huge - 1) / huge * huge;
    pthread_t th[KV_STORE_TOUCH_THREADS];
    struct kv_store_touch_part parts[KV_STORE_TOUCH_THREADS];
    bool started[KV_STORE_TOUCH_THREADS] = {0};
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * part;
        parts[i].p = slab + (off < bytes ? off : bytes);
        parts[i].n = off >= bytes ? 0 : bytes - off < part ? bytes - off : part;
        started[i] = i > 0 && parts[i].n > 0 && pthread_create(&th[i], NULL, kv_store_touch_run, &parts[i]) == 0;
    }
    kv_store_touch_run(&parts[0]);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            kv_store_touch_run(&parts[i]);
    }
}

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

size_t kv_store_bytes_per_token(const struct model_config *cfg, enum kv_dtype dtype)
{
    size_t elem = dtype == KV_DTYPE_F32 ? 4 : 2;
    return (size_t)cfg->n_layers * 2 * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * elem;
}

enum hr_status kv_store_init(struct kv_store *kv, const struct model_config *cfg, enum kv_dtype dtype,
                             int block_size, size_t budget_bytes, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (block_size < 1 || block_size > 1024)
        return hr_err(err, errlen, HR_ERR_INVALID, "block size must be in 1..1024, got %d", block_size);
    kv->dtype = dtype;
    kv->n_layers = cfg->n_layers;
    kv->n_kv_heads = cfg->n_kv_heads;
    kv->head_dim = cfg->head_dim;
    kv->block_size = block_size;
    kv->elem_size = dtype == KV_DTYPE_F32 ? 4 : 2;
    kv->head_bytes = (size_t)block_size * (size_t)cfg->head_dim * kv->elem_size;
    kv->layer_bytes = 2 * (size_t)cfg->n_kv_heads * kv->head_bytes;
    kv->block_bytes = (size_t)cfg->n_layers * kv->layer_bytes;
    size_t n = budget_bytes / kv->block_bytes;
    if (n < 1)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "KV budget of %zu bytes is below one block (%zu bytes)", budget_bytes, kv->block_bytes);
    if (n > (1u << 30))
        n = 1u << 30;
    kv->n_blocks = (int)n;
    /* 2 MiB aligned so that the kernel may back it with huge pages (opt-in on many
     * systems): attention walks slices all over the slab. */
    if (posix_memalign((void **)&kv->slab, (size_t)2 << 20, n * kv->block_bytes) != 0) {
        kv->slab = NULL;
        return hr_err(err, errlen, HR_ERR_NOMEM, "cannot allocate the KV pool (%zu bytes)",
                      n * kv->block_bytes);
    }
#ifdef MADV_HUGEPAGE
    madvise(kv->slab, n * kv->block_bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    kv_store_touch(kv->slab, n * kv->block_bytes);
    return HR_OK;
}

void kv_store_free(struct kv_store *kv)
{
    if (!kv)
        return;
    free(kv->slab);
    kv->slab = NULL;
    kv->n_blocks = 0;
}

void kv_store_copy_block(struct kv_store *kv, int dst, int src)
{
    for (int l = 0; l < kv->n_layers; l++)
        memcpy(kv_store_slice(kv, dst, l), kv_store_slice(kv, src, l), kv->layer_bytes);
}
