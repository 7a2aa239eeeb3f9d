/* POST /v1/responses, OpenAI's Responses API for text, as a translation over the chat
 * path: the request's input (a string, or message / function_call /
 * function_call_output / reasoning items) and instructions become chat messages, its
 * function tools chat tools; the chat job's result becomes a Response (reasoning,
 * message and function_call output items, usage with cached tokens), and its SSE
 * chunks become the Responses stream events (response.created, response.in_progress,
 * response.output_item.added, response.output_text.delta, ..., response.completed).
 *
 * The output items of the last RESPONSES_STORE_ITEMS responses' items (unless the
 * request says store: false) are kept in memory so that an item_reference (what the AI
 * SDK sends for earlier turns) resolves; an unknown one, and previous_response_id, are
 * answered 400.  The translation functions are pure (unit-tested). */
#ifndef HEARTH_SERVER_RESPONSES_H
#define HEARTH_SERVER_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>

#include "base/status.h"
#include "server/api.h"
#include "server/strbuf.h"

#define RESPONSES_STORE_ITEMS 4096

/* Output items by id, a bounded ring (the oldest go first); thread-safe. */
struct responses_store;
struct responses_store *responses_store_new(void);
void responses_store_free(struct responses_store *st);
/* Keeps every item of output (an array of items with "id"). */
void responses_store_put(struct responses_store *st, const json_t *output);
/* The item stored under id (a new reference), or NULL. */
json_t *responses_store_get(struct responses_store *st, const char *id);

/* The chat completions body equivalent to a Responses body (*chat: a new reference);
 * store (may be NULL) resolves item_reference items.  Failures name the field in param. */
enum hr_status responses_to_chat(const json_t *req, struct responses_store *store, json_t **chat, char *param,
                                 size_t paramlen, char *err, size_t errlen);

/* What a Response echoes of its request, and its ids. */
struct responses_meta {
    const char *id;             /* "resp_..." */
    const char *item_prefix_id; /* unique hex that item ids are made of */
    long long created;
    const char *model;
    const json_t *req;          /* the Responses request (instructions, tools, ... echoed) */
    struct responses_store *store; /* where a stream's finished output goes (NULL: nowhere) */
};

/* The Response object of a finished chat completion body (a new reference). */
json_t *responses_from_chat(const struct responses_meta *m, const json_t *chat);

/* The stream: chat SSE chunks in, Responses events out. */
struct responses_stream;
struct responses_stream *responses_stream_new(const struct responses_meta *m);
/* Consumes the complete frames of chat (what job.c queued) and appends events to out. */
enum hr_status responses_stream_feed(struct responses_stream *rs, struct strbuf *chat, struct strbuf *out);
void responses_stream_free(struct responses_stream *rs);

void responses_handle(struct server *s, const struct api_call *call, struct api_reply *out);

#endif
