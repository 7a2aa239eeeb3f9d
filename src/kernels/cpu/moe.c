/* The MoE block on the CPU: router matmul (f32), softmax and top-k per token, the
 * tokens grouped per expert, two grouped launches (gate/up with SwiGLU, then down),
 * the weighted sum in rank order, then the residual. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#define MOE_ALIGN 64

/* Offsets (from the work region's start) of the block's buffers for n tokens. */
struct moe_work {
    size_t gate;   /* [n * top_k, moe_inter] SwiGLU activations of the grouped rows */
    size_t proj;   /* [n, hidden] weighted sum of the experts */
    size_t router; /* [n, n_experts] router logits, then (in place) probabilities */
    size_t top_e;  /* [n, top_k] expert of each rank */
    size_t top_w;  /* [n, top_k] weight of each rank */
    size_t row_of; /* [n, top_k] grouped row of each (token, rank) */
    size_t row0;   /* [n_experts + 1] first grouped row of each active expert */
    size_t ecount; /* [2 * (n_experts + 1)] per expert: rows, then its group; per group: next row */
    size_t gw, uw, dw; /* [n_experts] matrices of the active experts */
    size_t ex;     /* [n * top_k, hidden] inputs grouped per expert */
    size_t eo;     /* [n * top_k, hidden] expert outputs, same rows */
    size_t bytes;
};

static size_t moe_put(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off = (at + bytes + MOE_ALIGN - 1) / MOE_ALIGN * MOE_ALIGN;
    return at;
}

static void moe_layout(const struct model_config *c, int n, struct moe_work *o)
{
    size_t f = sizeof(float), p = sizeof(void *), N = (size_t)n;
    size_t K = (size_t)c->n_experts_per_tok, E = (size_t)c->n_experts, H = (size_t)c->hidden_size;
    size_t m = 0;
    o->gate = moe_put(&m, N * K * (size_t)c->moe_intermediate_size * f);
    o->proj = moe_put(&m, N * H * f);
    o->router = moe_put(&m, N * E * f);
    o->top_e = moe_put(&m, N * K * 4);
    o->top_w = moe_put(&m, N * K * f);
    o->row_of = moe_put(&m, N * K * 4);
    o->row0 = moe_put(&m, (E + 1) * 4);
    o->ecount = moe_put(&m, 2 * (E + 1) * 4);
    o->gw = moe_put(&m, E * p);
    o->uw = moe_put(&m, E * p);
    o->dw = moe_put(&m, E * p);
    o->ex = moe_put(&m, N * K * H * f);
    o->eo = moe_put(&m, N * K * H * f);
    o->bytes = m;
}

size_t cpu_moe_work_bytes(struct backend *be, int n_tok)
{
    const struct model_config *c = ((struct cpu_backend *)be->impl)->cfg;
    HR_ASSERT(c); /* reserve came first */
    if (c->n_experts < 1)
        return 0;
    struct moe_work o;
    moe_layout(c, n_tok, &o);
    return o.bytes;
}

/* Softmax over the router logits, top-k (ties to the lower expert), optional
 * renormalisation.  One token at a time, in a fixed order.  The probabilities
 * replace the token's logits in place (the router row of the work region, sized
 * from the config at reserve time), so no buffer depends on n_experts here. */
static void moe_route(const struct model_config *c, float *p, int32_t *top_e, float *top_w)
{
    int E = c->n_experts, K = c->n_experts_per_tok;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
        p[e] = expf(p[e] - mx);
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

void cpu_moe(struct backend *be, float *h, const float *xn, int n, const struct weights_layer *L, void *work,
             int32_t *trace)
{
    const struct model_config *c = ((struct cpu_backend *)be->impl)->cfg;
    int E = c->n_experts, K = c->n_experts_per_tok, H = c->hidden_size;
    struct moe_work o;
    moe_layout(c, n, &o);
    unsigned char *w = work;
    float *gate = (float *)(w + o.gate), *proj = (float *)(w + o.proj), *router = (float *)(w + o.router);
    int32_t *top_e = (int32_t *)(w + o.top_e), *row_of = (int32_t *)(w + o.row_of), *row0 = (int32_t *)(w + o.row0);
    float *top_w = (float *)(w + o.top_w);
    int32_t *count = (int32_t *)(w + o.ecount), *next = count + E + 1;
    const struct weights_mat **gw = (const struct weights_mat **)(w + o.gw);
    const struct weights_mat **uw = (const struct weights_mat **)(w + o.uw);
    const struct weights_mat **dw = (const struct weights_mat **)(w + o.dw);
    float *ex = (float *)(w + o.ex), *eo = (float *)(w + o.eo);

    cpu_matmul_f32(be, router, xn, n, &L->router);
    for (int t = 0; t < n; t++)
        moe_route(c, router + (int64_t)t * E, top_e + (int64_t)t * K, top_w + (int64_t)t * K);
    if (trace)
        memcpy(trace, top_e, (size_t)n * K * sizeof(int32_t));
    /* Tokens grouped per expert: the active experts' rows back to back (each
     * (token, rank) once), every expert's weights streamed once for all its tokens,
     * all experts in two launches.  Each element is the invariant GEMM's, so the
     * grouping never changes a bit. */
    memset(count, 0, (size_t)E * sizeof *count);
    for (int i = 0; i < n * K; i++)
        count[top_e[i]]++;
    int g = 0, rows = 0;
    for (int e = 0; e < E; e++) {
        if (!count[e])
            continue;
        row0[g] = rows;
        gw[g] = &L->experts[e].gate;
        uw[g] = &L->experts[e].up;
        dw[g] = &L->experts[e].down;
        rows += count[e];
        count[e] = g++; /* the expert's group from now on */
    }
    row0[g] = rows;
    for (int i = 0; i < g; i++)
        next[i] = row0[i];
    for (int t = 0; t < n; t++)
        for (int r = 0; r < K; r++) {
            int row = next[count[top_e[(int64_t)t * K + r]]]++;
            row_of[(int64_t)t * K + r] = row;
            memcpy(ex + (int64_t)row * H, xn + (int64_t)t * H, (size_t)H * sizeof(float));
        }
    cpu_matmul_grouped(be, gate, ex, g, row0, gw, uw);
    cpu_matmul_grouped(be, eo, gate, g, row0, dw, NULL);
    /* Weighted sum in rank order, then the residual. */
    for (int t = 0; t < n; t++) {
        float *ht = h + (int64_t)t * H;
        float *y = proj + (int64_t)t * H;
        for (int d = 0; d < H; d++)
            y[d] = 0.0f;
        for (int r = 0; r < K; r++) {
            float wt = top_w[(int64_t)t * K + r];
            const float *ot = eo + (int64_t)row_of[(int64_t)t * K + r] * H;
            for (int d = 0; d < H; d++)
                y[d] = y[d] + wt * ot[d];
        }
        for (int d = 0; d < H; d++)
            ht[d] = ht[d] + y[d];
    }
}
