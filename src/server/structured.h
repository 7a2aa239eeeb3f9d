/* The structured-output fields of a request, turned into one engine constraint:
 *   response_format {type: "json_object"} and {type: "json_schema", json_schema: {name, schema,
 *   strict}} (OpenAI), structured_outputs {json, regex, choice, grammar, json_object} and the
 *   older guided_json / guided_regex / guided_choice / guided_grammar (vLLM), grammar (GBNF)
 *   and json_schema (llama.cpp), on both endpoints; and on chat, tool_choice "required" or
 *   {type: "function", function: {name}}: the output is then the model's <tool_call> blocks
 *   (Qwen3's format) with arguments constrained to the tools' parameter schemas, one call
 *   unless parallel_tool_calls is true.
 * At most one of them per request. The text is checked later, when the engine compiles it
 * (hearth_submit): errors there name structured_param. */
#ifndef HEARTH_SERVER_STRUCTURED_H
#define HEARTH_SERVER_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include <hearth.h>

#include "base/status.h"

#define STRUCTURED_MAX_TOOL_CALLS 8 /* parallel tool calls at most in one forced answer */

struct structured_spec {
    enum hearth_grammar_kind kind;  /* HEARTH_GRAMMAR_NONE: unconstrained */
    char *text;                     /* [NUL-terminated] the source for the engine (owned) */
    char param[64];                 /* the request field it came from */
    bool forced_tools;              /* tool_choice required or named */
};

/* Reads the fields from root (the request body). tools: the request's tools array or NULL;
 * tool_choice and parallel_tool_calls are read from root. */
enum hr_status structured_parse(const json_t *root, bool chat, const json_t *tools, struct structured_spec *out,
                                char *param, size_t paramlen, char *err, size_t errlen);
void structured_free(struct structured_spec *s);

/* The GBNF for forced tool calls over tools (names: all when name is NULL). */
enum hr_status structured_tool_grammar(const json_t *tools, const char *name, bool parallel, char **gbnf, char *err,
                                       size_t errlen);

#endif
