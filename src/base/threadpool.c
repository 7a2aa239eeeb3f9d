/* Persistent pthread pool.  Every worker takes part in every generation (one
 * threadpool_run call) and checks out when the task counter runs dry; the caller
 * returns only when all workers have checked out, so no worker can straggle into
 * the next generation.
 *
 * Launches within a forward step come microseconds apart (hundreds per token), so
 * waiting threads spin on the counters with a pause hint for a while before they
 * block on a condition variable; a sleeper is woken only when someone is asleep.
 * The hand-over between spinning and sleeping is a Dekker-style pair of sequentially
 * consistent atomics (announce, then re-check under the mutex), so no wake-up is lost. */
#define _GNU_SOURCE
#include "base/threadpool.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

/* A waiting thread spins with a pause hint for THREADPOOL_PAUSE_NS, then yields its
 * core between polls (on a busy machine the thread it waits for may need that core)
 * until THREADPOOL_SPIN_NS, then blocks. */
#define THREADPOOL_PAUSE_NS 50000ll
#define THREADPOOL_SPIN_NS 2000000ll

static inline void threadpool_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long long threadpool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Spins until *word != seen or the spin budget is spent; returns the last value. */
static unsigned threadpool_spin_while_eq(atomic_uint *word, unsigned seen)
{
    long long t0 = 0;
    for (unsigned i = 1;; i++) {
        unsigned g = atomic_load_explicit(word, memory_order_acquire);
        if (g != seen)
            return g;
        threadpool_pause();
        if ((i & 63) == 0) {
            long long t = threadpool_now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > THREADPOOL_SPIN_NS)
                return g;
            else if (t - t0 > THREADPOOL_PAUSE_NS)
                sched_yield();
        }
    }
}

static void threadpool_drain(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks, int thread)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&tp->next_task, 1, memory_order_relaxed);
        if (t >= n_tasks)
            break;
        fn(ctx, t, thread);
    }
}

static void *threadpool_worker(void *arg)
{
    struct threadpool_worker_arg *wa = arg;
    struct threadpool *tp = wa->tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g = threadpool_spin_while_eq(&tp->generation, seen);
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stopping))
                pthread_cond_wait(&tp->cv_start, &tp->mu);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stopping))
            return NULL;
        seen = atomic_load(&tp->generation);
        /* fn, ctx and n_tasks were written before the generation was bumped. */
        threadpool_drain(tp, tp->fn, tp->ctx, tp->n_tasks, wa->index);
        if (atomic_fetch_add(&tp->workers_done, 1) + 1 == tp->n_threads - 1 && atomic_load(&tp->caller_sleeping)) {
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
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->next_task, 0);
    atomic_init(&tp->workers_done, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->caller_sleeping, 0);
    atomic_init(&tp->stopping, 0);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        tp->args = calloc((size_t)n_threads - 1, sizeof *tp->args);
        if (!tp->workers || !tp->args) {
            tp->n_threads = 1;
            threadpool_free(tp);
            return hr_err(err, errlen, HR_ERR_NOMEM, "threadpool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            tp->args[i] = (struct threadpool_worker_arg){.tp = tp, .index = i + 1};
            if (pthread_create(&tp->workers[i], NULL, threadpool_worker, &tp->args[i]) != 0) {
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
    atomic_store(&tp->stopping, 1);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_threads - 1; i++)
        pthread_join(tp->workers[i], NULL);
    free(tp->workers);
    free(tp->args);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv_start);
    pthread_cond_destroy(&tp->cv_done);
    tp->n_threads = 0;
    tp->workers = NULL;
    tp->args = NULL;
}

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    /* One task, or one thread: nothing to share; the workers keep waiting. */
    if (tp->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    atomic_store(&tp->next_task, 0);
    atomic_store(&tp->workers_done, 0);
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv_start);
        pthread_mutex_unlock(&tp->mu);
    }

    threadpool_drain(tp, fn, ctx, n_tasks, 0);

    int want = tp->n_threads - 1;
    long long t0 = 0;
    for (unsigned i = 1; atomic_load_explicit(&tp->workers_done, memory_order_acquire) < want; i++) {
        threadpool_pause();
        if ((i & 63) == 0) {
            long long t = threadpool_now_ns();
            if (!t0) {
                t0 = t;
            } else if (t - t0 > THREADPOOL_PAUSE_NS && t - t0 <= THREADPOOL_SPIN_NS) {
                sched_yield();
            } else if (t - t0 > THREADPOOL_SPIN_NS) {
                pthread_mutex_lock(&tp->mu);
                atomic_store(&tp->caller_sleeping, 1);
                while (atomic_load(&tp->workers_done) < want)
                    pthread_cond_wait(&tp->cv_done, &tp->mu);
                atomic_store(&tp->caller_sleeping, 0);
                pthread_mutex_unlock(&tp->mu);
                break;
            }
        }
    }
}
