/* Sampling on the device: packing rows for the backend (dev_sample.h). */
#include "engine/dev_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

bool dev_sample_allowed(const struct sampler_params *p)
{
    return p->n_logit_bias <= DSAMPLE_MAX_BIAS;
}

enum hr_status dev_sample_init(struct dev_sample *ds, int vocab, int cap, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    if (vocab < 1 || cap < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "device sampling: %d rows of %d tokens", cap, vocab);
    ds->vocab = vocab;
    ds->cap = (size_t)cap;
    ds->cap_mods = 4096;
    ds->cap_biases = 1024;
    ds->rows = malloc(ds->cap * sizeof *ds->rows);
    ds->out = malloc(ds->cap * sizeof *ds->out);
    ds->mods = malloc(ds->cap_mods * sizeof *ds->mods);
    ds->biases = malloc(ds->cap_biases * sizeof *ds->biases);
    ds->slot = malloc((size_t)vocab * sizeof *ds->slot);
    if (!ds->rows || !ds->out || !ds->mods || !ds->biases || !ds->slot) {
        dev_sample_free(ds);
        return hr_err(err, errlen, HR_ERR_NOMEM, "device sampling: out of memory");
    }
    for (int i = 0; i < vocab; i++)
        ds->slot[i] = -1;
    return HR_OK;
}

void dev_sample_free(struct dev_sample *ds)
{
    free(ds->rows);
    free(ds->out);
    free(ds->mods);
    free(ds->biases);
    free(ds->slot);
    memset(ds, 0, sizeof *ds);
}

void dev_sample_reset(struct dev_sample *ds)
{
    ds->n = 0;
    ds->n_mods = 0;
    ds->n_biases = 0;
}

/* The row's mod of token t, made on first use. */
static struct dsample_mod *dev_sample_mod(struct dev_sample *ds, int first, int32_t t)
{
    int k = ds->slot[t];
    if (k < 0) {
        k = ds->slot[t] = ds->n_mods++ - first;
        ds->mods[first + k] = (struct dsample_mod){.token = t, .bias_first = ds->n_biases};
    }
    return &ds->mods[first + k];
}

void dev_sample_row_params(const struct sampler_params *p, uint64_t seq_index, uint64_t step, struct dsample_row *r)
{
    memset(r, 0, sizeof *r); /* the padding too: the row is copied to the device as bytes */
    r->temperature = p->temperature;
    r->top_p = p->top_p;
    r->min_p = p->min_p;
    r->repetition_penalty = p->repetition_penalty;
    r->presence_penalty = p->presence_penalty;
    r->frequency_penalty = p->frequency_penalty;
    r->top_k = p->top_k;
    r->logprobs = p->logprobs;
    r->n_logprobs = p->n_logprobs;
    r->penalized = p->logprobs_mode == SAMPLER_LOGPROBS_PENALIZED;
    /* the CPU's expression, with the host's libm */
    r->keep_from = p->min_p > 0.0f ? (double)p->temperature * log((double)p->min_p) : -INFINITY;
    r->seed = p->seed;
    r->seq_index = seq_index;
    r->step = step;
}

enum hr_status dev_sample_add(struct dev_sample *ds, const struct sampler_params *p, int logit_row,
                              const int32_t *history, int n_prompt, int n_generated, uint64_t seq_index,
                              uint64_t step, int *index, char *err, size_t errlen)
{
    HR_ASSERT(dev_sample_allowed(p) && logit_row >= 0);
    bool rep = p->repetition_penalty != 1.0f, freq = p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    int n_hist = rep ? n_prompt + n_generated : freq ? n_generated : 0;
    /* distinct tokens: at most the vocabulary */
    int most = p->n_logit_bias + n_hist < ds->vocab ? p->n_logit_bias + n_hist : ds->vocab;
    /* rows and out share one capacity: the same start and need give the same growth */
    size_t cap_out = ds->cap, need = (size_t)ds->n + 1;
    if (!vec_reserve((void **)&ds->out, &cap_out, need, sizeof *ds->out, 1) ||
        !vec_reserve((void **)&ds->rows, &ds->cap, need, sizeof *ds->rows, 1) ||
        !vec_reserve((void **)&ds->mods, &ds->cap_mods, (size_t)ds->n_mods + most, sizeof *ds->mods, 1) ||
        !vec_reserve((void **)&ds->biases, &ds->cap_biases, (size_t)ds->n_biases + p->n_logit_bias,
                     sizeof *ds->biases, 1))
        return hr_err(err, errlen, HR_ERR_NOMEM, "device sampling: out of memory");
    int first = ds->n_mods;
    /* Biases: each token's entries together, in the request's order. */
    for (int i = 0; i < p->n_logit_bias; i++)
        dev_sample_mod(ds, first, p->logit_bias[i].token)->n_bias++;
    int at = ds->n_biases;
    for (int k = first; k < ds->n_mods; k++) {
        ds->mods[k].bias_first = at;
        at += ds->mods[k].n_bias;
        ds->mods[k].n_bias = 0;
    }
    for (int i = 0; i < p->n_logit_bias; i++) {
        struct dsample_mod *m = &ds->mods[first + ds->slot[p->logit_bias[i].token]];
        ds->biases[m->bias_first + m->n_bias++] = p->logit_bias[i].bias;
    }
    ds->n_biases = at;
    if (rep)
        for (int i = 0; i < n_prompt + n_generated; i++)
            dev_sample_mod(ds, first, history[i])->in_history = 1;
    if (freq)
        for (int i = n_prompt; i < n_prompt + n_generated; i++)
            dev_sample_mod(ds, first, history[i])->count++;
    for (int k = first; k < ds->n_mods; k++) {
        ds->slot[ds->mods[k].token] = -1;
        if (ds->mods[k].n_bias == 0)
            ds->mods[k].bias_first = 0;
    }
    struct dsample_row *r = &ds->rows[ds->n];
    dev_sample_row_params(p, seq_index, step, r);
    r->logit_row = logit_row;
    r->mod_first = first;
    r->n_mods = ds->n_mods - first;
    *index = ds->n++;
    return HR_OK;
}

enum hr_status dev_sample_run(struct dev_sample *ds, struct backend *be, const float *logits, char *err,
                              size_t errlen)
{
    if (ds->n == 0)
        return HR_OK;
    return be->ops->sample(be, logits, ds->vocab, ds->rows, ds->n, ds->mods, ds->n_mods, ds->biases, ds->n_biases,
                           ds->out, err, errlen);
}

void dev_sample_result(const struct dev_sample *ds, int index, struct sampler_result *r)
{
    HR_ASSERT(index >= 0 && index < ds->n);
    const struct dsample_out *o = &ds->out[index];
    memset(r, 0, sizeof *r);
    r->token = o->token;
    r->logprob = o->logprob;
    r->n_top = o->n_top;
    for (int k = 0; k < o->n_top && k < SAMPLER_MAX_LOGPROBS; k++) {
        r->top[k].token = o->top[k].token;
        r->top[k].logprob = o->top[k].logprob;
    }
}
