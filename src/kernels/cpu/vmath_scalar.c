/* Scalar vector math for any x86-64: exp (vmath.h) with separate multiplies and adds
 * (the build forbids contraction, and baseline x86-64 has no FMA), SwiGLU, and the
 * online-softmax update of one attention tile. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/variant.h"
#include "kernels/cpu/variant_impl.h"
#include "kernels/cpu/vmath.h"
#include "model/dtype.h"

static inline float scalar_exp1(float x)
{
    if (x != x)
        return x;
    if (x < CPU_EXP_LO)
        return 0.0f;
    if (x > CPU_EXP_HI)
        return INFINITY;
    float t = x * CPU_EXP_LOG2E;
    float nf = (t + CPU_EXP_ROUND) - CPU_EXP_ROUND;
    float r = x - nf * CPU_EXP_LN2_HI;
    r = r - nf * CPU_EXP_LN2_LO;
    float p = CPU_EXP_C7;
    p = p * r + CPU_EXP_C6;
    p = p * r + CPU_EXP_C5;
    p = p * r + CPU_EXP_C4;
    p = p * r + CPU_EXP_C3;
    p = p * r + CPU_EXP_C2;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t e = (uint32_t)((int32_t)nf + 127) << 23;
    float two_n;
    memcpy(&two_n, &e, sizeof two_n);
    return p * two_n;
}

void cpu_scalar_exp(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = scalar_exp1(x[i]);
}

void cpu_scalar_widen_bf16(float *dst, const uint16_t *src, int64_t n)
{
    dtype_bf16_to_f32_n(dst, src, (size_t)n);
}

void cpu_scalar_swiglu(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = g[i] / (1.0f + scalar_exp1(0.0f - g[i])) * u[i];
}

void cpu_scalar_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd)
{
    float t[CPU_ATTN_TILE], p[CPU_ATTN_TILE], sum[CPU_ATTN_TILE];
    float mt = -INFINITY;
    for (int j = 0; j < CPU_ATTN_TILE; j++) {
        t[j] = j < n ? s[j] * scale : -INFINITY; /* past n: weight exp(-inf) = 0 */
        mt = t[j] > mt ? t[j] : mt;
    }
    float mn = mt > *m ? mt : *m;
    for (int j = 0; j < CPU_ATTN_TILE; j++)
        sum[j] = p[j] = scalar_exp1(t[j] - mn);
    float corr = scalar_exp1(*m - mn);
    /* pairwise tree over the 16 slots: (j, j + w) for w = 8, 4, 2, 1 */
    for (int w = CPU_ATTN_TILE / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            sum[j] = sum[j] + sum[j + w];
    *l = *l * corr + sum[0];
    *m = mn;
    for (int d = 0; d < hd; d++)
        acc[d] = acc[d] * corr;
    for (int j = 0; j < n; j++) {
        const float *vr = v + (int64_t)j * hd;
        for (int d = 0; d < hd; d++)
            acc[d] = acc[d] + p[j] * vr[d];
    }
}
