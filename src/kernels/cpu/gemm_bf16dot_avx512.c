/* AVX-512 BF16 GEMM (compute bf16): activations and weights both bf16.  Every output
 * element accumulates in one 16-lane register through VDPBF16PS (lane l takes the
 * pair k = 32s + 2l, 32s + 2l + 1 of each 32-wide step, in s order; the instruction's
 * own rounding, with denormal inputs read as zero), the k tail with zero-masked
 * loads, then the fixed tree of gemm_avx512.c.  Tiles interleave independent
 * elements only, so every tile shape gives the bits of a lone dot product. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/cpu/tree_avx512.h"
#include "kernels/cpu/variant_impl.h"

#define BB_MR 6

static inline __m512bh bb_load(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512((const void *)p); }
static inline __m512bh bb_load_m(const uint16_t *p, __mmask32 m)
{
    return (__m512bh)_mm512_maskz_loadu_epi16(m, (const void *)p);
}

static inline __attribute__((always_inline)) void bb_tile(float *y, int64_t ldy, const uint16_t *x, int64_t ldx,
                                                          const uint16_t *const *wr, int k, const int mr,
                                                          const int nr, int nst, uintptr_t pf, int pf_phase,
                                                          int pf_every)
{
    __m512 acc[BB_MR][8];
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    int kk = 0;
    for (; kk + 32 <= k; kk += 32) {
        __m512bh wv[8];
        if (pf && (kk >> 5) % pf_every == pf_phase) {
            /* a later tile, in address order, at the pace this one is read; with
             * pf_every row tiles passing over this one, each takes every pf_every-th
             * piece, so the requests are spread over the whole pass */
            uintptr_t a = pf + (uintptr_t)kk * nr * 2;
            _Pragma("GCC unroll 8") for (int q = 0; q < nr * 64; q += 64)
                _mm_prefetch((const char *)(a + q), _MM_HINT_T1);
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) wv[j] = bb_load(wr[j] + kk);
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        {
            __m512bh xv = bb_load(x + i * ldx + kk);
            _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    if (kk < k) {
        __mmask32 msk = (__mmask32)((1ull << (k - kk)) - 1ull);
        __m512bh wv[8];
        _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) wv[j] = bb_load_m(wr[j] + kk, msk);
        _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        {
            __m512bh xv = bb_load_m(x + i * ldx + kk, msk);
            _Pragma("GCC unroll 8") for (int j = 0; j < nr; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 2") for (int j = 0; j < nr; j += 4)
            a512_store4(y + i * ldy + j, a512_reduce4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), nst - j);
}

/* ahead != 0: prefetch w's rows that many bytes further on instead of the next tile's. */
static void bb_gemm(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t ldw, int m,
                    int n, int k, ptrdiff_t ahead)
{
    if (m <= 2) {
        for (int j = 0; j < n; j += 8) {
            const uint16_t *wr[8];
            for (int jj = 0; jj < 8; jj++)
                wr[jj] = w + (int64_t)(j + jj < n ? j + jj : n - 1) * ldw;
            int nst = n - j < 8 ? n - j : 8;
            uintptr_t pf = ahead      ? (uintptr_t)(w + (int64_t)j * ldw) + (uintptr_t)ahead
                           : ldw == k ? (uintptr_t)w + (uintptr_t)(j + 8) * (uintptr_t)ldw * 2
                                      : 0;
            if (m == 2)
                bb_tile(y + j, ldy, x, ldx, wr, k, 2, 8, nst, pf, 0, 1);
            else
                bb_tile(y + j, ldy, x, ldx, wr, k, 1, 8, nst, pf, 0, 1);
        }
        return;
    }
    for (int j = 0; j < n; j += 4) {
        const uint16_t *wr[4];
        for (int jj = 0; jj < 4; jj++)
            wr[jj] = w + (int64_t)(j + jj < n ? j + jj : n - 1) * ldw;
        int nst = n - j < 4 ? n - j : 4;
        /* two column tiles ahead: one tile's pass is too short to cover the latency */
        uintptr_t pf = ahead      ? (uintptr_t)(w + (int64_t)j * ldw) + (uintptr_t)ahead
                       : ldw == k ? (uintptr_t)w + (uintptr_t)(j + 2 * 4) * (uintptr_t)ldw * 2
                                  : 0;
        /* rows in ceil(m / 6) tiles as even as possible (32 = 6+6+5+5+5+5, 8 = 4+4) */
        int n_rt = (m + BB_MR - 1) / BB_MR;
        for (int t = 0, i = 0; t < n_rt; t++) {
            int mr = (m - i) / (n_rt - t);
            float *yt = y + (int64_t)i * ldy + j;
            const uint16_t *xt = x + (int64_t)i * ldx;
            i += mr;
            switch (mr) {
            case 1: bb_tile(yt, ldy, xt, ldx, wr, k, 1, 4, nst, pf, t, n_rt); break;
            case 2: bb_tile(yt, ldy, xt, ldx, wr, k, 2, 4, nst, pf, t, n_rt); break;
            case 3: bb_tile(yt, ldy, xt, ldx, wr, k, 3, 4, nst, pf, t, n_rt); break;
            case 4: bb_tile(yt, ldy, xt, ldx, wr, k, 4, 4, nst, pf, t, n_rt); break;
            case 5: bb_tile(yt, ldy, xt, ldx, wr, k, 5, 4, nst, pf, t, n_rt); break;
            default: bb_tile(yt, ldy, xt, ldx, wr, k, 6, 4, nst, pf, t, n_rt); break;
            }
        }
    }
}

void cpu_avx512bf16_gemm_bb(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w, int64_t ldw,
                            int m, int n, int k)
{
    bb_gemm(y, ldy, x, ldx, w, ldw, m, n, k, 0);
}

void cpu_avx512bf16_scores_bb(float *y, int64_t ldy, const uint16_t *x, int64_t ldx, const uint16_t *w,
                              int64_t ldw, int m, int n, int k, ptrdiff_t ahead)
{
    bb_gemm(y, ldy, x, ldx, w, ldw, m, n, k, ahead);
}

/* Round to nearest even (VCVTNEPS2BF16). */
void cpu_avx512bf16_to_bf16(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, v);
    }
}
