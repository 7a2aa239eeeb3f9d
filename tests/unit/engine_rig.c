/* The engine test rig (see engine_rig.h). */
#include "engine_rig.h"

#include <string.h>

#include "test.h"

static uint64_t rig_rs = 12345;
uint32_t rig_rnd(uint32_t n)
{
    rig_rs = rig_rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rig_rs >> 33) % n);
}

int rig_cache_on = 1;

struct hearth_engine *rig_engine(size_t kv_bytes, int max_seqs, int max_tok, int threads)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = kv_bytes;
    p.max_num_seqs = max_seqs;
    p.max_batched_tokens = max_tok;
    p.n_threads = threads;
    p.block_size = 16;
    p.prefix_cache = rig_cache_on;
    struct hearth_engine *e = NULL;
    enum hr_status st = engine_create(&e, &p, false, err, sizeof err);
    if (st != HR_OK)
        fprintf(stderr, "  engine_create: %s\n", err);
    return e;
}

size_t rig_kv_bytes(int blocks)
{
    /* qwen3-tiny: 2 layers, 2 kv heads, head_dim 32, bf16: 512 bytes per token. */
    return (size_t)blocks * 16 * 2 * 2 * 2 * 32 * 2;
}

void rig_record(struct out *o, const struct hearth_event *evp)
{
    const struct hearth_event ev = *evp;
    if (ev.type == HEARTH_EVENT_TOKEN) {
        int k = o->n_tok[ev.index]++;
        if (k < MAXGEN) {
            o->tok[ev.index][k] = ev.token;
            o->lp[ev.index][k][0] = ev.logprob;
            for (int t = 0; t < 3 && t < ev.n_top; t++) {
                o->lp[ev.index][k][1 + t] = ev.top[t].logprob;
                o->top[ev.index][k][t] = ev.top[t].token;
            }
        }
    } else if (ev.type == HEARTH_EVENT_FINISH) {
        o->fin[ev.index] = ev.finish_reason;
    } else {
        o->done = 1;
        o->done_reason = ev.finish_reason;
        o->prompt_tokens = ev.prompt_tokens;
        o->completion_tokens = ev.completion_tokens;
        o->cached_tokens = ev.cached_tokens;
    }
}

/* Drains every queued event of j into o. */
void rig_drain(struct job *j, struct out *o)
{
    struct hearth_event ev;
    while (!o->done && hearth_request_next_event(j->r, &ev, 0) == HR_OK)
        rig_record(o, &ev);
}

void rig_make_job(struct job *j, int vocab)
{
    memset(j, 0, sizeof *j);
    j->n_prompt = 1 + (int)rig_rnd(120);
    for (int i = 0; i < j->n_prompt; i++)
        j->prompt[i] = (int32_t)rig_rnd((uint32_t)vocab);
    hearth_request_params_default(&j->p);
    j->p.prompt_ids = j->prompt;
    j->p.n_prompt_ids = j->n_prompt;
    j->p.max_tokens = 1 + (int)rig_rnd(MAXGEN - 1);
    j->p.has_temperature = true;
    j->p.temperature = rig_rnd(3) == 0 ? 0.0f : 0.9f;
    j->p.has_seed = true;
    j->p.seed = rig_rnd(1000000);
    j->p.top_logprobs = 3;
    j->p.ignore_eos = true;
    j->cancel_step = -1;
}

int rig_run_alone(struct hearth_engine *e, struct job *j)
{
    char err[HR_ERRLEN];
    memset(&j->alone, 0, sizeof j->alone);
    if (hearth_submit(e, &j->p, &j->r, err, sizeof err) != HR_OK) {
        fprintf(stderr, "  submit: %s\n", err);
        return 0;
    }
    for (int guard = 0; !j->alone.done && guard < 100000; guard++) {
        engine_step(e);
        rig_drain(j, &j->alone);
    }
    hearth_request_free(j->r);
    j->r = NULL;
    return j->alone.done;
}

/* Submits each job at its arrival step, steps until all are done. */
int rig_run_together(struct hearth_engine *e, struct job *jobs, int n)
{
    return rig_run_together_around(e, jobs, n, NULL, NULL);
}

int rig_run_together_around(struct hearth_engine *e, struct job *jobs, int n, void (*before)(void),
                            void (*after)(void))
{
    char err[HR_ERRLEN];
    int remaining = n;
    for (int i = 0; i < n; i++)
        memset(&jobs[i].together, 0, sizeof jobs[i].together);
    for (int step = 0; remaining > 0 && step < 200000; step++) {
        for (int i = 0; i < n; i++) {
            if (jobs[i].arrive_step == step) {
                if (hearth_submit(e, &jobs[i].p, &jobs[i].r, err, sizeof err) != HR_OK) {
                    fprintf(stderr, "  submit: %s\n", err);
                    return 0;
                }
            }
            if (jobs[i].r && jobs[i].cancel_step == step)
                hearth_request_cancel(jobs[i].r);
        }
        if (before)
            before();
        engine_step(e);
        if (after)
            after();
        for (int i = 0; i < n; i++) {
            if (!jobs[i].r || jobs[i].together.done)
                continue;
            rig_drain(&jobs[i], &jobs[i].together);
            if (jobs[i].together.done) {
                hearth_request_free(jobs[i].r);
                jobs[i].r = NULL;
                remaining--;
            }
        }
    }
    return remaining == 0;
}

int rig_same_out(const struct out *a, const struct out *b, int n)
{
    for (int i = 0; i < n; i++) {
        if (a->n_tok[i] != b->n_tok[i] || a->fin[i] != b->fin[i])
            return 0;
        int k = a->n_tok[i] < MAXGEN ? a->n_tok[i] : MAXGEN;
        if (memcmp(a->tok[i], b->tok[i], (size_t)k * sizeof(int32_t)) ||
            memcmp(a->lp[i], b->lp[i], (size_t)k * sizeof a->lp[i][0]) ||
            memcmp(a->top[i], b->top[i], (size_t)k * sizeof a->top[i][0]))
            return 0;
    }
    return 1;
}

void rig_check_idle(struct hearth_engine *e)
{
    engine_step(e); /* publish stats */
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    CHECK_MSG(st.blocks_free + st.prefix_cache.blocks_held == st.blocks_total, "free %d + cached %lld of %d",
              st.blocks_free, (long long)st.prefix_cache.blocks_held, st.blocks_total);
    CHECK(st.prefix_cache.open_leases == 0);
    CHECK(st.running == 0 && st.waiting == 0);
    CHECK(!e->sched.running.head && !e->sched.waiting.head && !e->incoming.head);
}

