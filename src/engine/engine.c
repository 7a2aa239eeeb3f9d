/* The engine: start-up, submission, and the step loop.
 *
 * One step: intake (new requests, cancellations) → sched_plan → batch_build →
 * qwen3_forward → commit (committed_kv += query_len, sample the rows that reached
 * their last token, stop checks, events).  A failed forward commits nothing: the
 * groups of that batch end with an error, their blocks come back. */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fileio.h"
#include "base/log.h"
#include "engine/scheduler.h"

#include <xxhash.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define ENGINE_TEXT_MAX 4096 /* bytes of text one token event may carry */

/* ------------------------------------------------------------------ lists */

void group_list_push_back(struct group_list *l, struct group *g)
{
    g->next = NULL;
    g->prev = l->tail;
    if (l->tail)
        l->tail->next = g;
    else
        l->head = g;
    l->tail = g;
    l->n_groups++;
}

void group_list_push_front(struct group_list *l, struct group *g)
{
    g->prev = NULL;
    g->next = l->head;
    if (l->head)
        l->head->prev = g;
    else
        l->tail = g;
    l->head = g;
    l->n_groups++;
}

void group_list_remove(struct group_list *l, struct group *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        l->head = g->next;
    if (g->next)
        g->next->prev = g->prev;
    else
        l->tail = g->prev;
    g->next = g->prev = NULL;
    l->n_groups--;
}

/* ------------------------------------------------------------------ params */

void hearth_engine_params_default(struct hearth_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_threads = 1;
    p->kv_dtype = "bf16";
    p->kv_cache_bytes = (size_t)256 << 20;
    p->block_size = 16;
    p->max_num_seqs = 64;
    p->max_batched_tokens = 512;
    p->prefix_cache = true;
}

void hearth_request_params_default(struct hearth_request_params *p)
{
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->max_tokens = 16;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
}

const char *hearth_finish_reason_str(enum hearth_finish_reason r)
{
    switch (r) {
    case HEARTH_FINISH_NONE: return "none";
    case HEARTH_FINISH_STOP: return "stop";
    case HEARTH_FINISH_LENGTH: return "length";
    case HEARTH_FINISH_CANCELLED: return "cancelled";
    case HEARTH_FINISH_ERROR: return "error";
    }
    return "unknown";
}

/* ------------------------------------------------------------------ groups */

void group_free(struct group *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n && g->seqs; i++) {
        struct seq *s = &g->seqs[i];
        free(s->tokens);
        free(s->table);
        if (s->has_text) {
            detok_free(&s->detok);
            stop_matcher_free(&s->stop);
        }
        grammar_seq_free(s->gram);
        free(s->gram);
    }
    grammar_compiled_unref(g->grammar);
    free(g->seqs);
    free(g->stop_ids);
    free(g->bias);
    free(g->salt);
    free(g);
}

static void engine_emit(struct group *g, const struct hearth_event *ev, const char *text, size_t n)
{
    if (!request_push(g->req, ev, text, n))
        log_error("request: out of memory queueing an event; the client misses it");
}

/* Ends one sequence: flushes its held-back text with the FINISH event and frees
 * its blocks. */
static void engine_finish_seq(struct hearth_engine *e, struct seq *s, enum hearth_finish_reason why,
                              const char *message)
{
    if (s->finished)
        return;
    struct group *g = s->g;
    char text[ENGINE_TEXT_MAX];
    size_t n = 0;
    if (s->has_text && why != HEARTH_FINISH_ERROR) {
        char tail[ENGINE_TEXT_MAX];
        size_t tn = 0;
        detok_flush(&s->detok, tail, sizeof tail, &tn);
        stop_matcher_push(&s->stop, tail, tn, text, sizeof text, &n);
        n += stop_matcher_flush(&s->stop, text + n, sizeof text - n);
    }
    s->finished = true;
    s->finish = why;
    sched_release_seq(e, s);
    struct hearth_event ev = {.type = HEARTH_EVENT_FINISH, .index = s->index, .finish_reason = why,
                              .stop_token = s->stop_token};
    if (message)
        snprintf(ev.message, sizeof ev.message, "%s", message);
    engine_emit(g, &ev, text, n);
}

static bool group_all_finished(const struct group *g)
{
    for (int i = 0; i < g->n; i++)
        if (!g->seqs[i].finished)
            return false;
    return true;
}

/* The last event of a request; the engine lets go of it. */
static void engine_done(struct hearth_engine *e, struct group *g, struct group_list *from)
{
    struct hearth_event ev = {
        .type = HEARTH_EVENT_DONE, .prompt_tokens = g->n_prompt, .cached_tokens = g->cached_tokens,
        .completion_tokens = g->completion_tokens, .seed = g->sp.seed, .stop_token = -1,
    };
    ev.finish_reason = g->seqs[0].finish;
    for (int i = 0; i < g->n; i++)
        if (g->seqs[i].finish == HEARTH_FINISH_ERROR || g->seqs[i].finish == HEARTH_FINISH_CANCELLED)
            ev.finish_reason = g->seqs[i].finish;
    if (from)
        group_list_remove(from, g);
    g->state = GROUP_STATE_DONE;
    engine_emit(g, &ev, NULL, 0);
    request_unref(g->req);
    atomic_fetch_add(&e->st_finished, 1);
    group_free(g);
}

/* Ends every unfinished sequence of g with `why`, then the request. */
static void engine_end_group(struct hearth_engine *e, struct group *g, struct group_list *from,
                             enum hearth_finish_reason why, const char *message)
{
    for (int i = 0; i < g->n; i++)
        engine_finish_seq(e, &g->seqs[i], why, message);
    engine_done(e, g, from);
}

/* ------------------------------------------------------------------ sampling */

static bool engine_is_stop_id(const struct group *g, int32_t tok)
{
    for (int i = 0; i < g->n_stop_ids; i++)
        if (g->stop_ids[i] == tok)
            return true;
    return false;
}

/* Masks a constrained sequence's logits row; on failure the sequence has ended (a grammar that
 * is complete with no stop token to end it ends with "stop", any other dead end with an error). */
static enum hr_status engine_grammar_mask(struct hearth_engine *e, struct seq *s, float *logits, char *err,
                                          size_t errlen)
{
    struct group *g = s->g;
    enum hr_status st = grammar_mask_apply(s->gram, logits, e->m.cfg.vocab_size, g->stop_ids, g->n_stop_ids, err, errlen);
    if (st == HR_ERR_NOT_FOUND)
        engine_finish_seq(e, s, HEARTH_FINISH_STOP, NULL);
    else if (st != HR_OK)
        engine_finish_seq(e, s, HEARTH_FINISH_ERROR, err);
    return st;
}

/* Appends a sampled token to s and emits it; ends s when a stop condition holds. */
static void engine_accept(struct hearth_engine *e, struct seq *s, const struct sampler_result *r)
{
    struct group *g = s->g;
    HR_ASSERT(s->n_tokens < s->cap);
    s->tokens[s->n_tokens++] = r->token;
    s->n_generated++;
    g->completion_tokens++;
    atomic_fetch_add(&e->st_gen_tokens, 1);

    bool stop_id = engine_is_stop_id(g, r->token);
    char text[ENGINE_TEXT_MAX];
    size_t n = 0;
    bool stop_str = false;
    if (s->has_text && !stop_id) {
        char piece[ENGINE_TEXT_MAX];
        size_t pn = 0;
        detok_push(&s->detok, r->token, piece, sizeof piece, &pn);
        stop_str = stop_matcher_push(&s->stop, piece, pn, text, sizeof text, &n);
    }
    struct hearth_event ev = {.type = HEARTH_EVENT_TOKEN, .index = s->index, .token = r->token,
                              .logprob = r->logprob, .n_top = r->n_top, .stop_token = -1};
    for (int i = 0; i < r->n_top; i++) {
        ev.top[i].token = r->top[i].token;
        ev.top[i].logprob = r->top[i].logprob;
    }
    engine_emit(g, &ev, text, n);

    if (stop_id) {
        s->stop_token = r->token;
        engine_finish_seq(e, s, HEARTH_FINISH_STOP, NULL);
    } else if (stop_str) {
        engine_finish_seq(e, s, HEARTH_FINISH_STOP, NULL);
    } else if (s->n_generated >= g->max_tokens || s->n_tokens >= g->max_context) {
        engine_finish_seq(e, s, HEARTH_FINISH_LENGTH, NULL);
    }
}

static void engine_sample(struct hearth_engine *e, struct seq *s, const float *logits)
{
    struct group *g = s->g;
    struct sampler_result r;
    char gerr[HR_ERRLEN];
    /* The row is this step's scratch: a constrained sequence masks it in place (siblings
     * sampling one row at the fork share the start state, so the mask is the same). */
    if (s->gram && engine_grammar_mask(e, s, (float *)logits, gerr, sizeof gerr) != HR_OK)
        return;
    sampler_sample(&g->sp, logits, e->m.cfg.vocab_size, s->tokens, g->n_prompt, s->n_generated,
                   (uint64_t)(g->index_base + s->index), (uint64_t)s->n_generated, &e->ss, &r);
    if (s->gram && grammar_seq_advance(s->gram, r.token, engine_is_stop_id(g, r.token), gerr, sizeof gerr) != HR_OK) {
        engine_finish_seq(e, s, HEARTH_FINISH_ERROR, gerr);
        return;
    }
    engine_accept(e, s, &r);
}

/* Logits at position p score the prompt token at p + 1: one event per prompt
 * position not scored before (a recomputation after preemption repeats none). */
static void engine_prompt_logprobs(struct hearth_engine *e, struct seq *s, int first_pos, int n, const float *logits)
{
    struct group *g = s->g;
    int V = e->m.cfg.vocab_size;
    for (int t = 0; t < n; t++) {
        int pos = first_pos + t + 1;
        if (pos >= g->n_prompt || pos <= g->prompt_lp_done)
            continue;
        struct sampler_result r;
        sampler_score(logits + (int64_t)t * V, V, s->tokens[pos], g->sp.n_logprobs, &e->ss, &r);
        struct hearth_event ev = {.type = HEARTH_EVENT_PROMPT_LOGPROB, .index = pos, .token = r.token,
                                  .logprob = r.logprob, .n_top = r.n_top, .stop_token = -1};
        for (int k = 0; k < r.n_top; k++) {
            ev.top[k].token = r.top[k].token;
            ev.top[k].logprob = r.top[k].logprob;
        }
        engine_emit(g, &ev, NULL, 0);
        g->prompt_lp_done = pos;
    }
}

/* Sample 0 completed the prompt: the siblings take its blocks (one more reference
 * each) and its tokens; each copies the shared tail on its first own write. */
static void engine_fork(struct hearth_engine *e, struct group *g)
{
    struct seq *s0 = &g->seqs[0];
    for (int i = 1; i < g->n; i++) {
        struct seq *s = &g->seqs[i];
        memcpy(s->tokens, s0->tokens, (size_t)g->n_prompt * sizeof *s->tokens);
        s->n_tokens = g->n_prompt;
        s->committed = s0->committed;
        for (int b = 0; b < s0->n_table; b++) {
            block_pool_retain(&e->pool, s0->table[b]);
            s->table[b] = s0->table[b];
        }
        s->n_table = s0->n_table;
    }
    g->forked = true;
}

/* ------------------------------------------------------------------ control */

void hearth_prefix_cache_reset(struct hearth_engine *e)
{
    atomic_store(&e->reset_requested, 1);
    engine_wake(e);
}

static enum hr_status engine_fingerprint(struct hearth_engine *e, char *err, size_t errlen);
static uint64_t engine_namespace_base(const struct hearth_engine *e);

/* On the engine thread, with e->mu held and nothing in flight: loads the model
 * directory again; the old model keeps serving when that fails or when the new
 * one has other shapes. */
static void engine_reload_now(struct hearth_engine *e)
{
    struct model m2;
    char err[HR_ERRLEN];
    enum hr_status st = model_load(&m2, e->model_dir, err, sizeof err);
    const struct model_config *a = &e->m.cfg, *b = &m2.cfg;
    if (st == HR_OK && (a->arch != b->arch || a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
                        a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
                        a->head_dim != b->head_dim || a->intermediate_size != b->intermediate_size ||
                        a->moe_intermediate_size != b->moe_intermediate_size || a->n_experts != b->n_experts ||
                        a->n_experts_per_tok != b->n_experts_per_tok))
        st = hr_err(err, sizeof err, HR_ERR_UNSUPPORTED,
                    "reload: the checkpoint now has other shapes; restart the server to serve it");
    if (st == HR_OK) {
        model_free(&e->m);
        e->m = m2;
        st = engine_fingerprint(e, err, sizeof err);
        if (e->pc_on) {
            prefix_cache_invalidate(&e->pc);
            e->pc.ns_base = engine_namespace_base(e);
        }
    } else {
        model_free(&m2);
    }
    e->reload_status = st;
    snprintf(e->reload_err, sizeof e->reload_err, "%s", st == HR_OK ? "" : err);
    e->reload_done = true;
    pthread_cond_broadcast(&e->cv_reload);
}

enum hr_status hearth_engine_reload(struct hearth_engine *e, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->mu);
    if (e->reload_requested) {
        pthread_mutex_unlock(&e->mu);
        return hr_err(err, errlen, HR_ERR_FULL, "a reload is already under way");
    }
    if (!e->thread_started) {
        pthread_mutex_unlock(&e->mu);
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "reload needs the engine thread");
    }
    e->reload_requested = true;
    e->reload_done = false;
    e->wakeups++;
    pthread_cond_signal(&e->cv);
    while (!e->reload_done && !e->stopping)
        pthread_cond_wait(&e->cv_reload, &e->mu);
    enum hr_status st = e->reload_done ? e->reload_status : HR_ERR_CANCELLED;
    if (st != HR_OK)
        hr_err(err, errlen, st, "%s", e->reload_done ? e->reload_err : "the engine shut down");
    e->reload_requested = false;
    e->reload_done = false;
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ------------------------------------------------------------------ text */

enum hr_status hearth_tokenize(struct hearth_engine *e, const char *text, size_t len, int32_t **ids, int *n,
                               char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (!e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "this model has no tokenizer.json");
    struct tokenizer_ids out = {0};
    enum hr_status st = tokenizer_encode(&e->tk, text, len, &out, err, errlen);
    if (st != HR_OK) {
        tokenizer_ids_free(&out);
        return st;
    }
    *ids = out.ids;
    *n = (int)out.n;
    return HR_OK;
}

enum hr_status hearth_detokenize(struct hearth_engine *e, const int32_t *ids, int n, bool skip_special_tokens,
                                 char **text, size_t *len, char *err, size_t errlen)
{
    *text = NULL;
    *len = 0;
    if (!e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "this model has no tokenizer.json");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->m.cfg.vocab_size)
            return hr_err(err, errlen, HR_ERR_INVALID, "token id %d is outside the vocabulary", ids[i]);
    return tokenizer_decode(&e->tk, ids, (size_t)n, skip_special_tokens, text, len, err, errlen);
}

enum hr_status hearth_token_bytes(struct hearth_engine *e, int32_t id, const char **bytes, size_t *len, char *err,
                                  size_t errlen)
{
    *bytes = NULL;
    *len = 0;
    if (!e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "this model has no tokenizer.json");
    if (id < 0 || id >= e->m.cfg.vocab_size || !(*bytes = tokenizer_token_bytes(&e->tk, id, len)))
        return hr_err(err, errlen, HR_ERR_INVALID, "token id %d names no token", id);
    return HR_OK;
}

/* ------------------------------------------------------------------ the step */

static void engine_intake(struct hearth_engine *e)
{
    e->step_no++;
    if (atomic_exchange(&e->reset_requested, 0) && e->pc_on)
        prefix_cache_invalidate(&e->pc);
    pthread_mutex_lock(&e->mu);
    if (e->reload_requested && !e->reload_done && !e->running.head && !e->waiting.head)
        engine_reload_now(e);
    /* While a reload waits for the requests in flight, new ones stay queued. */
    while (e->incoming.head && !e->reload_requested) {
        struct group *g = e->incoming.head;
        group_list_remove(&e->incoming, g);
        e->n_incoming_reqs--;
        g->arrival = e->next_arrival++;
        g->arrival_step = e->step_no;
        g->state = GROUP_STATE_WAITING;
        group_list_push_back(&e->waiting, g);
    }
    pthread_mutex_unlock(&e->mu);

    struct group_list *lists[2] = {&e->waiting, &e->running};
    for (int l = 0; l < 2; l++)
        for (struct group *g = lists[l]->head, *next; g; g = next) {
            next = g->next;
            if (atomic_load(&g->req->cancel))
                engine_end_group(e, g, lists[l], HEARTH_FINISH_CANCELLED, NULL);
            else if (g->max_tokens == 0)
                engine_end_group(e, g, lists[l], HEARTH_FINISH_LENGTH, NULL);
        }
}

static void engine_publish_stats(struct hearth_engine *e)
{
    int running = 0, waiting = 0;
    for (struct group *g = e->running.head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            running += !g->seqs[i].finished;
    for (struct group *g = e->waiting.head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            waiting += !g->seqs[i].finished;
    atomic_store(&e->st_running, running);
    atomic_store(&e->st_waiting, waiting);
    atomic_store(&e->st_waiting_groups, e->waiting.n_groups);
    atomic_store(&e->st_free, block_pool_n_free(&e->pool));
    pthread_mutex_lock(&e->stats_mu);
    struct hearth_prefix_cache_stats *ps = &e->pc_snapshot;
    ps->enabled = e->pc_on;
    if (e->pc_on) {
        const struct prefix_cache_stats *c = &e->pc.st;
        ps->entries = c->entries;
        ps->blocks_held = prefix_cache_blocks_held(&e->pc);
        ps->open_leases = c->open_leases;
        ps->lookups_total = c->lookups_total;
        ps->hits_total = c->hits_total;
        ps->misses_total = c->misses_total;
        ps->lookup_tokens_total = c->lookup_tokens_total;
        ps->hit_tokens_total = c->hit_tokens_total;
        ps->inserted_blocks_total = c->inserted_blocks_total;
        ps->evicted_blocks_total = c->evicted_blocks_total;
        ps->collisions_total = c->collisions_total;
        ps->invalidations_total = c->invalidations_total;
    }
    pthread_mutex_unlock(&e->stats_mu);
}

/* The step's logits rows, a piece at a time in the forward's scratch (whatever room
 * the residual stream leaves: ENGINE_LOGIT_ROWS rows at least), each piece scored and
 * sampled before the next is computed.  So no logits buffer grows with max_num_seqs,
 * and a row's events keep their order (its prompt logprobs, then its sample). */
static void engine_logits(struct hearth_engine *e, const struct sched_plan *plan)
{
    const struct batch *b = &e->batch;
    int V = e->m.cfg.vocab_size;
    if (b->n_logits == 0)
        return;
    int piece = qwen3_scratch_logit_rows(&e->fwd);
    HR_ASSERT(piece >= ENGINE_LOGIT_ROWS);
    if (e->hook_logit_rows > 0 && piece > e->hook_logit_rows)
        piece = e->hook_logit_rows;
    for (int c0 = 0; c0 < b->n_logits; c0 += piece) {
        int cn = b->n_logits - c0 < piece ? b->n_logits - c0 : piece;
        e->logits = qwen3_logits_scratch(&e->fwd, b, c0, cn);
        for (int i = 0; i < plan->n_rows; i++) {
            const struct sched_row *pr = &plan->rows[i];
            const struct batch_row *br = &b->rows[i];
            int nl = pr->all_logits ? pr->query_len : pr->sample ? 1 : 0;
            int lo = br->logit_offset > c0 ? br->logit_offset : c0;
            int hi = br->logit_offset + nl < c0 + cn ? br->logit_offset + nl : c0 + cn;
            if (lo >= hi)
                continue;
            struct seq *s = pr->s;
            if (pr->all_logits)
                engine_prompt_logprobs(e, s, br->context_len + (lo - br->logit_offset), hi - lo,
                                       e->logits + (int64_t)(lo - c0) * V);
            if (!pr->sample || hi != br->logit_offset + nl)
                continue;
            /* The row's last logits (rows with every token's logits end with them). */
            const float *lg = e->logits + (int64_t)(hi - 1 - c0) * V;
            struct group *g = s->g;
            if (!g->forked && g->n > 1) {
                engine_fork(e, g);
                for (int k = 0; k < g->n; k++)
                    engine_sample(e, &g->seqs[k], lg);
            } else {
                engine_sample(e, s, lg);
            }
        }
    }
}

bool engine_step(struct hearth_engine *e)
{
    engine_intake(e);
    struct sched_row rows_buf[e->p.max_num_seqs];
    struct sched_plan plan = {.rows = rows_buf};
    sched_plan(e, &plan);
    if (plan.n_rows == 0) {
        engine_publish_stats(e);
        return false;
    }

    char err[HR_ERRLEN];
    struct batch *b = &e->batch;
    batch_reset(b);
    enum hr_status st = HR_OK;
    for (int i = 0; i < plan.n_rows && st == HR_OK; i++) {
        struct seq *s = plan.rows[i].s;
        st = batch_add_row(b, i, s->tokens + s->committed, plan.rows[i].query_len, s->committed, s->table,
                           s->n_table,
                           plan.rows[i].all_logits ? BATCH_LOGITS_ALL
                           : plan.rows[i].sample   ? BATCH_LOGITS_LAST
                                                   : BATCH_LOGITS_NONE,
                           err, sizeof err);
    }
    if (st == HR_OK)
        st = batch_build(b, e->kv.n_blocks, err, sizeof err);
    if (st == HR_OK && atomic_exchange(&e->hook_fail_forward, 0))
        e->fwd.fail_next = 1;
    if (st == HR_OK) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = qwen3_forward(&e->fwd, b, &e->kv, NULL, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        e->last_forward_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    }
    atomic_fetch_add(&e->st_steps, 1);

    if (st != HR_OK) {
        /* Nothing was committed: end the groups of this batch with the error. */
        log_error("step failed: %s", err);
        for (int i = 0; i < plan.n_rows; i++) {
            struct group *g = plan.rows[i].s->g;
            if (g->state == GROUP_STATE_RUNNING)
                engine_end_group(e, g, &e->running, HEARTH_FINISH_ERROR, err);
        }
        engine_publish_stats(e);
        return true;
    }

    /* Commit: every row's tokens now have K/V; rows at their last token sample. */
    for (int i = 0; i < plan.n_rows; i++) {
        struct seq *s = plan.rows[i].s;
        s->committed += plan.rows[i].query_len;
        if (s->committed <= s->g->n_prompt && s->index == 0)
            atomic_fetch_add(&e->st_prompt_tokens, plan.rows[i].query_len);
        /* Publication: blocks that just became full of committed tokens are
         * reusable by anyone from now on (prompt or generated alike). */
        int full = s->committed / e->kv.block_size;
        if (e->pc_on && full > s->published) {
            prefix_cache_insert(&e->pc, s->g->salt, s->tokens, full, s->table);
            s->published = full;
        }
    }
    engine_logits(e, &plan);
    for (struct group *g = e->running.head, *next; g; g = next) {
        next = g->next;
        if (group_all_finished(g))
            engine_done(e, g, &e->running);
    }
    engine_publish_stats(e);
    return true;
}

/* ------------------------------------------------------------------ thread */

void engine_wake(struct hearth_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->wakeups++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_thread(void *arg)
{
    struct hearth_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !e->incoming.head && !e->running.head && !e->waiting.head &&
               !(e->reload_requested && !e->reload_done) && !atomic_load(&e->reset_requested))
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping;
        unsigned seen = e->wakeups;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        if (!engine_step(e)) {
            /* Nothing could run: only a submission or a cancellation changes that. */
            pthread_mutex_lock(&e->mu);
            if (!e->stopping && e->wakeups == seen)
                pthread_cond_wait(&e->cv, &e->mu);
            pthread_mutex_unlock(&e->mu);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ identity */

/* The model's fingerprint: config.json and generation_config.json as bytes, and
 * every weight file's header and size. */
static enum hr_status engine_fingerprint(struct hearth_engine *e, char *err, size_t errlen)
{
    uint64_t h = 0x68656172746855ull;
    const char *names[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX + 32], *buf;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", e->model_dir, names[i]);
        if (!fileio_exists(path))
            continue;
        enum hr_status st = fileio_read_all(path, 16 << 20, &buf, &len, err, errlen);
        if (st != HR_OK)
            return st;
        h = XXH3_64bits_withSeed(buf, len, h);
        free(buf);
    }
    const struct safetensors *stf = &e->m.w.st;
    for (int i = 0; i < stf->n_files; i++) {
        const struct safetensors_file *f = &stf->files[i];
        uint64_t hlen = 0;
        if (f->map && f->size >= 8)
            memcpy(&hlen, f->map, 8);
        size_t n = f->map ? (size_t)(8 + (hlen < f->size - 8 ? hlen : f->size - 8)) : 0;
        h = XXH3_64bits_withSeed(f->map, n, h);
        h = XXH3_64bits_withSeed(&f->size, sizeof f->size, h);
    }
    e->fingerprint = h;
    return HR_OK;
}

/* What every prefix-cache namespace of this engine shares: the model, the KV dtype,
 * the block size and the kernel variant (the epoch and the salt come on top). */
static uint64_t engine_namespace_base(const struct hearth_engine *e)
{
    char desc[256];
    int n = snprintf(desc, sizeof desc, "%016llx|%s|%d|%s", (unsigned long long)e->fingerprint,
                     kv_dtype_name(e->kv.dtype), e->kv.block_size, e->be.name);
    return XXH3_64bits(desc, (size_t)n);
}

/* ------------------------------------------------------------------ init / free */

enum hr_status engine_create(struct hearth_engine **out, const struct hearth_engine_params *p, bool start_thread,
                             char *err, size_t errlen)
{
    *out = NULL;
    if (!p->model_dir)
        return hr_err(err, errlen, HR_ERR_INVALID, "engine: no model directory");
    if (p->n_threads < 1 || p->block_size < 1 || p->block_size > 1024 || p->max_num_seqs < 1 ||
        p->max_batched_tokens < 1)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "engine: threads, block size (1..1024), max_num_seqs and max_batched_tokens must be >= 1");
    if (p->prefix_cache_max_entries < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "engine: prefix_cache_max_entries must be >= 0");
    struct hearth_engine *e = calloc(1, sizeof *e);
    if (!e)
        return hr_err(err, errlen, HR_ERR_NOMEM, "engine: out of memory");
    e->p = *p;
    snprintf(e->model_dir, sizeof e->model_dir, "%s", p->model_dir);
    e->p.model_dir = e->model_dir;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->cv_reload, NULL);
    pthread_mutex_init(&e->stats_mu, NULL);
    e->max_wait_steps = p->max_wait_steps > 0 ? p->max_wait_steps : 32;
    e->schedule = ENGINE_SCHEDULE_LPM;

    enum kv_dtype kvd = KV_DTYPE_BF16;
    enum hr_status st = kv_dtype_parse(p->kv_dtype ? p->kv_dtype : "bf16", &kvd, err, errlen);
    if (st == HR_OK && p->schedule && strcmp(p->schedule, "lpm") != 0) {
        if (!strcmp(p->schedule, "fcfs"))
            e->schedule = ENGINE_SCHEDULE_FCFS;
        else
            st = hr_err(err, errlen, HR_ERR_INVALID, "--schedule must be lpm or fcfs, got '%s'", p->schedule);
    }
    if (st == HR_OK)
        st = model_load(&e->m, e->model_dir, err, errlen);
    if (st == HR_OK) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/tokenizer.json", e->model_dir);
        if (fileio_exists(path)) {
            st = tokenizer_init(&e->tk, path, err, errlen);
            e->has_tk = st == HR_OK;
        }
#ifdef __GLIBC__
        /* tokenizer.json and its parse are freed by now: give those pages back before
         * the buffers below can land on them (glibc would reuse them dirty). */
        malloc_trim(0);
#endif
    }
    e->p.kv_dtype = kv_dtype_name(kvd);
    const char *kernel = p->kernel;
    if (st == HR_OK && p->compute && strcmp(p->compute, "f32") != 0) {
        if (strcmp(p->compute, "bf16") != 0)
            st = hr_err(err, errlen, HR_ERR_INVALID, "--compute must be f32 or bf16, got '%s'", p->compute);
        else if (kernel && *kernel && strcmp(kernel, "auto") && strcmp(kernel, "avx512bf16"))
            st = hr_err(err, errlen, HR_ERR_INVALID, "--compute bf16 needs the avx512bf16 kernel, not '%s'", kernel);
        kernel = "avx512bf16";
    } else if (st == HR_OK && p->compute && kernel && !strcmp(kernel, "avx512bf16")) {
        st = hr_err(err, errlen, HR_ERR_INVALID, "--compute f32 contradicts the avx512bf16 kernel");
    }
    if (st == HR_OK)
        st = backend_cpu_init(&e->be, p->n_threads, kernel, err, errlen);
    if (st == HR_OK)
        st = kv_store_init(&e->kv, &e->m.cfg, kvd, p->block_size, p->kv_cache_bytes, err, errlen);
    if (st == HR_OK)
        st = block_pool_init(&e->pool, &e->kv, err, errlen);
    if (st == HR_OK)
        st = engine_fingerprint(e, err, errlen);
    if (st == HR_OK && p->prefix_cache) {
        st = prefix_cache_init(&e->pc, &e->pool, p->block_size,
                               p->prefix_cache_max_entries > 0 ? p->prefix_cache_max_entries : e->kv.n_blocks,
                               engine_namespace_base(e), err, errlen);
        e->pc_on = st == HR_OK;
    }
    if (st == HR_OK)
        st = qwen3_init(&e->fwd, &e->m, &e->be, p->max_batched_tokens, err, errlen);
    if (st == HR_OK)
        st = qwen3_reserve_logits(&e->fwd, ENGINE_LOGIT_ROWS, err, errlen);
    if (st == HR_OK)
        st = batch_init(&e->batch, p->block_size, p->max_num_seqs, p->max_batched_tokens, err, errlen);
    if (st == HR_OK)
        st = sampler_scratch_init(&e->ss, e->m.cfg.vocab_size, err, errlen);
    if (st == HR_OK)
        grammar_cache_init(&e->gcache, e->has_tk ? &e->tk : NULL, e->m.cfg.vocab_size, 0, 0);
    if (st == HR_OK && start_thread) {
        if (pthread_create(&e->thread, NULL, engine_thread, e) != 0)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "engine: cannot start the engine thread");
        else
            e->thread_started = true;
    }
    if (st != HR_OK) {
        hearth_engine_free(e);
        return st;
    }
    engine_publish_stats(e);
    *out = e;
    return HR_OK;
}

enum hr_status hearth_engine_init(struct hearth_engine **out, const struct hearth_engine_params *p, char *err,
                                  size_t errlen)
{
    return engine_create(out, p, true, err, errlen);
}

static void engine_detach_all(struct hearth_engine *e, struct group_list *l)
{
    while (l->head) {
        struct group *g = l->head;
        pthread_mutex_lock(&g->req->mu);
        g->req->engine = NULL;
        pthread_mutex_unlock(&g->req->mu);
        engine_end_group(e, g, l, HEARTH_FINISH_ERROR, "the engine shut down");
    }
}

void hearth_engine_free(struct hearth_engine *e)
{
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_broadcast(&e->cv);
        pthread_cond_broadcast(&e->cv_reload);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    engine_detach_all(e, &e->incoming);
    engine_detach_all(e, &e->waiting);
    engine_detach_all(e, &e->running);
    if (e->pc_on)
        prefix_cache_free(&e->pc);
    sampler_scratch_free(&e->ss);
    grammar_cache_free(&e->gcache);
    batch_free(&e->batch);
    qwen3_free(&e->fwd);
    block_pool_free(&e->pool);
    kv_store_free(&e->kv);
    backend_free(&e->be);
    if (e->has_tk)
        tokenizer_free(&e->tk);
    model_free(&e->m);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->cv_reload);
    pthread_mutex_destroy(&e->stats_mu);
    free(e);
#ifdef __GLIBC__
    /* glibc keeps freed memory below a trim threshold that rises with the largest
     * block freed so far: without this, an engine made after this one (a benchmark's
     * next level, an embedding application) would start with our pages resident. */
    malloc_trim(0);
#endif
}

void hearth_engine_model_info(const struct hearth_engine *e, struct hearth_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->model_dir = e->model_dir;
    out->vocab_size = e->m.cfg.vocab_size;
    out->max_context = e->m.cfg.max_position_embeddings;
    out->has_tokenizer = e->has_tk;
    out->n_eos = e->m.cfg.n_eos;
    out->eos_ids = e->m.cfg.eos_token_ids;
}

void hearth_engine_stats(struct hearth_engine *e, struct hearth_stats *out)
{
    memset(out, 0, sizeof *out);
    out->blocks_total = e->kv.n_blocks;
    out->blocks_free = atomic_load(&e->st_free);
    out->blocks_used = out->blocks_total - out->blocks_free;
    out->running = atomic_load(&e->st_running);
    out->waiting = atomic_load(&e->st_waiting);
    out->steps = atomic_load(&e->st_steps);
    out->preemptions = atomic_load(&e->st_preemptions);
    out->prompt_tokens_total = atomic_load(&e->st_prompt_tokens);
    out->generation_tokens_total = atomic_load(&e->st_gen_tokens);
    out->requests_total = atomic_load(&e->st_requests);
    out->requests_finished = atomic_load(&e->st_finished);
    pthread_mutex_lock(&e->stats_mu);
    out->prefix_cache = e->pc_snapshot;
    pthread_mutex_unlock(&e->stats_mu);
}
