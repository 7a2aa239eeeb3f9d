/* AVX2+FMA variant: every output element accumulates in one 8-lane register
 * (lane l takes k ≡ l mod 8, fused multiply-add in k order); the k tail goes
 * through a zero-padded copy, then one fixed reduction tree.  Tiles of up to 4x2
 * elements interleave independent elements only. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/variant_impl.h"

#define TILE_MR 4
#define TILE_NR 2

static inline float avx2_reduce(__m256 v)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

static inline __m256 avx2_load_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 avx2_load_bf16(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
static inline __m256 avx2_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

#define AVX2_TILE(SUFFIX, WT, LOADW)                                                                         \
    static inline __attribute__((always_inline)) void avx2_tile_##SUFFIX(                                   \
        float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w, int64_t ldw, int k, const int mr,    \
        const int nr)                                                                                         \
    {                                                                                                         \
        __m256 acc[TILE_MR][TILE_NR];                                                                         \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();             \
        int kk = 0;                                                                                           \
        for (; kk + 8 <= k; kk += 8) {                                                                        \
            __m256 wv[TILE_NR];                                                                               \
            _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) wv[j] = LOADW(w + j * ldw + kk);             \
            _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                              \
            {                                                                                                 \
                __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);                                                \
                _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) acc[i][j] =                              \
                    _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                                                    \
            }                                                                                                 \
        }                                                                                                     \
        if (kk < k) {                                                                                         \
            int rem = k - kk;                                                                                 \
            WT wpad[TILE_NR][8];                                                                              \
            float xpad[TILE_MR][8];                                                                           \
            memset(wpad, 0, sizeof wpad);                                                                     \
            memset(xpad, 0, sizeof xpad);                                                                     \
            for (int j = 0; j < nr; j++)                                                                      \
                memcpy(wpad[j], w + j * ldw + kk, (size_t)rem * sizeof(WT));                                  \
            for (int i = 0; i < mr; i++)                                                                      \
                memcpy(xpad[i], x + i * ldx + kk, (size_t)rem * sizeof(float));                               \
            __m256 wv[TILE_NR];                                                                               \
            _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) wv[j] = LOADW(wpad[j]);                      \
            _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                              \
            {                                                                                                 \
                __m256 xv = _mm256_loadu_ps(xpad[i]);                                                         \
                _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) acc[i][j] =                              \
                    _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                                                    \
            }                                                                                                 \
        }                                                                                                     \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 2") for (int j = 0; j < nr; j++) y[i * ldy + j] = avx2_reduce(acc[i][j]);     \
    }                                                                                                         \
                                                                                                              \
    void cpu_avx2_gemm_##SUFFIX(float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w,           \
                                   int64_t ldw, int m, int n, int k)                                          \
    {                                                                                                         \
        for (int i = 0; i < m; i += TILE_MR) {                                                                \
            int mr = m - i < TILE_MR ? m - i : TILE_MR;                                                       \
            for (int j = 0; j < n; j += TILE_NR) {                                                            \
                int nr = n - j < TILE_NR ? n - j : TILE_NR;                                                   \
                float *yt = y + (int64_t)i * ldy + j;                                                         \
                const float *xt = x + (int64_t)i * ldx;                                                       \
                const WT *wt = w + (int64_t)j * ldw;                                                          \
                if (mr == 4 && nr == 2)                                                                       \
                    avx2_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 4, 2);                                   \
                else if (mr == 1 && nr == 2)                                                                  \
                    avx2_tile_##SUFFIX(yt, ldy, xt, ldx, wt, ldw, k, 1, 2);                                   \
                else                                                                                          \
                    for (int jj = 0; jj < nr; jj++)                                                           \
                        for (int ii = 0; ii < mr; ii++)                                                       \
                            avx2_tile_##SUFFIX(yt + ii * ldy + jj, ldy, xt + ii * ldx, ldx, wt + jj * ldw,   \
                                               ldw, k, 1, 1);                                                 \
            }                                                                                                 \
        }                                                                                                     \
    }

AVX2_TILE(f32, float, avx2_load_f32)
AVX2_TILE(bf16, uint16_t, avx2_load_bf16)
AVX2_TILE(f16, uint16_t, avx2_load_f16)
