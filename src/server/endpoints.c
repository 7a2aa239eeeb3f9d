/* Models, tokenize, detokenize, version (see endpoints.h). */
#include "server/endpoints.h"

#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

json_t *endpoints_model_object(struct server *s)
{
    /* root is the served name: clients see no server paths */
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)s->started, "owned_by", "hearth", "root", s->model_name);
    if (m && server_engine(s)) {
        pthread_rwlock_rdlock(&s->model_lock);
        json_object_set_new(m, "max_model_len", json_integer(s->info.max_model_len));
        pthread_rwlock_unlock(&s->model_lock);
    }
    return m;
}

void endpoints_model(struct server *s, const char *id, struct api_reply *out)
{
    for (int i = 0; i < 2; i++)
        if (s->model_names[i] && !strcmp(id, s->model_names[i])) {
            api_json(out, 200, endpoints_model_object(s));
            return;
        }
    char msg[400];
    snprintf(msg, sizeof msg, "The model '%.300s' does not exist", id);
    api_error(out, 404, msg, "model", "model_not_found");
}

void endpoints_version(struct api_reply *out)
{
    api_json(out, 200, json_pack("{s:s}", "version", HEARTH_VERSION));
}

/* The body as a JSON object, with its "model" (optional here) checked; NULL after an
 * error reply. */
static json_t *endpoints_body(struct server *s, const struct api_call *call, struct api_reply *out)
{
    json_error_t je;
    json_t *root = json_loadb(call->body ? call->body : "", call->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        char msg[300];
        snprintf(msg, sizeof msg, "the body must be a JSON object%s%s", root ? "" : ": ", root ? "" : je.text);
        api_error(out, 400, msg, NULL, "invalid_json");
        json_decref(root);
        return NULL;
    }
    const json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        bool known = json_is_string(model) && (!strcmp(json_string_value(model), s->model_names[0]) ||
                                              !strcmp(json_string_value(model), s->model_names[1]));
        if (!known) {
            api_error(out, 404, "'model' is not the model this server serves (see /v1/models)", "model",
                      "model_not_found");
            json_decref(root);
            return NULL;
        }
    }
    if (!server_engine(s)) {
        api_error(out, 503, "the model is not loaded", NULL, "model_loading");
        json_decref(root);
        return NULL;
    }
    return root;
}

/* The text of /tokenize: "prompt", or "messages" rendered with the chat template. */
static enum hr_status endpoints_tokenize_text(struct server *s, const json_t *root, char **text, size_t *len,
                                              char *param, size_t paramlen, char *err, size_t errlen)
{
    const json_t *prompt = json_object_get(root, "prompt"), *messages = json_object_get(root, "messages");
    if ((prompt != NULL) == (messages != NULL)) {
        snprintf(param, paramlen, "prompt");
        return hr_err(err, errlen, HR_ERR_INVALID, "give either 'prompt' (a string) or 'messages'");
    }
    if (prompt) {
        if (!json_is_string(prompt)) {
            snprintf(param, paramlen, "prompt");
            return hr_err(err, errlen, HR_ERR_INVALID, "'prompt' must be a string");
        }
        *len = json_string_length(prompt);
        *text = malloc(*len + 1);
        if (!*text)
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        memcpy(*text, json_string_value(prompt), *len + 1);
        return HR_OK;
    }
    snprintf(param, paramlen, "messages");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "'messages' must be a non-empty array");
    const json_t *agp = json_object_get(root, "add_generation_prompt"), *tools = json_object_get(root, "tools");
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if ((agp && !json_is_boolean(agp)) || (tools && !json_is_null(tools) && !json_is_array(tools)) ||
        (kw && !json_is_null(kw) && !json_is_object(kw)))
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "'add_generation_prompt' is a boolean, 'tools' an array, 'chat_template_kwargs' an object");
    const json_t *think = kw && json_is_object(kw) ? json_object_get(kw, "enable_thinking") : NULL;
    struct chat_template_request tr = {
        .messages = messages,
        .tools = tools && json_is_array(tools) ? tools : NULL,
        .add_generation_prompt = agp ? json_is_true(agp) : true,
        .enable_thinking = think && json_is_boolean(think) ? json_is_true(think) : -1,
        .kwargs = kw && json_is_object(kw) ? kw : NULL,
    };
    enum hr_status st;
    pthread_rwlock_rdlock(&s->model_lock);
    if (!s->has_tmpl) {
        st = hr_err(err, errlen, HR_ERR_INVALID, "this model has no chat template (%s)", s->tmpl_err);
    } else {
        char terr[HR_ERRLEN];
        st = chat_template_model_render(&s->tmpl, &tr, text, len, terr, sizeof terr);
        if (st != HR_OK)
            st = hr_err(err, errlen, st == HR_ERR_NOMEM ? HR_ERR_NOMEM : HR_ERR_INVALID,
                        "the chat template refused the messages: %s", terr);
    }
    pthread_rwlock_unlock(&s->model_lock);
    return st;
}

void endpoints_tokenize(struct server *s, const struct api_call *call, struct api_reply *out)
{
    json_t *root = endpoints_body(s, call, out);
    if (!root)
        return;
    struct hearth_engine *e = server_engine(s);
    char param[64] = "", err[HR_ERRLEN];
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    int n = 0;
    const json_t *strs = json_object_get(root, "return_token_strs");
    enum hr_status st = HR_OK;
    if (strs && !json_is_null(strs) && !json_is_boolean(strs)) {
        snprintf(param, sizeof param, "return_token_strs");
        st = hr_err(err, sizeof err, HR_ERR_INVALID, "'return_token_strs' must be a boolean");
    }
    if (st == HR_OK)
        st = endpoints_tokenize_text(s, root, &text, &len, param, sizeof param, err, sizeof err);
    if (st == HR_OK) {
        char terr[HR_ERRLEN];
        st = hearth_tokenize(e, text, len, &ids, &n, terr, sizeof terr);
        if (st != HR_OK)
            st = hr_err(err, sizeof err, st, "the text cannot be tokenized: %s", terr);
    }
    json_t *o = NULL, *arr = NULL, *ts = NULL;
    if (st == HR_OK) {
        arr = json_array();
        ts = strs && json_is_true(strs) ? json_array() : json_null();
        for (int i = 0; arr && ts && i < n; i++) {
            json_array_append_new(arr, json_integer(ids[i]));
            if (json_is_array(ts)) {
                char *t = NULL;
                size_t tl = 0;
                char derr[HR_ERRLEN];
                if (hearth_detokenize(e, &ids[i], 1, false, &t, &tl, derr, sizeof derr) == HR_OK)
                    json_array_append_new(ts, openai_json_string(t, tl));
                free(t);
            }
        }
        pthread_rwlock_rdlock(&s->model_lock);
        int mml = s->info.max_model_len;
        pthread_rwlock_unlock(&s->model_lock);
        o = json_pack("{s:i,s:i,s:o,s:o}", "count", n, "max_model_len", mml, "tokens", arr, "token_strs", ts);
    }
    free(text);
    free(ids);
    json_decref(root);
    if (st != HR_OK)
        api_error(out, openai_http_status(st), err, param, NULL);
    else
        api_json(out, 200, o);
}

void endpoints_detokenize(struct server *s, const struct api_call *call, struct api_reply *out)
{
    json_t *root = endpoints_body(s, call, out);
    if (!root)
        return;
    struct hearth_engine *e = server_engine(s);
    const json_t *tokens = json_object_get(root, "tokens");
    char err[HR_ERRLEN];
    if (!json_is_array(tokens)) {
        json_decref(root);
        api_error(out, 400, "'tokens' must be an array of token ids", "tokens", NULL);
        return;
    }
    pthread_rwlock_rdlock(&s->model_lock);
    int vocab = s->info.vocab_size;
    pthread_rwlock_unlock(&s->model_lock);
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(root);
        api_error(out, 503, "out of memory", NULL, NULL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tokens, i);
        json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 0 || v >= vocab) {
            snprintf(err, sizeof err, "'tokens[%zu]' must be a token id in 0..%d", i, vocab - 1);
            free(ids);
            json_decref(root);
            api_error(out, 400, err, "tokens", NULL);
            return;
        }
        ids[i] = (int32_t)v;
    }
    char *text = NULL;
    size_t len = 0;
    enum hr_status st = hearth_detokenize(e, ids, (int)n, false, &text, &len, err, sizeof err);
    free(ids);
    json_decref(root);
    if (st != HR_OK) {
        api_error(out, openai_http_status(st), err, "tokens", NULL);
        return;
    }
    api_json(out, 200, json_pack("{s:o}", "prompt", openai_json_string(text, len)));
    free(text);
}
