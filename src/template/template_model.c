/* A model directory's chat template (tokenizer_config.json or chat_template.jinja) and the
 * context Hugging Face transformers renders it with, built from an OpenAI-style request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fileio.h"
#include "template/template.h"

#define CONFIG_MAX_BYTES ((size_t)64 << 20)

static enum hr_status special_token(const json_t *config, const char *key, char **out, const char *what,
                                    char *err, size_t errlen)
{
    *out = NULL;
    const json_t *v = config ? json_object_get(config, key) : NULL;
    if (!v || json_is_null(v))
        return HR_OK;
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: \"%s\" must be a string or an object with a string "
                      "\"content\"", what, key);
    *out = strdup(json_string_value(v));
    if (!*out)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    return HR_OK;
}

static enum hr_status parse_named(struct chat_template *ct, const char *src, size_t len, const char *what,
                                  const char *name, char *err, size_t errlen)
{
    enum hr_status st = chat_template_init_n(ct, src, len, err, errlen);
    if (st != HR_OK)
        hr_err_prefix(err, errlen, "%s: chat template%s%s%s: ", what, name ? " '" : "", name ? name : "",
                      name ? "'" : "");
    return st;
}

enum hr_status chat_template_model_from_config(struct chat_template_model *m, const json_t *config,
                                               const char *template_override, const char *what, char *err,
                                               size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (!what)
        what = "tokenizer_config.json";
    if (config && !json_is_object(config))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tokenizer config must be a JSON object", what);
    enum hr_status st;
    if ((st = special_token(config, "bos_token", &m->bos_token, what, err, errlen)) != HR_OK ||
        (st = special_token(config, "eos_token", &m->eos_token, what, err, errlen)) != HR_OK ||
        (st = special_token(config, "pad_token", &m->pad_token, what, err, errlen)) != HR_OK ||
        (st = special_token(config, "unk_token", &m->unk_token, what, err, errlen)) != HR_OK)
        goto fail;
    if (template_override) {
        st = parse_named(&m->tmpl, template_override, strlen(template_override), what, NULL, err, errlen);
        if (st != HR_OK)
            goto fail;
        return HR_OK;
    }
    const json_t *ct = config ? json_object_get(config, "chat_template") : NULL;
    if (!ct || json_is_null(ct)) {
        st = hr_err(err, errlen, HR_ERR_NOT_FOUND,
                    "%s: the model has no chat template (no \"chat_template\" in tokenizer_config.json and no "
                    "chat_template.jinja); use the completions API with a raw prompt instead", what);
        goto fail;
    }
    if (json_is_string(ct)) {
        st = parse_named(&m->tmpl, json_string_value(ct), json_string_length(ct), what, NULL, err, errlen);
        if (st != HR_OK)
            goto fail;
        return HR_OK;
    }
    if (!json_is_array(ct)) {
        st = hr_err(err, errlen, HR_ERR_FORMAT, "%s: \"chat_template\" must be a string or a list of "
                    "{\"name\", \"template\"} objects", what);
        goto fail;
    }
    bool have_default = false;
    char names[256] = "";
    for (size_t i = 0; i < json_array_size(ct); i++) {
        const json_t *e = json_array_get(ct, i);
        const json_t *name = json_object_get(e, "name"), *tmpl = json_object_get(e, "template");
        if (!json_is_string(name) || !json_is_string(tmpl)) {
            st = hr_err(err, errlen, HR_ERR_FORMAT, "%s: chat_template[%zu] must be {\"name\": string, "
                        "\"template\": string}", what, i);
            goto fail;
        }
        const char *nm = json_string_value(name);
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s'%s'", used ? ", " : "", nm);
        struct chat_template *dst = NULL;
        if (!strcmp(nm, "default") && !have_default) {
            dst = &m->tmpl;
            have_default = true;
        } else if (!strcmp(nm, "tool_use") && !m->has_tool_use) {
            dst = &m->tool_use;
            m->has_tool_use = true;
        }
        if (dst && (st = parse_named(dst, json_string_value(tmpl), json_string_length(tmpl), what, nm, err,
                                     errlen)) != HR_OK)
            goto fail;
    }
    if (!have_default) {
        st = hr_err(err, errlen, HR_ERR_NOT_FOUND, "%s: no chat template named 'default' (the config has %s)",
                    what, names[0] ? names : "none");
        goto fail;
    }
    return HR_OK;
fail:
    chat_template_model_free(m);
    return st;
}

enum hr_status chat_template_model_load(struct chat_template_model *m, const char *model_dir, char *err,
                                        size_t errlen)
{
    memset(m, 0, sizeof *m);
    struct stat sb;
    if (!model_dir || stat(model_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return hr_err(err, errlen, HR_ERR_IO, "%s: not a model directory", model_dir ? model_dir : "(null)");
    char path[4096];
    enum hr_status st;
    json_t *config = NULL;
    char *jinja = NULL;
    size_t len;
    if ((st = fileio_join(path, sizeof path, model_dir, "tokenizer_config.json", err, errlen)) != HR_OK)
        return st;
    if (fileio_exists(path)) {
        char *text;
        if ((st = fileio_read_all(path, CONFIG_MAX_BYTES, &text, &len, err, errlen)) != HR_OK)
            return st;
        json_error_t je;
        config = json_loadb(text, len, 0, &je);
        free(text);
        if (!config)
            return hr_err(err, errlen, HR_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    }
    /* newer transformers save the template next to the config */
    if ((st = fileio_join(path, sizeof path, model_dir, "chat_template.jinja", err, errlen)) != HR_OK) {
        json_decref(config);
        return st;
    }
    if (fileio_exists(path)) {
        if ((st = fileio_read_all(path, CONFIG_MAX_BYTES, &jinja, &len, err, errlen)) != HR_OK) {
            json_decref(config);
            return st;
        }
        if (memchr(jinja, 0, len)) {
            free(jinja);
            json_decref(config);
            return hr_err(err, errlen, HR_ERR_FORMAT, "%s: contains a NUL byte", path);
        }
    }
    if (!config && !jinja)
        return hr_err(err, errlen, HR_ERR_NOT_FOUND,
                      "%s: the model has no chat template (no tokenizer_config.json or chat_template.jinja)",
                      model_dir);
    st = chat_template_model_from_config(m, config, jinja, model_dir, err, errlen);
    free(jinja);
    json_decref(config);
    return st;
}

void chat_template_model_free(struct chat_template_model *m)
{
    if (!m)
        return;
    chat_template_free(&m->tmpl);
    chat_template_free(&m->tool_use);
    free(m->bos_token);
    free(m->eos_token);
    free(m->pad_token);
    free(m->unk_token);
    memset(m, 0, sizeof *m);
}

/* ========================================================================= context */

/* content: a string, null (-> ""), or text parts joined with "\n" (as vLLM does for templates
 * that expect a string). */
static enum hr_status flatten_content(const json_t *c, size_t idx, json_t **out, char *err, size_t errlen)
{
    if (!c || json_is_null(c)) {
        *out = json_string("");
    } else if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
    } else if (json_is_array(c)) {
        size_t total = 0, n = json_array_size(c);
        for (size_t k = 0; k < n; k++) {
            const json_t *part = json_array_get(c, k);
            const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
            if (!json_is_object(part) || !json_is_string(type))
                return hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].content[%zu] must be an object with a "
                              "\"type\"", idx, k);
            if (strcmp(json_string_value(type), "text") != 0)
                return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "messages[%zu].content[%zu]: content parts of type "
                              "'%s' are not supported (text only)", idx, k, json_string_value(type));
            if (!json_is_string(text))
                return hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].content[%zu].text must be a string",
                              idx, k);
            total += json_string_length(text) + 1;
        }
        char *buf = malloc(total + 1);
        if (!buf)
            return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        size_t len = 0;
        for (size_t k = 0; k < n; k++) {
            const json_t *text = json_object_get(json_array_get(c, k), "text");
            if (k)
                buf[len++] = '\n';
            memcpy(buf + len, json_string_value(text), json_string_length(text));
            len += json_string_length(text);
        }
        *out = json_stringn_nocheck(buf, len);
        free(buf);
    } else {
        return hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].content must be a string, null or a list of "
                      "text parts", idx);
    }
    return *out ? HR_OK : hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
}

static enum hr_status put(json_t *obj, const char *key, json_t *v, char *err, size_t errlen)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory building the template context");
    return HR_OK;
}

enum hr_status chat_template_model_context(const struct chat_template_model *m,
                                           const struct chat_template_request *req, json_t **ctx, char *err,
                                           size_t errlen)
{
    *ctx = NULL;
    if (!json_is_array(req->messages))
        return hr_err(err, errlen, HR_ERR_INVALID, "messages must be an array");
    json_t *c = json_object(), *msgs = json_array();
    enum hr_status st = (c && msgs) ? HR_OK : hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == HR_OK && i < json_array_size(req->messages); i++) {
        const json_t *msg = json_array_get(req->messages, i);
        if (!json_is_object(msg)) {
            st = hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu] must be an object", i);
            break;
        }
        if (!json_is_string(json_object_get(msg, "role"))) {
            st = hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].role must be a string", i);
            break;
        }
        const json_t *calls = json_object_get(msg, "tool_calls");
        if (calls && !json_is_null(calls) && !json_is_array(calls)) {
            st = hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].tool_calls must be an array", i);
            break;
        }
        for (size_t k = 0; calls && k < json_array_size(calls); k++) {
            const json_t *call = json_array_get(calls, k);
            const json_t *fn = json_object_get(call, "function");
            const json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
            if (!json_is_object(call) || (fn && !json_is_object(fn)) ||
                (args && !json_is_string(args) && !json_is_object(args))) {
                st = hr_err(err, errlen, HR_ERR_INVALID, "messages[%zu].tool_calls[%zu] must be {\"function\": "
                            "{\"name\", \"arguments\": object or JSON string}}", i, k);
                break;
            }
        }
        if (st != HR_OK)
            break;
        json_t *out = json_object();
        if (!out) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
            break;
        }
        const char *key;
        json_t *val;
        bool has_content = false;
        json_object_foreach((json_t *)msg, key, val) {
            json_t *v = NULL;
            if (!strcmp(key, "content")) {
                has_content = true;
                if ((st = flatten_content(val, i, &v, err, errlen)) != HR_OK)
                    break;
            } else {
                v = json_incref(val);
            }
            if ((st = put(out, key, v, err, errlen)) != HR_OK)
                break;
        }
        if (st == HR_OK && !has_content)
            st = put(out, "content", json_string(""), err, errlen);
        if (st == HR_OK && json_array_append_new(msgs, out) != 0)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
        else if (st != HR_OK)
            json_decref(out);
    }
    if (st == HR_OK) {
        st = put(c, "messages", msgs, err, errlen);
        msgs = NULL;
    }
    if (st == HR_OK) {
        if (req->tools && !json_is_null(req->tools) && !json_is_array(req->tools))
            st = hr_err(err, errlen, HR_ERR_INVALID, "tools must be an array");
        else
            st = put(c, "tools", req->tools ? json_incref((json_t *)req->tools) : json_null(), err, errlen);
    }
    if (st == HR_OK)
        st = put(c, "add_generation_prompt", json_boolean(req->add_generation_prompt), err, errlen);
    const char *const names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    const char *const vals[] = {m->bos_token, m->eos_token, m->pad_token, m->unk_token};
    for (size_t k = 0; st == HR_OK && k < 4; k++)
        if (vals[k])
            st = put(c, names[k], json_string(vals[k]), err, errlen);
    if (st == HR_OK && req->kwargs && !json_is_null(req->kwargs)) {
        if (!json_is_object(req->kwargs)) {
            st = hr_err(err, errlen, HR_ERR_INVALID, "chat_template_kwargs must be an object");
        } else {
            const char *key;
            json_t *val;
            json_object_foreach((json_t *)req->kwargs, key, val) {
                if (!strcmp(key, "messages"))
                    continue;
                if ((st = put(c, key, json_incref(val), err, errlen)) != HR_OK)
                    break;
            }
        }
    }
    if (st == HR_OK && req->enable_thinking >= 0)
        st = put(c, "enable_thinking", json_boolean(req->enable_thinking > 0), err, errlen);
    json_decref(msgs);
    if (st != HR_OK) {
        json_decref(c);
        return st;
    }
    *ctx = c;
    return HR_OK;
}

enum hr_status chat_template_model_render(const struct chat_template_model *m,
                                          const struct chat_template_request *req, char **out, size_t *len,
                                          char *err, size_t errlen)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!m->tmpl.prog)
        return hr_err(err, errlen, HR_ERR_NOT_FOUND, "the model has no chat template");
    json_t *ctx;
    enum hr_status st = chat_template_model_context(m, req, &ctx, err, errlen);
    if (st != HR_OK)
        return st;
    const struct chat_template *t = &m->tmpl;
    if (m->has_tool_use && json_is_array(req->tools) && json_array_size(req->tools) > 0)
        t = &m->tool_use;
    st = chat_template_render(t, ctx, out, len, err, errlen);
    json_decref(ctx);
    if (st != HR_OK)
        hr_err_prefix(err, errlen, "chat template: ");
    return st;
}
