/* A rig for engine-level tests: a threadless engine on a fixture checkpoint, jobs
 * with random prompts, and the recording of every event a request produces, so
 * that runs can be compared bitwise. */
#ifndef HEARTH_TEST_ENGINE_RIG_H
#define HEARTH_TEST_ENGINE_RIG_H

#include <stdint.h>

#include "engine/engine.h"

#define MAXREQ 32
#define MAXN 4
#define MAXGEN 48
#define MAXPROMPT 400

struct out {
    int n_tok[MAXN];
    int32_t tok[MAXN][MAXGEN];
    float lp[MAXN][MAXGEN][4]; /* sampled logprob, then 3 top logprobs */
    int32_t top[MAXN][MAXGEN][3];
    enum hearth_finish_reason fin[MAXN];
    int done;
    enum hearth_finish_reason done_reason;
    int prompt_tokens, completion_tokens, cached_tokens;
};

struct job {
    int32_t prompt[MAXPROMPT];
    int n_prompt;
    struct hearth_request_params p;
    struct hearth_request *r;
    struct out alone, together;
    int arrive_step;
    int cancel_step;
};

extern int rig_cache_on;       /* prefix cache of engines made by rig_engine (default 1) */

uint32_t rig_rnd(uint32_t n);
struct hearth_engine *rig_engine(size_t kv_bytes, int max_seqs, int max_tok, int threads);
size_t rig_kv_bytes(int blocks); /* qwen3-tiny, bf16 KV */
void rig_record(struct out *o, const struct hearth_event *ev);
void rig_drain(struct job *j, struct out *o);
void rig_make_job(struct job *j, int vocab);
int rig_run_alone(struct hearth_engine *e, struct job *j);
int rig_run_together(struct hearth_engine *e, struct job *jobs, int n);
/* The same, calling before() and after() around every engine_step (either may be NULL). */
int rig_run_together_around(struct hearth_engine *e, struct job *jobs, int n, void (*before)(void),
                            void (*after)(void));
int rig_same_out(const struct out *a, const struct out *b, int n);
/* Checks that nothing runs or waits, no lease is open, and free + cached = capacity. */
void rig_check_idle(struct hearth_engine *e);

#endif
