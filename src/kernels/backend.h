/* The backend interface: every kernel the model code calls, as a table of function
 * pointers, so that a CUDA backend can join without touching src/model/.
 *
 * Determinism contract (DESIGN.md "Determinism"): every output element is computed
 * by one thread with a reduction order that depends only on the reduced length,
 * never on the number of rows, the split over threads, or where KV blocks lie. */
#ifndef HEARTH_KERNELS_BACKEND_H
#define HEARTH_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "kv/batch.h"
#include "kv/kv_store.h"
#include "model/weights.h"

struct backend;

struct backend_ops {
    /* Sizes the backend's own scratch for matmuls of up to max_rows rows and max_k
     * inputs (start-up: the step path then allocates nothing). */
    enum hr_status (*reserve)(struct backend *be, int max_rows, int max_k, char *err, size_t errlen);
    /* y[m, n] = x[m, k] · w[n, k]^T; w in its stored dtype. */
    void (*matmul)(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
    /* matmul in f32 whatever the compute mode: for the MoE router, whose top-k is a
     * discrete choice that bf16-rounded activations would move. */
    void (*matmul_f32)(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
    /* y[m, n] += x[m, k] · w[n, k]^T (the residual add: each element is the plain
     * matmul's value added to y). */
    void (*matmul_add)(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
    /* ys[i][m, n_i] = x[m, k] · ws[i]^T for i < n_mats: several matrices that read the
     * same x (q/k/v) in one launch. */
    void (*matmul_multi)(struct backend *be, int n_mats, float *const *ys, const float *x, int m,
                         const struct weights_mat *const *ws);
    /* out[m, n] = silu(x · gate^T) * (x · up^T): the SwiGLU MLP's first half. */
    void (*matmul_swiglu)(struct backend *be, float *out, const float *x, int m, const struct weights_mat *gate,
                          const struct weights_mat *up);
    /* Grouped matmul (MoE experts, in one launch): group g takes rows [row0[g],
     * row0[g + 1]) of x[rows, k] and writes the same rows of y[rows, n] with its own
     * matrix: y = x · w[g]^T, or with up non-NULL y = silu(x · w[g]^T) * (x · up[g]^T).
     * Every group's matrices have k columns and the same number of rows n. */
    void (*matmul_grouped)(struct backend *be, float *y, const float *x, int n_groups, const int *row0,
                           const struct weights_mat *const *w, const struct weights_mat *const *up);
    /* y[r] = x[r] / rms(x[r]) * w, for rows r < rows of length dim (y may be x). */
    void (*rmsnorm)(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps);
    /* Rotates x[n_tok, n_heads, head_dim] in place by the half-split rotation;
     * cos_sin[n_tok, head_dim / 2, 2]. */
    void (*rope)(struct backend *be, float *x, int n_tok, int n_heads, int head_dim, const float *cos_sin);
    /* out[n_tok, hidden] = rows tokens[i] of the embedding, widened to f32. */
    void (*embed)(struct backend *be, float *out, const struct weights_mat *emb, const int32_t *tokens, int n_tok);
    /* The attention inputs of one layer, fused (one pass per token): every head row of
     * q[n_tok, n_heads, head_dim] and k[n_tok, n_kv_heads, head_dim] becomes
     * rope(rmsnorm(row) * norm) (q_norm / k_norm, the same operations as rmsnorm then
     * rope), then k and v are stored at the batch's slots as kv_write does. */
    void (*attn_prep)(struct backend *be, float *q, float *k, const float *v, const float *q_norm,
                      const float *k_norm, float eps, const float *cos_sin, int n_heads, struct kv_store *kv,
                      int layer, const struct batch *b);
    /* Stores k, v [n_tok, n_kv_heads, head_dim] of one layer at the batch's slots. */
    void (*kv_write)(struct backend *be, struct kv_store *kv, int layer, const struct batch *b, const float *k,
                     const float *v);
    /* out[n_tok, n_heads, head_dim]: causal attention of q[n_tok, n_heads, head_dim]
     * over each row's KV in the store (positions 0..pos of the token's own row). */
    void (*attention)(struct backend *be, float *out, const float *q, const struct batch *b,
                      const struct kv_store *kv, int layer, int n_heads, float scale);
    /* out[i] = silu(g[i]) * u[i]. */
    void (*silu_mul)(struct backend *be, float *out, const float *g, const float *u, int64_t n);
    /* y[i] += x[i]. */
    void (*add)(struct backend *be, float *y, const float *x, int64_t n);
    void (*free)(struct backend *be);
};

struct backend {
    const struct backend_ops *ops;
    char name[32];            /* e.g. "cpu-avx512": part of the prefix-cache namespace */
    bool bf16_compute;        /* activations are rounded to bf16 before matmuls (avx512bf16) */
    int n_threads;
    void *impl;
};

/* The CPU backend.  variant: NULL or "" picks the best the CPU supports (cpuid);
 * "avx512", "avx2" or "scalar" forces one (an error if unsupported); "avx512bf16" is
 * AVX-512 with bf16 compute (matmuls over bf16 weights round the activations to
 * bf16 and use the bf16 dot-product instructions).  The environment variable
 * HEARTH_KERNEL overrides a NULL/"" variant. */
enum hr_status backend_cpu_init(struct backend *be, int n_threads, const char *variant, char *err, size_t errlen);
/* Names of the variants this CPU supports, best first; returns how many. */
int backend_cpu_variants(const char **names, int cap);

void backend_free(struct backend *be);

#endif
