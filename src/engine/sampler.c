/* Token sampling; see sampler.h for the order of operations and the logprob semantics. */
#include "engine/sampler.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kernels/dsample.h"

struct sampler_cand {
    float x;    /* logit after bias and penalties (before temperature: the order is the same) */
    int32_t id;
    float w;    /* exp((x - xmax) / temperature), once known */
    int32_t bin; /* top-p bin, once known */
};

#define SAMPLER_BINS 4096
#define SAMPLER_BINS_PER_UNIT 128

/* ------------------------------------------------------------------------------------------ */
/* Parameters                                                                                  */

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->logprobs_mode = SAMPLER_LOGPROBS_RAW;
}

enum hr_status sampler_params_validate(const struct sampler_params *p, int vocab, char *err, size_t errlen)
{
    /* Written as !(in range) so that NaN fails too. */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return hr_err(err, errlen, HR_ERR_INVALID, "temperature must be a finite number >= 0, got %g",
                      (double)p->temperature);
    if (p->top_k < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "top_k must be >= 0 (0 disables it), got %d", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return hr_err(err, errlen, HR_ERR_INVALID, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return hr_err(err, errlen, HR_ERR_INVALID, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return hr_err(err, errlen, HR_ERR_INVALID, "repetition_penalty must be a finite number > 0, got %g",
                      (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return hr_err(err, errlen, HR_ERR_INVALID, "presence_penalty must be in [-2, 2], got %g",
                      (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return hr_err(err, errlen, HR_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %g",
                      (double)p->frequency_penalty);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return hr_err(err, errlen, HR_ERR_INVALID, "logit_bias: bad entry list (%d entries)", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const struct sampler_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab)
            return hr_err(err, errlen, HR_ERR_INVALID, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                          (int)b->token, vocab);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return hr_err(err, errlen, HR_ERR_INVALID, "logit_bias: the bias of token %d must be in [-100, 100], got %g",
                          (int)b->token, (double)b->bias);
    }
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
        return hr_err(err, errlen, HR_ERR_INVALID, "top_logprobs must be in [0, %d], got %d", SAMPLER_MAX_LOGPROBS,
                      p->n_logprobs);
    if (p->logprobs_mode != SAMPLER_LOGPROBS_RAW && p->logprobs_mode != SAMPLER_LOGPROBS_PENALIZED)
        return hr_err(err, errlen, HR_ERR_INVALID, "logprobs mode %d is unknown", (int)p->logprobs_mode);
    return HR_OK;
}

#define SAMPLER_RUN 1024 /* tokens between the kept running sums of sample_plain */

/* ------------------------------------------------------------------------------------------ */
/* Scratch                                                                                     */

enum hr_status sampler_scratch_init(struct sampler_scratch *s, int vocab, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (vocab < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "sampler: vocabulary size must be >= 1, got %d", vocab);
    size_t n = (size_t)vocab;
    s->x = malloc(n * sizeof *s->x);
    s->cand = malloc(n * sizeof *s->cand);
    s->heap = malloc(n * sizeof *s->heap);
    s->count = calloc(n, sizeof *s->count);
    s->seen = calloc(n, sizeof *s->seen);
    s->bin_mass = malloc(SAMPLER_BINS * sizeof *s->bin_mass);
    s->bin_count = malloc(SAMPLER_BINS * sizeof *s->bin_count);
    s->w = malloc(n * sizeof *s->w);
    s->run = malloc((n / SAMPLER_RUN + 1) * sizeof *s->run);
    if (!s->x || !s->cand || !s->heap || !s->count || !s->seen || !s->bin_mass || !s->bin_count || !s->w ||
        !s->run) {
        sampler_scratch_free(s);
        return hr_err(err, errlen, HR_ERR_NOMEM, "sampler: cannot allocate scratch for %d tokens", vocab);
    }
    s->vocab = vocab;
    return HR_OK;
}

void sampler_scratch_free(struct sampler_scratch *s)
{
    if (!s)
        return;
    free(s->x);
    free(s->cand);
    free(s->heap);
    free(s->count);
    free(s->seen);
    free(s->bin_mass);
    free(s->bin_count);
    free(s->w);
    free(s->run);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------------------------------ */
/* Bias and penalties                                                                          */

static inline float clean_logit(float v)
{
    if (isnan(v))
        return -INFINITY;
    return v == INFINITY ? FLT_MAX : v;
}

void sampler_process_logits(const struct sampler_params *p, const float *logits, int vocab,
                            const int32_t *history, int n_prompt, int n_generated,
                            struct sampler_scratch *s, float *out)
{
    HR_ASSERT(vocab == s->vocab);
    HR_ASSERT(n_prompt >= 0 && n_generated >= 0);
    /* Copy, then repair only if a non-finite value exists (both loops vectorise). */
    memcpy(out, logits, (size_t)vocab * sizeof *out);
    uint32_t lane[8] = {0}, nonfinite = 0;
    int i = 0;
    for (; i + 8 <= vocab; i += 8)
        for (int j = 0; j < 8; j++) {
            uint32_t u;
            memcpy(&u, &logits[i + j], sizeof u);
            lane[j] |= (u & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
        }
    for (int j = 0; j < 8; j++)
        nonfinite |= lane[j];
    for (; i < vocab; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], sizeof u);
        nonfinite |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (nonfinite)
        for (int i = 0; i < vocab; i++)
            out[i] = clean_logit(logits[i]);

    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        HR_ASSERT(t >= 0 && t < vocab); /* sampler_params_validate was skipped */
        out[t] += p->logit_bias[i].bias;
    }

    int n_hist = n_prompt + n_generated;
    if (p->repetition_penalty != 1.0f) {
        float rp = p->repetition_penalty;
        for (int i = 0; i < n_hist; i++) {
            HR_ASSERT(history[i] >= 0 && history[i] < vocab);
            s->seen[history[i]] = 1;
        }
        /* Apply once per distinct token, clearing the mark as we go. */
        for (int i = 0; i < n_hist; i++) {
            int32_t t = history[i];
            if (s->seen[t]) {
                s->seen[t] = 0;
                out[t] = out[t] > 0.0f ? out[t] / rp : out[t] * rp;
            }
        }
    }

    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        const int32_t *gen = history + n_prompt;
        for (int i = 0; i < n_generated; i++) {
            HR_ASSERT(gen[i] >= 0 && gen[i] < vocab);
            s->count[gen[i]]++;
        }
        for (int i = 0; i < n_generated; i++) {
            int32_t t = gen[i];
            if (s->count[t]) {
                out[t] -= p->frequency_penalty * (float)s->count[t];
                out[t] -= p->presence_penalty;
                s->count[t] = 0;
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Partial selection: the m best candidates, best first, by (logit desc, id asc).              */
/* A bounded min-heap whose root is the worst kept: O(n log m), and most candidates are        */
/* rejected by one comparison with the root.                                                   */

static inline int cand_better(const struct sampler_cand *a, const struct sampler_cand *b)
{
    return a->x > b->x || (a->x == b->x && a->id < b->id);
}

static void heap_sift_down(struct sampler_cand *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(&h[w], &h[l]))
            w = l;
        if (r < n && cand_better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        struct sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static inline void heap_offer(struct sampler_cand *h, int *size, int m, struct sampler_cand c)
{
    if (*size < m) {
        int i = (*size)++;
        h[i] = c;
        while (i > 0) {
            int parent = (i - 1) / 2;
            if (!cand_better(&h[parent], &h[i]))
                break;
            struct sampler_cand t = h[i];
            h[i] = h[parent];
            h[parent] = t;
            i = parent;
        }
    } else if (cand_better(&c, &h[0])) {
        h[0] = c;
        heap_sift_down(h, m, 0);
    }
}

/* Turns the heap into a list sorted best first. */
static void heap_sort_desc(struct sampler_cand *h, int size)
{
    for (int end = size - 1; end > 0; end--) {
        struct sampler_cand t = h[0];
        h[0] = h[end];
        h[end] = t;
        heap_sift_down(h, end, 0);
    }
}

static void select_top(const struct sampler_cand *src, int n, int m, struct sampler_cand *out)
{
    int size = 0;
    if (m < 1)
        return;
    for (int i = 0; i < n; i++)
        heap_offer(out, &size, m, src[i]);
    heap_sort_desc(out, size);
}

/* ------------------------------------------------------------------------------------------ */
/* Random draw                                                                                 */

void sampler_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    memcpy(out, ctr, 4 * sizeof *out);
    dsample_philox(out, key[0], key[1]);
}

double sampler_uniform(uint64_t seed, uint64_t seq_index, uint64_t step)
{
    return (double)dsample_bits53(seed, seq_index, step) * 0x1.0p-53;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t sampler_seed_draw(void)
{
    uint64_t v = 0;
    unsigned char *b = (unsigned char *)&v;
    size_t got = 0;
    while (got < sizeof v) {
        ssize_t r = getrandom(b + got, sizeof v - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == sizeof v)
        return v;
    /* No getrandom (old kernel, seccomp): the seed only needs to differ between requests. */
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    return splitmix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
           splitmix64(((uint64_t)getpid() << 32) ^ c);
}

/* ------------------------------------------------------------------------------------------ */
/* Sampling                                                                                    */

/* sampler_exp's body: v = k ln2 + r by a two-part ln 2, a degree-10 Taylor polynomial
 * in r, 2^k put in as exponent bits; no table, no FMA (see sampler.h).  Static so that
 * it inlines into the vector builds of sampler_weights (an external call would not). */
static inline float weight_exp(float v)
{
    /* below -200 (-inf too), -200: e^-200 rounds to 0, and 2^k stays a normal double.  On
     * the bits (v <= 0: the larger the pattern the more negative), as a float compare
     * would keep the loop from vectorising without -ffast-math */
    uint32_t vb;
    memcpy(&vb, &v, sizeof vb);
    vb = vb > 0xC3480000u ? 0xC3480000u : vb;
    memcpy(&v, &vb, sizeof v);
    double d = (double)v;
    double t = d * 0x1.71547652b82fep0 + 0x1.8p52; /* 1/ln 2; + 1.5 * 2^52 rounds to an integer */
    double kd = t - 0x1.8p52;
    double r = d - kd * 0x1.62e42fefa3800p-1 - kd * 0x1.ef35793c76730p-45; /* kd * hi is exact */
    double q = 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - 0x4338000000000000ull + 1023) << 52; /* t's low bits hold k: 2^k's exponent */
    double scale;
    memcpy(&scale, &sb, sizeof scale);
    return (float)(q * scale);
}

float sampler_exp(float v)
{
    return weight_exp(v);
}

static inline float cand_weight(float x, float xmax, float temperature)
{
    return weight_exp((x - xmax) / temperature);
}

/* w[i] = cand_weight(x[i]) for i < n (0 for x[i] = -inf), in blocks of 16 so that the
 * compiler vectorises the whole loop; a build each for AVX-512 and AVX2 (the same bits:
 * IEEE operations, no contraction). */
#if defined(__clang__)
#define SAMPLER_VECTORISE /* clang's -O2 vectorises loops */
#else
#define SAMPLER_VECTORISE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
__attribute__((target_clones("avx512f", "avx2", "default"))) SAMPLER_VECTORISE static void
sampler_weights(const float *restrict x, int n, float xmax, float t, float *restrict w)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            w[i + j] = cand_weight(x[i + j], xmax, t);
    for (; i < n; i++)
        w[i] = cand_weight(x[i], xmax, t);
}

/* Top-p bins: by d = (xmax - x) / t, SAMPLER_BINS_PER_UNIT bins per unit of d; the last bin
 * takes everything from SAMPLER_BINS / SAMPLER_BINS_PER_UNIT on (weights below e^-32). */
static inline int top_p_bin(float x, float xmax, float t)
{
    float d = (xmax - x) / t;
    return d >= (float)SAMPLER_BINS / SAMPLER_BINS_PER_UNIT ? SAMPLER_BINS - 1 : (int)(d * SAMPLER_BINS_PER_UNIT);
}

/* Top-p over unsorted candidates c[0..n) with weights: keeps the prefix, in (logit desc, id asc)
 * order, whose mass before each kept token is < top_p * total. Bins are monotone in the logit,
 * so only the bin where the limit falls is sorted. Writes the survivors to s->heap (the bins
 * above in candidate order, then the boundary bin's kept prefix, best first); returns their
 * number. Reuses c as scratch. */
static int top_p_binned(struct sampler_cand *c, int n, float xmax, float t, float top_p,
                        struct sampler_scratch *s)
{
    double *mass = s->bin_mass;
    int *count = s->bin_count;
    for (int b = 0; b < SAMPLER_BINS; b++) {
        mass[b] = 0.0;
        count[b] = 0;
    }
    for (int i = 0; i < n; i++) {
        int b = c[i].bin = top_p_bin(c[i].x, xmax, t);
        mass[b] += (double)c[i].w;
        count[b]++;
    }
    double total = 0.0;
    for (int b = 0; b < SAMPLER_BINS; b++)
        total += mass[b];
    const double limit = (double)top_p * total;
    int edge = SAMPLER_BINS - 1;
    double before = 0.0; /* mass of the bins above edge */
    for (int b = 0; b < SAMPLER_BINS; b++) {
        if (count[b] && before + mass[b] >= limit) {
            edge = b;
            break;
        }
        before += mass[b];
    }
    /* Bins above the edge go to the output; the edge bin is compacted in place (j <= i). */
    struct sampler_cand *out = s->heap;
    int n_out = 0, n_edge = 0;
    for (int i = 0; i < n; i++) {
        int b = c[i].bin;
        if (b < edge)
            out[n_out++] = c[i];
        else if (b == edge)
            c[n_edge++] = c[i];
    }
    select_top(c, n_edge, n_edge, out + n_out);
    double cum = before;
    int kept = 0;
    while (kept < n_edge && cum < limit)
        cum += (double)out[n_out + kept++].w;
    HR_ASSERT(n_out + kept >= 1);
    return n_out + kept;
}

/* Temperature alone (no top-k, top-p or min-p): the candidates are every token, in id
 * order, so the weights go straight into an array (vectorised), the total is summed in
 * id order in double with the running sums kept every SAMPLER_RUN tokens, and the draw
 * walks only the stretch where the running sum passes the target: the same sums, in the
 * same order, as the candidate walk below, so the same token. */
static int32_t sample_plain(const struct sampler_params *p, const float *x, int vocab, float xmax,
                            uint64_t seq_index, uint64_t step, struct sampler_scratch *s)
{
    float *w = s->w;
    double *run = s->run;
    sampler_weights(x, vocab, xmax, p->temperature, w);
    double total = 0.0;
    int32_t last = -1; /* the last token of nonzero weight */
    for (int b = 0; b * SAMPLER_RUN < vocab; b++) {
        run[b] = total; /* the sum before token b * SAMPLER_RUN */
        int end = (b + 1) * SAMPLER_RUN < vocab ? (b + 1) * SAMPLER_RUN : vocab;
        for (int i = b * SAMPLER_RUN; i < end; i++) {
            total += (double)w[i];
            last = w[i] != 0.0f ? i : last;
        }
    }
    HR_ASSERT(last >= 0); /* the maximum weighs 1 */
    const double target = sampler_uniform(p->seed, seq_index, step) * total;
    /* the stretch whose start the target is at or past: the walk returns inside it */
    int b = (vocab - 1) / SAMPLER_RUN;
    while (b > 0 && target < run[b])
        b--;
    double acc = run[b];
    int end = (b + 1) * SAMPLER_RUN < vocab ? (b + 1) * SAMPLER_RUN : vocab;
    for (int i = b * SAMPLER_RUN; i < end; i++) {
        if (w[i] == 0.0f)
            continue;
        acc += (double)w[i];
        if (target < acc)
            return i;
    }
    return last; /* rounding left target at the very top */
}

/* Steps 4-7 for temperature > 0; x holds the processed logits, xmax their (finite) maximum. */
static int32_t sample_random(const struct sampler_params *p, const float *x, int vocab, float xmax,
                             uint64_t seq_index, uint64_t step, struct sampler_scratch *s)
{
    const float t = p->temperature;

    if (!(p->top_k > 0 && p->top_k < vocab) && p->min_p <= 0.0f && p->top_p >= 1.0f)
        return sample_plain(p, x, vocab, xmax, seq_index, step, s);

    /* min-p: p_i >= min_p * p_max  <=>  (x_i - xmax) / t >= ln(min_p). */
    const double keep_from = p->min_p > 0.0f ? (double)t * log((double)p->min_p) : -INFINITY;
    struct sampler_cand *c;
    int n = 0, sorted = 0;
    if (p->top_k > 0 && p->top_k < vocab) {
        /* Straight into the bounded heap: most tokens cost one comparison. */
        c = s->heap;
        const int k = p->top_k, use_min_p = p->min_p > 0.0f;
        for (int base = 0; base < vocab; base += 16) {
            int end = base + 16 < vocab ? base + 16 : vocab;
            if (n == k && end - base == 16) {
                /* Skip a block whose best cannot beat the heap's worst (vectorises). */
                float m = x[base];
                for (int j = 1; j < 16; j++)
                    m = x[base + j] > m ? x[base + j] : m;
                if (m <= c[0].x)
                    continue;
            }
            for (int i = base; i < end; i++) {
                /* Once the heap is full, anything not above its worst is out (ties go to the
                 * lower id, which the worst already has). */
                if (n == k && x[i] <= c[0].x)
                    continue;
                if (x[i] == -INFINITY || (use_min_p && (double)(x[i] - xmax) < keep_from))
                    continue;
                struct sampler_cand cd = {x[i], i, 0.0f, 0};
                heap_offer(c, &n, k, cd);
            }
        }
        heap_sort_desc(c, n);
        sorted = 1;
    } else {
        c = s->cand;
        for (int i = 0; i < vocab; i++) {
            if (x[i] == -INFINITY || (double)(x[i] - xmax) < keep_from)
                continue;
            c[n].x = x[i];
            c[n].id = i;
            n++;
        }
    }
    HR_ASSERT(n >= 1); /* the maximum always survives */
    if (sorted || n < vocab / 8) { /* top-k, or few left by min-p: one at a time */
        for (int i = 0; i < n; i++)
            c[i].w = cand_weight(c[i].x, xmax, t);
    } else { /* most of the vocabulary: the vectorised weights (the same bits), then each candidate's */
        sampler_weights(x, vocab, xmax, t, s->w);
        for (int i = 0; i < n; i++)
            c[i].w = s->w[c[i].id];
    }

    if (p->top_p < 1.0f) {
        if (sorted) {
            double total = 0.0;
            for (int i = 0; i < n; i++)
                total += (double)c[i].w;
            const double limit = (double)p->top_p * total;
            double cum = 0.0;
            int kept = 0;
            while (kept < n && cum < limit)
                cum += (double)c[kept++].w;
            n = kept;
        } else {
            n = top_p_binned(c, n, xmax, t, p->top_p, s);
            c = s->heap;
        }
    }

    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += (double)c[i].w;
    const double target = sampler_uniform(p->seed, seq_index, step) * total;
    double acc = 0.0;
    int32_t last = c[0].id;
    for (int i = 0; i < n; i++) {
        if (c[i].w == 0.0f)
            continue;
        acc += (double)c[i].w;
        last = c[i].id;
        if (target < acc)
            return c[i].id;
    }
    return last; /* rounding left target at the very top */
}

static void fill_logprobs(const struct sampler_params *p, const float *logits, const float *x, int vocab,
                          struct sampler_scratch *s, struct sampler_result *out)
{
    const int raw = p->logprobs_mode == SAMPLER_LOGPROBS_RAW;
    float bmax = -INFINITY;
    for (int i = 0; i < vocab; i++) {
        float v = raw ? clean_logit(logits[i]) : x[i];
        if (v > bmax)
            bmax = v;
    }
    double sum = 0.0;
    if (bmax != -INFINITY)
        for (int i = 0; i < vocab; i++)
            sum += (double)expf((raw ? clean_logit(logits[i]) : x[i]) - bmax);
    const double shift = (double)bmax + log(sum);

#define LOGPROB_OF(id) (bmax == -INFINITY ? -INFINITY \
                        : (float)((double)(raw ? clean_logit(logits[id]) : x[id]) - shift))
    out->logprob = LOGPROB_OF(out->token);
    out->n_top = p->n_logprobs;
    if (p->n_logprobs > 0) {
        int size = 0;
        for (int i = 0; i < vocab; i++) {
            struct sampler_cand cd = {raw ? clean_logit(logits[i]) : x[i], i, 0.0f, 0};
            heap_offer(s->heap, &size, p->n_logprobs < vocab ? p->n_logprobs : vocab, cd);
        }
        heap_sort_desc(s->heap, size);
        out->n_top = size;
        for (int i = 0; i < size; i++) {
            out->top[i].token = s->heap[i].id;
            out->top[i].logprob = LOGPROB_OF(s->heap[i].id);
        }
    }
#undef LOGPROB_OF
}

void sampler_score(const float *logits, int vocab, int32_t token, int n_top, struct sampler_scratch *s,
                   struct sampler_result *out)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.logprobs = true;
    p.n_logprobs = n_top;
    out->token = token;
    fill_logprobs(&p, logits, NULL, vocab, s, out);
}

int32_t sampler_sample(const struct sampler_params *p, const float *logits, int vocab,
                       const int32_t *history, int n_prompt, int n_generated,
                       uint64_t seq_index, uint64_t step, struct sampler_scratch *s,
                       struct sampler_result *out)
{
    float *x = s->x;
    sampler_process_logits(p, logits, vocab, history, n_prompt, n_generated, s, x);

    /* x has no NaN, so the maximum does not depend on the scan order: take it over 8 lanes,
     * then the first index that holds it (ties to the lower id). */
    float lane[8];
    for (int j = 0; j < 8; j++)
        lane[j] = x[0];
    int i = 0;
    for (; i + 8 <= vocab; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float xmax = lane[0];
    for (int j = 1; j < 8; j++)
        xmax = lane[j] > xmax ? lane[j] : xmax;
    for (; i < vocab; i++)
        xmax = x[i] > xmax ? x[i] : xmax;
    int32_t argmax = 0;
    while (x[argmax] != xmax)
        argmax++;

    memset(out, 0, sizeof *out);
    if (p->temperature < SAMPLER_GREEDY_EPS || xmax == -INFINITY)
        out->token = argmax;
    else
        out->token = sample_random(p, x, vocab, xmax, seq_index, step, s);

    if (p->logprobs || p->n_logprobs > 0)
        fill_logprobs(p, logits, x, vocab, s, out);
    return out->token;
}
