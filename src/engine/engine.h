/* The engine: owns the model, the KV pool, the scheduler's lists, and the one
 * thread that runs the steps (struct hearth_engine of the public API). */
#ifndef HEARTH_ENGINE_ENGINE_H
#define HEARTH_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/prefix_cache.h"
#include "engine/dev_sample.h"
#include "engine/kv_restore.h"
#include "engine/request.h"
#include "engine/sample_rows.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_prof.h"
#include "engine/sequence.h"
#include "grammar/grammar_cache.h"
#include "kernels/backend.h"
#include "kv/batch.h"
#include "kv/block_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Logits rows one piece holds at least (a step's rows are computed and sampled a
 * piece at a time, in the forward's scratch): every decode of up to 32 sequences in
 * one lm_head pass. */
#define ENGINE_LOGIT_ROWS 32
/* Where the backend samples on the device: a step's rows of up to this many sequences
 * (max_num_seqs at most) in one piece.  Each piece's lm_head pass reads the whole
 * lm_head, and the forward's own room after a decode step held ~80 of the 0.6B's rows:
 * three passes (3 x 311 MB) and five sampling launches for 185 rows. */
#define ENGINE_DEVICE_LOGIT_ROWS 256

/* What the last step ran (benchmarks): its rows and the first row's geometry. */
struct engine_step_info {
    int n_rows, n_tok;
    int query_len, context_len, kv_len; /* of row 0 */
    int64_t forward_ns;        /* the forward's duration */
    bool decode_only;          /* every row one generated token (no prompt token in the step) */
};

struct hearth_engine {
    enum model_load_format load_format; /* parsed once: reload loads the same way */
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
    struct sampler_scratch ss;
    struct sample_rows srows;  /* a device's steps: rows sampled on host threads at once */
    bool srows_on;
    struct dev_sample ds;      /* a device with a sample op: the step's rows sampled there */
    bool ds_on;
    bool ds_all;               /* ds_on: requests with a temperature too, not only greedy ones
                                  (the default; device_sampling_greedy_only: greedy ones only) */
    struct grammar_cache gcache; /* compiled grammars of constrained requests (any thread) */
    struct prefix_cache pc;
    bool pc_on;
    struct kv_restore restore; /* the prefix cache's tiers below the pool (--kv-cache-host-mib, --kv-cache-dir) */
    bool tiers_on;
    struct sched sched;        /* the waiting and running lists, over pool and pc */
    uint64_t fingerprint;      /* config and weight-file headers and sizes */
    int max_model_len;         /* tokens of one sequence at most: the config's context, lowered to the pool */

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
    int64_t next_arrival;
    struct engine_step_info last_step;
    struct step_prof prof;     /* HEARTH_ENGINE_PROFILE=1 */
    void (*logits_hook)(void *ctx, int row, const float *logits, int vocab);
    void *logits_hook_ctx;
    atomic_int reset_requested;
    /* Reload: the caller waits on cv_reload until the engine thread has done it. */
    bool reload_requested, reload_done;
    enum hr_status reload_status;
    char reload_err[HR_ERRLEN];
    pthread_cond_t cv_reload;

    /* Stats: written by the engine thread, read by anyone (relaxed). */
    atomic_int st_free, st_running, st_waiting, st_waiting_groups;
    atomic_llong st_steps, st_preemptions, st_prompt_tokens, st_gen_tokens, st_requests, st_finished;
    atomic_llong st_stalled;       /* requests cancelled for events their consumer left untaken */
    pthread_mutex_t stats_mu;
    struct hearth_prefix_cache_stats pc_snapshot; /* under stats_mu */
    struct hearth_disk_cache_stats disk_snapshot; /* under stats_mu */
    struct hearth_host_cache_stats host_snapshot; /* under stats_mu */

    /* Test hooks. */
    int hook_logit_rows;          /* engine thread: logits pieces of at most this many rows (0: as fit) */
};

/* Samples a step's rows on n_threads host threads (n < 2: on the engine thread), as a
 * device backend does by default; tests call it before the first step. */
enum hr_status engine_sample_threads(struct hearth_engine *e, int n_threads, char *err, size_t errlen);

/* Samples the rows of requests that allow it on the backend (on: when it has the sample
 * and to_host_rows ops), as a device backend does unless no_device_sampling; tests call
 * it before the first step. */
enum hr_status engine_dev_sampling(struct hearth_engine *e, bool on, char *err, size_t errlen);
/* The logits rows a piece holds at least on backend be (ENGINE_LOGIT_ROWS; where it
 * samples on the device, every sequence's row up to ENGINE_DEVICE_LOGIT_ROWS). */
int engine_logit_rows(const struct backend *be, int max_num_seqs);

/* Builds the engine; with start_thread false no thread runs and the caller drives
 * engine_step itself (tests that control exactly when requests arrive). */
enum hr_status engine_create(struct hearth_engine **out, const struct hearth_engine_params *p, bool start_thread,
                             char *err, size_t errlen);

/* The benchmarks' view of the engine (module interface; engine thread or no thread). */
const struct engine_step_info *engine_last_step(const struct hearth_engine *e);
void engine_set_logits_hook(struct hearth_engine *e, void (*fn)(void *ctx, int row, const float *logits, int vocab),
                            void *ctx);
/* fn is called on the engine thread with every logits row that a sequence samples
 * from, before it samples (benchmarks digest them): row is the batch row, logits
 * [vocab]. */
/* The highest refcount of any KV block right now. */
int engine_max_block_refcount(const struct hearth_engine *e);
/* Evicts every cached block nobody uses from the pool, through the tiers below it (a
 * benchmark's way to put a prefix in the host tier); returns how many. */
int engine_demote_cached(struct hearth_engine *e);
/* Bytes of the KV pool; of one position's K and V over every layer. */
size_t engine_kv_bytes(const struct hearth_engine *e);
size_t engine_kv_bytes_per_token(const struct hearth_engine *e);
const struct model *engine_model(const struct hearth_engine *e);
const struct backend *engine_backend(const struct hearth_engine *e);

/* Test hook: wraps the engine's backend in the fault-injection backend (once) and arms
 * it: op number op of the step-th step from now fails (see backend_fault_arm).  On the
 * engine thread, or with no thread. */
enum hr_status engine_inject_fault(struct hearth_engine *e, int64_t step, int op, char *err, size_t errlen);

/* Wakes the engine thread (a submission or a cancellation arrived). */
void engine_wake(struct hearth_engine *e);
/* One more request cancelled by its queued-bytes bound (any thread). */
void engine_count_stalled(struct hearth_engine *e);

/* Runs one step on the calling thread (the engine thread, or a test that runs the
 * engine without its thread).  Returns false when there was nothing to do. */
bool engine_step(struct hearth_engine *e);

#endif
