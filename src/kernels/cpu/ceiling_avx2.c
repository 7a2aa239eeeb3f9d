/* AVX2 FMA loop for the f32 ceiling on CPUs without AVX-512 (ceiling.c). */
#include <immintrin.h>

#include "kernels/cpu/ceiling.h"

#define CEIL_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

float cpu_ceiling_fma_avx2(long iters)
{
    __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-6f);
#define DECL(i) __m256 c##i = _mm256_set1_ps((float)(i));
    CEIL_12(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
        CEIL_12(STEP)
#undef STEP
    }
    __m256 s = _mm256_setzero_ps();
#define SUM(i) s = _mm256_add_ps(s, c##i);
    CEIL_12(SUM)
#undef SUM
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
