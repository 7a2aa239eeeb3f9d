/* Elementwise steps the CUDA backend needs between its kernels: the f32 activations
 * rounded to bf16 for a GEMM's input (round to nearest even, the one rounding), and a
 * gather of rows (the logits rows of a step).  None reduces anything.  (bf16 widened
 * to f32 is the SwiGLU GEMM's own epilogue: cuda_gemm.y_f32.) */
#include "kernels/cuda/common.cuh"

namespace CUK_NS {

namespace {

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    pdl_wait(); /* klaunch: the kernel before wrote src */
    pdl_release();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = f32_to_bf16(src[i]);
}

__global__ void gather_rows_kernel(float *dst, const float *src, const int32_t *rows, int dim)
{
    pdl_wait();
    pdl_release();
    const float *s = src + (size_t)rows[blockIdx.x] * dim;
    float *d = dst + (size_t)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        d[i] = s[i];
}

} // namespace

enum hr_status to_bf16(uint16_t *dst, const float *src, size_t n, void *stream, char *err, size_t errlen)
{
    if (!n)
        return HR_OK;
    if (!dst || !src)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda to_bf16: bad arguments");
    size_t blocks = (n + 255) / 256;
    klaunch(to_bf16_kernel, (unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, (cudaStream_t)stream, dst, src, n);
    return launch_status("to_bf16", err, errlen);
}

enum hr_status gather_rows(float *dst, const float *src, const int32_t *rows, int n, int dim, void *stream, char *err,
                           size_t errlen)
{
    if (!n)
        return HR_OK;
    if (!dst || !src || !rows || n < 0 || dim <= 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gather_rows: bad arguments");
    klaunch(gather_rows_kernel, n, 128, 0, (cudaStream_t)stream, dst, src, rows, dim);
    return launch_status("gather_rows", err, errlen);
}

} // namespace CUK_NS
