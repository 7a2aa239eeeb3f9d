/* qwen3 tool-call parser (see toolcall.h). */
#define _GNU_SOURCE /* memmem */
#include "server/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char toolcall_open_tag[] = "<tool_call>";
static const char toolcall_close_tag[] = "</tool_call>";
#define TOOLCALL_OPEN_LEN (sizeof toolcall_open_tag - 1)
#define TOOLCALL_CLOSE_LEN (sizeof toolcall_close_tag - 1)

void toolcall_init(struct toolcall *t, bool enabled, const char *id_prefix)
{
    memset(t, 0, sizeof *t);
    t->enabled = enabled;
    snprintf(t->id_prefix, sizeof t->id_prefix, "%s", id_prefix ? id_prefix : "call_");
}

void toolcall_free(struct toolcall *t)
{
    if (!t)
        return;
    strbuf_free(&t->hold);
    strbuf_free(&t->ws);
    memset(t, 0, sizeof *t);
}

static bool toolcall_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Content outside the calls: trailing whitespace waits in t->ws until more content
 * follows (or the output ends). */
static void toolcall_text(struct toolcall *t, const char *s, size_t n, struct strbuf *co)
{
    size_t e = n;
    while (e > 0 && toolcall_space(s[e - 1]))
        e--;
    if (e == 0) {
        strbuf_append(&t->ws, s, n);
        return;
    }
    strbuf_append(co, t->ws.data, t->ws.len);
    strbuf_clear(&t->ws);
    strbuf_append(co, s, e);
    strbuf_append(&t->ws, s + e, n - e);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of the open tag. */
static size_t toolcall_partial_open(const char *s, size_t n)
{
    for (size_t k = TOOLCALL_OPEN_LEN - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, toolcall_open_tag, k))
            return k;
    return 0;
}

/* The body of a closed block (t->hold): a call, or the block back as content. */
static enum hr_status toolcall_finish(struct toolcall *t, struct strbuf *co, json_t *calls)
{
    json_t *body = json_loadb(t->hold.data ? t->hold.data : "", t->hold.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *name = json_object_get(body, "name");
    json_t *args = json_object_get(body, "arguments");
    bool ok = json_is_object(body) && json_is_string(name) && json_string_length(name) > 0 &&
              (!args || json_is_object(args) || json_is_string(args));
    enum hr_status st = HR_OK;
    if (ok) {
        char *args_text = !args ? strdup("{}")
                          : json_is_string(args) ? strdup(json_string_value(args))
                                                 : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        char id[96];
        snprintf(id, sizeof id, "%s%d", t->id_prefix, t->n_calls);
        json_t *call = args_text ? json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function",
                                             "name", name, "arguments", args_text)
                                 : NULL;
        free(args_text);
        if (!call || json_array_append_new(calls, call) != 0)
            st = HR_ERR_NOMEM;
        t->n_calls++;
    } else { /* the block as written (fed piece by piece, toolcall_text keeps the bytes) */
        toolcall_text(t, toolcall_open_tag, TOOLCALL_OPEN_LEN, co);
        toolcall_text(t, t->hold.data, t->hold.len, co);
        toolcall_text(t, toolcall_close_tag, TOOLCALL_CLOSE_LEN, co);
    }
    json_decref(body);
    strbuf_clear(&t->hold);
    t->inside = false;
    return st;
}

static enum hr_status toolcall_step(struct toolcall *t, const char *s, size_t n, struct strbuf *co, json_t *calls)
{
    enum hr_status st = HR_OK;
    while (n > 0 && st == HR_OK) {
        if (!t->inside) {
            const char *tag = memmem(s, n, toolcall_open_tag, TOOLCALL_OPEN_LEN);
            if (!tag) {
                size_t k = toolcall_partial_open(s, n);
                toolcall_text(t, s, n - k, co);
                strbuf_append(&t->hold, s + n - k, k);
                return HR_OK;
            }
            toolcall_text(t, s, (size_t)(tag - s), co);
            size_t used = (size_t)(tag - s) + TOOLCALL_OPEN_LEN;
            s += used;
            n -= used;
            t->inside = true;
            continue;
        }
        /* inside: the close tag may straddle the body so far and s */
        size_t k = t->hold.len < TOOLCALL_CLOSE_LEN - 1 ? t->hold.len : TOOLCALL_CLOSE_LEN - 1;
        size_t m = n < TOOLCALL_CLOSE_LEN - 1 ? n : TOOLCALL_CLOSE_LEN - 1;
        char seam[2 * TOOLCALL_CLOSE_LEN];
        const char *at = NULL;
        if (k) {
            memcpy(seam, t->hold.data + t->hold.len - k, k);
            memcpy(seam + k, s, m);
            at = memmem(seam, k + m, toolcall_close_tag, TOOLCALL_CLOSE_LEN);
        }
        if (at && (size_t)(at - seam) < k) {
            size_t in_body = (size_t)(at - seam), in_s = TOOLCALL_CLOSE_LEN - (k - in_body);
            t->hold.len -= k - in_body;
            st = toolcall_finish(t, co, calls);
            s += in_s;
            n -= in_s;
            continue;
        }
        const char *end = memmem(s, n, toolcall_close_tag, TOOLCALL_CLOSE_LEN);
        if (!end)
            return strbuf_append(&t->hold, s, n);
        strbuf_append(&t->hold, s, (size_t)(end - s));
        st = toolcall_finish(t, co, calls);
        size_t used = (size_t)(end - s) + TOOLCALL_CLOSE_LEN;
        s += used;
        n -= used;
    }
    return st;
}

static enum hr_status toolcall_status(const struct toolcall *t, const struct strbuf *co, enum hr_status st)
{
    return st == HR_OK && (t->hold.oom || t->ws.oom || co->oom) ? HR_ERR_NOMEM : st;
}

enum hr_status toolcall_feed(struct toolcall *t, const char *s, size_t n, struct strbuf *content_out, json_t *calls)
{
    if (!t->enabled)
        return strbuf_append(content_out, s, n);
    if (t->inside || t->hold.len == 0)
        return toolcall_status(t, content_out, toolcall_step(t, s, n, content_out, calls));
    /* a possible start of the open tag was held: it comes first */
    struct strbuf cur = {0};
    strbuf_append(&cur, t->hold.data, t->hold.len);
    strbuf_append(&cur, s, n);
    strbuf_clear(&t->hold);
    enum hr_status st = cur.oom ? HR_ERR_NOMEM : toolcall_step(t, cur.data, cur.len, content_out, calls);
    strbuf_free(&cur);
    return toolcall_status(t, content_out, st);
}

enum hr_status toolcall_flush(struct toolcall *t, struct strbuf *content_out)
{
    if (!t->enabled)
        return HR_OK;
    if (t->inside) /* a block left open is content as written */
        toolcall_text(t, toolcall_open_tag, TOOLCALL_OPEN_LEN, content_out);
    toolcall_text(t, t->hold.data, t->hold.len, content_out);
    strbuf_clear(&t->hold);
    t->inside = false;
    if (t->n_calls == 0)
        strbuf_append(content_out, t->ws.data, t->ws.len);
    strbuf_clear(&t->ws);
    return toolcall_status(t, content_out, HR_OK);
}
