/* CUDA kernel benchmark (bench/cuda_kernels.sh runs it): the card's yardsticks (HBM
 * read and copy bandwidth by our own kernels, the bf16 tensor-core rate by cuBLAS at
 * 8192^3), then our GEMM against cuBLAS at the Qwen3-0.6B and -8B shapes for m = 1,
 * 8, 32, 128, 512, 4096, then attention decode and prefill; first the sampling kernel
 * against the copy of its rows to the host.  JSON on stdout.
 *
 * cuBLAS is a yardstick only: it is loaded with dlopen (HEARTH_CUBLAS names the
 * library; default libcublas.so.13), and its figures are null when it is absent.
 * Weights rotate over enough copies to exceed the L2, so small shapes read HBM. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dev_sample.h"
#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/cuda_kernels.h"

static char err[HR_ERRLEN];

#define MUST(call)                                                                                                     \
    do {                                                                                                               \
        if ((call) != HR_OK) {                                                                                         \
            fprintf(stderr, "cuda_bench: %s: %s\n", #call, err);                                                       \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* ------------------------------------------------------------------ cuBLAS by dlopen */

typedef int (*cublas_create_fn)(void **);
typedef int (*cublas_gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                                 int, int, const void *, void *, int, int, int, int);
static void *cublas;
static cublas_gemm_ex_fn cublas_gemm;
enum { OP_N = 0, OP_T = 1, R_32F = 0, R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1 };

static void cublas_open(void)
{
    const char *name = getenv("HEARTH_CUBLAS");
    void *h = dlopen(name && *name ? name : "libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cuda_bench: no cuBLAS (%s): its figures are null\n", dlerror());
        return;
    }
    cublas_create_fn create = (cublas_create_fn)dlsym(h, "cublasCreate_v2");
    cublas_gemm = (cublas_gemm_ex_fn)dlsym(h, "cublasGemmEx");
    if (!create || !cublas_gemm || create(&cublas) != 0) {
        fprintf(stderr, "cuda_bench: cuBLAS did not start: its figures are null\n");
        cublas = NULL;
    }
}

/* y[m, n] (row-major) = x[m, k] . w[n, k]^T: column-major y^T = w . x^T. */
static int cublas_run(void *y, int ytype, const void *x, const void *w, int m, int n, int k, float beta)
{
    float alpha = 1.0f;
    return cublas_gemm(cublas, OP_T, OP_N, n, m, k, &alpha, w, R_16BF, k, x, R_16BF, k, &beta, y, ytype, n,
                       COMPUTE_32F, GEMM_DEFAULT);
}

/* ------------------------------------------------------------------ timing */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every figure: the median over TRIALS trials of the mean time of `reps`
 * back-to-back launches, after one untimed trial. */
#define TRIALS 7

static struct cuda_dev_timer *timer;

/* ------------------------------------------------------------------ GEMM */

struct shape {
    const char *model, *name;
    int n, k;
    enum cuda_epi epi;
    int more_n[2]; /* q/k/v: k's and v's columns, launched as segments after q's n, as the backend does */
};

/* one product; q, k and v in one launch of three segments, as the backend runs them (the
 * q and k/v rows alone are shapes the dense models never launch by themselves) */
#define ONE(model, name, n, k, epi) {model, name, n, k, epi, {0, 0}}
#define QKV(model, nq, nkv, k) {model, "q/k/v", nq, k, CUDA_EPI_STORE_F32, {nkv, nkv}}
static const struct shape shapes[] = {
    QKV("qwen3-0.6b", 2048, 1024, 1024),
    ONE("qwen3-0.6b", "q", 2048, 1024, CUDA_EPI_STORE_F32),
    ONE("qwen3-0.6b", "k/v", 1024, 1024, CUDA_EPI_STORE_F32),
    ONE("qwen3-0.6b", "o", 1024, 2048, CUDA_EPI_ADD_F32),
    ONE("qwen3-0.6b", "gate/up", 3072, 1024, CUDA_EPI_SWIGLU_BF16),
    ONE("qwen3-0.6b", "down", 1024, 3072, CUDA_EPI_ADD_F32),
    ONE("qwen3-0.6b", "lm_head", 151936, 1024, CUDA_EPI_STORE_F32),
    QKV("qwen3-8b", 4096, 1024, 4096),
    ONE("qwen3-8b", "q/o", 4096, 4096, CUDA_EPI_STORE_F32),
    ONE("qwen3-8b", "k/v", 1024, 4096, CUDA_EPI_STORE_F32),
    ONE("qwen3-8b", "gate/up", 12288, 4096, CUDA_EPI_SWIGLU_BF16),
    ONE("qwen3-8b", "down", 4096, 12288, CUDA_EPI_ADD_F32),
    ONE("qwen3-8b", "lm_head", 151936, 4096, CUDA_EPI_STORE_F32),
    /* the MoE model's dense products (its experts run the grouped kernels) */
    QKV("qwen3-30b-a3b", 4096, 512, 2048),
    ONE("qwen3-30b-a3b", "o", 2048, 4096, CUDA_EPI_ADD_F32),
    ONE("qwen3-30b-a3b", "lm_head", 151936, 2048, CUDA_EPI_STORE_F32),
    QKV("qwen3-32b", 8192, 1024, 5120),
    ONE("qwen3-32b", "o", 5120, 8192, CUDA_EPI_ADD_F32),
    ONE("qwen3-32b", "gate/up", 25600, 5120, CUDA_EPI_SWIGLU_BF16),
    ONE("qwen3-32b", "down", 5120, 25600, CUDA_EPI_ADD_F32),
    ONE("qwen3-32b", "lm_head", 151936, 5120, CUDA_EPI_STORE_F32),
};
static const int ms_list[] = {1, 8, 32, 128, 512, 4096};

static const char *epi_name(enum cuda_epi e)
{
    return e == CUDA_EPI_STORE_F32 ? "store_f32"
           : e == CUDA_EPI_ADD_F32 ? "add_f32"
           : e == CUDA_EPI_STORE_BF16 ? "store_bf16"
                                      : "swiglu_bf16";
}

static int first_item = 1;
static void item_sep(void)
{
    printf(first_item ? "\n    " : ",\n    ");
    first_item = 0;
}

static void bench_gemm(const struct cuda_kernels *K, double read_gbs, int only_m, const char *only_model)
{
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        if (only_model && strcmp(only_model, s->model))
            continue;
        int sw = s->epi == CUDA_EPI_SWIGLU_BF16, mats = sw ? 2 : 1, n_more = (s->more_n[0] > 0) + (s->more_n[1] > 0);
        const int n = s->n + s->more_n[0] + s->more_n[1]; /* every segment's columns */
        size_t wbytes = (size_t)n * s->k * 2 * mats;
        int copies = (int)(((size_t)512 << 20) / wbytes) + 1;
        if (copies > 32)
            copies = 32;
        if (copies < 2)
            copies = 2;
        uint16_t *w;
        MUST(cuda_dev_alloc((void **)&w, wbytes * copies, err, sizeof err));
        MUST(cuda_dev_fill_bf16(w, wbytes / 2 * copies, 3 + si, 0.05f, err, sizeof err));
        int max_m = 4096;
        uint16_t *x;
        void *y, *work = NULL;
        MUST(cuda_dev_alloc((void **)&x, (size_t)max_m * s->k * 2, err, sizeof err));
        MUST(cuda_dev_fill_bf16(x, (size_t)max_m * s->k, 5 + si, 1.0f, err, sizeof err));
        size_t ybytes = (size_t)max_m * n * 4 * (sw ? 2 : 1);
        MUST(cuda_dev_alloc(&y, ybytes, err, sizeof err));
        MUST(cuda_dev_memset(y, 0, ybytes, err, sizeof err));
        size_t wb = K->gemm_workspace(max_m, n, s->k, s->epi), ntk = K->gemm_tickets(max_m, n, s->k, s->epi);
        int *tickets = NULL;
        if (wb)
            MUST(cuda_dev_alloc(&work, wb, err, sizeof err));
        if (ntk) {
            MUST(cuda_dev_alloc((void **)&tickets, ntk * sizeof(int), err, sizeof err));
            MUST(cuda_dev_memset(tickets, 0, ntk * sizeof(int), err, sizeof err));
        }
        size_t n_ms = only_m ? 1 : sizeof ms_list / sizeof ms_list[0];
        for (size_t mi = 0; mi < n_ms; mi++) {
            int m = only_m ? only_m : ms_list[mi]; /* --m: any m up to max_m */
            double flops = 2.0 * m * n * s->k * mats;
            int out_e = s->epi == CUDA_EPI_STORE_BF16 || sw ? 2 : 4;
            double bytes = (double)wbytes + (double)m * s->k * 2 + (double)m * n * out_e * (s->epi == CUDA_EPI_ADD_F32 ? 2 : 1);
            int reps = (int)(2e-3 / fmax(bytes / (read_gbs * 1e9), flops / 600e12)) + 1; /* ~2 ms a trial */
            if (reps > 200)
                reps = 200;
            double t_ours[TRIALS], t_cb[TRIALS];
            /* the launch at the first weight copy; the segments' weights and outputs follow
             * q's in the same buffers */
            struct cuda_gemm g = {.epi = s->epi, .y = y, .x = x, .w = w, .w_up = sw ? w + wbytes / 4 : NULL,
                                  .m = m, .n = s->n, .k = s->k, .x_rows = max_m, .work = work, .work_bytes = wb,
                                  .tickets = tickets, .n_tickets = ntk, .n_more = n_more};
            for (int i = 0, col = s->n; i < n_more; col += s->more_n[i], i++) {
                g.more_w[i] = w + (size_t)col * s->k;
                g.more_y[i] = (char *)y + (size_t)m * col * out_e;
                g.more_n[i] = s->more_n[i];
            }
            for (int tr = -1; tr < TRIALS; tr++) {
                cuda_dev_timer_start(timer);
                for (int r = 0; r < reps; r++) {
                    const size_t c = (size_t)(r % copies) * (wbytes / 2); /* this rep's copy of the weights */
                    struct cuda_gemm gr = g;
                    gr.w += c;
                    if (sw)
                        gr.w_up += c;
                    for (int i = 0; i < n_more; i++)
                        gr.more_w[i] += c;
                    MUST(K->gemm(&gr, NULL, err, sizeof err));
                }
                double ms = cuda_dev_timer_stop(timer) / reps;
                if (tr >= 0)
                    t_ours[tr] = ms;
            }
            MUST(cuda_dev_sync(err, sizeof err));
            qsort(t_ours, TRIALS, sizeof(double), cmp_d);
            double cb = -1;
            if (cublas) {
                int bad = 0;
                for (int tr = -1; tr < TRIALS; tr++) {
                    cuda_dev_timer_start(timer);
                    for (int r = 0; r < reps; r++) {
                        const uint16_t *wc = w + (size_t)(r % copies) * (wbytes / 2);
                        /* SwiGLU: one product over both matrices (2n rows), no activation */
                        bad |= cublas_run(y, out_e == 2 ? R_16BF : R_32F, x, wc, m, n * mats, s->k,
                                          s->epi == CUDA_EPI_ADD_F32 ? 1.0f : 0.0f);
                    }
                    double ms = cuda_dev_timer_stop(timer) / reps;
                    if (tr >= 0)
                        t_cb[tr] = ms;
                }
                MUST(cuda_dev_sync(err, sizeof err));
                qsort(t_cb, TRIALS, sizeof(double), cmp_d);
                cb = bad ? -1 : t_cb[TRIALS / 2];
            }
            double us = t_ours[TRIALS / 2] * 1e3;
            item_sep();
            printf("{\"variant\": \"%s\", \"model\": \"%s\", \"matrix\": \"%s\", \"epilogue\": \"%s\", \"n\": %d, "
                   "\"k\": %d, \"m\": %d, \"tile\": \"%s\", \"split\": %d, \"us\": %.2f, \"gbs\": %.0f, \"of_read_bw\": %.3f, "
                   "\"tflops\": %.1f, ",
                   K->name, s->model, s->name, epi_name(s->epi), n, s->k, m, K->gemm_tile(n, s->k, s->epi), K->gemm_split(n, s->k, s->epi), us,
                   bytes / (us * 1e-6) / 1e9, bytes / (us * 1e-6) / 1e9 / read_gbs, flops / (us * 1e-6) / 1e12);
            if (cb > 0)
                printf("\"cublas_us\": %.2f, \"cublas_tflops\": %.1f, \"vs_cublas\": %.3f}", cb * 1e3,
                       flops / (cb * 1e-3) / 1e12, cb * 1e3 / us);
            else
                printf("\"cublas_us\": null, \"cublas_tflops\": null, \"vs_cublas\": null}");
            fflush(stdout);
        }
        cuda_dev_free(w);
        cuda_dev_free(x);
        cuda_dev_free(y);
        cuda_dev_free(work);
        cuda_dev_free(tickets);
    }
}

/* ------------------------------------------------------------------ attention */

/* n_rows rows of ctx positions each; decode: one query token per row at the last
 * position; prefill: every position of one row a query token. */
static void bench_attn(const struct cuda_kernels *K, int nh, int nkv, int n_rows, int ctx, int prefill, double read_gbs)
{
    const int hd = 128, bs = 16;
    int per_row = (ctx + bs - 1) / bs, nb = per_row * n_rows;
    struct cuda_kv kv = {.n_layers = 1, .n_blocks = nb, .n_kv_heads = nkv, .block_size = bs, .head_dim = hd};
    size_t slab = (size_t)nb * 2 * nkv * bs * hd;
    MUST(cuda_dev_alloc((void **)&kv.slab, slab * 2, err, sizeof err));
    MUST(cuda_dev_fill_bf16(kv.slab, slab, 17, 1.0f, err, sizeof err));
    int n_tok = prefill ? ctx * n_rows : n_rows, bt = cuda_attn_block_tokens(nh / nkv);
    int32_t *pos = malloc(n_tok * 4), *tr = malloc(n_tok * 4), *rt = malloc(n_rows * 4), *tab = malloc(nb * 4);
    int64_t *slots = malloc(n_tok * 8);
    int32_t *qb = malloc((size_t)(n_tok + n_rows) * 8);
    int t = 0, q = 0;
    for (int r = 0; r < n_rows; r++) {
        rt[r] = r * per_row;
        for (int i = 0; i < per_row; i++)
            tab[r * per_row + i] = r * per_row + i;
        int p0 = prefill ? 0 : ctx - 1;
        for (int p = p0, i = 0; p < ctx; p++, i++) {
            if (i % bt == 0) {
                qb[2 * q] = t;
                qb[2 * q + 1] = ctx - p < bt ? ctx - p : bt;
                q++;
            }
            pos[t] = p;
            tr[t] = r;
            slots[t] = (int64_t)tab[r * per_row + p / bs] * bs + p % bs;
            t++;
        }
    }
    void *dpos, *dtr, *drt, *dtab, *dqb, *ds;
    MUST(cuda_dev_alloc(&dpos, n_tok * 4, err, sizeof err));
    MUST(cuda_dev_alloc(&dtr, n_tok * 4, err, sizeof err));
    MUST(cuda_dev_alloc(&drt, n_rows * 4, err, sizeof err));
    MUST(cuda_dev_alloc(&dtab, nb * 4, err, sizeof err));
    MUST(cuda_dev_alloc(&dqb, (size_t)q * 8, err, sizeof err));
    MUST(cuda_dev_alloc(&ds, n_tok * 8, err, sizeof err));
    MUST(cuda_dev_copy(dpos, pos, n_tok * 4, err, sizeof err));
    MUST(cuda_dev_copy(dtr, tr, n_tok * 4, err, sizeof err));
    MUST(cuda_dev_copy(drt, rt, n_rows * 4, err, sizeof err));
    MUST(cuda_dev_copy(dtab, tab, nb * 4, err, sizeof err));
    MUST(cuda_dev_copy(dqb, qb, (size_t)q * 8, err, sizeof err));
    MUST(cuda_dev_copy(ds, slots, n_tok * 8, err, sizeof err));
    struct cuda_attn_batch b = {.n_tok = n_tok, .positions = dpos, .slots = ds, .tok_row = dtr, .row_table = drt,
                                .tables = dtab, .n_qblocks = q, .qblocks = dqb, .max_kv = ctx,
                                .max_qtok = prefill ? (ctx < bt ? ctx : bt) : 1,
                                /* decode: every block one token, the decode walk's when it fits */
                                .n_dec = !prefill && nh / nkv <= CUDA_ATTN_DEC_ROWS ? q : 0};
    float *qd, *out;
    size_t qn = (size_t)n_tok * nh * hd;
    MUST(cuda_dev_alloc((void **)&qd, qn * 4, err, sizeof err));
    MUST(cuda_dev_memset(qd, 0x3c, qn * 4, err, sizeof err)); /* about 0.011 everywhere */
    MUST(cuda_dev_alloc((void **)&out, qn * 2, err, sizeof err));
    size_t wb = K->attn_workspace(n_tok, nh, hd, ctx);
    void *work = NULL;
    if (wb)
        MUST(cuda_dev_alloc(&work, wb, err, sizeof err));
    int *tickets;
    size_t nt = (size_t)q * nkv;
    MUST(cuda_dev_alloc((void **)&tickets, nt * sizeof(int), err, sizeof err));
    MUST(cuda_dev_memset(tickets, 0, nt * sizeof(int), err, sizeof err));
    struct cuda_attention a = {.out_bf16 = (uint16_t *)out, .q = qd, .n_heads = nh, .layer = 0,
                               .scale = (float)(1 / sqrt(128.0)), .kv = kv, .b = &b, .work = work, .work_bytes = wb,
                               .tickets = tickets, .n_tickets = nt};
    double tt[TRIALS];
    int reps = prefill ? 3 : 20;
    for (int trl = -1; trl < TRIALS; trl++) {
        cuda_dev_timer_start(timer);
        for (int r = 0; r < reps; r++)
            MUST(K->attention(&a, NULL, err, sizeof err));
        double ms = cuda_dev_timer_stop(timer) / reps;
        if (trl >= 0)
            tt[trl] = ms;
    }
    MUST(cuda_dev_sync(err, sizeof err));
    qsort(tt, TRIALS, sizeof(double), cmp_d);
    double us = tt[TRIALS / 2] * 1e3;
    double kv_bytes = (double)n_rows * ctx * nkv * hd * 2 * 2;
    double flops = 0;
    for (int p = 0; p < ctx; p++)
        flops += prefill ? 4.0 * hd * nh * (p + 1) : 0;
    flops *= n_rows;
    if (!prefill)
        flops = 4.0 * hd * nh * ctx * n_rows;
    item_sep();
    printf("{\"variant\": \"%s\", \"case\": \"%s\", \"heads\": %d, \"kv_heads\": %d, \"rows\": %d, \"context\": %d, "
           "\"us\": %.1f, \"kv_gbs\": %.0f, \"of_read_bw\": %.3f, \"tflops\": %.2f}",
           K->name, prefill ? "prefill" : "decode", nh, nkv, n_rows, ctx, us, kv_bytes / (us * 1e-6) / 1e9,
           kv_bytes / (us * 1e-6) / 1e9 / read_gbs, flops / (us * 1e-6) / 1e12);
    fflush(stdout);
    free(pos);
    free(tr);
    free(rt);
    free(tab);
    free(slots);
    free(qb);
    cuda_dev_free(tickets);
    cuda_dev_free(dpos);
    cuda_dev_free(dtr);
    cuda_dev_free(drt);
    cuda_dev_free(dtab);
    cuda_dev_free(dqb);
    cuda_dev_free(ds);
    cuda_dev_free(qd);
    cuda_dev_free(out);
    cuda_dev_free(work);
    cuda_dev_free(kv.slab);
}

/* ------------------------------------------------------------------ sampling */

/* One launch of the sampling kernel over `rows` rows of the 151,936-token vocabulary
 * (random logits, one parameter set), against bringing the same rows to page-locked
 * host memory (what sampling on the host needs first). */
static void bench_sample(const struct cuda_kernels *K, int rows, int kind)
{
    static const char *kinds[] = {"greedy",        "t0.8_top_p0.9", "t1_top_k50", "t1_logprobs20",
                                  "t0.7_penalties", "t1",            "qwen3_t0.6_k20_p0.95"};
    const int V = 151936;
    float *h = malloc((size_t)rows * V * sizeof *h);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)rows * V; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 16.0 - 8.0);
    }
    float *d, *work;
    MUST(cuda_dev_alloc((void **)&d, (size_t)rows * V * sizeof *d, err, sizeof err));
    MUST(cuda_dev_alloc((void **)&work, (size_t)rows * cuda_sample_stride(V) * sizeof *work, err, sizeof err));
    MUST(cuda_dev_copy(d, h, (size_t)rows * V * sizeof *h, err, sizeof err));
    struct dev_sample ds;
    MUST(dev_sample_init(&ds, V, rows, err, sizeof err));
    int32_t hist[512];
    for (int i = 0; i < 512; i++)
        hist[i] = (int32_t)((i * 7919) % V);
    for (int r = 0; r < rows; r++) {
        struct sampler_params p;
        sampler_params_default(&p);
        p.seed = (uint64_t)r;
        p.temperature = kind == 0 ? 0.0f : kind == 1 ? 0.8f : kind == 4 ? 0.7f : kind == 6 ? 0.6f : 1.0f;
        p.top_p = kind == 1 ? 0.9f : kind == 6 ? 0.95f : 1.0f;
        p.top_k = kind == 2 ? 50 : kind == 6 ? 20 : 0;
        p.logprobs = kind == 3;
        p.n_logprobs = kind == 3 ? 20 : 0;
        p.repetition_penalty = kind == 4 ? 1.1f : 1.0f;
        p.frequency_penalty = kind == 4 ? 0.5f : 0.0f;
        int idx;
        MUST(dev_sample_add(&ds, &p, r, hist, 256, 256, 0, 3, &idx, err, sizeof err));
    }
    struct dsample_row *dr;
    struct dsample_mod *dm;
    float *db;
    struct dsample_out *dout;
    MUST(cuda_dev_alloc((void **)&dr, (size_t)rows * sizeof *dr, err, sizeof err));
    MUST(cuda_dev_alloc((void **)&dm, (size_t)(ds.n_mods + 1) * sizeof *dm, err, sizeof err));
    MUST(cuda_dev_alloc((void **)&db, 64, err, sizeof err));
    MUST(cuda_dev_alloc((void **)&dout, (size_t)rows * sizeof *dout, err, sizeof err));
    MUST(cuda_dev_copy(dr, ds.rows, (size_t)rows * sizeof *dr, err, sizeof err));
    if (ds.n_mods)
        MUST(cuda_dev_copy(dm, ds.mods, (size_t)ds.n_mods * sizeof *dm, err, sizeof err));
    struct cuda_sample a = {.logits = d, .vocab = V, .n_rows = rows, .rows = dr, .mods = dm, .n_mods = ds.n_mods,
                            .biases = db, .work = work, .out = dout};
    cuda_sample_hints(&a, ds.rows); /* the slices' kernels as the backend asks for them */
    double t[TRIALS], c[TRIALS];
    void *pinned = cuda_dev_host_alloc((size_t)rows * V * sizeof(float));
    for (int tr = -1; tr < TRIALS; tr++) {
        cuda_dev_timer_start(timer);
        MUST(K->sample(&a, NULL, err, sizeof err));
        double ms = cuda_dev_timer_stop(timer);
        cuda_dev_timer_start(timer);
        if (pinned)
            MUST(cuda_dev_copy(pinned, d, (size_t)rows * V * sizeof(float), err, sizeof err));
        double cms = cuda_dev_timer_stop(timer);
        if (tr >= 0) {
            t[tr] = ms;
            c[tr] = cms;
        }
    }
    qsort(t, TRIALS, sizeof(double), cmp_d);
    qsort(c, TRIALS, sizeof(double), cmp_d);
    item_sep();
    printf("{\"variant\": \"%s\", \"params\": \"%s\", \"rows\": %d, \"us\": %.1f, \"us_per_row\": %.2f, "
           "\"copy_to_host_us\": %.1f}",
           K->name, kinds[kind], rows, t[TRIALS / 2] * 1e3, t[TRIALS / 2] * 1e3 / rows, c[TRIALS / 2] * 1e3);
    fflush(stdout);
    cuda_dev_host_free(pinned);
    dev_sample_free(&ds);
    free(h);
    cuda_dev_free(d);
    cuda_dev_free(work);
    cuda_dev_free(dr);
    cuda_dev_free(dm);
    cuda_dev_free(db);
    cuda_dev_free(dout);
}

/* Kernel variant v (sm90a, sm80) prepared for this device, or NULL: not asked for
 * (variant names another, "all": both) or not runnable here (said on stderr). */
static const struct cuda_kernels *bench_variant(const struct cuda_dev_info *info, int v, const char *variant)
{
    static const char *names[] = {"sm90a", "sm80"};
    if (strcmp(variant, "all") && strcmp(variant, names[v]))
        return NULL;
    const struct cuda_kernels *K = cuda_kernels_pick(names[v], info->major, info->minor, err, sizeof err);
    if (!K) {
        fprintf(stderr, "cuda_bench: %s\n", err);
        return NULL;
    }
    MUST(K->prepare(info->sm_count, err, sizeof err));
    return K;
}

int main(int argc, char **argv)
{
    const char *variant = "all", *only_model = NULL; /* --model: that model's GEMM shapes alone */
    int only_m = 0, gemm_only = 0, ceilings_only = 0, sample_only = 0, attn_only = 0;
    int one_attn[4] = {0}; /* --attn H,KV,ROWS,CTX: that decode case alone (profilers) */
    int one_prefill = 0;   /* --attn-prefill H,KV,CTX[,PROMPTS]: the prefill of PROMPTS (1) prompts of CTX tokens */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--variant") && i + 1 < argc)
            variant = argv[++i];
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
            only_m = atoi(argv[++i]);
            if (only_m < 1 || only_m > 4096) {
                fprintf(stderr, "cuda_bench: --m takes 1..4096\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            only_model = argv[++i];
            bool known = false;
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                known |= !strcmp(only_model, shapes[si].model);
            if (!known) {
                fprintf(stderr, "cuda_bench: --model takes one of:");
                for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                    if (si == 0 || strcmp(shapes[si].model, shapes[si - 1].model))
                        fprintf(stderr, " %s", shapes[si].model);
                fprintf(stderr, "\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--gemm-only"))
            gemm_only = 1;
        else if (!strcmp(argv[i], "--ceilings-only"))
            ceilings_only = 1;
        else if (!strcmp(argv[i], "--sample-only"))
            sample_only = 1;
        else if (!strcmp(argv[i], "--attn-only"))
            attn_only = 1;
        else if (!strcmp(argv[i], "--attn") && i + 1 < argc) {
            int *a = one_attn;
            if (sscanf(argv[++i], "%d,%d,%d,%d", &a[0], &a[1], &a[2], &a[3]) != 4 || a[1] < 1 || a[0] < a[1] ||
                a[0] % a[1] || a[2] < 1 || a[2] > 4096 || a[3] < 1 || a[3] > 131072) {
                fprintf(stderr, "cuda_bench: --attn takes HEADS,KV_HEADS,ROWS,CONTEXT (heads a multiple of kv "
                                "heads; rows 1..4096, context 1..131072)\n");
                return 2;
            }
            attn_only = 1;
        } else if (!strcmp(argv[i], "--attn-prefill") && i + 1 < argc) {
            int *a = one_attn;
            a[2] = 1; /* prompts: a mixed step's several (`4`: the 256-concurrent workload's 512-token ones) */
            int n = sscanf(argv[++i], "%d,%d,%d,%d", &a[0], &a[1], &a[3], &a[2]);
            if ((n != 3 && n != 4) || a[1] < 1 || a[0] < a[1] || a[0] % a[1] || a[3] < 1 || a[3] > 32768 || a[2] < 1 ||
                a[2] > 64) {
                fprintf(stderr, "cuda_bench: --attn-prefill takes HEADS,KV_HEADS,CONTEXT[,PROMPTS] (heads a multiple "
                                "of kv heads; context 1..32768; prompts 1..64)\n");
                return 2;
            }
            attn_only = one_prefill = 1;
        } else {
            fprintf(stderr, "usage: cuda_bench [--variant sm90a|sm80|all] [--m M] [--model NAME] [--gemm-only | --ceilings-only | "
                            "--sample-only | --attn-only | --attn H,KV,ROWS,CTX | --attn-prefill H,KV,CTX[,PROMPTS]]\n");
            return 2;
        }
    }
    struct cuda_dev_info info;
    if (cuda_dev_init(0, &info, err, sizeof err) != HR_OK) {
        fprintf(stderr, "cuda_bench: %s\n", err);
        return 1;
    }
    MUST(cuda_dev_timer_init(&timer, err, sizeof err));
    cublas_open();
    double read_gbs = 0, copy_gbs = 0, peak = -1;
    MUST(cuda_dev_read_gbs((size_t)4 << 30, 9, &read_gbs, err, sizeof err));
    MUST(cuda_dev_copy_gbs((size_t)2 << 30, 9, &copy_gbs, err, sizeof err));
    if (cublas) {
        const int n = 8192;
        uint16_t *a, *bb, *c;
        MUST(cuda_dev_alloc((void **)&a, (size_t)n * n * 2, err, sizeof err));
        MUST(cuda_dev_alloc((void **)&bb, (size_t)n * n * 2, err, sizeof err));
        MUST(cuda_dev_alloc((void **)&c, (size_t)n * n * 2, err, sizeof err));
        MUST(cuda_dev_fill_bf16(a, (size_t)n * n, 1, 1.0f, err, sizeof err));
        MUST(cuda_dev_fill_bf16(bb, (size_t)n * n, 2, 1.0f, err, sizeof err));
        double t[TRIALS];
        for (int tr = -2; tr < TRIALS; tr++) {
            cuda_dev_timer_start(timer);
            for (int r = 0; r < 5; r++)
                cublas_run(c, R_16BF, a, bb, n, n, n, 0.0f);
            double ms = cuda_dev_timer_stop(timer) / 5;
            if (tr >= 0)
                t[tr] = ms;
        }
        qsort(t, TRIALS, sizeof(double), cmp_d);
        peak = 2.0 * n * n * n / (t[TRIALS / 2] * 1e-3) / 1e12;
        cuda_dev_free(a);
        cuda_dev_free(bb);
        cuda_dev_free(c);
    }
    printf("{\n  \"device\": {\"name\": \"%s\", \"compute\": \"%d.%d\", \"sms\": %d, \"runtime\": %d, \"driver\": %d},\n",
           info.name, info.major, info.minor, info.sm_count, info.runtime_version, info.driver_version);
    printf("  \"ceilings\": {\"read_gbs\": %.0f, \"copy_gbs\": %.0f, \"cublas_bf16_tflops_8192\": ", read_gbs, copy_gbs);
    if (peak > 0)
        printf("%.1f}", peak);
    else
        printf("null}");
    if (ceilings_only) {
        printf("\n}\n");
        return 0;
    }
    printf(",\n");
    printf("  \"sampling\": [");
    for (int v = 0; v < 2 && !gemm_only; v++) {
        const struct cuda_kernels *K = bench_variant(&info, v, variant);
        if (!K)
            continue;
        for (int kind = 0; kind < 7; kind++)
            for (int rows = 1; rows <= 256; rows *= 16)
                bench_sample(K, rows, kind);
    }
    printf("\n  ],\n");
    first_item = 1;
    if (sample_only) {
        printf("  \"gemm\": [],\n  \"attention\": []\n}\n");
        return 0;
    }
    printf("  \"gemm\": [");
    for (int v = 0; v < 2 && !attn_only; v++) {
        const struct cuda_kernels *K = bench_variant(&info, v, variant);
        if (K)
            bench_gemm(K, read_gbs, only_m, only_model);
    }
    printf("\n  ],\n  \"attention\": [");
    first_item = 1;
    for (int v = 0; v < 2 && !gemm_only; v++) {
        const struct cuda_kernels *K = bench_variant(&info, v, variant);
        if (!K)
            continue;
        if (one_attn[0]) {
            bench_attn(K, one_attn[0], one_attn[1], one_attn[2], one_attn[3], one_prefill, read_gbs);
            continue;
        }
        bench_attn(K, 32, 8, 1, 4096, 0, read_gbs);
        bench_attn(K, 32, 8, 64, 1024, 0, read_gbs);
        bench_attn(K, 32, 8, 256, 2048, 0, read_gbs);
        bench_attn(K, 16, 8, 1, 4096, 0, read_gbs);
        /* the 256-concurrent workloads' decode steps at their middle context (576) */
        bench_attn(K, 16, 8, 192, 576, 0, read_gbs);
        bench_attn(K, 32, 8, 192, 576, 0, read_gbs);
        bench_attn(K, 32, 4, 64, 576, 0, read_gbs);
        bench_attn(K, 32, 8, 1, 2048, 1, read_gbs);
        bench_attn(K, 16, 8, 1, 2048, 1, read_gbs);
    }
    printf("\n  ]\n}\n");
    cuda_dev_timer_free(timer);
    return 0;
}
