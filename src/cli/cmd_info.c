/* hearth info: what a model directory holds — architecture, geometry, parameters,
 * dtypes, weight bytes and KV bytes per token — after checking every tensor. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "kv/kv_store.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

static void info_usage(void)
{
    fprintf(stderr, "usage: hearth info --model DIR\n"
                    "Loads config.json, generation_config.json and the safetensors of DIR, checks every\n"
                    "tensor against the config, and prints the architecture, geometry, parameter count,\n"
                    "dtypes, weight memory and KV memory per token.\n");
}

/* 1234567 -> "1,234,567" */
static const char *info_group(char *buf, size_t n, long long v)
{
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", v < 0 ? -v : v);
    size_t len = strlen(raw), k = 0;
    if (v < 0 && k < n - 1)
        buf[k++] = '-';
    for (size_t i = 0; i < len && k < n - 1; i++) {
        if (i > 0 && (len - i) % 3 == 0 && k < n - 1)
            buf[k++] = ',';
        buf[k++] = raw[i];
    }
    buf[k] = 0;
    return buf;
}

static const char *info_bytes(char *buf, size_t n, double b)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

int cli_info(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            info_usage();
            return 0;
        } else if (args_is(argv[i], "--model")) {
            if (!(dir = args_value(argc, argv, &i)))
                return 2;
        } else {
            fprintf(stderr, "hearth info: unknown option '%s'\n", argv[i]);
            info_usage();
            return 2;
        }
    }
    if (!dir) {
        info_usage();
        return 2;
    }
    char err[HR_ERRLEN] = "";
    struct model_config c;
    struct weights w;
    if (model_config_load(&c, dir, err, sizeof err) != HR_OK || weights_load(&w, &c, dir, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth info: %s\n", err);
        return 1;
    }
    bool moe = c.arch == MODEL_ARCH_QWEN3_MOE;
    char g1[48], g2[48], b1[32], b2[32];
    printf("model          %s\n", dir);
    printf("architecture   %s\n", moe ? "Qwen3MoeForCausalLM (qwen3_moe)" : "Qwen3ForCausalLM (qwen3)");
    printf("layers         %d, hidden %d, vocab %d\n", c.n_layers, c.hidden_size, c.vocab_size);
    printf("attention      %d heads, %d kv heads, head_dim %d\n", c.n_heads, c.n_kv_heads, c.head_dim);
    int n_moe = 0;
    for (int l = 0; l < c.n_layers; l++)
        n_moe += c.layer_is_moe[l];
    if (n_moe < c.n_layers)
        printf("dense mlp      intermediate %d (%d of %d layers)\n", c.intermediate_size, c.n_layers - n_moe,
               c.n_layers);
    if (moe)
        printf("experts        %d, top-%d, moe_intermediate %d, norm_topk_prob %s, %d of %d layers sparse%s\n",
               c.n_experts, c.n_experts_per_tok, c.moe_intermediate_size, c.norm_topk_prob ? "true" : "false", n_moe,
               c.n_layers, w.experts_fused ? " (fused expert tensors)" : "");
    printf("rope_theta     %g, rms_norm_eps %g, max_position_embeddings %d\n", c.rope_theta, c.rms_norm_eps,
           c.max_position_embeddings);
    printf("embeddings     %s\n", c.tie_word_embeddings ? "tied (lm_head = embed_tokens)" : "untied");
    printf("parameters     %s (%.3f B)\n", info_group(g1, sizeof g1, w.n_params), (double)w.n_params / 1e9);
    if (moe)
        printf("active/token   %s (%.3f B)\n", info_group(g2, sizeof g2, w.n_active_params),
               (double)w.n_active_params / 1e9);
    int per[8] = {0};
    for (int i = 0; i < w.st.n_tensors; i++)
        if ((int)w.st.tensors[i].dtype >= 0 && (int)w.st.tensors[i].dtype < 8)
            per[w.st.tensors[i].dtype]++;
    printf("dtypes        ");
    for (int d = 0; d < 8; d++)
        if (per[d])
            printf(" %s: %d tensors", safetensors_dtype_name((enum safetensors_dtype)d), per[d]);
    printf("%s%s%s\n", c.dtype[0] ? " (config: " : "", c.dtype, c.dtype[0] ? ")" : "");
    printf("weights        %s bytes (%s) in %d file%s\n", info_group(g1, sizeof g1, w.weight_bytes),
           info_bytes(b1, sizeof b1, (double)w.weight_bytes), w.st.n_files, w.st.n_files == 1 ? "" : "s");
    size_t kb = model_kv_bytes_per_token(&c, KV_DTYPE_BF16), kf = model_kv_bytes_per_token(&c, KV_DTYPE_F32);
    printf("kv per token   bf16 %s bytes (%s), f32 %s bytes (%s)\n", info_group(g1, sizeof g1, (long long)kb),
           info_bytes(b1, sizeof b1, (double)kb), info_group(g2, sizeof g2, (long long)kf),
           info_bytes(b2, sizeof b2, (double)kf));
    printf("tokens         bos %d, eos", c.bos_token_id);
    for (int i = 0; i < c.n_eos; i++)
        printf(" %d", c.eos_token_ids[i]);
    printf("%s\n", c.n_eos ? "" : " (none)");
    if (c.has_temperature || c.has_top_p || c.has_top_k) {
        printf("generation    ");
        if (c.has_temperature)
            printf(" temperature %g", c.gen_temperature);
        if (c.has_top_p)
            printf(" top_p %g", c.gen_top_p);
        if (c.has_top_k)
            printf(" top_k %d", c.gen_top_k);
        printf("\n");
    }
    weights_free(&w);
    return 0;
}
