/* The Responses API over the chat path (see responses.h). */
#include "server/responses.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/job.h"
#include "server/openai.h"

/* ---------------------------------------------------------------- store */

struct responses_store {
    pthread_mutex_t mu;
    json_t *ring[RESPONSES_STORE_ITEMS]; /* items, each with an "id" */
    int next;
};

struct responses_store *responses_store_new(void)
{
    struct responses_store *st = calloc(1, sizeof *st);
    if (st)
        pthread_mutex_init(&st->mu, NULL);
    return st;
}

void responses_store_free(struct responses_store *st)
{
    if (!st)
        return;
    for (int i = 0; i < RESPONSES_STORE_ITEMS; i++)
        json_decref(st->ring[i]);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void responses_store_put(struct responses_store *st, const json_t *output)
{
    if (!st)
        return;
    size_t i;
    const json_t *it;
    pthread_mutex_lock(&st->mu);
    json_array_foreach(output, i, it) {
        if (!json_is_string(json_object_get(it, "id")))
            continue;
        json_t *copy = json_deep_copy(it);
        if (!copy)
            continue;
        json_decref(st->ring[st->next]);
        st->ring[st->next] = copy;
        st->next = (st->next + 1) % RESPONSES_STORE_ITEMS;
    }
    pthread_mutex_unlock(&st->mu);
}

json_t *responses_store_get(struct responses_store *st, const char *id)
{
    if (!st || !id)
        return NULL;
    json_t *found = NULL;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < RESPONSES_STORE_ITEMS && !found; i++) {
        const char *k = st->ring[i] ? json_string_value(json_object_get(st->ring[i], "id")) : NULL;
        if (k && !strcmp(k, id))
            found = json_deep_copy(st->ring[i]);
    }
    pthread_mutex_unlock(&st->mu);
    return found;
}

/* ---------------------------------------------------------------- request */

struct responses_err {
    char *param;
    size_t paramlen;
    char *err;
    size_t errlen;
};

static enum hr_status responses_fail(const struct responses_err *e, enum hr_status st, const char *param,
                                     const char *fmt, const char *arg)
{
    snprintf(e->param, e->paramlen, "%s", param);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return hr_err(e->err, e->errlen, st, "%s", msg);
}

/* The text of a message's content: a string, or parts of type input_text / output_text /
 * text (joined), as a new string reference. */
static json_t *responses_content_text(const json_t *content, const char *param, const struct responses_err *e,
                                      enum hr_status *st)
{
    *st = HR_OK;
    if (json_is_string(content))
        return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        *st = responses_fail(e, HR_ERR_INVALID, param, "'%s' must be a string or an array of content parts", param);
        return NULL;
    }
    struct strbuf b = {0};
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (!type || !json_is_string(text) ||
            (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text") &&
             strcmp(type, "refusal"))) {
            strbuf_free(&b);
            *st = responses_fail(e, type && strstr(type, "input_") ? HR_ERR_UNSUPPORTED : HR_ERR_INVALID, param,
                                 "'%s': only text parts (input_text, output_text) are supported", param);
            return NULL;
        }
        strbuf_append(&b, json_string_value(text), json_string_length(text));
    }
    json_t *s = openai_json_string(b.data ? b.data : "", b.len);
    bool oom = b.oom;
    strbuf_free(&b);
    if (oom || !s) {
        json_decref(s);
        *st = hr_err(e->err, e->errlen, HR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return s;
}

/* The assistant message that function_call items and reasoning join: the last message
 * when it is an assistant's, else a new one. */
static json_t *responses_assistant(json_t *msgs)
{
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = last ? json_string_value(json_object_get(last, "role")) : NULL;
    if (role && !strcmp(role, "assistant"))
        return last;
    json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
    json_array_append_new(msgs, m);
    return m;
}

static enum hr_status responses_input_item(const json_t *it, size_t i, json_t *msgs, json_t **pending_reasoning,
                                           struct responses_store *store, const struct responses_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it))
        return responses_fail(e, HR_ERR_INVALID, param, "'%s' must be an object", param);
    const char *type = json_string_value(json_object_get(it, "type"));
    const json_t *role = json_object_get(it, "role");
    enum hr_status st = HR_OK;
    if ((!type && role) || (type && !strcmp(type, "message"))) {
        const char *r = json_string_value(role);
        if (!r || (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer")))
            return responses_fail(e, HR_ERR_INVALID, param,
                                  "'%s.role' must be user, assistant, system or developer", param);
        char cparam[80];
        snprintf(cparam, sizeof cparam, "%s.content", param);
        json_t *text = responses_content_text(json_object_get(it, "content"), cparam, e, &st);
        if (!text)
            return st;
        json_t *m = json_pack("{s:s,s:o}", "role", !strcmp(r, "developer") ? "system" : r, "content", text);
        if (!strcmp(r, "assistant") && *pending_reasoning) {
            json_object_set_new(m, "reasoning_content", *pending_reasoning);
            *pending_reasoning = NULL;
        }
        json_array_append_new(msgs, m);
        return HR_OK;
    }
    if (!type)
        return responses_fail(e, HR_ERR_INVALID, param, "'%s' needs a 'type' or a 'role'", param);
    if (!strcmp(type, "function_call")) {
        const json_t *call_id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
        const json_t *args = json_object_get(it, "arguments");
        if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
            return responses_fail(e, HR_ERR_INVALID, param,
                                  "'%s': a function_call needs string call_id, name and arguments", param);
        json_t *a = responses_assistant(msgs);
        if (*pending_reasoning && !json_object_get(a, "reasoning_content")) {
            json_object_set_new(a, "reasoning_content", *pending_reasoning);
            *pending_reasoning = NULL;
        }
        json_t *calls = json_object_get(a, "tool_calls");
        if (!calls) {
            calls = json_array();
            json_object_set_new(a, "tool_calls", calls);
        }
        json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", call_id, "type", "function", "function",
                                               "name", name, "arguments", args));
        return HR_OK;
    }
    if (!strcmp(type, "function_call_output")) {
        const json_t *call_id = json_object_get(it, "call_id");
        if (!json_is_string(call_id))
            return responses_fail(e, HR_ERR_INVALID, param, "'%s': a function_call_output needs a string call_id",
                                  param);
        char oparam[80];
        snprintf(oparam, sizeof oparam, "%s.output", param);
        json_t *text = responses_content_text(json_object_get(it, "output"), oparam, e, &st);
        if (!text)
            return st;
        json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", call_id, "content",
                                              text));
        return HR_OK;
    }
    if (!strcmp(type, "reasoning")) {
        /* its text goes to the next assistant turn's reasoning_content (the template drops
         * it for turns before the last user message, as Qwen3's does) */
        struct strbuf b = {0};
        const char *keys[] = {"summary", "content"};
        for (int k = 0; k < 2; k++) {
            const json_t *arr = json_object_get(it, keys[k]);
            size_t j;
            const json_t *part;
            json_array_foreach(arr, j, part) {
                const json_t *t = json_object_get(part, "text");
                if (json_is_string(t))
                    strbuf_append(&b, json_string_value(t), json_string_length(t));
            }
            if (b.len)
                break;
        }
        json_decref(*pending_reasoning);
        *pending_reasoning = b.len ? openai_json_string(b.data, b.len) : NULL;
        strbuf_free(&b);
        return HR_OK;
    }
    if (!strcmp(type, "item_reference")) {
        json_t *ref = responses_store_get(store, json_string_value(json_object_get(it, "id")));
        if (!ref)
            return responses_fail(e, HR_ERR_INVALID, param,
                                  "'%s': no stored item has this id (items are kept for a while in memory only); "
                                  "send the item itself",
                                  param);
        const char *rt = json_string_value(json_object_get(ref, "type"));
        enum hr_status rst = rt && !strcmp(rt, "item_reference")
                                 ? responses_fail(e, HR_ERR_INVALID, param, "'%s': a reference to a reference", param)
                                 : responses_input_item(ref, i, msgs, pending_reasoning, store, e);
        json_decref(ref);
        return rst;
    }
    return responses_fail(e, HR_ERR_UNSUPPORTED, param, "input item type '%s' is not supported", type);
}

/* Function tools: {type, name, description, parameters, strict} -> chat's form. */
static enum hr_status responses_tools(const json_t *tools, json_t *chat, const struct responses_err *e)
{
    if (!tools || json_is_null(tools))
        return HR_OK;
    if (!json_is_array(tools))
        return responses_fail(e, HR_ERR_INVALID, "tools", "'tools' must be an array%s", NULL);
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function")) {
            json_decref(out);
            return responses_fail(e, type ? HR_ERR_UNSUPPORTED : HR_ERR_INVALID, param,
                                  "'%s': only tools of type 'function' are supported", param);
        }
        const json_t *name = json_object_get(t, "name");
        if (!json_is_string(name)) {
            json_decref(out);
            return responses_fail(e, HR_ERR_INVALID, param, "'%s' needs a string 'name'", param);
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        const char *keys[] = {"description", "parameters", "strict"};
        for (int k = 0; k < 3; k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (v && !json_is_null(v))
                json_object_set(fn, keys[k], v);
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    json_object_set_new(chat, "tools", out);
    return HR_OK;
}

enum hr_status responses_to_chat(const json_t *req, struct responses_store *store, json_t **chat, char *param,
                                 size_t paramlen, char *err, size_t errlen)
{
    *chat = NULL;
    const struct responses_err e = {param, paramlen, err, errlen};
    if (param && paramlen)
        param[0] = 0;
    if (!json_is_object(req))
        return responses_fail(&e, HR_ERR_INVALID, "", "the body must be a JSON object%s", NULL);
    const json_t *prev = json_object_get(req, "previous_response_id");
    if (prev && !json_is_null(prev))
        return responses_fail(&e, HR_ERR_UNSUPPORTED, "previous_response_id",
                              "'previous_response_id' is not supported (this server stores no responses); send "
                              "the conversation in 'input'%s",
                              NULL);
    const json_t *conv = json_object_get(req, "conversation");
    if (conv && !json_is_null(conv))
        return responses_fail(&e, HR_ERR_UNSUPPORTED, "conversation", "'conversation' is not supported%s", NULL);
    json_t *c = json_object();
    json_t *msgs = json_array();
    json_object_set_new(c, "messages", msgs);
    enum hr_status st = HR_OK;
    const json_t *instr = json_object_get(req, "instructions");
    if (instr && !json_is_null(instr)) {
        if (!json_is_string(instr))
            st = responses_fail(&e, HR_ERR_INVALID, "instructions", "'instructions' must be a string%s", NULL);
        else
            json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", instr));
    }
    const json_t *input = json_object_get(req, "input");
    json_t *pending = NULL;
    if (st == HR_OK) {
        if (json_is_string(input)) {
            json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
        } else if (json_is_array(input) && json_array_size(input) > 0) {
            size_t i;
            const json_t *it;
            json_array_foreach(input, i, it) {
                if ((st = responses_input_item(it, i, msgs, &pending, store, &e)) != HR_OK)
                    break;
            }
        } else {
            st = responses_fail(&e, HR_ERR_INVALID, "input", "'input' must be a string or a non-empty array%s", NULL);
        }
    }
    json_decref(pending);
    /* the fields that mean the same in chat */
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user",
                                       "seed", "top_k", "min_p", "repetition_penalty", "stop", "cache_salt",
                                       "chat_template_kwargs", "prompt_cache_key"};
    for (size_t k = 0; st == HR_OK && k < sizeof same / sizeof same[0]; k++) {
        json_t *v = json_object_get(req, same[k]);
        if (v && !json_is_null(v) && strcmp(same[k], "prompt_cache_key") != 0)
            json_object_set(c, same[k], v);
    }
    const json_t *mot = json_object_get(req, "max_output_tokens");
    if (st == HR_OK && mot && !json_is_null(mot)) {
        if (!json_is_integer(mot) || json_integer_value(mot) < 1)
            st = responses_fail(&e, HR_ERR_INVALID, "max_output_tokens", "'max_output_tokens' must be an integer >= 1%s",
                                NULL);
        else
            json_object_set(c, "max_tokens", (json_t *)mot);
    }
    const json_t *stream = json_object_get(req, "stream");
    if (st == HR_OK && json_is_true(stream))
        json_object_set_new(c, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (st == HR_OK)
        st = responses_tools(json_object_get(req, "tools"), c, &e);
    const json_t *tc = json_object_get(req, "tool_choice");
    if (st == HR_OK && tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            json_object_set(c, "tool_choice", (json_t *)tc);
        } else if (json_is_object(tc) && json_is_string(json_object_get(tc, "name"))) {
            json_object_set_new(c, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                                                            json_object_get(tc, "name")));
        } else {
            st = responses_fail(&e, HR_ERR_INVALID, "tool_choice",
                                "'tool_choice' must be a string or {\"type\": \"function\", \"name\": ...}%s", NULL);
        }
    }
    /* text.format: text (the default), json_object, json_schema -> response_format */
    const json_t *fmt = json_object_get(json_object_get(req, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (st == HR_OK && fmt && ft && strcmp(ft, "text")) {
        if (!strcmp(ft, "json_schema")) {
            json_t *js = json_object();
            const char *keys[] = {"name", "schema", "strict", "description"};
            for (int k = 0; k < 4; k++)
                if (json_object_get(fmt, keys[k]))
                    json_object_set(js, keys[k], json_object_get(fmt, keys[k]));
            json_object_set_new(c, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        } else {
            json_object_set_new(c, "response_format", json_pack("{s:s}", "type", ft));
        }
    }
    /* reasoning.effort "none": Qwen3 without thinking */
    const char *effort = json_string_value(json_object_get(json_object_get(req, "reasoning"), "effort"));
    if (st == HR_OK && effort && !strcmp(effort, "none") && !json_object_get(c, "chat_template_kwargs"))
        json_object_set_new(c, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));
    if (st != HR_OK) {
        json_decref(c);
        return st;
    }
    *chat = c;
    return HR_OK;
}

/* ---------------------------------------------------------------- response objects */

static json_t *responses_usage(const json_t *chat_usage)
{
    json_int_t in = json_integer_value(json_object_get(chat_usage, "prompt_tokens"));
    json_int_t outt = json_integer_value(json_object_get(chat_usage, "completion_tokens"));
    json_int_t cached =
        json_integer_value(json_object_get(json_object_get(chat_usage, "prompt_tokens_details"), "cached_tokens"));
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", outt, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                     "total_tokens", in + outt);
}

/* The Response shell: status, what the request set, output and usage to fill. */
static json_t *responses_object(const struct responses_meta *m, const char *status, json_t *output, json_t *usage,
                                const char *incomplete_reason, json_t *error)
{
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", m->id, "object", "response", "created_at",
                          (json_int_t)m->created, "status", status, "model", m->model ? m->model : "");
    json_object_set_new(r, "error", error ? error : json_null());
    json_object_set_new(r, "incomplete_details",
                        incomplete_reason ? json_pack("{s:s}", "reason", incomplete_reason) : json_null());
    static const char *const echo[] = {"instructions", "max_output_tokens", "temperature", "top_p", "metadata",
                                       "user"};
    for (size_t k = 0; k < sizeof echo / sizeof echo[0]; k++) {
        json_t *v = m->req ? json_object_get(m->req, echo[k]) : NULL;
        json_object_set(r, echo[k], v ? v : json_null());
    }
    json_t *tools = m->req ? json_object_get(m->req, "tools") : NULL;
    json_object_set_new(r, "tools", json_is_array(tools) ? json_incref(tools) : json_array());
    json_t *tc = m->req ? json_object_get(m->req, "tool_choice") : NULL;
    json_object_set_new(r, "tool_choice", tc && !json_is_null(tc) ? json_incref(tc) : json_string("auto"));
    json_t *ptc = m->req ? json_object_get(m->req, "parallel_tool_calls") : NULL;
    json_object_set_new(r, "parallel_tool_calls", json_boolean(!ptc || json_is_true(ptc)));
    json_object_set_new(r, "previous_response_id", json_null());
    json_t *store = m->req ? json_object_get(m->req, "store") : NULL;
    json_object_set_new(r, "store", json_boolean(!store || json_is_true(store)));
    json_object_set_new(r, "truncation", json_string("disabled"));
    json_t *text = m->req ? json_object_get(m->req, "text") : NULL;
    json_object_set_new(r, "text", json_is_object(text) ? json_incref(text) : json_pack("{s:{s:s}}", "format", "type",
                                                                                       "text"));
    json_object_set_new(r, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
    json_object_set_new(r, "output", output ? output : json_array());
    json_object_set_new(r, "usage", usage ? usage : json_null());
    return r;
}

static void responses_item_id(const struct responses_meta *m, const char *prefix, int index, char *out, size_t n)
{
    snprintf(out, n, "%s%s%d", prefix, m->item_prefix_id, index);
}

static json_t *responses_reasoning_item(const char *id, const char *text, size_t len)
{
    return json_pack("{s:s,s:s,s:[{s:s,s:o}]}", "type", "reasoning", "id", id, "summary", "type", "summary_text",
                     "text", openai_json_string(text, len));
}

static json_t *responses_message_item(const char *id, const char *status, const char *text, size_t len)
{
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text",
                                                 openai_json_string(text, len), "annotations", "logprobs"));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", status, "role", "assistant",
                     "content", content);
}

static json_t *responses_call_item(const char *id, const char *status, const char *call_id, const char *name,
                                   const char *args, size_t args_len)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "type", "function_call", "id", id, "status", status, "call_id",
                     call_id ? call_id : "", "name", name ? name : "", "arguments", openai_json_string(args, args_len));
}

static const char *responses_incomplete(const char *finish)
{
    return finish && !strcmp(finish, "length") ? "max_output_tokens" : NULL;
}

json_t *responses_from_chat(const struct responses_meta *m, const json_t *chat)
{
    const json_t *choice = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *msg = json_object_get(choice, "message");
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    json_t *output = json_array();
    char id[96];
    int k = 0;
    const json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (json_is_string(reasoning) && json_string_length(reasoning) > 0) {
        responses_item_id(m, "rs_", k++, id, sizeof id);
        json_array_append_new(output, responses_reasoning_item(id, json_string_value(reasoning),
                                                               json_string_length(reasoning)));
    }
    const json_t *content = json_object_get(msg, "content");
    const json_t *calls = json_object_get(msg, "tool_calls");
    if ((json_is_string(content) && json_string_length(content) > 0) || json_array_size(calls) == 0) {
        responses_item_id(m, "msg_", k++, id, sizeof id);
        const char *t = json_is_string(content) ? json_string_value(content) : "";
        json_array_append_new(output, responses_message_item(id, responses_incomplete(finish) ? "incomplete"
                                                                                               : "completed",
                                                             t, strlen(t)));
    }
    size_t i;
    const json_t *call;
    json_array_foreach(calls, i, call) {
        const json_t *fn = json_object_get(call, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        responses_item_id(m, "fc_", k++, id, sizeof id);
        json_array_append_new(output, responses_call_item(id, "completed",
                                                          json_string_value(json_object_get(call, "id")),
                                                          json_string_value(json_object_get(fn, "name")),
                                                          args ? args : "", args ? strlen(args) : 0));
    }
    const char *inc = responses_incomplete(finish);
    return responses_object(m, inc ? "incomplete" : "completed", output,
                            responses_usage(json_object_get(chat, "usage")), inc, NULL);
}

/* ---------------------------------------------------------------- stream */

#define RESPONSES_MAX_CALLS 64

struct responses_call {
    int chat_index;             /* tool_calls[].index in the chat chunks */
    int output_index;
    char id[96];
    char *call_id, *name;
    struct strbuf args;
};

struct responses_stream {
    struct responses_meta m;
    char *id, *item_hex, *model;
    json_t *req;
    int seq;                    /* sequence_number of the next event */
    int n_items;                /* output items opened so far */
    json_t *done_items;         /* [n] the items closed, in output order */
    int reasoning_index, message_index; /* output index of the open item, -1: none */
    char reasoning_id[96], message_id[96];
    struct strbuf reasoning, message;
    struct responses_call calls[RESPONSES_MAX_CALLS];
    int n_calls;
    char finish[16];
    json_t *usage;              /* the chat usage chunk's usage */
    bool started, ended;
};

static void responses_event(struct responses_stream *rs, struct strbuf *out, const char *type, json_t *ev)
{
    if (!ev) {
        out->oom = true;
        return;
    }
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(rs->seq++));
    char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(ev);
    if (!s) {
        out->oom = true;
        return;
    }
    strbuf_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

struct responses_stream *responses_stream_new(const struct responses_meta *m)
{
    struct responses_stream *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->id = strdup(m->id);
    rs->item_hex = strdup(m->item_prefix_id);
    rs->model = strdup(m->model ? m->model : "");
    rs->req = m->req ? json_deep_copy(m->req) : NULL;
    rs->done_items = json_array();
    if (!rs->id || !rs->item_hex || !rs->model || !rs->done_items || (m->req && !rs->req)) {
        responses_stream_free(rs);
        return NULL;
    }
    rs->m = (struct responses_meta){rs->id, rs->item_hex, m->created, rs->model, rs->req, m->store};
    rs->reasoning_index = rs->message_index = -1;
    return rs;
}

void responses_stream_free(struct responses_stream *rs)
{
    if (!rs)
        return;
    for (int i = 0; i < rs->n_calls; i++) {
        free(rs->calls[i].call_id);
        free(rs->calls[i].name);
        strbuf_free(&rs->calls[i].args);
    }
    strbuf_free(&rs->reasoning);
    strbuf_free(&rs->message);
    json_decref(rs->done_items);
    json_decref(rs->usage);
    json_decref(rs->req);
    free(rs->id);
    free(rs->item_hex);
    free(rs->model);
    free(rs);
}

static void responses_close_reasoning(struct responses_stream *rs, struct strbuf *out)
{
    if (rs->reasoning_index < 0)
        return;
    int oi = rs->reasoning_index;
    const char *t = rs->reasoning.data ? rs->reasoning.data : "";
    responses_event(rs, out, "response.reasoning_summary_text.done",
                    json_pack("{s:s,s:i,s:i,s:o}", "item_id", rs->reasoning_id, "output_index", oi, "summary_index", 0,
                              "text", openai_json_string(t, rs->reasoning.len)));
    responses_event(rs, out, "response.reasoning_summary_part.done",
                    json_pack("{s:s,s:i,s:i,s:{s:s,s:o}}", "item_id", rs->reasoning_id, "output_index", oi,
                              "summary_index", 0, "part", "type", "summary_text", "text",
                              openai_json_string(t, rs->reasoning.len)));
    json_t *item = responses_reasoning_item(rs->reasoning_id, t, rs->reasoning.len);
    json_array_append(rs->done_items, item);
    responses_event(rs, out, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", oi, "item", item));
    rs->reasoning_index = -1;
}

static void responses_close_message(struct responses_stream *rs, struct strbuf *out)
{
    if (rs->message_index < 0)
        return;
    int oi = rs->message_index;
    const char *t = rs->message.data ? rs->message.data : "";
    responses_event(rs, out, "response.output_text.done",
                    json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", rs->message_id, "output_index", oi, "content_index",
                              0, "text", openai_json_string(t, rs->message.len), "logprobs"));
    responses_event(rs, out, "response.content_part.done",
                    json_pack("{s:s,s:i,s:i,s:{s:s,s:o,s:[]}}", "item_id", rs->message_id, "output_index", oi,
                              "content_index", 0, "part", "type", "output_text", "text",
                              openai_json_string(t, rs->message.len), "annotations"));
    const char *status = responses_incomplete(rs->finish) ? "incomplete" : "completed";
    json_t *item = responses_message_item(rs->message_id, status, t, rs->message.len);
    json_array_append(rs->done_items, item);
    responses_event(rs, out, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", oi, "item", item));
    rs->message_index = -1;
}

static void responses_open_message(struct responses_stream *rs, struct strbuf *out)
{
    if (rs->message_index >= 0)
        return;
    responses_close_reasoning(rs, out);
    rs->message_index = rs->n_items++;
    responses_item_id(&rs->m, "msg_", rs->message_index, rs->message_id, sizeof rs->message_id);
    responses_event(rs, out, "response.output_item.added",
                    json_pack("{s:i,s:o}", "output_index", rs->message_index, "item",
                              responses_message_item(rs->message_id, "in_progress", NULL, 0)));
    responses_event(rs, out, "response.content_part.added",
                    json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", rs->message_id, "output_index",
                              rs->message_index, "content_index", 0, "part", "type", "output_text", "text", "",
                              "annotations"));
}

static void responses_close_calls(struct responses_stream *rs, struct strbuf *out)
{
    for (int i = 0; i < rs->n_calls; i++) {
        struct responses_call *c = &rs->calls[i];
        const char *a = c->args.data ? c->args.data : "";
        responses_event(rs, out, "response.function_call_arguments.done",
                        json_pack("{s:s,s:i,s:o}", "item_id", c->id, "output_index", c->output_index, "arguments",
                                  openai_json_string(a, c->args.len)));
        json_t *item = responses_call_item(c->id, "completed", c->call_id, c->name, a, c->args.len);
        json_array_append(rs->done_items, item);
        responses_event(rs, out, "response.output_item.done",
                        json_pack("{s:i,s:o}", "output_index", c->output_index, "item", item));
    }
}

static void responses_tool_delta(struct responses_stream *rs, const json_t *tc, struct strbuf *out)
{
    int idx = (int)json_integer_value(json_object_get(tc, "index"));
    const json_t *fn = json_object_get(tc, "function");
    struct responses_call *c = NULL;
    for (int i = 0; i < rs->n_calls; i++)
        if (rs->calls[i].chat_index == idx)
            c = &rs->calls[i];
    if (!c) {
        if (rs->n_calls == RESPONSES_MAX_CALLS)
            return;
        responses_close_reasoning(rs, out);
        responses_close_message(rs, out);
        c = &rs->calls[rs->n_calls++];
        c->chat_index = idx;
        c->output_index = rs->n_items++;
        responses_item_id(&rs->m, "fc_", c->output_index, c->id, sizeof c->id);
        const char *cid = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        c->call_id = strdup(cid ? cid : c->id);
        c->name = strdup(name ? name : "");
        if (!c->call_id || !c->name)
            out->oom = true;
        responses_event(rs, out, "response.output_item.added",
                        json_pack("{s:i,s:o}", "output_index", c->output_index, "item",
                                  responses_call_item(c->id, "in_progress", c->call_id, c->name, "", 0)));
    }
    const json_t *args = json_object_get(fn, "arguments");
    if (json_is_string(args) && json_string_length(args) > 0) {
        strbuf_append(&c->args, json_string_value(args), json_string_length(args));
        responses_event(rs, out, "response.function_call_arguments.delta",
                        json_pack("{s:s,s:i,s:O}", "item_id", c->id, "output_index", c->output_index, "delta", args));
    }
}

static void responses_chunk(struct responses_stream *rs, const json_t *chunk, struct strbuf *out)
{
    const json_t *err = json_object_get(chunk, "error");
    if (err) {
        const char *msg = json_string_value(json_object_get(err, "message"));
        responses_event(rs, out, "error",
                        json_pack("{s:s,s:s,s:n}", "code", "server_error", "message", msg ? msg : "error", "param"));
        json_t *items = json_deep_copy(rs->done_items);
        responses_event(rs, out, "response.failed",
                        json_pack("{s:o}", "response",
                                  responses_object(&rs->m, "failed", items, NULL, NULL,
                                                   json_pack("{s:s,s:s}", "code", "server_error", "message",
                                                             msg ? msg : "error"))));
        rs->ended = true;
        return;
    }
    const json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        json_decref(rs->usage);
        rs->usage = json_incref((json_t *)usage);
    }
    const json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!choice)
        return;
    const json_t *delta = json_object_get(choice, "delta");
    const json_t *rc = json_object_get(delta, "reasoning_content");
    if (json_is_string(rc) && json_string_length(rc) > 0) {
        if (rs->reasoning_index < 0 && rs->message_index < 0 && rs->n_calls == 0) {
            rs->reasoning_index = rs->n_items++;
            responses_item_id(&rs->m, "rs_", rs->reasoning_index, rs->reasoning_id, sizeof rs->reasoning_id);
            json_t *item = json_pack("{s:s,s:s,s:[]}", "type", "reasoning", "id", rs->reasoning_id, "summary");
            responses_event(rs, out, "response.output_item.added",
                            json_pack("{s:i,s:o}", "output_index", rs->reasoning_index, "item", item));
            responses_event(rs, out, "response.reasoning_summary_part.added",
                            json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", rs->reasoning_id, "output_index",
                                      rs->reasoning_index, "summary_index", 0, "part", "type", "summary_text", "text",
                                      ""));
        }
        if (rs->reasoning_index >= 0) {
            strbuf_append(&rs->reasoning, json_string_value(rc), json_string_length(rc));
            responses_event(rs, out, "response.reasoning_summary_text.delta",
                            json_pack("{s:s,s:i,s:i,s:O}", "item_id", rs->reasoning_id, "output_index",
                                      rs->reasoning_index, "summary_index", 0, "delta", rc));
        }
    }
    const json_t *content = json_object_get(delta, "content");
    if (json_is_string(content) && json_string_length(content) > 0) {
        responses_open_message(rs, out);
        strbuf_append(&rs->message, json_string_value(content), json_string_length(content));
        responses_event(rs, out, "response.output_text.delta",
                        json_pack("{s:s,s:i,s:i,s:O,s:[]}", "item_id", rs->message_id, "output_index",
                                  rs->message_index, "content_index", 0, "delta", content, "logprobs"));
    }
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc)
        responses_tool_delta(rs, tc, out);
    const char *fin = json_string_value(json_object_get(choice, "finish_reason"));
    if (fin)
        snprintf(rs->finish, sizeof rs->finish, "%s", fin);
}

static void responses_end(struct responses_stream *rs, struct strbuf *out)
{
    responses_close_reasoning(rs, out);
    if (rs->message_index < 0 && rs->n_calls == 0)
        responses_open_message(rs, out); /* an empty answer is still a message */
    responses_close_message(rs, out);
    responses_close_calls(rs, out);
    /* done_items are in closing order, which is output order (items are opened one at a time) */
    const char *inc = responses_incomplete(rs->finish);
    json_t *resp = responses_object(&rs->m, inc ? "incomplete" : "completed", json_incref(rs->done_items),
                                    responses_usage(rs->usage), inc, NULL);
    responses_store_put(rs->m.store, rs->done_items);
    responses_event(rs, out, inc ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", resp));
    rs->ended = true;
}

enum hr_status responses_stream_feed(struct responses_stream *rs, struct strbuf *chat, struct strbuf *out)
{
    if (!rs->started) {
        rs->started = true;
        responses_event(rs, out, "response.created",
                        json_pack("{s:o}", "response", responses_object(&rs->m, "in_progress", NULL, NULL, NULL, NULL)));
        responses_event(rs, out, "response.in_progress",
                        json_pack("{s:o}", "response", responses_object(&rs->m, "in_progress", NULL, NULL, NULL, NULL)));
    }
    size_t pos = 0;
    while (pos < chat->len) {
        const char *frame = chat->data + pos;
        const char *end = strstr(frame, "\n\n");
        if (!end)
            break; /* job.c queues whole frames; a partial one waits */
        size_t flen = (size_t)(end - frame);
        pos += flen + 2;
        if (rs->ended || flen < 6 || strncmp(frame, "data: ", 6) != 0)
            continue; /* comments, and anything after the end */
        const char *data = frame + 6;
        size_t dlen = flen - 6;
        if (dlen == 6 && !strncmp(data, "[DONE]", 6)) {
            responses_end(rs, out);
            continue;
        }
        json_t *chunk = json_loadb(data, dlen, 0, NULL);
        if (chunk)
            responses_chunk(rs, chunk, out);
        json_decref(chunk);
    }
    strbuf_consume(chat, pos);
    return out->oom ? HR_ERR_NOMEM : HR_OK;
}

/* ---------------------------------------------------------------- the endpoint */

struct responses_job {
    struct responses_meta m;
    char id[80], hex[40];
    json_t *req;
    struct responses_stream *rs;
    struct strbuf chat;         /* the chat frames taken out of the job's out */
    bool *owned_by_job;         /* the handler's flag: set when the job took rj over */
};

static void responses_job_free(void *ctx)
{
    struct responses_job *rj = ctx;
    if (!rj)
        return;
    responses_stream_free(rj->rs);
    strbuf_free(&rj->chat);
    json_decref(rj->req);
    free(rj);
}

static void responses_filter(struct job *j)
{
    struct responses_job *rj = j->filter_ctx;
    if (j->out.len == 0 && rj->rs && !rj->rs->started) {
        /* nothing queued yet: still open the stream */
    } else if (j->out.len == 0) {
        return;
    }
    strbuf_append(&rj->chat, j->out.data ? j->out.data : "", j->out.len);
    strbuf_clear(&j->out);
    if (responses_stream_feed(rj->rs, &rj->chat, &j->out) != HR_OK || rj->chat.oom)
        j->out.oom = true;
}

static void responses_started(struct job *j, void *ctx)
{
    struct responses_job *rj = ctx;
    j->filter_ctx = rj;
    j->filter_free = responses_job_free;
    *rj->owned_by_job = true;
    if (j->rq.stream) {
        j->out_filter = responses_filter;
        responses_filter(j);
    }
}

static json_t *responses_body(struct job *j, void *ctx)
{
    struct responses_job *rj = ctx;
    json_t *chat = job_body(j);
    json_t *r = chat ? responses_from_chat(&rj->m, chat) : NULL;
    json_decref(chat);
    if (r)
        responses_store_put(rj->m.store, json_object_get(r, "output"));
    return r;
}

void responses_handle(struct server *s, const struct api_call *call, struct api_reply *out)
{
    json_error_t je;
    json_t *req = json_loadb(call->body ? call->body : "", call->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!req || !json_is_object(req)) {
        char msg[300];
        snprintf(msg, sizeof msg, "the body must be a JSON object%s%s", req ? "" : ": ", req ? "" : je.text);
        json_decref(req);
        api_error(out, 400, msg, NULL, "invalid_json");
        return;
    }
    char param[128], err[HR_ERRLEN];
    json_t *chat = NULL;
    enum hr_status st = responses_to_chat(req, s->responses, &chat, param, sizeof param, err, sizeof err);
    if (st != HR_OK) {
        json_decref(req);
        api_error(out, openai_http_status(st), err, param, st == HR_ERR_UNSUPPORTED ? "unsupported_value" : NULL);
        return;
    }
    char *body = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    struct responses_job *rj = calloc(1, sizeof *rj);
    if (!body || !rj) {
        free(body);
        free(rj);
        json_decref(req);
        api_error(out, 503, "out of memory", NULL, NULL);
        return;
    }
    server_make_id(s, "resp_", rj->id, sizeof rj->id);
    snprintf(rj->hex, sizeof rj->hex, "%.24s", rj->id + 5);
    rj->req = req;
    const char *model = json_string_value(json_object_get(req, "model"));
    const json_t *store = json_object_get(req, "store");
    rj->m = (struct responses_meta){rj->id, rj->hex, (long long)time(NULL), model ? model : s->model_name, req,
                                    store && json_is_false(store) ? NULL : s->responses};
    if (json_is_true(json_object_get(req, "stream")) && !(rj->rs = responses_stream_new(&rj->m))) {
        free(body);
        responses_job_free(rj);
        api_error(out, 503, "out of memory", NULL, NULL);
        return;
    }
    struct api_call c2 = *call;
    c2.body = body;
    c2.body_len = strlen(body);
    bool owned = false; /* rj may be freed with the job inside api_generate */
    rj->owned_by_job = &owned;
    struct api_hooks hooks = {responses_started, responses_body, rj};
    api_generate(s, &c2, OPENAI_ENDPOINT_CHAT, &hooks, out);
    free(body);
    if (!owned)
        responses_job_free(rj);
}
