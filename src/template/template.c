/* Chat templates: parse once, render many times (the render itself is in template_eval.c). */
#include <string.h>

#include "template/template_internal.h"

void chat_template_limits_default(struct chat_template_limits *lim)
{
    lim->max_output = (size_t)64 << 20;
    lim->max_memory = (size_t)1 << 30;
    lim->max_steps = 50000000;
    lim->max_loop_iterations = 1000000;
    lim->max_depth = 400;
}

enum hr_status chat_template_init_n(struct chat_template *ct, const char *source, size_t len, char *err,
                                    size_t errlen)
{
    memset(ct, 0, sizeof *ct);
    if (!source)
        return hr_err(err, errlen, HR_ERR_INVALID, "chat template source is NULL");
    enum hr_status st = template_parse(source, len, &ct->prog, err, errlen);
    if (st != HR_OK) {
        memset(ct, 0, sizeof *ct);
        return st;
    }
    chat_template_limits_default(&ct->limits);
    return HR_OK;
}

enum hr_status chat_template_init(struct chat_template *ct, const char *source, char *err, size_t errlen)
{
    return chat_template_init_n(ct, source, source ? strlen(source) : 0, err, errlen);
}

void chat_template_free(struct chat_template *ct)
{
    if (!ct)
        return;
    template_program_free(ct->prog);
    memset(ct, 0, sizeof *ct);
}
