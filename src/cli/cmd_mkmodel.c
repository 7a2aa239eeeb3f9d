/* hearth mkmodel: a random-weight checkpoint with real Qwen3 shapes, checked by
 * loading it back. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "model/config.h"
#include "model/mkmodel.h"
#include "model/weights.h"

static void mkmodel_usage(void)
{
    fprintf(stderr,
            "usage: hearth mkmodel --shape SHAPE --out DIR [--dtype bf16|f32] [--seed N] [--tokenizer DIR]\n"
            "                      [--config-only]\n"
            "SHAPE is one of: %s.\n"
            "Writes config.json, generation_config.json and model.safetensors (shards and an index\n"
            "above ~2 GB) with random weights (std 0.02; norms near 1), then loads them back.\n"
            "--tokenizer DIR copies tokenizer.json and tokenizer_config.json from DIR and sizes the\n"
            "vocabulary to cover them; bos/eos become <|endoftext|> / <|im_end|>.\n"
            "--config-only writes the config files (and tokenizer) without weights: a directory for\n"
            "--load-format dummy, which generates the weights where the model runs.\n"
            "Defaults: --dtype bf16 --seed 0.\n",
            mkmodel_shape_names());
}

int cli_mkmodel(int argc, char **argv)
{
    struct mkmodel_opts o = {.dtype = SAFETENSORS_DTYPE_BF16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            mkmodel_usage();
            return 0;
        } else if (args_is(a, "--shape")) {
            if (!(o.shape = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--out")) {
            if (!(o.out_dir = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--tokenizer")) {
            if (!(o.tokenizer_dir = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(a, "--dtype")) {
            if (!(v = args_value(argc, argv, &i)))
                return 2;
            if (!strcmp(v, "bf16"))
                o.dtype = SAFETENSORS_DTYPE_BF16;
            else if (!strcmp(v, "f32"))
                o.dtype = SAFETENSORS_DTYPE_F32;
            else {
                fprintf(stderr, "hearth mkmodel: --dtype must be bf16 or f32, got '%s'\n", v);
                return 2;
            }
        } else if (args_is(a, "--seed")) {
            if (!(v = args_value(argc, argv, &i)) || !args_int("--seed", v, 0, 0x7fffffffL, &n))
                return 2;
            o.seed = (uint64_t)n;
        } else if (!strcmp(a, "--config-only")) {
            o.config_only = true;
        } else if (args_is(a, "--max-shard-bytes")) { /* for tests of the sharded layout */
            if (!(v = args_value(argc, argv, &i)) || !args_int("--max-shard-bytes", v, 1, 0x7fffffffffffL, &n))
                return 2;
            o.max_shard_bytes = (uint64_t)n;
        } else {
            fprintf(stderr, "hearth mkmodel: unknown option '%s'\n", a);
            mkmodel_usage();
            return 2;
        }
    }
    if (!o.shape || !o.out_dir) {
        fprintf(stderr, "hearth mkmodel: %s is required\n\n", !o.shape ? "--shape SHAPE" : "--out DIR");
        mkmodel_usage();
        return 2;
    }
    char err[HR_ERRLEN] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (mkmodel_write(&o, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth mkmodel: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct model_config c;
    struct weights w;
    if (model_config_load(&c, o.out_dir, err, sizeof err) != HR_OK ||
        (o.config_only ? weights_load_dummy(&w, &c, 0, err, sizeof err)
                       : weights_load(&w, &c, o.out_dir, err, sizeof err)) != HR_OK) {
        fprintf(stderr, "hearth mkmodel: the written checkpoint does not load: %s\n", err);
        return 1;
    }
    if (o.config_only)
        printf("wrote %s: %s config only (for --load-format dummy: %lld parameters, %lld weight bytes), vocab %d\n",
               o.out_dir, o.shape, (long long)w.n_params, (long long)w.weight_bytes, c.vocab_size);
    else
        printf("wrote %s: %s %s, %lld parameters, %lld weight bytes in %d file%s, vocab %d (%.1f s)\n", o.out_dir,
               o.shape, o.dtype == SAFETENSORS_DTYPE_F32 ? "f32" : "bf16", (long long)w.n_params,
               (long long)w.weight_bytes, w.st.n_files, w.st.n_files == 1 ? "" : "s", c.vocab_size,
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    weights_free(&w);
    return 0;
}
