/* A test backend that fails on command: it wraps another backend in place, counts
 * the ops of each step, and makes one chosen op of one chosen step fail as a device
 * would (the op does not run; sync reports the error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

struct fault {
    struct backend inner;
    int64_t step_no;  /* begin_step calls since arming (the current step's number + 1) */
    int64_t fail_step; /* -1: disarmed */
    int fail_op;
    int ops;          /* ops seen since the last begin_step */
    int target_ops;   /* ops the armed step has run so far */
    bool failed;      /* the current step hit its fault: sync reports it */
};

static struct fault *fault_of(struct backend *be) { return be->impl; }
static struct backend *inner_of(struct backend *be) { return &fault_of(be)->inner; }

/* Counts an op; true when it is the one that must fail (it is then not run). */
static bool fault_hit(struct backend *be)
{
    struct fault *f = fault_of(be);
    int op = f->ops++;
    if (f->fail_step >= 0 && f->step_no - 1 == f->fail_step)
        f->target_ops = op + 1;
    if (f->fail_step >= 0 && f->step_no - 1 == f->fail_step && op == f->fail_op) {
        f->failed = true;
        return true;
    }
    return f->failed; /* after a device error nothing else of the step runs either */
}

static enum hr_status fault_reserve(struct backend *be, const struct model_config *cfg, int max_tok, int max_ctx,
                                    char *err, size_t errlen)
{
    return inner_of(be)->ops->reserve(inner_of(be), cfg, max_tok, max_ctx, err, errlen);
}

static void *fault_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    return inner_of(be)->ops->alloc(inner_of(be), bytes, err, errlen);
}

static void fault_mem_free(struct backend *be, void *p) { inner_of(be)->ops->mem_free(inner_of(be), p); }

static enum hr_status fault_kv_alloc(struct backend *be, struct kv_store *kv, char *err, size_t errlen)
{
    return inner_of(be)->ops->kv_alloc(inner_of(be), kv, err, errlen);
}

static enum hr_status fault_mem_info(struct backend *be, size_t *free_bytes, size_t *total_bytes, char *err,
                                     size_t errlen)
{
    return inner_of(be)->ops->mem_info(inner_of(be), free_bytes, total_bytes, err, errlen);
}

static void fault_kv_free(struct backend *be, struct kv_store *kv) { inner_of(be)->ops->kv_free(inner_of(be), kv); }

static enum hr_status fault_bind_weights(struct backend *be, const struct weights *host, const struct weights **bound,
                                         char *err, size_t errlen)
{
    return inner_of(be)->ops->bind_weights(inner_of(be), host, bound, err, errlen);
}

static void fault_unbind_weights(struct backend *be, const struct weights *bound)
{
    inner_of(be)->ops->unbind_weights(inner_of(be), bound);
}

static enum hr_status fault_kv_export(struct backend *be, const struct kv_store *kv, int block, void *dst, char *err,
                                      size_t errlen)
{
    return inner_of(be)->ops->kv_export(inner_of(be), kv, block, dst, err, errlen);
}

static enum hr_status fault_kv_import(struct backend *be, struct kv_store *kv, int block, const void *src, char *err,
                                      size_t errlen)
{
    return inner_of(be)->ops->kv_import(inner_of(be), kv, block, src, err, errlen);
}

/* Op by op always: an op this wrapper fails would be missing from a captured graph. */
static int fault_graph_rows(struct backend *be, const struct batch *b)
{
    (void)be;
    (void)b;
    return 0;
}

static void *fault_host_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    return inner_of(be)->ops->host_alloc(inner_of(be), bytes, err, errlen);
}

static void fault_host_free(struct backend *be, void *p, size_t bytes)
{
    inner_of(be)->ops->host_free(inner_of(be), p, bytes);
}

static enum hr_status fault_kv_export_async(struct backend *be, const struct kv_store *kv, int block, void *dst,
                                            char *err, size_t errlen)
{
    return inner_of(be)->ops->kv_export_async(inner_of(be), kv, block, dst, err, errlen);
}

static enum hr_status fault_kv_import_async(struct backend *be, struct kv_store *kv, int block, const void *src,
                                            char *err, size_t errlen)
{
    return inner_of(be)->ops->kv_import_async(inner_of(be), kv, block, src, err, errlen);
}

static enum hr_status fault_kv_copies_wait(struct backend *be, char *err, size_t errlen)
{
    return inner_of(be)->ops->kv_copies_wait(inner_of(be), err, errlen);
}

static enum hr_status fault_begin_step(struct backend *be, const struct batch *b, struct kv_store *kv, char *err,
                                       size_t errlen)
{
    struct fault *f = fault_of(be);
    f->ops = 0;
    f->failed = false;
    int64_t step = f->step_no++;
    if (f->fail_step >= 0 && step == f->fail_step && f->fail_op < 0)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "device error injected by the test backend (step %lld, begin)",
                      (long long)f->fail_step);
    return inner_of(be)->ops->begin_step(inner_of(be), b, kv, err, errlen);
}

static enum hr_status fault_sync(struct backend *be, char *err, size_t errlen)
{
    struct fault *f = fault_of(be);
    enum hr_status st = inner_of(be)->ops->sync(inner_of(be), err, errlen);
    if (f->failed) {
        f->failed = false;
        return hr_err(err, errlen, HR_ERR_INTERNAL, "device error injected by the test backend (step %lld, op %d)",
                      (long long)f->fail_step, f->fail_op);
    }
    return st;
}

static enum hr_status fault_to_host(struct backend *be, const void *src, size_t bytes, void **host, char *err,
                                    size_t errlen)
{
    if (fault_hit(be))
        return hr_err(err, errlen, HR_ERR_INTERNAL, "device error injected by the test backend (step %lld, op %d)",
                      (long long)fault_of(be)->fail_step, fault_of(be)->fail_op);
    return inner_of(be)->ops->to_host(inner_of(be), src, bytes, host, err, errlen);
}

static void fault_embed(struct backend *be, float *out, const struct weights_mat *emb)
{
    if (!fault_hit(be))
        inner_of(be)->ops->embed(inner_of(be), out, emb);
}

static void fault_matmul(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    if (!fault_hit(be))
        inner_of(be)->ops->matmul(inner_of(be), y, x, m, w);
}

static void fault_matmul_add(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    if (!fault_hit(be))
        inner_of(be)->ops->matmul_add(inner_of(be), y, x, m, w);
}

static void fault_matmul_multi(struct backend *be, int n_mats, float *const *ys, const float *x, int m,
                               const struct weights_mat *const *ws)
{
    if (!fault_hit(be))
        inner_of(be)->ops->matmul_multi(inner_of(be), n_mats, ys, x, m, ws);
}

static void fault_matmul_swiglu(struct backend *be, float *out, const float *x, int m,
                                const struct weights_mat *gate, const struct weights_mat *up)
{
    if (!fault_hit(be))
        inner_of(be)->ops->matmul_swiglu(inner_of(be), out, x, m, gate, up);
}

static void fault_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    if (!fault_hit(be))
        inner_of(be)->ops->rmsnorm(inner_of(be), y, x, w, rows, dim, eps);
}

static void fault_attn_prep(struct backend *be, float *q, float *k, const float *v, const float *q_norm,
                            const float *k_norm, float eps, int n_heads, struct kv_store *kv, int layer)
{
    if (!fault_hit(be))
        inner_of(be)->ops->attn_prep(inner_of(be), q, k, v, q_norm, k_norm, eps, n_heads, kv, layer);
}

static void fault_attention(struct backend *be, float *out, const float *q, const struct kv_store *kv, int layer,
                            int n_heads, float scale)
{
    if (!fault_hit(be))
        inner_of(be)->ops->attention(inner_of(be), out, q, kv, layer, n_heads, scale);
}

static size_t fault_moe_work_bytes(struct backend *be, int n_tok)
{
    return inner_of(be)->ops->moe_work_bytes(inner_of(be), n_tok);
}

static void fault_moe(struct backend *be, float *h, const float *xn, int n_tok, const struct weights_layer *L,
                      void *work, int32_t *trace)
{
    if (!fault_hit(be))
        inner_of(be)->ops->moe(inner_of(be), h, xn, n_tok, L, work, trace);
}

static void fault_gather_logit_rows(struct backend *be, float *dst, const float *src, int first, int n, int dim)
{
    if (!fault_hit(be))
        inner_of(be)->ops->gather_logit_rows(inner_of(be), dst, src, first, n, dim);
}

static void fault_free(struct backend *be)
{
    struct fault *f = fault_of(be);
    backend_free(&f->inner);
    free(f);
    be->impl = NULL;
}

static const struct backend_ops fault_ops = {
    .graph_rows = fault_graph_rows,
    .reserve = fault_reserve,
    .alloc = fault_alloc,
    .mem_free = fault_mem_free,
    .kv_alloc = fault_kv_alloc,
    .kv_free = fault_kv_free,
    .bind_weights = fault_bind_weights,
    .unbind_weights = fault_unbind_weights,
    .mem_info = fault_mem_info,
    .kv_export = fault_kv_export,
    .kv_import = fault_kv_import,
    .host_alloc = fault_host_alloc,
    .host_free = fault_host_free,
    .kv_export_async = fault_kv_export_async,
    .kv_import_async = fault_kv_import_async,
    .kv_copies_wait = fault_kv_copies_wait,
    .begin_step = fault_begin_step,
    .sync = fault_sync,
    .to_host = fault_to_host,
    .embed = fault_embed,
    .matmul = fault_matmul,
    .matmul_add = fault_matmul_add,
    .matmul_multi = fault_matmul_multi,
    .matmul_swiglu = fault_matmul_swiglu,
    .rmsnorm = fault_rmsnorm,
    .attn_prep = fault_attn_prep,
    .attention = fault_attention,
    .moe_work_bytes = fault_moe_work_bytes,
    .moe = fault_moe,
    .gather_logit_rows = fault_gather_logit_rows,
    .free = fault_free,
};

enum hr_status backend_fault_wrap(struct backend *be, char *err, size_t errlen)
{
    struct fault *f = calloc(1, sizeof *f);
    if (!f)
        return hr_err(err, errlen, HR_ERR_NOMEM, "fault backend: out of memory");
    f->inner = *be;
    f->fail_step = -1;
    /* The wrapper is the same backend to everyone above it: same identity. */
    be->ops = &fault_ops;
    be->impl = f;
    return HR_OK;
}

bool backend_is_fault(const struct backend *be) { return be->ops == &fault_ops; }

void backend_fault_arm(struct backend *be, int64_t step, int op)
{
    HR_ASSERT(backend_is_fault(be));
    struct fault *f = fault_of(be);
    f->step_no = 0;
    f->fail_step = step;
    f->fail_op = op;
    f->failed = false;
    f->target_ops = 0;
}

int backend_fault_ops_seen(const struct backend *be)
{
    HR_ASSERT(backend_is_fault(be));
    return ((const struct fault *)be->impl)->target_ops;
}
