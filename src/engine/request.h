/* The per-request event channel between the engine thread (producer) and the
 * caller (consumer): struct hearth_request of the public API.  Refcounted by its two
 * owners; events queue without bound so the engine never waits for a consumer. */
#ifndef HEARTH_ENGINE_REQUEST_H
#define HEARTH_ENGINE_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/status.h"

struct request_text_chunk;

struct hearth_request {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;               /* engine + caller */
    atomic_int cancel;             /* set by the caller, read by the engine */
    struct hearth_event *events;   /* [cap] ring of queued events */
    int head, count, cap;
    int done_queued;               /* the DONE event has been queued */
    int done_taken;                /* ... and taken */
    struct request_text_chunk *text; /* event texts: chunks that never move */
    struct hearth_engine *engine;  /* to wake the engine on cancel */
    size_t queued_bytes;           /* the queued events and their texts */
    size_t max_queued_bytes;       /* past it: cancelled, overflowed (0: no bound) */
    atomic_int overflowed;
};

struct hearth_request *request_new(struct hearth_engine *e, char *err, size_t errlen);
/* Drops one reference; frees on the last. */
void request_unref(struct hearth_request *r);
/* Queues ev; its text (text_len bytes) is copied into the request's text storage.
 * Returns false when memory runs out (the caller then fails the request). */
bool request_push(struct hearth_request *r, const struct hearth_event *ev, const char *text, size_t text_len);

#endif
