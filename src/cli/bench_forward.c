/* hearth bench forward: the forward pass alone (no engine, no sampling) on a model
 * directory: prefill tokens/s for one prompt (512 tokens by default), and decode
 * tokens/s at batch 1, 8 and 32 with every sequence at a context of 512, against
 * the machine's ceilings measured in the same run:
 *   prefill: matmul + attention flops / time, over the f32 FMA ceiling (compute f32)
 *            or the bf16 dot-product ceiling (compute bf16);
 *   decode batch 1: bytes of weights read per token / time, over the read bandwidth;
 *   decode batch B: tokens/s and its ratio to batch 1.
 * The decode contexts are distinct KV blocks filled with random values (decode time
 * does not depend on what the KV holds), so no long prefill is needed; with
 * --shared-context every row's context is the same blocks (a shared prefix, as prefix
 * reuse or n > 1 gives), so attention reads one context's KV from memory and the rest
 * from cache: the step without most of its KV traffic.  Prints JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_util.h"
#include "kernels/backend.h"
#include "kernels/cpu/ceiling.h"
#include "kv/block_pool.h"
#include "model/dtype.h"
#include "model/model.h"
#include "model/roofline.h"

#define BF_MAX_B 8
#define BF_BS 16

static void bf_usage(void)
{
    fprintf(stderr, "usage: hearth bench forward --model DIR [--threads 2] [--kernel V] [--kv-dtype bf16|f32]\n"
                    "                            [--prompt 512] [--context 512] [--batches 1,8,32] [--steps 8]\n"
                    "                            [--repeat 3] [--shared-context] [--no-ceilings]\n");
}

static int bf_parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1024 || (*end && *end != ','))
            return 0;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

struct bf_rig {
    struct model m;
    struct backend be;
    struct kv_store kv;
    struct qwen3 q;
    struct batch b;
    float *logits;   /* [max_rows, vocab] */
    int32_t *tables; /* [max_rows, blocks_per_seq] */
    int blocks_per_seq;
};

static double bf_step(struct bf_rig *r, char *err, size_t errlen)
{
    if (batch_build(&r->b, r->kv.n_blocks, err, errlen) != HR_OK)
        return -1;
    double t = bench_now();
    if (qwen3_forward(&r->q, &r->b, &r->kv, r->logits, err, errlen) != HR_OK)
        return -1;
    return bench_now() - t;
}

int bench_forward(int argc, char **argv)
{
    const char *model_dir = NULL, *kernel = NULL;
    long threads = 2, prompt = 512, context = 512, steps = 8, repeat = 3;
    int batches[BF_MAX_B] = {1, 8, 32}, n_b = 3, ceilings = 1, shared = 0;
    enum kv_dtype kvdt = KV_DTYPE_BF16;
    char err[HR_ERRLEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bf_usage();
            return 0;
        } else if (args_is(a, "--model")) {
            if (!(model_dir = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--kernel")) {
            if (!(kernel = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--threads")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--threads", v, 1, 1024, &threads))
                return 2;
        } else if (args_is(a, "--prompt")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--prompt", v, 1, 1 << 16, &prompt))
                return 2;
        } else if (args_is(a, "--context")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--context", v, 0, 1 << 16, &context))
                return 2;
        } else if (args_is(a, "--steps")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--steps", v, 1, 1 << 16, &steps))
                return 2;
        } else if (args_is(a, "--repeat")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--repeat", v, 1, 1000, &repeat))
                return 2;
        } else if (args_is(a, "--batches")) {
            if (!(v = args_value(argc, argv, &i)) || !(n_b = bf_parse_list(v, batches, BF_MAX_B))) {
                fprintf(stderr, "hearth bench forward: --batches takes a list like 1,8,32\n");
                return 2;
            }
        } else if (args_is(a, "--kv-dtype")) {
            if (!(v = args_value(argc, argv, &i)) || kv_dtype_parse(v, &kvdt, err, sizeof err) != HR_OK) {
                fprintf(stderr, "hearth bench forward: --kv-dtype must be bf16 or f32\n");
                return 2;
            }
        } else if (!strcmp(a, "--no-ceilings")) {
            ceilings = 0;
        } else if (!strcmp(a, "--shared-context")) {
            shared = 1;
        } else {
            fprintf(stderr, "hearth bench forward: unknown option '%s'\n", a);
            bf_usage();
            return 2;
        }
    }
    if (!model_dir) {
        bf_usage();
        return 2;
    }
    struct cpu_ceilings ceil = {0};
    if (ceilings && cpu_ceilings_measure((int)threads, &ceil, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench forward: %s\n", err);
        return 1;
    }

    int max_b = 1;
    for (int i = 0; i < n_b; i++)
        max_b = batches[i] > max_b ? batches[i] : max_b;
    struct bf_rig r;
    memset(&r, 0, sizeof r);
    int rc = 1;
    int max_tok = (int)(prompt > max_b ? prompt : max_b);
    r.blocks_per_seq = (int)((context + steps + 1 + BF_BS - 1) / BF_BS);
    int pblocks = (int)((prompt + BF_BS - 1) / BF_BS);
    if (r.blocks_per_seq < pblocks)
        r.blocks_per_seq = pblocks;
    int n_blocks = r.blocks_per_seq * max_b;
    if (model_load(&r.m, model_dir, err, sizeof err) != HR_OK ||
        backend_create(&r.be, "cpu", &(struct backend_opts){.n_threads = (int)threads, .kernel = kernel}, err,
                       sizeof err) != HR_OK ||
        model_kv_init(&r.kv, &r.be, &r.m.cfg, kvdt, BF_BS,
                      (size_t)n_blocks * BF_BS * model_kv_bytes_per_token(&r.m.cfg, kvdt), err, sizeof err) != HR_OK ||
        qwen3_init(&r.q, &r.m, &r.be, max_tok, 0, err, sizeof err) != HR_OK ||
        batch_init(&r.b, BF_BS, max_b, max_tok, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench forward: %s\n", err);
        goto out;
    }
    const struct model_config *c = &r.m.cfg;
    r.logits = r.be.ops->alloc(&r.be, (size_t)max_b * c->vocab_size * sizeof *r.logits, err, sizeof err);
    r.tables = malloc((size_t)n_blocks * sizeof *r.tables);
    int32_t *tok = malloc((size_t)max_tok * sizeof *tok);
    if (!r.logits || !r.tables || !tok) {
        fprintf(stderr, "hearth bench forward: out of memory\n");
        free(tok);
        goto out;
    }
    /* each sequence's blocks as the engine's block pool hands them out */
    struct block_pool pool;
    if (block_pool_init(&pool, r.kv.n_blocks, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench forward: %s\n", err);
        free(tok);
        goto out;
    }
    for (int i = 0; i < max_b; i++)
        HR_ASSERT(block_pool_alloc(&pool, -1, r.tables + (size_t)i * r.blocks_per_seq, r.blocks_per_seq, NULL, 0) ==
                  HR_OK);
    block_pool_free(&pool);
    /* a shared context: the whole blocks before the first decode position are row 0's
     * for every row (each row writes its new tokens into blocks of its own) */
    for (int i = 1; shared && i < max_b; i++)
        memcpy(r.tables + (size_t)i * r.blocks_per_seq, r.tables, (size_t)(context / BF_BS) * sizeof *r.tables);

    /* ---- prefill: one prompt from an empty context */
    bench_tokens(tok, (int)prompt, c->vocab_size, 7);
    double pre[16];
    int n_pre = repeat < 16 ? (int)repeat : 16;
    for (int k = -1; k < n_pre; k++) {
        batch_reset(&r.b);
        if (batch_add_row(&r.b, 0, tok, (int)prompt, 0, r.tables, r.blocks_per_seq, BATCH_LOGITS_LAST, err,
                          sizeof err) != HR_OK) {
            fprintf(stderr, "hearth bench forward: %s\n", err);
            goto out_tok;
        }
        double s = bf_step(&r, err, sizeof err);
        if (s < 0) {
            fprintf(stderr, "hearth bench forward: %s\n", err);
            goto out_tok;
        }
        if (k >= 0) /* the first run warms the pages and caches */
            pre[k] = s;
    }
    double pre_s = bench_median(pre, n_pre);
    struct roofline cost; /* the model's bytes and flops (model/roofline.h) */
    roofline_of(&r.m, 0, &cost);
    int64_t wbytes = (int64_t)roofline_weight_bytes(&cost, 1);
    double pre_flops = cost.tok_flops * prompt + cost.attn_flops * (double)prompt * (prompt + 1) / 2 + cost.lm_flops;
    double pre_gflops = pre_flops / pre_s * 1e-9;
    int bf16_compute = r.be.bf16_compute;

    /* ---- decode: random KV contents, distinct blocks per sequence unless shared */
    {
        uint64_t st = 88172645463325252ull;
        size_t n = r.kv.block_bytes / r.kv.elem_size;
        void *blk = malloc(r.kv.block_bytes);
        if (!blk) {
            fprintf(stderr, "hearth bench forward: out of memory\n");
            goto out_tok;
        }
        for (int id = 0; id < r.kv.n_blocks; id++) {
            for (size_t i = 0; i < n; i++) {
                st ^= st << 13;
                st ^= st >> 7;
                st ^= st << 17;
                float f = (float)((st >> 40) & 0xffff) / 32768.0f - 1.0f;
                if (r.kv.dtype == KV_DTYPE_F32)
                    ((float *)blk)[i] = f;
                else
                    ((uint16_t *)blk)[i] = dtype_f32_to_bf16(f);
            }
            if (r.be.ops->kv_import(&r.be, &r.kv, id, blk, err, sizeof err) != HR_OK) {
                fprintf(stderr, "hearth bench forward: %s\n", err);
                free(blk);
                goto out_tok;
            }
        }
        free(blk);
    }
    /* The batch sizes take turns step by step: the host's bandwidth wanders from one
     * moment to the next, and the ratios compare batches measured side by side. */
    double dec_tps[BF_MAX_B] = {0}, dec_step_ms[BF_MAX_B] = {0};
    double ts[BF_MAX_B][64];
    int n_ts = 0;
    for (int s = -1; s < steps; s++) {
        int ctx = (int)context + (s < 0 ? 0 : s);
        for (int bi = 0; bi < n_b; bi++) {
            int B = batches[bi];
            batch_reset(&r.b);
            bench_tokens(tok, B, c->vocab_size, 1000 + (uint64_t)s);
            for (int i = 0; i < B; i++) {
                if (batch_add_row(&r.b, i, tok + i, 1, ctx, r.tables + (size_t)i * r.blocks_per_seq, r.blocks_per_seq,
                                  BATCH_LOGITS_LAST, err, sizeof err) != HR_OK) {
                    fprintf(stderr, "hearth bench forward: %s\n", err);
                    goto out_tok;
                }
            }
            double t = bf_step(&r, err, sizeof err);
            if (t < 0) {
                fprintf(stderr, "hearth bench forward: %s\n", err);
                goto out_tok;
            }
            if (s >= 0 && n_ts < 64)
                ts[bi][n_ts] = t;
        }
        if (s >= 0 && n_ts < 64)
            n_ts++;
    }
    for (int bi = 0; bi < n_b; bi++) {
        double med = bench_median(ts[bi], n_ts);
        dec_step_ms[bi] = med * 1e3;
        dec_tps[bi] = batches[bi] / med;
    }

    /* the ceilings again at the end: other load on the machine only lowers them */
    struct cpu_ceilings ceil2;
    if (ceilings && cpu_ceilings_measure((int)threads, &ceil2, err, sizeof err) == HR_OK) {
        ceil.fma_f32_gflops = ceil2.fma_f32_gflops > ceil.fma_f32_gflops ? ceil2.fma_f32_gflops : ceil.fma_f32_gflops;
        ceil.dot_bf16_gflops =
            ceil2.dot_bf16_gflops > ceil.dot_bf16_gflops ? ceil2.dot_bf16_gflops : ceil.dot_bf16_gflops;
        ceil.read_gbs = ceil2.read_gbs > ceil.read_gbs ? ceil2.read_gbs : ceil.read_gbs;
    }
    double comp_ceil = bf16_compute ? ceil.dot_bf16_gflops : ceil.fma_f32_gflops;
    printf("{\n  \"benchmark\": \"forward\",\n  \"model\": \"%s\",\n  \"backend\": \"%s\",\n  \"threads\": %ld,\n",
           model_dir, r.be.name, threads);
    printf("  \"kv_dtype\": \"%s\",\n  \"compute\": \"%s\",\n  \"shared_context\": %s,\n", kv_dtype_name(kvdt),
           bf16_compute ? "bf16" : "f32", shared ? "true" : "false");
    printf("  \"ceilings\": {\"fma_f32_gflops\": %.1f, \"dot_bf16_gflops\": %.1f, \"read_gbs\": %.2f},\n",
           ceil.fma_f32_gflops, ceil.dot_bf16_gflops, ceil.read_gbs);
    printf("  \"prefill\": {\"tokens\": %ld, \"seconds\": %.4f, \"tokens_per_s\": %.1f, \"gflops\": %.1f, "
           "\"frac_fma_f32\": %.3f, \"frac_dot_bf16\": %.3f, \"frac_compute\": %.3f},\n",
           prompt, pre_s, prompt / pre_s, pre_gflops, ceil.fma_f32_gflops > 0 ? pre_gflops / ceil.fma_f32_gflops : 0,
           ceil.dot_bf16_gflops > 0 ? pre_gflops / ceil.dot_bf16_gflops : 0,
           comp_ceil > 0 ? pre_gflops / comp_ceil : 0);
    printf("  \"weights_bytes_per_token\": %lld,\n  \"decode\": [", (long long)wbytes);
    for (int bi = 0; bi < n_b; bi++) {
        int B = batches[bi];
        double gbs = (double)wbytes / (dec_step_ms[bi] * 1e-3) * 1e-9;
        /* distinct KV bytes: one context when the rows share it */
        double kv_gbs = (double)(shared ? 1 : B) * context * model_kv_bytes_per_token(c, kvdt) /
                        (dec_step_ms[bi] * 1e-3) * 1e-9;
        double gflops = (double)B * (cost.tok_flops + cost.lm_flops + cost.attn_flops * (double)(context + 1)) /
                        (dec_step_ms[bi] * 1e-3) * 1e-9;
        printf("%s\n    {\"batch\": %d, \"context\": %ld, \"step_ms\": %.2f, \"tokens_per_s\": %.1f, "
               "\"vs_batch1\": %.2f, \"weights_gbs\": %.2f, \"kv_gbs\": %.2f, \"frac_bandwidth\": %.3f, "
               "\"gflops\": %.1f, \"frac_compute\": %.3f}",
               bi ? "," : "", B, context, dec_step_ms[bi], dec_tps[bi], dec_tps[0] > 0 ? dec_tps[bi] / dec_tps[0] : 0,
               gbs, kv_gbs, ceil.read_gbs > 0 ? gbs / ceil.read_gbs : 0, gflops,
               comp_ceil > 0 ? gflops / comp_ceil : 0);
    }
    printf("\n  ]\n}\n");
    rc = 0;
out_tok:
    free(tok);
out:
    if (r.logits)
        r.be.ops->mem_free(&r.be, r.logits);
    free(r.tables);
    batch_free(&r.b);
    qwen3_free(&r.q);
    model_kv_free(&r.kv, &r.be);
    backend_free(&r.be);
    model_free(&r.m);
    return rc;
}
