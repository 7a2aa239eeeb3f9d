/* The server: configuration, the engine (loaded in the background once the listener is
 * up), the model's chat template, metrics, and the graceful stop.  HTTP lives in http.c,
 * the endpoints in api.c, one generation request in job.c. */
#ifndef HEARTH_SERVER_SERVER_H
#define HEARTH_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <hearth.h>

#include "base/status.h"
#include "server/auth.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "template/template.h"

enum server_state {
    SERVER_STATE_LOADING,  /* listening; the engine is being loaded */
    SERVER_STATE_READY,
    SERVER_STATE_FAILED,   /* the engine failed to load: /health says so, generation gets 503 */
    SERVER_STATE_STOPPING, /* a signal came: no new generation */
};

struct server_config {
    const char *host;                /* listen address (default 127.0.0.1) */
    int port;                        /* 0: any free port (server_port tells which) */
    const char *const *api_keys;     /* [n_api_keys]; none: no authentication */
    int n_api_keys;
    const char *const *admin_api_keys; /* [n_admin_api_keys]: keys that also reach the admin endpoints */
    int n_admin_api_keys;
    bool salt_per_key;               /* each key its own prefix-cache namespace */
    struct hearth_engine_params engine; /* model_dir included */
    int max_n;                       /* "n" at most */
    int max_prompts;                 /* prompts per completions request at most */
    size_t max_body_bytes;           /* larger bodies: 413 */
    size_t max_response_bytes;       /* a non-streamed response larger than this: 400 (before) or 500 */
    size_t max_unsent_bytes;         /* a stream with more bytes waiting for its client is cancelled */
    int head_timeout_s;              /* a request's line and headers arrive within this */
    int max_conns_per_client;        /* open connections from one address at most */
    bool reasoning_qwen3;            /* --reasoning-parser qwen3 */
    bool tool_calls_qwen3;           /* --tool-call-parser qwen3 (the default) or none */
    const char *served_model_name;   /* NULL: the model directory's base name */
    int shutdown_grace_ms;           /* on stop, in-flight requests get this long before they are cancelled */
    int connection_limit;            /* concurrent connections at most */
    int idle_timeout_s;              /* a request with no byte in or out for this long is closed */
    int keepalive_timeout_s;         /* a connection idle between requests is closed after this long */
    const char *allowed_origins;     /* CORS, comma separated (NULL: "*", as vLLM) */
    const char *allowed_methods;     /* NULL: "*" */
    const char *allowed_headers;     /* NULL: "*" */
    bool allow_credentials;
    const char *instance_name;       /* --instance-name: a label on every /metrics sample; NULL: none */
};

void server_config_default(struct server_config *c);

struct http;
struct responses_store;

struct server {
    struct server_config cfg;        /* strings point at the copies below */
    char *host, *model_dir, *model_name;
    const char *model_names[2];      /* accepted "model" values: the served name, the directory */
    struct auth auth;
    struct cors cors;
    struct responses_store *responses; /* /v1/responses output items, for item_reference */
    struct metrics metrics;
    struct http *http;
    int64_t started;                 /* unix seconds */

    _Atomic int state;               /* enum server_state */
    _Atomic int active_jobs;         /* generation requests in flight */
    _Atomic bool cancel_all;         /* stop: jobs cancel their engine requests */
    _Atomic unsigned long long id_counter;

    pthread_t loader;
    bool loader_started;
    struct hearth_engine *engine;    /* set once, before state becomes READY */
    char load_err[HR_ERRLEN];

    /* The model's facts and chat template; replaced by a reload under the write lock. */
    pthread_rwlock_t model_lock;
    struct hearth_model_info info;
    struct chat_template_model tmpl;
    bool has_tmpl;
    char tmpl_err[HR_ERRLEN];        /* why there is no chat template */
    char fingerprint[32];            /* system_fingerprint */
};

/* Starts listening, then loads the engine in a background thread.  Fails only for the
 * listener or the configuration; a model that fails to load is reported by /health. */
enum hr_status server_start(struct server **out, const struct server_config *cfg, char *err, size_t errlen);
int server_port(const struct server *s);
enum server_state server_get_state(const struct server *s);
/* The engine once READY (or STOPPING), else NULL. */
struct hearth_engine *server_engine(struct server *s);
/* Re-reads the model directory (POST /v1/reload): the engine, then the chat template. */
enum hr_status server_reload(struct server *s, char *err, size_t errlen);
/* A fresh response id: prefix + 32 hex digits. */
void server_make_id(struct server *s, const char *prefix, char *out, size_t n);
/* Graceful stop: no new requests; in-flight ones get the grace period, then are
 * cancelled; the listener and every connection close.  Idempotent. */
void server_stop(struct server *s);
/* Stops (if needed) and frees everything, the engine included. */
void server_free(struct server *s);

#endif
