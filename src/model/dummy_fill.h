/* The values of `--load-format dummy` weights: element i of a matrix with fill seed s
 * is a function of (s, i) alone, the same on the host and on a device (integer
 * hashing, one f32 multiply, round to nearest even), so a backend can generate a
 * matrix where it keeps it (a GPU in its own memory, no host copy) and every backend
 * sees the same model.  Included by C and by CUDA sources. */
#ifndef HEARTH_MODEL_DUMMY_FILL_H
#define HEARTH_MODEL_DUMMY_FILL_H

#include <stdint.h>

#ifdef __CUDACC__
#define DUMMY_FILL_FN __host__ __device__ static inline
#else
#define DUMMY_FILL_FN static inline
#endif

/* Uniform in [-DUMMY_FILL_SCALE, DUMMY_FILL_SCALE): the standard deviation (0.02) of
 * the initialiser Qwen3's config names (initializer_range). */
#define DUMMY_FILL_SCALE 0.034641016f

/* splitmix64's finaliser. */
DUMMY_FILL_FN uint64_t dummy_fill_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* f32 to bf16, round to nearest even (finite values only: the fill makes no others). */
DUMMY_FILL_FN uint16_t dummy_fill_round(float v)
{
    union {
        float f;
        uint32_t u;
    } x;
    x.f = v;
    uint32_t u = x.u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 bits of element i of the matrix with seed `seed`, uniform in [-scale, scale). */
DUMMY_FILL_FN uint16_t dummy_fill_bf16(uint64_t seed, uint64_t i, float scale)
{
    uint64_t r = dummy_fill_mix(seed * 0x632be59bd9b4e019ull + i);
    float u = (float)(int32_t)(r >> 40) * (1.0f / 16777216.0f); /* [0, 1), exact */
    return dummy_fill_round((2.0f * u - 1.0f) * scale);
}

#endif
