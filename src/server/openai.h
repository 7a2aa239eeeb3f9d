/* The OpenAI request surface: parsing and validating the bodies of /v1/completions and
 * /v1/chat/completions into engine parameters, and the error envelope.  Pure functions
 * over jansson: nothing here touches the engine, so all of it is unit-tested and fuzzed.
 *
 * Errors: every failing function returns an hr_status, writes a message naming the bad
 * field into err[errlen] and the field's path ("messages[1].role") into param[paramlen]
 * ("" when no single field is at fault).  openai_http_status maps the status to HTTP. */
#ifndef HEARTH_SERVER_OPENAI_H
#define HEARTH_SERVER_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hearth.h>

#include "base/status.h"
#include "server/structured.h"

enum openai_endpoint {
    OPENAI_ENDPOINT_COMPLETIONS, /* POST /v1/completions */
    OPENAI_ENDPOINT_CHAT,        /* POST /v1/chat/completions */
};

/* Bounds the server imposes; fixed for the life of the server. */
struct openai_limits {
    const char *const *model_names; /* [n_model_names] accepted values of "model" */
    int n_model_names;
    int max_n;                      /* "n" at most (>= 1) */
    int max_prompts;                /* prompts in one completions request at most */
    int vocab_size;                 /* token ids must lie below it (0: not checked here) */
};

#define OPENAI_MAX_STOP 16          /* stop strings per request */
#define OPENAI_MAX_STOP_BYTES 1024  /* bytes per stop string */
#define OPENAI_MAX_LOGIT_BIAS 1024  /* logit_bias entries */
#define OPENAI_CACHE_SALT_MAX 256   /* bytes of a client's cache_salt (a key's prefix may go on top,
                                       within the engine's HEARTH_CACHE_SALT_MAX) */
#define OPENAI_DEFAULT_MAX_TOKENS 16 /* completions without max_tokens (OpenAI's default) */

/* One prompt of a completions request: text, or token ids. */
struct openai_prompt {
    const char *text;  /* NUL-terminated, borrowed from the request's JSON; NULL for ids */
    size_t text_len;
    int32_t *ids;      /* [n_ids] (malloc'd) when the prompt was token ids */
    int n_ids;
};

struct openai_request {
    enum openai_endpoint endpoint;
    json_t *root;                    /* the parsed body; borrowed strings point into it */
    const char *model;
    bool stream;
    bool include_usage;              /* stream_options.include_usage */

    /* completions */
    struct openai_prompt *prompts;   /* [n_prompts] */
    int n_prompts;
    bool echo;

    /* chat */
    json_t *messages;                /* normalized copy: roles checked, "developer" as "system" */
    const json_t *tools;             /* borrowed array, or NULL */
    const json_t *template_kwargs;   /* chat_template_kwargs (borrowed object), or NULL */
    int enable_thinking;             /* -1: not given, else 0/1 */
    bool add_generation_prompt;      /* default true */

    bool has_max_tokens;             /* else: the endpoint's default, decided with the prompt length */
    int max_tokens;

    /* Everything the engine takes, the prompt aside.  Its arrays point into this struct. */
    struct hearth_request_params params;
    const char **stop;               /* [n_stop] borrowed strings */
    struct hearth_logit_bias *logit_bias; /* [n_logit_bias] */
    int32_t *stop_token_ids;         /* [n_stop_token_ids] */
    int top_logprobs_asked;          /* completions: "logprobs": N; chat: "top_logprobs" */
    struct structured_spec structured; /* the output's constraint (params.grammar points into it) */
};

/* Parses and validates body[0..len) for endpoint.  On success rq owns what it holds
 * (openai_request_free); on failure rq is zeroed. */
enum hr_status openai_request_parse(struct openai_request *rq, enum openai_endpoint endpoint, const char *body,
                                    size_t len, const struct openai_limits *lim, char *param, size_t paramlen,
                                    char *err, size_t errlen);
void openai_request_free(struct openai_request *rq);

/* The context check once the prompt length is known: fills *max_tokens (the request's,
 * or the endpoint default: 16 for completions, HEARTH_MAX_TOKENS_AUTO for chat) and
 * fails when prompt + max_tokens exceed max_context (the server's max_model_len). */
enum hr_status openai_check_context(const struct openai_request *rq, int n_prompt_tokens, int max_context,
                                    int *max_tokens, char *param, size_t paramlen, char *err, size_t errlen);

/* ---- errors ---- */

/* HTTP status for a failure status: 400 for bad input, 404 for an unknown model (or
 * route), 503 when full, 500 otherwise. */
int openai_http_status(enum hr_status st);
/* OpenAI's error type for an HTTP status ("invalid_request_error", ...). */
const char *openai_error_type(int http_status);
/* {"error":{"message","type","param","code"}}: param NULL or "" and code NULL give null. */
json_t *openai_error_json(int http_status, const char *message, const char *param, const char *code);

/* ---- JSON helpers shared by the renderers ---- */

/* A JSON string of s[0..n), with invalid UTF-8 replaced by U+FFFD (jansson refuses it). */
json_t *openai_json_string(const char *s, size_t n);
/* A JSON number for a logprob: -inf (a masked token) becomes -9999.0, as vLLM reports it. */
json_t *openai_json_logprob(float lp);

#endif
