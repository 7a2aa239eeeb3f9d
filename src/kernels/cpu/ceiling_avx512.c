/* AVX-512 loops for the ceilings (ceiling.c): twelve independent chains, more than
 * the latency of the FMA and dot-product units needs, in named registers. */
#include <immintrin.h>

#include "kernels/cpu/ceiling.h"

#define CEIL_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

float cpu_ceiling_fma_avx512(long iters)
{
    __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-6f);
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)(i));
    CEIL_12(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
        CEIL_12(STEP)
#undef STEP
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
    CEIL_12(SUM)
#undef SUM
    return _mm512_reduce_add_ps(s);
}

float cpu_ceiling_dot_avx512bf16(long iters)
{
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)(i));
    CEIL_12(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
        CEIL_12(STEP)
#undef STEP
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
    CEIL_12(SUM)
#undef SUM
    return _mm512_reduce_add_ps(s);
}

float cpu_ceiling_read_avx512(const float *p, long n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    long i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
