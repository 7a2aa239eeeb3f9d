/* SSE framing (see sse.h). */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

enum hr_status sse_append_json(struct strbuf *out, const json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (!s) {
        out->oom = true;
        return HR_ERR_NOMEM;
    }
    strbuf_append(out, "data: ", 6);
    strbuf_puts(out, s);
    free(s);
    return strbuf_append(out, "\n\n", 2);
}

enum hr_status sse_append_done(struct strbuf *out)
{
    return strbuf_puts(out, "data: [DONE]\n\n");
}

enum hr_status sse_append_comment(struct strbuf *out, const char *text)
{
    /* a newline inside text would end the comment: keep the first line only */
    size_t n = strcspn(text, "\r\n");
    strbuf_append(out, ": ", 2);
    strbuf_append(out, text, n);
    return strbuf_append(out, "\n\n", 2);
}
