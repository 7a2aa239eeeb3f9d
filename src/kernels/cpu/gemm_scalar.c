/* Scalar variant, for any x86-64: each element keeps 8 partial sums (lane l takes
 * k ≡ l mod 8; separate multiply and add, as the build forbids contraction), then a
 * fixed pairwise tree.  Weights are widened exactly (bf16 by shift, f16 by table-free
 * bit manipulation). */
#include <string.h>

#include "kernels/cpu/variant_impl.h"
#include "model/dtype.h"

#define SCALAR_LANES 8

static inline float scalar_reduce(const float *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static inline float scalar_w_f32(const float *w, int64_t i) { return w[i]; }
static inline float scalar_w_bf16(const uint16_t *w, int64_t i) { return dtype_bf16_to_f32(w[i]); }
static inline float scalar_w_f16(const uint16_t *w, int64_t i) { return dtype_f16_to_f32(w[i]); }

#define SCALAR_GEMM(SUFFIX, WT, LOADW)                                                                      \
    void cpu_scalar_gemm_##SUFFIX(float *y, int64_t ldy, const float *x, int64_t ldx, const WT *w,           \
                                  int64_t ldw, int m, int n, int k)                                          \
    {                                                                                                        \
        for (int i = 0; i < m; i++) {                                                                        \
            const float *xr = x + (int64_t)i * ldx;                                                          \
            for (int j = 0; j < n; j++) {                                                                    \
                const WT *wr = w + (int64_t)j * ldw;                                                         \
                float acc[SCALAR_LANES] = {0};                                                               \
                int kk = 0;                                                                                  \
                for (; kk + SCALAR_LANES <= k; kk += SCALAR_LANES)                                           \
                    for (int l = 0; l < SCALAR_LANES; l++)                                                   \
                        acc[l] = acc[l] + xr[kk + l] * LOADW(wr, kk + l);                                    \
                for (int l = 0; kk + l < k; l++)                                                             \
                    acc[l] = acc[l] + xr[kk + l] * LOADW(wr, kk + l);                                        \
                y[(int64_t)i * ldy + j] = scalar_reduce(acc);                                                \
            }                                                                                                \
        }                                                                                                    \
    }

SCALAR_GEMM(f32, float, scalar_w_f32)
SCALAR_GEMM(bf16, uint16_t, scalar_w_bf16)
SCALAR_GEMM(f16, uint16_t, scalar_w_f16)
