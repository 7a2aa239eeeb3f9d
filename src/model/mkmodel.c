/* Random-weight checkpoints with real Qwen3 shapes (see mkmodel.h). */
#include "model/mkmodel.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "model/dtype.h"

#define MKMODEL_TOKENIZER_MAX (256u * 1024u * 1024u)
#define MKMODEL_CHUNK (1u << 20) /* elements generated per write */

/* ---------------------------------------------------------------- shapes */

struct mk_shape {
    const char *name;
    enum model_arch arch;
    int vocab, hidden, inter, layers, heads, kv_heads, head_dim, max_pos;
    bool tie;
    int experts, top_k, moe_inter;
    bool norm_topk;
    int bos, eos, eos2; /* eos2: the second stop id of generation_config.json, -1 if none */
    int dense_layer;    /* an MoE shape's layer with a dense MLP (mlp_only_layers), -1 if none */
};

/* Hub values of the published checkpoints (config.json and generation_config.json);
 * tiny is the qwen3-tiny fixture's shape. */
static const struct mk_shape shapes[] = {
    {"tiny", MODEL_ARCH_QWEN3, 512, 64, 128, 2, 4, 2, 32, 4096, true, 0, 0, 0, false, 1, 2, -1, -1},
    {"qwen3-0.6b", MODEL_ARCH_QWEN3, 151936, 1024, 3072, 28, 16, 8, 128, 40960, true, 0, 0, 0, false, 151643,
     151645, 151643, -1},
    {"qwen3-4b", MODEL_ARCH_QWEN3, 151936, 2560, 9728, 36, 32, 8, 128, 40960, true, 0, 0, 0, false, 151643,
     151645, 151643, -1},
    {"qwen3-8b", MODEL_ARCH_QWEN3, 151936, 4096, 12288, 36, 32, 8, 128, 40960, false, 0, 0, 0, false, 151643,
     151645, 151643, -1},
    /* 65.5 GB of bf16 weights: for --load-format dummy on a large card */
    {"qwen3-32b", MODEL_ARCH_QWEN3, 151936, 5120, 25600, 64, 64, 8, 128, 40960, false, 0, 0, 0, false, 151643,
     151645, 151643, -1},
    {"qwen3-30b-a3b", MODEL_ARCH_QWEN3_MOE, 151936, 2048, 6144, 48, 32, 4, 128, 40960, false, 128, 8, 768, true,
     151643, 151645, 151643, -1},
    /* small enough for a float64 transformers reference on one GPU, with Qwen3's
     * head_dim and a dense layer among the sparse ones */
    {"qwen3-moe-small", MODEL_ARCH_QWEN3_MOE, 151936, 1024, 2048, 6, 16, 4, 128, 40960, false, 32, 4, 256, true,
     151643, 151645, 151643, 2},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

const char *mkmodel_shape_names(void)
{
    return "tiny qwen3-0.6b qwen3-4b qwen3-8b qwen3-32b qwen3-30b-a3b qwen3-moe-small";
}

enum hr_status mkmodel_shape_config(const char *shape, struct model_config *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < N_SHAPES; i++) {
        const struct mk_shape *s = &shapes[i];
        if (strcmp(s->name, shape) != 0)
            continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = s->arch;
        cfg->vocab_size = s->vocab;
        cfg->hidden_size = s->hidden;
        cfg->intermediate_size = s->inter;
        cfg->n_layers = s->layers;
        cfg->n_heads = s->heads;
        cfg->n_kv_heads = s->kv_heads;
        cfg->head_dim = s->head_dim;
        cfg->max_position_embeddings = s->max_pos;
        cfg->rope_theta = 1e6;
        cfg->rms_norm_eps = 1e-6;
        cfg->tie_word_embeddings = s->tie;
        cfg->n_experts = s->experts;
        cfg->n_experts_per_tok = s->top_k;
        cfg->moe_intermediate_size = s->moe_inter;
        cfg->decoder_sparse_step = 1;
        cfg->norm_topk_prob = s->norm_topk;
        for (int l = 0; l < s->layers; l++)
            cfg->layer_is_moe[l] = s->experts > 0 && l != s->dense_layer;
        cfg->bos_token_id = s->bos;
        cfg->n_eos = 1;
        cfg->eos_token_ids[0] = s->eos;
        if (s->eos2 >= 0)
            cfg->eos_token_ids[cfg->n_eos++] = s->eos2;
        return HR_OK;
    }
    return hr_err(err, errlen, HR_ERR_INVALID, "unknown shape '%s' (one of: %s)", shape, mkmodel_shape_names());
}

/* ---------------------------------------------------------------- tensor list */

struct mk_tensor {
    struct safetensors_tensor t; /* name, dtype, shape; data unused */
    bool is_norm;
};

struct mk_list {
    struct mk_tensor *v;
    int n, cap;
};

static bool add(struct mk_list *l, enum safetensors_dtype dt, bool norm, int64_t d0, int64_t d1, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));
static bool add(struct mk_list *l, enum safetensors_dtype dt, bool norm, int64_t d0, int64_t d1, const char *fmt, ...)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        struct mk_tensor *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    struct mk_tensor *m = &l->v[l->n];
    memset(m, 0, sizeof *m);
    m->t.name = strdup(name);
    if (!m->t.name)
        return false;
    m->t.dtype = dt;
    m->t.n_dims = d1 ? 2 : 1;
    m->t.shape[0] = d0;
    m->t.shape[1] = d1;
    m->t.n_elems = d1 ? d0 * d1 : d0;
    m->t.nbytes = (size_t)m->t.n_elems * safetensors_dtype_size(dt);
    m->is_norm = norm;
    l->n++;
    return true;
}

static void list_free(struct mk_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i].t.name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static bool build_list(struct mk_list *l, const struct model_config *c, enum safetensors_dtype dt)
{
    int64_t H = c->hidden_size, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    bool ok = add(l, dt, false, c->vocab_size, H, "model.embed_tokens.weight");
    for (int i = 0; ok && i < c->n_layers; i++) {
        ok = add(l, dt, true, H, 0, "model.layers.%d.input_layernorm.weight", i) &&
             add(l, dt, true, H, 0, "model.layers.%d.post_attention_layernorm.weight", i) &&
             add(l, dt, false, qd, H, "model.layers.%d.self_attn.q_proj.weight", i) &&
             add(l, dt, false, kvd, H, "model.layers.%d.self_attn.k_proj.weight", i) &&
             add(l, dt, false, kvd, H, "model.layers.%d.self_attn.v_proj.weight", i) &&
             add(l, dt, false, H, qd, "model.layers.%d.self_attn.o_proj.weight", i) &&
             add(l, dt, true, hd, 0, "model.layers.%d.self_attn.q_norm.weight", i) &&
             add(l, dt, true, hd, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        if (ok && !c->layer_is_moe[i]) {
            int64_t I = c->intermediate_size;
            ok = add(l, dt, false, I, H, "model.layers.%d.mlp.gate_proj.weight", i) &&
                 add(l, dt, false, I, H, "model.layers.%d.mlp.up_proj.weight", i) &&
                 add(l, dt, false, H, I, "model.layers.%d.mlp.down_proj.weight", i);
        } else if (ok) {
            int64_t I = c->moe_intermediate_size;
            ok = add(l, dt, false, c->n_experts, H, "model.layers.%d.mlp.gate.weight", i);
            for (int e = 0; ok && e < c->n_experts; e++)
                ok = add(l, dt, false, I, H, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, e) &&
                     add(l, dt, false, I, H, "model.layers.%d.mlp.experts.%d.up_proj.weight", i, e) &&
                     add(l, dt, false, H, I, "model.layers.%d.mlp.experts.%d.down_proj.weight", i, e);
        }
    }
    ok = ok && add(l, dt, true, H, 0, "model.norm.weight");
    if (ok && !c->tie_word_embeddings)
        ok = add(l, dt, false, c->vocab_size, H, "lm_head.weight");
    return ok;
}

/* ---------------------------------------------------------------- values */

static inline uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Sum of four 16-bit uniforms (Irwin-Hall), standardised: mean 0, variance 1,
 * bounded by +-3.46; close enough to normal for random weights, and one draw each. */
static inline float normalish(uint64_t r)
{
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                 (uint32_t)(r >> 48);
    return ((float)s - 131070.0f) * (1.0f / 37837.23f);
}

/* Each tensor's stream depends on the seed and its name only, so the bytes do not
 * depend on sharding or on the order of writing. */
static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t s = seed ^ h;
    return splitmix64(&s);
}

static enum hr_status write_tensor(struct safetensors_writer *wr, const struct mk_tensor *m, uint64_t seed,
                                   float *fbuf, uint16_t *hbuf, char *err, size_t errlen)
{
    uint64_t s = tensor_seed(seed, m->t.name);
    /* matrices: std 0.02 like the usual initialiser; norms: near 1 */
    float scale = m->is_norm ? 0.05f : 0.02f, offset = m->is_norm ? 1.0f : 0.0f;
    for (int64_t done = 0; done < m->t.n_elems;) {
        size_t n = (size_t)(m->t.n_elems - done < MKMODEL_CHUNK ? m->t.n_elems - done : MKMODEL_CHUNK);
        for (size_t i = 0; i < n; i++)
            fbuf[i] = offset + scale * normalish(splitmix64(&s));
        enum hr_status rc;
        if (m->t.dtype == SAFETENSORS_DTYPE_F32) {
            rc = safetensors_writer_put(wr, fbuf, n * sizeof(float), err, errlen);
        } else {
            dtype_f32_to_bf16_n(hbuf, fbuf, n);
            rc = safetensors_writer_put(wr, hbuf, n * sizeof(uint16_t), err, errlen);
        }
        if (rc != HR_OK)
            return rc;
        done += (int64_t)n;
    }
    return HR_OK;
}

/* ---------------------------------------------------------------- tokenizer */

struct mk_tok {
    int max_id;   /* -1: none */
    int im_end;   /* -1: absent */
    int eot;      /* <|endoftext|>, -1: absent */
};

static enum hr_status tok_id(json_t *v, const char *path, const char *what, int *out, char *err, size_t errlen)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 26))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: %s has an id that is not an integer in [0, 2^26)", path, what);
    *out = (int)json_integer_value(v);
    return HR_OK;
}

static void note_special(struct mk_tok *t, const char *content, int id)
{
    if (!strcmp(content, "<|im_end|>"))
        t->im_end = id;
    else if (!strcmp(content, "<|endoftext|>"))
        t->eot = id;
}

static enum hr_status scan_tokenizer(const char *dir, struct mk_tok *t, char *err, size_t errlen)
{
    char path[4096];
    enum hr_status rc = fileio_join(path, sizeof path, dir, "tokenizer.json", err, errlen);
    char *text = NULL;
    size_t len = 0;
    if (rc == HR_OK)
        rc = fileio_read_all(path, MKMODEL_TOKENIZER_MAX, &text, &len, err, errlen);
    if (rc != HR_OK)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, je.text, je.line);
    t->max_id = t->im_end = t->eot = -1;
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    if (json_is_object(vocab)) { /* BPE / WordPiece: token -> id */
        const char *k;
        json_t *v;
        json_object_foreach(vocab, k, v) {
            int id;
            if ((rc = tok_id(v, path, "model.vocab", &id, err, errlen)) != HR_OK)
                goto out;
            if (id > t->max_id)
                t->max_id = id;
            note_special(t, k, id);
        }
    } else if (json_is_array(vocab)) { /* Unigram: [piece, score] by id */
        t->max_id = (int)json_array_size(vocab) - 1;
    } else {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: missing key 'model.vocab'", path);
        goto out;
    }
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: key 'added_tokens' must be a list", path);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int id;
        if ((rc = tok_id(json_object_get(a, "id"), path, "added_tokens", &id, err, errlen)) != HR_OK)
            goto out;
        if (id > t->max_id)
            t->max_id = id;
        const char *content = json_string_value(json_object_get(a, "content"));
        if (content)
            note_special(t, content, id);
    }
out:
    json_decref(root);
    return rc;
}

static enum hr_status copy_file(const char *src_dir, const char *dst_dir, const char *name, bool required, char *err,
                                size_t errlen)
{
    char src[4096], dst[4096];
    enum hr_status rc = fileio_join(src, sizeof src, src_dir, name, err, errlen);
    if (rc == HR_OK)
        rc = fileio_join(dst, sizeof dst, dst_dir, name, err, errlen);
    if (rc != HR_OK)
        return rc;
    if (!required && !fileio_exists(src))
        return HR_OK;
    char *text;
    size_t len;
    if ((rc = fileio_read_all(src, MKMODEL_TOKENIZER_MAX, &text, &len, err, errlen)) != HR_OK)
        return rc;
    rc = fileio_write_all(dst, text, len, err, errlen);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- json files */

#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15))

static enum hr_status write_json(const char *dir, const char *name, json_t *j, char *err, size_t errlen)
{
    char path[4096];
    enum hr_status rc = fileio_join(path, sizeof path, dir, name, err, errlen);
    char *s = rc == HR_OK ? json_dumps(j, JSON_FLAGS) : NULL;
    json_decref(j);
    if (rc != HR_OK)
        return rc;
    if (!s)
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: cannot encode", path);
    size_t n = strlen(s);
    s[n] = '\n'; /* replaces the NUL: written with its length */
    rc = fileio_write_all(path, s, n + 1, err, errlen);
    free(s);
    return rc;
}

static json_t *config_json(const struct model_config *c, enum safetensors_dtype dt)
{
    bool moe = c->arch == MODEL_ARCH_QWEN3_MOE;
    json_t *j = json_object();
    json_object_set_new(j, "architectures", json_pack("[s]", moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"));
    json_object_set_new(j, "model_type", json_string(moe ? "qwen3_moe" : "qwen3"));
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(j, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(j, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(j, "head_dim", json_integer(c->head_dim));
    json_object_set_new(j, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(j, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(j, "rope_scaling", json_null());
    json_object_set_new(j, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(j, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(j, "torch_dtype", json_string(dt == SAFETENSORS_DTYPE_F32 ? "float32" : "bfloat16"));
    json_object_set_new(j, "hidden_act", json_string("silu"));
    json_object_set_new(j, "attention_bias", json_false());
    json_object_set_new(j, "attention_dropout", json_real(0.0));
    json_object_set_new(j, "use_sliding_window", json_false());
    json_object_set_new(j, "sliding_window", json_null());
    json_object_set_new(j, "use_cache", json_true());
    json_object_set_new(j, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(j, "eos_token_id", c->n_eos > 0 ? json_integer(c->eos_token_ids[0]) : json_null());
    if (moe) {
        json_object_set_new(j, "num_experts", json_integer(c->n_experts));
        json_object_set_new(j, "num_experts_per_tok", json_integer(c->n_experts_per_tok));
        json_object_set_new(j, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
        json_object_set_new(j, "decoder_sparse_step", json_integer(c->decoder_sparse_step));
        json_object_set_new(j, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        json_t *dense = json_array();
        for (int l = 0; l < c->n_layers; l++)
            if (!c->layer_is_moe[l])
                json_array_append_new(dense, json_integer(l));
        json_object_set_new(j, "mlp_only_layers", dense);
    }
    return j;
}

static json_t *generation_json(const struct model_config *c)
{
    json_t *j = json_object();
    json_t *eos = json_array();
    for (int i = 0; i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos_token_ids[i]));
    json_object_set_new(j, "eos_token_id", eos);
    json_object_set_new(j, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    /* Qwen3's published sampling defaults */
    json_object_set_new(j, "do_sample", json_true());
    json_object_set_new(j, "temperature", json_real(0.6));
    json_object_set_new(j, "top_p", json_real(0.95));
    json_object_set_new(j, "top_k", json_integer(20));
    return j;
}

/* ---------------------------------------------------------------- writing */

static enum hr_status make_dir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) == 0)
        return HR_OK;
    struct stat sb;
    if (errno == EEXIST && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode))
        return HR_OK;
    return hr_err(err, errlen, HR_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
}

/* Shards: consecutive runs of tensors up to max bytes (a bigger tensor alone). */
static int plan_shards(const struct mk_list *l, uint64_t max, int *shard_of)
{
    int shard = 0;
    uint64_t in = 0;
    for (int i = 0; i < l->n; i++) {
        uint64_t b = l->v[i].t.nbytes;
        if (in > 0 && in + b > max) {
            shard++;
            in = 0;
        }
        shard_of[i] = shard;
        in += b;
    }
    return shard + 1;
}

static enum hr_status write_shard(const struct mkmodel_opts *o, const struct mk_list *l, const int *shard_of,
                                  int shard, const char *path, float *fbuf, uint16_t *hbuf, char *err, size_t errlen)
{
    int first = -1, n = 0;
    for (int i = 0; i < l->n; i++)
        if (shard_of[i] == shard) {
            if (first < 0)
                first = i;
            n++;
        }
    struct safetensors_tensor *ts = malloc((size_t)n * sizeof *ts);
    if (!ts)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        ts[i] = l->v[first + i].t;
    struct safetensors_writer wr;
    enum hr_status rc = safetensors_writer_open(&wr, path, ts, n, err, errlen);
    free(ts);
    for (int i = 0; i < n && rc == HR_OK; i++)
        rc = write_tensor(&wr, &l->v[first + i], o->seed, fbuf, hbuf, err, errlen);
    if (rc != HR_OK) {
        safetensors_writer_free(&wr);
        return rc;
    }
    return safetensors_writer_close(&wr, err, errlen);
}

static void remove_in(const char *dir, const char *name)
{
    char p[4096];
    if (fileio_join(p, sizeof p, dir, name, NULL, 0) == HR_OK)
        unlink(p);
}

static enum hr_status write_weights(const struct mkmodel_opts *o, const struct model_config *cfg, char *err,
                                    size_t errlen)
{
    struct mk_list l = {0};
    int *shard_of = NULL;
    float *fbuf = NULL;
    uint16_t *hbuf = NULL;
    json_t *wm = NULL;
    enum hr_status rc = HR_OK;
    if (!build_list(&l, cfg, o->dtype) || !(shard_of = malloc((size_t)l.n * sizeof *shard_of)) ||
        !(fbuf = malloc(MKMODEL_CHUNK * sizeof *fbuf)) || !(hbuf = malloc(MKMODEL_CHUNK * sizeof *hbuf))) {
        rc = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        goto out;
    }
    int n_shards = plan_shards(&l, o->max_shard_bytes ? o->max_shard_bytes : MKMODEL_DEFAULT_SHARD_BYTES, shard_of);
    char path[4096], fname[64];
    if (n_shards == 1) {
        remove_in(o->out_dir, "model.safetensors.index.json"); /* a stale index would win */
        if ((rc = fileio_join(path, sizeof path, o->out_dir, "model.safetensors", err, errlen)) == HR_OK)
            rc = write_shard(o, &l, shard_of, 0, path, fbuf, hbuf, err, errlen);
        goto out;
    }
    remove_in(o->out_dir, "model.safetensors");
    wm = json_object();
    uint64_t total = 0;
    for (int s = 0; s < n_shards && rc == HR_OK; s++) {
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        if ((rc = fileio_join(path, sizeof path, o->out_dir, fname, err, errlen)) == HR_OK)
            rc = write_shard(o, &l, shard_of, s, path, fbuf, hbuf, err, errlen);
        for (int i = 0; i < l.n; i++)
            if (shard_of[i] == s) {
                json_object_set_new(wm, l.v[i].t.name, json_string(fname));
                total += l.v[i].t.nbytes;
            }
    }
    if (rc == HR_OK) {
        json_t *idx = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
        rc = write_json(o->out_dir, "model.safetensors.index.json", idx, err, errlen);
    }
out:
    json_decref(wm);
    free(hbuf);
    free(fbuf);
    free(shard_of);
    list_free(&l);
    return rc;
}

enum hr_status mkmodel_write(const struct mkmodel_opts *o, char *err, size_t errlen)
{
    if (o->dtype != SAFETENSORS_DTYPE_F32 && o->dtype != SAFETENSORS_DTYPE_BF16)
        return hr_err(err, errlen, HR_ERR_INVALID, "mkmodel writes bf16 or f32 weights only");
    struct model_config cfg;
    enum hr_status rc = mkmodel_shape_config(o->shape, &cfg, err, errlen);
    if (rc != HR_OK)
        return rc;
    if (o->tokenizer_dir) {
        struct mk_tok t = {-1, -1, -1};
        if ((rc = scan_tokenizer(o->tokenizer_dir, &t, err, errlen)) != HR_OK)
            return rc;
        if (t.max_id + 1 > cfg.vocab_size)
            cfg.vocab_size = t.max_id + 1;
        if (t.eot >= 0)
            cfg.bos_token_id = t.eot;
        if (t.im_end >= 0 || t.eot >= 0) { /* Qwen3 stops on either */
            cfg.n_eos = 0;
            if (t.im_end >= 0)
                cfg.eos_token_ids[cfg.n_eos++] = t.im_end;
            if (t.eot >= 0)
                cfg.eos_token_ids[cfg.n_eos++] = t.eot;
        }
    }
    if ((rc = make_dir(o->out_dir, err, errlen)) != HR_OK)
        return rc;
    if (o->tokenizer_dir &&
        ((rc = copy_file(o->tokenizer_dir, o->out_dir, "tokenizer.json", true, err, errlen)) != HR_OK ||
         (rc = copy_file(o->tokenizer_dir, o->out_dir, "tokenizer_config.json", false, err, errlen)) != HR_OK))
        return rc;
    if ((rc = write_json(o->out_dir, "config.json", config_json(&cfg, o->dtype), err, errlen)) != HR_OK ||
        (rc = write_json(o->out_dir, "generation_config.json", generation_json(&cfg), err, errlen)) != HR_OK)
        return rc;
    return o->config_only ? HR_OK : write_weights(o, &cfg, err, errlen);
}
