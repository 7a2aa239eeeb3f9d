/* What a replica behind a load balancer adds to the API: prompt_cache_key is accepted
 * (a string up to 1 KiB), refused otherwise, and never becomes the cache namespace;
 * --instance-name puts one label on every /metrics sample, and names are validated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"
#include "server/openai.h"
#include "test.h"

static const char *const test_models[] = {"m"};
static const struct openai_limits test_lim = {
    .model_names = test_models, .n_model_names = 1, .max_n = 4, .max_prompts = 8, .vocab_size = 1000};

static enum hr_status parse(struct openai_request *rq, enum openai_endpoint ep, const char *body, char *param,
                            char *err)
{
    return openai_request_parse(rq, ep, body, strlen(body), &test_lim, param, 128, err, HR_ERRLEN);
}

/* {"model":"m",<what>,"prompt_cache_key":<key>} on both endpoints. */
static void check_key(const char *key, bool accepted)
{
    static const char *const heads[2] = {"\"prompt\":\"hi\"", "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"};
    static const enum openai_endpoint eps[2] = {OPENAI_ENDPOINT_COMPLETIONS, OPENAI_ENDPOINT_CHAT};
    for (int e = 0; e < 2; e++) {
        size_t n = strlen(key) + 200;
        char *body = malloc(n);
        snprintf(body, n, "{\"model\":\"m\",%s,\"prompt_cache_key\":%s}", heads[e], key);
        struct openai_request rq;
        char p[128] = "", err[HR_ERRLEN] = "";
        enum hr_status st = parse(&rq, eps[e], body, p, err);
        if (accepted) {
            CHECK_MSG(st == HR_OK, "%.80s: %s", body, err);
            if (st == HR_OK)
                CHECK_MSG(rq.params.cache_salt == NULL, "prompt_cache_key became the cache namespace");
        } else {
            CHECK_MSG(st == HR_ERR_INVALID && openai_http_status(st) == 400, "%.80s: got %s", body,
                      hr_status_str(st));
            CHECK_MSG(!strcmp(p, "prompt_cache_key") && strstr(err, "prompt_cache_key"), "param '%s', message '%s'", p,
                      err);
        }
        openai_request_free(&rq);
        free(body);
    }
}

static void test_prompt_cache_key(void)
{
    check_key("\"user-42/conversation-7\"", true);
    check_key("\"\"", true);
    char big[1100];
    big[0] = '"';
    memset(big + 1, 'k', 1024);
    big[1025] = '"';
    big[1026] = 0;
    check_key(big, true); /* exactly 1 KiB */
    big[1025] = 'k';
    big[1026] = '"';
    big[1027] = 0;
    check_key(big, false); /* 1025 bytes */
    check_key("5", false);
    check_key("null", true); /* null: absent, as for every optional field */
    check_key("[\"a\"]", false);
    check_key("{\"a\":1}", false);
    check_key("true", false);
}

/* Both a key and a salt: the salt alone names the namespace. */
static void test_key_and_salt(void)
{
    struct openai_request rq;
    char p[128], err[HR_ERRLEN];
    const char *body = "{\"model\":\"m\",\"prompt\":\"hi\",\"prompt_cache_key\":\"k1\",\"cache_salt\":\"tenant\"}";
    CHECK_OK(parse(&rq, OPENAI_ENDPOINT_COMPLETIONS, body, p, err), err);
    CHECK(rq.params.cache_salt && !strcmp(rq.params.cache_salt, "tenant"));
    openai_request_free(&rq);
}

static void test_instance_names(void)
{
    CHECK(metrics_instance_valid("replica-1"));
    CHECK(metrics_instance_valid("host.example:8001_a"));
    char longest[METRICS_INSTANCE_MAX + 2];
    memset(longest, 'a', sizeof longest);
    longest[METRICS_INSTANCE_MAX] = 0;
    CHECK(metrics_instance_valid(longest));
    longest[METRICS_INSTANCE_MAX] = 'a';
    longest[METRICS_INSTANCE_MAX + 1] = 0;
    CHECK(!metrics_instance_valid(longest));
    CHECK(!metrics_instance_valid(""));
    CHECK(!metrics_instance_valid(NULL));
    CHECK(!metrics_instance_valid("a b"));
    CHECK(!metrics_instance_valid("a\"b"));
    CHECK(!metrics_instance_valid("a\\b"));
    CHECK(!metrics_instance_valid("a\nb"));
    CHECK(!metrics_instance_valid("a{b}"));
}

/* Every sample line of the exposition carries the label exactly once, first among labels. */
static void test_instance_label(void)
{
    struct metrics m;
    char err[HR_ERRLEN];
    CHECK_OK(metrics_init(&m, err, sizeof err), err);
    metrics_set_instance(&m, "r2");
    metrics_count_request(&m, METRICS_ENDPOINT_CHAT, 200);
    metrics_observe_ttft(&m, 0.003);
    struct hearth_stats st;
    memset(&st, 0, sizeof st);
    st.blocks_total = 100;
    struct strbuf b = {0};
    CHECK_OK(metrics_render(&m, &st, true, &b), "render");
    int samples = 0;
    const char *line = b.data;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        if (line[0] != '#') {
            samples++;
            const char *brace = memchr(line, '{', n);
            CHECK_MSG(brace && !strncmp(brace, "{instance_name=\"r2\"", 19), "%.*s", (int)n, line);
            const char *again = brace ? strstr(brace + 15, "instance_name") : NULL;
            CHECK_MSG(!again || again >= line + n, "label twice: %.*s", (int)n, line);
        }
        line = nl ? nl + 1 : NULL;
    }
    CHECK_MSG(samples > 40, "%d samples", samples);
    const char *want[] = {
        "hearth_model_ready{instance_name=\"r2\"} 1\n",
        "hearth_http_requests_total{instance_name=\"r2\",endpoint=\"chat_completions\",code=\"200\"} 1\n",
        "hearth_time_to_first_token_seconds_bucket{instance_name=\"r2\",le=\"0.005\"} 1\n",
        "hearth_time_to_first_token_seconds_count{instance_name=\"r2\"} 1\n",
        "hearth_kv_blocks_total{instance_name=\"r2\"} 100\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(b.data, want[i]) != NULL, "missing %s", want[i]);
    strbuf_free(&b);
    /* without a name: no label at all */
    metrics_set_instance(&m, NULL);
    CHECK_OK(metrics_render(&m, &st, true, &b), "render");
    CHECK(strstr(b.data, "instance_name") == NULL);
    CHECK(strstr(b.data, "hearth_model_ready 1\n") != NULL);
    strbuf_free(&b);
    metrics_free(&m);
}

int main(void)
{
    TEST_RUN(test_prompt_cache_key);
    TEST_RUN(test_key_and_salt);
    TEST_RUN(test_instance_names);
    TEST_RUN(test_instance_label);
    TEST_END();
}
