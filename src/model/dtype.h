/* Scalar conversions between f32 and the 16-bit float formats of checkpoints
 * (bfloat16 and IEEE binary16).  Plain integer code: no F16C or AVX-512 BF16, so it
 * runs on any x86-64 and gives the same bits everywhere. */
#ifndef HEARTH_MODEL_DTYPE_H
#define HEARTH_MODEL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* bf16 is the top half of an f32: widening is exact. */
static inline float dtype_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; NaN stays NaN (quiet, sign kept); inf stays inf. */
uint16_t dtype_f32_to_bf16(float f);

/* Exact: every binary16 value (subnormals, inf, NaN payload) is an f32 value.
 * Inline because the scalar kernels call it per weight. */
static inline float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13); /* rebias 15 -> 127 */
    } else if (mant == 0) {
        u = sign;
    } else {
        /* subnormal mant * 2^-24: shift the leading one up to the implicit bit 10 */
        int shift = __builtin_clz(mant) - 21;
        mant = (mant << shift) & 0x3ffu;
        u = sign | ((uint32_t)(113 - shift) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; overflow gives inf, tiny values become subnormal
 * or signed zero; NaN stays NaN (quiet, sign and top payload bits kept). */
uint16_t dtype_f32_to_f16(float f);

/* Array forms: dst[i] = convert(src[i]) for i < n.  src may be unaligned. */
void dtype_bf16_to_f32_n(float *dst, const void *src, size_t n);
void dtype_f16_to_f32_n(float *dst, const void *src, size_t n);
void dtype_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void dtype_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);

#endif
