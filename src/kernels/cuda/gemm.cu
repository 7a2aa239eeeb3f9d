/* GEMM y[m, n] = x[m, k] . w[n, k]^T: bf16 operands, f32 accumulation on the tensor
 * cores (mma.sync m16n8k16), one kernel for every m.
 *
 * Batch invariance: an output element is one thread's accumulator, fed the k16 steps
 * of its k range in ascending order; rows never interact inside mma.  The tile shape
 * is fixed (BM x BN x BK), and the only other choice, the K split, is a function of
 * (n, k, epilogue) and the SM count (gemm_split): K is cut into S equal parts, each
 * part summed from zero, and the parts' sums added in order 0, 1, ... S-1.  Who
 * computes a part does not change what is summed: either one block per part (the
 * partial sums go to a workspace and combine_kernel, or the last block of a tile to
 * finish chosen by a ticket counter, adds them in order; on Hopper's TMA tile, the
 * tile's cluster adds them in shared memory), or one block walks all S
 * parts and folds each into a running sum as it ends (no workspace: large m, where the
 * tiles alone fill the SMs).  So row i of y has the same bits whatever m is and
 * whatever the other rows hold; the tests compare the ways at the same shapes, bytes.
 *
 * Blocks whose rows lie past m skip their MMAs (each element still sees the same
 * sequence of steps); rows past m and columns past n are zero-filled on load.
 * Pipeline: STAGES-deep cp.async ring, ldmatrix from padded rows (80 bytes: the
 * eight 16-byte rows of an ldmatrix fall in distinct banks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap (types only: the encoder is the driver's, looked up at run time) */

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace CUK_NS {

namespace {

constexpr int BN = 128, THREADS = 256;

/* f(E) with the epilogue epi as a compile-time constant (E::value): each kernel template
 * is instantiated once per epilogue, and its launch and its shared-memory setting pick
 * the instantiation through this one switch. */
template <class F> void by_epi(enum cuda_epi epi, F f)
{
    switch (epi) {
    case CUDA_EPI_STORE_F32: f(std::integral_constant<int, CUDA_EPI_STORE_F32>{}); break;
    case CUDA_EPI_ADD_F32: f(std::integral_constant<int, CUDA_EPI_ADD_F32>{}); break;
    case CUDA_EPI_STORE_BF16: f(std::integral_constant<int, CUDA_EPI_STORE_BF16>{}); break;
    case CUDA_EPI_SWIGLU_BF16: f(std::integral_constant<int, CUDA_EPI_SWIGLU_BF16>{}); break;
    }
}
template <class F> void each_epi(F f)
{
    for (int e = CUDA_EPI_STORE_F32; e <= CUDA_EPI_SWIGLU_BF16; e++)
        by_epi((enum cuda_epi)e, f);
}

/* Tile configurations (BM x BN x BK, STAGES); which one a shape uses is a function of
 * the shape alone (tile_of), or HEARTH_CUDA_GEMM_TILE for the whole process. */
enum tile { TILE_64x64, TILE_128x64, TILE_WGMMA, TILE_WGMMA64, TILE_TMA, TILE_TMA64, TILE_COUNT };
static const char *const tile_names[TILE_COUNT] = {"64x64",      "128x64",  "wgmma128x64",
                                                   "wgmma64x64", "tma128", "tma64"};

template <int BM_, int BK_, int STAGES_> struct cfg {
    static constexpr int BM = BM_, BK = BK_, STAGES = STAGES_;
    static constexpr int MIN_BLOCKS = 2; /* two blocks an SM: one's loads hide the other's waits */
    static constexpr int LDS = BK + 8; /* smem row stride, bf16 elements: ldmatrix rows in distinct banks */
    static constexpr int A_STAGE = BM * LDS, B_STAGE = BN * LDS;
    static constexpr int PIPE = STAGES * (A_STAGE + B_STAGE) * 2;
    static constexpr int EPI_LD = BN + 1; /* the SwiGLU staging tile's row stride, floats */
    static constexpr int SMEM = PIPE > BM * EPI_LD * 4 ? PIPE : BM * EPI_LD * 4;
    static constexpr int WM = BM / 2, MI = WM / 16; /* 2 x 4 warps, WM x 32 each */
    static constexpr int A_PER = BM * BK / 8 / THREADS, B_PER = BN * BK / 8 / THREADS;
};
using cfg64x64 = cfg<64, 64, 4>;   /* 110.6 KB of smem */
using cfg128x64 = cfg<128, 64, 3>; /* 110.6 KB */

int g_sm_count = 132;
int g_tile_forced = -1; /* a tile for every shape, or TILE_AUTO / TILE_MMA (the mma.sync era's mapping) */
constexpr int TILE_AUTO = -1, TILE_MMA = -2;
int g_fill = 1;       /* the split aims at g_fill blocks an SM */
int g_min_part = 256; /* the shortest K part a split may make */
int g_par_rows = 256; /* the most rows of m whose tiles' parts may go to a block each */
/* above this many rows the parts are added by combine_kernel; at or below it by the
 * tile's last block (a ticket).  0: always combine_kernel, which measured faster at batch
 * 1 even as a launch more (H200 greedy decode 0.6B 631 -> 741 tok/s, 8B 185 -> 191,
 * 30B-A3B 226 -> 238, outputs equal; bench/notes/cuda.md) */
int g_ext_rows = 0;
/* The narrow fold (fold_width): a shape with a K split at g_nfold_min..g_nfold_max rows
 * runs one block a tile walking all its parts into a running sum (the sums of a part a
 * block), on 64-row tiles 16 to 128 wide whose blocks fit one an SM, instead of a part a
 * block and a combine or a 128 x 128 fold on few blocks (HEARTH_CUDA_GEMM_NFOLD_MIN /
 * _MAX, 0 off; HEARTH_CUDA_GEMM_FOLD_WIDTH forces a width at every m; a launch shape). */
int g_nfold_min = 33, g_nfold_max = 1024, g_fold_width = 0;
/* How the TMA tile's K-split parts are added where a block takes a part
 * (HEARTH_CUDA_GEMM_CLUSTER; the sums are the same every way): */
enum { CL_OFF, /* 0: combine_kernel */
       CL_AUTO, /* 1: a cluster of a tile's blocks where the clusters fit the GPU at once
                 * and a part is short (in_cluster); elsewhere combine_kernel */
       CL_ALL }; /* "all": a cluster wherever the parts are few enough (benchmarks) */
int g_cluster = CL_AUTO;
int g_cluster_kt = 16; /* CL_AUTO: the longest part, in k tiles, added in a cluster (HEARTH_CUDA_GEMM_CLUSTER_KT) */
/* The unsplit TMA tile's width (gemm_width; the sums are the same at every width):
 * HEARTH_CUDA_GEMM_WIDTH forces one of 16, 32, 40, 48, 64, 96, 128, 192, 256 (0: by the rule;
 * 40 leaves SwiGLU products to the rule), and from HEARTH_CUDA_GEMM_WIDE_ROWS rows on the
 * rule takes 256 (or 192, g_w192). */
int g_width = 0;
int g_wide_rows = 129;
/* SwiGLU's gate and up halves of an nw-wide tile are boxes of nw / 2 rows of 128 bytes:
 * whole 8-row periods of the swizzle only where nw is a multiple of 16 (not 40) */
constexpr bool swiglu_width(int nw) { return nw % 16 == 0; }
/* The one-warpgroup build for a few rows (few_rows; HEARTH_CUDA_GEMM_FEW=0 turns it off):
 * a launch shape, the same sums either way. */
bool g_few = true;
/* The TMA tile's block order (HEARTH_CUDA_GEMM_RASTER; a launch shape, the same sums):
 * in groups of g_raster row tiles, the rows fastest (0: the column tiles fastest). */
int g_raster = 16;
/* Where a shape's 16-wide column tiles fill the SMs, no K split: a few rows' blocks come
 * from narrow column tiles instead (gemm_split, gemm_width).  Changes sums: 0 is the old
 * rule, in the backend's name (HEARTH_CUDA_GEMM_NARROW). */
bool g_narrow = true;
/* the narrowest tile gemm_width may pick (HEARTH_CUDA_GEMM_NARROW_MIN: 16, 32 or 64; a
 * launch shape).  16 measured slower at batch 1 (8B 186.4 against 206.0 tok/s at 32). */
int g_narrow_min = 32;
/* Balanced narrow tiles (HEARTH_CUDA_GEMM_BALANCED=0 turns them off; a launch shape, the
 * same sums): where a few rows' narrow tiles come to more blocks than SMs (two an SM on
 * some SMs, one on the rest, and the launch lasts as long as the SMs that stream two),
 * the width of 40 or 48 columns whose blocks fit one an SM and fill 7/8 of them, its deep
 * build: the 30B-A3B's q/k/v at 40 (129 blocks, not 160 of 32), the 8B's at 48 (130, not
 * 192).  Not for SwiGLU: the 0.6B's gate/up at 48 (two 24-row boxes a stage) took 6.18 us
 * at batch 1 against 5.78 at 32 (H200), and 40 would break the swizzle's 8-row period of
 * its gate and up halves. */
bool g_balanced = true;
/* 256-wide tiles where a narrow shape's 128 x 64 blocks come to more than one round of
 * two-an-SM slots (gemm_width; HEARTH_CUDA_GEMM_WAVES=0 turns it off; a launch shape,
 * the same sums) */
bool g_waves = true;
/* 192-wide tiles where 256's leave a wave's last round mostly idle (gemm_width;
 * HEARTH_CUDA_GEMM_W192=0 turns it off; a launch shape, the same sums) */
bool g_w192 = true;
/* x's tensor map padded to whole 64-row boxes where its buffer allows (x_map_rows;
 * HEARTH_CUDA_GEMM_XPAD=0: not; a launch shape, rows past m are never stored) */
bool g_xpad = true;
/* the unsplit tile's rows a block, forced (HEARTH_CUDA_GEMM_BM 64, 128 or 192; 0: gemm_width
 * picks; the narrow widths always 64, 256 always 128, 192 only at widths 128 and 192):
 * a launch shape, for benchmarks */
int g_bm = 0;
/* 192-row blocks (three consumer warpgroups, 192 wide) at 129-192 rows, where the rows
 * come to two 128-row tiles of which the second has at most one warpgroup's rows
 * (gemm_width; a launch shape, the same sums): HEARTH_CUDA_GEMM_WG3=0 never, 1 where the
 * wide rule picks 192 (the thirtieth session's rule: the 8B gate/up at 160 and 185 rows
 * 91.5 -> 77.3 and 77.8 us on an H100), 2 (the default) also where the busiest SM's
 * rounds of 192 x 192 blocks come to clearly fewer multiply-adds than the wide rule's
 * rounds of 128-row blocks: the lm_heads, 6 rounds of 192 x 192 against 9 of 128 x 256
 * (the 8B's at 160 and 185 rows 526.8 -> 471.5 and 527.1 -> 480.4 us, cuBLAS 492.6 and
 * 514.1; H100, bench/notes/cuda.md, thirty-first session). */
int g_wg3 = 2;
/* The fit rule (gemm_width): a narrow-unsplit shape at 65..g_fit_rows rows takes, of the
 * 64 x 64, 96 x 64, 128 x 64 and 128 x 128 tiles whose blocks fit one an SM, the one
 * that loads the fewest bytes a block (rows + columns a k step), deep (g_deepw)
 * (HEARTH_CUDA_GEMM_FIT_ROWS; 0 turns it off; a launch shape, the same sums).  Measured
 * on an H100 (thirty-first session), old rule -> fit, us: the 8B down at 160 / 185 rows
 * 72.0 / 71.4 -> 54.1 / 54.0 (cuBLAS 51.4 / 47.1), q/o 20.8 / 20.6 -> 18.5 / 18.5, q/k/v
 * 31.1 / 32.1 -> 28.8 / 30.0; at 256 rows 63.6 -> 63.5, 23.1 -> 21.2, 33.5 -> 32.6. */
int g_fit_rows = 256;
/* the 96- and 128-wide deep builds where the fit rule's or a forced width's blocks fit
 * one an SM (HEARTH_CUDA_GEMM_DEEPW=0: their two-an-SM builds, measured slower: the 8B
 * q/k/v at 160 rows 43.8 us at 128 x 128 against 28.8 deep, its down 57.6 at 96 x 64
 * against 54.1; a launch shape) */
bool g_deepw = true;
#if defined(CUK_HOPPER)
/* the clusters of 2, 4, 8 blocks (two an SM) that can run at once: [WG - 1][log2 - 1] */
int g_max_clusters[2][3];
#endif
char g_tag[48];       /* the settings above that change sums, where not the defaults (gemm_tag) */

struct params {
    const uint16_t *x, *w_up;
    float *y32; /* SwiGLU: the bf16 product widened (exact), [m, n], or NULL */
    const uint16_t *seg_w[CUDA_GEMM_SEGS]; /* segment i: y_i[m, n_i] = x . w_i^T */
    void *seg_y[CUDA_GEMM_SEGS];
    int seg_n[CUDA_GEMM_SEGS], seg_t0[CUDA_GEMM_SEGS]; /* columns; first tile */
    int n_seg;
    float *part;  /* [split, m, n_tiles * BN] */
    int *tickets; /* [m_tiles, n_tiles], zero between launches */
    int m, k, split, n_tiles;
    int par;      /* blocks a tile's K is shared by: split (a part each) or 1 (one block folds them all) */
    int ext;      /* 1: a part a block writes its partials only; combine_kernel adds them (no tickets) */
    int cluster;  /* 1: a part a block, a cluster of par blocks a tile adds them in its shared memory */
    int few;      /* 1: the 128-row TMA tile's launch runs the one-warpgroup build (few_rows; host only) */
    int wg3;      /* 1: the unsplit TMA tile's launch runs the three-warpgroup (192-row) build (host only) */
    int deep;     /* 1: the tile's blocks fit one an SM and it has a deep build: that one (host only; gemm) */
    int raster;   /* the TMA tile's block order: groups of this many row tiles (tile_at) */
};

/* SwiGLU's element: bf16 into y, and where asked its exact widening into y32 (the
 * f32 the op promises, without a second launch). */
__device__ __forceinline__ void swiglu_store(const params &p, uint16_t *y, size_t at, float v)
{
    uint16_t h = f32_to_bf16(v);
    y[at] = h;
    if (p.y32)
        p.y32[at] = bf16_to_f32(h);
}

/* The SwiGLU outputs of a staged tile (BM x BN floats, row stride ld: gate columns
 * 0..BN/2-1, up BN/2..), rows from m0 and columns from nt * BN/2 within m and n, by
 * nthr threads (this one t): the mma.sync tiles' epilogue. */
template <int BM>
__device__ __forceinline__ void swiglu_tile_out(const params &p, const float *tile, int ld, int m0, int nt, int Np,
                                                uint16_t *y, int t, int nthr)
{
    constexpr int W = BN;
    for (int e = t; e < BM * (W / 2); e += nthr) {
        int lr = e / (W / 2), lc = e % (W / 2);
        int row = m0 + lr, col = nt * (W / 2) + lc;
        if (row >= p.m || col >= Np)
            continue;
        float g = tile[lr * ld + lc], u = tile[lr * ld + W / 2 + lc];
        swiglu_store(p, y, (size_t)row * Np + col, swiglu_of(g, u));
    }
}

/* Two adjacent outputs (at, at + 1) of the stored epilogues. */
template <int EPI> __device__ __forceinline__ void store_pair(void *Yp, size_t at, float v0, float v1)
{
    if constexpr (EPI == CUDA_EPI_STORE_F32) {
        *(float2 *)((float *)Yp + at) = make_float2(v0, v1);
    } else if constexpr (EPI == CUDA_EPI_ADD_F32) {
        float2 o = *(float2 *)((float *)Yp + at);
        *(float2 *)((float *)Yp + at) = make_float2(__fadd_rn(o.x, v0), __fadd_rn(o.y, v1));
    } else {
        *(uint32_t *)((uint16_t *)Yp + at) = bf16x2(v0, v1);
    }
}

/* Tile ntg of a launch: its segment's weights, output and width, and its column tile
 * within the segment (segments: several products of x in one launch). */
struct seg {
    const uint16_t *w;
    void *y;
    int n, nt, i; /* width, column tile within the segment, segment */
};
__device__ __forceinline__ seg seg_of(const params &p, int ntg)
{
    int sg = 0;
    while (sg + 1 < p.n_seg && ntg >= p.seg_t0[sg + 1])
        sg++;
    return seg{p.seg_w[sg], p.seg_y[sg], p.seg_n[sg], ntg - p.seg_t0[sg], sg};
}

constexpr int MAX_SPLIT = 32;
#if defined(CUK_HOPPER)
constexpr int CLUSTER_MAX = 8; /* the most blocks of a portable cluster: parts added in DSMEM */
#endif

/* part(0) + part(1) + ... + part(n - 1), left to right: the one order in which every
 * way of adding a split's parts adds them; every part loaded before the first add. */
template <int NMAX, class L> __device__ __forceinline__ float parts_add(int n, L part)
{
    float v[NMAX];
#pragma unroll
    for (int q = 0; q < NMAX; q++)
        if (q < n)
            v[q] = part(q);
    float t = v[0];
#pragma unroll
    for (int q = 1; q < NMAX; q++)
        if (q < n)
            t = __fadd_rn(t, v[q]);
    return t;
}

/* Parts' partial sums of a column of tile ntg at row `row`, added in part order. */
__device__ __forceinline__ float part_sum(const params &p, int row, int ntg, int c)
{
    const int pw = p.n_tiles * BN;
    const size_t qs = (size_t)p.m * pw;
    const float *src = p.part + (size_t)row * pw + ntg * BN + c;
    return parts_add<MAX_SPLIT>(p.par, [&](int q) { return __ldcg(src + q * qs); });
}

/* The last block of a tile to finish (m = 1): each element of the tile's rows below m,
 * its parts' partial sums added in part order, into the staging tile (row stride ld
 * floats).  A thread takes whole elements and has all of an element's parts in flight
 * at once (not one load a part and element in turn: at m = 1 that chain was most of a
 * split product's time). */
template <int BM, int NT> __device__ void combine_parts(const params &p, int m0, int ntg, float *tile, int ld)
{
    const int n_el = min(BM, p.m - m0) * BN;
    for (int e = threadIdx.x; e < n_el; e += NT)
        tile[(e / BN) * ld + e % BN] = part_sum(p, m0 + e / BN, ntg, e % BN);
}

/* Output column c of a tile (SwiGLU: c < BN / 2, gate column c with up column BN / 2 +
 * c) at row `row` of segment sg, from sum(cc): tile column cc's parts added in part
 * order; the epilogue element by element as the GEMM kernels do it. */
template <int EPI, class S>
__device__ __forceinline__ void epi_element(const params &p, const seg &sg, int row, int c, S sum)
{
    if constexpr (EPI == CUDA_EPI_SWIGLU_BF16) {
        int col = sg.nt * (BN / 2) + c;
        if (c >= BN / 2 || col >= sg.n)
            return;
        float g = sum(c), u = sum(BN / 2 + c);
        swiglu_store(p, (uint16_t *)sg.y, (size_t)row * sg.n + col, swiglu_of(g, u));
    } else {
        int col = sg.nt * BN + c;
        if (col >= sg.n)
            return;
        float v = sum(c);
        size_t at = (size_t)row * sg.n + col;
        if constexpr (EPI == CUDA_EPI_STORE_F32)
            ((float *)sg.y)[at] = v;
        else if constexpr (EPI == CUDA_EPI_ADD_F32)
            ((float *)sg.y)[at] = __fadd_rn(((float *)sg.y)[at], v);
        else
            ((uint16_t *)sg.y)[at] = f32_to_bf16(v);
    }
}

/* Block (tile blockIdx.x, row blockIdx.y) after an ext launch: each column's parts
 * added in part order (the sums of combine_parts), then the epilogue, element by
 * element as the GEMM kernels do it.  Every element by its own thread: where a tile
 * holds more than a few rows, the last block's combine was the product's bottleneck. */
template <int EPI> __global__ void __launch_bounds__(BN) combine_kernel(params p)
{
    const int ntg = blockIdx.x, row = blockIdx.y, c = threadIdx.x;
    const seg sg = seg_of(p, ntg);
    pdl_wait();
    pdl_release();
    epi_element<EPI>(p, sg, row, c, [&](int cc) { return part_sum(p, row, ntg, cc); });
}

/* One block: tile (blockIdx.y, blockIdx.x) of y, k tiles of split blockIdx.z.  For
 * SwiGLU the tile's columns 0..BN/2-1 are gate rows and BN/2.. the same up rows. */
template <class C, int EPI> __global__ void __launch_bounds__(THREADS, C::MIN_BLOCKS) gemm_kernel(params p)
{
    constexpr int BM = C::BM, BK = C::BK, STAGES = C::STAGES, LDS = C::LDS, WM = C::WM, MI = C::MI;
    extern __shared__ __align__(128) uint16_t smem[];
    uint16_t *sa = smem, *sb = smem + STAGES * C::A_STAGE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int ntg = blockIdx.x, mt = blockIdx.y, s = blockIdx.z;
    const seg sgm = seg_of(p, ntg);
    const int nt = sgm.nt, Np = sgm.n;
    const uint16_t *const Wp = sgm.w;
    void *const Yp = sgm.y;
    const int m0 = mt * BM;
    /* this block's parts: one (par == split) or all of them, folded in order (par == 1) */
    const int kt_per = p.k / BK / p.split, nq = p.split / p.par, kt0 = s * nq * kt_per, kt_n = nq * kt_per;
    constexpr bool swiglu = EPI == CUDA_EPI_SWIGLU_BF16;
    constexpr int CPR = BK / 8; /* 16-byte chunks per row */
    constexpr bool can_fold = BM == 64; /* the running sum's registers fit the 64-row tile only */

    /* chunk i of a thread: row (tid + i * THREADS) / CPR, 16 bytes (tid % CPR) * 8 on;
     * rows past m or n are zero-filled (their source a valid row, never read).  The
     * destinations and flags are recomputed at each load: registers are this kernel's
     * limit (two blocks an SM, the fold's running sum). */
    const int ch = tid % CPR, row0 = tid / CPR;
    constexpr int ROWS_PER = THREADS / CPR;
    const uint16_t *a_src[C::A_PER];
#pragma unroll
    for (int i = 0; i < C::A_PER; i++) {
        int row = row0 + i * ROWS_PER;
        a_src[i] = p.x + (size_t)(m0 + row < p.m ? m0 + row : 0) * p.k + ch * 8;
    }
    const uint16_t *b_src[C::B_PER];
    unsigned b_okm = 0; /* bit i: chunk i's weight row lies below n */
#pragma unroll
    for (int i = 0; i < C::B_PER; i++) {
        int r = row0 + i * ROWS_PER;
        const uint16_t *base = Wp;
        int n_at;
        if (swiglu) {
            n_at = nt * (BN / 2) + (r & (BN / 2 - 1));
            base = r < BN / 2 ? Wp : p.w_up;
        } else {
            n_at = nt * BN + r;
        }
        b_okm |= (unsigned)(n_at < Np) << i;
        b_src[i] = base + (size_t)(n_at < Np ? n_at : 0) * p.k + ch * 8;
    }

    auto load_a = [&](int stage, int kt) {
        size_t ko = (size_t)kt * BK;
#pragma unroll
        for (int i = 0; i < C::A_PER; i++) {
            int row = row0 + i * ROWS_PER;
            cp16(sa + stage * C::A_STAGE + row * LDS + ch * 8, a_src[i] + ko, m0 + row < p.m);
        }
    };
    auto load_b = [&](int stage, int kt) {
        size_t ko = (size_t)kt * BK;
#pragma unroll
        for (int i = 0; i < C::B_PER; i++)
            cp16(sb + stage * C::B_STAGE + (row0 + i * ROWS_PER) * LDS + ch * 8, b_src[i] + ko, (b_okm >> i) & 1);
    };

    float acc[MI][4][4], run[can_fold ? MI : 1][4][4];
    frag_each<MI>(0, 0, [&](int i, int j, int r, int, int) { acc[i][j][r] = 0.0f; });

    /* m16 tiles of this warp that hold rows below m (warp-uniform) */
    int n_act = 0;
#pragma unroll
    for (int i = 0; i < MI; i++)
        n_act += m0 + wm * WM + i * 16 < p.m;

    /* the first stages' weights before the wait (they overlap the kernel before),
     * the activations after it; the first commit group holds them all */
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++)
        if (st < kt_n)
            load_b(st, kt0 + st);
    pdl_wait();
    pdl_release();
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < kt_n)
            load_a(st, kt0 + st);
        cp_commit();
    }
    for (int kt = 0; kt < kt_n; kt++) {
        cp_wait<STAGES - 2>();
        __syncthreads();
        int nk = kt + STAGES - 1;
        if (nk < kt_n) {
            load_a(nk % STAGES, kt0 + nk);
            load_b(nk % STAGES, kt0 + nk);
        }
        cp_commit();
        if (n_act == 0)
            continue;
        const uint16_t *ta = sa + (kt % STAGES) * C::A_STAGE, *tb = sb + (kt % STAGES) * C::B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MI][4], b[4][2];
#pragma unroll
            for (int j2 = 0; j2 < 2; j2++)
                ldsm_x4(b[2 * j2][0], b[2 * j2][1], b[2 * j2 + 1][0], b[2 * j2 + 1][1],
                        tb + (wn * 32 + j2 * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + kk +
                            ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int i = 0; i < MI; i++) {
                if (i >= n_act)
                    break;
                ldsm_x4(a[i][0], a[i][1], a[i][2], a[i][3],
                        ta + (wm * WM + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma16816(acc[i][j], a[i], b[j]);
            }
        }
        if constexpr (can_fold) {
            if (nq > 1 && (kt + 1) % kt_per == 0) { /* a part ends: run = run + part, in part order */
                const bool first = kt + 1 == kt_per;
                frag_each<MI>(0, 0, [&](int i, int j, int r, int, int) {
                    run[i][j][r] = first ? acc[i][j][r] : __fadd_rn(run[i][j][r], acc[i][j][r]);
                    acc[i][j][r] = 0.0f;
                });
            }
        }
    }
    cp_wait<0>();
    if constexpr (can_fold) {
        if (nq > 1)
            frag_each<MI>(0, 0, [&](int i, int j, int r, int, int) { acc[i][j][r] = run[i][j][r]; });
    }

    /* one part a block: the partials, then the combine in part order by the last block */
    const int pw = p.n_tiles * BN; /* partial row width */
    if (p.par > 1) {
        frag_each<MI>(m0 + wm * WM, ntg * BN + wn * 32, [&](int i, int j, int r, int row, int col) {
            if (row < p.m)
                __stcg(p.part + ((size_t)s * p.m + row) * pw + col, acc[i][j][r]);
        });
        if (p.ext)
            return;
        __threadfence();
        __syncthreads();
        __shared__ int last;
        if (tid == 0) {
            int t = atomicAdd(p.tickets + (size_t)mt * p.n_tiles + ntg, 1);
            last = t == p.par - 1;
            if (last)
                p.tickets[(size_t)mt * p.n_tiles + ntg] = 0; /* ready for the next launch */
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();
        float *tile = (float *)smem; /* the pipeline is done with it (the barrier above) */
        combine_parts<BM, THREADS>(p, m0, ntg, tile, C::EPI_LD);
        __syncthreads();
        frag_each<MI>(wm * WM, wn * 32, [&](int i, int j, int r, int lr, int lc) {
            acc[i][j][r] = tile[lr * C::EPI_LD + lc]; /* rows past m: never stored */
        });
        __syncthreads(); /* the SwiGLU epilogue stages through the same smem */
    }

    if constexpr (EPI == CUDA_EPI_SWIGLU_BF16) {
        __syncthreads(); /* every warp is done with the pipeline's smem */
        float *tile = (float *)smem;
        frag_each<MI>(wm * WM, wn * 32,
                      [&](int i, int j, int r, int lr, int lc) { tile[lr * C::EPI_LD + lc] = acc[i][j][r]; });
        __syncthreads();
        swiglu_tile_out<BM>(p, tile, C::EPI_LD, m0, nt, Np, (uint16_t *)Yp, tid, THREADS);
    } else {
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    int row = m0 + wm * WM + i * 16 + (lane >> 2) + h * 8;
                    int col = nt * BN + wn * 32 + j * 8 + (lane & 3) * 2;
                    if (row >= p.m || col >= Np)
                        continue; /* n is even: col + 1 < n too */
                    store_pair<EPI>(Yp, (size_t)row * Np + col, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
    }
}


#if defined(CUK_HOPPER)
/* ------------------------------------------------------------------ wgmma (sm90a) */

/* (64 WG) x 128 tiles, BK 64, WG warpgroups (64 rows each, m64n128k16 wgmma from
 * shared memory); cp.async fills 128-byte-swizzled rows (chunk c of row r at c ^ (r %
 * 8)), the layout the wgmma descriptors name.  Each accumulator element still sees
 * the k16 steps of its range in ascending order, so the K split and the combine are
 * those of the mma.sync kernels.  WG = 1 (64-row tiles, two blocks an SM): twice the
 * weight bytes in flight an SM at small m, and a wave of 2 x SMs tiles. */
template <int WG> struct wg {
    static constexpr int BM = 64 * WG, NT = 128 * WG, BK = 64, STAGES = 4;
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2; /* one stage */
    static constexpr int PIPE = STAGES * (A_BYTES + B_BYTES);
    static constexpr int EPI_LD = BN + 1;
    static constexpr int SMEM = PIPE + 1024; /* + alignment to 1024 (the swizzle's period) */
    static constexpr int A_PER = BM * 8 / NT, B_PER = BN * 8 / NT; /* 16-byte chunks a thread */
    static_assert(BM * EPI_LD * 4 <= PIPE, "the parts' staging tile fits");
};

/* A part's partial sums of a warpgroup's rows (from row0) below m, into the workspace. */
__device__ __forceinline__ void wg_partials(const params &p, const float *d, bool active, int row0, int ntg, int s)
{
    if (!active)
        return;
    const int pw = p.n_tiles * BN;
    wg_each(row0, ntg * BN, [&](int e, int row, int col) {
        if (row < p.m)
            __stcg(p.part + ((size_t)s * p.m + row) * pw + col, d[e]);
    });
}

/* The epilogue of a finished wgmma tile (BM x W, rows from m0; this warpgroup's from
 * lr0), from the accumulators, two adjacent columns a store.  SwiGLU from the thread's
 * own gate and up accumulators (wg_swiglu_pairs): a staging tile in shared memory cost
 * two barriers a tile and, one block an SM, ran with nothing beside it (ncu: 30% of the
 * 8B gate/up's warp cycles at a barrier). */
template <int EPI, int W = BN, int CH = 8>
__device__ __forceinline__ void wg_epilogue(const params &p, const float *d, int lr0, int m0, int nt, int Np, void *Yp)
{
    if constexpr (EPI == CUDA_EPI_SWIGLU_BF16) {
        uint16_t *y = (uint16_t *)Yp;
        const int c0 = nt * (W / 2);
        auto keep = [&](int row, int c) { return row < p.m && c0 + c < Np; }; /* n is even: c + 1 too */
        wg_swiglu_pairs<W>(d, m0 + lr0, keep, [&](int row, int c, float v0, float v1) {
            const uint16_t h0 = f32_to_bf16(v0), h1 = f32_to_bf16(v1);
            const size_t at = (size_t)row * Np + c0 + c;
            *(uint32_t *)(y + at) = bf16_pair(h0, h1);
            if (p.y32)
                *(float2 *)(p.y32 + at) = make_float2(bf16_to_f32(h0), bf16_to_f32(h1));
        });
    } else if constexpr (EPI == CUDA_EPI_ADD_F32) {
        /* y += the tile, CH column groups' old values loaded before any is stored: the
         * stores may alias the loads as the compiler sees them, so pair by pair each
         * load waited for the store before it (ncu: the 8B o and down spent half their
         * warp cycles on those loads, one block an SM) */
        const int lane = threadIdx.x & 31, wr = (threadIdx.x >> 5) & 3;
        float *y = (float *)Yp;
#pragma unroll
        for (int i0 = 0; i0 < W / 8; i0 += CH) {
            float2 o[CH][2];
#pragma unroll
            for (int i = 0; i < CH; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = m0 + lr0 + wr * 16 + (lane >> 2) + 8 * h, col = nt * W + (i0 + i) * 8 + (lane & 3) * 2;
                    if (i0 + i < W / 8 && row < p.m && col < Np) /* n is even: col + 1 < n too */
                        o[i][h] = *(const float2 *)(y + (size_t)row * Np + col);
                }
#pragma unroll
            for (int i = 0; i < CH; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = m0 + lr0 + wr * 16 + (lane >> 2) + 8 * h, col = nt * W + (i0 + i) * 8 + (lane & 3) * 2;
                    const int e = 4 * (i0 + i) + 2 * h;
                    if (i0 + i < W / 8 && row < p.m && col < Np)
                        *(float2 *)(y + (size_t)row * Np + col) =
                            make_float2(__fadd_rn(o[i][h].x, d[e]), __fadd_rn(o[i][h].y, d[e + 1]));
                }
        }
    } else {
        wg_each<W>(m0 + lr0, nt * W, [&](int e, int row, int col) {
            if ((e & 1) || row >= p.m || col >= Np)
                return; /* pairs from their even element; n is even: col + 1 < n too */
            store_pair<EPI>(Yp, (size_t)row * Np + col, d[e], d[e + 1]);
        });
    }
}

template <int WG, int EPI> __global__ void __launch_bounds__(128 * WG, WG == 1 ? 2 : 1) gemm_wgmma_kernel(params p)
{
    using G = wg<WG>;
    constexpr int BM = G::BM, NT = G::NT, BK = G::BK, STAGES = G::STAGES, EPI_LD = G::EPI_LD;
    static_assert(BK == WG_BK, "a stage is one wg_ktile");
    extern __shared__ __align__(128) uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sa = smem, *sb = smem + STAGES * G::A_BYTES;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const int ntg = blockIdx.x, mt = blockIdx.y, s = blockIdx.z;
    const seg sgm = seg_of(p, ntg);
    const int nt = sgm.nt, Np = sgm.n;
    const uint16_t *const Wp = sgm.w;
    void *const Yp = sgm.y;
    const int m0 = mt * BM;
    const int kt_per = p.k / BK / p.split, kt0 = s * kt_per;
    constexpr bool swiglu = EPI == CUDA_EPI_SWIGLU_BF16;

    /* chunk i of a thread: row idx / 8, chunk idx % 8 of it, idx = tid + i * NT */
    const uint16_t *a_src[G::A_PER], *b_src[G::B_PER];
    bool a_ok[G::A_PER], b_ok[G::B_PER];
#pragma unroll
    for (int i = 0; i < G::A_PER; i++) {
        int idx = tid + i * NT, r = idx >> 3, c = idx & 7;
        a_ok[i] = m0 + r < p.m;
        a_src[i] = p.x + (size_t)(a_ok[i] ? m0 + r : 0) * p.k + c * 8;
    }
#pragma unroll
    for (int i = 0; i < G::B_PER; i++) {
        int idx = tid + i * NT, r = idx >> 3, c = idx & 7;
        const uint16_t *base = Wp;
        int n_at;
        if (swiglu) {
            n_at = nt * (BN / 2) + (r & (BN / 2 - 1));
            base = r < BN / 2 ? Wp : p.w_up;
        } else {
            n_at = nt * BN + r;
        }
        b_ok[i] = n_at < Np;
        b_src[i] = base + (size_t)(b_ok[i] ? n_at : 0) * p.k + c * 8;
    }
    auto swz = [&](int idx) { /* the swizzled byte offset of chunk idx in a stage */
        int r = idx >> 3, c = idx & 7;
        return r * 128 + ((c ^ (r & 7)) << 4);
    };
    auto load_a = [&](int stage, int kt) {
        size_t ko = (size_t)kt * BK;
#pragma unroll
        for (int i = 0; i < G::A_PER; i++)
            cp16(sa + stage * G::A_BYTES + swz(tid + i * NT), a_src[i] + ko, a_ok[i]);
    };
    auto load_b = [&](int stage, int kt) {
        size_t ko = (size_t)kt * BK;
#pragma unroll
        for (int i = 0; i < G::B_PER; i++)
            cp16(sb + stage * G::B_BYTES + swz(tid + i * NT), b_src[i] + ko, b_ok[i]);
    };

    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    const bool active = m0 + wgi * 64 < p.m; /* warpgroup-uniform */
    const uint32_t sa_addr = (uint32_t)__cvta_generic_to_shared(sa), sb_addr = (uint32_t)__cvta_generic_to_shared(sb);

#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) /* weights before the wait, as gemm_kernel */
        if (st < kt_per)
            load_b(st, kt0 + st);
    pdl_wait();
    pdl_release();
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < kt_per)
            load_a(st, kt0 + st);
        cp_commit();
    }
    for (int kt = 0; kt < kt_per; kt++) {
        cp_wait<STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        int nk = kt + STAGES - 1;
        if (nk < kt_per) {
            load_a(nk % STAGES, kt0 + nk);
            load_b(nk % STAGES, kt0 + nk);
        }
        cp_commit();
        if (!active)
            continue;
        int stg = kt % STAGES;
        uint32_t a0 = sa_addr + stg * G::A_BYTES + wgi * 64 * 128, b0 = sb_addr + stg * G::B_BYTES;
        wg_ktile<BN>(d, a0, b0, 1);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    cp_wait<0>();

    if (p.par > 1) { /* here par == split: the wgmma tile has no fold */
        wg_partials(p, d, active, m0 + wgi * 64, ntg, s);
        if (p.ext)
            return;
        __threadfence();
        __syncthreads();
        __shared__ int last;
        if (tid == 0) {
            int t = atomicAdd(p.tickets + (size_t)mt * p.n_tiles + ntg, 1);
            last = t == p.par - 1;
            if (last)
                p.tickets[(size_t)mt * p.n_tiles + ntg] = 0;
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();
        float *tile = (float *)smem;
        combine_parts<BM, NT>(p, m0, ntg, tile, EPI_LD);
        __syncthreads();
        wg_each(wgi * 64, 0, [&](int e, int lr, int lc) { d[e] = tile[lr * EPI_LD + lc]; });
        __syncthreads();
    }
    wg_epilogue<EPI>(p, d, wgi * 64, m0, nt, Np, Yp);
}

/* ------------------------------------------------- TMA + wgmma, warp-specialised (sm90a) */

/* (64 WG) x 128 tiles, BK 64: WG consumer warpgroups (64 rows each, m64n128k16 wgmma
 * from shared memory) and a producer (a warpgroup or a warp, see REGS) whose first
 * thread issues the tensor-memory copies (TMA: weight tiles in 64 x 64 boxes, x in boxes
 * of min(m, 64) rows, 128-byte swizzle, rows past n zero-filled) into a ring of STAGES
 * stages; an mbarrier a stage says full (the copies' bytes landed) and one says empty
 * (every consumer warpgroup's wgmma read it).  The consumers keep one k tile's wgmma in
 * flight while the next waits.  Each accumulator
 * element sees the k16 steps of its part in ascending order, each part from zero, the
 * parts added in order: one block a part (partial sums to the workspace,
 * combine_kernel adds them) or one block folding them all into a running sum as they
 * end (no workspace), the same bits either way (the tests compare them). */
template <int WG, bool FOLD, int NW = BN, bool DEEP = false> struct tma {
    /* the build's own arguments, for the list of builds (tma_builds) */
    static constexpr int wg = WG, nw = NW;
    static constexpr bool fold = FOLD, deep = DEEP;
    /* A shape with a K split (FOLD) may need the running sum (64 floats a thread more):
     * the 128-row tile then runs one block an SM with six stages; without a split, two
     * blocks an SM with three (the wide products at batch 1: 192 or more tiles in one
     * wave, and one block's epilogue under the other's loads).  NW, the tile's width
     * (no split only, see gemm_width): 96 fills a wave's two-an-SM slots more evenly at
     * a few rows (at m <= 64 by one warpgroup with five stages: few_rows); 256 (one
     * block an SM, four stages) halves the x loads a flop and reads 1/6 fewer
     * shared-memory bytes a flop at many rows; 192 (one block an SM, five stages) where
     * 256's blocks would leave a wave's last round of SMs mostly idle (gemm_width). */
    static_assert(NW == BN || (!FOLD && (WG >= 2 || NW == 96 || NW <= 64)) || (FOLD && WG == 1 && NW <= 64 && DEEP),
                  "other widths: the unsplit tile (96 and the narrow ones: few rows too), or the narrow fold");
    /* WG 3: 192 rows a block (three consumer warpgroups, one block an SM), unsplit, 128
     * or 192 wide: at 129-192 rows one row tile instead of two 128-row ones, the second
     * of which has one warpgroup of work (gemm_width) */
    static_assert(WG < 3 || (WG == 3 && !FOLD && (NW == BN || NW == 192)),
                  "the 192-row tile: unsplit, 128 or 192 wide");
    /* DEEP: one block an SM with ~216 KB of stages in flight, where the blocks fit one an
     * SM: the narrow one-warpgroup tiles, and (gemm_width's fit rule) the 96- and 128-wide
     * one-warpgroup tiles and the 128 x 128 one */
    static_assert(!DEEP || (WG == 1 && (NW <= 64 || NW == 96 || NW == BN)) || (WG == 2 && NW == BN && !FOLD),
                  "deep: a one-warpgroup tile up to 128 wide, or the unsplit 128 x 128");
    static constexpr bool TWO = (WG == 1 || !FOLD) && NW <= BN && !DEEP && WG < 3; /* two blocks an SM */
    /* the narrow tiles (16 to 64: the unsplit shapes' many blocks at a few rows) keep
     * ~96 KB of stages in flight, two blocks an SM, or, where the blocks fit one an SM
     * (DEEP), ~216 KB: a 64-row x stage is most of a 16- or 32-wide tile's stage, and at
     * a few rows the weight bytes in flight set an SM's stream (the 8B down at batch 1,
     * 128 blocks of 32 columns: 44 us with eight stages) */
    static constexpr int NARROW_STAGES = (DEEP ? 216 : 96) * 1024 / (64 * WG * 64 * 2 + NW * 64 * 2);
    static constexpr int BM = 64 * WG, BK = 64,
                         STAGES = NW <= 64 || DEEP ? NARROW_STAGES
                                  : WG == 1 ? (NW < BN ? 5 : 4)
                                  : WG == 3 ? (NW > BN ? 4 : 5)
                                  : FOLD    ? 6
                                  : NW > BN ? (NW == 192 ? 5 : 4)
                                            : 3;
    /* consumers, then the producer: a warpgroup that gives its registers to the
     * consumers (setmaxnreg), or, two 128-row blocks an SM, one warp (112 registers a
     * thread for all: the compiler's budget for the wgmma is the launch's) */
    static constexpr bool REGS = WG == 1 || FOLD || !TWO;
    static constexpr int NC = 128 * WG, NT = NC + (REGS ? 128 : 32);
    static constexpr int REG_P = 40, REG_C = WG == 1 ? 216 : WG == 2 ? 232 : 152;
    static_assert(!REGS || (NC * REG_C + 128 * REG_P) * (TWO ? 2 : 1) <= 65536, "registers");
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = NW * BK * 2, STAGE = A_BYTES + B_BYTES;
    static constexpr int BOX = NW / 2 * BK * 2; /* SwiGLU's gate or up copy: NW / 2 rows x 64 bf16 */
    static_assert(B_BYTES % 1024 == 0, "a weight box keeps the swizzle's 8-row period");
    static constexpr bool SWIGLU_OK = swiglu_width(NW);
    static_assert(SWIGLU_OK == (BOX % 1024 == 0), "gate and up boxes of whole 8-row periods");
    /* the epilogues built at this width: all, but SwiGLU only where SWIGLU_OK (40 wide is
     * never SwiGLU's, gemm_width) */
    static constexpr bool builds(int epi) { return epi != CUDA_EPI_SWIGLU_BF16 || SWIGLU_OK; }
    static constexpr int SMEM = STAGES * STAGE + 1024 + 2 * STAGES * 8; /* + the swizzle's alignment, barriers */
    static_assert(NW != BN || BM * (BN + 1) * 4 <= STAGES * STAGE, "the cluster's staging tile fits");
};

struct tparams {
    CUtensorMap ta;                     /* x [x_map_rows(), k], boxes of a_rows rows */
    CUtensorMap tb[CUDA_GEMM_SEGS];     /* segment i's weights [n_i, k] */
    CUtensorMap tup;                    /* SwiGLU's up [n, k] */
    params p;
    int a_rows; /* min(m, 64): an x box never reaches past m below 64 rows, nor past the
                 * map's rows above (partly out-of-bounds boxes measured slow: the 8B
                 * gate/up at m = 1 94 against 70 us at m = 128) */
};

__device__ __forceinline__ uint32_t smem_u32(const void *a)
{
    return (uint32_t)__cvta_generic_to_shared(a);
}
__device__ __forceinline__ void mb_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mb_expect(uint64_t *b, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mb_wait(uint64_t *b, int phase)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n"
                 "}\n" ::"r"(smem_u32(b)),
                 "r"(phase)
                 : "memory");
}
/* one box (the map's: 64 columns by its rows) at (column c0, row r0) of the tensor into
 * dst, its bytes counted on bar */
__device__ __forceinline__ void tma_box(void *dst, const CUtensorMap *map, int c0, int r0, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(dst)), "l"((uint64_t)map), "r"(c0), "r"(r0), "r"(smem_u32(bar))
                 : "memory");
}

/* Every thread of the cluster arrives, then waits for the rest: what each wrote to its
 * shared memory before is seen by the others after (release / acquire). */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\n"
                 "barrier.cluster.wait.acquire;\n" ::: "memory");
}
/* The float at shared address a of the cluster's block `rank`. */
__device__ __forceinline__ float ld_dsmem(uint32_t a, int rank)
{
    uint32_t ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(ra) : "memory");
    return v;
}

/* The K split's parts added inside a cluster (a block a part; part q is the cluster's
 * block q): each block has staged its part's tile (the rows below m, row stride BN + 1
 * floats) in its own shared memory; after the cluster's barrier the blocks share the
 * tile's outputs, each element's parts read from the blocks' smem and added in part
 * order (parts_add, as part_sum: the same bits as combine_kernel), then the epilogue.  No
 * workspace, no second launch.  Every thread of every block calls it (the barriers
 * count them all); those with t in [0, nthr) take outputs. */
template <int EPI, int BM>
__device__ __forceinline__ void cluster_sum_out(const params &p, const float *tile, int m0, int ntg, const seg &sg,
                                                int t, int nthr)
{
    constexpr int W = EPI == CUDA_EPI_SWIGLU_BF16 ? BN / 2 : BN, LD = BN + 1;
    cluster_sync();
    if (t >= 0 && t < nthr) {
        const int S = p.par, rows = min(BM, p.m - m0);
        const uint32_t base = smem_u32(tile);
        for (int w = blockIdx.z * nthr + t; w < rows * W; w += S * nthr) {
            const int lr = w / W, c = w % W;
            epi_element<EPI>(p, sg, m0 + lr, c, [&](int cc) {
                const uint32_t a = base + (uint32_t)(lr * LD + cc) * 4;
                return parts_add<CLUSTER_MAX>(S, [&](int q) { return ld_dsmem(a, q); });
            });
        }
    }
    cluster_sync(); /* no block leaves while another still reads its smem */
}

/* The tile (column tile nt, row tile mt) of this block of a (column tiles, row tiles)
 * grid.  Blocks start in launch order, x fastest: with the column tiles fastest a wave
 * of blocks streams every weight tile for one or two row tiles, and the next wave
 * streams them again (the 8B gate/up at 2,048 rows: ~2 GB from HBM for 201 MB of
 * weights).  In groups of `group` row tiles, the rows fastest, a wave shares each
 * weight tile among the group's rows and each x tile among ~wave / group column
 * tiles, from the L2.  Which block takes a tile changes no sum. */
__device__ __forceinline__ void tile_at(int group, int &nt, int &mt)
{
    const int nx = gridDim.x, ny = gridDim.y;
    if (group <= 0 || ny == 1) {
        nt = blockIdx.x;
        mt = blockIdx.y;
        return;
    }
    const int l = blockIdx.y * nx + blockIdx.x, per = group * nx, g0 = l / per * group, gm = min(ny - g0, group);
    mt = g0 + l % per % gm;
    nt = l % per / gm;
}

template <int WG, int EPI, bool FOLD, int NW = BN, bool DEEP = false>
__global__ void __launch_bounds__(tma<WG, FOLD, NW, DEEP>::NT, tma<WG, FOLD, NW, DEEP>::TWO ? 2 : 1)
    gemm_tma_kernel(const __grid_constant__ tparams tp)
{
    using G = tma<WG, FOLD, NW, DEEP>;
    constexpr int BM = G::BM, BK = G::BK, STAGES = G::STAGES;
    static_assert(BK == WG_BK, "a stage is one wg_ktile");
    const params &p = tp.p;
    extern __shared__ __align__(128) uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sa = smem, *sb = smem + STAGES * G::A_BYTES;
    uint64_t *full = (uint64_t *)(smem + STAGES * G::STAGE), *empty = full + STAGES;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const int s = blockIdx.z;
    int ntg, mt;
    tile_at(p.raster, ntg, mt);
    const seg sgm = seg_of(p, ntg);
    const int m0 = mt * BM;
    const int kt_per = p.k / BK / p.split, nq = p.split / p.par, kt0 = s * nq * kt_per, kt_n = nq * kt_per;
    constexpr bool swiglu = EPI == CUDA_EPI_SWIGLU_BF16;

    if (tid == 0) {
        for (int i = 0; i < STAGES; i++) {
            mb_init(full + i, 1);
            mb_init(empty + i, WG);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp >= 4 * WG) { /* the producer */
        if constexpr (G::REGS)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(G::REG_P));
        if (tid == G::NC) {
            const CUtensorMap *tb = &tp.tb[sgm.i];
            auto load_b = [&](int st, int kt) {
                int c0 = (kt0 + kt) * BK;
                if (swiglu) {
                    tma_box(sb + st * G::B_BYTES, tb, c0, sgm.nt * (NW / 2), full + st);
                    tma_box(sb + st * G::B_BYTES + G::BOX, &tp.tup, c0, sgm.nt * (NW / 2), full + st);
                } else { /* one copy: a narrow tile's stage is small, and a copy has its cost */
                    tma_box(sb + st * G::B_BYTES, tb, c0, sgm.nt * NW, full + st);
                }
            };
            /* x boxes of the warpgroups with rows below m; the others' smem keeps what it
             * held, which reaches only their accumulators' rows, never stored */
            const int n_a = min(WG, (p.m - m0 + 63) / 64), bytes = G::B_BYTES + n_a * tp.a_rows * BK * 2;
            auto load_a = [&](int st, int kt) {
                for (int w = 0; w < n_a; w++)
                    tma_box(sa + st * G::A_BYTES + w * 64 * BK * 2, &tp.ta, (kt0 + kt) * BK, m0 + 64 * w, full + st);
            };
            /* the first stages' weights before the wait (they overlap the kernel before) */
            const int pre = kt_n < STAGES ? kt_n : STAGES;
            for (int kt = 0; kt < pre; kt++) {
                mb_expect(full + kt, bytes);
                load_b(kt, kt);
            }
            pdl_wait();
            pdl_release();
            for (int kt = 0; kt < pre; kt++)
                load_a(kt, kt);
            for (int kt = STAGES; kt < kt_n; kt++) {
                int st = kt % STAGES;
                mb_wait(empty + st, ((kt / STAGES) - 1) & 1);
                mb_expect(full + st, bytes);
                load_b(st, kt);
                load_a(st, kt);
            }
        } else {
            pdl_wait();
            pdl_release();
        }
        if constexpr (!FOLD && NW == BN)
            if (p.cluster) /* the cluster's barriers count the producer's threads too */
                cluster_sum_out<EPI, BM>(p, (const float *)smem, m0, ntg, sgm, -1, 0);
        return; /* the consumers' barriers below name just them */
    }

    if constexpr (G::REGS)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(G::REG_C));
    pdl_wait();
    pdl_release();
    /* A part's first k16 step overwrites d rather than d being zeroed on a branch
     * (which made ptxas serialise the wgmma); a warpgroup whose rows all lie past m
     * (m <= 64 on the 128-row tile) runs no wgmma: at batch 1 that work was half the
     * tensor cores' time. */
    float d[NW / 2], run[FOLD ? NW / 2 : 1];
    const bool leader = (tid & 127) == 0; /* arrives on empty for its warpgroup */
    const uint32_t sa_addr = smem_u32(sa) + wgi * 64 * 128, sb_addr = smem_u32(sb);
    if (WG == 1 || m0 + wgi * 64 < p.m) { /* rows below m */
        for (int q = 0; q < nq; q++) {
            for (int j = 0; j < kt_per; j++) {
                const int kt = q * kt_per + j, st = kt % STAGES;
                mb_wait(full + st, (kt / STAGES) & 1);
                uint32_t a0 = sa_addr + st * G::A_BYTES, b0 = sb_addr + st * G::B_BYTES;
                wg_ktile<NW>(d, a0, b0, j); /* a part's first k tile overwrites d */
                /* one k tile's wgmma in flight: the one before is done with its stage */
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                if (leader && j > 0)
                    mb_arrive(empty + (kt - 1) % STAGES);
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (leader)
                mb_arrive(empty + ((q + 1) * kt_per - 1) % STAGES);
            if constexpr (FOLD) {
#pragma unroll
                for (int i = 0; i < NW / 2; i++) /* run = run + part, in part order */
                    run[i] = q == 0 ? d[i] : __fadd_rn(run[i], d[i]);
            }
        }
    } else {
        /* Every row of this warpgroup lies past m: its leader alone keeps the ring turning
         * (and sees every copy land before the cluster's staging reuses the ring).  Its
         * other warps wait on nothing: nothing ties them to the leader's pace, and a warp
         * two phases behind a stage's barrier waits on a parity that phase never ends
         * (the lm_head at m = 1 or 64 hung so under programmatic launch). */
        if (leader)
            for (int kt = 0; kt < kt_n; kt++) {
                mb_wait(full + kt % STAGES, (kt / STAGES) & 1);
                mb_arrive(empty + kt % STAGES);
            }
#pragma unroll
        for (int i = 0; i < NW / 2; i++)
            d[i] = 0.0f; /* defined, though no epilogue reads rows past m */
        if constexpr (FOLD) {
#pragma unroll
            for (int i = 0; i < NW / 2; i++)
                run[i] = 0.0f;
        }
    }
    float *acc = FOLD ? run : d; /* without a fold a block has one part (nq == 1) */
    if constexpr (NW == BN) { /* the other widths have no split (gemm_width) */
        if (!FOLD && p.cluster) { /* a part a block, added in the cluster's shared memory (tma_launch) */
            asm volatile("bar.sync 1, %0;\n" ::"n"(G::NC) : "memory"); /* every wgmma is done with the ring */
            float *tile = (float *)smem;
            const int rows = min(BM, p.m - m0);
            wg_each(wgi * 64, 0, [&](int e, int lr, int lc) {
                if (lr < rows)
                    tile[lr * (BN + 1) + lc] = acc[e];
            });
            cluster_sum_out<EPI, BM>(p, tile, m0, ntg, sgm, tid, G::NC);
            return;
        }
        if (p.par > 1) { /* a part a block: combine_kernel adds the parts */
            wg_partials(p, acc, m0 + wgi * 64 < p.m, m0 + wgi * 64, ntg, s);
            return;
        }
    }
    /* the residual's loads in flight: fewer where two blocks an SM leave 112 registers */
    wg_epilogue<EPI, NW, G::REGS ? 8 : 2>(p, acc, wgi * 64, m0, sgm.nt, sgm.n, sgm.y);
}

/* Every build of the TMA tile that tma_launch may take: gemm_prepare gives each its
 * shared memory and checks the device for the largest, from this one list. */
template <class G> void tma_set_smem()
{
    each_epi([](auto E) {
        if constexpr (G::builds(decltype(E)::value))
            cudaFuncSetAttribute(gemm_tma_kernel<G::wg, decltype(E)::value, G::fold, G::nw, G::deep>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
    });
}
template <class... G> struct tma_list {
    static constexpr int smem = std::max({G::SMEM...});
    static void set_smem() { (tma_set_smem<G>(), ...); }
};
using tma_builds =
    tma_list<tma<2, true>, tma<2, false>, tma<2, false, 96>, tma<2, false, 256>, tma<2, false, 192>, tma<3, false>,
             tma<3, false, 192>, tma<1, true>, tma<1, false>, tma<1, false, 96>, tma<1, false, 64>, tma<1, false, 32>,
             tma<1, false, 16>, tma<1, false, 48>, tma<1, false, 40>, tma<1, false, 64, true>, tma<1, false, 48, true>,
             tma<1, false, 40, true>, tma<1, false, 32, true>, tma<1, false, 16, true>, tma<1, false, 96, true>,
             tma<1, false, BN, true>, tma<2, false, BN, true>, tma<1, true, 16, true>, tma<1, true, 32, true>,
             tma<1, true, 64, true>, tma<1, true, BN, true>>;

/* Clusters of cz blocks of the tile's two-blocks-an-SM build that the GPU runs at once
 * (the blocks of a cluster share a GPC: a count of clusters that fits the SMs may still
 * not fit in one wave); 0 where the query fails. */
template <int WG> int tma_max_clusters(int cz)
{
    using G = tma<WG, false>;
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(1, 1, cz);
    c.blockDim = dim3(G::NT);
    c.dynamicSmemBytes = G::SMEM;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = 1;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = (unsigned)cz;
    c.attrs = &at;
    c.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, gemm_tma_kernel<WG, CUDA_EPI_STORE_F32, false>, &c) != cudaSuccess)
        n = 0;
    return n;
}

decltype(&cuTensorMapEncodeTiled) g_encode; /* the driver's, looked up by gemm_prepare */

/* The rows of x's tensor map: m, or up to the next multiple of 64 where the buffer holds
 * them (cuda_gemm.x_rows; HEARTH_CUDA_GEMM_XPAD=0: m, a launch shape).  A copy whose box
 * reaches past the map's rows has the TMA unit fill zeros, measured slow: the 8B down at
 * 129 rows, 64 x 64 blocks, 110.5 us, at 185 rows 61.0 (H200). */
int x_map_rows(const struct cuda_gemm *g)
{
    static_assert(CUDA_GEMM_X_BOX == 64, "an x copy is a warpgroup's 64 rows");
    const int up = (g->m + CUDA_GEMM_X_BOX - 1) / CUDA_GEMM_X_BOX * CUDA_GEMM_X_BOX;
    return g_xpad && g->x_rows >= up ? up : g->m;
}

/* A 2-D bf16 tensor [rows, k] at base, read in boxes of box_rows x 64 with the 128-byte
 * swizzle; rows past `rows` come in as zeros. */
enum hr_status tma_map(CUtensorMap *map, const uint16_t *base, int rows, int k, int box_rows, const char *what,
                       char *err, size_t errlen)
{
    if (((uintptr_t)base & 15) || rows <= 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: %s at %p, %d rows: TMA needs 16-byte alignment",
                      what, (const void *)base, rows);
    cuuint64_t dim[2] = {(cuuint64_t)k, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)k * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, estride[2] = {1, 1};
    CUresult r = g_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, estride,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "cuda gemm: cuTensorMapEncodeTiled (%s, %d x %d): error %d", what,
                      rows, k, (int)r);
    return HR_OK;
}

template <int WG, bool FOLD, int NW = BN, bool DEEP = false>
void tma_launch_epi(const tparams &tp, enum cuda_epi epi, cudaStream_t st)
{
    using G = tma<WG, FOLD, NW, DEEP>;
    const params &p = tp.p;
    dim3 grid(p.n_tiles, (p.m + G::BM - 1) / G::BM, p.par);
    by_epi(epi, [&](auto E) {
        if constexpr (G::builds(decltype(E)::value))
            klaunch_cz(gemm_tma_kernel<WG, decltype(E)::value, FOLD, NW, DEEP>, grid, G::NT, G::SMEM, st,
                       p.cluster ? p.par : 1, tp);
    });
}

/* The tensor maps of a launch, then the kernel: the folding build where the shape has a
 * K split (a function of the shape, like the split), but for a cluster of a part a
 * block: the two-blocks-an-SM build (measured the faster there, see in_cluster). */
template <int WG> enum hr_status tma_launch(const params &p, const struct cuda_gemm *g, int nw, cudaStream_t st,
                                            char *err, size_t errlen)
{
    tparams tp;
    memset(&tp, 0, sizeof tp);
    tp.p = p;
    tp.a_rows = p.m < 64 ? p.m : 64;
    enum hr_status rc = tma_map(&tp.ta, p.x, x_map_rows(g), p.k, tp.a_rows, "x", err, errlen);
    for (int i = 0; rc == HR_OK && i < p.n_seg; i++)
        rc = tma_map(&tp.tb[i], p.seg_w[i], p.seg_n[i], p.k, g->w_up ? nw / 2 : nw, "w", err, errlen);
    if (rc == HR_OK && g->w_up)
        rc = tma_map(&tp.tup, g->w_up, g->n, p.k, nw / 2, "w_up", err, errlen);
    if (rc != HR_OK)
        return rc;
    /* One warpgroup at a narrow width (16, 32, 40, 48, 64), deep where the blocks fit one
     * an SM; or the narrow fold (fold_width: 16, 32, 64, 128; always deep) */
    auto one_wg = [&](auto F, auto D) {
        constexpr bool FO = decltype(F)::value, DP = decltype(D)::value;
        if (nw == 64)
            tma_launch_epi<1, FO, 64, DP>(tp, g->epi, st);
        else if (nw == 32)
            tma_launch_epi<1, FO, 32, DP>(tp, g->epi, st);
        else if (nw == 16)
            tma_launch_epi<1, FO, 16, DP>(tp, g->epi, st);
        else if constexpr (FO)
            tma_launch_epi<1, true, BN, true>(tp, g->epi, st);
        else if (nw == 48)
            tma_launch_epi<1, false, 48, DP>(tp, g->epi, st);
        else
            tma_launch_epi<1, false, 40, DP>(tp, g->epi, st);
    };
    if (WG == 2 && p.split > 1 && p.par == 1 && p.few) /* the narrow fold */
        one_wg(std::true_type{}, std::true_type{});
    else if (WG == 2 && p.wg3 && nw == 192)
        tma_launch_epi<3, false, 192>(tp, g->epi, st);
    else if (WG == 2 && p.wg3)
        tma_launch_epi<3, false>(tp, g->epi, st);
    else if (WG == 2 && p.few && nw == 96)
        p.deep ? tma_launch_epi<1, false, 96, true>(tp, g->epi, st) : tma_launch_epi<1, false, 96>(tp, g->epi, st);
    else if (WG == 2 && nw <= 64)
        p.deep ? one_wg(std::false_type{}, std::true_type{}) : one_wg(std::false_type{}, std::false_type{});
    else if (WG == 2 && p.few)
        p.deep ? tma_launch_epi<1, false, BN, true>(tp, g->epi, st) : tma_launch_epi<1, false>(tp, g->epi, st);
    else if (WG == 2 && nw == BN && p.deep)
        tma_launch_epi<2, false, BN, true>(tp, g->epi, st);
    else if (WG == 2 && nw == 96)
        tma_launch_epi<2, false, 96>(tp, g->epi, st);
    else if (WG == 2 && nw == 256)
        tma_launch_epi<2, false, 256>(tp, g->epi, st);
    else if (WG == 2 && nw == 192)
        tma_launch_epi<2, false, 192>(tp, g->epi, st);
    else if (p.split > 1 && !p.cluster)
        tma_launch_epi<WG, true>(tp, g->epi, st);
    else
        tma_launch_epi<WG, false>(tp, g->epi, st);
    return HR_OK;
}

template <int WG> void wg_set_smem()
{
    each_epi([](auto E) {
        cudaFuncSetAttribute(gemm_wgmma_kernel<WG, decltype(E)::value>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             wg<WG>::SMEM);
    });
}

template <int WG> void wg_launch(const params &p, enum cuda_epi epi, cudaStream_t st)
{
    using G = wg<WG>;
    dim3 grid(p.n_tiles, (p.m + G::BM - 1) / G::BM, p.par);
    by_epi(epi, [&](auto E) { klaunch(gemm_wgmma_kernel<WG, decltype(E)::value>, grid, G::NT, G::SMEM, st, p); });
}
#endif /* CUK_HOPPER */

int n_tiles_of(int n, enum cuda_epi epi, int w = BN);

/* Where the n tiles alone fill the SMs (no K split: lm_head, the 8B gate/up): wgmma
 * on Hopper, 64-row tiles two blocks an SM (at m <= 64 faster than the 128-row tile
 * by 10-30%, slower by 25-35% at m >= 512: decode weighs more; bench/notes/cuda.md),
 * 128-row mma.sync elsewhere; 64-row mma.sync tiles under a split, where more,
 * smaller blocks stream the weights faster. */
int tile_of(int n, int k, enum cuda_epi epi)
{
    (void)k;
    if (g_tile_forced >= 0)
        return g_tile_forced;
#if defined(CUK_HOPPER)
    if (g_tile_forced == TILE_AUTO)
        return TILE_TMA;
    return n_tiles_of(n, epi) >= g_sm_count ? TILE_WGMMA64 : TILE_64x64;
#else
    return n_tiles_of(n, epi) >= g_sm_count ? TILE_128x64 : TILE_64x64;
#endif
}

int tile_bm(int t)
{
    return t == TILE_128x64 || t == TILE_WGMMA || t == TILE_TMA ? 128 : 64;
}
int tile_bk(int t)
{
    (void)t;
    return 64;
}

int n_tiles_of(int n, enum cuda_epi epi, int w)
{
    int per = epi == CUDA_EPI_SWIGLU_BF16 ? w / 2 : w;
    return (n + per - 1) / per;
}

template <class C> void set_smem()
{
    each_epi([](auto E) {
        cudaFuncSetAttribute(gemm_kernel<C, decltype(E)::value>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    });
}

template <class C> void launch(const params &p, enum cuda_epi epi, cudaStream_t st)
{
    dim3 grid(p.n_tiles, (p.m + C::BM - 1) / C::BM, p.par);
    by_epi(epi, [&](auto E) { klaunch(gemm_kernel<C, decltype(E)::value>, grid, THREADS, C::SMEM, st, p); });
}

} // namespace

enum hr_status gemm_prepare(int sm_count, char *err, size_t errlen)
{
    g_sm_count = sm_count > 0 ? sm_count : 132;
    /* the split's aims, for benchmarks (bench/notes/cuda.md): blocks an SM, shortest part */
    const char *f = getenv("HEARTH_CUDA_GEMM_FILL"), *mk = getenv("HEARTH_CUDA_GEMM_MIN_PART"),
               *pr = getenv("HEARTH_CUDA_GEMM_PAR_ROWS");
    g_fill = f && *f ? atoi(f) : 1;
    g_min_part = mk && *mk ? atoi(mk) : 256;
    g_par_rows = pr && *pr ? atoi(pr) : 256;
    const char *er = getenv("HEARTH_CUDA_GEMM_EXT_ROWS"), *cl = getenv("HEARTH_CUDA_GEMM_CLUSTER");
    g_ext_rows = er && *er ? atoi(er) : 0;
    g_cluster = !cl || !*cl || strcmp(cl, "1") == 0 ? CL_AUTO
                : strcmp(cl, "0") == 0                ? CL_OFF
                : strcmp(cl, "all") == 0              ? CL_ALL
                                                      : -1;
    const char *nf0 = getenv("HEARTH_CUDA_GEMM_NFOLD_MIN"), *nf1 = getenv("HEARTH_CUDA_GEMM_NFOLD_MAX"),
               *fwd = getenv("HEARTH_CUDA_GEMM_FOLD_WIDTH");
    g_nfold_min = nf0 && *nf0 ? atoi(nf0) : 33;
    g_nfold_max = nf1 && *nf1 ? atoi(nf1) : 1024;
    g_fold_width = fwd && *fwd ? atoi(fwd) : 0;
    if (g_nfold_min < 0 || g_nfold_max < 0 ||
        (g_fold_width != 0 && g_fold_width != 16 && g_fold_width != 32 && g_fold_width != 64 && g_fold_width != BN))
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "HEARTH_CUDA_GEMM_NFOLD_MIN / _MAX: >= 0; HEARTH_CUDA_GEMM_FOLD_WIDTH=%s: 0, 16, 32, 64 or 128",
                      fwd ? fwd : "");
    const char *ckt = getenv("HEARTH_CUDA_GEMM_CLUSTER_KT");
    g_cluster_kt = ckt && *ckt ? atoi(ckt) : 16;
    const char *fw = getenv("HEARTH_CUDA_GEMM_FEW");
    g_few = !(fw && strcmp(fw, "0") == 0);
    const char *na = getenv("HEARTH_CUDA_GEMM_NARROW");
    g_narrow = !(na && strcmp(na, "0") == 0);
    const char *nm = getenv("HEARTH_CUDA_GEMM_NARROW_MIN");
    g_narrow_min = nm && *nm ? atoi(nm) : 32;
    const char *bm = getenv("HEARTH_CUDA_GEMM_BM");
    g_bm = bm && *bm ? atoi(bm) : 0;
    if (g_bm != 0 && g_bm != 64 && g_bm != 128 && g_bm != 192)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_GEMM_BM=%s: 0, 64, 128 or 192", bm);
    const char *w3 = getenv("HEARTH_CUDA_GEMM_WG3");
    g_wg3 = w3 && *w3 ? atoi(w3) : 2;
    if (g_wg3 < 0 || g_wg3 > 2)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_GEMM_WG3=%s: 0, 1 or 2", w3);
    const char *fr = getenv("HEARTH_CUDA_GEMM_FIT_ROWS"), *dw = getenv("HEARTH_CUDA_GEMM_DEEPW");
    g_fit_rows = fr && *fr ? atoi(fr) : 256;
    g_deepw = !(dw && strcmp(dw, "0") == 0);
    if (g_fit_rows < 0)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "HEARTH_CUDA_GEMM_FIT_ROWS=%s: >= 0 (0: off; 256: the fit rule to 256 rows)", fr);
    if (g_narrow_min != 16 && g_narrow_min != 32 && g_narrow_min != 64)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_GEMM_NARROW_MIN=%s: 16, 32 or 64", nm);
    const char *ra = getenv("HEARTH_CUDA_GEMM_RASTER");
    g_raster = ra && *ra ? atoi(ra) : 16;
    if (g_raster < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_GEMM_RASTER=%s: >= 0 (row tiles a group; 0: off)", ra);
    const char *gw = getenv("HEARTH_CUDA_GEMM_WIDTH"), *wr = getenv("HEARTH_CUDA_GEMM_WIDE_ROWS");
    g_width = gw && *gw ? atoi(gw) : 0;
    g_wide_rows = wr && *wr ? atoi(wr) : 129;
    const bool width_ok = g_width == 0 || g_width == 16 || g_width == 32 || g_width == 40 || g_width == 48 ||
                          g_width == 64 || g_width == 96 || g_width == 128 || g_width == 192 || g_width == 256;
    const char *bw = getenv("HEARTH_CUDA_GEMM_BALANCED");
    g_balanced = !(bw && strcmp(bw, "0") == 0);
    const char *xp = getenv("HEARTH_CUDA_GEMM_XPAD");
    g_xpad = !(xp && strcmp(xp, "0") == 0);
    const char *wv = getenv("HEARTH_CUDA_GEMM_WAVES");
    g_waves = !(wv && strcmp(wv, "0") == 0);
    const char *w192 = getenv("HEARTH_CUDA_GEMM_W192");
    g_w192 = !(w192 && strcmp(w192, "0") == 0);
    if (!width_ok || g_wide_rows < 1)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "HEARTH_CUDA_GEMM_WIDTH=%s / _WIDE_ROWS=%s: 0, 16, 32, 40, 48, 64, 96, 128, 192 or 256 / >= 1",
                      gw ? gw : "", wr ? wr : "");
    if (g_cluster < 0 || g_cluster_kt < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "HEARTH_CUDA_GEMM_CLUSTER=%s / _CLUSTER_KT=%s: 0, 1 or all / >= 1",
                      cl ? cl : "", ckt ? ckt : "");
    if (g_fill < 1 || g_fill > 16 || g_min_part < 64 || g_min_part % 64 || g_par_rows < 1 || g_ext_rows < 0)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "HEARTH_CUDA_GEMM_FILL=%s / _MIN_PART=%s / _PAR_ROWS=%s / _EXT_ROWS=%s: 1..16, a multiple "
                      "of 64, >= 1, >= 0",
                      f ? f : "", mk ? mk : "", pr ? pr : "", er ? er : "");
    const char *t = getenv("HEARTH_CUDA_GEMM_TILE");
    g_tile_forced = TILE_AUTO;
    if (t && *t) {
        bool known = strcmp(t, "mma") == 0;
        if (known)
            g_tile_forced = TILE_MMA;
        for (int i = 0; i < TILE_COUNT; i++)
            if (strcmp(t, tile_names[i]) == 0) {
                g_tile_forced = i;
                known = true;
            }
#if !defined(CUK_HOPPER)
        if (g_tile_forced >= TILE_WGMMA || g_tile_forced == TILE_MMA)
            g_tile_forced = TILE_AUTO; /* wgmma and TMA are Hopper's alone; the mma mapping is sm80's own */
#endif
        if (!known)
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "HEARTH_CUDA_GEMM_TILE=%s: not one of 64x64, 128x64, wgmma128x64, wgmma64x64, tma128, "
                          "tma64, mma",
                          t);
    }
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (optin < cfg64x64::SMEM || optin < cfg128x64::SMEM)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "cuda gemm (%s): the tiles need %d bytes of shared memory a block, the device gives %d",
                      CUK_STR(CUK_VARIANT), cfg128x64::SMEM > cfg64x64::SMEM ? cfg128x64::SMEM : cfg64x64::SMEM, optin);
    /* the forced tile and the split's aims change sums (the row and launch settings do not) */
    g_tag[0] = 0;
    if (g_tile_forced != TILE_AUTO || g_fill != 1 || g_min_part != 256 || !g_narrow)
        snprintf(g_tag, sizeof g_tag, "-gemm-%s-f%d-p%d%s",
                 g_tile_forced >= 0           ? tile_names[g_tile_forced]
                 : g_tile_forced == TILE_MMA ? "mma"
                                              : "auto",
                 g_fill, g_min_part, g_narrow ? "" : "-n0");
    set_smem<cfg64x64>();
    set_smem<cfg128x64>();
#if defined(CUK_HOPPER)
    if (optin < wg<2>::SMEM)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "cuda gemm (%s): the wgmma tile needs %d bytes of shared memory a block, the device gives %d",
                      CUK_STR(CUK_VARIANT), wg<2>::SMEM, optin);
    wg_set_smem<2>();
    wg_set_smem<1>();
    /* the most any TMA build takes */
    if (optin < tma_builds::smem)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "cuda gemm (%s): the TMA tile needs %d bytes of shared memory a block, the device gives %d",
                      CUK_STR(CUK_VARIANT), tma_builds::smem, optin);
    tma_builds::set_smem();
    for (int cz = 2, l = 0; cz <= CLUSTER_MAX; cz *= 2, l++) {
        g_max_clusters[1][l] = tma_max_clusters<2>(cz);
        g_max_clusters[0][l] = tma_max_clusters<1>(cz);
    }
    cudaGetLastError(); /* a failed query only means no clusters (0) */
    if (getenv("HEARTH_CUDA_GEMM_LOG"))
        fprintf(stderr, "cuda gemm (%s): clusters of 2/4/8 at once, 128-row tile two blocks an SM: %d/%d/%d\n",
                CUK_STR(CUK_VARIANT), g_max_clusters[1][0], g_max_clusters[1][1], g_max_clusters[1][2]);
    if (!g_encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                          "cuda gemm (%s): the driver has no cuTensorMapEncodeTiled (TMA)", CUK_STR(CUK_VARIANT));
        g_encode = (decltype(g_encode))fn;
    }
#endif
    return launch_status("gemm prepare", err, errlen);
}

const char *gemm_tag(void)
{
    return g_tag;
}

const char *gemm_tile_name(int n, int k, enum cuda_epi epi)
{
    return tile_names[tile_of(n, k, epi)];
}

/* Splits K (in powers of two, at most 32 parts, each at least g_min_part long and
 * whole k tiles) until a block a part fills the SMs g_fill times over (once for the
 * one-block-an-SM wgmma tile): the weight streams of a small-m product need that many
 * blocks.  (Filling the wgmma tile's last wave too, 8B gate/up split in two, measured
 * slower at m = 1 and m = 2048: bench/notes/cuda.md.) */
/* A shape the TMA tile leaves unsplit only thanks to the narrow tiles: its 128-wide
 * tiles fill at most half the SMs (the split rule below would split it), its 16-wide
 * ones all of them (gemm_width gives a few rows their blocks from narrow tiles).  (The
 * 30B-A3B's o, 16-wide tiles on 128 of 132 SMs, measured unsplit on the H100: faster
 * from 32 rows, but batch 1 2.5% slower, its k16 chain 256 steps long against 32; it
 * stays split, and the narrow fold gives it the speed at 33-512 rows: bench/notes/
 * cuda.md, thirty-second session.) */
static bool narrow_unsplit(int n, enum cuda_epi epi)
{
    return g_narrow && 2 * n_tiles_of(n, epi) <= g_sm_count && n_tiles_of(n, epi, 16) >= g_sm_count;
}

int gemm_split(int n, int k, enum cuda_epi epi)
{
    int t = tile_of(n, k, epi), tiles = n_tiles_of(n, epi), bk = tile_bk(t), s = 1;
    if (t == TILE_TMA && narrow_unsplit(n, epi))
        return 1;
    if (t == TILE_TMA || t == TILE_TMA64) { /* blocks a part, at most one wave of them */
        int wave = (t == TILE_TMA64 ? 2 : 1) * g_sm_count;
        while (tiles * 2 * s <= wave && s < MAX_SPLIT && k % (2 * s * bk) == 0 && k / (2 * s) >= g_min_part)
            s *= 2;
        return s;
    }
    int aim = (t == TILE_64x64 ? g_fill : 1) * g_sm_count;
    while (tiles * s < aim && s < MAX_SPLIT && k % (2 * s * bk) == 0 && k / (2 * s) >= g_min_part)
        s *= 2;
    return s;
}

/* Whether a launch of the 128-row TMA tile at m rows runs the one-warpgroup build: at m
 * <= 64 its second warpgroup would have no rows, and the shared memory that frees holds
 * more stages in flight, still two blocks an SM: four where a K split's parts are added
 * in clusters (then for parts of up to FEW_KT k tiles, faster there than by
 * combine_kernel), five for the unsplit 96-wide tile.  The same wgmma on the same rows,
 * k steps and parts: the same bytes.  Measured on the H200, batch-1 greedy, md5s equal,
 * one run (bench/notes/cuda.md): 0.6B 909.8 -> 936.9 tok/s, 8B 199.5 -> 212.3, 30B-A3B
 * 294.4 -> 307.2; the 30B-A3B's q/k/v 13.4 -> 10.9 us.  The 8B's down (48-tile parts) is
 * slower in clusters; six or eight stages, one block an SM, were no faster where their
 * clusters fit at once. */
static bool few_rows(int m)
{
    return g_few && m <= 64;
}

/* The unsplit TMA tile's width at m rows of an (n, epi) product: a launch shape (every
 * width gives the same bytes), so it may follow m.  From g_wide_rows rows, 256 (one
 * block an SM: half the x loads a flop, 1/6 fewer shared-memory reads; the lm_heads 3-9%
 * faster at 512-4,096 rows; with the row-grouped block order (tile_at) the 8B gate/up
 * 7-12% faster at 512-2,048 rows than at 128, where before it was 4% slower; from 256
 * rows since the twentieth session: at 256 rows the 8B gate/up 107.3 -> 96.9 us, its
 * lm_head 552 -> 488, and the 8B's 256 concurrent 0.562 -> 0.568 of its roofline in
 * three runs each; at 128 rows 256 lost, 67.3 against 56.9 us; from 129 rows since the
 * twenty-fourth session, with x's copies no longer past its map (x_map_rows): the 8B
 * gate/up at 129 / 160 / 224 rows 100.4 / 102.5 / 107.7 -> 96.3 / 97.8 / 97.8 us, its
 * lm_head 494 / 498 / 551 -> 457 / 463 / 496); in one
 * row of tiles that fit one wave of two-an-SM slots, 96 where its tiles fill the wave
 * clearly more evenly than 128's (the 8B gate/up at batch 1: 256 tiles in 264 slots
 * against 192, of which 60 SMs stream two and 72 one: 64.4 -> 53.3 us on the H200);
 * else 128 (the lm_heads' many waves measured no better at 96). */
struct width {
    int nw;   /* the tile's columns */
    bool wg1; /* 64-row blocks: the one-warpgroup build */
    bool wg3; /* 192-row blocks (128 or 192 wide): the three-warpgroup build */
    bool deep; /* a 96- or 128-wide tile that takes its deep build where its blocks fit one
                * an SM (gemm tests the fit; the narrow widths always take it there) */
};
/* The column tiles of a launch's n_seg products at width w: each product's own. */
static int seg_tiles(const struct cuda_gemm *g, int n_seg, int w)
{
    int s = 0;
    for (int i = 0; i < n_seg; i++)
        s += n_tiles_of(i ? g->more_n[i - 1] : g->n, g->epi, w);
    return s;
}
/* n: the n_seg products' columns together */
static struct width gemm_width(const struct cuda_gemm *g, int n_seg, int n)
{
    const int m = g->m;
    const enum cuda_epi epi = g->epi;
    const int r128 = (m + 127) / 128, fill = g_sm_count * 7 / 8;
    if (g_width && (epi != CUDA_EPI_SWIGLU_BF16 || swiglu_width(g_width))) { /* (40: not SwiGLU's) */
        const bool wg1 = g_width <= 64 || (g_width < 192 && (g_bm ? g_bm == 64 : g_width == 96 && few_rows(m)));
        const bool wg3 = g_bm == 192 && (g_width == BN || g_width == 192);
        return {g_width, wg1, wg3, g_deepw && (wg1 ? g_width == 96 || g_width == BN : g_width == BN && !wg3)};
    }
    const int slots = 2 * g_sm_count, t128 = n_tiles_of(n, epi, BN), t96 = n_tiles_of(n, epi, 96);
    /* A shape without a split only thanks to the narrow tiles (narrow_unsplit): the
     * first tile (columns x rows a block) of 256 x 128 (from g_wide_rows rows), 128 x 64,
     * 64 x 64, 32 x 64 whose blocks fill 7/8 of the SMs, else the narrowest.  Measured on the H200 against
     * every forced tile (bench/notes/cuda.md, twentieth session): the 8B down 31 us at
     * batch 1 (32 x 64), 39 at 128 rows (64 x 64), 60 at 256 (128 x 64), 137 at 1,024
     * (256).  128 x 128 lost wherever its blocks were one an SM (the 8B down at 512 rows:
     * 152 us against 110 at 128 x 64: three stages a block), and a cost of the busiest
     * SM's flops alone picked narrow tiles at many rows (x loaded once a column tile).
     * Waves (g_waves): 256 also where 128 x 64's blocks outnumber the two-an-SM slots, so
     * that some SMs run three 64-row blocks, one after the pair, against one 256 x 128
     * block an SM on fewer SMs (three 128 x 64 blocks are 3/4 of a 256 x 128 block's
     * flops, but a 256-wide block runs ~1.6-1.8x the flops an SM of a pair of 64-row
     * ones: 8B q/o at 512 rows, 0.87 against 0.54 of an SM's peak).  Measured
     * on the H200 with the width forced (twenty-fifth session): at 512 rows the 32B o
     * (320 blocks of 128 x 64 on 264 slots) 113.8 -> 84.2 us, its down 361.8 -> 242.4, the
     * 30B-A3B's q/k/v (320) 26.4 -> 24.3, the 0.6B gate/up (384) 20.2 -> 17.2; where they
     * fit the slots 256 lost (the 8B q/o and down at 512 rows, 256 blocks: 33.2 -> 41.4,
     * 108.5 -> 117.6). */
    if (narrow_unsplit(n, epi) && m > 64 && m <= g_fit_rows) {
        /* The fit rule (g_fit_rows).  A block of these tiles streams its x and weight rows
         * at a rate an SM sets (~80 GB/s on the H200, one block or two: the 8B down's 128
         * x 64 blocks 57.1 us at 128 rows (64 blocks), 59.5 at 256 (128); bench/notes/
         * cuda.md, twentieth and thirty-first sessions), so the busiest SM's time goes
         * with its blocks x (rows + columns): of the tiles whose blocks fit one an SM, the
         * fewest rows + columns.  The 8B down and q/o at 129-192 rows: 96 x 64 (129
         * blocks, 160) instead of 64 x 64 (192 blocks, two an SM on 60 SMs: 256); the
         * 8B q/k/v at 129-256 rows 128 x 128 (96 blocks, 256) instead of 128 x 64 (144
         * or 192 blocks: 384). */
        static const struct {
            int w, bm;
        } fit[] = {{64, 64}, {96, 64}, {128, 64}, {128, 128}};
        int best = -1;
        for (int i = 0; i < (int)(sizeof fit / sizeof fit[0]); i++) {
            const long blocks = (long)seg_tiles(g, n_seg, fit[i].w) * ((m + fit[i].bm - 1) / fit[i].bm);
            if (blocks <= g_sm_count && (best < 0 || fit[i].w + fit[i].bm < fit[best].w + fit[best].bm))
                best = i;
        }
        if (best >= 0)
            return {fit[best].w, fit[best].bm == 64, false, g_deepw};
    }
    if (narrow_unsplit(n, epi)) {
        static const struct {
            int w, bm;
        } cand[] = {{256, 128}, {128, 64}, {64, 64}, {32, 64}, {16, 64}};
        struct width pick = {0, true, false, false};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            const int w = cand[i].w, bm = cand[i].bm;
            if ((w == 256 && m < g_wide_rows) || w < g_narrow_min)
                continue;
            pick = {w, bm == 64, false, false};
            if ((long)n_tiles_of(n, epi, w) * ((m + bm - 1) / bm) >= fill)
                break;
            if (w == 256 && g_waves && (long)n_tiles_of(n, epi, 128) * ((m + 63) / 64) > slots)
                break;
        }
        /* a few rows' narrow blocks past the SMs: the balanced width (g_balanced) */
        if (g_balanced && pick.nw <= 64 && m <= 64 && epi != CUDA_EPI_SWIGLU_BF16 &&
            seg_tiles(g, n_seg, pick.nw) > g_sm_count)
            for (int w : {40, 48}) {
                const int b = seg_tiles(g, n_seg, w);
                if (w > pick.nw && b <= g_sm_count && b >= fill) {
                    pick.nw = w;
                    break;
                }
            }
        return pick;
    }
    if (m >= g_wide_rows && n_tiles_of(n, epi, 256) * r128 >= fill) { /* 256 where its blocks fill */
        /* 192 at two or three row tiles where the busiest SM streams clearly fewer columns
         * (waves x width, one block an SM both): the 8B gate/up at 129-384 rows, 96
         * 256-wide tiles a row tile against 128 of 192 in 132 SMs (two rounds of 256 where
         * the second holds 60 of 192 blocks).  Measured on the H200 (bench/notes/cuda.md,
         * twenty-eighth session), forced widths: 94-97 -> 80-83 us at 129-256 rows,
         * 133-145 -> 117-120 at 320-384; at six and seven row tiles, where the same count
         * also picks 192, 256 was as fast or faster (704 rows 228 against 237 us, 832
         * 259 against 276), and the lm_heads tie by the count and ran 256 faster.  At
         * 129-192 rows the 192-wide tile runs 192 rows a block (g_wg3): one row tile, each
         * SM one block of three busy warpgroups instead of a 128-row block and, for most
         * SMs, a second one of one busy warpgroup. */
        auto cols = [&](int w) { /* the busiest SM's columns: rounds of one block an SM x w */
            return ((long)seg_tiles(g, n_seg, w) * r128 + g_sm_count - 1) / g_sm_count * w;
        };
        const int w = g_w192 && r128 <= 3 && 10 * cols(192) <= 9 * cols(256) ? 192 : 256;
        /* g_wg3 2: the busiest SM's rounds x rows x columns, 192 x 192 blocks against w x 128 */
        auto fewer = [&] { return 10 * ((seg_tiles(g, n_seg, 192) + g_sm_count - 1) / g_sm_count * 192L * 192) <=
                                  9 * cols(w) * 128; };
        const bool wg3 = g_bm ? g_bm == 192 && w == 192
                              : g_wg3 && m <= 192 && (w == 192 || (g_wg3 == 2 && g_w192 && fewer()));
        return {wg3 ? 192 : w, false, wg3, false};
    }
    if (m > 128 || t128 > slots || t96 > slots)
        return {BN, false, g_bm == 192, false};
    if (20 * (t96 - t128) > slots) /* 96 fills 5% more of the wave */
        return {96, few_rows(m), false, false};
    return {BN, false, false, false};
}

/* The narrow fold's width at m rows of a shape with a K split (g_nfold_min..
 * g_nfold_max, 33-1,024; 0: none): of 64-row tiles 16, 32, 64 and 128 wide, the narrowest
 * whose blocks fit one an SM (the fewest rows + columns a block, as the fit rule: a
 * block's stream goes with them).  A block walks the tile's parts one after another into
 * a running sum, the parts' sums in part order: the bytes of a part a block.  Measured on
 * the H100 against a part a block (partials to the workspace, combine_kernel) and, above
 * 256 rows, the 128 x 128 fold on few blocks (bench/notes/cuda.md, thirty-second
 * session), us: the 30B-A3B's o at 64 / 128 / 160 / 256 / 512 rows 14.1 / 18.1 / 29.0 /
 * 36.4 / 29.7 -> 12.3 / 12.9 / 13.0 / 13.5 / 21.1 (cuBLAS 11.3-18.7), the 0.6B's down
 * 8.8 / 11.0 / 14.3 / 15.2 / 23.1 -> 8.7 / 9.9 / 9.9 / 10.6 / 11.2, its o 7.6 / 9.7 /
 * 12.2 / 13.3 / 17.3 -> 6.7 / 8.0 / 8.0 / 8.7 / 9.1; at 640 / 768 / 1,024 rows (128 x 64,
 * where the 128 x 128 fold ran 8-16 blocks) the 0.6B's o 17.2 / 17.4 / 17.4 -> 11.3 /
 * 11.7 / 12.4, its down 23.0 / 22.9 / 23.1 -> 14.0 / 14.5 / 15.9.  At up to 32 rows a part
 * a block stays (the fold from 17 rows measured 0.5-1.6 us slower there): a block's chain
 * of dependent k16 steps is then a part long, not the whole K (~40 ns a step: the same
 * 30B-A3B o unsplit, its chain 256 steps, took 11.4 us at one row against 10.4 split in
 * eight). */
#if defined(CUK_HOPPER)
static int fold_width(const struct cuda_gemm *g, int n_seg, int m)
{
    if (g_fold_width)
        return g_fold_width;
    if (m < g_nfold_min || m > g_nfold_max)
        return 0;
    for (int w : {16, 32, 64, BN})
        if ((long)seg_tiles(g, n_seg, w) * ((m + 63) / 64) <= g_sm_count)
            return w;
    return 0;
}
#endif

/* The most rows of m for which a tile's parts go to a block each (the weight stream
 * of a few rows needs the blocks): 64, and more while the folding grid (row tiles x
 * column tiles) would fill less than half the SMs, up to g_par_rows; above it one
 * block walks all the parts and folds them (no workspace).  The 64x64 and TMA tiles
 * fold (the running sum's registers; on the TMA tile at 33-1,024 rows also the narrow
 * fold, fold_width, which sets par itself).  Measured at m = 128 and 256 on the H200
 * (bench/notes/cuda.md): a part a block wins for the few-tile shapes (0.6B o 36.6 ->
 * 15.1 us at 128, 8B down 177 -> 92), the fold for the many-tile ones (0.6B gate/up
 * 20.1 against 43.0, 8B q/o at 256 66.9 against 89.2). */
static bool folds(int t) /* the tiles with a running sum of the parts */
{
    return t == TILE_64x64 || t == TILE_TMA || t == TILE_TMA64;
}

static int par_max_rows(int n, int k, enum cuda_epi epi)
{
    if (gemm_split(n, k, epi) == 1)
        return 0;
    int t = tile_of(n, k, epi);
    if (!folds(t))
        return 1 << 30;
    int tiles = g_sm_count / (2 * n_tiles_of(n, epi)), rows = tile_bm(t) * (tiles > 1 ? tiles : 1);
    return rows < g_par_rows ? rows : g_par_rows;
}

/* Blocks a tile's K goes to at m rows: the split (a part each) or 1 (folded).  The
 * sums are the same either way; this is the launch's shape only. */
static int gemm_par(int m, int n, int k, enum cuda_epi epi)
{
    if (!folds(tile_of(n, k, epi)))
        return gemm_split(n, k, epi); /* the other tiles have no fold */
    return m <= par_max_rows(n, k, epi) ? gemm_split(n, k, epi) : 1;
}

#if defined(CUK_HOPPER)
constexpr int FEW_KT = 32; /* see few_rows */
/* Whether a launch of the TMA tile with a part a block (par == split parts of kt k
 * tiles; `clusters` = its tiles) adds them in a cluster a tile (the two-blocks-an-SM
 * build, three stages) rather than by combine_kernel.  Measured on the H200
 * (bench/notes/cuda.md): the two-block build is the faster in a model's step (the next
 * kernel's blocks fit beside it and start their preamble: 0.6B batch-1 906 against 852
 * tok/s with the one-block build) where the clusters all run at once (a second wave of
 * them costs more than combine_kernel's launch) and a part is short; a long part wants
 * the folding build's six stages in flight (8B down, 48 k tiles a part: 43.0 us in
 * clusters, 34.6 with combine_kernel). */
static bool in_cluster(int wgi, int clusters, int cz, int kt, int kt_max)
{
    if (g_cluster == CL_OFF || cz > CLUSTER_MAX)
        return false;
    int l = cz == 2 ? 0 : cz == 4 ? 1 : 2;
    return g_cluster == CL_ALL || (kt <= kt_max && clusters <= g_max_clusters[wgi][l]);
}

#endif

/* rows of m that can run a part a block: the workspace's height */
static size_t par_rows(int m, int n, int k, enum cuda_epi epi)
{
    size_t cap = (size_t)par_max_rows(n, k, epi);
    return (size_t)m < cap ? (size_t)m : cap;
}

size_t gemm_workspace(int m, int n, int k, enum cuda_epi epi)
{
    return (size_t)gemm_split(n, k, epi) * par_rows(m, n, k, epi) * n_tiles_of(n, epi) * BN * sizeof(float);
}

size_t gemm_tickets(int m, int n, int k, enum cuda_epi epi)
{
    int t = tile_of(n, k, epi);
    if (t == TILE_TMA || t == TILE_TMA64)
        return 0; /* its parts are always added by combine_kernel */
    size_t bm = tile_bm(t);
    return (par_rows(m, n, k, epi) + bm - 1) / bm * n_tiles_of(n, epi);
}

enum hr_status gemm(const struct cuda_gemm *g, void *stream, char *err, size_t errlen)
{
    int n_seg = 1 + g->n_more, n = g->n;
    if (g->n_more < 0 || n_seg > CUDA_GEMM_SEGS || (g->n_more && g->epi == CUDA_EPI_SWIGLU_BF16))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: %d segments (at most %d, one for SwiGLU)", n_seg,
                      CUDA_GEMM_SEGS);
    for (int i = 0; i < g->n_more; i++) {
        if (!g->more_w[i] || !g->more_y[i] || g->more_n[i] <= 0 || g->more_n[i] % 2)
            return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: bad segment %d (n=%d)", i + 1, g->more_n[i]);
        n += g->more_n[i];
    }
    if (g->x_rows < 0 || (g->x_rows > 0 && g->x_rows < g->m))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: x's buffer of %d rows for m=%d", g->x_rows, g->m);
    if (g->m < 0 || g->n <= 0 || g->k <= 0 || g->k % 64 || g->n % 2)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: bad shape m=%d n=%d k=%d (k a multiple of 64, n even)",
                      g->m, g->n, g->k);
    if (!g->y || !g->x || !g->w || (g->epi == CUDA_EPI_SWIGLU_BF16) != (g->w_up != NULL))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: missing operand");
    if (g->epi < CUDA_EPI_STORE_F32 || g->epi > CUDA_EPI_SWIGLU_BF16)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: unknown epilogue %d", (int)g->epi);
    if (g->y_f32 && g->epi != CUDA_EPI_SWIGLU_BF16)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: y_f32 is SwiGLU's alone");
    if (g->m == 0)
        return HR_OK;
    /* the tiles, the tile shape and the split are those of the whole width: a
     * function of (sum n, k, epi), the same at every m */
    int t = tile_of(n, g->k, g->epi);
    params p;
    memset(&p, 0, sizeof p);
    p.x = g->x;
    p.w_up = g->w_up;
    p.y32 = g->y_f32;
    p.n_seg = n_seg;
    p.m = g->m;
    p.k = g->k;
    p.split = gemm_split(n, g->k, g->epi);
    p.par = gemm_par(g->m, n, g->k, g->epi);
    /* the tiles' width: BN but for the unsplit TMA tile (gemm_width) */
    struct width wd = t == TILE_TMA && p.split == 1 ? gemm_width(g, n_seg, n) : width{BN, false, false, false};
#if defined(CUK_HOPPER)
    if (t == TILE_TMA && p.split > 1)
        if (const int fw = fold_width(g, n_seg, g->m)) { /* one block a tile folds its parts */
            p.par = 1;
            wd = {fw, true, false, true};
        }
#endif
    const int nw = wd.nw;
    int t0 = 0;
    for (int i = 0; i < n_seg; i++) {
        p.seg_w[i] = i ? g->more_w[i - 1] : g->w;
        p.seg_y[i] = i ? g->more_y[i - 1] : g->y;
        p.seg_n[i] = i ? g->more_n[i - 1] : g->n;
        p.seg_t0[i] = t0;
        t0 += n_tiles_of(p.seg_n[i], g->epi, nw);
    }
    const bool tma_tile = t == TILE_TMA || t == TILE_TMA64;
#if defined(CUK_HOPPER)
    {
        const int clusters = t0 * ((g->m + tile_bm(t) - 1) / tile_bm(t)), kt = g->k / tile_bk(t) / p.split;
        const bool few = t == TILE_TMA && few_rows(g->m);
        const bool few_cl = few && p.par > 1 && in_cluster(0, clusters, p.par, kt, FEW_KT);
        p.cluster = tma_tile && p.par > 1 &&
                    (few_cl || in_cluster(t == TILE_TMA ? 1 : 0, clusters, p.par, kt, g_cluster_kt));
        p.few = p.par > 1 ? few_cl : wd.wg1;
        p.wg3 = wd.wg3; /* (an unsplit shape's: one block a tile) */
        const int bm = wd.wg1 ? 64 : wd.wg3 ? 192 : 128; /* (the narrow widths: 64) */
        p.deep = (nw <= 64 || wd.deep) && (long)t0 * ((g->m + bm - 1) / bm) <= g_sm_count;
    }
#endif
    p.ext = p.par > 1 && !p.cluster && (g->m > g_ext_rows || tma_tile);
    p.raster = g_raster;
    p.n_tiles = t0;
    p.tickets = NULL;
    p.part = NULL;
    if ((g->m + tile_bm(t) - 1) / tile_bm(t) > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda gemm: m=%d too large", g->m);
    if (p.par > 1 && !p.cluster) {
        size_t need = (size_t)p.split * g->m * p.n_tiles * BN * sizeof(float);
        size_t nt = (size_t)((g->m + tile_bm(t) - 1) / tile_bm(t)) * p.n_tiles;
        if (tma_tile)
            nt = 0;
        if (!g->work || g->work_bytes < need || (nt && (!g->tickets || g->n_tickets < nt)))
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "cuda gemm: workspace of %zu bytes and %zu tickets needed, %zu and %zu given", need, nt,
                          g->work_bytes, g->n_tickets);
        p.tickets = g->tickets;
        p.part = (float *)g->work;
    }
    cudaStream_t st = (cudaStream_t)stream;
    if (t == TILE_64x64)
        launch<cfg64x64>(p, g->epi, st);
#if defined(CUK_HOPPER)
    else if (t == TILE_TMA || t == TILE_TMA64) {
        enum hr_status rc =
            t == TILE_TMA ? tma_launch<2>(p, g, nw, st, err, errlen) : tma_launch<1>(p, g, BN, st, err, errlen);
        if (rc != HR_OK)
            return rc;
    } else if (t == TILE_WGMMA)
        wg_launch<2>(p, g->epi, st);
    else if (t == TILE_WGMMA64)
        wg_launch<1>(p, g->epi, st);
#endif
    else
        launch<cfg128x64>(p, g->epi, st);
    if (p.ext) {
        dim3 cg(p.n_tiles, p.m);
        by_epi(g->epi, [&](auto E) { klaunch(combine_kernel<decltype(E)::value>, cg, BN, 0, st, p); });
    }
    return launch_status("gemm", err, errlen);
}

} // namespace CUK_NS