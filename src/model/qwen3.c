/* The Qwen3 / Qwen3-MoE forward pass over a batch, through the backend interface.
 *
 * Per layer: RMSNorm → q/k/v projections → per-head q_norm/k_norm → RoPE (half
 * split) → new K/V written into the paged store → attention over the store → o_proj
 * → residual; RMSNorm → SwiGLU MLP or the MoE block → residual.  Then the final
 * norm and lm_head for the tokens whose logits are asked for, in one pass or, through
 * qwen3_logits, a few rows at a time. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "model/model.h"

#define QWEN3_ALIGN 64

/* ------------------------------------------------------------------ scratch */

/* The residual stream, the normed input and the RoPE table live through the whole
 * forward; everything else sits in one work region that the attention block, the
 * MLP or MoE block and the final logits rows take in turn (never two at once), so
 * the scratch is the largest of them, not their sum. */
struct qwen3_bufs {
    float *h;        /* [n_tok, hidden] residual stream */
    float *xn;       /* [n_tok, hidden] normed input of a sub-block */
    float *cos_sin;  /* [n_tok, head_dim / 2, 2] */
    /* attention block (k and v are dead once attn_prep has stored them, so attn reuses them) */
    float *q;        /* [n_tok, n_heads, head_dim] */
    float *k;        /* [n_tok, n_kv_heads, head_dim] */
    float *v;        /* [n_tok, n_kv_heads, head_dim] */
    float *attn;     /* [n_tok, n_heads, head_dim] over k and v */
    /* MLP / MoE block */
    float *gate;     /* [n_tok, max(inter, top_k * moe_inter)] SwiGLU activations */
    float *proj;     /* [n_tok, hidden] MoE: weighted sum of the experts */
    float *router;   /* [n_tok, n_experts] */
    int32_t *top_e;  /* [n_tok, top_k] expert of each rank */
    float *top_w;    /* [n_tok, top_k] weight of each rank */
    int32_t *row_of;  /* [n_tok, top_k] grouped row of each (token, rank) */
    int32_t *row0;    /* [n_experts + 1] first grouped row of each active expert */
    int32_t *ecount;  /* [2 * (n_experts + 1)] per expert: rows, then its group; per group: next row */
    const struct weights_mat **gw, **uw, **dw; /* [n_experts] matrices of the active experts */
    float *ex;        /* [n_tok * top_k, hidden] inputs grouped per expert */
    float *eo;        /* [n_tok * top_k, hidden] expert outputs, same rows */
    /* after the last layer */
    float *lx;       /* [n_logits, hidden] rows that produce logits */
};

/* Offsets (from the work region's start) of its buffers, as qwen3_work_layout lays them. */
struct qwen3_work {
    size_t q, k, v, attn;
    size_t gate, proj, router, top_e, top_w, row_of, row0, ecount, gw, uw, dw, ex, eo;
    size_t lx;
};

static size_t qwen3_aligned(size_t bytes) { return (bytes + QWEN3_ALIGN - 1) / QWEN3_ALIGN * QWEN3_ALIGN; }

static size_t qwen3_put(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off = qwen3_aligned(at + bytes);
    return at;
}

/* Lays out the work region for n tokens and n_logits logits rows; returns its size. */
static size_t qwen3_work_layout(const struct model_config *c, int n, int n_logits, struct qwen3_work *o)
{
    size_t f = sizeof(float), p = sizeof(void *), N = (size_t)n;
    size_t K = (size_t)c->n_experts_per_tok, E = (size_t)c->n_experts, H = (size_t)c->hidden_size;
    size_t inter = (size_t)c->intermediate_size, moe = K * (size_t)c->moe_intermediate_size;
    size_t q_bytes = N * c->n_heads * c->head_dim * f, kv_bytes = N * c->n_kv_heads * c->head_dim * f;

    size_t a = 0;
    o->q = qwen3_put(&a, q_bytes);
    o->attn = a;
    o->k = qwen3_put(&a, kv_bytes);
    o->v = qwen3_put(&a, kv_bytes);
    size_t a_end = o->attn + q_bytes; /* attn takes k and v's room, and more if it needs it */
    a = a > a_end ? a : a_end;

    size_t m = 0;
    o->gate = qwen3_put(&m, N * (inter > moe ? inter : moe) * f);
    if (E > 0) {
        o->proj = qwen3_put(&m, N * H * f);
        o->router = qwen3_put(&m, N * E * f);
        o->top_e = qwen3_put(&m, N * K * 4);
        o->top_w = qwen3_put(&m, N * K * f);
        o->row_of = qwen3_put(&m, N * K * 4);
        o->row0 = qwen3_put(&m, (E + 1) * 4);
        o->ecount = qwen3_put(&m, 2 * (E + 1) * 4);
        o->gw = qwen3_put(&m, E * p);
        o->uw = qwen3_put(&m, E * p);
        o->dw = qwen3_put(&m, E * p);
        o->ex = qwen3_put(&m, N * K * H * f);
        o->eo = qwen3_put(&m, N * K * H * f);
    } else {
        o->proj = o->router = o->top_e = o->top_w = o->row_of = o->row0 = o->ecount = m;
        o->gw = o->uw = o->dw = o->ex = o->eo = m;
    }

    size_t l = 0;
    o->lx = qwen3_put(&l, (size_t)n_logits * H * f);

    size_t w = a > m ? a : m;
    return w > l ? w : l;
}

static size_t qwen3_scratch_bytes(const struct model_config *c, int n)
{
    struct qwen3_work o;
    size_t row = (size_t)n * c->hidden_size * sizeof(float);
    return 2 * (row + QWEN3_ALIGN) + (size_t)n * c->head_dim * sizeof(float) + QWEN3_ALIGN +
           qwen3_work_layout(c, n, n, &o) + QWEN3_ALIGN;
}

static void *qwen3_take(struct arena *a, size_t bytes)
{
    void *p = arena_alloc(a, bytes ? bytes : 1, QWEN3_ALIGN);
    HR_ASSERT(p); /* sized by qwen3_scratch_bytes for max_tok */
    return p;
}

/* The buffer at byte offset off of the work region (offsets are QWEN3_ALIGN-aligned). */
static void *qwen3_at(unsigned char *w, size_t off) { return w + off; }

static void qwen3_bufs_take(struct qwen3 *q, int n, int n_logits, struct qwen3_bufs *bu)
{
    const struct model_config *c = &q->m->cfg;
    struct arena *a = &q->scratch;
    arena_reset(a);
    bu->h = qwen3_take(a, (size_t)n * c->hidden_size * sizeof(float));
    bu->xn = qwen3_take(a, (size_t)n * c->hidden_size * sizeof(float));
    bu->cos_sin = qwen3_take(a, (size_t)n * c->head_dim * sizeof(float));
    struct qwen3_work o;
    size_t bytes = qwen3_work_layout(c, n, n_logits, &o);
    unsigned char *w = qwen3_take(a, bytes);
    bu->q = qwen3_at(w, o.q);
    bu->k = qwen3_at(w, o.k);
    bu->v = qwen3_at(w, o.v);
    bu->attn = qwen3_at(w, o.attn);
    bu->gate = qwen3_at(w, o.gate);
    bu->proj = qwen3_at(w, o.proj);
    bu->router = qwen3_at(w, o.router);
    bu->top_e = qwen3_at(w, o.top_e);
    bu->top_w = qwen3_at(w, o.top_w);
    bu->row_of = qwen3_at(w, o.row_of);
    bu->row0 = qwen3_at(w, o.row0);
    bu->ecount = qwen3_at(w, o.ecount);
    bu->gw = qwen3_at(w, o.gw);
    bu->uw = qwen3_at(w, o.uw);
    bu->dw = qwen3_at(w, o.dw);
    bu->ex = qwen3_at(w, o.ex);
    bu->eo = qwen3_at(w, o.eo);
    bu->lx = qwen3_at(w, o.lx);
}

enum hr_status qwen3_init(struct qwen3 *q, const struct model *m, struct backend *be, int max_tok, char *err,
                          size_t errlen)
{
    memset(q, 0, sizeof *q);
    if (max_tok < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "forward: max tokens per step must be >= 1");
    q->m = m;
    q->be = be;
    q->max_tok = max_tok;
    const struct model_config *c = &m->cfg;
    int max_k = c->hidden_size;
    int dims[] = {c->n_heads * c->head_dim, c->intermediate_size, c->moe_intermediate_size};
    for (int i = 0; i < 3; i++)
        max_k = dims[i] > max_k ? dims[i] : max_k;
    /* MoE: the grouped expert rows number top_k per token */
    int max_rows = max_tok * (c->n_experts_per_tok > 1 ? c->n_experts_per_tok : 1);
    enum hr_status st = be->ops->reserve(be, max_rows, max_k, err, errlen);
    if (st != HR_OK)
        return st;
    return arena_init(&q->scratch, qwen3_scratch_bytes(c, max_tok), err, errlen);
}

void qwen3_free(struct qwen3 *q)
{
    if (!q)
        return;
    arena_free(&q->scratch);
}

/* ------------------------------------------------------------------ pieces */

/* cos/sin of every token's position, computed in double then rounded: depends on
 * the position alone. */
static void qwen3_rope_table(const struct model_config *c, const struct batch *b, float *cs)
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

static void qwen3_attention_block(struct qwen3 *q, const struct weights_layer *L, int layer, const struct batch *b,
                                  struct kv_store *kv, struct qwen3_bufs *bu)
{
    const struct model_config *c = &q->m->cfg;
    struct backend *be = q->be;
    int n = b->n_tok;
    float eps = (float)c->rms_norm_eps;
    be->ops->rmsnorm(be, bu->xn, bu->h, L->attn_norm, n, c->hidden_size, eps);
    float *const qkv_out[3] = {bu->q, bu->k, bu->v};
    const struct weights_mat *const qkv_w[3] = {&L->q, &L->k, &L->v};
    be->ops->matmul_multi(be, 3, qkv_out, bu->xn, n, qkv_w);
    /* q_norm / k_norm, RoPE, and the new K/V into the store, in one pass */
    be->ops->attn_prep(be, bu->q, bu->k, bu->v, L->q_norm, L->k_norm, eps, bu->cos_sin, c->n_heads, kv, layer, b);
    be->ops->attention(be, bu->attn, bu->q, b, kv, layer, c->n_heads, (float)(1.0 / sqrt((double)c->head_dim)));
    be->ops->matmul_add(be, bu->h, bu->attn, n, &L->o); /* o_proj and the residual */
}

/* SwiGLU MLP: out = down(silu(gate x) * up x), or out += ... when add (the residual). */
static void qwen3_mlp(struct backend *be, float *out, const float *x, int n, const struct weights_mat *gate,
                      const struct weights_mat *up, const struct weights_mat *down, float *g, int add)
{
    be->ops->matmul_swiglu(be, g, x, n, gate, up);
    if (add)
        be->ops->matmul_add(be, out, g, n, down);
    else
        be->ops->matmul(be, out, g, n, down);
}

/* Softmax over the router logits, top-k (ties to the lower expert), optional
 * renormalisation.  One token at a time, in a fixed order. */
static void qwen3_route(const struct model_config *c, const float *logits, int32_t *top_e, float *top_w)
{
    int E = c->n_experts, K = c->n_experts_per_tok;
    float p[1024];
    float mx = -INFINITY;
    for (int e = 0; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
        p[e] = expf(logits[e] - mx);
        sum = sum + p[e];
    }
    for (int e = 0; e < E; e++)
        p[e] = p[e] / sum;
    for (int r = 0; r < K; r++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int s = 0; s < r; s++)
                taken |= top_e[s] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        top_e[r] = best;
        top_w[r] = p[best];
    }
    if (c->norm_topk_prob) {
        float s = 0.0f;
        for (int r = 0; r < K; r++)
            s = s + top_w[r];
        for (int r = 0; r < K; r++)
            top_w[r] = top_w[r] / s;
    }
}

static void qwen3_moe_block(struct qwen3 *q, const struct weights_layer *L, int layer, int n, struct qwen3_bufs *bu)
{
    const struct model_config *c = &q->m->cfg;
    struct backend *be = q->be;
    int E = c->n_experts, K = c->n_experts_per_tok, H = c->hidden_size;
    be->ops->matmul_f32(be, bu->router, bu->xn, n, &L->router);
    for (int t = 0; t < n; t++)
        qwen3_route(c, bu->router + (int64_t)t * E, bu->top_e + (int64_t)t * K, bu->top_w + (int64_t)t * K);
    if (q->route_trace)
        memcpy(q->route_trace + (int64_t)layer * q->max_tok * K, bu->top_e, (size_t)n * K * sizeof(int32_t));
    /* Tokens grouped per expert: the active experts' rows back to back (each
     * (token, rank) once), every expert's weights streamed once for all its tokens,
     * all experts in two launches.  Each element is the invariant GEMM's, so the
     * grouping never changes a bit. */
    int32_t *count = bu->ecount, *next = bu->ecount + E + 1;
    memset(count, 0, (size_t)E * sizeof *count);
    for (int i = 0; i < n * K; i++)
        count[bu->top_e[i]]++;
    int g = 0, rows = 0;
    for (int e = 0; e < E; e++) {
        if (!count[e])
            continue;
        bu->row0[g] = rows;
        bu->gw[g] = &L->experts[e].gate;
        bu->uw[g] = &L->experts[e].up;
        bu->dw[g] = &L->experts[e].down;
        rows += count[e];
        count[e] = g++; /* the expert's group from now on */
    }
    bu->row0[g] = rows;
    for (int i = 0; i < g; i++)
        next[i] = bu->row0[i];
    for (int t = 0; t < n; t++)
        for (int r = 0; r < K; r++) {
            int row = next[count[bu->top_e[(int64_t)t * K + r]]]++;
            bu->row_of[(int64_t)t * K + r] = row;
            memcpy(bu->ex + (int64_t)row * H, bu->xn + (int64_t)t * H, (size_t)H * sizeof(float));
        }
    be->ops->matmul_grouped(be, bu->gate, bu->ex, g, bu->row0, bu->gw, bu->uw);
    be->ops->matmul_grouped(be, bu->eo, bu->gate, g, bu->row0, bu->dw, NULL);
    /* Weighted sum in rank order, then the residual. */
    for (int t = 0; t < n; t++) {
        float *h = bu->h + (int64_t)t * H;
        float *y = bu->proj + (int64_t)t * H;
        for (int d = 0; d < H; d++)
            y[d] = 0.0f;
        for (int r = 0; r < K; r++) {
            float w = bu->top_w[(int64_t)t * K + r];
            const float *o = bu->eo + (int64_t)bu->row_of[(int64_t)t * K + r] * H;
            for (int d = 0; d < H; d++)
                y[d] = y[d] + w * o[d];
        }
        for (int d = 0; d < H; d++)
            h[d] = h[d] + y[d];
    }
}

/* ------------------------------------------------------------------ forward */

enum hr_status qwen3_forward(struct qwen3 *q, const struct batch *b, struct kv_store *kv, float *logits, char *err,
                             size_t errlen)
{
    const struct model_config *c = &q->m->cfg;
    const struct weights *w = &q->m->w;
    struct backend *be = q->be;
    int n = b->n_tok;
    q->last_h = NULL; /* qwen3_logits only after a forward that succeeded */
    if (n < 1 || n > q->max_tok)
        return hr_err(err, errlen, HR_ERR_INVALID, "forward: %d tokens (this engine takes 1..%d per step)", n,
                      q->max_tok);
    if (kv->block_size != b->block_size || kv->n_layers != c->n_layers || kv->head_dim != c->head_dim ||
        kv->n_kv_heads != c->n_kv_heads)
        return hr_err(err, errlen, HR_ERR_INVALID, "forward: KV store does not match the model or the batch");
    enum hr_status st = batch_validate(b, kv->n_blocks, err, errlen);
    if (st != HR_OK)
        return st;
    for (int t = 0; t < n; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size)
            return hr_err(err, errlen, HR_ERR_INVALID, "forward: token id %d outside the vocabulary (%d)",
                          b->tokens[t], c->vocab_size);
    if (q->fail_next) {
        q->fail_next = 0;
        return hr_err(err, errlen, HR_ERR_INTERNAL, "forward: failure injected by a test hook");
    }

    struct qwen3_bufs bu;
    qwen3_bufs_take(q, n, b->n_logits, &bu);
    be->ops->embed(be, bu.h, &w->embed, b->tokens, n);
    qwen3_rope_table(c, b, bu.cos_sin);

    for (int l = 0; l < c->n_layers; l++) {
        const struct weights_layer *L = &w->layers[l];
        qwen3_attention_block(q, L, l, b, kv, &bu);
        be->ops->rmsnorm(be, bu.xn, bu.h, L->ffn_norm, n, c->hidden_size, (float)c->rms_norm_eps);
        if (L->is_moe) {
            qwen3_moe_block(q, L, l, n, &bu);
        } else {
            qwen3_mlp(be, bu.h, bu.xn, n, &L->gate, &L->up, &L->down, bu.gate, 1);
        }
    }

    q->last_h = bu.h;
    q->last_lx = bu.lx;
    q->last_n_tok = n;
    q->last_n_logits = b->n_logits;
    if (logits && b->n_logits > 0)
        qwen3_logits(q, b, 0, b->n_logits, logits);
    return HR_OK;
}

/* Final norm and lm_head of logits rows [first, first + n) through lx [n, hidden]. */
static void qwen3_logits_via(struct qwen3 *q, const struct batch *b, int first, int n, float *lx, float *logits)
{
    const struct model_config *c = &q->m->cfg;
    const struct weights *w = &q->m->w;
    struct backend *be = q->be;
    HR_ASSERT(q->last_h && b->n_tok == q->last_n_tok && b->n_logits == q->last_n_logits);
    HR_ASSERT(first >= 0 && n >= 0 && first + n <= b->n_logits);
    if (n == 0)
        return;
    /* Each logit is a lone dot product of one normed row (one row per RMSNorm task),
     * so computing the rows in pieces gives the bits of one pass. */
    int H = c->hidden_size;
    for (int i = 0; i < n; i++)
        memcpy(lx + (int64_t)i * H, q->last_h + (int64_t)b->logit_tok[first + i] * H, (size_t)H * sizeof(float));
    be->ops->rmsnorm(be, lx, lx, w->final_norm, n, H, (float)c->rms_norm_eps);
    be->ops->matmul(be, logits, lx, n, &w->lm_head);
}

void qwen3_logits(struct qwen3 *q, const struct batch *b, int first, int n, float *logits)
{
    qwen3_logits_via(q, b, first, n, q->last_lx, logits);
}

/* ------------------------------------------------------------------ logits in the scratch */

/* After the last layer only the residual stream is live, and it comes first in the
 * arena: the rest of it can hold logits rows, [lx | logits] for each piece.  Below:
 * the arena bytes the residual stream of n_tok tokens keeps, alignment slack
 * included, and the bytes of one logits row with its normed input. */
static size_t qwen3_kept_bytes(const struct model_config *c, int n_tok)
{
    return qwen3_aligned((size_t)n_tok * c->hidden_size * sizeof(float)) + 2 * QWEN3_ALIGN;
}

static size_t qwen3_logit_row_bytes(const struct model_config *c)
{
    return ((size_t)c->hidden_size + (size_t)c->vocab_size) * sizeof(float);
}

static int qwen3_room_rows(const struct model_config *c, size_t cap, int n_tok)
{
    size_t used = qwen3_kept_bytes(c, n_tok), row = qwen3_logit_row_bytes(c);
    if (cap <= used)
        return 0;
    size_t rows = (cap - used) / row;
    return rows > INT_MAX ? INT_MAX : (int)rows;
}

enum hr_status qwen3_reserve_logits(struct qwen3 *q, int rows, char *err, size_t errlen)
{
    const struct model_config *c = &q->m->cfg;
    if (rows < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "forward: logits rows to reserve must be >= 1, got %d", rows);
    if (qwen3_room_rows(c, q->scratch.cap, q->max_tok) >= rows)
        return HR_OK;
    size_t need = qwen3_kept_bytes(c, q->max_tok) + (size_t)rows * qwen3_logit_row_bytes(c);
    arena_free(&q->scratch);
    q->last_h = NULL;
    return arena_init(&q->scratch, need, err, errlen);
}

int qwen3_scratch_logit_rows(const struct qwen3 *q)
{
    HR_ASSERT(q->last_h);
    return qwen3_room_rows(&q->m->cfg, q->scratch.cap, q->last_n_tok);
}

float *qwen3_logits_scratch(struct qwen3 *q, const struct batch *b, int first, int n)
{
    const struct model_config *c = &q->m->cfg;
    HR_ASSERT(q->last_h && n >= 1 && n <= qwen3_scratch_logit_rows(q));
    /* Keep the residual stream (where it lies), drop the rest. */
    struct arena *a = &q->scratch;
    arena_reset(a);
    float *h = qwen3_take(a, (size_t)q->last_n_tok * c->hidden_size * sizeof(float));
    HR_ASSERT(h == q->last_h);
    float *lx = qwen3_take(a, (size_t)n * c->hidden_size * sizeof(float));
    float *logits = qwen3_take(a, (size_t)n * c->vocab_size * sizeof(float));
    qwen3_logits_via(q, b, first, n, lx, logits);
    return logits;
}
