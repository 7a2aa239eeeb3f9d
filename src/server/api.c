/* The endpoints (see api.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "server/endpoints.h"
#include "server/openai.h"
#include "server/peer.h"
#include "server/redact.h"
#include "server/responses.h"

static const struct api_route_info api_routes[] = {
    {"/v1/completions", "POST", API_ROUTE_COMPLETIONS, false, METRICS_ENDPOINT_COMPLETIONS},
    {"/v1/chat/completions", "POST", API_ROUTE_CHAT, false, METRICS_ENDPOINT_CHAT},
    {"/v1/models", "GET", API_ROUTE_MODELS, false, METRICS_ENDPOINT_OTHER},
    {"/health", "GET", API_ROUTE_HEALTH, true, METRICS_ENDPOINT_OTHER},
    {"/metrics", "GET", API_ROUTE_METRICS, true, METRICS_ENDPOINT_OTHER},
    {"/v1/stats", "GET", API_ROUTE_STATS, false, METRICS_ENDPOINT_OTHER},
    {"/v1/prefix_cache/reset", "POST", API_ROUTE_CACHE_RESET, false, METRICS_ENDPOINT_OTHER},
    {"/v1/reload", "POST", API_ROUTE_RELOAD, false, METRICS_ENDPOINT_OTHER},
    {"/v1/models/", "GET", API_ROUTE_MODEL, false, METRICS_ENDPOINT_OTHER},
    {"/tokenize", "POST", API_ROUTE_TOKENIZE, false, METRICS_ENDPOINT_OTHER},
    {"/detokenize", "POST", API_ROUTE_DETOKENIZE, false, METRICS_ENDPOINT_OTHER},
    {"/version", "GET", API_ROUTE_VERSION, true, METRICS_ENDPOINT_OTHER},
    {"/v1/responses", "POST", API_ROUTE_RESPONSES, false, METRICS_ENDPOINT_OTHER},
};

#define API_N_ROUTES ((int)(sizeof api_routes / sizeof api_routes[0]))

const struct api_route_info *api_route_find(const char *path, const char *method, const char **allow)
{
    *allow = NULL;
    for (int i = 0; i < API_N_ROUTES; i++) {
        size_t k = strlen(api_routes[i].path);
        bool prefix = api_routes[i].path[k - 1] == '/';
        if (prefix ? strncmp(path, api_routes[i].path, k) != 0 || !path[k] : strcmp(path, api_routes[i].path) != 0)
            continue;
        /* HEAD is GET without the body (MHD drops it) */
        if (!strcmp(method, api_routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(api_routes[i].method, "GET")))
            return &api_routes[i];
        *allow = api_routes[i].method;
    }
    return NULL;
}

/* ---------------------------------------------------------------- replies */

void api_json(struct api_reply *out, int status, json_t *body)
{
    memset(out, 0, sizeof *out);
    char *s = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":null}}";
        s = strdup(oom);
        status = 500;
    }
    out->status = status;
    out->content_type = "application/json";
    out->body = s;
    out->body_len = s ? strlen(s) : 0;
}

void api_error(struct api_reply *out, int status, const char *message, const char *param, const char *code)
{
    char clean[HR_ERRLEN + 64];
    redact_paths(message ? message : "", clean, sizeof clean);
    api_json(out, status, openai_error_json(status, clean, param, code));
    if (status == 503)
        out->retry_after = 1;
}

void api_reply_free(struct api_reply *r)
{
    if (!r)
        return;
    free(r->body);
    if (r->stream) {
        job_free(r->stream);
        free(r->stream);
    }
    memset(r, 0, sizeof *r);
}

/* The error of a failed parse or job start. */
static void api_status_error(struct api_reply *out, enum hr_status st, const char *param, const char *msg)
{
    int http = openai_http_status(st);
    const char *code = NULL;
    if (st == HR_ERR_NOT_FOUND)
        code = "model_not_found";
    else if (st == HR_ERR_UNSUPPORTED)
        code = "unsupported_value";
    else if (st == HR_ERR_FORMAT)
        code = "invalid_json";
    else if (http == 503)
        code = "server_overloaded";
    api_error(out, http, msg, param, code);
}

/* ---------------------------------------------------------------- generation */

void api_generate(struct server *s, const struct api_call *call, enum openai_endpoint ep,
                  const struct api_hooks *hooks, struct api_reply *out)
{
    enum server_state state = server_get_state(s);
    if (state != SERVER_STATE_READY) {
        api_error(out, 503,
                  state == SERVER_STATE_LOADING ? "the model is still loading; retry shortly"
                  : state == SERVER_STATE_FAILED ? "the model failed to load; see /health"
                                                 : "the server is shutting down",
                  NULL, state == SERVER_STATE_LOADING ? "model_loading" : "server_unavailable");
        return;
    }
    struct openai_limits lim = {
        .model_names = s->model_names,
        .n_model_names = 2,
        .max_n = s->cfg.max_n,
        .max_prompts = s->cfg.max_prompts,
    };
    pthread_rwlock_rdlock(&s->model_lock);
    lim.vocab_size = s->info.vocab_size;
    pthread_rwlock_unlock(&s->model_lock);

    struct openai_request rq;
    char param[128], err[HR_ERRLEN];
    enum hr_status st = openai_request_parse(&rq, ep, call->body, call->body_len, &lim, param, sizeof param, err,
                                             sizeof err);
    if (st != HR_OK) {
        api_status_error(out, st, param, err);
        return;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        openai_request_free(&rq);
        api_error(out, 503, "out of memory", NULL, NULL);
        return;
    }
    st = job_start(j, s, &rq, call->key_index, param, sizeof param, err, sizeof err);
    if (st != HR_OK) {
        job_free(j);
        free(j);
        api_status_error(out, st, param, err);
        return;
    }
    if (hooks && hooks->started)
        hooks->started(j, hooks->ctx);
    if (j->rq.stream) {
        memset(out, 0, sizeof *out);
        out->status = 200;
        out->content_type = "text/event-stream";
        out->stream = j;
        return;
    }
    /* not streamed: wait here (this connection's own thread), watching the client; one
     * that half-closed gets its answer, one that closed is found out by a probe */
    bool probed = false;
    while (!j->finished) {
        enum peer_state ps = peer_state(call->client_fd);
        if (ps == PEER_STATE_HALF_CLOSED && !probed && !call->http10) {
            probed = true;
            if (!peer_probe_interim(call->client_fd))
                ps = PEER_STATE_GONE;
        } else if (ps == PEER_STATE_HALF_CLOSED && call->http10) {
            ps = PEER_STATE_GONE; /* no interim responses in HTTP/1.0: take it as gone */
        }
        if (ps == PEER_STATE_GONE) {
            metrics_count_disconnect(&s->metrics);
            job_cancel(j);
            break;
        }
        if (atomic_load(&s->cancel_all) && !j->cancelled)
            job_cancel(j);
        if (job_abandoned(j))
            break;
        job_pump(j, 100);
    }
    if (!j->finished)
        api_error(out, 499, "the client closed the connection", NULL, NULL);
    else if (j->fail != HR_OK)
        api_error(out, 500, j->fail_msg, NULL, NULL);
    else if (hooks && hooks->body)
        api_json(out, 200, hooks->body(j, hooks->ctx));
    else {
        char err[HR_ERRLEN];
        memset(out, 0, sizeof *out);
        if (job_body_text(j, &out->body, &out->body_len, err, sizeof err) != HR_OK) {
            api_error(out, 500, err, NULL, NULL);
        } else {
            out->status = 200;
            out->content_type = "application/json";
        }
    }
    job_access_usage(j, &out->usage);
    job_free(j);
    free(j);
}

/* ---------------------------------------------------------------- the others */

static const char *api_state_name(enum server_state st)
{
    switch (st) {
    case SERVER_STATE_LOADING: return "loading";
    case SERVER_STATE_READY: return "ok";
    case SERVER_STATE_FAILED: return "failed";
    case SERVER_STATE_STOPPING: return "stopping";
    }
    return "unknown";
}

static void api_health(struct server *s, struct api_reply *out)
{
    enum server_state st = server_get_state(s);
    json_t *o = json_pack("{s:s}", "status", api_state_name(st));
    if (st == SERVER_STATE_FAILED) {
        char clean[HR_ERRLEN];
        redact_paths(s->load_err, clean, sizeof clean);
        json_object_set_new(o, "error", openai_json_string(clean, strlen(clean)));
    }
    api_json(out, st == SERVER_STATE_READY ? 200 : 503, o);
    if (st != SERVER_STATE_READY)
        out->retry_after = 1;
}

static void api_models(struct server *s, struct api_reply *out)
{
    json_t *m = endpoints_model_object(s);
    json_t *o = json_pack("{s:s,s:[o]}", "object", "list", "data", m);
    api_json(out, 200, o);
}

static void api_metrics(struct server *s, struct api_reply *out)
{
    struct strbuf b = {0};
    struct hearth_engine *e = server_engine(s);
    struct hearth_stats st;
    if (e)
        hearth_engine_stats(e, &st);
    metrics_render(&s->metrics, e ? &st : NULL, server_get_state(s) == SERVER_STATE_READY, &b);
    memset(out, 0, sizeof *out);
    out->body = strbuf_take(&b, &out->body_len);
    if (!out->body) {
        api_error(out, 500, "out of memory", NULL, NULL);
        return;
    }
    out->status = 200;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

static void api_stats(struct server *s, struct api_reply *out)
{
    struct hearth_engine *e = server_engine(s);
    if (!e) {
        api_error(out, 503, "the model is not loaded", NULL, "model_loading");
        return;
    }
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    const struct hearth_prefix_cache_stats *pc = &st.prefix_cache;
    json_t *cache = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", pc->enabled,
                              "entries", (json_int_t)pc->entries, "blocks_held", (json_int_t)pc->blocks_held,
                              "open_leases", (json_int_t)pc->open_leases, "lookups_total",
                              (json_int_t)pc->lookups_total, "hits_total", (json_int_t)pc->hits_total, "misses_total",
                              (json_int_t)pc->misses_total, "lookup_tokens_total", (json_int_t)pc->lookup_tokens_total,
                              "hit_tokens_total", (json_int_t)pc->hit_tokens_total, "inserted_blocks_total",
                              (json_int_t)pc->inserted_blocks_total, "evicted_blocks_total",
                              (json_int_t)pc->evicted_blocks_total, "collisions_total",
                              (json_int_t)pc->collisions_total, "invalidations_total",
                              (json_int_t)pc->invalidations_total);
    const struct hearth_disk_cache_stats *dc = &st.disk_cache;
    json_t *disk = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled",
                             dc->enabled, "files", (json_int_t)dc->files, "bytes", (json_int_t)dc->bytes,
                             "quota_bytes", (json_int_t)dc->quota_bytes, "lookups_total",
                             (json_int_t)dc->lookups_total, "hits_total", (json_int_t)dc->hits_total, "misses_total",
                             (json_int_t)dc->misses_total, "hit_blocks_total", (json_int_t)dc->hit_blocks_total,
                             "blocks_restored_total", (json_int_t)dc->blocks_restored_total, "hit_tokens_total",
                             (json_int_t)dc->hit_tokens_total, "read_bytes_total", (json_int_t)dc->read_bytes_total,
                             "written_blocks_total", (json_int_t)dc->written_blocks_total, "written_bytes_total",
                             (json_int_t)dc->written_bytes_total, "write_errors_total",
                             (json_int_t)dc->write_errors_total, "writes_dropped_total",
                             (json_int_t)dc->writes_dropped_total, "files_rejected_total",
                             (json_int_t)dc->files_rejected_total, "files_evicted_total",
                             (json_int_t)dc->files_evicted_total, "pending_reads_total",
                             (json_int_t)dc->pending_reads_total);
    const struct hearth_host_cache_stats *hc = &st.host_cache;
    json_t *host = json_pack(
        "{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "enabled", hc->enabled, "blocks",
        (json_int_t)hc->blocks, "bytes", (json_int_t)hc->bytes, "capacity_blocks", (json_int_t)hc->capacity_blocks,
        "capacity_bytes", (json_int_t)hc->capacity_bytes, "lookups_total", (json_int_t)hc->lookups_total,
        "hits_total", (json_int_t)hc->hits_total, "misses_total", (json_int_t)hc->misses_total,
        "blocks_restored_total", (json_int_t)hc->blocks_restored_total, "hit_tokens_total",
        (json_int_t)hc->hit_tokens_total, "stored_blocks_total", (json_int_t)hc->stored_blocks_total,
        "bytes_in_total", (json_int_t)hc->bytes_in_total, "bytes_out_total", (json_int_t)hc->bytes_out_total,
        "evicted_blocks_total", (json_int_t)hc->evicted_blocks_total, "evicted_to_disk_total",
        (json_int_t)hc->evicted_to_disk_total, "copy_errors_total", (json_int_t)hc->copy_errors_total,
        "mismatches_total", (json_int_t)hc->mismatches_total);
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "status",
                          api_state_name(server_get_state(s)), "model", s->model_name, "active_requests",
                          atomic_load(&s->active_jobs), "blocks_total", st.blocks_total, "blocks_free", st.blocks_free,
                          "blocks_used", st.blocks_used, "running", st.running, "waiting", st.waiting, "steps",
                          (json_int_t)st.steps, "preemptions", (json_int_t)st.preemptions, "prompt_tokens_total",
                          (json_int_t)st.prompt_tokens_total, "generation_tokens_total",
                          (json_int_t)st.generation_tokens_total, "requests_total", (json_int_t)st.requests_total,
                          "requests_finished", (json_int_t)st.requests_finished, "prefix_cache", cache,
                          "disk_cache", disk, "host_cache", host);
    api_json(out, 200, o);
}

static void api_cache_reset(struct server *s, struct api_reply *out)
{
    struct hearth_engine *e = server_engine(s);
    if (!e) {
        api_error(out, 503, "the model is not loaded", NULL, "model_loading");
        return;
    }
    hearth_prefix_cache_reset(e);
    api_json(out, 200, json_pack("{s:s}", "status", "ok"));
}

static void api_reload(struct server *s, struct api_reply *out)
{
    char err[HR_ERRLEN];
    if (!server_engine(s) || server_get_state(s) != SERVER_STATE_READY) {
        api_error(out, 503, "the model is not loaded", NULL, "model_loading");
        return;
    }
    enum hr_status st = server_reload(s, err, sizeof err);
    if (st != HR_OK) {
        log_error("serve: reload failed: %s", err);
        api_error(out, 500, err, NULL, NULL); /* api_error drops the paths */
        return;
    }
    api_json(out, 200, json_pack("{s:s,s:s}", "status", "ok", "system_fingerprint", s->fingerprint));
}

/* The admin endpoints: with API keys, only an admin key reaches them (tenants get 403),
 * as they act on every tenant (the shared cache, the model) or show server-wide state. */
static bool api_route_admin(enum api_route r)
{
    return r == API_ROUTE_STATS || r == API_ROUTE_CACHE_RESET || r == API_ROUTE_RELOAD;
}

void api_handle(struct server *s, const struct api_call *call, struct api_reply *out)
{
    memset(out, 0, sizeof *out);
    if (api_route_admin(call->route->route) && auth_enabled(&s->auth) && !auth_is_admin(&s->auth, call->key_index)) {
        api_error(out, 403,
                  auth_has_admin(&s->auth) ? "this endpoint needs an admin API key"
                                           : "this endpoint is disabled: the server has API keys but no "
                                             "--admin-api-key",
                  NULL, "forbidden");
        return;
    }
    switch (call->route->route) {
    case API_ROUTE_COMPLETIONS: api_generate(s, call, OPENAI_ENDPOINT_COMPLETIONS, NULL, out); return;
    case API_ROUTE_CHAT: api_generate(s, call, OPENAI_ENDPOINT_CHAT, NULL, out); return;
    case API_ROUTE_MODELS: api_models(s, out); return;
    case API_ROUTE_HEALTH: api_health(s, out); return;
    case API_ROUTE_METRICS: api_metrics(s, out); return;
    case API_ROUTE_STATS: api_stats(s, out); return;
    case API_ROUTE_CACHE_RESET: api_cache_reset(s, out); return;
    case API_ROUTE_RELOAD: api_reload(s, out); return;
    case API_ROUTE_MODEL: endpoints_model(s, call->path + strlen(call->route->path), out); return;
    case API_ROUTE_TOKENIZE: endpoints_tokenize(s, call, out); return;
    case API_ROUTE_DETOKENIZE: endpoints_detokenize(s, call, out); return;
    case API_ROUTE_VERSION: endpoints_version(out); return;
    case API_ROUTE_RESPONSES: responses_handle(s, call, out); return;
    }
    api_error(out, 404, "unknown route", NULL, "unknown_url");
}
