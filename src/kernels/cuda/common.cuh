/* Shared by the variant sources (gemm.cu, norm.cu, attention.cu, variant.cu): each
 * is compiled once per variant with CUK_VARIANT naming it, and everything it defines
 * lives in that variant's namespace, so the copies link side by side. */
#ifndef HEARTH_KERNELS_CUDA_COMMON_CUH
#define HEARTH_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <utility>

#include "kernels/cuda/cuda_kernels.h"

#ifndef CUK_VARIANT
#error "CUK_VARIANT must name the kernel variant (sm90a, sm80)"
#endif
#define CUK_CAT2(a, b) a##b
#define CUK_CAT(a, b) CUK_CAT2(a, b)
#define CUK_NS CUK_CAT(cuk_, CUK_VARIANT)
#define CUK_STR2(a) #a
#define CUK_STR(a) CUK_STR2(a)

namespace CUK_NS {

/* bf16 bits <-> float: widening is exact; narrowing rounds to nearest even. */
__device__ __forceinline__ float bf16_to_f32(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}
__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Two adjacent bf16 values in one 32-bit word, lo at the lower address: one store. */
__device__ __forceinline__ uint32_t bf16_pair(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi)
{
    return bf16_pair(f32_to_bf16(lo), f32_to_bf16(hi));
}

/* SwiGLU of gate g and up u, silu(g) u: every kernel's one sequence of operations. */
__device__ __forceinline__ float swiglu_of(float g, float u)
{
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

/* Programmatic dependent launch (Hopper; HEARTH_CUDA_PDL, see variant.cu).  A kernel
 * launched by klaunch may start while the kernel before it in the stream still runs:
 * until pdl_wait() it may touch only what no kernel of the step writes (weights, the
 * launch's parameters, the batch's index arrays copied in before the step's first
 * kernel), and every block must reach pdl_wait() (a block that left before it could
 * let the next kernel pass a predecessor still running).  pdl_release() lets the next
 * kernel's blocks start their own preamble.  The arithmetic is untouched: bits are
 * the same with and without.  Elsewhere both are no-ops and launches are plain. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

extern bool g_pdl; /* this variant's launches are programmatic (variant.cu) */

/* A launch, programmatic where g_pdl; cz > 1 groups the blocks of each z run of cz into
 * a thread-block cluster (Hopper: their shared memory is one another's, DSMEM). */
template <typename... P, typename... A>
void klaunch_cz(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, int cz, A &&...args)
{
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = st;
    cudaLaunchAttribute at[2];
    int n = 0;
    if (g_pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cz > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = 1;
        at[n].val.clusterDim.y = 1;
        at[n++].val.clusterDim.z = (unsigned)cz;
    }
    c.attrs = n ? at : NULL;
    c.numAttrs = (unsigned)n;
    cudaLaunchKernelEx(&c, kernel, std::forward<A>(args)...);
}

template <typename... P, typename... A>
void klaunch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A &&...args)
{
    klaunch_cz(kernel, grid, block, smem, st, 1, std::forward<A>(args)...);
}

/* The launch's error as a status (checked after every launch). */
static inline enum hr_status launch_status(const char *what, char *err, size_t errlen)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "cuda %s (%s): %s", what, CUK_STR(CUK_VARIANT),
                      cudaGetErrorString(e));
    return HR_OK;
}

/* The kernels of this variant (variant.cu gathers them into the table). */
enum hr_status gemm_prepare(int sm_count, char *err, size_t errlen);
int gemm_split(int n, int k, enum cuda_epi epi);
size_t gemm_workspace(int m, int n, int k, enum cuda_epi epi);
size_t gemm_tickets(int m, int n, int k, enum cuda_epi epi);
const char *gemm_tile_name(int n, int k, enum cuda_epi epi);
const char *gemm_tag(void);
enum hr_status gemm(const struct cuda_gemm *g, void *stream, char *err, size_t errlen);
enum hr_status rmsnorm(const struct cuda_rmsnorm *a, void *stream, char *err, size_t errlen);
enum hr_status embed(const struct cuda_embed *a, void *stream, char *err, size_t errlen);
enum hr_status block_copy(const struct cuda_block_copy *a, void *stream, char *err, size_t errlen);
enum hr_status attn_prepare(int sm_count, char *err, size_t errlen);
enum hr_status attn_prep(const struct cuda_attn_prep *a, void *stream, char *err, size_t errlen);
size_t attn_workspace(int n_tok, int n_heads, int head_dim, int max_kv);
enum hr_status attention(const struct cuda_attention *a, void *stream, char *err, size_t errlen);
enum hr_status to_bf16(uint16_t *dst, const float *src, size_t n, void *stream, char *err, size_t errlen);
enum hr_status moe_prepare(int sm_count, char *err, size_t errlen);
size_t moe_workspace(int n_tok, int hidden, int inter, int n_experts, int top_k);
enum hr_status moe(const struct cuda_moe *a, void *stream, char *err, size_t errlen);
void sample_prepare(void);
void norm_prepare(int sm_count);
enum hr_status sample(const struct cuda_sample *a, void *stream, char *err, size_t errlen);
enum hr_status gather_rows(float *dst, const float *src, const int32_t *rows, int n, int dim, void *stream, char *err,
                           size_t errlen);

} // namespace CUK_NS

#endif
