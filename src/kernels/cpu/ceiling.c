/* Measures the machine's ceilings with a thread pool of the kernels' size: each
 * figure is total work over wall time for many small slices handed out dynamically;
 * compute rates are the best of three runs, the read bandwidth the median of seven. */
#define _GNU_SOURCE
#include "kernels/cpu/ceiling.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"

#define CEIL_SLICES_PER_THREAD 8
#define CEIL_READ_BYTES (512ull << 20)
#define CEIL_READ_SLICE (4ull << 20)

enum ceil_kind { CEIL_FMA512, CEIL_FMA256, CEIL_DOT, CEIL_READ, CEIL_FILL };

struct ceil_job {
    enum ceil_kind kind;
    long iters;  /* per slice */
    float *buf;  /* [CEIL_READ_BYTES / 4] */
    volatile float sink[64];
};

static double ceil_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void ceil_run(void *ctx, int t, int thread)
{
    struct ceil_job *j = ctx;
    float r = 0;
    size_t per = CEIL_READ_SLICE / sizeof(float);
    switch (j->kind) {
    case CEIL_FMA512: r = cpu_ceiling_fma_avx512(j->iters); break;
    case CEIL_FMA256: r = cpu_ceiling_fma_avx2(j->iters); break;
    case CEIL_DOT: r = cpu_ceiling_dot_avx512bf16(j->iters); break;
    case CEIL_READ: r = cpu_ceiling_read_avx512(j->buf + (size_t)t * per, (long)per); break;
    case CEIL_FILL:
        for (size_t i = 0; i < per; i++)
            j->buf[(size_t)t * per + i] = (float)(i & 1023) * 1e-3f;
        break;
    }
    j->sink[thread & 63] += r;
}

/* Seconds for one run of n_tasks tasks. */
static double ceil_time(struct threadpool *tp, struct ceil_job *j, int n_tasks)
{
    double t = ceil_now();
    threadpool_run(tp, ceil_run, j, n_tasks);
    return ceil_now() - t;
}

/* flops per iteration of one slice's loop */
static double ceil_compute(struct threadpool *tp, enum ceil_kind kind, double flops_per_iter)
{
    struct ceil_job j = {.kind = kind, .iters = 1000};
    int n_tasks = tp->n_threads * CEIL_SLICES_PER_THREAD;
    /* calibrate to about 0.1 s per run */
    for (;;) {
        double s = ceil_time(tp, &j, n_tasks);
        if (s > 0.02 || j.iters > (1l << 30)) {
            j.iters = (long)((double)j.iters * 0.1 / (s > 1e-6 ? s : 1e-6)) + 1;
            break;
        }
        j.iters *= 4;
    }
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double s = ceil_time(tp, &j, n_tasks);
        best = s < best ? s : best;
    }
    return flops_per_iter * (double)j.iters * n_tasks / best * 1e-9;
}

static bool ceil_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static bool ceil_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static bool ceil_has_bf16(void)
{
    unsigned a, b, c, d;
    return ceil_has_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

enum hr_status cpu_ceilings_measure(int n_threads, struct cpu_ceilings *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct threadpool tp;
    enum hr_status st = threadpool_init(&tp, n_threads, err, errlen);
    if (st != HR_OK)
        return st;
    out->n_threads = n_threads;
    out->has_avx512 = ceil_has_avx512();
    out->has_bf16 = ceil_has_bf16();
    if (out->has_avx512)
        out->fma_f32_gflops = ceil_compute(&tp, CEIL_FMA512, 12 * 16 * 2);
    else if (ceil_has_avx2())
        out->fma_f32_gflops = ceil_compute(&tp, CEIL_FMA256, 12 * 8 * 2);
    if (out->has_bf16)
        out->dot_bf16_gflops = ceil_compute(&tp, CEIL_DOT, 12 * 32 * 2);
    if (out->has_avx512) {
        struct ceil_job j = {.kind = CEIL_FILL};
        j.buf = aligned_alloc(64, CEIL_READ_BYTES);
        if (!j.buf) {
            threadpool_free(&tp);
            return hr_err(err, errlen, HR_ERR_NOMEM, "ceilings: no memory for the bandwidth buffer");
        }
        int n_slices = (int)(CEIL_READ_BYTES / CEIL_READ_SLICE);
        ceil_time(&tp, &j, n_slices);
        /* the median of seven passes: this machine's bandwidth wanders (other
         * tenants), and a lucky 20 ms is not what a step of many sees */
        j.kind = CEIL_READ;
        double t[7];
        for (int r = 0; r < 7; r++) {
            double s = ceil_time(&tp, &j, n_slices);
            int i = r;
            for (; i > 0 && t[i - 1] > s; i--)
                t[i] = t[i - 1];
            t[i] = s;
        }
        out->read_gbs = (double)CEIL_READ_BYTES / t[3] * 1e-9;
        free(j.buf);
    }
    threadpool_free(&tp);
    return HR_OK;
}
