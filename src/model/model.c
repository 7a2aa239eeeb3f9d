/* Loading a model directory: config, then weights checked against it. */
#include "model/model.h"

#include <stdio.h>
#include <string.h>

enum hr_status model_load_format_parse(const char *s, enum model_load_format *out, char *err, size_t errlen)
{
    if (!s || !*s || !strcmp(s, "auto") || !strcmp(s, "safetensors"))
        *out = MODEL_LOAD_FORMAT_SAFETENSORS;
    else if (!strcmp(s, "dummy"))
        *out = MODEL_LOAD_FORMAT_DUMMY;
    else
        return hr_err(err, errlen, HR_ERR_INVALID, "--load-format must be auto, safetensors or dummy, got '%s'", s);
    return HR_OK;
}

enum hr_status model_load(struct model *m, const char *dir, char *err, size_t errlen)
{
    return model_load_as(m, dir, MODEL_LOAD_FORMAT_SAFETENSORS, err, errlen);
}

enum hr_status model_load_as(struct model *m, const char *dir, enum model_load_format f, char *err,
                             size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (snprintf(m->dir, sizeof m->dir, "%s", dir) >= (int)sizeof m->dir)
        return hr_err(err, errlen, HR_ERR_INVALID, "model directory path too long");
    enum hr_status st = model_config_load(&m->cfg, dir, err, errlen);
    if (st != HR_OK)
        return st;
    st = f == MODEL_LOAD_FORMAT_DUMMY ? weights_load_dummy(&m->w, &m->cfg, 0, err, errlen)
                                      : weights_load(&m->w, &m->cfg, dir, err, errlen);
    if (st != HR_OK)
        weights_free(&m->w);
    return st;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    weights_free(&m->w);
}

size_t model_kv_bytes_per_token(const struct model_config *c, enum kv_dtype dtype)
{
    return kv_store_bytes_per_token(c->n_layers, c->n_kv_heads, c->head_dim, dtype);
}

enum hr_status model_kv_init(struct kv_store *kv, struct backend *be, const struct model_config *c,
                             enum kv_dtype dtype, int block_size, size_t budget_bytes, char *err, size_t errlen)
{
    enum hr_status st = kv_store_layout(kv, c->n_layers, c->n_kv_heads, c->head_dim, dtype, block_size,
                                        budget_bytes, err, errlen);
    if (st == HR_OK)
        st = be->ops->kv_alloc(be, kv, err, errlen);
    return st;
}

void model_kv_free(struct kv_store *kv, struct backend *be)
{
    if (kv && kv->slab && be && be->ops)
        be->ops->kv_free(be, kv);
}
