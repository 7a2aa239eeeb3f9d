/* Sampler: validation, greedy, the counter-based RNG (Random123 known answers), frequencies
 * against softmax probabilities computed here in double, top-k/top-p/min-p exclusion sets
 * computed here independently, penalties and bias against hand-computed values, logprobs
 * against a double-precision log-softmax. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "engine/sampler.h"
#include "test.h"

static char err[HR_ERRLEN];

/* Test-side generator (xorshift64*), independent of the code under test. */
static uint64_t rng_state = 88172645463325252ull;
static double rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}
static void random_logits(float *x, int n, double scale)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)((rnd() + rnd() + rnd() - 1.5) * scale);
}

/* softmax(x / t) in double over the tokens with allowed[i] (NULL: all). */
static void softmax_d(const float *x, int n, double t, const int *allowed, double *out)
{
    double m = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++)
        if ((!allowed || allowed[i]) && x[i] > m)
            m = x[i];
    for (int i = 0; i < n; i++) {
        out[i] = (!allowed || allowed[i]) ? exp(((double)x[i] - m) / t) : 0.0;
        s += out[i];
    }
    for (int i = 0; i < n; i++)
        out[i] /= s;
}

static int argmax_f(const float *x, int n)
{
    int a = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a])
            a = i;
    return a;
}

/* Indices sorted by (value desc, id asc), with the C library's qsort. */
static const double *order_vals;
static int order_cmp(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    if (order_vals[a] != order_vals[b])
        return order_vals[a] > order_vals[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}
static void order_desc(const double *v, int n, int *idx)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    order_vals = v;
    qsort(idx, (size_t)n, sizeof *idx, order_cmp);
}

/* Allowed set after min-p, then top-k, then top-p (vLLM's order), from softmax(x / t) in double. */
static int allowed_set(const float *x, int n, double t, double min_p, int top_k, double top_p, int *allowed)
{
    double *pr = malloc(sizeof(double) * (size_t)n);
    int *idx = malloc(sizeof(int) * (size_t)n);
    softmax_d(x, n, t, NULL, pr);
    double pmax = 0;
    for (int i = 0; i < n; i++)
        pmax = pr[i] > pmax ? pr[i] : pmax;
    for (int i = 0; i < n; i++)
        allowed[i] = pr[i] >= min_p * pmax;
    order_desc(pr, n, idx);
    int kept = 0;
    for (int r = 0; r < n; r++) {
        if (!allowed[idx[r]])
            continue;
        if (top_k > 0 && kept >= top_k)
            allowed[idx[r]] = 0;
        else
            kept++;
    }
    softmax_d(x, n, t, allowed, pr); /* renormalised over the survivors */
    double cum = 0.0;
    for (int r = 0; r < n; r++) {
        int i = idx[r];
        if (!allowed[i])
            continue;
        if (cum >= top_p)
            allowed[i] = 0;
        cum += pr[i];
    }
    int count = 0;
    for (int i = 0; i < n; i++)
        count += allowed[i];
    free(pr);
    free(idx);
    return count;
}

static void test_philox_kat(void)
{
    /* Random123 tests/kat_vectors, "philox4x32 10": ctr[4] key[2] -> out[4]. */
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        sampler_philox4x32(v[k], v[k] + 4, out);
        for (int i = 0; i < 4; i++)
            CHECK_MSG(out[i] == v[k][6 + i], "vector %d word %d: %08x", k, i, out[i]);
    }
    /* The uniform is in [0, 1) and depends on each key part. */
    double u = sampler_uniform(1, 2, 3);
    CHECK(u >= 0.0 && u < 1.0);
    CHECK(u != sampler_uniform(2, 2, 3));
    CHECK(u != sampler_uniform(1, 3, 3));
    CHECK(u != sampler_uniform(1, 2, 4));
    CHECK(u == sampler_uniform(1, 2, 3));
}

static void expect_invalid(const struct sampler_params *p, int vocab, const char *field)
{
    err[0] = 0;
    enum hr_status st = sampler_params_validate(p, vocab, err, sizeof err);
    CHECK_MSG(st == HR_ERR_INVALID, "%s: status %d", field, (int)st);
    CHECK_MSG(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
}

static void test_validate(void)
{
    struct sampler_params p;
    sampler_params_default(&p);
    CHECK_OK(sampler_params_validate(&p, 100, err, sizeof err), err);

    struct sampler_params q;
    q = p; q.temperature = -0.1f; expect_invalid(&q, 100, "temperature");
    q = p; q.temperature = NAN; expect_invalid(&q, 100, "temperature");
    q = p; q.temperature = INFINITY; expect_invalid(&q, 100, "temperature");
    q = p; q.top_p = 0.0f; expect_invalid(&q, 100, "top_p");
    q = p; q.top_p = 1.01f; expect_invalid(&q, 100, "top_p");
    q = p; q.top_p = NAN; expect_invalid(&q, 100, "top_p");
    q = p; q.top_k = -1; expect_invalid(&q, 100, "top_k");
    q = p; q.min_p = -0.01f; expect_invalid(&q, 100, "min_p");
    q = p; q.min_p = 1.5f; expect_invalid(&q, 100, "min_p");
    q = p; q.repetition_penalty = 0.0f; expect_invalid(&q, 100, "repetition_penalty");
    q = p; q.repetition_penalty = -1.0f; expect_invalid(&q, 100, "repetition_penalty");
    q = p; q.presence_penalty = 2.5f; expect_invalid(&q, 100, "presence_penalty");
    q = p; q.presence_penalty = -2.5f; expect_invalid(&q, 100, "presence_penalty");
    q = p; q.frequency_penalty = 3.0f; expect_invalid(&q, 100, "frequency_penalty");
    q = p; q.frequency_penalty = NAN; expect_invalid(&q, 100, "frequency_penalty");
    q = p; q.n_logprobs = 21; expect_invalid(&q, 100, "top_logprobs");
    q = p; q.n_logprobs = -1; expect_invalid(&q, 100, "top_logprobs");
    struct sampler_logit_bias bad_id[2] = {{3, 1.0f}, {100, 1.0f}};
    q = p; q.logit_bias = bad_id; q.n_logit_bias = 2; expect_invalid(&q, 100, "logit_bias");
    CHECK(strstr(err, "100") != NULL);
    struct sampler_logit_bias neg_id = {-1, 1.0f};
    q = p; q.logit_bias = &neg_id; q.n_logit_bias = 1; expect_invalid(&q, 100, "logit_bias");
    struct sampler_logit_bias big = {5, 101.0f};
    q = p; q.logit_bias = &big; q.n_logit_bias = 1; expect_invalid(&q, 100, "logit_bias");

    /* Edges that are valid. */
    q = p; q.temperature = 0.0f; q.top_p = 1.0f; q.min_p = 1.0f; q.top_k = 100000;
    q.presence_penalty = -2.0f; q.frequency_penalty = 2.0f; q.n_logprobs = 20;
    struct sampler_logit_bias ok[2] = {{0, -100.0f}, {99, 100.0f}};
    q.logit_bias = ok; q.n_logit_bias = 2;
    CHECK_OK(sampler_params_validate(&q, 100, err, sizeof err), err);
}

static void test_greedy(void)
{
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, 5, err, sizeof err), err);
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    float ties[5] = {1.0f, 3.0f, 3.0f, 2.0f, -1.0f};
    CHECK(sampler_sample(&p, ties, 5, NULL, 0, 0, 0, 0, &s, &r) == 1);
    CHECK(r.token == 1);
    for (uint64_t step = 0; step < 50; step++)
        CHECK(sampler_sample(&p, ties, 5, NULL, 0, 0, 7, step, &s, &r) == 1);
    p.temperature = 1e-6f; /* below the epsilon: greedy too */
    CHECK(sampler_sample(&p, ties, 5, NULL, 0, 0, 0, 3, &s, &r) == 1);

    /* NaN counts as -inf, +inf as the largest finite value; nothing finite gives token 0. */
    float odd[5] = {NAN, 0.5f, NAN, -INFINITY, 0.25f};
    p.temperature = 0.0f;
    CHECK(sampler_sample(&p, odd, 5, NULL, 0, 0, 0, 0, &s, &r) == 1);
    p.temperature = 1.0f;
    for (uint64_t step = 0; step < 200; step++) {
        int32_t t = sampler_sample(&p, odd, 5, NULL, 0, 0, 0, step, &s, &r);
        CHECK(t == 1 || t == 4);
    }
    float inf[5] = {0.0f, INFINITY, 1.0f, INFINITY, 2.0f};
    CHECK(sampler_sample(&p, inf, 5, NULL, 0, 0, 0, 0, &s, &r) != 0);
    float nan5[5] = {NAN, NAN, NAN, NAN, NAN};
    CHECK(sampler_sample(&p, nan5, 5, NULL, 0, 0, 0, 0, &s, &r) == 0);
    p.logprobs = true;
    CHECK(sampler_sample(&p, nan5, 5, NULL, 0, 0, 0, 0, &s, &r) == 0);
    sampler_scratch_free(&s);
    sampler_scratch_free(&s);
    sampler_scratch_free(NULL);
}

static void test_top_k_one_is_greedy(void)
{
    enum { V = 500 };
    static float x[V];
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);
    struct sampler_params p, g;
    sampler_params_default(&p);
    p.top_k = 1;
    p.temperature = 0.8f;
    g = p;
    g.temperature = 0.0f;
    for (int trial = 0; trial < 100; trial++) {
        random_logits(x, V, 4.0);
        if (trial % 3 == 0) { /* a tie for the top: the lower id must win */
            int a = argmax_f(x, V);
            int b = (a + 1 + trial) % V;
            x[b] = x[a];
        }
        p.seed = (uint64_t)trial * 7919u;
        int32_t want = (int32_t)argmax_f(x, V);
        CHECK(sampler_sample(&g, x, V, NULL, 0, 0, 0, 0, &s, &r) == want);
        for (uint64_t step = 0; step < 5; step++)
            CHECK(sampler_sample(&p, x, V, NULL, 0, 0, (uint64_t)trial, step, &s, &r) == want);
    }
    sampler_scratch_free(&s);
}

static void test_same_key_same_token(void)
{
    enum { V = 64 };
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = 0.0f; /* uniform: the draw alone decides */
    struct sampler_scratch s1, s2;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s1, V, err, sizeof err), err);
    CHECK_OK(sampler_scratch_init(&s2, V, err, sizeof err), err);
    struct sampler_params p, other;
    sampler_params_default(&p);
    p.seed = 42;
    other = p;
    other.seed = 43;
    int32_t first[100];
    for (uint64_t step = 0; step < 100; step++)
        first[step] = sampler_sample(&p, x, V, NULL, 0, 0, 3, step, &s1, &r);
    /* Again in reverse order, interleaved with other requests, on another scratch. */
    int same = 1;
    for (int step = 99; step >= 0; step--) {
        sampler_sample(&other, x, V, NULL, 0, 0, 3, (uint64_t)step, &s1, &r);
        sampler_sample(&p, x, V, NULL, 0, 0, 4, (uint64_t)step, &s1, &r);
        same &= sampler_sample(&p, x, V, NULL, 0, 0, 3, (uint64_t)step, &s2, &r) == first[step];
    }
    CHECK(same);

    /* Different steps, sequences and seeds give different draws. */
    int seen[V] = {0}, distinct = 0, diff_seq = 0, diff_seed = 0;
    for (uint64_t step = 0; step < 100; step++) {
        if (!seen[first[step]]++)
            distinct++;
        diff_seq += sampler_sample(&p, x, V, NULL, 0, 0, 4, step, &s1, &r) != first[step];
        diff_seed += sampler_sample(&other, x, V, NULL, 0, 0, 3, step, &s1, &r) != first[step];
    }
    CHECK_MSG(distinct >= 40, "only %d distinct tokens over 100 steps", distinct); /* expect ~ 50 */
    CHECK_MSG(diff_seq >= 80, "sequence index changed only %d draws", diff_seq);
    CHECK_MSG(diff_seed >= 80, "seed changed only %d draws", diff_seed);
    sampler_scratch_free(&s1);
    sampler_scratch_free(&s2);
}

/* Pearson's statistic of counts against probabilities over n draws; cells with p = 0 must be empty. */
static double chi_square(const int *count, const double *prob, int v, int n, int *bad, int *dof)
{
    double chi = 0.0;
    *bad = 0;
    *dof = -1;
    for (int i = 0; i < v; i++) {
        if (prob[i] == 0.0) {
            *bad += count[i] != 0;
            continue;
        }
        double e = prob[i] * n;
        chi += (count[i] - e) * (count[i] - e) / e;
        (*dof)++;
    }
    return chi;
}

static void test_frequencies(void)
{
    enum { V = 8, N = 40000 };
    float x[V] = {0.0f, 0.5f, 1.0f, -0.3f, 2.0f, 1.2f, -1.0f, 0.1f};
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);
    struct sampler_params p;
    sampler_params_default(&p);
    p.seed = 1234567;

    /* Plain temperature. */
    p.temperature = 0.7f;
    double prob[V];
    softmax_d(x, V, 0.7, NULL, prob);
    int count[V] = {0}, bad, dof;
    for (int i = 0; i < N; i++)
        count[sampler_sample(&p, x, V, NULL, 0, 0, 0, (uint64_t)i, &s, &r)]++;
    double chi = chi_square(count, prob, V, N, &bad, &dof);
    /* 7 degrees of freedom: P(chi2 > 35) ~ 1e-5; the draw is deterministic anyway. */
    CHECK_MSG(dof == 7 && chi < 35.0, "chi2 = %g (dof %d)", chi, dof);

    /* top_k 5 then top_p 0.8 over the renormalised survivors. */
    p.temperature = 1.3f;
    p.top_k = 5;
    p.top_p = 0.8f;
    int allowed[V];
    int n_allowed = allowed_set(x, V, 1.3, 0.0, 5, 0.8, allowed);
    CHECK(n_allowed == 4);
    softmax_d(x, V, 1.3, allowed, prob);
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++)
        count[sampler_sample(&p, x, V, NULL, 0, 0, 9, (uint64_t)i, &s, &r)]++;
    chi = chi_square(count, prob, V, N, &bad, &dof);
    CHECK_MSG(bad == 0, "%d tokens outside the allowed set were drawn", bad);
    CHECK_MSG(dof == 3 && chi < 25.0, "chi2 = %g (dof %d)", chi, dof);
    sampler_scratch_free(&s);
}

/* Draws n tokens and counts the ones outside allowed; fails if an allowed one never shows up
 * when its renormalised probability makes that implausible. */
static void check_only_allowed(const struct sampler_params *p, const float *x, int v, const int *allowed,
                               double t, int n, const char *what)
{
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, v, err, sizeof err), err);
    int *count = calloc((size_t)v, sizeof *count);
    double *prob = malloc(sizeof(double) * (size_t)v);
    for (int i = 0; i < n; i++)
        count[sampler_sample(p, x, v, NULL, 0, 0, 1, (uint64_t)i, &s, &r)]++;
    softmax_d(x, v, t, allowed, prob);
    int outside = 0, missing = 0;
    for (int i = 0; i < v; i++) {
        if (!allowed[i])
            outside += count[i];
        else if (count[i] == 0 && prob[i] * n > 12.0) /* P(miss) < e^-12 */
            missing++;
    }
    CHECK_MSG(outside == 0, "%s: %d draws outside the allowed set", what, outside);
    CHECK_MSG(missing == 0, "%s: %d likely tokens never drawn", what, missing);
    free(count);
    free(prob);
    sampler_scratch_free(&s);
}

/* The allowed set must not sit on a floating-point knife edge, or float-versus-double rounding
 * could legitimately disagree: the set must not change when min_p or top_p move by 0.1%. */
static int boundary_clear(const float *x, int v, double t, double min_p, int k, double top_p)
{
    int *a = malloc(sizeof(int) * (size_t)v), *b = malloc(sizeof(int) * (size_t)v);
    int clear = 1;
    for (int dir = -1; dir <= 1; dir += 2) {
        double tp = top_p >= 1.0 ? 1.0 : top_p * (1.0 + 1e-3 * dir);
        allowed_set(x, v, t, min_p, k, top_p, a);
        allowed_set(x, v, t, min_p * (1.0 + 1e-3 * dir), k, tp, b);
        for (int i = 0; i < v; i++)
            clear &= a[i] == b[i];
    }
    free(a);
    free(b);
    return clear;
}

/* Nudges *param upwards by step until the allowed set is clear of knife edges. */
static void make_clear(const float *x, int v, double t, float *min_p, int k, float *top_p, float *param,
                       float step)
{
    for (int tries = 0; tries < 50 && !boundary_clear(x, v, t, *min_p, k, *top_p); tries++)
        *param += step;
    CHECK(boundary_clear(x, v, t, *min_p, k, *top_p));
}

static void test_filters_exclude(void)
{
    enum { V = 100, N = 4000 };
    float x[V];
    int allowed[V];
    struct sampler_params p;

    for (int trial = 0; trial < 6; trial++) {
        random_logits(x, V, 3.0);
        double t = 0.6 + 0.3 * trial;

        sampler_params_default(&p);
        p.seed = 99 + (uint64_t)trial;
        p.temperature = (float)t;
        p.top_k = 7;
        allowed_set(x, V, (double)p.temperature, 0.0, 7, 1.0, allowed);
        check_only_allowed(&p, x, V, allowed, (double)p.temperature, N, "top_k");

        sampler_params_default(&p);
        p.seed = 199 + (uint64_t)trial;
        p.temperature = (float)t;
        p.top_p = 0.5f + 0.08f * (float)trial;
        make_clear(x, V, (double)p.temperature, &p.min_p, 0, &p.top_p, &p.top_p, 0.003f);
        allowed_set(x, V, (double)p.temperature, 0.0, 0, (double)p.top_p, allowed);
        check_only_allowed(&p, x, V, allowed, (double)p.temperature, N, "top_p");

        sampler_params_default(&p);
        p.seed = 299 + (uint64_t)trial;
        p.temperature = (float)t;
        p.min_p = 0.05f + 0.05f * (float)trial;
        make_clear(x, V, (double)p.temperature, &p.min_p, 0, &p.top_p, &p.min_p, 0.003f);
        allowed_set(x, V, (double)p.temperature, (double)p.min_p, 0, 1.0, allowed);
        check_only_allowed(&p, x, V, allowed, (double)p.temperature, N, "min_p");

        /* All three: min_p, then top_k, then top_p over the renormalised rest. */
        sampler_params_default(&p);
        p.seed = 399 + (uint64_t)trial;
        p.temperature = (float)t;
        p.min_p = 0.02f;
        p.top_k = 12;
        p.top_p = 0.7f;
        make_clear(x, V, (double)p.temperature, &p.min_p, 12, &p.top_p, &p.top_p, 0.003f);
        allowed_set(x, V, (double)p.temperature, (double)p.min_p, 12, (double)p.top_p, allowed);
        check_only_allowed(&p, x, V, allowed, (double)p.temperature, N, "min_p+top_k+top_p");
    }

    /* top_k with ties at the boundary: exactly k survive, ties to the lower id. */
    float tie[6] = {5.0f, 4.0f, 4.0f, 4.0f, 1.0f, 4.0f};
    int tie_allowed[6] = {1, 1, 1, 0, 0, 0};
    sampler_params_default(&p);
    p.top_k = 3;
    p.temperature = 2.0f;
    check_only_allowed(&p, tie, 6, tie_allowed, 2.0, 2000, "top_k ties");

    /* top_p over ties: 64 equal logits, top_p 0.5 keeps exactly ids 0..31 (mass before the
     * 33rd is 32/64, not below 0.5). All share one bin, so this sorts inside the edge bin. */
    float flat[64];
    int flat_allowed[64];
    for (int i = 0; i < 64; i++) {
        flat[i] = 0.25f;
        flat_allowed[i] = i < 32;
    }
    sampler_params_default(&p);
    p.top_p = 0.5f;
    check_only_allowed(&p, flat, 64, flat_allowed, 1.0, 4000, "top_p ties");
    /* Sorted (top-k) path: top_k 40 keeps ids 0..39, then top_p renormalises over those 40
     * and keeps ids 0..19. */
    p.top_k = 40;
    for (int i = 0; i < 64; i++)
        flat_allowed[i] = i < 20;
    check_only_allowed(&p, flat, 64, flat_allowed, 1.0, 4000, "top_k+top_p ties");

    /* min_p = 1 keeps only the maximum (and its ties). */
    float mx[5] = {1.0f, 3.0f, 2.9f, 3.0f, 0.0f};
    int mx_allowed[5] = {0, 1, 0, 1, 0};
    sampler_params_default(&p);
    p.min_p = 1.0f;
    check_only_allowed(&p, mx, 5, mx_allowed, 1.0, 2000, "min_p=1");
}

static void test_large_vocab(void)
{
    enum { V = 151936 };
    float *x = malloc(sizeof(float) * V);
    int *allowed = malloc(sizeof(int) * V);
    random_logits(x, V, 6.0);
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);

    struct {
        float t, top_p, min_p;
        int top_k;
    } cfg[] = {{0.6f, 0.95f, 0.0f, 20}, {1.0f, 0.9f, 0.0f, 0}, {1.0f, 1.0f, 0.0f, 0},
               {0.8f, 1.0f, 0.1f, 0}, {1.0f, 0.999f, 0.0f, 0}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.top_k = cfg[c].top_k;
        p.min_p = cfg[c].min_p;
        p.seed = 5;
        int n_allowed = allowed_set(x, V, (double)p.temperature, (double)p.min_p, p.top_k, (double)p.top_p,
                                    allowed);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int outside = 0;
        for (uint64_t step = 0; step < 10; step++) {
            int32_t tok = sampler_sample(&p, x, V, NULL, 0, 0, 0, step, &s, &r);
            outside += !(tok >= 0 && tok < V && allowed[tok]);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / 10;
        printf("     vocab %d, t=%.2g top_k=%d top_p=%.3g min_p=%.2g: %d allowed, %.3f ms/sample\n", V,
               (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p, n_allowed, ms);
        CHECK_MSG(outside == 0, "config %zu: %d draws outside the allowed set", c, outside);
    }
    free(x);
    free(allowed);
    sampler_scratch_free(&s);
}

static void test_penalties_by_hand(void)
{
    enum { V = 6 };
    const float logits[V] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    /* prompt 0 1 3 0 | output 3 3 4 */
    const int32_t hist[7] = {0, 1, 3, 0, 3, 3, 4};
    struct sampler_logit_bias bias[2] = {{5, 1.5f}, {1, -0.5f}};
    struct sampler_params p;
    sampler_params_default(&p);
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    CHECK_OK(sampler_params_validate(&p, V, err, sizeof err), err);
    /* By hand. Bias: [2, -1.5, 0.5, 3, -2, 2.5].
     * Repetition (0, 1, 3, 4 seen; once each): 0: 2/2 = 1; 1: -1.5*2 = -3; 3: 3/2 = 1.5; 4: -2*2 = -4.
     * Frequency (output counts 3:2, 4:1): 3: 1.5 - 0.5 = 1; 4: -4 - 0.25 = -4.25.
     * Presence: 3: 1 - 0.5 = 0.5; 4: -4.25 - 0.5 = -4.75.  Tokens 2 and 5 only biased. */
    const float want[V] = {1.0f, -3.0f, 0.5f, 0.5f, -4.75f, 2.5f};
    struct sampler_scratch s;
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);
    float got[V];
    for (int rep = 0; rep < 2; rep++) { /* twice: the scratch's marks must be cleared */
        sampler_process_logits(&p, logits, V, hist, 4, 3, &s, got);
        for (int i = 0; i < V; i++)
            CHECK_MSG(got[i] == want[i], "token %d: %g, want %g", i, (double)got[i], (double)want[i]);
    }
    for (int i = 0; i < V; i++)
        CHECK(s.count[i] == 0 && s.seen[i] == 0);

    /* Presence/frequency ignore the prompt: with everything in the prompt only, only repetition acts. */
    sampler_process_logits(&p, logits, V, hist, 7, 0, &s, got);
    const float want_prompt_only[V] = {1.0f, -3.0f, 0.5f, 1.5f, -4.0f, 2.5f};
    for (int i = 0; i < V; i++)
        CHECK_MSG(got[i] == want_prompt_only[i], "prompt only, token %d: %g", i, (double)got[i]);

    /* Greedy follows the processed logits (token 5), not the raw ones (token 3). */
    struct sampler_result r;
    p.temperature = 0.0f;
    p.logprobs = true;
    p.n_logprobs = V;
    p.logprobs_mode = SAMPLER_LOGPROBS_PENALIZED;
    CHECK(sampler_sample(&p, logits, V, hist, 4, 3, 0, 0, &s, &r) == 5);
    double lse = 0.0;
    for (int i = 0; i < V; i++)
        lse += exp((double)want[i]);
    lse = log(lse);
    CHECK(r.n_top == V);
    CHECK(fabs((double)r.logprob - ((double)want[5] - lse)) < 1e-5);
    const int order[V] = {5, 0, 2, 3, 1, 4}; /* 2.5, 1, 0.5 (id 2 before 3), -3, -4.75 */
    for (int i = 0; i < V; i++) {
        CHECK_MSG(r.top[i].token == order[i], "rank %d: token %d", i, r.top[i].token);
        CHECK(fabs((double)r.top[i].logprob - ((double)want[order[i]] - lse)) < 1e-5);
    }

    /* Raw mode (the default) reports the model's own distribution, untouched by bias and penalties. */
    p.logprobs_mode = SAMPLER_LOGPROBS_RAW;
    CHECK(sampler_sample(&p, logits, V, hist, 4, 3, 0, 0, &s, &r) == 5);
    lse = 0.0;
    for (int i = 0; i < V; i++)
        lse += exp((double)logits[i]);
    lse = log(lse);
    CHECK(fabs((double)r.logprob - ((double)logits[5] - lse)) < 1e-5);
    CHECK(r.top[0].token == 3 && fabs((double)r.top[0].logprob - (3.0 - lse)) < 1e-5);

    /* A strong bias forces a token. */
    struct sampler_logit_bias force = {4, 100.0f};
    struct sampler_params f;
    sampler_params_default(&f);
    f.logit_bias = &force;
    f.n_logit_bias = 1;
    f.temperature = 0.0f;
    CHECK(sampler_sample(&f, logits, V, hist, 4, 3, 0, 0, &s, &r) == 4);
    /* A repetition penalty below 1 rewards repeats: positive logits multiplied, negative divided. */
    sampler_params_default(&f);
    f.repetition_penalty = 0.5f;
    sampler_process_logits(&f, logits, V, hist, 4, 3, &s, got);
    const float want_low[V] = {4.0f, -0.5f, 0.5f, 6.0f, -1.0f, 1.0f};
    for (int i = 0; i < V; i++)
        CHECK_MSG(got[i] == want_low[i], "rp 0.5, token %d: %g", i, (double)got[i]);
    sampler_scratch_free(&s);
}

static void test_logprobs(void)
{
    enum { V = 1000 };
    static float x[V];
    static double lp[V];
    static int idx[V];
    struct sampler_scratch s;
    struct sampler_result r;
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);
    for (int trial = 0; trial < 20; trial++) {
        random_logits(x, V, 2.0 + trial);
        double m = -INFINITY, sum = 0.0;
        for (int i = 0; i < V; i++)
            m = x[i] > m ? x[i] : m;
        for (int i = 0; i < V; i++)
            sum += exp((double)x[i] - m);
        for (int i = 0; i < V; i++)
            lp[i] = (double)x[i] - m - log(sum);
        order_desc(lp, V, idx);

        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = 0.9f; /* raw logprobs do not depend on temperature or top_k */
        p.top_k = 50;
        p.seed = (uint64_t)trial;
        p.n_logprobs = 1 + trial % 20;
        sampler_sample(&p, x, V, NULL, 0, 0, 0, 0, &s, &r);
        CHECK(r.n_top == p.n_logprobs);
        CHECK_MSG(fabs((double)r.logprob - lp[r.token]) < 1e-5, "sampled %d: %.8g vs %.8g", r.token,
                  (double)r.logprob, lp[r.token]);
        for (int i = 0; i < r.n_top; i++) {
            CHECK_MSG(r.top[i].token == idx[i], "rank %d: %d, want %d", i, r.top[i].token, idx[i]);
            CHECK(fabs((double)r.top[i].logprob - lp[idx[i]]) < 1e-5);
        }
    }
    /* Without logprobs nothing is reported. */
    struct sampler_params p;
    sampler_params_default(&p);
    sampler_sample(&p, x, V, NULL, 0, 0, 0, 0, &s, &r);
    CHECK(r.n_top == 0 && r.logprob == 0.0f);
    /* logprobs alone: the sampled token's, no alternatives. */
    p.logprobs = true;
    sampler_sample(&p, x, V, NULL, 0, 0, 0, 0, &s, &r);
    CHECK(r.n_top == 0 && r.logprob < 0.0f);
    sampler_scratch_free(&s);

    /* A vocabulary smaller than top_logprobs reports what exists. */
    struct sampler_scratch small;
    CHECK_OK(sampler_scratch_init(&small, 3, err, sizeof err), err);
    float three[3] = {0.0f, 0.0f, 1.0f};
    p.n_logprobs = 20;
    sampler_sample(&p, three, 3, NULL, 0, 0, 0, 0, &small, &r);
    CHECK(r.n_top == 3);
    CHECK(r.top[0].token == 2 && r.top[1].token == 0 && r.top[2].token == 1);
    sampler_scratch_free(&small);

    CHECK(sampler_scratch_init(&small, 0, err, sizeof err) == HR_ERR_INVALID);
    sampler_scratch_free(&small);
}

/* sampler_exp is e^v correctly rounded to float (the double exp's value, rounded once)
 * on a sweep of [-104, 0] in steps of 97 ulps and at the edges; and a draw at temperature
 * alone (the vectorised weights, the kept running sums) is the token of a plain walk over
 * every token in id order with those weights. */
static void test_exp_and_plain_draw(void)
{
    int bad = 0;
    long n = 0;
    for (uint32_t b = 0x80000000u; b <= 0xC2D00000u; b += 97, n++) { /* -0 .. -104 */
        float v, want;
        memcpy(&v, &b, sizeof v);
        want = (float)exp((double)v);
        float got = sampler_exp(v);
        if (memcmp(&got, &want, sizeof got) && bad++ < 3)
            fprintf(stderr, "  sampler_exp(%a) = %a, want %a\n", (double)v, (double)got, (double)want);
    }
    CHECK_MSG(bad == 0, "%d of %ld values off", bad, n);
    CHECK(sampler_exp(0.0f) == 1.0f && sampler_exp(-0.0f) == 1.0f);
    CHECK(sampler_exp(-INFINITY) == 0.0f && sampler_exp(-150.0f) == 0.0f && sampler_exp(-1e30f) == 0.0f);
    CHECK(sampler_exp(-103.0f) > 0.0f); /* a denormal, not flushed */

    enum { V = 5000 };
    static float logits[V];
    static float w[V];
    struct sampler_scratch s;
    char err[HR_ERRLEN];
    CHECK_OK(sampler_scratch_init(&s, V, err, sizeof err), err);
    int draws = 0, mismatched = 0;
    for (int row = 0; row < 8; row++) {
        uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(row + 1);
        for (int i = 0; i < V; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            logits[i] = (float)((double)(r >> 40) / (double)(1ull << 24) * 12.0 - 6.0);
            if (row % 3 == 0 && i % 5 == 0)
                logits[i] = -INFINITY; /* banned by a bias, say */
        }
        float xmax = -INFINITY;
        for (int i = 0; i < V; i++)
            xmax = logits[i] > xmax ? logits[i] : xmax;
        for (int k = 0; k < 40; k++, draws++) {
            struct sampler_params p;
            sampler_params_default(&p);
            p.temperature = 0.5f + 0.1f * (float)(k % 8);
            p.seed = 1000u + (uint64_t)k;
            struct sampler_result res;
            int32_t got = sampler_sample(&p, logits, V, NULL, 0, 0, 3, (uint64_t)k, &s, &res);
            double total = 0.0;
            for (int i = 0; i < V; i++) {
                w[i] = sampler_exp((logits[i] - xmax) / p.temperature);
                total += (double)w[i];
            }
            const double target = sampler_uniform(p.seed, 3, (uint64_t)k) * total;
            double acc = 0.0;
            int32_t want = -1;
            for (int i = 0; i < V && want < 0; i++)
                if (w[i] != 0.0f && target < (acc += (double)w[i]))
                    want = i;
            mismatched += got != want;
        }
    }
    CHECK_MSG(mismatched == 0, "%d of %d draws differ from the plain walk", mismatched, draws);
    sampler_scratch_free(&s);
}

static void test_seed_draw(void)
{
    uint64_t a = sampler_seed_draw(), b = sampler_seed_draw(), c = sampler_seed_draw();
    CHECK(!(a == b && b == c));
}

int main(void)
{
    TEST_RUN(test_philox_kat);
    TEST_RUN(test_validate);
    TEST_RUN(test_greedy);
    TEST_RUN(test_top_k_one_is_greedy);
    TEST_RUN(test_same_key_same_token);
    TEST_RUN(test_frequencies);
    TEST_RUN(test_filters_exclude);
    TEST_RUN(test_large_vocab);
    TEST_RUN(test_penalties_by_hand);
    TEST_RUN(test_logprobs);
    TEST_RUN(test_seed_draw);
    TEST_RUN(test_exp_and_plain_draw);
    TEST_END();
}
