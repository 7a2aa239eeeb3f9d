/* The tensor-core building blocks the GEMMs share (gemm.cu, moe.cu): cp.async
 * copies into shared memory, ldmatrix, and mma.sync m16n8k16 (bf16 in, f32
 * accumulators).  Each is one instruction; the reduction order is the caller's. */
#ifndef HEARTH_KERNELS_CUDA_MMA_CUH
#define HEARTH_KERNELS_CUDA_MMA_CUH

#include "kernels/cuda/common.cuh"

namespace CUK_NS {

/* 16 bytes global -> shared, or 16 zero bytes when !valid (src is not read then). */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    int sz = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(sz));
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

/* The transposed load: each 8x8 matrix stored [k][n] comes out as an mma B fragment. */
__device__ __forceinline__ void ldsm_x4_t(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, const void *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

__device__ __forceinline__ void mma16816(float *c, const unsigned *a, const unsigned *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* f(i, j, r, row, col) for every accumulator element of a warp's MI x 4 m16n8 tiles:
 * element r of tile (i, j) (mma16816's layout) sits at row row0 + 16 i + lane / 4 +
 * 8 (r / 2) and column col0 + 8 j + 2 (lane % 4) + r % 2. */
template <int MI, class F> __device__ __forceinline__ void frag_each(int row0, int col0, F f)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                f(i, j, r, row0 + i * 16 + (lane >> 2) + (r >> 1) * 8, col0 + j * 8 + (lane & 3) * 2 + (r & 1));
}

} // namespace CUK_NS

#endif
