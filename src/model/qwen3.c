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
    float *gate;     /* [n_tok, max(inter, top_k * moe_inter)] SwiGLU activations */
    float *cos_sin;  /* [n_tok, head_dim / 2, 2] */
    float *lx;       /* [n_logits, hidden] rows that produce logits */
    /* MoE */
    float *router;   /* [n_tok, n_experts] */
    int32_t *top_e;  /* [n_tok, top_k] expert of each rank */
    float *top_w;    /* [n_tok, top_k] weight of each rank */
    int32_t *row_of;  /* [n_tok, top_k] grouped row of each (token, rank) */
    int32_t *row0;    /* [n_experts + 1] first grouped row of each active expert */
    int32_t *ecount;  /* [2 * (n_experts + 1)] per expert: rows, then its group; per group: next row */
    const struct weights_mat **gw, **uw, **dw; /* [n_experts] matrices of the active experts */
    float *ex;        /* [n_tok * top_k, hidden] inputs grouped per expert */
    float *eo;        /* [n_tok * top_k, hidden] expert outputs, same rows */
};

/* Sizes of the scratch buffers, in the order qwen3_bufs_take takes them. */
static void qwen3_sizes(const struct model_config *c, int n, int n_logits, size_t *sz)
{
    size_t f = sizeof(float), p = sizeof(void *);
    size_t K = (size_t)c->n_experts_per_tok, E = (size_t)c->n_experts;
    size_t inter = (size_t)c->intermediate_size, moe = K * (size_t)c->moe_intermediate_size;
    size_t i = 0;
    sz[i++] = (size_t)n * c->hidden_size * f;                /* h */
    sz[i++] = (size_t)n * c->hidden_size * f;                /* xn */
    sz[i++] = (size_t)n * c->n_heads * c->head_dim * f;      /* q */
    sz[i++] = (size_t)n * c->n_kv_heads * c->head_dim * f;   /* k */
    sz[i++] = (size_t)n * c->n_kv_heads * c->head_dim * f;   /* v */
    sz[i++] = (size_t)n * c->n_heads * c->head_dim * f;      /* attn */
    sz[i++] = (size_t)n * c->hidden_size * f;                /* proj */
    sz[i++] = (size_t)n * (inter > moe ? inter : moe) * f;   /* gate */
    sz[i++] = (size_t)n * c->head_dim * f;                   /* cos_sin */
    sz[i++] = (size_t)n_logits * c->hidden_size * f;         /* lx */
    sz[i++] = (size_t)n * (E + 1) * f;                       /* router */
    sz[i++] = (size_t)n * (K + 1) * 4;                       /* top_e */
    sz[i++] = (size_t)n * (K + 1) * f;                       /* top_w */
    sz[i++] = (size_t)n * (K + 1) * 4;                       /* row_of */
    sz[i++] = (E + 1) * 4;                                   /* row0 */
    sz[i++] = 2 * (E + 1) * 4;                               /* ecount */
    sz[i++] = (E + 1) * p;                                   /* gw */
    sz[i++] = (E + 1) * p;                                   /* uw */
    sz[i++] = (E + 1) * p;                                   /* dw */
    sz[i++] = (size_t)n * K * c->hidden_size * f;            /* ex */
    sz[i++] = (size_t)n * K * c->hidden_size * f;            /* eo */
}

#define QWEN3_N_BUFS 21

static size_t qwen3_scratch_bytes(const struct model_config *c, int n)
{
    size_t sz[QWEN3_N_BUFS], tot = 0;
    qwen3_sizes(c, n, n, sz);
    for (int i = 0; i < QWEN3_N_BUFS; i++)
        tot += sz[i] + QWEN3_ALIGN;
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
    size_t sz[QWEN3_N_BUFS];
    qwen3_sizes(&q->m->cfg, n, n_logits, sz);
    struct arena *a = &q->scratch;
    arena_reset(a);
    int i = 0;
    bu->h = qwen3_take(a, sz[i++]);
    bu->xn = qwen3_take(a, sz[i++]);
    bu->q = qwen3_take(a, sz[i++]);
    bu->k = qwen3_take(a, sz[i++]);
    bu->v = qwen3_take(a, sz[i++]);
    bu->attn = qwen3_take(a, sz[i++]);
    bu->proj = qwen3_take(a, sz[i++]);
    bu->gate = qwen3_take(a, sz[i++]);
    bu->cos_sin = qwen3_take(a, sz[i++]);
    bu->lx = qwen3_take(a, sz[i++]);
    bu->router = qwen3_take(a, sz[i++]);
    bu->top_e = qwen3_take(a, sz[i++]);
    bu->top_w = qwen3_take(a, sz[i++]);
    bu->row_of = qwen3_take(a, sz[i++]);
    bu->row0 = qwen3_take(a, sz[i++]);
    bu->ecount = qwen3_take(a, sz[i++]);
    bu->gw = qwen3_take(a, sz[i++]);
    bu->uw = qwen3_take(a, sz[i++]);
    bu->dw = qwen3_take(a, sz[i++]);
    bu->ex = qwen3_take(a, sz[i++]);
    bu->eo = qwen3_take(a, sz[i++]);
    HR_ASSERT(i == QWEN3_N_BUFS);
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
