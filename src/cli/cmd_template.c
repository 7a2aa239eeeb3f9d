/* hearth template: renders a conversation with a model's chat template and prints the prompt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "cli/cli.h"
#include "template/template.h"

#define INPUT_MAX_BYTES ((size_t)256 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hearth template --model DIR --messages FILE.json [options]\n"
            "\n"
            "Renders a conversation with the model's chat template (DIR/chat_template.jinja or the\n"
            "\"chat_template\" of DIR/tokenizer_config.json) and prints the prompt, byte for byte.\n"
            "\n"
            "  --model DIR             model directory\n"
            "  --messages FILE         JSON: an array of OpenAI messages, or a request object with\n"
            "                          \"messages\" and optionally \"tools\", \"add_generation_prompt\",\n"
            "                          \"chat_template_kwargs\"; '-' reads stdin\n"
            "  --tools FILE            JSON array of tools (OpenAI format)\n"
            "  --no-thinking           enable_thinking=false (Qwen3: an empty <think></think>)\n"
            "  --thinking              enable_thinking=true\n"
            "  --no-generation-prompt  do not open an assistant turn at the end\n"
            "  --template FILE         use this Jinja template instead of the model's\n"
            "  --kwargs JSON           extra template variables (an object, like chat_template_kwargs)\n");
}

static json_t *load_json(const char *path, const char *what)
{
    json_error_t je;
    json_t *j;
    if (!strcmp(path, "-"))
        j = json_loadf(stdin, 0, &je);
    else
        j = json_load_file(path, 0, &je);
    if (!j)
        fprintf(stderr, "hearth template: %s %s: line %d: %s\n", what, path, je.line, je.text);
    return j;
}

static const char *opt_value(int argc, char **argv, int *i)
{
    const char *a = argv[*i], *eq = strchr(a, '=');
    if (eq)
        return eq + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "hearth template: %s needs a value\n", a);
        return NULL;
    }
    return argv[++*i];
}

static bool opt_is(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

int cli_template(int argc, char **argv)
{
    const char *model = NULL, *messages_path = NULL, *tools_path = NULL, *template_path = NULL, *kwargs_text = NULL;
    int thinking = -1, gen_prompt = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (opt_is(a, "--model")) {
            if (!(model = opt_value(argc, argv, &i)))
                return 2;
        } else if (opt_is(a, "--messages")) {
            if (!(messages_path = opt_value(argc, argv, &i)))
                return 2;
        } else if (opt_is(a, "--tools")) {
            if (!(tools_path = opt_value(argc, argv, &i)))
                return 2;
        } else if (opt_is(a, "--template")) {
            if (!(template_path = opt_value(argc, argv, &i)))
                return 2;
        } else if (opt_is(a, "--kwargs")) {
            if (!(kwargs_text = opt_value(argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--no-thinking")) {
            thinking = 0;
        } else if (!strcmp(a, "--thinking")) {
            thinking = 1;
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = 0;
        } else {
            fprintf(stderr, "hearth template: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((!model && !template_path) || !messages_path) {
        usage(stderr);
        return 2;
    }

    char err[HR_ERRLEN] = "";
    int rc = 1;
    struct chat_template_model m = {0};
    json_t *input = NULL, *tools = NULL, *kwargs = NULL, *config = NULL;
    char *tsrc = NULL, *out = NULL;
    enum hr_status st;
    if (template_path) {
        size_t len;
        if ((st = fileio_read_all(template_path, INPUT_MAX_BYTES, &tsrc, &len, err, sizeof err)) != HR_OK)
            goto fail;
        char path[4096];
        if (model && fileio_join(path, sizeof path, model, "tokenizer_config.json", err, sizeof err) == HR_OK &&
            fileio_exists(path) && !(config = load_json(path, "config")))
            goto done;
        st = chat_template_model_from_config(&m, config, tsrc, template_path, err, sizeof err);
    } else {
        st = chat_template_model_load(&m, model, err, sizeof err);
    }
    if (st != HR_OK)
        goto fail;

    if (!(input = load_json(messages_path, "messages")))
        goto done;
    struct chat_template_request req = {.enable_thinking = -1, .add_generation_prompt = true};
    if (json_is_array(input)) {
        req.messages = input;
    } else if (json_is_object(input)) {
        req.messages = json_object_get(input, "messages");
        req.tools = json_object_get(input, "tools");
        req.kwargs = json_object_get(input, "chat_template_kwargs");
        const json_t *agp = json_object_get(input, "add_generation_prompt");
        if (json_is_boolean(agp))
            req.add_generation_prompt = json_is_true(agp);
        const json_t *et = json_object_get(input, "enable_thinking");
        if (json_is_boolean(et))
            req.enable_thinking = json_is_true(et);
    } else {
        fprintf(stderr, "hearth template: %s: expected an array of messages or a request object\n", messages_path);
        goto done;
    }
    if (tools_path) {
        if (!(tools = load_json(tools_path, "tools")))
            goto done;
        req.tools = tools;
    }
    if (kwargs_text) {
        json_error_t je;
        if (!(kwargs = json_loads(kwargs_text, 0, &je)) || !json_is_object(kwargs)) {
            fprintf(stderr, "hearth template: --kwargs must be a JSON object\n");
            goto done;
        }
        /* merged over the request's chat_template_kwargs */
        if (json_is_object(req.kwargs)) {
            json_t *merged = json_deep_copy(req.kwargs);
            json_object_update(merged, kwargs);
            json_decref(kwargs);
            kwargs = merged;
        }
        req.kwargs = kwargs;
    }
    if (thinking >= 0)
        req.enable_thinking = thinking;
    if (gen_prompt == 0)
        req.add_generation_prompt = false;

    size_t len;
    if ((st = chat_template_model_render(&m, &req, &out, &len, err, sizeof err)) != HR_OK)
        goto fail;
    if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "hearth template: cannot write the output\n");
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hearth template: %s\n", err);
done:
    free(out);
    free(tsrc);
    json_decref(input);
    json_decref(tools);
    json_decref(kwargs);
    json_decref(config);
    chat_template_model_free(&m);
    return rc;
}
