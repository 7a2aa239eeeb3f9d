/* The Responses API translation (src/server/responses.c): request items to chat
 * messages, a chat completion to a Response, chat SSE chunks to Responses events
 * (reasoning, text, a function call, usage), and the item store. */
#include <stdlib.h>
#include <string.h>

#include "server/responses.h"
#include "test.h"

static json_t *parse(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j)
        fprintf(stderr, "  bad test JSON: %s\n", je.text);
    return j;
}

/* compact dumps, sorted keys: a stable string to compare */
static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

static void test_request(void)
{
    char param[64], err[HR_ERRLEN];
    json_t *req = parse(
        "{\"model\":\"m\",\"instructions\":\"Be brief\",\"max_output_tokens\":7,\"temperature\":0.5,\"stream\":true,"
        "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Hi \"},"
        "{\"type\":\"input_text\",\"text\":\"there\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"think\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"42\"},"
        "{\"type\":\"message\",\"role\":\"developer\",\"content\":\"dev\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"type\":\"object\"},"
        "\"strict\":null}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":{\"type\":\"object\"}}}}");
    json_t *chat = NULL;
    CHECK_OK(responses_to_chat(req, NULL, &chat, param, sizeof param, err, sizeof err), err);
    char *got = chat ? dump(chat) : NULL;
    const char *want =
        "{\"max_tokens\":7,\"messages\":[{\"content\":\"Be brief\",\"role\":\"system\"},"
        "{\"content\":\"Hi there\",\"role\":\"user\"},"
        "{\"content\":\"\",\"reasoning_content\":\"think\",\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
        "{\"arguments\":\"{}\",\"name\":\"f\"},\"id\":\"c1\",\"type\":\"function\"}]},"
        "{\"content\":\"42\",\"role\":\"tool\",\"tool_call_id\":\"c1\"},{\"content\":\"dev\",\"role\":\"system\"}],"
        "\"model\":\"m\",\"response_format\":{\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\"}},"
        "\"type\":\"json_schema\"},\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0.5,"
        "\"tool_choice\":{\"function\":{\"name\":\"f\"},\"type\":\"function\"},\"tools\":[{\"function\":"
        "{\"description\":\"d\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},\"type\":\"function\"}]}";
    CHECK_MSG(got && !strcmp(got, want), "\n got  %s\n want %s", got ? got : "(null)", want);
    free(got);
    json_decref(chat);
    json_decref(req);

    /* a string input; reasoning.effort none turns thinking off */
    req = parse("{\"model\":\"m\",\"input\":\"Hello\",\"reasoning\":{\"effort\":\"none\"}}");
    CHECK_OK(responses_to_chat(req, NULL, &chat, param, sizeof param, err, sizeof err), err);
    got = chat ? dump(chat) : NULL;
    want = "{\"chat_template_kwargs\":{\"enable_thinking\":false},\"messages\":[{\"content\":\"Hello\",\"role\":"
           "\"user\"}],\"model\":\"m\"}";
    CHECK_MSG(got && !strcmp(got, want), "\n got  %s\n want %s", got ? got : "(null)", want);
    free(got);
    json_decref(chat);
    json_decref(req);

    /* refusals, each naming its field */
    struct {
        const char *body, *param;
        enum hr_status st;
    } bad[] = {
        {"{\"model\":\"m\"}", "input", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":[]}", "input", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id",
         HR_ERR_UNSUPPORTED},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "input[0]", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
         "input[0].content", HR_ERR_UNSUPPORTED},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input[0]", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_x\"}]}", "input[0]", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"computer_call\"}]}", "input[0]", HR_ERR_UNSUPPORTED},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}", "tools[0]", HR_ERR_UNSUPPORTED},
        {"{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":\"x\",\"instructions\":5}", "instructions", HR_ERR_INVALID},
        {"{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":5}", "tool_choice", HR_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        req = parse(bad[i].body);
        chat = NULL;
        enum hr_status st = responses_to_chat(req, NULL, &chat, param, sizeof param, err, sizeof err);
        CHECK_MSG(st == bad[i].st && !chat && !strcmp(param, bad[i].param) && err[0], "case %zu: %d param '%s' (%s)",
                  i, (int)st, param, err);
        json_decref(req);
    }
}

static const struct responses_meta meta = {"resp_1", "abc", 100, "m", NULL, NULL};

static void test_from_chat(void)
{
    json_t *chat = parse(
        "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi\",\"reasoning_content\":"
        "\"hmm\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{\\\"a\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}],"
        "\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":5,\"total_tokens\":25,"
        "\"prompt_tokens_details\":{\"cached_tokens\":16}}}");
    json_t *r = responses_from_chat(&meta, chat);
    json_t *out = json_object_get(r, "output");
    char *o = dump(out), *u = dump(json_object_get(r, "usage"));
    const char *want_o =
        "[{\"id\":\"rs_abc0\",\"summary\":[{\"text\":\"hmm\",\"type\":\"summary_text\"}],\"type\":\"reasoning\"},"
        "{\"content\":[{\"annotations\":[],\"logprobs\":[],\"text\":\"Hi\",\"type\":\"output_text\"}],\"id\":"
        "\"msg_abc1\",\"role\":\"assistant\",\"status\":\"completed\",\"type\":\"message\"},"
        "{\"arguments\":\"{\\\"a\\\":1}\",\"call_id\":\"call_1\",\"id\":\"fc_abc2\",\"name\":\"f\",\"status\":"
        "\"completed\",\"type\":\"function_call\"}]";
    const char *want_u = "{\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16},\"output_tokens\":5,"
                         "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":25}";
    CHECK_MSG(!strcmp(o, want_o), "\n got  %s\n want %s", o, want_o);
    CHECK_MSG(!strcmp(u, want_u), "\n got  %s\n want %s", u, want_u);
    CHECK(!strcmp(json_string_value(json_object_get(r, "status")), "completed"));
    CHECK(!strcmp(json_string_value(json_object_get(r, "object")), "response"));
    free(o);
    free(u);
    json_decref(r);
    json_decref(chat);

    /* cut by max_tokens: incomplete, and the message says so */
    chat = parse("{\"choices\":[{\"message\":{\"content\":\"Hel\"},\"finish_reason\":\"length\"}],\"usage\":{}}");
    r = responses_from_chat(&meta, chat);
    CHECK(!strcmp(json_string_value(json_object_get(r, "status")), "incomplete"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(r, "incomplete_details"), "reason")),
                  "max_output_tokens"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(r, "output"), 0), "status")),
                  "incomplete"));
    json_decref(r);
    json_decref(chat);
}

static void test_stream(void)
{
    struct responses_store *store = responses_store_new();
    struct responses_meta m = meta;
    m.store = store;
    struct responses_stream *rs = responses_stream_new(&m);
    CHECK(rs && store);
    if (!rs || !store)
        return;
    struct strbuf chat = {0}, out = {0};
    const char *frames[] = {
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"m\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n",
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        strbuf_puts(&chat, frames[i]);
        CHECK(responses_stream_feed(rs, &chat, &out) == HR_OK);
        CHECK(chat.len == 0);
    }
    /* the event types, in order, and their sequence numbers */
    const char *want[] = {"response.created", "response.in_progress", "response.output_item.added",
                          "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                          "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
                          "response.reasoning_summary_part.done", "response.output_item.done",
                          "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"};
    int n = 0;
    json_t *last = NULL;
    for (const char *p = out.data; p && (p = strstr(p, "event: ")); n++) {
        p += 7;
        size_t k = strcspn(p, "\n");
        const char *data = strstr(p, "data: ");
        size_t dl = data ? strcspn(data + 6, "\n") : 0;
        json_t *ev = data ? json_loadb(data + 6, dl, 0, NULL) : NULL;
        bool okt = n < (int)(sizeof want / sizeof want[0]) && strlen(want[n]) == k && !strncmp(p, want[n], k);
        CHECK_MSG(okt, "event %d: %.*s", n, (int)k, p);
        CHECK_MSG(ev && json_integer_value(json_object_get(ev, "sequence_number")) == n &&
                      !strncmp(json_string_value(json_object_get(ev, "type")), p, k),
                  "event %d: data", n);
        json_decref(last);
        last = ev;
    }
    CHECK_MSG(n == (int)(sizeof want / sizeof want[0]), "%d events", n);
    json_t *resp = json_object_get(last, "response");
    char *o = dump(json_object_get(resp, "output"));
    const char *want_o =
        "[{\"id\":\"rs_abc0\",\"summary\":[{\"text\":\"hmm\",\"type\":\"summary_text\"}],\"type\":\"reasoning\"},"
        "{\"content\":[{\"annotations\":[],\"logprobs\":[],\"text\":\"Hi\",\"type\":\"output_text\"}],\"id\":"
        "\"msg_abc1\",\"role\":\"assistant\",\"status\":\"completed\",\"type\":\"message\"},"
        "{\"arguments\":\"{}\",\"call_id\":\"call_1\",\"id\":\"fc_abc2\",\"name\":\"f\",\"status\":\"completed\","
        "\"type\":\"function_call\"}]";
    CHECK_MSG(o && !strcmp(o, want_o), "\n got  %s\n want %s", o ? o : "(null)", want_o);
    CHECK(json_integer_value(json_object_get(json_object_get(resp, "usage"), "output_tokens")) == 4);
    free(o);
    json_decref(last);

    /* the finished items resolve as item_reference */
    json_t *item = responses_store_get(store, "fc_abc2");
    CHECK(item && !strcmp(json_string_value(json_object_get(item, "call_id")), "call_1"));
    json_decref(item);
    char param[64], err[HR_ERRLEN];
    json_t *req = parse("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
                        "{\"type\":\"item_reference\",\"id\":\"msg_abc1\"},{\"type\":\"item_reference\",\"id\":"
                        "\"fc_abc2\"},{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"1\"}]}");
    json_t *chatreq = NULL;
    CHECK_OK(responses_to_chat(req, store, &chatreq, param, sizeof param, err, sizeof err), err);
    char *got = chatreq ? dump(json_object_get(chatreq, "messages")) : NULL;
    const char *want_m = "[{\"content\":\"q\",\"role\":\"user\"},{\"content\":\"Hi\",\"role\":\"assistant\","
                         "\"tool_calls\":[{\"function\":{\"arguments\":\"{}\",\"name\":\"f\"},\"id\":\"call_1\","
                         "\"type\":\"function\"}]},{\"content\":\"1\",\"role\":\"tool\",\"tool_call_id\":\"call_1\"}]";
    CHECK_MSG(got && !strcmp(got, want_m), "\n got  %s\n want %s", got ? got : "(null)", want_m);
    free(got);
    json_decref(chatreq);
    json_decref(req);
    responses_stream_free(rs);
    strbuf_free(&chat);
    strbuf_free(&out);

    /* an engine error mid-stream: error, then response.failed; nothing after */
    rs = responses_stream_new(&meta);
    strbuf_puts(&chat, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
                       "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\ndata: [DONE]\n\n");
    CHECK(rs && responses_stream_feed(rs, &chat, &out) == HR_OK);
    CHECK(out.data && strstr(out.data, "event: error\n") && strstr(out.data, "event: response.failed\n") &&
          strstr(out.data, "\"boom\"") && !strstr(out.data, "response.completed"));
    responses_stream_free(rs);
    strbuf_free(&chat);
    strbuf_free(&out);
    responses_store_free(store);
}

int main(void)
{
    TEST_RUN(test_request);
    TEST_RUN(test_from_chat);
    TEST_RUN(test_stream);
    TEST_END();
}
