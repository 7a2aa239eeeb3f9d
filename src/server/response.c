/* OpenAI response and chunk rendering (see response.h). */
#include "server/response.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *response_strdup(const char *s)
{
    return strdup(s ? s : "");
}

enum hr_status response_init(struct response *r, const struct response_config *cfg, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (cfg->n_choices < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "a response needs at least one choice");
    r->cfg = *cfg;
    r->id = response_strdup(cfg->id);
    r->model = response_strdup(cfg->model);
    r->fingerprint = response_strdup(cfg->fingerprint);
    r->choices = calloc((size_t)cfg->n_choices, sizeof *r->choices);
    if (!r->id || !r->model || !r->fingerprint || !r->choices) {
        response_free(r);
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    r->cfg.id = r->id;
    r->cfg.model = r->model;
    r->cfg.fingerprint = r->fingerprint;
    bool chat = cfg->endpoint == OPENAI_ENDPOINT_CHAT;
    for (int i = 0; i < cfg->n_choices; i++) {
        struct response_choice *c = &r->choices[i];
        reasoning_init(&c->parser, chat && cfg->reasoning, cfg->reasoning_opened);
        char prefix[64]; /* call ids: call_<response id without its kind>_<choice>_<n> */
        const char *dash = strchr(r->id, '-');
        snprintf(prefix, sizeof prefix, "call_%s_%d_", dash ? dash + 1 : r->id, i);
        toolcall_init(&c->calls_parser, chat && cfg->tool_calls, prefix);
        if (chat && cfg->tool_calls && !(c->tool_calls = json_array())) {
            response_free(r);
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
        }
        if (!cfg->logprobs)
            continue;
        if (chat) {
            c->logprobs = json_array();
        } else {
            c->logprobs = json_object();
            if (c->logprobs) {
                json_object_set_new(c->logprobs, "tokens", json_array());
                json_object_set_new(c->logprobs, "token_logprobs", json_array());
                json_object_set_new(c->logprobs, "top_logprobs", json_array());
                json_object_set_new(c->logprobs, "text_offset", json_array());
            }
        }
        if (!c->logprobs) {
            response_free(r);
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
        }
    }
    return HR_OK;
}

void response_free(struct response *r)
{
    if (!r)
        return;
    for (int i = 0; r->choices && i < r->cfg.n_choices; i++) {
        strbuf_free(&r->choices[i].text);
        strbuf_free(&r->choices[i].reasoning);
        toolcall_free(&r->choices[i].calls_parser);
        json_decref(r->choices[i].tool_calls);
        json_decref(r->choices[i].logprobs);
        for (int k = 0; k < 4; k++)
            strbuf_free(&r->choices[i].lp_text[k]);
    }
    free(r->choices);
    free(r->id);
    free(r->model);
    free(r->fingerprint);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- pieces */

static int64_t response_code_points(const char *s, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static json_t *response_bytes_json(const struct response *r, int32_t token, const char *s, size_t n)
{
    const char *raw;
    size_t rn;
    if (r->cfg.token_bytes && r->cfg.token_bytes(r->cfg.token_ctx, token, &raw, &rn) == HR_OK) {
        s = raw;
        n = rn;
    }
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

const char *response_finish_str(enum hearth_finish_reason reason)
{
    switch (reason) {
    case HEARTH_FINISH_STOP: return "stop";
    case HEARTH_FINISH_LENGTH: return "length";
    case HEARTH_FINISH_CANCELLED: return "abort";
    case HEARTH_FINISH_ERROR: return "error";
    case HEARTH_FINISH_NONE: break;
    }
    return NULL;
}

/* A choice that stopped by itself after writing tool calls finished to call them. */
static const char *response_choice_finish_str(const struct response_choice *c)
{
    if (c->finish == HEARTH_FINISH_STOP && json_array_size(c->tool_calls) > 0)
        return "tool_calls";
    return response_finish_str(c->finish);
}

static json_t *response_finish_json(const struct response_choice *c)
{
    const char *s = c->finished ? response_choice_finish_str(c) : NULL;
    return s ? json_string(s) : json_null();
}

/* Choice i's content delta through its tool-call parser, in place; the calls it
 * completes join the choice's list and come back in *new_calls as stream deltas
 * (each with its index), or NULL when there are none. */
static enum hr_status response_content(struct response *r, int i, struct strbuf *text, bool end, json_t **new_calls)
{
    struct response_choice *c = &r->choices[i];
    *new_calls = NULL;
    if (!c->calls_parser.enabled)
        return HR_OK;
    size_t before = json_array_size(c->tool_calls);
    struct strbuf content = {0};
    enum hr_status st =
        toolcall_feed(&c->calls_parser, text->data ? text->data : "", text->len, &content, c->tool_calls);
    if (st == HR_OK && end)
        st = toolcall_flush(&c->calls_parser, &content);
    strbuf_free(text);
    *text = content;
    for (size_t k = before; st == HR_OK && k < json_array_size(c->tool_calls); k++) {
        json_t *d = json_pack("{s:i}", "index", (int)k);
        if (!*new_calls)
            *new_calls = json_array();
        if (!d || !*new_calls || json_object_update(d, json_array_get(c->tool_calls, k)) != 0 ||
            json_array_append(*new_calls, d) != 0)
            st = HR_ERR_NOMEM;
        json_decref(d);
    }
    return st;
}

/* The common head of every body and chunk. */
static json_t *response_head(const struct response *r, bool chunk)
{
    bool chat = r->cfg.endpoint == OPENAI_ENDPOINT_CHAT;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(!chat ? "text_completion" : chunk ? "chat.completion.chunk"
                                                                                   : "chat.completion"));
    json_object_set_new(o, "created", json_integer(r->cfg.created));
    json_object_set_new(o, "model", openai_json_string(r->model, strlen(r->model)));
    json_object_set_new(o, "system_fingerprint", json_string(r->fingerprint));
    json_object_set_new(o, "choices", json_array());
    return o;
}

/* A chunk holding one choice; "usage": null when the stream ends with a usage chunk. */
static json_t *response_chunk(const struct response *r, json_t *choice)
{
    json_t *o = response_head(r, true);
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_array_append_new(json_object_get(o, "choices"), choice);
    if (r->cfg.include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

/* Appends v (stolen) as JSON text to b, after a comma unless b is empty. */
static enum hr_status response_lp_append(struct strbuf *b, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(v);
    if (!s)
        return HR_ERR_NOMEM;
    if (b->len)
        strbuf_append(b, ",", 1);
    strbuf_append(b, s, strlen(s));
    free(s);
    return b->oom ? HR_ERR_NOMEM : HR_OK;
}

/* A token's text for its logprob record.  An id the tokenizer does not know (the
 * embedding's padding rows past the tokenizer's vocabulary, which a model may sample)
 * has no text: "", as its bytes are [] (not an error that would fail the request). */
static enum hr_status response_token_text(const struct response *r, int32_t token, char **text, size_t *len)
{
    if (r->cfg.token_text(r->cfg.token_ctx, token, text, len) == HR_OK)
        return HR_OK;
    *len = 0;
    return (*text = strdup("")) ? HR_OK : HR_ERR_NOMEM;
}

/* The logprob record of one token: appended to the choice and returned as the chunk's own
 * (new reference; completions: the four parallel arrays of one entry, chat: one entry). */
static enum hr_status response_logprob(struct response *r, struct response_choice *c, int32_t token,
                                       const struct hearth_event *ev, int64_t *offset, json_t **out, char *err,
                                       size_t errlen)
{
    *out = NULL;
    char *tok = NULL;
    size_t tok_len = 0;
    if (!r->cfg.token_text)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "logprobs need the model's tokenizer");
    if (response_token_text(r, token, &tok, &tok_len) != HR_OK)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
    /* ev NULL: a prompt's first token, which nothing scores (completions only). */
    int n_top = !ev || ev->n_top < 0 ? 0 : ev->n_top > HEARTH_MAX_TOP_LOGPROBS ? HEARTH_MAX_TOP_LOGPROBS : ev->n_top;
    if (n_top > r->cfg.top_logprobs)
        n_top = r->cfg.top_logprobs;
    enum hr_status st = HR_OK;
    if (r->cfg.endpoint == OPENAI_ENDPOINT_CHAT) {
        json_t *e = json_object();
        json_t *top = json_array();
        json_object_set_new(e, "token", openai_json_string(tok, tok_len));
        json_object_set_new(e, "logprob", openai_json_logprob(ev->logprob));
        json_object_set_new(e, "bytes", response_bytes_json(r, ev->token, tok, tok_len));
        for (int k = 0; k < n_top && st == HR_OK; k++) {
            char *t = NULL;
            size_t tl = 0;
            if (response_token_text(r, ev->top[k].token, &t, &tl) != HR_OK) {
                st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
                break;
            }
            json_t *te = json_object();
            json_object_set_new(te, "token", openai_json_string(t, tl));
            json_object_set_new(te, "logprob", openai_json_logprob(ev->top[k].logprob));
            json_object_set_new(te, "bytes", response_bytes_json(r, ev->top[k].token, t, tl));
            json_array_append_new(top, te);
            free(t);
        }
        json_object_set_new(e, "top_logprobs", top);
        if (st == HR_OK && !r->cfg.stream) {
            if (response_lp_append(&c->lp_text[0], e) != HR_OK)
                st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
            *out = json_null();
            e = NULL;
        } else if (st == HR_OK) {
            json_array_append(c->logprobs, e);
            *out = json_pack("{s:[O]}", "content", e);
        }
        json_decref(e);
    } else {
        json_t *top = json_object();
        for (int k = 0; k < n_top && st == HR_OK; k++) {
            char *t = NULL;
            size_t tl = 0;
            if (response_token_text(r, ev->top[k].token, &t, &tl) != HR_OK) {
                st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
                break;
            }
            json_t *key = openai_json_string(t, tl);
            if (key && !json_object_get(top, json_string_value(key)))
                json_object_set_new(top, json_string_value(key), openai_json_logprob(ev->top[k].logprob));
            json_decref(key);
            free(t);
        }
        /* the sampled token is always among its own alternatives, as OpenAI reports it */
        json_t *key = openai_json_string(tok, tok_len);
        if (ev && key && !json_object_get(top, json_string_value(key)))
            json_object_set_new(top, json_string_value(key), openai_json_logprob(ev->logprob));
        json_decref(key);
        if (!ev) {
            json_decref(top);
            top = json_null();
        }
        json_t *token = openai_json_string(tok, tok_len);
        json_t *lp = ev ? openai_json_logprob(ev->logprob) : json_null();
        json_t *off = json_integer(*offset);
        if (st == HR_OK && !r->cfg.stream) {
            json_t *parts[4] = {token, lp, top, off};
            for (int k = 0; k < 4; k++)
                if (response_lp_append(&c->lp_text[k], parts[k]) != HR_OK && st == HR_OK)
                    st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
            token = lp = top = off = NULL;
            *out = json_null();
        } else if (st == HR_OK) {
            json_array_append(json_object_get(c->logprobs, "tokens"), token);
            json_array_append(json_object_get(c->logprobs, "token_logprobs"), lp);
            json_array_append(json_object_get(c->logprobs, "top_logprobs"), top);
            json_array_append(json_object_get(c->logprobs, "text_offset"), off);
            *out = json_pack("{s:[O],s:[O],s:[O],s:[O]}", "tokens", token, "token_logprobs", lp, "top_logprobs", top,
                             "text_offset", off);
        }
        json_decref(token);
        json_decref(lp);
        json_decref(off);
        json_decref(top);
    }
    *offset += response_code_points(tok, tok_len);
    free(tok);
    if (st == HR_OK && !*out)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for logprobs");
    return st;
}

/* The choice object of a chunk. */
static json_t *response_chunk_choice(const struct response *r, int i, const struct strbuf *text,
                                     const struct strbuf *reasoning, json_t *calls, json_t *logprobs,
                                     const char *finish)
{
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(i));
    if (r->cfg.endpoint == OPENAI_ENDPOINT_CHAT) {
        json_t *delta = json_object();
        if (reasoning && reasoning->len)
            json_object_set_new(delta, "reasoning_content", openai_json_string(reasoning->data, reasoning->len));
        if (text && text->len)
            json_object_set_new(delta, "content", openai_json_string(text->data, text->len));
        if (calls)
            json_object_set_new(delta, "tool_calls", calls);
        if (!finish && json_object_size(delta) == 0)
            json_object_set_new(delta, "content", json_string(""));
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", text && text->len ? openai_json_string(text->data, text->len) : json_string(""));
        json_decref(calls);
    }
    json_object_set_new(ch, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    return ch;
}

/* ---------------------------------------------------------------- events */

enum hr_status response_prefix(struct response *r, int choice, const char *text, size_t len, json_t **chunk,
                               char *err, size_t errlen)
{
    if (chunk)
        *chunk = NULL;
    HR_ASSERT(choice >= 0 && choice < r->cfg.n_choices);
    struct response_choice *c = &r->choices[choice];
    if (strbuf_append(&c->text, text, len) != HR_OK)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    c->text_chars += response_code_points(text, len);
    if (r->cfg.stream && chunk && len) {
        struct strbuf t = {.data = (char *)text, .len = len};
        *chunk = response_chunk(r, response_chunk_choice(r, choice, &t, NULL, NULL, NULL, NULL));
        if (!*chunk)
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    return HR_OK;
}

enum hr_status response_prompt_logprob(struct response *r, int choice, int32_t token, const struct hearth_event *ev,
                                       json_t **chunk, char *err, size_t errlen)
{
    if (chunk)
        *chunk = NULL;
    HR_ASSERT(choice >= 0 && choice < r->cfg.n_choices && r->cfg.endpoint != OPENAI_ENDPOINT_CHAT);
    struct response_choice *c = &r->choices[choice];
    json_t *lp = NULL;
    enum hr_status st = response_logprob(r, c, token, ev, &c->echo_chars, &lp, err, errlen);
    if (st == HR_OK && r->cfg.stream && chunk) {
        *chunk = response_chunk(r, response_chunk_choice(r, choice, NULL, NULL, NULL, lp, NULL));
        lp = NULL;
        if (!*chunk)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    json_decref(lp);
    return st;
}

json_t *response_role_chunk(const struct response *r, int choice)
{
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(choice));
    json_object_set_new(ch, "delta", json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
    json_object_set_new(ch, "logprobs", json_null());
    json_object_set_new(ch, "finish_reason", json_null());
    return response_chunk(r, ch);
}

enum hr_status response_token(struct response *r, int choice, const struct hearth_event *ev, json_t **chunk,
                              char *err, size_t errlen)
{
    if (chunk)
        *chunk = NULL;
    HR_ASSERT(choice >= 0 && choice < r->cfg.n_choices);
    struct response_choice *c = &r->choices[choice];
    struct strbuf dtext = {0}, dreason = {0};
    const char *text = ev->text ? ev->text : "";
    size_t text_len = ev->text ? ev->text_len : 0;
    enum hr_status st = HR_OK;
    c->n_tokens++;
    if (r->cfg.endpoint == OPENAI_ENDPOINT_CHAT)
        st = reasoning_feed(&c->parser, text, text_len, &dreason, &dtext);
    else
        st = strbuf_append(&dtext, text, text_len);
    json_t *lp = NULL;
    /* the eos / stop id that ends a sample gets no entry (as OpenAI and vLLM) */
    if (st == HR_OK && r->cfg.logprobs && !ev->is_stop_token)
        st = response_logprob(r, c, ev->token, ev, &c->text_chars, &lp, err, errlen);
    else if (st != HR_OK)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    json_t *calls = NULL;
    if (st == HR_OK && response_content(r, choice, &dtext, false, &calls) != HR_OK)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    if (st == HR_OK) {
        strbuf_append(&c->text, dtext.data ? dtext.data : "", dtext.len);
        strbuf_append(&c->reasoning, dreason.data ? dreason.data : "", dreason.len);
        if (c->text.oom || c->reasoning.oom)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    if (st == HR_OK && r->cfg.stream && chunk && (dtext.len || dreason.len || calls || lp)) {
        *chunk = response_chunk(r, response_chunk_choice(r, choice, &dtext, &dreason, calls, lp, NULL));
        lp = NULL;
        calls = NULL;
        if (!*chunk)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    json_decref(calls);
    json_decref(lp);
    strbuf_free(&dtext);
    strbuf_free(&dreason);
    return st;
}

enum hr_status response_finish(struct response *r, int choice, enum hearth_finish_reason reason, json_t **chunk,
                               char *err, size_t errlen)
{
    if (chunk)
        *chunk = NULL;
    HR_ASSERT(choice >= 0 && choice < r->cfg.n_choices);
    struct response_choice *c = &r->choices[choice];
    if (c->finished)
        return HR_OK;
    struct strbuf dtext = {0}, dreason = {0};
    json_t *calls = NULL;
    reasoning_flush(&c->parser, &dreason, &dtext);
    enum hr_status st = response_content(r, choice, &dtext, true, &calls);
    strbuf_append(&c->text, dtext.data ? dtext.data : "", dtext.len);
    strbuf_append(&c->reasoning, dreason.data ? dreason.data : "", dreason.len);
    c->finished = true;
    c->finish = reason;
    if (st != HR_OK || dtext.oom || dreason.oom || c->text.oom || c->reasoning.oom)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    if (st == HR_OK && r->cfg.stream && chunk) {
        const char *fs = response_choice_finish_str(c);
        *chunk =
            response_chunk(r, response_chunk_choice(r, choice, &dtext, &dreason, calls, NULL, fs ? fs : "stop"));
        calls = NULL;
        if (!*chunk)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for a response");
    }
    json_decref(calls);
    strbuf_free(&dtext);
    strbuf_free(&dreason);
    return st;
}

void response_add_usage(struct response *r, int prompt_tokens, int cached_tokens, int completion_tokens)
{
    r->prompt_tokens += prompt_tokens;
    r->cached_tokens += cached_tokens;
    r->completion_tokens += completion_tokens;
}

/* ---------------------------------------------------------------- bodies */

json_t *response_usage_json(const struct response *r)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", r->prompt_tokens, "completion_tokens",
                     r->completion_tokens, "total_tokens", r->prompt_tokens + r->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", r->cached_tokens);
}

json_t *response_usage_chunk(const struct response *r)
{
    json_t *o = response_head(r, true);
    if (o)
        json_object_set_new(o, "usage", response_usage_json(r));
    return o;
}

/* A not streamed choice's logprobs from its JSON text: the tree (placeholder NULL), or
 * a string that response_body_text replaces by the text. */
static json_t *response_lp_value(const struct response_choice *c, bool chat, const char *placeholder)
{
    if (placeholder)
        return json_string(placeholder);
    static const char *const keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    json_t *o = chat ? NULL : json_object();
    for (int k = 0; k < (chat ? 1 : 4); k++) {
        struct strbuf b = {0};
        strbuf_printf(&b, "[%s]", c->lp_text[k].data ? c->lp_text[k].data : "");
        json_t *a = b.oom ? NULL : json_loadb(b.data, b.len, 0, NULL);
        strbuf_free(&b);
        if (chat)
            return a;
        json_object_set_new(o, keys[k], a ? a : json_array());
    }
    return o;
}

/* The body; placeholders non-NULL: placeholders[i] stands for choice i's logprobs. */
static json_t *response_body_json(const struct response *r, char *const *placeholders)
{
    json_t *o = response_head(r, false);
    if (!o)
        return NULL;
    json_t *choices = json_object_get(o, "choices");
    bool chat = r->cfg.endpoint == OPENAI_ENDPOINT_CHAT;
    for (int i = 0; i < r->cfg.n_choices; i++) {
        const struct response_choice *c = &r->choices[i];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        json_t *text = openai_json_string(c->text.data ? c->text.data : "", c->text.len);
        if (chat) {
            json_t *msg = json_object();
            bool called = json_array_size(c->tool_calls) > 0;
            json_object_set_new(msg, "role", json_string("assistant"));
            if (called && c->text.len == 0) {
                json_decref(text);
                text = json_null();
            }
            json_object_set_new(msg, "content", text);
            if (called)
                json_object_set_new(msg, "tool_calls", json_incref(c->tool_calls));
            if (r->cfg.reasoning)
                json_object_set_new(msg, "reasoning_content",
                                    c->reasoning.len ? openai_json_string(c->reasoning.data, c->reasoning.len)
                                                     : json_null());
            json_object_set_new(msg, "refusal", json_null());
            json_object_set_new(ch, "message", msg);
            json_t *lp = !c->logprobs  ? json_null()
                         : r->cfg.stream ? json_pack("{s:O,s:n}", "content", c->logprobs, "refusal")
                         : placeholders  ? response_lp_value(c, true, placeholders[i])
                                         : json_pack("{s:o,s:n}", "content", response_lp_value(c, true, NULL), "refusal");
            json_object_set_new(ch, "logprobs", lp);
        } else {
            json_object_set_new(ch, "text", text);
            json_object_set_new(ch, "logprobs", !c->logprobs  ? json_null()
                                                : r->cfg.stream ? json_incref(c->logprobs)
                                                                : response_lp_value(c, false,
                                                                                    placeholders ? placeholders[i] : NULL));
        }
        json_object_set_new(ch, "finish_reason", response_finish_json(c));
        json_array_append_new(choices, ch);
    }
    json_object_set_new(o, "usage", response_usage_json(r));
    return o;
}

json_t *response_body(const struct response *r)
{
    return response_body_json(r, NULL);
}

enum hr_status response_body_text(const struct response *r, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    int n = r->cfg.n_choices;
    bool lp = r->cfg.logprobs && !r->cfg.stream;
    bool chat = r->cfg.endpoint == OPENAI_ENDPOINT_CHAT;
    /* each choice's logprobs stand in the body as a string no text can make: it starts
     * with a byte JSON escapes (\u0001) and carries a random number */
    char **ph = lp ? calloc((size_t)n, sizeof *ph) : NULL;
    char (*marks)[64] = lp ? calloc((size_t)n, sizeof *marks) : NULL;
    enum hr_status st = HR_OK;
    if (lp && (!ph || !marks))
        st = HR_ERR_NOMEM;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long nonce = (unsigned long long)(uintptr_t)r ^ ((unsigned long long)ts.tv_nsec << 24) ^
                               (unsigned long long)ts.tv_sec;
    for (int i = 0; st == HR_OK && lp && i < n; i++) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "\001hearth-lp-%016llx-%d", nonce, i);
        if (!(ph[i] = strdup(tmp)))
            st = HR_ERR_NOMEM;
        snprintf(marks[i], sizeof marks[i], "\"\\u0001hearth-lp-%016llx-%d\"", nonce, i);
    }
    char *head = NULL;
    if (st == HR_OK) {
        json_t *o = response_body_json(r, ph);
        head = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
        json_decref(o);
        if (!head)
            st = HR_ERR_NOMEM;
    }
    size_t total = head ? strlen(head) : 0;
    for (int i = 0; lp && i < n; i++)
        for (int k = 0; k < 4; k++)
            total += r->choices[i].lp_text[k].len + 24;
    char *buf = st == HR_OK ? malloc(total + 128) : NULL;
    if (st == HR_OK && !buf)
        st = HR_ERR_NOMEM;
    size_t o = 0;
    const char *p = head;
    for (int i = 0; st == HR_OK && lp && i < n; i++) {
        const char *m = strstr(p, marks[i]);
        if (!m) {
            st = HR_ERR_INTERNAL;
            break;
        }
        memcpy(buf + o, p, (size_t)(m - p));
        o += (size_t)(m - p);
        const struct response_choice *c = &r->choices[i];
        static const char *const keys[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
        o += (size_t)sprintf(buf + o, chat ? "{\"content\":[" : "{");
        for (int k = 0; k < (chat ? 1 : 4); k++) {
            if (!chat)
                o += (size_t)sprintf(buf + o, "%s\"%s\":[", k ? "," : "", keys[k]);
            if (c->lp_text[k].len)
                memcpy(buf + o, c->lp_text[k].data, c->lp_text[k].len);
            o += c->lp_text[k].len;
            buf[o++] = ']';
        }
        o += (size_t)sprintf(buf + o, chat ? ",\"refusal\":null}" : "}");
        p = m + strlen(marks[i]);
    }
    if (st == HR_OK) {
        size_t rest = strlen(p);
        memcpy(buf + o, p, rest + 1);
        o += rest;
        *out = buf;
        *len = o;
        buf = NULL;
    }
    free(buf);
    free(head);
    for (int i = 0; ph && i < n; i++)
        free(ph[i]);
    free(ph);
    free(marks);
    if (st != HR_OK)
        return hr_err(err, errlen, st, st == HR_ERR_NOMEM ? "out of memory for the response"
                                                          : "the response body could not be assembled");
    return HR_OK;
}
