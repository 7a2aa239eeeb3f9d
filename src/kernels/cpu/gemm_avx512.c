/* AVX-512 GEMM, f32 compute: every output element accumulates in one 16-lane
 * register (lane l takes k ≡ l mod 16, fused multiply-add in k order), the k tail
 * with zero-masked loads, then one fixed reduction tree
 *     s1[i] = v[i] + v[i+8];  s2[i] = s1[i] + s1[i+4];  s3[i] = s2[i] + s2[i+2];  s3[0] + s3[1].
 * Register tiles (up to 6 rows x 4 columns, or 2 x 8 for decode) only interleave
 * independent elements, and the reduction of four elements at once performs, lane by
 * lane, exactly that tree with the same operand order; so every tile shape, and so
 * every batch size, gives the bits of a lone dot product.
 *
 * Columns beyond n in a partial tile re-read the last valid weight row and are not
 * stored: the duplicates are computed and thrown away, which changes nothing. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/cpu/tree_avx512.h"
#include "kernels/cpu/variant.h"

#define A512_MR 6  /* rows per tile when m > 2 */

static inline __m512 a512_w_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 a512_w_f32_m(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 a512_w_bf16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 a512_w_bf16_m(const uint16_t *p, __mmask16 m)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 a512_w_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 a512_w_f16_m(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* One tile: mr rows (<= 6) x nr columns (4 or 8), nr and mr constant after inlining;
 * nst <= nr columns are stored. */
#define A512_TILE(S, WT, LOADW, LOADW_M)                                                                        \
    static inline __attribute__((always_inline)) void a512_tile_##S(float *y, int64_t ldy, const float *x,      \
                                                                    int64_t ldx, const WT *const *wr, int k,    \
                                                                    const int mr, const int nr, int nst,        \
                                                                    uintptr_t pf, int pf_phase, int pf_every)   \
    {                                                                                                           \
        __m512 acc[A512_MR][8];                                                                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)                                                    \
            _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();               \
        int kk = 0;                                                                                             \
        for (; kk + 16 <= k; kk += 16) {                                                                        \
            __m512 wv[8];                                                                                       \
            if (pf && (kk >> 4) % pf_every == pf_phase) {                                                       \
                /* a later tile, in address order, at the pace this one is read, spread over */                 \
                /* the pf_every row tiles that pass over this one */                                            \
                uintptr_t a = pf + (uintptr_t)kk * nr * sizeof(WT);                                             \
                _Pragma("GCC unroll 8") for (int q = 0; q < nr * 16 * (int)sizeof(WT); q += 64)                 \
                    _mm_prefetch((const char *)(a + q), _MM_HINT_T1);                                           \
            }                                                                                                   \
            _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) wv[j] = LOADW(wr[j] + kk);                     \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)                                                \
            {                                                                                                   \
                __m512 xv = _mm512_loadu_ps(x + i * ldx + kk);                                                  \
                _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] =                                \
                    _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                                                      \
            }                                                                                                   \
        }                                                                                                       \
        if (kk < k) {                                                                                           \
            __mmask16 msk = (__mmask16)((1u << (k - kk)) - 1u);                                                 \
            __m512 wv[8];                                                                                       \
            _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) wv[j] = LOADW_M(wr[j] + kk, msk);              \
            _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)                                                \
            {                                                                                                   \
                __m512 xv = _mm512_maskz_loadu_ps(msk, x + i * ldx + kk);                                       \
                _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] =                                \
                    _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                                                      \
            }                                                                                                   \
        }                                                                                                       \
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)                                                    \
            _Pragma("GCC unroll 2") for (int j = 0; j < nr; j += 4)                                             \
                a512_store4(y + i * ldy + j,                                                                    \
                            a512_reduce4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), nst - j);     \
    }                                                                                                           \
                                                                                                                \
    /* ahead != 0: prefetch w's rows that many bytes further on instead of the next tile's */                   \
    static inline void a512_gemm_##S(float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w,           \
                                     int64_t ldw, int m, int n, int k, ptrdiff_t ahead)                         \
    {                                                                                                           \
        if (m <= 2) {                                                                                           \
            /* decode: 8 columns per tile, the weights stream once */                                           \
            for (int j = 0; j < n; j += 8) {                                                                    \
                const WT *wr[8];                                                                                \
                for (int jj = 0; jj < 8; jj++)                                                                  \
                    wr[jj] = w + (int64_t)(j + jj < n ? j + jj : n - 1) * ldw;                                  \
                int nst = n - j < 8 ? n - j : 8;                                                                \
                /* rows stored back to back: prefetch the next tile's bytes while this one streams */           \
                uintptr_t pf = ahead      ? (uintptr_t)(w + (int64_t)j * ldw) + (uintptr_t)ahead                \
                               : ldw == k ? (uintptr_t)w + (uintptr_t)(j + 8) * (uintptr_t)ldw * sizeof(WT)     \
                                          : 0;                                                                  \
                if (m == 2)                                                                                     \
                    a512_tile_##S(y + j, ldy, x, ldx, wr, k, 2, 8, nst, pf, 0, 1);                              \
                else                                                                                            \
                    a512_tile_##S(y + j, ldy, x, ldx, wr, k, 1, 8, nst, pf, 0, 1);                              \
            }                                                                                                   \
            return;                                                                                             \
        }                                                                                                       \
        /* the 4 weight rows of a column tile stay in L1 while every row tile passes; the passes                \
         * share the prefetch of a later column tile */                                                         \
        for (int j = 0; j < n; j += 4) {                                                                        \
            const WT *wr[4];                                                                                    \
            for (int jj = 0; jj < 4; jj++)                                                                      \
                wr[jj] = w + (int64_t)(j + jj < n ? j + jj : n - 1) * ldw;                                      \
            int nst = n - j < 4 ? n - j : 4;                                                                    \
            /* two column tiles ahead: one tile's pass is too short to cover the latency */                     \
            uintptr_t pf = ahead      ? (uintptr_t)(w + (int64_t)j * ldw) + (uintptr_t)ahead                    \
                           : ldw == k ? (uintptr_t)w + (uintptr_t)(j + 8) * (uintptr_t)ldw * sizeof(WT)         \
                                      : 0;                                                                      \
            /* rows in ceil(m / 6) tiles as even as possible (32 = 6+6+5+5+5+5, 8 = 4+4) */                     \
            int n_rt = (m + A512_MR - 1) / A512_MR;                                                             \
            for (int t = 0, i = 0; t < n_rt; t++) {                                                             \
                int mr = (m - i) / (n_rt - t);                                                                  \
                float *yt = y + (int64_t)i * ldy + j;                                                           \
                const float *xt = x + (int64_t)i * ldx;                                                         \
                i += mr;                                                                                        \
                switch (mr) {                                                                                   \
                case 1: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 1, 4, nst, pf, t, n_rt); break;                  \
                case 2: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 2, 4, nst, pf, t, n_rt); break;                  \
                case 3: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 3, 4, nst, pf, t, n_rt); break;                  \
                case 4: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 4, 4, nst, pf, t, n_rt); break;                  \
                case 5: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 5, 4, nst, pf, t, n_rt); break;                  \
                default: a512_tile_##S(yt, ldy, xt, ldx, wr, k, 6, 4, nst, pf, t, n_rt); break;                 \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }                                                                                                           \
                                                                                                                \
    void cpu_avx512_gemm_##S(float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w, int64_t ldw,      \
                             int m, int n, int k)                                                               \
    {                                                                                                           \
        a512_gemm_##S(y, ldy, x, ldx, w, ldw, m, n, k, 0);                                                      \
    }

A512_TILE(f32, float, a512_w_f32, a512_w_f32_m)
A512_TILE(bf16, uint16_t, a512_w_bf16, a512_w_bf16_m)
A512_TILE(f16, uint16_t, a512_w_f16, a512_w_f16_m)

void cpu_avx512_scores_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                            int n, int k, ptrdiff_t ahead)
{
    a512_gemm_bf16(y, ldy, x, ldx, w, ldw, m, n, k, ahead);
}
