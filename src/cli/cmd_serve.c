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
#include "server/server.h"

#define SERVE_MAX_KEYS 64

static void serve_usage(void)
{
    fprintf(stderr,
            "usage: hearth serve --model DIR [options]\n"
            "Serves DIR (config.json, *.safetensors, tokenizer.json, chat template) over an OpenAI-compatible\n"
            "API: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,\n"
            "GET /v1/stats, POST /v1/prefix_cache/reset, POST /v1/reload.\n"
            "\n"
            "  --host ADDR                  listen address (default 127.0.0.1)\n"
            "  --port N                     listen port (default 8000; 0: any free port)\n"
            "  --api-key KEY                require \"Authorization: Bearer KEY\" (repeatable)\n"
            "  --salt-per-key               each API key gets its own prefix-cache namespace\n"
            "  --served-model-name NAME     the model's name in the API (default: DIR's base name)\n"
            "  --threads N                  kernel threads (default: all cores)\n"
            "  --kernel auto|avx512|avx2|scalar\n"
            "  --kv-cache-mib N             KV pool size (default 256)\n"
            "  --kv-dtype bf16|f32          KV cache dtype (default bf16)\n"
            "  --block-size N               tokens per KV block (default 16)\n"
            "  --max-num-seqs N             running sequences at most (default 64)\n"
            "  --max-batched-tokens N       tokens per step at most (default 512)\n"
            "  --max-waiting N              queued requests at most, then 503 (default 0: no limit)\n"
            "  --max-n N                    largest 'n' accepted (default 16)\n"
            "  --max-body-bytes N           largest request body, then 413 (default 8 MiB)\n"
            "  --prefix-cache on|off        exact prefix KV reuse (default on)\n"
            "  --prefix-cache-max-entries N cached blocks at most (N >= 1; default: bounded by the pool)\n"
            "  --reasoning-parser qwen3     return <think>...</think> as reasoning_content\n"
            "  --shutdown-grace-ms N        on SIGINT/SIGTERM, in-flight requests get this long (default 10000)\n"
            "  --log-level debug|info|warn|error\n");
}

/* Parses one option; false (after a message naming it) on a bad flag or value. */
static bool serve_option(int argc, char **argv, int *i, struct server_config *c, const char **keys, int *n_keys,
                         bool *help)
{
    const char *a = argv[*i], *v;
    long n;
    double d;
#define SERVE_VALUE() do { if (!(v = args_value(argc, argv, i))) return false; } while (0)
#define SERVE_INT(opt, lo, hi) do { SERVE_VALUE(); if (!args_int(opt, v, lo, hi, &n)) return false; } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        *help = true;
    } else if (args_is(a, "--model")) {
        SERVE_VALUE();
        c->engine.model_dir = v;
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
    } else if (!strcmp(a, "--salt-per-key")) {
        c->salt_per_key = true;
    } else if (args_is(a, "--served-model-name")) {
        SERVE_VALUE();
        if (!*v) {
            fprintf(stderr, "hearth serve: --served-model-name must not be empty\n");
            return false;
        }
        c->served_model_name = v;
    } else if (args_is(a, "--threads")) {
        SERVE_INT("--threads", 1, 1024);
        c->engine.n_threads = (int)n;
    } else if (args_is(a, "--kernel")) {
        SERVE_VALUE();
        if (strcmp(v, "auto") && strcmp(v, "avx512") && strcmp(v, "avx2") && strcmp(v, "scalar")) {
            fprintf(stderr, "hearth serve: --kernel must be auto, avx512, avx2 or scalar, got '%s'\n", v);
            return false;
        }
        c->engine.kernel = v;
    } else if (args_is(a, "--kv-cache-mib")) {
        SERVE_INT("--kv-cache-mib", 1, 1L << 24);
        c->engine.kv_cache_bytes = (size_t)n << 20;
    } else if (args_is(a, "--kv-dtype")) {
        SERVE_VALUE();
        if (strcmp(v, "bf16") && strcmp(v, "f32")) {
            fprintf(stderr, "hearth serve: --kv-dtype must be bf16 or f32, got '%s'\n", v);
            return false;
        }
        c->engine.kv_dtype = v;
    } else if (args_is(a, "--block-size")) {
        SERVE_INT("--block-size", 1, 4096);
        c->engine.block_size = (int)n;
    } else if (args_is(a, "--max-num-seqs")) {
        SERVE_INT("--max-num-seqs", 1, 1 << 20);
        c->engine.max_num_seqs = (int)n;
    } else if (args_is(a, "--max-batched-tokens")) {
        SERVE_INT("--max-batched-tokens", 1, 1 << 24);
        c->engine.max_batched_tokens = (int)n;
    } else if (args_is(a, "--max-waiting")) {
        SERVE_INT("--max-waiting", 0, 1 << 24);
        c->engine.max_waiting = (int)n;
    } else if (args_is(a, "--max-n")) {
        SERVE_INT("--max-n", 1, 1024);
        c->max_n = (int)n;
    } else if (args_is(a, "--max-body-bytes")) {
        SERVE_INT("--max-body-bytes", 1, 1L << 40);
        c->max_body_bytes = (size_t)n;
    } else if (args_is(a, "--prefix-cache")) {
        SERVE_VALUE();
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "hearth serve: --prefix-cache must be on or off, got '%s'\n", v);
            return false;
        }
        c->engine.prefix_cache = !strcmp(v, "on");
    } else if (args_is(a, "--prefix-cache-max-entries")) {
        SERVE_INT("--prefix-cache-max-entries", 1, 1L << 40);
        if (n > 0x7fffffffL)
            n = 0x7fffffffL;
        c->engine.prefix_cache_max_entries = (int)n;
    } else if (args_is(a, "--reasoning-parser")) {
        SERVE_VALUE();
        if (strcmp(v, "qwen3") != 0) {
            fprintf(stderr, "hearth serve: --reasoning-parser must be qwen3, got '%s'\n", v);
            return false;
        }
        c->reasoning_qwen3 = true;
    } else if (args_is(a, "--shutdown-grace-ms")) {
        SERVE_INT("--shutdown-grace-ms", 0, 3600L * 1000);
        c->shutdown_grace_ms = (int)n;
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
    } else {
        fprintf(stderr, "hearth serve: unknown option '%s' (see hearth serve --help)\n", a);
        return false;
    }
    (void)d;
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
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c.engine.n_threads = cores > 0 ? (int)cores : 1;
    const char *keys[SERVE_MAX_KEYS];
    int n_keys = 0;
    bool help = false;
    for (int i = 1; i < argc; i++)
        if (!serve_option(argc, argv, &i, &c, keys, &n_keys, &help)) {
            fprintf(stderr, "hearth serve: start-up failed: bad option %s\n", argv[i < argc ? i : argc - 1]);
            return 2;
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
    if (c.salt_per_key && n_keys == 0) {
        fprintf(stderr, "hearth serve: --salt-per-key needs at least one --api-key\n");
        return 2;
    }
    c.api_keys = keys;
    c.n_api_keys = n_keys;

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

    int sig = 0;
    sigwait(&set, &sig);
    log_info("serve: %s: stopping (in-flight requests get %d ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             c.shutdown_grace_ms);
    struct serve_stopper stopper = {.srv = s};
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, serve_stop_thread, &stopper) == 0;
    if (!threaded) {
        server_stop(s);
    } else {
        /* a second signal cancels what is still running */
        struct timespec tick = {0, 100 * 1000 * 1000};
        while (!atomic_load(&stopper.done)) {
            if (sigtimedwait(&set, NULL, &tick) > 0) {
                log_info("serve: second signal: cancelling everything in flight");
                atomic_store(&s->cancel_all, true);
            }
        }
        pthread_join(th, NULL);
    }
    server_free(s);
    log_info("serve: stopped");
    return 0;
}
