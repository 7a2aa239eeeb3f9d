/* Keep-alive deadlines (see watch.h). */
#include "server/watch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum watch_state {
    WATCH_STATE_IDLE,  /* between requests */
    WATCH_STATE_HEAD,  /* request line in, headers coming */
    WATCH_STATE_BUSY,  /* being served */
};

struct watch_conn {
    struct watch_conn *prev, *next;
    int fd;
    enum watch_state state;
    double since;      /* monotonic seconds: when the state began */
    bool shut;         /* shut down already */
    bool evictable;    /* idle between requests (watch_keepalive) */
};

struct watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct watch_conn *head;
    double head_timeout, keepalive_timeout;
    bool stopping;
    pthread_t thread;
};

static double watch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *watch_thread(void *arg)
{
    struct watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        double now = watch_now();
        for (struct watch_conn *c = w->head; c; c = c->next) {
            if (c->shut || c->state == WATCH_STATE_BUSY)
                continue;
            double limit = c->state == WATCH_STATE_HEAD ? w->head_timeout : w->keepalive_timeout;
            if (now - c->since > limit) {
                shutdown(c->fd, SHUT_RDWR); /* its thread sees the end and closes it */
                c->shut = true;
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

enum hr_status watch_start(struct watch **out, int head_timeout_s, int keepalive_timeout_s, char *err, size_t errlen)
{
    *out = NULL;
    struct watch *w = calloc(1, sizeof *w);
    if (!w)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->head_timeout = head_timeout_s;
    w->keepalive_timeout = keepalive_timeout_s;
    if (pthread_create(&w->thread, NULL, watch_thread, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return hr_err(err, errlen, HR_ERR_INTERNAL, "cannot start the connection deadline thread");
    }
    *out = w;
    return HR_OK;
}

struct watch_conn *watch_add(struct watch *w, int fd)
{
    struct watch_conn *c = calloc(1, sizeof *c);
    if (!w || !c || fd < 0) {
        free(c);
        return NULL;
    }
    c->fd = fd;
    c->state = WATCH_STATE_IDLE;
    c->since = watch_now();
    pthread_mutex_lock(&w->mu);
    c->next = w->head;
    if (w->head)
        w->head->prev = c;
    w->head = c;
    pthread_mutex_unlock(&w->mu);
    return c;
}

static void watch_set(struct watch *w, struct watch_conn *c, enum watch_state st, bool evictable)
{
    if (!w || !c)
        return;
    pthread_mutex_lock(&w->mu);
    c->state = st;
    c->evictable = evictable;
    c->since = watch_now();
    pthread_mutex_unlock(&w->mu);
}

bool watch_is_shut(struct watch *w, struct watch_conn *c)
{
    if (!w || !c)
        return false;
    pthread_mutex_lock(&w->mu);
    bool shut = c->shut;
    pthread_mutex_unlock(&w->mu);
    return shut;
}

void watch_keepalive(struct watch *w, struct watch_conn *c)
{
    watch_set(w, c, WATCH_STATE_IDLE, true);
}

bool watch_evict_idle(struct watch *w)
{
    if (!w)
        return false;
    pthread_mutex_lock(&w->mu);
    struct watch_conn *oldest = NULL;
    for (struct watch_conn *c = w->head; c; c = c->next) {
        int pending = 0;
        if (!c->evictable || c->shut || (oldest && c->since >= oldest->since))
            continue;
        if (ioctl(c->fd, FIONREAD, &pending) == 0 && pending == 0)
            oldest = c; /* a request that has begun to arrive is never cut */
    }
    if (oldest) {
        shutdown(oldest->fd, SHUT_RDWR); /* its thread sees the end and closes it */
        oldest->shut = true;
    }
    pthread_mutex_unlock(&w->mu);
    return oldest != NULL;
}

void watch_head_begins(struct watch *w, struct watch_conn *c)
{
    watch_set(w, c, WATCH_STATE_HEAD, false);
}

void watch_busy(struct watch *w, struct watch_conn *c)
{
    watch_set(w, c, WATCH_STATE_BUSY, false);
}

void watch_idle(struct watch *w, struct watch_conn *c)
{
    watch_set(w, c, WATCH_STATE_IDLE, false);
}

void watch_remove(struct watch *w, struct watch_conn *c)
{
    if (!w || !c)
        return;
    pthread_mutex_lock(&w->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&w->mu);
    free(c);
}

void watch_stop(struct watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    for (struct watch_conn *c = w->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
