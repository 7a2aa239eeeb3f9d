/* The CPU backend: splits each kernel into tasks over output rows/columns (never
 * over a reduction) and runs them on the persistent thread pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "model/dtype.h"

static struct cpu_backend *cpu_of(struct backend *be) { return be->impl; }

/* ------------------------------------------------------------------ matmul */

/* Output tiles per task: the split only decides which thread computes an element,
 * never how it is computed. */
#define MATMUL_NB 64
#define MATMUL_MB 64

struct matmul_task {
    const struct cpu_variant *v;
    float *y;
    const float *x;
    const struct weights_mat *w;
    int m, n, k;
    int n_col_tiles;
};

static void matmul_run(void *ctx, int t)
{
    const struct matmul_task *c = ctx;
    int i0 = (t / c->n_col_tiles) * MATMUL_MB, j0 = (t % c->n_col_tiles) * MATMUL_NB;
    int mr = c->m - i0 < MATMUL_MB ? c->m - i0 : MATMUL_MB;
    int nr = c->n - j0 < MATMUL_NB ? c->n - j0 : MATMUL_NB;
    float *y = c->y + (int64_t)i0 * c->n + j0;
    const float *x = c->x + (int64_t)i0 * c->k;
    switch (c->w->dtype) {
    case SAFETENSORS_DTYPE_F32:
        c->v->gemm_f32(y, c->n, x, c->k, (const float *)c->w->data + (int64_t)j0 * c->k, c->k, mr, nr, c->k);
        break;
    case SAFETENSORS_DTYPE_BF16:
        c->v->gemm_bf16(y, c->n, x, c->k, (const uint16_t *)c->w->data + (int64_t)j0 * c->k, c->k, mr, nr, c->k);
        break;
    case SAFETENSORS_DTYPE_F16:
        c->v->gemm_f16(y, c->n, x, c->k, (const uint16_t *)c->w->data + (int64_t)j0 * c->k, c->k, mr, nr, c->k);
        break;
    default:
        HR_ASSERT(!"matmul: weights dtype was checked at load");
    }
}

static void cpu_matmul(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct matmul_task c = {
        .v = cpu_of(be)->v, .y = y, .x = x, .w = w, .m = m, .n = (int)w->rows, .k = (int)w->cols,
    };
    c.n_col_tiles = (c.n + MATMUL_NB - 1) / MATMUL_NB;
    int n_row_tiles = (m + MATMUL_MB - 1) / MATMUL_MB;
    threadpool_run(&cpu_of(be)->pool, matmul_run, &c, n_row_tiles * c.n_col_tiles);
}

/* ------------------------------------------------------------------ rmsnorm */

struct rmsnorm_task {
    const struct cpu_variant *v;
    float *y;
    const float *x, *w;
    int rows, dim;
    float eps;
};

#define ROWS_PER_TASK 16

static void rmsnorm_run(void *ctx, int t)
{
    const struct rmsnorm_task *c = ctx;
    int r1 = (t + 1) * ROWS_PER_TASK < c->rows ? (t + 1) * ROWS_PER_TASK : c->rows;
    for (int r = t * ROWS_PER_TASK; r < r1; r++) {
        const float *x = c->x + (int64_t)r * c->dim;
        float *y = c->y + (int64_t)r * c->dim;
        float ss = cpu_dot_f32(c->v, x, x, c->dim);
        float inv = 1.0f / sqrtf(ss / (float)c->dim + c->eps);
        for (int i = 0; i < c->dim; i++)
            y[i] = c->w[i] * (x[i] * inv);
    }
}

static void cpu_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    struct rmsnorm_task c = {.v = cpu_of(be)->v, .y = y, .x = x, .w = w, .rows = rows, .dim = dim, .eps = eps};
    threadpool_run(&cpu_of(be)->pool, rmsnorm_run, &c, (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
}

/* ------------------------------------------------------------------ rope */

struct rope_task {
    float *x;
    const float *cs;
    int n_heads, head_dim;
};

static void rope_run(void *ctx, int t)
{
    const struct rope_task *c = ctx;
    int half = c->head_dim / 2;
    const float *cs = c->cs + (int64_t)t * half * 2;
    for (int h = 0; h < c->n_heads; h++) {
        float *x = c->x + ((int64_t)t * c->n_heads + h) * c->head_dim;
        for (int i = 0; i < half; i++) {
            float x1 = x[i], x2 = x[i + half], co = cs[2 * i], si = cs[2 * i + 1];
            x[i] = x1 * co - x2 * si;
            x[i + half] = x2 * co + x1 * si;
        }
    }
}

static void cpu_rope(struct backend *be, float *x, int n_tok, int n_heads, int head_dim, const float *cos_sin)
{
    struct rope_task c = {.x = x, .cs = cos_sin, .n_heads = n_heads, .head_dim = head_dim};
    threadpool_run(&cpu_of(be)->pool, rope_run, &c, n_tok);
}

/* ------------------------------------------------------------------ embed */

static void cpu_embed(struct backend *be, float *out, const struct weights_mat *emb, const int32_t *tokens, int n_tok)
{
    (void)be;
    int64_t d = emb->cols;
    for (int t = 0; t < n_tok; t++) {
        float *o = out + (int64_t)t * d;
        int64_t off = (int64_t)tokens[t] * d;
        switch (emb->dtype) {
        case SAFETENSORS_DTYPE_F32:
            memcpy(o, (const float *)emb->data + off, (size_t)d * sizeof *o);
            break;
        case SAFETENSORS_DTYPE_BF16:
            dtype_bf16_to_f32_n(o, (const uint16_t *)emb->data + off, (size_t)d);
            break;
        case SAFETENSORS_DTYPE_F16:
            dtype_f16_to_f32_n(o, (const uint16_t *)emb->data + off, (size_t)d);
            break;
        default:
            HR_ASSERT(!"embed: dtype was checked at load");
        }
    }
}

/* ------------------------------------------------------------------ elementwise */

struct ew_task {
    float *out;
    const float *a, *b;
    int64_t n;
};

#define EW_CHUNK 16384

static void silu_mul_run(void *ctx, int t)
{
    const struct ew_task *c = ctx;
    int64_t i1 = (int64_t)(t + 1) * EW_CHUNK < c->n ? (int64_t)(t + 1) * EW_CHUNK : c->n;
    for (int64_t i = (int64_t)t * EW_CHUNK; i < i1; i++) {
        float g = c->a[i];
        c->out[i] = g / (1.0f + expf(-g)) * c->b[i];
    }
}

static void cpu_silu_mul(struct backend *be, float *out, const float *g, const float *u, int64_t n)
{
    struct ew_task c = {.out = out, .a = g, .b = u, .n = n};
    threadpool_run(&cpu_of(be)->pool, silu_mul_run, &c, (int)((n + EW_CHUNK - 1) / EW_CHUNK));
}

static void cpu_add(struct backend *be, float *y, const float *x, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ------------------------------------------------------------------ life cycle */

static void cpu_free(struct backend *be)
{
    struct cpu_backend *c = cpu_of(be);
    if (!c)
        return;
    threadpool_free(&c->pool);
    free(c);
    be->impl = NULL;
}

static const struct backend_ops cpu_ops = {
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .embed = cpu_embed,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .free = cpu_free,
};

enum hr_status backend_cpu_init(struct backend *be, int n_threads, const char *variant, char *err, size_t errlen)
{
    memset(be, 0, sizeof *be);
    const struct cpu_variant *v;
    enum hr_status st = cpu_variant_pick(variant, &v, err, errlen);
    if (st != HR_OK)
        return st;
    struct cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cpu backend: out of memory");
    st = threadpool_init(&c->pool, n_threads, err, errlen);
    if (st != HR_OK) {
        free(c);
        return st;
    }
    c->v = v;
    be->ops = &cpu_ops;
    be->impl = c;
    be->n_threads = n_threads;
    snprintf(be->name, sizeof be->name, "cpu-%s", v->name);
    return HR_OK;
}

void backend_free(struct backend *be)
{
    if (be && be->ops && be->impl)
        be->ops->free(be);
}
