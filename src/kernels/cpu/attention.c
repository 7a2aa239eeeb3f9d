/* Paged causal attention, one kernel for prefill and decode.
 *
 * Each (token, head) walks its own row's KV from position 0 to its position in
 * fixed tiles of CPU_ATTN_TILE positions with an online softmax.  The tile size is a
 * constant and the walk follows positions (not blocks), so the sequence of
 * operations depends only on the token's position: the same bits whether the token
 * is decoded alone, prefilled in a chunk of any size, or batched with anything.
 *
 * A task takes one KV head and a block of consecutive tokens of one row, with all
 * the query heads that share that KV head: their scores against a tile come from one
 * GEMM over the tile's K rows (every element is a lone dot product of head_dim), and
 * the tile's V rows are widened once for all of them.  Tokens whose position lies
 * before the tile simply sit it out; how the tokens are grouped changes nothing. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "model/dtype.h"

struct attn_task {
    const struct cpu_variant *v;
    struct cpu_attn_scratch *scratch; /* [n_threads] */
    float *out;                       /* [n_tok, n_heads, head_dim] */
    const float *q;                   /* [n_tok, n_heads, head_dim] */
    const struct batch *b;
    const struct kv_store *kv;
    int layer, n_heads, group, qb; /* qb: tokens per task */
    float scale;
};

/* Scores s[i * CPU_ATTN_TILE + j] = q_i · K[p0 + j] for rows i < rows, j < n; the
 * positions may cross block boundaries (one GEMM per run inside a block). */
static void attn_scores(const struct attn_task *c, const struct batch_row *r, int kvh, const float *q, int rows,
                        int p0, int n, float *s)
{
    const struct kv_store *kv = c->kv;
    int bs = kv->block_size, hd = kv->head_dim;
    for (int j = 0; j < n;) {
        int pos = p0 + j;
        int blk = r->block_table[pos / bs], off = pos % bs;
        int run = bs - off < n - j ? bs - off : n - j;
        const void *k = kv_store_head(kv, blk, c->layer, 0, kvh);
        if (kv->dtype == KV_DTYPE_F32)
            c->v->gemm_f32(s + j, CPU_ATTN_TILE, q, hd, (const float *)k + (int64_t)off * hd, hd, rows, run, hd);
        else
            c->v->gemm_bf16(s + j, CPU_ATTN_TILE, q, hd, (const uint16_t *)k + (int64_t)off * hd, hd, rows, run, hd);
        j += run;
    }
}

/* v[j, :] = V[p0 + j] widened to f32, j < n. */
static void attn_values(const struct attn_task *c, const struct batch_row *r, int kvh, int p0, int n, float *v)
{
    const struct kv_store *kv = c->kv;
    int bs = kv->block_size, hd = kv->head_dim;
    for (int j = 0; j < n;) {
        int pos = p0 + j;
        int blk = r->block_table[pos / bs], off = pos % bs;
        int run = bs - off < n - j ? bs - off : n - j;
        const void *vh = kv_store_head(kv, blk, c->layer, 1, kvh);
        if (kv->dtype == KV_DTYPE_F32)
            memcpy(v + (int64_t)j * hd, (const float *)vh + (int64_t)off * hd, (size_t)run * hd * sizeof(float));
        else
            dtype_bf16_to_f32_n(v + (int64_t)j * hd, (const uint16_t *)vh + (int64_t)off * hd, (size_t)run * hd);
        j += run;
    }
}

static void attn_run(void *ctx, int task, int thread)
{
    const struct attn_task *c = ctx;
    const struct batch *b = c->b;
    int n_kv = c->kv->n_kv_heads, hd = c->kv->head_dim, G = c->group;
    struct cpu_attn_scratch *sc = &c->scratch[thread];

    /* task -> (row, token block, kv head) */
    int kvh = task % n_kv, blk = task / n_kv, ri = 0;
    for (;; ri++) {
        int nb = (b->rows[ri].query_len + c->qb - 1) / c->qb;
        if (blk < nb)
            break;
        blk -= nb;
    }
    const struct batch_row *r = &b->rows[ri];
    int t0 = r->query_offset + blk * c->qb;
    int nq = r->query_len - blk * c->qb < c->qb ? r->query_len - blk * c->qb : c->qb;
    int rows = nq * G; /* row i: token t0 + i / G, head kvh * G + i % G */

    for (int i = 0; i < rows; i++) {
        const float *qi = c->q + ((int64_t)(t0 + i / G) * c->n_heads + kvh * G + i % G) * hd;
        memcpy(sc->q + (int64_t)i * hd, qi, (size_t)hd * sizeof(float));
        sc->m[i] = -INFINITY;
        sc->l[i] = 0.0f;
    }
    memset(sc->acc, 0, (size_t)rows * hd * sizeof(float));

    int pos_first = b->positions[t0], pos_last = b->positions[t0 + nq - 1];
    for (int p0 = 0; p0 <= pos_last; p0 += CPU_ATTN_TILE) {
        int n = pos_last + 1 - p0 < CPU_ATTN_TILE ? pos_last + 1 - p0 : CPU_ATTN_TILE;
        /* tokens before this tile have finished: rows from i0 on take part */
        int i0 = p0 > pos_first ? (p0 - pos_first) * G : 0;
        attn_scores(c, r, kvh, sc->q + (int64_t)i0 * hd, rows - i0, p0, n, sc->s + (int64_t)i0 * CPU_ATTN_TILE);
        attn_values(c, r, kvh, p0, n, sc->v);
        for (int i = i0; i < rows; i++) {
            int pos = pos_first + i / G;
            int valid = pos + 1 - p0 < n ? pos + 1 - p0 : n;
            c->v->attn_update(&sc->m[i], &sc->l[i], sc->acc + (int64_t)i * hd, sc->s + (int64_t)i * CPU_ATTN_TILE,
                              valid, c->scale, sc->v, hd);
        }
    }
    for (int i = 0; i < rows; i++) {
        float *o = c->out + ((int64_t)(t0 + i / G) * c->n_heads + kvh * G + i % G) * hd;
        const float *a = sc->acc + (int64_t)i * hd;
        float inv = 1.0f / sc->l[i];
        for (int d = 0; d < hd; d++)
            o[d] = a[d] * inv;
    }
}

void cpu_attention(struct backend *be, float *out, const float *q, const struct batch *b, const struct kv_store *kv,
                   int layer, int n_heads, float scale)
{
    struct cpu_backend *cb = be->impl;
    int G = n_heads / kv->n_kv_heads;
    HR_ASSERT(kv->head_dim <= CPU_ATTN_MAX_HEAD_DIM && n_heads % kv->n_kv_heads == 0 && G <= CPU_ATTN_MAX_ROWS);
    struct attn_task c = {
        .v = cb->v, .scratch = cb->attn, .out = out, .q = q, .b = b, .kv = kv, .layer = layer, .n_heads = n_heads,
        .group = G, .qb = CPU_ATTN_MAX_ROWS / G, .scale = scale,
    };
    int n_tasks = 0;
    for (int i = 0; i < b->n_rows; i++)
        n_tasks += (b->rows[i].query_len + c.qb - 1) / c.qb;
    threadpool_run(&cb->pool, attn_run, &c, n_tasks * kv->n_kv_heads);
}

/* ------------------------------------------------------------------ KV write */

struct kvw_task {
    struct kv_store *kv;
    const struct batch *b;
    const float *k, *v;
    int layer;
};

static void kvw_run(void *ctx, int t, int thread)
{
    (void)thread;
    const struct kvw_task *c = ctx;
    struct kv_store *kv = c->kv;
    int hd = kv->head_dim, bs = kv->block_size;
    int64_t slot = c->b->slots[t];
    int blk = (int)(slot / bs), off = (int)(slot % bs);
    for (int h = 0; h < kv->n_kv_heads; h++) {
        for (int sel = 0; sel < 2; sel++) {
            const float *src = (sel ? c->v : c->k) + ((int64_t)t * kv->n_kv_heads + h) * hd;
            void *dst = kv_store_head(kv, blk, c->layer, sel, h);
            if (kv->dtype == KV_DTYPE_F32)
                memcpy((float *)dst + (int64_t)off * hd, src, (size_t)hd * sizeof(float));
            else
                dtype_f32_to_bf16_n((uint16_t *)dst + (int64_t)off * hd, src, (size_t)hd);
        }
    }
}

void cpu_kv_write(struct backend *be, struct kv_store *kv, int layer, const struct batch *b, const float *k,
                  const float *v)
{
    struct cpu_backend *cb = be->impl;
    struct kvw_task c = {.kv = kv, .b = b, .k = k, .v = v, .layer = layer};
    threadpool_run(&cb->pool, kvw_run, &c, b->n_tok);
}
