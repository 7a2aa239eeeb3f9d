/* hearth bench prefix: the exact-reuse parity benchmark.
 *
 * Protocol: three modes, each on a fresh engine — disabled (no prefix cache), cold
 * (cache on, empty), warm (cache on, primed by one unmeasured request sharing the
 * prefix) — run the same greedy request: a shared prefix of P tokens plus S suffix
 * tokens.  Per mode: digests of the generated ids and of the logits of every step,
 * TTFT and end-to-end time (medians over the repeats), the first step's geometry,
 * the hit tokens, the refcount high-water mark and the leases open at the end.
 * All digests equal: exit 0 and JSON; any mismatch: exit 2, no JSON.
 *
 * With --restart a fourth mode, disk: an engine with a disk tier (--kv-cache-dir, or
 * a temporary directory) runs the priming request and shuts down cleanly (writing
 * its cached blocks), the files are dropped from the page cache, and a fresh engine
 * on the same directory runs the measured request: its prefix comes from disk.
 * With --kv-cache-host-mib N a fifth mode, host: an engine with a host-RAM tier of N
 * MiB runs the priming request, every cached block is then pushed out of the pool into
 * the host tier, and the measured request's prefix is copied back from there.  (The
 * other modes run without the host tier.)
 *
 * With --workload chat|fewshot|rag|none: many clients with a shared prefix and
 * unique questions, run with the cache off and on; throughput, TTFT p50/p99, hit
 * rate, and every request's output compared bitwise between the two runs. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_util.h"
#include "cli/engine_opts.h"

#define PREFIX_MODES 5 /* disk with --restart only, host with --kv-cache-host-mib only */
#define PREFIX_DISK 3
#define PREFIX_HOST 4
#define PREFIX_MAX_REPEATS 64

struct prefix_opts {
    struct hearth_engine_params ep;
    int shared, suffix, max_tokens, repeats;
    const char *output_json;
    const char *workload;
    int clients, arrival_steps;
    int shared_set, suffix_set;
    bool restart;
};

struct prefix_run {
    double ttft, e2e, forward_first;
    int q_len, ctx_len, kv_len;
    int hit_tokens;
    int refcount_hw;
    int64_t open_leases;
    struct bench_digest ids, logits;
};

static const char *prefix_mode_name[PREFIX_MODES] = {"disabled", "cold", "warm", "disk", "host"};

static void prefix_usage(void)
{
    fprintf(stderr,
            "usage: hearth bench prefix --model DIR [--shared-prefix-tokens P] [--suffix-tokens S]\n"
            "                           [--max-tokens N] [--repeats R] [--output-json FILE]\n"
            "                           [--workload chat|fewshot|rag|none --clients N --arrival-steps K]\n"
            "                           [--restart]   (also: warm from disk after a restart)\n"
            "                           [--kv-cache-host-mib N]   (also: warm from the host-RAM tier)\n"
            "Defaults: P 1024, S 64, max-tokens 16, repeats 3; workloads: 8 clients.\n\n%s",
            engine_opts_help);
}

static int prefix_vocab(const struct hearth_engine *e)
{
    struct hearth_model_info mi;
    hearth_engine_model_info(e, &mi);
    return mi.vocab_size;
}

/* The logits hook of a measured request: every sampled row's logits into the digest. */
struct prefix_hook {
    struct hearth_engine *e;
    struct bench_digest *logits;
    int first_ctx;     /* context_len of the request's first step, -1 before it */
    int flip;          /* HEARTH_TEST_FLIP_WARM_LOGIT: flip a bit of the warm run's logits */
    float *copy;       /* [vocab] room for the flipped row */
};

static void prefix_on_logits(void *ctx, int row, const float *lg, int vocab)
{
    (void)row;
    struct prefix_hook *h = ctx;
    if (h->first_ctx < 0)
        h->first_ctx = engine_last_step(h->e)->context_len;
    /* Test hook: proves that a single flipped bit is caught. */
    if (h->flip && h->first_ctx > 0 && h->copy) {
        memcpy(h->copy, lg, (size_t)vocab * sizeof(float));
        uint32_t u;
        memcpy(&u, h->copy, 4);
        u ^= 1;
        memcpy(h->copy, &u, 4);
        lg = h->copy;
    }
    bench_digest_add(h->logits, lg, (size_t)vocab * sizeof(float));
}

/* Runs one request to the end on e, stepping by hand. */
static int prefix_run_request(struct hearth_engine *e, const int32_t *prompt, int n, int max_tokens, bool measure,
                              struct prefix_run *out)
{
    char err[HR_ERRLEN];
    struct hearth_request_params rp;
    hearth_request_params_default(&rp);
    rp.prompt_ids = prompt;
    rp.n_prompt_ids = n;
    rp.max_tokens = max_tokens;
    rp.has_temperature = true;
    rp.temperature = 0;
    rp.has_seed = true;
    rp.ignore_eos = true;
    struct hearth_request *r = NULL;
    double t0 = bench_now();
    if (hearth_submit(e, &rp, &r, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench prefix: %s\n", err);
        return 0;
    }
    int steps = 0, done = 0;
    struct hearth_stats hs;
    hearth_engine_stats(e, &hs);
    struct prefix_hook hook = {.e = e, .logits = &out->logits, .first_ctx = -1,
                               .flip = hs.prefix_cache.enabled && getenv("HEARTH_TEST_FLIP_WARM_LOGIT")};
    if (hook.flip && !(hook.copy = malloc((size_t)prefix_vocab(e) * sizeof(float)))) {
        fprintf(stderr, "hearth bench prefix: out of memory\n");
        hearth_request_free(r);
        return 0;
    }
    if (measure)
        engine_set_logits_hook(e, prefix_on_logits, &hook);
    while (!done) {
        if (!engine_step(e)) {
            fprintf(stderr, "hearth bench prefix: the engine stalled\n");
            break;
        }
        if (measure) {
            if (steps++ == 0) {
                const struct engine_step_info *si = engine_last_step(e);
                out->q_len = si->query_len;
                out->ctx_len = si->context_len;
                out->kv_len = si->kv_len;
                out->forward_first = (double)si->forward_ns * 1e-9;
            }
            int rc = engine_max_block_refcount(e);
            if (rc > out->refcount_hw)
                out->refcount_hw = rc;
        }
        struct hearth_event ev;
        while (hearth_request_next_event(r, &ev, 0) == HR_OK) {
            if (ev.type == HEARTH_EVENT_TOKEN) {
                if (measure && !out->ttft)
                    out->ttft = bench_now() - t0;
                if (measure)
                    bench_digest_add(&out->ids, &ev.token, sizeof ev.token);
            } else if (ev.type == HEARTH_EVENT_DONE) {
                done = 1;
                if (measure) {
                    out->e2e = bench_now() - t0;
                    out->hit_tokens = ev.cached_tokens;
                }
                if (ev.finish_reason == HEARTH_FINISH_ERROR) {
                    fprintf(stderr, "hearth bench prefix: %s\n", ev.message);
                    done = -1;
                }
            }
        }
    }
    engine_set_logits_hook(e, NULL, NULL);
    free(hook.copy);
    hearth_request_free(r);
    return done == 1;
}

/* Each block file of dir: removed (remove) or dropped from the page cache. */
static void prefix_dir_files(const char *dir, bool remove)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        const char *dot = strrchr(de->d_name, '.');
        if (!dot || strcmp(dot, ".kvb"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (remove) {
            unlink(path);
            continue;
        }
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    if (d)
        closedir(d);
}

/* The disk mode's run: prime on one engine, shut it down, measure on a fresh one. */
static int prefix_run_restart(const struct prefix_opts *o, const char *dir, const int32_t *prime,
                              const int32_t *prompt, int n, struct prefix_run *r)
{
    struct hearth_engine_params ep = o->ep;
    ep.prefix_cache = true;
    ep.kv_cache_dir = dir;
    ep.kv_cache_host_bytes = 0;
    prefix_dir_files(dir, true);
    struct hearth_engine *e = bench_engine(&ep);
    int ok = e && prefix_run_request(e, prime, n, o->max_tokens, false, r);
    hearth_engine_free(e); /* the clean shutdown writes the cached blocks */
    sync();
    prefix_dir_files(dir, false);
    if (!ok || !(e = bench_engine(&ep)))
        return 0;
    ok = prefix_run_request(e, prompt, n, o->max_tokens, true, r);
    struct hearth_stats hs;
    hearth_engine_stats(e, &hs);
    r->open_leases = hs.prefix_cache.open_leases;
    hearth_engine_free(e);
    return ok;
}

/* The host mode's run: prime, push every cached block out of the pool into the host
 * tier, measure. */
static int prefix_run_host(const struct prefix_opts *o, const int32_t *prime, const int32_t *prompt, int n,
                           struct prefix_run *r)
{
    struct hearth_engine_params ep = o->ep;
    ep.prefix_cache = true;
    ep.kv_cache_dir = NULL;
    struct hearth_engine *e = bench_engine(&ep);
    int ok = e && prefix_run_request(e, prime, n, o->max_tokens, false, r);
    int moved = ok ? engine_demote_cached(e) : 0;
    if (ok && moved == 0) {
        fprintf(stderr, "hearth bench prefix: no block went to the host tier\n");
        ok = 0;
    }
    ok = ok && prefix_run_request(e, prompt, n, o->max_tokens, true, r);
    if (e) {
        struct hearth_stats hs;
        hearth_engine_stats(e, &hs);
        r->open_leases = hs.prefix_cache.open_leases;
    }
    hearth_engine_free(e);
    return ok;
}

static int prefix_protocol(struct prefix_opts *o)
{
    int n = o->shared + o->suffix;
    int32_t *prompt = malloc((size_t)n * sizeof *prompt), *prime = malloc((size_t)n * sizeof *prime);
    struct prefix_run runs[PREFIX_MODES][PREFIX_MAX_REPEATS];
    memset(runs, 0, sizeof runs);
    int ok = prompt && prime;
    int vocab = 0;
    bool on[PREFIX_MODES] = {true, true, true, o->restart, o->ep.kv_cache_host_bytes > 0};
    char tmpdir[64] = "";
    const char *dir = o->ep.kv_cache_dir;
    if (o->restart && !dir) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/hearth-bench-kv-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "hearth bench prefix: cannot make a temporary directory\n");
            ok = 0;
        }
        dir = tmpdir;
    }
    for (int mode = 0; ok && mode < PREFIX_MODES; mode++) {
        for (int rep = 0; ok && on[mode] && rep < o->repeats; rep++) {
            if (mode == PREFIX_DISK || mode == PREFIX_HOST) {
                struct prefix_run *r = &runs[mode][rep];
                ok = mode == PREFIX_DISK ? prefix_run_restart(o, dir, prime, prompt, n, r)
                                         : prefix_run_host(o, prime, prompt, n, r);
                fprintf(stderr, "%-8s repeat %d: ttft %.3f s  e2e %.3f s  hit %d tokens  first step q=%d ctx=%d kv=%d\n",
                        prefix_mode_name[mode], rep, r->ttft, r->e2e, r->hit_tokens, r->q_len, r->ctx_len, r->kv_len);
                continue;
            }
            struct hearth_engine_params ep = o->ep;
            ep.prefix_cache = mode != 0;
            ep.kv_cache_dir = NULL;
            ep.kv_cache_host_bytes = 0;
            struct hearth_engine *e = bench_engine(&ep);
            if (!e) {
                ok = 0;
                break;
            }
            if (!vocab) {
                vocab = prefix_vocab(e);
                bench_tokens(prompt, n, vocab, 1);
                memcpy(prime, prompt, (size_t)n * sizeof *prime);
                bench_tokens(prime + o->shared, o->suffix, vocab, 2); /* same prefix, other suffix */
            }
            struct prefix_run *r = &runs[mode][rep];
            if (mode == 2)
                ok = prefix_run_request(e, prime, n, o->max_tokens, false, r);
            ok = ok && prefix_run_request(e, prompt, n, o->max_tokens, true, r);
            struct hearth_stats hs;
            hearth_engine_stats(e, &hs);
            r->open_leases = hs.prefix_cache.enabled ? hs.prefix_cache.open_leases : 0;
            hearth_engine_free(e);
            fprintf(stderr, "%-8s repeat %d: ttft %.3f s  e2e %.3f s  hit %d tokens  first step q=%d ctx=%d kv=%d\n",
                    prefix_mode_name[mode], rep, r->ttft, r->e2e, r->hit_tokens, r->q_len, r->ctx_len, r->kv_len);
        }
    }
    free(prompt);
    free(prime);
    if (tmpdir[0]) {
        prefix_dir_files(tmpdir, true);
        rmdir(tmpdir);
    }
    if (!ok)
        return 1;

    /* Every run of every mode must give the same bits. */
    const struct prefix_run *ref = &runs[0][0];
    for (int mode = 0; mode < PREFIX_MODES; mode++)
        for (int rep = 0; on[mode] && rep < o->repeats; rep++) {
            const struct prefix_run *r = &runs[mode][rep];
            if (memcmp(&r->ids, &ref->ids, sizeof r->ids) || memcmp(&r->logits, &ref->logits, sizeof r->logits)) {
                fprintf(stderr, "hearth bench prefix: MISMATCH: %s repeat %d differs from disabled repeat 0\n",
                        prefix_mode_name[mode], rep);
                return 2;
            }
            if (r->open_leases != 0) {
                fprintf(stderr, "hearth bench prefix: %s repeat %d ended with %lld open leases\n",
                        prefix_mode_name[mode], rep, (long long)r->open_leases);
                return 2;
            }
        }

    double med_ttft[PREFIX_MODES] = {0}, med_e2e[PREFIX_MODES] = {0}, med_fwd[PREFIX_MODES] = {0};
    for (int mode = 0; mode < PREFIX_MODES; mode++) {
        if (!on[mode])
            continue;
        double t[PREFIX_MAX_REPEATS], e2[PREFIX_MAX_REPEATS], fw[PREFIX_MAX_REPEATS];
        for (int rep = 0; rep < o->repeats; rep++) {
            t[rep] = runs[mode][rep].ttft;
            e2[rep] = runs[mode][rep].e2e;
            fw[rep] = runs[mode][rep].forward_first;
        }
        med_ttft[mode] = bench_median(t, o->repeats);
        med_e2e[mode] = bench_median(e2, o->repeats);
        med_fwd[mode] = bench_median(fw, o->repeats);
    }
    char ids_hex[33], lg_hex[33];
    bench_digest_hex(&ref->ids, ids_hex);
    bench_digest_hex(&ref->logits, lg_hex);
    char json[8192];
    int k = snprintf(json, sizeof json,
                     "{\n  \"benchmark\": \"prefix\",\n  \"model\": \"%s\",\n  \"threads\": %d,\n"
                     "  \"shared_prefix_tokens\": %d,\n  \"suffix_tokens\": %d,\n  \"max_tokens\": %d,\n"
                     "  \"repeats\": %d,\n  \"digests_equal\": true,\n  \"ids_digest\": \"%s\",\n"
                     "  \"logits_digest\": \"%s\",\n  \"modes\": {\n",
                     o->ep.model_dir, o->ep.n_threads, o->shared, o->suffix, o->max_tokens, o->repeats, ids_hex,
                     lg_hex);
    int last = PREFIX_MODES - 1;
    while (!on[last])
        last--;
    for (int mode = 0; mode < PREFIX_MODES; mode++) {
        if (!on[mode])
            continue;
        const struct prefix_run *r = &runs[mode][0];
        int hw = 0;
        for (int rep = 0; rep < o->repeats; rep++)
            hw = runs[mode][rep].refcount_hw > hw ? runs[mode][rep].refcount_hw : hw;
        k += snprintf(json + k, sizeof json - (size_t)k,
                      "    \"%s\": {\"ttft_s\": %.6f, \"e2e_s\": %.6f, \"first_forward_s\": %.6f, "
                      "\"first_step\": {\"query_len\": %d, \"context_len\": %d, \"kv_len\": %d}, "
                      "\"hit_tokens\": %d, \"refcount_high_water\": %d, \"open_leases_end\": 0}%s\n",
                      prefix_mode_name[mode], med_ttft[mode], med_e2e[mode], med_fwd[mode], r->q_len, r->ctx_len,
                      r->kv_len, r->hit_tokens, hw, mode < last ? "," : "");
    }
    k += snprintf(json + k, sizeof json - (size_t)k,
                  "  },\n");
    if (o->restart)
        k += snprintf(json + k, sizeof json - (size_t)k,
                      "  \"disk_ttft_speedup_vs_cold\": %.3f,\n  \"disk_ttft_over_warm\": %.3f,\n",
                      med_ttft[3] > 0 ? med_ttft[1] / med_ttft[3] : 0.0,
                      med_ttft[2] > 0 ? med_ttft[3] / med_ttft[2] : 0.0);
    if (on[PREFIX_HOST])
        k += snprintf(json + k, sizeof json - (size_t)k,
                      "  \"host_ttft_speedup_vs_cold\": %.3f,\n  \"host_ttft_over_warm\": %.3f,\n",
                      med_ttft[PREFIX_HOST] > 0 ? med_ttft[1] / med_ttft[PREFIX_HOST] : 0.0,
                      med_ttft[2] > 0 ? med_ttft[PREFIX_HOST] / med_ttft[2] : 0.0);
    k += snprintf(json + k, sizeof json - (size_t)k,
                  "  \"warm_ttft_speedup_vs_cold\": %.3f,\n"
                  "  \"warm_ttft_over_its_forward\": %.4f\n}\n",
                  med_ttft[2] > 0 ? med_ttft[1] / med_ttft[2] : 0.0, med_fwd[2] > 0 ? med_ttft[2] / med_fwd[2] : 0.0);
    fputs(json, stdout);
    if (o->output_json) {
        char err[HR_ERRLEN];
        FILE *f = fopen(o->output_json, "w");
        if (!f || fputs(json, f) < 0) {
            snprintf(err, sizeof err, "cannot write %s", o->output_json);
            fprintf(stderr, "hearth bench prefix: %s\n", err);
            if (f)
                fclose(f);
            return 1;
        }
        fclose(f);
    }
    return 0;
}

/* ------------------------------------------------------------------ workloads */

struct wl_client {
    int32_t *prompt;
    int n;
    int arrive_step;
    struct hearth_request *r;
    double t_submit, t_first, t_done;
    int done, cached;
    struct bench_digest out; /* ids and logprobs */
};

struct wl_result {
    double seconds, ttft_p50, ttft_p99, tokens_per_s, gen_per_s;
    int64_t prompt_tokens, gen_tokens, hit_tokens;
};

static int wl_run(struct prefix_opts *o, bool cache, struct wl_client *cl, int n, struct wl_result *res)
{
    struct hearth_engine_params ep = o->ep;
    ep.prefix_cache = cache;
    struct hearth_engine *e = bench_engine(&ep);
    if (!e)
        return 0;
    char err[HR_ERRLEN];
    int remaining = n, ok = 1;
    double t0 = bench_now();
    memset(res, 0, sizeof *res);
    for (int i = 0; i < n; i++) {
        cl[i].r = NULL;
        cl[i].done = 0;
        cl[i].t_first = 0;
        memset(&cl[i].out, 0, sizeof cl[i].out);
    }
    for (int step = 0; remaining > 0 && ok; step++) {
        for (int i = 0; i < n; i++) {
            if (cl[i].arrive_step != step)
                continue;
            struct hearth_request_params rp;
            hearth_request_params_default(&rp);
            rp.prompt_ids = cl[i].prompt;
            rp.n_prompt_ids = cl[i].n;
            rp.max_tokens = o->max_tokens;
            rp.has_temperature = true;
            rp.temperature = 0.7f;
            rp.has_seed = true;
            rp.seed = (uint64_t)i;
            rp.logprobs = true;
            rp.ignore_eos = true;
            cl[i].t_submit = bench_now();
            if (hearth_submit(e, &rp, &cl[i].r, err, sizeof err) != HR_OK) {
                fprintf(stderr, "hearth bench prefix: %s\n", err);
                ok = 0;
            }
        }
        engine_step(e);
        for (int i = 0; i < n; i++) {
            struct hearth_event ev;
            while (cl[i].r && !cl[i].done && hearth_request_next_event(cl[i].r, &ev, 0) == HR_OK) {
                if (ev.type == HEARTH_EVENT_TOKEN) {
                    if (!cl[i].t_first)
                        cl[i].t_first = bench_now();
                    bench_digest_add(&cl[i].out, &ev.token, sizeof ev.token);
                    bench_digest_add(&cl[i].out, &ev.logprob, sizeof ev.logprob);
                    res->gen_tokens++;
                } else if (ev.type == HEARTH_EVENT_DONE) {
                    cl[i].done = 1;
                    cl[i].t_done = bench_now();
                    cl[i].cached = ev.cached_tokens;
                    res->hit_tokens += ev.cached_tokens;
                    res->prompt_tokens += ev.prompt_tokens;
                    remaining--;
                    if (ev.finish_reason == HEARTH_FINISH_ERROR) {
                        fprintf(stderr, "hearth bench prefix: %s\n", ev.message);
                        ok = 0;
                    }
                }
            }
        }
    }
    res->seconds = bench_now() - t0;
    double *ttft = malloc((size_t)n * sizeof *ttft);
    for (int i = 0; ttft && i < n; i++)
        ttft[i] = cl[i].t_first - cl[i].t_submit;
    if (ttft) {
        res->ttft_p50 = bench_percentile(ttft, n, 0.5);
        res->ttft_p99 = bench_percentile(ttft, n, 0.99);
    }
    free(ttft);
    res->tokens_per_s = (double)(res->prompt_tokens + res->gen_tokens) / res->seconds;
    res->gen_per_s = (double)res->gen_tokens / res->seconds;
    for (int i = 0; i < n; i++)
        hearth_request_free(cl[i].r);
    hearth_engine_free(e);
    return ok;
}

static int prefix_workload(struct prefix_opts *o)
{
    /* Shapes: a shared part and a unique part per client. */
    int shared = 512, unique = 64;
    if (!strcmp(o->workload, "fewshot"))
        shared = 1024, unique = 32;
    else if (!strcmp(o->workload, "rag"))
        shared = 1536, unique = 64;
    else if (!strcmp(o->workload, "none"))
        shared = 0, unique = 512;
    else if (strcmp(o->workload, "chat") != 0) {
        fprintf(stderr, "hearth bench prefix: --workload must be chat, fewshot, rag or none\n");
        return 1;
    }
    if (o->shared_set)
        shared = o->shared;
    if (o->suffix_set)
        unique = o->suffix;
    int n = o->clients;
    struct wl_client *cl = calloc((size_t)n, sizeof *cl);
    int32_t *buf = malloc((size_t)n * (size_t)(shared + unique) * sizeof *buf);
    struct hearth_engine_params ep0 = o->ep;
    ep0.prefix_cache = false;
    struct hearth_engine *probe = bench_engine(&ep0);
    int rc = 1;
    if (!cl || !buf || !probe)
        goto out;
    int vocab = prefix_vocab(probe);
    hearth_engine_free(probe);
    probe = NULL;
    for (int i = 0; i < n; i++) {
        cl[i].prompt = buf + (size_t)i * (shared + unique);
        cl[i].n = shared + unique;
        bench_tokens(cl[i].prompt, shared, vocab, 7);
        bench_tokens(cl[i].prompt + shared, unique, vocab, 1000 + (uint64_t)i);
        cl[i].arrive_step = i * o->arrival_steps;
    }
    struct wl_result off, on;
    if (!wl_run(o, false, cl, n, &off))
        goto out;
    struct bench_digest *ref = malloc((size_t)n * sizeof *ref);
    if (!ref)
        goto out;
    for (int i = 0; i < n; i++)
        ref[i] = cl[i].out;
    if (!wl_run(o, true, cl, n, &on)) {
        free(ref);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (memcmp(&ref[i], &cl[i].out, sizeof ref[i])) {
            fprintf(stderr, "hearth bench prefix: MISMATCH: client %d's output differs with the cache on\n", i);
            free(ref);
            rc = 2;
            goto out;
        }
    free(ref);
    /* every client's output, in client order: equal across runs that must agree
     * bitwise (a device's graphs against --enforce-eager, say) */
    struct bench_digest all = {0};
    for (int i = 0; i < n; i++)
        bench_digest_add(&all, &cl[i].out, sizeof cl[i].out);
    char all_hex[33];
    bench_digest_hex(&all, all_hex);
    char json[4096];
    snprintf(json, sizeof json,
             "{\n  \"benchmark\": \"prefix-workload\",\n  \"workload\": \"%s\",\n  \"model\": \"%s\",\n"
             "  \"threads\": %d,\n  \"clients\": %d,\n  \"shared_tokens\": %d,\n  \"unique_tokens\": %d,\n"
             "  \"max_tokens\": %d,\n  \"arrival_steps\": %d,\n  \"outputs_equal\": true,\n"
             "  \"outputs_digest\": \"%s\",\n"
             "  \"cache_off\": {\"seconds\": %.3f, \"tokens_per_s\": %.1f, \"generated_per_s\": %.2f, "
             "\"ttft_p50_s\": %.3f, \"ttft_p99_s\": %.3f},\n"
             "  \"cache_on\": {\"seconds\": %.3f, \"tokens_per_s\": %.1f, \"generated_per_s\": %.2f, "
             "\"ttft_p50_s\": %.3f, \"ttft_p99_s\": %.3f, \"hit_rate\": %.4f},\n"
             "  \"throughput_on_over_off\": %.3f\n}\n",
             o->workload, o->ep.model_dir, o->ep.n_threads, n, shared, unique, o->max_tokens, o->arrival_steps,
             all_hex, off.seconds, off.tokens_per_s, off.gen_per_s, off.ttft_p50, off.ttft_p99, on.seconds, on.tokens_per_s,
             on.gen_per_s, on.ttft_p50, on.ttft_p99,
             on.prompt_tokens ? (double)on.hit_tokens / (double)on.prompt_tokens : 0.0,
             off.seconds > 0 && on.seconds > 0 ? off.seconds / on.seconds : 0.0);
    fputs(json, stdout);
    rc = 0;
    if (o->output_json) {
        FILE *f = fopen(o->output_json, "w");
        if (!f || fputs(json, f) < 0) {
            fprintf(stderr, "hearth bench prefix: cannot write %s\n", o->output_json);
            rc = 1;
        }
        if (f)
            fclose(f);
    }
out:
    hearth_engine_free(probe);
    free(cl);
    free(buf);
    return rc;
}

int bench_prefix(int argc, char **argv)
{
    struct prefix_opts o = {.shared = 1024, .suffix = 64, .max_tokens = 16, .repeats = 3, .clients = 8,
                            .arrival_steps = 1};
    engine_opts_default(&o.ep);
    for (int i = 1; i < argc; i++) {
        int r = engine_opts_parse(&o.ep, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        const char *a = argv[i], *v;
        long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            prefix_usage();
            return 0;
        }
        struct {
            const char *flag;
            int *dst;
            long lo, hi;
            int *set;
        } ints[] = {
            {"--shared-prefix-tokens", &o.shared, 0, 1 << 20, &o.shared_set},
            {"--suffix-tokens", &o.suffix, 1, 1 << 20, &o.suffix_set},
            {"--max-tokens", &o.max_tokens, 1, 1 << 20, NULL},
            {"--repeats", &o.repeats, 1, PREFIX_MAX_REPEATS, NULL},
            {"--clients", &o.clients, 1, 4096, NULL},
            {"--arrival-steps", &o.arrival_steps, 0, 1 << 20, NULL},
        };
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (!args_is(a, ints[k].flag))
                continue;
            if (!(v = args_value(argc, argv, &i)) || !args_int(ints[k].flag, v, ints[k].lo, ints[k].hi, &x))
                return 2;
            *ints[k].dst = (int)x;
            if (ints[k].set)
                *ints[k].set = 1;
            matched = 1;
        }
        if (matched)
            continue;
        if (args_is(a, "--output-json")) {
            if (!(o.output_json = args_value(argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--restart")) {
            o.restart = true;
        } else if (args_is(a, "--workload")) {
            if (!(o.workload = args_value(argc, argv, &i)))
                return 2;
        } else {
            fprintf(stderr, "hearth bench prefix: unknown option '%s'\n", a);
            prefix_usage();
            return 2;
        }
    }
    if (!o.ep.model_dir) {
        prefix_usage();
        return 2;
    }
    return o.workload ? prefix_workload(&o) : prefix_protocol(&o);
}
