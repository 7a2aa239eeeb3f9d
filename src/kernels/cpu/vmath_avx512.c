/* AVX-512 vector math: exp (vmath.h), SwiGLU, and the online-softmax update of one
 * attention tile.  Every lane computes its element alone, so the bits never depend on
 * how many elements a call holds. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/variant_impl.h"
#include "kernels/cpu/vmath.h"

static inline __m512 a512_exp(__m512 x)
{
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(CPU_EXP_LO)), _mm512_set1_ps(CPU_EXP_HI));
    __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(CPU_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(CPU_EXP_LN2_HI), xc);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(CPU_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(CPU_EXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(nf), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(CPU_EXP_LO), _CMP_LT_OQ), _mm512_setzero_ps());
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(CPU_EXP_HI), _CMP_GT_OQ),
                           _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

void cpu_avx512_exp(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, a512_exp(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, a512_exp(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static inline __m512 a512_swiglu(__m512 g, __m512 u)
{
    __m512 e = a512_exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void cpu_avx512_swiglu(float *out, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, a512_swiglu(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(out + i, m, a512_swiglu(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* Sum of 16 lanes by the GEMM's tree (gemm_avx512.c). */
static inline float a512_sum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

void cpu_avx512_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd)
{
    __mmask16 msk = (__mmask16)((1u << n) - 1u);
    __m512 sv = _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, s), _mm512_set1_ps(scale));
    float mt = _mm512_mask_reduce_max_ps(msk, sv);
    float mn = mt > *m ? mt : *m;
    __m512 pv = _mm512_maskz_mov_ps(msk, a512_exp(_mm512_sub_ps(sv, _mm512_set1_ps(mn))));
    float corr = _mm512_cvtss_f32(a512_exp(_mm512_set1_ps(*m - mn)));
    *l = *l * corr + a512_sum16(pv);
    *m = mn;
    float p[16];
    _mm512_storeu_ps(p, pv);
    __m512 cv = _mm512_set1_ps(corr);
    int d = 0;
    /* 128 dims at a time: the accumulators stay in registers across the tile */
    for (; d + 128 <= hd; d += 128) {
        __m512 a[8];
        for (int q = 0; q < 8; q++)
            a[q] = _mm512_mul_ps(_mm512_loadu_ps(acc + d + 16 * q), cv);
        for (int j = 0; j < n; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *vr = v + (int64_t)j * hd + d;
            for (int q = 0; q < 8; q++)
                a[q] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16 * q), a[q]);
        }
        for (int q = 0; q < 8; q++)
            _mm512_storeu_ps(acc + d + 16 * q, a[q]);
    }
    for (; d < hd; d += 16) {
        __mmask16 dm = hd - d >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (hd - d)) - 1u);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(dm, acc + d), cv);
        for (int j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(dm, v + (int64_t)j * hd + d), a);
        _mm512_mask_storeu_ps(acc + d, dm, a);
    }
}
