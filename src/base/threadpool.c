/* Persistent pthread pool.  Every worker takes part in every generation (one
 * threadpool_run call) and checks out when the task counter runs dry; the caller
 * returns only when all workers have checked out, so no worker can straggle into
 * the next generation.  Workers spin briefly before sleeping, so back-to-back
 * kernel launches within a step stay cheap. */
#include "base/threadpool.h"

#include <stdlib.h>

#define THREADPOOL_SPIN 200000

static void threadpool_drain(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks)
{
    for (;;) {
        int t = atomic_fetch_add(&tp->next_task, 1);
        if (t >= n_tasks)
            break;
        fn(ctx, t);
    }
}

static void *threadpool_worker(void *arg)
{
    struct threadpool *tp = arg;
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&tp->generation) == seen && spins < THREADPOOL_SPIN)
            spins++;
        pthread_mutex_lock(&tp->mu);
        while (atomic_load(&tp->generation) == seen && !tp->stopping)
            pthread_cond_wait(&tp->cv_start, &tp->mu);
        if (tp->stopping) {
            pthread_mutex_unlock(&tp->mu);
            return NULL;
        }
        seen = atomic_load(&tp->generation);
        threadpool_fn fn = tp->fn;
        void *ctx = tp->ctx;
        int n_tasks = tp->n_tasks;
        pthread_mutex_unlock(&tp->mu);

        threadpool_drain(tp, fn, ctx, n_tasks);

        if (atomic_fetch_add(&tp->workers_done, 1) + 1 == tp->n_threads - 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->cv_done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

enum hr_status threadpool_init(struct threadpool *tp, int n_threads, char *err, size_t errlen)
{
    *tp = (struct threadpool){0};
    if (n_threads < 1 || n_threads > 1024)
        return hr_err(err, errlen, HR_ERR_INVALID, "threads must be in 1..1024, got %d", n_threads);
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_start, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    atomic_init(&tp->next_task, 0);
    atomic_init(&tp->workers_done, 0);
    atomic_init(&tp->generation, 0);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            tp->n_threads = 1;
            threadpool_free(tp);
            return hr_err(err, errlen, HR_ERR_NOMEM, "threadpool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&tp->workers[i], NULL, threadpool_worker, tp) != 0) {
                tp->n_threads = i + 1;
                threadpool_free(tp);
                return hr_err(err, errlen, HR_ERR_NOMEM, "threadpool: cannot start thread %d", i);
            }
        }
    }
    return HR_OK;
}

void threadpool_free(struct threadpool *tp)
{
    if (!tp || !tp->n_threads)
        return;
    pthread_mutex_lock(&tp->mu);
    tp->stopping = 1;
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_threads - 1; i++)
        pthread_join(tp->workers[i], NULL);
    free(tp->workers);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv_start);
    pthread_cond_destroy(&tp->cv_done);
    tp->n_threads = 0;
    tp->workers = NULL;
}

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (tp->n_threads == 1) {
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    atomic_store(&tp->next_task, 0);
    atomic_store(&tp->workers_done, 0);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);

    threadpool_drain(tp, fn, ctx, n_tasks);

    int spins = 0;
    while (atomic_load(&tp->workers_done) < tp->n_threads - 1 && spins < THREADPOOL_SPIN)
        spins++;
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(&tp->workers_done) < tp->n_threads - 1)
        pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
