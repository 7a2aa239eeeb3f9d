/* The CPU backend: splits each kernel into tasks over output rows/columns (never
 * over a reduction) and runs them on the persistent thread pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "kernels/cpu/cpu.h"
#include "model/dtype.h"

static struct cpu_backend *cpu_of(struct backend *be) { return be->impl; }

/* ------------------------------------------------------------------ matmul */

/* The split only decides which thread computes an element, never how it is computed
 * (K is never split).  Small m (decode): every task takes all rows and a block of
 * columns, so each weight streams from memory once per step.  Large m (prefill):
 * blocks of MM_MB rows x MM_NB columns, so a task's weights stay in L2 while its
 * rows pass. */
#define MM_SMALL_M 64
#define MM_MB 48
#define MM_NB 64
#define MM_NB_MAX 512
/* Small blocks: a thread that finishes its own run early takes the rest of another's
 * a block at a time, so the last block bounds how long it waits (two cores here run
 * a few percent apart; with 8 blocks per thread the QKV launch lost ~45 us a layer). */
#define MM_BLOCKS_PER_THREAD 32
#define MM_CHUNK 64 /* columns per epilogue chunk */
/* The bf16 activations' rows are padded by 64 bytes: with k = 2048 they would be 4 KiB
 * apart, and the six rows a tile reads would share one L1 set (156 -> 218 GFLOP/s
 * for such a tile once padded). */
#define MM_XB_PAD 32

enum mm_epilogue {
    MM_STORE,  /* y = xW^T */
    MM_ADD,    /* y += xW^T */
    MM_SWIGLU, /* y = silu(x gate^T) * (x up^T) */
};

/* One launch: segments, each a matrix applied to some rows of x.  Either n_seg
 * matrices over the same m rows (row0 == NULL; outputs ys[s]), or groups of rows
 * [row0[s], row0[s + 1]) each with its own matrix (outputs: the same rows of y). */
struct mm_plan {
    const struct cpu_variant *v;
    const float *x;                       /* [rows, k] */
    const uint16_t *xb;                   /* [rows, k + MM_XB_PAD] x rounded to bf16, or NULL */
    int f32_only;                         /* compute f32 even in a compute-bf16 variant */
    int k, nb;
    enum mm_epilogue epi;
    int n_seg;
    int m;                                /* rows of every segment (row0 == NULL) */
    const int *row0;                      /* [n_seg + 1] or NULL */
    float *const *ys;                     /* [n_seg] (row0 == NULL) */
    float *y;                             /* [rows, n] (row0 != NULL) */
    const struct weights_mat *const *w;   /* [n_seg] (the gate for MM_SWIGLU) */
    const struct weights_mat *const *w2;  /* [n_seg] up (MM_SWIGLU) */
};

struct mm_seg {
    int r0, m, mb, tasks;
};

/* Blocks of one launch in contiguous runs, one run per thread: a thread goes through
 * its own run in order, so the weights it prefetches past the end of a block are the
 * next block's, then helps with the other runs.  Who computes a block changes no bit. */
#define MM_RUNS_MAX 64

struct mm_runs {
    const struct mm_plan *p;
    int n_runs;
    int end[MM_RUNS_MAX];
    atomic_int next[MM_RUNS_MAX];
};

static struct mm_seg mm_segment(const struct mm_plan *p, int s)
{
    struct mm_seg g;
    g.r0 = p->row0 ? p->row0[s] : 0;
    g.m = p->row0 ? p->row0[s + 1] - p->row0[s] : p->m;
    g.mb = g.m <= MM_SMALL_M ? g.m : MM_MB;
    int n = (int)p->w[s]->rows;
    g.tasks = g.m > 0 ? (g.m + g.mb - 1) / g.mb * ((n + p->nb - 1) / p->nb) : 0;
    return g;
}

/* y[mr, nc] (row stride ldy) = rows i0.. of x times columns j0.. of w. */
static void mm_gemm(const struct mm_plan *p, const struct weights_mat *w, float *y, int64_t ldy, int i0, int mr,
                    int j0, int nc)
{
    int64_t k = p->k;
    const float *x = p->x + i0 * k;
    switch (w->dtype) {
    case SAFETENSORS_DTYPE_F32:
        p->v->gemm_f32(y, ldy, x, k, (const float *)w->data + j0 * k, k, mr, nc, (int)k);
        break;
    case SAFETENSORS_DTYPE_BF16:
        if (p->xb)
            p->v->gemm_bb(y, ldy, p->xb + i0 * (k + MM_XB_PAD), k + MM_XB_PAD, (const uint16_t *)w->data + j0 * k, k,
                          mr, nc, (int)k);
        else
            p->v->gemm_bf16(y, ldy, x, k, (const uint16_t *)w->data + j0 * k, k, mr, nc, (int)k);
        break;
    case SAFETENSORS_DTYPE_F16:
        p->v->gemm_f16(y, ldy, x, k, (const uint16_t *)w->data + j0 * k, k, mr, nc, (int)k);
        break;
    default:
        HR_ASSERT(!"matmul: weights dtype was checked at load");
    }
}

static void mm_run(void *ctx, int t, int thread)
{
    (void)thread;
    const struct mm_plan *p = ctx;
    int s = 0;
    struct mm_seg g = mm_segment(p, 0);
    while (t >= g.tasks) {
        t -= g.tasks;
        g = mm_segment(p, ++s);
    }
    const struct weights_mat *w = p->w[s];
    int n = (int)w->rows, n_cb = (n + p->nb - 1) / p->nb;
    int i0 = g.r0 + (t / n_cb) * g.mb, j0 = (t % n_cb) * p->nb;
    int mr = g.r0 + g.m - i0 < g.mb ? g.r0 + g.m - i0 : g.mb;
    int nc = n - j0 < p->nb ? n - j0 : p->nb;
    int64_t ldy = n;
    float *y = p->row0 ? p->y + i0 * ldy + j0 : p->ys[s] + (i0 - g.r0) * ldy + j0;
    if (p->epi == MM_STORE) {
        mm_gemm(p, w, y, ldy, i0, mr, j0, nc);
        return;
    }
    /* The epilogues work on chunks small enough for the stack and L1. */
    float a[MM_SMALL_M * MM_CHUNK], b[MM_SMALL_M * MM_CHUNK];
    for (int c0 = 0; c0 < nc; c0 += MM_CHUNK) {
        int cc = nc - c0 < MM_CHUNK ? nc - c0 : MM_CHUNK;
        for (int r0 = 0; r0 < mr; r0 += MM_SMALL_M) {
            int rr = mr - r0 < MM_SMALL_M ? mr - r0 : MM_SMALL_M;
            mm_gemm(p, w, a, cc, i0 + r0, rr, j0 + c0, cc);
            if (p->epi == MM_SWIGLU)
                mm_gemm(p, p->w2[s], b, cc, i0 + r0, rr, j0 + c0, cc);
            for (int i = 0; i < rr; i++) {
                float *yr = y + (r0 + i) * ldy + c0;
                if (p->epi == MM_ADD) {
                    cpu_add_f32(p->v, yr, a + i * cc, cc);
                } else {
                    p->v->swiglu(yr, a + i * cc, b + i * cc, cc);
                }
            }
        }
    }
}

/* A thread's own run of blocks first, then what is left of the others'. */
static void mm_run_runs(void *ctx, int task, int thread)
{
    (void)task;
    struct mm_runs *rs = ctx;
    for (int i = 0; i < rs->n_runs; i++) {
        int r = (thread + i) % rs->n_runs;
        for (;;) {
            int t = atomic_fetch_add_explicit(&rs->next[r], 1, memory_order_relaxed);
            if (t >= rs->end[r])
                break;
            mm_run((void *)rs->p, t, thread);
        }
    }
}

struct mm_cvt {
    const struct cpu_variant *v;
    uint16_t *dst;    /* [rows, k + MM_XB_PAD] */
    const float *src; /* [rows, k] */
    int rows, k, per_task;
};

static void mm_cvt_run(void *ctx, int t, int thread)
{
    (void)thread;
    const struct mm_cvt *c = ctx;
    int r1 = (t + 1) * c->per_task < c->rows ? (t + 1) * c->per_task : c->rows;
    for (int r = t * c->per_task; r < r1; r++)
        c->v->to_bf16(c->dst + (int64_t)r * (c->k + MM_XB_PAD), c->src + (int64_t)r * c->k, c->k);
}

static enum hr_status cpu_reserve_xb(struct backend *be, int max_rows, int max_k, char *err, size_t errlen)
{
    struct cpu_backend *c = cpu_of(be);
    if (!c->v->gemm_bb || max_rows < 1 || max_k < 1)
        return HR_OK;
    size_t need = (size_t)max_rows * ((size_t)max_k + MM_XB_PAD);
    if (need <= c->xb_cap)
        return HR_OK;
    uint16_t *p = realloc(c->xb, need * sizeof *p);
    if (!p)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cpu backend: no memory for %d x %d bf16 activations", max_rows,
                      max_k);
    c->xb = p;
    c->xb_cap = need;
    return HR_OK;
}

static void mm_launch(struct backend *be, struct mm_plan *p)
{
    struct cpu_backend *c = cpu_of(be);
    int k = p->k, rows = p->row0 ? p->row0[p->n_seg] : p->m;
    p->v = c->v;
    p->xb = NULL;
    int any_bf16 = 0, max_m = 0;
    int64_t cols = 0;
    for (int s = 0; s < p->n_seg; s++) {
        const struct weights_mat *w = p->w[s];
        HR_ASSERT(w->cols == k && (!p->w2 || (p->w2[s]->rows == w->rows && p->w2[s]->cols == k)));
        any_bf16 |= w->dtype == SAFETENSORS_DTYPE_BF16;
        int m = p->row0 ? p->row0[s + 1] - p->row0[s] : p->m;
        max_m = m > max_m ? m : max_m;
        cols += w->rows;
    }
    if (rows < 1)
        return;
    if (c->v->gemm_bb && any_bf16 && !p->f32_only) {
        /* compute bf16: round x once for every matrix of the launch */
        char err[HR_ERRLEN];
        enum hr_status st = cpu_reserve_xb(be, rows, k, err, sizeof err);
        HR_ASSERT(st == HR_OK); /* sized at start-up by reserve */
        /* about 64K elements a task, and every thread a share (x was just written by
         * all of them: one thread alone waits on the others' caches) */
        int per = (1 << 16) / k > 1 ? (1 << 16) / k : 1;
        int even = (rows + c->pool.n_threads - 1) / c->pool.n_threads;
        per = per < even ? per : even;
        struct mm_cvt cv = {.v = c->v, .dst = c->xb, .src = p->x, .rows = rows, .k = k, .per_task = per};
        threadpool_run(&c->pool, mm_cvt_run, &cv, (rows + per - 1) / per);
        p->xb = c->xb;
    }
    if (max_m <= MM_SMALL_M) {
        /* about MM_BLOCKS_PER_THREAD blocks per thread, in whole 8-column tiles */
        int nt = c->pool.n_threads;
        int64_t nb = (cols + MM_BLOCKS_PER_THREAD * nt - 1) / (MM_BLOCKS_PER_THREAD * nt);
        nb = (nb + 7) / 8 * 8;
        p->nb = (int)(nb < 32 ? 32 : nb > MM_NB_MAX ? MM_NB_MAX : nb);
    } else {
        p->nb = MM_NB;
    }
    int tasks = 0;
    for (int s = 0; s < p->n_seg; s++)
        tasks += mm_segment(p, s).tasks;
    if (max_m <= MM_SMALL_M && c->pool.n_threads > 1 && tasks > 1) {
        /* streaming weights: each thread's blocks in one run (cold starts at every
         * block cost o_proj at m = 32 about 5%, measured) */
        struct mm_runs rs;
        rs.p = p;
        rs.n_runs = c->pool.n_threads < MM_RUNS_MAX ? c->pool.n_threads : MM_RUNS_MAX;
        if (rs.n_runs > tasks)
            rs.n_runs = tasks;
        for (int r = 0; r < rs.n_runs; r++) {
            atomic_init(&rs.next[r], (int)((int64_t)tasks * r / rs.n_runs));
            rs.end[r] = (int)((int64_t)tasks * (r + 1) / rs.n_runs);
        }
        threadpool_run(&c->pool, mm_run_runs, &rs, rs.n_runs);
        return;
    }
    threadpool_run(&c->pool, mm_run, p, tasks);
}

static void cpu_matmul(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct mm_plan p = {.x = x, .m = m, .k = (int)w->cols, .epi = MM_STORE, .n_seg = 1, .ys = &y, .w = &w};
    mm_launch(be, &p);
}

void cpu_matmul_f32(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct mm_plan p = {.x = x, .m = m, .k = (int)w->cols, .epi = MM_STORE, .n_seg = 1, .ys = &y, .w = &w,
                        .f32_only = 1};
    mm_launch(be, &p);
}

static void cpu_matmul_add(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct mm_plan p = {.x = x, .m = m, .k = (int)w->cols, .epi = MM_ADD, .n_seg = 1, .ys = &y, .w = &w};
    mm_launch(be, &p);
}

static void cpu_matmul_multi(struct backend *be, int n_mats, float *const *ys, const float *x, int m,
                             const struct weights_mat *const *ws)
{
    HR_ASSERT(n_mats >= 1);
    struct mm_plan p = {.x = x, .m = m, .k = (int)ws[0]->cols, .epi = MM_STORE, .n_seg = n_mats, .ys = ys, .w = ws};
    mm_launch(be, &p);
}

static void cpu_matmul_swiglu(struct backend *be, float *out, const float *x, int m, const struct weights_mat *gate,
                              const struct weights_mat *up)
{
    struct mm_plan p = {.x = x, .m = m, .k = (int)gate->cols, .epi = MM_SWIGLU, .n_seg = 1, .ys = &out,
                        .w = &gate, .w2 = &up};
    mm_launch(be, &p);
}

void cpu_matmul_grouped(struct backend *be, float *y, const float *x, int n_groups, const int *row0,
                        const struct weights_mat *const *w, const struct weights_mat *const *up)
{
    if (n_groups < 1)
        return;
    struct mm_plan p = {.x = x, .k = (int)w[0]->cols, .epi = up ? MM_SWIGLU : MM_STORE, .n_seg = n_groups,
                        .row0 = row0, .y = y, .w = w, .w2 = up};
    mm_launch(be, &p);
}

/* ------------------------------------------------------------------ rmsnorm */

struct rmsnorm_task {
    const struct cpu_variant *v;
    float *y;
    const float *x, *w;
    int rows, dim, per_task;
    float eps;
};

static void rmsnorm_run(void *ctx, int t, int thread)
{
    (void)thread;
    const struct rmsnorm_task *c = ctx;
    int r0 = t * c->per_task, r1 = r0 + c->per_task < c->rows ? r0 + c->per_task : c->rows;
    for (int r = r0; r < r1; r++) {
        const float *x = c->x + (int64_t)r * c->dim;
        float *y = c->y + (int64_t)r * c->dim;
        float ss = cpu_dot_f32(c->v, x, x, c->dim);
        float inv = 1.0f / sqrtf(ss / (float)c->dim + c->eps);
        cpu_norm_scale(c->v, y, x, c->w, inv, c->dim);
    }
}

/* Rows per task: enough work (about 16K elements) to be worth a hand-over. */
static int rows_per_task(int rows, int dim, int n_threads)
{
    int per = (16384 + dim - 1) / dim;
    int even = (rows + n_threads - 1) / n_threads;
    per = per < even ? per : even;
    return per < 1 ? 1 : per;
}

static void cpu_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    struct rmsnorm_task c = {.v = cpu_of(be)->v, .y = y, .x = x, .w = w, .rows = rows, .dim = dim, .eps = eps};
    c.per_task = rows_per_task(rows, dim, be->n_threads);
    threadpool_run(&cpu_of(be)->pool, rmsnorm_run, &c, (rows + c.per_task - 1) / c.per_task);
}

/* ------------------------------------------------------------------ embed */

static void cpu_embed(struct backend *be, float *out, const struct weights_mat *emb)
{
    const int32_t *tokens = cpu_of(be)->b->tokens;
    int n_tok = cpu_of(be)->b->n_tok;
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

/* ------------------------------------------------------------------ memory */

static enum hr_status cpu_reserve(struct backend *be, const struct model_config *cfg, int max_tok, int max_ctx,
                                  char *err, size_t errlen)
{
    (void)max_ctx; /* nothing here grows with the context */
    struct cpu_backend *c = cpu_of(be);
    if (max_tok < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "cpu backend: steps of %d tokens", max_tok);
    int max_k = cfg->hidden_size;
    int dims[] = {cfg->n_heads * cfg->head_dim, cfg->intermediate_size, cfg->moe_intermediate_size};
    for (int i = 0; i < 3; i++)
        max_k = dims[i] > max_k ? dims[i] : max_k;
    /* MoE: the grouped expert rows number top_k per token */
    int max_rows = max_tok * (cfg->n_experts_per_tok > 1 ? cfg->n_experts_per_tok : 1);
    enum hr_status st = cpu_reserve_xb(be, max_rows, max_k, err, errlen);
    if (st != HR_OK)
        return st;
    float *cs = malloc((size_t)max_tok * (size_t)cfg->head_dim * sizeof *cs);
    if (!cs)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cpu backend: no memory for the RoPE table of %d tokens", max_tok);
    free(c->cos_sin);
    c->cos_sin = cs;
    c->cfg = cfg;
    c->max_tok = max_tok;
    return HR_OK;
}

static void *cpu_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) {
        hr_err(err, errlen, HR_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    return p;
}

static void cpu_mem_free(struct backend *be, void *p)
{
    (void)be;
    free(p);
}

#define CPU_TOUCH_THREADS 16

struct cpu_touch_part {
    unsigned char *p;
    size_t n;
};

static void *cpu_touch_run(void *arg)
{
    struct cpu_touch_part *t = arg;
    memset(t->p, 0, t->n);
    return NULL;
}

/* Touches (zeroes) the slab at once where the kernel cannot populate it in the
 * background (before Linux 5.14): one thread per core, each over its own run of 2 MiB,
 * since the page faults of a large pool cost seconds on one thread.  Falls back to
 * this thread alone. */
static void cpu_touch(unsigned char *slab, size_t bytes)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores < 1 ? 1 : cores > CPU_TOUCH_THREADS ? CPU_TOUCH_THREADS : (int)cores;
    size_t huge = (size_t)2 << 20, part = (bytes / (size_t)n + huge - 1) / huge * huge;
    pthread_t th[CPU_TOUCH_THREADS];
    struct cpu_touch_part parts[CPU_TOUCH_THREADS];
    bool started[CPU_TOUCH_THREADS] = {0};
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * part;
        parts[i].p = slab + (off < bytes ? off : bytes);
        parts[i].n = off >= bytes ? 0 : bytes - off < part ? bytes - off : part;
        started[i] = i > 0 && parts[i].n > 0 && pthread_create(&th[i], NULL, cpu_touch_run, &parts[i]) == 0;
    }
    cpu_touch_run(&parts[0]);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            cpu_touch_run(&parts[i]);
    }
}

/* A slab straight from the kernel: anonymous memory is zero (the store's contract) and
 * 2 MiB aligned so that it may be backed by huge pages (attention walks slices all
 * over it).  Its pages are populated (MADV_POPULATE_WRITE: faulted in writable, their
 * contents untouched) by a thread of its own while the server starts and serves, so
 * that start-up does not wait seconds per GiB for the hypervisor to hand memory over,
 * and a step that reaches a page first simply faults it in itself. */
struct cpu_slab {
    void *map;               /* the whole mapping */
    size_t map_len;
    uint8_t *p;              /* the slab within it */
    size_t len;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;        /* kv_free: stop between chunks */
};

#define CPU_POPULATE_CHUNK ((size_t)64 << 20)

static void *cpu_populate_run(void *arg)
{
    struct cpu_slab *s = arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t off = CPU_POPULATE_CHUNK; /* the first chunk was populated by kv_alloc */
    for (; off < s->len && !atomic_load(&s->stop); off += CPU_POPULATE_CHUNK) {
        size_t n = s->len - off < CPU_POPULATE_CHUNK ? s->len - off : CPU_POPULATE_CHUNK;
        if (madvise(s->p + off, n, MADV_POPULATE_WRITE) != 0)
            break; /* out of memory now: the rest faults in as steps reach it */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (off >= s->len)
        log_debug("cpu backend: KV pool pages populated in the background in %.3f s",
                  (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return NULL;
}

static enum hr_status cpu_kv_alloc(struct backend *be, struct kv_store *kv, char *err, size_t errlen)
{
    (void)be;
    size_t bytes = kv_store_slab_bytes(kv), align = (size_t)2 << 20;
    struct cpu_slab *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cannot allocate the KV pool (%zu bytes)", bytes);
    s->map_len = bytes + align;
    s->map = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->map == MAP_FAILED) {
        free(s);
        kv->slab = NULL;
        return hr_err(err, errlen, HR_ERR_NOMEM, "cannot allocate the KV pool (%zu bytes)", bytes);
    }
    s->p = (uint8_t *)(((uintptr_t)s->map + align - 1) & ~(uintptr_t)(align - 1));
    s->len = bytes;
    atomic_init(&s->stop, false);
#ifdef MADV_HUGEPAGE
    madvise(s->p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    size_t first = bytes < CPU_POPULATE_CHUNK ? bytes : CPU_POPULATE_CHUNK;
    if (madvise(s->p, first, MADV_POPULATE_WRITE) != 0) {
        cpu_touch(s->p, bytes); /* a kernel before 5.14: touch it all now, one thread per core */
    } else if (first < bytes) {
        s->thread_started = pthread_create(&s->thread, NULL, cpu_populate_run, s) == 0;
        /* without a thread the pages fault in as steps reach them */
    }
    kv->slab = s->p;
    kv->be_slab = s;
    return HR_OK;
}

static void cpu_kv_free(struct backend *be, struct kv_store *kv)
{
    (void)be;
    struct cpu_slab *s = kv->be_slab;
    if (s) {
        atomic_store(&s->stop, true);
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        munmap(s->map, s->map_len);
        free(s);
    }
    kv->slab = NULL;
    kv->be_slab = NULL;
}

/* The CPU reads the mapped checkpoint where it lies. */
/* The mmap'd set itself (zero copy); dummy weights are generated into host memory. */
static enum hr_status cpu_bind_weights(struct backend *be, const struct weights *host, const struct weights **bound,
                                       char *err, size_t errlen)
{
    (void)be;
    *bound = host;
    if (!host->dummy)
        return HR_OK;
    struct weights *w = NULL;
    enum hr_status st = weights_host_materialize(host, &w, err, errlen);
    *bound = w;
    return st;
}

static void cpu_unbind_weights(struct backend *be, const struct weights *bound)
{
    (void)be;
    if (bound && bound->host_copy)
        weights_host_free((struct weights *)bound);
}

static enum hr_status cpu_mem_info(struct backend *be, size_t *free_bytes, size_t *total_bytes, char *err,
                                   size_t errlen)
{
    (void)be;
    (void)err;
    (void)errlen;
    *free_bytes = *total_bytes = 0; /* host memory */
    return HR_OK;
}

static enum hr_status cpu_kv_export(struct backend *be, const struct kv_store *kv, int block, void *dst, char *err,
                                    size_t errlen)
{
    (void)be;
    if (block < 0 || block >= kv->n_blocks)
        return hr_err(err, errlen, HR_ERR_INVALID, "kv export: block %d outside the pool (%d)", block, kv->n_blocks);
    kv_store_export_block(kv, block, dst);
    return HR_OK;
}

static enum hr_status cpu_kv_import(struct backend *be, struct kv_store *kv, int block, const void *src, char *err,
                                    size_t errlen)
{
    (void)be;
    if (block < 0 || block >= kv->n_blocks)
        return hr_err(err, errlen, HR_ERR_INVALID, "kv import: block %d outside the pool (%d)", block, kv->n_blocks);
    kv_store_import_block(kv, block, src);
    return HR_OK;
}

/* The host tier's memory: a private anonymous mapping (zeroed pages that fault in as
 * blocks first land in them).  On the CPU every copy is done when it returns, so the
 * queued forms are the synchronous ones and there is nothing to wait for. */
static void *cpu_host_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    (void)be;
    void *p = bytes ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        hr_err(err, errlen, HR_ERR_NOMEM, "cannot map %zu bytes of host memory for the host tier", bytes);
        return NULL;
    }
    return p;
}

static void cpu_host_free(struct backend *be, void *p, size_t bytes)
{
    (void)be;
    if (p)
        munmap(p, bytes);
}

static enum hr_status cpu_kv_copies_wait(struct backend *be, char *err, size_t errlen)
{
    (void)be;
    (void)err;
    (void)errlen;
    return HR_OK;
}

/* ------------------------------------------------------------------ the step */

/* cos/sin of every token's position, computed in double then rounded: depends on
 * the position alone. */
static void cpu_rope_table(const struct model_config *c, const struct batch *b, float *cs)
{
    int half = c->head_dim / 2;
    for (int t = 0; t < b->n_tok; t++) {
        double pos = (double)b->positions[t];
        for (int i = 0; i < half; i++) {
            double inv_freq = pow(c->rope_theta, -(double)(2 * i) / (double)c->head_dim);
            double ang = pos * inv_freq;
            cs[((int64_t)t * half + i) * 2] = (float)cos(ang);
            cs[((int64_t)t * half + i) * 2 + 1] = (float)sin(ang);
        }
    }
}

static enum hr_status cpu_begin_step(struct backend *be, const struct batch *b, struct kv_store *kv, char *err,
                                     size_t errlen)
{
    struct cpu_backend *c = cpu_of(be);
    if (!c->cfg || b->n_tok > c->max_tok)
        return hr_err(err, errlen, HR_ERR_INVALID, "cpu backend: a step of %d tokens (reserved for %d)", b->n_tok,
                      c->max_tok);
    for (int i = 0; i < b->n_copies; i++)
        kv_store_copy_block(kv, b->copies[i].dst, b->copies[i].src);
    c->b = b;
    cpu_rope_table(c->cfg, b, c->cos_sin);
    return HR_OK;
}

/* Every op ran to completion on the pool's threads, and none can fail. */
static enum hr_status cpu_sync(struct backend *be, char *err, size_t errlen)
{
    (void)be;
    (void)err;
    (void)errlen;
    return HR_OK;
}

static enum hr_status cpu_to_host(struct backend *be, const void *src, size_t bytes, void **host, char *err,
                                  size_t errlen)
{
    (void)be;
    (void)bytes;
    (void)err;
    (void)errlen;
    *host = (void *)src; /* the backend's own scratch: the caller may write it */
    return HR_OK;
}

static void cpu_attn_prep_op(struct backend *be, float *q, float *k, const float *v, const float *q_norm,
                             const float *k_norm, float eps, int n_heads, struct kv_store *kv, int layer)
{
    struct cpu_backend *c = cpu_of(be);
    cpu_attn_prep(be, q, k, v, q_norm, k_norm, eps, c->cos_sin, n_heads, kv, layer, c->b);
}

static void cpu_attention_op(struct backend *be, float *out, const float *q, const struct kv_store *kv, int layer,
                             int n_heads, float scale)
{
    cpu_attention(be, out, q, cpu_of(be)->b, kv, layer, n_heads, scale);
}

static void cpu_gather_logit_rows(struct backend *be, float *dst, const float *src, int first, int n, int dim)
{
    const struct batch *b = cpu_of(be)->b;
    HR_ASSERT(first >= 0 && n >= 0 && first + n <= b->n_logits);
    for (int i = 0; i < n; i++)
        memcpy(dst + (int64_t)i * dim, src + (int64_t)b->logit_tok[first + i] * dim, (size_t)dim * sizeof(float));
}

/* ------------------------------------------------------------------ life cycle */

static void cpu_free(struct backend *be)
{
    struct cpu_backend *c = cpu_of(be);
    if (!c)
        return;
    threadpool_free(&c->pool);
    free(c->attn);
    free(c->xb);
    free(c->cos_sin);
    free(c);
    be->impl = NULL;
}

static const struct backend_ops cpu_ops = {
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .mem_free = cpu_mem_free,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .bind_weights = cpu_bind_weights,
    .unbind_weights = cpu_unbind_weights,
    .mem_info = cpu_mem_info,
    .kv_export = cpu_kv_export,
    .kv_import = cpu_kv_import,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .kv_export_async = cpu_kv_export,
    .kv_import_async = cpu_kv_import,
    .kv_copies_wait = cpu_kv_copies_wait,
    .begin_step = cpu_begin_step,
    .sync = cpu_sync,
    .to_host = cpu_to_host,
    .embed = cpu_embed,
    .matmul = cpu_matmul,
    .matmul_add = cpu_matmul_add,
    .matmul_multi = cpu_matmul_multi,
    .matmul_swiglu = cpu_matmul_swiglu,
    .rmsnorm = cpu_rmsnorm,
    .attn_prep = cpu_attn_prep_op,
    .attention = cpu_attention_op,
    .moe_work_bytes = cpu_moe_work_bytes,
    .moe = cpu_moe,
    .gather_logit_rows = cpu_gather_logit_rows,
    .free = cpu_free,
};

/* The kernel variant a request names: compute bf16 is the avx512bf16 variant, which
 * nothing else may contradict (the one place these combinations are checked). */
static enum hr_status cpu_variant_wanted(const struct backend_opts *o, const char **want, char *err, size_t errlen)
{
    const char *kernel = o->kernel, *compute = o->compute;
    *want = kernel;
    if (compute && strcmp(compute, "f32") != 0) {
        if (strcmp(compute, "bf16") != 0)
            return hr_err(err, errlen, HR_ERR_INVALID, "--compute must be f32 or bf16, got '%s'", compute);
        if (kernel && *kernel && strcmp(kernel, "auto") && strcmp(kernel, "avx512bf16"))
            return hr_err(err, errlen, HR_ERR_INVALID, "--compute bf16 needs the avx512bf16 kernel, not '%s'", kernel);
        *want = "avx512bf16";
    } else if (compute && kernel && !strcmp(kernel, "avx512bf16")) {
        return hr_err(err, errlen, HR_ERR_INVALID, "--compute f32 contradicts the avx512bf16 kernel");
    }
    return HR_OK;
}

enum hr_status backend_cpu_init(struct backend *be, const struct backend_opts *o, char *err, size_t errlen)
{
    memset(be, 0, sizeof *be);
    const char *variant;
    enum hr_status st = cpu_variant_wanted(o, &variant, err, errlen);
    if (st != HR_OK)
        return st;
    const struct cpu_variant *v;
    st = cpu_variant_pick(variant, &v, err, errlen);
    if (st != HR_OK)
        return st;
    int n_threads = o->n_threads;
    if (n_threads < 1 || n_threads > 1024)
        return hr_err(err, errlen, HR_ERR_INVALID, "threads must be in 1..1024, got %d", n_threads);
    struct cpu_backend *c = calloc(1, sizeof *c);
    if (c)
        c->attn = malloc((size_t)n_threads * sizeof *c->attn);
    if (!c || !c->attn) {
        free(c);
        return hr_err(err, errlen, HR_ERR_NOMEM, "cpu backend: out of memory");
    }
    st = threadpool_init(&c->pool, n_threads, err, errlen);
    if (st != HR_OK) {
        free(c->attn);
        free(c);
        return st;
    }
    c->v = v;
    be->ops = &cpu_ops;
    be->impl = c;
    be->n_threads = n_threads;
    snprintf(be->name, sizeof be->name, "cpu-%s", v->name);
    snprintf(be->device, sizeof be->device, "cpu");
    snprintf(be->variant, sizeof be->variant, "%s", v->name);
    snprintf(be->isa, sizeof be->isa, "%s", v->isa);
    be->bf16_compute = v->gemm_bb != NULL;
    return HR_OK;
}
