/* The engine: continuous batching, preemption, n > 1 groups, cancellation and
 * validation.  Outputs (tokens and logprobs) are compared bitwise with the same
 * request run alone. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_rig.h"
#include "test.h"

static void concurrency(int n_jobs, int pool_blocks, int cancel, int64_t *preemptions)
{
    struct hearth_engine *ref = rig_engine(rig_kv_bytes(256), 32, 512, 1);
    struct hearth_engine *e = rig_engine(rig_kv_bytes(pool_blocks), 32, 64 + (int)rig_rnd(200), 2);
    CHECK(ref && e);
    if (!ref || !e) {
        hearth_engine_free(ref);
        hearth_engine_free(e);
        return;
    }
    static struct job jobs[MAXREQ];
    for (int i = 0; i < n_jobs; i++) {
        rig_make_job(&jobs[i], 512);
        jobs[i].arrive_step = (int)rig_rnd(40);
        CHECK(rig_run_alone(ref, &jobs[i]));
        if (cancel && rig_rnd(3) == 0)
            jobs[i].cancel_step = jobs[i].arrive_step + (int)rig_rnd(12);
    }
    CHECK(rig_run_together(e, jobs, n_jobs));
    for (int i = 0; i < n_jobs; i++) {
        struct out *t = &jobs[i].together;
        if (t->done_reason == HEARTH_FINISH_CANCELLED) {
            /* What was produced before the cancel is a prefix of the alone run. */
            int k = t->n_tok[0];
            CHECK(k <= jobs[i].alone.n_tok[0]);
            CHECK(!memcmp(t->tok[0], jobs[i].alone.tok[0], (size_t)(k < MAXGEN ? k : MAXGEN) * sizeof(int32_t)));
            continue;
        }
        CHECK_MSG(rig_same_out(&jobs[i].alone, t, 1), "request %d (prompt %d, max_tokens %d) differs", i,
                  jobs[i].n_prompt, jobs[i].p.max_tokens);
        CHECK(t->completion_tokens == jobs[i].p.max_tokens && t->prompt_tokens == jobs[i].n_prompt);
    }
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    if (preemptions)
        *preemptions = st.preemptions;
    rig_check_idle(e);
    rig_check_idle(ref);
    hearth_engine_free(ref);
    hearth_engine_free(e);
}

static void test_concurrent_equals_alone(void)
{
    for (int n = 1; n <= 32; n *= 2)
        concurrency(n, 256, 0, NULL);
}

static void test_preemption_exact(void)
{
    int64_t pre = 0;
    concurrency(24, 40, 0, &pre);
    CHECK_MSG(pre > 5, "only %lld preemptions", (long long)pre);
}

static void test_cancel_no_leak(void)
{
    concurrency(24, 48, 1, NULL);
}

static void test_n_siblings(void)
{
    rig_cache_on = 0; /* sharing by the group alone: the cache would hold references too */
    struct hearth_engine *e = rig_engine(rig_kv_bytes(128), 16, 256, 1);
    rig_cache_on = 1;
    CHECK(e);
    if (!e)
        return;
    char err[HR_ERRLEN];
    struct job j;
    rig_make_job(&j, 512);
    j.n_prompt = 40; /* two full blocks and a shared partial tail */
    j.p.n_prompt_ids = 40;
    j.p.n = 3;
    j.p.max_tokens = 20;
    j.p.temperature = 1.0f;
    CHECK_OK(hearth_submit(e, &j.p, &j.r, err, sizeof err), err);
    engine_step(e); /* the prompt in one chunk; siblings fork and sample */
    struct group *g = e->sched.running.head;
    CHECK(g && g->forked);
    if (g) {
        for (int b = 0; b < 3; b++) {
            CHECK(g->seqs[1].table[b] == g->seqs[0].table[b] && g->seqs[2].table[b] == g->seqs[0].table[b]);
            CHECK(block_pool_refcount(&e->pool, g->seqs[0].table[b]) == 3);
        }
    }
    engine_step(e); /* first own writes: the shared tail is copied by all but the last writer */
    if (g && e->sched.running.head == g) {
        for (int b = 0; b < 2; b++)
            CHECK(block_pool_refcount(&e->pool, g->seqs[0].table[b]) == 3);
        CHECK(g->seqs[0].table[2] != g->seqs[1].table[2] && g->seqs[1].table[2] != g->seqs[2].table[2] &&
              g->seqs[0].table[2] != g->seqs[2].table[2]);
        for (int s = 0; s < 3; s++)
            CHECK(block_pool_refcount(&e->pool, g->seqs[s].table[2]) == 1);
    }
    memset(&j.together, 0, sizeof j.together);
    for (int guard = 0; !j.together.done && guard < 10000; guard++) {
        rig_drain(&j, &j.together);
        engine_step(e);
    }
    hearth_request_free(j.r);
    /* Each sibling equals a single-sequence run with the same seed and index. */
    for (int i = 0; i < 3; i++) {
        struct job one = j;
        one.p.n = 1;
        one.p.sample_index_base = i;
        CHECK(rig_run_alone(e, &one));
        CHECK(one.alone.n_tok[0] == j.together.n_tok[i]);
        CHECK(!memcmp(one.alone.tok[0], j.together.tok[i], 20 * sizeof(int32_t)));
        CHECK(!memcmp(one.alone.lp[0], j.together.lp[i], 20 * sizeof one.alone.lp[0][0]));
    }
    /* The siblings did not all draw the same tokens. */
    CHECK(memcmp(j.together.tok[0], j.together.tok[1], 20 * sizeof(int32_t)) ||
          memcmp(j.together.tok[0], j.together.tok[2], 20 * sizeof(int32_t)));
    rig_check_idle(e);
    hearth_engine_free(e);
}

static void test_invalid_params(void)
{
    struct hearth_engine *e = rig_engine(rig_kv_bytes(64), 8, 128, 1);
    CHECK(e);
    if (!e)
        return;
    char err[HR_ERRLEN];
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct hearth_request_params base;
    hearth_request_params_default(&base);
    base.prompt_ids = prompt;
    base.n_prompt_ids = 8;
    struct {
        const char *field;
        void (*set)(struct hearth_request_params *);
    } cases[] = {
        {"temperature", NULL}, {"top_p", NULL}, {"top_k", NULL}, {"n", NULL},
        {"max_tokens", NULL}, {"prompt", NULL}, {"context", NULL}, {"pool", NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct hearth_request_params p = base;
        int32_t bad[1] = {512};
        static int32_t longp[5000];
        switch (c) {
        case 0: p.has_temperature = true; p.temperature = -0.5f; break;
        case 1: p.has_top_p = true; p.top_p = 1.5f; break;
        case 2: p.has_top_k = true; p.top_k = -1; break;
        case 3: p.n = 0; break;
        case 4: p.max_tokens = -2; break;                             /* -1 is HEARTH_MAX_TOKENS_AUTO */
        case 5: p.prompt_ids = bad; p.n_prompt_ids = 1; break;
        case 6: p.prompt_ids = longp; p.n_prompt_ids = 5000; break;   /* context window 4096 */
        case 7: p.n = 4; p.max_tokens = 1000; break;                  /* 4 x 63 blocks: more than 64 */
        }
        struct hearth_request *r = NULL;
        err[0] = 0;
        enum hr_status st = hearth_submit(e, &p, &r, err, sizeof err);
        CHECK_MSG(st == HR_ERR_INVALID && r == NULL, "case %s accepted", cases[c].field);
        CHECK_MSG(err[0] != 0, "case %s: no message", cases[c].field);
    }
    CHECK(!e->incoming.head);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* The threaded engine: requests from several threads, blocking event reads. */
static void test_threaded(void)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = rig_kv_bytes(128);
    struct hearth_engine *e = NULL;
    CHECK_OK(hearth_engine_init(&e, &p, err, sizeof err), err);
    struct hearth_engine *ref = rig_engine(rig_kv_bytes(128), 8, 128, 1);
    if (!e || !ref) {
        hearth_engine_free(e);
        hearth_engine_free(ref);
        return;
    }
    static struct job jobs[8];
    for (int i = 0; i < 8; i++) {
        rig_make_job(&jobs[i], 512);
        CHECK(rig_run_alone(ref, &jobs[i]));
        CHECK_OK(hearth_submit(e, &jobs[i].p, &jobs[i].r, err, sizeof err), err);
    }
    for (int i = 0; i < 8; i++) {
        struct hearth_event ev;
        memset(&jobs[i].together, 0, sizeof jobs[i].together);
        while (!jobs[i].together.done) {
            if (hearth_request_next_event(jobs[i].r, &ev, 20000) != HR_OK) {
                CHECK_MSG(0, "request %d: no event within 20 s", i);
                break;
            }
            rig_record(&jobs[i].together, &ev);
        }
        CHECK_MSG(rig_same_out(&jobs[i].alone, &jobs[i].together, 1), "threaded request %d differs", i);
        hearth_request_free(jobs[i].r);
    }
    hearth_engine_free(e);
    hearth_engine_free(ref);
}

/* Prompt logprobs: every prompt token after the first is scored once, in order,
 * before the first generated token, as log_softmax of the logits at the position
 * before it (computed here independently from a plain forward over the prompt). */
static void test_prompt_logprobs(void)
{
    struct hearth_engine *e = rig_engine(rig_kv_bytes(64), 8, 64, 1); /* 64-token steps: several chunks */
    CHECK(e);
    if (!e)
        return;
    char err[HR_ERRLEN];
    struct job j;
    rig_make_job(&j, 512);
    j.n_prompt = j.p.n_prompt_ids = 150;
    j.p.prompt_logprobs = true;
    j.p.top_logprobs = 2;
    j.p.max_tokens = 3;
    CHECK_OK(hearth_submit(e, &j.p, &j.r, err, sizeof err), err);
    struct hearth_event ev0;
    /* next_event's timeouts: 0 only looks, a positive one waits that long (no step yet:
     * nothing either way); after DONE is taken nothing blocks (below) */
    CHECK(hearth_request_next_event(j.r, &ev0, 0) == HR_ERR_FULL);
    CHECK(hearth_request_next_event(j.r, &ev0, 1) == HR_ERR_FULL);
    static float lp[150];
    static int32_t top[150][2];
    int next = 1, tokens_seen = 0, order_ok = 1, done = 0;
    for (int guard = 0; !done && guard < 1000; guard++) {
        engine_step(e);
        struct hearth_event ev;
        while (hearth_request_next_event(j.r, &ev, 0) == HR_OK) {
            if (ev.type == HEARTH_EVENT_PROMPT_LOGPROB) {
                order_ok &= ev.index == next && !tokens_seen && ev.token == j.prompt[ev.index] && ev.n_top == 2;
                if (ev.index > 0 && ev.index < 150) {
                    lp[ev.index] = ev.logprob;
                    top[ev.index][0] = ev.top[0].token;
                    top[ev.index][1] = ev.top[1].token;
                }
                next++;
            } else if (ev.type == HEARTH_EVENT_TOKEN) {
                tokens_seen++;
            } else if (ev.type == HEARTH_EVENT_DONE) {
                done = 1;
                CHECK(ev.cached_tokens == 0);
            }
        }
    }
    CHECK(hearth_request_next_event(j.r, &ev0, 0) == HR_ERR_NOT_FOUND);
    CHECK(hearth_request_next_event(j.r, &ev0, -1) == HR_ERR_NOT_FOUND);
    hearth_request_free(j.r);
    CHECK(done && order_ok && next == 150 && tokens_seen == 3);

    /* The reference: one forward over the whole prompt, logits of every position. */
    struct model m;
    struct backend be;
    struct kv_store kv;
    struct qwen3 q;
    struct batch b;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    CHECK_OK(model_load(&m, dir, err, sizeof err), err);
    CHECK_OK(backend_cpu_init(&be, &(struct backend_opts){.n_threads = 1}, err, sizeof err), err);
    CHECK_OK(model_kv_init(&kv, &be, &m.cfg, KV_DTYPE_BF16, 16, rig_kv_bytes(16), err, sizeof err), err);
    CHECK_OK(qwen3_init(&q, &m, &be, 150, 0, err, sizeof err), err);
    CHECK_OK(batch_init(&b, 16, 1, 150, err, sizeof err), err);
    int32_t table[16];
    for (int i = 0; i < 16; i++)
        table[i] = i;
    float *logits = be.ops->alloc(&be, (size_t)150 * 512 * sizeof(float), err, sizeof err);
    CHECK_OK(batch_add_row(&b, 0, j.prompt, 150, 0, table, 16, BATCH_LOGITS_ALL, err, sizeof err), err);
    CHECK_OK(batch_build(&b, kv.n_blocks, err, sizeof err), err);
    CHECK_OK(qwen3_forward(&q, &b, &kv, logits, err, sizeof err), err);
    double worst = 0;
    int top_ok = 1;
    for (int pos = 1; pos < 150; pos++) {
        const float *x = logits + (size_t)(pos - 1) * 512;
        double mx = -INFINITY, sum = 0;
        int best = 0, second = -1;
        for (int v = 0; v < 512; v++) {
            mx = x[v] > mx ? x[v] : mx;
            if (x[v] > x[best])
                best = v;
        }
        for (int v = 0; v < 512; v++) {
            sum += exp((double)x[v] - mx);
            if (v != best && (second < 0 || x[v] > x[second]))
                second = v;
        }
        double want = (double)x[j.prompt[pos]] - mx - log(sum);
        double d = fabs(want - (double)lp[pos]);
        worst = d > worst ? d : worst;
        top_ok &= top[pos][0] == best && top[pos][1] == second;
    }
    CHECK_MSG(worst <= 1e-5, "prompt logprob off by %g", worst);
    CHECK(top_ok);
    be.ops->mem_free(&be, logits);
    batch_free(&b);
    qwen3_free(&q);
    model_kv_free(&kv, &be);
    backend_free(&be);
    model_free(&m);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* A device error in any op of a step (the fault-injection backend, begin_step and the
 * logits' copy to the host included): the requests of that step end with an error,
 * every other request finishes with the bits of its run alone, no block or lease
 * leaks, and the engine goes on serving. */
static void test_fault_any_op(void)
{
    enum { NJ = 6 };
    struct hearth_engine *ref = rig_engine(rig_kv_bytes(256), 32, 512, 1);
    CHECK(ref);
    if (!ref)
        return;
    static struct job jobs[NJ];
    for (int i = 0; i < NJ; i++) {
        rig_make_job(&jobs[i], 512);
        jobs[i].arrive_step = 3 * i;
        CHECK(rig_run_alone(ref, &jobs[i]));
    }
    jobs[1].p.n = 2; /* a group of two samples: both end together */
    CHECK(rig_run_alone(ref, &jobs[1]));
    char err[HR_ERRLEN];
    const int steps[] = {0, 5, 11};
    int runs = 0;
    for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++) {
        /* how many ops step k runs: armed past the end, so nothing fails */
        struct hearth_engine *e = rig_engine(rig_kv_bytes(64), 8, 64, 1);
        CHECK(e && engine_inject_fault(e, steps[si], 1 << 30, err, sizeof err) == HR_OK);
        if (!e)
            break;
        CHECK(rig_run_together(e, jobs, NJ));
        for (int i = 0; i < NJ; i++)
            CHECK(rig_same_out(&jobs[i].alone, &jobs[i].together, jobs[i].p.n));
        int n_ops = backend_fault_ops_seen(engine_backend(e));
        CHECK_MSG(n_ops > 10, "step %d ran %d ops", steps[si], n_ops);
        hearth_engine_free(e);
        for (int op = -1; op < n_ops; op++) {
            e = rig_engine(rig_kv_bytes(64), 8, 64, 1);
            CHECK(e && engine_inject_fault(e, steps[si], op, err, sizeof err) == HR_OK);
            if (!e)
                break;
            CHECK(rig_run_together(e, jobs, NJ));
            int errors = 0, bad = 0;
            for (int i = 0; i < NJ; i++) {
                if (jobs[i].together.done_reason == HEARTH_FINISH_ERROR)
                    errors++;
                else
                    bad += !rig_same_out(&jobs[i].alone, &jobs[i].together, jobs[i].p.n);
            }
            CHECK_MSG(errors >= 1 && bad == 0, "step %d op %d: %d failed, %d differ", steps[si], op, errors, bad);
            rig_check_idle(e);
            /* still serving: a request after the failure is exact */
            struct job again = jobs[0];
            CHECK(rig_run_alone(e, &again) && rig_same_out(&jobs[0].alone, &again.alone, 1));
            rig_check_idle(e);
            hearth_engine_free(e);
            runs++;
        }
    }
    CHECK(runs > 30);
    hearth_engine_free(ref);
}

/* A pool smaller than the config's context (8 blocks: 128 tokens of 4096):
 * max_model_len comes down to it; without max_tokens a request grows to
 * max_model_len, and two such requests take turns through preemption with the
 * bits of each alone; n samples share the pool; too long a prompt, or a
 * max_model_len above the pool or the config, is refused. */
static void test_max_model_len(void)
{
    struct hearth_engine *e = rig_engine(rig_kv_bytes(8), 4, 64, 1);
    CHECK(e);
    if (!e)
        return;
    struct hearth_model_info mi;
    hearth_engine_model_info(e, &mi);
    CHECK_MSG(mi.max_model_len == 128 && mi.kv_pool_tokens == 128 && mi.max_context == 4096,
              "max_model_len %d, pool %lld, context %d", mi.max_model_len, (long long)mi.kv_pool_tokens,
              mi.max_context);

    static struct job jobs[2];
    for (int i = 0; i < 2; i++) {
        rig_make_job(&jobs[i], 512);
        jobs[i].n_prompt = 8 + i;
        jobs[i].p.n_prompt_ids = jobs[i].n_prompt;
        jobs[i].p.max_tokens = HEARTH_MAX_TOKENS_AUTO;
        CHECK(rig_run_alone(e, &jobs[i]));
        CHECK_MSG(jobs[i].alone.completion_tokens == 128 - jobs[i].n_prompt && jobs[i].alone.fin[0] ==
                  HEARTH_FINISH_LENGTH, "job %d: %d tokens", i, jobs[i].alone.completion_tokens);
        jobs[i].arrive_step = i;
    }
    int64_t pre0 = atomic_load(&e->st_preemptions);
    CHECK(rig_run_together(e, jobs, 2));
    CHECK_MSG(atomic_load(&e->st_preemptions) > pre0, "two 128-token requests in a 128-token pool: no preemption");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(rig_same_out(&jobs[i].alone, &jobs[i].together, 1), "request %d differs when preempted", i);

    /* n = 3 of an 8-token prompt: 8 blocks, none shared, 2 each: 24 tokens each */
    struct job nj;
    rig_make_job(&nj, 512);
    nj.n_prompt = 8;
    nj.p.n_prompt_ids = 8;
    nj.p.n = 3;
    nj.p.max_tokens = HEARTH_MAX_TOKENS_AUTO;
    CHECK(rig_run_alone(e, &nj));
    CHECK_MSG(nj.alone.completion_tokens == 72, "n = 3: %d tokens", nj.alone.completion_tokens);

    char err[HR_ERRLEN];
    struct hearth_request *r = NULL;
    struct hearth_request_params p = jobs[0].p;
    int32_t longp[128] = {0};
    p.prompt_ids = longp;
    p.n_prompt_ids = 128;
    CHECK(hearth_submit(e, &p, &r, err, sizeof err) == HR_ERR_INVALID && strstr(err, "max_model_len 128"));
    p.n_prompt_ids = 127; /* one token left to generate */
    struct job last = jobs[0];
    last.p = p;
    CHECK(rig_run_alone(e, &last) && last.alone.completion_tokens == 1);
    rig_check_idle(e);
    hearth_engine_free(e);

    char dir[512];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params ep;
    hearth_engine_params_default(&ep);
    ep.model_dir = dir;
    ep.kv_cache_bytes = rig_kv_bytes(8);
    ep.max_model_len = 129;
    e = NULL;
    CHECK(engine_create(&e, &ep, false, err, sizeof err) == HR_ERR_INVALID && strstr(err, "--max-model-len 129"));
    ep.kv_cache_bytes = rig_kv_bytes(512);
    ep.max_model_len = 4097;
    CHECK(engine_create(&e, &ep, false, err, sizeof err) == HR_ERR_INVALID && strstr(err, "context"));
    ep.max_model_len = 100;
    CHECK_OK(engine_create(&e, &ep, false, err, sizeof err), err);
    if (e) {
        hearth_engine_model_info(e, &mi);
        CHECK(mi.max_model_len == 100 && mi.kv_pool_tokens == 512 * 16);
        hearth_engine_free(e);
    }
    /* no budget given: sized from the available memory, capped at max_num_seqs x max_model_len */
    ep.kv_cache_bytes = 0;
    ep.max_model_len = 0;
    ep.max_num_seqs = 2;
    e = NULL;
    CHECK_OK(engine_create(&e, &ep, false, err, sizeof err), err);
    if (e) {
        hearth_engine_model_info(e, &mi);
        CHECK_MSG(mi.max_model_len == 4096 && mi.kv_pool_tokens >= 4096 && mi.kv_pool_tokens <= 2 * 4096 + 16,
                  "auto pool: %lld tokens", (long long)mi.kv_pool_tokens);
        hearth_engine_free(e);
    }
}

/* A backend that samples on the device keeps room for every sequence's logits row up to
 * ENGINE_DEVICE_LOGIT_ROWS (one lm_head pass a decode step); the others the floor. */
static enum hr_status no_sample(struct backend *be, const float *logits, int vocab, const struct dsample_row *rows,
                                int n, const struct dsample_mod *mods, int n_mods, const float *biases, int n_biases,
                                struct dsample_out *out, char *err, size_t errlen)
{
    (void)be, (void)logits, (void)vocab, (void)rows, (void)n, (void)mods, (void)n_mods, (void)biases, (void)n_biases,
        (void)out;
    return hr_err(err, errlen, HR_ERR_INTERNAL, "not called");
}

static void test_logit_rows(void)
{
    struct backend_ops host = {0}, dev = {0};
    dev.sample = no_sample;
    struct backend be = {.ops = &host};
    CHECK(engine_logit_rows(&be, 1000) == ENGINE_LOGIT_ROWS && engine_logit_rows(&be, 1) == ENGINE_LOGIT_ROWS);
    be.ops = &dev;
    CHECK(engine_logit_rows(&be, 1000) == ENGINE_DEVICE_LOGIT_ROWS);
    CHECK(engine_logit_rows(&be, 185) == 185);
    CHECK(engine_logit_rows(&be, 3) == ENGINE_LOGIT_ROWS);
    /* a CPU engine's scratch keeps the floor's room after a step of its most tokens */
    struct hearth_engine *e = rig_engine(rig_kv_bytes(64), 4, 64, 1);
    CHECK(e);
    if (!e)
        return;
    CHECK(engine_logit_rows(engine_backend(e), e->p.max_num_seqs) == ENGINE_LOGIT_ROWS);
    hearth_engine_free(e);
}

int main(void)
{
    TEST_RUN(test_concurrent_equals_alone);
    TEST_RUN(test_preemption_exact);
    TEST_RUN(test_cancel_no_leak);
    TEST_RUN(test_n_siblings);
    TEST_RUN(test_invalid_params);
    TEST_RUN(test_threaded);
    TEST_RUN(test_prompt_logprobs);
    TEST_RUN(test_fault_any_op);
    TEST_RUN(test_max_model_len);
    TEST_RUN(test_logit_rows);
    TEST_END();
}
