/* Loading a model directory: config, then weights checked against it. */
#include "model/model.h"

#include <stdio.h>
#include <string.h>

enum hr_status model_load(struct model *m, const char *dir, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (snprintf(m->dir, sizeof m->dir, "%s", dir) >= (int)sizeof m->dir)
        return hr_err(err, errlen, HR_ERR_INVALID, "model directory path too long");
    enum hr_status st = model_config_load(&m->cfg, dir, err, errlen);
    if (st != HR_OK)
        return st;
    st = weights_load(&m->w, &m->cfg, dir, err, errlen);
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
