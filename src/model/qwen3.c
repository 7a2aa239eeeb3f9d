/* The Qwen3 / Qwen3-MoE forward pass over a batch, through the backend interface.
 *
 * Per layer: RMSNorm → q/k/v projections → per-head q_norm/k_norm → RoPE (half
 * split) → new K/V written into the paged store → attention over the store → o_proj
 * → residual; RMSNorm → SwiGLU MLP or the MoE block → residual.  Then the final
 * norm and lm_head for the tokens whose logits are asked for, in one pass or, through
 * qwen3_logits, a few rows at a time.  Every buffer here is backend memory: this file
 * computes offsets and calls ops, and never reads or writes an activation itself. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
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
    /* attention block (k and v are dead once attn_prep has stored them, so attn reuses them) */
    float *q;        /* [n_tok, n_heads, head_dim] */
    float *k;        /* [n_tok, n_kv_heads, head_dim] */
    float *v;        /* [n_tok, n_kv_heads, head_dim] */
    float *attn;     /* [n_tok, n_heads, head_dim] over k and v */
    /* MLP / MoE block */
    float *gate;     /* [n_tok, inter] SwiGLU activations */
    void *moe;       /* the backend's MoE work memory (moe_work_bytes), same room as gate */
    /* after the last layer */
    float *lx;       /* [n_logits, hidden] rows that produce logits */
};

/* Offsets (from the work region's start) of its buffers, as qwen3_work_layout lays them. */
struct qwen3_work {
    size_t q, k, v, attn;
    size_t gate, moe;
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
static size_t qwen3_work_layout(struct backend *be, const struct model_config *c, int n, int n_logits,
                                struct qwen3_work *o)
{
    size_t f = sizeof(float), N = (size_t)n, H = (size_t)c->hidden_size;
    size_t q_bytes = N * c->n_heads * c->head_dim * f, kv_bytes = N * c->n_kv_heads * c->head_dim * f;

    size_t a = 0;
    o->q = qwen3_put(&a, q_bytes);
    o->attn = a;
    o->k = qwen3_put(&a, kv_bytes);
    o->v = qwen3_put(&a, kv_bytes);
    size_t a_end = o->attn + q_bytes; /* attn takes k and v's room, and more if it needs it */
    a = a > a_end ? a : a_end;

    size_t m = 0;
    o->gate = o->moe = 0;
    if (c->n_experts > 0) {
        size_t moe = be->ops->moe_work_bytes(be, n);
        m = qwen3_aligned(moe);
    }
    size_t dense = qwen3_aligned(N * (size_t)c->intermediate_size * f);
    m = m > dense ? m : dense;

    size_t l = 0;
    o->lx = qwen3_put(&l, (size_t)n_logits * H * f);

    size_t w = a > m ? a : m;
    return w > l ? w : l;
}

static size_t qwen3_scratch_bytes(struct backend *be, const struct model_config *c, int n)
{
    struct qwen3_work o;
    size_t row = (size_t)n * c->hidden_size * sizeof(float);
    return 2 * (row + QWEN3_ALIGN) + qwen3_work_layout(be, c, n, n, &o) + QWEN3_ALIGN;
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
    struct qwen3_work o;
    size_t bytes = qwen3_work_layout(q->be, c, n, n_logits, &o);
    unsigned char *w = qwen3_take(a, bytes);
    bu->q = qwen3_at(w, o.q);
    bu->k = qwen3_at(w, o.k);
    bu->v = qwen3_at(w, o.v);
    bu->attn = qwen3_at(w, o.attn);
    bu->gate = qwen3_at(w, o.gate);
    bu->moe = qwen3_at(w, o.moe);
    bu->lx = qwen3_at(w, o.lx);
}

/* The forward's scratch: backend memory of the given size, under the arena. */
static enum hr_status qwen3_scratch_alloc(struct qwen3 *q, size_t bytes, char *err, size_t errlen)
{
    void *mem = q->be->ops->alloc(q->be, bytes, err, errlen);
    if (!mem)
        return HR_ERR_NOMEM;
    if (q->scratch_mem)
        q->be->ops->mem_free(q->be, q->scratch_mem);
    q->scratch_mem = mem;
    arena_init_at(&q->scratch, mem, bytes);
    return HR_OK;
}

/* The padded batch's arrays (only a backend with graphs uses them). */
static enum hr_status qwen3_pad_init(struct qwen3 *q, char *err, size_t errlen)
{
    struct batch *p = &q->pad;
    size_t n = (size_t)q->max_tok;
    p->max_rows = p->max_tok = q->max_tok;
    p->rows = calloc(n, sizeof *p->rows);
    p->tokens = calloc(n, sizeof *p->tokens);
    p->positions = calloc(n, sizeof *p->positions);
    p->slots = calloc(n, sizeof *p->slots);
    p->tok_row = calloc(n, sizeof *p->tok_row);
    p->logit_tok = calloc(n, sizeof *p->logit_tok);
    if (!p->rows || !p->tokens || !p->positions || !p->slots || !p->tok_row || !p->logit_tok)
        return hr_err(err, errlen, HR_ERR_NOMEM, "forward: out of memory");
    return HR_OK;
}

static void qwen3_pad_free(struct qwen3 *q)
{
    struct batch *p = &q->pad;
    free(p->rows);
    free(p->tokens);
    free(p->positions);
    free(p->slots);
    free(p->tok_row);
    free(p->logit_tok);
    memset(p, 0, sizeof *p);
}

/* b padded to B tokens for a graph step: rows of one token each (token 0 at position
 * 0, reading block 0, storing nothing: slot -1), no logits.  Every row's bits are its
 * own, so the real rows come out as they would alone; the padding's outputs are
 * never read.  The copies are b's (the backend runs them before the graph). */
static const struct batch *qwen3_pad(struct qwen3 *q, const struct batch *b, int B)
{
    struct batch *p = &q->pad;
    int n = b->n_tok, extra = B - n;
    HR_ASSERT(B <= p->max_tok && b->n_rows + extra <= p->max_rows);
    p->block_size = b->block_size;
    p->n_rows = b->n_rows + extra;
    p->n_tok = B;
    p->n_logits = b->n_logits;
    memcpy(p->rows, b->rows, (size_t)b->n_rows * sizeof *p->rows);
    memcpy(p->tokens, b->tokens, (size_t)n * sizeof *p->tokens);
    memcpy(p->positions, b->positions, (size_t)n * sizeof *p->positions);
    memcpy(p->slots, b->slots, (size_t)n * sizeof *p->slots);
    memcpy(p->tok_row, b->tok_row, (size_t)n * sizeof *p->tok_row);
    memcpy(p->logit_tok, b->logit_tok, (size_t)b->n_logits * sizeof *p->logit_tok);
    q->pad_table[0] = 0;
    for (int i = 0; i < extra; i++) {
        int r = b->n_rows + i, t = n + i;
        p->rows[r] = (struct batch_row){.seq_id = -1, .query_len = 1, .context_len = 0, .kv_len = 1,
                                        .query_offset = t, .block_table = q->pad_table, .n_table = 1,
                                        .logits = BATCH_LOGITS_NONE, .logit_offset = 0};
        p->tokens[t] = 0;
        p->positions[t] = 0;
        p->slots[t] = -1;
        p->tok_row[t] = r;
    }
    p->max_copies = b->max_copies;
    p->n_copies = b->n_copies;
    p->copies = b->copies;
    return p;
}

enum hr_status qwen3_init(struct qwen3 *q, const struct model *m, struct backend *be, int max_tok, int max_ctx,
                          char *err, size_t errlen)
{
    memset(q, 0, sizeof *q);
    if (max_tok < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "forward: max tokens per step must be >= 1");
    q->be = be;
    q->max_tok = max_tok;
    enum hr_status st = be->ops->reserve(be, &m->cfg, max_tok, max_ctx, err, errlen);
    if (st == HR_OK)
        st = qwen3_bind(q, m, err, errlen);
    if (st == HR_OK)
        st = qwen3_scratch_alloc(q, qwen3_scratch_bytes(be, &m->cfg, max_tok), err, errlen);
    if (st == HR_OK && be->ops->graph_rows)
        st = qwen3_pad_init(q, err, errlen);
    if (st != HR_OK)
        qwen3_free(q);
    return st;
}

enum hr_status qwen3_bind(struct qwen3 *q, const struct model *m, char *err, size_t errlen)
{
    const struct weights *bound = NULL;
    enum hr_status st = q->be->ops->bind_weights(q->be, &m->w, &bound, err, errlen);
    if (st != HR_OK)
        return st;
    if (q->w)
        q->be->ops->unbind_weights(q->be, q->w);
    q->m = m;
    q->w = bound;
    q->last_h = NULL;
    return HR_OK;
}

void qwen3_free(struct qwen3 *q)
{
    if (!q || !q->be)
        return;
    if (q->w)
        q->be->ops->unbind_weights(q->be, q->w);
    if (q->scratch_mem)
        q->be->ops->mem_free(q->be, q->scratch_mem);
    arena_free(&q->scratch);
    qwen3_pad_free(q);
    q->w = NULL;
    q->scratch_mem = NULL;
}

/* ------------------------------------------------------------------ pieces */

static void qwen3_attention_block(struct qwen3 *q, const struct weights_layer *L, int layer, int n,
                                  struct kv_store *kv, struct qwen3_bufs *bu)
{
    const struct model_config *c = &q->m->cfg;
    struct backend *be = q->be;
    float eps = (float)c->rms_norm_eps;
    be->ops->rmsnorm(be, bu->xn, bu->h, L->attn_norm, n, c->hidden_size, eps);
    float *const qkv_out[3] = {bu->q, bu->k, bu->v};
    const struct weights_mat *const qkv_w[3] = {&L->q, &L->k, &L->v};
    be->ops->matmul_multi(be, 3, qkv_out, bu->xn, n, qkv_w);
    /* q_norm / k_norm, RoPE, and the new K/V into the store, in one pass */
    be->ops->attn_prep(be, bu->q, bu->k, bu->v, L->q_norm, L->k_norm, eps, c->n_heads, kv, layer);
    be->ops->attention(be, bu->attn, bu->q, kv, layer, c->n_heads, (float)(1.0 / sqrt((double)c->head_dim)));
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

/* ------------------------------------------------------------------ forward */

enum hr_status qwen3_forward(struct qwen3 *q, const struct batch *b, struct kv_store *kv, float *logits, char *err,
                             size_t errlen)
{
    const struct model_config *c = &q->m->cfg;
    const struct weights *w = q->w;
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

    /* The batch goes to the backend once; its block copies run before any kernel.  A
     * decode step the backend replays as a graph goes padded to the graph's rows. */
    const struct batch *run = b;
    int B = be->ops->graph_rows && !q->route_trace && q->pad.rows ? be->ops->graph_rows(be, b) : 0;
    if (B > n && B <= q->max_tok) {
        run = qwen3_pad(q, b, B);
        n = B;
    }
    st = be->ops->begin_step(be, run, kv, err, errlen);
    if (st != HR_OK)
        return st;
    struct qwen3_bufs bu;
    qwen3_bufs_take(q, n, b->n_logits, &bu);
    be->ops->embed(be, bu.h, &w->embed);

    for (int l = 0; l < c->n_layers; l++) {
        const struct weights_layer *L = &w->layers[l];
        qwen3_attention_block(q, L, l, n, kv, &bu);
        be->ops->rmsnorm(be, bu.xn, bu.h, L->ffn_norm, n, c->hidden_size, (float)c->rms_norm_eps);
        if (L->is_moe) {
            int32_t *trace = q->route_trace ? q->route_trace + (int64_t)l * q->max_tok * c->n_experts_per_tok : NULL;
            be->ops->moe(be, bu.h, bu.xn, n, L, bu.moe, trace);
        } else {
            qwen3_mlp(be, bu.h, bu.xn, n, &L->gate, &L->up, &L->down, bu.gate, 1);
        }
    }
    /* The engine's step (logits rows, computed by the calls that follow) is only
     * started here where the backend can: the logits' launches then queue behind it
     * (a failure known on the host is reported now all the same). */
    bool submit = !logits && b->n_logits > 0 && !q->route_trace && be->ops->submit;
    st = submit ? be->ops->submit(be, err, errlen) : be->ops->sync(be, err, errlen);
    if (st != HR_OK)
        return st;

    q->last_h = bu.h;
    q->last_lx = bu.lx;
    q->last_n_tok = b->n_tok; /* the caller's batch (last_h holds n rows, padding included) */
    q->last_n_logits = b->n_logits;
    if (logits && b->n_logits > 0)
        return qwen3_logits(q, b, 0, b->n_logits, logits, err, errlen);
    return HR_OK;
}

/* Final norm and lm_head of logits rows [first, first + n) through lx [n, hidden],
 * then the wait for them (wait), or only their start (a backend with submit: the
 * caller's next call that reads them waits). */
static enum hr_status qwen3_logits_via(struct qwen3 *q, const struct batch *b, int first, int n, float *lx,
                                       float *logits, bool wait, char *err, size_t errlen)
{
    const struct model_config *c = &q->m->cfg;
    const struct weights *w = q->w;
    struct backend *be = q->be;
    HR_ASSERT(q->last_h && b->n_tok == q->last_n_tok && b->n_logits == q->last_n_logits);
    HR_ASSERT(first >= 0 && n >= 0 && first + n <= b->n_logits);
    if (n == 0)
        return HR_OK;
    /* Each logit is a lone dot product of one normed row (one row per RMSNorm task),
     * so computing the rows in pieces gives the bits of one pass. */
    int H = c->hidden_size;
    be->ops->gather_logit_rows(be, lx, q->last_h, first, n, H);
    be->ops->rmsnorm(be, lx, lx, w->final_norm, n, H, (float)c->rms_norm_eps);
    be->ops->matmul(be, logits, lx, n, &w->lm_head);
    if (!wait && be->ops->submit)
        return be->ops->submit(be, err, errlen);
    return be->ops->sync(be, err, errlen);
}

enum hr_status qwen3_logits(struct qwen3 *q, const struct batch *b, int first, int n, float *logits, char *err,
                            size_t errlen)
{
    return qwen3_logits_via(q, b, first, n, q->last_lx, logits, true, err, errlen);
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
    q->last_h = NULL;
    return qwen3_scratch_alloc(q, need, err, errlen);
}

int qwen3_scratch_logit_rows(const struct qwen3 *q)
{
    HR_ASSERT(q->last_h);
    return qwen3_room_rows(&q->m->cfg, q->scratch.cap, q->last_n_tok);
}

enum hr_status qwen3_logits_dev(struct qwen3 *q, const struct batch *b, int first, int n, float **logits_out,
                                char *err, size_t errlen)
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
    *logits_out = logits;
    return qwen3_logits_via(q, b, first, n, lx, logits, false, err, errlen);
}

enum hr_status qwen3_logits_host(struct qwen3 *q, const struct batch *b, int first, int n, float **host,
                                 char *err, size_t errlen)
{
    float *logits;
    enum hr_status st = qwen3_logits_dev(q, b, first, n, &logits, err, errlen);
    if (st != HR_OK)
        return st;
    void *p = NULL;
    st = q->be->ops->to_host(q->be, logits, (size_t)n * q->m->cfg.vocab_size * sizeof(float), &p, err, errlen);
    *host = p;
    return st;
}
