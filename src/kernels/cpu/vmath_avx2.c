/* AVX2 vector math: exp (vmath.h), SwiGLU, and the online-softmax update of one
 * attention tile.  Every lane computes its element alone. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/variant.h"
#include "kernels/cpu/variant_impl.h"
#include "kernels/cpu/vmath.h"

static inline __m256 avx2_exp(__m256 x)
{
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(CPU_EXP_LO)), _mm256_set1_ps(CPU_EXP_HI));
    __m256 nf = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(CPU_EXP_LOG2E)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(CPU_EXP_LN2_HI), xc);
    r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(CPU_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(CPU_EXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(CPU_EXP_LO), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(CPU_EXP_HI), _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void cpu_avx2_exp(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, avx2_exp(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof *t);
        _mm256_storeu_ps(t, avx2_exp(_mm256_loadu_ps(t)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof *t);
    }
}

void cpu_avx2_widen_bf16(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}

static inline __m256 avx2_swiglu(__m256 g, __m256 u)
{
    __m256 e = avx2_exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void cpu_avx2_swiglu(float *out, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, avx2_swiglu(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof *tg);
        memcpy(tu, u + i, (size_t)(n - i) * sizeof *tu);
        _mm256_storeu_ps(tg, avx2_swiglu(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        memcpy(out + i, tg, (size_t)(n - i) * sizeof *tg);
    }
}

/* Sum of 8 lanes by the AVX2 GEMM's tree (gemm_avx2.c). */
static inline float avx2_sum8(__m256 v)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

void cpu_avx2_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd)
{
    /* Positions past n read as -inf: they weigh exp(-inf) = 0. */
    float t[CPU_ATTN_TILE];
    for (int j = 0; j < CPU_ATTN_TILE; j++)
        t[j] = j < n ? s[j] * scale : -INFINITY;
    __m256 s0 = _mm256_loadu_ps(t), s1 = _mm256_loadu_ps(t + 8);
    __m256 mx = _mm256_max_ps(s0, s1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float mt = _mm_cvtss_f32(m4);
    float mn = mt > *m ? mt : *m;
    __m256 mv = _mm256_set1_ps(mn);
    __m256 p0 = avx2_exp(_mm256_sub_ps(s0, mv)), p1 = avx2_exp(_mm256_sub_ps(s1, mv));
    float corr = _mm256_cvtss_f32(avx2_exp(_mm256_set1_ps(*m - mn)));
    *l = *l * corr + avx2_sum8(_mm256_add_ps(p0, p1));
    *m = mn;
    float p[CPU_ATTN_TILE];
    _mm256_storeu_ps(p, p0);
    _mm256_storeu_ps(p + 8, p1);
    __m256 cv = _mm256_set1_ps(corr);
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m256 a[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
            a[q] = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * q), cv);
        for (int j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vr = v + (int64_t)j * hd + d;
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
                a[q] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * q), a[q]);
        }
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
            _mm256_storeu_ps(acc + d + 8 * q, a[q]);
    }
    for (; d < hd; d++) {
        float a = acc[d] * corr;
        for (int j = 0; j < n; j++)
            a = fmaf(p[j], v[(int64_t)j * hd + d], a);
        acc[d] = a;
    }
}
