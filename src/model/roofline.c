/* The roofline of a step and of the throughput workload (roofline.h). */
#include "model/roofline.h"

#include <math.h>
#include <string.h>

static double rl_mat_bytes(const struct weights_mat *w)
{
    return (double)w->rows * (double)w->cols * (w->dtype == SAFETENSORS_DTYPE_F32 ? 4.0 : 2.0);
}

static double rl_mat_flops(const struct weights_mat *w)
{
    return 2.0 * (double)w->rows * (double)w->cols;
}

void roofline_of(const struct model *m, size_t kv_pos_bytes, struct roofline *r)
{
    const struct model_config *c = &m->cfg;
    memset(r, 0, sizeof *r);
    for (int l = 0; l < c->n_layers; l++) {
        const struct weights_layer *L = &m->w.layers[l];
        const struct weights_mat *attn[] = {&L->q, &L->k, &L->v, &L->o};
        for (int i = 0; i < 4; i++) {
            r->fixed_bytes += rl_mat_bytes(attn[i]);
            r->tok_flops += rl_mat_flops(attn[i]);
        }
        if (!L->is_moe) {
            const struct weights_mat *mlp[] = {&L->gate, &L->up, &L->down};
            for (int i = 0; i < 3; i++) {
                r->fixed_bytes += rl_mat_bytes(mlp[i]);
                r->tok_flops += rl_mat_flops(mlp[i]);
            }
            continue;
        }
        r->fixed_bytes += rl_mat_bytes(&L->router);
        r->tok_flops += rl_mat_flops(&L->router);
        const struct weights_expert *e = &L->experts[0]; /* every expert of a layer has one shape */
        const struct weights_mat *ex[] = {&e->gate, &e->up, &e->down};
        for (int i = 0; i < 3; i++) {
            r->expert_bytes += rl_mat_bytes(ex[i]);
            r->tok_flops += rl_mat_flops(ex[i]) * c->n_experts_per_tok;
        }
    }
    if (r->expert_bytes > 0) {
        r->n_experts = c->n_experts;
        r->top_k = c->n_experts_per_tok;
    }
    r->fixed_bytes += rl_mat_bytes(&m->w.lm_head);
    r->lm_flops = rl_mat_flops(&m->w.lm_head);
    r->kv_pos_bytes = (double)kv_pos_bytes;
    r->attn_flops = 4.0 * c->n_heads * c->head_dim * c->n_layers;
}

double roofline_experts(int n_experts, int top_k, double rows)
{
    if (n_experts <= 0 || top_k <= 0 || !(rows > 0))
        return 0.0;
    if (top_k >= n_experts)
        return n_experts;
    return n_experts * (1.0 - pow(1.0 - (double)top_k / n_experts, rows));
}

double roofline_weight_bytes(const struct roofline *r, double rows)
{
    return r->fixed_bytes + r->expert_bytes * roofline_experts(r->n_experts, r->top_k, rows);
}

double roofline_step_s(double bytes, double flops, double gbs, double tflops)
{
    double tb = gbs > 0 ? bytes / (gbs * 1e9) : 0.0, tf = tflops > 0 ? flops / (tflops * 1e12) : 0.0;
    return tb > tf ? tb : tf;
}

double roofline_decode_s(const struct roofline *r, int rows, double ctx_sum, double gbs, double tflops)
{
    double bytes = roofline_weight_bytes(r, rows) + r->kv_pos_bytes * ctx_sum;
    double flops = rows * (r->tok_flops + r->lm_flops) + r->attn_flops * ctx_sum;
    return roofline_step_s(bytes, flops, gbs, tflops);
}

double roofline_workload_s(const struct roofline *r, int c, int prompt, int out, double gbs, double tflops)
{
    double tok = (double)c * prompt;
    double bytes = roofline_weight_bytes(r, tok);
    double flops = tok * r->tok_flops + c * r->lm_flops + r->attn_flops * c * (double)prompt * (prompt + 1) / 2;
    double s = roofline_step_s(bytes, flops, gbs, tflops);
    for (int i = 1; i < out; i++)
        s += roofline_decode_s(r, c, (double)c * (prompt + i), gbs, tflops);
    return s;
}
