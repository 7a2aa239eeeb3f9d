/* f32 <-> bf16 / f16 conversions in integer arithmetic (see dtype.h). */
#include "model/dtype.h"

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* keep NaN a NaN even when the payload is low */
    /* Adding 0x7fff (+1 when the kept lsb is odd) carries exactly when the dropped half
     * is above the midpoint, or at it with an odd lsb; a carry into the exponent is the
     * correct round-up, up to inf. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t dtype_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t mant = u & 0x7fffffu;
    if (exp == 0xff) {
        if (mant)
            return (uint16_t)(sign | 0x7e00u | (mant >> 13));
        return (uint16_t)(sign | 0x7c00u);
    }
    int e = (int)exp - 127;
    if (e > 15)
        return (uint16_t)(sign | 0x7c00u);
    if (e >= -14) {
        uint32_t base = ((uint32_t)(e + 15) << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (base & 1u)))
            base++; /* a carry out of the mantissa bumps the exponent, up to inf */
        return (uint16_t)(sign | base);
    }
    /* Below the normal range: value = full * 2^(e-23), in units of 2^-24 that is
     * full >> s with s = -(e + 1) >= 14.  Shifts past 24 leave less than half a unit. */
    int s = -(e + 1);
    if (exp == 0 || s > 24)
        return sign;
    uint32_t full = mant | 0x800000u;
    uint32_t q = full >> s;
    uint32_t rem = full & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* may reach 0x400: the smallest normal, encoded correctly as is */
    return (uint16_t)(sign | q);
}

void dtype_bf16_to_f32_n(float *dst, const void *src, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = dtype_bf16_to_f32(h);
    }
}

void dtype_f16_to_f32_n(float *dst, const void *src, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = dtype_f16_to_f32(h);
    }
}

void dtype_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dtype_f32_to_bf16(src[i]);
}

void dtype_f32_to_f16_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = dtype_f32_to_f16(src[i]);
}
