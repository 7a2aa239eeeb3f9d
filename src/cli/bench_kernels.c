/* hearth bench kernels: GEMM GFLOP/s of the CPU backend for the real shapes of a
 * Qwen3 model (qwen3-0.6b by default) at m = 1, 8, 32 and 512 rows, against the
 * machine's ceilings measured in the same run.  Weights are bf16 (or --dtype), in
 * enough distinct copies (>= 256 MiB per shape) that every call streams them from
 * memory, as a forward step does.  Then the host sampler: one 151,936-token row per
 * call (one thread), greedy (the floor: one read of the row) and the sampled kinds.
 * Prints JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_util.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "kernels/cpu/ceiling.h"
#include "model/dtype.h"

#define BK_STREAM_BYTES (256ll << 20)
#define BK_MAX_M 8
#define BK_MAX_RESULTS 64

struct bk_result {
    const char *shape;
    int m, n, k;
    double sec, flops, wbytes;
};

struct bk_shape {
    const char *name;
    int n, k;
    int max_m; /* the shape is measured for m <= max_m */
};

/* qwen3-0.6b: hidden 1024, 16 heads x 128, 8 KV heads, intermediate 3072, vocab 151936 */
static const struct bk_shape bk_shapes[] = {
    {"q_proj", 2048, 1024, 1 << 30},  {"k_proj", 1024, 1024, 1 << 30}, {"o_proj", 1024, 2048, 1 << 30},
    {"gate_proj", 3072, 1024, 1 << 30}, {"down_proj", 1024, 3072, 1 << 30}, {"lm_head", 151936, 1024, 32},
};

static void bk_usage(void)
{
    fprintf(stderr, "usage: hearth bench kernels [--threads N] [--kernel V] [--m 1,8,32,512] [--dtype bf16|f32|f16]\n"
                    "                            [--seconds S] [--no-ceilings]\n");
}

static uint64_t bk_rng = 0x2545f4914f6cdd1dull;
static float bk_rand(void)
{
    bk_rng ^= bk_rng << 13;
    bk_rng ^= bk_rng >> 7;
    bk_rng ^= bk_rng << 17;
    return (float)((bk_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static int bk_parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096)
            return 0;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return 0;
    }
    return n;
}

/* Seconds per call of call(ctx, i) for i = 0, 1, 2, ...: one call to size the rounds,
 * then the median of five timed rounds of about seconds / 5 each. */
static double bk_median_call(void (*call)(void *ctx, long i), void *ctx, double seconds)
{
    long i = 0;
    call(ctx, i++);
    double t = bench_now();
    call(ctx, i++);
    double one = bench_now() - t;
    long reps = (long)(seconds / 5 / (one > 1e-7 ? one : 1e-7));
    reps = reps < 1 ? 1 : reps > 100000 ? 100000 : reps;
    double r[5];
    for (int round = 0; round < 5; round++) {
        t = bench_now();
        for (long k = 0; k < reps; k++)
            call(ctx, i++);
        r[round] = (bench_now() - t) / (double)reps;
    }
    return bench_median(r, 5);
}

/* A matmul call: y = x . w[i % n_copies]^T over m rows (the copies stream from memory). */
struct bk_matmul {
    struct backend *be;
    float *y;
    const float *x;
    int m, n_copies;
    const struct weights_mat *w;
};
static void bk_matmul_call(void *ctx, long i)
{
    struct bk_matmul *c = ctx;
    c->be->ops->matmul(c->be, c->y, c->x, c->m, &c->w[i % c->n_copies]);
}

/* The sampler's kinds: one row of Qwen3's vocabulary a call, rows rotating (random
 * logits in [-8, 8)), the step counting up. */
#define BK_VOCAB 151936
#define BK_ROWS 8
struct bk_sample {
    const char *kind;
    float temperature, top_p, min_p;
    int top_k;
    double us;
};
struct bk_sample_ctx {
    struct sampler_params p;
    struct sampler_scratch *ss;
    const float *rows; /* [BK_ROWS, BK_VOCAB] */
};
static void bk_sample_call(void *ctx, long i)
{
    struct bk_sample_ctx *c = ctx;
    struct sampler_result r;
    sampler_sample(&c->p, c->rows + (size_t)(i % BK_ROWS) * BK_VOCAB, BK_VOCAB, NULL, 0, 0, 0, (uint64_t)i, c->ss,
                   &r);
}

static int bk_sampling(struct bk_sample *k, int n_kinds, double seconds, char *err, size_t errlen)
{
    struct sampler_scratch ss;
    float *rows = malloc((size_t)BK_ROWS * BK_VOCAB * sizeof *rows);
    if (!rows || sampler_scratch_init(&ss, BK_VOCAB, err, errlen) != HR_OK) {
        free(rows);
        if (!rows)
            snprintf(err, errlen, "out of memory");
        return 1;
    }
    for (size_t i = 0; i < (size_t)BK_ROWS * BK_VOCAB; i++)
        rows[i] = 8.0f * bk_rand();
    for (int j = 0; j < n_kinds; j++) {
        struct bk_sample_ctx c = {.ss = &ss, .rows = rows};
        sampler_params_default(&c.p);
        c.p.temperature = k[j].temperature;
        c.p.top_p = k[j].top_p;
        c.p.top_k = k[j].top_k;
        c.p.min_p = k[j].min_p;
        c.p.seed = 42;
        k[j].us = bk_median_call(bk_sample_call, &c, seconds) * 1e6;
    }
    sampler_scratch_free(&ss);
    free(rows);
    return 0;
}

int bench_kernels(int argc, char **argv)
{
    long n_threads = sysconf(_SC_NPROCESSORS_ONLN);
    const char *kernel = NULL;
    int ms[BK_MAX_M] = {1, 8, 32, 512}, n_m = 4, ceilings = 1;
    double seconds = 1.0;
    enum safetensors_dtype dt = SAFETENSORS_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double dv;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bk_usage();
            return 0;
        } else if (args_is(a, "--threads")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--threads", v, 1, 1024, &n_threads))
                return 2;
        } else if (args_is(a, "--kernel")) {
            if (!(kernel = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--m")) {
            if (!(v = args_value(argc, argv, &i)) || !(n_m = bk_parse_list(v, ms, BK_MAX_M))) {
                fprintf(stderr, "hearth bench kernels: --m takes a list like 1,8,32,512\n");
                return 2;
            }
        } else if (args_is(a, "--dtype")) {
            if (!(v = args_value(argc, argv, &i)))
                return 2;
            if (!strcmp(v, "bf16"))
                dt = SAFETENSORS_DTYPE_BF16;
            else if (!strcmp(v, "f16"))
                dt = SAFETENSORS_DTYPE_F16;
            else if (!strcmp(v, "f32"))
                dt = SAFETENSORS_DTYPE_F32;
            else {
                fprintf(stderr, "hearth bench kernels: --dtype must be bf16, f16 or f32\n");
                return 2;
            }
        } else if (args_is(a, "--seconds")) {
            if (!(v = args_value(argc, argv, &i)) || !args_double("--seconds", v, 0.01, 600, &dv))
                return 2;
            seconds = dv;
        } else if (!strcmp(a, "--no-ceilings")) {
            ceilings = 0;
        } else {
            fprintf(stderr, "hearth bench kernels: unknown option '%s'\n", a);
            bk_usage();
            return 2;
        }
    }
    char err[HR_ERRLEN];
    struct cpu_ceilings ceil = {0};
    if (ceilings && cpu_ceilings_measure((int)n_threads, &ceil, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench kernels: %s\n", err);
        return 1;
    }
    struct backend be;
    if (backend_create(&be, "cpu", &(struct backend_opts){.n_threads = (int)n_threads, .kernel = kernel}, err,
                       sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench kernels: %s\n", err);
        return 2;
    }
    int max_m = 1, max_k = 1;
    for (int i = 0; i < n_m; i++)
        max_m = ms[i] > max_m ? ms[i] : max_m;
    for (size_t s = 0; s < sizeof bk_shapes / sizeof bk_shapes[0]; s++)
        max_k = bk_shapes[s].k > max_k ? bk_shapes[s].k : max_k;
    /* The matmul scratch for max_m rows of max_k inputs (a geometry of that width). */
    struct model_config geo = {.hidden_size = max_k, .head_dim = 2};
    if (be.ops->reserve(&be, &geo, max_m, 0, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench kernels: %s\n", err);
        backend_free(&be);
        return 1;
    }
    int bf16_compute = be.bf16_compute && dt == SAFETENSORS_DTYPE_BF16;
    size_t esize = dt == SAFETENSORS_DTYPE_F32 ? 4 : 2;

    struct bk_result res[BK_MAX_RESULTS];
    int n_res = 0, rc = 0;
    double layer_flops[BK_MAX_M] = {0}, layer_s[BK_MAX_M] = {0};
    for (size_t s = 0; s < sizeof bk_shapes / sizeof bk_shapes[0] && !rc; s++) {
        const struct bk_shape *sh = &bk_shapes[s];
        int64_t wbytes = (int64_t)sh->n * sh->k * (int64_t)esize;
        int n_copies = (int)((BK_STREAM_BYTES + wbytes - 1) / wbytes);
        struct weights_mat *w = calloc((size_t)n_copies, sizeof *w);
        void *wdata = malloc((size_t)wbytes * n_copies);
        float *x = malloc((size_t)max_m * sh->k * sizeof *x);
        float *y = malloc((size_t)max_m * sh->n * sizeof *y);
        if (!w || !wdata || !x || !y) {
            fprintf(stderr, "hearth bench kernels: out of memory\n");
            rc = 1;
        }
        for (int64_t i = 0; !rc && i < (int64_t)sh->n * sh->k * n_copies; i++) {
            float f = 0.05f * bk_rand();
            if (dt == SAFETENSORS_DTYPE_F32)
                ((float *)wdata)[i] = f;
            else if (dt == SAFETENSORS_DTYPE_BF16)
                ((uint16_t *)wdata)[i] = dtype_f32_to_bf16(f);
            else
                ((uint16_t *)wdata)[i] = dtype_f32_to_f16(f);
        }
        for (int64_t i = 0; !rc && i < (int64_t)max_m * sh->k; i++)
            x[i] = bk_rand();
        for (int c = 0; !rc && c < n_copies; c++)
            w[c] = (struct weights_mat){.dtype = dt, .rows = sh->n, .cols = sh->k,
                                        .data = (const char *)wdata + (size_t)c * wbytes};
        for (int mi = 0; !rc && mi < n_m; mi++) {
            int m = ms[mi];
            if (m > sh->max_m)
                continue;
            struct bk_matmul mc = {.be = &be, .y = y, .x = x, .m = m, .n_copies = n_copies, .w = w};
            double sec = bk_median_call(bk_matmul_call, &mc, seconds);
            double flops = 2.0 * m * sh->n * sh->k;
            if (strcmp(sh->name, "lm_head") != 0) {
                /* one layer: q, k, v (= k), o, gate, up (= gate), down */
                int times = !strcmp(sh->name, "k_proj") || !strcmp(sh->name, "gate_proj") ? 2 : 1;
                layer_flops[mi] += times * flops;
                layer_s[mi] += times * sec;
            }
            if (n_res < BK_MAX_RESULTS)
                res[n_res++] = (struct bk_result){sh->name, m, sh->n, sh->k, sec, flops, (double)wbytes};
        }
        free(w);
        free(wdata);
        free(x);
        free(y);
    }
    /* the ceilings again at the end: other load on the machine only lowers them */
    struct cpu_ceilings ceil2;
    if (ceilings && cpu_ceilings_measure((int)n_threads, &ceil2, err, sizeof err) == HR_OK) {
        ceil.fma_f32_gflops = ceil2.fma_f32_gflops > ceil.fma_f32_gflops ? ceil2.fma_f32_gflops : ceil.fma_f32_gflops;
        ceil.dot_bf16_gflops =
            ceil2.dot_bf16_gflops > ceil.dot_bf16_gflops ? ceil2.dot_bf16_gflops : ceil.dot_bf16_gflops;
        ceil.read_gbs = ceil2.read_gbs > ceil.read_gbs ? ceil2.read_gbs : ceil.read_gbs;
    }
    printf("{\n  \"benchmark\": \"kernels\",\n  \"backend\": \"%s\",\n  \"threads\": %ld,\n  \"weights_dtype\": \"%s\",\n",
           be.name, n_threads, dt == SAFETENSORS_DTYPE_BF16 ? "bf16" : dt == SAFETENSORS_DTYPE_F16 ? "f16" : "f32");
    printf("  \"ceilings\": {\"fma_f32_gflops\": %.1f, \"dot_bf16_gflops\": %.1f, \"read_gbs\": %.2f},\n",
           ceil.fma_f32_gflops, ceil.dot_bf16_gflops, ceil.read_gbs);
    double compute_ceiling = bf16_compute ? ceil.dot_bf16_gflops : ceil.fma_f32_gflops;
    printf("  \"compute_ceiling\": \"%s\",\n  \"results\": [", bf16_compute ? "dot_bf16" : "fma_f32");
    for (int i = 0; i < n_res; i++) {
        const struct bk_result *r = &res[i];
        double gflops = r->flops / r->sec * 1e-9, gbs = r->wbytes / r->sec * 1e-9;
        printf("%s\n    {\"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"us\": %.1f, \"gflops\": %.1f, "
               "\"frac_compute\": %.3f, \"weights_gbs\": %.2f, \"frac_bandwidth\": %.3f}",
               i ? "," : "", r->shape, r->m, r->n, r->k, r->sec * 1e6, gflops,
               compute_ceiling > 0 ? gflops / compute_ceiling : 0, gbs, ceil.read_gbs > 0 ? gbs / ceil.read_gbs : 0);
    }
    printf("\n  ],\n  \"layer\": [");
    for (int mi = 0; mi < n_m; mi++) {
        double g = layer_s[mi] > 0 ? layer_flops[mi] / layer_s[mi] * 1e-9 : 0;
        printf("%s\n    {\"m\": %d, \"gflops\": %.1f, \"frac_compute\": %.3f}", mi ? "," : "", ms[mi], g,
               compute_ceiling > 0 ? g / compute_ceiling : 0);
    }
    printf("\n  ],\n  \"sampling\": [");
    struct bk_sample kinds[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 0, 0},
        {"temperature 1", 1.0f, 1.0f, 0.0f, 0, 0},
        {"temperature 0.6, top-k 20, top-p 0.95 (Qwen3's defaults)", 0.6f, 0.95f, 0.0f, 20, 0},
        {"temperature 0.8, top-p 0.9", 0.8f, 0.9f, 0.0f, 0, 0},
        {"temperature 1, min-p 0.05", 1.0f, 1.0f, 0.05f, 0, 0},
    };
    int n_kinds = (int)(sizeof kinds / sizeof kinds[0]);
    if (!rc && bk_sampling(kinds, n_kinds, seconds, err, sizeof err)) {
        fprintf(stderr, "hearth bench kernels: sampling: %s\n", err);
        rc = 1;
    }
    for (int j = 0; !rc && j < n_kinds; j++)
        printf("%s\n    {\"kind\": \"%s\", \"vocab\": %d, \"us_per_row\": %.1f, \"over_greedy\": %.2f}", j ? "," : "",
               kinds[j].kind, BK_VOCAB, kinds[j].us, kinds[0].us > 0 ? kinds[j].us / kinds[0].us : 0);
    printf("\n  ]\n}\n");
    backend_free(&be);
    return rc;
}
