/* Exactness of the forward: a row's logits are bitwise identical (memcmp) however
 * its sequence is batched, chunked, placed in the pool, or threaded — for dense and
 * MoE checkpoints and under every kernel variant this CPU supports. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/dtype.h"
#include "test.h"
#include "testfs.h"

#define POOL_BLOCKS 96
#define BS 16
#define MAX_TOK 512
#define MAX_SEQ 8
#define MAX_LEN 90

struct rig {
    struct model m;
    struct backend be;
    struct kv_store kv;
    struct qwen3 q;
    struct batch b;
    float *logits; /* [MAX_TOK, vocab] */
    int ok;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* When set, rig_init gives the CPU backend a graph_rows that asks for every decode
 * step padded, as a device replaying graphs does: 1, to the next power of two; 2, to
 * the next multiple of 3 (buckets that are not powers of two, as the CUDA backend's
 * multiples of 32 above 32 rows). */
static int pad_decode;
static struct backend_ops pad_ops;

static int pad_graph_rows(struct backend *be, const struct batch *b)
{
    (void)be;
    int B = 1;
    if (pad_decode == 2)
        B = (b->n_tok + 2) / 3 * 3;
    else
        while (B < b->n_tok)
            B *= 2;
    return b->n_tok == b->n_rows ? B : 0;
}

static int rig_init(struct rig *r, const char *fixture, const char *variant, int threads, enum kv_dtype dt)
{
    char dir[512], err[HR_ERRLEN];
    memset(r, 0, sizeof *r);
    if (fixture[0] == '/')
        snprintf(dir, sizeof dir, "%s", fixture);
    else
        snprintf(dir, sizeof dir, "%s/fixtures/%s", test_data_dir(), fixture);
    enum hr_status st = model_load(&r->m, dir, err, sizeof err);
    if (st == HR_OK)
        st = backend_cpu_init(&r->be, &(struct backend_opts){.n_threads = threads, .kernel = variant}, err, sizeof err);
    if (st == HR_OK && pad_decode) {
        pad_ops = *r->be.ops;
        pad_ops.graph_rows = pad_graph_rows;
        r->be.ops = &pad_ops;
    }
    if (st == HR_OK)
        st = model_kv_init(&r->kv, &r->be, &r->m.cfg, dt, BS,
                           (size_t)POOL_BLOCKS * BS * model_kv_bytes_per_token(&r->m.cfg, dt), err, sizeof err);
    if (st == HR_OK)
        st = qwen3_init(&r->q, &r->m, &r->be, MAX_TOK, 0, err, sizeof err);
    if (st == HR_OK)
        st = batch_init(&r->b, BS, MAX_SEQ, MAX_TOK, err, sizeof err);
    if (st != HR_OK) {
        fprintf(stderr, "  rig %s/%s: %s\n", fixture, variant, err);
        return 0;
    }
    r->logits = r->be.ops->alloc(&r->be, (size_t)MAX_TOK * r->m.cfg.vocab_size * sizeof(float), err, sizeof err);
    r->ok = r->logits != NULL && r->kv.n_blocks == POOL_BLOCKS;
    return r->ok;
}

static void rig_free(struct rig *r)
{
    if (r->logits)
        r->be.ops->mem_free(&r->be, r->logits);
    batch_free(&r->b);
    qwen3_free(&r->q);
    model_kv_free(&r->kv, &r->be);
    backend_free(&r->be);
    model_free(&r->m);
}

struct seq {
    int32_t tok[MAX_LEN];
    int len;
    int32_t table[(MAX_LEN + BS - 1) / BS];
    int done;          /* tokens computed so far */
    float *out;        /* [len, vocab] logits of every position */
};

/* When set, the chunks of sequences 1.. (sequence 0 keeps chunk_fn): mixed batches. */
static int (*chunk_others)(int remaining);

/* Runs every sequence to completion: at each step each unfinished sequence adds a
 * chunk (sizes from chunk_fn), all in one batch. */

static int run_seqs(struct rig *r, struct seq *s, int n, int (*chunk_fn)(int remaining))
{
    int V = r->m.cfg.vocab_size;
    char err[HR_ERRLEN];
    for (;;) {
        batch_reset(&r->b);
        int any = 0;
        for (int i = 0; i < n; i++) {
            if (s[i].done >= s[i].len)
                continue;
            int c = (i > 0 && chunk_others ? chunk_others : chunk_fn)(s[i].len - s[i].done);
            if (r->b.n_tok + c > MAX_TOK)
                continue;
            if (batch_add_row(&r->b, i, s[i].tok + s[i].done, c, s[i].done, s[i].table,
                              (s[i].len + BS - 1) / BS, BATCH_LOGITS_ALL, err, sizeof err) != HR_OK)
                return fprintf(stderr, "  add_row: %s\n", err), 0;
            any = 1;
        }
        if (!any)
            return 1;
        if (batch_build(&r->b, r->kv.n_blocks, err, sizeof err) != HR_OK ||
            qwen3_forward(&r->q, &r->b, &r->kv, r->logits, err, sizeof err) != HR_OK)
            return fprintf(stderr, "  forward: %s\n", err), 0;
        for (int k = 0; k < r->b.n_rows; k++) {
            const struct batch_row *row = &r->b.rows[k];
            struct seq *q = &s[row->seq_id];
            memcpy(q->out + (int64_t)q->done * V, r->logits + (int64_t)row->logit_offset * V,
                   (size_t)row->query_len * V * sizeof(float));
            q->done += row->query_len;
        }
    }
}

static int chunk_all(int rem) { return rem; }
static int chunk_one(int rem) { (void)rem; return 1; }
static int chunk_rand(int rem) { return 1 + (int)rnd((uint32_t)(rem < 23 ? rem : 23)); }

/* Assigns disjoint block tables: contiguous from `first`, or a random permutation. */
static void place(struct seq *s, int n, int shuffle)
{
    int ids[POOL_BLOCKS];
    for (int i = 0; i < POOL_BLOCKS; i++)
        ids[i] = i;
    if (shuffle)
        for (int i = POOL_BLOCKS - 1; i > 0; i--) {
            int j = (int)rnd((uint32_t)i + 1), t = ids[i];
            ids[i] = ids[j];
            ids[j] = t;
        }
    int next = 0;
    for (int i = 0; i < n; i++) {
        int nb = (s[i].len + BS - 1) / BS;
        for (int b = 0; b < nb; b++)
            s[i].table[b] = ids[next++];
        s[i].done = 0;
    }
}

struct set {
    int n;
    struct seq s[MAX_SEQ];
};

static void make_set(struct set *st, int n, int vocab)
{
    st->n = n;
    for (int i = 0; i < n; i++) {
        st->s[i].len = 1 + (int)rnd(MAX_LEN);
        for (int t = 0; t < st->s[i].len; t++)
            st->s[i].tok[t] = (int32_t)rnd((uint32_t)vocab);
        st->s[i].out = calloc((size_t)MAX_LEN * vocab, sizeof(float));
    }
}

static void free_set(struct set *st)
{
    for (int i = 0; i < st->n; i++)
        free(st->s[i].out);
}

/* Reference: each sequence alone, whole prompt in one chunk, contiguous blocks. */
static void reference(struct rig *r, struct set *st, float **ref)
{
    int V = r->m.cfg.vocab_size;
    for (int i = 0; i < st->n; i++) {
        place(&st->s[i], 1, 0);
        CHECK(run_seqs(r, &st->s[i], 1, chunk_all));
        ref[i] = malloc((size_t)st->s[i].len * V * sizeof(float));
        memcpy(ref[i], st->s[i].out, (size_t)st->s[i].len * V * sizeof(float));
    }
}

static int same(struct rig *r, struct set *st, float **ref, const char *what)
{
    int V = r->m.cfg.vocab_size, ok = 1;
    for (int i = 0; i < st->n; i++) {
        if (memcmp(ref[i], st->s[i].out, (size_t)st->s[i].len * V * sizeof(float)) != 0) {
            fprintf(stderr, "  %s: sequence %d (len %d) differs\n", what, i, st->s[i].len);
            ok = 0;
        }
    }
    return ok;
}

static void check_fixture(const char *fixture, enum kv_dtype dt)
{
    const char *vars[4];
    int nv = backend_cpu_variants(vars, 4);
    for (int v = 0; v < nv; v++) {
        struct rig r;
        if (!rig_init(&r, fixture, vars[v], 1, dt)) {
            CHECK_MSG(0, "cannot set up %s/%s", fixture, vars[v]);
            rig_free(&r);
            continue;
        }
        int V = r.m.cfg.vocab_size;
        struct set st;
        float *ref[MAX_SEQ];
        make_set(&st, MAX_SEQ, V);
        reference(&r, &st, ref);
        int finite = 1; /* bitwise equality of NaNs would prove nothing */
        for (int i = 0; i < st.n; i++)
            for (int64_t j = 0; j < (int64_t)st.s[i].len * V; j++)
                finite &= isfinite(ref[i][j]) != 0;
        CHECK_MSG(finite, "%s/%s: reference logits not finite", fixture, vars[v]);

        /* One token at a time, alone. */
        for (int i = 0; i < st.n; i++) {
            place(&st.s[i], 1, 1);
            CHECK(run_seqs(&r, &st.s[i], 1, chunk_one));
        }
        CHECK(same(&r, &st, ref, "token by token"));
        /* Random chunks, alone, blocks shuffled. */
        for (int i = 0; i < st.n; i++) {
            place(&st.s[i], 1, 1);
            CHECK(run_seqs(&r, &st.s[i], 1, chunk_rand));
        }
        CHECK(same(&r, &st, ref, "random chunks"));
        /* Batched with 1..7 others, random chunks, random placement. */
        for (int k = 2; k <= MAX_SEQ; k += 2) {
            place(st.s, k, 1);
            CHECK(run_seqs(&r, st.s, k, chunk_rand));
            struct set sub = st;
            sub.n = k;
            CHECK(same(&r, &sub, ref, "batched"));
        }
        place(st.s, MAX_SEQ, 1);
        CHECK(run_seqs(&r, st.s, MAX_SEQ, chunk_one));
        CHECK(same(&r, &st, ref, "batched decode"));
        rig_free(&r);

        /* Thread counts 2, 3 and, on a larger machine, all its cores. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int ths[3] = {2, 3, cores > 3 && cores <= 256 ? (int)cores : 0};
        for (int ti = 0; ti < 3 && ths[ti]; ti++) {
            int th = ths[ti];
            struct rig r2;
            if (!rig_init(&r2, fixture, vars[v], th, dt)) {
                CHECK(0);
                rig_free(&r2);
                continue;
            }
            place(st.s, MAX_SEQ, 1);
            CHECK(run_seqs(&r2, st.s, MAX_SEQ, chunk_rand));
            CHECK(same(&r2, &st, ref, "threads"));
            /* decode steps of every sequence: with 2 threads, the attention's whole-row walk */
            place(st.s, MAX_SEQ, 1);
            CHECK(run_seqs(&r2, st.s, MAX_SEQ, chunk_one));
            CHECK(same(&r2, &st, ref, "threads, batched decode"));
            /* one row prefilling in chunks, the others decoding: both walks in one launch */
            place(st.s, MAX_SEQ, 1);
            chunk_others = chunk_one;
            CHECK(run_seqs(&r2, st.s, MAX_SEQ, chunk_rand));
            chunk_others = NULL;
            CHECK(same(&r2, &st, ref, "threads, prefill beside decodes"));
            rig_free(&r2);
        }
        for (int i = 0; i < st.n; i++)
            free(ref[i]);
        free_set(&st);
    }
}

/* Thread counts of the shared-prefix sweep: 1, 2 and 3; under the sanitizers (make asan)
 * 1 and 3, which take every path the memory checks watch (the sweep was ~40 of the
 * test's 83 s there; make test, and TEST_LONG=1, run all three). */
static int shared_thread_step(void)
{
#if defined(TEST_SANITIZED)
    return getenv("TEST_LONG") ? 1 : 2;
#else
    return 1;
#endif
}

/* Decode rows that share the blocks of a common prefix, as the prefix cache and n > 1
 * give: attention takes the shared tiles for all of them at once, and each row's
 * logits must still be those of the row alone.  Layout 0: rows 0-6 share block 0,
 * rows 0-3 block 1 too; layout 1: rows 0-3 share blocks 0-1, rows 4-6 their own
 * block 0.  Row 7 shares nothing.  The shared positions are computed once (by row 0,
 * and row 4 in layout 1); the others start after them. */
static void check_shared(const char *fixture, enum kv_dtype dt)
{
    const char *vars[4];
    int nv = backend_cpu_variants(vars, 4);
    const int th_step = shared_thread_step();
    for (int v = 0; v < nv; v++) {
        for (int th = 1; th <= 3; th += th_step) {
            struct rig r;
            if (!rig_init(&r, fixture, vars[v], th, dt)) {
                CHECK_MSG(0, "cannot set up %s/%s", fixture, vars[v]);
                rig_free(&r);
                continue;
            }
            int V = r.m.cfg.vocab_size;
            for (int layout = 0; layout < 2; layout++) {
                for (int pass = 0; pass < 2; pass++) {
                    struct set st;
                    float *ref[MAX_SEQ];
                    make_set(&st, MAX_SEQ, V);
                    for (int i = 0; i < MAX_SEQ; i++) {
                        st.s[i].len = 48 + (int)rnd(MAX_LEN - 48 + 1);
                        for (int t = 0; t < st.s[i].len; t++)
                            st.s[i].tok[t] = (int32_t)rnd((uint32_t)V);
                    }
                    int lead[MAX_SEQ], blocks[MAX_SEQ]; /* row i shares its first blocks[i] with row lead[i] */
                    for (int i = 0; i < MAX_SEQ; i++) {
                        lead[i] = i;
                        blocks[i] = 0;
                        if (i >= 1 && i <= 3)
                            lead[i] = 0, blocks[i] = 2;
                        if (i >= 4 && i <= 6)
                            lead[i] = layout ? 4 : 0, blocks[i] = 1;
                    }
                    if (layout)
                        blocks[4] = 0;
                    for (int i = 0; i < MAX_SEQ; i++)
                        memcpy(st.s[i].tok, st.s[lead[i]].tok, (size_t)blocks[i] * BS * sizeof(int32_t));
                    reference(&r, &st, ref);

                    place(st.s, MAX_SEQ, 1);
                    for (int i = 0; i < MAX_SEQ; i++)
                        memcpy(st.s[i].table, st.s[lead[i]].table, (size_t)blocks[i] * sizeof(int32_t));
                    /* the shared prefixes, once each, by their leading rows */
                    for (int i = 0; i < MAX_SEQ; i++) {
                        int led = 0, len = st.s[i].len;
                        for (int j = 0; j < MAX_SEQ; j++)
                            led = j != i && lead[j] == i && blocks[j] > led ? blocks[j] : led;
                        if (led) {
                            st.s[i].len = led * BS;
                            CHECK(run_seqs(&r, &st.s[i], 1, chunk_all));
                            st.s[i].len = len;
                        } else if (lead[i] != i) {
                            st.s[i].done = blocks[i] * BS;
                        }
                    }
                    /* decode steps of every row, then random chunks beside the decodes */
                    chunk_others = pass ? chunk_rand : NULL;
                    CHECK(run_seqs(&r, st.s, MAX_SEQ, chunk_one));
                    chunk_others = NULL;
                    for (int i = 0; i < MAX_SEQ; i++) {
                        int p = lead[i] == i ? 0 : blocks[i] * BS;
                        CHECK_MSG(memcmp(ref[i] + (int64_t)p * V, st.s[i].out + (int64_t)p * V,
                                         (size_t)(st.s[i].len - p) * V * sizeof(float)) == 0,
                                  "%s/%s, %d threads, layout %d pass %d: row %d differs", fixture, vars[v], th,
                                  layout, pass, i);
                    }
                    for (int i = 0; i < MAX_SEQ; i++)
                        free(ref[i]);
                    free_set(&st);
                }
            }
            rig_free(&r);
        }
    }
}

static void test_dense_f32_kv(void) { check_fixture("qwen3-tiny", KV_DTYPE_F32); }
static void test_dense_bf16_kv(void) { check_fixture("qwen3-tiny-bf16", KV_DTYPE_BF16); }
static void test_moe_f32(void) { check_fixture("qwen3moe-tiny", KV_DTYPE_BF16); }
static void test_moe_bf16_sharded(void) { check_fixture("qwen3moe-tiny-bf16", KV_DTYPE_F32); }
static void test_shared_prefix(void)
{
    check_shared("qwen3-tiny-bf16", KV_DTYPE_BF16);
    check_shared("qwen3-tiny", KV_DTYPE_F32);
    check_shared("qwen3moe-tiny", KV_DTYPE_BF16);
}

/* A dense model whose every width is off the kernels' vector and tile sizes (hidden
 * 72, head_dim 40, intermediate 100, three query heads per KV head), random bf16
 * weights: k tails, partial tiles and odd head groups in every kernel.  Exactness
 * needs no reference logits. */
static int make_odd_model(char *dir, size_t n)
{
    enum { H = 72, NH = 3, NKV = 1, HD = 40, I = 100, V = 300, L = 2 };
    if (!testfs_mkdtemp(dir, n, "odd"))
        return 0;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
             "\"intermediate_size\": %d, \"vocab_size\": %d, \"num_hidden_layers\": %d, "
             "\"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
             "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"hidden_act\": \"silu\"}",
             H, NH, NKV, HD, I, V, L);
    if (testfs_write_str(dir, "config.json", cfg))
        return 0;
    struct {
        char name[64];
        int rows, cols; /* cols 0: a vector */
    } t[4 + 11 * L];
    int nt = 0;
#define ADD(nm, r, c) (snprintf(t[nt].name, sizeof t[nt].name, "%s", nm), t[nt].rows = (r), t[nt].cols = (c), nt++)
    ADD("model.embed_tokens.weight", V, H);
    ADD("model.norm.weight", H, 0);
    for (int l = 0; l < L; l++) {
        char b[64];
        const char *names[] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm",
                               "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj",    "mlp.up_proj",              "mlp.down_proj"};
        int rows[] = {H, H, HD, HD, NH * HD, NKV * HD, NKV * HD, H, I, I, H};
        int cols[] = {0, 0, 0, 0, H, H, H, NH * HD, H, H, I};
        for (int i = 0; i < 11; i++) {
            snprintf(b, sizeof b, "model.layers.%d.%s.weight", l, names[i]);
            ADD(b, rows[i], cols[i]);
        }
    }
#undef ADD
    size_t hcap = 8192, off = 0, hl = 0;
    char *hdr = malloc(hcap);
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
    for (int i = 0; i < nt; i++) {
        size_t bytes = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * 2;
        if (t[i].cols)
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
        else
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8)
        hdr[hl++] = ' ';
    size_t total = 8 + hl + off;
    uint8_t *img = malloc(total);
    uint64_t h64 = hl;
    memcpy(img, &h64, 8);
    memcpy(img + 8, hdr, hl);
    uint16_t *w = (uint16_t *)(img + 8 + hl);
    size_t k = 0;
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (size_t j = 0; j < n; j++) {
            float u = (float)rnd(20001) / 10000.0f - 1.0f;
            w[k++] = dtype_f32_to_bf16(t[i].cols ? 0.08f * u : 1.0f + 0.1f * u);
        }
    }
    int ok = testfs_write(dir, "model.safetensors", img, total) == 0;
    free(img);
    free(hdr);
    return ok;
}

/* Decode steps padded to a graph's rows (rows of token 0 at position 0 that store
 * nothing), to powers of two and to multiples of 3: every real row's logits are the
 * bytes of the unpadded run, dense and MoE. */
static void test_padded_decode(void)
{
    static const char *const fx[] = {"qwen3-tiny-bf16", "qwen3moe-tiny-bf16"};
    for (int f = 0; f < 4; f++) {
        struct rig plain, pad;
        pad_decode = 0;
        int ok = rig_init(&plain, fx[f % 2], NULL, 2, KV_DTYPE_BF16);
        pad_decode = 1 + f / 2;
        ok = rig_init(&pad, fx[f % 2], NULL, 2, KV_DTYPE_BF16) && ok;
        CHECK_MSG(ok && pad.q.pad.rows && !plain.q.pad.rows, "%s: rigs", fx[f % 2]);
        if (ok) {
            int V = plain.m.cfg.vocab_size;
            struct set st;
            float *ref[MAX_SEQ];
            make_set(&st, MAX_SEQ, V);
            /* powers of two: padded to 4 and 8, then as it dwindles to 2 and 1; multiples
             * of 3: 5 and 7 to 6 and 9, then to 3 */
            for (int n = 3; n <= 7; n += 2) {
                place(st.s, n, 1);
                CHECK(run_seqs(&plain, st.s, n, chunk_one));
                for (int i = 0; i < n; i++) {
                    ref[i] = malloc((size_t)st.s[i].len * V * sizeof(float));
                    memcpy(ref[i], st.s[i].out, (size_t)st.s[i].len * V * sizeof(float));
                }
                place(st.s, n, 1);
                CHECK(run_seqs(&pad, st.s, n, chunk_one));
                struct set sub = st;
                sub.n = n;
                CHECK_MSG(same(&pad, &sub, ref, "padded decode"), "%s: %d sequences, padding rule %d", fx[f % 2],
                          n, pad_decode);
                for (int i = 0; i < n; i++)
                    free(ref[i]);
            }
            free_set(&st);
        }
        pad_decode = 0;
        rig_free(&plain);
        rig_free(&pad);
    }
}

static void test_odd_shapes(void)
{
    char dir[512];
    CHECK(make_odd_model(dir, sizeof dir));
    check_fixture(dir, KV_DTYPE_BF16);
    check_fixture(dir, KV_DTYPE_F32);
    check_shared(dir, KV_DTYPE_BF16);
    testfs_rmtree(dir);
}

/* A forward whose backend fails in any one of its ops (the fault-injection backend)
 * returns an error, and later runs are exact; dense and MoE. */
static void test_injected_failure(void)
{
    const char *fixtures[] = {"qwen3-tiny", "qwen3moe-tiny"};
    char err[HR_ERRLEN];
    for (int fi = 0; fi < 2; fi++) {
        struct rig r;
        if (!rig_init(&r, fixtures[fi], NULL, 1, KV_DTYPE_BF16)) {
            CHECK(0);
            rig_free(&r);
            return;
        }
        struct set st;
        float *ref[MAX_SEQ];
        make_set(&st, 1, r.m.cfg.vocab_size);
        reference(&r, &st, ref);
        CHECK_OK(backend_fault_wrap(&r.be, err, sizeof err), err);
        /* every op of a one-step forward, begin_step (-1) included */
        backend_fault_arm(&r.be, 0, 1 << 30);
        place(st.s, 1, 0);
        CHECK(run_seqs(&r, st.s, 1, chunk_all));
        int n_ops = backend_fault_ops_seen(&r.be), failures = 0;
        CHECK(n_ops > 3 * r.m.cfg.n_layers);
        for (int op = -1; op < n_ops; op++) {
            backend_fault_arm(&r.be, 0, op);
            place(st.s, 1, 0);
            failures += !run_seqs(&r, st.s, 1, chunk_all);
            place(st.s, 1, 0);
            CHECK(run_seqs(&r, st.s, 1, chunk_all));
            CHECK(same(&r, &st, ref, "after a failed forward"));
        }
        CHECK_MSG(failures == n_ops + 1, "%s: %d of %d injected failures failed the forward", fixtures[fi], failures,
                  n_ops + 1);
        free(ref[0]);
        free_set(&st);
        rig_free(&r);
    }
}

/* Token ids outside the vocabulary are an error, not a crash. */
static void test_bad_token(void)
{
    struct rig r;
    char err[HR_ERRLEN];
    if (!rig_init(&r, "qwen3-tiny", NULL, 1, KV_DTYPE_BF16)) {
        CHECK(0);
        rig_free(&r);
        return;
    }
    int32_t table[1] = {0}, tok[2] = {5, 100000};
    batch_reset(&r.b);
    CHECK_OK(batch_add_row(&r.b, 0, tok, 2, 0, table, 1, BATCH_LOGITS_LAST, err, sizeof err), err);
    CHECK_OK(batch_build(&r.b, r.kv.n_blocks, err, sizeof err), err);
    CHECK(qwen3_forward(&r.q, &r.b, &r.kv, r.logits, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "100000") != NULL);
    rig_free(&r);
}

int main(void)
{
    TEST_RUN(test_dense_f32_kv);
    TEST_RUN(test_dense_bf16_kv);
    TEST_RUN(test_moe_f32);
    TEST_RUN(test_moe_bf16_sharded);
    TEST_RUN(test_shared_prefix);
    TEST_RUN(test_padded_decode);
    TEST_RUN(test_odd_shapes);
    TEST_RUN(test_injected_failure);
    TEST_RUN(test_bad_token);
    TEST_END();
}
