/* Server lifecycle (see server.h). */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "server/http.h"
#include "server/job.h"
#include "server/responses.h"

void server_config_default(struct server_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    hearth_engine_params_default(&c->engine);
    c->max_n = 16;
    c->max_prompts = 64;
    c->max_body_bytes = 8u << 20;
    c->max_response_bytes = (size_t)64 << 20;
    c->max_unsent_bytes = (size_t)4 << 20;
    c->head_timeout_s = 60;
    c->max_conns_per_client = 256;
    c->shutdown_grace_ms = 10000;
    c->connection_limit = 1024;
    c->idle_timeout_s = 300;
    c->keepalive_timeout_s = 75; /* nginx's keepalive_timeout */
    c->tool_calls_qwen3 = true;
}

/* ---------------------------------------------------------------- model facts */

/* Reads the chat template and the model facts into s (caller holds the write lock). */
static void server_load_model_facts(struct server *s, struct hearth_engine *e)
{
    hearth_engine_model_info(e, &s->info);
    if (s->has_tmpl)
        chat_template_model_free(&s->tmpl);
    s->has_tmpl = false;
    if (chat_template_model_load(&s->tmpl, s->model_dir, s->tmpl_err, sizeof s->tmpl_err) == HR_OK) {
        s->has_tmpl = true;
        s->tmpl_err[0] = 0;
    } else {
        log_warn("serve: no chat template, /v1/chat/completions will refuse requests: %s", s->tmpl_err);
    }
    XXH3_state_t *st = XXH3_createState();
    uint64_t h = 0;
    if (st) {
        XXH3_64bits_reset(st);
        XXH3_64bits_update(st, s->model_dir, strlen(s->model_dir));
        int facts[4] = {s->info.vocab_size, s->info.max_context, s->cfg.engine.block_size, 0};
        XXH3_64bits_update(st, facts, sizeof facts);
        const char *kv = s->cfg.engine.kv_dtype ? s->cfg.engine.kv_dtype : "bf16";
        XXH3_64bits_update(st, kv, strlen(kv));
        h = XXH3_64bits_digest(st);
        XXH3_freeState(st);
    }
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%012llx", (unsigned long long)(h & 0xffffffffffffULL));
}

static void *server_loader(void *arg)
{
    struct server *s = arg;
    struct hearth_engine *e = NULL;
    char err[HR_ERRLEN];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    enum hr_status st = hearth_engine_init(&e, &s->cfg.engine, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != HR_OK) {
        snprintf(s->load_err, sizeof s->load_err, "%s", err);
        log_error("serve: the model failed to load: %s", err);
        int expect = SERVER_STATE_LOADING;
        atomic_compare_exchange_strong(&s->state, &expect, SERVER_STATE_FAILED);
        return NULL;
    }
    pthread_rwlock_wrlock(&s->model_lock);
    server_load_model_facts(s, e);
    pthread_rwlock_unlock(&s->model_lock);
    s->engine = e;
    int expect = SERVER_STATE_LOADING;
    atomic_compare_exchange_strong(&s->state, &expect, SERVER_STATE_READY);
    log_info("serve: model %s loaded in %.1f s (vocab %d, context %d, chat template %s)", s->model_name,
             (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, s->info.vocab_size,
             s->info.max_context, s->has_tmpl ? "yes" : "no");
    /* the start-up summary: what this server will do with the machine */
    const char *dash = s->info.kernel ? strchr(s->info.kernel, '-') : NULL;
    log_info("serve: device %.*s, kernel %s, %d threads; KV pool %lld tokens (%lld blocks of %d, %s); "
             "max_model_len %d; max_num_seqs %d",
             dash ? (int)(dash - s->info.kernel) : 3, dash ? s->info.kernel : "cpu",
             s->info.kernel ? s->info.kernel : "?", s->info.n_threads, (long long)s->info.kv_pool_tokens,
             (long long)(s->info.block_size > 0 ? s->info.kv_pool_tokens / s->info.block_size : 0), s->info.block_size,
             s->info.kv_dtype ? s->info.kv_dtype : "?", s->info.max_model_len, s->info.max_num_seqs);
    return NULL;
}

/* ---------------------------------------------------------------- start */

static char *server_base_name(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    return strndup(dir + b, n - b);
}

enum hr_status server_start(struct server **out, const struct server_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->engine.model_dir || !*cfg->engine.model_dir)
        return hr_err(err, errlen, HR_ERR_INVALID, "--model DIR is required");
    if (cfg->max_n < 1 || cfg->max_prompts < 1 || cfg->max_body_bytes < 1 || cfg->connection_limit < 1 ||
        cfg->idle_timeout_s < 1 || cfg->max_response_bytes < 1 || cfg->max_unsent_bytes < 1 ||
        cfg->head_timeout_s < 1 || cfg->max_conns_per_client < 1 || cfg->keepalive_timeout_s < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "server limits must be positive");
    if (cfg->instance_name && !metrics_instance_valid(cfg->instance_name))
        return hr_err(err, errlen, HR_ERR_INVALID, "--instance-name must be 1..%d characters of [A-Za-z0-9._:-]",
                      METRICS_INSTANCE_MAX);
    struct server *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_dir = strdup(cfg->engine.model_dir);
    s->model_name = cfg->served_model_name && *cfg->served_model_name ? strdup(cfg->served_model_name)
                                                                       : server_base_name(cfg->engine.model_dir);
    if (!s->host || !s->model_dir || !s->model_name) {
        free(s->host);
        free(s->model_dir);
        free(s->model_name);
        free(s);
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    }
    s->cfg.host = s->host;
    s->cfg.engine.model_dir = s->model_dir;
    s->cfg.served_model_name = s->model_name;
    s->cfg.api_keys = NULL;
    s->cfg.admin_api_keys = NULL;
    s->cfg.allowed_origins = s->cfg.allowed_methods = s->cfg.allowed_headers = NULL; /* parsed into s->cors */
    s->model_names[0] = s->model_name;
    s->model_names[1] = s->model_dir;
    s->started = (int64_t)time(NULL);
    atomic_init(&s->state, SERVER_STATE_LOADING);
    pthread_rwlock_init(&s->model_lock, NULL);
    enum hr_status st = metrics_init(&s->metrics, err, errlen);
    if (st == HR_OK)
        metrics_set_instance(&s->metrics, cfg->instance_name);
    if (st == HR_OK)
        st = auth_init(&s->auth, cfg->api_keys, cfg->n_api_keys, cfg->admin_api_keys, cfg->n_admin_api_keys,
                       cfg->salt_per_key, err, errlen);
    if (st == HR_OK)
        st = cors_init(&s->cors, cfg->allowed_origins, cfg->allowed_methods, cfg->allowed_headers,
                       cfg->allow_credentials, err, errlen);
    if (st == HR_OK && !(s->responses = responses_store_new()))
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    if (st == HR_OK)
        st = http_start(&s->http, s, s->host, cfg->port, cfg->connection_limit, cfg->idle_timeout_s,
                           cfg->keepalive_timeout_s, err, errlen);
    if (st == HR_OK) {
        if (pthread_create(&s->loader, NULL, server_loader, s) != 0)
            st = hr_err(err, errlen, HR_ERR_INTERNAL, "cannot start the model loader thread");
        else
            s->loader_started = true;
    }
    if (st != HR_OK) {
        server_free(s);
        return st;
    }
    *out = s;
    return HR_OK;
}

int server_port(const struct server *s)
{
    return http_port(s->http);
}

enum server_state server_get_state(const struct server *s)
{
    return (enum server_state)atomic_load(&((struct server *)s)->state);
}

struct hearth_engine *server_engine(struct server *s)
{
    int st = atomic_load(&s->state);
    return st == SERVER_STATE_READY || st == SERVER_STATE_STOPPING ? s->engine : NULL;
}

enum hr_status server_reload(struct server *s, char *err, size_t errlen)
{
    struct hearth_engine *e = server_engine(s);
    if (!e)
        return hr_err(err, errlen, HR_ERR_INVALID, "the model is not loaded");
    enum hr_status st = hearth_engine_reload(e, err, errlen);
    if (st != HR_OK)
        return st;
    pthread_rwlock_wrlock(&s->model_lock);
    server_load_model_facts(s, e);
    pthread_rwlock_unlock(&s->model_lock);
    log_info("serve: reloaded %s", s->model_dir);
    return HR_OK;
}

void server_make_id(struct server *s, const char *prefix, char *out, size_t n)
{
    uint64_t r[2];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* no entropy yet: a counter mixed with the clock is unique enough for ids */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t k[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, atomic_fetch_add(&s->id_counter, 1)};
        r[0] = XXH3_64bits(k, sizeof k);
        r[1] = XXH3_64bits_withSeed(k, sizeof k, 1);
    }
    snprintf(out, n, "%s%016llx%016llx", prefix, (unsigned long long)r[0], (unsigned long long)r[1]);
}

/* ---------------------------------------------------------------- stop */

static bool server_wait_idle(struct server *s, int ms)
{
    for (int t = 0; atomic_load(&s->active_jobs) > 0; t += 20) {
        if (t >= ms)
            return false;
        usleep(20000);
    }
    return true;
}

void server_stop(struct server *s)
{
    if (!s || !s->http)
        return;
    atomic_store(&s->state, SERVER_STATE_STOPPING);
    http_quiesce(s->http);
    /* The grace period bounds the whole stop: requests may finish in most of it, the rest
     * of it lets the cancelled ones end; then every connection is closed, answered or not
     * (a client that stopped reading holds nobody up). */
    int grace = s->cfg.shutdown_grace_ms;
    int reserve = grace / 5 < 1000 ? grace / 5 : 1000;
    if (!server_wait_idle(s, grace - reserve)) {
        log_info("serve: cancelling %d requests still running", atomic_load(&s->active_jobs));
        atomic_store(&s->cancel_all, true);
        if (!server_wait_idle(s, reserve))
            log_info("serve: closing %d connections still busy", atomic_load(&s->active_jobs));
    }
    atomic_store(&s->cancel_all, true);
    http_stop(s->http);
    s->http = NULL;
    if (s->loader_started) {
        pthread_join(s->loader, NULL);
        s->loader_started = false;
    }
}

void server_free(struct server *s)
{
    if (!s)
        return;
    server_stop(s);
    if (s->loader_started) {
        pthread_join(s->loader, NULL);
        s->loader_started = false;
    }
    hearth_engine_free(s->engine);
    if (s->has_tmpl)
        chat_template_model_free(&s->tmpl);
    auth_free(&s->auth);
    cors_free(&s->cors);
    responses_store_free(s->responses);
    metrics_free(&s->metrics);
    pthread_rwlock_destroy(&s->model_lock);
    free(s->host);
    free(s->model_dir);
    free(s->model_name);
    free(s);
}
