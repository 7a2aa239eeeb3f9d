/* The endpoints beside generation that clients of vLLM and OpenAI call:
 * GET /v1/models/{id} (the openai client's models.retrieve), POST /tokenize and
 * POST /detokenize (vLLM's shapes), GET /version. */
#ifndef HEARTH_SERVER_ENDPOINTS_H
#define HEARTH_SERVER_ENDPOINTS_H

#include "server/api.h"

/* One model object of /v1/models (a new reference, or NULL on oom). */
json_t *endpoints_model_object(struct server *s);
void endpoints_model(struct server *s, const char *id, struct api_reply *out);
/* {"prompt": TEXT} or {"messages": [...], "add_generation_prompt"?, "tools"?, "chat_template_kwargs"?}
 * -> {"count", "max_model_len", "tokens", "token_strs"} */
void endpoints_tokenize(struct server *s, const struct api_call *call, struct api_reply *out);
/* {"tokens": [ids]} -> {"prompt": TEXT} */
void endpoints_detokenize(struct server *s, const struct api_call *call, struct api_reply *out);
void endpoints_version(struct api_reply *out);

#endif
