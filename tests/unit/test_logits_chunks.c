/* Logits in pieces: qwen3_logits (into a buffer, or into the forward's scratch) over
 * any split of a step's logits rows gives the bytes of the one-pass forward (memcmp),
 * for dense and MoE checkpoints under every kernel variant; and the engine, which
 * scores and samples a piece of rows at a time, gives each request the events it
 * gets alone even when a step's rows (and one row's prompt logits) straddle pieces. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine_rig.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "test.h"

#define BS 16
#define N_ROWS 6
#define POOL 64

static const int row_len[N_ROWS] = {21, 7, 9, 3, 1, 30};
static const enum batch_logits row_mode[N_ROWS] = {BATCH_LOGITS_ALL,  BATCH_LOGITS_LAST, BATCH_LOGITS_NONE,
                                                   BATCH_LOGITS_ALL,  BATCH_LOGITS_LAST, BATCH_LOGITS_ALL};

/* Fills b with N_ROWS rows of fresh sequences (context 0, disjoint blocks). */
static int build_batch(struct batch *b, int n_blocks, int vocab, int32_t *tok, int32_t (*tables)[4])
{
    char err[HR_ERRLEN];
    batch_reset(b);
    int next_block = 0;
    for (int r = 0; r < N_ROWS; r++) {
        for (int t = 0; t < row_len[r]; t++)
            tok[r * 32 + t] = (int32_t)((r * 131 + t * 17 + 5) % vocab);
        int nb = (row_len[r] + BS - 1) / BS;
        for (int k = 0; k < nb; k++)
            tables[r][k] = next_block++;
        if (batch_add_row(b, r, tok + r * 32, row_len[r], 0, tables[r], nb, row_mode[r], err, sizeof err) != HR_OK)
            return fprintf(stderr, "  add_row: %s\n", err), 0;
    }
    if (batch_build(b, n_blocks, err, sizeof err) != HR_OK)
        return fprintf(stderr, "  build: %s\n", err), 0;
    return 1;
}

static void check_chunks(const char *fixture, const char *variant, int threads)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/%s", test_data_dir(), fixture);
    struct model m;
    struct backend be;
    struct kv_store kv;
    struct qwen3 q;
    struct batch b;
    memset(&be, 0, sizeof be);
    memset(&kv, 0, sizeof kv);
    memset(&q, 0, sizeof q);
    memset(&b, 0, sizeof b);
    enum hr_status st = model_load(&m, dir, err, sizeof err);
    if (st == HR_OK)
        st = backend_cpu_init(&be, &(struct backend_opts){.n_threads = threads, .kernel = variant}, err, sizeof err);
    if (st == HR_OK)
        st = model_kv_init(&kv, &be, &m.cfg, KV_DTYPE_BF16, BS,
                           (size_t)POOL * BS * model_kv_bytes_per_token(&m.cfg, KV_DTYPE_BF16), err, sizeof err);
    if (st == HR_OK)
        st = qwen3_init(&q, &m, &be, 128, 0, err, sizeof err);
    if (st == HR_OK)
        st = qwen3_reserve_logits(&q, 24, err, sizeof err);
    if (st == HR_OK)
        st = batch_init(&b, BS, N_ROWS, 128, err, sizeof err);
    CHECK_MSG(st == HR_OK, "%s/%s: %s", fixture, variant, err);
    int V = m.cfg.vocab_size;
    int32_t tok[N_ROWS * 32], tables[N_ROWS][4];
    float *ref = NULL, *got = NULL, *piece = NULL;
    if (st != HR_OK || !build_batch(&b, kv.n_blocks, V, tok, tables))
        goto out;
    int n = b.n_logits;
    CHECK(n == 21 + 1 + 3 + 1 + 30);
    ref = malloc((size_t)n * V * sizeof(float));
    got = malloc((size_t)n * V * sizeof(float));
    piece = malloc((size_t)n * V * sizeof(float));
    if (!ref || !got || !piece)
        goto out;
    CHECK_OK(qwen3_forward(&q, &b, &kv, ref, err, sizeof err), err);
    static const int sizes[] = {1, 2, 5, 16, 17, 56};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int cs = sizes[si];
        memset(got, 0xA5, (size_t)n * V * sizeof(float));
        CHECK_OK(qwen3_forward(&q, &b, &kv, NULL, err, sizeof err), err);
        for (int c0 = 0; c0 < n; c0 += cs) {
            int cn = n - c0 < cs ? n - c0 : cs;
            CHECK_OK(qwen3_logits(&q, &b, c0, cn, piece, err, sizeof err), err);
            memcpy(got + (size_t)c0 * V, piece, (size_t)cn * V * sizeof(float));
        }
        CHECK_MSG(!memcmp(ref, got, (size_t)n * V * sizeof(float)), "%s/%s, %d threads: pieces of %d rows differ",
                  fixture, variant, threads, cs);
    }
    /* In the scratch arena, after the residual stream: at least the reserved rows fit. */
    CHECK_OK(qwen3_forward(&q, &b, &kv, NULL, err, sizeof err), err);
    int room = qwen3_scratch_logit_rows(&q);
    CHECK_MSG(room >= 24, "%s: %d rows fit in the scratch", fixture, room);
    const int scratch_sizes[] = {1, 7, room};
    for (int si = 0; si < 3 && room >= 24; si++) {
        int cs = scratch_sizes[si];
        memset(got, 0xA5, (size_t)n * V * sizeof(float));
        for (int c0 = 0; c0 < n; c0 += cs) {
            int cn = n - c0 < cs ? n - c0 : cs;
            float *host = NULL;
            CHECK_OK(qwen3_logits_host(&q, &b, c0, cn, &host, err, sizeof err), err);
            if (host)
                memcpy(got + (size_t)c0 * V, host, (size_t)cn * V * sizeof(float));
        }
        CHECK_MSG(!memcmp(ref, got, (size_t)n * V * sizeof(float)), "%s/%s: scratch pieces of %d rows differ",
                  fixture, variant, cs);
    }
    /* The pieces in reverse order too: a piece depends on nothing computed before it. */
    CHECK_OK(qwen3_forward(&q, &b, &kv, NULL, err, sizeof err), err);
    for (int c0 = ((n - 1) / 4) * 4; c0 >= 0; c0 -= 4) {
        int cn = n - c0 < 4 ? n - c0 : 4;
        CHECK_OK(qwen3_logits(&q, &b, c0, cn, piece, err, sizeof err), err);
        memcpy(got + (size_t)c0 * V, piece, (size_t)cn * V * sizeof(float));
    }
    CHECK_MSG(!memcmp(ref, got, (size_t)n * V * sizeof(float)), "%s/%s: reversed pieces differ", fixture, variant);
    int finite = 1;
    for (size_t i = 0; i < (size_t)n * V; i++)
        finite &= isfinite(ref[i]) != 0;
    CHECK(finite);
out:
    free(ref);
    free(got);
    free(piece);
    batch_free(&b);
    qwen3_free(&q);
    model_kv_free(&kv, &be);
    backend_free(&be);
    model_free(&m);
}

static void test_forward_pieces(void)
{
    const char *vars[4];
    int nv = backend_cpu_variants(vars, 4);
    const char *fixtures[] = {"qwen3-tiny", "qwen3-tiny-bf16", "qwen3moe-tiny", "qwen3moe-tiny-bf16"};
    for (int f = 0; f < 4; f++)
        for (int v = 0; v < nv; v++)
            check_chunks(fixtures[f], vars[v], v == 0 ? 3 : 1);
}

/* ------------------------------------------------------------------ engine */

#define EV_MAX 400

struct evlog {
    int n;
    struct hearth_event ev[EV_MAX];
    int done;
};

static void evlog_drain(struct hearth_request *r, struct evlog *l)
{
    struct hearth_event ev;
    while (!l->done && hearth_request_next_event(r, &ev, 0) == HR_OK) {
        if (l->n < EV_MAX) {
            /* only the fields that carry results (the message and padding stay out) */
            struct hearth_event *d = &l->ev[l->n++];
            memset(d, 0, sizeof *d);
            d->type = ev.type;
            d->index = ev.index;
            d->token = ev.token;
            d->logprob = ev.logprob;
            d->n_top = ev.n_top;
            for (int k = 0; k < ev.n_top; k++) {
                d->top[k].token = ev.top[k].token;
                d->top[k].logprob = ev.top[k].logprob;
            }
            d->finish_reason = ev.finish_reason;
        }
        if (ev.type == HEARTH_EVENT_DONE)
            l->done = 1;
    }
}

static int evlog_same(const struct evlog *a, const struct evlog *b)
{
    if (a->n != b->n || !a->done || !b->done)
        return 0;
    for (int i = 0; i < a->n; i++) {
        const struct hearth_event *x = &a->ev[i], *y = &b->ev[i];
        if (x->type != y->type || x->index != y->index || x->token != y->token ||
            memcmp(&x->logprob, &y->logprob, sizeof x->logprob) || x->n_top != y->n_top ||
            x->finish_reason != y->finish_reason)
            return 0;
        for (int k = 0; k < x->n_top; k++)
            if (x->top[k].token != y->top[k].token || memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float)))
                return 0;
    }
    return 1;
}

#define N_REQ 40

static void test_engine_pieces(void)
{
    static int32_t prompts[N_REQ][40];
    static struct hearth_request_params p[N_REQ];
    static struct evlog alone[N_REQ], together[N_REQ];
    char err[HR_ERRLEN];
    for (int i = 0; i < N_REQ; i++) {
        int len = 3 + (int)rig_rnd(36);
        for (int t = 0; t < len; t++)
            prompts[i][t] = (int32_t)rig_rnd(512);
        hearth_request_params_default(&p[i]);
        p[i].prompt_ids = prompts[i];
        p[i].n_prompt_ids = len;
        p[i].max_tokens = 2 + (int)rig_rnd(6);
        p[i].has_temperature = true;
        p[i].temperature = i % 2 ? 0.0f : 0.8f;
        p[i].has_seed = true;
        p[i].seed = (uint64_t)i;
        p[i].logprobs = true;
        p[i].top_logprobs = i % 4;
        p[i].prompt_logprobs = i % 3 != 1;
        p[i].n = i % 5 == 2 ? 2 : 1;
        p[i].ignore_eos = true;
    }
    struct hearth_engine *e = rig_engine(rig_kv_bytes(256), 64, 512, 2);
    CHECK(e);
    if (!e)
        return;
    for (int i = 0; i < N_REQ; i++) {
        struct hearth_request *r = NULL;
        memset(&alone[i], 0, sizeof alone[i]);
        CHECK_OK(hearth_submit(e, &p[i], &r, err, sizeof err), err);
        for (int guard = 0; r && !alone[i].done && guard < 1000; guard++) {
            engine_step(e);
            evlog_drain(r, &alone[i]);
        }
        hearth_request_free(r);
    }
    hearth_engine_free(e);

    /* Together, in pieces of 7 rows (the tiny vocabulary would fit every row in one),
     * sampled on the engine thread and on 4 sampling threads (as on a device). */
    for (int run = 0; run < 4; run++) {
        int cap = run % 2 ? 0 : 7, threads = run < 2 ? 1 : 4;
        e = rig_engine(rig_kv_bytes(256), 64, 512, 2);
        CHECK(e);
        if (!e)
            return;
        e->hook_logit_rows = cap;
        CHECK_OK(engine_sample_threads(e, threads, err, sizeof err), err);
        CHECK(e->srows_on == (threads > 1));
        int piece = cap ? cap : 1 << 20;
        struct hearth_request *r[N_REQ] = {0};
        for (int i = 0; i < N_REQ; i++) {
            memset(&together[i], 0, sizeof together[i]);
            CHECK_OK(hearth_submit(e, &p[i], &r[i], err, sizeof err), err);
        }
        int remaining = N_REQ, most_rows = 0, split_row = 0;
        for (int guard = 0; remaining > 0 && guard < 1000; guard++) {
            if (!engine_step(e))
                break;
            const struct batch *b = &e->batch;
            most_rows = b->n_logits > most_rows ? b->n_logits : most_rows;
            for (int k = 0; k < b->n_rows; k++) {
                const struct batch_row *br = &b->rows[k];
                if (br->logits == BATCH_LOGITS_ALL &&
                    br->logit_offset / piece != (br->logit_offset + br->query_len - 1) / piece)
                    split_row = 1;
            }
            for (int i = 0; i < N_REQ; i++) {
                if (!r[i])
                    continue;
                evlog_drain(r[i], &together[i]);
                if (together[i].done) {
                    hearth_request_free(r[i]);
                    r[i] = NULL;
                    remaining--;
                }
            }
        }
        CHECK(remaining == 0);
        CHECK_MSG(most_rows > 3 * 7, "steps had at most %d logits rows", most_rows);
        CHECK_MSG(!cap || split_row, "no row's prompt logits straddled two pieces");
        for (int i = 0; i < N_REQ; i++) {
            CHECK_MSG(alone[i].n > 2, "request %d: %d events", i, alone[i].n);
            CHECK_MSG(evlog_same(&alone[i], &together[i]),
                      "pieces of %d, %d sampling threads: request %d: events differ from its run alone", cap, threads,
                      i);
        }
        hearth_engine_free(e);
    }
}

int main(void)
{
    TEST_RUN(test_forward_pieces);
    TEST_RUN(test_engine_pieces);
    TEST_END();
}
