/* The routines behind each struct cpu_variant table (variant.c), defined in the
 * files built with that variant's instruction set. */
#ifndef HEARTH_KERNELS_CPU_VARIANT_IMPL_H
#define HEARTH_KERNELS_CPU_VARIANT_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* gemm_scalar.c, vmath_scalar.c */
void cpu_scalar_gemm_f32(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w, int64_t ldw, int m,
                         int n, int k);
void cpu_scalar_gemm_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                          int m, int n, int k);
void cpu_scalar_gemm_f16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                         int m, int n, int k);
void cpu_scalar_exp(float *y, const float *x, int64_t n);
void cpu_scalar_widen_bf16(float *dst, const uint16_t *src, int64_t n);
void cpu_scalar_swiglu(float *out, const float *g, const float *u, int64_t n);
void cpu_scalar_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd);

/* gemm_avx2.c, vmath_avx2.c */
void cpu_avx2_gemm_f32(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w, int64_t ldw, int m,
                       int n, int k);
void cpu_avx2_gemm_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                        int n, int k);
void cpu_avx2_gemm_f16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                       int n, int k);
void cpu_avx2_exp(float *y, const float *x, int64_t n);
void cpu_avx2_widen_bf16(float *dst, const uint16_t *src, int64_t n);
void cpu_avx2_swiglu(float *out, const float *g, const float *u, int64_t n);
void cpu_avx2_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd);

/* gemm_avx512.c, vmath_avx512.c */
void cpu_avx512_gemm_f32(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w, int64_t ldw, int m,
                         int n, int k);
void cpu_avx512_gemm_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                          int m, int n, int k);
void cpu_avx512_gemm_f16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                         int m, int n, int k);
void cpu_avx512_exp(float *y, const float *x, int64_t n);
void cpu_avx512_widen_bf16(float *dst, const uint16_t *src, int64_t n);
void cpu_avx512_swiglu(float *out, const float *g, const float *u, int64_t n);
void cpu_avx512_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd);
void cpu_avx512_attn_update_rows(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                                 const float *v, int hd);
void cpu_avx512_norm_scale(float *y, const float *x, const float *w, float s, int64_t n);
void cpu_avx512_add(float *y, const float *x, int64_t n);
void cpu_avx512_rope(float *x, const float *cs, int hd);
void cpu_avx512_store_bf16(uint16_t *dst, const float *src, int64_t n);
void cpu_avx512_attn_update_rows_bf16(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                                      const uint16_t *const *v, int hd, ptrdiff_t ahead);
void cpu_avx512_scores_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                            int n, int k, ptrdiff_t ahead);

/* gemm_bf16dot_avx512.c (AVX512_BF16) */
void cpu_avx512bf16_gemm_bb(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                            int m, int n, int k);
void cpu_avx512bf16_scores_bb(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w,
                              int64_t ldw, int m, int n, int k, ptrdiff_t ahead);
void cpu_avx512bf16_to_bf16(uint16_t *dst, const float *src, int64_t n);

#endif
