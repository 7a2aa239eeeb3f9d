/* Building OpenAI responses from engine events: the choices of one request (text,
 * reasoning, logprobs, finish reason), usage, and the JSON of the final body or of each
 * streamed chunk, in OpenAI's exact shapes for /v1/completions ("text_completion") and
 * /v1/chat/completions ("chat.completion" / "chat.completion.chunk").
 *
 * Pure over jansson: token strings come from a callback, so tests feed synthetic events. */
#ifndef HEARTH_SERVER_RESPONSE_H
#define HEARTH_SERVER_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include <hearth.h>

#include "server/openai.h"
#include "server/reasoning.h"
#include "server/strbuf.h"
#include "server/toolcall.h"

/* The text of one token on its own, malloc'd into *text (*len bytes).  Bytes that are
 * part of a UTF-8 character may come back as U+FFFD. */
typedef enum hr_status (*response_token_text_fn)(void *ctx, int32_t token, char **text, size_t *len);
/* The raw bytes of one token (borrowed), for the chat shape's "bytes". */
typedef enum hr_status (*response_token_bytes_fn)(void *ctx, int32_t token, const char **bytes, size_t *len);

struct response_config {
    enum openai_endpoint endpoint;
    const char *id;             /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;            /* unix seconds */
    const char *model;
    const char *fingerprint;    /* system_fingerprint */
    int n_choices;
    bool stream;
    bool include_usage;         /* streamed chunks carry "usage": null and a final usage chunk follows */
    bool logprobs;
    int top_logprobs;
    bool reasoning;             /* split <think>...</think> into reasoning_content (chat) */
    bool reasoning_opened;      /* the prompt ends inside <think> */
    bool tool_calls;            /* parse <tool_call> blocks of the content into tool_calls (chat) */
    response_token_text_fn token_text;
    response_token_bytes_fn token_bytes; /* NULL: the bytes of token_text's string */
    void *token_ctx;
};

struct response_choice {
    struct strbuf text;         /* completions text, or chat content */
    struct strbuf reasoning;    /* chat reasoning_content */
    struct reasoning parser;
    struct toolcall calls_parser;
    json_t *tool_calls;         /* chat: [ {index, id, type, function} ] found so far */
    json_t *logprobs;           /* completions: {tokens, token_logprobs, top_logprobs, text_offset};
                                   chat: [ {token, logprob, bytes, top_logprobs} ]; streamed
                                   responses fill it, the others keep it empty and use lp_text */
    struct strbuf lp_text[4];   /* not streamed: the entries as JSON text, comma-separated (chat: [0];
                                   completions: tokens, token_logprobs, top_logprobs, text_offset),
                                   a fraction of the memory of the trees */
    int64_t text_chars;         /* code points of the token strings so far (text_offset) */
    int64_t echo_chars;         /* the same over the echoed prompt's tokens */
    enum hearth_finish_reason finish;
    bool finished;
    int n_tokens;
};

struct response {
    struct response_config cfg; /* strings copied below */
    char *id, *model, *fingerprint;
    struct response_choice *choices; /* [n_choices] */
    int prompt_tokens, cached_tokens, completion_tokens;
};

enum hr_status response_init(struct response *r, const struct response_config *cfg, char *err, size_t errlen);
void response_free(struct response *r);

/* Text put before choice i's output (echo).  Streaming: *chunk gets its chunk. */
enum hr_status response_prefix(struct response *r, int choice, const char *text, size_t len, json_t **chunk,
                               char *err, size_t errlen);
/* Echo with logprobs (completions): the entry of one prompt token, ev its
 * PROMPT_LOGPROB event or NULL for the first prompt token (null logprob and
 * alternatives).  Streaming: *chunk gets a chunk with empty text carrying it. */
enum hr_status response_prompt_logprob(struct response *r, int choice, int32_t token, const struct hearth_event *ev,
                                       json_t **chunk, char *err, size_t errlen);
/* The first chunk of a streamed chat choice: delta {role: "assistant", content: ""}. */
json_t *response_role_chunk(const struct response *r, int choice);
/* A TOKEN event for choice i.  Streaming: *chunk gets the chunk to send, or NULL when
 * there is nothing to send yet (text held back, no logprobs). */
enum hr_status response_token(struct response *r, int choice, const struct hearth_event *ev, json_t **chunk,
                              char *err, size_t errlen);
/* Choice i finished.  Streaming: *chunk gets its last chunk (held text and finish_reason). */
enum hr_status response_finish(struct response *r, int choice, enum hearth_finish_reason reason, json_t **chunk,
                               char *err, size_t errlen);
/* Adds a DONE event's counts (requests with several prompts add several). */
void response_add_usage(struct response *r, int prompt_tokens, int cached_tokens, int completion_tokens);

/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}} */
json_t *response_usage_json(const struct response *r);
/* The final usage chunk of a stream: "choices": [] and usage. */
json_t *response_usage_chunk(const struct response *r);
/* The whole non-streamed body. */
json_t *response_body(const struct response *r);
/* The same as compact JSON text (*out malloc'd, *len bytes), built without the logprobs
 * as trees, so the memory it takes is about the body's size. */
enum hr_status response_body_text(const struct response *r, char **out, size_t *len, char *err, size_t errlen);
/* OpenAI's name of a finish reason ("stop", "length"; "abort" / "error" otherwise). */
const char *response_finish_str(enum hearth_finish_reason reason);

#endif
