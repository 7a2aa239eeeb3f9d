/* The MoE block of one layer on the device, with no host round trip inside it:
 *
 *   router   logits[t, e] = xn[t] . router[e] in f32 (bf16 weights widened), one warp
 *            per (token, expert) with a fixed lane split and a fixed butterfly; it
 *            also writes bf16(xn), the grouped GEMM's rows
 *   route    softmax, top-k (ties to the lower expert), optional renormalisation: a
 *            warp per token (inside the sort's block at a few tokens)
 *   sort     a counting sort of the (token, rank) pairs into per-expert segments
 *            (ballots, no atomics) and the work list of 64-row tiles, in one block
 *   gate/up  a grouped GEMM over the work list, rows gathered from bf16(xn), SwiGLU
 *            epilogue to bf16
 *   down     the same grouped GEMM over the SwiGLU rows, f32 out
 *   combine  h[t] += the weighted sum of the token's rows in rank order, in f32
 *
 * Batch invariance: every value a token gets is computed from that token's data alone
 * with an order that depends only on the layer's shape.  The grouped GEMM's tile is
 * fixed (64 x 128 x 64, no K split): a row's accumulators see the k16 steps in
 * ascending order whatever tile, segment or group size it lands in, so an expert's
 * rows give the same bits in a group of 1 or of 900, and whatever the other tokens
 * chose.  The grid is sized for the most tiles the step can need (known on the host
 * from n_tok alone); tiles past the list's end exit at once. */
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace CUK_NS {

namespace {

constexpr int MOE_BM = 64, MOE_BN = 128, MOE_BK = 64, MOE_STAGES = 4, MOE_THREADS = 256;
constexpr int MOE_LDS = MOE_BK + 8; /* smem row stride (bf16): ldmatrix rows in distinct banks */
constexpr int MOE_A_STAGE = MOE_BM * MOE_LDS, MOE_B_STAGE = MOE_BN * MOE_LDS;
constexpr int MOE_PIPE = MOE_STAGES * (MOE_A_STAGE + MOE_B_STAGE) * 2;
constexpr int MOE_EPI_LD = MOE_BN + 1;
constexpr int MOE_SMEM = MOE_PIPE > MOE_BM * MOE_EPI_LD * 4 ? MOE_PIPE : MOE_BM * MOE_EPI_LD * 4;
static_assert(MOE_SMEM <= 227 * 1024, "two mma.sync blocks an SM fit no more");
constexpr int ROUTER_TOK = 8;  /* a router block's tokens */
constexpr int ROUTER_HMAX = CUDA_MOE_MAX_HIDDEN; /* the router's x rows in shared memory: 192 KB at most */
constexpr int ROUTER_FEW = 64; /* at most this many tokens: a warp an expert (more blocks), else four */
constexpr int SORT_THREADS = 1024; /* a thread an expert when the tiles are listed */
constexpr int ROUTE_FUSE = 8;      /* at most this many tokens: sort_kernel routes them too (at 64
                                    * the fused kernel took 19.7 us against route's 5.2 + the sort's
                                    * 5.7: the routing then runs on one SM, not 16; at 1 and 4, 8.0
                                    * against 9.3) */
static_assert(CUDA_MOE_MAX_EXPERTS <= SORT_THREADS && CUDA_MOE_MAX_EXPERTS <= 32 * 32, "sort and route limits");

/* Offsets of the block's buffers in the work region, for n tokens. */
struct layout {
    size_t xb, logits, top_e, top_w, row_of, tok_of_row, tiles, n_tiles, act, eo, bytes;
    int t_max;
};

size_t put(size_t *off, size_t bytes)
{
    size_t at = (*off + 255) & ~(size_t)255;
    *off = at + bytes;
    return at;
}

/* The most 64-row tiles n * top_k rows can need: a segment of c rows takes
 * ceil(c / 64) <= floor(c / 64) + 1 tiles, and at most min(E, rows) segments are
 * not empty. */
int max_tiles(int rows, int n_experts)
{
    return rows / MOE_BM + (n_experts < rows ? n_experts : rows);
}

layout layout_of(int n, int hidden, int inter, int n_experts, int top_k)
{
    layout o;
    size_t N = (size_t)n, R = N * (size_t)top_k, off = 0;
    o.t_max = max_tiles((int)R, n_experts);
    o.xb = put(&off, N * hidden * 2);
    o.logits = put(&off, N * n_experts * 4);
    o.top_e = put(&off, R * 4);
    o.top_w = put(&off, R * 4);
    o.row_of = put(&off, R * 4);
    o.tok_of_row = put(&off, R * 4);
    o.tiles = put(&off, (size_t)o.t_max * 3 * 4);
    o.n_tiles = put(&off, 4);
    o.act = put(&off, R * inter * 2);
    o.eo = put(&off, R * hidden * 4);
    o.bytes = (off + 255) & ~(size_t)255;
    return o;
}

__device__ __forceinline__ void bf16x8(uint4 v, float *f)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

/* logits[t, e] = xn[t] . w[e]: a warp per EW experts (from (blockIdx.y * 8 + warp) *
 * EW) and the block's ROUTER_TOK tokens.  The block first copies its tokens' xn rows
 * into shared memory (every load in flight at once), and each warp loads its first
 * RU steps of weights before the wait for the kernel before (weights are no step's
 * output), so a few tokens cost about two round trips (a warp that loaded x and w
 * step by step took 6.3 us at one token, 25.5 at 64).  Each weight feeds every token,
 * each x value EW experts (four at many tokens: 156 -> 90 us at 2,048 against one).
 * Lane l sums the elements l*8 .. l*8+7 of every 256 in ascending order, then the
 * lanes meet in a fixed butterfly (lane 0 keeps it): each (token, expert) the same sum
 * whatever the grouping, so EW is a launch shape (test_moe compares 1, 7 and 64 tokens
 * with 900).  The blocks at blockIdx.y = 0 also write xb = bf16(xn) from their copies
 * (a launch less: to_bf16 took 2.2 us a layer at batch 1). */
template <int EW>
__global__ void __launch_bounds__(256) router_kernel(float *logits, uint16_t *xb, const float *xn, const uint16_t *w,
                                                     int n, int H, int E)
{
    constexpr int RU = EW == 1 ? 8 : 2; /* weight steps (of 256 elements) loaded together */
    extern __shared__ float4 xs4[];      /* [ROUTER_TOK, H / 4] */
    const int t0 = blockIdx.x * ROUTER_TOK, lane = threadIdx.x & 31;
    const int e0 = (blockIdx.y * 8 + (threadIdx.x >> 5)) * EW;
    const int nt = n - t0 < ROUTER_TOK ? n - t0 : ROUTER_TOK, ne = E - e0 < EW ? E - e0 : EW;
    const int H4 = H / 4;
    /* rows of experts past E read expert E - 1 (their sums are dropped) */
    const uint16_t *wr[EW];
#pragma unroll
    for (int j = 0; j < EW; j++)
        wr[j] = w + (size_t)(ne > 0 ? e0 + (j < ne ? j : ne - 1) : 0) * H;
    uint4 wv[RU][EW];
    auto wload = [&](int c0) {
#pragma unroll
        for (int u = 0; u < RU; u++) {
            const int h0 = c0 + u * 256 + lane * 8;
#pragma unroll
            for (int j = 0; j < EW; j++)
                wv[u][j] = h0 < H ? __ldg((const uint4 *)(wr[j] + h0)) : make_uint4(0, 0, 0, 0);
        }
    };
    wload(0);
    pdl_wait(); /* klaunch: every block waits before it may leave */
    pdl_release();
    const float4 *src = (const float4 *)(xn + (size_t)t0 * H);
    for (int i = threadIdx.x; i < nt * H4; i += 256) {
        const float4 v = __ldg(src + i);
        xs4[i] = v;
        if (blockIdx.y == 0) {
            uint2 b;
            b.x = f32_to_bf16(v.x) | (uint32_t)f32_to_bf16(v.y) << 16;
            b.y = f32_to_bf16(v.z) | (uint32_t)f32_to_bf16(v.w) << 16;
            ((uint2 *)(xb + (size_t)t0 * H))[i] = b;
        }
    }
    __syncthreads();
    if (ne <= 0)
        return;
    float acc[ROUTER_TOK][EW];
#pragma unroll
    for (int t = 0; t < ROUTER_TOK; t++)
#pragma unroll
        for (int j = 0; j < EW; j++)
            acc[t][j] = 0.0f;
    for (int c0 = 0; c0 < H; c0 += RU * 256) {
        float wf[RU][EW][8];
#pragma unroll
        for (int u = 0; u < RU; u++)
#pragma unroll
            for (int j = 0; j < EW; j++)
                bf16x8(wv[u][j], wf[u][j]);
        if (c0 + RU * 256 < H)
            wload(c0 + RU * 256); /* the next steps' weights under this step's arithmetic */
#pragma unroll
        for (int u = 0; u < RU; u++) {
            const int h0 = c0 + u * 256 + lane * 8;
            if (h0 >= H)
                break;
#pragma unroll
            for (int t = 0; t < ROUTER_TOK; t++) {
                if (t >= nt)
                    break;
                const float4 a = xs4[t * H4 + h0 / 4], b = xs4[t * H4 + h0 / 4 + 1];
                const float xf[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int j = 0; j < EW; j++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[t][j] = __fmaf_rn(xf[i], wf[u][j][i], acc[t][j]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < ROUTER_TOK; t++)
#pragma unroll
        for (int j = 0; j < EW; j++)
#pragma unroll
            for (int off = 16; off; off >>= 1)
                acc[t][j] = __fadd_rn(acc[t][j], __shfl_xor_sync(0xffffffffu, acc[t][j], off));
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < ROUTER_TOK; t++)
#pragma unroll
            for (int j = 0; j < EW; j++)
                if (t < nt && j < ne)
                    logits[(size_t)(t0 + t) * E + e0 + j] = acc[t][j];
}

/* The routing's operands, for sort_kernel's fused routing. */
struct route_args {
    const float *logits; /* [n, E] */
    float *top_w;        /* [n, K] */
    int norm;
};

/* Softmax over the token's logits, top-k by probability with ties to the lower
 * expert, then the optional renormalisation: a warp per token, lane l holding experts
 * l, l + 32, ... (NPL of them) in registers, so the k rounds never go back to memory.
 * The max is exact in any order; the sum is lane-strided partials in ascending order
 * then a fixed butterfly; each top-k round is an exact argmax (larger, or equal and
 * lower). */
template <int NPL>
__device__ __forceinline__ void route_token(const float *logits, int32_t *top_e, float *top_w, int t, int E, int K,
                                            int norm, int lane)
{
    const float *lg = logits + (size_t)t * E;
    float p[NPL];
#pragma unroll
    for (int j = 0; j < NPL; j++)
        p[j] = lane + 32 * j < E ? lg[lane + 32 * j] : -INFINITY;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NPL; j++)
        mx = p[j] > mx ? p[j] : mx;
    for (int off = 16; off; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, mx, off);
        mx = o > mx ? o : mx;
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NPL; j++)
        if (lane + 32 * j < E) {
            p[j] = expf(__fsub_rn(p[j], mx));
            sum = __fadd_rn(sum, p[j]);
        }
    for (int off = 16; off; off >>= 1)
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
#pragma unroll
    for (int j = 0; j < NPL; j++)
        p[j] = lane + 32 * j < E ? __fdiv_rn(p[j], sum) : -1.0f; /* -1: no expert (never taken) */
    int32_t *te = top_e + (size_t)t * K;
    float *tw = top_w + (size_t)t * K;
    float s = 0.0f, wk = 0.0f; /* lane r keeps rank r's weight (ranks past 32: memory) */
    for (int r = 0; r < K; r++) {
        /* The round's argmax by two warp reductions: a probability (>= 0, <= 1) orders as
         * its bits, so key = bits + 1 (0: taken, out of range or NaN) has the warp's
         * largest probability as its max, and the lowest expert holding it is the min of
         * the ids of the lanes at that key (a lane's own best first: ascending j, a tie
         * keeps the lower).  Exact, as any order of compares is. */
        uint32_t key = 0, id = 0;
#pragma unroll
        for (int j = 0; j < NPL; j++) {
            const uint32_t kj = p[j] >= 0.0f ? (__float_as_uint(p[j]) & 0x7fffffffu) + 1u : 0u; /* -0 as +0 */
            if (kj > key) {
                key = kj;
                id = lane + 32 * j;
            }
        }
        const uint32_t kmax = __reduce_max_sync(0xffffffffu, key);
        int best = (int)__reduce_min_sync(0xffffffffu, key == kmax ? id : 0xffffffffu);
        float bv = __uint_as_float(kmax - 1u);
        if (kmax == 0) { /* every probability NaN: any untaken expert, the weight NaN */
            best = r;
            bv = NAN;
        }
#pragma unroll
        for (int j = 0; j < NPL; j++)
            if (lane + 32 * j == best)
                p[j] = -1.0f; /* taken (probabilities are >= 0) */
        if (lane == 0) {
            te[r] = best;
            tw[r] = bv;
            s = __fadd_rn(s, bv);
        }
        if (lane == r)
            wk = bv;
    }
    if (norm) {
        __syncwarp(); /* lane 0's stores of ranks past 32 are seen */
        s = __shfl_sync(0xffffffffu, s, 0);
        for (int r = lane; r < K; r += 32)
            tw[r] = __fdiv_rn(r < 32 ? wk : tw[r], s);
    }
}
template <int NPL> __global__ void route_kernel(const float *logits, int32_t *top_e, float *top_w, int n, int E, int K,
                                                int norm)
{
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    pdl_wait();
    pdl_release();
    if (t < n)
        route_token<NPL>(logits, top_e, top_w, t, E, K, norm, lane);
}

/* One block: pair i = t * K + r goes to row seg[top_e[i]] + (its rank among the pairs
 * of that expert, in pair order); then the tiles of every expert, in expert order.
 * Warp w < hw takes the pairs' w-th contiguous slice and counts each expert's pairs in
 * it (hist[w][e]): the lanes holding one expert find each other (__match_any_sync) and
 * the lowest of them adds their number, one writer an entry.  The experts' segments and
 * every slice's first row in them are then exclusive prefix sums (expert order, then
 * slice order), and a second walk places each pair at its slice's next row: pair order
 * within a segment, as one walk over all the pairs would. */
template <int NPL>
__global__ void __launch_bounds__(SORT_THREADS) sort_kernel(route_args ra, int32_t *top_e, int R, int K, int E, int hw,
                                                            int32_t *row_of, int32_t *tok_of_row, int32_t *tiles,
                                                            int32_t *n_tiles)
{
    extern __shared__ int32_t hist[]; /* [hw, E] */
    __shared__ int32_t wrows[SORT_THREADS / 32], wtiles[SORT_THREADS / 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned below = (1u << lane) - 1;
    for (int i = threadIdx.x; i < hw * E; i += blockDim.x)
        hist[i] = 0;
    pdl_wait();
    pdl_release();
    if constexpr (NPL > 0) /* the routing of a few tokens, a warp a token (route_kernel's) */
        for (int t = warp; t < R / K; t += blockDim.x >> 5)
            route_token<NPL>(ra.logits, top_e, ra.top_w, t, E, K, ra.norm, lane);
    __syncthreads(); /* the counts' zeros and the routing's top_e stores are seen by the block */
    const int slice = (R + hw - 1) / hw, i0 = warp * slice, i1 = min(R, i0 + slice);
    auto walk = [&](bool place) {
        int32_t *h = hist + warp * E;
        for (int b = i0; b < i1; b += 32) {
            const int i = b + lane, e = i < i1 ? __ldcg(top_e + i) : -1; /* maybe this launch's stores */
            const unsigned same = __match_any_sync(0xffffffffu, e);
            if (place && e >= 0) {
                int row = h[e] + __popc(same & below);
                row_of[i] = row;
                tok_of_row[row] = i / K;
            }
            __syncwarp(); /* every lane has read h[e] */
            if (e >= 0 && lane == __ffs(same) - 1)
                h[e] += __popc(same);
            __syncwarp(); /* the counts are seen by the next round's lanes */
        }
    };
    if (warp < hw)
        walk(false);
    __syncthreads();
    /* expert e = thread e: its count, first row and first tile (exclusive prefix sums of
     * the counts and tile counts: a warp's shuffle scan, then the warps' totals), its
     * tiles written by it, and each slice's first row in its segment */
    const int e = threadIdx.x;
    int c = 0;
    if (e < E)
        for (int w = 0; w < hw; w++)
            c += hist[w * E + e];
    const int ct = (c + MOE_BM - 1) / MOE_BM;
    int rs = c, ts = ct;
    for (int o = 1; o < 32; o <<= 1) {
        int r2 = __shfl_up_sync(0xffffffffu, rs, o), t2 = __shfl_up_sync(0xffffffffu, ts, o);
        if (lane >= o) {
            rs += r2;
            ts += t2;
        }
    }
    if (lane == 31) {
        wrows[warp] = rs;
        wtiles[warp] = ts;
    }
    __syncthreads();
    int rb = rs - c, tb = ts - ct;
    for (int w = 0; w < warp; w++) {
        rb += wrows[w];
        tb += wtiles[w];
    }
    if (e < E) {
        for (int i = 0; i < ct; i++) {
            tiles[3 * (tb + i)] = e;
            tiles[3 * (tb + i) + 1] = rb + i * MOE_BM;
            tiles[3 * (tb + i) + 2] = c - i * MOE_BM < MOE_BM ? c - i * MOE_BM : MOE_BM;
        }
        if (e == E - 1)
            *n_tiles = tb + ct;
        for (int w = 0, run = rb; w < hw; w++) {
            int n = hist[w * E + e];
            hist[w * E + e] = run;
            run += n;
        }
    }
    __syncthreads();
    if (warp < hw)
        walk(true);
}

/* The sort's counting warps: as many as 32 whose counts (E ints each) fit
 * SORT_HIST_BYTES of shared memory, under the 48 KB a block gets without opting in (at
 * least 11 at CUDA_MOE_MAX_EXPERTS), and no more than the R pairs fill at 32 a warp:
 * each expert's thread sums and rewrites hw counts (at batch 1 one warp, not 32).  Its
 * threads: the counting warps, a thread an expert, a warp a token it routes, no more
 * (1,024 threads for one token's eight pairs took 7.9 us).  A launch shape: the rows are
 * pair order within each segment however the pairs are sliced (test_moe's bytes). */
constexpr int SORT_HIST_BYTES = 47 * 1024;
static_assert(SORT_HIST_BYTES / (4 * CUDA_MOE_MAX_EXPERTS) >= 1, "a counting warp at the most experts");
int sort_warps(int E, int R)
{
    int hw = SORT_HIST_BYTES / (4 * E), need = (R + 31) / 32;
    hw = hw < 32 ? hw : 32;
    return need < 1 ? 1 : need < hw ? need : hw;
}
int sort_threads(int E, int hw, int routed)
{
    int t = 32 * hw, te = (E + 31) / 32 * 32;
    t = te > t ? te : t;
    t = 32 * routed > t ? 32 * routed : t;
    return t < SORT_THREADS ? t : SORT_THREADS;
}

/* The routing and sort of a gate/up launch that routes its own few tokens (OWN): the
 * logits in, and every output the sort would have written out, for the down and
 * combine kernels and the trace. */
struct own_args {
    route_args ra;
    int32_t *top_e, *row_of, *tok_of_row, *tiles, *n_tiles;
    int n, K, E;
};

struct gparams {
    const uint16_t *x;       /* bf16 A rows [*, k] */
    const int32_t *a_rows;   /* grouped row -> row of x, or NULL: the grouped row itself */
    const uint16_t *w, *w_up; /* bf16 [E, n, k] (SwiGLU: gate and up) */
    void *y;                 /* [R, n]: bf16 (SwiGLU) or f32 */
    const int32_t *tiles, *n_tiles;
    int n, k;
    own_args own;            /* OWN launches only */
};

/* Chunk c (16 bytes) of row r of a tile's k-tile 0 (64 columns), and whether it is read (a chunk not read is zero-filled): the A tile's row
 * r is grouped row row0 + r (x's row a_rows[row0 + r] where gathered), past `rows` not
 * read; the B tile's row r is weight row nt * BN + r of expert e (SwiGLU: gate rows
 * nt * BN / 2 + r, then the same up rows), past n not read. */
__device__ __forceinline__ const uint16_t *a_chunk(const gparams &p, int row0, int rows, int r, int c, bool &ok)
{
    ok = r < rows;
    const int src = ok ? (p.a_rows ? p.a_rows[row0 + r] : row0 + r) : 0;
    return p.x + (size_t)src * p.k + c * 8;
}
template <bool SWIGLU, int BN = MOE_BN>
__device__ __forceinline__ const uint16_t *b_chunk(const gparams &p, size_t w_off, int nt, int r, int c, bool &ok)
{
    const uint16_t *b = p.w;
    int n_at;
    if (SWIGLU) {
        const bool gate = r < BN / 2;
        n_at = nt * (BN / 2) + (gate ? r : r - BN / 2);
        b = gate ? p.w : p.w_up;
    } else {
        n_at = nt * BN + r;
    }
    ok = n_at < p.n;
    return b + w_off + (size_t)(ok ? n_at : 0) * p.k + c * 8;
}

/* One block: columns tile blockIdx.x of work-list tile blockIdx.y (expert e, rows
 * row0 .. row0 + rows - 1 of the grouped order).  2 x 4 warps of 32 x 32; SwiGLU
 * tiles hold 64 gate columns then the same 64 up columns. */
template <bool SWIGLU> __global__ void __launch_bounds__(MOE_THREADS, 2) grouped_kernel(gparams p)
{
    constexpr int WM = MOE_BM / 2, MI = WM / 16, CPR = MOE_BK / 8;
    constexpr int A_PER = MOE_BM * MOE_BK / 8 / MOE_THREADS, B_PER = MOE_BN * MOE_BK / 8 / MOE_THREADS;
    pdl_wait(); /* the work list is the sort's */
    pdl_release();
    if ((int)blockIdx.y >= *p.n_tiles)
        return;
    const int e = p.tiles[3 * blockIdx.y], row0 = p.tiles[3 * blockIdx.y + 1], rows = p.tiles[3 * blockIdx.y + 2];
    extern __shared__ __align__(128) uint16_t smem[];
    uint16_t *sa = smem, *sb = smem + MOE_STAGES * MOE_A_STAGE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
    const int nt = blockIdx.x, kt_n = p.k / MOE_BK;
    const size_t w_off = (size_t)e * p.n * p.k;

    const uint16_t *a_src[A_PER];
    bool a_ok[A_PER];
    int a_dst[A_PER];
#pragma unroll
    for (int i = 0; i < A_PER; i++) {
        int idx = tid + i * MOE_THREADS, r = idx / CPR, ch = idx % CPR;
        a_src[i] = a_chunk(p, row0, rows, r, ch, a_ok[i]);
        a_dst[i] = r * MOE_LDS + ch * 8;
    }
    const uint16_t *b_src[B_PER];
    bool b_ok[B_PER];
    int b_dst[B_PER];
#pragma unroll
    for (int i = 0; i < B_PER; i++) {
        int idx = tid + i * MOE_THREADS, r = idx / CPR, ch = idx % CPR;
        b_src[i] = b_chunk<SWIGLU>(p, w_off, nt, r, ch, b_ok[i]);
        b_dst[i] = r * MOE_LDS + ch * 8;
    }
    auto load = [&](int stage, int kt) {
        size_t ko = (size_t)kt * MOE_BK;
#pragma unroll
        for (int i = 0; i < A_PER; i++)
            cp16(sa + stage * MOE_A_STAGE + a_dst[i], a_src[i] + ko, a_ok[i]);
#pragma unroll
        for (int i = 0; i < B_PER; i++)
            cp16(sb + stage * MOE_B_STAGE + b_dst[i], b_src[i] + ko, b_ok[i]);
    };

    float acc[MI][4][4];
    frag_each<MI>(0, 0, [&](int i, int j, int r, int, int) { acc[i][j][r] = 0.0f; });
    int n_act = 0; /* this warp's m16 tiles that hold rows (warp-uniform) */
#pragma unroll
    for (int i = 0; i < MI; i++)
        n_act += wm * WM + i * 16 < rows;

#pragma unroll
    for (int st = 0; st < MOE_STAGES - 1; st++) {
        if (st < kt_n)
            load(st, st);
        cp_commit();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        cp_wait<MOE_STAGES - 2>();
        __syncthreads();
        int nk = kt + MOE_STAGES - 1;
        if (nk < kt_n)
            load(nk % MOE_STAGES, nk);
        cp_commit();
        if (n_act == 0)
            continue;
        const uint16_t *ta = sa + (kt % MOE_STAGES) * MOE_A_STAGE, *tb = sb + (kt % MOE_STAGES) * MOE_B_STAGE;
#pragma unroll
        for (int kk = 0; kk < MOE_BK; kk += 16) {
            unsigned a[MI][4], b[4][2];
#pragma unroll
            for (int j2 = 0; j2 < 2; j2++)
                ldsm_x4(b[2 * j2][0], b[2 * j2][1], b[2 * j2 + 1][0], b[2 * j2 + 1][1],
                        tb + (wn * 32 + j2 * 16 + ((lane >> 4) << 3) + (lane & 7)) * MOE_LDS + kk +
                            ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int i = 0; i < MI; i++) {
                if (i >= n_act)
                    break;
                ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3],
                        ta + (wm * WM + i * 16 + (lane & 15)) * MOE_LDS + kk + (lane >> 4) * 8);
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma16816(acc[i][j], a[i], b[j]);
            }
        }
    }
    cp_wait<0>();

    if constexpr (SWIGLU) {
        __syncthreads(); /* every warp is done with the pipeline's smem */
        float *tile = (float *)smem;
        frag_each<MI>(wm * WM, wn * 32,
                      [&](int i, int j, int r, int lr, int lc) { tile[lr * MOE_EPI_LD + lc] = acc[i][j][r]; });
        __syncthreads();
        /* the staged tile: gate columns 0..63, up 64..127; outputs from column nt * 64 */
        uint16_t *y = (uint16_t *)p.y;
        for (int x = tid; x < MOE_BM * (MOE_BN / 2); x += MOE_THREADS) {
            int lr = x / (MOE_BN / 2), lc = x % (MOE_BN / 2), col = nt * (MOE_BN / 2) + lc;
            if (lr >= rows || col >= p.n)
                continue;
            float g = tile[lr * MOE_EPI_LD + lc], u = tile[lr * MOE_EPI_LD + MOE_BN / 2 + lc];
            y[(size_t)(row0 + lr) * p.n + col] = f32_to_bf16(swiglu_of(g, u));
        }
    } else {
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int lr = wm * WM + i * 16 + (lane >> 2) + h * 8;
                    int col = nt * MOE_BN + wn * 32 + j * 8 + (lane & 3) * 2;
                    if (lr >= rows || col >= p.n)
                        continue; /* n is even: col + 1 < n too */
                    *(float2 *)((float *)p.y + (size_t)(row0 + lr) * p.n + col) =
                        make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
    }
}

#if defined(CUK_HOPPER)
/* sm90a: the same tiles over the same work list with one warpgroup's m64n128k16 wgmma
 * from shared memory instead of eight warps' mma.sync (which read 2.7 times the shared
 * memory a flop and held the 30B-A3B's prefill experts near a tenth of the tensor
 * cores' rate).  cp.async gathers the rows (rows past the tile's zero-filled) into
 * 128-byte-swizzled stages (chunk c of row r at c ^ (r % 8)), a four-stage ring.
 * Every output element sees the k16 steps in ascending order whatever rows share its
 * tile: the group-size invariance of grouped_kernel.  Its sums are wgmma's, not
 * mma.sync's (the variants' bytes differ on the H200; CUDA_KERNELS_REV 3).  A 128-row
 * tile (two warpgroups, three stages) measured no faster at prefill and slower at
 * batch 1 (bench/notes/cuda.md). */
/* ST stages: 7 (one block an SM, 1.75 times the weight bytes in flight a block) where
 * a grouped launch's blocks fit one wave at one an SM however the tokens route (n K
 * tiles of at most one row, times the column tiles: batch 1), so the bytes in flight
 * set the pace; else 4 (two blocks an SM; the second block's arithmetic overlaps the
 * first's loads).  Measured on the H200 (bench/notes/cuda.md): 30B-A3B batch 1 275.1
 * -> 285.2 tok/s at 7; at 64 tokens 7 stages made decode steps 18.5 -> 19.0 ms.  A
 * launch shape: the same sums either way (test_moe compares 1 token with 7, 64 and
 * 900).  HEARTH_CUDA_MOE_STAGES=4 or 7 forces one, for benchmarks. */
/* BN: the tile's columns, 128 (SwiGLU: 64 gate + 64 up), or 96 for the gate/up of the
 * seven-stage launch (48 + 48): the 30B-A3B's 768 intermediate columns make 16 tiles an
 * expert instead of 12, so batch 1's 8 experts fill 128 of 132 SMs instead of 96, each
 * block streaming 3/4 of the bytes.  A launch shape too: every output element sees the
 * same k16 steps in the same order at either width (test_moe compares 1 token, the 96
 * build, with 7, 64 and 900 at 128).  HEARTH_CUDA_MOE_UP96=0 keeps 128, for benchmarks. */
constexpr int MWG_THREADS = 128;
constexpr int MWG_A = MOE_BM * MOE_BK * 2; /* a stage's bytes: A, then B of BN rows */
__host__ __device__ constexpr int mwg_b(int bn) { return bn * MOE_BK * 2; }
constexpr int mwg_smem(int st, int bn) { return st * (MWG_A + mwg_b(bn)) + 1024; } /* + the swizzle's alignment */
int g_moe_stages = 0; /* 0: by the launch's blocks (above) */
int g_moe_up96 = 1;
int g_moe_sms = 132;

/* OWN_PAIRS: at most this many (token, rank) pairs, the gate/up launch of seven stages
 * routes and sorts its tokens itself, every block the same, and no sort kernel runs
 * (at batch 1 the sort was 8.6 us a layer under ncu, mostly its launch, barriers and
 * L2 round trips, on the chain between the router and the experts).  Each warp routes
 * tokens as route_kernel's warps do (route_token; four registers a lane hold up to 128
 * experts and give route_token<1>'s and <2>'s bits: the lanes' extra experts are out of
 * range, never summed or taken); then one warp ranks the pairs by (expert, pair index),
 * the order the counting sort gives, so rows, segments and tiles (at most 32 rows a
 * segment: one tile an expert, in expert order) are the sort's.  Block (0, 0) writes
 * them out for the down and combine kernels, and top_e for the trace.  HEARTH_CUDA_MOE_OWN=0
 * runs the sort kernel instead, for benchmarks. */
constexpr int OWN_PAIRS = 32, OWN_EXPERTS = 128;
int g_moe_own = 1;

/* This block's tile (false: none, the block leaves) and its rows' tokens (s_tok). */
__device__ __forceinline__ bool own_route(const own_args &o, int32_t *s_tok, int &e, int &row0, int &rows)
{
    __shared__ int32_t s_te[OWN_PAIRS], s_tile[3];
    __shared__ float s_tw[OWN_PAIRS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, R = o.n * o.K;
    for (int t = warp; t < o.n; t += blockDim.x >> 5)
        route_token<OWN_EXPERTS / 32>(o.ra.logits, s_te, s_tw, t, o.E, o.K, o.ra.norm, lane);
    __syncthreads();
    if (warp == 0) {
        const bool live = lane < R;
        const int ei = live ? s_te[lane] : 0x7fffffff;
        int below = 0, same = 0, rank = 0; /* pairs of lower experts; of this one; before it in (e, i) order */
        for (int j = 0; j < R; j++) {
            const int ej = __shfl_sync(0xffffffffu, ei, j);
            below += ej < ei;
            same += ej == ei;
            rank += ej < ei || (ej == ei && j < lane);
        }
        const bool first = live && rank == below; /* the lowest pair of its expert */
        const unsigned firsts = __ballot_sync(0xffffffffu, first);
        int tile = 0; /* experts below this one */
        for (int j = 0; j < R; j++)
            tile += ((firsts >> j) & 1) && __shfl_sync(0xffffffffu, ei, j) < ei;
        const unsigned mine = __ballot_sync(0xffffffffu, first && tile == (int)blockIdx.y);
        const int te = mine ? __shfl_sync(0xffffffffu, ei, __ffs(mine) - 1) : -1;
        if (live && ei == te)
            s_tok[rank - below] = lane / o.K;
        if (mine && lane == __ffs(mine) - 1) {
            s_tile[1] = below;
            s_tile[2] = same;
        }
        if (lane == 0)
            s_tile[0] = te;
        if (blockIdx.x == 0 && blockIdx.y == 0) {
            if (live) {
                o.top_e[lane] = ei;
                o.ra.top_w[lane] = s_tw[lane];
                o.row_of[lane] = rank;
                o.tok_of_row[rank] = lane / o.K;
            }
            if (first) {
                o.tiles[3 * tile] = ei;
                o.tiles[3 * tile + 1] = below;
                o.tiles[3 * tile + 2] = same;
            }
            if (lane == 0)
                *o.n_tiles = __popc(firsts);
        }
    }
    __syncthreads();
    e = s_tile[0];
    row0 = s_tile[1];
    rows = s_tile[2];
    return e >= 0;
}

template <bool SWIGLU, int MWG_STAGES, int BN = MOE_BN, bool OWN = false>
__global__ void __launch_bounds__(MWG_THREADS, MWG_STAGES <= 4 ? 2 : 1) grouped_wg_kernel(gparams p)
{
    constexpr int MWG_B = mwg_b(BN);
    constexpr int A_PER = MOE_BM * 8 / MWG_THREADS, B_PER = BN * 8 / MWG_THREADS; /* 16-byte chunks */
    static_assert(BN % 16 == 0 && (BN * 8) % MWG_THREADS == 0 && MWG_B % 1024 == 0, "whole chunks, aligned stages");
    static_assert(MOE_BK == WG_BK, "a stage is one wg_ktile");
    static_assert(!OWN || SWIGLU, "the gate/up launch routes");
    pdl_wait(); /* the work list is the sort's (OWN: the logits are the router's) */
    pdl_release();
    int e, row0, rows;
    __shared__ int32_t s_tok[OWN ? OWN_PAIRS : 1]; /* OWN: the tile's rows' tokens */
    if constexpr (OWN) {
        if (!own_route(p.own, s_tok, e, row0, rows))
            return;
    } else {
        if ((int)blockIdx.y >= *p.n_tiles)
            return;
        e = p.tiles[3 * blockIdx.y];
        row0 = p.tiles[3 * blockIdx.y + 1];
        rows = p.tiles[3 * blockIdx.y + 2];
    }
    extern __shared__ __align__(128) uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sa = smem, *sb = smem + MWG_STAGES * MWG_A;
    const int tid = threadIdx.x, nt = blockIdx.x, kt_n = p.k / MOE_BK;
    const size_t w_off = (size_t)e * p.n * p.k;

    /* chunk i of a thread: row idx / 8, chunk idx % 8 of it, idx = tid + i * threads */
    const uint16_t *a_src[A_PER], *b_src[B_PER];
    bool a_ok[A_PER], b_ok[B_PER];
#pragma unroll
    for (int i = 0; i < A_PER; i++) {
        int idx = tid + i * MWG_THREADS;
        if constexpr (OWN) { /* a_chunk's, with the tokens from s_tok */
            const int r = idx >> 3;
            a_ok[i] = r < rows;
            a_src[i] = p.x + (size_t)(a_ok[i] ? s_tok[r] : 0) * p.k + (idx & 7) * 8;
        } else {
            a_src[i] = a_chunk(p, row0, rows, idx >> 3, idx & 7, a_ok[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < B_PER; i++) {
        int idx = tid + i * MWG_THREADS;
        b_src[i] = b_chunk<SWIGLU, BN>(p, w_off, nt, idx >> 3, idx & 7, b_ok[i]);
    }
    auto swz = [](int idx) { /* the swizzled byte offset of chunk idx in a stage */
        int r = idx >> 3, c = idx & 7;
        return r * 128 + ((c ^ (r & 7)) << 4);
    };
    auto load = [&](int stage, int kt) {
        size_t ko = (size_t)kt * MOE_BK;
#pragma unroll
        for (int i = 0; i < A_PER; i++)
            cp16(sa + stage * MWG_A + swz(tid + i * MWG_THREADS), a_src[i] + ko, a_ok[i]);
#pragma unroll
        for (int i = 0; i < B_PER; i++)
            cp16(sb + stage * MWG_B + swz(tid + i * MWG_THREADS), b_src[i] + ko, b_ok[i]);
    };

    float d[BN / 2];
    const uint32_t sa_addr = (uint32_t)__cvta_generic_to_shared(sa), sb_addr = (uint32_t)__cvta_generic_to_shared(sb);
#pragma unroll
    for (int st = 0; st < MWG_STAGES - 1; st++) {
        if (st < kt_n)
            load(st, st);
        cp_commit();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        cp_wait<MWG_STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async's writes, seen by wgmma */
        __syncthreads(); /* and the stage the next load overwrites was read by the last wgmma (waited for) */
        int nk = kt + MWG_STAGES - 1;
        if (nk < kt_n)
            load(nk % MWG_STAGES, nk);
        cp_commit();
        const int stg = kt % MWG_STAGES;
        const uint32_t a0 = sa_addr + stg * MWG_A, b0 = sb_addr + stg * MWG_B;
        wg_ktile<BN>(d, a0, b0, kt); /* the first step overwrites d: no zeroing branch before it */
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    cp_wait<0>();

    if constexpr (SWIGLU) { /* from the thread's own gate and up accumulators, as the dense GEMM */
        const int c0 = nt * (BN / 2);
        auto keep = [&](int lr, int c) { return lr < rows && c0 + c < p.n; }; /* n is even: c + 1 too */
        wg_swiglu_pairs<BN>(d, 0, keep, [&](int lr, int c, float v0, float v1) {
            *(uint32_t *)((uint16_t *)p.y + (size_t)(row0 + lr) * p.n + c0 + c) = bf16x2(v0, v1);
        });
    } else {
        /* accumulators 4 i + 2 h, + 1: row 16 warp + lane / 4 + 8 h, columns 8 i + 2 (lane % 4), + 1 */
        const int lane = tid & 31, wr = tid >> 5;
#pragma unroll
        for (int i = 0; i < BN / 8; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int lr = wr * 16 + (lane >> 2) + h * 8, col = nt * BN + i * 8 + (lane & 3) * 2;
                if (lr >= rows || col >= p.n)
                    continue; /* n is even: col + 1 < n too */
                *(float2 *)((float *)p.y + (size_t)(row0 + lr) * p.n + col) =
                    make_float2(d[4 * i + 2 * h], d[4 * i + 2 * h + 1]);
            }
    }
}

/* The shared memory of one grouped build. */
template <bool SWIGLU, int ST, int BN = MOE_BN, bool OWN = false> void grouped_wg_smem()
{
    cudaFuncSetAttribute(grouped_wg_kernel<SWIGLU, ST, BN, OWN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         mwg_smem(ST, BN));
}
/* The launch of the gate/up (SwiGLU) and down kernels of ST stages: the gate/up tiles
 * UP_BN wide (g_up's columns), the down's 128. */
template <int ST, int UP_BN = MOE_BN, bool OWN = false>
void grouped_wg_launch(const gparams &up, dim3 g_up, const gparams &down, dim3 g_down, cudaStream_t st)
{
    klaunch(grouped_wg_kernel<true, ST, UP_BN, OWN>, g_up, MWG_THREADS, mwg_smem(ST, UP_BN), st, up);
    klaunch(grouped_wg_kernel<false, ST>, g_down, MWG_THREADS, mwg_smem(ST, MOE_BN), st, down);
}
#endif /* CUK_HOPPER */

/* h[t] += sum over ranks r (in order) of w[t, r] * eo[row_of[t, r]], in f32: a thread
 * an element (block (d-tile, t)), eight ranks' loads issued before their sum. */
__global__ void combine_kernel(float *__restrict__ h, const float *__restrict__ eo, const int32_t *__restrict__ row_of,
                               const float *__restrict__ top_w, int H, int K)
{
    const size_t t = blockIdx.y;
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    pdl_wait();
    pdl_release();
    if (d >= H)
        return;
    const int32_t *ro = row_of + t * K;
    const float *tw = top_w + t * K;
    const float h0 = h[t * H + d];
    float y = 0.0f;
    int r = 0;
    for (; r + 8 <= K; r += 8) {
        float w[8], v[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            w[i] = tw[r + i];
            v[i] = eo[(size_t)ro[r + i] * H + d];
        }
#pragma unroll
        for (int i = 0; i < 8; i++)
            y = __fadd_rn(y, __fmul_rn(w[i], v[i]));
    }
    for (; r < K; r++)
        y = __fadd_rn(y, __fmul_rn(tw[r], eo[(size_t)ro[r] * H + d]));
    h[t * H + d] = __fadd_rn(h0, y);
}

/* f(std::integral_constant<int, NPL>): the fewest registers a lane that hold E experts
 * in the routing */
template <class F> void by_npl(int E, F f)
{
    const int npl = (E + 31) / 32;
    if (npl <= 1)
        f(std::integral_constant<int, 1>());
    else if (npl <= 2)
        f(std::integral_constant<int, 2>());
    else if (npl <= 4)
        f(std::integral_constant<int, 4>());
    else if (npl <= 8)
        f(std::integral_constant<int, 8>());
    else if (npl <= 16)
        f(std::integral_constant<int, 16>());
    else
        f(std::integral_constant<int, 32>());
}

/* top_e, top_w from the logits, then the sort: at up to ROUTE_FUSE tokens the sort's
 * block routes them first (a launch less; a warp a token either way, the same bits) */
void route_sort(const route_args &ra, int32_t *top_e, int n, int E, int K, int32_t *row_of, int32_t *tok_of_row,
                int32_t *tiles, int32_t *n_tiles, cudaStream_t st)
{
    const int R = n * K, hw = sort_warps(E, R);
    const size_t hs = (size_t)hw * E * 4;
    if (n <= ROUTE_FUSE && E <= 128) { /* (more experts a lane spill at the sort's 64 registers) */
        by_npl(E, [&](auto N) {
            if constexpr (decltype(N)::value <= 4)
                klaunch(sort_kernel<decltype(N)::value>, 1, sort_threads(E, hw, n), hs, st, ra, top_e, R, K, E, hw,
                        row_of, tok_of_row, tiles, n_tiles);
        });
        return;
    }
    by_npl(E, [&](auto N) {
        klaunch(route_kernel<decltype(N)::value>, (n + 3) / 4, 128, 0, st, ra.logits, top_e, ra.top_w, n, E, K,
                ra.norm);
    });
    klaunch(sort_kernel<0>, 1, sort_threads(E, hw, 0), hs, st, ra, top_e, R, K, E, hw, row_of, tok_of_row, tiles,
            n_tiles);
}

} // namespace

enum hr_status moe_prepare(int sm_count, char *err, size_t errlen)
{
    cudaFuncSetAttribute(router_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, ROUTER_TOK * ROUTER_HMAX * 4);
    cudaFuncSetAttribute(router_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, ROUTER_TOK * ROUTER_HMAX * 4);
#if defined(CUK_HOPPER)
    const char *v = getenv("HEARTH_CUDA_MOE_STAGES");
    g_moe_stages = v && *v ? atoi(v) : 0;
    if (g_moe_stages != 0 && g_moe_stages != 4 && g_moe_stages != 7)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_MOE_STAGES=%s: 4 or 7", v);
    v = getenv("HEARTH_CUDA_MOE_UP96");
    g_moe_up96 = !(v && *v && strcmp(v, "0") == 0);
    v = getenv("HEARTH_CUDA_MOE_OWN");
    g_moe_own = !(v && *v && strcmp(v, "0") == 0);
    g_moe_sms = sm_count > 0 ? sm_count : 132;
    grouped_wg_smem<false, 4>();
    grouped_wg_smem<false, 7>();
    grouped_wg_smem<true, 4>();
    grouped_wg_smem<true, 7>();
    grouped_wg_smem<true, 7, 96>();
    grouped_wg_smem<true, 7, 96, true>();
    grouped_wg_smem<true, 7, 128, true>();
#else
    (void)sm_count; /* mma.sync's grouped GEMM has one build */
    cudaFuncSetAttribute(grouped_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_SMEM);
    cudaFuncSetAttribute(grouped_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_SMEM);
#endif
    return launch_status("moe prepare", err, errlen);
}

size_t moe_workspace(int n_tok, int hidden, int inter, int n_experts, int top_k)
{
    if (n_tok < 1 || hidden < 1 || inter < 1 || n_experts < 1 || top_k < 1)
        return 0;
    return layout_of(n_tok, hidden, inter, n_experts, top_k).bytes;
}

enum hr_status moe(const struct cuda_moe *a, void *stream, char *err, size_t errlen)
{
    if (a->n_tok < 0 || a->hidden < 64 || a->hidden % 64 || a->hidden > ROUTER_HMAX || a->inter < 64 ||
        a->inter % 64 || a->n_experts < 1 || a->n_experts > CUDA_MOE_MAX_EXPERTS || a->top_k < 1 ||
        a->top_k > a->n_experts)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "cuda moe: bad shape hidden=%d inter=%d experts=%d top_k=%d (hidden and inter multiples of 64, "
                      "hidden at most %d, 1..%d experts)",
                      a->hidden, a->inter, a->n_experts, a->top_k, ROUTER_HMAX, CUDA_MOE_MAX_EXPERTS);
    if (!a->h || !a->xn || !a->router || !a->gate || !a->up || !a->down)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda moe: missing operand");
    if (a->n_tok == 0)
        return HR_OK;
    const int n = a->n_tok, H = a->hidden, I = a->inter, E = a->n_experts, K = a->top_k, R = n * K;
    layout o = layout_of(n, H, I, E, K);
    if (!a->work || a->work_bytes < o.bytes)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda moe: a workspace of %zu bytes needed, %zu given", o.bytes,
                      a->work_bytes);
    if (o.t_max > 65535 || n > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda moe: %d tokens are too many for one launch", n);
    uint8_t *w = (uint8_t *)a->work;
    uint16_t *xb = (uint16_t *)(w + o.xb), *act = (uint16_t *)(w + o.act);
    float *logits = (float *)(w + o.logits), *top_w = (float *)(w + o.top_w), *eo = (float *)(w + o.eo);
    int32_t *top_e = (int32_t *)(w + o.top_e), *row_of = (int32_t *)(w + o.row_of);
    int32_t *tok_of_row = (int32_t *)(w + o.tok_of_row), *tiles = (int32_t *)(w + o.tiles);
    int32_t *n_tiles = (int32_t *)(w + o.n_tiles);
    cudaStream_t st = (cudaStream_t)stream;

    enum hr_status s;
    const int ew = n <= ROUTER_FEW ? 1 : 4; /* a warp's experts: a launch shape */
    klaunch(ew == 1 ? router_kernel<1> : router_kernel<4>,
            dim3((n + ROUTER_TOK - 1) / ROUTER_TOK, (E + 8 * ew - 1) / (8 * ew)), 256,
            (size_t)(n < ROUTER_TOK ? n : ROUTER_TOK) * H * 4, st, logits, xb, a->xn, a->router, n, H, E);
    const dim3 g_up((I + MOE_BN / 2 - 1) / (MOE_BN / 2), o.t_max), g_down((H + MOE_BN - 1) / MOE_BN, o.t_max);
    const route_args ra = {logits, top_w, a->norm_topk};
    gparams g = {xb, tok_of_row, a->gate, a->up, act, tiles, n_tiles, I, H, {}};
    gparams gd = {act, NULL, a->down, NULL, eo, tiles, n_tiles, H, I, {}};
#if defined(CUK_HOPPER)
    /* the most blocks a launch pair can need with up.x gate/up column tiles: a tile a pair at most */
    auto most = [&](const dim3 &up) { return (long)R * (up.x > g_down.x ? up.x : g_down.x); };
    const dim3 g_up96((I + 47) / 48, o.t_max);
    const long most_blocks = most(g_up), most96 = most(g_up96);
    const bool seven = g_moe_stages == 7 || (g_moe_stages == 0 && most_blocks <= g_moe_sms);
    const bool up96 = seven && g_moe_up96 && most96 <= g_moe_sms; /* still one wave: a stream 3/4 as long a block */
    const bool own = seven && g_moe_own && R <= OWN_PAIRS && E <= OWN_EXPERTS;
    if (own)
        g.own = {ra, top_e, row_of, tok_of_row, tiles, n_tiles, n, K, E};
    else
        route_sort(ra, top_e, n, E, K, row_of, tok_of_row, tiles, n_tiles, st);
    if ((s = launch_status("moe routing", err, errlen)) != HR_OK)
        return s;
    if (own && up96)
        grouped_wg_launch<7, 96, true>(g, g_up96, gd, g_down, st);
    else if (own)
        grouped_wg_launch<7, 128, true>(g, g_up, gd, g_down, st);
    else if (up96)
        grouped_wg_launch<7, 96>(g, g_up96, gd, g_down, st);
    else if (seven)
        grouped_wg_launch<7>(g, g_up, gd, g_down, st);
    else
        grouped_wg_launch<4>(g, g_up, gd, g_down, st);
#else
    route_sort(ra, top_e, n, E, K, row_of, tok_of_row, tiles, n_tiles, st);
    if ((s = launch_status("moe routing", err, errlen)) != HR_OK)
        return s;
    klaunch(grouped_kernel<true>, g_up, MOE_THREADS, MOE_SMEM, st, g);
    klaunch(grouped_kernel<false>, g_down, MOE_THREADS, MOE_SMEM, st, gd);
#endif
    klaunch(combine_kernel, dim3((H + 255) / 256, n), 256, 0, st, a->h, (const float *)eo, (const int32_t *)row_of,
            (const float *)top_w, H, K);
    if ((s = launch_status("moe experts", err, errlen)) != HR_OK)
        return s;
    if (a->trace) {
        cudaError_t e = cudaMemcpyAsync(a->trace, top_e, (size_t)R * 4, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(st);
        if (e != cudaSuccess)
            return hr_err(err, errlen, HR_ERR_INTERNAL, "cuda moe: the routing trace: %s", cudaGetErrorString(e));
    }
    return HR_OK;
}

} // namespace CUK_NS
