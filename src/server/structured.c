/* Structured-output request fields → one (kind, text) constraint for the engine. */
#include "server/structured.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/gbuf.h"
#include "grammar/json_schema.h"

void structured_free(struct structured_spec *s)
{
    if (!s)
        return;
    free(s->text);
    memset(s, 0, sizeof *s);
}

static enum hr_status structured_fail(char *param, size_t paramlen, const char *p, char *err, size_t errlen,
                                      const char *msg)
{
    if (param && paramlen)
        snprintf(param, paramlen, "%s", p);
    return hr_err(err, errlen, HR_ERR_INVALID, "%s", msg);
}

static const json_t *field(const json_t *o, const char *k)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, k) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

/* Sets out from one candidate field; a second one is an error. */
static enum hr_status take(struct structured_spec *out, enum hearth_grammar_kind kind, const json_t *v,
                           const char *name, bool want_string, char *param, size_t paramlen, char *err,
                           size_t errlen)
{
    char msg[HR_ERRLEN];
    if (out->kind != HEARTH_GRAMMAR_NONE) {
        snprintf(msg, sizeof msg, "'%s' and '%s' both constrain the output; give one", out->param, name);
        return structured_fail(param, paramlen, name, err, errlen, msg);
    }
    char *text = NULL;
    if (kind == HEARTH_GRAMMAR_JSON_OBJECT) {
        text = strdup("");
    } else if (json_is_string(v) && (want_string || kind == HEARTH_GRAMMAR_JSON_SCHEMA)) {
        text = strdup(json_string_value(v));
    } else if (!want_string && (json_is_object(v) || json_is_array(v) || json_is_boolean(v))) {
        text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    } else {
        snprintf(msg, sizeof msg, "'%s' must be %s", name,
                 want_string ? "a string" : kind == HEARTH_GRAMMAR_CHOICE ? "an array of strings" : "a JSON Schema object");
        return structured_fail(param, paramlen, name, err, errlen, msg);
    }
    if (!text)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    out->kind = kind;
    out->text = text;
    snprintf(out->param, sizeof out->param, "%s", name);
    return HR_OK;
}

static enum hr_status parse_response_format(const json_t *rf, struct structured_spec *out, char *param,
                                            size_t paramlen, char *err, size_t errlen)
{
    const json_t *type = field(rf, "type");
    if (!json_is_string(type))
        return structured_fail(param, paramlen, "response_format", err, errlen,
                               "'response_format' must be an object with a string 'type'");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text"))
        return HR_OK;
    if (!strcmp(t, "json_object"))
        return take(out, HEARTH_GRAMMAR_JSON_OBJECT, NULL, "response_format", false, param, paramlen, err, errlen);
    if (!strcmp(t, "json_schema")) {
        const json_t *js = field(rf, "json_schema");
        if (!json_is_object(js))
            return structured_fail(param, paramlen, "response_format.json_schema", err, errlen,
                                   "'response_format.json_schema' must be an object with a 'schema'");
        const json_t *schema = field(js, "schema");
        const json_t *name = field(js, "name");
        if (name && !json_is_string(name))
            return structured_fail(param, paramlen, "response_format.json_schema.name", err, errlen,
                                   "'response_format.json_schema.name' must be a string");
        const json_t *strict = field(js, "strict");
        if (strict && !json_is_boolean(strict))
            return structured_fail(param, paramlen, "response_format.json_schema.strict", err, errlen,
                                   "'response_format.json_schema.strict' must be a boolean");
        if (!schema) /* OpenAI's default: any JSON object */
            return take(out, HEARTH_GRAMMAR_JSON_OBJECT, NULL, "response_format.json_schema.schema", false, param,
                        paramlen, err, errlen);
        return take(out, HEARTH_GRAMMAR_JSON_SCHEMA, schema, "response_format.json_schema.schema", false, param,
                    paramlen, err, errlen);
    }
    char msg[HR_ERRLEN];
    snprintf(msg, sizeof msg, "'response_format.type' '%.40s' is not supported (text, json_object, json_schema)", t);
    return structured_fail(param, paramlen, "response_format.type", err, errlen, msg);
}

/* ---------------------------------------------------------------- forced tool calls */

enum hr_status structured_tool_grammar(const json_t *tools, const char *name, bool parallel, char **gbnf, char *err,
                                       size_t errlen)
{
    *gbnf = NULL;
    struct gbuf o = {0}, alts = {0};
    enum hr_status st = HR_OK;
    int n = 0;
    for (size_t i = 0; i < json_array_size(tools) && st == HR_OK; i++) {
        const json_t *fn = field(json_array_get(tools, i), "function");
        const char *fname = json_string_value(field(fn, "name"));
        if (!fname || (name && strcmp(fname, name) != 0))
            continue;
        const json_t *params = field(fn, "parameters");
        json_t *empty = NULL;
        if (!params)
            params = empty = json_pack("{s:s}", "type", "object");
        char *g = NULL, *pg = NULL;
        char terr[HR_ERRLEN], prefix[32];
        st = json_schema_to_gbnf_ex(params, false, &g, terr, sizeof terr);
        json_decref(empty);
        if (st != HR_OK) {
            st = hr_err(err, errlen, HR_ERR_INVALID, "tools[%zu].function.parameters: %s", i, terr);
            break;
        }
        snprintf(prefix, sizeof prefix, "t%d-", n);
        st = gbnf_prefix_rules(g, prefix, "json-", &pg, err, errlen);
        free(g);
        if (st != HR_OK)
            break;
        gbuf_str(&o, pg);
        free(pg);
        /* {"name": "fn", "arguments": {...}}: the spacing of Qwen3's chat template */
        json_t *js = json_string(fname);
        char *quoted = json_dumps(js, JSON_ENCODE_ANY);
        json_decref(js);
        if (!quoted) {
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
            break;
        }
        char head[512];
        snprintf(head, sizeof head, "{\"name\": %s, \"arguments\": ", quoted);
        free(quoted);
        gbuf_str(&alts, n ? " | " : "");
        gbuf_literal(&alts, head, strlen(head));
        gbuf_fmt(&alts, " t%d-root \"}\"", n);
        n++;
    }
    if (st == HR_OK && n == 0)
        st = name ? hr_err(err, errlen, HR_ERR_INVALID, "tool_choice names '%s', which is not in 'tools'", name)
                  : hr_err(err, errlen, HR_ERR_INVALID, "tool_choice \"required\" needs a non-empty 'tools'");
    if (st == HR_OK) {
        gbuf_fmt(&o, "call ::= \"<tool_call>\\n\" (%s) \"\\n</tool_call>\"\n", alts.s);
        if (parallel)
            gbuf_fmt(&o, "root ::= call (\"\\n\" call){0,%d}\n", STRUCTURED_MAX_TOOL_CALLS - 1);
        else
            gbuf_str(&o, "root ::= call\n");
        gbuf_str(&o, json_schema_prims_gbnf());
        if (o.oom)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    }
    gbuf_free(&alts);
    if (st != HR_OK) {
        gbuf_free(&o);
        return st;
    }
    *gbnf = o.s;
    return HR_OK;
}

static enum hr_status parse_tool_choice(const json_t *root, const json_t *tools, struct structured_spec *out,
                                        char *param, size_t paramlen, char *err, size_t errlen)
{
    const json_t *tc = field(root, "tool_choice");
    const char *name = NULL;
    if (!tc || (json_is_string(tc) && (!strcmp(json_string_value(tc), "auto") || !strcmp(json_string_value(tc), "none"))))
        return HR_OK;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "required")) {
        name = NULL;
    } else if (json_is_object(tc)) {
        const json_t *type = field(tc, "type");
        name = json_string_value(field(field(tc, "function"), "name"));
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !name)
            return structured_fail(param, paramlen, "tool_choice", err, errlen,
                                   "'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else {
        return structured_fail(param, paramlen, "tool_choice", err, errlen,
                               "'tool_choice' must be \"auto\", \"none\", \"required\" or a function object");
    }
    const json_t *par = field(root, "parallel_tool_calls");
    if (par && !json_is_boolean(par))
        return structured_fail(param, paramlen, "parallel_tool_calls", err, errlen,
                               "'parallel_tool_calls' must be a boolean");
    if (!tools)
        return structured_fail(param, paramlen, "tool_choice", err, errlen,
                               "'tool_choice' forces a tool call but the request has no 'tools'");
    if (out->kind != HEARTH_GRAMMAR_NONE) {
        char msg[HR_ERRLEN];
        snprintf(msg, sizeof msg, "'%s' and 'tool_choice' both constrain the output; give one", out->param);
        return structured_fail(param, paramlen, "tool_choice", err, errlen, msg);
    }
    char *g = NULL;
    char terr[HR_ERRLEN];
    /* OpenAI's default for parallel_tool_calls is true; a named tool is called once. */
    bool parallel = name ? false : par ? json_is_true(par) : true;
    enum hr_status st = structured_tool_grammar(tools, name, parallel, &g, terr, sizeof terr);
    if (st != HR_OK) {
        char msg[HR_ERRLEN];
        snprintf(msg, sizeof msg, "'tool_choice': %.400s", terr);
        return structured_fail(param, paramlen, "tool_choice", err, errlen, msg);
    }
    out->kind = HEARTH_GRAMMAR_GBNF;
    out->text = g;
    out->forced_tools = true;
    snprintf(out->param, sizeof out->param, "tool_choice");
    return HR_OK;
}

enum hr_status structured_parse(const json_t *root, bool chat, const json_t *tools, struct structured_spec *out,
                                char *param, size_t paramlen, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    enum hr_status st = HR_OK;
    const json_t *v;
    if ((v = field(root, "response_format")))
        st = parse_response_format(v, out, param, paramlen, err, errlen);
    const json_t *so = field(root, "structured_outputs");
    if (st == HR_OK && so && !json_is_object(so))
        st = structured_fail(param, paramlen, "structured_outputs", err, errlen,
                             "'structured_outputs' must be an object");
    if (st == HR_OK && so) {
        /* vLLM's keys: the constraints below, and flags whose either value leaves hearth's
         * outputs valid (it emits compact JSON, has no fallback backend, and emits additional
         * properties only where the schema asks). Anything else (structural_tag,
         * whitespace_pattern, ...) would be ignored, so it is refused by name. */
        static const char *kinds[] = {"json", "regex", "choice", "grammar", "json_object", NULL};
        static const char *flags[] = {"disable_any_whitespace", "disable_fallback", "disable_additional_properties",
                                      NULL};
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)so, k, x) {
            bool known = false;
            for (int i = 0; kinds[i] && !known; i++)
                known = !strcmp(k, kinds[i]);
            for (int i = 0; flags[i] && !known; i++)
                known = !strcmp(k, flags[i]) && (json_is_null(x) || json_is_boolean(x));
            if (!known) {
                char msg[HR_ERRLEN], pname[160];
                snprintf(pname, sizeof pname, "structured_outputs.%.120s", k);
                snprintf(msg, sizeof msg, "'%s' is not supported (supported: json, regex, choice, grammar, "
                         "json_object; disable_any_whitespace, disable_fallback and disable_additional_properties "
                         "as booleans)", pname);
                st = structured_fail(param, paramlen, pname, err, errlen, msg);
                break;
            }
        }
    }
    static const struct {
        const char *obj, *key, *name;
        enum hearth_grammar_kind kind;
        bool string;
    } fields[] = {
        {"structured_outputs", "json", "structured_outputs.json", HEARTH_GRAMMAR_JSON_SCHEMA, false},
        {"structured_outputs", "regex", "structured_outputs.regex", HEARTH_GRAMMAR_REGEX, true},
        {"structured_outputs", "choice", "structured_outputs.choice", HEARTH_GRAMMAR_CHOICE, false},
        {"structured_outputs", "grammar", "structured_outputs.grammar", HEARTH_GRAMMAR_GBNF, true},
        {NULL, "guided_json", "guided_json", HEARTH_GRAMMAR_JSON_SCHEMA, false},
        {NULL, "guided_regex", "guided_regex", HEARTH_GRAMMAR_REGEX, true},
        {NULL, "guided_choice", "guided_choice", HEARTH_GRAMMAR_CHOICE, false},
        {NULL, "guided_grammar", "guided_grammar", HEARTH_GRAMMAR_GBNF, true},
        {NULL, "grammar", "grammar", HEARTH_GRAMMAR_GBNF, true},
        {NULL, "json_schema", "json_schema", HEARTH_GRAMMAR_JSON_SCHEMA, false},
    };
    for (size_t i = 0; st == HR_OK && i < sizeof fields / sizeof fields[0]; i++) {
        const json_t *src = fields[i].obj ? so : root;
        if (!src || !(v = field(src, fields[i].key)))
            continue;
        if (fields[i].kind == HEARTH_GRAMMAR_CHOICE && !json_is_array(v)) {
            char msg[128];
            snprintf(msg, sizeof msg, "'%s' must be an array of strings", fields[i].name);
            st = structured_fail(param, paramlen, fields[i].name, err, errlen, msg);
            break;
        }
        st = take(out, fields[i].kind, v, fields[i].name, fields[i].string, param, paramlen, err, errlen);
    }
    if (st == HR_OK && so && (v = field(so, "json_object")) && json_is_true(v))
        st = take(out, HEARTH_GRAMMAR_JSON_OBJECT, NULL, "structured_outputs.json_object", false, param, paramlen,
                  err, errlen);
    if (st == HR_OK && chat)
        st = parse_tool_choice(root, tools, out, param, paramlen, err, errlen);
    if (st != HR_OK)
        structured_free(out);
    return st;
}
