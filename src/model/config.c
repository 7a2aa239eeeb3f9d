/* config.json and generation_config.json of Qwen3 / Qwen3-MoE checkpoints.
 *
 * Both spellings are read: the hub files (transformers 4: rope_theta, torch_dtype,
 * num_experts) and those transformers 5 writes (rope_parameters.rope_theta, dtype,
 * num_local_experts).  Keys that fix the geometry are required; keys with a
 * structural default take the default transformers' config classes give them
 * (Qwen3Config / Qwen3MoeConfig), so a file means here what it means there. */
#include "model/config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

#define CONFIG_FILE_MAX (16u * 1024u * 1024u)

/* Defaults of transformers' config classes (identical in 4.5x and 5.x). */
#define CONFIG_DEFAULT_RMS_EPS 1e-6
#define CONFIG_DEFAULT_MAX_POS 32768
#define CONFIG_DEFAULT_QWEN3_HEAD_DIM 128

/* ---------------------------------------------------------------- typed getters */

struct jreader {
    json_t *root;
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
};

/* NULL for absent or null: an explicit null means "use the default", as in Python. */
static json_t *jget(const struct jreader *r, const char *key)
{
    json_t *v = json_object_get(r->root, key);
    return json_is_null(v) ? NULL : v;
}

static enum hr_status missing(const struct jreader *r, const char *key)
{
    return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: missing required key '%s'", r->name, key);
}

static enum hr_status jint_value(const struct jreader *r, const char *key, json_t *v, long long lo,
                                 long long hi, int *out)
{
    if (!json_is_integer(v))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' must be an integer", r->name, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' = %lld is out of range [%lld, %lld]",
                      r->name, key, x, lo, hi);
    *out = (int)x;
    return HR_OK;
}

/* *out keeps its value (the default) when the key is absent and not required. */
static enum hr_status jint(const struct jreader *r, const char *key, bool required, long long lo,
                           long long hi, int *out)
{
    json_t *v = jget(r, key);
    if (!v)
        return required ? missing(r, key) : HR_OK;
    return jint_value(r, key, v, lo, hi, out);
}

static enum hr_status jnum_value(const struct jreader *r, const char *key, json_t *v, double lo, double hi,
                                 bool lo_open, double *out)
{
    if (!json_is_number(v))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' must be a number", r->name, key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' = %g is out of range %c%g, %g]",
                      r->name, key, x, lo_open ? '(' : '[', lo, hi);
    *out = x;
    return HR_OK;
}

static enum hr_status jnum(const struct jreader *r, const char *key, bool required, double lo, double hi,
                           bool lo_open, double *out)
{
    json_t *v = jget(r, key);
    if (!v)
        return required ? missing(r, key) : HR_OK;
    return jnum_value(r, key, v, lo, hi, lo_open, out);
}

static enum hr_status jbool(const struct jreader *r, const char *key, bool *out)
{
    json_t *v = jget(r, key);
    if (!v)
        return HR_OK;
    if (!json_is_boolean(v))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' must be true or false", r->name, key);
    *out = json_is_true(v);
    return HR_OK;
}

/* NULL when absent; an error status in *rc when present but not a string. */
static const char *jstr(const struct jreader *r, const char *key, enum hr_status *rc)
{
    json_t *v = jget(r, key);
    *rc = HR_OK;
    if (!v)
        return NULL;
    if (!json_is_string(v)) {
        *rc = hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' must be a string", r->name, key);
        return NULL;
    }
    return json_string_value(v);
}

/* Token ids: an integer, a list of integers, or null (no ids). */
static enum hr_status jids(const struct jreader *r, const char *key, json_t *v, int vocab, int *ids,
                           int max, int *n)
{
    *n = 0;
    if (!v)
        return HR_OK;
    if (json_is_integer(v))
        return (*n = 1, jint_value(r, key, v, 0, (long long)vocab - 1, &ids[0]));
    if (!json_is_array(v))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' must be an integer, a list or null",
                      r->name, key);
    size_t cnt = json_array_size(v);
    if (cnt > (size_t)max)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key '%s' lists %zu ids (at most %d)", r->name, key,
                      cnt, max);
    for (size_t i = 0; i < cnt; i++) {
        enum hr_status rc = jint_value(r, key, json_array_get(v, i), 0, (long long)vocab - 1, &ids[i]);
        if (rc != HR_OK)
            return rc;
    }
    *n = (int)cnt;
    return HR_OK;
}

/* ---------------------------------------------------------------- config.json */

static enum hr_status parse_arch(const struct jreader *r, enum model_arch *arch)
{
    enum hr_status rc;
    json_t *archs = jget(r, "architectures");
    if (archs) {
        if (!json_is_array(archs))
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'architectures' must be a list of strings",
                          r->name);
        for (size_t i = 0; i < json_array_size(archs); i++) {
            const char *a = json_string_value(json_array_get(archs, i));
            if (!a)
                return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                              "%s: key 'architectures' must be a list of strings", r->name);
            if (!strcmp(a, "Qwen3ForCausalLM")) {
                *arch = MODEL_ARCH_QWEN3;
                return HR_OK;
            }
            if (!strcmp(a, "Qwen3MoeForCausalLM")) {
                *arch = MODEL_ARCH_QWEN3_MOE;
                return HR_OK;
            }
        }
        const char *first = json_string_value(json_array_get(archs, 0));
        return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                      "%s: key 'architectures': '%.64s' is not supported (Qwen3ForCausalLM, "
                      "Qwen3MoeForCausalLM)",
                      r->name, first ? first : "");
    }
    const char *mt = jstr(r, "model_type", &rc);
    if (rc != HR_OK)
        return rc;
    if (!mt)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: missing required key 'architectures' (or 'model_type')",
                      r->name);
    if (!strcmp(mt, "qwen3")) {
        *arch = MODEL_ARCH_QWEN3;
        return HR_OK;
    }
    if (!strcmp(mt, "qwen3_moe")) {
        *arch = MODEL_ARCH_QWEN3_MOE;
        return HR_OK;
    }
    return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                  "%s: key 'model_type': '%.64s' is not supported (qwen3, qwen3_moe)", r->name, mt);
}

/* rope_parameters (transformers 5) or rope_theta + rope_scaling (hub).  Only plain
 * RoPE is implemented: a scaled variant is refused rather than run wrong. */
static enum hr_status parse_rope(const struct jreader *r, double *theta)
{
    enum hr_status rc;
    json_t *rp = jget(r, "rope_parameters");
    if (rp) {
        if (!json_is_object(rp))
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'rope_parameters' must be an object", r->name);
        struct jreader sub = {rp, r->name, r->err, r->errlen};
        const char *type = jstr(&sub, "rope_type", &rc);
        if (rc != HR_OK)
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'rope_parameters.rope_type' must be a string",
                          r->name);
        if (type && strcmp(type, "default") != 0)
            return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                          "%s: key 'rope_parameters.rope_type' = '%.32s' is not supported (default only)",
                          r->name, type);
        json_t *t = jget(&sub, "rope_theta");
        if (t)
            return jnum_value(r, "rope_parameters.rope_theta", t, 0, 1e12, true, theta);
    }
    json_t *rs = jget(r, "rope_scaling");
    if (rs) {
        if (!json_is_object(rs))
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'rope_scaling' must be an object or null",
                          r->name);
        struct jreader sub = {rs, r->name, r->err, r->errlen};
        const char *type = jstr(&sub, "rope_type", &rc);
        if (rc == HR_OK && !type)
            type = jstr(&sub, "type", &rc);
        if (rc != HR_OK || (type && strcmp(type, "default") != 0))
            return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                          "%s: key 'rope_scaling': scaled RoPE is not supported", r->name);
    }
    if (!jget(r, "rope_theta"))
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                      "%s: missing required key 'rope_theta' (or 'rope_parameters.rope_theta')", r->name);
    return jnum(r, "rope_theta", true, 0, 1e12, true, theta);
}

/* Features transformers' Qwen3 classes have but hearth does not implement. */
static enum hr_status refuse_unsupported(const struct jreader *r)
{
    enum hr_status rc;
    bool b = false;
    if ((rc = jbool(r, "use_sliding_window", &b)) != HR_OK)
        return rc;
    if (b)
        return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                      "%s: key 'use_sliding_window' = true: sliding-window attention is not supported", r->name);
    b = false;
    if ((rc = jbool(r, "attention_bias", &b)) != HR_OK)
        return rc;
    if (b)
        return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                      "%s: key 'attention_bias' = true: attention biases are not supported", r->name);
    const char *act = jstr(r, "hidden_act", &rc);
    if (rc != HR_OK)
        return rc;
    if (act && strcmp(act, "silu") != 0)
        return hr_err(r->err, r->errlen, HR_ERR_UNSUPPORTED,
                      "%s: key 'hidden_act' = '%.32s' is not supported (silu only)", r->name, act);
    return HR_OK;
}

static enum hr_status parse_moe(const struct jreader *r, struct model_config *cfg, bool *any_dense)
{
    enum hr_status rc;
    /* transformers 5 names it num_local_experts (num_experts is an alias) */
    int ne = -1, nl = -1;
    if ((rc = jint(r, "num_experts", false, 0, MODEL_MAX_EXPERTS, &ne)) != HR_OK ||
        (rc = jint(r, "num_local_experts", false, 0, MODEL_MAX_EXPERTS, &nl)) != HR_OK)
        return rc;
    if (ne < 0 && nl < 0)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                      "%s: missing required key 'num_experts' (or 'num_local_experts')", r->name);
    if (ne >= 0 && nl >= 0 && ne != nl)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                      "%s: keys 'num_experts' (%d) and 'num_local_experts' (%d) disagree", r->name, ne, nl);
    cfg->n_experts = ne >= 0 ? ne : nl;
    if (cfg->n_experts > 0) {
        if ((rc = jint(r, "num_experts_per_tok", true, 1, cfg->n_experts, &cfg->n_experts_per_tok)) != HR_OK ||
            (rc = jint(r, "moe_intermediate_size", true, 1, 1 << 20, &cfg->moe_intermediate_size)) != HR_OK)
            return rc;
    }
    cfg->decoder_sparse_step = 1;
    cfg->norm_topk_prob = false;
    if ((rc = jint(r, "decoder_sparse_step", false, 1, 1 << 20, &cfg->decoder_sparse_step)) != HR_OK ||
        (rc = jbool(r, "norm_topk_prob", &cfg->norm_topk_prob)) != HR_OK)
        return rc;

    bool mlp_only[MODEL_MAX_LAYERS] = {false};
    json_t *mo = jget(r, "mlp_only_layers");
    if (mo) {
        if (!json_is_array(mo))
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'mlp_only_layers' must be a list of integers",
                          r->name);
        for (size_t i = 0; i < json_array_size(mo); i++) {
            int l;
            if ((rc = jint_value(r, "mlp_only_layers", json_array_get(mo, i), 0, cfg->n_layers - 1, &l)) != HR_OK)
                return rc;
            mlp_only[l] = true;
        }
    }
    /* Qwen3MoeDecoderLayer: sparse iff not listed, experts exist and (i+1) % step == 0 */
    *any_dense = false;
    for (int i = 0; i < cfg->n_layers; i++) {
        cfg->layer_is_moe[i] = !mlp_only[i] && cfg->n_experts > 0 && (i + 1) % cfg->decoder_sparse_step == 0;
        if (!cfg->layer_is_moe[i])
            *any_dense = true;
    }
    return HR_OK;
}

static enum hr_status parse_config(struct model_config *cfg, const struct jreader *r)
{
    enum hr_status rc;
    if ((rc = parse_arch(r, &cfg->arch)) != HR_OK)
        return rc;
    bool moe = cfg->arch == MODEL_ARCH_QWEN3_MOE;
    if ((rc = jint(r, "vocab_size", true, 1, 1 << 26, &cfg->vocab_size)) != HR_OK ||
        (rc = jint(r, "hidden_size", true, 1, 1 << 16, &cfg->hidden_size)) != HR_OK ||
        (rc = jint(r, "num_hidden_layers", true, 1, MODEL_MAX_LAYERS, &cfg->n_layers)) != HR_OK ||
        (rc = jint(r, "num_attention_heads", true, 1, 1024, &cfg->n_heads)) != HR_OK)
        return rc;
    /* Qwen3Config: a missing num_key_value_heads means plain multi-head attention;
     * Qwen3MoeConfig's default (4) belongs to one checkpoint, so it must be given. */
    cfg->n_kv_heads = cfg->n_heads;
    if ((rc = jint(r, "num_key_value_heads", moe, 1, cfg->n_heads, &cfg->n_kv_heads)) != HR_OK)
        return rc;
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                      "%s: key 'num_key_value_heads' = %d does not divide num_attention_heads = %d", r->name,
                      cfg->n_kv_heads, cfg->n_heads);

    /* head_dim: Qwen3Config defaults it to 128; Qwen3Moe's attention falls back to
     * hidden_size / num_attention_heads. */
    if (jget(r, "head_dim")) {
        if ((rc = jint(r, "head_dim", true, 2, 1024, &cfg->head_dim)) != HR_OK)
            return rc;
    } else if (moe) {
        if (cfg->hidden_size % cfg->n_heads != 0)
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT,
                          "%s: missing key 'head_dim' and hidden_size %d is not a multiple of "
                          "num_attention_heads %d",
                          r->name, cfg->hidden_size, cfg->n_heads);
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    } else {
        cfg->head_dim = CONFIG_DEFAULT_QWEN3_HEAD_DIM;
    }
    if (cfg->head_dim % 2 != 0 || cfg->head_dim < 2 || cfg->head_dim > 1024)
        return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'head_dim' = %d must be even and in [2, 1024]",
                      r->name, cfg->head_dim);

    cfg->max_position_embeddings = CONFIG_DEFAULT_MAX_POS;
    cfg->rms_norm_eps = CONFIG_DEFAULT_RMS_EPS;
    cfg->tie_word_embeddings = false; /* both config classes default to untied */
    if ((rc = jint(r, "max_position_embeddings", false, 1, INT_MAX, &cfg->max_position_embeddings)) != HR_OK ||
        (rc = jnum(r, "rms_norm_eps", false, 0, 1, true, &cfg->rms_norm_eps)) != HR_OK ||
        (rc = jbool(r, "tie_word_embeddings", &cfg->tie_word_embeddings)) != HR_OK ||
        (rc = parse_rope(r, &cfg->rope_theta)) != HR_OK || (rc = refuse_unsupported(r)) != HR_OK)
        return rc;

    const char *dt = jstr(r, "dtype", &rc);
    if (rc == HR_OK && !dt)
        dt = jstr(r, "torch_dtype", &rc);
    if (rc != HR_OK)
        return rc;
    if (dt) {
        if (strlen(dt) >= sizeof cfg->dtype)
            return hr_err(r->err, r->errlen, HR_ERR_FORMAT, "%s: key 'dtype' = '%.32s' is too long", r->name, dt);
        snprintf(cfg->dtype, sizeof cfg->dtype, "%s", dt);
    }

    bool any_dense = true;
    if (moe && (rc = parse_moe(r, cfg, &any_dense)) != HR_OK)
        return rc;
    /* The dense MLP width is needed only where a layer is dense. */
    if ((rc = jint(r, "intermediate_size", any_dense, 1, 1 << 20, &cfg->intermediate_size)) != HR_OK)
        return rc;

    cfg->bos_token_id = -1;
    int n;
    if ((rc = jids(r, "bos_token_id", jget(r, "bos_token_id"), cfg->vocab_size, &cfg->bos_token_id, 1, &n)) !=
        HR_OK)
        return rc;
    if (n == 0)
        cfg->bos_token_id = -1;
    return jids(r, "eos_token_id", jget(r, "eos_token_id"), cfg->vocab_size, cfg->eos_token_ids, MODEL_MAX_EOS,
                &cfg->n_eos);
}

static enum hr_status load_json(json_t **root, const char *text, size_t len, const char *name, char *err,
                                size_t errlen)
{
    json_error_t je;
    *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", name, je.text,
                      je.line, je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: not a JSON object", name);
    }
    return HR_OK;
}

enum hr_status model_config_parse(struct model_config *cfg, const char *text, size_t len, const char *name,
                                  char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    json_t *root;
    enum hr_status rc = load_json(&root, text, len, name, err, errlen);
    if (rc != HR_OK)
        return rc;
    struct jreader r = {root, name, err, errlen};
    rc = parse_config(cfg, &r);
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- generation_config.json */

enum hr_status model_config_parse_generation(struct model_config *cfg, const char *text, size_t len,
                                             const char *name, char *err, size_t errlen)
{
    json_t *root;
    enum hr_status rc = load_json(&root, text, len, name, err, errlen);
    if (rc != HR_OK)
        return rc;
    struct jreader r = {root, name, err, errlen};
    /* Work on a copy so that a failure leaves cfg as it was. */
    struct model_config c = *cfg;
    int n;
    json_t *v;
    if ((v = jget(&r, "eos_token_id")) != NULL &&
        (rc = jids(&r, "eos_token_id", v, c.vocab_size, c.eos_token_ids, MODEL_MAX_EOS, &c.n_eos)) != HR_OK)
        goto out;
    if ((v = jget(&r, "bos_token_id")) != NULL &&
        (rc = jids(&r, "bos_token_id", v, c.vocab_size, &c.bos_token_id, 1, &n)) != HR_OK)
        goto out;
    if (v && n == 0)
        c.bos_token_id = -1;
    if (jget(&r, "temperature")) {
        if ((rc = jnum(&r, "temperature", true, 0, 1e6, false, &c.gen_temperature)) != HR_OK)
            goto out;
        c.has_temperature = true;
    }
    if (jget(&r, "top_p")) {
        if ((rc = jnum(&r, "top_p", true, 0, 1, true, &c.gen_top_p)) != HR_OK)
            goto out;
        c.has_top_p = true;
    }
    if (jget(&r, "top_k")) {
        if ((rc = jint(&r, "top_k", true, 0, INT_MAX, &c.gen_top_k)) != HR_OK)
            goto out;
        c.has_top_k = true;
    }
    *cfg = c;
out:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- files */

static enum hr_status read_parse(struct model_config *cfg, const char *dir, const char *file, bool gen,
                                 char *err, size_t errlen)
{
    char path[4096];
    enum hr_status rc = fileio_join(path, sizeof path, dir, file, err, errlen);
    if (rc != HR_OK)
        return rc;
    char *text;
    size_t len;
    if ((rc = fileio_read_all(path, CONFIG_FILE_MAX, &text, &len, err, errlen)) != HR_OK)
        return rc;
    rc = gen ? model_config_parse_generation(cfg, text, len, path, err, errlen)
             : model_config_parse(cfg, text, len, path, err, errlen);
    free(text);
    return rc;
}

enum hr_status model_config_load(struct model_config *cfg, const char *dir, char *err, size_t errlen)
{
    enum hr_status rc = read_parse(cfg, dir, "config.json", false, err, errlen);
    if (rc != HR_OK)
        return rc;
    char path[4096];
    if (fileio_join(path, sizeof path, dir, "generation_config.json", NULL, 0) == HR_OK && fileio_exists(path))
        rc = read_parse(cfg, dir, "generation_config.json", true, err, errlen);
    return rc;
}
