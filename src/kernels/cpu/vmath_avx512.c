/* AVX-512 vector math: exp (vmath.h), SwiGLU, the elementwise steps of the variant
 * table, and the online-softmax update of one attention tile.  Every lane computes its
 * element alone, so the bits never depend on how many elements a call holds. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include "kernels/cpu/variant.h"
#include "kernels/cpu/variant_impl.h"
#include "kernels/cpu/vmath.h"

/* The first `left` of sixteen lanes (all of them when left >= 16). */
static inline __mmask16 a512_lanes(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

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
        __mmask16 m = a512_lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, a512_exp(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void cpu_avx512_widen_bf16(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    if (i < n) {
        __mmask16 m = a512_lanes(n - i);
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
        _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
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
        __mmask16 m = a512_lanes(n - i);
        __m512 v = a512_swiglu(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

/* ------------------------------------------------------------------ elementwise */

void cpu_avx512_norm_scale(float *y, const float *x, const float *w, float s, int64_t n)
{
    __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = a512_lanes(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void cpu_avx512_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = a512_lanes(n - i);
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void cpu_avx512_rope(float *x, const float *cs, int hd)
{
    int half = hd / 2;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int i = 0; i < half; i += 16) {
        int left = half - i;
        /* cs holds 2 * left values from 2i on: 16 in c0, the rest in c1 */
        __mmask16 m = a512_lanes(left), m0 = a512_lanes(2 * left), m1 = left > 8 ? a512_lanes(2 * (left - 8)) : 0;
        __m512 c0 = _mm512_maskz_loadu_ps(m0, cs + 2 * i), c1 = _mm512_maskz_loadu_ps(m1, cs + 2 * i + 16);
        __m512 co = _mm512_permutex2var_ps(c0, even, c1), si = _mm512_permutex2var_ps(c0, odd, c1);
        __m512 x1 = _mm512_maskz_loadu_ps(m, x + i), x2 = _mm512_maskz_loadu_ps(m, x + i + half);
        _mm512_mask_storeu_ps(x + i, m, _mm512_sub_ps(_mm512_mul_ps(x1, co), _mm512_mul_ps(x2, si)));
        _mm512_mask_storeu_ps(x + i + half, m, _mm512_add_ps(_mm512_mul_ps(x2, co), _mm512_mul_ps(x1, si)));
    }
}

/* dtype_f32_to_bf16's integer rounding, sixteen lanes at a time. */
void cpu_avx512_store_bf16(uint16_t *dst, const float *src, int64_t n)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = a512_lanes(n - i);
        __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
        __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
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

/* The softmax half of a tile update: scales s, moves the running max and sum, and
 * returns the weights p[16] (zero past n) and the correction of the old terms. */
static inline float a512_softmax_tile(float *m, float *l, const float *s, int n, float scale, float *p)
{
    __mmask16 msk = (__mmask16)((1u << n) - 1u);
    __m512 sv = _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, s), _mm512_set1_ps(scale));
    float mt = _mm512_mask_reduce_max_ps(msk, sv);
    float mn = mt > *m ? mt : *m;
    __m512 pv = _mm512_maskz_mov_ps(msk, a512_exp(_mm512_sub_ps(sv, _mm512_set1_ps(mn))));
    float corr = _mm512_cvtss_f32(a512_exp(_mm512_set1_ps(*m - mn)));
    *l = *l * corr + a512_sum16(pv);
    *m = mn;
    _mm512_storeu_ps(p, pv);
    return corr;
}

/* V rows: f32 rows of a tile, or bf16 rows read straight from the KV store and
 * widened in registers (exact, so both give the same bits). */
static inline __attribute__((always_inline)) __m512 a512_ldv(const void *row, int d, const int bf16)
{
    if (bf16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    return _mm512_loadu_ps((const float *)row + d);
}

static inline __attribute__((always_inline)) __m512 a512_ldv_m(const void *row, int d, __mmask16 m, const int bf16)
{
    if (bf16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)row + d);
}

/* acc[d] = acc[d] * corr, then acc[d] += p[j] * v[j, d] for j < n in order, for d in
 * [d0, hd) sixteen at a time. */
static inline __attribute__((always_inline)) void a512_pv_tail(float *acc, const float *p, int n, float corr,
                                                               const void *const *v, int hd, int d0, const int bf16)
{
    __m512 cv = _mm512_set1_ps(corr);
    for (int d = d0; d < hd; d += 16) {
        __mmask16 dm = a512_lanes(hd - d);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(dm, acc + d), cv);
        for (int j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), a512_ldv_m(v[j], d, dm, bf16), a);
        _mm512_mask_storeu_ps(acc + d, dm, a);
    }
}

/* Asks for V row j's successor `ahead` bytes on (the next tile's row j) as row j is
 * read: one row of requests per row consumed keeps the stream going without bursts. */
static inline __attribute__((always_inline)) void a512_pf_row(const void *row, ptrdiff_t ahead, int hd, const int bf16)
{
    if (!ahead)
        return;
    const char *a = (const char *)row + ahead;
    for (int o = 0; o < hd * (bf16 ? 2 : 4); o += 64)
        _mm_prefetch(a + o, _MM_HINT_T1);
}

/* One row: the definition every grouping of rows reproduces. */
static inline __attribute__((always_inline)) void a512_update_row(float *m, float *l, float *acc, const float *s,
                                                                  int n, float scale, const void *const *v, int hd,
                                                                  const int bf16, ptrdiff_t ahead)
{
    float p[16];
    float corr = a512_softmax_tile(m, l, s, n, scale, p);
    __m512 cv = _mm512_set1_ps(corr);
    int d = 0;
    /* 128 dims at a time: the accumulators stay in registers across the tile */
    for (; d + 128 <= hd; d += 128) {
        __m512 a[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
            a[q] = _mm512_mul_ps(_mm512_loadu_ps(acc + d + 16 * q), cv);
        for (int j = 0; j < n; j++) {
            if (d == 0)
                a512_pf_row(v[j], ahead, hd, bf16);
            __m512 pj = _mm512_set1_ps(p[j]);
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
                a[q] = _mm512_fmadd_ps(pj, a512_ldv(v[j], d + 16 * q, bf16), a[q]);
        }
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
            _mm512_storeu_ps(acc + d + 16 * q, a[q]);
    }
    a512_pv_tail(acc, p, n, corr, v, hd, d, bf16);
}

/* Rows in pairs: each V row is loaded once for both; every row still performs the
 * operations of a512_update_row, in the same order. */
static inline __attribute__((always_inline)) void a512_update_rows(float *m, float *l, float *acc, float *s,
                                                                   const int *n, int rows, float scale,
                                                                   const void *const *v, int hd, const int bf16,
                                                                   ptrdiff_t ahead)
{
    int r = 0;
    for (; r + 2 <= rows; r += 2) {
        float p0[16], p1[16];
        int n0 = n[r], n1 = n[r + 1], nmin = n0 < n1 ? n0 : n1;
        float c0 = a512_softmax_tile(&m[r], &l[r], s + (int64_t)r * CPU_ATTN_TILE, n0, scale, p0);
        float c1 = a512_softmax_tile(&m[r + 1], &l[r + 1], s + (int64_t)(r + 1) * CPU_ATTN_TILE, n1, scale, p1);
        float *acc0 = acc + (int64_t)r * hd, *acc1 = acc0 + hd;
        __m512 cv0 = _mm512_set1_ps(c0), cv1 = _mm512_set1_ps(c1);
        int d = 0;
        for (; d + 128 <= hd; d += 128) {
            __m512 a[8], b[8];
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {
                a[q] = _mm512_mul_ps(_mm512_loadu_ps(acc0 + d + 16 * q), cv0);
                b[q] = _mm512_mul_ps(_mm512_loadu_ps(acc1 + d + 16 * q), cv1);
            }
            int j = 0;
            for (; j < nmin; j++) {
                if (d == 0)
                    a512_pf_row(v[j], ahead, hd, bf16);
                __m512 pa = _mm512_set1_ps(p0[j]), pb = _mm512_set1_ps(p1[j]);
                _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {
                    __m512 vq = a512_ldv(v[j], d + 16 * q, bf16);
                    a[q] = _mm512_fmadd_ps(pa, vq, a[q]);
                    b[q] = _mm512_fmadd_ps(pb, vq, b[q]);
                }
            }
            for (int jj = j; jj < n0; jj++) {
                __m512 pa = _mm512_set1_ps(p0[jj]);
                _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
                    a[q] = _mm512_fmadd_ps(pa, a512_ldv(v[jj], d + 16 * q, bf16), a[q]);
            }
            for (int jj = j; jj < n1; jj++) {
                __m512 pb = _mm512_set1_ps(p1[jj]);
                _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
                    b[q] = _mm512_fmadd_ps(pb, a512_ldv(v[jj], d + 16 * q, bf16), b[q]);
            }
            _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {
                _mm512_storeu_ps(acc0 + d + 16 * q, a[q]);
                _mm512_storeu_ps(acc1 + d + 16 * q, b[q]);
            }
        }
        a512_pv_tail(acc0, p0, n0, c0, v, hd, d, bf16);
        a512_pv_tail(acc1, p1, n1, c1, v, hd, d, bf16);
    }
    if (r < rows)
        a512_update_row(&m[r], &l[r], acc + (int64_t)r * hd, s + (int64_t)r * CPU_ATTN_TILE, n[r], scale, v, hd,
                        bf16, r == 0 ? ahead : 0);
}

/* Row pointers of a contiguous f32 tile [n, hd]. */
static inline void a512_tile_rows(const void **rows, const float *v, int n, int hd)
{
    for (int j = 0; j < n; j++)
        rows[j] = v + (int64_t)j * hd;
}

void cpu_avx512_attn_update(float *m, float *l, float *acc, float *s, int n, float scale, const float *v, int hd)
{
    const void *rows[CPU_ATTN_TILE];
    a512_tile_rows(rows, v, n, hd);
    a512_update_row(m, l, acc, s, n, scale, rows, hd, 0, 0);
}

void cpu_avx512_attn_update_rows(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                                 const float *v, int hd)
{
    const void *vr[CPU_ATTN_TILE];
    a512_tile_rows(vr, v, CPU_ATTN_TILE, hd);
    a512_update_rows(m, l, acc, s, n, rows, scale, vr, hd, 0, 0);
}

void cpu_avx512_attn_update_rows_bf16(float *m, float *l, float *acc, float *s, const int *n, int rows, float scale,
                                      const uint16_t *const *v, int hd, ptrdiff_t ahead)
{
    a512_update_rows(m, l, acc, s, n, rows, scale, (const void *const *)v, hd, 1, ahead);
}
