/* Internals of the CPU backend shared by its files. */
#ifndef HEARTH_KERNELS_CPU_CPU_H
#define HEARTH_KERNELS_CPU_CPU_H

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/variant.h"

struct cpu_backend {
    struct threadpool pool;
    const struct cpu_variant *v;
};

enum hr_status cpu_variant_pick(const char *want, const struct cpu_variant **out, char *err, size_t errlen);

/* One dot product with the variant's accumulation routine for w's dtype. */
static inline float cpu_dot_f32(const struct cpu_variant *v, const float *a, const float *b, int n)
{
    float y;
    v->gemm_f32(&y, 1, a, n, b, n, 1, 1, n);
    return y;
}

void cpu_attention(struct backend *be, float *out, const float *q, const struct batch *b, const struct kv_store *kv,
                   int layer, int n_heads, float scale);
void cpu_kv_write(struct backend *be, struct kv_store *kv, int layer, const struct batch *b, const float *k,
                  const float *v);

#endif
