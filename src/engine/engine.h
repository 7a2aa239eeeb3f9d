/* The engine: owns the model, the KV pool, the scheduler's lists, and the one
 * thread that runs the steps (struct hearth_engine of the public API). */
#ifndef HEARTH_ENGINE_ENGINE_H
#define HEARTH_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/prefix_cache.h"
#include "engine/batch.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "grammar/grammar_cache.h"
#include "kernels/backend.h"
#include "kv/block_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

enum engine_schedule {
    ENGINE_SCHEDULE_LPM,  /* longest cached prefix first, unless someone waited too long */
    ENGINE_SCHEDULE_FCFS,
};

/* Logits rows one piece holds at least (a step's rows are computed and sampled a
 * piece at a time, in the forward's scratch): every decode of up to 32 sequences in
 * one lm_head pass. */
#define ENGINE_LOGIT_ROWS 32

struct group_list {
    struct group *head, *tail;
    int n_groups;
};

struct hearth_engine {
    struct hearth_engine_params p;
    char model_dir[PATH_MAX];
    struct model m;
    struct tokenizer tk;
    bool has_tk;
    struct backend be;
    struct kv_store kv;
    struct block_pool pool;
    struct qwen3 fwd;
    struct batch batch;
    float *logits;             /* [piece rows, vocab] the last piece of the step's logits rows, in the
                                  forward's scratch (valid until the next step); after a step
                                  with at most ENGINE_LOGIT_ROWS rows, all of them */
    struct sampler_scratch ss;
    struct grammar_cache gcache; /* compiled grammars of constrained requests (any thread) */
    struct prefix_cache pc;
    bool pc_on;
    uint64_t fingerprint;      /* config and weight-file headers and sizes */
    enum engine_schedule schedule;
    int max_wait_steps;

    /* Submission queue: guarded by mu, drained by the engine thread. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct group_list incoming;
    int n_incoming_reqs;
    bool stopping;
    unsigned wakeups;          /* submissions and cancellations seen by engine_wake */
    pthread_t thread;
    bool thread_started;

    /* Engine-thread state. */
    struct group_list waiting; /* FCFS; preempted groups go back to the front */
    struct group_list running; /* in admission order */
    int64_t next_arrival, next_admission;
    int64_t step_no;
    int64_t last_forward_ns;   /* duration of the last step's forward (benchmarks) */
    atomic_int reset_requested;
    /* Reload: the caller waits on cv_reload until the engine thread has done it. */
    bool reload_requested, reload_done;
    enum hr_status reload_status;
    char reload_err[HR_ERRLEN];
    pthread_cond_t cv_reload;

    /* Stats: written by the engine thread, read by anyone (relaxed). */
    atomic_int st_free, st_running, st_waiting, st_waiting_groups;
    atomic_llong st_steps, st_preemptions, st_prompt_tokens, st_gen_tokens, st_requests, st_finished;
    pthread_mutex_t stats_mu;
    struct hearth_prefix_cache_stats pc_snapshot; /* under stats_mu */

    /* Test hooks. */
    atomic_int hook_fail_forward; /* the next forward fails */
    int hook_logit_rows;          /* engine thread: logits pieces of at most this many rows (0: as fit) */
};

/* Builds the engine; with start_thread false no thread runs and the caller drives
 * engine_step itself (tests that control exactly when requests arrive). */
enum hr_status engine_create(struct hearth_engine **out, const struct hearth_engine_params *p, bool start_thread,
                             char *err, size_t errlen);

/* Wakes the engine thread (a submission or a cancellation arrived). */
void engine_wake(struct hearth_engine *e);

/* Runs one step on the calling thread (the engine thread, or a test that runs the
 * engine without its thread).  Returns false when there was nothing to do. */
bool engine_step(struct hearth_engine *e);

/* Frees a group that holds no blocks (its request reference already dropped). */
void group_free(struct group *g);

/* Group list operations (the lists are the scheduler's). */
void group_list_push_back(struct group_list *l, struct group *g);
void group_list_push_front(struct group_list *l, struct group *g);
void group_list_remove(struct group_list *l, struct group *g);

#endif
