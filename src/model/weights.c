/* Binding the tensors of a Qwen3 / Qwen3-MoE checkpoint to the config: every
 * tensor is looked up by its Hugging Face name and its shape and dtype checked
 * before anything uses it. */
#include "model/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/log.h"
#include "model/dtype.h"
#include "model/dummy_fill.h"

struct binder {
    struct weights *w;
    const struct model_config *cfg;
    const char *dir;
    char *err;
    size_t errlen;
    bool dummy;            /* --load-format dummy: no files; matrices are fill seeds */
    uint64_t seed;
};

/* ---------------------------------------------------------------- checks */

static const char *file_of(const struct binder *b, const struct safetensors_tensor *t)
{
    const struct safetensors *st = &b->w->st;
    return t->file >= 0 && t->file < st->n_files ? st->files[t->file].path : b->dir;
}

/* Where a tensor that is absent should have been: the file, or the shard index. */
static void missing_where(const struct binder *b, char *buf, size_t n)
{
    if (b->w->st.n_files == 1)
        snprintf(buf, n, "%s", b->w->st.files[0].path);
    else
        snprintf(buf, n, "%s/model.safetensors.index.json", b->dir);
}

static enum hr_status find_float(const struct binder *b, const char *name, const struct safetensors_tensor **out)
{
    const struct safetensors_tensor *t = safetensors_find(&b->w->st, name);
    if (!t) {
        char where[4200];
        missing_where(b, where, sizeof where);
        return hr_err(b->err, b->errlen, HR_ERR_FORMAT, "%s: tensor '%s' is missing", where, name);
    }
    if (t->dtype != SAFETENSORS_DTYPE_F32 && t->dtype != SAFETENSORS_DTYPE_BF16 &&
        t->dtype != SAFETENSORS_DTYPE_F16)
        return hr_err(b->err, b->errlen, HR_ERR_FORMAT, "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16",
                      file_of(b, t), name, safetensors_dtype_name(t->dtype));
    *out = t;
    return HR_OK;
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *dims)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static enum hr_status check_shape(const struct binder *b, const struct safetensors_tensor *t, int nd,
                                  const int64_t *dims)
{
    bool ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++)
        ok = t->shape[i] == dims[i];
    if (ok)
        return HR_OK;
    char have[160], want[160];
    shape_str(have, sizeof have, t->n_dims, t->shape);
    shape_str(want, sizeof want, nd, dims);
    return hr_err(b->err, b->errlen, HR_ERR_FORMAT, "%s: tensor '%s' has shape %s; the config needs %s",
                  file_of(b, t), t->name, have, want);
}

/* The kernels read elements through typed pointers: a tensor whose offset in the
 * file is not a multiple of its element size (legal, but no writer we know makes
 * one) is copied once to aligned memory. */
static enum hr_status aligned_data(const struct binder *b, const struct safetensors_tensor *t, const void **out)
{
    size_t es = safetensors_dtype_size(t->dtype);
    if ((uintptr_t)t->data % es == 0 || t->nbytes == 0) {
        *out = t->data;
        return HR_OK;
    }
    void **no = realloc(b->w->owned, ((size_t)b->w->n_owned + 1) * sizeof *no);
    if (!no)
        return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "out of memory");
    b->w->owned = no;
    void *p = NULL;
    if (posix_memalign(&p, 64, t->nbytes) != 0)
        return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "%s: cannot copy misaligned tensor '%s' (%zu bytes)",
                      file_of(b, t), t->name, t->nbytes);
    memcpy(p, t->data, t->nbytes);
    b->w->owned[b->w->n_owned++] = p;
    *out = p;
    return HR_OK;
}

static void count(const struct binder *b, const struct safetensors_tensor *t)
{
    b->w->n_params += t->n_elems;
    b->w->weight_bytes += (int64_t)t->nbytes;
}

/* ---------------------------------------------------------------- binding */

/* A dummy matrix: bf16, no data; its seed comes from its name (every tensor differs)
 * and the load's seed. */
static void bind_dummy_mat(const struct binder *b, const char *name, int64_t rows, int64_t cols,
                           struct weights_mat *m)
{
    *m = (struct weights_mat){.dtype = SAFETENSORS_DTYPE_BF16, .rows = rows, .cols = cols};
    m->fill_seed = XXH3_64bits_withSeed(name, strlen(name), b->seed) | 1;
    b->w->n_params += rows * cols;
    b->w->weight_bytes += rows * cols * 2;
}

static enum hr_status bind_mat(const struct binder *b, const char *name, int64_t rows, int64_t cols,
                               struct weights_mat *m)
{
    if (b->dummy) {
        bind_dummy_mat(b, name, rows, cols, m);
        return HR_OK;
    }
    const struct safetensors_tensor *t;
    enum hr_status rc = find_float(b, name, &t);
    if (rc == HR_OK)
        rc = check_shape(b, t, 2, (const int64_t[]){rows, cols});
    if (rc == HR_OK)
        rc = aligned_data(b, t, &m->data);
    if (rc != HR_OK)
        return rc;
    m->dtype = t->dtype;
    m->rows = rows;
    m->cols = cols;
    count(b, t);
    return HR_OK;
}

static enum hr_status bind_norm(const struct binder *b, const char *name, int64_t n, float **out)
{
    if (b->dummy) { /* ones, as a freshly initialised RMSNorm */
        float *v = malloc((size_t)n * sizeof *v);
        if (!v)
            return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "out of memory for '%s'", name);
        for (int64_t i = 0; i < n; i++)
            v[i] = 1.0f;
        *out = v;
        b->w->n_params += n;
        b->w->weight_bytes += n * 2;
        return HR_OK;
    }
    const struct safetensors_tensor *t;
    enum hr_status rc = find_float(b, name, &t);
    if (rc == HR_OK)
        rc = check_shape(b, t, 1, &n);
    if (rc != HR_OK)
        return rc;
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "out of memory for '%s'", name);
    if (t->dtype == SAFETENSORS_DTYPE_F32)
        memcpy(v, t->data, (size_t)n * sizeof *v);
    else if (t->dtype == SAFETENSORS_DTYPE_BF16)
        dtype_bf16_to_f32_n(v, t->data, (size_t)n);
    else
        dtype_f16_to_f32_n(v, t->data, (size_t)n);
    *out = v;
    count(b, t);
    return HR_OK;
}

static const char *nm(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *nm(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return buf;
}

static struct weights_mat slice(const struct weights_mat *whole, int64_t row0, int64_t rows, int64_t cols)
{
    size_t es = safetensors_dtype_size(whole->dtype);
    return (struct weights_mat){.dtype = whole->dtype, .rows = rows, .cols = cols,
                                .data = (const uint8_t *)whole->data + (size_t)row0 * (size_t)cols * es};
}

/* transformers 5 keeps a layer's experts as two parameters: gate_up_proj
 * [E, 2*I, H] (each expert's gate rows, then its up rows) and down_proj [E, H, I]. */
static enum hr_status bind_fused_experts(const struct binder *b, int l, struct weights_layer *L)
{
    const struct model_config *c = b->cfg;
    int64_t E = c->n_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char name[160];
    const struct safetensors_tensor *gu = NULL, *dn = NULL;
    enum hr_status rc = find_float(b, nm(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l), &gu);
    if (rc == HR_OK)
        rc = check_shape(b, gu, 3, (const int64_t[]){E, 2 * I, H});
    if (rc == HR_OK)
        rc = find_float(b, nm(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", l), &dn);
    if (rc == HR_OK)
        rc = check_shape(b, dn, 3, (const int64_t[]){E, H, I});
    struct weights_mat wgu = {.dtype = gu ? gu->dtype : SAFETENSORS_DTYPE_F32, .rows = E * 2 * I, .cols = H};
    struct weights_mat wdn = {.dtype = dn ? dn->dtype : SAFETENSORS_DTYPE_F32, .rows = E * H, .cols = I};
    if (rc == HR_OK)
        rc = aligned_data(b, gu, &wgu.data);
    if (rc == HR_OK)
        rc = aligned_data(b, dn, &wdn.data);
    if (rc != HR_OK)
        return rc;
    for (int64_t e = 0; e < E; e++) {
        L->experts[e].gate = slice(&wgu, e * 2 * I, I, H);
        L->experts[e].up = slice(&wgu, e * 2 * I + I, I, H);
        L->experts[e].down = slice(&wdn, e * H, H, I);
    }
    count(b, gu);
    count(b, dn);
    b->w->experts_fused = true;
    return HR_OK;
}

static enum hr_status bind_layer(const struct binder *b, int l, struct weights_layer *L)
{
    const struct model_config *c = b->cfg;
    int64_t H = c->hidden_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    char name[160];
    enum hr_status rc;
#define P(suffix) nm(name, sizeof name, "model.layers.%d." suffix, l)
    if ((rc = bind_norm(b, P("input_layernorm.weight"), H, &L->attn_norm)) != HR_OK ||
        (rc = bind_norm(b, P("post_attention_layernorm.weight"), H, &L->ffn_norm)) != HR_OK ||
        (rc = bind_norm(b, P("self_attn.q_norm.weight"), hd, &L->q_norm)) != HR_OK ||
        (rc = bind_norm(b, P("self_attn.k_norm.weight"), hd, &L->k_norm)) != HR_OK ||
        (rc = bind_mat(b, P("self_attn.q_proj.weight"), qd, H, &L->q)) != HR_OK ||
        (rc = bind_mat(b, P("self_attn.k_proj.weight"), kvd, H, &L->k)) != HR_OK ||
        (rc = bind_mat(b, P("self_attn.v_proj.weight"), kvd, H, &L->v)) != HR_OK ||
        (rc = bind_mat(b, P("self_attn.o_proj.weight"), H, qd, &L->o)) != HR_OK)
        return rc;
    L->is_moe = c->layer_is_moe[l];
    if (!L->is_moe) {
        int64_t I = c->intermediate_size;
        if ((rc = bind_mat(b, P("mlp.gate_proj.weight"), I, H, &L->gate)) != HR_OK ||
            (rc = bind_mat(b, P("mlp.up_proj.weight"), I, H, &L->up)) != HR_OK ||
            (rc = bind_mat(b, P("mlp.down_proj.weight"), H, I, &L->down)) != HR_OK)
            return rc;
        return HR_OK;
    }
    int64_t E = c->n_experts, I = c->moe_intermediate_size;
    if ((rc = bind_mat(b, P("mlp.gate.weight"), E, H, &L->router)) != HR_OK)
        return rc;
    L->experts = calloc((size_t)E, sizeof *L->experts);
    if (!L->experts)
        return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "out of memory for %lld experts", (long long)E);
    L->n_experts = (int)E;
    if (safetensors_find(&b->w->st, P("mlp.experts.gate_up_proj")))
        return bind_fused_experts(b, l, L);
    for (int e = 0; e < E; e++) {
#define X(suffix) nm(name, sizeof name, "model.layers.%d.mlp.experts.%d." suffix, l, e)
        if ((rc = bind_mat(b, X("gate_proj.weight"), I, H, &L->experts[e].gate)) != HR_OK ||
            (rc = bind_mat(b, X("up_proj.weight"), I, H, &L->experts[e].up)) != HR_OK ||
            (rc = bind_mat(b, X("down_proj.weight"), H, I, &L->experts[e].down)) != HR_OK)
            return rc;
#undef X
    }
#undef P
    return HR_OK;
}

static enum hr_status bind_all(const struct binder *b)
{
    const struct model_config *c = b->cfg;
    struct weights *w = b->w;
    int64_t H = c->hidden_size;
    enum hr_status rc;
    if ((rc = bind_mat(b, "model.embed_tokens.weight", c->vocab_size, H, &w->embed)) != HR_OK ||
        (rc = bind_norm(b, "model.norm.weight", H, &w->final_norm)) != HR_OK)
        return rc;
    /* Tied: transformers ignores a stored lm_head.weight and uses the embedding. */
    if (c->tie_word_embeddings)
        w->lm_head = w->embed;
    else if ((rc = bind_mat(b, "lm_head.weight", c->vocab_size, H, &w->lm_head)) != HR_OK)
        return rc;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return hr_err(b->err, b->errlen, HR_ERR_NOMEM, "out of memory for %d layers", c->n_layers);
    w->n_layers = c->n_layers;
    /* Active: everything but the experts a token does not visit. */
    w->n_active_params = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if ((rc = bind_layer(b, l, &w->layers[l])) != HR_OK)
            return rc;
        if (w->layers[l].is_moe)
            w->n_active_params -= (int64_t)(c->n_experts - c->n_experts_per_tok) * 3 *
                                  c->moe_intermediate_size * H;
    }
    w->n_active_params += w->n_params;
    if (w->n_owned)
        log_warn("%s: %d tensors are not aligned to their element size in the file; using copies", b->dir,
                 w->n_owned);
    return HR_OK;
}

enum hr_status weights_load(struct weights *w, const struct model_config *cfg, const char *dir, char *err,
                            size_t errlen)
{
    memset(w, 0, sizeof *w);
    enum hr_status rc = safetensors_open_dir(&w->st, dir, err, errlen);
    if (rc != HR_OK)
        return rc;
    struct binder b = {.w = w, .cfg = cfg, .dir = dir, .err = err, .errlen = errlen};
    rc = bind_all(&b);
    if (rc != HR_OK)
        weights_free(w);
    return rc;
}

enum hr_status weights_load_dummy(struct weights *w, const struct model_config *cfg, uint64_t seed, char *err,
                                  size_t errlen)
{
    memset(w, 0, sizeof *w);
    struct binder b = {.w = w, .cfg = cfg, .dir = "(dummy weights)", .err = err, .errlen = errlen, .dummy = true,
                       .seed = seed};
    w->dummy = true;
    enum hr_status rc = bind_all(&b);
    if (rc != HR_OK)
        weights_free(w);
    return rc;
}

void weights_dummy_fill(const struct weights_mat *m, uint16_t *dst)
{
    for (int64_t i = 0; i < m->rows * m->cols; i++)
        dst[i] = dummy_fill_bf16(m->fill_seed, (uint64_t)i, DUMMY_FILL_SCALE);
}

/* Calls fn on every matrix of dummy weights w but a tied lm_head (the embedding's
 * seed: it is the embedding), stopping at the first failure. */
static enum hr_status each_mat(struct weights *w, enum hr_status (*fn)(struct weights_mat *m, char *err, size_t errlen),
                               char *err, size_t errlen)
{
    enum hr_status st = fn(&w->embed, err, errlen);
    if (st == HR_OK && w->lm_head.fill_seed != w->embed.fill_seed)
        st = fn(&w->lm_head, err, errlen);
    for (int l = 0; st == HR_OK && w->layers && l < w->n_layers; l++) {
        struct weights_layer *L = &w->layers[l];
        struct weights_mat *m[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down, &L->router};
        for (int i = 0; st == HR_OK && i < 8; i++)
            st = fn(m[i], err, errlen);
        for (int e = 0; st == HR_OK && L->experts && e < L->n_experts; e++) {
            struct weights_expert *x = &L->experts[e];
            if ((st = fn(&x->gate, err, errlen)) == HR_OK && (st = fn(&x->up, err, errlen)) == HR_OK)
                st = fn(&x->down, err, errlen);
        }
    }
    return st;
}

static enum hr_status fill_mat(struct weights_mat *m, char *err, size_t errlen)
{
    if (!m->fill_seed || m->data)
        return HR_OK;
    void *p = NULL;
    size_t bytes = (size_t)m->rows * (size_t)m->cols * 2;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory for %zu bytes of dummy weights", bytes);
    weights_dummy_fill(m, p);
    m->data = p;
    return HR_OK;
}

static enum hr_status free_mat(struct weights_mat *m, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    if (m->fill_seed)
        free((void *)m->data);
    m->data = NULL;
    return HR_OK;
}

void weights_host_free(struct weights *w)
{
    if (!w)
        return;
    each_mat(w, free_mat, NULL, 0);
    for (int l = 0; w->layers && l < w->n_layers; l++)
        free(w->layers[l].experts);
    free(w->layers);
    free(w);
}

enum hr_status weights_host_materialize(const struct weights *src, struct weights **out, char *err, size_t errlen)
{
    *out = NULL;
    struct weights *w = calloc(1, sizeof *w);
    if (!w)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    *w = *src;
    memset(&w->st, 0, sizeof w->st); /* the files stay src's */
    w->n_owned = 0;
    w->owned = NULL;
    w->host_copy = true;
    w->layers = calloc((size_t)src->n_layers, sizeof *w->layers);
    enum hr_status st = w->layers ? HR_OK : hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    for (int l = 0; st == HR_OK && l < src->n_layers; l++) {
        struct weights_layer *L = &w->layers[l];
        *L = src->layers[l];
        L->experts = NULL;
        if (src->layers[l].experts) {
            size_t bytes = (size_t)L->n_experts * sizeof *L->experts;
            if (!(L->experts = malloc(bytes)))
                st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
            else
                memcpy(L->experts, src->layers[l].experts, bytes);
        }
    }
    if (st == HR_OK)
        st = each_mat(w, fill_mat, err, errlen);
    if (w->lm_head.fill_seed == w->embed.fill_seed)
        w->lm_head = w->embed; /* tied: one copy */
    if (st != HR_OK) {
        weights_host_free(w);
        return st;
    }
    *out = w;
    return HR_OK;
}

void weights_free(struct weights *w)
{
    if (!w)
        return;
    for (int l = 0; l < w->n_layers; l++) {
        struct weights_layer *L = &w->layers[l];
        free(L->attn_norm);
        free(L->ffn_norm);
        free(L->q_norm);
        free(L->k_norm);
        free(L->experts);
    }
    free(w->layers);
    free(w->final_norm);
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    safetensors_free(&w->st);
    memset(w, 0, sizeof *w);
}
