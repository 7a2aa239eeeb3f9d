/* Sampling on the device (kernels/dsample.h defines what it computes): one block per
 * row, everything a function of that row's logits and parameters alone.
 *
 * Maxima and argmaxima have one answer whatever the order (no NaN is left, ties go to
 * the lower id).  Every sum is of integers (fixed-point weights, counts): integer
 * addition is associative, so the shared-memory atomics that build the histograms give
 * the same sums in any order; no float is ever summed.
 *
 * Selection without a sort: a histogram of the candidates by first-level bin (distance
 * from the maximum), the bin where the cumulative count or mass crosses the target,
 * then a radix descent inside that bin over the order-preserving bits of the value (4
 * passes of 8 bits) and over the ids of the tied tokens (ascending), each pass a
 * 256-bin histogram of the tokens still in play; a bin of at most BCAP candidates is
 * instead collected and ranked in one pass (select_in_bin).  One primitive serves
 * top-k (count), top-p and the draw (mass), and the top logprobs (count).  Without
 * top-k the CPU sampler draws in id order: then each warp sums runs of ids and an
 * integer scan of the runs finds the one that holds the target (draw_id_order; at
 * temperature alone this one pass is the whole draw).  Top-k up to LCAP skips the
 * radix passes: a count histogram finds the k-th's bin, and the candidates down to it
 * are collected and ranked (topk_list).  Each pass over a row keeps several loads in
 * flight a thread (row_pass): one block reads all of it.
 *
 * A greedy row that needs only the maximum (no bias, penalty or penalised logprobs) is
 * read by many blocks first (amax_kernel, a slice each, their maxima in the row's work
 * area), so that one SM no longer reads 600 KB a token; the row's block then takes the
 * greatest of the slices' maxima.  The argmax has one answer in any order: the same
 * token as one block's pass.  A draw of temperature (and min-p) alone reads its row the
 * same way: the slices' maxima, then each slice's integer mass (mass_kernel); the row's
 * block adds the masses, finds the slice that holds the target and walks that slice
 * alone: the same integers, so the same token as the walk over the whole row.  A top-k
 * draw up to KS takes each slice's best k (topk_kernel), merged by the row's block; and
 * the logprobs of the raw logits of any row read in slices come from the slices too:
 * each slice's mass at temperature 1 over every token and its best n (lp_kernel). */
#include "kernels/cuda/common.cuh"

#include <algorithm>
#include <limits.h>
#include <stdlib.h>

namespace CUK_NS {

namespace {

constexpr int ST = 512; /* threads per row */
constexpr int NW = ST / 32;
constexpr unsigned FULL = 0xffffffffu;
typedef unsigned long long u64;

constexpr int LCAP = 1024; /* the top-k list's room (topk_list) */
constexpr int AT = 256;    /* threads of an argmax slice (amax_kernel) */

/* Slices of a greedy row read by amax_kernel: HEARTH_CUDA_SAMPLE_SLICES (0: the row's
 * block reads the row itself, as every other row). */
int g_slices = 64;
constexpr int BCAP = 256;  /* select_at's one-bin list */
constexpr int MCAP = 3072; /* the slices' keys a row's block merges (n_slices * top_k) */

struct smem {
    union {
        struct { /* the first-level histogram */
            u64 hmass[DSAMPLE_BINS];
            unsigned hcnt[DSAMPLE_BINS];
        } h;
        struct { /* or the top-k list: as found, sorted, the sorted ones' weights */
            float x[LCAP], sx[LCAP];
            int id[LCAP], sid[LCAP];
            u64 q[LCAP];
        } l;
        u64 mk[MCAP]; /* or the slices' top-k or logprobs lists (merge_slices) */
    };
    u64 dmass[256];
    unsigned dcnt[256];
    u64 seg[256];        /* draw_id_order's runs (SEGS) */
    float fred[NW];
    int ired[NW];
    u64 wsum[NW];
    int f_idx;
    u64 f_above_cnt, f_above_mass, tot_cnt, tot_mass;
    int n_list;
    int list_id[DSAMPLE_MAX_TOP];
    float list_v[DSAMPLE_MAX_TOP];
    /* select_at's tokens of one first-level bin (BCAP at most): as found, then ranked */
    float bx[BCAP], bsx[BCAP];
    int bid[BCAP], bsid[BCAP];
};

/* A row as one selection sees it: the values, the reference maximum and temperature of
 * the weights, and which tokens are candidates. */
struct view {
    const float *vals; /* [vocab] */
    int clean;         /* 1: raw logits, cleaned as they are read */
    float ref, t;
    int all;           /* 1: every token (logprobs); 0: finite and passing min-p */
    double keep_from;
};

/* Whether the value x (cleaned) is one of w's candidates. */
__device__ __forceinline__ bool view_cand(const view &w, float x)
{
    if (w.all)
        return true;
    if (x == -INFINITY)
        return false;
    if (w.keep_from == -INFINITY) /* no min-p: the test below passes (NaN compares false) */
        return true;
    return !((double)(x - w.ref) < w.keep_from); /* the CPU's min-p test, float difference */
}

__device__ __forceinline__ bool view_get(const view &w, int i, float *v)
{
    float x = w.vals[i];
    if (w.clean)
        x = dsample_clean(x);
    *v = x;
    return view_cand(w, x);
}

/* Calls f(i, v, cand) for every i of the row (cand: view_get's answer, v the value),
 * each thread the same number of times (i >= V comes with cand false), so warp
 * collectives inside f are safe.  One block reads a whole row: PF loads in flight a
 * thread keep the pass from waiting on each load in turn. */
constexpr int PF = 8;
template <class F>
__device__ __forceinline__ void row_pass(const view &w, int V, F f)
{
    for (int base = 0; base < V; base += PF * ST) {
        float raw[PF];
#pragma unroll
        for (int u = 0; u < PF; u++) {
            const int i = base + u * ST + threadIdx.x;
            raw[u] = i < V ? w.vals[i] : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < PF; u++) {
            const int i = base + u * ST + threadIdx.x;
            const float v = w.clean ? dsample_clean(raw[u]) : raw[u];
            f(i, v, i < V && view_cand(w, v));
        }
    }
}

/* Order-free: max of floats without NaN (every thread gets it). */
__device__ float block_max(float v, smem &s)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    if ((threadIdx.x & 31) == 0)
        s.fred[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = s.fred[0];
    for (int w = 1; w < NW; w++)
        m = fmaxf(m, s.fred[w]);
    __syncthreads();
    return m == 0.0f ? 0.0f : m; /* -0 and +0 are one maximum */
}

__device__ int block_min(int v, smem &s)
{
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(FULL, v, o));
    if ((threadIdx.x & 31) == 0)
        s.ired[threadIdx.x >> 5] = v;
    __syncthreads();
    int m = s.ired[0];
    for (int w = 1; w < NW; w++)
        m = min(m, s.ired[w]);
    __syncthreads();
    return m;
}

/* The greater of two (value, id) candidates: the larger value, on a tie (-0 == +0
 * too) the lower id; id INT_MAX is no candidate.  One answer in any order. */
__device__ __forceinline__ void amax_take(float &bv, int &bi, float v, int i)
{
    if (i != INT_MAX && (bi == INT_MAX || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

/* Every thread's (maximum, first id) of a block of NT threads merged through fred and
 * ired ([NT / 32] each): every thread gets the block's. */
template <int NT>
__device__ void block_amax(float &bv, int &bi, float *fred, int *ired)
{
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(FULL, bv, o);
        int i = __shfl_xor_sync(FULL, bi, o);
        amax_take(bv, bi, v, i);
    }
    if ((threadIdx.x & 31) == 0) {
        fred[threadIdx.x >> 5] = bv;
        ired[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    bv = fred[0];
    bi = ired[0];
    for (int w = 1; w < NT / 32; w++)
        amax_take(bv, bi, fred[w], ired[w]);
    __syncthreads();
}

/* This thread's (maximum, first id) of the cleaned logits L[lo, hi), and where `store`
 * the cleaned copy x, in one pass of NT threads: four floats a load and four loads in
 * flight where the row allows (one block reading a whole row: the greedy step's cost
 * was this pass, hence the argmax slices). */
template <int NT>
__device__ void clean_range(const float *__restrict__ L, float *__restrict__ x, int lo, int hi, bool store,
                            float &bv, int &bi)
{
    int i0 = lo;
    if (lo % 4 == 0 && hi % 4 == 0 && ((uintptr_t)L & 15) == 0 && (!store || ((uintptr_t)x & 15) == 0)) {
        const float4 *L4 = (const float4 *)L;
        float4 *x4 = (float4 *)x;
        const int n4 = hi / 4;
        for (int c0 = lo / 4 + threadIdx.x; c0 < n4; c0 += 4 * NT) {
            float4 q[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (c0 + u * NT < n4)
                    q[u] = __ldg(L4 + c0 + u * NT);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int c = c0 + u * NT;
                if (c >= n4)
                    break;
                float4 v = make_float4(dsample_clean(q[u].x), dsample_clean(q[u].y), dsample_clean(q[u].z),
                                       dsample_clean(q[u].w));
                if (store)
                    x4[c] = v;
                amax_take(bv, bi, v.x, 4 * c);
                amax_take(bv, bi, v.y, 4 * c + 1);
                amax_take(bv, bi, v.z, 4 * c + 2);
                amax_take(bv, bi, v.w, 4 * c + 3);
            }
        }
        i0 = hi;
    }
    for (int i = i0 + threadIdx.x; i < hi; i += NT) {
        float v = dsample_clean(L[i]);
        if (store)
            x[i] = v;
        amax_take(bv, bi, v, i);
    }
}

/* Adds (1, q) to bin idx (idx < 0: nothing) for every lane of the warp; lanes with the
 * same bin (and the same q) add once for all.  Integer atomics: order-free sums.  Every
 * lane of the warp must call it. */
__device__ __forceinline__ void hist_add(unsigned *cnt, u64 *mass, int idx, u64 q)
{
    if (!__any_sync(FULL, idx >= 0))
        return;
    unsigned peers = __match_any_sync(FULL, idx);
    unsigned qpeers = __match_any_sync(FULL, q) & peers;
    int lane = threadIdx.x & 31;
    if (idx >= 0) {
        if (lane == __ffs(peers) - 1)
            atomicAdd(&cnt[idx], (unsigned)__popc(peers));
        if (q && lane == __ffs(qpeers) - 1)
            atomicAdd(&mass[idx], q * (u64)__popc(qpeers));
    }
}

/* Warp 0: the first bin (in index order, best first) where the cumulative count or mass
 * reaches need (before < need <= before + its own); the counts and masses of the bins
 * before it, and the totals.  Integer sums. */
__device__ void find_bin(const unsigned *cnt, const u64 *mass, int nbins, bool by_count, u64 need, smem &s)
{
    if (threadIdx.x < 32) {
        int lane = threadIdx.x, per = nbins / 32, b0 = lane * per;
        u64 c = 0, m = 0;
        for (int j = 0; j < per; j++) {
            c += cnt[b0 + j];
            m += mass[b0 + j];
        }
        u64 ci = c, mi = m;
        for (int o = 1; o < 32; o <<= 1) {
            u64 a = __shfl_up_sync(FULL, ci, o), b = __shfl_up_sync(FULL, mi, o);
            if (lane >= o) {
                ci += a;
                mi += b;
            }
        }
        unsigned hit = __ballot_sync(FULL, (by_count ? ci : mi) >= need);
        int at = hit ? __ffs(hit) - 1 : 31;
        if (lane == at) {
            u64 bc = ci - c, bm = mi - m;
            int idx = b0 + per - 1;
            for (int j = 0; j < per; j++) {
                u64 f = by_count ? (u64)cnt[b0 + j] : mass[b0 + j];
                if ((by_count ? bc : bm) + f >= need) {
                    idx = b0 + j;
                    break;
                }
                bc += cnt[b0 + j];
                bm += mass[b0 + j];
            }
            s.f_idx = idx;
            s.f_above_cnt = bc;
            s.f_above_mass = bm;
        }
        if (lane == 31) {
            s.tot_cnt = ci;
            s.tot_mass = mi;
        }
    }
    __syncthreads();
}

__device__ void clear_digits(smem &s)
{
    for (int j = threadIdx.x; j < 256; j += ST) {
        s.dcnt[j] = 0;
        s.dmass[j] = 0;
    }
    __syncthreads();
}

/* The sum of every thread's v (integers: any order). */
__device__ u64 block_sum(u64 v, smem &s)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0)
        s.wsum[threadIdx.x >> 5] = v;
    __syncthreads();
    u64 t = 0;
    for (int k = 0; k < NW; k++)
        t += s.wsum[k];
    __syncthreads();
    return t;
}

/* The first-level histogram of w's candidates (counts, and masses when weights);
 * totals in s.tot_cnt, s.tot_mass. */
__device__ void build_hist(const view &w, int V, smem &s, bool weights = true)
{
    for (int j = threadIdx.x; j < DSAMPLE_BINS; j += ST) {
        s.h.hcnt[j] = 0;
        s.h.hmass[j] = 0;
    }
    __syncthreads();
    if (weights) {
        row_pass(w, V, [&](int, float v, bool cand) {
            int bin = -1;
            u64 q = 0;
            if (cand) {
                bin = dsample_bin(w.ref, v, w.t);
                q = dsample_weight(w.ref, v, w.t);
            }
            hist_add(s.h.hcnt, s.h.hmass, bin, q);
        });
    } else {
        /* counts alone: a plain atomic a candidate (a warp's lanes rarely share a bin),
         * except the last bin, where most of a peaked row's tokens fall: each thread
         * counts those itself and the block adds them up */
        unsigned tail = 0;
        row_pass(w, V, [&](int, float v, bool cand) {
            if (cand) {
                const int bin = dsample_bin(w.ref, v, w.t);
                if (bin < DSAMPLE_BINS - 1)
                    atomicAdd(&s.h.hcnt[bin], 1u);
                else
                    tail++;
            }
        });
        const u64 t = block_sum(tail, s); /* synchronises the block */
        if (threadIdx.x == 0)
            s.h.hcnt[DSAMPLE_BINS - 1] += (unsigned)t;
    }
    __syncthreads();
    find_bin(s.h.hcnt, s.h.hmass, DSAMPLE_BINS, true, ~0ull, s); /* for the totals */
}

struct sel {
    int id;            /* the token where the cumulative reaches need (-1: not asked) */
    u64 mass_through;  /* the mass of it and every candidate before it */
    uint32_t order;    /* its value's order key */
};

/* The candidates of w whose first-level bin passes in_bins (the caller knows how many:
 * they fit x / id), collected in one pass in any slot order, then ranked into sx / sid
 * by (value desc, id asc): each thread counts the pairs before its own (one pair an
 * id: the ranks are distinct).  Returns how many. */
template <class P>
__device__ __forceinline__ int collect_ranked(const view &w, int V, P in_bins, float *x, int *id, float *sx, int *sid,
                                              smem &s)
{
    if (threadIdx.x == 0)
        s.n_list = 0;
    __syncthreads();
    row_pass(w, V, [&](int i, float v, bool cand) {
        if (cand && in_bins(dsample_bin(w.ref, v, w.t))) {
            int at = atomicAdd(&s.n_list, 1); /* slot order varies: ranked below */
            x[at] = v;
            id[at] = i;
        }
    });
    __syncthreads();
    const int n = s.n_list;
    for (int j = threadIdx.x; j < n; j += ST) {
        const uint32_t oj = dsample_order(x[j]);
        const int ij = id[j];
        int rank = 0;
        for (int k = 0; k < n; k++) {
            const uint32_t ok = dsample_order(x[k]);
            rank += ok > oj || (ok == oj && id[k] < ij);
        }
        sx[rank] = x[j];
        sid[rank] = ij;
    }
    __syncthreads();
    return n;
}

/* select_at's end when first-level bin b holds at most BCAP candidates: they are
 * collected and ranked (collect_ranked), and warp 0 walks them from the count ac and
 * mass am above the bin to the first whose cumulative count (by_count) or mass reaches
 * need, in place of the radix passes: the same token, and the same mass through it
 * (tied values weigh the same either way). */
__device__ __forceinline__ sel select_in_bin(const view &w, int V, int b, bool by_count, u64 need, u64 ac, u64 am,
                                                smem &s)
{
    const int n = collect_ranked(w, V, [b](int bin) { return bin == b; }, s.bx, s.bid, s.bsx, s.bsid, s);
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        u64 c = ac, m = am;
        int found = -1;
        u64 m_found = 0;
        for (int j0 = 0; j0 < n && found < 0; j0 += 32) {
            const int j = j0 + lane;
            u64 q = j < n ? dsample_weight(w.ref, s.bsx[j], w.t) : 0, qc = q;
            u64 k = j < n ? 1 : 0, kc = k;
            for (int o = 1; o < 32; o <<= 1) {
                u64 a = __shfl_up_sync(FULL, qc, o), e = __shfl_up_sync(FULL, kc, o);
                if (lane >= o) {
                    qc += a;
                    kc += e;
                }
            }
            unsigned hit = __ballot_sync(FULL, j < n && (by_count ? c + kc : m + qc) >= need);
            if (hit) {
                found = j0 + __ffs(hit) - 1;
                m_found = m + __shfl_sync(FULL, qc, __ffs(hit) - 1);
            }
            c += __shfl_sync(FULL, kc, 31);
            m += __shfl_sync(FULL, qc, 31);
        }
        if (lane == 0) {
            s.f_idx = found;
            s.f_above_mass = m_found;
        }
    }
    __syncthreads();
    sel out;
    out.id = s.f_idx >= 0 ? s.bsid[s.f_idx] : -1; /* need lies within the bin: always found */
    out.mass_through = s.f_above_mass;
    out.order = s.f_idx >= 0 ? dsample_order(s.bsx[s.f_idx]) : 0;
    __syncthreads();
    return out;
}

/* The candidate of w (histogram built) where the cumulative count (by_count) or mass, in
 * (value desc, id asc) order, first reaches need (1 <= need <= the total). */
__device__ sel select_at(const view &w, int V, int id_bits, bool by_count, u64 need, bool need_id, smem &s)
{
    find_bin(s.h.hcnt, s.h.hmass, DSAMPLE_BINS, by_count, need, s);
    int b = s.f_idx;
    u64 ac = s.f_above_cnt, am = s.f_above_mass;
    bool massless = s.h.hmass[b] == 0;
    const u64 bin_cnt = s.h.hcnt[b];
    __syncthreads();
    sel out = {-1, am, 0};
    if (!need_id && massless)
        return out; /* the bin adds no mass: the mass through is what lies above it */
    if (bin_cnt <= (u64)BCAP)
        return select_in_bin(w, V, b, by_count, need, ac, am, s);
    uint32_t prefix = 0;
    u64 tie_cnt = 0, tie_mass = 0;
    for (int p = 0; p < 4; p++) {
        int shift = 24 - 8 * p;
        clear_digits(s);
        row_pass(w, V, [&](int, float v, bool cand) {
            int idx = -1;
            u64 q = 0;
            if (cand && dsample_bin(w.ref, v, w.t) == b) {
                uint32_t o = dsample_order(v);
                if (p == 0 || (o >> (shift + 8)) == prefix) {
                    idx = 255 - (int)((o >> shift) & 255u); /* higher values first */
                    q = dsample_weight(w.ref, v, w.t);
                }
            }
            hist_add(s.dcnt, s.dmass, idx, q);
        });
        __syncthreads();
        find_bin(s.dcnt, s.dmass, 256, by_count, need - (by_count ? ac : am), s);
        int d = s.f_idx;
        ac += s.f_above_cnt;
        am += s.f_above_mass;
        prefix = (prefix << 8) | (uint32_t)(255 - d);
        tie_cnt = s.dcnt[d];
        tie_mass = s.dmass[d];
        __syncthreads();
    }
    /* The tied tokens (one value) weigh the same: the m-th of them in id order. */
    u64 rem = need - (by_count ? ac : am);
    u64 qt = tie_cnt ? tie_mass / tie_cnt : 0;
    u64 m = by_count ? rem : (rem + qt - 1) / qt;
    out.mass_through = am + m * qt;
    out.order = prefix;
    if (!need_id)
        return out;
    if (tie_cnt == 1) {
        int best = INT_MAX;
        row_pass(w, V, [&](int i, float v, bool cand) {
            if (cand && dsample_order(v) == prefix)
                best = i;
        });
        out.id = block_min(best, s);
        return out;
    }
    int id_prefix = 0;
    for (int left = id_bits; left > 0;) {
        int take = left >= 8 ? 8 : left, shift = left - take;
        clear_digits(s);
        row_pass(w, V, [&](int i, float v, bool cand) {
            int idx = -1;
            if (cand && (i >> (shift + take)) == id_prefix && dsample_order(v) == prefix)
                idx = (i >> shift) & ((1 << take) - 1); /* lower ids first */
            hist_add(s.dcnt, s.dmass, idx, 0);
        });
        __syncthreads();
        find_bin(s.dcnt, s.dmass, 256, true, m, s);
        m -= s.f_above_cnt;
        id_prefix = (id_prefix << take) | s.f_idx;
        __syncthreads();
        left -= take;
    }
    out.id = id_prefix;
    return out;
}

/* The weight a draw in id order gives the value raw (as read): its weight when it is a
 * candidate whose CPU bin is below edge, else 0. */
__device__ __forceinline__ u64 id_weight_of(const view &w, float raw, int edge)
{
    const float v = w.clean ? dsample_clean(raw) : raw;
    if (!view_cand(w, v) || (edge < DSAMPLE_CPU_BINS && dsample_cpu_bin(w.ref, v, w.t) >= edge))
        return 0;
    return dsample_weight(w.ref, v, w.t);
}

/* The draw in id order over the candidates whose CPU bin is below edge (the CPU
 * sampler's order without top-k): the first whose cumulative mass exceeds target =
 * floor(u total), or -1 when target is at or past their mass (then the rest, in sorted
 * order, hold it).  total: given (top-p's kept mass, or a sliced draw's), or 0: their
 * own mass (then -1 means they have none: every candidate was +inf).  The walk covers
 * ids [lo0, hi0) after a mass of before0 (the whole row from 0, or the slice that holds
 * a sliced draw's target after the slices before it).  The range is cut into at most
 * SEGS runs of consecutive ids; each warp sums whole runs (its lanes read consecutive
 * ids), warp 0 scans the runs' sums and walks the one that holds the target 32 ids at a
 * time.  Integer sums: the cut changes no result. */
constexpr int SEGS = 256, DF = 16; /* DF: loads in flight a lane */
__device__ int draw_id_order(const view &w, int lo0, int hi0, int edge, u64 total, u64 before0, u64 bits53, smem &s)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int seg_len = (hi0 - lo0 + SEGS - 1) / SEGS;
    seg_len = (seg_len + 127) / 128 * 128;
    const int n_seg = (hi0 - lo0 + seg_len - 1) / seg_len;
    for (int g = warp; g < n_seg; g += NW) {
        const int lo = lo0 + g * seg_len, hi = min(hi0, lo + seg_len);
        u64 sum = 0;
        for (int i = lo + lane; i < hi; i += 32 * DF) {
            float raw[DF];
#pragma unroll
            for (int u = 0; u < DF; u++)
                raw[u] = i + 32 * u < hi ? w.vals[i + 32 * u] : -INFINITY;
#pragma unroll
            for (int u = 0; u < DF; u++)
                sum += i + 32 * u < hi ? id_weight_of(w, raw[u], edge) : 0;
        }
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(FULL, sum, o);
        if (lane == 0)
            s.seg[g] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        /* lane l holds runs [8 l, 8 l + 8) */
        u64 own = 0;
        for (int j = 0; j < SEGS / 32; j++)
            own += 8 * lane + j < n_seg ? s.seg[8 * lane + j] : 0;
        u64 incl = own;
        for (int o = 1; o < 32; o <<= 1) {
            u64 a = __shfl_up_sync(FULL, incl, o);
            if (lane >= o)
                incl += a;
        }
        if (total == 0)
            total = __shfl_sync(FULL, incl, 31);
        const u64 target = total ? dsample_target(bits53, total) : 0;
        /* the run that holds target: the lane's, then the run within it */
        unsigned hit = __ballot_sync(FULL, total && target < before0 + incl);
        int token = -1;
        if (hit) {
            const int at = __ffs(hit) - 1;
            u64 before = before0 + __shfl_sync(FULL, incl - own, at);
            int g = 8 * at;
            while (before + s.seg[g] <= target) /* target < the lane's end: stops in it */
                before += s.seg[g++];
            const int lo = lo0 + g * seg_len, hi = min(hi0, lo + seg_len);
            for (int i0 = lo; i0 < hi && token < 0; i0 += 32) {
                const int i = i0 + lane;
                u64 q = i < hi ? id_weight_of(w, w.vals[i], edge) : 0, c = q;
                for (int o = 1; o < 32; o <<= 1) {
                    u64 a = __shfl_up_sync(FULL, c, o);
                    if (lane >= o)
                        c += a;
                }
                unsigned over = __ballot_sync(FULL, before + c > target);
                if (over)
                    token = i0 + __ffs(over) - 1;
                before += __shfl_sync(FULL, c, 31);
            }
        }
        if (lane == 0)
            s.f_idx = token;
    }
    __syncthreads();
    int token = s.f_idx;
    __syncthreads();
    return token;
}

/* The draw from kk candidates in (value desc, id asc) order (values sx, ids sid): their
 * weights (into q), top-p's limit, the draw in that order; integer sums in list order,
 * one thread.  *token as drawn, left as it was (the greedy token) when the list has no
 * mass (every candidate +inf). */
__device__ void list_draw(const view &w, const float *sx, const int *sid, u64 *q, int kk, float top_p, u64 bits53,
                          int *token, smem &s)
{
    for (int j = threadIdx.x; j < kk; j += ST)
        q[j] = dsample_weight(w.ref, sx[j], w.t);
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 total = 0;
        for (int j = 0; j < kk; j++)
            total += q[j];
        int tok = -1;
        if (total > 0) {
            if (top_p < 1.0f) { /* the mass through the first token where it reaches the limit */
                const u64 lim = dsample_top_p_limit(top_p, total);
                u64 c = 0;
                for (int j = 0; j < kk; j++) {
                    c += q[j];
                    if (c >= lim)
                        break;
                }
                total = c;
            }
            const u64 target = dsample_target(bits53, total);
            u64 c = 0;
            for (int j = 0; j < kk && tok < 0; j++) {
                c += q[j];
                if (c > target)
                    tok = sid[j];
            }
        }
        s.f_idx = tok;
    }
    __syncthreads();
    if (s.f_idx >= 0)
        *token = s.f_idx;
    __syncthreads();
}

/* Top-k with k <= LCAP without a pass per radix digit: a histogram of the candidates'
 * counts by first-level bin finds the bin of the k-th; when the candidates down to that
 * bin fit the list, they are collected (any slot order), ranked by (value desc, id
 * asc) and the rest is the definition itself on the list's first k: their weights,
 * top-p's limit, the draw in that order.  Returns false (nothing done) when they do not
 * fit; else true, with *token drawn (left as it was, the greedy token, when the list
 * has no mass: every candidate was +inf). */
__device__ bool topk_list(const view &w, int V, int top_k, float top_p, u64 bits53, int *token,
                                       smem &s)
{
    build_hist(w, V, s, false);
    find_bin(s.h.hcnt, s.h.hmass, DSAMPLE_BINS, true, (u64)top_k, s);
    const int b = s.f_idx;
    const u64 n_list = s.f_above_cnt + s.h.hcnt[b];
    __syncthreads();
    if (n_list > (u64)LCAP)
        return false;
    const int n = collect_ranked(w, V, [b](int bin) { return bin <= b; }, s.l.x, s.l.id, s.l.sx, s.l.sid, s);
    list_draw(w, s.l.sx, s.l.sid, s.l.q, top_k < n ? top_k : n, top_p, bits53, token, s);
    return true;
}

/* A launch's slicing (sample()): n slices of chunk ids a row (0: none); draws: plain
 * draws' masses (mass_kernel); ks_cap: the top-k lists' room (topk_kernel, 0: none);
 * lp: the logprobs' masses and lists (lp_kernel); copies: rows with bias or penalties
 * have their values written by their slices (amax_kernel). */
struct slicing {
    int n, chunk, draws, ks_cap, lp, copies;
};

/* Row row's work area: its values after bias and penalties [V], then its slices' words. */
__device__ __forceinline__ float *work_row(const struct cuda_sample &a, int row)
{
    return a.work + (size_t)row * cuda_sample_stride(a.vocab);
}

__device__ __forceinline__ float *meta_of(const struct cuda_sample &a, int row)
{
    return work_row(a, row) + (cuda_sample_stride(a.vocab) - CUDA_SAMPLE_META);
}

/* Whether row r's values were written by its slices (a row with bias or penalties). */
__device__ __forceinline__ bool copied(const struct dsample_row &r, const slicing &sl)
{
    return sl.copies && r.n_mods > 0;
}

/* Whether row r's result needs its values only for their maximum: a greedy row whose
 * slices can read it (dsample_sliceable). */
__device__ __forceinline__ bool greedy_sliced(const struct dsample_row &r, const slicing &sl)
{
    return sl.n > 0 && r.temperature < DSAMPLE_GREEDY_EPS && dsample_sliceable(&r, sl.copies);
}

/* Whether row r is a plain draw drawn from its slices' masses. */
__device__ __forceinline__ bool draw_sliced_row(const struct dsample_row &r, int V, const slicing &sl)
{
    return sl.n > 0 && sl.draws && dsample_plain_draw(&r, V, sl.copies);
}

/* The maximum of a row from its slices' (amax_kernel: values at [0, n), ids at [n, 2 n)
 * of its slices' words): this thread's share, slices first, first + stride, ... (block_amax
 * then merges the threads'). */
__device__ __forceinline__ void slices_amax(const float *part, int n, int first, int stride, float &bv, int &bi)
{
    for (int j = first; j < n; j += stride)
        amax_take(bv, bi, part[j], ((const int *)part)[n + j]);
}

/* A row's maximum from its slices' (slices_amax over a block of NT threads, block_amax),
 * -0 as +0: what the row's own block takes, for the slice kernels of a plain draw. */
template <int NT> __device__ __forceinline__ float slices_max(const float *part, int n, float *sv, int *si)
{
    float xmax = 0.0f;
    int tok = INT_MAX;
    slices_amax(part, n, threadIdx.x, NT, xmax, tok);
    block_amax<NT>(xmax, tok, sv, si);
    if (xmax == 0.0f)
        xmax = 0.0f; /* -0 and +0 are one maximum */
    return xmax;
}

/* Slice j's mass (mass_kernel): a (low, high) word pair at 2 n + 2 j of the slices' words. */
__device__ __forceinline__ u64 slice_mass(const unsigned *mw, int j)
{
    return (u64)mw[2 * j] | ((u64)mw[2 * j + 1] << 32);
}

/* A sliced top-k (plain top-k draws, k <= KS): each slice's best k candidates
 * (topk_kernel), then the row's block merges the slices' lists and draws from the first
 * k (list_draw): the list topk_list ranks, as every slice holds its own share of it.
 * Candidates compare by a key of (value's order, id's complement): larger is better,
 * ties to the lower id, 0 no candidate. */
constexpr int KS = 48;     /* the largest top-k drawn from slices */
constexpr int TK_E = 16;   /* ids a thread of topk_kernel holds: a slice of at most TK_E * AT */
static_assert(AT > KS, "slice_best_put's early stop: t = 0 (every thread's key at or above it) is never taken");

__device__ __forceinline__ u64 topk_key(float v, int id)
{
    return ((u64)dsample_order(v) << 32) | (u64)(0xffffffffu - (unsigned)id);
}

/* The warp's largest of its lanes' keys (distinct, or 0): the lane holding it, or -1
 * when every key is 0; *kw the key. */
__device__ __forceinline__ int warp_best(u64 key, u64 *kw)
{
    const unsigned hi = (unsigned)(key >> 32), lo = (unsigned)key;
    const unsigned mh = __reduce_max_sync(FULL, hi);
    const unsigned ml = __reduce_max_sync(FULL, hi == mh ? lo : 0u);
    *kw = ((u64)mh << 32) | ml;
    if (mh == 0)
        return -1; /* a candidate's order is never 0 */
    return __ffs(__ballot_sync(FULL, hi == mh && lo == ml)) - 1;
}

/* One warp: the first k keys of nl lists sorted best first (list j at src + j stride,
 * len keys, 0 past its candidates), best first into out; heads [nl] scratch, list j
 * owned by lane j % 32.  Returns how many (fewer when the lists run out). */
__device__ int merge_lists(const u64 *src, int nl, int stride, int len, int k, unsigned *heads, u64 *out)
{
    const int lane = threadIdx.x & 31;
    for (int j = lane; j < nl; j += 32)
        heads[j] = 0;
    __syncwarp();
    u64 b = 0;
    int bj = -1;
    auto lane_best = [&]() {
        b = 0;
        bj = -1;
        for (int j = lane; j < nl; j += 32) {
            const unsigned h = heads[j];
            const u64 c = h < (unsigned)len ? src[(size_t)j * stride + h] : 0;
            if (c > b) {
                b = c;
                bj = j;
            }
        }
    };
    lane_best();
    int n = 0;
    for (; n < k; n++) {
        u64 kw;
        const int win = warp_best(b, &kw);
        if (win < 0)
            break;
        if (lane == 0)
            out[n] = kw;
        if (lane == win) {
            heads[bj]++;
            lane_best();
        }
    }
    __syncwarp();
    return n;
}

/* The row block of a row whose best top_k came from slices: the slices' lists
 * (topk_kernel's or lp_kernel's: cap keys a slice from lw, as (low, high) pairs) merged
 * by warp 0 into the row's first top_k candidates, their values into vals and ids into
 * ids.  Returns how many (fewer than top_k when the row has fewer candidates). */
__device__ int merge_slices(const view &w, const unsigned *lw, int n_slices, int cap, int top_k, float *vals,
                            int *ids, smem &s)
{
    for (int e = threadIdx.x; e < n_slices * top_k; e += ST) {
        const int j = e / top_k, q = e - j * top_k;
        const unsigned *p = lw + 2 * ((size_t)j * cap + q);
        s.mk[e] = (u64)p[0] | ((u64)p[1] << 32);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int kk = merge_lists(s.mk, n_slices, top_k, top_k, top_k, s.dcnt, s.seg);
        for (int j = threadIdx.x; j < kk; j += 32) {
            const int id = (int)(0xffffffffu - (unsigned)s.seg[j]);
            float v;
            view_get(w, id, &v);
            ids[j] = id;
            vals[j] = v;
        }
        if (threadIdx.x == 0)
            s.n_list = kk;
    }
    __syncthreads();
    const int kk = s.n_list;
    __syncthreads();
    return kk;
}

/* Whether row r draws its top-k from slices (within the launch's room). */
__device__ __forceinline__ bool topk_sliced(const struct dsample_row &r, int V, const slicing &sl)
{
    return sl.n > 0 && sl.ks_cap > 0 && dsample_plain_topk(&r, V, sl.copies) && r.top_k <= sl.ks_cap;
}

/* Whether row r's maximum comes from its slices: the rows above, and every row whose
 * values the slices wrote. */
__device__ __forceinline__ bool max_sliced(const struct dsample_row &r, int V, const slicing &sl)
{
    return greedy_sliced(r, sl) || draw_sliced_row(r, V, sl) || topk_sliced(r, V, sl) || copied(r, sl);
}

/* A draw_plain row's draw from its slices' masses: warp 0 adds them in slice order
 * (integers: the row's total whatever the cut), finds the slice where the cumulative
 * mass passes target = floor(u total), and the block walks that slice alone
 * (draw_id_order from the mass of the slices before it): the token of one walk over
 * the whole row.  -1 when the row has no mass (every candidate +inf: greedy). */
__device__ int draw_sliced(const view &w, int V, int n_slices, int chunk, const unsigned *mw, u64 bits53, smem &s)
{
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, per = (n_slices + 31) / 32, j0 = lane * per;
        u64 own = 0;
        for (int j = j0; j < j0 + per && j < n_slices; j++)
            own += slice_mass(mw, j);
        u64 incl = own;
        for (int o = 1; o < 32; o <<= 1) {
            u64 a = __shfl_up_sync(FULL, incl, o);
            if (lane >= o)
                incl += a;
        }
        const u64 total = __shfl_sync(FULL, incl, 31);
        const u64 target = total ? dsample_target(bits53, total) : 0;
        const unsigned hit = __ballot_sync(FULL, total && target < incl);
        int jt = -1;
        u64 before = 0;
        if (hit) { /* warp-uniform */
            const int at = __ffs(hit) - 1;
            if (lane == at) {
                before = incl - own;
                jt = j0;
                while (before + slice_mass(mw, jt) <= target) /* target < the lane's end: stops in it */
                    before += slice_mass(mw, jt++);
            }
            jt = __shfl_sync(FULL, jt, at);
            before = __shfl_sync(FULL, before, at);
        }
        if (lane == 0) {
            s.f_idx = jt;
            s.f_above_mass = before;
            s.tot_mass = total;
        }
    }
    __syncthreads();
    const int j = s.f_idx;
    const u64 before = s.f_above_mass, total = s.tot_mass;
    __syncthreads();
    if (j < 0)
        return -1;
    return draw_id_order(w, j * chunk, min(V, (j + 1) * chunk), DSAMPLE_CPU_BINS, total, before, bits53, s);
}

/* Where a row's logprobs slices start in its slices' words: after the maxima and ids
 * [2 n], the draw's masses [2 n] and the top-k lists [2 ks_cap n].  Each slice's mass (a
 * word pair at 2 slice), then its best DSAMPLE_MAX_TOP keys (from 2 n + 2
 * DSAMPLE_MAX_TOP slice); then a copied row's raw maxima and ids [2 n] (raw_words). */
__host__ __device__ __forceinline__ int lp_words(int n_slices, int ks_cap)
{
    return 4 * n_slices + 2 * ks_cap * n_slices;
}

__host__ __device__ __forceinline__ int raw_words(int n_slices, int ks_cap)
{
    return lp_words(n_slices, ks_cap) + 2 * n_slices * (1 + DSAMPLE_MAX_TOP);
}

/* Block (row, slice) of a max_sliced row: the (maximum, first id) of its values [slice *
 * chunk, + chunk) into its slices' words: values at [0, n), ids at [n, 2 n).  A copied
 * row's slice first writes its values: the cleaned logits, then the row's mods of its
 * ids (the CPU's float operations, each token by one thread), so that the row's block
 * and the other slice kernels read them; with the logprobs' slices, also the raw
 * logits' maximum (at raw_words).  The same values as one block's pass, and maxima have
 * one answer in any order. */
__global__ void __launch_bounds__(AT) amax_kernel(struct cuda_sample a, slicing sl)
{
    __shared__ float sv[AT / 32];
    __shared__ int si[AT / 32];
    const struct dsample_row r = a.rows[blockIdx.x];
    const int V = a.vocab;
    if (!max_sliced(r, V, sl))
        return;
    const float *L = a.logits + (size_t)r.logit_row * V;
    const int lo = blockIdx.y * sl.chunk, hi = min(V, lo + sl.chunk);
    float *meta = meta_of(a, blockIdx.x);
    float bv = 0.0f;
    int bi = INT_MAX;
    if (!copied(r, sl)) {
        clean_range<AT>(L, nullptr, lo, hi, false, bv, bi); /* lo is a multiple of 4 */
    } else {
        float *x = work_row(a, blockIdx.x);
        float rv = 0.0f;
        int ri = INT_MAX;
        clean_range<AT>(L, x, lo, hi, true, rv, ri);
        __syncthreads(); /* the slice's values written before any mod reads them */
        for (int j = threadIdx.x; j < r.n_mods; j += AT) {
            const struct dsample_mod m = a.mods[r.mod_first + j];
            if (m.token >= lo && m.token < hi) /* and so within the row: checked on the host too */
                dsample_apply_mod(&r, &m, a.biases, x);
        }
        __syncthreads();
        for (int i = lo + threadIdx.x; i < hi; i += AT)
            amax_take(bv, bi, x[i], i);
        if (sl.lp) {
            block_amax<AT>(rv, ri, sv, si);
            if (threadIdx.x == 0) {
                float *raw = meta + raw_words(sl.n, sl.ks_cap);
                raw[blockIdx.y] = rv;
                ((int *)raw)[sl.n + blockIdx.y] = ri;
            }
        }
    }
    block_amax<AT>(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        meta[blockIdx.y] = bv;
        ((int *)meta)[sl.n + blockIdx.y] = bi;
    }
}

/* The integer mass of w's candidates among the raw ids [lo, hi) by w's weights
 * (id_weight_of over every CPU bin; none when w.ref is -inf), over a block of AT threads
 * (ws [AT / 32]); thread 0 writes it as a (low, high) word pair at mw.  Integer sums:
 * the slices' masses add up to one pass's total in any order. */
__device__ __forceinline__ void slice_mass_put(const view &w, int lo, int hi, u64 *ws, unsigned *mw)
{
    u64 q = 0;
    if (w.ref != -INFINITY) { /* else the row draws nothing: its block keeps the argmax */
        constexpr int U = 4; /* loads in flight a thread */
        for (int i = lo + threadIdx.x; i < hi; i += U * AT) {
            float raw[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                raw[u] = i + u * AT < hi ? w.vals[i + u * AT] : -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++)
                q += i + u * AT < hi ? id_weight_of(w, raw[u], DSAMPLE_CPU_BINS) : 0;
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        q += __shfl_xor_sync(FULL, q, o);
    if ((threadIdx.x & 31) == 0)
        ws[threadIdx.x >> 5] = q;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t = 0;
        for (int k = 0; k < AT / 32; k++)
            t += ws[k];
        mw[0] = (unsigned)t;
        mw[1] = (unsigned)(t >> 32);
    }
}

/* The values a slice block of row r reads: the logits, cleaned as read, or (on_copy) the
 * values its slices wrote. */
__device__ __forceinline__ view slice_view(const struct cuda_sample &a, const struct dsample_row &r, bool on_copy,
                                           float ref, float t, int all, double keep_from)
{
    const view w = {on_copy ? work_row(a, blockIdx.x) : a.logits + (size_t)r.logit_row * a.vocab, !on_copy, ref, t,
                    all, keep_from};
    return w;
}

/* What a slice block of row blockIdx.x starts from, after amax_kernel: the row's slices'
 * words, the row's maximum from the slices' maxima at word `at` (as the row's block
 * takes it), and the slice's ids [lo, hi). */
struct slice_ctx {
    float *meta;
    float vmax;
    int lo, hi;
};

__device__ __forceinline__ slice_ctx slice_begin(const struct cuda_sample &a, const slicing &sl, int at)
{
    __shared__ float sv[AT / 32];
    __shared__ int si[AT / 32];
    slice_ctx c;
    c.meta = meta_of(a, blockIdx.x);
    c.vmax = slices_max<AT>(c.meta + at, sl.n, sv, si);
    c.lo = blockIdx.y * sl.chunk;
    c.hi = min(a.vocab, c.lo + sl.chunk);
    return c;
}

/* Block (row, slice) of a draw_sliced_row row, after amax_kernel: the row's maximum
 * from the slices' (as its sample block takes it), then the integer mass of the slice's
 * candidates by the draw's weights, into the slices' words as a (low, high) word pair
 * at 2 n + 2 slice. */
__global__ void __launch_bounds__(AT) mass_kernel(struct cuda_sample a, slicing sl)
{
    __shared__ u64 ws[AT / 32];
    const struct dsample_row r = a.rows[blockIdx.x];
    if (!draw_sliced_row(r, a.vocab, sl))
        return;
    const slice_ctx c = slice_begin(a, sl, 0);
    const view w = slice_view(a, r, copied(r, sl), c.vmax, r.temperature, 0, r.keep_from);
    slice_mass_put(w, c.lo, c.hi, ws, (unsigned *)c.meta + 2 * sl.n + 2 * blockIdx.y);
}

struct slice_best_smem {
    u64 cand[TK_E * KS]; /* the keys at or above the threshold, as found */
    u64 best[KS];        /* ranked */
    int n_cand;
};

/* The best k <= KS of w's candidates among ids [lo, hi) (at most TK_E * AT of them), over
 * a block of AT threads: keys best first (0 past the candidates) into lw as (low, high)
 * word pairs.  Each thread holds TK_E ids; t, the k-th largest of the threads' best keys
 * (a bitwise search of block-wide counts), has at least k keys at or above it, so the
 * slice's best k are among those, at most TK_E k of them: they are collected and
 * ranked.  The search may stop early, after the keys' high 16 or 32 bits: any t of at
 * least k and at most KS threads' best keys at or above it will do (the k-th largest is
 * among them, so the best k are too, and the candidates still fit TK_E KS), and such
 * prefixes of the k-th largest usually are (the logits' values seldom tie in their top
 * 16 bits), which saves most of the 64 block-wide counts.  The same best k either way. */
__device__ __forceinline__ void slice_best_put(const view &w, int lo, int hi, int k, slice_best_smem &b,
                                               unsigned *lw)
{
    u64 *const cand = b.cand, *const best = b.best;
    int &n_cand = b.n_cand;
    u64 e[TK_E], m = 0;
#pragma unroll
    for (int u = 0; u < TK_E; u++) {
        const int i = lo + threadIdx.x + u * AT;
        float v;
        e[u] = i < hi && view_get(w, i, &v) ? topk_key(v, i) : 0;
        m = e[u] > m ? e[u] : m;
    }
    if (threadIdx.x == 0)
        n_cand = 0;
    u64 t = 0; /* the k-th largest m (distinct keys, or 0), or 0 when fewer are nonzero; or a prefix of it */
    for (int bit = 63; bit >= 0; bit--) {
        const u64 c = t | (1ull << bit);
        if (__syncthreads_count(m >= c) >= k)
            t = c;
        /* (t = 0 counts all AT threads, never few enough) */
        if ((bit == 48 || bit == 32) && __syncthreads_count(m >= t) <= KS)
            break;
    }
#pragma unroll
    for (int u = 0; u < TK_E; u++)
        if (e[u] != 0 && e[u] >= t)
            cand[atomicAdd(&n_cand, 1)] = e[u]; /* slot order varies: ranked below */
    __syncthreads();
    const int nc = n_cand;
    for (int j = threadIdx.x; j < nc; j += AT) {
        const u64 kj = cand[j];
        int rank = 0;
        for (int i = 0; i < nc; i++)
            rank += cand[i] > kj;
        if (rank < k)
            best[rank] = kj;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < k; j += AT) {
        const u64 key = j < nc ? best[j] : 0;
        lw[2 * j] = (unsigned)key;
        lw[2 * j + 1] = (unsigned)(key >> 32);
    }
}

/* Block (row, slice) of a plain top-k draw (topk_sliced), after amax_kernel: the row's
 * maximum from the slices' (for min-p), then the slice's best top_k candidates
 * (slice_best_put) at words 4 n + 2 ks_cap slice of the slices' words. */
__global__ void __launch_bounds__(AT) topk_kernel(struct cuda_sample a, slicing sl)
{
    __shared__ slice_best_smem b;
    const struct dsample_row r = a.rows[blockIdx.x];
    if (!topk_sliced(r, a.vocab, sl))
        return;
    const slice_ctx c = slice_begin(a, sl, 0);
    const view w = slice_view(a, r, copied(r, sl), c.vmax, r.temperature, 0, r.keep_from);
    slice_best_put(w, c.lo, c.hi, r.top_k, b, (unsigned *)c.meta + 4 * sl.n + 2 * (size_t)blockIdx.y * sl.ks_cap);
}

/* Whether row r's logprobs come from slices (where the launch sliced them): those of a
 * row whose maximum comes from its slices (a copied row's draw may still walk the copy
 * in its block). */
__device__ __forceinline__ bool lp_sliced(const struct dsample_row &r, int V, const slicing &sl)
{
    return sl.lp && (r.logprobs || r.n_logprobs > 0) && max_sliced(r, V, sl);
}

/* The slices' word where row r's logprobs' maxima are: the values' (the raw logits', or a
 * copied row's when its logprobs are penalized), or a copied row's raw ones. */
__device__ __forceinline__ int lp_maxima(const struct dsample_row &r, const slicing &sl)
{
    return copied(r, sl) && !r.penalized ? raw_words(sl.n, sl.ks_cap) : 0;
}

/* Block (row, slice) of a row with sliced logprobs, after amax_kernel: the maximum of
 * the values its logprobs are of (lp_maxima), then the slice's integer mass by the
 * weights at temperature 1 of every token and its best n_top tokens (lp_words says
 * where).  Nothing when the maximum is -inf: the row's block then needs no sum. */
__global__ void __launch_bounds__(AT) lp_kernel(struct cuda_sample a, slicing sl)
{
    __shared__ slice_best_smem b;
    __shared__ u64 ws[AT / 32];
    const struct dsample_row r = a.rows[blockIdx.x];
    if (!lp_sliced(r, a.vocab, sl))
        return;
    const slice_ctx c = slice_begin(a, sl, lp_maxima(r, sl));
    if (c.vmax == -INFINITY)
        return;
    const view w = slice_view(a, r, copied(r, sl) && r.penalized, c.vmax, 1.0f, 1, 0.0);
    unsigned *lw = (unsigned *)c.meta + lp_words(sl.n, sl.ks_cap);
    slice_mass_put(w, c.lo, c.hi, ws, lw + 2 * blockIdx.y);
    const int n_top = min(r.n_logprobs, a.vocab);
    if (n_top > 0)
        slice_best_put(w, c.lo, c.hi, n_top, b, lw + 2 * sl.n + 2 * DSAMPLE_MAX_TOP * blockIdx.y);
}

/* sl.n > 0: amax_kernel ran before, in slices of sl.chunk ids, for the max_sliced rows
 * (writing the copied rows' values); then mass_kernel for the draw_sliced_row rows,
 * topk_kernel for the topk_sliced ones, lp_kernel for the lp_sliced ones. */
__global__ void __launch_bounds__(ST, 1) sample_kernel(struct cuda_sample a, slicing sl)
{
    __shared__ smem s;
    const struct dsample_row r = a.rows[blockIdx.x];
    const int V = a.vocab, n_slices = sl.n;
    const float *L = a.logits + (size_t)r.logit_row * V;
    float *x = work_row(a, blockIdx.x);
    const float *meta = meta_of(a, blockIdx.x);
    int id_bits = 1;
    while (id_bits < 31 && ((V - 1) >> id_bits) != 0)
        id_bits++;

    /* The greedy token: the maximum, ties to the lower id, of the cleaned logits, then
     * bias and penalties (the CPU's float operations, each token by one thread). */
    float xmax = 0.0f;
    int token = INT_MAX;
    /* the copy is read by a draw, by the modifiers, and by logprobs after them; a
     * greedy row with none of those needs only the maximum (600 KB a row unwritten) */
    const bool greedy = r.temperature < DSAMPLE_GREEDY_EPS, with_lp = r.logprobs || r.n_logprobs > 0;
    const bool sliced_draw = draw_sliced_row(r, V, sl), sliced_topk = topk_sliced(r, V, sl);
    const bool cp = copied(r, sl); /* the values are in x already, with the mods */
    if (max_sliced(r, V, sl)) { /* the slices' maxima */
        slices_amax(meta, n_slices, threadIdx.x, ST, xmax, token);
    } else {
        /* stored unless only the maximum is read */
        clean_range<ST>(L, x, 0, V, !(greedy && dsample_sliceable(&r, 0)), xmax, token);
    }
    if (r.n_mods > 0 && !cp) {
        __syncthreads();
        for (int j = threadIdx.x; j < r.n_mods; j += ST) {
            const struct dsample_mod m = a.mods[r.mod_first + j];
            if (m.token >= 0 && m.token < V) /* checked on the host */
                dsample_apply_mod(&r, &m, a.biases, x);
        }
        __syncthreads();
        token = INT_MAX;
        for (int i = threadIdx.x; i < V; i += ST)
            amax_take(xmax, token, x[i], i);
    }
    block_amax<ST>(xmax, token, s.fred, s.ired);
    if (xmax == 0.0f)
        xmax = 0.0f; /* -0 and +0 are one maximum */

    if (!greedy && xmax != -INFINITY) {
        view w = {x, 0, xmax, r.temperature, 0, r.keep_from};
        const u64 bits = dsample_bits53(r.seed, r.seq_index, r.step);
        const bool sorted = r.top_k > 0 && r.top_k < V; /* the CPU draws in sorted order */
        if ((sliced_draw || sliced_topk) && !cp) { /* the raw row, cleaned as read: no copy was stored */
            w.vals = L;
            w.clean = 1;
        }
        if (sliced_draw) {
            int t = draw_sliced(w, V, n_slices, sl.chunk, (const unsigned *)meta + 2 * n_slices, bits, s);
            if (t >= 0) /* else every candidate was +inf: greedy */
                token = t;
        } else if (sliced_topk) {
            const int kk =
                merge_slices(w, (const unsigned *)meta + 4 * n_slices, n_slices, sl.ks_cap, r.top_k, s.bsx, s.bsid, s);
            list_draw(w, s.bsx, s.bsid, s.dmass, kk, r.top_p, bits, &token, s);
        } else if (!sorted && !(r.top_p < 1.0f)) {
            /* temperature and min-p alone: one pass sums and draws in id order */
            int t = draw_id_order(w, 0, V, DSAMPLE_CPU_BINS, 0, 0, bits, s);
            if (t >= 0) /* else every candidate was +inf: greedy */
                token = t;
        } else if (sorted && r.top_k <= LCAP && topk_list(w, V, r.top_k, r.top_p, bits, &token, s)) {
            /* drawn from the list of the best candidates */
        } else {
            build_hist(w, V, s);
            u64 total = s.tot_mass, n_cand = s.tot_cnt;
            __syncthreads();
            if (total > 0) {
                if (r.top_k > 0 && (u64)r.top_k < n_cand)
                    total = select_at(w, V, id_bits, true, (u64)r.top_k, false, s).mass_through;
                int edge = DSAMPLE_CPU_BINS; /* without top-p: every token in id order */
                if (r.top_p < 1.0f) {
                    sel kept = select_at(w, V, id_bits, false, dsample_top_p_limit(r.top_p, total), !sorted, s);
                    total = kept.mass_through;
                    if (!sorted)
                        edge = dsample_cpu_bin(xmax, x[kept.id], r.temperature);
                }
                u64 target = dsample_target(bits, total);
                token = sorted ? -1 : draw_id_order(w, 0, V, edge, total, 0, bits, s);
                if (token < 0) /* in sorted order: the kept tokens the id walk left, after its mass */
                    token = select_at(w, V, id_bits, false, target + 1, true, s).id;
            }
        }
    }

    float lp = 0.0f;
    int n_top = 0;
    if (with_lp) {
        view w = {r.penalized ? x : L, !r.penalized, 0.0f, 1.0f, 1, 0.0};
        /* from slices: the maximum is the row's values' (a copied row's raw logits' from
         * their own slices), the mass and the best n_top are lp_kernel's */
        const bool sliced = lp_sliced(r, V, sl);
        const unsigned *lw = (const unsigned *)meta + lp_words(n_slices, sl.ks_cap);
        float bmax = sliced ? xmax : -INFINITY;
        if (sliced && cp && !r.penalized)
            bmax = slices_max<ST>(meta + lp_maxima(r, sl), n_slices, s.fred, s.ired);
        if (!sliced) {
            for (int i = threadIdx.x; i < V; i += ST) {
                float v;
                view_get(w, i, &v);
                bmax = fmaxf(bmax, v);
            }
            bmax = block_max(bmax, s);
        }
        n_top = r.n_logprobs < V ? r.n_logprobs : V;
        if (bmax == -INFINITY) {
            lp = -INFINITY; /* the top are ids 0.. (all tie), filled below */
            if (threadIdx.x == 0)
                for (int k = 0; k < n_top; k++) {
                    s.list_id[k] = k;
                    s.list_v[k] = -INFINITY;
                }
        } else {
            w.ref = bmax;
            u64 tot = 0;
            if (sliced) {
                for (int j = 0; j < n_slices; j++)
                    tot += slice_mass(lw, j);
            } else if (n_top > 0) {
                build_hist(w, V, s);
                tot = s.tot_mass;
            } else { /* the sum alone */
                u64 q = 0;
                for (int i = threadIdx.x; i < V; i += ST) {
                    float v;
                    view_get(w, i, &v);
                    q += dsample_weight(bmax, v, 1.0f);
                }
                tot = block_sum(q, s);
            }
            double shift = (double)bmax + dsample_log((double)tot * (1.0 / DSAMPLE_ONE));
            float vt;
            view_get(w, token, &vt);
            lp = (float)((double)vt - shift);
            __syncthreads();
            if (n_top > 0 && sliced) {
                merge_slices(w, lw + 2 * n_slices, n_slices, DSAMPLE_MAX_TOP, n_top, s.list_v, s.list_id, s);
                if (threadIdx.x == 0)
                    for (int p = 0; p < n_top; p++)
                        s.list_v[p] = (float)((double)s.list_v[p] - shift);
            } else if (n_top > 0) {
                sel k = select_at(w, V, id_bits, true, (u64)n_top, true, s);
                if (threadIdx.x == 0)
                    s.n_list = 0;
                __syncthreads();
                for (int i = threadIdx.x; i < V; i += ST) {
                    float v;
                    view_get(w, i, &v);
                    uint32_t o = dsample_order(v);
                    if (o > k.order || (o == k.order && i <= k.id)) {
                        int at = atomicAdd(&s.n_list, 1); /* slot order varies: sorted below */
                        if (at < DSAMPLE_MAX_TOP) {
                            s.list_id[at] = i;
                            s.list_v[at] = v;
                        }
                    }
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    for (int p = 1; p < n_top; p++) { /* insertion sort: (value desc, id asc) */
                        int id = s.list_id[p];
                        float v = s.list_v[p];
                        uint32_t o = dsample_order(v);
                        int q = p - 1;
                        while (q >= 0 && (dsample_order(s.list_v[q]) < o ||
                                          (dsample_order(s.list_v[q]) == o && s.list_id[q] > id))) {
                            s.list_id[q + 1] = s.list_id[q];
                            s.list_v[q + 1] = s.list_v[q];
                            q--;
                        }
                        s.list_id[q + 1] = id;
                        s.list_v[q + 1] = v;
                    }
                    for (int p = 0; p < n_top; p++)
                        s.list_v[p] = (float)((double)s.list_v[p] - shift);
                }
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        struct dsample_out *o = &a.out[blockIdx.x];
        o->token = token;
        o->logprob = lp;
        o->n_top = n_top;
        o->pad = 0;
        for (int k = 0; k < DSAMPLE_MAX_TOP; k++) {
            o->top[k].token = k < n_top ? s.list_id[k] : 0;
            o->top[k].logprob = k < n_top ? s.list_v[k] : 0.0f;
        }
    }
}

} // namespace

enum hr_status sample(const struct cuda_sample *a, void *stream, char *err, size_t errlen)
{
    if (a->n_rows == 0)
        return HR_OK;
    if (a->n_rows < 0 || a->vocab <= 0 || !a->logits || !a->rows || !a->work || !a->out ||
        (!a->mods && a->n_mods > 0) || (!a->biases && a->n_biases > 0))
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda sample: bad arguments (rows=%d vocab=%d)", a->n_rows,
                      a->vocab);
    slicing sl = {0, 0, 0, 0, 0, 0};
    if (g_slices > 0 && a->vocab >= 8) {
        /* slices of whole float4s, at most vocab / 4 of them (g_slices at most 1,024: their
         * maxima and ids fit the slices' words); a plain draw's masses take 2 n words
         * more, a top-k's lists then 2 ks_cap n, the logprobs' masses and lists 2 n (1 +
         * DSAMPLE_MAX_TOP) and a copied row's raw maxima 2 n */
        const int M = CUDA_SAMPLE_META;
        sl.chunk = ((a->vocab + g_slices - 1) / g_slices + 3) & ~3;
        const int n = sl.n = (a->vocab + sl.chunk - 1) / sl.chunk;
        sl.copies = a->mod_rows;
        sl.draws = a->plain_draws && 4 * n <= M;
        if (a->plain_topk && sl.chunk <= TK_E * AT && n <= 256) /* 256: s.dcnt holds the heads */
            sl.ks_cap = std::max(0, std::min({KS, MCAP / n, (M - 4 * n) / (2 * n)}));
        /* a logprobs slice's list takes DSAMPLE_MAX_TOP keys; the row's block merges them all */
        sl.lp = a->plain_lp && sl.chunk <= TK_E * AT && n * DSAMPLE_MAX_TOP <= MCAP &&
                raw_words(n, sl.ks_cap) + 2 * n <= M;
        const dim3 grid((unsigned)a->n_rows, (unsigned)n);
        amax_kernel<<<grid, AT, 0, (cudaStream_t)stream>>>(*a, sl);
        enum hr_status st = launch_status("sample argmax", err, errlen);
        if (st == HR_OK && sl.draws) {
            mass_kernel<<<grid, AT, 0, (cudaStream_t)stream>>>(*a, sl);
            st = launch_status("sample masses", err, errlen);
        }
        if (st == HR_OK && sl.ks_cap > 0) {
            topk_kernel<<<grid, AT, 0, (cudaStream_t)stream>>>(*a, sl);
            st = launch_status("sample top-k", err, errlen);
        }
        if (st == HR_OK && sl.lp) {
            lp_kernel<<<grid, AT, 0, (cudaStream_t)stream>>>(*a, sl);
            st = launch_status("sample logprobs", err, errlen);
        }
        if (st != HR_OK)
            return st;
    }
    sample_kernel<<<a->n_rows, ST, 0, (cudaStream_t)stream>>>(*a, sl);
    return launch_status("sample", err, errlen);
}

void sample_prepare(void)
{
    const char *v = getenv("HEARTH_CUDA_SAMPLE_SLICES");
    g_slices = 64;
    if (v) {
        long n = strtol(v, NULL, 10);
        g_slices = n < 0 ? 0 : n > 1024 ? 1024 : (int)n;
    }
}

} // namespace CUK_NS
