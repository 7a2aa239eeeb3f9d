/* hearth serve: the OpenAI-compatible HTTP server. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "server/server.h"

#define SERVE_MAX_KEYS 64

static const char *serve_admin_keys[SERVE_MAX_KEYS];
static int serve_n_admin;

static void serve_usage(void)
{
    fprintf(stderr,
            "usage: hearth serve --model DIR [options]\n"
            "Serves DIR (config.json, *.safetensors, tokenizer.json, chat template) over an OpenAI-compatible\n"
            "API: POST /v1/completions, POST /v1/chat/completions, POST /v1/responses, GET /v1/models[/ID],\n"
            "POST /tokenize, POST /detokenize, GET /version, GET /health, GET /metrics, GET /v1/stats,\n"
            "POST /v1/prefix_cache/reset, POST /v1/reload.\n"
            "\n"
            "server options:\n"
            "  --host ADDR                   listen address (default 127.0.0.1)\n"
            "  --port N                      listen port (default 8000; 0: any free port)\n"
            "  --api-key KEY                 require \"Authorization: Bearer KEY\" (repeatable)\n"
            "  --admin-api-key KEY           a key that also reaches /v1/stats, /v1/prefix_cache/reset and\n"
            "                                /v1/reload (repeatable); with --api-key and none, those are off\n"
            "  --salt-per-key                each API key gets its own prefix-cache namespace (a client's\n"
            "                                cache_salt then separates users within the key's)\n"
            "  --served-model-name NAME      the model's name in the API (default: DIR's base name)\n"
            "  --max-n N                     largest 'n' accepted (default 16)\n"
            "  --max-body-bytes N            largest request body, then 413 (default 8 MiB)\n"
            "  --max-prompts-per-request N   prompts in one completions request at most (default 64)\n"
            "  --max-response-bytes N        a non-streamed request whose response could be larger (n x\n"
            "                                max_tokens at a generous size per token and logprob) gets 400;\n"
            "                                stream larger ones (default 64 MiB)\n"
            "  --max-unsent-bytes N          a stream is cancelled once more than N bytes of its output wait\n"
            "                                for a client that stopped reading (default 4 MiB)\n"
            "  --request-head-timeout S      a request's line and headers must arrive within S s (default 60)\n"
            "  --max-connections-per-client N  open connections from one client address at most (default\n"
            "                                256; behind a proxy, raise it up to the 1,024 connections served)\n"
            "  --reasoning-parser qwen3      return <think>...</think> as reasoning_content\n"
            "  --tool-call-parser qwen3|none  with tools in the request, return <tool_call> blocks as\n"
            "                                tool_calls (default qwen3)\n"
            "  --shutdown-grace-ms N         on SIGINT/SIGTERM, the whole stop takes at most this long: in-flight\n"
            "                                requests finish or are cancelled within it (default 10000)\n"
            "  --idle-timeout-s N            close a connection whose request sends or reads nothing for N s\n"
            "                                (default 300)\n"
            "  --keepalive-timeout-s N       close a keep-alive connection idle between requests after N s\n"
            "                                (default 75, as nginx); with every connection slot taken, idle\n"
            "                                keep-alive connections are closed first, oldest first\n"
            "  --allowed-origins LIST        CORS: origins browsers may call from, comma separated (default *)\n"
            "  --allowed-methods LIST        CORS: methods a preflight allows (default *: any)\n"
            "  --allowed-headers LIST        CORS: request headers a preflight allows (default *: any)\n"
            "  --allow-credentials           CORS: allow cookies and Authorization (the origin is echoed)\n"
            "  --log-level debug|info|warn|error\n"
            "  --log-format text|json        json: every log line (access lines too) is one JSON object\n"
            "  --instance-name NAME          label every /metrics sample instance_name=\"NAME\" (replicas)\n"
            "\n%s",
            engine_opts_help);
}

/* Parses one server option; false (after a message naming it) on a bad flag or value. */
static bool serve_option(int argc, char **argv, int *i, struct server_config *c, const char **keys, int *n_keys,
                         bool *help)
{
    const char *a = argv[*i], *v;
    long n;
#define SERVE_VALUE() do { if (!(v = args_value(argc, argv, i))) return false; } while (0)
#define SERVE_INT(opt, lo, hi) do { SERVE_VALUE(); if (!args_int(opt, v, lo, hi, &n)) return false; } while (0)
    int e = engine_opts_parse(&c->engine, argc, argv, i);
    if (e != 0)
        return e > 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        *help = true;
    } else if (args_is(a, "--host")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: --host must not be empty\n");
            return false;
        }
        c->host = v;
    } else if (args_is(a, "--port")) {
        SERVE_INT("--port", 0, 65535);
        c->port = (int)n;
    } else if (args_is(a, "--api-key")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: --api-key must not be empty\n");
            return false;
        }
        if (*n_keys >= SERVE_MAX_KEYS) {
            fprintf(stderr, "hearth serve: --api-key given more than %d times\n", SERVE_MAX_KEYS);
            return false;
        }
        keys[(*n_keys)++] = v;
    } else if (args_is(a, "--admin-api-key")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: --admin-api-key must not be empty\n");
            return false;
        }
        if (serve_n_admin >= SERVE_MAX_KEYS) {
            fprintf(stderr, "hearth serve: --admin-api-key given more than %d times\n", SERVE_MAX_KEYS);
            return false;
        }
        serve_admin_keys[serve_n_admin++] = v;
    } else if (args_is(a, "--max-prompts-per-request")) {
        SERVE_INT("--max-prompts-per-request", 1, 1 << 20);
        c->max_prompts = (int)n;
    } else if (args_is(a, "--max-response-bytes")) {
        SERVE_INT("--max-response-bytes", 1024, 1L << 40);
        c->max_response_bytes = (size_t)n;
    } else if (args_is(a, "--max-unsent-bytes")) {
        SERVE_INT("--max-unsent-bytes", 1024, 1L << 40);
        c->max_unsent_bytes = (size_t)n;
    } else if (args_is(a, "--request-head-timeout")) {
        SERVE_INT("--request-head-timeout", 1, 3600);
        c->head_timeout_s = (int)n;
    } else if (args_is(a, "--max-connections-per-client")) {
        SERVE_INT("--max-connections-per-client", 1, 1 << 20);
        c->max_conns_per_client = (int)n;
    } else if (!strcmp(a, "--salt-per-key")) {
        c->salt_per_key = true;
    } else if (args_is(a, "--served-model-name")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: --served-model-name must not be empty\n");
            return false;
        }
        c->served_model_name = v;
    } else if (args_is(a, "--max-n")) {
        SERVE_INT("--max-n", 1, 1024);
        c->max_n = (int)n;
    } else if (args_is(a, "--max-body-bytes")) {
        SERVE_INT("--max-body-bytes", 1, 1L << 40);
        c->max_body_bytes = (size_t)n;
    } else if (args_is(a, "--reasoning-parser")) {
        SERVE_VALUE();
        if (strcmp(v, "qwen3") != 0) {
            fprintf(stderr, "hearth serve: --reasoning-parser must be qwen3, got '%s'\n", v);
            return false;
        }
        c->reasoning_qwen3 = true;
    } else if (args_is(a, "--tool-call-parser")) {
        SERVE_VALUE();
        if (strcmp(v, "qwen3") != 0 && strcmp(v, "none") != 0) {
            fprintf(stderr, "hearth serve: --tool-call-parser must be qwen3 or none, got '%s'\n", v);
            return false;
        }
        c->tool_calls_qwen3 = strcmp(v, "qwen3") == 0;
    } else if (args_is(a, "--shutdown-grace-ms")) {
        SERVE_INT("--shutdown-grace-ms", 0, 3600L * 1000);
        c->shutdown_grace_ms = (int)n;
    } else if (args_is(a, "--idle-timeout-s")) {
        SERVE_INT("--idle-timeout-s", 1, 86400);
        c->idle_timeout_s = (int)n;
    } else if (args_is(a, "--keepalive-timeout-s")) {
        SERVE_INT("--keepalive-timeout-s", 1, 86400);
        c->keepalive_timeout_s = (int)n;
    } else if (args_is(a, "--allowed-origins") || args_is(a, "--allowed-methods") ||
               args_is(a, "--allowed-headers")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: %.17s must not be empty\n", a);
            return false;
        }
        if (args_is(a, "--allowed-origins"))
            c->allowed_origins = v;
        else if (args_is(a, "--allowed-methods"))
            c->allowed_methods = v;
        else
            c->allowed_headers = v;
    } else if (!strcmp(a, "--allow-credentials")) {
        c->allow_credentials = true;
    } else if (args_is(a, "--log-level")) {
        SERVE_VALUE();
        static const char *const names[] = {"debug", "info", "warn", "error"};
        int k = 0;
        while (k < 4 && strcmp(v, names[k]) != 0)
            k++;
        if (k == 4) {
            fprintf(stderr, "hearth serve: --log-level must be debug, info, warn or error, got '%s'\n", v);
            return false;
        }
        log_set_level((enum log_level)k);
    } else if (args_is(a, "--log-format")) {
        SERVE_VALUE();
        if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0) {
            fprintf(stderr, "hearth serve: --log-format must be text or json, got '%s'\n", v);
            return false;
        }
        log_set_format(strcmp(v, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
    } else if (args_is(a, "--instance-name")) {
        SERVE_VALUE();
        if (!metrics_instance_valid(v)) {
            fprintf(stderr, "hearth serve: --instance-name must be 1..%d characters of [A-Za-z0-9._:-], got '%s'\n",
                    METRICS_INSTANCE_MAX, v);
            return false;
        }
        c->instance_name = v;
    } else {
        fprintf(stderr, "hearth serve: unknown option '%s' (see hearth serve --help)\n", a);
        return false;
    }
    return true;
#undef SERVE_INT
#undef SERVE_VALUE
}

/* ---------------------------------------------------------------- stop */

struct serve_stopper {
    struct server *srv;
    _Atomic bool done;
};

static void *serve_stop_thread(void *arg)
{
    struct serve_stopper *st = arg;
    server_stop(st->srv);
    atomic_store(&st->done, true);
    return NULL;
}

int cli_serve(int argc, char **argv)
{
    struct server_config c;
    server_config_default(&c);
    engine_opts_default(&c.engine);
    const char *keys[SERVE_MAX_KEYS];
    int n_keys = 0;
    bool help = false;
    for (int i = 1; i < argc; i++) {
        int at = i;
        if (!serve_option(argc, argv, &i, &c, keys, &n_keys, &help)) {
            fprintf(stderr, "hearth serve: start-up failed: bad option %s\n", argv[at]);
            return 2;
        }
    }
    if (help) {
        serve_usage();
        return 0;
    }
    if (!c.engine.model_dir) {
        fprintf(stderr, "hearth serve: --model DIR is required\n");
        serve_usage();
        return 2;
    }
    if (c.salt_per_key && n_keys + serve_n_admin == 0) {
        fprintf(stderr, "hearth serve: --salt-per-key needs at least one --api-key\n");
        return 2;
    }
    c.api_keys = keys;
    c.n_api_keys = n_keys;
    c.admin_api_keys = serve_admin_keys;
    c.n_admin_api_keys = serve_n_admin;

    /* signals go to this thread only (sigwait below); the server's threads inherit the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct server *s;
    char err[HR_ERRLEN];
    if (server_start(&s, &c, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth serve: start-up failed: %s\n", err);
        return 1;
    }
    printf("hearth serve: listening on http://%s:%d (model %s loading)\n", strchr(c.host, ':') ? "[::1]" : c.host,
           server_port(s), c.engine.model_dir);
    fflush(stdout);

    /* wait for a signal; a model that fails to load ends the process (nothing to serve) */
    int sig = 0;
    struct timespec tick = {0, 100 * 1000 * 1000};
    while (sig <= 0) {
        sig = sigtimedwait(&set, NULL, &tick);
        if (sig <= 0 && server_get_state(s) == SERVER_STATE_FAILED) {
            fprintf(stderr, "hearth serve: start-up failed: the model did not load: %s\n", s->load_err);
            server_free(s);
            return 1;
        }
    }
    log_info("serve: %s: stopping (in-flight requests get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             c.shutdown_grace_ms);
    struct serve_stopper stopper = {.srv = s};
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, serve_stop_thread, &stopper) == 0;
    if (!threaded) {
        server_stop(s);
    } else {
        /* a second signal cancels what is still running; the grace period bounds the stop:
         * a connection thread that cannot be stopped (busy in a long computation) does not
         * keep the process alive past it */
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double bound_s = c.shutdown_grace_ms / 1000.0 + 0.5; /* + closing and freeing */
        while (!atomic_load(&stopper.done)) {
            if (sigtimedwait(&set, NULL, &tick) > 0) {
                log_info("serve: second signal: cancelling everything in flight");
                atomic_store(&s->cancel_all, true);
            }
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!atomic_load(&stopper.done) &&
                (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 > bound_s) {
                log_error("serve: the stop did not finish within the grace period; exiting now");
                fflush(NULL);
                _exit(1);
            }
        }
        pthread_join(th, NULL);
    }
    server_free(s);
    log_info("serve: stopped");
    return 0;
}
