/* Log lines: the text form, the JSON form (every line parses with jansson, whatever bytes
 * a message or a field carries), and the access-log line's fields in both forms.
 * stderr is pointed at a temporary file while a test writes, then read back. */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "server/access_log.h"
#include "test.h"

static FILE *capture_file;
static int saved_stderr = -1;

static void capture_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    HR_ASSERT(capture_file);
    saved_stderr = dup(2);
    dup2(fileno(capture_file), 2);
}

/* What was written since capture_begin (malloc'd). */
static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    long n = ftell(capture_file);
    char *buf = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(capture_file);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, capture_file) : 0;
    buf[got] = 0;
    fclose(capture_file);
    return buf;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_text_lines(void)
{
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
    capture_begin();
    log_info("hello %d", 42);
    log_debug("not shown");
    struct log_field f[] = {
        {.key = "a", .type = LOG_FIELD_STR, .str = "plain"},
        {.key = "b", .type = LOG_FIELD_STR, .str = "two words"},
        {.key = "c", .type = LOG_FIELD_STR, .str = NULL},
        {.key = "d", .type = LOG_FIELD_INT, .i = -7},
        {.key = "e", .type = LOG_FIELD_NUM, .num = 1.5},
        {.key = "f", .type = LOG_FIELD_NUM, .num = NAN},
        {.key = "g", .type = LOG_FIELD_BOOL, .i = 1},
        {.key = "h", .type = LOG_FIELD_STR, .str = "line\nbreak\"q"},
    };
    log_fields(LOG_LEVEL_WARN, "event", f, 8);
    char *out = capture_end();
    CHECK_MSG(count_lines(out) == 2, "%s", out);
    CHECK(strstr(out, " hearth info: hello 42\n") != NULL);
    CHECK(strstr(out, "not shown") == NULL);
    CHECK_MSG(strstr(out, " hearth warn: event a=plain b=\"two words\" c=- d=-7 e=1.500 f=- g=true "
                          "h=\"line\\nbreak\\\"q\"\n") != NULL, "%s", out);
    free(out);
}

/* Every line of s parses as a JSON object; returns them as an array (new reference). */
static json_t *parse_lines(const char *s)
{
    json_t *arr = json_array();
    const char *p = s;
    while (*p) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            CHECK_MSG(0, "line without a newline: %s", p);
            break;
        }
        json_error_t je;
        json_t *o = json_loadb(p, (size_t)(nl - p), 0, &je);
        CHECK_MSG(o && json_is_object(o), "not a JSON object: %.*s (%s)", (int)(nl - p), p, je.text);
        if (o)
            json_array_append_new(arr, o);
        p = nl + 1;
    }
    return arr;
}

static void test_json_lines(void)
{
    log_set_format(LOG_FORMAT_JSON);
    log_set_level(LOG_LEVEL_DEBUG);
    capture_begin();
    log_debug("quote \" backslash \\ tab \t ctl \x01 bad \xff\xfe utf8 \xc3\xa9 cut \xe2\x82");
    struct log_field f[] = {
        {.key = "s", .type = LOG_FIELD_STR, .str = "x\ny"},
        {.key = "n", .type = LOG_FIELD_STR, .str = NULL},
        {.key = "i", .type = LOG_FIELD_INT, .i = 123456789012LL},
        {.key = "num", .type = LOG_FIELD_NUM, .num = 0.25},
        {.key = "nan", .type = LOG_FIELD_NUM, .num = NAN},
        {.key = "b", .type = LOG_FIELD_BOOL, .i = 0},
    };
    log_fields(LOG_LEVEL_INFO, "event", f, 6);
    char *out = capture_end();
    json_t *arr = parse_lines(out);
    CHECK_MSG(json_array_size(arr) == 2, "%s", out);
    json_t *a = json_array_get(arr, 0), *b = json_array_get(arr, 1);
    CHECK(a && !strcmp(json_string_value(json_object_get(a, "level")), "debug"));
    const char *msg = a ? json_string_value(json_object_get(a, "msg")) : NULL;
    CHECK_MSG(msg && !strcmp(msg, "quote \" backslash \\ tab \t ctl \x01 bad \xef\xbf\xbd\xef\xbf\xbd utf8 \xc3\xa9 "
                                  "cut \xef\xbf\xbd\xef\xbf\xbd"), "msg '%s'", msg ? msg : "(none)");
    const char *t = a ? json_string_value(json_object_get(a, "time")) : NULL;
    CHECK_MSG(t && strlen(t) == 24 && t[10] == 'T' && t[23] == 'Z', "time '%s'", t ? t : "(none)");
    CHECK(b && !strcmp(json_string_value(json_object_get(b, "msg")), "event"));
    CHECK(b && !strcmp(json_string_value(json_object_get(b, "s")), "x\ny"));
    CHECK(b && json_is_null(json_object_get(b, "n")));
    CHECK(b && json_integer_value(json_object_get(b, "i")) == 123456789012LL);
    CHECK(b && json_real_value(json_object_get(b, "num")) == 0.25);
    CHECK(b && json_is_null(json_object_get(b, "nan")));
    CHECK(b && json_is_false(json_object_get(b, "b")));
    json_decref(arr);
    free(out);
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
}

static void test_access_line(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(5555)};
    inet_pton(AF_INET, "127.0.0.9", &sin.sin_addr);
    log_set_format(LOG_FORMAT_JSON);
    log_set_level(LOG_LEVEL_INFO);
    capture_begin();
    struct access_log_request r;
    access_log_begin(&r, "POST", "/v1/chat/completions", (const struct sockaddr *)&sin);
    access_log_add_forwarded(&r, "10.0.0.1");
    access_log_add_forwarded(&r, "");
    access_log_add_forwarded(&r, "10.0.0.2, 10.0.0.3");
    r.usage = (struct access_log_usage){.set = true, .prompt_tokens = 120, .cached_tokens = 96,
                                        .generated_tokens = 8, .t_first_token = r.t_start + 0.5};
    access_log_end(&r, 200, true);
    /* not a generation; a path a client filled with junk, longer than the cap */
    char path[600];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[3] = '\n';
    path[sizeof path - 1] = 0;
    access_log_begin(&r, "GET", path, NULL);
    access_log_end(&r, 404, false);
    /* a probe that succeeds goes to debug (not shown at info); a failing one does not */
    access_log_begin(&r, "GET", "/health", NULL);
    access_log_end(&r, 200, true);
    access_log_begin(&r, "GET", "/health", NULL);
    access_log_end(&r, 503, true);
    char *out = capture_end();
    json_t *arr = parse_lines(out);
    CHECK_MSG(json_array_size(arr) == 3, "%s", out);
    json_t *a = json_array_get(arr, 0), *b = json_array_get(arr, 1), *c = json_array_get(arr, 2);
    if (a && b && c) {
        CHECK(!strcmp(json_string_value(json_object_get(a, "msg")), "access"));
        CHECK(!strcmp(json_string_value(json_object_get(a, "method")), "POST"));
        CHECK(!strcmp(json_string_value(json_object_get(a, "path")), "/v1/chat/completions"));
        CHECK(json_integer_value(json_object_get(a, "status")) == 200);
        CHECK(json_integer_value(json_object_get(a, "prompt_tokens")) == 120);
        CHECK(json_integer_value(json_object_get(a, "cached_tokens")) == 96);
        CHECK(json_integer_value(json_object_get(a, "generated_tokens")) == 8);
        CHECK(fabs(json_real_value(json_object_get(a, "ttft_ms")) - 500.0) < 0.01);
        CHECK(json_real_value(json_object_get(a, "duration_ms")) >= 0);
        CHECK(!strcmp(json_string_value(json_object_get(a, "client")), "127.0.0.9"));
        CHECK(!strcmp(json_string_value(json_object_get(a, "forwarded_for")), "10.0.0.1, 10.0.0.2, 10.0.0.3"));
        CHECK(json_is_true(json_object_get(a, "completed")));
        const char *p = json_string_value(json_object_get(b, "path"));
        CHECK(p && strlen(p) == ACCESS_LOG_MAX_PATH && p[3] == '\n');
        CHECK(json_is_null(json_object_get(b, "prompt_tokens")) && json_is_null(json_object_get(b, "ttft_ms")));
        CHECK(json_is_null(json_object_get(b, "forwarded_for")) && json_is_false(json_object_get(b, "completed")));
        CHECK(!strcmp(json_string_value(json_object_get(b, "client")), "-"));
        CHECK(json_integer_value(json_object_get(c, "status")) == 503);
    }
    json_decref(arr);
    free(out);
    log_set_format(LOG_FORMAT_TEXT);
}

/* A request that ended early: cached unknown, no first token. */
static void test_access_line_text_unfinished(void)
{
    log_set_format(LOG_FORMAT_TEXT);
    log_set_level(LOG_LEVEL_INFO);
    capture_begin();
    struct access_log_request r;
    access_log_begin(&r, "POST", "/v1/completions", NULL);
    r.usage = (struct access_log_usage){.set = true, .prompt_tokens = 5, .cached_tokens = -1};
    access_log_end(&r, 200, false);
    char *out = capture_end();
    CHECK_MSG(strstr(out, " hearth info: access method=POST path=/v1/completions status=200 prompt_tokens=5 "
                          "cached_tokens=- generated_tokens=0 ttft_ms=- duration_ms=") != NULL, "%s", out);
    CHECK_MSG(strstr(out, " client=- forwarded_for=- completed=false\n") != NULL, "%s", out);
    free(out);
}

int main(void)
{
    TEST_RUN(test_text_lines);
    TEST_RUN(test_json_lines);
    TEST_RUN(test_access_line);
    TEST_RUN(test_access_line_text_unfinished);
    TEST_END();
}
