/* Internals of the CPU backend shared by its files. */
#ifndef HEARTH_KERNELS_CPU_CPU_H
#define HEARTH_KERNELS_CPU_CPU_H

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/variant.h"
#include "model/dtype.h"

/* Attention scratch per thread: query rows of one task (a block of tokens times the
 * query heads of one KV head) and one tile of K scores and V rows. */
#define CPU_ATTN_MAX_ROWS 64
#define CPU_ATTN_MAX_HEAD_DIM 512

struct cpu_attn_scratch {
    float q[CPU_ATTN_MAX_ROWS * CPU_ATTN_MAX_HEAD_DIM];   /* [rows, head_dim] */
    uint16_t qb[CPU_ATTN_MAX_ROWS * CPU_ATTN_MAX_HEAD_DIM]; /* [rows, head_dim] q rounded to bf16 (compute bf16) */
    float acc[CPU_ATTN_MAX_ROWS * CPU_ATTN_MAX_HEAD_DIM]; /* [rows, head_dim] */
    float s[CPU_ATTN_MAX_ROWS * CPU_ATTN_TILE];           /* [rows, tile] */
    float m[CPU_ATTN_MAX_ROWS];                           /* [rows] running max */
    float l[CPU_ATTN_MAX_ROWS];                           /* [rows] running sum */
    float k[CPU_ATTN_TILE * CPU_ATTN_MAX_HEAD_DIM];       /* [tile, head_dim] */
    float v[CPU_ATTN_TILE * CPU_ATTN_MAX_HEAD_DIM];       /* [tile, head_dim] */
    int n[CPU_ATTN_MAX_ROWS];                             /* [rows] positions of the tile each row takes */
};

struct cpu_backend {
    struct threadpool pool;
    const struct cpu_variant *v;
    struct cpu_attn_scratch *attn; /* [n_threads] */
    uint16_t *xb;                  /* [xb_cap] activations rounded to bf16 (compute-bf16 variants) */
    size_t xb_cap;
    /* Sized by reserve; the step's state from begin_step. */
    const struct model_config *cfg;
    int max_tok;
    float *cos_sin;                /* [max_tok, head_dim / 2, 2] of the step's positions */
    const struct batch *b;         /* the step's batch (the caller's: the CPU reads it in place) */
};

enum hr_status cpu_variant_pick(const char *want, const struct cpu_variant **out, char *err, size_t errlen);

/* One dot product with the variant's accumulation routine for f32. */
static inline float cpu_dot_f32(const struct cpu_variant *v, const float *a, const float *b, int n)
{
    float y;
    v->gemm_f32(&y, 1, a, n, b, n, 1, 1, n);
    return y;
}

/* y[i] = w[i] * (x[i] * s): RMSNorm's scaling, the product with s rounded first. */
static inline void cpu_norm_scale(const struct cpu_variant *v, float *y, const float *x, const float *w, float s,
                                  int n)
{
    if (v->norm_scale) {
        v->norm_scale(y, x, w, s, n);
        return;
    }
    for (int i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * s);
}

/* y[i] = y[i] + x[i]. */
static inline void cpu_add_f32(const struct cpu_variant *v, float *y, const float *x, int64_t n)
{
    if (v->add) {
        v->add(y, x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] + x[i];
}

/* RoPE on one head (halves rotated): x[i], x[i + hd/2] by the angle whose cosine and
 * sine are cs[2i], cs[2i + 1]. */
static inline void cpu_rope_head(const struct cpu_variant *v, float *x, const float *cs, int hd)
{
    if (v->rope) {
        v->rope(x, cs, hd);
        return;
    }
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half], co = cs[2 * i], si = cs[2 * i + 1];
        x[i] = x1 * co - x2 * si;
        x[i + half] = x2 * co + x1 * si;
    }
}

/* dst[i] = dtype_f32_to_bf16(src[i]): round to nearest even, NaN kept a NaN. */
static inline void cpu_store_bf16(const struct cpu_variant *v, uint16_t *dst, const float *src, int64_t n)
{
    if (v->store_bf16)
        v->store_bf16(dst, src, n);
    else
        dtype_f32_to_bf16_n(dst, src, (size_t)n);
}

void cpu_attention(struct backend *be, float *out, const float *q, const struct batch *b, const struct kv_store *kv,
                   int layer, int n_heads, float scale);
void cpu_attn_prep(struct backend *be, float *q, float *k, const float *v, const float *q_norm, const float *k_norm,
                   float eps, const float *cos_sin, int n_heads, struct kv_store *kv, int layer, const struct batch *b);

/* Matmuls the MoE block launches (cpu_backend.c), exposed for its file and the tests:
 * y = x · w^T in f32 whatever the compute mode (the router), and the grouped launch:
 * group g takes rows [row0[g], row0[g + 1]) of x[rows, k] and writes the same rows of
 * y[rows, n] with its own matrix: y = x · w[g]^T, or with up non-NULL
 * y = silu(x · w[g]^T) * (x · up[g]^T). */
void cpu_matmul_f32(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
void cpu_matmul_grouped(struct backend *be, float *y, const float *x, int n_groups, const int *row0,
                        const struct weights_mat *const *w, const struct weights_mat *const *up);

/* The MoE block (moe.c): the backend's moe and moe_work_bytes ops. */
size_t cpu_moe_work_bytes(struct backend *be, int n_tok);
void cpu_moe(struct backend *be, float *h, const float *xn, int n_tok, const struct weights_layer *L, void *work,
             int32_t *trace);

#endif
