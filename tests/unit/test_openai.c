/* The OpenAI surface as pure functions: request parsing and validation (every bad input
 * gets a status, the HTTP code, the envelope and the field's name), the context check,
 * response and chunk rendering in OpenAI's shapes, the qwen3 reasoning split, SSE
 * framing, auth, and the metrics text.  Expected values are written by hand from
 * OpenAI's API reference shapes; nothing here runs the engine. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/reasoning.h"
#include "server/response.h"
#include "server/sse.h"
#include "server/toolcall.h"
#include "test.h"

#define LLVMFuzzerTestOneInput fuzz_openai_entry
#include "../fuzz/fuzz_openai.c"
#undef LLVMFuzzerTestOneInput

static const char *const test_models[] = {"qwen3-tiny", "/models/qwen3-tiny"};
static const struct openai_limits test_lim = {
    .model_names = test_models, .n_model_names = 2, .max_n = 4, .max_prompts = 8, .vocab_size = 1000};

static enum hr_status parse(struct openai_request *rq, enum openai_endpoint ep, const char *body, char *param,
                            char *err)
{
    return openai_request_parse(rq, ep, body, strlen(body), &test_lim, param, 128, err, HR_ERRLEN);
}

/* A body that must be refused with st, naming param (and its HTTP status). */
static void expect_bad(enum openai_endpoint ep, const char *body, enum hr_status st, int http, const char *param)
{
    struct openai_request rq;
    char p[128] = "junk", err[HR_ERRLEN] = "";
    enum hr_status got = parse(&rq, ep, body, p, err);
    CHECK_MSG(got == st, "%s: got %s (%s), want %s", body, hr_status_str(got), err, hr_status_str(st));
    CHECK_MSG(openai_http_status(got) == http, "%s: http %d, want %d", body, openai_http_status(got), http);
    CHECK_MSG(!strcmp(p, param), "%s: param '%s', want '%s'", body, p, param);
    CHECK_MSG(err[0] != 0, "%s: no message", body);
    if (param[0])
        CHECK_MSG(strstr(err, param) != NULL || !strcmp(param, "model"), "%s: message '%s' does not name '%s'",
                  body, err, param);
    CHECK(rq.root == NULL && rq.prompts == NULL && rq.messages == NULL);
    openai_request_free(&rq);
}

/* ---------------------------------------------------------------- parsing */

static void test_completions_all_fields(void)
{
    const char *body =
        "{\"model\":\"qwen3-tiny\",\"prompt\":\"Hello\",\"max_tokens\":5,\"temperature\":0.5,\"top_p\":0.75,"
        "\"top_k\":40,\"min_p\":0.25,\"n\":2,\"stop\":[\"\\n\",\"END\"],\"seed\":42,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"logprobs\":3,\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.25,\"logit_bias\":{\"17\":-100,\"3\":2.5},"
        "\"ignore_eos\":true,\"cache_salt\":\"tenant-a\",\"user\":\"u1\",\"echo\":false}";
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, body, p, err), err);
    const struct hearth_request_params *q = &rq.params;
    CHECK(!strcmp(rq.model, "qwen3-tiny"));
    CHECK(rq.n_prompts == 1 && rq.prompts[0].text && !strcmp(rq.prompts[0].text, "Hello") &&
          rq.prompts[0].text_len == 5);
    CHECK(rq.has_max_tokens && rq.max_tokens == 5);
    CHECK(q->has_temperature && q->temperature == 0.5f);
    CHECK(q->has_top_p && q->top_p == 0.75f);
    CHECK(q->has_top_k && q->top_k == 40);
    CHECK(q->min_p == 0.25f && q->n == 2);
    CHECK(q->n_stop == 2 && !strcmp(q->stop[0], "\n") && !strcmp(q->stop[1], "END"));
    CHECK(q->has_seed && q->seed == 42);
    CHECK(rq.stream && rq.include_usage);
    CHECK(q->logprobs && q->top_logprobs == 3 && rq.top_logprobs_asked == 3);
    CHECK(q->presence_penalty == 0.5f && q->frequency_penalty == -0.5f && q->repetition_penalty == 1.25f);
    CHECK(q->n_logit_bias == 2);
    bool saw17 = false, saw3 = false;
    for (int i = 0; i < q->n_logit_bias; i++) {
        saw17 |= q->logit_bias[i].token == 17 && q->logit_bias[i].bias == -100.0f;
        saw3 |= q->logit_bias[i].token == 3 && q->logit_bias[i].bias == 2.5f;
    }
    CHECK(saw17 && saw3);
    CHECK(q->ignore_eos && !strcmp(q->cache_salt, "tenant-a"));
    CHECK(q->skip_special_tokens); /* what OpenAI-compatible servers do */
    CHECK(!rq.echo);
    openai_request_free(&rq);
    openai_request_free(&rq); /* a freed (zeroed) request frees again as a no-op */
}

static void test_completions_defaults_and_nulls(void)
{
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS,
                   "{\"model\":\"/models/qwen3-tiny\",\"prompt\":\"x\",\"temperature\":null,\"n\":null,"
                   "\"stop\":null,\"seed\":-1,\"top_k\":-1,\"max_tokens\":16.0}", p, err), err);
    CHECK(!strcmp(rq.model, "qwen3-tiny")); /* the served name, whichever accepted name was sent */
    CHECK(rq.params.n == 1 && !rq.params.has_temperature && rq.params.n_stop == 0);
    CHECK(rq.params.has_seed && rq.params.seed == UINT64_MAX); /* -1 as two's complement */
    CHECK(rq.params.has_top_k && rq.params.top_k == 0);          /* -1: off */
    CHECK(rq.has_max_tokens && rq.max_tokens == 16);            /* 16.0 is an integer */
    CHECK(!rq.stream && !rq.include_usage && !rq.params.logprobs);
    CHECK(rq.params.repetition_penalty == 1.0f);
    openai_request_free(&rq);
}

static void test_completions_prompt_forms(void)
{
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, "{\"model\":\"qwen3-tiny\",\"prompt\":[\"a\",\"bc\",\"d\"]}",
                   p, err), err);
    CHECK(rq.n_prompts == 3 && !strcmp(rq.prompts[1].text, "bc") && rq.prompts[1].text_len == 2);
    openai_request_free(&rq);
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, "{\"model\":\"qwen3-tiny\",\"prompt\":[5,0,999]}", p, err), err);
    CHECK(rq.n_prompts == 1 && !rq.prompts[0].text && rq.prompts[0].n_ids == 3);
    CHECK(rq.prompts[0].ids[0] == 5 && rq.prompts[0].ids[1] == 0 && rq.prompts[0].ids[2] == 999);
    openai_request_free(&rq);
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, "{\"model\":\"qwen3-tiny\",\"prompt\":[[1,2],[3]],\"echo\":true}",
                   p, err), err);
    CHECK(rq.n_prompts == 2 && rq.prompts[0].n_ids == 2 && rq.prompts[1].n_ids == 1 && rq.prompts[1].ids[0] == 3);
    CHECK(rq.echo);
    CHECK(!rq.params.prompt_logprobs);
    openai_request_free(&rq);
    /* echo with logprobs scores the prompt */
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS,
                   "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"echo\":true,\"logprobs\":2}", p, err), err);
    CHECK(rq.echo && rq.params.prompt_logprobs && rq.params.top_logprobs == 2);
    openai_request_free(&rq);
}

static void test_completions_bad_input(void)
{
    const enum openai_endpoint C = OPENAI_ENDPOINT_COMPLETIONS;
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\"", HR_ERR_FORMAT, 400, "");
    expect_bad(C, "", HR_ERR_FORMAT, 400, "");
    expect_bad(C, "not json", HR_ERR_FORMAT, 400, "");
    expect_bad(C, "[1,2]", HR_ERR_FORMAT, 400, "");
    expect_bad(C, "{\"prompt\":\"x\"}", HR_ERR_INVALID, 400, "model");
    expect_bad(C, "{\"model\":7,\"prompt\":\"x\"}", HR_ERR_INVALID, 400, "model");
    expect_bad(C, "{\"model\":\"gpt-4\",\"prompt\":\"x\"}", HR_ERR_NOT_FOUND, 404, "model");
    expect_bad(C, "{\"model\":\"qwen3-tiny\"}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"\"}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[]}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":{}}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[\"a\",[1]]}", HR_ERR_INVALID, 400, "prompt[1]");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[\"a\",\"\"]}", HR_ERR_INVALID, 400, "prompt[1]");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[1,\"a\"]}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[1,1000]}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[1,-1]}", HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[[1],[]]}", HR_ERR_INVALID, 400, "prompt[1]");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[true]}", HR_ERR_INVALID, 400, "prompt[0]");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}",
               HR_ERR_INVALID, 400, "prompt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"max_tokens\":-1}", HR_ERR_INVALID, 400, "max_tokens");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"max_tokens\":99999999999}", HR_ERR_INVALID, 400,
               "max_tokens");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"max_tokens\":1.5}", HR_ERR_INVALID, 400, "max_tokens");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"max_tokens\":\"5\"}", HR_ERR_INVALID, 400,
               "max_tokens");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"temperature\":\"hot\"}", HR_ERR_INVALID, 400,
               "temperature");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"temperature\":-0.1}", HR_ERR_INVALID, 400,
               "temperature");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"temperature\":1e300}", HR_ERR_INVALID, 400,
               "temperature");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"top_p\":0}", HR_ERR_INVALID, 400, "top_p");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"top_p\":1.5}", HR_ERR_INVALID, 400, "top_p");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"top_k\":-2}", HR_ERR_INVALID, 400, "top_k");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"min_p\":2}", HR_ERR_INVALID, 400, "min_p");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"n\":0}", HR_ERR_INVALID, 400, "n");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"n\":5}", HR_ERR_INVALID, 400, "n");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"n\":true}", HR_ERR_INVALID, 400, "n");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"best_of\":3}", HR_ERR_UNSUPPORTED, 400, "best_of");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stream\":\"yes\"}", HR_ERR_INVALID, 400, "stream");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
               HR_ERR_INVALID, 400, "stream_options");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
               HR_ERR_INVALID, 400, "stream_options.include_usage");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stop\":7}", HR_ERR_INVALID, 400, "stop");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}", HR_ERR_INVALID, 400,
               "stop[1]");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stop\":[\"a\",3]}", HR_ERR_INVALID, 400, "stop[1]");
    expect_bad(C,
               "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\","
               "\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
               HR_ERR_INVALID, 400, "stop");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"seed\":\"1\"}", HR_ERR_INVALID, 400, "seed");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logprobs\":21}", HR_ERR_INVALID, 400, "logprobs");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logprobs\":true}", HR_ERR_INVALID, 400, "logprobs");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"presence_penalty\":3}", HR_ERR_INVALID, 400,
               "presence_penalty");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"frequency_penalty\":-2.5}", HR_ERR_INVALID, 400,
               "frequency_penalty");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"repetition_penalty\":0}", HR_ERR_INVALID, 400,
               "repetition_penalty");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logit_bias\":[1]}", HR_ERR_INVALID, 400,
               "logit_bias");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", HR_ERR_INVALID, 400,
               "logit_bias");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logit_bias\":{\"1000\":1}}", HR_ERR_INVALID, 400,
               "logit_bias");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", HR_ERR_INVALID, 400,
               "logit_bias");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"logit_bias\":{\"5\":\"1\"}}", HR_ERR_INVALID, 400,
               "logit_bias");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"ignore_eos\":1}", HR_ERR_INVALID, 400, "ignore_eos");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"cache_salt\":\"\"}", HR_ERR_INVALID, 400,
               "cache_salt");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"user\":5}", HR_ERR_INVALID, 400, "user");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"suffix\":\"tail\"}", HR_ERR_UNSUPPORTED, 400,
               "suffix");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"stop_token_ids\":[1,5000]}", HR_ERR_INVALID, 400,
               "stop_token_ids[1]");
}

static void test_chat_parse(void)
{
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    const char *body =
        "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\","
        "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"user\",\"content\":\"q\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"42\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"max_tokens\":7,"
        "\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":2,"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},\"response_format\":{\"type\":\"text\"}}";
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_CHAT, body, p, err), err);
    CHECK(json_array_size(rq.messages) == 4);
    /* developer is the system role under its newer name; the request's own JSON is untouched */
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rq.messages, 0), "role")), "system"));
    CHECK(!strcmp(json_string_value(json_object_get(
                      json_array_get(json_object_get(rq.root, "messages"), 0), "role")), "developer"));
    CHECK(json_is_array(rq.tools) && json_array_size(rq.tools) == 1);
    CHECK(rq.has_max_tokens && rq.max_tokens == 9); /* max_completion_tokens wins */
    CHECK(rq.params.logprobs && rq.params.top_logprobs == 2);
    CHECK(rq.enable_thinking == 0 && json_is_object(rq.template_kwargs));
    CHECK(rq.add_generation_prompt);
    CHECK(rq.n_prompts == 0);
    openai_request_free(&rq);

    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_CHAT,
                   "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\"}",
                   p, err), err);
    CHECK(rq.enable_thinking == -1 && rq.tools == NULL && !rq.has_max_tokens);
    openai_request_free(&rq);
}

static void test_chat_bad_input(void)
{
    const enum openai_endpoint H = OPENAI_ENDPOINT_CHAT;
    expect_bad(H, "{\"model\":\"qwen3-tiny\"}", HR_ERR_INVALID, 400, "messages");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[]}", HR_ERR_INVALID, 400, "messages");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":\"hi\"}", HR_ERR_INVALID, 400, "messages");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[\"hi\"]}", HR_ERR_INVALID, 400, "messages[0]");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"content\":\"x\"}]}", HR_ERR_INVALID, 400,
               "messages[0].role");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
                  "\"wizard\",\"content\":\"x\"}]}", HR_ERR_INVALID, 400, "messages[1].role");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":3,\"content\":\"x\"}]}", HR_ERR_INVALID, 400,
               "messages[0].role");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\"}]}", HR_ERR_INVALID, 400,
               "messages[0].content");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"system\",\"content\":5}]}", HR_ERR_INVALID,
               400, "messages[0].content");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
               HR_ERR_UNSUPPORTED, 400, "messages[0].content[0].type");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
               HR_ERR_INVALID, 400, "messages[0].content[0].text");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
               HR_ERR_INVALID, 400, "messages[0].tool_calls");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":1}]}",
               HR_ERR_INVALID, 400, "messages[0].name");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}",
               HR_ERR_INVALID, 400, "tools");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}",
               HR_ERR_INVALID, 400, "tools[0].function");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"tool_choice\":\"required\"}", HR_ERR_INVALID, 400, "tool_choice");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
               HR_ERR_INVALID, 400, "max_tokens");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"max_completion_tokens\":-5}", HR_ERR_INVALID, 400, "max_completion_tokens");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
               HR_ERR_INVALID, 400, "top_logprobs");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                  "\"top_logprobs\":50}", HR_ERR_INVALID, 400, "top_logprobs");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":2}",
               HR_ERR_INVALID, 400, "logprobs");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"chat_template_kwargs\":[]}", HR_ERR_INVALID, 400, "chat_template_kwargs");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", HR_ERR_INVALID, 400,
               "chat_template_kwargs.enable_thinking");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"response_format\":{\"type\":\"xml\"}}", HR_ERR_INVALID, 400, "response_format.type");
    expect_bad(H, "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", HR_ERR_NOT_FOUND, 404,
               "model");
}

/* The structured-output fields: each becomes one (kind, text) constraint; two are refused. */
static void test_structured_fields(void)
{
    static const struct {
        enum openai_endpoint ep;
        const char *extra;
        enum hearth_grammar_kind kind;
        const char *text; /* a substring of the constraint's text */
    } ok[] = {
        {OPENAI_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"json_object\"}", HEARTH_GRAMMAR_JSON_OBJECT, ""},
        {OPENAI_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
                               "\"schema\":{\"type\":\"integer\"},\"strict\":true}}",
         HEARTH_GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\"}"},
        {OPENAI_ENDPOINT_CHAT, "\"response_format\":{\"type\":\"text\"}", HEARTH_GRAMMAR_NONE, NULL},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"guided_json\":{\"type\":\"null\"}", HEARTH_GRAMMAR_JSON_SCHEMA, "null"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"guided_json\":\"{\\\"type\\\":1}\"", HEARTH_GRAMMAR_JSON_SCHEMA, "{\"type\":1}"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"guided_regex\":\"a+\"", HEARTH_GRAMMAR_REGEX, "a+"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"guided_choice\":[\"x\",\"y\"]", HEARTH_GRAMMAR_CHOICE, "[\"x\",\"y\"]"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"guided_grammar\":\"root ::= \\\"a\\\"\"", HEARTH_GRAMMAR_GBNF, "root ::="},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"grammar\":\"root ::= [a]\"", HEARTH_GRAMMAR_GBNF, "[a]"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"json_schema\":{\"enum\":[1]}", HEARTH_GRAMMAR_JSON_SCHEMA, "enum"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"regex\":\"b\"}", HEARTH_GRAMMAR_REGEX, "b"},
        {OPENAI_ENDPOINT_COMPLETIONS, "\"structured_outputs\":{\"json_object\":true}", HEARTH_GRAMMAR_JSON_OBJECT, ""},
        {OPENAI_ENDPOINT_CHAT, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                               "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"boolean\"}}}}}],"
                               "\"tool_choice\":\"required\"",
         HEARTH_GRAMMAR_GBNF, "<tool_call>"},
        {OPENAI_ENDPOINT_CHAT, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                               "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}",
         HEARTH_GRAMMAR_GBNF, "\\\"name\\\": \\\"f\\\""},
        {OPENAI_ENDPOINT_CHAT, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"auto\"",
         HEARTH_GRAMMAR_NONE, NULL},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char body[1024], p[128], err[HR_ERRLEN];
        snprintf(body, sizeof body, "{\"model\":\"qwen3-tiny\",%s,%s}",
                 ok[i].ep == OPENAI_ENDPOINT_CHAT ? "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
                                                  : "\"prompt\":\"x\"",
                 ok[i].extra);
        struct openai_request rq;
        enum hr_status st = parse(&rq, ok[i].ep, body, p, err);
        CHECK_MSG(st == HR_OK, "%s: %s", body, err);
        if (st != HR_OK)
            continue;
        CHECK_MSG(rq.params.grammar_kind == ok[i].kind, "%s: kind %d", body, (int)rq.params.grammar_kind);
        if (ok[i].text)
            CHECK_MSG(rq.params.grammar && strstr(rq.params.grammar, ok[i].text), "%s: '%s'", body,
                      rq.params.grammar ? rq.params.grammar : "(null)");
        openai_request_free(&rq);
    }
    const enum openai_endpoint C = OPENAI_ENDPOINT_COMPLETIONS, H = OPENAI_ENDPOINT_CHAT;
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"guided_regex\":\"a\",\"guided_json\":{}}",
               HR_ERR_INVALID, 400, "guided_regex");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"guided_regex\":5}", HR_ERR_INVALID, 400,
               "guided_regex");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"guided_choice\":\"a\"}", HR_ERR_INVALID, 400,
               "guided_choice");
    expect_bad(C, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"structured_outputs\":[]}", HR_ERR_INVALID, 400,
               "structured_outputs");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"response_format\":{\"type\":\"json_schema\"}}", HR_ERR_INVALID, 400, "response_format.json_schema");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"not\":{}}}}],"
                  "\"tool_choice\":\"required\"}", HR_ERR_INVALID, 400, "tool_choice");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\","
                  "\"guided_regex\":\"a\"}", HR_ERR_INVALID, 400, "tool_choice");
    expect_bad(H, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\","
                  "\"parallel_tool_calls\":\"yes\"}", HR_ERR_INVALID, 400, "parallel_tool_calls");
}

static void test_context_check(void)
{
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    int mt = -1;
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\"}", p, err), err);
    CHECK_OK(openai_check_context(&rq, 10, 100, &mt, p, sizeof p, err, sizeof err), err);
    CHECK(mt == 16); /* OpenAI's default for completions */
    CHECK_OK(openai_check_context(&rq, 90, 100, &mt, p, sizeof p, err, sizeof err), err);
    CHECK(mt == 10); /* the default shrinks to the room left */
    CHECK(openai_check_context(&rq, 100, 100, &mt, p, sizeof p, err, sizeof err) == HR_ERR_INVALID);
    CHECK(!strcmp(p, "prompt"));
    CHECK(openai_check_context(&rq, 0, 100, &mt, p, sizeof p, err, sizeof err) == HR_ERR_INVALID);
    openai_request_free(&rq);

    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, "{\"model\":\"qwen3-tiny\",\"prompt\":\"x\",\"max_tokens\":50}",
                   p, err), err);
    CHECK_OK(openai_check_context(&rq, 50, 100, &mt, p, sizeof p, err, sizeof err), err);
    CHECK(mt == 50);
    CHECK(openai_check_context(&rq, 51, 100, &mt, p, sizeof p, err, sizeof err) == HR_ERR_INVALID);
    CHECK(!strcmp(p, "max_tokens"));
    CHECK_MSG(strstr(err, "100") && strstr(err, "101") && strstr(err, "51") && strstr(err, "max_tokens"), "%s", err);
    openai_request_free(&rq);

    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_CHAT,
                   "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", p, err), err);
    CHECK_OK(openai_check_context(&rq, 30, 100, &mt, p, sizeof p, err, sizeof err), err);
    CHECK(mt == HEARTH_MAX_TOKENS_AUTO); /* chat: the rest of max_model_len, as the pool allows */
    CHECK(openai_check_context(&rq, 100, 100, &mt, p, sizeof p, err, sizeof err) == HR_ERR_INVALID);
    CHECK(!strcmp(p, "messages"));
    openai_request_free(&rq);

    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_CHAT, "{\"model\":\"qwen3-tiny\",\"messages\":[{\"role\":\"user\","
                   "\"content\":\"x\"}],\"max_completion_tokens\":80}", p, err), err);
    CHECK(openai_check_context(&rq, 30, 100, &mt, p, sizeof p, err, sizeof err) == HR_ERR_INVALID);
    CHECK(!strcmp(p, "max_completion_tokens"));
    openai_request_free(&rq);
}

static void test_error_envelope(void)
{
    json_t *e = openai_error_json(400, "'temperature' must be a number", "temperature", NULL);
    char *s = json_dumps(e, JSON_COMPACT);
    CHECK_MSG(!strcmp(s, "{\"error\":{\"message\":\"'temperature' must be a number\",\"type\":"
                         "\"invalid_request_error\",\"param\":\"temperature\",\"code\":null}}"), "%s", s);
    free(s);
    json_decref(e);
    e = openai_error_json(404, "no such model", "model", "model_not_found");
    s = json_dumps(e, JSON_COMPACT);
    CHECK_MSG(!strcmp(s, "{\"error\":{\"message\":\"no such model\",\"type\":\"invalid_request_error\","
                         "\"param\":\"model\",\"code\":\"model_not_found\"}}"), "%s", s);
    free(s);
    json_decref(e);
    e = openai_error_json(401, "bad key", "", "invalid_api_key");
    CHECK(json_is_null(json_object_get(json_object_get(e, "error"), "param")));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(e, "error"), "type")), "authentication_error"));
    json_decref(e);
    CHECK(openai_http_status(HR_ERR_FULL) == 503 && openai_http_status(HR_ERR_INTERNAL) == 500);
    /* invalid UTF-8 in a message still makes a JSON string */
    json_t *j = openai_json_string("a\xff" "b", 3);
    CHECK(j && !strcmp(json_string_value(j), "a\xEF\xBF\xBD" "b"));
    json_decref(j);
    j = openai_json_logprob(-INFINITY);
    CHECK(json_real_value(j) == -9999.0);
    json_decref(j);
}

/* ---------------------------------------------------------------- responses */

/* Token strings of the fake vocabulary: 1 "Hel", 2 "lo", 3 " wörld" (ö is 2 bytes), 4 "!" */
static enum hr_status fake_token_text(void *ctx, int32_t token, char **text, size_t *len)
{
    (void)ctx;
    static const char *const words[] = {"?", "Hel", "lo", " w\xc3\xb6rld", "!"};
    if (token < 0 || token > 4)
        return HR_ERR_INVALID;
    *text = strdup(words[token]);
    *len = strlen(words[token]);
    return HR_OK;
}

static struct hearth_event tok_event(int index, int32_t token, const char *text, float lp)
{
    struct hearth_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = HEARTH_EVENT_TOKEN;
    ev.index = index;
    ev.token = token;
    ev.text = text;
    ev.text_len = strlen(text);
    ev.logprob = lp;
    ev.n_top = 2;
    ev.top[0] = (struct hearth_logprob){token, lp};
    ev.top[1] = (struct hearth_logprob){4, -2.0f};
    return ev;
}

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
}

static void test_completion_body(void)
{
    struct response r;
    char err[HR_ERRLEN];
    struct response_config cfg = {
        .endpoint = OPENAI_ENDPOINT_COMPLETIONS, .id = "cmpl-1", .created = 1700000000, .model = "m",
        .fingerprint = "fp_x", .n_choices = 2, .logprobs = true, .top_logprobs = 1,
        .token_text = fake_token_text};
    CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
    CHECK_OK(response_prefix(&r, 0, "Say: ", 5, NULL, err, sizeof err), err); /* echo */
    CHECK_OK(response_prefix(&r, 1, "Say: ", 5, NULL, err, sizeof err), err);
    struct hearth_event ev = tok_event(0, 1, "Hel", -0.5f);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    ev = tok_event(0, 3, " w\xc3\xb6rld", -0.25f);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    ev = tok_event(0, 4, "!", -2.0f);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_STOP, NULL, err, sizeof err), err);
    ev = tok_event(1, 2, "lo", -1.0f);
    CHECK_OK(response_token(&r, 1, &ev, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 1, HEARTH_FINISH_LENGTH, NULL, err, sizeof err), err);
    response_add_usage(&r, 7, 4, 4);
    json_t *body = response_body(&r);
    char *s = dump(body);
    /* text_offset counts characters: "Say: " is 5, "Hel" 3, " wörld" 6 */
    const char *want =
        "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\","
        "\"system_fingerprint\":\"fp_x\",\"choices\":["
        "{\"index\":0,\"text\":\"Say: Hel w\xc3\xb6rld!\",\"logprobs\":{\"tokens\":[\"Hel\",\" w\xc3\xb6rld\",\"!\"],"
        "\"token_logprobs\":[-0.5,-0.25,-2.0],\"top_logprobs\":[{\"Hel\":-0.5},{\" w\xc3\xb6rld\":-0.25},{\"!\":-2.0}],"
        "\"text_offset\":[5,8,14]},\"finish_reason\":\"stop\"},"
        "{\"index\":1,\"text\":\"Say: lo\",\"logprobs\":{\"tokens\":[\"lo\"],\"token_logprobs\":[-1.0],"
        "\"top_logprobs\":[{\"lo\":-1.0}],\"text_offset\":[5]},\"finish_reason\":\"length\"}],"
        "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,"
        "\"prompt_tokens_details\":{\"cached_tokens\":4}}}";
    CHECK_MSG(!strcmp(s, want), "\n got %s\nwant %s", s, want);
    free(s);
    json_decref(body);
    /* the body as text (what the server sends): the same bytes */
    char *text = NULL;
    size_t text_len = 0;
    CHECK_OK(response_body_text(&r, &text, &text_len, err, sizeof err), err);
    CHECK_MSG(text && text_len == strlen(want) && !memcmp(text, want, text_len), "\n got %s\nwant %s", text, want);
    free(text);
    response_free(&r);
    response_free(&r);

    /* chat with logprobs and a text that looks like the stand-in of the logprobs */
    struct response_config cc = {
        .endpoint = OPENAI_ENDPOINT_CHAT, .id = "chatcmpl-9", .created = 9, .model = "m", .fingerprint = "f",
        .n_choices = 2, .logprobs = true, .top_logprobs = 2, .token_text = fake_token_text};
    CHECK_OK(response_init(&r, &cc, err, sizeof err), err);
    ev = tok_event(0, 1, "\001hearth-lp-0000000000000000-1\"", -0.5f);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    ev = tok_event(1, 2, "x", -1.5f);
    CHECK_OK(response_token(&r, 1, &ev, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_STOP, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 1, HEARTH_FINISH_STOP, NULL, err, sizeof err), err);
    body = response_body(&r);
    s = dump(body);
    CHECK_OK(response_body_text(&r, &text, &text_len, err, sizeof err), err);
    CHECK_MSG(text && s && !strcmp(text, s), "\n text %s\n tree %s", text, s);
    json_t *lp = json_object_get(json_object_get(json_array_get(json_object_get(body, "choices"), 1), "logprobs"),
                                 "content");
    CHECK(json_array_size(lp) == 1 && json_real_value(json_object_get(json_array_get(lp, 0), "logprob")) == -1.5);
    free(text);
    free(s);
    json_decref(body);
    response_free(&r);

    /* a token the tokenizer does not know (an id past its vocabulary, which a model with
     * padded embeddings may sample) is "" with no bytes in the logprobs, not an error */
    struct response_config cu = {.endpoint = OPENAI_ENDPOINT_CHAT, .id = "c", .created = 1, .model = "m",
                                 .fingerprint = "f", .n_choices = 1, .logprobs = true, .top_logprobs = 2,
                                 .token_text = fake_token_text};
    CHECK_OK(response_init(&r, &cu, err, sizeof err), err);
    ev = tok_event(0, 9, "", -0.5f);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_LENGTH, NULL, err, sizeof err), err);
    body = response_body(&r);
    s = dump(body);
    const char *unk = "\"logprobs\":{\"content\":[{\"token\":\"\",\"logprob\":-0.5,\"bytes\":[],\"top_logprobs\":["
                      "{\"token\":\"\",\"logprob\":-0.5,\"bytes\":[]},{\"token\":\"!\",\"logprob\":-2.0,\"bytes\":[33]}]}]";
    CHECK_MSG(s && strstr(s, unk), "\n got %s\nwant ...%s...", s, unk);
    free(s);
    json_decref(body);
    response_free(&r);
}

static void test_completion_stream(void)
{
    struct response r;
    char err[HR_ERRLEN];
    struct response_config cfg = {
        .endpoint = OPENAI_ENDPOINT_COMPLETIONS, .id = "cmpl-2", .created = 5, .model = "m", .fingerprint = "fp",
        .n_choices = 1, .stream = true, .include_usage = true};
    CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
    json_t *chunk = NULL;
    struct hearth_event ev = tok_event(0, 1, "", 0); /* held back: nothing to send */
    CHECK_OK(response_token(&r, 0, &ev, &chunk, err, sizeof err), err);
    CHECK(chunk == NULL);
    ev = tok_event(0, 2, "Hello", 0);
    CHECK_OK(response_token(&r, 0, &ev, &chunk, err, sizeof err), err);
    char *s = dump(chunk);
    CHECK_MSG(!strcmp(s, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\","
                         "\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"text\":\"Hello\",\"logprobs\":null,"
                         "\"finish_reason\":null}],\"usage\":null}"), "%s", s);
    free(s);
    json_decref(chunk);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_LENGTH, &chunk, err, sizeof err), err);
    s = dump(chunk);
    CHECK_MSG(!strcmp(s, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\","
                         "\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                         "\"finish_reason\":\"length\"}],\"usage\":null}"), "%s", s);
    free(s);
    json_decref(chunk);
    response_add_usage(&r, 3, 0, 2);
    chunk = response_usage_chunk(&r);
    s = dump(chunk);
    CHECK_MSG(!strcmp(s, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\","
                         "\"system_fingerprint\":\"fp\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                         "\"completion_tokens\":2,\"total_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":0}}}"),
              "%s", s);
    free(s);
    json_decref(chunk);
    response_free(&r);
}

static void test_chat_body_and_stream(void)
{
    struct response r;
    char err[HR_ERRLEN];
    struct response_config cfg = {
        .endpoint = OPENAI_ENDPOINT_CHAT, .id = "chatcmpl-3", .created = 9, .model = "m", .fingerprint = "fp",
        .n_choices = 1, .stream = true, .logprobs = true, .top_logprobs = 1, .token_text = fake_token_text};
    CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
    json_t *chunk = response_role_chunk(&r, 0);
    char *s = dump(chunk);
    CHECK_MSG(!strcmp(s, "{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"m\","
                         "\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                         "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}"), "%s", s);
    free(s);
    json_decref(chunk);
    struct hearth_event ev = tok_event(0, 3, " w\xc3\xb6rld", -0.25f);
    ev.n_top = 2;
    CHECK_OK(response_token(&r, 0, &ev, &chunk, err, sizeof err), err);
    s = dump(chunk);
    /* bytes: ' ' w 0xc3 0xb6 r l d */
    CHECK_MSG(!strcmp(s, "{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":9,\"model\":\"m\","
                         "\"system_fingerprint\":\"fp\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
                         "\" w\xc3\xb6rld\"},\"logprobs\":{\"content\":[{\"token\":\" w\xc3\xb6rld\",\"logprob\":-0.25,"
                         "\"bytes\":[32,119,195,182,114,108,100],\"top_logprobs\":[{\"token\":\" w\xc3\xb6rld\","
                         "\"logprob\":-0.25,\"bytes\":[32,119,195,182,114,108,100]}]}]},\"finish_reason\":null}]}"),
              "%s", s);
    free(s);
    json_decref(chunk);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_STOP, &chunk, err, sizeof err), err);
    s = dump(chunk);
    CHECK_MSG(strstr(s, "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]"), "%s",
              s);
    free(s);
    json_decref(chunk);
    response_add_usage(&r, 12, 8, 1);
    json_t *body = response_body(&r);
    s = dump(body);
    const char *want =
        "{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion\",\"created\":9,\"model\":\"m\",\"system_fingerprint\":"
        "\"fp\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\" w\xc3\xb6rld\","
        "\"refusal\":null},\"logprobs\":{\"content\":[{\"token\":\" w\xc3\xb6rld\",\"logprob\":-0.25,\"bytes\":"
        "[32,119,195,182,114,108,100],\"top_logprobs\":[{\"token\":\" w\xc3\xb6rld\",\"logprob\":-0.25,\"bytes\":"
        "[32,119,195,182,114,108,100]}]}],\"refusal\":null},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":"
        "12,\"completion_tokens\":1,\"total_tokens\":13,\"prompt_tokens_details\":{\"cached_tokens\":8}}}";
    CHECK_MSG(!strcmp(s, want), "\n got %s\nwant %s", s, want);
    free(s);
    json_decref(body);
    response_free(&r);
}

static void test_chat_reasoning_response(void)
{
    struct response r;
    char err[HR_ERRLEN];
    struct response_config cfg = {.endpoint = OPENAI_ENDPOINT_CHAT, .id = "c", .model = "m", .fingerprint = "f",
                                  .n_choices = 1, .stream = true, .reasoning = true};
    CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
    const char *pieces[] = {"<th", "ink>I think", "</thi", "nk>\n\nAnswer"};
    char reasoning[64] = "", content[64] = "";
    for (int i = 0; i < 4; i++) {
        struct hearth_event ev = tok_event(0, 1, pieces[i], 0);
        json_t *chunk = NULL;
        CHECK_OK(response_token(&r, 0, &ev, &chunk, err, sizeof err), err);
        if (chunk) {
            json_t *d = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
            if (json_object_get(d, "reasoning_content"))
                strcat(reasoning, json_string_value(json_object_get(d, "reasoning_content")));
            if (json_object_get(d, "content"))
                strcat(content, json_string_value(json_object_get(d, "content")));
            CHECK(!strstr(json_string_value(json_object_get(d, "content")) ?: "", "<"));
        }
        json_decref(chunk);
    }
    CHECK_MSG(!strcmp(reasoning, "I think"), "%s", reasoning);
    CHECK_MSG(!strcmp(content, "\n\nAnswer"), "%s", content);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_STOP, NULL, err, sizeof err), err);
    json_t *body = response_body(&r);
    json_t *msg = json_object_get(json_array_get(json_object_get(body, "choices"), 0), "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "reasoning_content")), "I think"));
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "\n\nAnswer"));
    json_decref(body);
    response_free(&r);
}

/* ---------------------------------------------------------------- tool calls */

/* Runs text through a tool-call parser fed in the given pieces (cut: one split point,
 * or SIZE_MAX: byte by byte); returns the content and the calls as JSON text. */
static void toolcall_run(const char *text, size_t cut, bool enabled, char **content, char **calls)
{
    size_t n = strlen(text);
    struct toolcall p;
    struct strbuf c = {0};
    json_t *found = json_array();
    toolcall_init(&p, enabled, "call_x_");
    if (cut == SIZE_MAX) {
        for (size_t i = 0; i < n; i++)
            CHECK_OK(toolcall_feed(&p, text + i, 1, &c, found), "feed");
    } else {
        CHECK_OK(toolcall_feed(&p, text, cut, &c, found), "feed");
        CHECK_OK(toolcall_feed(&p, text + cut, n - cut, &c, found), "feed");
    }
    CHECK_OK(toolcall_flush(&p, &c), "flush");
    toolcall_free(&p);
    *content = strdup(c.data ? c.data : "");
    *calls = json_dumps(found, JSON_COMPACT | JSON_PRESERVE_ORDER);
    strbuf_free(&c);
    json_decref(found);
}

/* Every split into two feeds, and byte by byte, give the same content and calls. */
static void toolcall_case(const char *text, bool enabled, const char *want_content, const char *want_calls)
{
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        char *content, *calls;
        toolcall_run(text, cut > n ? SIZE_MAX : cut, enabled, &content, &calls);
        CHECK_MSG(!strcmp(content, want_content) && !strcmp(calls, want_calls),
                  "'%s' cut %zu:\n content '%s' (want '%s')\n calls %s\n  want %s", text, cut, content, want_content,
                  calls, want_calls);
        free(content);
        free(calls);
    }
}

static void test_toolcall_parser(void)
{
    /* text, then a call: the whitespace before the call is dropped */
    toolcall_case("Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                  "</tool_call>",
                  true, "Let me check.",
                  "[{\"id\":\"call_x_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                  "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]");
    /* two calls; arguments given as a string pass as they are; no arguments: {} */
    toolcall_case("<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n<tool_call>"
                  "{\"name\":\"b\"}</tool_call>\n",
                  true, "",
                  "[{\"id\":\"call_x_0\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":"
                  "\"{\\\"x\\\": 1}\"}},{\"id\":\"call_x_1\",\"type\":\"function\",\"function\":{\"name\":"
                  "\"b\",\"arguments\":\"{}\"}}]");
    /* content after a call keeps the whitespace between */
    toolcall_case("<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n\nDone.\n", true, "\n\nDone.",
                  "[{\"id\":\"call_x_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                  "\"{}\"}}]");
    /* not a call: bad JSON, no name, arguments of the wrong type: the block stays content */
    toolcall_case("A <tool_call>{not json}</tool_call> B", true, "A <tool_call>{not json}</tool_call> B", "[]");
    toolcall_case("<tool_call>{\"arguments\": {}}</tool_call>", true, "<tool_call>{\"arguments\": {}}</tool_call>",
                  "[]");
    toolcall_case("<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", true,
                  "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", "[]");
    /* an output that ends inside a block, or on a possible tag */
    toolcall_case("Sure <tool_call>{\"name\": \"x\"", true, "Sure <tool_call>{\"name\": \"x\"", "[]");
    toolcall_case("a <tool_ca", true, "a <tool_ca", "[]");
    /* look-alikes and a lone close tag are content; without calls every byte is kept */
    toolcall_case("a <toolbox> </tool_call> b  \n", true, "a <toolbox> </tool_call> b  \n", "[]");
    toolcall_case("  \n", true, "  \n", "[]");
    /* a close tag that looks like it is about to come, then does */
    toolcall_case("<tool_call>{\"name\":\"g\",\"arguments\":{\"s\":\"</tool\"}}</tool_call>", true, "",
                  "[{\"id\":\"call_x_0\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
                  "\"{\\\"s\\\":\\\"</tool\\\"}\"}}]");
    /* disabled: a pass-through */
    toolcall_case("x <tool_call>{\"name\":\"f\"}</tool_call>\n", false, "x <tool_call>{\"name\":\"f\"}</tool_call>\n",
                  "[]");
}

/* A chat choice with tool calls, streamed: each call is one delta with index, id,
 * type and function; the last chunk's finish_reason is "tool_calls"; the body has
 * null content and the calls without index.  Cut short, the finish stays "length". */
static void test_chat_tool_calls_response(void)
{
    char err[HR_ERRLEN];
    for (int cut_short = 0; cut_short < 2; cut_short++) {
        struct response r;
        struct response_config cfg = {.endpoint = OPENAI_ENDPOINT_CHAT, .id = "chatcmpl-7", .model = "m",
                                      .fingerprint = "f", .n_choices = 1, .stream = true, .reasoning = true,
                                      .tool_calls = true};
        CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
        const char *pieces[] = {"<think>hm</think>\n\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_", "call>"};
        char content[64] = "";
        int n_call_deltas = 0;
        for (int i = 0; i < 4; i++) {
            struct hearth_event ev = tok_event(0, 1, pieces[i], 0);
            json_t *chunk = NULL;
            CHECK_OK(response_token(&r, 0, &ev, &chunk, err, sizeof err), err);
            json_t *d = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
            if (json_object_get(d, "content"))
                strcat(content, json_string_value(json_object_get(d, "content")));
            json_t *calls = json_object_get(d, "tool_calls");
            if (calls) {
                n_call_deltas++;
                char *s = json_dumps(calls, JSON_COMPACT | JSON_PRESERVE_ORDER);
                const char *want = "[{\"index\":0,\"id\":\"call_7_0_0\",\"type\":\"function\",\"function\":{\"name\":"
                                   "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]";
                CHECK_MSG(i == 3 && !strcmp(s, want), "piece %d: %s", i, s);
                free(s);
            }
            json_decref(chunk);
        }
        CHECK(n_call_deltas == 1);
        CHECK_MSG(!strcmp(content, ""), "content '%s'", content);
        json_t *last = NULL;
        CHECK_OK(response_finish(&r, 0, cut_short ? HEARTH_FINISH_LENGTH : HEARTH_FINISH_STOP, &last, err,
                                 sizeof err),
                 err);
        const char *want_finish = cut_short ? "length" : "tool_calls";
        json_t *ch = json_array_get(json_object_get(last, "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(ch, "finish_reason")), want_finish));
        CHECK(!json_object_get(json_object_get(ch, "delta"), "content"));
        json_decref(last);
        json_t *body = response_body(&r);
        ch = json_array_get(json_object_get(body, "choices"), 0);
        json_t *msg = json_object_get(ch, "message");
        CHECK(json_is_null(json_object_get(msg, "content")));
        CHECK(!strcmp(json_string_value(json_object_get(msg, "reasoning_content")), "hm"));
        char *s = json_dumps(json_object_get(msg, "tool_calls"), JSON_COMPACT | JSON_PRESERVE_ORDER);
        CHECK_MSG(!strcmp(s, "[{\"id\":\"call_7_0_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                             "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]"),
                  "%s", s);
        free(s);
        CHECK(!strcmp(json_string_value(json_object_get(ch, "finish_reason")), want_finish));
        json_decref(body);
        response_free(&r);
    }
    /* tools not asked for: the same text is plain content, no tool_calls key */
    struct response r;
    struct response_config cfg = {.endpoint = OPENAI_ENDPOINT_CHAT, .id = "chatcmpl-8", .model = "m",
                                  .fingerprint = "f", .n_choices = 1};
    CHECK_OK(response_init(&r, &cfg, err, sizeof err), err);
    struct hearth_event ev = tok_event(0, 1, "<tool_call>{\"name\":\"f\"}</tool_call>", 0);
    CHECK_OK(response_token(&r, 0, &ev, NULL, err, sizeof err), err);
    CHECK_OK(response_finish(&r, 0, HEARTH_FINISH_STOP, NULL, err, sizeof err), err);
    json_t *body = response_body(&r);
    json_t *ch = json_array_get(json_object_get(body, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "<tool_call>{\"name\":\"f\"}</tool_call>"));
    CHECK(!json_object_get(msg, "tool_calls"));
    CHECK(!strcmp(json_string_value(json_object_get(ch, "finish_reason")), "stop"));
    json_decref(body);
    response_free(&r);
}

/* ---------------------------------------------------------------- reasoning */

static void split_all(const char *text, bool opened, const char *want_r, const char *want_c)
{
    size_t n = strlen(text);
    /* every split of the text into two feeds gives the same answer */
    for (size_t cut = 0; cut <= n; cut++) {
        struct reasoning p;
        struct strbuf r = {0}, c = {0};
        reasoning_init(&p, true, opened);
        reasoning_feed(&p, text, cut, &r, &c);
        reasoning_feed(&p, text + cut, n - cut, &r, &c);
        reasoning_flush(&p, &r, &c);
        CHECK_MSG(!strcmp(r.data ? r.data : "", want_r) && !strcmp(c.data ? c.data : "", want_c),
                  "'%s' cut %zu: reasoning '%s' content '%s'", text, cut, r.data ? r.data : "", c.data ? c.data : "");
        strbuf_free(&r);
        strbuf_free(&c);
    }
    /* and byte by byte */
    struct reasoning p;
    struct strbuf r = {0}, c = {0};
    reasoning_init(&p, true, opened);
    for (size_t i = 0; i < n; i++)
        reasoning_feed(&p, text + i, 1, &r, &c);
    reasoning_flush(&p, &r, &c);
    CHECK_MSG(!strcmp(r.data ? r.data : "", want_r) && !strcmp(c.data ? c.data : "", want_c), "'%s' bytewise", text);
    strbuf_free(&r);
    strbuf_free(&c);
}

static void test_reasoning_parser(void)
{
    split_all("<think>abc</think>xyz", false, "abc", "xyz");
    split_all("<think>\nlet me see\n</think>\n\nThe answer", false, "\nlet me see\n", "\n\nThe answer");
    split_all("plain answer", false, "", "plain answer");
    split_all("<thin is not a tag", false, "", "<thin is not a tag");
    split_all("<think>never closed </thi", false, "never closed </thi", "");
    split_all("a</think>b", true, "a", "b"); /* the template opened <think> */
    split_all("x <think>y</think>", false, "", "x <think>y</think>");
    split_all("<think></think>", false, "", "");
    /* disabled: a pass-through */
    struct reasoning p;
    struct strbuf r = {0}, c = {0};
    reasoning_init(&p, false, false);
    reasoning_feed(&p, "<think>a</think>", 16, &r, &c);
    reasoning_flush(&p, &r, &c);
    CHECK(r.len == 0 && c.len == 16);
    strbuf_free(&r);
    strbuf_free(&c);
}

/* ---------------------------------------------------------------- framing, auth, metrics */

static void test_sse_framing(void)
{
    struct strbuf b = {0};
    json_t *o = json_pack("{s:s}", "a", "line1\nline2");
    CHECK_OK(sse_append_json(&b, o), "sse");
    CHECK_OK(sse_append_done(&b), "sse");
    CHECK_OK(sse_append_comment(&b, "ping\nx"), "sse");
    CHECK_MSG(!strcmp(b.data, "data: {\"a\":\"line1\\nline2\"}\n\ndata: [DONE]\n\n: ping\n\n"), "%s", b.data);
    strbuf_consume(&b, 6);
    CHECK(!strncmp(b.data, "{\"a\"", 4));
    size_t len;
    char *s = strbuf_take(&b, &len);
    CHECK(s && len == strlen(s) && b.data == NULL);
    free(s);
    json_decref(o);
    strbuf_free(&b);
}

static void test_auth(void)
{
    struct auth a;
    char err[HR_ERRLEN];
    const char *keys[] = {"sk-one", "sk-two"};
    CHECK_OK(auth_init(&a, keys, 2, NULL, 0, true, err, sizeof err), err);
    CHECK(auth_enabled(&a));
    CHECK(auth_check(&a, "Bearer sk-one") == 0);
    CHECK(auth_check(&a, "bearer   sk-two  ") == 1);
    CHECK(auth_check(&a, "Bearer sk-on") == -1);
    CHECK(auth_check(&a, "Bearer sk-one1") == -1);
    CHECK(auth_check(&a, "Basic sk-one") == -1);
    CHECK(auth_check(&a, "Bearersk-one") == -1);
    CHECK(auth_check(&a, NULL) == -1);
    CHECK(auth_salt(&a, 0) && auth_salt(&a, 1) && strcmp(auth_salt(&a, 0), auth_salt(&a, 1)) != 0);
    CHECK(!strstr(auth_salt(&a, 0), "sk-one")); /* the key never becomes a label */
    CHECK(auth_salt(&a, -1) == NULL);
    char s0[64];
    snprintf(s0, sizeof s0, "%s", auth_salt(&a, 0));
    auth_free(&a);
    auth_free(&a);
    CHECK_OK(auth_init(&a, keys, 2, NULL, 0, true, err, sizeof err), err);
    CHECK(!strcmp(s0, auth_salt(&a, 0))); /* stable across restarts: cached prefixes stay reachable */
    auth_free(&a);
    CHECK_OK(auth_init(&a, keys, 2, NULL, 0, false, err, sizeof err), err);
    CHECK(auth_salt(&a, 0) == NULL);
    auth_free(&a);
    const char *empty[] = {""};
    CHECK(auth_init(&a, empty, 1, NULL, 0, false, err, sizeof err) == HR_ERR_INVALID);
    CHECK_OK(auth_init(&a, NULL, 0, NULL, 0, false, err, sizeof err), err);
    CHECK(!auth_enabled(&a));
    auth_free(&a);
    /* admin keys: known keys after the tenant keys, the only ones auth_is_admin accepts */
    const char *admins[] = {"sk-admin"};
    CHECK_OK(auth_init(&a, keys, 2, admins, 1, true, err, sizeof err), err);
    CHECK(auth_has_admin(&a));
    CHECK(auth_check(&a, "Bearer sk-admin") == 2 && auth_is_admin(&a, 2));
    CHECK(!auth_is_admin(&a, 0) && !auth_is_admin(&a, 1) && !auth_is_admin(&a, -1));
    CHECK(auth_salt(&a, 2) && strcmp(auth_salt(&a, 2), auth_salt(&a, 0)) != 0);
    auth_free(&a);
    CHECK_OK(auth_init(&a, keys, 2, NULL, 0, false, err, sizeof err), err);
    CHECK(!auth_has_admin(&a));
    auth_free(&a);
    const char *dup[] = {"sk-one"};
    CHECK(auth_init(&a, keys, 2, dup, 1, false, err, sizeof err) == HR_ERR_INVALID);
}

static void test_metrics_text(void)
{
    struct metrics m;
    char err[HR_ERRLEN];
    CHECK_OK(metrics_init(&m, err, sizeof err), err);
    metrics_count_request(&m, METRICS_ENDPOINT_CHAT, 200);
    metrics_count_request(&m, METRICS_ENDPOINT_CHAT, 200);
    metrics_count_request(&m, METRICS_ENDPOINT_COMPLETIONS, 400);
    metrics_count_request(&m, METRICS_ENDPOINT_COUNT, 200); /* out of range: ignored */
    metrics_observe_ttft(&m, 0.003);  /* bucket le=0.005 */
    metrics_observe_ttft(&m, 100.0);  /* only +Inf */
    metrics_observe_itl(&m, 0.02);
    struct hearth_stats st;
    memset(&st, 0, sizeof st);
    st.blocks_total = 100;
    st.blocks_free = 90;
    st.blocks_used = 10;
    st.waiting = 3;
    st.prefix_cache.enabled = true;
    st.prefix_cache.hit_tokens_total = 4096;
    struct strbuf b = {0};
    CHECK_OK(metrics_render(&m, &st, true, &b), "render");
    const char *want[] = {
        "hearth_model_ready 1\n",
        "hearth_http_requests_total{endpoint=\"chat_completions\",code=\"200\"} 2\n",
        "hearth_http_requests_total{endpoint=\"completions\",code=\"400\"} 1\n",
        "# TYPE hearth_time_to_first_token_seconds histogram\n",
        "hearth_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n",
        "hearth_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
        "hearth_time_to_first_token_seconds_bucket{le=\"80\"} 1\n",
        "hearth_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n",
        "hearth_time_to_first_token_seconds_count 2\n",
        "hearth_inter_token_latency_seconds_bucket{le=\"0.025\"} 1\n",
        "hearth_kv_blocks_free 90\n",
        "hearth_kv_blocks_used 10\n",
        "hearth_num_requests_waiting 3\n",
        "# TYPE hearth_prefix_cache_hit_tokens_total counter\n",
        "hearth_prefix_cache_hit_tokens_total 4096\n",
        "hearth_prefix_cache_enabled 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(b.data, want[i]) != NULL, "missing: %s", want[i]);
    /* each line is a comment or "name{labels} value" */
    for (char *line = b.data; *line;) {
        char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        if (!nl)
            break;
        if (line[0] != '#') {
            char *sp = memchr(line, ' ', (size_t)(nl - line));
            CHECK_MSG(sp && sp > line && !strncmp(line, "hearth_", 7), "%.*s", (int)(nl - line), line);
        }
        line = nl + 1;
    }
    strbuf_free(&b);
    CHECK_OK(metrics_render(&m, NULL, false, &b), "render");
    CHECK(strstr(b.data, "hearth_model_ready 0\n") && !strstr(b.data, "hearth_kv_blocks_free"));
    strbuf_free(&b);
    metrics_free(&m);
    metrics_free(&m);
}

/* ---------------------------------------------------------------- fuzz corpus */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_fuzz_corpus_replay(void)
{
    const char *env = getenv("HEARTH_FUZZ_CORPUS");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/openai", env && *env ? env : "tests/fuzz/corpus");
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    int ok = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        char p[2048], err[HR_ERRLEN];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        char *buf;
        size_t len;
        CHECK_OK(fileio_read_all(p, 0, &buf, &len, err, sizeof err), err);
        if (buf) {
            uint8_t *exact = malloc(len ? len : 1); /* exact size: ASan sees a read past the end */
            memcpy(exact, buf, len);
            free(buf);
            enum hr_status st = fuzz_openai_run(exact, len);
            fuzz_openai_entry(exact, len);
            if (!strncmp(names[i], "ok-", 3)) {
                CHECK_MSG(st == HR_OK, "%s refused", names[i]);
                ok++;
            } else if (!strncmp(names[i], "bad-", 4)) {
                CHECK_MSG(st != HR_OK, "%s accepted", names[i]);
                bad++;
            }
            free(exact);
        }
        free(names[i]);
    }
    CHECK(ok >= 5 && bad >= 10);
    printf("  %d openai inputs (%d ok, %d bad)\n", n, ok, bad);
}

int main(void)
{
    TEST_RUN(test_completions_all_fields);
    TEST_RUN(test_completions_defaults_and_nulls);
    TEST_RUN(test_completions_prompt_forms);
    TEST_RUN(test_completions_bad_input);
    TEST_RUN(test_chat_parse);
    TEST_RUN(test_chat_bad_input);
    TEST_RUN(test_context_check);
    TEST_RUN(test_error_envelope);
    TEST_RUN(test_completion_body);
    TEST_RUN(test_completion_stream);
    TEST_RUN(test_chat_body_and_stream);
    TEST_RUN(test_chat_reasoning_response);
    TEST_RUN(test_reasoning_parser);
    TEST_RUN(test_toolcall_parser);
    TEST_RUN(test_chat_tool_calls_response);
    TEST_RUN(test_sse_framing);
    TEST_RUN(test_structured_fields);
    TEST_RUN(test_auth);
    TEST_RUN(test_metrics_text);
    TEST_RUN(test_fuzz_corpus_replay);
    TEST_END();
}
