/* hearth bench grammar: the cost of constrained decoding.
 *
 * Masks: for JSON mode and three schemas of increasing size, the grammar is compiled against
 * the real vocabulary (tokenizer.json), then token sequences are drawn through the masks (a
 * uniform choice among the allowed tokens, a fixed seed; a new sentence when one completes)
 * and each step's grammar_mask_apply is timed: the mask of the state (cache or computation)
 * and its application to a logits row of the model's width. Reported: p50/p99/max per token,
 * the mask cache's hit rate, compile time.
 *
 * End to end (with --model): the same prompt decoded with and without a constraint (a JSON
 * array of at least 64 short strings, so that it runs max_tokens like the unconstrained one;
 * ignore_eos), time per output token after the first, median of the repeats; the slowdown is
 * constrained / unconstrained - 1. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_util.h"
#include "cli/engine_opts.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

#define BG_VOCAB 151936 /* the Qwen3 checkpoints' vocabulary (embedding rows) */

static const char *bg_schema_small =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"]}";
static const char *bg_schema_medium =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"title\":{\"type\":"
    "\"string\",\"maxLength\":40},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},"
    "\"maxItems\":5},\"score\":{\"type\":\"number\"},\"status\":{\"enum\":[\"draft\",\"review\",\"published\"]},"
    "\"author\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"email\":{\"type\":\"string\","
    "\"format\":\"email\"}},\"required\":[\"name\"]}},\"required\":[\"id\",\"title\",\"tags\",\"status\",\"author\"]}";
static const char *bg_schema_large =
    "{\"$defs\":{\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":"
    "\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"},\"country\":{\"enum\":[\"US\",\"DE\",\"FR\","
    "\"JP\",\"BR\"]}},\"required\":[\"street\",\"city\",\"country\"]},\"item\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},\"name\":{\"type\":\"string\"},\"qty\":{\"type\":"
    "\"integer\",\"minimum\":1,\"maximum\":1000},\"price\":{\"type\":\"number\"},\"options\":{\"type\":\"array\","
    "\"items\":{\"type\":\"object\",\"properties\":{\"key\":{\"type\":\"string\"},\"value\":{\"anyOf\":[{\"type\":"
    "\"string\"},{\"type\":\"number\"},{\"type\":\"boolean\"}]}},\"required\":[\"key\",\"value\"]}}},\"required\":["
    "\"sku\",\"qty\",\"price\"]}},\"type\":\"object\",\"properties\":{\"order_id\":{\"type\":\"string\",\"format\":"
    "\"uuid\"},\"created\":{\"type\":\"string\",\"format\":\"date-time\"},\"customer\":{\"type\":\"object\","
    "\"properties\":{\"name\":{\"type\":\"string\"},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"phone\":{"
    "\"type\":\"string\"},\"billing\":{\"$ref\":\"#/$defs/address\"},\"shipping\":{\"$ref\":\"#/$defs/address\"}},"
    "\"required\":[\"name\",\"email\",\"billing\"]},\"items\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/item\"},"
    "\"minItems\":1},\"notes\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},\"priority\":{\"enum\":[\"low\","
    "\"normal\",\"high\"]},\"paid\":{\"type\":\"boolean\"}},\"required\":[\"order_id\",\"created\",\"customer\","
    "\"items\",\"paid\"]}";

/* End to end: JSON that cannot be complete before max_tokens (an array of at least 64 strings). */
static const char *bg_schema_e2e =
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":8},\"minItems\":64}";

struct bg_result {
    const char *name;
    double compile_s;
    int positions;
    double mb;
    int n;
    double p50_us, p99_us, max_us, mean_us;
    double hit_rate;
    int sentences;
};

static uint64_t bg_rng = 0x9E3779B97F4A7C15ull;
static uint64_t bg_next(void)
{
    bg_rng ^= bg_rng << 13;
    bg_rng ^= bg_rng >> 7;
    bg_rng ^= bg_rng << 17;
    return bg_rng;
}

static int bg_masks(struct grammar_cache *gc, const struct tokenizer *tk, const char *name,
                    enum hearth_grammar_kind kind, const char *text, int n_tokens, struct bg_result *r)
{
    char err[HR_ERRLEN];
    memset(r, 0, sizeof *r);
    r->name = name;
    struct grammar_compiled *c = NULL;
    double t0 = bench_now();
    if (grammar_cache_get(gc, kind, text, strlen(text), &c, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench grammar: %s: %s\n", name, err);
        return 1;
    }
    r->compile_s = bench_now() - t0;
    for (int i = 0; i < c->g.n_elems; i++)
        r->positions += c->g.elems[i].kind == GRAMMAR_ELEM_BYTES;
    r->mb = (double)c->bytes / 1048576.0;
    float *logits = malloc(BG_VOCAB * sizeof *logits);
    double *t = malloc((size_t)n_tokens * sizeof *t);
    int32_t *allowed = malloc(BG_VOCAB * sizeof *allowed);
    struct grammar_seq s;
    int32_t eos = tokenizer_token_id(tk, "<|im_end|>");
    bool live = false;
    int64_t masks0 = c->stats.masks, hits0 = c->stats.cache_hits;
    for (int i = 0; i < n_tokens; i++) {
        if (!live) {
            if (grammar_seq_init(&s, c, -1, err, sizeof err) != HR_OK)
                break;
            live = true;
        }
        for (int k = 0; k < BG_VOCAB; k++)
            logits[k] = 0.0f;
        double a = bench_now();
        enum hr_status st = grammar_mask_apply(&s, logits, BG_VOCAB, &eos, 1, err, sizeof err);
        t[r->n++] = (bench_now() - a) * 1e6;
        int na = 0;
        for (int k = 0; k < BG_VOCAB && st == HR_OK; k++)
            if (logits[k] == 0.0f)
                allowed[na++] = k;
        int32_t pick = na ? allowed[bg_next() % (uint64_t)na] : eos;
        if (st != HR_OK || pick == eos || grammar_seq_advance(&s, pick, false, err, sizeof err) != HR_OK) {
            r->sentences += pick == eos;
            grammar_seq_free(&s);
            live = false;
        }
    }
    if (live)
        grammar_seq_free(&s);
    double sum = 0;
    for (int i = 0; i < r->n; i++)
        sum += t[i];
    r->mean_us = r->n ? sum / r->n : 0;
    r->max_us = 0;
    for (int i = 0; i < r->n; i++)
        r->max_us = t[i] > r->max_us ? t[i] : r->max_us;
    r->p50_us = bench_percentile(t, r->n, 0.5);
    r->p99_us = bench_percentile(t, r->n, 0.99);
    int64_t dm = c->stats.masks - masks0;
    r->hit_rate = dm ? (double)(c->stats.cache_hits - hits0) / (double)dm : 0;
    grammar_compiled_unref(c);
    free(logits);
    free(t);
    free(allowed);
    return 0;
}

/* Seconds per output token after the first, one request. */
static double bg_decode(struct hearth_engine *e, enum hearth_grammar_kind kind, const char *text, int max_tokens,
                        int *n_out)
{
    struct hearth_request_params p;
    hearth_request_params_default(&p);
    p.prompt = "Write a JSON object describing a city:";
    p.max_tokens = max_tokens;
    p.has_temperature = true;
    p.temperature = 1.0f;
    p.has_seed = true;
    p.seed = 42;
    p.ignore_eos = true;
    p.grammar_kind = kind;
    p.grammar = text;
    char err[HR_ERRLEN];
    struct hearth_request *r = NULL;
    if (hearth_submit(e, &p, &r, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench grammar: %s\n", err);
        return -1;
    }
    struct hearth_event ev;
    double first = 0, last = 0;
    int n = 0;
    while (hearth_request_next_event(r, &ev, -1) == HR_OK && ev.type != HEARTH_EVENT_DONE)
        if (ev.type == HEARTH_EVENT_TOKEN) {
            last = bench_now();
            if (n++ == 0)
                first = last;
        }
    hearth_request_free(r);
    *n_out = n;
    return n > 1 ? (last - first) / (n - 1) : -1;
}

int bench_grammar(int argc, char **argv)
{
    struct hearth_engine_params ep;
    engine_opts_default(&ep);
    const char *tk_path = "tests/.cache/qwen3/tokenizer.json", *out_path = NULL;
    long n_tokens = 2000, e2e_tokens = 32, repeats = 3;
    for (int i = 1; i < argc; i++) {
        int r = engine_opts_parse(&ep, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (args_is(argv[i], "--tokenizer")) {
            if (!(tk_path = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(argv[i], "--tokens")) {
            const char *v = args_value(argc, argv, &i);
            if (!v || !args_int("--tokens", v, 10, 1000000, &n_tokens))
                return 2;
        } else if (args_is(argv[i], "--e2e-tokens")) {
            const char *v = args_value(argc, argv, &i);
            if (!v || !args_int("--e2e-tokens", v, 2, 4096, &e2e_tokens))
                return 2;
        } else if (args_is(argv[i], "--repeats")) {
            const char *v = args_value(argc, argv, &i);
            if (!v || !args_int("--repeats", v, 1, 100, &repeats))
                return 2;
        } else if (args_is(argv[i], "--output-json")) {
            if (!(out_path = args_value(argc, argv, &i)))
                return 2;
        } else {
            fprintf(stderr, "usage: hearth bench grammar [--tokenizer tokenizer.json] [--tokens N] [--model DIR "
                            "[--e2e-tokens N] [--repeats N]] [--output-json PATH]\n%s", engine_opts_help);
            return 2;
        }
    }
    char err[HR_ERRLEN];
    struct tokenizer tk;
    if (tokenizer_init(&tk, tk_path, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench grammar: %s\n", err);
        return 1;
    }
    struct grammar_cache gc;
    grammar_cache_init(&gc, &tk, BG_VOCAB, 0, 0);
    struct {
        const char *name;
        enum hearth_grammar_kind kind;
        const char *text;
    } cases[] = {
        {"json_object", HEARTH_GRAMMAR_JSON_OBJECT, ""},
        {"schema_small", HEARTH_GRAMMAR_JSON_SCHEMA, bg_schema_small},
        {"schema_medium", HEARTH_GRAMMAR_JSON_SCHEMA, bg_schema_medium},
        {"schema_large", HEARTH_GRAMMAR_JSON_SCHEMA, bg_schema_large},
    };
    json_t *out = json_object(), *arr = json_array();
    int rc = 0;
    double vocab_s = bench_now();
    grammar_cache_vocab(&gc, err, sizeof err);
    vocab_s = bench_now() - vocab_s;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0] && rc == 0; k++) {
        struct bg_result r;
        bg_rng = 0x9E3779B97F4A7C15ull + k;
        rc = bg_masks(&gc, &tk, cases[k].name, cases[k].kind, cases[k].text, (int)n_tokens, &r);
        if (rc)
            break;
        json_array_append_new(arr, json_pack("{s:s, s:f, s:i, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:i}", "grammar",
                                             r.name, "compile_s", r.compile_s, "positions", r.positions, "mib", r.mb,
                                             "tokens", r.n, "mask_p50_us", r.p50_us, "mask_p99_us", r.p99_us,
                                             "mask_max_us", r.max_us, "mask_mean_us", r.mean_us, "cache_hit_rate",
                                             r.hit_rate, "sentences", r.sentences));
    }
    json_object_set_new(out, "vocab_tokens", json_integer(gc.vocab.n_tok));
    json_object_set_new(out, "vocab_build_s", json_real(vocab_s));
    json_object_set_new(out, "masks", arr);
    json_object_set_new(out, "target", json_pack("{s:i, s:i, s:i}", "mask_p50_us", 50, "mask_p99_us", 500,
                                                 "e2e_slowdown_pct", 5));
    if (rc == 0 && ep.model_dir) {
        struct hearth_engine *e = NULL;
        if (hearth_engine_init(&e, &ep, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth bench grammar: %s\n", err);
            rc = 1;
        } else {
            double *plain = calloc((size_t)repeats, sizeof *plain), *cons = calloc((size_t)repeats, sizeof *cons);
            int n_plain = 0, n_cons = 0;
            bg_decode(e, HEARTH_GRAMMAR_JSON_SCHEMA, bg_schema_e2e, 4, &n_cons); /* compiles, warms up */
            for (long i = 0; i < repeats; i++) {
                plain[i] = bg_decode(e, HEARTH_GRAMMAR_NONE, NULL, (int)e2e_tokens, &n_plain);
                cons[i] = bg_decode(e, HEARTH_GRAMMAR_JSON_SCHEMA, bg_schema_e2e, (int)e2e_tokens, &n_cons);
            }
            double mp = bench_median(plain, (int)repeats), mc = bench_median(cons, (int)repeats);
            json_object_set_new(out, "e2e", json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f}", "model", ep.model_dir,
                                                      "threads", ep.n_threads, "tokens_constrained", n_cons,
                                                      "tokens_plain", n_plain, "plain_ms_per_token", mp * 1e3,
                                                      "constrained_ms_per_token", mc * 1e3, "slowdown_pct",
                                                      (mc / mp - 1.0) * 100.0));
            free(plain);
            free(cons);
            hearth_engine_free(e);
        }
    }
    char *s = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) {
        printf("%s\n", s);
        if (out_path) {
            FILE *f = fopen(out_path, "w");
            if (f) {
                fprintf(f, "%s\n", s);
                fclose(f);
            }
        }
    }
    free(s);
    json_decref(out);
    grammar_cache_free(&gc);
    tokenizer_free(&tk);
    return rc;
}
