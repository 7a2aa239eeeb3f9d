/* Attention over the paged, layer-major KV store: the fused q/k norm + RoPE + K/V
 * write, and the causal attention itself, one path for prefill, chunked prefill,
 * append and decode.
 *
 * A block of the attention kernel takes one KV head and a query block (consecutive
 * tokens of one row) with every query head that shares the KV head (GQA packing: the
 * K/V tile is read once for all of them).  Each (token, head) row walks positions
 * from 0 to its own position in tiles of ATTN_TILE at fixed absolute positions, with
 * an online softmax; a row sits out the tiles past its position, and masked places
 * weigh exactly 0.  Long rows are cut into splits of CUDA_ATTN_SPLIT positions (again
 * at fixed absolute positions, one block each, so decode has enough blocks), and a
 * row with more than one split is combined by attn_combine in split order.  Every
 * reduction is one thread's loop or a fixed xor tree over a warp: the bits of a row
 * depend on its position, its query and the KV values only, not on the batch, the
 * chunking of the prompt or the physical block ids. */
#include <math.h>

#include "kernels/cuda/common.cuh"

namespace CUK_NS {

namespace {

constexpr int HD = 128;        /* head_dim these kernels are built for */
constexpr int ATTN_TILE = 32;  /* positions per tile */
constexpr int ATTN_THREADS = HD; /* thread d owns output dimension d */
constexpr int R = CUDA_ATTN_ROWS;
static_assert(CUDA_ATTN_SPLIT % ATTN_TILE == 0, "splits end on tile boundaries");

__device__ __forceinline__ size_t kv_off(const struct cuda_kv &kv, int layer, int blk, int sel, int kvh)
{
    return ((((size_t)layer * kv.n_blocks + blk) * 2 + sel) * kv.n_kv_heads + kvh) * (size_t)kv.block_size * HD;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* One token a block; a warp a head row (q heads, then k heads); then v. */
__global__ void prep_kernel(struct cuda_attn_prep a, struct cuda_attn_batch b)
{
    __shared__ float cs[HD / 2][2];
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int pos = b.positions[t];
    if (threadIdx.x < HD / 2) {
        int i = threadIdx.x;
        double inv_freq = pow(a.rope_theta, -(double)(2 * i) / (double)HD);
        double ang = (double)pos * inv_freq;
        cs[i][0] = (float)cos(ang);
        cs[i][1] = (float)sin(ang);
    }
    __syncthreads();
    const int nkv = a.kv.n_kv_heads, bs = a.kv.block_size;
    const int64_t slot = b.slots[t];
    const int blk = (int)(slot / bs), off = (int)(slot % bs);
    const bool store_ok = slot >= 0 && blk < a.kv.n_blocks;
    for (int hh = warp; hh < a.n_heads + nkv; hh += nw) {
        bool isq = hh < a.n_heads;
        const float *src = isq ? a.q + ((size_t)t * a.n_heads + hh) * HD : a.k + ((size_t)t * nkv + (hh - a.n_heads)) * HD;
        const float *w = isq ? a.q_norm : a.k_norm;
        float x[4];
        for (int j = 0; j < 4; j++)
            x[j] = src[lane + 32 * j];
        float ss = 0.0f;
        for (int j = 0; j < 4; j++)
            ss = fmaf(x[j], x[j], ss);
        ss = warp_sum(ss);
        float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)HD), a.eps)));
        float y[4];
        for (int j = 0; j < 4; j++)
            y[j] = __fmul_rn(w[lane + 32 * j], __fmul_rn(x[j], inv));
        /* halves rotated: element i pairs with i + HD/2 (lanes' j and j + 2) */
        float o[4];
        for (int j = 0; j < 2; j++) {
            float co = cs[lane + 32 * j][0], si = cs[lane + 32 * j][1];
            float x1 = y[j], x2 = y[j + 2];
            o[j] = __fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si));
            o[j + 2] = __fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si));
        }
        if (isq) {
            float *dst = a.q + ((size_t)t * a.n_heads + hh) * HD;
            for (int j = 0; j < 4; j++)
                dst[lane + 32 * j] = o[j];
        } else if (store_ok) {
            uint16_t *dst = a.kv.slab + kv_off(a.kv, a.layer, blk, 0, hh - a.n_heads) + (size_t)off * HD;
            for (int j = 0; j < 4; j++)
                dst[lane + 32 * j] = f32_to_bf16(o[j]);
        }
    }
    if (!store_ok)
        return;
    for (int i = threadIdx.x; i < nkv * HD; i += blockDim.x) {
        int kvh = i / HD, d = i % HD;
        a.kv.slab[kv_off(a.kv, a.layer, blk, 1, kvh) + (size_t)off * HD + d] =
            f32_to_bf16(a.v[((size_t)t * nkv + kvh) * HD + d]);
    }
}

struct attn_smem {
    float q[R][HD];
    float k[ATTN_TILE][HD + 1]; /* padded: lane j reads row j, conflict-free */
    float v[ATTN_TILE][HD];
    float p[R][ATTN_TILE];
    float m[R], l[R], corr[R];
    int skip[R];
};

/* K/V words of one tile this thread loads: 2 * ATTN_TILE * HD / 8 / ATTN_THREADS. */
constexpr int TILE_WORDS = 2 * ATTN_TILE * HD / 8 / ATTN_THREADS;

__device__ __forceinline__ void tile_fetch(uint4 (&w)[TILE_WORDS], const struct cuda_attention &a, const int32_t *table,
                                           int kvh, int p0, int p_end)
{
    const int bs = a.kv.block_size;
#pragma unroll
    for (int u = 0; u < TILE_WORDS; u++) {
        int c = threadIdx.x + ATTN_THREADS * u;
        int sel = c / (ATTN_TILE * HD / 8), rem = c % (ATTN_TILE * HD / 8);
        int j = rem / (HD / 8), d8 = (rem % (HD / 8)) * 8;
        int p = p0 + j;
        if (p < p_end) {
            int blk = table[p / bs];
            w[u] = *(const uint4 *)(a.kv.slab + kv_off(a.kv, a.layer, blk, sel, kvh) + (size_t)(p % bs) * HD + d8);
        } else {
            w[u] = make_uint4(0, 0, 0, 0); /* past the last position: weighs 0, must not be NaN */
        }
    }
}

__device__ __forceinline__ void tile_store(attn_smem &sm, const uint4 (&w)[TILE_WORDS])
{
#pragma unroll
    for (int u = 0; u < TILE_WORDS; u++) {
        int c = threadIdx.x + ATTN_THREADS * u;
        int sel = c / (ATTN_TILE * HD / 8), rem = c % (ATTN_TILE * HD / 8);
        int j = rem / (HD / 8), d8 = (rem % (HD / 8)) * 8;
        const uint32_t ws[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
        float *dst = sel ? &sm.v[j][d8] : &sm.k[j][d8];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            dst[2 * e] = __uint_as_float(ws[e] << 16);
            dst[2 * e + 1] = __uint_as_float(ws[e] & 0xffff0000u);
        }
    }
}

__global__ void __launch_bounds__(ATTN_THREADS) attn_kernel(struct cuda_attention a, struct cuda_attn_batch b,
                                                            int group, int max_splits, float *work)
{
    __shared__ attn_smem sm;
    const int qb = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t0 = b.qblocks[2 * qb], ntok = b.qblocks[2 * qb + 1];
    const int rows = ntok * group;
    const int pos_last = b.positions[t0 + ntok - 1];
    const int p_begin = s * CUDA_ATTN_SPLIT;
    if (p_begin > pos_last)
        return;
    const int p_end = min(p_begin + CUDA_ATTN_SPLIT, pos_last + 1);
    const int32_t *table = b.tables + b.row_table[b.tok_row[t0]];

    for (int i = tid; i < rows * HD; i += ATTN_THREADS) {
        int r = i / HD, d = i % HD;
        int tok = t0 + r / group, h = kvh * group + r % group;
        sm.q[r][d] = a.q[((size_t)tok * a.n_heads + h) * HD + d];
    }
    if (tid < R) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;

    uint4 w[TILE_WORDS];
    tile_fetch(w, a, table, kvh, p_begin, p_end);
    for (int p0 = p_begin; p0 < p_end; p0 += ATTN_TILE) {
        __syncthreads(); /* the previous tile is used up */
        tile_store(sm, w);
        __syncthreads();
        if (p0 + ATTN_TILE < p_end)
            tile_fetch(w, a, table, kvh, p0 + ATTN_TILE, p_end); /* in flight during this tile */

        /* scores: position j = lane, rows warp, warp + 4, warp + 8, warp + 12: each
         * k[j][d] read once for the thread's rows (q rows are broadcasts); each score is
         * still one fmaf chain over d in ascending order */
        {
            constexpr int RSTEP = ATTN_THREADS / 32, RPER = R / RSTEP;
            const int j = lane;
            float d0[RPER];
            bool live[RPER];
#pragma unroll
            for (int i = 0; i < RPER; i++) {
                int r = warp + i * RSTEP;
                d0[i] = 0.0f;
                live[i] = r < rows && p0 + j <= b.positions[t0 + r / group];
            }
            bool any = false;
#pragma unroll
            for (int i = 0; i < RPER; i++)
                any |= live[i];
            if (any) { /* a dead row's sum is computed and dropped */
#pragma unroll 8
                for (int d = 0; d < HD; d++) {
                    float kd = sm.k[j][d];
#pragma unroll
                    for (int i = 0; i < RPER; i++)
                        d0[i] = fmaf(sm.q[warp + i * RSTEP][d], kd, d0[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < RPER; i++) {
                int r = warp + i * RSTEP;
                if (r < rows)
                    sm.p[r][j] = live[i] ? __fmul_rn(d0[i], a.scale) : -INFINITY;
            }
        }
        __syncthreads();
        /* online softmax: a warp per row */
        for (int r = warp; r < rows; r += ATTN_THREADS / 32) {
            int pos_r = b.positions[t0 + r / group];
            if (p0 > pos_r) {
                if (lane == 0)
                    sm.skip[r] = 1;
                continue;
            }
            float sc = sm.p[r][lane];
            float m_old = sm.m[r];
            float m_new = fmaxf(m_old, warp_max(sc));
            float pj = expf(__fsub_rn(sc, m_new));
            float psum = warp_sum(pj);
            sm.p[r][lane] = pj;
            __syncwarp();
            if (lane == 0) {
                float corr = expf(__fsub_rn(m_old, m_new));
                sm.corr[r] = corr;
                sm.l[r] = __fadd_rn(__fmul_rn(sm.l[r], corr), psum);
                sm.m[r] = m_new;
                sm.skip[r] = 0;
            }
        }
        __syncthreads();
        /* acc[r] (dimension tid) = acc * corr + sum_j p[r][j] v[j]: v[j][tid] read once
         * for every row; each row's sum is still one fmaf chain over j in order */
        {
            float pv[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                pv[r] = 0.0f;
#pragma unroll 4
            for (int j = 0; j < ATTN_TILE; j++) {
                float vj = sm.v[j][tid];
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < rows)
                        pv[r] = fmaf(sm.p[r][j], vj, pv[r]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r >= rows || sm.skip[r])
                    continue;
                acc[r] = __fadd_rn(__fmul_rn(acc[r], sm.corr[r]), pv[r]);
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r >= rows)
            continue;
        int tok = t0 + r / group, h = kvh * group + r % group;
        int pos_r = b.positions[tok];
        if (pos_r < p_begin)
            continue; /* this split lies wholly past the token */
        size_t at = ((size_t)tok * a.n_heads + h) * HD + tid;
        if (pos_r / CUDA_ATTN_SPLIT == 0) {
            float o = __fdiv_rn(acc[r], sm.l[r]);
            if (a.out_f32)
                a.out_f32[at] = o;
            if (a.out_bf16)
                a.out_bf16[at] = f32_to_bf16(o);
        } else {
            float *wp = work + (((size_t)tok * a.n_heads + h) * max_splits + s) * (HD + 2);
            wp[tid] = acc[r];
            if (tid == 0) {
                wp[HD] = sm.m[r];
                wp[HD + 1] = sm.l[r];
            }
        }
    }
}

/* A (token, head) row with more than one split: its splits merged in order. */
__global__ void __launch_bounds__(HD) attn_combine(struct cuda_attention a, struct cuda_attn_batch b, int max_splits,
                                                   const float *work)
{
    int row = blockIdx.x, tok = row / a.n_heads, d = threadIdx.x;
    int ns = b.positions[tok] / CUDA_ATTN_SPLIT + 1;
    if (ns == 1)
        return;
    const float *wp = work + (size_t)row * max_splits * (HD + 2);
    float mx = wp[HD];
    for (int s = 1; s < ns; s++)
        mx = fmaxf(mx, wp[s * (HD + 2) + HD]);
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < ns; s++) {
        const float *ws = wp + s * (HD + 2);
        float e = expf(__fsub_rn(ws[HD], mx));
        num = s ? __fadd_rn(num, __fmul_rn(ws[d], e)) : __fmul_rn(ws[d], e);
        den = s ? __fadd_rn(den, __fmul_rn(ws[HD + 1], e)) : __fmul_rn(ws[HD + 1], e);
    }
    float o = __fdiv_rn(num, den);
    size_t at = (size_t)row * HD + d;
    if (a.out_f32)
        a.out_f32[at] = o;
    if (a.out_bf16)
        a.out_bf16[at] = f32_to_bf16(o);
}

int splits_of(int max_kv)
{
    return max_kv <= 0 ? 1 : (max_kv + CUDA_ATTN_SPLIT - 1) / CUDA_ATTN_SPLIT;
}

enum hr_status check_kv(const struct cuda_kv *kv, int layer, const char *what, char *err, size_t errlen)
{
    if (!kv->slab || kv->head_dim != HD || kv->block_size <= 0 || kv->n_kv_heads <= 0 || kv->n_blocks <= 0 ||
        layer < 0 || layer >= kv->n_layers)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "cuda %s: bad KV store or layer (head_dim %d, built for %d; layer %d of %d)", what, kv->head_dim,
                      HD, layer, kv->n_layers);
    return HR_OK;
}

} // namespace

enum hr_status attn_prep(const struct cuda_attn_prep *a, void *stream, char *err, size_t errlen)
{
    enum hr_status st = check_kv(&a->kv, a->layer, "attn_prep", err, errlen);
    if (st)
        return st;
    if (!a->b || !a->q || !a->k || !a->v || !a->q_norm || !a->k_norm || a->n_heads <= 0 || a->b->n_tok < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attn_prep: bad arguments");
    if (a->b->n_tok == 0)
        return HR_OK;
    prep_kernel<<<a->b->n_tok, 256, 0, (cudaStream_t)stream>>>(*a, *a->b);
    return launch_status("attn_prep", err, errlen);
}

size_t attn_workspace(int n_tok, int n_heads, int head_dim, int max_kv)
{
    int ns = splits_of(max_kv);
    return ns == 1 ? 0 : (size_t)n_tok * n_heads * ns * (head_dim + 2) * sizeof(float);
}

enum hr_status attention(const struct cuda_attention *a, void *stream, char *err, size_t errlen)
{
    enum hr_status st = check_kv(&a->kv, a->layer, "attention", err, errlen);
    if (st)
        return st;
    const struct cuda_attn_batch *b = a->b;
    if (!b || !a->q || (!a->out_f32 && !a->out_bf16) || a->n_heads <= 0 || a->n_heads % a->kv.n_kv_heads)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: bad arguments");
    int group = a->n_heads / a->kv.n_kv_heads;
    if (group > R)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "cuda attention: %d query heads per KV head (at most %d)", group,
                      R);
    if (b->n_tok == 0 || b->n_qblocks == 0)
        return HR_OK;
    int ns = splits_of(b->max_kv);
    size_t need = attn_workspace(b->n_tok, a->n_heads, HD, b->max_kv);
    if (need && (!a->work || a->work_bytes < need))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: workspace of %zu bytes needed, %zu given", need,
                      a->work_bytes);
    if (b->n_qblocks > 0x7fffffff || a->kv.n_kv_heads > 65535 || ns > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: grid too large");
    dim3 grid(b->n_qblocks, a->kv.n_kv_heads, ns);
    cudaStream_t s = (cudaStream_t)stream;
    attn_kernel<<<grid, ATTN_THREADS, 0, s>>>(*a, *b, group, ns, (float *)a->work);
    if ((st = launch_status("attention", err, errlen)))
        return st;
    if (ns > 1) {
        attn_combine<<<b->n_tok * a->n_heads, HD, 0, s>>>(*a, *b, ns, (const float *)a->work);
        st = launch_status("attention combine", err, errlen);
    }
    return st;
}

} // namespace CUK_NS
