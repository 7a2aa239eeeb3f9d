/* Row kernels: RMSNorm (one row per block), the embedding gather, and copy-on-write
 * block copies.  Each row's reduction has one order, fixed by the row length and the
 * block size (a constant), so rows come out the same whatever their neighbours. */
#include "kernels/cuda/common.cuh"

namespace CUK_NS {

namespace {

constexpr int NORM_THREADS = 256;

/* Sum of v over the block in a fixed order: a xor tree within each warp, then the
 * warp sums one after another.  Every thread gets the result. */
__device__ float block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float s = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        s = __fadd_rn(s, red[w]);
    __syncthreads();
    return s;
}

/* Rows up to NORM_THREADS * NORM_HELD floats are read into registers at once (all the
 * loads in flight, not one a loop turn: a decode step's norms are latency-bound); the
 * sums are the loop's, element i by thread i % NORM_THREADS in ascending i. */
constexpr int NORM_HELD = 32;

__global__ void __launch_bounds__(NORM_THREADS) rmsnorm_kernel(struct cuda_rmsnorm a)
{
    __shared__ float red[NORM_THREADS / 32];
    int r = blockIdx.x;
    /* klaunch: everything after the wait (with the weights loaded before it, ncu gave
     * 6.4 us a 30B-A3B norm against 3.7: the row's loads want to be in flight together) */
    pdl_wait();
    pdl_release();
    const float *__restrict__ x = a.x + (size_t)(a.x_rows ? a.x_rows[r] : r) * a.dim;
    const float *__restrict__ w = a.w;
    float ss = 0.0f;
    if (a.dim <= NORM_THREADS * NORM_HELD) {
        float xv[NORM_HELD], wv[NORM_HELD];
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++) {
            int i = threadIdx.x + j * NORM_THREADS;
            xv[j] = i < a.dim ? x[i] : 0.0f;
            wv[j] = i < a.dim ? w[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++)
            if (threadIdx.x + j * NORM_THREADS < a.dim)
                ss = fmaf(xv[j], xv[j], ss);
        ss = block_sum(ss, red);
        float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)a.dim), a.eps)));
#pragma unroll
        for (int j = 0; j < NORM_HELD; j++) {
            int i = threadIdx.x + j * NORM_THREADS;
            if (i >= a.dim)
                break;
            float y = __fmul_rn(wv[j], __fmul_rn(xv[j], inv));
            if (a.y_f32)
                a.y_f32[(size_t)r * a.dim + i] = y;
            if (a.y_bf16)
                a.y_bf16[(size_t)r * a.dim + i] = f32_to_bf16(y);
        }
        return;
    }
    for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS)
        ss = fmaf(x[i], x[i], ss);
    ss = block_sum(ss, red);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)a.dim), a.eps)));
    for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS) {
        float y = __fmul_rn(w[i], __fmul_rn(x[i], inv));
        if (a.y_f32)
            a.y_f32[(size_t)r * a.dim + i] = y;
        if (a.y_bf16)
            a.y_bf16[(size_t)r * a.dim + i] = f32_to_bf16(y);
    }
}

__global__ void embed_kernel(struct cuda_embed a)
{
    int t = blockIdx.x;
    int id = a.tokens[t];
    float *out = a.out + (size_t)t * a.dim;
    bool ok = id >= 0 && id < a.vocab;
    const uint16_t *row = a.table + (size_t)(ok ? id : 0) * a.dim;
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x)
        out[i] = ok ? bf16_to_f32(row[i]) : 0.0f;
}

/* Block (pair blockIdx.x, layer blockIdx.y): one layer's slice, 16 bytes a thread. */
__global__ void block_copy_kernel(struct cuda_block_copy a, size_t slice_words)
{
    int src = a.pairs[2 * blockIdx.x], dst = a.pairs[2 * blockIdx.x + 1];
    if (src < 0 || src >= a.kv.n_blocks || dst < 0 || dst >= a.kv.n_blocks)
        return; /* validated on the host; never written out of the store */
    size_t layer = blockIdx.y;
    const uint4 *s = (const uint4 *)a.kv.slab + (layer * a.kv.n_blocks + (size_t)src) * slice_words;
    uint4 *d = (uint4 *)a.kv.slab + (layer * a.kv.n_blocks + (size_t)dst) * slice_words;
    for (size_t i = threadIdx.x; i < slice_words; i += blockDim.x)
        d[i] = s[i];
}

} // namespace

enum hr_status rmsnorm(const struct cuda_rmsnorm *a, void *stream, char *err, size_t errlen)
{
    if (a->rows < 0 || a->dim <= 0 || !a->x || !a->w || (!a->y_f32 && !a->y_bf16))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda rmsnorm: bad arguments (rows=%d dim=%d)", a->rows, a->dim);
    if (a->rows == 0)
        return HR_OK;
    klaunch(rmsnorm_kernel, a->rows, NORM_THREADS, 0, (cudaStream_t)stream, *a);
    return launch_status("rmsnorm", err, errlen);
}

enum hr_status embed(const struct cuda_embed *a, void *stream, char *err, size_t errlen)
{
    if (a->n_tok < 0 || a->dim <= 0 || a->vocab <= 0 || !a->out || !a->table || !a->tokens)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda embed: bad arguments");
    if (a->n_tok == 0)
        return HR_OK;
    embed_kernel<<<a->n_tok, 256, 0, (cudaStream_t)stream>>>(*a);
    return launch_status("embed", err, errlen);
}

enum hr_status block_copy(const struct cuda_block_copy *a, void *stream, char *err, size_t errlen)
{
    size_t slice = (size_t)2 * a->kv.n_kv_heads * a->kv.block_size * a->kv.head_dim * sizeof(uint16_t);
    if (a->n < 0 || !a->kv.slab || slice % 16 || a->kv.n_layers <= 0 || a->kv.n_layers > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda block copy: bad arguments");
    if (a->n == 0)
        return HR_OK;
    dim3 grid(a->n, a->kv.n_layers);
    block_copy_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(*a, slice / 16);
    return launch_status("block copy", err, errlen);
}

} // namespace CUK_NS
