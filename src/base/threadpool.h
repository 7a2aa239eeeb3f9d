/* Persistent pthread pool that runs indexed tasks.
 * threadpool_run hands out task indices 0..n_tasks-1 to the workers and the caller;
 * which thread runs a task never matters, because a task's output is defined by its
 * index alone.  That is what keeps results bitwise equal for any thread count.  The
 * thread index a task receives only selects per-thread scratch memory. */
#ifndef HEARTH_BASE_THREADPOOL_H
#define HEARTH_BASE_THREADPOOL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/status.h"

/* thread: 0 for the caller, 1..n_threads-1 for the workers. */
typedef void (*threadpool_fn)(void *ctx, int task, int thread);

struct threadpool_worker_arg {
    struct threadpool *tp;
    int index;                   /* 1..n_threads-1 */
};

struct threadpool {
    int n_threads;               /* workers + the calling thread */
    pthread_t *workers;          /* [n_threads - 1] */
    struct threadpool_worker_arg *args; /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t cv_start;
    pthread_cond_t cv_done;
    threadpool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int stopping;
    /* Each hot counter on its own cache line: the workers poll them. */
    _Alignas(64) atomic_uint generation;
    _Alignas(64) atomic_int next_task;
    _Alignas(64) atomic_int workers_done; /* workers finished with the current generation */
    _Alignas(64) atomic_int n_sleeping;   /* workers blocked on cv_start */
    atomic_int caller_sleeping;           /* the caller is blocked on cv_done */
};

enum hr_status threadpool_init(struct threadpool *tp, int n_threads, char *err, size_t errlen);
void threadpool_free(struct threadpool *tp);
/* Runs fn(ctx, i, thread) for every i in [0, n_tasks); returns when all are done.
 * Not reentrant: one caller (the engine thread) at a time. */
void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks);

#endif
