/* libFuzzer target for the chat-template engine (lexer, parser, renderer).
 * Input: a template source, optionally followed by a NUL byte and a JSON context object; without
 * one (or when it does not parse) the template renders with a small chat context. Tight limits
 * keep every input fast; any outcome but a crash, a leak or a broken invariant is fine.
 * Build: clang -fsanitize=fuzzer,address,undefined (see tests/fuzz/build.sh); the corpus
 * tests/fuzz/corpus/template/ is replayed in `make test` by tests/unit/test_fuzz_template_replay.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

static const char FUZZ_TEMPLATE_CONTEXT[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Hi <b>there</b>\\n\\u00e9\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhmm\\n</think>\\n\\nHello!\", \"reasoning_content\": null},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    " \"function\": {\"name\": \"get\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2.5, true, null]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"},"
    "{\"role\": \"user\", \"content\": \"thanks\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"eos_token\": \"<|im_end|>\","
    " \"n\": 3, \"f\": 0.5, \"s\": \"abc\", \"l\": [3, 1, 2], \"d\": {\"b\": 1, \"a\": 2}}";

/* Parses and renders one input; the status tells what happened (the replay test checks it). */
enum hr_status fuzz_template_run(const uint8_t *data, size_t size);

enum hr_status fuzz_template_run(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    struct chat_template ct;
    char err[HR_ERRLEN] = "";
    enum hr_status st = chat_template_init_n(&ct, (const char *)data, tlen, err, sizeof err);
    if (st != HR_OK) {
        if (!err[0] || ct.prog)
            abort(); /* a failure always explains itself and leaves nothing behind */
        return st;
    }
    ct.limits.max_output = 1 << 20;
    ct.limits.max_memory = 64 << 20;
    ct.limits.max_steps = 500000;
    ct.limits.max_loop_iterations = 20000;
    json_t *ctx = NULL;
    if (nul) {
        json_error_t je;
        ctx = json_loadb((const char *)nul + 1, size - tlen - 1, 0, &je);
        if (ctx && !json_is_object(ctx)) {
            json_decref(ctx);
            ctx = NULL;
        }
    }
    if (!ctx)
        ctx = json_loads(FUZZ_TEMPLATE_CONTEXT, 0, NULL);
    char *out = NULL;
    size_t len = 12345;
    err[0] = 0;
    st = chat_template_render(&ct, ctx, &out, &len, err, sizeof err);
    if (st == HR_OK && (!out || out[len] != 0 || len > ct.limits.max_output))
        abort();
    if (st != HR_OK && (out || len != 0 || !err[0]))
        abort();
    free(out);
    json_decref(ctx);
    chat_template_free(&ct);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_template_run(data, size);
    return 0;
}
