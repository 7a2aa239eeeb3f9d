/* Row kernels: RMSNorm (each row one block's), the embedding gather, and copy-on-write
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

/* Rows up to NORM_THREADS * HELD floats are read into registers at once (all the loads
 * in flight, not one a loop turn: a decode step's norms are latency-bound); the sums are
 * the loop's, element i by thread i % NORM_THREADS in ascending i, whatever HELD is (the
 * smallest that holds the row: registers for a row of 8,192 let three blocks on an SM,
 * for one of 1,024 eight).  A block takes rows blockIdx.x, + gridDim.x, ... with the
 * next row's loads in flight during this one's sum (up to rows of 4,096: past that the
 * registers would cost blocks): a long step's rows stream through blocks that fill the
 * card once.  HELD 0: rows of any length, a loop. */
template <int HELD> struct norm_row {
    float v[HELD > 0 ? HELD : 1];
};

template <int HELD>
__device__ __forceinline__ void norm_load(norm_row<HELD> &x, const float *__restrict__ src, int dim)
{
#pragma unroll
    for (int j = 0; j < HELD; j++) {
        const int i = threadIdx.x + j * NORM_THREADS;
        x.v[j] = i < dim ? src[i] : 0.0f;
    }
}

__device__ __forceinline__ const float *norm_src(const struct cuda_rmsnorm &a, int r)
{
    return a.x + (size_t)(a.x_rows ? a.x_rows[r] : r) * a.dim;
}

__device__ __forceinline__ void norm_put(const struct cuda_rmsnorm &a, int r, int i, float y)
{
    if (a.y_f32)
        a.y_f32[(size_t)r * a.dim + i] = y;
    if (a.y_bf16)
        a.y_bf16[(size_t)r * a.dim + i] = f32_to_bf16(y);
}

__device__ __forceinline__ float norm_inv(float ss, int dim, float eps)
{
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)dim), eps)));
}

template <int HELD> __global__ void __launch_bounds__(NORM_THREADS) rmsnorm_kernel(struct cuda_rmsnorm a)
{
    __shared__ float red[NORM_THREADS / 32];
    /* klaunch: everything after the wait (with the weights loaded before it, ncu gave
     * 6.4 us a 30B-A3B norm against 3.7: the row's loads want to be in flight together) */
    pdl_wait();
    pdl_release();
    const float *__restrict__ w = a.w;
    if (HELD == 0) {
        for (int r = blockIdx.x; r < a.rows; r += gridDim.x) {
            const float *__restrict__ x = norm_src(a, r);
            float ss = 0.0f;
            for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS)
                ss = fmaf(x[i], x[i], ss);
            const float inv = norm_inv(block_sum(ss, red), a.dim, a.eps);
            for (int i = threadIdx.x; i < a.dim; i += NORM_THREADS)
                norm_put(a, r, i, __fmul_rn(w[i], __fmul_rn(x[i], inv)));
        }
        return;
    }
    constexpr bool AHEAD = HELD <= 16;
    norm_row<HELD> wv, xv, nv;
    norm_load(xv, norm_src(a, blockIdx.x), a.dim); /* the grid is at most the rows */
    norm_load(wv, w, a.dim);
    for (int r = blockIdx.x; r < a.rows; r += gridDim.x) {
        if (!AHEAD && r != (int)blockIdx.x)
            norm_load(xv, norm_src(a, r), a.dim);
        if (AHEAD && r + (int)gridDim.x < a.rows)
            norm_load(nv, norm_src(a, r + gridDim.x), a.dim);
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < HELD; j++)
            if (threadIdx.x + j * NORM_THREADS < a.dim)
                ss = fmaf(xv.v[j], xv.v[j], ss);
        const float inv = norm_inv(block_sum(ss, red), a.dim, a.eps);
#pragma unroll
        for (int j = 0; j < HELD; j++) {
            const int i = threadIdx.x + j * NORM_THREADS;
            if (i < a.dim)
                norm_put(a, r, i, __fmul_rn(wv.v[j], __fmul_rn(xv.v[j], inv)));
        }
        if (AHEAD)
            xv = nv;
    }
}

/* Blocks of an rmsnorm launch at most, by build (HELD 4, 8, 16, 32, 0): as many as fill
 * the card once (norm_prepare). */
int g_norm_blocks[5] = {1024, 1024, 1024, 1024, 1024};

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

/* The builds by HELD (4, 8, 16, 32, 0), as g_norm_blocks counts them. */
void (*const norm_kernels[5])(struct cuda_rmsnorm) = {rmsnorm_kernel<4>, rmsnorm_kernel<8>, rmsnorm_kernel<16>,
                                                      rmsnorm_kernel<32>, rmsnorm_kernel<0>};

} // namespace

enum hr_status rmsnorm(const struct cuda_rmsnorm *a, void *stream, char *err, size_t errlen)
{
    if (a->rows < 0 || a->dim <= 0 || !a->x || !a->w || (!a->y_f32 && !a->y_bf16))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda rmsnorm: bad arguments (rows=%d dim=%d)", a->rows, a->dim);
    if (a->rows == 0)
        return HR_OK;
    const int held = (a->dim + NORM_THREADS - 1) / NORM_THREADS;
    const int b = held <= 4 ? 0 : held <= 8 ? 1 : held <= 16 ? 2 : held <= 32 ? 3 : 4;
    const int grid = a->rows < g_norm_blocks[b] ? a->rows : g_norm_blocks[b]; /* a launch shape: a row is one block's */
    klaunch(norm_kernels[b], grid, NORM_THREADS, 0, (cudaStream_t)stream, *a);
    return launch_status("rmsnorm", err, errlen);
}

void norm_prepare(int sm_count)
{
    for (int b = 0; b < 5; b++) { /* the blocks an SM holds at once of each build */
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_kernels[b], NORM_THREADS, 0) != cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        g_norm_blocks[b] = sm_count * per_sm;
    }
    (void)cudaGetLastError();
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
