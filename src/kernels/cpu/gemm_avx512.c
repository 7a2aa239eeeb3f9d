/* AVX-512 variant: every output element accumulates in one 16-lane register
 * (lane l takes k ≡ l mod 16, fused multiply-add in k order), the k tail with
 * zero-masked loads, then one fixed reduction tree.  Register tiles of up to 4x4
 * elements only interleave independent elements, so any tile shape gives the
 * bits of a single dot product. */
#include <immintrin.h>

#include "kernels/cpu/variant.h"

#define TILE_MR 4
#define TILE_NR 4

static inline float avx512_reduce(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

static inline __m512 avx512_load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 avx512_load_f32_mask(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 avx512_load_bf16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 avx512_load_bf16_mask(const uint16_t *p, __mmask16 m)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 avx512_load_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 avx512_load_f16_mask(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* One tile of mr x nr elements (mr, nr <= 4; constant after inlining). */
#define AVX512_TILE(SUFFIX, WT, LOADW, LOADW_MASK)                                                          \
    static inline __attribute__((always_inline)) void avx512_tile_##SUFFIX(                                 \
        float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w, int64_t ldw, int k, const int mr,    \
        const int nr)                                                                                         \
    {                                                                                                         \
        __m512 acc[TILE_MR][TILE_NR];                                                                         \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();             \
        int kk = 0;                                                                                           \
        for (; kk + 16 <= k; kk += 16) {                                                                      \
            __m512 wv[TILE_NR];                                                                               \
            _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) wv[j] = LOADW(w + j * ldw + kk);             \
            _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                              \
            {                                                                                                 \
                __m512 xv = _mm512_loadu_ps(x + i * ldx + kk);                                                \
                _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) acc[i][j] =                              \
                    _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                                                    \
            }                                                                                                 \
        }                                                                                                     \
        if (kk < k) {                                                                                         \
            __mmask16 m = (__mmask16)((1u << (k - kk)) - 1u);                                                 \
            __m512 wv[TILE_NR];                                                                               \
            _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) wv[j] = LOADW_MASK(w + j * ldw + kk, m);     \
            _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                              \
            {                                                                                                 \
                __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + kk);                                       \
                _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) acc[i][j] =                              \
                    _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                                                    \
            }                                                                                                 \
        }                                                                                                     \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) y[i * ldy + j] = avx512_reduce(acc[i][j]);   \
    }                                                                                                         \
                                                                                                              \
    static void avx512_gemm_##SUFFIX(float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w,         \
                                     int64_t ldw, int m, int n, int k)                                        \
    {                                                                                                         \
        for (int i = 0; i < m; i += TILE_MR) {                                                                \
            int mr = m - i < TILE_MR ? m - i : TILE_MR;                                                       \
            for (int j = 0; j < n; j += TILE_NR) {                                                            \
                int nr = n - j < TILE_NR ? n - j : TILE_NR;                                                   \
                float *yt = y + (int64_t)i * ldy + j;                                                         \
                const float *xt = x + (int64_t)i * ldx;                                                       \
                const WT *wt = w + (int64_t)j * ldw;                                                          \
                if (mr == 4 && nr == 4)                                                                       \
                    avx512_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 4, 4);                                 \
                else if (mr == 1 && nr == 4)                                                                  \
                    avx512_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 1, 4);                                 \
                else if (mr == 2 && nr == 4)                                                                  \
                    avx512_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 2, 4);                                 \
                else if (mr == 3 && nr == 4)                                                                  \
                    avx512_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 3, 4);                                 \
                else                                                                                          \
                    for (int jj = 0; jj < nr; jj++)                                                           \
                        for (int ii = 0; ii < mr; ii++)                                                       \
                            avx512_tile_##SUFFIX(yt + ii * ldy + jj, ldy, xt + ii * ldx, ldx, wt + jj * ldw, \
                                                 ldw, k, 1, 1);                                               \
            }                                                                                                 \
        }                                                                                                     \
    }

AVX512_TILE(f32, float, avx512_load_f32, avx512_load_f32_mask)
AVX512_TILE(bf16, uint16_t, avx512_load_bf16, avx512_load_bf16_mask)
AVX512_TILE(f16, uint16_t, avx512_load_f16, avx512_load_f16_mask)

const struct cpu_variant cpu_variant_avx512 = {
    .name = "avx512",
    .gemm_f32 = avx512_gemm_f32,
    .gemm_bf16 = avx512_gemm_bf16,
    .gemm_f16 = avx512_gemm_f16,
};
