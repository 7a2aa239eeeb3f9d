/* One CPU kernel variant (an ISA level): the innermost routines whose reduction
 * order defines every result.  Each (dtype, variant) pair has exactly one
 * accumulation routine: gemm tiles of any shape compute every element with the
 * same sequence of operations as a single dot product of the same length. */
#ifndef HEARTH_KERNELS_CPU_VARIANT_H
#define HEARTH_KERNELS_CPU_VARIANT_H

#include <stdint.h>

/* y[i * ldy + j] = sum_k x[i * ldx + k] * w[j * ldw + k] for i < m, j < n. */
typedef void (*cpu_gemm_f32_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w, int64_t ldw,
                                int m, int n, int k);
typedef void (*cpu_gemm_u16_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w,
                                int64_t ldw, int m, int n, int k);

struct cpu_variant {
    const char *name;          /* "avx512", "avx2", "scalar" */
    cpu_gemm_f32_fn gemm_f32;
    cpu_gemm_u16_fn gemm_bf16;
    cpu_gemm_u16_fn gemm_f16;
};

extern const struct cpu_variant cpu_variant_scalar;
extern const struct cpu_variant cpu_variant_avx2;
extern const struct cpu_variant cpu_variant_avx512;

#endif
