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
#include <unistd.h>

#include "base/fileio.h"
#include "base/log.h"
#include "engine/kv_budget.h"
#include "engine/scheduler.h"

#include <xxhash.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define ENGINE_TEXT_MAX 4096 /* bytes of text one token event may carry */
#define ENGINE_MAX_TOK_HOST 512    /* max_batched_tokens' default on the CPU */
#define ENGINE_MAX_TOK_DEVICE 2048 /* and on a GPU */

/* ------------------------------------------------------------------ params */

void hearth_engine_params_default(struct hearth_engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_threads = 1;
    p->kv_dtype = "bf16";
    p->kv_cache_bytes = 0; /* sized from the available memory (kv_budget.h) */
    p->kv_cache_fraction = KV_BUDGET_DEFAULT_FRACTION;
    p->block_size = 16;
    p->max_num_seqs = 64;
    p->max_batched_tokens = 0; /* by the backend: ENGINE_MAX_TOK_HOST / _DEVICE */
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
    sched_release_seq(&e->sched, s);
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
    if (e->tiers_on)
        kv_restore_drop(&e->restore, g);
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
                              .logprob = r->logprob, .n_top = r->n_top, .stop_token = -1,
                              .is_stop_token = stop_id};
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

static void engine_sample(struct hearth_engine *e, struct seq *s, float *logits)
{
    struct group *g = s->g;
    struct sampler_result r;
    char gerr[HR_ERRLEN];
    /* The row is this step's scratch: a constrained sequence masks it in place (siblings
     * sampling one row at the fork share the start state, so the mask is the same). */
    if (s->gram && engine_grammar_mask(e, s, logits, gerr, sizeof gerr) != HR_OK)
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

static uint64_t engine_namespace_base(const struct hearth_engine *e);
static void engine_namespace_desc(const struct hearth_engine *e, char desc[PREFIX_NS_DESC_MAX]);

/* On the engine thread, with e->mu held and nothing in flight: loads the model
 * directory again; the old model keeps serving when that fails or when the new
 * one has other shapes. */
static void engine_reload_now(struct hearth_engine *e)
{
    struct model m2;
    memset(&m2, 0, sizeof m2);
    char err[HR_ERRLEN];
    safetensors_set_read_into_memory(e->p.no_mmap);
    enum hr_status st = model_load_as(&m2, e->model_dir, e->load_format, err, sizeof err);
    safetensors_set_read_into_memory(false);
    if (st == HR_OK) /* a file written to in place while it was read: refuse what was read */
        st = safetensors_check_unchanged(&m2.w.st, err, sizeof err);
    const struct model_config *a = &e->m.cfg, *b = &m2.cfg;
    if (st == HR_OK && (a->arch != b->arch || a->vocab_size != b->vocab_size || a->hidden_size != b->hidden_size ||
                        a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
                        a->head_dim != b->head_dim || a->intermediate_size != b->intermediate_size ||
                        a->moe_intermediate_size != b->moe_intermediate_size || a->n_experts != b->n_experts ||
                        a->n_experts_per_tok != b->n_experts_per_tok))
        st = hr_err(err, sizeof err, HR_ERR_UNSUPPORTED,
                    "reload: the checkpoint now has other shapes; restart the server to serve it");
    uint64_t fp = 0;
    if (st == HR_OK)
        st = model_fingerprint(&m2, &fp, err, sizeof err);
    if (st == HR_OK) {
        /* The new weights are bound where the forward will read them (e->m) before the
         * old ones are let go of; a failed bind keeps the old model serving. */
        struct model old = e->m;
        e->m = m2;
        st = qwen3_bind(&e->fwd, &e->m, err, sizeof err);
        if (st == HR_OK) {
            model_free(&old);
            e->fingerprint = fp;
            if (e->max_model_len > e->m.cfg.max_position_embeddings)
                e->max_model_len = e->m.cfg.max_position_embeddings;
            if (e->pc_on) {
                prefix_cache_invalidate(&e->pc);
                /* The host tier's blocks go with the pool's (the disk tier's files stay:
                 * their names carry the model's fingerprint). */
                if (e->tiers_on)
                    kv_restore_clear_host(&e->restore);
                e->pc.ns_base = engine_namespace_base(e);
                char desc[PREFIX_NS_DESC_MAX];
                engine_namespace_desc(e, desc);
                prefix_cache_set_ns_desc(&e->pc, desc);
            }
        } else {
            model_free(&e->m);
            e->m = old;
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
    /* requests that came during the reload wait in the intake queue: the engine thread
     * may sleep with nothing else to wake it */
    e->wakeups++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ------------------------------------------------------------------ text */

enum hr_status hearth_tokenize(struct hearth_engine *e, const char *text, size_t len, int32_t **ids, int *n,
                               char *err, size_t errlen)
{
    return hearth_tokenize_max(e, text, len, 0, ids, n, err, errlen);
}

enum hr_status hearth_tokenize_max(struct hearth_engine *e, const char *text, size_t len, int max_ids, int32_t **ids,
                                   int *n, char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (!e->has_tk)
        return hr_err(err, errlen, HR_ERR_INVALID, "this model has no tokenizer.json");
    struct tokenizer_ids out = {0};
    enum hr_status st = tokenizer_encode_max(&e->tk, text, len, true, max_ids > 0 ? (size_t)max_ids : 0, &out, err,
                                             errlen);
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
    e->sched.step_no++;
    if (atomic_exchange(&e->reset_requested, 0) && e->pc_on) {
        prefix_cache_invalidate(&e->pc);
        if (e->tiers_on)
            kv_restore_clear(&e->restore);
    }
    pthread_mutex_lock(&e->mu);
    if (e->reload_requested && !e->reload_done && !e->sched.running.head && !e->sched.waiting.head)
        engine_reload_now(e);
    /* While a reload waits for the requests in flight, new ones stay queued. */
    while (e->incoming.head && !e->reload_requested) {
        struct group *g = e->incoming.head;
        group_list_remove(&e->incoming, g);
        e->n_incoming_reqs--;
        g->arrival = e->next_arrival++;
        g->arrival_step = e->sched.step_no;
        g->state = GROUP_STATE_WAITING;
        group_list_push_back(&e->sched.waiting, g);
    }
    pthread_mutex_unlock(&e->mu);

    if (e->tiers_on && e->restore.disk_on) {
        kv_restore_poll(&e->restore);
        /* Newcomers, and groups preempted since, are looked up on disk once, in list
         * order (the first of several sharing a prefix reads it, the others follow). */
        for (struct group *g = e->sched.waiting.head; g; g = g->next)
            if (!g->disk_looked_up) {
                g->disk_looked_up = true;
                kv_restore_start(&e->restore, g, &e->sched.waiting);
            }
    }

    struct group_list *lists[2] = {&e->sched.waiting, &e->sched.running};
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
    for (struct group *g = e->sched.running.head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            running += !g->seqs[i].finished;
    for (struct group *g = e->sched.waiting.head; g; g = g->next)
        for (int i = 0; i < g->n; i++)
            waiting += !g->seqs[i].finished;
    atomic_store(&e->st_running, running);
    atomic_store(&e->st_waiting, waiting);
    atomic_store(&e->st_waiting_groups, e->sched.waiting.n_groups);
    atomic_store(&e->st_preemptions, e->sched.n_preemptions);
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
    if (e->tiers_on && e->restore.disk_on)
        disk_tier_stats(&e->restore.dt, &e->disk_snapshot);
    if (e->tiers_on && e->restore.host_on)
        e->host_snapshot = e->restore.ht.st;
    pthread_mutex_unlock(&e->stats_mu);
}

/* Whether a request's rows are sampled on the device (on a backend that samples): a
 * property of the request (and the engine's settings) alone, so that its tokens never
 * depend on the batch. */
static bool engine_on_device(const struct hearth_engine *e, const struct group *g)
{
    return !e->logits_hook && !g->grammar && !g->prompt_lp && dev_sample_allowed(&g->sp) &&
           (e->ds_all || g->sp.temperature < SAMPLER_GREEDY_EPS);
}

/* The plan's row i as the piece of logits rows [c0, c0 + cn) sees it: its sequence,
 * or NULL when none of its logits rows are in the piece; else its rows [*lo, *hi) there
 * and *last: it samples from the piece's row *hi - 1 (its last logits are in it). */
static struct seq *engine_piece_row(const struct hearth_engine *e, const struct sched_plan *plan, int i, int c0,
                                    int cn, int *lo, int *hi, bool *last)
{
    const struct sched_row *pr = &plan->rows[i];
    const struct batch_row *br = &e->batch.rows[i];
    int nl = pr->all_logits ? pr->query_len : pr->sample ? 1 : 0;
    *lo = br->logit_offset > c0 ? br->logit_offset : c0;
    *hi = br->logit_offset + nl < c0 + cn ? br->logit_offset + nl : c0 + cn;
    *last = pr->sample && *lo < *hi && *hi == br->logit_offset + nl;
    return *lo < *hi ? pr->s : NULL;
}

/* The piece's pure rows that the host samples, at once on the sampling threads;
 * rowp[j]: logits row c0 + j on the host (NULL: not brought over). */
static void engine_presample(struct hearth_engine *e, const struct sched_plan *plan, int c0, int cn,
                             float *const *rowp, const int *dev_idx)
{
    struct sample_rows *sr = &e->srows;
    sample_rows_reset(sr);
    for (int i = 0; i < plan->n_rows && i < sr->cap; i++) {
        int lo, hi;
        bool last;
        struct seq *s = engine_piece_row(e, plan, i, c0, cn, &lo, &hi, &last);
        /* pure: no grammar, not a fork's first sampling */
        if (!s || !last || dev_idx[i] >= 0 || s->gram || !(s->g->forked || s->g->n == 1))
            continue;
        struct group *g = s->g;
        struct sample_rows_item *it = sample_rows_add(sr, i);
        it->p = &g->sp;
        it->logits = rowp[hi - 1 - c0];
        it->history = s->tokens;
        it->n_prompt = g->n_prompt;
        it->n_generated = s->n_generated;
        it->seq_index = (uint64_t)(g->index_base + s->index);
        it->step = (uint64_t)s->n_generated;
    }
    if (sr->n > 1)
        sample_rows_run(sr);
    else
        sample_rows_reset(sr); /* one row: the engine thread samples it as before */
}

/* On a device with a sample op: the piece's rows whose requests allow it are sampled
 * there (dev_idx[i]: row i's first result, siblings of a fork following), and only the
 * logits rows the host needs (prompt logprobs, the other rows' samples) come over. */
static enum hr_status engine_piece_device(struct hearth_engine *e, const struct sched_plan *plan, int c0, int cn,
                                          float **rowp, int *dev_idx, char *err, size_t errlen)
{
    int V = e->m.cfg.vocab_size;
    float *dlogits;
    enum hr_status st = qwen3_logits_dev(&e->fwd, &e->batch, c0, cn, &dlogits, err, errlen);
    if (st != HR_OK)
        return st;
    dev_sample_reset(&e->ds);
    int32_t host_rows[cn];
    int n_host = 0;
    for (int i = 0; i < plan->n_rows; i++) {
        int lo, hi;
        bool last;
        struct seq *s = engine_piece_row(e, plan, i, c0, cn, &lo, &hi, &last);
        if (!s)
            continue;
        struct group *g = s->g;
        if (last && engine_on_device(e, g)) {
            int row = hi - 1 - c0, at = -1;
            if (!g->forked && g->n > 1) {
                /* the fork: every sibling samples this row with its own key, as it will
                 * have sample 0's prompt as its history */
                for (int k = 0; k < g->n && st == HR_OK; k++) {
                    int idx; /* consecutive: at + k */
                    st = dev_sample_add(&e->ds, &g->sp, row, s->tokens, g->n_prompt, 0,
                                        (uint64_t)(g->index_base + g->seqs[k].index), 0, &idx, err, errlen);
                    if (k == 0)
                        at = idx;
                }
            } else {
                st = dev_sample_add(&e->ds, &g->sp, row, s->tokens, g->n_prompt, s->n_generated,
                                    (uint64_t)(g->index_base + s->index), (uint64_t)s->n_generated, &at, err,
                                    errlen);
            }
            if (st != HR_OK)
                return st;
            dev_idx[i] = at;
            continue;
        }
        for (int j = lo; j < hi; j++)
            host_rows[n_host++] = j - c0;
    }
    st = dev_sample_run(&e->ds, &e->be, dlogits, err, errlen);
    if (st == HR_OK && n_host > 0) {
        void *host;
        st = e->be.ops->to_host_rows(&e->be, dlogits, V, host_rows, n_host, &host, err, errlen);
        for (int k = 0; st == HR_OK && k < n_host; k++)
            rowp[host_rows[k]] = (float *)host + (int64_t)k * V;
    }
    return st;
}

/* The step's logits rows, a piece at a time in the forward's scratch (whatever room
 * the residual stream leaves: ENGINE_LOGIT_ROWS rows at least), each piece brought to
 * the host (or sampled on the device), scored and sampled before the next is computed.
 * So no logits buffer grows with max_num_seqs, and a row's events keep their order (its
 * prompt logprobs, then its sample).  A piece the backend fails to compute fails the
 * step's rows. */
static enum hr_status engine_logits(struct hearth_engine *e, const struct sched_plan *plan, char *err, size_t errlen)
{
    const struct batch *b = &e->batch;
    int V = e->m.cfg.vocab_size;
    if (b->n_logits == 0)
        return HR_OK;
    int piece = qwen3_scratch_logit_rows(&e->fwd);
    HR_ASSERT(piece >= ENGINE_LOGIT_ROWS);
    if (e->hook_logit_rows > 0 && piece > e->hook_logit_rows)
        piece = e->hook_logit_rows;
    if (piece > b->n_logits)
        piece = b->n_logits;
    float *rowp[piece];
    int dev_idx[plan->n_rows];
    /* (a test's fault wrapper hides the ops) */
    bool dev = e->ds_on && e->be.ops->sample && e->be.ops->to_host_rows;
    for (int c0 = 0; c0 < b->n_logits; c0 += piece) {
        int cn = b->n_logits - c0 < piece ? b->n_logits - c0 : piece;
        for (int i = 0; i < plan->n_rows; i++)
            dev_idx[i] = -1;
        enum hr_status st;
        if (dev) {
            for (int j = 0; j < cn; j++)
                rowp[j] = NULL;
            st = engine_piece_device(e, plan, c0, cn, rowp, dev_idx, err, errlen);
        } else {
            float *logits;
            st = qwen3_logits_host(&e->fwd, b, c0, cn, &logits, err, errlen);
            for (int j = 0; st == HR_OK && j < cn; j++)
                rowp[j] = logits + (int64_t)j * V;
        }
        if (st != HR_OK)
            return st;
        step_prof_mark(&e->prof, STEP_PROF_LOGITS);
        if (e->srows_on)
            engine_presample(e, plan, c0, cn, rowp, dev_idx);
        for (int i = 0; i < plan->n_rows; i++) {
            int lo, hi;
            bool last;
            struct seq *s = engine_piece_row(e, plan, i, c0, cn, &lo, &hi, &last);
            if (!s)
                continue;
            struct group *g = s->g;
            const struct batch_row *br = &b->rows[i];
            if (dev_idx[i] >= 0) {
                /* sampled on the device: only the results came back */
                struct sampler_result r;
                if (!g->forked && g->n > 1) {
                    engine_fork(e, g);
                    for (int k = 0; k < g->n; k++) {
                        dev_sample_result(&e->ds, dev_idx[i] + k, &r);
                        engine_accept(e, &g->seqs[k], &r);
                    }
                } else {
                    dev_sample_result(&e->ds, dev_idx[i], &r);
                    engine_accept(e, s, &r);
                }
                continue;
            }
            if (plan->rows[i].all_logits) /* host rows of a row lie one after another */
                engine_prompt_logprobs(e, s, br->context_len + (lo - br->logit_offset), hi - lo, rowp[lo - c0]);
            if (!last)
                continue;
            /* The row's last logits (rows with every token's logits end with them). */
            float *lg = rowp[hi - 1 - c0];
            if (e->logits_hook)
                e->logits_hook(e->logits_hook_ctx, i, lg, V);
            const struct sampler_result *pre = e->srows_on ? sample_rows_result(&e->srows, i) : NULL;
            if (!g->forked && g->n > 1) {
                engine_fork(e, g);
                for (int k = 0; k < g->n; k++)
                    engine_sample(e, &g->seqs[k], lg);
            } else if (pre) {
                struct sampler_result r = *pre;
                engine_accept(e, s, &r);
            } else {
                engine_sample(e, s, lg);
            }
        }
        step_prof_mark(&e->prof, STEP_PROF_SAMPLE);
    }
    return HR_OK;
}

/* Ends the groups of the plan's rows that still run with the step's error. */
static void engine_fail_rows(struct hearth_engine *e, const struct sched_plan *plan, const char *err)
{
    log_error("step failed: %s", err);
    /* A group may have several rows (n > 1): collect each once before any is freed. */
    struct group *groups[plan->n_rows];
    int n = 0;
    for (int i = 0; i < plan->n_rows; i++) {
        struct group *g = plan->rows[i].s->g;
        if (g->state == GROUP_STATE_RUNNING && !g->failing) {
            g->failing = true;
            groups[n++] = g;
        }
    }
    for (int i = 0; i < n; i++)
        engine_end_group(e, groups[i], &e->sched.running, HEARTH_FINISH_ERROR, err);
}

bool engine_step(struct hearth_engine *e)
{
    step_prof_begin(&e->prof);
    engine_intake(e);
    struct batch *b = &e->batch;
    batch_reset(b);
    struct sched_row rows_buf[e->p.max_num_seqs];
    struct sched_plan plan = {.rows = rows_buf, .batch = b};
    sched_plan(&e->sched, &plan);
    if (plan.n_rows == 0) {
        engine_publish_stats(e);
        return false;
    }
    /* whether every row is one generated token: the profile's and the step info's kind of step */
    bool decode_only = true;
    for (int i = 0; i < plan.n_rows && decode_only; i++)
        decode_only = plan.rows[i].query_len == 1 && plan.rows[i].s->committed >= plan.rows[i].s->g->n_prompt;
    step_prof_kind(&e->prof, decode_only, plan.n_rows);
    step_prof_mark(&e->prof, STEP_PROF_PLAN);

    char err[HR_ERRLEN];
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
    step_prof_mark(&e->prof, STEP_PROF_BATCH);
    if (st == HR_OK) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = qwen3_forward(&e->fwd, b, &e->kv, NULL, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        step_prof_mark(&e->prof, STEP_PROF_FORWARD);
        e->last_step = (struct engine_step_info){
            .n_rows = b->n_rows, .n_tok = b->n_tok, .query_len = b->rows[0].query_len,
            .context_len = b->rows[0].context_len, .kv_len = b->rows[0].kv_len,
            .forward_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec),
            .decode_only = decode_only};
    }
    atomic_fetch_add(&e->st_steps, 1);

    if (st != HR_OK) {
        /* Nothing was committed: end the groups of this batch with the error. */
        engine_fail_rows(e, &plan, err);
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
    step_prof_mark(&e->prof, STEP_PROF_COMMIT);
    /* The KV of the step is in the store and published (the forward succeeded); a
     * failure computing the logits ends the step's requests, not the cache's blocks. */
    if (engine_logits(e, &plan, err, sizeof err) != HR_OK)
        engine_fail_rows(e, &plan, err);
    for (struct group *g = e->sched.running.head, *next; g; g = next) {
        next = g->next;
        if (group_all_finished(g))
            engine_done(e, g, &e->sched.running);
    }
    engine_publish_stats(e);
    step_prof_mark(&e->prof, STEP_PROF_DONE);
    return true;
}

/* ------------------------------------------------------------------ thread */

void engine_count_stalled(struct hearth_engine *e)
{
    atomic_fetch_add(&e->st_stalled, 1);
}

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
        while (!e->stopping && !e->incoming.head && !e->sched.running.head && !e->sched.waiting.head &&
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

/* What every prefix-cache namespace of this engine shares: the model, the KV dtype,
 * the block size and the kernel variant (the epoch and the salt come on top). */
static void engine_namespace_desc(const struct hearth_engine *e, char desc[PREFIX_NS_DESC_MAX])
{
    snprintf(desc, PREFIX_NS_DESC_MAX, "%016llx|%s|%d|%s", (unsigned long long)e->fingerprint,
             kv_dtype_name(e->kv.dtype), e->kv.block_size, e->be.name);
}

static uint64_t engine_namespace_base(const struct hearth_engine *e)
{
    char desc[PREFIX_NS_DESC_MAX];
    engine_namespace_desc(e, desc);
    return XXH3_64bits(desc, strlen(desc));
}

/* --kv-cache-host-mib is host memory allocated whole at start-up: more than the
 * machine has is a mistake, said at once rather than by the allocator. */
static enum hr_status engine_host_bytes_check(size_t bytes, char *err, size_t errlen)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!bytes || pages <= 0 || page <= 0)
        return HR_OK;
    uint64_t total = (uint64_t)pages * (uint64_t)page;
    if ((uint64_t)bytes > total)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "--kv-cache-host-mib %zu: more than this machine's memory (%llu MiB)", bytes >> 20,
                      (unsigned long long)(total >> 20));
    return HR_OK;
}

/* The disk tier's reads wake the engine thread (a group may now be admitted). */
static void engine_wake_cb(void *ctx) { engine_wake(ctx); }

/* ------------------------------------------------------------------ init / free */

/* The KV store at its budget (given, or from the available memory), then
 * max_model_len for it. */
static enum hr_status engine_kv_init(struct hearth_engine *e, enum kv_dtype kvd, char *err, size_t errlen)
{
    const struct hearth_engine_params *p = &e->p;
    const struct model_config *c = &e->m.cfg;
    size_t budget = p->kv_cache_bytes;
    size_t dev_free = 0, dev_total = 0;
    enum hr_status mst = e->be.ops->mem_info(&e->be, &dev_free, &dev_total, err, errlen);
    if (mst != HR_OK)
        return mst;
    if (budget == 0 && dev_total > 0) {
        /* a device: the weights and scratch are in by now (engine_create), the pool
         * takes what is left of the fraction */
        int len = p->max_model_len > 0 ? p->max_model_len : c->max_position_embeddings;
        enum hr_status st = kv_budget_device(
            dev_total, dev_free, p->gpu_memory_utilization > 0 ? p->gpu_memory_utilization : KV_BUDGET_DEFAULT_GPU_UTILIZATION,
            model_kv_bytes_per_token(c, kvd), (uint64_t)len * (uint64_t)p->max_num_seqs + (uint64_t)p->block_size,
            &budget, err, errlen);
        if (st != HR_OK)
            return st;
    } else if (budget == 0) {
        uint64_t avail;
        enum hr_status st = kv_budget_mem_available(&avail, err, errlen);
        int len = p->max_model_len > 0 ? p->max_model_len : c->max_position_embeddings;
        if (st == HR_OK)
            st = kv_budget_auto(avail, (uint64_t)e->m.w.weight_bytes,
                                p->kv_cache_fraction > 0 ? p->kv_cache_fraction : KV_BUDGET_DEFAULT_FRACTION,
                                model_kv_bytes_per_token(c, kvd),
                                (uint64_t)len * (uint64_t)p->max_num_seqs + (uint64_t)p->block_size, &budget, err,
                                errlen);
        if (st != HR_OK)
            return st;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    enum hr_status st = model_kv_init(&e->kv, &e->be, c, kvd, p->block_size, budget, err, errlen);
    if (st != HR_OK)
        return st;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    log_info("engine: KV pool of %.1f MiB, %lld tokens (%s) allocated in %.3f s",
             (double)e->kv.n_blocks * (double)e->kv.block_bytes / 1048576.0,
             (long long)e->kv.n_blocks * e->kv.block_size,
             p->kv_cache_bytes ? "--kv-cache-mib"
             : dev_total       ? "--gpu-memory-utilization of the device's memory"
                               : "from the available memory",
             (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    int lowered = 0;
    st = kv_budget_max_model_len(p->max_model_len, c->max_position_embeddings,
                                 (int64_t)e->kv.n_blocks * e->kv.block_size, &e->max_model_len, &lowered, err, errlen);
    if (st == HR_OK && lowered)
        log_info("engine: max_model_len %d (the model's context %d is more than the KV pool's %lld tokens; "
                 "--kv-cache-mib raises it)",
                 e->max_model_len, c->max_position_embeddings, (long long)e->kv.n_blocks * e->kv.block_size);
    return st;
}

/* The 0.6B's 256 rows: 157 MB of device memory, taken from the KV pool sized after it. */
int engine_logit_rows(const struct backend *be, int max_num_seqs)
{
    int rows = ENGINE_LOGIT_ROWS;
    if (be->ops->sample) {
        const int all = max_num_seqs < ENGINE_DEVICE_LOGIT_ROWS ? max_num_seqs : ENGINE_DEVICE_LOGIT_ROWS;
        rows = all > rows ? all : rows;
    }
    return rows;
}

/* The forward: the backend sized for steps of max_batched_tokens at contexts up to
 * the user's --max-model-len (the pool, sized after this, can only lower it; a device's
 * attention workspace grows with the context), the weights bound, the scratch with
 * room for the logits rows. */
static enum hr_status engine_forward_init(struct hearth_engine *e, char *err, size_t errlen)
{
    /* 0 (not given) or above the model's context: the backend takes the model's */
    enum hr_status st = qwen3_init(&e->fwd, &e->m, &e->be, e->p.max_batched_tokens, e->p.max_model_len, err, errlen);
    if (st == HR_OK)
        st = qwen3_reserve_logits(&e->fwd, engine_logit_rows(&e->be, e->p.max_num_seqs), err, errlen);
    return st;
}

enum hr_status engine_create(struct hearth_engine **out, const struct hearth_engine_params *p, bool start_thread,
                             char *err, size_t errlen)
{
    *out = NULL;
    if (!p->model_dir)
        return hr_err(err, errlen, HR_ERR_INVALID, "engine: no model directory");
    /* Threads are the backend's to check, the block size the KV store's. */
    if (p->max_num_seqs < 1 || p->max_batched_tokens < 0)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "engine: max_num_seqs must be >= 1 and max_batched_tokens >= 1 (0: the backend's default)");
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
    e->sched.max_wait_steps = p->max_wait_steps > 0 ? p->max_wait_steps : 32;
    step_prof_init(&e->prof);
    e->sched.order = SCHED_ORDER_LPM;

    enum kv_dtype kvd = KV_DTYPE_BF16;
    enum hr_status st = kv_dtype_parse(p->kv_dtype ? p->kv_dtype : "bf16", &kvd, err, errlen);
    if (st == HR_OK && p->schedule && strcmp(p->schedule, "lpm") != 0) {
        if (!strcmp(p->schedule, "fcfs"))
            e->sched.order = SCHED_ORDER_FCFS;
        else
            st = hr_err(err, errlen, HR_ERR_INVALID, "--schedule must be lpm or fcfs, got '%s'", p->schedule);
    }
    if (st == HR_OK) {
        safetensors_set_read_into_memory(p->no_mmap);
        st = model_load_format_parse(p->load_format, &e->load_format, err, errlen);
        if (st == HR_OK)
            st = model_load_as(&e->m, e->model_dir, e->load_format, err, errlen);
        safetensors_set_read_into_memory(false);
    }
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
    struct backend_opts bo = {.n_threads = p->n_threads, .kernel = p->kernel, .compute = p->compute,
                              .enforce_eager = p->enforce_eager};
    if (st == HR_OK)
        st = backend_create(&e->be, p->device, &bo, err, errlen);
    /* A GPU's step is worth more tokens: at 512 a 2,048-token prompt ran as four chunks
     * of GEMMs at m = 512, and 256 concurrent prompts took most steps (H200, 0.6B, 256 x
     * (512 + 128): 3,245 -> 5,014 generated tok/s at 2,048; bench/notes/cuda.md). */
    if (st == HR_OK && e->p.max_batched_tokens == 0)
        e->p.max_batched_tokens = strcmp(e->be.device, "cpu") ? ENGINE_MAX_TOK_DEVICE : ENGINE_MAX_TOK_HOST;
    /* A device's pool takes what the weights and scratch leave of its memory: they go
     * first there; on the host the pool comes first, as it always has. */
    size_t dev_free = 0, dev_total = 0;
    if (st == HR_OK)
        st = e->be.ops->mem_info(&e->be, &dev_free, &dev_total, err, errlen);
    bool forward_first = dev_total > 0;
    if (st == HR_OK && forward_first)
        st = engine_forward_init(e, err, errlen);
    if (st == HR_OK)
        st = engine_kv_init(e, kvd, err, errlen);
    if (st == HR_OK)
        st = block_pool_init(&e->pool, e->kv.n_blocks, err, errlen);
    if (st == HR_OK)
        st = model_fingerprint(&e->m, &e->fingerprint, err, errlen);
    if (st == HR_OK && p->prefix_cache) {
        st = prefix_cache_init(&e->pc, &e->pool, p->block_size,
                               p->prefix_cache_max_entries > 0 ? p->prefix_cache_max_entries : e->kv.n_blocks,
                               engine_namespace_base(e), err, errlen);
        e->pc_on = st == HR_OK;
        char desc[PREFIX_NS_DESC_MAX];
        engine_namespace_desc(e, desc);
        prefix_cache_set_ns_desc(&e->pc, desc);
    }
    bool disk = p->kv_cache_dir && *p->kv_cache_dir;
    if (st == HR_OK && (disk || p->kv_cache_host_bytes)) {
        struct kv_restore_opts ro = {
            .disk_dir = disk ? p->kv_cache_dir : NULL,
            .disk_quota = p->kv_cache_disk_bytes ? p->kv_cache_disk_bytes : (uint64_t)1 << 30,
            .host_bytes = p->kv_cache_host_bytes};
        if (!e->pc_on)
            st = hr_err(err, errlen, HR_ERR_INVALID, "%s needs the prefix cache (--prefix-cache on)",
                        disk ? "--kv-cache-dir" : "--kv-cache-host-mib");
        else
            st = engine_host_bytes_check(p->kv_cache_host_bytes, err, errlen);
        if (st == HR_OK)
            st = kv_restore_init(&e->restore, &ro, &e->pc, &e->be, &e->kv, !start_thread, engine_wake_cb, e, err,
                                 errlen);
        e->tiers_on = st == HR_OK;
        if (e->tiers_on && e->restore.host_on)
            log_info("engine: host tier of %.1f MiB: %d blocks of %.1f KiB (%s)",
                     (double)e->restore.host_arena_bytes / 1048576.0, e->restore.ht.n_slots,
                     (double)e->kv.block_bytes / 1024.0, e->be.device);
        if (e->tiers_on && e->restore.disk_on)
            log_info("engine: disk tier in %s: %lld block files (%.1f MiB) of at most %.1f MiB", p->kv_cache_dir,
                     (long long)e->restore.dt.st.files, (double)e->restore.dt.st.bytes / 1048576.0,
                     (double)e->restore.dt.quota / 1048576.0);
    }
    e->p.kv_cache_dir = NULL; /* borrowed: the tier keeps its own copy */
    e->sched.pool = &e->pool;
    e->sched.pc = e->pc_on ? &e->pc : NULL;
    e->sched.restore = e->tiers_on ? &e->restore : NULL;
    e->sched.block_size = p->block_size;
    e->sched.max_num_seqs = p->max_num_seqs;
    e->sched.max_batched_tokens = e->p.max_batched_tokens;
    if (st == HR_OK && !forward_first)
        st = engine_forward_init(e, err, errlen);
    if (st == HR_OK)
        st = batch_init(&e->batch, p->block_size, p->max_num_seqs, e->p.max_batched_tokens, err, errlen);
    if (st == HR_OK)
        st = sampler_scratch_init(&e->ss, e->m.cfg.vocab_size, err, errlen);
    /* On a device the host threads are free while the card computes: they sample the
     * step's rows (on the CPU they are the kernels' threads, busy with the forward) */
    if (st == HR_OK && strcmp(e->be.device, "cpu") != 0)
        st = engine_sample_threads(e, p->n_threads < 32 ? p->n_threads : 32, err, errlen);
    /* a device that samples: the rows that allow it never bring their logits over */
    if (st == HR_OK && !p->no_device_sampling)
        st = engine_dev_sampling(e, true, err, errlen);
    e->ds_all = !p->device_sampling_greedy_only;
    if (st == HR_OK && e->ds_on)
        log_info("engine: sampling on the %s (%s requests without a grammar or prompt logprobs; "
                 "--no-device-sampling: on the host)", e->be.device, e->ds_all ? "all" : "greedy");
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

enum hr_status engine_sample_threads(struct hearth_engine *e, int n_threads, char *err, size_t errlen)
{
    if (e->srows_on)
        sample_rows_free(&e->srows);
    e->srows_on = false;
    if (n_threads < 2)
        return HR_OK;
    enum hr_status st = sample_rows_init(&e->srows, n_threads, e->m.cfg.vocab_size, e->batch.max_rows, err, errlen);
    e->srows_on = st == HR_OK;
    return st;
}

enum hr_status engine_dev_sampling(struct hearth_engine *e, bool on, char *err, size_t errlen)
{
    if (e->ds_on)
        dev_sample_free(&e->ds);
    e->ds_on = false;
    if (!on || !e->be.ops->sample || !e->be.ops->to_host_rows)
        return HR_OK;
    enum hr_status st = dev_sample_init(&e->ds, e->m.cfg.vocab_size, e->batch.max_rows, err, errlen);
    e->ds_on = st == HR_OK;
    return st;
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
    step_prof_log(&e->prof);
    engine_detach_all(e, &e->incoming);
    engine_detach_all(e, &e->sched.waiting);
    engine_detach_all(e, &e->sched.running);
    /* A clean shutdown keeps every cached block for the next start. */
    if (e->tiers_on)
        kv_restore_flush(&e->restore);
    if (e->pc_on)
        prefix_cache_free(&e->pc);
    if (e->tiers_on)
        kv_restore_free(&e->restore);
    sampler_scratch_free(&e->ss);
    if (e->srows_on)
        sample_rows_free(&e->srows);
    if (e->ds_on)
        dev_sample_free(&e->ds);
    grammar_cache_free(&e->gcache);
    batch_free(&e->batch);
    qwen3_free(&e->fwd);
    block_pool_free(&e->pool);
    model_kv_free(&e->kv, &e->be);
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

const struct engine_step_info *engine_last_step(const struct hearth_engine *e) { return &e->last_step; }

void engine_set_logits_hook(struct hearth_engine *e, void (*fn)(void *ctx, int row, const float *logits, int vocab),
                            void *ctx)
{
    e->logits_hook = fn;
    e->logits_hook_ctx = ctx;
}

int engine_max_block_refcount(const struct hearth_engine *e)
{
    int m = 0;
    for (int i = 0; i < block_pool_capacity(&e->pool); i++) {
        int r = block_pool_refcount(&e->pool, i);
        m = r > m ? r : m;
    }
    return m;
}

size_t engine_kv_bytes(const struct hearth_engine *e) { return kv_store_slab_bytes(&e->kv); }

size_t engine_kv_bytes_per_token(const struct hearth_engine *e)
{
    return model_kv_bytes_per_token(&e->m.cfg, e->kv.dtype);
}

int engine_demote_cached(struct hearth_engine *e)
{
    return e->pc_on ? prefix_cache_evict(&e->pc, block_pool_capacity(&e->pool)) : 0;
}

const struct model *engine_model(const struct hearth_engine *e) { return &e->m; }

const struct backend *engine_backend(const struct hearth_engine *e) { return &e->be; }

enum hr_status engine_inject_fault(struct hearth_engine *e, int64_t step, int op, char *err, size_t errlen)
{
    if (!backend_is_fault(&e->be)) {
        enum hr_status st = backend_fault_wrap(&e->be, err, errlen);
        if (st != HR_OK)
            return st;
    }
    backend_fault_arm(&e->be, step, op);
    return HR_OK;
}

void hearth_engine_model_info(const struct hearth_engine *e, struct hearth_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->model_dir = e->model_dir;
    out->vocab_size = e->m.cfg.vocab_size;
    out->max_context = e->m.cfg.max_position_embeddings;
    out->max_model_len = e->max_model_len;
    out->kv_pool_tokens = (int64_t)e->kv.n_blocks * e->kv.block_size;
    out->block_size = e->kv.block_size;
    out->max_num_seqs = e->p.max_num_seqs;
    out->n_threads = e->p.n_threads;
    out->kernel = e->be.name;
    out->kv_dtype = e->p.kv_dtype;
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
    out->requests_stalled = atomic_load(&e->st_stalled);
    pthread_mutex_lock(&e->stats_mu);
    out->prefix_cache = e->pc_snapshot;
    out->disk_cache = e->disk_snapshot;
    out->host_cache = e->host_snapshot;
    pthread_mutex_unlock(&e->stats_mu);
}
