/* The qwen3 tool-call parser: finds the calls a Qwen3 model writes into its content,
 *   <tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 * and turns each into an OpenAI tool call, incrementally, so that streamed deltas and
 * the final message agree.  Content outside the calls passes through; whitespace is
 * held until more content follows it, and whitespace that only surrounds calls is
 * dropped.  A block whose body is not {"name": string, "arguments": object or string}
 * stays content, as written; so does a block the output ends inside. */
#ifndef HEARTH_SERVER_TOOLCALL_H
#define HEARTH_SERVER_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/strbuf.h"

struct toolcall {
    bool enabled;
    bool inside;        /* after <tool_call>, before </tool_call> */
    struct strbuf hold; /* outside: a possible start of <tool_call>; inside: the body so far */
    struct strbuf ws;   /* whitespace not yet passed on (outside) */
    int n_calls;        /* calls found so far */
    char id_prefix[64]; /* a call's id: this, then its number */
};

/* enabled false: a pass-through.  id_prefix: see struct toolcall (truncated to fit). */
void toolcall_init(struct toolcall *t, bool enabled, const char *id_prefix);
void toolcall_free(struct toolcall *t);

/* Feeds content.  Appends what is decided to content_out and each completed call to
 * calls as {"id", "type": "function", "function": {"name", "arguments"}}.
 * HR_ERR_NOMEM on allocation failure. */
enum hr_status toolcall_feed(struct toolcall *t, const char *s, size_t n, struct strbuf *content_out, json_t *calls);
/* The output ended: a block left open and held text become content; whitespace is
 * passed on unless a call was found. */
enum hr_status toolcall_flush(struct toolcall *t, struct strbuf *content_out);

#endif
