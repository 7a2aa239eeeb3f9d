/* The fixed reduction tree of the AVX-512 GEMMs (gemm_avx512.c describes it),
 * shared so that the f32 and the bf16-dot variants finish every dot product the
 * same way.  Include only from files built with AVX-512 flags (*_avx512.c). */
#ifndef HEARTH_KERNELS_CPU_TREE_AVX512_H
#define HEARTH_KERNELS_CPU_TREE_AVX512_H

#include <immintrin.h>

/* The tree applied to four accumulators at once; the four sums come back in lanes
 * 0..3. */
static inline __m128 a512_reduce4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    __m512 s2 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    __m512 s3 = _mm512_add_ps(s2, _mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(1, 0, 3, 2)));
    __m512 s4 = _mm512_add_ps(s3, _mm512_shuffle_ps(s3, s3, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                         0, 0),
                                                        s4));
}

/* The first nst (<= 4) of the four sums. */
static inline void a512_store4(float *y, __m128 v, int nst)
{
    if (nst >= 4)
        _mm_storeu_ps(y, v);
    else if (nst > 0)
        _mm_mask_storeu_ps(y, (__mmask8)((1u << nst) - 1u), v);
}

#endif
