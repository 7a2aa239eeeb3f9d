/* Chat templates: a Jinja interpreter for the subset Hugging Face chat templates use, and the
 * loader that reads a model directory's template and turns OpenAI-style requests into its context.
 *
 * Semantics follow Python Jinja2 as Hugging Face transformers runs it (sandboxed, trim_blocks and
 * lstrip_blocks on, loop controls, HF's tojson / raise_exception / strftime_now); the differential
 * test checks the output against @huggingface/jinja byte for byte (see tests/data/qwen3/SOURCE.md
 * for the few places where that oracle and Python differ and which side we take).
 *
 * A parsed template is immutable: any number of threads may render it at once. */
#ifndef HEARTH_TEMPLATE_TEMPLATE_H
#define HEARTH_TEMPLATE_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Bounds on one render; exceeding any of them is a clean error, never a crash. */
struct chat_template_limits {
    size_t max_output;             /* bytes of the output and of any string built on the way */
    size_t max_memory;             /* bytes of values alive at once */
    uint64_t max_steps;            /* expressions evaluated, values made, string work (bytes / 256) */
    uint64_t max_loop_iterations;  /* for-loop iterations and macro calls, all loops together */
    uint32_t max_depth;            /* nesting of evaluation, macro recursion included */
};

/* Defaults: 64 MiB output, 1 GiB memory, 50M steps, 1M iterations, depth 400. */
void chat_template_limits_default(struct chat_template_limits *lim);

struct template_program; /* the parsed AST (template_internal.h) */

struct chat_template {
    struct template_program *prog;
    struct chat_template_limits limits;
};

/* Parses source once. Syntax errors name the line and column: "line 3, column 9: ...".
 * Returns HR_ERR_FORMAT for a bad template; ct is zeroed on failure. */
enum hr_status chat_template_init(struct chat_template *ct, const char *source, char *err,
                                  size_t errlen);
/* As chat_template_init for a source of len bytes (may contain NUL). */
enum hr_status chat_template_init_n(struct chat_template *ct, const char *source, size_t len,
                                    char *err, size_t errlen);

/* Renders with the variables of context (a JSON object). *out is malloc'd and NUL-terminated,
 * *len excludes the NUL. Errors (HR_ERR_INVALID: raise_exception, type errors, unknown
 * filters/tests/methods, limits; HR_ERR_NOMEM) name the template line. */
enum hr_status chat_template_render(const struct chat_template *ct, const json_t *context,
                                    char **out, size_t *len, char *err, size_t errlen);

void chat_template_free(struct chat_template *ct);

/* ---- a model's chat template and the OpenAI-style context ---- */

/* What a model directory says about chat formatting. */
struct chat_template_model {
    struct chat_template tmpl;      /* the "default" template */
    struct chat_template tool_use;  /* a template named "tool_use", used when tools are given */
    bool has_tool_use;
    char *bos_token;                /* NULL when the config has none (e.g. Qwen3) */
    char *eos_token;
    char *pad_token;
    char *unk_token;
};

/* Reads DIR/chat_template.jinja when present, else DIR/tokenizer_config.json's "chat_template"
 * (a string, or a list of {name, template}: "default" is used, "tool_use" kept for tools).
 * Special tokens come from tokenizer_config.json (strings or {"content": ...} objects).
 * A directory without a chat template is HR_ERR_NOT_FOUND with a clear message. */
enum hr_status chat_template_model_load(struct chat_template_model *m, const char *model_dir,
                                        char *err, size_t errlen);
/* The same from an already-parsed tokenizer_config.json; template_override (may be NULL)
 * replaces its chat template. what names the source in messages. */
enum hr_status chat_template_model_from_config(struct chat_template_model *m, const json_t *config,
                                               const char *template_override, const char *what,
                                               char *err, size_t errlen);
void chat_template_model_free(struct chat_template_model *m);

/* One chat request, as an OpenAI client sends it. */
struct chat_template_request {
    const json_t *messages;        /* array of {role, content, reasoning_content?, tool_calls?, ...} */
    const json_t *tools;           /* array, or NULL */
    bool add_generation_prompt;
    int enable_thinking;           /* -1: not given (the template's default); 0 or 1 */
    const json_t *kwargs;          /* chat_template_kwargs: extra variables (object), or NULL */
};

/* The template context HF transformers would build: messages with content flattened to a
 * string (text parts joined by "\n", null content -> ""), tools (or null),
 * add_generation_prompt, the special tokens, the kwargs, then enable_thinking when given.
 * Bad messages are HR_ERR_INVALID naming the message. *ctx is a new reference. */
enum hr_status chat_template_model_context(const struct chat_template_model *m,
                                           const struct chat_template_request *req, json_t **ctx,
                                           char *err, size_t errlen);

/* Builds the context and renders the right template (tool_use when tools are given and the
 * model has one). Thread-safe. */
enum hr_status chat_template_model_render(const struct chat_template_model *m,
                                          const struct chat_template_request *req, char **out,
                                          size_t *len, char *err, size_t errlen);

#endif
