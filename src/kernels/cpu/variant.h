/* One CPU kernel variant (an ISA level, and for avx512bf16 a compute precision):
 * the innermost routines whose operation sequence defines every result.  Each
 * (dtype, variant) pair has exactly one accumulation routine: gemm tiles of any shape
 * compute every element with the same sequence of operations as a single dot
 * product of the same length. */
#ifndef HEARTH_KERNELS_CPU_VARIANT_H
#define HEARTH_KERNELS_CPU_VARIANT_H

#include <stddef.h>
#include <stdint.h>

/* y[i * ldy + j] = sum_k x[i * ldx + k] * w[j * ldw + k] for i < m, j < n. */
typedef void (*cpu_gemm_f32_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w, int64_t ldw,
                                int m, int n, int k);
typedef void (*cpu_gemm_u16_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w,
                                int64_t ldw, int m, int n, int k);
/* Both operands bf16 (compute-bf16 variants): y = sum_k x[i, k] * w[j, k]. */
typedef void (*cpu_gemm_bb_fn)(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w,
                               int64_t ldw, int m, int n, int k);

struct cpu_variant {
    const char *name;           /* "avx512bf16", "avx512", "avx2", "scalar" */
    const char *isa;            /* the instruction set: the f32-compute variant of the same ISA */
    cpu_gemm_f32_fn gemm_f32;
    cpu_gemm_u16_fn gemm_bf16;
    cpu_gemm_u16_fn gemm_f16;
    /* Non-NULL in compute-bf16 variants: matmuls with bf16 weights first round the
     * activations to bf16 (to_bf16), then use this routine. */
    cpu_gemm_bb_fn gemm_bb;
    void (*to_bf16)(uint16_t *dst, const float *src, int64_t n);
    /* out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u, with the variant's exp. */
    void (*swiglu)(float *out, const float *g, const float *u, int64_t n);
    /* One query row, one tile of attention (online softmax):
     *   s[j] *= scale for j < n;  mn = max(*m, max s);  c = exp(*m - mn);
     *   *l = *l * c + tree_sum(exp(s - mn));  acc = acc * c + sum_j p[j] * v[j] (j in order);
     *   *m = mn.
     * v: [n, hd] f32 (the tile's V, widened); acc: [hd].  n <= CPU_ATTN_TILE. */
    void (*attn_update)(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd);
    /* attn_update of rows consecutive rows (m[r], l[r], acc + r * hd, s + r * CPU_ATTN_TILE,
     * n[r]) sharing one V tile: the bits of attn_update row by row.  NULL: row by row. */
    void (*attn_update_rows)(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                             const float *v, int hd);
    /* attn_update_rows with the tile's V rows in bf16 where they lie (v[j]: position
     * j's row): the bits of widening them first.  As it reads a row it prefetches the
     * one `ahead` bytes further on (the next tile's; 0: none).  NULL: widen first. */
    void (*attn_update_rows_bf16)(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                                  const uint16_t *const *v, int hd, ptrdiff_t ahead);
    /* gemm_bf16 and gemm_bb for attention scores: the same bits, prefetching the rows
     * of w `ahead` bytes further on as they read them (the next tile's K).  NULL: the
     * plain routines. */
    void (*scores_bf16)(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                        int n, int k, ptrdiff_t ahead);
    void (*scores_bb)(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                      int n, int k, ptrdiff_t ahead);
    /* dst[i] = src[i] widened from bf16 (exact: any implementation gives these bits). */
    void (*widen_bf16)(float *dst, const uint16_t *src, int64_t n);
    /* y[i] = exp(x[i]) with the variant's exp (tests measure it). */
    void (*exp)(float *y, const float *x, int64_t n);
    /* Elementwise routines whose bits every implementation shares (each element one
     * fixed sequence of IEEE operations); vectors only save time.  NULL: plain C
     * (cpu.h's cpu_norm_scale, cpu_add_f32, cpu_rope_head, cpu_store_bf16). */
    void (*norm_scale)(float *y, const float *x, const float *w, float s, int64_t n);
    void (*add)(float *y, const float *x, int64_t n); /* y[i] = y[i] + x[i] */
    void (*rope)(float *x, const float *cs, int hd);
    void (*store_bf16)(uint16_t *dst, const float *src, int64_t n);
};

/* Positions per attention tile: a constant of the algorithm, never of the batch. */
#define CPU_ATTN_TILE 16

extern const struct cpu_variant cpu_variant_scalar;
extern const struct cpu_variant cpu_variant_avx2;
extern const struct cpu_variant cpu_variant_avx512;
extern const struct cpu_variant cpu_variant_avx512bf16;

#endif
