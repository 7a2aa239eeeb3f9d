/* hearth generate: one request through the engine, streamed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/request_opts.h"

#define GENERATE_MAX_IDS 65536

static void generate_usage(void)
{
    fprintf(stderr, "usage: hearth generate --model DIR (--prompt TEXT | --prompt-ids ID,ID,...) [options]\n"
                    "Streams the completion to stdout (n > 1: each sample after the other); a summary\n"
                    "goes to stderr.\n\n%s\n%s",
            request_opts_help, engine_opts_help);
}

static double generate_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* "1,2,3" → ids; false on junk. */
static bool generate_parse_ids(const char *s, int32_t *ids, int cap, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 30 || *n == cap)
            return false;
        ids[(*n)++] = (int32_t)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return *n > 0;
}

/* Writes sample text to stdout as it comes (n == 1), or keeps it per sample. */
struct generate_out {
    int n;
    char **text;   /* [n] */
    size_t *len;   /* [n] */
    bool ids_only; /* no tokenizer: print ids */
    struct hearth_engine *e;
    FILE **lp;     /* [n] with --logprobs: each sample's logprob lines, printed at the end */
    char **lp_buf; /* [n] */
    size_t *lp_len;
};

/* A token as text for the logprob lines: its bytes, with control and quote bytes escaped. */
static void generate_put_token(FILE *f, struct hearth_engine *e, int32_t token)
{
    const char *b = NULL;
    size_t n = 0;
    char err[HR_ERRLEN];
    if (hearth_token_bytes(e, token, &b, &n, err, sizeof err) != HR_OK) {
        fprintf(f, "#%d", token);
        return;
    }
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* One line per generated token: its index, the token, its logprob, then the alternatives. */
static void generate_logprob(struct generate_out *o, const struct hearth_event *ev)
{
    FILE *f = o->lp[ev->index];
    if (!f)
        return;
    fprintf(f, "%d\t", ev->token);
    generate_put_token(f, o->e, ev->token);
    fprintf(f, "\t%.6f", (double)ev->logprob);
    for (int k = 0; k < ev->n_top; k++) {
        fprintf(f, k ? ", " : "\t");
        generate_put_token(f, o->e, ev->top[k].token);
        fprintf(f, " %.6f", (double)ev->top[k].logprob);
    }
    fputc('\n', f);
}

static void generate_take(struct generate_out *o, const struct hearth_event *ev)
{
    if (o->n == 1) {
        if (o->ids_only && ev->type == HEARTH_EVENT_TOKEN)
            printf("%d ", ev->token);
        else
            fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        return;
    }
    char buf[32];
    const char *t = ev->text;
    size_t n = ev->text_len;
    if (o->ids_only && ev->type == HEARTH_EVENT_TOKEN) {
        n = (size_t)snprintf(buf, sizeof buf, "%d ", ev->token);
        t = buf;
    }
    char *nt = realloc(o->text[ev->index], o->len[ev->index] + n + 1);
    if (!nt)
        return;
    memcpy(nt + o->len[ev->index], t, n);
    o->len[ev->index] += n;
    nt[o->len[ev->index]] = 0;
    o->text[ev->index] = nt;
}

static int generate_run(int argc, char **argv, struct request_opts *rop)
{
    struct hearth_engine_params ep;
#define ro (*rop)
    engine_opts_default(&ep);
    static int32_t ids[GENERATE_MAX_IDS];
    for (int i = 1; i < argc; i++) {
        int r = request_opts_parse_with_engine(&ep, &ro, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            generate_usage();
            return 0;
        } else if (args_is(argv[i], "--prompt")) {
            if (!(ro.p.prompt = args_value(argc, argv, &i)))
                return 2;
        } else if (args_is(argv[i], "--prompt-ids")) {
            const char *v = args_value(argc, argv, &i);
            if (!v || !generate_parse_ids(v, ids, GENERATE_MAX_IDS, &ro.p.n_prompt_ids)) {
                fprintf(stderr, "hearth generate: --prompt-ids takes comma-separated token ids\n");
                return 2;
            }
            ro.p.prompt_ids = ids;
        } else {
            fprintf(stderr, "hearth generate: unknown option '%s'\n", argv[i]);
            generate_usage();
            return 2;
        }
    }
    if (!ep.model_dir || (!ro.p.prompt && !ro.p.prompt_ids)) {
        fprintf(stderr, "hearth generate: %s is required\n\n",
                !ep.model_dir ? "--model DIR" : "--prompt TEXT (or --prompt-ids ID,ID,...)");
        generate_usage();
        return 2;
    }
    char err[HR_ERRLEN];
    struct hearth_engine *e = NULL;
    if (hearth_engine_init(&e, &ep, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth generate: %s\n", err);
        return 1;
    }
    struct hearth_model_info info;
    hearth_engine_model_info(e, &info);
    struct generate_out out = {.n = ro.p.n, .ids_only = !info.has_tokenizer, .e = e};
    out.text = calloc((size_t)ro.p.n, sizeof *out.text);
    out.len = calloc((size_t)ro.p.n, sizeof *out.len);
    if (ro.p.logprobs) {
        out.lp = calloc((size_t)ro.p.n, sizeof *out.lp);
        out.lp_buf = calloc((size_t)ro.p.n, sizeof *out.lp_buf);
        out.lp_len = calloc((size_t)ro.p.n, sizeof *out.lp_len);
        for (int k = 0; out.lp && out.lp_buf && out.lp_len && k < ro.p.n; k++)
            out.lp[k] = open_memstream(&out.lp_buf[k], &out.lp_len[k]);
    }
    struct hearth_request *r = NULL;
    int rc = 1;
    double t0 = generate_now(), t_first = 0;
    if (!out.text || !out.len || hearth_submit(e, &ro.p, &r, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth generate: %s\n", out.text && out.len ? err : "out of memory");
        goto done;
    }
    struct hearth_event ev;
    while (hearth_request_next_event(r, &ev, -1) == HR_OK) {
        if (ev.type == HEARTH_EVENT_TOKEN && !t_first)
            t_first = generate_now();
        if (ev.type != HEARTH_EVENT_DONE) {
            generate_take(&out, &ev);
            if (out.lp && ev.type == HEARTH_EVENT_TOKEN && ev.index >= 0 && ev.index < out.n)
                generate_logprob(&out, &ev);
            continue;
        }
        double t1 = generate_now();
        if (out.n > 1)
            for (int k = 0; k < out.n; k++)
                printf("--- sample %d\n%s\n", k, out.text[k] ? out.text[k] : "");
        else
            printf("\n");
        for (int k = 0; out.lp && k < out.n; k++) {
            if (!out.lp[k])
                continue;
            fclose(out.lp[k]);
            out.lp[k] = NULL;
            if (out.n > 1)
                printf("--- logprobs of sample %d", k);
            else
                printf("--- logprobs");
            printf(" (token id, token, logprob, then the top %d)\n", ro.p.top_logprobs);
            fwrite(out.lp_buf[k], 1, out.lp_len[k], stdout);
        }
        fprintf(stderr,
                "[%s] prompt %d tokens (%d cached), %d generated, seed %llu, first token %.3f s, %.1f tokens/s\n",
                hearth_finish_reason_str(ev.finish_reason), ev.prompt_tokens, ev.cached_tokens,
                ev.completion_tokens, (unsigned long long)ev.seed, t_first ? t_first - t0 : 0.0,
                ev.completion_tokens > 1 && t_first ? (ev.completion_tokens - 1) / (t1 - t_first) : 0.0);
        if (ev.finish_reason == HEARTH_FINISH_ERROR)
            fprintf(stderr, "hearth generate: %s\n", ev.message);
        rc = ev.finish_reason == HEARTH_FINISH_ERROR ? 1 : 0;
        break;
    }
done:
    hearth_request_free(r);
    hearth_engine_free(e);
    for (int k = 0; out.text && k < out.n; k++)
        free(out.text[k]);
    free(out.text);
    free(out.len);
    for (int k = 0; out.lp && k < out.n; k++)
        if (out.lp[k])
            fclose(out.lp[k]);
    for (int k = 0; out.lp_buf && k < out.n; k++)
        free(out.lp_buf[k]);
    free(out.lp);
    free(out.lp_buf);
    free(out.lp_len);
    return rc;
#undef ro
}

int cli_generate(int argc, char **argv)
{
    struct request_opts ro;
    request_opts_default(&ro);
    int rc = generate_run(argc, argv, &ro);
    request_opts_free(&ro);
    return rc;
}
