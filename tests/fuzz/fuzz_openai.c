/* libFuzzer target: OpenAI request parsing and validation (both endpoints) over arbitrary
 * bytes.  Built by tests/fuzz/build.sh; replayed over tests/fuzz/corpus/openai by
 * tests/unit/test_openai.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/openai.h"

static const char *const fuzz_openai_models[] = {"m", "/models/m"};

/* The promises a successful parse makes to the rest of the server. */
static void fuzz_openai_check(const struct openai_request *rq, const struct openai_limits *lim)
{
    const struct hearth_request_params *p = &rq->params;
    if (!rq->root || !rq->model || p->n < 1 || p->n > lim->max_n || p->top_logprobs < 0 ||
        p->top_logprobs > HEARTH_MAX_TOP_LOGPROBS || (rq->has_max_tokens && rq->max_tokens < 0) ||
        p->n_stop < 0 || p->n_stop > OPENAI_MAX_STOP || (p->n_stop && !p->stop) || p->n_logit_bias < 0 ||
        (p->has_temperature && !(p->temperature >= 0 && p->temperature <= 2)) ||
        (p->has_top_p && !(p->top_p > 0 && p->top_p <= 1)) || p->top_k < 0 || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repetition_penalty > 0) || (rq->include_usage && !rq->stream))
        __builtin_trap();
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            __builtin_trap();
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= lim->vocab_size ||
            !(p->logit_bias[i].bias >= -100 && p->logit_bias[i].bias <= 100))
            __builtin_trap();
    if (rq->endpoint == OPENAI_ENDPOINT_COMPLETIONS) {
        if (rq->n_prompts < 1 || rq->n_prompts > lim->max_prompts || rq->messages)
            __builtin_trap();
        for (int i = 0; i < rq->n_prompts; i++) {
            const struct openai_prompt *pr = &rq->prompts[i];
            if (pr->text ? (pr->text_len == 0 || strlen(pr->text) > pr->text_len) : pr->n_ids < 1)
                __builtin_trap();
            for (int k = 0; !pr->text && k < pr->n_ids; k++)
                if (pr->ids[k] < 0 || pr->ids[k] >= lim->vocab_size)
                    __builtin_trap();
        }
    } else {
        if (!json_is_array(rq->messages) || json_array_size(rq->messages) == 0 || rq->n_prompts != 0)
            __builtin_trap();
        for (size_t i = 0; i < json_array_size(rq->messages); i++) {
            const char *role = json_string_value(json_object_get(json_array_get(rq->messages, i), "role"));
            if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                          strcmp(role, "tool")))
                __builtin_trap();
        }
    }
}

/* Parses data for both endpoints; HR_OK when either accepts it. */
static enum hr_status fuzz_openai_run(const uint8_t *data, size_t size)
{
    const struct openai_limits lim = {
        .model_names = fuzz_openai_models, .n_model_names = 2, .max_n = 8, .max_prompts = 16, .vocab_size = 1000};
    enum hr_status best = HR_ERR_INVALID;
    for (int ep = 0; ep < 2; ep++) {
        struct openai_request rq;
        char param[128], err[HR_ERRLEN];
        enum hr_status st = openai_request_parse(&rq, (enum openai_endpoint)ep, (const char *)data, size, &lim, param,
                                                 sizeof param, err, sizeof err);
        if (st == HR_OK) {
            fuzz_openai_check(&rq, &lim);
            best = HR_OK;
            int mt = 0;
            openai_check_context(&rq, (int)(size % 5000), 4096, &mt, param, sizeof param, err, sizeof err);
        } else {
            /* a failure leaves nothing behind and always says why */
            if (rq.root || rq.prompts || rq.messages || !err[0] || openai_http_status(st) < 400)
                __builtin_trap();
            json_t *env = openai_error_json(openai_http_status(st), err, param, NULL);
            if (!env)
                __builtin_trap();
            json_decref(env);
        }
        openai_request_free(&rq);
    }
    return best;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_openai_run(data, size);
    return 0;
}
