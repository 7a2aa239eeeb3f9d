/* Sampling on the device: the rows a backend's sample op takes and the results it gives
 * back (backend.h), and the arithmetic it is defined by, shared word for word by the
 * CUDA kernel (src/kernels/cuda/sample.cu) and host code (the tests' reference): plain C
 * and CUDA alike, IEEE operations only (no libm, no fused multiply-add: the builds pass
 * -ffp-contract=off and --fmad=false), so host and device compute the same bits.
 *
 * The device sampler follows engine/sampler.h (same order of operations, same Philox
 * keying, ties to the lower id) but every sum is an exact integer:
 *   - x: the logits after bias and penalties, as the CPU's float operations give them;
 *   - greedy (temperature < SAMPLER_GREEDY_EPS, or no finite logit): the first argmax;
 *   - otherwise candidates are the finite x that pass min-p ((double)(x - xmax) >=
 *     keep_from, keep_from = t ln(min_p) computed on the host);
 *   - a candidate's weight is q = dsample_weight(xmax, x, t): exp(-(xmax - x) / t) in
 *     float operations, in fixed point, round(w 2^44), 0 once (xmax - x) / t >= 32, so a
 *     row's total is below 2^62 and sums do not depend on their order;
 *   - order: (x desc, id asc); top-k keeps the first k; top-p keeps the tokens whose
 *     mass before them is < ceil(P T / 2^32), P = round(top_p 2^32) (at least 1), T the
 *     mass that top-k left; the draw takes target = floor(u T'), exactly
 *     (bits53 x T') >> 53 with T' the kept mass, and the first token whose cumulative
 *     mass exceeds target (zero weights are never drawn), walking the kept tokens in
 *     the CPU sampler's order, so that both pick the same token away from rounding:
 *     with top-k (0 < top_k < vocab) by (x desc, id asc); without, by id, except that
 *     with top-p the tokens of the CPU's edge bin (dsample_cpu_bin of the last kept
 *     token) come last, by (x desc, id asc).  With no mass at all (every candidate +inf
 *     after a penalty): greedy;
 *   - logprobs: v = the raw logits (NaN -inf, +inf FLT_MAX) or x, S = sum of
 *     dsample_weight(vmax, v, 1), logprob = (float)(v - (vmax + ln(S 2^-44))) in double;
 *     top_logprobs by (v desc, id asc). */
#ifndef HEARTH_KERNELS_DSAMPLE_H
#define HEARTH_KERNELS_DSAMPLE_H

#include <stdint.h>
#include <string.h>

#define DSAMPLE_MAX_TOP 20        /* = SAMPLER_MAX_LOGPROBS */
#define DSAMPLE_MAX_BIAS 4096     /* a row with more logit-bias entries samples on the host */
#define DSAMPLE_BINS 2048         /* first-level bins of (xmax - x) / t */
#define DSAMPLE_BINS_PER_UNIT 64  /* DSAMPLE_BINS / 32: weights from 32 on are 0 */
#define DSAMPLE_ONE 17592186044416.0 /* 2^44: the weight of the maximum */
#define DSAMPLE_ONE_F 17592186044416.0f
#define DSAMPLE_GREEDY_EPS 1e-5f      /* = SAMPLER_GREEDY_EPS */

/* One token that bias or penalties change, once per token (a row's list has each token
 * once, so the device applies them in any order). */
struct dsample_mod {
    int32_t token;
    uint32_t count;      /* occurrences in the output (frequency and presence penalties) */
    int32_t in_history;  /* 1: in the prompt or the output (repetition penalty) */
    int32_t bias_first;  /* this token's biases: biases[bias_first .. + n_bias), in the */
    int32_t n_bias;      /* request's order (floats add in that order, as the CPU's) */
};

struct dsample_row {
    int32_t logit_row;   /* row of the logits [*, vocab] */
    float temperature, top_p, min_p;
    float repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    int32_t logprobs;    /* 1: the sampled token's logprob */
    int32_t n_logprobs;  /* 0..DSAMPLE_MAX_TOP alternatives */
    int32_t penalized;   /* 1: logprobs after bias and penalties (else raw) */
    int32_t mod_first, n_mods; /* mods[mod_first .. + n_mods) */
    double keep_from;    /* min-p: temperature * ln(min_p) (host libm, as the CPU), -inf: off */
    uint64_t seed, seq_index, step;
};

struct dsample_logprob {
    int32_t token;
    float logprob;
};

struct dsample_out {
    int32_t token;
    float logprob;       /* 0 unless asked */
    int32_t n_top;
    int32_t pad;
    struct dsample_logprob top[DSAMPLE_MAX_TOP]; /* [n_top] best first, ties to the lower id */
};

#ifdef __CUDACC__
#define DSAMPLE_HD static __host__ __device__ __forceinline__
#else
#define DSAMPLE_HD static inline
#endif

DSAMPLE_HD double dsample_bits_double(uint64_t b)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)b);
#else
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
#endif
}

DSAMPLE_HD uint64_t dsample_double_bits(double d)
{
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
#endif
}

DSAMPLE_HD uint32_t dsample_float_bits(float f)
{
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(f);
#else
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
#endif
}

DSAMPLE_HD float dsample_bits_float(uint32_t b)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
#endif
}

/* NaN counts as -inf, +inf as FLT_MAX (as the CPU's sampler). */
DSAMPLE_HD float dsample_clean(float v)
{
    if (v != v)
        return -__builtin_inff();
    return v == __builtin_inff() ? 3.40282346638528859812e+38F : v;
}

/* An order-preserving key of a float: a > b <=> key(a) > key(b); -0 and +0 are one key,
 * as they compare equal. */
DSAMPLE_HD uint32_t dsample_order(float f)
{
    uint32_t u = dsample_float_bits(f);
    if (u == 0x80000000u)
        u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Round to the nearest integer, ties to even, for 0 <= v < 2^51. */
DSAMPLE_HD double dsample_round(double v)
{
    const double big = 4503599627370496.0; /* 2^52 */
    double r = v + big;
    return r - big;
}

/* Round to the nearest integer, ties to even, for 0 <= v < 2^23 (float). */
DSAMPLE_HD float dsample_roundf(float v)
{
    const float big = 8388608.0f; /* 2^23 */
    float r = v + big;
    return r - big;
}

/* exp(-d) for 0 <= d < 32 in float operations: d = k ln 2 - r with k = round(d log2 e)
 * (the high part of ln 2 has 9 significant bits, so k ln2_hi is exact for k <= 47), a
 * degree-7 Taylor polynomial of e^r on |r| <= 0.347 (truncation below 0.2 ulp), scaled
 * by 2^-k (a normal float: k <= 47).  Within a few ulp of e^-d; what matters is that
 * the host and the device compute it in the same IEEE operations. */
DSAMPLE_HD float dsample_expf_neg(float d)
{
    const float log2e = 1.44269502f;
    const float ln2_hi = 0.693359375f;      /* 355 / 512 */
    const float ln2_lo = -2.12194440e-4f;   /* ln 2 - ln2_hi */
    float kf = dsample_roundf(d * log2e);
    float r = (kf * ln2_hi - d) + kf * ln2_lo;
    float p = 1.98412698e-4f; /* 1 / 7! */
    p = 1.38888889e-3f + r * p;
    p = 8.33333333e-3f + r * p;
    p = 4.16666667e-2f + r * p;
    p = 1.66666667e-1f + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    return p * dsample_bits_float((uint32_t)(127 - (int)kf) << 23); /* 2^-k */
}

/* ln(x) for x >= 1 (finite): x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| <= 0.1716: eleven terms of the odd series. */
DSAMPLE_HD double dsample_log(double x)
{
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    uint64_t b = dsample_double_bits(x);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    double m = dsample_bits_double((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    if (m > 1.41421356237309504880) {
        m = m * 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double p = 2.0 / 23.0;
    p = 2.0 / 21.0 + s2 * p;
    p = 2.0 / 19.0 + s2 * p;
    p = 2.0 / 17.0 + s2 * p;
    p = 2.0 / 15.0 + s2 * p;
    p = 2.0 / 13.0 + s2 * p;
    p = 2.0 / 11.0 + s2 * p;
    p = 2.0 / 9.0 + s2 * p;
    p = 2.0 / 7.0 + s2 * p;
    p = 2.0 / 5.0 + s2 * p;
    p = 2.0 / 3.0 + s2 * p;
    p = 2.0 + s2 * p;
    double ed = (double)e;
    return ed * ln2_hi + (ed * ln2_lo + s * p);
}

/* (xmax - x) / t in float, as the bins and weights see it (NaN and overflow: huge). */
DSAMPLE_HD float dsample_dist(float xmax, float x, float t)
{
    float d = (xmax - x) / t;
    return d != d ? 3.40282346638528859812e+38F : d;
}

/* The fixed-point weight of x: round(e^(-(xmax - x) / t) 2^44) with e^ in float
 * (dsample_expf_neg: 24 significant bits, plenty for a draw), 0 from 32 on. */
DSAMPLE_HD uint64_t dsample_weight(float xmax, float x, float t)
{
    float d = dsample_dist(xmax, x, t);
    if (!(d < 32.0f))
        return 0;
    float v = dsample_expf_neg(d) * DSAMPLE_ONE_F; /* exact: a power of two */
    if (v < 8388608.0f)
        v = dsample_roundf(v);
    /* v is a whole number below 2^45: its significand shifted into place (integer
     * operations; a 64-bit conversion instruction is slow on the device) */
    uint32_t b = dsample_float_bits(v);
    if (b == 0)
        return 0;
    int e = (int)(b >> 23) - 150;
    uint64_t m = (b & 0x7fffffu) | 0x800000u;
    return e >= 0 ? m << e : m >> -e;
}

/* The first-level bin of x: DSAMPLE_BINS_PER_UNIT per unit of distance, monotone in x
 * (bin 0 holds the maximum), the last bin everything from 31.98 on. */
DSAMPLE_HD int dsample_bin(float xmax, float x, float t)
{
    float d = dsample_dist(xmax, x, t);
    if (!(d < 32.0f))
        return DSAMPLE_BINS - 1;
    int b = (int)(d * (float)DSAMPLE_BINS_PER_UNIT);
    return b < DSAMPLE_BINS - 1 ? b : DSAMPLE_BINS - 1;
}

/* Rows the device reads in slices (sample.cu): many blocks a row find its maximum, and a
 * draw's mass or best k and its logprobs' mass and best n, so that the row's own block
 * need not read it whole.  A row without bias or penalties is read as the raw logits
 * are, unless its logprobs are penalized; a row with them once the launch has written
 * its values after bias and penalties in slices too (copies: the host asks for that
 * where a row has mods).  Then a sliced draw is of temperature and min-p alone (a plain
 * draw) or has a top-k (a plain top-k draw; top-p and min-p too).  The host asks the
 * launch for the slices' kernels only where a row needs them. */
DSAMPLE_HD int dsample_sliceable(const struct dsample_row *r, int copies)
{
    const int with_lp = r->logprobs || r->n_logprobs > 0;
    return r->n_mods == 0 ? !(with_lp && r->penalized) : copies;
}

DSAMPLE_HD int dsample_plain(const struct dsample_row *r, int copies)
{
    return !(r->temperature < DSAMPLE_GREEDY_EPS) && dsample_sliceable(r, copies);
}

DSAMPLE_HD int dsample_plain_draw(const struct dsample_row *r, int vocab, int copies)
{
    return dsample_plain(r, copies) && !(r->top_k > 0 && r->top_k < vocab) && !(r->top_p < 1.0f);
}

DSAMPLE_HD int dsample_plain_topk(const struct dsample_row *r, int vocab, int copies)
{
    return dsample_plain(r, copies) && r->top_k > 0 && r->top_k < vocab;
}

/* Logprobs the slices can give (of a sliceable row). */
DSAMPLE_HD int dsample_plain_lp(const struct dsample_row *r, int copies)
{
    return (r->logprobs || r->n_logprobs > 0) && dsample_sliceable(r, copies);
}

/* One mod applied to x[token]: the CPU's float operations in the CPU's order (biases in
 * the request's order, repetition, frequency, presence). */
DSAMPLE_HD void dsample_apply_mod(const struct dsample_row *r, const struct dsample_mod *m, const float *biases,
                                  float *x)
{
    float v = x[m->token];
    for (int k = 0; k < m->n_bias; k++)
        v = v + biases[m->bias_first + k];
    if (r->repetition_penalty != 1.0f && m->in_history)
        v = v > 0.0f ? v / r->repetition_penalty : v * r->repetition_penalty;
    if ((r->frequency_penalty != 0.0f || r->presence_penalty != 0.0f) && m->count) {
        v = v - r->frequency_penalty * (float)m->count;
        v = v - r->presence_penalty;
    }
    x[m->token] = v;
}

/* The CPU sampler's top-p bin of x (sampler.c: 128 per unit of distance, 4096 bins):
 * the draw's order puts the tokens of the last kept token's bin last. */
#define DSAMPLE_CPU_BINS 4096
DSAMPLE_HD int dsample_cpu_bin(float xmax, float x, float t)
{
    float d = dsample_dist(xmax, x, t);
    return d >= 32.0f ? DSAMPLE_CPU_BINS - 1 : (int)(d * 128.0f);
}

/* a * b as a 128-bit hi:lo (portable 32-bit halves). */
DSAMPLE_HD void dsample_mul128(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (p00 & 0xffffffffu) | (mid << 32);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* top-p's limit: ceil(P T / 2^32) with P = round(top_p 2^32), at least 1; T < 2^62. */
DSAMPLE_HD uint64_t dsample_top_p_limit(float top_p, uint64_t total)
{
    uint64_t p = (uint64_t)dsample_round((double)top_p * 4294967296.0);
    if (p < 1)
        p = 1;
    uint64_t hi, lo;
    dsample_mul128(p, total, &hi, &lo);
    uint64_t lo2 = lo + 0xffffffffull;
    hi += lo2 < lo;
    return (hi << 32) | (lo2 >> 32);
}

/* Philox-4x32-10 (Salmon et al., SC'11): ten rounds over the counter c, keyed by k
 * (the host's sampler_philox4x32 and the device's draw both run this). */
DSAMPLE_HD void dsample_philox(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[1] = (uint32_t)p1;
        c[3] = (uint32_t)p0;
        c[0] = n0;
        c[2] = n2;
        k0 += 0x9E3779B9u; /* Weyl key schedule */
        k1 += 0xBB67AE85u;
    }
}

/* The 53 random bits sampler_uniform scales: counter (step, seq_index), key seed. */
DSAMPLE_HD uint64_t dsample_bits53(uint64_t seed, uint64_t seq_index, uint64_t step)
{
    uint32_t c[4] = {(uint32_t)step, (uint32_t)(step >> 32), (uint32_t)seq_index, (uint32_t)(seq_index >> 32)};
    dsample_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (((uint64_t)c[0] << 32) | c[1]) >> 11;
}

/* The draw's target in [0, total): floor(u total) exactly, u = bits53 2^-53. */
DSAMPLE_HD uint64_t dsample_target(uint64_t bits53, uint64_t total)
{
    uint64_t hi, lo;
    dsample_mul128(bits53, total, &hi, &lo);
    return (hi << 11) | (lo >> 53);
}

#endif
