/* Sampling on the device, the host side (no GPU needed): the fixed-point arithmetic of
 * kernels/dsample.h against libm and 128-bit integers, the rows the engine packs
 * (dev_sample.h) against the CPU sampler's own bias and penalties, the device algorithm's
 * host reference (dsample_ref.c) against the CPU sampler (the same token unless the
 * decision lies within rounding of a boundary, greedy always), and the engine's device
 * path through a backend whose sample op is that reference: a request gives the same
 * bytes alone and among others, greedy tokens equal the CPU path's. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsample_ref.h"
#include "engine/dev_sample.h"
#include "engine_rig.h"
#include "test.h"

static char err[HR_ERRLEN];

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd64(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
static double rnd(void) { return (double)(rnd64() >> 11) * 0x1.0p-53; }

/* x = the raw logits row L after bias and penalties as the kernel computes them: L
 * cleaned, then row r's mods in order. */
static void device_prepared(const struct dsample_row *r, const struct dsample_mod *mods, const float *biases,
                            const float *L, float *x, int vocab)
{
    for (int j = 0; j < vocab; j++)
        x[j] = dsample_clean(L[j]);
    for (int j = 0; j < r->n_mods; j++)
        dsample_apply_mod(r, &mods[r->mod_first + j], biases, x);
}

static void random_row(float *x, int n, double scale, int kind)
{
    for (int i = 0; i < n; i++) {
        double v = (rnd() + rnd() + rnd() - 1.5) * scale;
        if (kind == 1)
            v = floor(v * 2.0) / 2.0; /* many ties */
        x[i] = (float)v;
    }
    if (kind == 2) { /* non-finite entries */
        x[rnd64() % (uint64_t)n] = NAN;
        x[rnd64() % (uint64_t)n] = -INFINITY;
        x[rnd64() % (uint64_t)n] = INFINITY;
    }
}

static void test_math(void)
{
    double worst = 0.0;
    for (int i = 0; i < 2000000; i++) { /* every 2^-16 of [0, 32) */
        float d = (float)i * 0x1.0p-16f;
        double r = fabs((double)dsample_expf_neg(d) - exp(-(double)d)) / exp(-(double)d);
        worst = r > worst ? r : worst;
    }
    CHECK_MSG(worst < 4.0 * 0x1.0p-24, "exp: worst relative error %.3g", worst); /* a few ulp */
    printf("  float exp: worst relative error %.3g (ulp %.3g)\n", worst, 0x1.0p-24);
    CHECK(dsample_expf_neg(0.0f) == 1.0f);
    int wbad = 0; /* the weight: e^-d 2^44 rounded to the nearest integer, ties to even */
    for (int i = 0; i < 2000000; i++) {
        float d = (float)i * 0x1.0p-16f;
        wbad += dsample_weight(d, 0.0f, 1.0f) != (uint64_t)llrint((double)dsample_expf_neg(d) * 0x1.0p44);
    }
    CHECK_MSG(wbad == 0, "%d weights differ from llrint", wbad);
    worst = 0.0;
    for (int i = 0; i < 20000; i++) {
        double x = 1.0 + rnd() * (i % 2 ? 2.0 : 1e6);
        double r = fabs(dsample_log(x) - log(x)) / (fabs(log(x)) + 1e-300);
        worst = r > worst && log(x) > 1e-3 ? r : worst;
    }
    CHECK_MSG(worst < 1e-14, "log: worst relative error %.3g", worst);
    CHECK(dsample_log(1.0) == 0.0);
    CHECK(dsample_weight(3.0f, 3.0f, 0.7f) == (uint64_t)1 << 44);
    CHECK(dsample_weight(40.0f, 7.0f, 1.0f) == 0);
    CHECK(dsample_weight(FLT_MAX, -FLT_MAX, 1.0f) == 0);
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t seed = rnd64(), idx = rnd64() >> (rnd64() % 64), step = rnd64() % 100000;
        double u = sampler_uniform(seed, idx, step);
        bad += (double)dsample_bits53(seed, idx, step) * 0x1.0p-53 != u;
        uint64_t total = rnd64() >> 2, bits = dsample_bits53(seed, idx, step);
        unsigned __int128 want = ((unsigned __int128)bits * total) >> 53;
        bad += dsample_target(bits, total) != (uint64_t)want;
        float tp = (float)rnd();
        uint64_t p32 = (uint64_t)llrint((double)tp * 4294967296.0);
        p32 = p32 ? p32 : 1;
        unsigned __int128 lim = ((unsigned __int128)p32 * total + 0xffffffffu) >> 32;
        bad += dsample_top_p_limit(tp, total) != (uint64_t)lim;
        float a = (float)((rnd() - 0.5) * 1e3), b = (float)((rnd() - 0.5) * 1e3);
        bad += (a > b) != (dsample_order(a) > dsample_order(b));
    }
    CHECK_MSG(bad == 0, "%d mismatches", bad);
    CHECK(dsample_order(-0.0f) == dsample_order(0.0f));
    CHECK(dsample_order(-INFINITY) < dsample_order(-FLT_MAX));
    CHECK(dsample_bin(5.0f, 5.0f, 1.0f) == 0 && dsample_bin(5.0f, -40.0f, 1.0f) == DSAMPLE_BINS - 1);
}

/* Random parameters; bias and history in the caller's arrays. */
static void random_params(struct sampler_params *p, struct sampler_logit_bias *bias, int vocab, int kind)
{
    sampler_params_default(p);
    p->seed = rnd64();
    switch (kind % 8) {
    case 0: p->temperature = 0.0f; break;
    case 1: p->temperature = 0.8f; p->top_p = 0.9f; break;
    case 2: p->temperature = 1.0f; p->top_k = 1 + (int)(rnd64() % 50); break;
    case 3: p->temperature = 1.3f; p->min_p = 0.05f; p->top_p = 0.5f; break;
    case 4: p->temperature = 0.7f; p->top_k = 1; break;
    case 5: p->temperature = 1.0f; p->top_p = 0.02f; break;
    case 6: p->temperature = 2.0f; p->top_k = vocab / 2; p->top_p = 0.99f; break;
    default: p->temperature = 0.5f; break;
    }
    if (kind % 3 == 1) {
        p->repetition_penalty = 1.3f;
        p->frequency_penalty = 0.4f;
        p->presence_penalty = -0.3f;
    }
    if (kind % 4 == 2) {
        int n = 1 + (int)(rnd64() % 6);
        for (int i = 0; i < n; i++) {
            bias[i].token = (int32_t)(rnd64() % (uint64_t)vocab);
            bias[i].bias = (float)((rnd() - 0.5) * 20.0);
        }
        bias[n] = bias[0]; /* a token twice: its entries add in order */
        bias[n].bias = 0.37f;
        p->logit_bias = bias;
        p->n_logit_bias = n + 1;
    }
    if (kind % 5 != 0) {
        p->logprobs = true;
        p->n_logprobs = (int)(rnd64() % 21);
        p->logprobs_mode = kind % 2 ? SAMPLER_LOGPROBS_PENALIZED : SAMPLER_LOGPROBS_RAW;
    }
}

/* The mods the engine packs reproduce the CPU's bias and penalties bit for bit. */
static void test_mods_match_cpu(void)
{
    const int V = 3000;
    struct sampler_scratch ss;
    struct dev_sample ds;
    CHECK_OK(sampler_scratch_init(&ss, V, err, sizeof err), err);
    CHECK_OK(dev_sample_init(&ds, V, 2, err, sizeof err), err);
    float *logits = malloc(V * sizeof *logits), *want = malloc(V * sizeof *want), *got = malloc(V * sizeof *got);
    int32_t hist[600];
    struct sampler_logit_bias bias[16];
    int bad = 0;
    for (int it = 0; it < 200; it++) {
        struct sampler_params p;
        random_params(&p, bias, V, it);
        random_row(logits, V, 8.0, it % 3);
        int n_prompt = (int)(rnd64() % 300), n_gen = (int)(rnd64() % 300);
        for (int i = 0; i < n_prompt + n_gen; i++)
            hist[i] = (int32_t)(rnd64() % (it % 2 ? 40 : (uint64_t)V)); /* repeats, or few */
        sampler_process_logits(&p, logits, V, hist, n_prompt, n_gen, &ss, want);
        int idx;
        CHECK_OK(dev_sample_add(&ds, &p, 0, hist, n_prompt, n_gen, 1, 2, &idx, err, sizeof err), err);
        device_prepared(&ds.rows[idx], ds.mods, ds.biases, logits, got, V);
        bad += memcmp(got, want, V * sizeof *got) != 0;
        for (int i = 0; i < V; i++)
            CHECK(ds.slot[i] == -1);
        if (it % 7 == 6)
            dev_sample_reset(&ds);
    }
    CHECK_MSG(bad == 0, "%d of 200 rows differ from sampler_process_logits", bad);
    CHECK(ds.n > 2); /* grew past its first capacity */
    free(logits);
    free(want);
    free(got);
    dev_sample_free(&ds);
    sampler_scratch_free(&ss);
}

/* The device algorithm (its host reference) against the CPU sampler. */
static void test_ref_vs_cpu(void)
{
    const int V = 5000;
    struct sampler_scratch ss;
    CHECK_OK(sampler_scratch_init(&ss, V, err, sizeof err), err);
    float *logits = malloc(V * sizeof *logits);
    int32_t hist[64];
    struct sampler_logit_bias bias[16];
    int greedy_bad = 0, bad = 0, near = 0, lp_bad = 0, n = 0;
    double lp_worst = 0.0;
    for (int it = 0; it < 600; it++) {
        struct sampler_params p;
        random_params(&p, bias, V, it);
        random_row(logits, V, it % 4 == 3 ? 2.0 : 6.0, it % 3);
        for (int i = 0; i < 64; i++)
            hist[i] = (int32_t)(rnd64() % (uint64_t)V);
        struct sampler_result cpu;
        struct dsample_out dev;
        double margin;
        sampler_sample(&p, logits, V, hist, 32, 32, 5, (uint64_t)it, &ss, &cpu);
        dsample_ref(&p, logits, V, hist, 32, 32, 5, (uint64_t)it, &ss, &dev, &margin);
        n++;
        if (p.temperature < SAMPLER_GREEDY_EPS)
            greedy_bad += cpu.token != dev.token;
        else if (margin < 1e-5)
            near++;
        else
            bad += cpu.token != dev.token;
        if (p.logprobs || p.n_logprobs) {
            double d = fabs((double)cpu.logprob - dev.logprob);
            d = isnan(d) ? 0.0 : d; /* -inf both */
            lp_worst = d > lp_worst ? d : lp_worst;
            lp_bad += cpu.n_top != dev.n_top;
            for (int k = 0; k < cpu.n_top && k < dev.n_top; k++) {
                lp_bad += cpu.top[k].token != dev.top[k].token;
                double e = fabs((double)cpu.top[k].logprob - dev.top[k].logprob);
                lp_worst = e > lp_worst && !isnan(e) ? e : lp_worst;
            }
        }
    }
    CHECK_MSG(greedy_bad == 0, "%d greedy tokens differ", greedy_bad);
    CHECK_MSG(bad == 0, "%d sampled tokens differ away from any boundary (%d near one)", bad, near);
    CHECK_MSG(lp_bad == 0 && lp_worst < 1e-4, "%d top ids differ; logprobs within %.3g", lp_bad, lp_worst);
    printf("  %d rows: %d near a boundary, logprobs within %.3g of the CPU's\n", n, near, lp_worst);
    free(logits);
    sampler_scratch_free(&ss);
}

static void test_allowed_and_result(void)
{
    struct sampler_params p;
    sampler_params_default(&p);
    CHECK(dev_sample_allowed(&p));
    p.n_logit_bias = DSAMPLE_MAX_BIAS + 1;
    CHECK(!dev_sample_allowed(&p));
    struct dev_sample ds;
    CHECK_OK(dev_sample_init(&ds, 10, 1, err, sizeof err), err);
    sampler_params_default(&p);
    int idx;
    CHECK_OK(dev_sample_add(&ds, &p, 3, NULL, 0, 0, 7, 9, &idx, err, sizeof err), err);
    CHECK(idx == 0 && ds.rows[0].logit_row == 3 && ds.rows[0].seq_index == 7 && ds.rows[0].step == 9 &&
          ds.rows[0].n_mods == 0 && ds.rows[0].keep_from == -INFINITY);
    ds.out[0] = (struct dsample_out){.token = 4, .logprob = -0.5f, .n_top = 2,
                                     .top = {{4, -0.5f}, {1, -1.5f}}};
    struct sampler_result r;
    dev_sample_result(&ds, 0, &r);
    CHECK(r.token == 4 && r.logprob == -0.5f && r.n_top == 2 && r.top[1].token == 1 && r.top[1].logprob == -1.5f);
    dev_sample_free(&ds);
    CHECK(dev_sample_init(&ds, 0, 1, err, sizeof err) == HR_ERR_INVALID);
    dev_sample_free(&ds); /* a no-op on the zeroed struct */
}

/* ------------------------------------------------------------------ the engine */

/* A backend whose sample op is the host reference (the CPU backend's memory is the
 * host's): the engine's device path without a device. */
static struct backend_ops fake_ops;
static long fake_rows, fake_host_rows;
static float *fake_buf;
static size_t fake_cap;

static enum hr_status fake_sample(struct backend *be, const float *logits, int vocab, const struct dsample_row *rows,
                                  int n, const struct dsample_mod *mods, int n_mods, const float *biases,
                                  int n_biases, struct dsample_out *out, char *errbuf, size_t errlen)
{
    (void)be, (void)n_mods, (void)n_biases, (void)errbuf, (void)errlen;
    float *x = malloc((size_t)vocab * sizeof *x);
    for (int i = 0; i < n; i++) {
        const float *L = logits + (size_t)rows[i].logit_row * vocab;
        device_prepared(&rows[i], mods, biases, L, x, vocab);
        double margin;
        dsample_ref_row(&rows[i], L, x, vocab, &out[i], &margin);
    }
    free(x);
    fake_rows += n;
    return HR_OK;
}

static enum hr_status fake_to_host_rows(struct backend *be, const float *src, int dim, const int32_t *rows, int n,
                                        void **host, char *errbuf, size_t errlen)
{
    (void)be, (void)errbuf, (void)errlen;
    size_t need = (size_t)n * dim;
    if (need > fake_cap) {
        free(fake_buf);
        fake_buf = malloc(need * sizeof *fake_buf);
        fake_cap = need;
    }
    for (int i = 0; i < n; i++)
        memcpy(fake_buf + (size_t)i * dim, src + (size_t)rows[i] * dim, (size_t)dim * sizeof *fake_buf);
    *host = fake_buf;
    fake_host_rows += n;
    return HR_OK;
}

/* A backend that submits (the CUDA backend's seam): submit counts and starts nothing
 * more (the CPU's ops are done when they return), sync counts; the sample call number
 * fake_fail_at reports a device fault, as the sampling's one wait would. */
static long fake_submits, fake_syncs, fake_sample_calls;
static long fake_fail_at = -1;
static enum hr_status (*cpu_sync)(struct backend *be, char *err, size_t errlen);

static enum hr_status fake_submit(struct backend *be, char *errbuf, size_t errlen)
{
    (void)be, (void)errbuf, (void)errlen;
    fake_submits++;
    return HR_OK;
}

static enum hr_status fake_sync(struct backend *be, char *errbuf, size_t errlen)
{
    fake_syncs++;
    return cpu_sync(be, errbuf, errlen);
}

static enum hr_status fake_sample_faulty(struct backend *be, const float *logits, int vocab,
                                         const struct dsample_row *rows, int n, const struct dsample_mod *mods,
                                         int n_mods, const float *biases, int n_biases, struct dsample_out *out,
                                         char *errbuf, size_t errlen)
{
    if (fake_sample_calls++ == fake_fail_at)
        return hr_err(errbuf, errlen, HR_ERR_INTERNAL, "fake device fault at the step's wait");
    return fake_sample(be, logits, vocab, rows, n, mods, n_mods, biases, n_biases, out, errbuf, errlen);
}

/* device: 0 host sampling, 1 greedy requests on the "device"
 * (--device-sampling-greedy-only), 2 every request that allows it (the default) */
static struct hearth_engine *fake_engine(int device)
{
    struct hearth_engine *e = rig_engine(rig_kv_bytes(400), 8, 64, 1);
    if (!e)
        return NULL;
    if (device) {
        fake_ops = *e->be.ops;
        fake_ops.sample = fake_sample;
        fake_ops.to_host_rows = fake_to_host_rows;
        e->be.ops = &fake_ops;
        CHECK_OK(engine_dev_sampling(e, true, err, sizeof err), err);
        CHECK(e->ds_on);
        e->ds_all = device == 2;
    }
    return e;
}

/* The default device engine whose backend also submits (its own ops table: fake_ops
 * stays the waiting backend's). */
static struct backend_ops submit_ops;

static struct hearth_engine *fake_submit_engine(void)
{
    struct hearth_engine *e = fake_engine(2);
    if (!e)
        return NULL;
    submit_ops = fake_ops;
    cpu_sync = fake_ops.sync;
    submit_ops.sync = fake_sync;
    submit_ops.submit = fake_submit;
    submit_ops.sample = fake_sample_faulty;
    e->be.ops = &submit_ops;
    return e;
}

static struct hearth_logit_bias job_bias[2] = {{5, 3.0f}, {5, -1.25f}};

static void make_jobs(struct job *jobs, int n, int vocab)
{
    for (int i = 0; i < n; i++) {
        rig_make_job(&jobs[i], vocab);
        struct hearth_request_params *p = &jobs[i].p;
        jobs[i].arrive_step = (int)rig_rnd(6);
        switch (i % 6) {
        case 1: p->n = 3; break;                                /* a fork on the device */
        case 2: p->prompt_logprobs = true; break;               /* stays on the host */
        case 3: p->repetition_penalty = 1.2f; p->frequency_penalty = 0.5f; p->presence_penalty = 0.1f;
                p->logit_bias = job_bias; p->n_logit_bias = 2; break;
        case 4: p->top_k = 5; p->top_p = 0.8f; p->min_p = 0.02f; break;
        case 5: p->temperature = 0.0f; break;
        }
    }
}

static void test_engine_device_path(void)
{
    struct hearth_engine *e = fake_engine(2);
    if (!e) {
        CHECK(0);
        return;
    }
    int V = e->m.cfg.vocab_size;
    struct job jobs[12];
    make_jobs(jobs, 12, V);
    for (int i = 0; i < 12; i++)
        CHECK(rig_run_alone(e, &jobs[i]));
    long rows_alone = fake_rows, host_alone = fake_host_rows;
    CHECK(rig_run_together(e, jobs, 12));
    int same = 0;
    for (int i = 0; i < 12; i++) {
        int ok = rig_same_out(&jobs[i].alone, &jobs[i].together, jobs[i].p.n);
        CHECK_MSG(ok, "job %d (kind %d): alone and together differ", i, i % 6);
        same += ok;
    }
    CHECK(rows_alone > 0 && host_alone > 0); /* both paths ran */
    printf("  %d of 12 jobs the same alone and together; %ld rows sampled on the \"device\", %ld logits rows "
           "brought over\n", same, fake_rows, fake_host_rows);
    rig_check_idle(e);
    hearth_engine_free(e);

    /* greedy: the device path's tokens are the CPU sampler's */
    struct hearth_engine *a = fake_engine(1), *b = fake_engine(0);
    struct job g[6];
    for (int i = 0; i < 6; i++) {
        rig_make_job(&g[i], V);
        g[i].p.temperature = 0.0f;
        g[i].p.n = 1 + i % 2;
        if (i == 3) {
            g[i].p.repetition_penalty = 1.5f;
            g[i].p.logit_bias = job_bias;
            g[i].p.n_logit_bias = 2;
        }
    }
    for (int i = 0; a && b && i < 6; i++) {
        struct job other = g[i];
        CHECK(rig_run_alone(a, &g[i]) && rig_run_alone(b, &other));
        for (int k = 0; k < g[i].p.n; k++)
            CHECK_MSG(g[i].alone.n_tok[k] == other.alone.n_tok[k] &&
                          !memcmp(g[i].alone.tok[k], other.alone.tok[k], sizeof g[i].alone.tok[k]),
                      "greedy job %d sample %d: device path and CPU differ", i, k);
    }
    hearth_engine_free(a);
    hearth_engine_free(b);
    free(fake_buf);
    fake_buf = NULL;
    fake_cap = 0;
}

/* With a backend that submits, the engine's steps only start the forward and the
 * logits (sync is left to steps without logits), and the outputs are the waiting
 * backend's.  A fault that the sampling's wait reports ends that step's requests with
 * the error; the rest finish as before, and the engine serves on, nothing leaked. */
static void test_engine_submit(void)
{
    struct hearth_engine *w = fake_engine(2), *e = fake_submit_engine();
    if (!w || !e) {
        CHECK(0);
        hearth_engine_free(w);
        hearth_engine_free(e);
        return;
    }
    int V = e->m.cfg.vocab_size;
    struct job jobs[12], again[12];
    make_jobs(jobs, 12, V);
    memcpy(again, jobs, sizeof jobs);
    CHECK(rig_run_together(w, jobs, 12));
    fake_submits = fake_syncs = fake_sample_calls = 0;
    fake_fail_at = -1;
    CHECK(rig_run_together(e, again, 12));
    int same = 0;
    for (int i = 0; i < 12; i++)
        same += rig_same_out(&jobs[i].together, &again[i].together, jobs[i].p.n);
    CHECK_MSG(same == 12, "%d of 12 jobs the same with submit as with sync", same);
    CHECK_MSG(fake_submits >= 2 * fake_sample_calls && fake_sample_calls > 0,
              "%ld submits for %ld sampling calls", fake_submits, fake_sample_calls);
    long syncs = fake_syncs, samples = fake_sample_calls;

    /* the fault: one step's sampling fails */
    memcpy(again, jobs, sizeof jobs);
    fake_sample_calls = 0;
    fake_fail_at = samples / 2;
    CHECK(rig_run_together(e, again, 12));
    fake_fail_at = -1;
    int failed = 0, ok = 0;
    for (int i = 0; i < 12; i++) {
        bool err_end = false;
        for (int k = 0; k < again[i].p.n; k++)
            err_end |= again[i].together.fin[k] == HEARTH_FINISH_ERROR;
        failed += err_end;
        ok += !err_end && rig_same_out(&jobs[i].together, &again[i].together, jobs[i].p.n);
    }
    CHECK_MSG(failed > 0 && failed + ok == 12, "a fault at the sampling's wait: %d jobs failed, %d as before", failed,
              ok);
    rig_check_idle(e);
    /* and the engine serves on */
    memcpy(again, jobs, sizeof jobs);
    CHECK(rig_run_together(e, again, 12));
    same = 0;
    for (int i = 0; i < 12; i++)
        same += rig_same_out(&jobs[i].together, &again[i].together, jobs[i].p.n);
    CHECK_MSG(same == 12, "after the fault: %d of 12 jobs as before", same);
    printf("  12 jobs equal with submit (%ld submits, %ld syncs, %ld sampling calls); a fault at a sampling wait "
           "failed %d of them, the rest as before, then all 12 again\n",
           fake_submits, syncs, samples, failed);
    rig_check_idle(e);
    hearth_engine_free(w);
    hearth_engine_free(e);
    free(fake_buf);
    fake_buf = NULL;
    fake_cap = 0;
}

/* device_sampling_greedy_only sends greedy requests to the device and sampled ones to
 * the host; the default sends both to the device. */
static void test_greedy_only(void)
{
    struct hearth_engine *e = fake_engine(1);
    if (!e) {
        CHECK(0);
        return;
    }
    int V = e->m.cfg.vocab_size;
    struct job j[2];
    rig_make_job(&j[0], V);
    j[0].p.temperature = 0.8f;
    j[0].p.seed = 7;
    rig_make_job(&j[1], V);
    j[1].p.temperature = 0.0f;
    long r0 = fake_rows, h0 = fake_host_rows;
    CHECK(rig_run_alone(e, &j[0]));
    CHECK_MSG(fake_rows == r0 && fake_host_rows > h0, "a sampled request: %ld device rows, %ld host rows",
              fake_rows - r0, fake_host_rows - h0);
    long r1 = fake_rows, h1 = fake_host_rows;
    CHECK(rig_run_alone(e, &j[1]));
    CHECK_MSG(fake_rows > r1 && fake_host_rows == h1, "a greedy request: %ld device rows, %ld host rows",
              fake_rows - r1, fake_host_rows - h1);
    rig_check_idle(e);
    hearth_engine_free(e);
    free(fake_buf);
    fake_buf = NULL;
    fake_cap = 0;
}

static void test_default_all(void)
{
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    CHECK(!p.device_sampling_greedy_only && !p.no_device_sampling);
    struct hearth_engine *e = rig_engine(rig_kv_bytes(400), 8, 64, 1);
    if (!e) {
        CHECK(0);
        return;
    }
    CHECK(e->ds_all); /* the engine read the default */
    hearth_engine_free(e);
}

int main(void)
{
    TEST_RUN(test_math);
    TEST_RUN(test_mods_match_cpu);
    TEST_RUN(test_ref_vs_cpu);
    TEST_RUN(test_allowed_and_result);
    TEST_RUN(test_engine_device_path);
    TEST_RUN(test_engine_submit);
    TEST_RUN(test_greedy_only);
    TEST_RUN(test_default_all);
    TEST_END();
}
