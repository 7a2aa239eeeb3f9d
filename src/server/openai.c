/* OpenAI request parsing and validation, and the error envelope (see openai.h). */
#include "server/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPENAI_MAX_INT (1 << 30) /* bound on counts: large enough for any context, small enough for int */

/* ---------------------------------------------------------------- failures */

struct openai_errbuf {
    char *param;
    size_t paramlen;
    char *err;
    size_t errlen;
};

static enum hr_status openai_fail(const struct openai_errbuf *eb, enum hr_status st, const char *param,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum hr_status openai_fail(const struct openai_errbuf *eb, enum hr_status st, const char *param,
                                  const char *fmt, ...)
{
    char msg[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (eb->param && eb->paramlen)
        snprintf(eb->param, eb->paramlen, "%s", param ? param : "");
    return hr_err(eb->err, eb->errlen, st, "%s", msg);
}

/* ---------------------------------------------------------------- field readers */

/* The value of key, or NULL when absent or null (OpenAI clients send null for "unset"). */
static json_t *openai_field(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static const char *openai_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static enum hr_status openai_get_bool(const json_t *obj, const char *key, bool *out,
                                      const struct openai_errbuf *eb)
{
    json_t *v = openai_field(obj, key);
    if (!v)
        return HR_OK;
    if (!json_is_boolean(v))
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' must be a boolean, got %s", key, openai_type_name(v));
    *out = json_is_true(v);
    return HR_OK;
}

/* An integer (a number with no fraction is accepted too, as Python servers do) in [lo, hi]. */
static enum hr_status openai_int_value(const json_t *v, const char *param, long long lo, long long hi,
                                       long long *out, const struct openai_errbuf *eb)
{
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d == floor(d)) || !(d >= -9.2e18 && d <= 9.2e18))
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an integer, got %g", param, d);
        x = (long long)d;
    } else {
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an integer, got %s", param,
                           openai_type_name(v));
    }
    if (x < lo || x > hi)
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be between %lld and %lld, got %lld", param, lo,
                           hi, x);
    *out = x;
    return HR_OK;
}

static enum hr_status openai_get_int(const json_t *obj, const char *key, long long lo, long long hi, bool *has,
                                     long long *out, const struct openai_errbuf *eb)
{
    json_t *v = openai_field(obj, key);
    if (!v)
        return HR_OK;
    enum hr_status st = openai_int_value(v, key, lo, hi, out, eb);
    if (st == HR_OK && has)
        *has = true;
    return st;
}

/* A number in [lo, hi] (lo excluded when lo_open). */
static enum hr_status openai_get_number(const json_t *obj, const char *key, double lo, bool lo_open, double hi,
                                        bool *has, float *out, const struct openai_errbuf *eb)
{
    json_t *v = openai_field(obj, key);
    if (!v)
        return HR_OK;
    if (!json_is_number(v))
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' must be a number, got %s", key, openai_type_name(v));
    double d = json_number_value(v);
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' must be %s %g and at most %g, got %g", key,
                           lo_open ? "above" : "at least", lo, hi, d);
    *out = (float)d;
    if (has)
        *has = true;
    return HR_OK;
}

static enum hr_status openai_get_string(const json_t *obj, const char *key, bool nonempty, size_t max_len,
                                        const char **out, const struct openai_errbuf *eb)
{
    json_t *v = openai_field(obj, key);
    if (!v)
        return HR_OK;
    if (!json_is_string(v))
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' must be a string, got %s", key, openai_type_name(v));
    size_t n = json_string_length(v);
    if (nonempty && n == 0)
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' must not be empty", key);
    if (max_len && n > max_len)
        return openai_fail(eb, HR_ERR_INVALID, key, "'%s' is longer than %zu bytes", key, max_len);
    *out = json_string_value(v);
    return HR_OK;
}

/* ---------------------------------------------------------------- common fields */

static enum hr_status openai_parse_model(struct openai_request *rq, const struct openai_limits *lim,
                                         const struct openai_errbuf *eb)
{
    json_t *v = openai_field(rq->root, "model");
    if (!v)
        return openai_fail(eb, HR_ERR_INVALID, "model", "'model' is required");
    if (!json_is_string(v))
        return openai_fail(eb, HR_ERR_INVALID, "model", "'model' must be a string, got %s", openai_type_name(v));
    const char *m = json_string_value(v);
    for (int i = 0; i < lim->n_model_names; i++)
        if (lim->model_names[i] && !strcmp(m, lim->model_names[i])) {
            rq->model = lim->model_names[0];
            return HR_OK;
        }
    return openai_fail(eb, HR_ERR_NOT_FOUND, "model", "The model '%.200s' does not exist (this server serves '%s')",
                       m, lim->n_model_names > 0 && lim->model_names[0] ? lim->model_names[0] : "");
}

static enum hr_status openai_parse_stop(struct openai_request *rq, const struct openai_limits *lim,
                                        const struct openai_errbuf *eb)
{
    json_t *v = openai_field(rq->root, "stop");
    if (v) {
        size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
        if (!json_is_string(v) && !json_is_array(v))
            return openai_fail(eb, HR_ERR_INVALID, "stop", "'stop' must be a string or an array of strings, got %s",
                               openai_type_name(v));
        if (n > OPENAI_MAX_STOP)
            return openai_fail(eb, HR_ERR_INVALID, "stop", "'stop' has %zu strings; at most %d are allowed", n,
                               OPENAI_MAX_STOP);
        if (n) {
            rq->stop = calloc(n, sizeof *rq->stop);
            if (!rq->stop)
                return openai_fail(eb, HR_ERR_NOMEM, "stop", "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            char param[32];
            snprintf(param, sizeof param, json_is_string(v) ? "stop" : "stop[%zu]", i);
            if (!json_is_string(s))
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string, got %s", param,
                                   openai_type_name(s));
            if (json_string_length(s) == 0)
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must not be empty", param);
            if (json_string_length(s) > OPENAI_MAX_STOP_BYTES)
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' is longer than %d bytes", param,
                                   OPENAI_MAX_STOP_BYTES);
            rq->stop[i] = json_string_value(s);
        }
        rq->params.stop = rq->stop;
        rq->params.n_stop = (int)n;
    }
    v = openai_field(rq->root, "stop_token_ids");
    if (v) {
        if (!json_is_array(v))
            return openai_fail(eb, HR_ERR_INVALID, "stop_token_ids", "'stop_token_ids' must be an array of integers");
        size_t n = json_array_size(v);
        if (n > OPENAI_MAX_LOGIT_BIAS)
            return openai_fail(eb, HR_ERR_INVALID, "stop_token_ids", "'stop_token_ids' has more than %d entries",
                               OPENAI_MAX_LOGIT_BIAS);
        if (n && !(rq->stop_token_ids = calloc(n, sizeof *rq->stop_token_ids)))
            return openai_fail(eb, HR_ERR_NOMEM, "stop_token_ids", "out of memory");
        long long hi = lim->vocab_size > 0 ? lim->vocab_size - 1 : INT32_MAX;
        for (size_t i = 0; i < n; i++) {
            char param[48];
            long long id;
            snprintf(param, sizeof param, "stop_token_ids[%zu]", i);
            enum hr_status st = openai_int_value(json_array_get(v, i), param, 0, hi, &id, eb);
            if (st != HR_OK)
                return st;
            rq->stop_token_ids[i] = (int32_t)id;
        }
        rq->params.stop_token_ids = rq->stop_token_ids;
        rq->params.n_stop_token_ids = (int)n;
    }
    return HR_OK;
}

static enum hr_status openai_parse_logit_bias(struct openai_request *rq, const struct openai_limits *lim,
                                              const struct openai_errbuf *eb)
{
    json_t *v = openai_field(rq->root, "logit_bias");
    if (!v)
        return HR_OK;
    if (!json_is_object(v))
        return openai_fail(eb, HR_ERR_INVALID, "logit_bias",
                           "'logit_bias' must be an object mapping token ids to biases, got %s", openai_type_name(v));
    size_t n = json_object_size(v);
    if (n > OPENAI_MAX_LOGIT_BIAS)
        return openai_fail(eb, HR_ERR_INVALID, "logit_bias", "'logit_bias' has %zu entries; at most %d are allowed",
                           n, OPENAI_MAX_LOGIT_BIAS);
    if (n && !(rq->logit_bias = calloc(n, sizeof *rq->logit_bias)))
        return openai_fail(eb, HR_ERR_NOMEM, "logit_bias", "out of memory");
    const char *key;
    json_t *val;
    int i = 0;
    json_object_foreach(v, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        long hi = lim->vocab_size > 0 ? lim->vocab_size - 1 : INT32_MAX;
        if (!*key || *end || !(key[0] >= '0' && key[0] <= '9') || id < 0 || id > hi)
            return openai_fail(eb, HR_ERR_INVALID, "logit_bias",
                               "'logit_bias' keys must be token ids between 0 and %ld, got '%.40s'", hi, key);
        if (!json_is_number(val))
            return openai_fail(eb, HR_ERR_INVALID, "logit_bias", "'logit_bias[%s]' must be a number, got %s", key,
                               openai_type_name(val));
        double b = json_number_value(val);
        if (!(b >= -100 && b <= 100))
            return openai_fail(eb, HR_ERR_INVALID, "logit_bias", "'logit_bias[%s]' must be between -100 and 100, got %g",
                               key, b);
        rq->logit_bias[i].token = (int32_t)id;
        rq->logit_bias[i].bias = (float)b;
        i++;
    }
    rq->params.logit_bias = rq->logit_bias;
    rq->params.n_logit_bias = i;
    return HR_OK;
}

/* Fields every generation request shares: sampling, stopping, streaming, salt. */
static enum hr_status openai_parse_common(struct openai_request *rq, const struct openai_limits *lim,
                                          const struct openai_errbuf *eb)
{
    struct hearth_request_params *p = &rq->params;
    enum hr_status st;
    long long x;
    bool has;

    if ((st = openai_parse_model(rq, lim, eb)) != HR_OK)
        return st;
    has = false;
    if ((st = openai_get_int(rq->root, "n", 1, OPENAI_MAX_INT, &has, &x, eb)) != HR_OK)
        return st;
    if (has && x > lim->max_n)
        return openai_fail(eb, HR_ERR_INVALID, "n", "'n' must be at most %d on this server, got %lld", lim->max_n, x);
    p->n = has ? (int)x : 1;
    has = false;
    if ((st = openai_get_int(rq->root, "best_of", 1, OPENAI_MAX_INT, &has, &x, eb)) != HR_OK)
        return st;
    if (has && x != p->n)
        return openai_fail(eb, HR_ERR_UNSUPPORTED, "best_of", "'best_of' other than 'n' is not supported");

    if ((st = openai_get_bool(rq->root, "stream", &rq->stream, eb)) != HR_OK)
        return st;
    json_t *so = openai_field(rq->root, "stream_options");
    if (so) {
        if (!json_is_object(so))
            return openai_fail(eb, HR_ERR_INVALID, "stream_options", "'stream_options' must be an object, got %s",
                               openai_type_name(so));
        if (!rq->stream)
            return openai_fail(eb, HR_ERR_INVALID, "stream_options",
                               "'stream_options' is only allowed when 'stream' is true");
        json_t *iu = openai_field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return openai_fail(eb, HR_ERR_INVALID, "stream_options.include_usage",
                               "'stream_options.include_usage' must be a boolean, got %s", openai_type_name(iu));
        rq->include_usage = iu && json_is_true(iu);
    }

    if ((st = openai_get_number(rq->root, "temperature", 0, false, 2, &p->has_temperature, &p->temperature, eb)))
        return st;
    if ((st = openai_get_number(rq->root, "top_p", 0, true, 1, &p->has_top_p, &p->top_p, eb)) != HR_OK)
        return st;
    has = false;
    if ((st = openai_get_int(rq->root, "top_k", -1, OPENAI_MAX_INT, &has, &x, eb)) != HR_OK)
        return st;
    if (has) {
        p->has_top_k = true;
        p->top_k = x <= 0 ? 0 : (int)x; /* -1 and 0 both mean "off" */
    }
    if ((st = openai_get_number(rq->root, "min_p", 0, false, 1, NULL, &p->min_p, eb)) != HR_OK)
        return st;
    if ((st = openai_get_number(rq->root, "repetition_penalty", 0, true, 10, NULL, &p->repetition_penalty, eb)))
        return st;
    if ((st = openai_get_number(rq->root, "presence_penalty", -2, false, 2, NULL, &p->presence_penalty, eb)))
        return st;
    if ((st = openai_get_number(rq->root, "frequency_penalty", -2, false, 2, NULL, &p->frequency_penalty, eb)))
        return st;
    has = false;
    if ((st = openai_get_int(rq->root, "seed", INT64_MIN, INT64_MAX, &has, &x, eb)) != HR_OK)
        return st;
    if (has) {
        p->has_seed = true;
        p->seed = (uint64_t)x;
    }
    if ((st = openai_get_bool(rq->root, "ignore_eos", &p->ignore_eos, eb)) != HR_OK)
        return st;
    if ((st = openai_get_bool(rq->root, "skip_special_tokens", &p->skip_special_tokens, eb)) != HR_OK)
        return st;
    if ((st = openai_get_string(rq->root, "cache_salt", true, OPENAI_CACHE_SALT_MAX, &p->cache_salt, eb)) != HR_OK)
        return st;
    const char *user = NULL;
    if ((st = openai_get_string(rq->root, "user", false, 0, &user, eb)) != HR_OK)
        return st;
    /* a load balancer's routing hint (deploy/haproxy.cfg hashes it): validated, then unused; the cache's
     * namespace is cache_salt's */
    const char *routing_key = NULL;
    if ((st = openai_get_string(rq->root, "prompt_cache_key", false, 1024, &routing_key, eb)) != HR_OK)
        return st;
    if ((st = openai_parse_stop(rq, lim, eb)) != HR_OK)
        return st;
    return openai_parse_logit_bias(rq, lim, eb);
}

/* ---------------------------------------------------------------- completions */

static enum hr_status openai_parse_ids(const json_t *arr, const char *param, const struct openai_limits *lim,
                                       struct openai_prompt *out, const struct openai_errbuf *eb)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must not be empty", param);
    if (n > OPENAI_MAX_INT)
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' is too long", param);
    out->ids = malloc(n * sizeof *out->ids);
    if (!out->ids)
        return openai_fail(eb, HR_ERR_NOMEM, param, "out of memory");
    out->n_ids = (int)n;
    long long hi = lim->vocab_size > 0 ? lim->vocab_size - 1 : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v))
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s[%zu]' must be a token id (an integer), got %s", param,
                               i, openai_type_name(v));
        long long id = json_integer_value(v);
        if (id < 0 || id > hi)
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s[%zu]' must be a token id between 0 and %lld, got %lld",
                               param, i, hi, id);
        out->ids[i] = (int32_t)id;
    }
    return HR_OK;
}

static enum hr_status openai_parse_prompt(struct openai_request *rq, const struct openai_limits *lim,
                                          const struct openai_errbuf *eb)
{
    json_t *v = openai_field(rq->root, "prompt");
    if (!v)
        return openai_fail(eb, HR_ERR_INVALID, "prompt", "'prompt' is required");
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return openai_fail(eb, HR_ERR_INVALID, "prompt", "'prompt' must not be empty");
        if (!(rq->prompts = calloc(1, sizeof *rq->prompts)))
            return openai_fail(eb, HR_ERR_NOMEM, "prompt", "out of memory");
        rq->n_prompts = 1;
        rq->prompts[0].text = json_string_value(v);
        rq->prompts[0].text_len = json_string_length(v);
        return HR_OK;
    }
    if (!json_is_array(v))
        return openai_fail(eb, HR_ERR_INVALID, "prompt",
                           "'prompt' must be a string, an array of strings, an array of token ids or an array of "
                           "arrays of token ids, got %s", openai_type_name(v));
    size_t n = json_array_size(v);
    if (n == 0)
        return openai_fail(eb, HR_ERR_INVALID, "prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) { /* one prompt of token ids */
        if (!(rq->prompts = calloc(1, sizeof *rq->prompts)))
            return openai_fail(eb, HR_ERR_NOMEM, "prompt", "out of memory");
        rq->n_prompts = 1;
        return openai_parse_ids(v, "prompt", lim, &rq->prompts[0], eb);
    }
    if (!json_is_string(first) && !json_is_array(first))
        return openai_fail(eb, HR_ERR_INVALID, "prompt[0]", "'prompt[0]' must be a string, a token id or an array "
                           "of token ids, got %s", openai_type_name(first));
    if (n > (size_t)lim->max_prompts)
        return openai_fail(eb, HR_ERR_INVALID, "prompt", "'prompt' has %zu prompts; at most %d are allowed", n,
                           lim->max_prompts);
    if (!(rq->prompts = calloc(n, sizeof *rq->prompts)))
        return openai_fail(eb, HR_ERR_NOMEM, "prompt", "out of memory");
    rq->n_prompts = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, "prompt[%zu]", i);
        if (json_is_string(first)) {
            if (!json_is_string(e))
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string like the other prompts, got %s",
                                   param, openai_type_name(e));
            if (json_string_length(e) == 0)
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must not be empty", param);
            rq->prompts[i].text = json_string_value(e);
            rq->prompts[i].text_len = json_string_length(e);
        } else {
            if (!json_is_array(e))
                return openai_fail(eb, HR_ERR_INVALID, param,
                                   "'%s' must be an array of token ids like the other prompts, got %s", param,
                                   openai_type_name(e));
            enum hr_status st = openai_parse_ids(e, param, lim, &rq->prompts[i], eb);
            if (st != HR_OK)
                return st;
        }
    }
    return HR_OK;
}

static enum hr_status openai_parse_completions(struct openai_request *rq, const struct openai_limits *lim,
                                               const struct openai_errbuf *eb)
{
    enum hr_status st;
    long long x;
    bool has = false;
    if ((st = openai_parse_prompt(rq, lim, eb)) != HR_OK)
        return st;
    if ((st = openai_get_int(rq->root, "max_tokens", 0, OPENAI_MAX_INT, &rq->has_max_tokens, &x, eb)) != HR_OK)
        return st;
    if (rq->has_max_tokens)
        rq->max_tokens = (int)x;
    if ((st = openai_get_int(rq->root, "logprobs", 0, HEARTH_MAX_TOP_LOGPROBS, &has, &x, eb)) != HR_OK)
        return st;
    if (has) {
        rq->params.logprobs = true;
        rq->params.top_logprobs = (int)x;
        rq->top_logprobs_asked = (int)x;
    }
    if ((st = openai_get_bool(rq->root, "echo", &rq->echo, eb)) != HR_OK)
        return st;
    /* echo with logprobs scores the prompt too (its first token gets null) */
    rq->params.prompt_logprobs = rq->echo && rq->params.logprobs;
    json_t *suffix = openai_field(rq->root, "suffix");
    if (suffix && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return openai_fail(eb, HR_ERR_UNSUPPORTED, "suffix", "'suffix' is not supported");
    return HR_OK;
}

/* ---------------------------------------------------------------- chat */

static enum hr_status openai_check_content(json_t *msg, size_t i, const char *role,
                                           const struct openai_errbuf *eb)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    json_t *c = openai_field(msg, "content");
    if (!c) {
        if (!strcmp(role, "assistant"))
            return HR_OK; /* an assistant turn may carry only tool calls */
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' is required for role '%s'", param, role);
    }
    if (json_is_string(c))
        return HR_OK;
    if (!json_is_array(c))
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string or an array of text parts, got %s",
                           param, openai_type_name(c));
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j);
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu]", param, j);
        if (!json_is_object(part))
            return openai_fail(eb, HR_ERR_INVALID, pp, "'%s' must be an object, got %s", pp, openai_type_name(part));
        json_t *type = json_object_get(part, "type");
        if (!json_is_string(type)) {
            snprintf(pp, sizeof pp, "%s[%zu].type", param, j);
            return openai_fail(eb, HR_ERR_INVALID, pp, "'%s' must be a string", pp);
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            snprintf(pp, sizeof pp, "%s[%zu].type", param, j);
            return openai_fail(eb, HR_ERR_UNSUPPORTED, pp, "'%s' is '%.40s': only text parts are supported", pp,
                               json_string_value(type));
        }
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) {
            snprintf(pp, sizeof pp, "%s[%zu].text", param, j);
            return openai_fail(eb, HR_ERR_INVALID, pp, "'%s' must be a string", pp);
        }
    }
    return HR_OK;
}

static enum hr_status openai_check_tool_calls(json_t *msg, size_t i, const struct openai_errbuf *eb)
{
    json_t *tc = openai_field(msg, "tool_calls");
    if (!tc)
        return HR_OK;
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(tc))
        return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an array, got %s", param, openai_type_name(tc));
    for (size_t j = 0; j < json_array_size(tc); j++) {
        json_t *call = json_array_get(tc, j);
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu].function", param, j);
        json_t *fn = json_is_object(call) ? json_object_get(call, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return openai_fail(eb, HR_ERR_INVALID, pp, "'%s' must be an object with a string 'name'", pp);
        json_t *args = json_object_get(fn, "arguments");
        if (args && !json_is_string(args) && !json_is_object(args))
            return openai_fail(eb, HR_ERR_INVALID, pp, "'%s.arguments' must be a string or an object", pp);
    }
    return HR_OK;
}

static enum hr_status openai_parse_messages(struct openai_request *rq, const struct openai_errbuf *eb)
{
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    json_t *v = openai_field(rq->root, "messages");
    if (!v)
        return openai_fail(eb, HR_ERR_INVALID, "messages", "'messages' is required");
    if (!json_is_array(v))
        return openai_fail(eb, HR_ERR_INVALID, "messages", "'messages' must be an array, got %s", openai_type_name(v));
    if (json_array_size(v) == 0)
        return openai_fail(eb, HR_ERR_INVALID, "messages", "'messages' must not be empty");
    rq->messages = json_deep_copy(v);
    if (!rq->messages)
        return openai_fail(eb, HR_ERR_NOMEM, "messages", "out of memory");
    for (size_t i = 0; i < json_array_size(rq->messages); i++) {
        json_t *m = json_array_get(rq->messages, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an object, got %s", param, openai_type_name(m));
        snprintf(param, sizeof param, "messages[%zu].role", i);
        json_t *role = json_object_get(m, "role");
        if (!role || json_is_null(role))
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' is required", param);
        if (!json_is_string(role))
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string, got %s", param, openai_type_name(role));
        const char *r = json_string_value(role);
        size_t k = 0;
        while (k < sizeof roles / sizeof roles[0] && strcmp(r, roles[k]) != 0)
            k++;
        if (k == sizeof roles / sizeof roles[0])
            return openai_fail(eb, HR_ERR_INVALID, param,
                               "'%s' must be one of system, developer, user, assistant, tool; got '%.40s'", param, r);
        if (!strcmp(r, "developer")) { /* the newer name of the system role; templates know "system" */
            if (json_object_set_new(m, "role", json_string("system")) != 0)
                return openai_fail(eb, HR_ERR_NOMEM, param, "out of memory");
            r = "system";
        }
        enum hr_status st = openai_check_content(m, i, r, eb);
        if (st != HR_OK)
            return st;
        if (!strcmp(r, "assistant") && (st = openai_check_tool_calls(m, i, eb)) != HR_OK)
            return st;
        json_t *name = openai_field(m, "name");
        if (name && !json_is_string(name)) {
            snprintf(param, sizeof param, "messages[%zu].name", i);
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string", param);
        }
        json_t *rc = openai_field(m, "reasoning_content");
        if (rc && !json_is_string(rc)) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be a string", param);
        }
    }
    return HR_OK;
}

static enum hr_status openai_parse_tools(struct openai_request *rq, const struct openai_errbuf *eb)
{
    json_t *v = openai_field(rq->root, "tools");
    if (v) {
        if (!json_is_array(v))
            return openai_fail(eb, HR_ERR_INVALID, "tools", "'tools' must be an array, got %s", openai_type_name(v));
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *t = json_array_get(v, i);
            char param[48];
            snprintf(param, sizeof param, "tools[%zu]", i);
            json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
            json_t *fn = json_is_object(t) ? json_object_get(t, "function") : NULL;
            if (!json_is_object(t) || (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an object of type 'function'", param);
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
                snprintf(param, sizeof param, "tools[%zu].function", i);
                return openai_fail(eb, HR_ERR_INVALID, param, "'%s' must be an object with a string 'name'", param);
            }
        }
        if (json_array_size(v) > 0)
            rq->tools = v;
    }
    json_t *tc = openai_field(rq->root, "tool_choice");
    /* "required" and a named function: structured_parse (the output is constrained). */
    if (tc && json_is_string(tc) && !strcmp(json_string_value(tc), "none"))
        rq->tools = NULL; /* the model is told about no tool */
    return HR_OK;
}

static enum hr_status openai_parse_chat(struct openai_request *rq, const struct openai_errbuf *eb)
{
    enum hr_status st;
    long long x;
    bool has = false;
    if ((st = openai_parse_messages(rq, eb)) != HR_OK)
        return st;
    if ((st = openai_parse_tools(rq, eb)) != HR_OK)
        return st;
    if ((st = openai_get_int(rq->root, "max_tokens", 1, OPENAI_MAX_INT, &rq->has_max_tokens, &x, eb)) != HR_OK)
        return st;
    if (rq->has_max_tokens)
        rq->max_tokens = (int)x;
    if ((st = openai_get_int(rq->root, "max_completion_tokens", 1, OPENAI_MAX_INT, &has, &x, eb)) != HR_OK)
        return st;
    if (has) {
        rq->has_max_tokens = true;
        rq->max_tokens = (int)x;
    }
    if ((st = openai_get_bool(rq->root, "logprobs", &rq->params.logprobs, eb)) != HR_OK)
        return st;
    has = false;
    if ((st = openai_get_int(rq->root, "top_logprobs", 0, HEARTH_MAX_TOP_LOGPROBS, &has, &x, eb)) != HR_OK)
        return st;
    if (has && x > 0 && !rq->params.logprobs)
        return openai_fail(eb, HR_ERR_INVALID, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    if (has) {
        rq->params.top_logprobs = (int)x;
        rq->top_logprobs_asked = (int)x;
    }
    json_t *kw = openai_field(rq->root, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw))
            return openai_fail(eb, HR_ERR_INVALID, "chat_template_kwargs", "'chat_template_kwargs' must be an object, "
                               "got %s", openai_type_name(kw));
        rq->template_kwargs = kw;
        json_t *et = openai_field(kw, "enable_thinking");
        if (et && !json_is_boolean(et))
            return openai_fail(eb, HR_ERR_INVALID, "chat_template_kwargs.enable_thinking",
                               "'chat_template_kwargs.enable_thinking' must be a boolean, got %s", openai_type_name(et));
        if (et)
            rq->enable_thinking = json_is_true(et);
    }
    rq->add_generation_prompt = true;
    if ((st = openai_get_bool(rq->root, "add_generation_prompt", &rq->add_generation_prompt, eb)) != HR_OK)
        return st;
    return HR_OK;
}

/* response_format, the guided_* / structured_outputs extras, grammar / json_schema, forced tool
 * calls: one constraint for the engine (compiled at submission). */
static enum hr_status openai_parse_structured(struct openai_request *rq, const struct openai_errbuf *eb)
{
    enum hr_status st = structured_parse(rq->root, rq->endpoint == OPENAI_ENDPOINT_CHAT, rq->tools, &rq->structured,
                                         eb->param, eb->paramlen, eb->err, eb->errlen);
    if (st != HR_OK)
        return st;
    rq->params.grammar_kind = rq->structured.kind;
    rq->params.grammar = rq->structured.text;
    return HR_OK;
}

/* ---------------------------------------------------------------- entry points */

enum hr_status openai_request_parse(struct openai_request *rq, enum openai_endpoint endpoint, const char *body,
                                    size_t len, const struct openai_limits *lim, char *param, size_t paramlen,
                                    char *err, size_t errlen)
{
    const struct openai_errbuf eb = {param, paramlen, err, errlen};
    memset(rq, 0, sizeof *rq);
    if (param && paramlen)
        param[0] = 0;
    rq->endpoint = endpoint;
    rq->enable_thinking = -1;
    rq->params.n = 1;
    rq->params.temperature = 1;
    rq->params.top_p = 1;
    rq->params.repetition_penalty = 1;
    rq->params.skip_special_tokens = true; /* as OpenAI-compatible servers do */
    if (!body || len == 0)
        return openai_fail(&eb, HR_ERR_FORMAT, NULL, "the request body is empty; it must be a JSON object");
    json_error_t jerr;
    rq->root = json_loadb(body, len, 0, &jerr);
    if (!rq->root)
        return openai_fail(&eb, HR_ERR_FORMAT, NULL, "the request body is not valid JSON: %s (line %d, column %d)",
                           jerr.text, jerr.line, jerr.column);
    enum hr_status st;
    if (!json_is_object(rq->root))
        st = openai_fail(&eb, HR_ERR_FORMAT, NULL, "the request body must be a JSON object, got %s",
                         openai_type_name(rq->root));
    else if ((st = openai_parse_common(rq, lim, &eb)) == HR_OK)
        st = endpoint == OPENAI_ENDPOINT_CHAT ? openai_parse_chat(rq, &eb) : openai_parse_completions(rq, lim, &eb);
    if (st == HR_OK)
        st = openai_parse_structured(rq, &eb);
    if (st != HR_OK)
        openai_request_free(rq);
    return st;
}

void openai_request_free(struct openai_request *rq)
{
    if (!rq)
        return;
    for (int i = 0; rq->prompts && i < rq->n_prompts; i++)
        free(rq->prompts[i].ids);
    free(rq->prompts);
    free(rq->stop);
    free(rq->logit_bias);
    free(rq->stop_token_ids);
    json_decref(rq->messages);
    json_decref(rq->root);
    structured_free(&rq->structured);
    memset(rq, 0, sizeof *rq);
}

enum hr_status openai_check_context(const struct openai_request *rq, int n_prompt_tokens, int max_context,
                                    int *max_tokens, char *param, size_t paramlen, char *err, size_t errlen)
{
    const struct openai_errbuf eb = {param, paramlen, err, errlen};
    const char *what = rq->endpoint == OPENAI_ENDPOINT_CHAT ? "messages" : "prompt";
    if (n_prompt_tokens <= 0)
        return openai_fail(&eb, HR_ERR_INVALID, what, "'%s' must encode to at least one token", what);
    if (n_prompt_tokens >= max_context)
        return openai_fail(&eb, HR_ERR_INVALID, what,
                           "This model's maximum context length is %d tokens, but the %s has %d tokens", max_context,
                           what, n_prompt_tokens);
    int room = max_context - n_prompt_tokens;
    if (!rq->has_max_tokens) {
        /* chat: up to max_context, as far as the pool holds the samples (the engine decides) */
        *max_tokens = rq->endpoint != OPENAI_ENDPOINT_COMPLETIONS ? HEARTH_MAX_TOKENS_AUTO
                      : room > OPENAI_DEFAULT_MAX_TOKENS          ? OPENAI_DEFAULT_MAX_TOKENS
                                                                  : room;
        return HR_OK;
    }
    if (rq->max_tokens > room) {
        const char *key = rq->endpoint == OPENAI_ENDPOINT_CHAT && json_object_get(rq->root, "max_completion_tokens") &&
                                  !json_is_null(json_object_get(rq->root, "max_completion_tokens"))
                              ? "max_completion_tokens" : "max_tokens";
        return openai_fail(&eb, HR_ERR_INVALID, key,
                           "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                           "(%d in the %s, %d in the completion). Please reduce the length of the %s or '%s'.",
                           max_context, (long long)n_prompt_tokens + rq->max_tokens, n_prompt_tokens, what,
                           rq->max_tokens, what, key);
    }
    *max_tokens = rq->max_tokens;
    return HR_OK;
}

/* ---------------------------------------------------------------- errors */

int openai_http_status(enum hr_status st)
{
    switch (st) {
    case HR_OK: return 200;
    case HR_ERR_FORMAT:
    case HR_ERR_INVALID:
    case HR_ERR_UNSUPPORTED: return 400;
    case HR_ERR_NOT_FOUND: return 404;
    case HR_ERR_FULL:
    case HR_ERR_NOMEM: return 503;
    default: return 500;
    }
}

const char *openai_error_type(int http_status)
{
    switch (http_status) {
    case 401: return "authentication_error";
    case 404:
    case 400:
    case 405:
    case 413: return "invalid_request_error";
    case 429:
    case 503: return "server_overloaded";
    default: return http_status >= 500 ? "server_error" : "invalid_request_error";
    }
}

json_t *openai_error_json(int http_status, const char *message, const char *param, const char *code)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", openai_json_string(message ? message : "", message ? strlen(message) : 0));
    json_object_set_new(e, "type", json_string(openai_error_type(http_status)));
    json_object_set_new(e, "param", param && *param ? openai_json_string(param, strlen(param)) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", e);
    return root;
}

/* ---------------------------------------------------------------- JSON helpers */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t openai_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *openai_json_string(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    /* invalid UTF-8 (or a NUL): replace the offending bytes */
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = u[i] ? openai_utf8_seq(u + i, n - i) : 0;
        if (k) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

json_t *openai_json_logprob(float lp)
{
    if (isnan(lp))
        return json_null();
    if (isinf(lp))
        return json_real(lp < 0 ? -9999.0 : 9999.0);
    return json_real((double)lp);
}
