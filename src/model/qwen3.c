/* The Qwen3 / Qwen3-MoE forward pass over a batch, through the backend interface.
 *
 * Per layer: RMSNorm → q/k/v projections → per-head q_norm/k_norm → RoPE (half
 * split) → new K/V written into the paged store → attention over the store → o_proj
 * → residual; RMSNorm → SwiGLU MLP or the MoE block → residual.  Then the final
 * norm and lm_head for the tokens whose logits are asked for. */
#include <math.h>
#include <string.h>

#include "model/model.h"

#define QWEN3_ALIGN 64

/* ------------------------------------------------------------------ scratch */

struct qwen3_bufs {
    float *h;        /* [n_tok, hidden] residual stream */
    float *xn;       /* [n_tok, hidden] normed input of a sub-block */
    float *q;        /* [n_tok, n_heads, head_dim] */
    float *k;        /* [n_tok, n_kv_heads, head_dim] */
    float *v;        /* [n_tok, n_kv_heads, head_dim] */
    float *attn;     /* [n_tok, n_heads, head_dim] */
    float *proj;     /* [n_tok, hidden] output of o_proj / down_proj */
    float *gate;     /* [n_tok, max(inter, moe_inter)] */
    float *up;       /* [n_tok, max(inter, moe_inter)] */
    float *cos_sin;  /* [n_tok, head_dim / 2, 2] */
    float *lx;       /* [n_logits, hidden] rows that produce logits */
    /* MoE */
    float *router;   /* [n_tok, n_experts] */
    int32_t *top_e;  /* [n_tok, top_k] expert of each rank */
    float *top_w;    /* [n_tok, top_k] weight of each rank */
    int32_t *sel;    /* [n_tok] tokens routed to the current expert */
    int32_t *sel_r;  /* [n_tok] their rank */
    float *ex;       /* [n_tok, hidden] gathered inputs of one expert */
    float *eo;       /* [n_tok, top_k, hidden] expert output per (token, rank) */
};

static size_t qwen3_scratch_bytes(const struct model_config *c, int n)
{
    size_t f = sizeof(float), tot = 0;
    int inter = c->intermediate_size > c->moe_intermediate_size ? c->intermediate_size : c->moe_intermediate_size;
    size_t sizes[] = {
        (size_t)n * c->hidden_size * f,
        (size_t)n * c->hidden_size * f,
        (size_t)n * c->n_heads * c->head_dim * f,
        (size_t)n * c->n_kv_heads * c->head_dim * f,
        (size_t)n * c->n_kv_heads * c->head_dim * f,
        (size_t)n * c->n_heads * c->head_dim * f,
        (size_t)n * c->hidden_size * f,
        (size_t)n * inter * f,
        (size_t)n * inter * f,
        (size_t)n * c->head_dim * f,
        (size_t)n * c->hidden_size * f,
        (size_t)n * (c->n_experts + 1) * f,
        (size_t)n * (c->n_experts_per_tok + 1) * 4,
        (size_t)n * (c->n_experts_per_tok + 1) * f,
        (size_t)n * 4,
        (size_t)n * 4,
        (size_t)n * c->hidden_size * f,
        (size_t)n * (c->n_experts_per_tok + 1) * c->hidden_size * f,
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        tot += sizes[i] + QWEN3_ALIGN;
    return tot;
}

static void *qwen3_take(struct arena *a, size_t bytes)
{
    void *p = arena_alloc(a, bytes ? bytes : 1, QWEN3_ALIGN);
    HR_ASSERT(p); /* sized by qwen3_scratch_bytes for max_tok */
    return p;
}

static void qwen3_bufs_take(struct qwen3 *q, int n, int n_logits, struct qwen3_bufs *bu)
{
    const struct model_config *c = &q->m->cfg;
    struct arena *a = &q->scratch;
    size_t f = sizeof(float);
    int inter = c->intermediate_size > c->moe_intermediate_size ? c->intermediate_size : c->moe_intermediate_size;
    arena_reset(a);
    bu->h = qwen3_take(a, (size_t)n * c->hidden_size * f);
    bu->xn = qwen3_take(a, (size_t)n * c->hidden_size * f);
    bu->q = qwen3_take(a, (size_t)n * c->n_heads * c->head_dim * f);
    bu->k = qwen3_take(a, (size_t)n * c->n_kv_heads * c->head_dim * f);
    bu->v = qwen3_take(a, (size_t)n * c->n_kv_heads * c->head_dim * f);
    bu->attn = qwen3_take(a, (size_t)n * c->n_heads * c->head_dim * f);
    bu->proj = qwen3_take(a, (size_t)n * c->hidden_size * f);
    bu->gate = qwen3_take(a, (size_t)n * inter * f);
    bu->up = qwen3_take(a, (size_t)n * inter * f);
    bu->cos_sin = qwen3_take(a, (size_t)n * c->head_dim * f);
    bu->lx = qwen3_take(a, (size_t)n_logits * c->hidden_size * f);
    bu->router = qwen3_take(a, (size_t)n * (c->n_experts + 1) * f);
    bu->top_e = qwen3_take(a, (size_t)n * (c->n_experts_per_tok + 1) * 4);
    bu->top_w = qwen3_take(a, (size_t)n * (c->n_experts_per_tok + 1) * f);
    bu->sel = qwen3_take(a, (size_t)n * 4);
    bu->sel_r = qwen3_take(a, (size_t)n * 4);
    bu->ex = qwen3_take(a, (size_t)n * c->hidden_size * f);
    bu->eo = qwen3_take(a, (size_t)n * (c->n_experts_per_tok + 1) * c->hidden_size * f);
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
    enum hr_status st = be->ops->reserve(be, max_tok, max_k, err, errlen);
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
    /* Tokens grouped per expert; each (token, rank) output lands in its own slot,
     * so the grouping never changes a bit. */
    for (int e = 0; e < E; e++) {
        int m = 0;
        for (int t = 0; t < n; t++)
            for (int r = 0; r < K; r++)
                if (bu->top_e[(int64_t)t * K + r] == e) {
                    bu->sel[m] = t;
                    bu->sel_r[m] = r;
                    memcpy(bu->ex + (int64_t)m * H, bu->xn + (int64_t)t * H, (size_t)H * sizeof(float));
                    m++;
                }
        if (!m)
            continue;
        const struct weights_expert *ex = &L->experts[e];
        qwen3_mlp(be, bu->proj, bu->ex, m, &ex->gate, &ex->up, &ex->down, bu->gate, 0);
        for (int i = 0; i < m; i++)
            memcpy(bu->eo + ((int64_t)bu->sel[i] * K + bu->sel_r[i]) * H, bu->proj + (int64_t)i * H,
                   (size_t)H * sizeof(float));
    }
    /* Weighted sum in rank order, then the residual. */
    for (int t = 0; t < n; t++) {
        float *h = bu->h + (int64_t)t * H;
        float *y = bu->proj + (int64_t)t * H;
        for (int d = 0; d < H; d++)
            y[d] = 0.0f;
        for (int r = 0; r < K; r++) {
            float w = bu->top_w[(int64_t)t * K + r];
            const float *o = bu->eo + ((int64_t)t * K + r) * H;
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

    if (b->n_logits > 0) {
        for (int i = 0; i < b->n_logits; i++)
            memcpy(bu.lx + (int64_t)i * c->hidden_size, bu.h + (int64_t)b->logit_tok[i] * c->hidden_size,
                   (size_t)c->hidden_size * sizeof(float));
        be->ops->rmsnorm(be, bu.lx, bu.lx, w->final_norm, b->n_logits, c->hidden_size, (float)c->rms_norm_eps);
        be->ops->matmul(be, logits, bu.lx, b->n_logits, &w->lm_head);
    }
    return HR_OK;
}
