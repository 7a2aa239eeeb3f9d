/* Attention over the paged, layer-major KV store: the fused q/k norm + RoPE + K/V
 * write, and the causal attention itself, one path for prefill, chunked prefill,
 * append and decode.
 *
 * A block of the attention kernel takes one KV head and a query block (consecutive
 * tokens of one row) with every query head that shares the KV head (GQA packing: the
 * K/V tile is read once for all of them).  Each (token, head) row walks positions
 * from 0 to its own position in tiles of KT at fixed absolute positions, with an
 * online softmax on the tensor cores (attn_kernel says how); masked places weigh
 * exactly 0, and tiles wholly past a row's position change none of its bits.  A block
 * of at most 16 rows (a decode token) spreads each tile over its four warps
 * (walk_split) with the same operations in the same order.  Long rows are cut into
 * splits of CUDA_ATTN_SPLIT positions (again at fixed absolute positions: one block
 * each where a block has at most 16 rows, so decode has enough blocks; a prompt's
 * larger blocks walk their splits one after another), and a row with more than one
 * split is merged in split order, by the last of a small block's splits or by the
 * larger block itself.  Every reduction is one thread's loop or a fixed xor tree over a
 * warp: the bits of a row depend on its position, its query and the KV values only,
 * not on the batch, the chunking of the prompt or the physical block ids. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace CUK_NS {

namespace {

constexpr int HD = 128;        /* head_dim these kernels are built for */
constexpr int PREP_ONE_BLOCK = 512; /* prep_kernel: from this many tokens one block a token */

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

/* Block (token, g): a warp a head row (rows 8g .. 8g + 7 of the q heads then the k
 * heads), and the g-th share of the token's v; several blocks a token so that a
 * decode step's few tokens still fill the card (a row's arithmetic is its warp's
 * alone, whatever the grid). */
__global__ void prep_kernel(struct cuda_attn_prep a, struct cuda_attn_batch b)
{
    __shared__ float cs[HD / 2][2];
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = blockIdx.y, ng = gridDim.y;
    const int pos = b.positions[t];
    if (threadIdx.x < HD / 2) {
        int i = threadIdx.x;
        double inv_freq = pow(a.rope_theta, -(double)(2 * i) / (double)HD);
        double ang = (double)pos * inv_freq;
        cs[i][0] = (float)cos(ang);
        cs[i][1] = (float)sin(ang);
    }
    __syncthreads();
    pdl_wait(); /* q, k and v come from the kernel before (klaunch); RoPE's table did not */
    pdl_release();
    const int nkv = a.kv.n_kv_heads, bs = a.kv.block_size;
    const int64_t slot = b.slots[t];
    const int blk = (int)(slot / bs), off = (int)(slot % bs);
    const bool store_ok = slot >= 0 && blk < a.kv.n_blocks;
    for (int hh = g * nw + warp; hh < a.n_heads + nkv; hh += nw * ng) {
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
    for (int i = g * blockDim.x + threadIdx.x; i < nkv * HD; i += blockDim.x * ng) {
        int kvh = i / HD, d = i % HD;
        a.kv.slab[kv_off(a.kv, a.layer, blk, 1, kvh) + (size_t)off * HD + d] =
            f32_to_bf16(a.v[((size_t)t * nkv + kvh) * HD + d]);
    }
}

/* The walk on the tensor cores.  A block is four warps; warp w owns query rows
 * 16w .. 16w + 15 of the block (one m16 tile) and takes every tile of KT positions
 * whole: scores S = q . K^T by mma m16n8k16 over d in ascending k16 steps, the online
 * softmax on S's accumulators (a row's max and sum: the thread's 16 values in order,
 * then its quad's xor tree), O = O * corr + P . V by mma over the tile's positions in
 * ascending k16 steps.  q and P are f32; each goes in as two bf16 halves (hi + lo, the
 * lo half being the rounding error of the hi one), so the products keep about 16
 * bits of q and of P instead of 8.  mma rows never interact, so a row's bits depend on
 * its own query and position and the K/V values alone, whatever the other rows of the
 * block are; a tile wholly past a row's position leaves its m, l and O bitwise as they
 * were (corr = 1, P = 0). */
constexpr int KT = 64;                      /* positions per tile */
constexpr int MR = CUDA_ATTN_ROWS;          /* query rows a block: 16 per warp */
constexpr int WARPS = MR / 16, ATTN_THREADS = WARPS * 32;
constexpr int LDS = HD + 8;                 /* smem row stride (bf16): ldmatrix rows in distinct banks */
constexpr int TILE_ELEMS = KT * LDS;        /* one K or V tile */
constexpr int PST = KT + 8;                 /* P's row stride (floats): a half-warp's float2s in distinct banks */
/* K and V, two stages; then the split walk's P [16, KT] and row maxima [WARPS, 16] (73 KB: 3 blocks an SM) */
constexpr int ATTN_SMEM = 4 * TILE_ELEMS * 2 + (16 * PST + WARPS * 16) * 4;
constexpr int SPLIT_ROWS = 16;              /* blocks of at most this many rows take walk_split */
static_assert(MR % 16 == 0, "whole m16 tiles");
static_assert(2 * MR * LDS <= 2 * TILE_ELEMS, "q's hi and lo halves fit in the second stage");
static_assert(CUDA_ATTN_SPLIT % KT == 0, "splits end on tile boundaries");

/* cp.async of the K and V rows of positions p0 .. p0 + KT - 1 (zeros past p_end: they
 * weigh 0 and must not be NaN) into one stage; WHICH 1: K alone, 2: V alone, 3: both.
 * Thread t copies chunk t % 16 of rows t / 16 + 8u.  srow[i] is the slab row (of HD
 * elements) of position p_begin + i's K, worked out once at the block's start
 * (split_rows): no division or table read here. */
template <int WHICH = 3>
__device__ __forceinline__ void tile_load(uint16_t *sk, uint16_t *sv, const struct cuda_attention &a,
                                          const uint32_t *srow, int p_begin, int p0, int p_end)
{
    constexpr int CH = HD / 8, RSTEP = ATTN_THREADS / CH; /* 16-byte chunks a row; rows a pass */
    const int ch = threadIdx.x % CH, j0 = threadIdx.x / CH;
    const size_t v_off = (size_t)a.kv.n_kv_heads * a.kv.block_size * HD; /* V's slice follows K's */
    /* one of K and V (the QS walk, its scores' or its output's registers live): two rows
     * at a time, which keeps it from spilling (ptxas) */
#pragma unroll(WHICH == 3 ? KT / RSTEP : 2)
    for (int u = 0; u < KT / RSTEP; u++) {
        int p = p0 + j0 + RSTEP * u, j = j0 + RSTEP * u;
        bool ok = p < p_end;
        const uint16_t *src = a.kv.slab + (ok ? (size_t)srow[p - p_begin] * HD + ch * 8 : 0);
        if (WHICH & 1)
            cp16(sk + j * LDS + ch * 8, src, ok);
        if (WHICH & 2)
            cp16(sv + j * LDS + ch * 8, ok ? src + v_off : src, ok);
    }
}

/* srow for positions p_begin .. p_end - 1 of the row whose block table is table (the
 * batch's index arrays: before pdl_wait).  Rows of the slab fit 32 bits: a slab is
 * far below 2^32 rows of HD bf16. */
__device__ __forceinline__ void split_rows(uint32_t *srow, const struct cuda_attention &a, const int32_t *table,
                                           int kvh, int p_begin, int p_end)
{
    const int bs = a.kv.block_size;
    for (int i = threadIdx.x; i < p_end - p_begin; i += blockDim.x) {
        int p = p_begin + i;
        srow[i] = (uint32_t)(kv_off(a.kv, a.layer, table[p / bs], 0, kvh) / HD + p % bs);
    }
}

__device__ __forceinline__ unsigned pack_bf16(float lo_col, float hi_col)
{
    return (unsigned)f32_to_bf16(lo_col) | ((unsigned)f32_to_bf16(hi_col) << 16);
}

/* Two consecutive fragment values as bf16 pairs: the hi halves, and the lo halves (each
 * value's rounding error), so a product keeps about 16 bits of them. */
__device__ __forceinline__ void hilo_pack(float x, float y, unsigned &hi, unsigned &lo)
{
    hi = pack_bf16(x, y);
    lo = pack_bf16(__fsub_rn(x, bf16_to_f32(f32_to_bf16(x))), __fsub_rn(y, bf16_to_f32(f32_to_bf16(y))));
}

/* The output accumulators scaled by their rows' online-softmax corrections: elements 0
 * and 1 of each n-tile are row g's, 2 and 3 row g + 8's (the mma's C layout). */
template <int NJ> __device__ __forceinline__ void scale_out(float (&o)[NJ][4], const float (&corr)[2])
{
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        o[j][0] = __fmul_rn(o[j][0], corr[0]);
        o[j][1] = __fmul_rn(o[j][1], corr[0]);
        o[j][2] = __fmul_rn(o[j][2], corr[1]);
        o[j][3] = __fmul_rn(o[j][3], corr[1]);
    }
}

/* P's A fragments from the thread's eight values in fragment order (hilo_pack). */
__device__ __forceinline__ void p_frags(const float (&f)[8], unsigned (&ph)[4], unsigned (&pl)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        hilo_pack(f[2 * i], f[2 * i + 1], ph[i], pl[i]);
}

/* Tile it of a walk: the next tile's copies issued into the other stage, this one's
 * waited for; returns this tile's stage (K, and V TILE_ELEMS on). */
__device__ __forceinline__ const uint16_t *tile_next(uint16_t *skv, const struct cuda_attention &a,
                                                     const uint32_t *srow, int p_begin, int p0, int p_end, int it,
                                                     int n_tiles)
{
    if (it + 1 < n_tiles) {
        uint16_t *nk = skv + ((it + 1) & 1) * 2 * TILE_ELEMS;
        tile_load(nk, nk + TILE_ELEMS, a, srow, p_begin, p0 + KT, p_end);
        cp_commit();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
    __syncthreads();
    return skv + (it & 1) * 2 * TILE_ELEMS;
}

/* A row split over ns blocks: the split partials merged in split order (attn_combine
 * and the split walk's last block share it: the same sums either way).  The partials
 * were written by other blocks of the kernel: loads go to L2. */
__device__ __forceinline__ float merge_max(const float *wp, int ns)
{
    float mx = __ldcg(wp + HD);
    for (int s = 1; s < ns; s++)
        mx = fmaxf(mx, __ldcg(wp + s * (HD + 2) + HD));
    return mx;
}
/* Elements d0, d0 + DS, ..., d0 + (NE - 1) DS of the row, each by its own operations
 * (the split weights e are shared, computed once). */
template <int NE, int DS>
__device__ __forceinline__ void merge_elems(const float *wp, int ns, float mx, int d0, float (&out)[NE])
{
    float num[NE], den = 0.0f;
    for (int s = 0; s < ns; s++) {
        const float *ws = wp + s * (HD + 2);
        float e = expf(__fsub_rn(__ldcg(ws + HD), mx));
#pragma unroll
        for (int i = 0; i < NE; i++) {
            const float v = __fmul_rn(__ldcg(ws + d0 + i * DS), e);
            num[i] = s ? __fadd_rn(num[i], v) : v;
        }
        den = s ? __fadd_rn(den, __fmul_rn(__ldcg(ws + HD + 1), e)) : __fmul_rn(__ldcg(ws + HD + 1), e);
    }
#pragma unroll
    for (int i = 0; i < NE; i++)
        out[i] = __fdiv_rn(num[i], den);
}
__device__ __forceinline__ void merge_store(const struct cuda_attention &a, size_t at, float o)
{
    if (a.out_f32)
        a.out_f32[at] = o;
    if (a.out_bf16)
        a.out_bf16[at] = f32_to_bf16(o);
}
/* Elements at and at + 1 (at even) in one store each. */
__device__ __forceinline__ void merge_store2(const struct cuda_attention &a, size_t at, float o0, float o1)
{
    if (a.out_f32)
        *(float2 *)(a.out_f32 + at) = make_float2(o0, o1);
    if (a.out_bf16)
        *(unsigned *)(a.out_bf16 + at) = (unsigned)f32_to_bf16(o0) | ((unsigned)f32_to_bf16(o1) << 16);
}

/* A walk's end for the thread's rows row0 + g and row0 + g + 8: its NJ n-tiles of O are
 * output columns 8 (j0 + j) + 2 c4 + e % 2.  A row whose position lies in split 0 is
 * O / l, stored; else the split's partials go to the workspace (m and l by the threads
 * `ml` names).  A row past the block's, or whose position lies before this split, has
 * nothing here. */
template <int NJ>
__device__ __forceinline__ void walk_out(const struct cuda_attention &a, const float (&o)[NJ][4],
                                         const float (&m)[2], const float (&l)[2], const int (&pos_r)[2],
                                         int row0, int j0, bool ml, int rows, int p_begin, int t0, int group, int kvh,
                                         int s, int max_splits, float *work)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = row0 + g + 8 * h;
        if (r >= rows || pos_r[h] < p_begin)
            continue;
        int tok = t0 + r / group, hd = kvh * group + r % group;
        size_t row = (size_t)tok * a.n_heads + hd;
        if (pos_r[h] / CUDA_ATTN_SPLIT == 0) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
                merge_store2(a, row * HD + 8 * (j0 + j) + 2 * c4, __fdiv_rn(o[j][2 * h], l[h]),
                             __fdiv_rn(o[j][2 * h + 1], l[h]));
        } else {
            float *wp = work + (row * max_splits + s) * (HD + 2); /* HD + 2 even: float2s aligned */
#pragma unroll
            for (int j = 0; j < NJ; j++)
                *(float2 *)(wp + 8 * (j0 + j) + 2 * c4) = make_float2(o[j][2 * h], o[j][2 * h + 1]);
            if (ml && c4 == 0) {
                wp[HD] = m[h];
                wp[HD + 1] = l[h];
            }
        }
    }
}

/* Whether this block is the last of n_part to get here (its partials out, those of the
 * others visible): each counts in on the ticket, and the last sets it back to zero for
 * the next launch. */
__device__ __forceinline__ bool last_part(int *ticket, int n_part)
{
    __threadfence();
    __syncthreads();
    __shared__ int last;
    if (threadIdx.x == 0) {
        int t = atomicAdd(ticket, 1);
        last = t == n_part - 1;
        if (last)
            *ticket = 0; /* ready for the next launch */
    }
    __syncthreads();
    if (!last)
        return false;
    __threadfence();
    return true;
}

/* A decode block's end, after its partials are out: the query block's n_part splits
 * count in, and the last one merges its rows (no second launch). */
__device__ __forceinline__ void split_merge(const struct cuda_attention &a, const struct cuda_attn_batch &b,
                                            float *work, int *ticket, int n_part, int rows, int t0, int group,
                                            int kvh, int max_splits)
{
    if (n_part == 1 || !last_part(ticket, n_part))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < rows; r += WARPS) {
        int tok = t0 + r / group, hd = kvh * group + r % group;
        int ns = b.positions[tok] / CUDA_ATTN_SPLIT + 1;
        if (ns == 1)
            continue;
        size_t row = (size_t)tok * a.n_heads + hd;
        const float *wp = work + row * max_splits * (HD + 2);
        float o[HD / 32];
        merge_elems<HD / 32, 32>(wp, ns, merge_max(wp, ns), lane, o);
#pragma unroll
        for (int i = 0; i < HD / 32; i++)
            merge_store(a, row * HD + lane + 32 * i, o[i]);
    }
}

/* The walk of a block of at most 16 rows (a decode step's token: its query heads of
 * one KV head), with each tile spread over the four warps: warp w scores positions
 * 16w .. 16w + 15 and accumulates output columns 32w .. 32w + 31.  A row's bits are
 * those of attn_kernel's one-warp walk, by the same operations in the same order:
 * each score is the same mma steps; the tile's max is the max of the warps' maxima
 * (exact); the sum of P is the row's thread's sixteen values in position order, read
 * back from shared memory, then its quad's xor tree; P's hi and lo fragments come from
 * the same values; P . V takes the k16 steps in order, hi then lo.  k16 steps wholly
 * at or past p_end are skipped: their P is 0 and their V the zeros tile_load wrote, and
 * a step of P = 0 leaves O as it was (as the one-warp walk's tiles past a row's
 * position do). */
__device__ __forceinline__ void walk_split(const struct cuda_attention &a, const struct cuda_attn_batch &b,
                                           uint16_t *skv, const unsigned (&qh)[HD / 16][4],
                                           const unsigned (&ql)[HD / 16][4], const int (&pos_r)[2], int p_begin,
                                           int p_end, int n_tiles, const uint32_t *srow, int kvh, int t0,
                                           int group, int rows, int s, int max_splits, float *work, int *ticket,
                                           int n_part)
{
    float *ps = (float *)(skv + 4 * TILE_ELEMS); /* [16, PST]: P of the tile */
    float *pm = ps + 16 * PST;                   /* [WARPS, 16]: each warp's row maxima */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    float o[4][4]; /* columns 32 warp + 8 i + 2 c4 + e % 2 of rows g, g + 8 */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[i][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int it = 0; it < n_tiles; it++) {
        const int p0 = p_begin + it * KT;
        const uint16_t *sk = tile_next(skv, a, srow, p_begin, p0, p_end, it, n_tiles), *sv = sk + TILE_ELEMS;
        /* S for this warp's n-tiles 2 warp and 2 warp + 1 */
        float sc[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sc[j][e] = 0.0f;
        if (p0 + 16 * warp < p_end) { /* warp-uniform; else every score is masked below */
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                unsigned kb[2][2];
                ldsm_x4(kb[0][0], kb[0][1], kb[1][0], kb[1][1],
                        sk + (warp * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816(sc[0], qh[kk], kb[0]);
                mma16816(sc[1], qh[kk], kb[1]);
                mma16816(sc[0], ql[kk], kb[0]);
                mma16816(sc[1], ql[kk], kb[1]);
            }
        }
        float mx[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = -INFINITY;
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int p = p0 + 8 * (2 * warp + j) + 2 * c4 + e;
                    float v = p <= pos_r[h] ? __fmul_rn(sc[j][2 * h + e], a.scale) : -INFINITY;
                    sc[j][2 * h + e] = v;
                    mx[h] = fmaxf(mx[h], v);
                }
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            if (c4 == 0)
                pm[warp * 16 + g + 8 * h] = mx[h];
        }
        __syncthreads();
        float m_new[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float t = pm[g + 8 * h];
#pragma unroll
            for (int w = 1; w < WARPS; w++)
                t = fmaxf(t, pm[w * 16 + g + 8 * h]);
            m_new[h] = fmaxf(m[h], t);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float p2[2];
#pragma unroll
                for (int e = 0; e < 2; e++)
                    p2[e] = m_new[h] == -INFINITY ? 0.0f : expf(__fsub_rn(sc[j][2 * h + e], m_new[h]));
                *(float2 *)(ps + (g + 8 * h) * PST + 16 * warp + 8 * j + 2 * c4) = make_float2(p2[0], p2[1]);
            }
        }
        __syncthreads();
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < KT / 8; j++) {
                float2 v = *(const float2 *)(ps + (g + 8 * h) * PST + 8 * j + 2 * c4);
                sum = __fadd_rn(sum, v.x);
                sum = __fadd_rn(sum, v.y);
            }
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
            corr[h] = m_new[h] == -INFINITY ? 1.0f : expf(__fsub_rn(m[h], m_new[h]));
            l[h] = __fadd_rn(__fmul_rn(l[h], corr[h]), sum);
            m[h] = m_new[h];
        }
        scale_out(o, corr);
#pragma unroll
        for (int t = 0; t < KT / 16; t++) {
            if (p0 + 16 * t >= p_end)
                break; /* block-uniform */
            const float *r0 = ps + g * PST + 16 * t + 2 * c4, *r1 = r0 + 8 * PST;
            const float2 a0 = *(const float2 *)r0, a1 = *(const float2 *)r1, a2 = *(const float2 *)(r0 + 8),
                         a3 = *(const float2 *)(r1 + 8);
            const float f[8] = {a0.x, a0.y, a1.x, a1.y, a2.x, a2.y, a3.x, a3.y};
            unsigned ph[4], pl[4];
            p_frags(f, ph, pl);
            unsigned vb[4][2];
#pragma unroll
            for (int i = 0; i < 4; i += 2) {
                const int mi = lane >> 3;
                ldsm_x4_t(vb[i][0], vb[i][1], vb[i + 1][0], vb[i + 1][1],
                          sv + (t * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + (4 * warp + i) * 8 + (mi >> 1) * 8);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                mma16816(o[i], ph, vb[i]);
#pragma unroll
            for (int i = 0; i < 4; i++)
                mma16816(o[i], pl, vb[i]);
        }
        __syncthreads(); /* this stage, P and the maxima are used up before the next tile */
    }
    walk_out<4>(a, o, m, l, pos_r, 0, 4 * warp, warp == 0, rows, p_begin, t0, group, kvh, s, max_splits, work);
    split_merge(a, b, work, ticket, n_part, rows, t0, group, kvh, max_splits);
}

/* A thread's end of walk_long for rows with more than one split: merge_elems's sums
 * over the elements the thread held (columns 8 j + 2 c4 + x of rows g and g + 8 of its
 * warp's), read back from the partials of the query block's blocks, which all lay
 * their rows out alike; split n_reg's (-1: none) from the registers instead. */
__device__ __forceinline__ void merge_held(const struct cuda_attention &a, const float *work,
                                          const float (&o)[HD / 8][4], const float (&m)[2], const float (&l)[2],
                                          const int (&pos_r)[2], int n_reg, int wrow, int rows, int t0, int group,
                                          int kvh, int max_splits)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = wrow + g + 8 * h;
        if (r >= rows || pos_r[h] < CUDA_ATTN_SPLIT)
            continue;
        const int ns = pos_r[h] / CUDA_ATTN_SPLIT + 1, n_mem = ns == n_reg + 1 ? ns - 1 : ns;
        const size_t row = (size_t)(t0 + r / group) * a.n_heads + kvh * group + r % group;
        const float *wp = work + row * max_splits * (HD + 2);
        float mx = n_mem < ns ? m[h] : -INFINITY; /* merge_max: exact in any order */
        for (int sp = 0; sp < n_mem; sp++)
            mx = fmaxf(mx, __ldcg(wp + sp * (HD + 2) + HD));
        float num[HD / 8][2], den = 0.0f;
        for (int sp = 0; sp < n_mem; sp++) {
            const float *ws = wp + sp * (HD + 2);
            const float e = expf(__fsub_rn(__ldcg(ws + HD), mx));
#pragma unroll
            for (int j = 0; j < HD / 8; j++) {
                const float2 v = __ldcg((const float2 *)(ws + 8 * j + 2 * c4));
                num[j][0] = sp ? __fadd_rn(num[j][0], __fmul_rn(v.x, e)) : __fmul_rn(v.x, e);
                num[j][1] = sp ? __fadd_rn(num[j][1], __fmul_rn(v.y, e)) : __fmul_rn(v.y, e);
            }
            den = sp ? __fadd_rn(den, __fmul_rn(__ldcg(ws + HD + 1), e)) : __fmul_rn(__ldcg(ws + HD + 1), e);
        }
        if (n_mem < ns) { /* n_mem >= 1: a row of two splits or more */
            const float e = expf(__fsub_rn(m[h], mx));
#pragma unroll
            for (int j = 0; j < HD / 8; j++)
#pragma unroll
                for (int x = 0; x < 2; x++)
                    num[j][x] = __fadd_rn(num[j][x], __fmul_rn(o[j][2 * h + x], e));
            den = __fadd_rn(den, __fmul_rn(l[h], e));
        }
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
            merge_store2(a, row * HD + 8 * j + 2 * c4, __fdiv_rn(num[j][0], den), __fdiv_rn(num[j][1], den));
    }
}

/* The walk of a block of more than 16 rows (a prompt's query block): warp w holds rows
 * 16w .. 16w + 15 and takes every tile whole (the one-warp walk described above).  The
 * block walks `chunk` splits of its rows from sp0 one after another (all of them where
 * the launch has blocks enough: attention() says): each split from a fresh m,
 * l and O, its partials out at its end (walk_out), the tile stream running on across
 * split boundaries (the next split's first tile is copied in during this one's last, its
 * slab rows worked out at this one's start into the other half of srow).  Rows with
 * more than one split are merged by each thread over the elements it held (merge_held):
 * at once when the block walked every split (the last one's partials never leave the
 * registers), else by the query block's last chunk block to finish (ticket).  The same
 * operations as a block a split and a merge, so the same bits.  A tile wholly at or
 * below the lowest position of a warp's rows is not masked: no place of it is past a
 * row.
 *
 * QS: q's fragments are read from shared memory (sq: the hi rows, then the lo rows,
 * where the prologue put them) at each k16 step instead of held in 64 registers, and
 * K and V have one stage each (the first stage; q keeps the second): the next tile's K
 * is copied in while this one's softmax and P . V run, its V while the next scores
 * do, as the decode walk does.  So the kernel fits 168 registers, three blocks an SM
 * instead of two (the walk is latency-bound: bench/notes/cuda.md).  The same values
 * reach the same mma steps in the same order: the same bits. */
template <bool QS>
__device__ __forceinline__ void walk_long(const struct cuda_attention &a, const struct cuda_attn_batch &b,
                                          uint16_t *skv, uint32_t (*srow)[CUDA_ATTN_SPLIT], const int32_t *table,
                                          const unsigned (&qh)[HD / 16][4], const unsigned (&ql)[HD / 16][4],
                                          const uint16_t *sq, const int (&pos_r)[2], bool active, int wrow,
                                          int pos_last, int sp0, int chunk, int kvh, int t0, int group, int rows,
                                          int max_splits, float *work, int *ticket)
{
    const int lane = threadIdx.x & 31, c4 = lane & 3;
    int wmin = min(pos_r[0], pos_r[1]); /* -1 where a row is past the block's: every tile masked */
#pragma unroll
    for (int x = 16; x > 0; x >>= 1)
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, x));
    const int n_split = pos_last / CUDA_ATTN_SPLIT + 1, sp1 = min(sp0 + chunk, n_split);
    const bool whole = sp0 == 0 && sp1 == n_split; /* every split here: no other block's partials */
    const int p_stop = min(sp1 * CUDA_ATTN_SPLIT, pos_last + 1);
    float o[HD / 8][4], m[2], l[2];
    int it = 0; /* tiles walked: the stage's parity */
    for (int sp = sp0; sp < sp1; sp++) {
        const int pb = sp * CUDA_ATTN_SPLIT, pe = min(pb + CUDA_ATTN_SPLIT, pos_last + 1);
        const int nb = pb + CUDA_ATTN_SPLIT, ne = min(nb + CUDA_ATTN_SPLIT, pos_last + 1); /* the next split */
        const int nt = (pe - pb + KT - 1) / KT;
        /* the next split's half of srow was last read by split sp - 1's copies, barriers
         * ago, and is read next by the copy of split sp + 1's first tile, during this
         * split's last (of four) */
        if (sp + 1 < sp1)
            split_rows(srow[(sp + 1 - sp0) & 1], a, table, kvh, nb, ne);
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[j][e] = 0.0f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.0f;
        for (int i = 0; i < nt; i++, it++) {
            const int p0 = pb + i * KT;
            /* QS: the next tile's K or V into its one stage, this split's or the next one's first */
            auto load_next = [&](bool k) {
                if (p0 + KT >= p_stop)
                    return;
                const bool here = i + 1 < nt;
                const uint32_t *r = srow[((here ? sp : sp + 1) - sp0) & 1];
                const int b0 = here ? pb : nb, n0 = here ? p0 + KT : nb, e0 = here ? pe : ne;
                if (k)
                    tile_load<1>(skv, nullptr, a, r, b0, n0, e0);
                else
                    tile_load<2>(nullptr, skv + TILE_ELEMS, a, r, b0, n0, e0);
            };
            if constexpr (QS) {
                cp_wait<1>(); /* K(it); V(it) may still be on its way */
            } else if (p0 + KT < p_stop) { /* the next tile: this split's, or the next one's first */
                uint16_t *nk = skv + ((it + 1) & 1) * 2 * TILE_ELEMS;
                if (i + 1 < nt)
                    tile_load(nk, nk + TILE_ELEMS, a, srow[(sp - sp0) & 1], pb, p0 + KT, pe);
                else
                    tile_load(nk, nk + TILE_ELEMS, a, srow[(sp + 1 - sp0) & 1], nb, nb, ne);
                cp_commit();
                cp_wait<1>();
            } else {
                cp_wait<0>();
            }
            __syncthreads();
            const uint16_t *sk = QS ? skv : skv + (it & 1) * 2 * TILE_ELEMS, *sv = sk + TILE_ELEMS;
            /* S = q . K^T: 8 n-tiles of 8 positions; k16 steps over d in order, hi then lo */
            float sc[KT / 8][4];
            if (active) {
#pragma unroll
                for (int j = 0; j < KT / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[j][e] = 0.0f;
                /* per k16 step: the hi half into all eight accumulators, then the lo half
                 * (each accumulator still takes hi, then lo, step after step) */
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    if constexpr (QS) { /* K a pair of n-tiles at a time (registers) */
                        unsigned fh[4], fl[4];
                        const int off = (wrow + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8;
                        ldsm_x4(fh[0], fh[1], fh[2], fh[3], sq + off);
                        ldsm_x4(fl[0], fl[1], fl[2], fl[3], sq + MR * LDS + off);
#pragma unroll
                        for (int j2 = 0; j2 < KT / 16; j2++) {
                            unsigned k2[2][2];
                            ldsm_x4(k2[0][0], k2[0][1], k2[1][0], k2[1][1],
                                    sk + (j2 * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk * 16 +
                                        ((lane >> 3) & 1) * 8);
                            mma16816(sc[2 * j2], fh, k2[0]);
                            mma16816(sc[2 * j2 + 1], fh, k2[1]);
                            mma16816(sc[2 * j2], fl, k2[0]);
                            mma16816(sc[2 * j2 + 1], fl, k2[1]);
                        }
                    } else {
                        unsigned kb[KT / 8][2];
#pragma unroll
                        for (int j2 = 0; j2 < KT / 16; j2++)
                            ldsm_x4(kb[2 * j2][0], kb[2 * j2][1], kb[2 * j2 + 1][0], kb[2 * j2 + 1][1],
                                    sk + (j2 * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk * 16 +
                                        ((lane >> 3) & 1) * 8);
#pragma unroll
                        for (int j = 0; j < KT / 8; j++)
                            mma16816(sc[j], qh[kk], kb[j]);
#pragma unroll
                        for (int j = 0; j < KT / 8; j++)
                            mma16816(sc[j], ql[kk], kb[j]);
                    }
                }
            }
            if constexpr (QS) { /* every warp, active or not, to the barrier */
                cp_wait<0>();    /* V(it) */
                __syncthreads(); /* V(it) seen by all; every warp's scores done: K's stage is free */
                load_next(true);
                cp_commit();
            }
            if (active) {
                /* scale, mask, online softmax: element e of n-tile j is row g + 8 (e / 2),
                 * position p0 + 8 j + 2 c4 + e % 2 */
                const bool unmasked = p0 + KT - 1 <= wmin; /* warp-uniform */
                float corr[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float mx = -INFINITY;
                    if (unmasked) {
#pragma unroll
                        for (int j = 0; j < KT / 8; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                float v = __fmul_rn(sc[j][2 * h + e], a.scale);
                                sc[j][2 * h + e] = v;
                                mx = fmaxf(mx, v);
                            }
                    } else {
#pragma unroll
                        for (int j = 0; j < KT / 8; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                int p = p0 + 8 * j + 2 * c4 + e;
                                float v = p <= pos_r[h] ? __fmul_rn(sc[j][2 * h + e], a.scale) : -INFINITY;
                                sc[j][2 * h + e] = v;
                                mx = fmaxf(mx, v);
                            }
                    }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    float m_new = fmaxf(m[h], mx);
                    float sum = 0.0f;
#pragma unroll
                    for (int j = 0; j < KT / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float pj = m_new == -INFINITY ? 0.0f : expf(__fsub_rn(sc[j][2 * h + e], m_new));
                            sc[j][2 * h + e] = pj;
                            sum = __fadd_rn(sum, pj);
                        }
                    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
                    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
                    corr[h] = m_new == -INFINITY ? 1.0f : expf(__fsub_rn(m[h], m_new));
                    l[h] = __fadd_rn(__fmul_rn(l[h], corr[h]), sum);
                    m[h] = m_new;
                }
                scale_out(o, corr);
                /* O += P . V: k16 steps over the tile's positions in order, hi then lo; P's
                 * A fragments are S's accumulators of n-tiles 2t and 2t + 1 */
#pragma unroll
                for (int t = 0; t < KT / 16; t++) {
                    unsigned ph[4], pl[4];
                    const float *s0 = sc[2 * t], *s1 = sc[2 * t + 1];
                    const float f[8] = {s0[0], s0[1], s0[2], s0[3], s1[0], s1[1], s1[2], s1[3]};
                    p_frags(f, ph, pl);
                    /* QS: V's fragments in two halves of the columns (registers); each
                     * accumulator still takes hi, then lo, at every k16 step */
                    constexpr int VH = QS ? 2 : 1, NV = HD / 8 / VH;
#pragma unroll
                    for (int hv = 0; hv < VH; hv++) {
                        unsigned vb[NV][2];
#pragma unroll
                        for (int jd = 0; jd < NV; jd += 2) {
                            const int mi = lane >> 3;
                            ldsm_x4_t(vb[jd][0], vb[jd][1], vb[jd + 1][0], vb[jd + 1][1],
                                      sv + (t * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + (hv * NV + jd) * 8 +
                                          (mi >> 1) * 8);
                        }
#pragma unroll
                        for (int jd = 0; jd < NV; jd++)
                            mma16816(o[hv * NV + jd], ph, vb[jd]);
#pragma unroll
                        for (int jd = 0; jd < NV; jd++)
                            mma16816(o[hv * NV + jd], pl, vb[jd]);
                    }
                }
            }
            __syncthreads(); /* this stage is used up before the next load refills it */
            if constexpr (QS) {
                load_next(false);
                cp_commit();
            }
        }
        if (active && (n_split == 1 || !whole || sp + 1 < n_split)) /* a whole walk's last split stays here */
            walk_out<HD / 8>(a, o, m, l, pos_r, wrow, 0, true, rows, pb, t0, group, kvh, sp, max_splits, work);
    }
    if (n_split == 1)
        return;
    if (whole) {
        if (active) {
            __syncwarp(); /* m and l of the quad's rows, as its first thread wrote them */
            merge_held(a, work, o, m, l, pos_r, n_split - 1, wrow, rows, t0, group, kvh, max_splits);
        }
        return;
    }
    if (last_part(ticket, (n_split + chunk - 1) / chunk) && active)
        merge_held(a, work, o, m, l, pos_r, -1, wrow, rows, t0, group, kvh, max_splits);
}

/* SMALL: every block of the launch has at most SPLIT_ROWS rows (a decode step), so
 * only walk_split is compiled: fewer registers, three blocks an SM.  Else a block of
 * more than SPLIT_ROWS rows walks its z-th chunk of `chunk` splits (walk_long; z past
 * its splits has nothing to do), and a small one takes split z as in the SMALL build.
 * QS: walk_long's q from shared memory (three blocks an SM; see walk_long).
 * Query blocks run last first: a prompt's later blocks have the longer walks. */
template <bool SMALL, bool QS>
__global__ void __launch_bounds__(ATTN_THREADS, SMALL || QS ? 3 : 1)
    attn_kernel(struct cuda_attention a, struct cuda_attn_batch b, int group, int max_splits, int chunk,
                float *work, int *tickets)
{
    extern __shared__ __align__(128) uint16_t smem[];
    /* the split's K rows in the slab (split_rows); walk_long's next split in the other half */
    __shared__ uint32_t srow[SMALL ? 1 : 2][CUDA_ATTN_SPLIT];
    /* q's halves pass through the second stage, which the first tile leaves free */
    uint16_t *skv = smem, *sqh = smem + 2 * TILE_ELEMS, *sql = sqh + MR * LDS;
    const int qb = gridDim.x - 1 - blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* the batch's index arrays (block tables too) before the wait (klaunch); q, K and V after it */
    const int t0 = b.qblocks[2 * qb], ntok = b.qblocks[2 * qb + 1];
    const int rows = ntok * group;
    const int pos_last = b.positions[t0 + ntok - 1];
    /* at most 16 rows (decode): every warp holds them all and walk_split spreads each
     * tile over the warps; else warp w holds rows 16w .. 16w + 15 */
    const bool split = SMALL || rows <= SPLIT_ROWS;
    const int s_first = split ? s : s * chunk; /* a larger block walks chunk splits from here */
    const int p_begin = s_first * CUDA_ATTN_SPLIT;
    const int p_end = min(p_begin + CUDA_ATTN_SPLIT, pos_last + 1);
    const int32_t *table = b.tables + b.row_table[b.tok_row[t0]];
    split_rows(srow[0], a, table, kvh, p_begin, p_end); /* none past the last */
    pdl_wait();
    pdl_release();
    if (p_begin > pos_last)
        return;
    const int n_tiles = (p_end - p_begin + KT - 1) / KT;
    __syncthreads(); /* srow */

    if (QS && !split) { /* walk_long's K and V in copy groups of their own */
        tile_load<1>(skv, skv + TILE_ELEMS, a, srow[0], p_begin, p_begin, p_end);
        cp_commit();
        tile_load<2>(skv, skv + TILE_ELEMS, a, srow[0], p_begin, p_begin, p_end);
    } else {
        tile_load(skv, skv + TILE_ELEMS, a, srow[0], p_begin, p_begin, p_end);
    }
    cp_commit();
    /* q rows as bf16 hi and lo halves; rows past the block's are zero.  Thread t takes
     * float4 t % 32 of rows t / 32 + 4u, all loads issued before any is used. */
    {
        constexpr int F4 = HD / 4, RS = ATTN_THREADS / F4;
        constexpr int QR = SMALL ? SPLIT_ROWS : MR; /* the rows the walk reads */
        const int c = tid % F4, r0 = tid / F4;
        float4 v[QR / RS];
#pragma unroll
        for (int u = 0; u < QR / RS; u++) {
            int r = r0 + RS * u;
            v[u] = r < rows ? *(const float4 *)(a.q + ((size_t)(t0 + r / group) * a.n_heads + kvh * group + r % group) *
                                                          HD + 4 * c)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < QR / RS; u++) {
            int r = r0 + RS * u;
            if (r >= rows) { /* warp-uniform: a zero row (both halves 0) without the arithmetic */
                *(uint2 *)(sqh + r * LDS + 4 * c) = make_uint2(0u, 0u);
                *(uint2 *)(sql + r * LDS + 4 * c) = make_uint2(0u, 0u);
                continue;
            }
            const float f[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                uint16_t h = f32_to_bf16(f[e]);
                sqh[r * LDS + 4 * c + e] = h;
                sql[r * LDS + 4 * c + e] = f32_to_bf16(__fsub_rn(f[e], bf16_to_f32(h)));
            }
        }
    }
    __syncthreads();

    const int wrow = split ? 0 : warp * 16;
    const bool active = wrow < rows; /* warp-uniform */
    const int g = lane >> 2;
    unsigned qh[HD / 16][4], ql[HD / 16][4];
    int pos_r[2] = {-1, -1}; /* the positions of this thread's rows g and g + 8 (-1: no row) */
    if (active) {
#pragma unroll
        for (int kk = 0; kk < HD / 16 && (!QS || split); kk++) { /* (QS: walk_long reads them from shared memory) */
            const int off = (wrow + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8;
            ldsm_x4(qh[kk][0], qh[kk][1], qh[kk][2], qh[kk][3], sqh + off);
            ldsm_x4(ql[kk][0], ql[kk][1], ql[kk][2], ql[kk][3], sql + off);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = wrow + g + 8 * h;
            if (r < rows)
                pos_r[h] = b.positions[t0 + r / group];
        }
    }
    __syncthreads(); /* q is in registers: the second stage is free for tile 1 (QS: q stays there) */
    if (split) { /* its splits merged by the last of them (ticket) */
        walk_split(a, b, skv, qh, ql, pos_r, p_begin, p_end, n_tiles, srow[0], kvh, t0, group, rows, s, max_splits,
                   work, tickets + (size_t)qb * gridDim.y + kvh, pos_last / CUDA_ATTN_SPLIT + 1);
        return;
    }
    if constexpr (!SMALL)
        walk_long<QS>(a, b, skv, srow, table, qh, ql, sqh, pos_r, active, wrow, pos_last, s_first, chunk, kvh, t0,
                      group, rows, max_splits, work, tickets + (size_t)qb * gridDim.y + kvh);
}

/* The decode walk: a block of at most DR rows (a decode token's query heads of one KV
 * head), transposed.  The tile's positions are the mma's rows and the query rows its
 * eight columns: S^T = K . q^T, then O^T = V^T . P^T, so a block of two to eight rows
 * fills a quarter to all of each mma instead of an eighth to a half, and each thread
 * holds a quarter of the scores the split walk's does.  A row's bits are those of the
 * one-warp walk: each score and each output element is the same k16 products taken
 * in the same order (k steps ascending, hi then lo), the operands only swapped
 * between the mma's A and B; the tile's max is exact whatever the grouping; P is the
 * same expf of the same values; a row's sum is the one-warp walk's order (its quad's
 * sixteen values in position order, read back from shared memory, then the xor tree);
 * k16 steps of P . V wholly at or past p_end are skipped as the split walk does.
 *
 * Warp w scores positions 16w .. 16w + 15 of a tile and accumulates output elements
 * 32w .. 32w + 31 of every row.  K and V have one stage each, unpadded, each 16-byte
 * chunk c of a stage's row j at chunk c ^ (j % 8) (ldmatrix's eight rows then fall in
 * distinct banks): 36 KB and 80 registers a block, six blocks an SM.  The next tile's
 * K is copied in while this one's softmax and P . V run, its V while its scores do;
 * the other blocks of the SM cover the rest.  (Measured on the H200 against two K
 * stages and one V (four blocks an SM) and two of each (three): at 192 decode rows of
 * context 576 130 us against 148 and 169, at one row of context 4,096 19.1 us against
 * 17.8.) */
constexpr int DR = CUDA_ATTN_DEC_ROWS;  /* rows of a decode block: the mma's n8 */
constexpr int DSTAGE = KT * HD;         /* bf16 elements of one K or V stage */
constexpr int DEC_SMEM = 2 * DSTAGE * 2 + (DR * PST + WARPS * DR) * 4;
static_assert(DR == 8, "the decode walk's query rows are one n8 tile");

/* cp.async of K (sel_off 0) or V (sel_off: V's slice) of positions p0 .. p0 + KT - 1 into
 * a swizzled stage, zeros past p_end (they weigh 0 and must not be NaN). */
__device__ __forceinline__ void dec_load(uint16_t *dst, const struct cuda_attention &a, const uint32_t *srow,
                                         int p_begin, int p0, int p_end, size_t sel_off)
{
    constexpr int CH = HD / 8, RSTEP = ATTN_THREADS / CH; /* 16-byte chunks a row; rows a pass */
    static_assert(RSTEP % 8 == 0, "a thread's rows share j % 8");
    const int ch = threadIdx.x % CH, j0 = threadIdx.x / CH, sw = (ch ^ (j0 & 7)) * 8;
#pragma unroll
    for (int u = 0; u < KT / RSTEP; u++) {
        int j = j0 + RSTEP * u, p = p0 + j;
        bool ok = p < p_end;
        const uint16_t *src = a.kv.slab + (ok ? (size_t)srow[p - p_begin] * HD + sel_off + ch * 8 : 0);
        cp16(dst + j * HD + sw, src, ok);
    }
}

/* A swizzled stage's row j, 16-byte chunk c. */
__device__ __forceinline__ const uint16_t *dec_at(const uint16_t *st, int j, int c)
{
    return st + j * HD + ((c ^ (j & 7)) << 3);
}

__global__ void __launch_bounds__(ATTN_THREADS, 6)
    attn_dec_kernel(struct cuda_attention a, struct cuda_attn_batch b, int group, int max_splits, float *work,
                    int *tickets)
{
    extern __shared__ __align__(128) uint16_t smem[];
    __shared__ uint32_t srow[CUDA_ATTN_SPLIT]; /* the split's K rows in the slab (split_rows) */
    uint16_t *sk = smem, *sv = smem + DSTAGE;  /* [KT, HD] each, swizzled */
    float *ps = (float *)(sv + DSTAGE);        /* [DR, PST]: P of the tile */
    float *pm = ps + DR * PST;                 /* [WARPS, DR]: each warp's row maxima */
    const int qb = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    /* the batch's index arrays (block tables too) before the wait (klaunch); q, K and V after it */
    const int t0 = b.qblocks[2 * qb], ntok = b.qblocks[2 * qb + 1];
    const int rows = ntok * group;
    const int pos_last = b.positions[t0 + ntok - 1];
    const int p_begin = s * CUDA_ATTN_SPLIT;
    const int p_end = min(p_begin + CUDA_ATTN_SPLIT, pos_last + 1);
    split_rows(srow, a, b.tables + b.row_table[b.tok_row[t0]], kvh, p_begin, p_end);
    int pos_c[2]; /* the positions of this thread's columns, rows 2 c4 + e (-1: no row) */
#pragma unroll
    for (int e = 0; e < 2; e++)
        pos_c[e] = 2 * c4 + e < rows ? b.positions[t0 + (2 * c4 + e) / group] : -1;
    pdl_wait();
    pdl_release();
    if (p_begin > pos_last)
        return;
    const int n_tiles = (p_end - p_begin + KT - 1) / KT;
    const size_t v_off = (size_t)a.kv.n_kv_heads * a.kv.block_size * HD; /* V's slice follows K's */
    __syncthreads();                                                      /* srow */
    /* copy groups: K(0), V(0), then K(it + 1) and V(it + 1) within tile it */
    dec_load(sk, a, srow, p_begin, p_begin, p_end, 0);
    cp_commit();
    dec_load(sv, a, srow, p_begin, p_begin, p_end, v_off);
    cp_commit();
    /* q^T's B fragments: row g's elements 16 kk + 8 h + 2 c4 + {0, 1}, bf16 hi and lo
     * halves (the one-warp walk's q halves); rows past the block's are zero */
    unsigned qh[HD / 16][2], ql[HD / 16][2];
    {
        const bool live = g < rows;
        const int r = live ? g : 0;
        const float *qr = a.q + ((size_t)(t0 + r / group) * a.n_heads + kvh * group + r % group) * HD + 2 * c4;
        float2 v[HD / 16][2];
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                v[kk][h] = live ? *(const float2 *)(qr + 16 * kk + 8 * h) : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                hilo_pack(v[kk][h].x, v[kk][h].y, qh[kk][h], ql[kk][h]);
    }

    float o[2][4]; /* O^T: element 32 warp + 16 i + g + 8 (e / 2) of row 2 c4 + e % 2 */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[i][e] = 0.0f;
    float m_c[2] = {-INFINITY, -INFINITY}; /* maxima of rows 2 c4 + e (the scores' layout) */
    float m_g = -INFINITY, l_g = 0.0f;     /* row g's max and sum (the sums' layout) */
    for (int it = 0; it < n_tiles; it++) {
        const int p0 = p_begin + it * KT;
        const bool more = it + 1 < n_tiles;
        cp_wait<1>(); /* ... K(it), V(it): K(it) */
        __syncthreads();

        /* S^T for positions p0 + 16 warp + g (+ 8) of rows 2 c4 + {0, 1}: k16 steps over d
         * in order, hi then lo */
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (p0 + 16 * warp < p_end) { /* warp-uniform; else every score is masked below */
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                unsigned ka[4];
                ldsm_x4(ka[0], ka[1], ka[2], ka[3],
                        dec_at(sk, 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7), 2 * kk + (lane >> 4)));
                mma16816(sc, ka, qh[kk]);
                mma16816(sc, ka, ql[kk]);
            }
        }
        /* scale and mask; each warp's row maxima (rows 2 c4 + e over the lanes of one c4) */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float mx = -INFINITY;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int p = p0 + 16 * warp + g + 8 * h;
                float v = p <= pos_c[e] ? __fmul_rn(sc[2 * h + e], a.scale) : -INFINITY;
                sc[2 * h + e] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            if (g == 0)
                pm[warp * DR + 2 * c4 + e] = mx;
        }
        __syncthreads();
        /* the tile's maxima; P = exp(S - m) into shared memory */
        float corr_c[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = 2 * c4 + e;
            float t = pm[r];
#pragma unroll
            for (int w = 1; w < WARPS; w++)
                t = fmaxf(t, pm[w * DR + r]);
            const float mn = fmaxf(m_c[e], t);
#pragma unroll
            for (int h = 0; h < 2; h++)
                ps[r * PST + 16 * warp + g + 8 * h] = mn == -INFINITY ? 0.0f : expf(__fsub_rn(sc[2 * h + e], mn));
            corr_c[e] = mn == -INFINITY ? 1.0f : expf(__fsub_rn(m_c[e], mn));
            m_c[e] = mn;
        }
        float mg = pm[g];
#pragma unroll
        for (int w = 1; w < WARPS; w++)
            mg = fmaxf(mg, pm[w * DR + g]);
        mg = fmaxf(m_g, mg);
        /* the next tile's K now (every warp's scores are done) */
        if (more)
            dec_load(sk, a, srow, p_begin, p0 + KT, p_end, 0);
        cp_commit();
        cp_wait<1>();    /* ... V(it), K(it + 1): V(it) */
        __syncthreads(); /* P, and V(it) */

        /* row g's sum: its quad's sixteen values each in position order, then the xor
         * tree; they are also P^T's B fragments (positions 8 j + 2 c4 + {0, 1}) */
        float pv[KT / 4];
#pragma unroll
        for (int j = 0; j < KT / 8; j++) {
            const float2 v = *(const float2 *)(ps + g * PST + 8 * j + 2 * c4);
            pv[2 * j] = v.x;
            pv[2 * j + 1] = v.y;
        }
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < KT / 4; j++)
            sum = __fadd_rn(sum, pv[j]);
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
        const float corr_g = mg == -INFINITY ? 1.0f : expf(__fsub_rn(m_g, mg));
        l_g = __fadd_rn(__fmul_rn(l_g, corr_g), sum);
        m_g = mg;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[i][e] = __fmul_rn(o[i][e], corr_c[e & 1]);
        /* O^T += V^T . P^T: k16 steps over the tile's positions in order, hi then lo */
#pragma unroll
        for (int t = 0; t < KT / 16; t++) {
            if (p0 + 16 * t >= p_end)
                break; /* block-uniform */
            unsigned ph[2], pl[2];
#pragma unroll
            for (int h = 0; h < 2; h++)
                hilo_pack(pv[4 * t + 2 * h], pv[4 * t + 2 * h + 1], ph[h], pl[h]);
            unsigned va[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int mq = lane >> 3;
                ldsm_x4_t(va[i][0], va[i][1], va[i][2], va[i][3],
                          dec_at(sv, 16 * t + (mq >> 1) * 8 + (lane & 7), 4 * warp + 2 * i + (mq & 1)));
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
                mma16816(o[i], va[i], ph);
#pragma unroll
            for (int i = 0; i < 2; i++)
                mma16816(o[i], va[i], pl);
        }
        __syncthreads(); /* V's stage and P are used up */
        if (more)
            dec_load(sv, a, srow, p_begin, p0 + KT, p_end, v_off);
        cp_commit();
    }

    /* rows 2 c4 + e: O / l stored when the row's position lies in split 0, else the
     * split's partials (m and l by warp 0's lanes of g = 0) */
    float l_c[2];
#pragma unroll
    for (int e = 0; e < 2; e++)
        l_c[e] = __shfl_sync(0xffffffffu, l_g, (2 * c4 + e) * 4);
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = 2 * c4 + e;
        if (r >= rows || pos_c[e] < p_begin)
            continue;
        const int tok = t0 + r / group, hd = kvh * group + r % group;
        const size_t row = (size_t)tok * a.n_heads + hd;
        if (pos_c[e] / CUDA_ATTN_SPLIT == 0) {
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    merge_store(a, row * HD + 32 * warp + 16 * i + g + 8 * h, __fdiv_rn(o[i][2 * h + e], l_c[e]));
        } else {
            float *wp = work + (row * max_splits + s) * (HD + 2);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    wp[32 * warp + 16 * i + g + 8 * h] = o[i][2 * h + e];
            if (warp == 0 && g == 0) {
                wp[HD] = m_c[e];
                wp[HD + 1] = l_c[e];
            }
        }
    }
    split_merge(a, b, work, tickets + (size_t)qb * gridDim.y + kvh, pos_last / CUDA_ATTN_SPLIT + 1, rows, t0, group,
                kvh, max_splits);
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
    if ((double)kv->n_layers * kv->n_blocks * 2 * kv->n_kv_heads * kv->block_size >= 4294967296.0)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "cuda %s: a KV store of 2^32 rows or more (tile_load's rows are 32-bit)", what);
    return HR_OK;
}

} // namespace

/* The SMs, HEARTH_CUDA_ATTN_CHUNK (benchmarks: a forced chunk for every launch), and
 * HEARTH_CUDA_ATTN_QS=1 (walk_long's q from shared memory: cuda_attention.q_smem). */
int g_attn_sms = 132, g_attn_chunk = 0, g_attn_qs = 0;

enum hr_status attn_prepare(int sm_count, char *err, size_t errlen)
{
    g_attn_sms = sm_count > 0 ? sm_count : 132;
    const char *c = getenv("HEARTH_CUDA_ATTN_CHUNK");
    g_attn_chunk = c ? atoi(c) : 0;
    const char *qs = getenv("HEARTH_CUDA_ATTN_QS");
    g_attn_qs = qs && atoi(qs) > 0;
    cudaFuncSetAttribute(attn_kernel<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATTN_SMEM);
    cudaFuncSetAttribute(attn_kernel<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATTN_SMEM);
    /* three blocks of 76 KB an SM: all of its memory as shared */
    cudaFuncSetAttribute(attn_kernel<false, true>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    cudaFuncSetAttribute(attn_kernel<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATTN_SMEM);
    /* six blocks of 37 KB an SM: all of its memory as shared */
    cudaFuncSetAttribute(attn_dec_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    return launch_status("attention prepare", err, errlen);
}

enum hr_status attn_prep(const struct cuda_attn_prep *a, void *stream, char *err, size_t errlen)
{
    enum hr_status st = check_kv(&a->kv, a->layer, "attn_prep", err, errlen);
    if (st)
        return st;
    if (!a->b || !a->q || !a->k || !a->v || !a->q_norm || !a->k_norm || a->n_heads <= 0 || a->b->n_tok < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attn_prep: bad arguments");
    if (a->b->n_tok == 0)
        return HR_OK;
    /* blocks a token: enough for a decode step's few tokens to fill the card; a long
     * step has blocks enough at one a token, which then works RoPE's table out once
     * rather than five times (44 -> 29 us for 2,048 tokens of the 30B-A3B, ncu).  A launch
     * shape: a row's arithmetic is its warp's whatever the grid. */
    const int ng = a->b->n_tok >= PREP_ONE_BLOCK ? 1 : (a->n_heads + a->kv.n_kv_heads + 7) / 8;
    dim3 grid(a->b->n_tok, ng);
    klaunch(prep_kernel, grid, 256, 0, (cudaStream_t)stream, *a, *a->b);
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
    if (group > MR)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "cuda attention: %d query heads per KV head (at most %d)", group,
                      MR);
    if (b->n_tok == 0 || b->n_qblocks == 0)
        return HR_OK;
    int ns = splits_of(b->max_kv);
    size_t need = attn_workspace(b->n_tok, a->n_heads, HD, b->max_kv);
    if (need && (!a->work || a->work_bytes < need))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: workspace of %zu bytes needed, %zu given", need,
                      a->work_bytes);
    size_t n_tickets = (size_t)b->n_qblocks * a->kv.n_kv_heads;
    if (ns > 1 && (!a->tickets || a->n_tickets < n_tickets))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: %zu tickets needed, %zu given", n_tickets,
                      a->tickets ? a->n_tickets : 0);
    if (b->n_qblocks > 0x7fffffff || a->kv.n_kv_heads > 65535 || ns > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: grid too large");
    if (b->n_dec < 0 || b->n_dec > b->n_qblocks || (b->n_dec > 0 && group > DR))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda attention: %d decode blocks of %d (%d query heads a KV head)",
                      b->n_dec, b->n_qblocks, group);
    cudaStream_t s = (cudaStream_t)stream;
    /* the leading n_dec blocks (at most DR rows each) take the decode walk.  Of the
     * others, blocks of at most SPLIT_ROWS rows take walk_split (a launch of such blocks
     * alone runs the kernel built for them), the rest walk_long.  Every block merges
     * its rows' splits itself (merge_elems: the same sums however the splits are
     * walked).  The two launches are independent but for PDL's order. */
    if (b->n_dec > 0) { /* the grid says how many: no kernel reads n_qblocks */
        klaunch(attn_dec_kernel, dim3(b->n_dec, a->kv.n_kv_heads, ns), ATTN_THREADS, DEC_SMEM, s, *a, *b, group, ns,
                (float *)a->work, a->tickets);
        if ((st = launch_status("attention (decode)", err, errlen)))
            return st;
    }
    const int n_rest = b->n_qblocks - b->n_dec;
    if (n_rest == 0)
        return HR_OK;
    struct cuda_attn_batch br = *b;
    br.n_qblocks = n_rest;
    br.qblocks = b->qblocks + 2 * (size_t)b->n_dec;
    int *tickets = a->tickets ? a->tickets + (size_t)b->n_dec * a->kv.n_kv_heads : NULL;
    dim3 grid(n_rest, a->kv.n_kv_heads, ns);
    /* A larger block's splits, a launch shape (the sums are the same either way).  w:
     * the splits each of the launch's block slots (two an SM) walks, for prompts that
     * start at position 0 (a block walks half the longest row's splits on average).
     * All of a block's where that is at least their count (its walk no longer than an
     * SM's share), one where blocks are too few to fill the card, else three.  Measured
     * on the H200 (`cuda_bench --attn-prefill`, HEARTH_CUDA_ATTN_CHUNK): at 2,048 tokens
     * the 8B shape 437 us all, 442 three, 505 one; 30B-A3B 382 all, 438 three; 0.6B 240
     * three, 274 all, 263 one; at 512 the 0.6B 36 one, 41 two. */
    const bool qs = a->q_smem ? a->q_smem > 0 : g_attn_qs;
    int chunk = a->chunk > 0 ? a->chunk : g_attn_chunk;
    if (chunk <= 0) {
        double w = (double)n_rest * a->kv.n_kv_heads * ns / 2 / ((qs ? 3.0 : 2.0) * g_attn_sms);
        chunk = w >= ns ? ns : w < 0.75 ? 1 : 3;
    }
    chunk = chunk < ns ? chunk : ns;
    bool all_small = b->max_qtok > 0 && (long)b->max_qtok * group <= SPLIT_ROWS;
    if (all_small)
        klaunch(attn_kernel<true, false>, grid, ATTN_THREADS, ATTN_SMEM, s, *a, br, group, ns, chunk, (float *)a->work,
                tickets);
    else if (qs)
        klaunch(attn_kernel<false, true>, grid, ATTN_THREADS, ATTN_SMEM, s, *a, br, group, ns, chunk,
                (float *)a->work, tickets);
    else
        klaunch(attn_kernel<false, false>, grid, ATTN_THREADS, ATTN_SMEM, s, *a, br, group, ns, chunk,
                (float *)a->work, tickets);
    st = launch_status("attention", err, errlen);
    return st;
}

} // namespace CUK_NS
