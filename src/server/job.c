/* One OpenAI generation request against the engine (see job.h). */
#include "server/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/redact.h"
#include "server/sse.h"

double job_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Token strings for logprobs: the token decoded alone, special tokens by name. */
static enum hr_status job_token_text(void *ctx, int32_t token, char **text, size_t *len)
{
    struct job *j = ctx;
    char err[HR_ERRLEN];
    return hearth_detokenize(j->engine, &token, 1, false, text, len, err, sizeof err);
}

static enum hr_status job_token_bytes(void *ctx, int32_t token, const char **bytes, size_t *len)
{
    struct job *j = ctx;
    char err[HR_ERRLEN];
    return hearth_token_bytes(j->engine, token, bytes, len, err, sizeof err);
}

/* ---------------------------------------------------------------- preparation */

/* A prompt's token ids: borrowed from the request, or owned (tokenized here). */
struct job_prompt {
    int32_t *ids;  /* [n] */
    int n;
    bool owned;
    int max_tokens;
};

static bool job_ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Renders the conversation; *opened tells whether the prompt ends inside <think>. */
static enum hr_status job_render_chat(struct job *j, char **text, size_t *len, bool *opened, char *param,
                                      size_t paramlen, char *err, size_t errlen)
{
    struct server *s = j->srv;
    struct chat_template_request tr = {
        .messages = j->rq.messages,
        .tools = j->rq.tools,
        .add_generation_prompt = j->rq.add_generation_prompt,
        .enable_thinking = j->rq.enable_thinking,
        .kwargs = j->rq.template_kwargs,
    };
    enum hr_status st;
    pthread_rwlock_rdlock(&s->model_lock);
    if (!s->has_tmpl) {
        st = hr_err(err, errlen, HR_ERR_INVALID, "this model has no chat template (%s); use /v1/completions",
                    s->tmpl_err);
    } else {
        char terr[HR_ERRLEN];
        st = chat_template_model_render(&s->tmpl, &tr, text, len, terr, sizeof terr);
        if (st != HR_OK)
            st = hr_err(err, errlen, st == HR_ERR_NOMEM ? HR_ERR_NOMEM : HR_ERR_INVALID,
                        "the chat template refused the messages: %s", terr);
    }
    pthread_rwlock_unlock(&s->model_lock);
    if (st != HR_OK) {
        snprintf(param, paramlen, "messages");
        return st;
    }
    *opened = job_ends_with(*text, *len, "<think>\n") || job_ends_with(*text, *len, "<think>");
    /* With the qwen3 reasoning parser and thinking on, the constraint starts after </think>. */
    if (s->cfg.reasoning_qwen3 && j->rq.params.grammar_kind != HEARTH_GRAMMAR_NONE)
        j->rq.params.grammar_after_think = !job_ends_with(*text, *len, "</think>\n\n");
    return HR_OK;
}

static enum hr_status job_tokenize(struct job *j, const char *text, size_t len, const char *what,
                                   struct job_prompt *p, char *param, size_t paramlen, char *err, size_t errlen)
{
    char terr[HR_ERRLEN];
    /* a prompt that fills the context leaves no room to generate: the tokenizer stops there */
    pthread_rwlock_rdlock(&j->srv->model_lock);
    int max_context = j->srv->info.max_context;
    pthread_rwlock_unlock(&j->srv->model_lock);
    enum hr_status st = hearth_tokenize_max(j->engine, text, len, max_context, &p->ids, &p->n, terr, sizeof terr);
    if (st == HR_ERR_FULL) {
        snprintf(param, paramlen, "%s", what);
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "This model's maximum context length is %d tokens, but the %s has more tokens", max_context,
                      what);
    }
    if (st != HR_OK) {
        snprintf(param, paramlen, "%s", what);
        return hr_err(err, errlen, st == HR_ERR_NOMEM ? HR_ERR_NOMEM : HR_ERR_INVALID, "'%s' cannot be tokenized: %s",
                      what, terr);
    }
    p->owned = true;
    return HR_OK;
}

static enum hr_status job_queue_chunk(struct job *j, json_t *chunk)
{
    if (!chunk)
        return HR_OK;
    enum hr_status st = sse_append_json(&j->out, chunk);
    json_decref(chunk);
    return st;
}

/* A non-streamed response is built whole in memory: refuse one that could be larger than
 * --max-response-bytes.  The bound counts every token it may hold at a generous size per
 * token (text, and each logprob entry with its alternatives), so a request it lets through
 * stays near the limit whatever the model writes. */
#define JOB_TOKEN_BYTES 16.0    /* text and bookkeeping of one token */
#define JOB_LOGPROB_BYTES 64.0  /* one logprob entry: token string, number, bytes array */

static enum hr_status job_check_response_size(struct job *j, const struct job_prompt *prompts, int n_prompts,
                                              char *param, size_t paramlen, char *err, size_t errlen)
{
    const struct openai_request *q = &j->rq;
    double per_token = JOB_TOKEN_BYTES + (q->params.logprobs ? (1.0 + q->top_logprobs_asked) * JOB_LOGPROB_BYTES : 0);
    double total = 1024;
    for (int i = 0; i < n_prompts; i++) {
        double tokens = prompts[i].max_tokens;
        if (q->echo)
            tokens += prompts[i].n;
        total += (double)q->params.n * tokens * per_token;
    }
    size_t cap = j->srv->cfg.max_response_bytes;
    if (total <= (double)cap)
        return HR_OK;
    snprintf(param, paramlen, "max_tokens");
    return hr_err(err, errlen, HR_ERR_INVALID,
                  "The response could reach %.1f MiB (%d prompt(s) x n %d x max_tokens%s), above this server's "
                  "limit of %zu bytes for a response that is not streamed: lower max_tokens, n or logprobs, "
                  "or set \"stream\": true",
                  total / 1048576.0, n_prompts, q->params.n, q->params.logprobs ? " with logprobs" : "", cap);
}

/* ---------------------------------------------------------------- start */

enum hr_status job_start(struct job *j, struct server *s, struct openai_request *rq, int key_index, char *param,
                         size_t paramlen, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->srv = s;
    j->rq = *rq;
    memset(rq, 0, sizeof *rq);
    if (param && paramlen)
        param[0] = 0;
    atomic_fetch_add(&s->active_jobs, 1);
    j->counted = true;
    j->engine = server_engine(s);
    if (!j->engine || atomic_load(&s->cancel_all))
        return hr_err(err, errlen, HR_ERR_FULL, server_get_state(s) == SERVER_STATE_LOADING
                                                    ? "the model is still loading; retry shortly"
                                                    : "the server is not serving (stopping or the model failed to load)");

    struct openai_request *q = &j->rq;
    bool chat = q->endpoint == OPENAI_ENDPOINT_CHAT;
    int n_prompts = chat ? 1 : q->n_prompts;
    struct job_prompt *prompts = calloc((size_t)n_prompts, sizeof *prompts);
    if (!prompts)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    enum hr_status st = HR_OK;
    bool opened = false;

    /* the prompts' token ids */
    if (chat) {
        char *text = NULL;
        size_t len = 0;
        st = job_render_chat(j, &text, &len, &opened, param, paramlen, err, errlen);
        if (st == HR_OK)
            st = job_tokenize(j, text, len, "messages", &prompts[0], param, paramlen, err, errlen);
        free(text);
    } else {
        for (int i = 0; i < n_prompts && st == HR_OK; i++) {
            const struct openai_prompt *op = &q->prompts[i];
            if (op->text) {
                st = job_tokenize(j, op->text, op->text_len, "prompt", &prompts[i], param, paramlen, err, errlen);
            } else {
                prompts[i].ids = op->ids;
                prompts[i].n = op->n_ids;
            }
        }
    }
    int max_context = 0, vocab = 0;
    pthread_rwlock_rdlock(&s->model_lock);
    max_context = s->info.max_model_len;
    vocab = s->info.vocab_size;
    pthread_rwlock_unlock(&s->model_lock);
    for (int i = 0; i < n_prompts && st == HR_OK; i++) {
        st = openai_check_context(q, prompts[i].n, max_context, &prompts[i].max_tokens, param, paramlen, err, errlen);
        for (int k = 0; st == HR_OK && vocab > 0 && !prompts[i].owned && k < prompts[i].n; k++)
            if (prompts[i].ids[k] >= vocab) {
                snprintf(param, paramlen, "prompt");
                st = hr_err(err, errlen, HR_ERR_INVALID, "'prompt' token id %d is beyond the vocabulary (%d)",
                            (int)prompts[i].ids[k], vocab);
            }
    }

    if (st == HR_OK && !q->stream)
        st = job_check_response_size(j, prompts, n_prompts, param, paramlen, err, errlen);

    /* the response: choices in prompt order, then sample order */
    j->n_subs = n_prompts;
    j->n_per_sub = q->params.n;
    int n_choices = n_prompts * q->params.n;
    if (st == HR_OK) {
        char id[64];
        server_make_id(s, chat ? "chatcmpl-" : "cmpl-", id, sizeof id);
        struct response_config rc = {
            .endpoint = q->endpoint,
            .id = id,
            .created = (int64_t)time(NULL),
            .model = q->model,
            .fingerprint = s->fingerprint,
            .n_choices = n_choices,
            .stream = q->stream,
            .include_usage = q->include_usage,
            .logprobs = q->params.logprobs,
            .top_logprobs = q->top_logprobs_asked,
            .reasoning = chat && s->cfg.reasoning_qwen3,
            .reasoning_opened = opened,
            .tool_calls = chat && s->cfg.tool_calls_qwen3 && q->tools,
            .token_text = job_token_text,
            .token_bytes = job_token_bytes,
            .token_ctx = j,
        };
        st = response_init(&j->resp, &rc, err, errlen);
    }
    if (st == HR_OK && !(j->t_last = calloc((size_t)n_choices, sizeof *j->t_last)))
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    if (st == HR_OK && !(j->subs = calloc((size_t)n_prompts, sizeof *j->subs)))
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");

    /* what streams before the first token: the assistant role, the echoed prompt */
    for (int c = 0; st == HR_OK && chat && q->stream && c < n_choices; c++)
        st = job_queue_chunk(j, response_role_chunk(&j->resp, c));
    for (int i = 0; st == HR_OK && q->echo && i < n_prompts; i++) {
        char *text = NULL;
        size_t len = 0;
        if (q->prompts[i].text) {
            text = strdup(q->prompts[i].text);
            len = q->prompts[i].text_len;
            if (!text)
                st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        } else {
            char derr[HR_ERRLEN];
            if (hearth_detokenize(j->engine, prompts[i].ids, prompts[i].n, false, &text, &len, derr, sizeof derr) !=
                HR_OK) {
                snprintf(param, paramlen, "prompt");
                st = hr_err(err, errlen, HR_ERR_INVALID, "'prompt' cannot be decoded for echo: %s", derr);
            }
        }
        for (int k = 0; st == HR_OK && k < q->params.n; k++) {
            json_t *chunk = NULL;
            st = response_prefix(&j->resp, i * q->params.n + k, text, len, &chunk, err, errlen);
            if (st == HR_OK)
                st = job_queue_chunk(j, chunk);
            /* the prompt's first token: nothing scores it; the rest come as events */
            if (st == HR_OK && q->params.prompt_logprobs && prompts[i].n > 0) {
                st = response_prompt_logprob(&j->resp, i * q->params.n + k, prompts[i].ids[0], NULL, &chunk, err,
                                             errlen);
                if (st == HR_OK)
                    st = job_queue_chunk(j, chunk);
            }
        }
        free(text);
    }
    if (st == HR_OK && j->out.oom)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");

    /* submission: all prompts or none */
    /* --salt-per-key: the key's salt namespaces the client's own cache_salt (the key salt
     * has a fixed length, so the pair is recovered from the joined string exactly) */
    const char *key_salt = auth_salt(&s->auth, key_index);
    char *salt = NULL;
    if (st == HR_OK && key_salt) {
        const char *cs = q->params.cache_salt ? q->params.cache_salt : "";
        size_t kl = strlen(key_salt), cl = strlen(cs);
        if (!(salt = malloc(kl + 1 + cl + 1)))
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        else if (cl)
            snprintf(salt, kl + cl + 2, "%s/%s", key_salt, cs);
        else
            snprintf(salt, kl + 1, "%s", key_salt);
    }
    j->t_start = job_now();
    for (int i = 0; st == HR_OK && i < n_prompts; i++) {
        struct hearth_request_params p = q->params;
        p.prompt = NULL;
        p.prompt_ids = prompts[i].ids;
        p.n_prompt_ids = prompts[i].n;
        p.max_tokens = prompts[i].max_tokens;
        if (salt)
            p.cache_salt = salt;
        if (q->stream)
            p.max_queued_bytes = s->cfg.max_unsent_bytes;
        j->subs[i].prompt_tokens = prompts[i].n;
        char serr[HR_ERRLEN];
        st = hearth_submit(j->engine, &p, &j->subs[i].req, serr, sizeof serr);
        if (st != HR_OK) {
            j->subs[i].req = NULL;
            st = hr_err(err, errlen, st, "%s", serr);
            if (q->params.grammar_kind != HEARTH_GRAMMAR_NONE && !strncmp(serr, "grammar", 7) && param && paramlen)
                snprintf(param, paramlen, "%s", q->structured.param);
            if (q->params.grammar_kind != HEARTH_GRAMMAR_NONE && !strncmp(serr, "json schema", 11) && param &&
                paramlen)
                snprintf(param, paramlen, "%s", q->structured.param);
            if (q->params.grammar_kind != HEARTH_GRAMMAR_NONE && !strncmp(serr, "regex", 5) && param && paramlen)
                snprintf(param, paramlen, "%s", q->structured.param);
        }
    }
    free(salt);
    for (int i = 0; i < n_prompts; i++)
        if (prompts[i].owned)
            free(prompts[i].ids);
    free(prompts);
    if (st != HR_OK)
        job_cancel(j);
    return st;
}

/* ---------------------------------------------------------------- events */

static void job_set_fail(struct job *j, enum hr_status st, const char *msg)
{
    if (j->fail != HR_OK)
        return;
    j->fail = st;
    redact_paths(msg && *msg ? msg : "the engine failed", j->fail_msg, sizeof j->fail_msg);
}

/* Every DONE came: the stream's closing frames. */
static void job_complete(struct job *j)
{
    j->finished = true;
    metrics_observe_e2e(&j->srv->metrics, job_now() - j->t_start);
    if (!j->rq.stream)
        return;
    if (j->fail != HR_OK) {
        json_t *e = openai_error_json(500, j->fail_msg, NULL, NULL);
        job_queue_chunk(j, e);
    } else if (j->rq.include_usage) {
        job_queue_chunk(j, response_usage_chunk(&j->resp));
    }
    sse_append_done(&j->out);
}

static void job_event(struct job *j, int sub, const struct hearth_event *ev)
{
    char err[HR_ERRLEN];
    json_t *chunk = NULL;
    enum hr_status st = HR_OK;
    int choice = sub * j->n_per_sub + ev->index;
    bool valid_index = ev->index >= 0 && ev->index < j->n_per_sub;
    bool stream = j->rq.stream;
    switch (ev->type) {
    case HEARTH_EVENT_PROMPT_LOGPROB:
        /* one entry for every sample of this prompt (they share it) */
        for (int k = 0; st == HR_OK && k < j->n_per_sub; k++) {
            json_t *pc = NULL;
            st = response_prompt_logprob(&j->resp, sub * j->n_per_sub + k, ev->token, ev, stream ? &pc : NULL, err,
                                         sizeof err);
            if (st == HR_OK)
                job_queue_chunk(j, pc);
        }
        break;
    case HEARTH_EVENT_TOKEN: {
        if (!valid_index)
            return;
        double now = job_now();
        if (!j->seen_token) {
            j->seen_token = true;
            j->t_first_token = now;
            metrics_observe_ttft(&j->srv->metrics, now - j->t_start);
        } else if (j->t_last[choice] > 0) {
            metrics_observe_itl(&j->srv->metrics, now - j->t_last[choice]);
        }
        j->t_last[choice] = now;
        st = response_token(&j->resp, choice, ev, stream ? &chunk : NULL, err, sizeof err);
        break;
    }
    case HEARTH_EVENT_FINISH:
        if (!valid_index)
            return;
        if (ev->finish_reason == HEARTH_FINISH_ERROR)
            job_set_fail(j, HR_ERR_INTERNAL, ev->message);
        st = response_finish(&j->resp, choice, ev->finish_reason, stream ? &chunk : NULL, err, sizeof err);
        break;
    case HEARTH_EVENT_DONE:
        j->subs[sub].done = true;
        response_add_usage(&j->resp, ev->prompt_tokens, ev->cached_tokens, ev->completion_tokens);
        if (sub == 0)
            j->seed = ev->seed;
        if (ev->finish_reason == HEARTH_FINISH_ERROR)
            job_set_fail(j, HR_ERR_INTERNAL, ev->message);
        /* samples that never got a FINISH (cancelled, failed) end with the request's reason */
        for (int k = 0; k < j->n_per_sub; k++) {
            int c = sub * j->n_per_sub + k;
            if (j->resp.choices[c].finished)
                continue;
            enum hearth_finish_reason why = ev->finish_reason != HEARTH_FINISH_NONE ? ev->finish_reason
                                                                                  : HEARTH_FINISH_CANCELLED;
            json_t *fc = NULL;
            if (response_finish(&j->resp, c, why, stream ? &fc : NULL, err, sizeof err) == HR_OK)
                job_queue_chunk(j, fc);
        }
        break;
    }
    if (st != HR_OK) {
        job_set_fail(j, st, err);
        job_cancel(j);
    }
    job_queue_chunk(j, chunk);
    if (j->out.oom && j->fail == HR_OK) {
        job_set_fail(j, HR_ERR_NOMEM, "out of memory for the stream");
        job_cancel(j);
    }
    bool all = true;
    for (int i = 0; i < j->n_subs; i++)
        all = all && j->subs[i].done;
    if (all && !j->finished)
        job_complete(j);
}

static void job_pump_events(struct job *j, int timeout_ms);

void job_pump(struct job *j, int timeout_ms)
{
    job_pump_events(j, timeout_ms);
    if (j->out_filter)
        j->out_filter(j);
}

static void job_pump_events(struct job *j, int timeout_ms)
{
    if (j->finished || !j->subs)
        return;
    struct hearth_event ev;
    int handled = 0, open = 0, first = -1;
    for (int i = 0; i < j->n_subs; i++) {
        if (j->subs[i].done || !j->subs[i].req)
            continue;
        while (handled < 512 && !j->subs[i].done) {
            enum hr_status st = hearth_request_next_event(j->subs[i].req, &ev, 0);
            if (st == HR_ERR_NOT_FOUND) { /* DONE was taken already: cannot happen, but do not spin */
                ev = (struct hearth_event){.type = HEARTH_EVENT_DONE, .finish_reason = HEARTH_FINISH_CANCELLED};
                job_event(j, i, &ev);
                break;
            }
            if (st != HR_OK)
                break;
            job_event(j, i, &ev);
            handled++;
        }
        if (!j->subs[i].done) {
            open++;
            if (first < 0)
                first = i;
        }
    }
    if (handled || first < 0)
        return;
    /* nothing was ready: wait on one request (briefly when others may be producing) */
    int t = open > 1 && timeout_ms > 5 ? 5 : timeout_ms;
    enum hr_status st = hearth_request_next_event(j->subs[first].req, &ev, t);
    if (st == HR_OK) {
        job_event(j, first, &ev);
    } else if (st == HR_ERR_NOT_FOUND) {
        ev = (struct hearth_event){.type = HEARTH_EVENT_DONE, .finish_reason = HEARTH_FINISH_CANCELLED};
        job_event(j, first, &ev);
    }
}

void job_cancel(struct job *j)
{
    if (!j->cancelled)
        j->t_cancel = job_now();
    j->cancelled = true;
    for (int i = 0; j->subs && i < j->n_subs; i++)
        if (j->subs[i].req && !j->subs[i].done)
            hearth_request_cancel(j->subs[i].req);
}

bool job_abandoned(const struct job *j)
{
    return j->cancelled && job_now() - j->t_cancel > 5.0;
}

json_t *job_body(struct job *j)
{
    return response_body(&j->resp);
}

enum hr_status job_body_text(struct job *j, char **out, size_t *len, char *err, size_t errlen)
{
    return response_body_text(&j->resp, out, len, err, errlen);
}

void job_access_usage(const struct job *j, struct access_log_usage *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    out->set = true;
    out->t_first_token = j->t_first_token;
    if (j->finished) {
        out->prompt_tokens = j->resp.prompt_tokens;
        out->cached_tokens = j->resp.cached_tokens;
        out->generated_tokens = j->resp.completion_tokens;
        return;
    }
    out->cached_tokens = -1;
    for (int i = 0; j->subs && i < j->n_subs; i++)
        out->prompt_tokens += j->subs[i].prompt_tokens;
    for (int c = 0; j->resp.choices && c < j->n_subs * j->n_per_sub; c++)
        out->generated_tokens += j->resp.choices[c].n_tokens;
}

void job_free(struct job *j)
{
    if (!j)
        return;
    for (int i = 0; j->subs && i < j->n_subs; i++)
        hearth_request_free(j->subs[i].req); /* cancels what still runs */
    free(j->subs);
    free(j->t_last);
    response_free(&j->resp);
    strbuf_free(&j->out);
    openai_request_free(&j->rq);
    if (j->filter_free)
        j->filter_free(j->filter_ctx);
    if (j->counted)
        atomic_fetch_sub(&j->srv->active_jobs, 1);
    memset(j, 0, sizeof *j);
}
