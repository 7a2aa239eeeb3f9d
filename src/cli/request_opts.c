/* Request options shared by generate, chat and bench. */
#include "cli/request_opts.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "base/fileio.h"
#include "base/status.h"
#include "cli/args.h"
#include "cli/engine_opts.h"

const char request_opts_help[] =
    "sampling options (unset ones take the checkpoint's generation_config.json defaults):\n"
    "  -n N  --max-tokens N  --temperature T  --top-p P  --top-k K  --min-p P  --seed S\n"
    "  --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
    "  --stop TEXT (repeatable)  --stop-token-id ID (repeatable)  --ignore-eos  --logprobs N\n"
    "  --cache-salt S\n"
    "structured output (one of):\n"
    "  --json-object  --json-schema JSON  --json-schema-file PATH  --grammar GBNF  --grammar-file PATH\n"
    "  --regex RE  --choice '[\"a\",\"b\"]'  (with --after-think: the constraint starts after </think>)\n";

void request_opts_free(struct request_opts *o)
{
    free(o->grammar_buf);
    o->grammar_buf = NULL;
}

/* One structured-output option: kind and text (or a file to read it from). */
static int request_opts_grammar(struct request_opts *o, enum hearth_grammar_kind kind, const char *v, bool file)
{
    if (!v)
        return -1;
    if (o->p.grammar_kind != HEARTH_GRAMMAR_NONE) {
        fprintf(stderr, "hearth: give one structured-output option (--json-object, --json-schema, --grammar, "
                        "--regex, --choice)\n");
        return -1;
    }
    o->p.grammar_kind = kind;
    o->p.grammar = v;
    if (file) {
        char err[HR_ERRLEN];
        size_t len;
        if (fileio_read_all(v, 1 << 20, &o->grammar_buf, &len, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth: %s\n", err);
            return -1;
        }
        o->p.grammar = o->grammar_buf;
    }
    return 1;
}

void request_opts_default(struct request_opts *o)
{
    memset(o, 0, sizeof *o);
    hearth_request_params_default(&o->p);
    o->p.max_tokens = 128;
    o->p.skip_special_tokens = true;
    o->p.stop = o->stop;
    o->p.stop_token_ids = o->stop_ids;
}

static int request_opts_float(const char *flag, const char *v, double lo, double hi, float *out, bool *has)
{
    double x;
    if (!v || !args_double(flag, v, lo, hi, &x))
        return -1;
    *out = (float)x;
    if (has)
        *has = true;
    return 1;
}

int request_opts_parse(struct request_opts *o, int argc, char **argv, int *i)
{
    struct hearth_request_params *p = &o->p;
    const char *a = argv[*i];
    long x;
    if (!strcmp(a, "-n") || args_is(a, "--n")) {
        const char *v = args_value(argc, argv, i);
        if (!v || !args_int("-n", v, 1, 1024, &x))
            return -1;
        p->n = (int)x;
        return 1;
    }
    if (args_is(a, "--max-tokens")) {
        const char *v = args_value(argc, argv, i);
        if (!v || !args_int("--max-tokens", v, 0, 1 << 24, &x))
            return -1;
        p->max_tokens = (int)x;
        return 1;
    }
    if (args_is(a, "--top-k")) {
        const char *v = args_value(argc, argv, i);
        if (!v || !args_int("--top-k", v, 0, 1 << 24, &x))
            return -1;
        p->top_k = (int)x;
        p->has_top_k = true;
        return 1;
    }
    if (args_is(a, "--logprobs")) {
        const char *v = args_value(argc, argv, i);
        if (!v || !args_int("--logprobs", v, 0, HEARTH_MAX_TOP_LOGPROBS, &x))
            return -1;
        p->logprobs = true;
        p->top_logprobs = (int)x;
        return 1;
    }
    if (args_is(a, "--seed")) {
        const char *v = args_value(argc, argv, i);
        double d;
        if (!v || !args_double("--seed", v, 0, 18446744073709551615.0, &d))
            return -1;
        p->seed = (uint64_t)d;
        p->has_seed = true;
        return 1;
    }
    if (args_is(a, "--temperature"))
        return request_opts_float("--temperature", args_value(argc, argv, i), 0, 100, &p->temperature,
                                  &p->has_temperature);
    if (args_is(a, "--top-p"))
        return request_opts_float("--top-p", args_value(argc, argv, i), 0, 1, &p->top_p, &p->has_top_p);
    if (args_is(a, "--min-p"))
        return request_opts_float("--min-p", args_value(argc, argv, i), 0, 1, &p->min_p, NULL);
    if (args_is(a, "--repetition-penalty"))
        return request_opts_float("--repetition-penalty", args_value(argc, argv, i), 0, 100,
                                  &p->repetition_penalty, NULL);
    if (args_is(a, "--presence-penalty"))
        return request_opts_float("--presence-penalty", args_value(argc, argv, i), -2, 2, &p->presence_penalty,
                                  NULL);
    if (args_is(a, "--frequency-penalty"))
        return request_opts_float("--frequency-penalty", args_value(argc, argv, i), -2, 2, &p->frequency_penalty,
                                  NULL);
    if (args_is(a, "--stop")) {
        const char *v = args_value(argc, argv, i);
        if (!v)
            return -1;
        if (p->n_stop == REQUEST_OPTS_MAX_STOP) {
            fprintf(stderr, "hearth: at most %d --stop strings\n", REQUEST_OPTS_MAX_STOP);
            return -1;
        }
        o->stop[p->n_stop++] = v;
        return 1;
    }
    if (args_is(a, "--stop-token-id")) {
        const char *v = args_value(argc, argv, i);
        if (!v || !args_int("--stop-token-id", v, 0, 1 << 30, &x))
            return -1;
        if (p->n_stop_token_ids == REQUEST_OPTS_MAX_STOP) {
            fprintf(stderr, "hearth: at most %d --stop-token-id\n", REQUEST_OPTS_MAX_STOP);
            return -1;
        }
        o->stop_ids[p->n_stop_token_ids++] = (int32_t)x;
        return 1;
    }
    if (!strcmp(a, "--ignore-eos")) {
        p->ignore_eos = true;
        return 1;
    }
    if (!strcmp(a, "--json-object"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_JSON_OBJECT, "", false);
    if (args_is(a, "--json-schema"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_JSON_SCHEMA, args_value(argc, argv, i), false);
    if (args_is(a, "--json-schema-file"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_JSON_SCHEMA, args_value(argc, argv, i), true);
    if (args_is(a, "--grammar"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_GBNF, args_value(argc, argv, i), false);
    if (args_is(a, "--grammar-file"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_GBNF, args_value(argc, argv, i), true);
    if (args_is(a, "--regex"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_REGEX, args_value(argc, argv, i), false);
    if (args_is(a, "--choice"))
        return request_opts_grammar(o, HEARTH_GRAMMAR_CHOICE, args_value(argc, argv, i), false);
    if (!strcmp(a, "--after-think")) {
        p->grammar_after_think = true;
        return 1;
    }
    if (args_is(a, "--cache-salt"))
        return (p->cache_salt = args_value(argc, argv, i)) ? 1 : -1;
    return 0;
}

int request_opts_parse_with_engine(struct hearth_engine_params *ep, struct request_opts *o, int argc, char **argv,
                                   int *i)
{
    int r = engine_opts_parse(ep, argc, argv, i);
    return r != 0 ? r : request_opts_parse(o, argc, argv, i);
}
