/* The per-request event channel. */
#include "engine/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

#define REQUEST_TEXT_CHUNK 4096

struct request_text_chunk {
    struct request_text_chunk *next;
    size_t used, cap;
    char data[]; /* [cap] */
};

struct hearth_request *request_new(struct hearth_engine *e, char *err, size_t errlen)
{
    struct hearth_request *r = calloc(1, sizeof *r);
    if (!r)
        return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory"), NULL;
    r->cap = 16;
    r->events = malloc((size_t)r->cap * sizeof *r->events);
    /* The first text chunk now, on the submitting thread: a step allocates only when
     * a request's text or queue outgrows what it has (amortized). */
    r->text = malloc(sizeof *r->text + REQUEST_TEXT_CHUNK);
    if (!r->events || !r->text) {
        free(r->events);
        free(r->text);
        free(r);
        return hr_err(err, errlen, HR_ERR_NOMEM, "request: out of memory"), NULL;
    }
    r->text->next = NULL;
    r->text->used = 0;
    r->text->cap = REQUEST_TEXT_CHUNK;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancel, 0);
    r->engine = e;
    return r;
}

void request_unref(struct hearth_request *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    for (struct request_text_chunk *c = r->text, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(r->events);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Copies text into storage that stays put until the request is freed. */
static const char *request_keep_text(struct hearth_request *r, const char *text, size_t n)
{
    struct request_text_chunk *c = r->text;
    if (!c || c->cap - c->used < n + 1) {
        size_t cap = n + 1 > REQUEST_TEXT_CHUNK ? n + 1 : REQUEST_TEXT_CHUNK;
        struct request_text_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc)
            return NULL;
        nc->next = r->text;
        nc->used = 0;
        nc->cap = cap;
        r->text = c = nc;
    }
    char *dst = c->data + c->used;
    memcpy(dst, text, n);
    dst[n] = 0;
    c->used += n + 1;
    return dst;
}

bool request_push(struct hearth_request *r, const struct hearth_event *ev, const char *text, size_t text_len)
{
    pthread_mutex_lock(&r->mu);
    bool ok = true;
    if (r->count == r->cap) {
        int ncap = r->cap * 2;
        struct hearth_event *ne = malloc((size_t)ncap * sizeof *ne);
        if (!ne) {
            ok = false;
            goto out;
        }
        for (int i = 0; i < r->count; i++)
            ne[i] = r->events[(r->head + i) % r->cap];
        free(r->events);
        r->events = ne;
        r->head = 0;
        r->cap = ncap;
    }
    struct hearth_event *slot = &r->events[(r->head + r->count) % r->cap];
    *slot = *ev;
    slot->text = request_keep_text(r, text ? text : "", text ? text_len : 0);
    slot->text_len = text ? text_len : 0;
    if (!slot->text) {
        ok = false;
        goto out;
    }
    r->count++;
    r->queued_bytes += sizeof *slot + slot->text_len;
    /* a consumer that stopped taking events: end the request rather than hold its output */
    if (r->max_queued_bytes && r->queued_bytes > r->max_queued_bytes && !atomic_load(&r->overflowed)) {
        atomic_store(&r->overflowed, 1);
        atomic_store(&r->cancel, 1);
        if (r->engine)
            engine_count_stalled(r->engine);
    }
    if (ev->type == HEARTH_EVENT_DONE)
        r->done_queued = 1;
    pthread_cond_broadcast(&r->cv);
out:
    pthread_mutex_unlock(&r->mu);
    return ok;
}

enum hr_status hearth_request_next_event(struct hearth_request *r, struct hearth_event *ev, int timeout_ms)
{
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&r->mu);
    enum hr_status st = HR_OK;
    while (r->count == 0) {
        if (r->done_taken) {
            st = HR_ERR_NOT_FOUND;
            goto out;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&r->cv, &r->mu);
        } else if (timeout_ms == 0) {
            /* a poll: no timed wait (an expired one still sleeps the timer slack, ~50-90
             * us, which a bench or server polling every request each step pays each time) */
            st = HR_ERR_FULL;
            goto out;
        } else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT && r->count == 0) {
            st = HR_ERR_FULL;
            goto out;
        }
    }
    *ev = r->events[r->head];
    r->head = (r->head + 1) % r->cap;
    r->count--;
    r->queued_bytes -= sizeof *ev + ev->text_len;
    if (ev->type == HEARTH_EVENT_DONE)
        r->done_taken = 1;
out:
    pthread_mutex_unlock(&r->mu);
    return st;
}

void hearth_request_cancel(struct hearth_request *r)
{
    if (!r)
        return;
    atomic_store(&r->cancel, 1);
    /* Under r->mu: hearth_engine_free clears r->engine under the same lock. */
    pthread_mutex_lock(&r->mu);
    if (r->engine)
        engine_wake(r->engine);
    pthread_mutex_unlock(&r->mu);
}

void hearth_request_free(struct hearth_request *r)
{
    if (!r)
        return;
    hearth_request_cancel(r);
    request_unref(r);
}
