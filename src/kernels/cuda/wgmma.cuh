/* Hopper's warpgroup MMA (sm90a), shared by the GEMMs (gemm.cu, moe.cu): the shared-
 * memory descriptor of a 128-byte-swizzled operand (rows of 64 bf16, chunk c of row r
 * at c ^ (r % 8)), the m64nNk16 wgmma, and where each of a thread's accumulators sits.
 * Each is one instruction or a map of one; the reduction order is the caller's. */
#ifndef HEARTH_KERNELS_CUDA_WGMMA_CUH
#define HEARTH_KERNELS_CUDA_WGMMA_CUH

#include "kernels/cuda/common.cuh"

#if defined(CUK_HOPPER)
namespace CUK_NS {

__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr)
{
    uint64_t d = 0;
    d |= (uint64_t)((saddr & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;            /* leading byte offset (unused with this swizzle) */
    d |= (uint64_t)(1024 >> 4) << 32;  /* stride: 8 rows of 128 bytes */
    d |= (uint64_t)1 << 62;            /* 128-byte swizzle */
    return d;
}

/* d = a . b + (acc ? d : 0), an m64nNk16 wgmma from shared memory: N / 2 floats a
 * thread.  Each output element takes the same k16 products in the same order whatever
 * N is (the widths' bytes are compared by the tests), so a tile's width is a launch
 * shape, not a sum. */
#define WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_D16(i) WG_D4(i), WG_D4(i + 4), WG_D4(i + 8), WG_D4(i + 12)
template <int N> __device__ __forceinline__ void wg_mma_n(float *d, uint64_t da, uint64_t db, int acc);
/* wg_mma_n<N>: REGS names the N / 2 accumulators %0..; A, B and P are the operand numbers
 * of the descriptors and the accumulate flag that follow them; the rest, the outputs */
#define WG_MMA_N(N, REGS, A, B, P, ...)                                                                               \
    template <> __device__ __forceinline__ void wg_mma_n<N>(float *d, uint64_t da, uint64_t db, int acc)             \
    {                                                                                                                \
        asm volatile("{\n"                                                                                           \
                     ".reg .pred p;\n"                                                                               \
                     "setp.ne.b32 p, %" #P ", 0;\n"                                                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, %" #A ", %" #B            \
                     ", p, 1, 1, 0, 0;\n"                                                                            \
                     "}\n"                                                                                           \
                     : __VA_ARGS__                                                                                   \
                     : "l"(da), "l"(db), "r"(acc));                                                                  \
    }
WG_MMA_N(16,
         "%0,%1,%2,%3,%4,%5,%6,%7",
         8, 9, 10, WG_D4(0), WG_D4(4))
WG_MMA_N(32,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15",
         16, 17, 18, WG_D16(0))
WG_MMA_N(40,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19",
         20, 21, 22, WG_D16(0), WG_D4(16))
WG_MMA_N(48,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23",
         24, 25, 26, WG_D16(0), WG_D4(16), WG_D4(20))
WG_MMA_N(64,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31",
         32, 33, 34, WG_D16(0), WG_D16(16))
WG_MMA_N(96,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
         "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47",
         48, 49, 50, WG_D16(0), WG_D16(16), WG_D16(32))
WG_MMA_N(128,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
         "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
         "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63",
         64, 65, 66, WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48))
WG_MMA_N(192,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
         "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
         "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
         "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
         "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95",
         96, 97, 98, WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48), WG_D16(64), WG_D16(80))
WG_MMA_N(256,
         "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
         "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
         "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
         "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
         "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
         "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
         "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
         "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127",
         128, 129, 130, WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48), WG_D16(64), WG_D16(80), WG_D16(96), WG_D16(112))
#undef WG_MMA_N
#undef WG_D16
#undef WG_D4

/* One 64-wide k tile (four k16 steps of m64nNk16, from operands at shared addresses a0
 * and b0, rows of 128 bytes) issued and committed as one group, in ascending k16 order:
 * d += a . b, but where acc0 is 0 the first step overwrites d (a part's first tile). */
constexpr int WG_BK = 64; /* wg_ktile's k tile: the callers' BK */
template <int N> __device__ __forceinline__ void wg_ktile(float *d, uint32_t a0, uint32_t b0, int acc0)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < WG_BK / 16; kk++)
        wg_mma_n<N>(d, wg_desc(a0 + kk * 32), wg_desc(b0 + kk * 32), acc0 | kk);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* f(e, row, col) for each of a thread's N / 2 accumulators of an m64nN wgmma tile:
 * element e = 4 i + r sits at row row0 + 16 (warp % 4) + lane / 4 + 8 (r / 2) and
 * column col0 + 8 i + 2 (lane % 4) + r % 2. */
template <int N = 128, class F> __device__ __forceinline__ void wg_each(int row0, int col0, F f)
{
    const int lane = threadIdx.x & 31, wr = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            f(4 * i + r, row0 + wr * 16 + (lane >> 2) + (r >> 1) * 8, col0 + i * 8 + (lane & 3) * 2 + (r & 1));
}

/* SwiGLU from an m64nW tile's own accumulators, gate columns 0..W/2-1 and up W/2..:
 * gate column c (element 4 i + r) and up column W/2 + c (element 4 (i + W/16) + r) are
 * the same thread's.  For each of its pairs of adjacent outputs (columns c, c + 1 of the
 * W/2; rows from row0) that keep(row, c) takes, f(row, c, v0, v1), v = swiglu_of(gate,
 * up): rows past m cost no arithmetic (a decode step's tile has one row of 64). */
template <int W, class K, class F> __device__ __forceinline__ void wg_swiglu_pairs(const float *d, int row0, K keep, F f)
{
    static_assert(W % 16 == 0, "gate and up columns in whole 8-column groups");
    const int lane = threadIdx.x & 31, wr = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int i = 0; i < W / 16; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) { /* elements 4 i + 2 h + {0, 1}: one row, two columns */
            const int e = 4 * i + 2 * h, eu = e + W / 4, row = row0 + wr * 16 + (lane >> 2) + 8 * h,
                      c = i * 8 + (lane & 3) * 2;
            if (keep(row, c))
                f(row, c, swiglu_of(d[e], d[eu]), swiglu_of(d[e + 1], d[eu + 1]));
        }
}

} // namespace CUK_NS
#endif /* CUK_HOPPER */
#endif
