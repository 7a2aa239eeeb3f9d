/* config.json / generation_config.json: the four fixtures, the published hub
 * configs of real Qwen3 checkpoints, the transformers-5 spelling, defaults, and every
 * missing key / wrong type / out-of-range value. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "model/config.h"
#include "test.h"
#include "testfs.h"

#define HAS(s, sub) (strstr((s), (sub)) != NULL)

/* Published config.json of Qwen/Qwen3-0.6B (hub, transformers 4.51). */
static const char *QWEN3_0_6B =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":1024,\"initializer_range\":0.02,\"intermediate_size\":3072,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

/* Its generation_config.json. */
static const char *QWEN3_GEN =
    "{\"bos_token_id\":151643,\"do_sample\":true,\"eos_token_id\":[151645,151643],\"pad_token_id\":151643,"
    "\"temperature\":0.6,\"top_k\":20,\"top_p\":0.95,\"transformers_version\":\"4.51.0\"}";

/* Published config.json of Qwen/Qwen3-32B. */
static const char *QWEN3_32B =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":5120,\"initializer_range\":0.02,\"intermediate_size\":25600,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":64,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":64,\"num_hidden_layers\":64,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

/* Published config.json of Qwen/Qwen3-30B-A3B. */
static const char *QWEN3_30B_A3B =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"decoder_sparse_step\":1,\"eos_token_id\":151645,\"head_dim\":128,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":6144,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":48,\"mlp_only_layers\":[],"
    "\"model_type\":\"qwen3_moe\",\"moe_intermediate_size\":768,\"norm_topk_prob\":true,"
    "\"num_attention_heads\":32,\"num_experts\":128,\"num_experts_per_tok\":8,\"num_hidden_layers\":48,"
    "\"num_key_value_heads\":4,\"output_router_logits\":false,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,"
    "\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.001,\"sliding_window\":null,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\","
    "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

static enum hr_status parse(struct model_config *c, const char *text, char *err, size_t n)
{
    return model_config_parse(c, text, strlen(text), "cfg.json", err, n);
}

/* ---------------------------------------------------------------- fixtures */

static void load_fixture(struct model_config *c, const char *name)
{
    char p[1024], err[HR_ERRLEN] = "";
    snprintf(p, sizeof p, "%s/fixtures/%s", test_data_dir(), name);
    CHECK_OK(model_config_load(c, p, err, sizeof err), err);
}

static void check_tiny_common(const struct model_config *c)
{
    CHECK(c->vocab_size == 512 && c->hidden_size == 64 && c->intermediate_size == 128);
    CHECK(c->n_layers == 2 && c->n_heads == 4 && c->n_kv_heads == 2 && c->head_dim == 32);
    CHECK(c->max_position_embeddings == 4096 && c->rope_theta == 1e6 && c->rms_norm_eps == 1e-6);
    CHECK(!c->has_temperature && !c->has_top_p && !c->has_top_k); /* their generation configs have none */
}

static void test_fixture_qwen3_tiny(void)
{
    struct model_config c;
    load_fixture(&c, "qwen3-tiny");
    CHECK(c.arch == MODEL_ARCH_QWEN3);
    check_tiny_common(&c);
    CHECK(c.tie_word_embeddings);
    CHECK(!strcmp(c.dtype, "float32"));
    CHECK(c.bos_token_id == -1 && c.n_eos == 0); /* null in the file */
    CHECK(!c.layer_is_moe[0] && !c.layer_is_moe[1] && c.n_experts == 0);
}

static void test_fixture_qwen3_tiny_bf16(void)
{
    struct model_config c;
    load_fixture(&c, "qwen3-tiny-bf16");
    CHECK(c.arch == MODEL_ARCH_QWEN3);
    check_tiny_common(&c);
    CHECK(c.tie_word_embeddings && !strcmp(c.dtype, "bfloat16"));
    CHECK(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2);
}

static void test_fixture_moe(void)
{
    struct model_config c;
    load_fixture(&c, "qwen3moe-tiny");
    CHECK(c.arch == MODEL_ARCH_QWEN3_MOE);
    check_tiny_common(&c);
    CHECK(!c.tie_word_embeddings && !strcmp(c.dtype, "float32"));
    CHECK(c.n_experts == 8 && c.n_experts_per_tok == 2 && c.moe_intermediate_size == 32);
    CHECK(c.decoder_sparse_step == 1 && c.norm_topk_prob);
    CHECK(c.layer_is_moe[0] && c.layer_is_moe[1]);

    load_fixture(&c, "qwen3moe-tiny-bf16");
    CHECK(c.arch == MODEL_ARCH_QWEN3_MOE);
    check_tiny_common(&c);
    CHECK(!c.tie_word_embeddings && !strcmp(c.dtype, "bfloat16"));
    CHECK(c.n_experts == 8 && c.n_experts_per_tok == 2 && !c.norm_topk_prob);
    CHECK(c.layer_is_moe[0] && !c.layer_is_moe[1]); /* mlp_only_layers: [1] */
    CHECK(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2);
}

/* ---------------------------------------------------------------- real configs */

static void test_hub_qwen3_0_6b(void)
{
    struct model_config c;
    char err[HR_ERRLEN] = "";
    CHECK_OK(parse(&c, QWEN3_0_6B, err, sizeof err), err);
    CHECK(c.arch == MODEL_ARCH_QWEN3 && c.vocab_size == 151936 && c.hidden_size == 1024);
    CHECK(c.n_layers == 28 && c.n_heads == 16 && c.n_kv_heads == 8 && c.head_dim == 128);
    CHECK(c.intermediate_size == 3072 && c.tie_word_embeddings && c.rope_theta == 1e6);
    CHECK(c.max_position_embeddings == 40960 && c.bos_token_id == 151643);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 151645);
    CHECK(!strcmp(c.dtype, "bfloat16"));
    CHECK_OK(model_config_parse_generation(&c, QWEN3_GEN, strlen(QWEN3_GEN), "gen.json", err, sizeof err), err);
    CHECK(c.n_eos == 2 && c.eos_token_ids[0] == 151645 && c.eos_token_ids[1] == 151643);
    CHECK(c.has_temperature && c.gen_temperature == 0.6);
    CHECK(c.has_top_p && c.gen_top_p == 0.95);
    CHECK(c.has_top_k && c.gen_top_k == 20);
}

static void test_hub_qwen3_32b(void)
{
    struct model_config c;
    char err[HR_ERRLEN] = "";
    CHECK_OK(parse(&c, QWEN3_32B, err, sizeof err), err);
    CHECK(c.hidden_size == 5120 && c.n_layers == 64 && c.n_heads == 64 && c.n_kv_heads == 8);
    CHECK(c.head_dim == 128 && c.intermediate_size == 25600 && !c.tie_word_embeddings);
}

static void test_hub_qwen3_30b_a3b(void)
{
    struct model_config c;
    char err[HR_ERRLEN] = "";
    CHECK_OK(parse(&c, QWEN3_30B_A3B, err, sizeof err), err);
    CHECK(c.arch == MODEL_ARCH_QWEN3_MOE && c.hidden_size == 2048 && c.n_layers == 48);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 4 && c.head_dim == 128); /* head_dim != hidden / heads */
    CHECK(c.n_experts == 128 && c.n_experts_per_tok == 8 && c.moe_intermediate_size == 768);
    CHECK(c.intermediate_size == 6144 && c.norm_topk_prob && !c.tie_word_embeddings);
    CHECK(c.decoder_sparse_step == 1);
    int moe = 0;
    for (int i = 0; i < c.n_layers; i++)
        moe += c.layer_is_moe[i];
    CHECK(moe == 48);
}

/* The same model in transformers-5 spelling gives the same config. */
static void test_transformers5_spelling(void)
{
    char err[HR_ERRLEN] = "";
    json_t *j = json_loads(QWEN3_30B_A3B, 0, NULL);
    json_object_del(j, "rope_theta");
    json_object_del(j, "torch_dtype");
    json_object_del(j, "num_experts");
    json_object_del(j, "rope_scaling");
    json_object_set_new(j, "rope_parameters", json_pack("{s:f,s:s}", "rope_theta", 1e6, "rope_type", "default"));
    json_object_set_new(j, "dtype", json_string("bfloat16"));
    json_object_set_new(j, "num_local_experts", json_integer(128));
    char *s = json_dumps(j, 0);
    struct model_config a, b;
    CHECK_OK(parse(&a, QWEN3_30B_A3B, err, sizeof err), err);
    CHECK_OK(parse(&b, s, err, sizeof err), err);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(s);
    json_decref(j);
}

/* ---------------------------------------------------------------- defaults and rules */

static json_t *base_json(const char *text)
{
    return json_loads(text, 0, NULL);
}

static enum hr_status parse_json(struct model_config *c, json_t *j, char *err, size_t n)
{
    char *s = json_dumps(j, 0);
    enum hr_status st = parse(c, s, err, n);
    free(s);
    return st;
}

static void test_defaults(void)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    /* Qwen3: no head_dim -> 128 (Qwen3Config default), no kv heads -> heads, untied */
    json_t *j = base_json(QWEN3_0_6B);
    json_object_del(j, "head_dim");
    json_object_del(j, "num_key_value_heads");
    json_object_del(j, "tie_word_embeddings");
    json_object_del(j, "rms_norm_eps");
    json_object_del(j, "max_position_embeddings");
    json_object_del(j, "architectures"); /* model_type decides */
    json_object_set_new(j, "eos_token_id", json_null());
    json_object_set_new(j, "bos_token_id", json_null());
    CHECK_OK(parse_json(&c, j, err, sizeof err), err);
    CHECK(c.arch == MODEL_ARCH_QWEN3 && c.head_dim == 128 && c.n_kv_heads == 16 && !c.tie_word_embeddings);
    CHECK(c.rms_norm_eps == 1e-6 && c.max_position_embeddings == 32768);
    CHECK(c.n_eos == 0 && c.bos_token_id == -1 && c.dtype[0] == 'b');
    json_decref(j);

    /* MoE: no head_dim -> hidden / heads; defaults of step, norm_topk_prob, mlp_only_layers */
    j = base_json(QWEN3_30B_A3B);
    json_object_del(j, "head_dim");
    json_object_del(j, "decoder_sparse_step");
    json_object_del(j, "norm_topk_prob");
    json_object_del(j, "mlp_only_layers");
    json_object_del(j, "intermediate_size"); /* every layer is sparse: not needed */
    json_object_del(j, "torch_dtype");
    json_object_set_new(j, "eos_token_id", json_pack("[i,i,i]", 1, 2, 3));
    CHECK_OK(parse_json(&c, j, err, sizeof err), err);
    CHECK(c.head_dim == 64 && c.decoder_sparse_step == 1 && !c.norm_topk_prob && c.dtype[0] == 0);
    CHECK(c.intermediate_size == 0 && c.layer_is_moe[0] && c.layer_is_moe[47]);
    CHECK(c.n_eos == 3 && c.eos_token_ids[2] == 3);
    json_decref(j);
}

static void test_sparse_rule(void)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    json_t *j = base_json(QWEN3_30B_A3B);
    json_object_set_new(j, "num_hidden_layers", json_integer(6));
    json_object_set_new(j, "decoder_sparse_step", json_integer(2));
    json_object_set_new(j, "mlp_only_layers", json_pack("[i]", 3));
    CHECK_OK(parse_json(&c, j, err, sizeof err), err);
    /* sparse iff i not in [3] and (i + 1) % 2 == 0: layers 1 and 5 */
    const bool want[6] = {false, true, false, false, false, true};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(c.layer_is_moe[i] == want[i], "layer %d", i);

    /* no experts at all: every layer dense, and the dense width becomes required */
    json_object_set_new(j, "num_experts", json_integer(0));
    CHECK_OK(parse_json(&c, j, err, sizeof err), err);
    for (int i = 0; i < 6; i++)
        CHECK(!c.layer_is_moe[i]);
    json_object_del(j, "intermediate_size");
    CHECK(parse_json(&c, j, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "'intermediate_size'"));
    json_decref(j);
}

/* ---------------------------------------------------------------- errors */

static void test_missing_keys(void)
{
    const char *dense_keys[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                "intermediate_size", "rope_theta"};
    const char *moe_keys[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "num_key_value_heads"};
    char err[HR_ERRLEN];
    struct model_config c;
    for (size_t i = 0; i < sizeof dense_keys / sizeof *dense_keys; i++) {
        json_t *j = base_json(QWEN3_0_6B);
        json_object_del(j, dense_keys[i]);
        err[0] = 0;
        CHECK_MSG(parse_json(&c, j, err, sizeof err) == HR_ERR_FORMAT, "%s", dense_keys[i]);
        CHECK_MSG(HAS(err, "cfg.json") && HAS(err, dense_keys[i]) && HAS(err, "missing"), "%s: %s", dense_keys[i], err);
        json_decref(j);
    }
    for (size_t i = 0; i < sizeof moe_keys / sizeof *moe_keys; i++) {
        json_t *j = base_json(QWEN3_30B_A3B);
        json_object_del(j, moe_keys[i]);
        err[0] = 0;
        CHECK_MSG(parse_json(&c, j, err, sizeof err) == HR_ERR_FORMAT, "%s", moe_keys[i]);
        CHECK_MSG(HAS(err, "cfg.json") && HAS(err, moe_keys[i]), "%s: %s", moe_keys[i], err);
        json_decref(j);
    }
    json_t *j = base_json(QWEN3_0_6B);
    json_object_del(j, "architectures");
    json_object_del(j, "model_type");
    CHECK(parse_json(&c, j, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "'architectures'"));
    json_decref(j);
}

struct bad_case {
    const char *base;   /* QWEN3_0_6B or QWEN3_30B_A3B */
    const char *key;
    const char *value;  /* JSON text */
    enum hr_status st;
    const char *sub;    /* expected in the message besides file and key */
};

static void test_bad_values(void)
{
    const char *D = QWEN3_0_6B, *M = QWEN3_30B_A3B;
    const struct bad_case cases[] = {
        {D, "hidden_size", "\"1024\"", HR_ERR_FORMAT, "integer"},
        {D, "hidden_size", "1024.5", HR_ERR_FORMAT, "integer"},
        {D, "hidden_size", "0", HR_ERR_FORMAT, "range"},
        {D, "vocab_size", "-5", HR_ERR_FORMAT, "range"},
        {D, "num_hidden_layers", "257", HR_ERR_FORMAT, "range"},
        {D, "num_key_value_heads", "5", HR_ERR_FORMAT, "divide"},
        {D, "num_key_value_heads", "32", HR_ERR_FORMAT, "range"},
        {D, "head_dim", "127", HR_ERR_FORMAT, "even"},
        {D, "head_dim", "[128]", HR_ERR_FORMAT, "integer"},
        {D, "tie_word_embeddings", "1", HR_ERR_FORMAT, "true or false"},
        {D, "rope_theta", "0", HR_ERR_FORMAT, "range"},
        {D, "rope_theta", "\"1e6\"", HR_ERR_FORMAT, "number"},
        {D, "rms_norm_eps", "0", HR_ERR_FORMAT, "range"},
        {D, "rms_norm_eps", "true", HR_ERR_FORMAT, "number"},
        {D, "eos_token_id", "151936", HR_ERR_FORMAT, "range"},
        {D, "eos_token_id", "[1, \"2\"]", HR_ERR_FORMAT, "integer"},
        {D, "eos_token_id", "{}", HR_ERR_FORMAT, "list"},
        {D, "eos_token_id", "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]", HR_ERR_FORMAT, "at most"},
        {D, "bos_token_id", "-1", HR_ERR_FORMAT, "range"},
        {D, "torch_dtype", "16", HR_ERR_FORMAT, "string"},
        {D, "architectures", "[\"LlamaForCausalLM\"]", HR_ERR_UNSUPPORTED, "LlamaForCausalLM"},
        {D, "architectures", "\"Qwen3ForCausalLM\"", HR_ERR_FORMAT, "list"},
        {D, "use_sliding_window", "true", HR_ERR_UNSUPPORTED, "sliding"},
        {D, "attention_bias", "true", HR_ERR_UNSUPPORTED, "bias"},
        {D, "hidden_act", "\"gelu\"", HR_ERR_UNSUPPORTED, "silu"},
        {D, "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":4.0}", HR_ERR_UNSUPPORTED, "scaled"},
        {D, "rope_parameters", "{\"rope_type\":\"yarn\",\"rope_theta\":1e6}", HR_ERR_UNSUPPORTED, "yarn"},
        {D, "rope_parameters", "7", HR_ERR_FORMAT, "object"},
        {D, "max_position_embeddings", "0", HR_ERR_FORMAT, "range"},
        {M, "num_experts_per_tok", "129", HR_ERR_FORMAT, "range"},
        {M, "num_experts_per_tok", "0", HR_ERR_FORMAT, "range"},
        {M, "num_experts", "-1", HR_ERR_FORMAT, "range"},
        /* MODEL_MAX_EXPERTS: the error names the limit; a crafted count never reaches the kernels */
        {M, "num_experts", "1025", HR_ERR_FORMAT, "1024]"},
        {M, "num_experts", "16384", HR_ERR_FORMAT, "1024]"},
        {M, "num_local_experts", "16384", HR_ERR_FORMAT, "1024]"},
        {M, "num_experts", "1024", HR_OK, ""},
        {M, "num_local_experts", "64", HR_ERR_FORMAT, "disagree"},
        {M, "decoder_sparse_step", "0", HR_ERR_FORMAT, "range"},
        {M, "mlp_only_layers", "[48]", HR_ERR_FORMAT, "range"},
        {M, "mlp_only_layers", "7", HR_ERR_FORMAT, "list"},
        {M, "norm_topk_prob", "\"yes\"", HR_ERR_FORMAT, "true or false"},
        {M, "moe_intermediate_size", "0", HR_ERR_FORMAT, "range"},
        {M, "model_type", "\"mixtral\"", HR_OK, ""}, /* architectures decides */
    };
    char err[HR_ERRLEN];
    struct model_config c;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct bad_case *k = &cases[i];
        json_t *j = base_json(k->base);
        json_t *v = json_loads(k->value, JSON_DECODE_ANY, NULL);
        CHECK_MSG(v != NULL, "case %zu value", i);
        json_object_set_new(j, k->key, v);
        err[0] = 0;
        enum hr_status st = parse_json(&c, j, err, sizeof err);
        CHECK_MSG(st == k->st, "%s = %s -> %s (%s)", k->key, k->value, hr_status_str(st), err);
        if (k->st != HR_OK) {
            /* rope_parameters.rope_type names the nested key */
            CHECK_MSG(HAS(err, "cfg.json") && HAS(err, k->key) && HAS(err, k->sub), "%s = %s: '%s'", k->key,
                      k->value, err);
        }
        json_decref(j);
    }
}

static void test_bad_documents(void)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    CHECK(parse(&c, "{\"vocab_size\": ", err, sizeof err) == HR_ERR_FORMAT && HAS(err, "cfg.json") &&
          HAS(err, "JSON"));
    CHECK(parse(&c, "[1]", err, sizeof err) == HR_ERR_FORMAT && HAS(err, "object"));
    CHECK(parse(&c, "", err, sizeof err) == HR_ERR_FORMAT);
    CHECK(parse(&c, "{\"a\":1,\"a\":2}", err, sizeof err) == HR_ERR_FORMAT);
    CHECK(model_config_parse(&c, "{\"x\":1}", 3, "cfg.json", err, sizeof err) == HR_ERR_FORMAT); /* cut short */
}

static void test_generation_errors(void)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    CHECK_OK(parse(&c, QWEN3_0_6B, err, sizeof err), err);
    struct model_config before = c;
    const char *bad[][2] = {
        {"{\"eos_token_id\": 151936}", "eos_token_id"},
        {"{\"eos_token_id\": [151645, null]}", "eos_token_id"},
        {"{\"top_p\": 1.5}", "top_p"},
        {"{\"top_p\": 0}", "top_p"},
        {"{\"temperature\": \"hot\"}", "temperature"},
        {"{\"temperature\": -1}", "temperature"},
        {"{\"top_k\": 2.5}", "top_k"},
        {"{\"top_k\": -1}", "top_k"},
        {"{\"bos_token_id\": [1, 2]}", "bos_token_id"},
        {"[]", "object"},
        {"{", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        enum hr_status st = model_config_parse_generation(&c, bad[i][0], strlen(bad[i][0]), "gen.json", err,
                                                          sizeof err);
        CHECK_MSG(st == HR_ERR_FORMAT && HAS(err, "gen.json") && HAS(err, bad[i][1]), "%s -> %s", bad[i][0], err);
        CHECK_MSG(memcmp(&c, &before, sizeof c) == 0, "%s changed the config", bad[i][0]);
    }
    /* null eos in generation_config keeps config.json's */
    const char *g = "{\"eos_token_id\": null, \"temperature\": 0}";
    CHECK_OK(model_config_parse_generation(&c, g, strlen(g), "gen.json", err, sizeof err), err);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 151645 && c.has_temperature && c.gen_temperature == 0);
}

static void test_load_errors(void)
{
    char tmp[512], err[HR_ERRLEN] = "";
    struct model_config c;
    CHECK(testfs_mkdtemp(tmp, sizeof tmp, "cfg") != NULL);
    CHECK(model_config_load(&c, tmp, err, sizeof err) == HR_ERR_IO && HAS(err, "config.json"));
    testfs_write_str(tmp, "config.json", QWEN3_0_6B);
    CHECK_OK(model_config_load(&c, tmp, err, sizeof err), err);
    CHECK(c.n_eos == 1 && !c.has_top_k);
    testfs_write_str(tmp, "generation_config.json", QWEN3_GEN);
    CHECK_OK(model_config_load(&c, tmp, err, sizeof err), err);
    CHECK(c.n_eos == 2 && c.has_top_k && c.gen_top_k == 20);
    testfs_write_str(tmp, "generation_config.json", "{\"top_k\": \"many\"}");
    CHECK(model_config_load(&c, tmp, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "generation_config.json") &&
          HAS(err, "top_k") && HAS(err, tmp));
    testfs_write_str(tmp, "config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"]}");
    CHECK(model_config_load(&c, tmp, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "config.json") &&
          HAS(err, "vocab_size"));
    testfs_rmtree(tmp);
}

int main(void)
{
    TEST_RUN(test_fixture_qwen3_tiny);
    TEST_RUN(test_fixture_qwen3_tiny_bf16);
    TEST_RUN(test_fixture_moe);
    TEST_RUN(test_hub_qwen3_0_6b);
    TEST_RUN(test_hub_qwen3_32b);
    TEST_RUN(test_hub_qwen3_30b_a3b);
    TEST_RUN(test_transformers5_spelling);
    TEST_RUN(test_defaults);
    TEST_RUN(test_sparse_rule);
    TEST_RUN(test_missing_keys);
    TEST_RUN(test_bad_values);
    TEST_RUN(test_bad_documents);
    TEST_RUN(test_generation_errors);
    TEST_RUN(test_load_errors);
    TEST_END();
}
