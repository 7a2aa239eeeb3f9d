/* Model configuration: config.json (both the transformers-5 and the hub style) and
 * generation_config.json of a Hugging Face model directory. */
#ifndef HEARTH_MODEL_CONFIG_H
#define HEARTH_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define MODEL_MAX_LAYERS 256
#define MODEL_MAX_EOS 16
/* The one bound on num_experts (the largest published MoE checkpoints have 512); the
 * loader rejects more, naming this limit. */
#define MODEL_MAX_EXPERTS 1024

enum model_arch {
    MODEL_ARCH_QWEN3,     /* Qwen3ForCausalLM */
    MODEL_ARCH_QWEN3_MOE, /* Qwen3MoeForCausalLM */
};

struct model_config {
    enum model_arch arch;
    int vocab_size;
    int hidden_size;
    int intermediate_size;       /* dense MLP width */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;                /* "head_dim"; absent: 128 (Qwen3Config), hidden/heads (MoE) */
    int max_position_embeddings;
    double rope_theta;           /* rope_parameters.rope_theta or rope_theta */
    double rms_norm_eps;
    bool tie_word_embeddings;
    char dtype[16];              /* "dtype" or "torch_dtype" as written, "" if absent */

    /* Mixture of experts (arch == MODEL_ARCH_QWEN3_MOE) */
    int n_experts;               /* num_experts or num_local_experts */
    int n_experts_per_tok;
    int moe_intermediate_size;
    int decoder_sparse_step;
    bool norm_topk_prob;
    bool layer_is_moe[MODEL_MAX_LAYERS]; /* from mlp_only_layers and decoder_sparse_step */

    /* Token ids: config.json, overridden by generation_config.json where present */
    int bos_token_id;            /* -1 if none */
    int n_eos;
    int eos_token_ids[MODEL_MAX_EOS];

    /* Generation defaults (generation_config.json); has_* false when absent */
    bool has_temperature, has_top_p, has_top_k;
    double gen_temperature;
    double gen_top_p;
    int gen_top_k;
};

/* Reads DIR/config.json and, when present, DIR/generation_config.json.
 * Errors name the file and the key. */
enum hr_status model_config_load(struct model_config *cfg, const char *dir, char *err, size_t errlen);

/* Parses config.json text (name is used in messages).  Fuzzable: never crashes. */
enum hr_status model_config_parse(struct model_config *cfg, const char *text, size_t len,
                                  const char *name, char *err, size_t errlen);
/* Parses generation_config.json text into cfg (eos ids, sampling defaults). */
enum hr_status model_config_parse_generation(struct model_config *cfg, const char *text, size_t len,
                                             const char *name, char *err, size_t errlen);

#endif
