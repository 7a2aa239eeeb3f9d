/* libFuzzer target: config.json and generation_config.json parsing of arbitrary text.
 * Built by tests/fuzz/build.sh; replayed over the corpus by tests/unit/test_fuzz_replay.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/config.h"

/* A valid base for generation_config.json (its eos ids are checked against vocab). */
static const char fuzz_config_base[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":1000,\"hidden_size\":64,"
    "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":32,\"rope_theta\":10000}";

/* The invariants a successful parse promises to the rest of hearth. */
static void fuzz_config_check(const struct model_config *c)
{
    if (c->vocab_size < 1 || c->hidden_size < 1 || c->n_layers < 1 || c->n_layers > MODEL_MAX_LAYERS ||
        c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0 || c->head_dim < 2 ||
        c->head_dim % 2 != 0 || !(c->rope_theta > 0) || !(c->rms_norm_eps > 0) || c->n_eos < 0 ||
        c->n_eos > MODEL_MAX_EOS || c->bos_token_id >= c->vocab_size || c->max_position_embeddings < 1)
        __builtin_trap();
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] < 0 || c->eos_token_ids[i] >= c->vocab_size)
            __builtin_trap();
    bool any_dense = false;
    for (int i = 0; i < MODEL_MAX_LAYERS; i++) {
        if (c->layer_is_moe[i] && (i >= c->n_layers || c->n_experts < 1 || c->n_experts_per_tok < 1 ||
                                   c->n_experts_per_tok > c->n_experts || c->moe_intermediate_size < 1))
            __builtin_trap();
        if (i < c->n_layers && !c->layer_is_moe[i])
            any_dense = true;
    }
    if (any_dense && c->intermediate_size < 1)
        __builtin_trap();
}

/* Parses data as config.json (returned) and as generation_config.json on a valid base. */
static enum hr_status fuzz_config_run(const uint8_t *data, size_t size)
{
    struct model_config c;
    char err[HR_ERRLEN];
    enum hr_status rc = model_config_parse(&c, (const char *)data, size, "fuzz/config.json", err, sizeof err);
    if (rc == HR_OK)
        fuzz_config_check(&c);
    struct model_config g;
    if (model_config_parse(&g, fuzz_config_base, sizeof fuzz_config_base - 1, "base", err, sizeof err) != HR_OK)
        __builtin_trap();
    if (model_config_parse_generation(&g, (const char *)data, size, "fuzz/generation_config.json", err,
                                      sizeof err) == HR_OK) {
        fuzz_config_check(&g);
        if ((g.has_top_p && !(g.gen_top_p > 0 && g.gen_top_p <= 1)) || (g.has_top_k && g.gen_top_k < 0) ||
            (g.has_temperature && !(g.gen_temperature >= 0)))
            __builtin_trap();
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_config_run(data, size);
    return 0;
}
