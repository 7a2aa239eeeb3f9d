/* Server-sent events framing for the OpenAI streaming endpoints: each chunk is one
 * "data: <compact JSON>\n\n" event and a stream ends with "data: [DONE]\n\n". */
#ifndef HEARTH_SERVER_SSE_H
#define HEARTH_SERVER_SSE_H

#include <jansson.h>

#include "server/strbuf.h"

/* Appends obj as one event.  JSON escapes every newline, so one data line suffices. */
enum hr_status sse_append_json(struct strbuf *out, const json_t *obj);
/* Appends the terminating event. */
enum hr_status sse_append_done(struct strbuf *out);
/* Appends a comment line (ignored by clients): keeps idle proxies from closing the stream. */
enum hr_status sse_append_comment(struct strbuf *out, const char *text);

#endif
