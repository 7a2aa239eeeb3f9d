/* hearth_submit: validates a request, turns it into a group of sequences (all
 * memory it will need is allocated here, at admission to the queue), and queues it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static enum hr_status submit_sampler_params(const struct hearth_engine *e, const struct hearth_request_params *p,
                                            struct group *g, char *err, size_t errlen)
{
    const struct model_config *c = &e->m.cfg;
    struct sampler_params *sp = &g->sp;
    sampler_params_default(sp);
    sp->temperature = p->has_temperature ? p->temperature : c->has_temperature ? (float)c->gen_temperature : 1.0f;
    sp->top_p = p->has_top_p ? p->top_p : c->has_top_p ? (float)c->gen_top_p : 1.0f;
    sp->top_k = p->has_top_k ? p->top_k : c->has_top_k ? c->gen_top_k : 0;
    sp->min_p = p->min_p;
    sp->repetition_penalty = p->repetition_penalty == 0.0f ? 1.0f : p->repetition_penalty;
    sp->presence_penalty = p->presence_penalty;
    sp->frequency_penalty = p->frequency_penalty;
    sp->seed = p->has_seed ? p->seed : sampler_seed_draw();
    sp->logprobs = p->logprobs || p->top_logprobs > 0;
    sp->n_logprobs = p->top_logprobs;
    sp->ignore_eos = p->ignore_eos;
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias) || p->n_logit_bias > 1 << 20)
        return hr_err(err, errlen, HR_ERR_INVALID, "logit_bias: bad entry count %d", p->n_logit_bias);
    if (p->n_logit_bias > 0) {
        g->bias = malloc((size_t)p->n_logit_bias * sizeof *g->bias);
        if (!g->bias)
            return hr_err(err, errlen, HR_ERR_NOMEM, "logit_bias: out of memory");
        for (int i = 0; i < p->n_logit_bias; i++)
            g->bias[i] = (struct sampler_logit_bias){.token = p->logit_bias[i].token, .bias = p->logit_bias[i].bias};
        sp->logit_bias = g->bias;
        sp->n_logit_bias = p->n_logit_bias;
    }
    return sampler_params_validate(sp, c->vocab_size, err, errlen);
}

static enum hr_status submit_prompt(struct hearth_engine *e, const struct hearth_request_params *p,
                                    struct tokenizer_ids *ids, const int32_t **out, int *n_out, char *err,
                                    size_t errlen)
{
    if (p->prompt) {
        if (!e->has_tk)
            return hr_err(err, errlen, HR_ERR_INVALID, "prompt: this model has no tokenizer.json; send token ids");
        enum hr_status st = tokenizer_encode(&e->tk, p->prompt, strlen(p->prompt), ids, err, errlen);
        if (st != HR_OK)
            return st;
        *out = ids->ids;
        *n_out = (int)ids->n;
        return HR_OK;
    }
    if (!p->prompt_ids || p->n_prompt_ids < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "prompt: give a text or token ids");
    for (int i = 0; i < p->n_prompt_ids; i++)
        if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= e->m.cfg.vocab_size)
            return hr_err(err, errlen, HR_ERR_INVALID, "prompt: token id %d at %d is outside the vocabulary (%d)",
                          p->prompt_ids[i], i, e->m.cfg.vocab_size);
    *out = p->prompt_ids;
    *n_out = p->n_prompt_ids;
    return HR_OK;
}

/* The request's grammar, compiled here on the caller's thread (or found in the cache). */
static enum hr_status submit_grammar(struct hearth_engine *e, const struct hearth_request_params *p, struct group *g,
                                     char *err, size_t errlen)
{
    if (p->grammar_kind < HEARTH_GRAMMAR_GBNF || p->grammar_kind > HEARTH_GRAMMAR_CHOICE)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: unknown kind %d", (int)p->grammar_kind);
    if (!e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: this model has no tokenizer.json to match text with");
    const char *text = p->grammar ? p->grammar : "";
    if (p->grammar_kind != HEARTH_GRAMMAR_JSON_OBJECT && !p->grammar)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: no source text");
    return grammar_cache_get(&e->gcache, p->grammar_kind, text, strlen(text), &g->grammar, err, errlen);
}

static enum hr_status submit_build(struct hearth_engine *e, const struct hearth_request_params *p, struct group *g,
                                   const int32_t *prompt, int n_prompt, char *err, size_t errlen)
{
    const struct model_config *c = &e->m.cfg;
    int bs = e->kv.block_size;
    if (n_prompt < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "prompt: empty");
    if (n_prompt >= e->max_model_len)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "prompt: %d tokens do not fit max_model_len %d (one must be left to generate)", n_prompt,
                      e->max_model_len);
    if (p->n < 1 || p->n > e->p.max_num_seqs)
        return hr_err(err, errlen, HR_ERR_INVALID, "n: must be in 1..%d (max_num_seqs), got %d", e->p.max_num_seqs,
                      p->n);
    if (p->max_tokens < 0 && p->max_tokens != HEARTH_MAX_TOKENS_AUTO)
        return hr_err(err, errlen, HR_ERR_INVALID, "max_tokens: must be >= 0, got %d", p->max_tokens);
    if (p->n_stop < 0 || p->n_stop > STOP_MAX_STRINGS || (p->n_stop && !p->stop))
        return hr_err(err, errlen, HR_ERR_INVALID, "stop: at most %d strings", STOP_MAX_STRINGS);
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > 1024 || (p->n_stop_token_ids && !p->stop_token_ids))
        return hr_err(err, errlen, HR_ERR_INVALID, "stop_token_ids: at most 1024 ids");
    for (int i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= c->vocab_size)
            return hr_err(err, errlen, HR_ERR_INVALID, "stop_token_ids: id %d is outside the vocabulary",
                          p->stop_token_ids[i]);
    if (p->n_stop > 0 && !e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "stop: this model has no tokenizer.json to match text with");
    enum hr_status st = submit_sampler_params(e, p, g, err, errlen);
    if (st != HR_OK)
        return st;

    /* The group must fit the pool on its own, or preempting everyone else would not let
     * it finish: the prompt's full blocks are shared, every sample owns the rest of its
     * blocks (the partial prompt tail copied on write).  Without max_tokens a sample may
     * grow to max_model_len, lowered so that the n samples fit; one sample always does
     * (max_model_len is at most the pool). */
    int64_t max_tokens = p->max_tokens;
    int64_t room = e->max_model_len - n_prompt;
    int64_t shared = n_prompt / bs;
    if (max_tokens == HEARTH_MAX_TOKENS_AUTO) {
        int64_t own = (e->kv.n_blocks - shared) / p->n;   /* blocks each sample may own */
        int64_t fit = (shared + own) * bs - n_prompt;     /* its tokens beyond the prompt */
        max_tokens = fit < room ? fit : room;
        if (max_tokens < 1)
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "n: %d samples of a %d-token prompt do not fit the KV pool (%d blocks of %d tokens)", p->n,
                          n_prompt, e->kv.n_blocks, bs);
    }
    int max_total = (int)(max_tokens < room ? n_prompt + max_tokens : e->max_model_len);
    int64_t need = shared + (int64_t)p->n * ((max_total + bs - 1) / bs - shared);
    if (need > e->kv.n_blocks)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "request needs up to %lld KV blocks (prompt %d, max_tokens %lld, n %d) but the pool holds %d; "
                      "lower max_tokens or n",
                      (long long)need, n_prompt, (long long)max_tokens, p->n, e->kv.n_blocks);

    const char *salt = p->cache_salt ? p->cache_salt : "";
    if (strlen(salt) > HEARTH_CACHE_SALT_MAX)
        return hr_err(err, errlen, HR_ERR_INVALID, "cache_salt: at most %d bytes", HEARTH_CACHE_SALT_MAX);
    if (!(g->salt = strdup(salt)))
        return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory");
    if (p->sample_index_base < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "sample_index_base: must be >= 0");
    g->n = p->n;
    g->index_base = p->sample_index_base;
    g->prompt_lp = p->prompt_logprobs;
    g->n_prompt = n_prompt;
    g->max_tokens = (int)max_tokens;
    g->max_context = e->max_model_len;
    g->n_stop_ids = (p->ignore_eos ? 0 : c->n_eos) + p->n_stop_token_ids;
    g->stop_ids = calloc((size_t)g->n_stop_ids + 1, sizeof *g->stop_ids);
    g->seqs = calloc((size_t)g->n, sizeof *g->seqs);
    if (!g->stop_ids || !g->seqs)
        return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory");
    int k = 0;
    if (!p->ignore_eos)
        for (int i = 0; i < c->n_eos; i++)
            g->stop_ids[k++] = c->eos_token_ids[i];
    for (int i = 0; i < p->n_stop_token_ids; i++)
        g->stop_ids[k++] = p->stop_token_ids[i];

    if (p->grammar_kind != HEARTH_GRAMMAR_NONE) {
        st = submit_grammar(e, p, g, err, errlen);
        if (st != HR_OK)
            return st;
    }
    int max_table = (max_total + bs) / bs + 1;
    for (int i = 0; i < g->n; i++) {
        struct seq *s = &g->seqs[i];
        s->g = g;
        s->index = i;
        s->cap = max_total + 1;
        s->max_table = max_table;
        s->stop_token = -1;
        s->tokens = malloc((size_t)s->cap * sizeof *s->tokens);
        s->table = malloc((size_t)max_table * sizeof *s->table);
        if (!s->tokens || !s->table)
            return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory");
        memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
        if (g->grammar) {
            int32_t wait = p->grammar_after_think && e->has_tk ? tokenizer_token_id(&e->tk, "</think>") : -1;
            if (!(s->gram = calloc(1, sizeof *s->gram)))
                return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory");
            st = grammar_seq_init(s->gram, g->grammar, wait, err, errlen);
            if (st != HR_OK) {
                free(s->gram);
                s->gram = NULL;
                return st;
            }
        }
        s->n_tokens = n_prompt;
        if (e->has_tk) {
            size_t lens[STOP_MAX_STRINGS];
            for (int j = 0; j < p->n_stop; j++)
                lens[j] = p->stop[j] ? strlen(p->stop[j]) : 0;
            st = detok_init(&s->detok, &e->tk, p->skip_special_tokens, err, errlen);
            if (st == HR_OK) {
                st = stop_matcher_init(&s->stop, p->stop, lens, p->n_stop, err, errlen);
                if (st != HR_OK)
                    detok_free(&s->detok);
            }
            if (st != HR_OK)
                return st;
            s->has_text = true;
        }
    }
    return HR_OK;
}

enum hr_status hearth_submit(struct hearth_engine *e, const struct hearth_request_params *p,
                             struct hearth_request **out, char *err, size_t errlen)
{
    *out = NULL;
    struct group *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory");
    struct tokenizer_ids ids = {0};
    const int32_t *prompt = NULL;
    int n_prompt = 0;
    enum hr_status st = submit_prompt(e, p, &ids, &prompt, &n_prompt, err, errlen);
    if (st == HR_OK)
        st = submit_build(e, p, g, prompt, n_prompt, err, errlen);
    tokenizer_ids_free(&ids);
    if (st == HR_OK && !(g->req = request_new(e, err, errlen)))
        st = HR_ERR_NOMEM;
    if (st == HR_OK)
        g->req->max_queued_bytes = p->max_queued_bytes;
    if (st != HR_OK) {
        group_free(g);
        return st;
    }
    pthread_mutex_lock(&e->mu);
    if (e->stopping || (e->p.max_waiting > 0 && e->n_incoming_reqs + atomic_load(&e->st_waiting_groups) >= e->p.max_waiting)) {
        pthread_mutex_unlock(&e->mu);
        request_unref(g->req);
        request_unref(g->req);
        g->req = NULL;
        group_free(g);
        return hr_err(err, errlen, HR_ERR_FULL, "the queue is full (%d waiting requests); retry later",
                      e->p.max_waiting);
    }
    /* From here on the engine thread owns g and may finish and free it at once. */
    struct hearth_request *r = g->req;
    group_list_push_back(&e->incoming, g);
    e->n_incoming_reqs++;
    e->wakeups++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&e->st_requests, 1);
    *out = r;
    return HR_OK;
}
