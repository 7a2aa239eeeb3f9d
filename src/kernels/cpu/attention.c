/* Paged causal attention, one kernel for prefill and decode.
 *
 * Each (token, head) walks its own row's KV from position 0 to its position in
 * fixed tiles of ATTN_TILE positions with an online softmax.  The tile size is a
 * constant, the walk follows positions (not blocks), so the sequence of operations
 * depends only on the token's position: the same bits whether the token is decoded
 * alone, prefilled in a chunk of any size, or batched with anything. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "model/dtype.h"

#define ATTN_TILE 16
#define ATTN_MAX_HEAD_DIM 512

struct attn_task {
    const struct cpu_variant *v;
    float *out;
    const float *q;
    const struct batch *b;
    const struct kv_store *kv;
    int layer, n_heads, group;
    float scale;
};

/* s[j] = q · K[pos0 + j] for j < n, where the positions may cross block boundaries. */
static void attn_scores(const struct attn_task *c, const struct batch_row *r, int kvh, const float *q, int pos0,
                        int n, float *s)
{
    const struct kv_store *kv = c->kv;
    int bs = kv->block_size, hd = kv->head_dim;
    int j = 0;
    while (j < n) {
        int pos = pos0 + j;
        int blk = r->block_table[pos / bs], off = pos % bs;
        int run = bs - off < n - j ? bs - off : n - j;
        const void *k = kv_store_head(kv, blk, c->layer, 0, kvh);
        if (kv->dtype == KV_DTYPE_F32)
            c->v->gemm_f32(s + j, 1, q, hd, (const float *)k + (int64_t)off * hd, hd, 1, run, hd);
        else
            c->v->gemm_bf16(s + j, 1, q, hd, (const uint16_t *)k + (int64_t)off * hd, hd, 1, run, hd);
        j += run;
    }
}

static void attn_run(void *ctx, int task)
{
    const struct attn_task *c = ctx;
    const struct kv_store *kv = c->kv;
    int n_kv = kv->n_kv_heads, hd = kv->head_dim, bs = kv->block_size;
    int t = task / n_kv, kvh = task % n_kv;
    const struct batch_row *r = &c->b->rows[c->b->tok_row[t]];
    int n_pos = c->b->positions[t] + 1;

    for (int g = 0; g < c->group; g++) {
        int h = kvh * c->group + g;
        const float *q = c->q + ((int64_t)t * c->n_heads + h) * hd;
        float acc[ATTN_MAX_HEAD_DIM];
        float s[ATTN_TILE];
        memset(acc, 0, (size_t)hd * sizeof *acc);
        float m = -INFINITY, l = 0.0f;
        for (int p0 = 0; p0 < n_pos; p0 += ATTN_TILE) {
            int n = n_pos - p0 < ATTN_TILE ? n_pos - p0 : ATTN_TILE;
            attn_scores(c, r, kvh, q, p0, n, s);
            float mt = -INFINITY;
            for (int j = 0; j < n; j++) {
                s[j] = s[j] * c->scale;
                if (s[j] > mt)
                    mt = s[j];
            }
            float mn = mt > m ? mt : m;
            float corr = expf(m - mn);
            l = l * corr;
            for (int d = 0; d < hd; d++)
                acc[d] = acc[d] * corr;
            for (int j = 0; j < n; j++) {
                float p = expf(s[j] - mn);
                l = l + p;
                int pos = p0 + j;
                int blk = r->block_table[pos / bs], off = pos % bs;
                const void *vh = kv_store_head(kv, blk, c->layer, 1, kvh);
                if (kv->dtype == KV_DTYPE_F32) {
                    const float *vr = (const float *)vh + (int64_t)off * hd;
                    for (int d = 0; d < hd; d++)
                        acc[d] = acc[d] + p * vr[d];
                } else {
                    const uint16_t *vr = (const uint16_t *)vh + (int64_t)off * hd;
                    for (int d = 0; d < hd; d++)
                        acc[d] = acc[d] + p * dtype_bf16_to_f32(vr[d]);
                }
            }
            m = mn;
        }
        float *o = c->out + ((int64_t)t * c->n_heads + h) * hd;
        float inv = 1.0f / l;
        for (int d = 0; d < hd; d++)
            o[d] = acc[d] * inv;
    }
}

void cpu_attention(struct backend *be, float *out, const float *q, const struct batch *b, const struct kv_store *kv,
                   int layer, int n_heads, float scale)
{
    struct cpu_backend *cb = be->impl;
    HR_ASSERT(kv->head_dim <= ATTN_MAX_HEAD_DIM && n_heads % kv->n_kv_heads == 0);
    struct attn_task c = {
        .v = cb->v, .out = out, .q = q, .b = b, .kv = kv, .layer = layer, .n_heads = n_heads,
        .group = n_heads / kv->n_kv_heads, .scale = scale,
    };
    threadpool_run(&cb->pool, attn_run, &c, b->n_tok * kv->n_kv_heads);
}

/* ------------------------------------------------------------------ KV write */

struct kvw_task {
    struct kv_store *kv;
    const struct batch *b;
    const float *k, *v;
    int layer;
};

static void kvw_run(void *ctx, int t)
{
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
