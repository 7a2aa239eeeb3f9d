/* hearth bench throughput: offline throughput (prompt and generated tokens/s) and
 * inter-token latency (p50, p99) for 1, 8 and 32 concurrent requests, and the
 * process's peak RSS against the weights plus the KV budget, with what each level's
 * engine holds beyond them (after start-up, and at its fullest).  Also the compute
 * bound: the machine's measured peak arithmetic rate over the flops one request
 * needs, which no batching can beat; over level 1's throughput it bounds the ratio
 * any level can reach.  And each level's roofline (model/roofline.h): the workload's
 * generated tokens/s if every step took the larger of its bytes over the read
 * bandwidth and its flops over the peak rate, and a decode step's at the middle
 * context against the measured ITL p50; the ceilings are the CPU's, measured here,
 * or a device's given with --ceiling-gbs / --ceiling-tflops (measured in the same run:
 * bench/cuda_models.sh passes cuda_bench's), which then set the compute bound too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_util.h"
#include "cli/engine_opts.h"
#include "kernels/cpu/ceiling.h"
#include "model/roofline.h"

#define TP_MAX_LEVELS 8

static void tp_usage(void)
{
    fprintf(stderr,
            "usage: hearth bench throughput --model DIR [--prompt-tokens 256] [--output-tokens 128]\n"
            "                               [--concurrency 1,8,32] [--ceiling-gbs G --ceiling-tflops T]\n\n%s",
            engine_opts_help);
}

struct tp_level {
    int c;
    double seconds, tokens_per_s, gen_per_s, itl_p50, itl_p99;
    double startup_mib;  /* RSS after engine start-up, less the KV slab (weights are still untouched) */
    double overhead_mib; /* largest RSS after a step, less weights and KV */
    double roof_gen_per_s; /* the workload's roofline (generated tokens/s) */
    double roof_step_ms;   /* a decode step's roofline at the middle context */
    /* the decode-only steps (every row one generated token), measured: their count,
     * rows and wall time (engine_step, sampling included); each one's rows and the
     * positions they attend over, for its roofline once the ceilings are known */
    long long dec_steps, dec_rows, dec_cap;
    double dec_s, dec_roof_s;
    int *dec_n;       /* [dec_steps] */
    double *dec_ctx;  /* [dec_steps] */
};

/* The sum of the decode-only steps' rooflines (roofline_decode_s at each one's rows and
 * contexts). */
static double tp_dec_roof_s(const struct tp_level *lv, const struct roofline *roof, double gbs, double tflops)
{
    double s = 0;
    for (long long i = 0; i < lv->dec_steps; i++)
        s += roofline_decode_s(roof, lv->dec_n[i], lv->dec_ctx[i], gbs, tflops);
    return s;
}

static void tp_levels_free(struct tp_level *lv, int n)
{
    for (int k = 0; k < n; k++) {
        free(lv[k].dec_n);
        free(lv[k].dec_ctx);
    }
}

/* The decode-only steps' mean rows and wall time a step (dec_steps > 0). */
static double tp_dec_rows(const struct tp_level *lv)
{
    return (double)lv->dec_rows / (double)lv->dec_steps;
}

static double tp_dec_ms(const struct tp_level *lv)
{
    return lv->dec_s * 1e3 / (double)lv->dec_steps;
}

static double tp_dec_tok_s(const struct tp_level *lv)
{
    return (double)lv->dec_rows / lv->dec_s;
}

/* Their roofline a step (dec_roof_s set) */
static double tp_dec_roof_ms(const struct tp_level *lv)
{
    return lv->dec_roof_s * 1e3 / (double)lv->dec_steps;
}

/* Notes a decode-only step; 0 when out of memory. */
static int tp_dec_add(struct tp_level *lv, int n_rows, double ctx_sum, double seconds)
{
    if (lv->dec_steps == lv->dec_cap) {
        long long cap = lv->dec_cap ? 2 * lv->dec_cap : 256;
        int *n = realloc(lv->dec_n, (size_t)cap * sizeof *n);
        if (n)
            lv->dec_n = n;
        double *x = n ? realloc(lv->dec_ctx, (size_t)cap * sizeof *x) : NULL;
        if (!x)
            return 0;
        lv->dec_ctx = x;
        lv->dec_cap = cap;
    }
    lv->dec_n[lv->dec_steps] = n_rows;
    lv->dec_ctx[lv->dec_steps] = ctx_sum;
    lv->dec_steps++;
    lv->dec_rows += n_rows;
    lv->dec_s += seconds;
    return 1;
}

/* The process's resident memory now, in MiB (0 when /proc is not there). */
static double tp_rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    int ok = f && fscanf(f, "%llu %llu", &size, &res) == 2;
    if (f)
        fclose(f);
    return ok ? (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0 : 0.0;
}

/* The least arithmetic one request needs: prompt + output - 1 tokens through the
 * layers (the last token is sampled, never fed back), attention over every earlier
 * position, and one lm_head row per sampled token. */
static double tp_request_flops(const struct roofline *r, int prompt_tokens, int out_tokens)
{
    double n = (double)prompt_tokens + out_tokens - 1;
    return n * r->tok_flops + r->attn_flops * n * (n + 1) / 2 + r->lm_flops * out_tokens;
}

static int tp_run(const struct hearth_engine_params *ep, int c, int prompt_tokens, int out_tokens,
                  struct tp_level *lv, int64_t *weight_bytes, size_t *kv_bytes, int *bf16, int *on_host,
                  struct roofline *roof)
{
    memset(lv, 0, sizeof *lv);
    struct hearth_engine *e = bench_engine(ep);
    if (!e)
        return 0;
    roofline_of(engine_model(e), engine_kv_bytes_per_token(e), roof);
    *bf16 = engine_backend(e)->bf16_compute;
    *weight_bytes = engine_model(e)->w.weight_bytes;
    *kv_bytes = engine_kv_bytes(e);
    /* a device keeps weights and KV in its own memory: the host's RSS holds neither */
    *on_host = strcmp(engine_backend(e)->device, "cpu") == 0;
    double fixed = *on_host ? (double)*weight_bytes / 1048576.0 + (double)*kv_bytes / 1048576.0 : 0, rss_max = 0;
    lv->startup_mib = tp_rss_mib() - (*on_host ? (double)*kv_bytes / 1048576.0 : 0);
    char err[HR_ERRLEN];
    int V = engine_model(e)->cfg.vocab_size, ok = 1;
    struct hearth_request **r = calloc((size_t)c, sizeof *r);
    int32_t *prompts = malloc((size_t)c * prompt_tokens * sizeof *prompts);
    double *last = calloc((size_t)c, sizeof *last);
    int *got = calloc((size_t)c, sizeof *got); /* tokens each request has had */
    size_t n_itl = 0, cap_itl = (size_t)c * out_tokens;
    double *itl = malloc(cap_itl * sizeof *itl);
    if (!r || !prompts || !last || !got || !itl) {
        ok = 0;
        goto out;
    }
    double t0 = bench_now();
    for (int i = 0; i < c && ok; i++) {
        bench_tokens(prompts + (size_t)i * prompt_tokens, prompt_tokens, V, 100 + (uint64_t)i);
        struct hearth_request_params rp;
        hearth_request_params_default(&rp);
        rp.prompt_ids = prompts + (size_t)i * prompt_tokens;
        rp.n_prompt_ids = prompt_tokens;
        rp.max_tokens = out_tokens;
        rp.ignore_eos = true;
        rp.has_seed = true;
        rp.seed = (uint64_t)i;
        if (hearth_submit(e, &rp, &r[i], err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth bench throughput: %s\n", err);
            ok = 0;
        }
    }
    int remaining = c;
    int64_t gen = 0;
    while (ok && remaining > 0) {
        /* the positions a decode-only step's rows attend over: each running request's
         * prompt and the tokens it has (every request runs to out_tokens: ignore_eos) */
        double ctx_sum = 0;
        for (int i = 0; i < c; i++)
            if (got[i] > 0 && got[i] < out_tokens)
                ctx_sum += (double)prompt_tokens + got[i];
        double ts = bench_now();
        if (!engine_step(e))
            break;
        double now = bench_now(), rss = tp_rss_mib(); /* nothing is freed within a step */
        rss_max = rss > rss_max ? rss : rss_max;
        const struct engine_step_info *si = engine_last_step(e);
        if (si->decode_only && !tp_dec_add(lv, si->n_rows, ctx_sum, now - ts)) {
            fprintf(stderr, "hearth bench throughput: out of memory\n");
            ok = 0;
        }
        for (int i = 0; i < c; i++) {
            struct hearth_event ev;
            while (r[i] && hearth_request_next_event(r[i], &ev, 0) == HR_OK) {
                if (ev.type == HEARTH_EVENT_TOKEN) {
                    if (last[i] > 0 && n_itl < cap_itl)
                        itl[n_itl++] = now - last[i];
                    last[i] = now;
                    got[i]++;
                    gen++;
                } else if (ev.type == HEARTH_EVENT_DONE) {
                    remaining--;
                    if (ev.finish_reason == HEARTH_FINISH_ERROR) {
                        fprintf(stderr, "hearth bench throughput: %s\n", ev.message);
                        ok = 0;
                    }
                }
            }
        }
    }
    lv->c = c;
    lv->seconds = bench_now() - t0;
    lv->tokens_per_s = (double)((int64_t)c * prompt_tokens + gen) / lv->seconds;
    lv->gen_per_s = (double)gen / lv->seconds;
    lv->itl_p50 = bench_percentile(itl, (int)n_itl, 0.5);
    lv->itl_p99 = bench_percentile(itl, (int)n_itl, 0.99);
    lv->overhead_mib = rss_max - fixed;
out:
    for (int i = 0; r && i < c; i++)
        hearth_request_free(r[i]);
    free(r);
    free(prompts);
    free(last);
    free(got);
    free(itl);
    hearth_engine_free(e);
    return ok;
}

int bench_throughput(int argc, char **argv)
{
    struct hearth_engine_params ep;
    engine_opts_default(&ep);
    int prompt_tokens = 256, out_tokens = 128, levels[TP_MAX_LEVELS] = {1, 8, 32}, n_levels = 3;
    double ceil_gbs = 0, ceil_tflops = 0; /* a device's, measured by the caller; 0: the CPU's, measured here */
    for (int i = 1; i < argc; i++) {
        int rr = engine_opts_parse(&ep, argc, argv, &i);
        if (rr < 0)
            return 2;
        if (rr > 0)
            continue;
        const char *a = argv[i], *v;
        long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tp_usage();
            return 0;
        } else if (args_is(a, "--prompt-tokens")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--prompt-tokens", v, 1, 1 << 20, &x))
                return 2;
            prompt_tokens = (int)x;
        } else if (args_is(a, "--output-tokens")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--output-tokens", v, 1, 1 << 20, &x))
                return 2;
            out_tokens = (int)x;
        } else if (args_is(a, "--ceiling-gbs") || args_is(a, "--ceiling-tflops")) {
            double *dst = args_is(a, "--ceiling-gbs") ? &ceil_gbs : &ceil_tflops;
            char *end;
            if (!(v = args_value(argc, argv, &i)))
                return 2;
            *dst = strtod(v, &end);
            if (end == v || *end || !(*dst > 0) || *dst > 1e9) {
                fprintf(stderr, "hearth bench throughput: %s wants a positive number, got '%s'\n", a, v);
                return 2;
            }
        } else if (args_is(a, "--concurrency")) {
            if (!(v = args_value(argc, argv, &i)))
                return 2;
            n_levels = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (n_levels == TP_MAX_LEVELS || !args_int("--concurrency", tok, 1, 4096, &x))
                    return 2;
                levels[n_levels++] = (int)x;
            }
        } else {
            fprintf(stderr, "hearth bench throughput: unknown option '%s'\n", a);
            tp_usage();
            return 2;
        }
    }
    if (!ep.model_dir || n_levels == 0) {
        tp_usage();
        return 2;
    }
    if ((ceil_gbs > 0) != (ceil_tflops > 0)) {
        fprintf(stderr, "hearth bench throughput: --ceiling-gbs and --ceiling-tflops go together\n");
        return 2;
    }
    struct tp_level lv[TP_MAX_LEVELS];
    int64_t wbytes = 0;
    size_t kvbytes = 0;
    int bf16 = 0, on_host = 1;
    struct roofline roof;
    for (int k = 0; k < n_levels; k++) {
        struct hearth_engine_params p = ep;
        if (p.max_num_seqs < levels[k])
            p.max_num_seqs = levels[k];
        if (!tp_run(&p, levels[k], prompt_tokens, out_tokens, &lv[k], &wbytes, &kvbytes, &bf16, &on_host, &roof)) {
            tp_levels_free(lv, k + 1);
            return 1;
        }
        fprintf(stderr,
                "concurrency %d: %.1f tokens/s (%.2f generated/s), ITL p50 %.1f ms p99 %.1f ms; "
                "RSS beyond weights + KV: %.1f MiB after start-up, %.1f MiB at most\n",
                levels[k], lv[k].tokens_per_s, lv[k].gen_per_s, lv[k].itl_p50 * 1e3, lv[k].itl_p99 * 1e3,
                lv[k].startup_mib, lv[k].overhead_mib);
        if (lv[k].dec_steps > 0)
            fprintf(stderr, "concurrency %d: decode-only steps %lld, %.1f rows each, %.3f ms a step: %.1f tokens/s\n",
                    levels[k], lv[k].dec_steps, tp_dec_rows(&lv[k]), tp_dec_ms(&lv[k]), tp_dec_tok_s(&lv[k]));
    }
    double rss = bench_peak_rss_mib(), wmib = (double)wbytes / 1048576.0, kvmib = (double)kvbytes / 1048576.0;
    double host_fixed = on_host ? wmib + kvmib : 0; /* what of weights and KV the RSS holds */
    /* After the RSS is read (the bandwidth pass takes 512 MiB): the machine's peak
     * arithmetic rate bounds any level's throughput, whatever the batching. */
    struct cpu_ceilings ceil = {0};
    char err[HR_ERRLEN];
    /* a device's ceilings, when given, are the ones that bound it: this CPU's are not measured */
    if (ceil_gbs <= 0 && cpu_ceilings_measure(ep.n_threads, &ceil, err, sizeof err) != HR_OK)
        fprintf(stderr, "hearth bench throughput: %s (no compute bound)\n", err);
    double peak = ceil_gbs > 0 ? ceil_tflops * 1e3 : bf16 ? ceil.dot_bf16_gflops : ceil.fma_f32_gflops;
    double req_flops = tp_request_flops(&roof, prompt_tokens, out_tokens);
    double bound_tps = req_flops > 0 ? (double)(prompt_tokens + out_tokens) * peak * 1e9 / req_flops : 0;
    /* the roofline's ceilings: the device's as given, else this CPU's (a device run
     * without them has none: the CPU's would say nothing about it) */
    int have_roof = ceil_gbs > 0 || (on_host && ceil.read_gbs > 0 && peak > 0);
    double r_gbs = ceil_gbs > 0 ? ceil_gbs : ceil.read_gbs, r_tflops = ceil_gbs > 0 ? ceil_tflops : peak * 1e-3;
    if (!have_roof)
        fprintf(stderr, "hearth bench throughput: no roofline (a device's ceilings: --ceiling-gbs, --ceiling-tflops)\n");
    for (int k = 0; k < n_levels && have_roof; k++) {
        int c = levels[k];
        double ws = roofline_workload_s(&roof, c, prompt_tokens, out_tokens, r_gbs, r_tflops);
        lv[k].roof_gen_per_s = ws > 0 ? (double)c * out_tokens / ws : 0;
        lv[k].roof_step_ms = 1e3 * roofline_decode_s(&roof, c, (double)c * (prompt_tokens + out_tokens / 2), r_gbs,
                                                      r_tflops);
        fprintf(stderr,
                "concurrency %d: roofline %.1f generated/s (measured %.3f of it); a decode step at context %d: "
                "%.3f ms at best, ITL p50 %.3f of that\n",
                c, lv[k].roof_gen_per_s, lv[k].roof_gen_per_s > 0 ? lv[k].gen_per_s / lv[k].roof_gen_per_s : 0.0,
                prompt_tokens + out_tokens / 2, lv[k].roof_step_ms,
                lv[k].itl_p50 > 0 ? lv[k].roof_step_ms * 1e-3 / lv[k].itl_p50 : 0.0);
        if (lv[k].dec_steps > 0) {
            lv[k].dec_roof_s = tp_dec_roof_s(&lv[k], &roof, r_gbs, r_tflops);
            fprintf(stderr, "concurrency %d: the decode-only steps' roofline %.3f ms a step (measured %.3f of it)\n", c,
                    tp_dec_roof_ms(&lv[k]), lv[k].dec_roof_s / lv[k].dec_s);
        }
    }
    printf("{\n  \"benchmark\": \"throughput\",\n  \"model\": \"%s\",\n  \"threads\": %d,\n"
           "  \"prompt_tokens\": %d,\n  \"output_tokens\": %d,\n  \"levels\": [\n",
           ep.model_dir, ep.n_threads, prompt_tokens, out_tokens);
    for (int k = 0; k < n_levels; k++) {
        printf("    {\"concurrency\": %d, \"seconds\": %.3f, \"tokens_per_s\": %.2f, \"generated_per_s\": %.2f, "
               "\"itl_p50_ms\": %.2f, \"itl_p99_ms\": %.2f, \"startup_beyond_kv_mib\": %.1f, "
               "\"rss_beyond_weights_kv_mib\": %.1f",
               lv[k].c, lv[k].seconds, lv[k].tokens_per_s, lv[k].gen_per_s, lv[k].itl_p50 * 1e3, lv[k].itl_p99 * 1e3,
               lv[k].startup_mib, lv[k].overhead_mib);
        if (have_roof)
            printf(", \"roofline_generated_per_s\": %.2f, \"of_roofline\": %.4f, \"roofline_step_ms\": %.4f, "
                   "\"itl_p50_of_roofline\": %.4f",
                   lv[k].roof_gen_per_s, lv[k].roof_gen_per_s > 0 ? lv[k].gen_per_s / lv[k].roof_gen_per_s : 0.0,
                   lv[k].roof_step_ms, lv[k].itl_p50 > 0 ? lv[k].roof_step_ms * 1e-3 / lv[k].itl_p50 : 0.0);
        if (lv[k].dec_steps > 0) { /* ms to six places: a CPU step of tens of microseconds keeps its digits */
            printf(", \"decode_steps\": %lld, \"decode_rows_per_step\": %.3f, \"decode_step_ms\": %.6f, "
                   "\"decode_tokens_per_s\": %.2f",
                   lv[k].dec_steps, tp_dec_rows(&lv[k]), tp_dec_ms(&lv[k]), tp_dec_tok_s(&lv[k]));
            if (have_roof)
                printf(", \"decode_roofline_step_ms\": %.6f, \"decode_of_roofline\": %.6f",
                       tp_dec_roof_ms(&lv[k]), lv[k].dec_roof_s / lv[k].dec_s);
        }
        printf("}%s\n", k + 1 < n_levels ? "," : "");
    }
    printf("  ],\n  \"throughput_ratio_last_over_first\": %.2f,\n  \"peak_rss_mib\": %.1f,\n"
           "  \"weights_mib\": %.1f,\n  \"kv_mib\": %.1f,\n  \"peak_rss_beyond_weights_kv_mib\": %.1f,\n"
           "  \"weights_plus_kv_plus_64_mib\": %.1f,\n",
           lv[0].tokens_per_s > 0 ? lv[n_levels - 1].tokens_per_s / lv[0].tokens_per_s : 0.0, rss, wmib, kvmib,
           rss - host_fixed, host_fixed + 64);
    if (have_roof)
        printf("  \"roofline\": {\"read_gbs\": %.1f, \"tflops\": %.2f, \"ceilings\": \"%s\", "
               "\"fixed_bytes\": %.0f, \"expert_bytes\": %.0f, \"kv_bytes_per_token\": %.0f},\n",
               r_gbs, r_tflops, ceil_gbs > 0 ? "given" : "cpu", roof.fixed_bytes, roof.expert_bytes, roof.kv_pos_bytes);
    printf("  \"compute_bound\": {\"compute\": \"%s\", \"peak_gflops\": %.1f, \"request_gflops\": %.1f, "
           "\"tokens_per_s\": %.1f, \"ratio_over_first\": %.2f}\n}\n",
           ceil_gbs > 0 ? "given" : bf16 ? "bf16" : "f32", peak, req_flops * 1e-9, bound_tps,
           lv[0].tokens_per_s > 0 ? bound_tps / lv[0].tokens_per_s : 0.0);
    tp_levels_free(lv, n_levels);
    return 0;
}
