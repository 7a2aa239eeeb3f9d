/* The device sampler's host reference (dsample_ref.h). */
#include "dsample_ref.h"

#include "engine/dev_sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ref_cand {
    float x;
    int32_t id;
};

static int ref_cmp(const void *pa, const void *pb) /* (x desc, id asc) */
{
    const struct ref_cand *a = pa, *b = pb;
    if (a->x != b->x)
        return a->x > b->x ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int ref_id_cmp(const void *pa, const void *pb)
{
    const struct ref_cand *a = pa, *b = pb;
    return a->id < b->id ? -1 : a->id > b->id;
}

static double ref_min(double a, double b) { return a < b ? a : b; }

void dsample_ref(const struct sampler_params *p, const float *logits, int vocab, const int32_t *history,
                 int n_prompt, int n_generated, uint64_t seq_index, uint64_t step, struct sampler_scratch *s,
                 struct dsample_out *out, double *margin)
{
    float *x = malloc((size_t)vocab * sizeof *x);
    sampler_process_logits(p, logits, vocab, history, n_prompt, n_generated, s, x);
    struct dsample_row r;
    dev_sample_row_params(p, seq_index, step, &r);
    dsample_ref_row(&r, logits, x, vocab, out, margin);
    free(x);
}

void dsample_ref_row(const struct dsample_row *p, const float *logits, const float *x, int vocab,
                     struct dsample_out *out, double *margin)
{
    struct ref_cand *c = malloc((size_t)vocab * sizeof *c);
    uint64_t *q = malloc((size_t)vocab * sizeof *q);
    memset(out, 0, sizeof *out);
    *margin = INFINITY;

    float xmax = -INFINITY;
    for (int i = 0; i < vocab; i++)
        xmax = x[i] > xmax ? x[i] : xmax;
    if (xmax == 0.0f)
        xmax = 0.0f;
    int token = 0;
    while (token < vocab - 1 && x[token] != xmax)
        token++;
    const float t = p->temperature;
    if (!(t < DSAMPLE_GREEDY_EPS) && xmax != -INFINITY) {
        double keep_from = p->keep_from;
        int n = 0;
        for (int i = 0; i < vocab; i++) {
            if (x[i] == -INFINITY)
                continue;
            double rel = (double)(x[i] - xmax);
            if (p->min_p > 0.0f)
                *margin = ref_min(*margin, fabs(rel - keep_from) / (fabs(keep_from) + 1.0));
            if (rel < keep_from)
                continue;
            c[n].x = x[i];
            c[n].id = i;
            n++;
        }
        qsort(c, (size_t)n, sizeof *c, ref_cmp);
        uint64_t total = 0;
        for (int j = 0; j < n; j++)
            total += q[j] = dsample_weight(xmax, c[j].x, t);
        if (total > 0) {
            const int sorted = p->top_k > 0 && p->top_k < vocab; /* the CPU's heap path */
            if (p->top_k > 0 && p->top_k < n)
                n = p->top_k;
            total = 0;
            for (int j = 0; j < n; j++)
                total += q[j];
            if (p->top_p < 1.0f) {
                uint64_t lim = dsample_top_p_limit(p->top_p, total), cum = 0;
                int j = 0;
                while (j < n && cum < lim)
                    cum += q[j++];
                /* the CPU keeps while (mass before) < top_p x total, in double */
                double tot = (double)total, before = (double)(cum - q[j - 1]);
                *margin = ref_min(*margin, fabs(before - (double)p->top_p * tot) / tot);
                if (j < n)
                    *margin = ref_min(*margin, fabs((double)cum - (double)p->top_p * tot) / tot);
                n = j;
                total = cum;
            }
            if (!sorted) {
                /* the CPU's order: by id, the tokens of the last kept one's bin last (in
                 * sorted order); without top-p every token is "before the edge" */
                int edge = p->top_p < 1.0f ? dsample_cpu_bin(xmax, c[n - 1].x, t) : DSAMPLE_CPU_BINS;
                struct ref_cand *w = malloc((size_t)n * sizeof *w);
                int m = 0;
                for (int pass = 0; pass < 2; pass++)
                    for (int j = 0; j < n; j++)
                        if ((dsample_cpu_bin(xmax, c[j].x, t) < edge) == (pass == 0))
                            w[m++] = c[j];
                int na = 0;
                while (na < n && dsample_cpu_bin(xmax, w[na].x, t) < edge)
                    na++;
                qsort(w, (size_t)na, sizeof *w, ref_id_cmp);
                memcpy(c, w, (size_t)n * sizeof *c);
                free(w);
                for (int j = 0; j < n; j++)
                    q[j] = dsample_weight(xmax, c[j].x, t);
            }
            uint64_t target = dsample_target(dsample_bits53(p->seed, p->seq_index, p->step), total), cum = 0;
            double u = sampler_uniform(p->seed, p->seq_index, p->step);
            for (int j = 0; j < n; j++) {
                cum += q[j];
                *margin = ref_min(*margin, fabs((double)cum / (double)total - u));
                if (cum > target) {
                    token = c[j].id;
                    break;
                }
            }
        }
    }
    out->token = token;

    if (p->logprobs || p->n_logprobs > 0) {
        const int raw = !p->penalized;
        float *v = (float *)x;
        if (raw) {
            v = malloc((size_t)vocab * sizeof *v);
            for (int i = 0; i < vocab; i++)
                v[i] = isnan(logits[i]) ? -INFINITY : logits[i] == INFINITY ? FLT_MAX : logits[i];
        }
        float bmax = -INFINITY;
        for (int i = 0; i < vocab; i++)
            bmax = v[i] > bmax ? v[i] : bmax;
        if (bmax == 0.0f)
            bmax = 0.0f;
        int n_top = p->n_logprobs < vocab ? p->n_logprobs : vocab;
        out->n_top = n_top;
        for (int i = 0; i < vocab; i++) {
            c[i].x = v[i];
            c[i].id = i;
        }
        qsort(c, (size_t)vocab, sizeof *c, ref_cmp);
        if (bmax == -INFINITY) {
            out->logprob = -INFINITY;
            for (int k = 0; k < n_top; k++) {
                out->top[k].token = k;
                out->top[k].logprob = -INFINITY;
            }
        } else {
            uint64_t sum = 0;
            for (int i = 0; i < vocab; i++)
                sum += dsample_weight(bmax, v[i], 1.0f);
            double shift = (double)bmax + dsample_log((double)sum * (1.0 / DSAMPLE_ONE));
            out->logprob = (float)((double)v[token] - shift);
            for (int k = 0; k < n_top; k++) {
                out->top[k].token = c[k].id;
                out->top[k].logprob = (float)((double)c[k].x - shift);
            }
        }
        if (raw)
            free(v);
    }
    free(c);
    free(q);
}
