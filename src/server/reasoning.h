/* The qwen3 reasoning parser: splits generated text into reasoning ("<think>...</think>")
 * and content, incrementally, so that streamed deltas and the final message agree.
 * A possible partial tag at the end of what was fed is held back until the next feed
 * (or reasoning_flush) decides it.  Text before an opening <think> other than the tag
 * itself makes the whole output content; text after </think> is content. */
#ifndef HEARTH_SERVER_REASONING_H
#define HEARTH_SERVER_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "server/strbuf.h"

enum reasoning_state {
    REASONING_STATE_OFF,     /* parser disabled: everything is content */
    REASONING_STATE_START,   /* nothing decided yet: the output may open with <think> */
    REASONING_STATE_THINK,   /* inside <think>: text is reasoning until </think> */
    REASONING_STATE_CONTENT, /* after </think>, or no <think> at the start */
};

struct reasoning {
    enum reasoning_state state;
    char hold[16]; /* [n_hold] bytes that may be the start of a tag */
    size_t n_hold;
};

/* enabled false: a pass-through.  opened: the prompt already ends inside <think> (the
 * template opened it), so the output starts as reasoning. */
void reasoning_init(struct reasoning *r, bool enabled, bool opened);
/* Feeds text; appends the decided parts to reasoning_out and content_out. */
enum hr_status reasoning_feed(struct reasoning *r, const char *s, size_t n, struct strbuf *reasoning_out,
                              struct strbuf *content_out);
/* The output ended: held bytes go where the current state says. */
enum hr_status reasoning_flush(struct reasoning *r, struct strbuf *reasoning_out, struct strbuf *content_out);

#endif
