/* weights_load: the four fixtures bind with the right shapes, dtypes, parameter
 * counts (counted by hand from the configs and checked against the file sizes) and
 * norm values (read independently with Python's struct); every missing tensor,
 * wrong shape and bad dtype is refused naming the file and tensor; transformers 5's
 * fused expert tensors, mixed dtypes and misaligned tensors load; and mkmodel's
 * output loads. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "model/config.h"
#include "model/dtype.h"
#include "model/mkmodel.h"
#include "model/weights.h"
#include "test.h"
#include "testfs.h"

#define HAS(s, sub) (strstr((s), (sub)) != NULL)

static char tmp[512];

static const char *fixture(const char *name)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/fixtures/%s", test_data_dir(), name);
    return p;
}

static bool load(const char *dir, struct model_config *c, struct weights *w)
{
    char err[HR_ERRLEN] = "";
    enum hr_status st = model_config_load(c, dir, err, sizeof err);
    if (st == HR_OK)
        st = weights_load(w, c, dir, err, sizeof err);
    CHECK_MSG(st == HR_OK, "%s: %s", dir, err);
    return st == HR_OK;
}

/* ---------------------------------------------------------------- fixtures */

static void test_qwen3_tiny(void)
{
    struct model_config c;
    struct weights w;
    if (!load(fixture("qwen3-tiny"), &c, &w))
        return;
    /* embed 512*64 + 2 layers * (q 128*64 + k,v 64*64 + o 64*128 + mlp 3*128*64 + norms 64+64+32+32) + 64 */
    CHECK(w.n_params == 131520);
    CHECK(w.weight_bytes == 131520 * 4); /* = file size - 8 - header (528560 - 2480) */
    CHECK(w.n_active_params == w.n_params);
    CHECK(w.n_layers == 2 && w.embed.rows == 512 && w.embed.cols == 64 && w.embed.dtype == SAFETENSORS_DTYPE_F32);
    CHECK(w.lm_head.data == w.embed.data && w.lm_head.rows == 512); /* tied */
    const struct weights_layer *L = &w.layers[1];
    CHECK(!L->is_moe && L->q.rows == 128 && L->q.cols == 64 && L->k.rows == 64 && L->v.rows == 64);
    CHECK(L->o.rows == 64 && L->o.cols == 128 && L->gate.rows == 128 && L->down.rows == 64 && L->down.cols == 128);
    /* mmap'd, not copied */
    CHECK(L->q.data == safetensors_find(&w.st, "model.layers.1.self_attn.q_proj.weight")->data);
    CHECK(w.final_norm[0] == 1.0537376403808594f && w.final_norm[1] == 0.9068692922592163f &&
          w.final_norm[2] == 1.062242031097412f);
    CHECK(L->q_norm[31] == 1.211914300918579f);
    CHECK(w.n_owned == 0 && !w.experts_fused);
    weights_free(&w);
    weights_free(&w); /* zeroed: no-op */
    weights_free(NULL);
}

static void test_qwen3_tiny_bf16(void)
{
    struct model_config c;
    struct weights w;
    if (!load(fixture("qwen3-tiny-bf16"), &c, &w))
        return;
    CHECK(w.n_params == 131520 && w.weight_bytes == 131520 * 2);
    CHECK(w.embed.dtype == SAFETENSORS_DTYPE_BF16 && w.layers[0].gate.dtype == SAFETENSORS_DTYPE_BF16);
    /* bf16 0x3f7e, 0x3f94, 0x3f72 widened */
    CHECK(w.final_norm[0] == 0.9921875f && w.final_norm[1] == 1.15625f && w.final_norm[2] == 0.9453125f);
    weights_free(&w);
}

static void test_qwen3moe_tiny(void)
{
    struct model_config c;
    struct weights w;
    if (!load(fixture("qwen3moe-tiny"), &c, &w))
        return;
    /* embed + lm_head 2*512*64 + 2 * (attn 24576 + norms 192 + router 8*64 + experts 8*3*32*64) + 64 */
    CHECK(w.n_params == 214464 && w.weight_bytes == 214464 * 4);
    CHECK(w.n_active_params == 214464 - 2 * 6 * 3 * 32 * 64); /* 6 of 8 experts idle per layer */
    CHECK(w.lm_head.data != w.embed.data);
    for (int l = 0; l < 2; l++) {
        const struct weights_layer *L = &w.layers[l];
        CHECK(L->is_moe && L->router.rows == 8 && L->router.cols == 64 && L->experts);
        CHECK(L->experts[7].gate.rows == 32 && L->experts[7].gate.cols == 64);
        CHECK(L->experts[7].down.rows == 64 && L->experts[7].down.cols == 32);
        char up3[64];
        snprintf(up3, sizeof up3, "model.layers.%d.mlp.experts.3.up_proj.weight", l);
        CHECK(L->experts[3].up.data == safetensors_find(&w.st, up3)->data);
    }
    weights_free(&w);
}

static void test_qwen3moe_tiny_bf16_sharded(void)
{
    struct model_config c;
    struct weights w;
    if (!load(fixture("qwen3moe-tiny-bf16"), &c, &w))
        return;
    CHECK(w.st.n_files == 2);
    /* layer 0 sparse, layer 1 dense; 189376 * 2 bytes is the index's total_size */
    CHECK(w.n_params == 189376 && w.weight_bytes == 378752);
    CHECK(w.layers[0].is_moe && !w.layers[1].is_moe);
    CHECK(w.layers[1].gate.rows == 128 && w.layers[1].experts == NULL);
    CHECK(w.layers[1].ffn_norm[0] == 0.8828125f && w.layers[1].ffn_norm[1] == 1.171875f);
    weights_free(&w);
}

/* ---------------------------------------------------------------- broken copies */

/* A copy of fixture src in tmp/sub where `edit` may rewrite tensor i before writing. */
typedef bool (*edit_fn)(struct safetensors_tensor *t, void *arg);

static const char *rewrite(const char *src, const char *sub, edit_fn edit, void *arg)
{
    static char d[1024];
    snprintf(d, sizeof d, "%s/%s", tmp, sub);
    mkdir(d, 0755);
    testfs_copy(fixture(src), d, "config.json");
    char err[HR_ERRLEN] = "";
    struct safetensors st;
    CHECK_OK(safetensors_open_dir(&st, fixture(src), err, sizeof err), err);
    struct safetensors_tensor *ts = calloc((size_t)st.n_tensors, sizeof *ts);
    int n = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        ts[n] = st.tensors[i];
        if (!edit || edit(&ts[n], arg))
            n++;
    }
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CHECK_OK(safetensors_write(p, ts, n, err, sizeof err), err);
    free(ts);
    safetensors_free(&st);
    return d;
}

static bool drop_named(struct safetensors_tensor *t, void *arg)
{
    return strcmp(t->name, (const char *)arg) != 0;
}

static bool transpose_named(struct safetensors_tensor *t, void *arg)
{
    if (!strcmp(t->name, (const char *)arg)) {
        int64_t a = t->shape[0];
        t->shape[0] = t->shape[1];
        t->shape[1] = a;
    }
    return true;
}

static bool relabel_i32(struct safetensors_tensor *t, void *arg)
{
    if (!strcmp(t->name, (const char *)arg))
        t->dtype = SAFETENSORS_DTYPE_I32;
    return true;
}

static void expect_fail(const char *dir, const char *what, const char *a, const char *b)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    struct weights w;
    CHECK_OK(model_config_load(&c, dir, err, sizeof err), err);
    enum hr_status st = weights_load(&w, &c, dir, err, sizeof err);
    CHECK_MSG(st == HR_ERR_FORMAT, "%s: %s (%s)", what, hr_status_str(st), err);
    CHECK_MSG(HAS(err, a) && HAS(err, b), "%s: '%s' lacks '%s' or '%s'", what, err, a, b);
    CHECK(w.layers == NULL && w.st.n_files == 0); /* freed on failure */
}

static void test_missing_shape_dtype(void)
{
    const char *d = rewrite("qwen3-tiny", "miss", drop_named, "model.layers.1.self_attn.k_norm.weight");
    expect_fail(d, "missing", "miss/model.safetensors", "'model.layers.1.self_attn.k_norm.weight' is missing");
    d = rewrite("qwen3-tiny", "shape", transpose_named, "model.layers.0.self_attn.q_proj.weight");
    expect_fail(d, "shape", "shape/model.safetensors", "'model.layers.0.self_attn.q_proj.weight' has shape [64, 128]");
    expect_fail(d, "shape", "needs [128, 64]", "q_proj");
    d = rewrite("qwen3-tiny", "dtype", relabel_i32, "model.norm.weight");
    expect_fail(d, "dtype", "dtype/model.safetensors", "'model.norm.weight' has dtype I32");

    /* untied config without lm_head.weight */
    d = rewrite("qwen3-tiny", "untied", NULL, NULL);
    char cfg[8192];
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    FILE *f = fopen(cfg, "r");
    size_t n = f ? fread(cfg, 1, sizeof cfg - 1, f) : 0;
    if (f)
        fclose(f);
    cfg[n] = 0;
    char *t = strstr(cfg, "\"tie_word_embeddings\": true");
    CHECK(t != NULL);
    if (t) {
        memcpy(t, "\"tie_word_embeddings\":false", strlen("\"tie_word_embeddings\":false"));
        testfs_write_str(d, "config.json", cfg);
        expect_fail(d, "untied", "untied/model.safetensors", "'lm_head.weight' is missing");
    }
    /* a config whose vocab disagrees with the embedding */
    char *v = strstr(cfg, "\"vocab_size\": 512");
    CHECK(v != NULL);
    if (v) {
        memcpy(v, "\"vocab_size\": 513", strlen("\"vocab_size\": 513"));
        testfs_write_str(d, "config.json", cfg);
        expect_fail(d, "vocab", "'model.embed_tokens.weight' has shape [512, 64]", "[513, 64]");
    }
}

static void test_sharded_errors(void)
{
    /* copy the sharded fixture, then break shard 2 */
    char d[1024], err[HR_ERRLEN] = "";
    snprintf(d, sizeof d, "%s/shards", tmp);
    mkdir(d, 0755);
    const char *files[] = {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"};
    for (int i = 0; i < 4; i++)
        CHECK(testfs_copy(fixture("qwen3moe-tiny-bf16"), d, files[i]) == 0);
    struct safetensors st;
    char p[1100];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", fixture("qwen3moe-tiny-bf16"));
    CHECK_OK(safetensors_open_file(&st, p, err, sizeof err), err);
    struct safetensors_tensor *ts = calloc((size_t)st.n_tensors, sizeof *ts);
    for (int i = 0; i < st.n_tensors; i++) {
        ts[i] = st.tensors[i];
        if (!strcmp(ts[i].name, "model.layers.1.mlp.up_proj.weight")) {
            ts[i].shape[0] = 64; /* [64, 128]: same bytes, wrong shape */
            ts[i].shape[1] = 128;
        }
    }
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    CHECK_OK(safetensors_write(p, ts, st.n_tensors, err, sizeof err), err);
    expect_fail(d, "shard shape", "model-00002-of-00002.safetensors", "'model.layers.1.mlp.up_proj.weight'");

    /* drop a tensor from shard 2 and from the index: missing, reported at the index */
    int n = 0;
    for (int i = 0; i < st.n_tensors; i++)
        if (strcmp(st.tensors[i].name, "model.norm.weight") != 0)
            ts[n++] = st.tensors[i];
    CHECK_OK(safetensors_write(p, ts, n, err, sizeof err), err);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    json_t *idx = json_load_file(p, 0, NULL);
    json_t *wm = json_object_get(idx, "weight_map");
    CHECK(wm && json_object_get(wm, "model.norm.weight"));
    /* still listed by the index: the shard lacks it */
    CHECK(json_dump_file(idx, p, 0) == 0);
    struct weights w;
    struct model_config c;
    CHECK_OK(model_config_load(&c, d, err, sizeof err), err);
    CHECK(weights_load(&w, &c, d, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "'model.norm.weight'") &&
          HAS(err, "model.safetensors.index.json") && HAS(err, "model-00002-of-00002.safetensors"));
    /* no longer listed: the weights report it missing, at the index */
    json_object_del(wm, "model.norm.weight");
    CHECK(json_dump_file(idx, p, 0) == 0);
    json_decref(idx);
    expect_fail(d, "index missing", "shards/model.safetensors.index.json", "'model.norm.weight' is missing");
    free(ts);
    safetensors_free(&st);
}

/* ---------------------------------------------------------------- formats */

/* transformers 5's fused layout, written from the per-expert fixture. */
static void test_fused_experts(void)
{
    char err[HR_ERRLEN] = "", d[1024], p[1100];
    snprintf(d, sizeof d, "%s/fused", tmp);
    mkdir(d, 0755);
    testfs_copy(fixture("qwen3moe-tiny"), d, "config.json");
    struct safetensors st;
    CHECK_OK(safetensors_open_dir(&st, fixture("qwen3moe-tiny"), err, sizeof err), err);
    struct safetensors_tensor *ts = calloc((size_t)st.n_tensors, sizeof *ts);
    float *fused[2][2];
    int n = 0;
    for (int i = 0; i < st.n_tensors; i++)
        if (!strstr(st.tensors[i].name, ".mlp.experts."))
            ts[n++] = st.tensors[i];
    static char names[2][2][80];
    const size_t E = 8, I = 32, H = 64;
    for (int l = 0; l < 2; l++) {
        fused[l][0] = malloc(E * 2 * I * H * 4);
        fused[l][1] = malloc(E * H * I * 4);
        for (size_t e = 0; e < E; e++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.gate_proj.weight", l, e);
            memcpy(fused[l][0] + e * 2 * I * H, safetensors_find(&st, nm)->data, I * H * 4);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.up_proj.weight", l, e);
            memcpy(fused[l][0] + e * 2 * I * H + I * H, safetensors_find(&st, nm)->data, I * H * 4);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.down_proj.weight", l, e);
            memcpy(fused[l][1] + e * H * I, safetensors_find(&st, nm)->data, H * I * 4);
        }
        snprintf(names[l][0], sizeof names[l][0], "model.layers.%d.mlp.experts.gate_up_proj", l);
        snprintf(names[l][1], sizeof names[l][1], "model.layers.%d.mlp.experts.down_proj", l);
        ts[n++] = (struct safetensors_tensor){.name = names[l][0], .dtype = SAFETENSORS_DTYPE_F32, .n_dims = 3,
                                              .shape = {8, 64, 64}, .data = fused[l][0], .nbytes = E * 2 * I * H * 4};
        ts[n++] = (struct safetensors_tensor){.name = names[l][1], .dtype = SAFETENSORS_DTYPE_F32, .n_dims = 3,
                                              .shape = {8, 64, 32}, .data = fused[l][1], .nbytes = E * H * I * 4};
    }
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CHECK_OK(safetensors_write(p, ts, n, err, sizeof err), err);

    struct model_config c;
    struct weights w;
    if (load(d, &c, &w)) {
        CHECK(w.experts_fused && w.n_params == 214464 && w.weight_bytes == 214464 * 4);
        for (int l = 0; l < 2; l++)
            for (size_t e = 0; e < E; e++) {
                char nm[128];
                const struct weights_expert *x = &w.layers[l].experts[e];
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.gate_proj.weight", l, e);
                CHECK(x->gate.rows == 32 && x->gate.cols == 64 &&
                      !memcmp(x->gate.data, safetensors_find(&st, nm)->data, I * H * 4));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.up_proj.weight", l, e);
                CHECK(x->up.rows == 32 && !memcmp(x->up.data, safetensors_find(&st, nm)->data, I * H * 4));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%zu.down_proj.weight", l, e);
                CHECK(x->down.rows == 64 && x->down.cols == 32 &&
                      !memcmp(x->down.data, safetensors_find(&st, nm)->data, H * I * 4));
            }
        weights_free(&w);
    }
    /* a fused tensor of the wrong shape: [8, 32, 64] (gate only) */
    ts[n - 4].shape[1] = 32;
    ts[n - 4].nbytes /= 2;
    CHECK_OK(safetensors_write(p, ts, n, err, sizeof err), err);
    expect_fail(d, "fused shape", "'model.layers.0.mlp.experts.gate_up_proj' has shape [8, 32, 64]", "[8, 64, 64]");
    /* gate_up without down_proj */
    ts[n - 4].shape[1] = 64;
    ts[n - 4].nbytes *= 2;
    ts[n - 3] = ts[n - 1];
    CHECK_OK(safetensors_write(p, ts, n - 1, err, sizeof err), err);
    expect_fail(d, "fused down", "fused/model.safetensors", "'model.layers.0.mlp.experts.down_proj' is missing");
    for (int l = 0; l < 2; l++) {
        free(fused[l][0]);
        free(fused[l][1]);
    }
    free(ts);
    safetensors_free(&st);
}

/* F16 next to F32 in one model; and a file whose tensors sit at offsets that are
 * not multiples of their element size (a 1-element BF16 tensor first). */
static void test_mixed_dtypes_and_alignment(void)
{
    char err[HR_ERRLEN] = "", d[1024], p[1100];
    snprintf(d, sizeof d, "%s/mixed", tmp);
    mkdir(d, 0755);
    testfs_copy(fixture("qwen3-tiny"), d, "config.json");
    struct safetensors st;
    CHECK_OK(safetensors_open_dir(&st, fixture("qwen3-tiny"), err, sizeof err), err);
    struct safetensors_tensor *ts = calloc((size_t)st.n_tensors + 1, sizeof *ts);
    uint16_t pad = 0x3f80;
    ts[0] = (struct safetensors_tensor){.name = "aaa.unused", .dtype = SAFETENSORS_DTYPE_BF16, .n_dims = 1,
                                        .shape = {1}, .data = &pad, .nbytes = 2};
    const struct safetensors_tensor *q = safetensors_find(&st, "model.layers.0.self_attn.q_proj.weight");
    const struct safetensors_tensor *kn = safetensors_find(&st, "model.layers.0.self_attn.k_norm.weight");
    uint16_t *q16 = malloc((size_t)q->n_elems * 2), *kn16 = malloc((size_t)kn->n_elems * 2);
    dtype_f32_to_f16_n(q16, q->data, (size_t)q->n_elems);
    dtype_f32_to_f16_n(kn16, kn->data, (size_t)kn->n_elems);
    for (int i = 0; i < st.n_tensors; i++) {
        ts[i + 1] = st.tensors[i];
        if (&st.tensors[i] == q) {
            ts[i + 1].dtype = SAFETENSORS_DTYPE_F16;
            ts[i + 1].data = q16;
            ts[i + 1].nbytes /= 2;
        } else if (&st.tensors[i] == kn) {
            ts[i + 1].dtype = SAFETENSORS_DTYPE_F16;
            ts[i + 1].data = kn16;
            ts[i + 1].nbytes /= 2;
        }
    }
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CHECK_OK(safetensors_write(p, ts, st.n_tensors + 1, err, sizeof err), err);
    struct model_config c;
    struct weights w;
    if (load(d, &c, &w)) {
        const struct weights_layer *L = &w.layers[0];
        CHECK(L->q.dtype == SAFETENSORS_DTYPE_F16 && !memcmp(L->q.data, q16, (size_t)q->nbytes / 2));
        CHECK(L->k.dtype == SAFETENSORS_DTYPE_F32);
        CHECK(w.n_owned > 0); /* the F32 tensors after the 2-byte one were copied */
        const struct safetensors_tensor *k = safetensors_find(&st, "model.layers.0.self_attn.k_proj.weight");
        CHECK((uintptr_t)L->k.data % 4 == 0 && !memcmp(L->k.data, k->data, 64 * 64 * 4));
        for (int i = 0; i < 32; i++)
            CHECK(L->k_norm[i] == dtype_f16_to_f32(kn16[i]));
        CHECK(w.n_params == 131520); /* the unused tensor is not counted */
        weights_free(&w);
    }
    free(q16);
    free(kn16);
    free(ts);
    safetensors_free(&st);
}

/* ---------------------------------------------------------------- mkmodel */

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y)
            same = false;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static void mat_stats(const struct weights_mat *m, double *mean, double *sd)
{
    double s = 0, s2 = 0;
    int64_t n = m->rows * m->cols;
    for (int64_t i = 0; i < n; i++) {
        double v = m->dtype == SAFETENSORS_DTYPE_F32 ? ((const float *)m->data)[i]
                                                      : dtype_bf16_to_f32(((const uint16_t *)m->data)[i]);
        s += v;
        s2 += v * v;
    }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
}

static void test_mkmodel_tiny(void)
{
    char err[HR_ERRLEN] = "", a[1024], b[1024], pa[1100], pb[1100];
    snprintf(a, sizeof a, "%s/mk_a", tmp);
    snprintf(b, sizeof b, "%s/mk_b", tmp);
    struct mkmodel_opts o = {.shape = "tiny", .dtype = SAFETENSORS_DTYPE_BF16, .seed = 7, .out_dir = a};
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    struct model_config c;
    struct weights w;
    if (load(a, &c, &w)) {
        CHECK(c.arch == MODEL_ARCH_QWEN3 && c.vocab_size == 512 && c.hidden_size == 64 && c.head_dim == 32);
        CHECK(c.tie_word_embeddings && c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2);
        CHECK(c.has_temperature && c.has_top_p && c.has_top_k);
        CHECK(w.n_params == 131520 && w.weight_bytes == 131520 * 2 && w.embed.dtype == SAFETENSORS_DTYPE_BF16);
        double mean, sd;
        mat_stats(&w.embed, &mean, &sd);
        CHECK_MSG(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.002, "embed mean %g sd %g", mean, sd);
        mat_stats(&w.layers[1].down, &mean, &sd);
        CHECK_MSG(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.002, "down mean %g sd %g", mean, sd);
        double nm = 0;
        for (int i = 0; i < 64; i++) {
            CHECK(w.final_norm[i] > 0.8f && w.final_norm[i] < 1.2f);
            nm += w.final_norm[i];
        }
        CHECK(fabs(nm / 64 - 1.0) < 0.05);
        /* not a constant: neighbouring rows differ */
        CHECK(memcmp(w.embed.data, (const uint16_t *)w.embed.data + 64, 128) != 0);
        weights_free(&w);
    }
    /* same seed, same bytes; another seed, other bytes */
    o.out_dir = b;
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    CHECK(same_file(pa, pb));
    o.seed = 8;
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    CHECK(!same_file(pa, pb));

    /* f32 and sharded: the same values as one file, spread over several */
    o.seed = 7;
    o.max_shard_bytes = 40000;
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    struct weights w1, w2;
    struct model_config c1, c2;
    if (load(a, &c1, &w1)) {
        if (load(b, &c2, &w2)) {
            CHECK(w2.st.n_files > 2 && w1.st.n_files == 1);
            CHECK(!memcmp(w1.embed.data, w2.embed.data, 512 * 64 * 2));
            CHECK(!memcmp(w1.layers[1].up.data, w2.layers[1].up.data, 128 * 64 * 2));
            weights_free(&w2);
        }
        weights_free(&w1);
    }
    /* back to one file in the same directory: the stale index must not win */
    o.max_shard_bytes = 0;
    o.dtype = SAFETENSORS_DTYPE_F32;
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    if (load(b, &c2, &w2)) {
        CHECK(w2.st.n_files == 1 && w2.embed.dtype == SAFETENSORS_DTYPE_F32 && !strcmp(c2.dtype, "float32"));
        weights_free(&w2);
    }

    o.shape = "qwen3-1b";
    CHECK(mkmodel_write(&o, err, sizeof err) == HR_ERR_INVALID && HAS(err, "qwen3-1b"));
}

static void test_mkmodel_shapes(void)
{
    char err[HR_ERRLEN] = "";
    struct model_config c;
    CHECK_OK(mkmodel_shape_config("qwen3-0.6b", &c, err, sizeof err), err);
    CHECK(c.hidden_size == 1024 && c.n_layers == 28 && c.n_heads == 16 && c.n_kv_heads == 8 && c.head_dim == 128 &&
          c.intermediate_size == 3072 && c.vocab_size == 151936 && c.tie_word_embeddings &&
          c.max_position_embeddings == 40960 && c.eos_token_ids[0] == 151645 && c.bos_token_id == 151643);
    CHECK_OK(mkmodel_shape_config("qwen3-8b", &c, err, sizeof err), err);
    CHECK(c.hidden_size == 4096 && c.n_layers == 36 && c.n_heads == 32 && c.n_kv_heads == 8 &&
          c.intermediate_size == 12288 && !c.tie_word_embeddings);
    /* every name the usage lists is a shape */
    char names[256];
    snprintf(names, sizeof names, "%s", mkmodel_shape_names());
    int n_names = 0;
    for (char *sv = NULL, *t = strtok_r(names, " ", &sv); t; t = strtok_r(NULL, " ", &sv), n_names++)
        CHECK_MSG(mkmodel_shape_config(t, &c, err, sizeof err) == HR_OK, "listed shape '%s': %s", t, err);
    CHECK(n_names == 7);
    CHECK_OK(mkmodel_shape_config("qwen3-4b", &c, err, sizeof err), err);
    CHECK(c.hidden_size == 2560 && c.n_layers == 36 && c.n_heads == 32 && c.n_kv_heads == 8 &&
          c.intermediate_size == 9728 && c.tie_word_embeddings);
    CHECK_OK(mkmodel_shape_config("qwen3-32b", &c, err, sizeof err), err);
    CHECK(c.hidden_size == 5120 && c.n_layers == 64 && c.n_heads == 64 && c.n_kv_heads == 8 && c.head_dim == 128 &&
          c.intermediate_size == 25600 && !c.tie_word_embeddings && c.max_position_embeddings == 40960);
    CHECK_OK(mkmodel_shape_config("qwen3-30b-a3b", &c, err, sizeof err), err);
    CHECK(c.arch == MODEL_ARCH_QWEN3_MOE && c.hidden_size == 2048 && c.n_layers == 48 && c.n_heads == 32 &&
          c.n_kv_heads == 4 && c.n_experts == 128 && c.n_experts_per_tok == 8 && c.moe_intermediate_size == 768 &&
          c.norm_topk_prob && !c.tie_word_embeddings && c.layer_is_moe[0] && c.layer_is_moe[47]);
    CHECK_OK(mkmodel_shape_config("qwen3-moe-small", &c, err, sizeof err), err);
    CHECK(c.arch == MODEL_ARCH_QWEN3_MOE && c.head_dim == 128 && c.n_layers == 6 && c.n_experts == 32 &&
          c.moe_intermediate_size == 256 && c.layer_is_moe[1] && !c.layer_is_moe[2] && c.layer_is_moe[3]);
    /* its dense layer goes into config.json as mlp_only_layers and comes back from it */
    char out[1024];
    snprintf(out, sizeof out, "%s/mk_moe_small", tmp);
    struct mkmodel_opts o = {.shape = "qwen3-moe-small", .dtype = SAFETENSORS_DTYPE_BF16, .seed = 1,
                             .out_dir = out, .config_only = true};
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    struct model_config back;
    CHECK_OK(model_config_load(&back, out, err, sizeof err), err);
    int moe_layers = 0;
    for (int l = 0; l < back.n_layers; l++)
        moe_layers += back.layer_is_moe[l];
    CHECK_MSG(back.n_layers == 6 && moe_layers == 5 && !back.layer_is_moe[2], "%d layers, %d MoE", back.n_layers,
              moe_layers);
}

static void test_mkmodel_tokenizer(void)
{
    char err[HR_ERRLEN] = "", tk[1024], out[1024], p[1100];
    snprintf(tk, sizeof tk, "%s/tok", tmp);
    snprintf(out, sizeof out, "%s/mk_tok", tmp);
    mkdir(tk, 0755);
    testfs_write_str(tk, "tokenizer.json",
                     "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"<|endoftext|>\":700}},"
                     "\"added_tokens\":[{\"id\":800,\"content\":\"<|im_end|>\"},{\"id\":5,\"content\":\"x\"}]}");
    testfs_write_str(tk, "tokenizer_config.json", "{\"eos_token\":\"<|im_end|>\"}");
    struct mkmodel_opts o = {.shape = "tiny", .dtype = SAFETENSORS_DTYPE_BF16, .seed = 1, .out_dir = out,
                             .tokenizer_dir = tk};
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    struct model_config c;
    struct weights w;
    if (load(out, &c, &w)) {
        CHECK(c.vocab_size == 801 && w.embed.rows == 801);
        CHECK(c.bos_token_id == 700 && c.n_eos == 2 && c.eos_token_ids[0] == 800 && c.eos_token_ids[1] == 700);
        weights_free(&w);
    }
    snprintf(p, sizeof p, "%s/tokenizer_config.json", out);
    char q[1100];
    snprintf(q, sizeof q, "%s/tokenizer_config.json", tk);
    CHECK(same_file(p, q));
    /* a tokenizer smaller than the shape keeps the shape's vocabulary */
    testfs_write_str(tk, "tokenizer.json", "{\"model\":{\"vocab\":{\"a\":0}},\"added_tokens\":[]}");
    CHECK_OK(mkmodel_write(&o, err, sizeof err), err);
    CHECK_OK(model_config_load(&c, out, err, sizeof err), err);
    CHECK(c.vocab_size == 512 && c.bos_token_id == 1);
    /* broken tokenizers are refused naming the file */
    testfs_write_str(tk, "tokenizer.json", "{\"model\":{\"vocab\":{\"a\":-3}}}");
    CHECK(mkmodel_write(&o, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "tokenizer.json"));
    testfs_write_str(tk, "tokenizer.json", "{\"model\":{}}");
    CHECK(mkmodel_write(&o, err, sizeof err) == HR_ERR_FORMAT && HAS(err, "model.vocab"));
}

/* The dummy fill's element i, written out again from its definition (splitmix64 of
 * seed * K + i, the top 24 bits as a fraction, 2u - 1 scaled, rounded to bf16 to
 * nearest even) rather than through model/dummy_fill.h. */
static uint16_t expect_dummy(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x632be59bd9b4e019ull + i + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 40) / 16777216.0;
    float v = (float)(2.0 * u - 1.0) * 0.034641016f; /* 2u - 1 is exact in float too */
    uint32_t bits;
    memcpy(&bits, &v, 4);
    uint32_t lower = bits & 0xffff, up = bits >> 16;
    if (lower > 0x8000 || (lower == 0x8000 && (up & 1)))
        up++;
    return (uint16_t)up;
}

/* --load-format dummy: the same tensors, shapes and counts as a real checkpoint of the
 * config, no files; matrices generated on binding with the documented values. */
static void test_dummy(void)
{
    const char *fx[] = {"qwen3-tiny-bf16", "qwen3moe-tiny-bf16"};
    char err[HR_ERRLEN];
    for (int f = 0; f < 2; f++) {
        struct model_config c;
        struct weights real, dw;
        if (!load(fixture(fx[f]), &c, &real))
            return;
        CHECK_OK(weights_load_dummy(&dw, &c, 0, err, sizeof err), err);
        CHECK(dw.dummy && dw.st.n_files == 0);
        CHECK(dw.n_params == real.n_params && dw.weight_bytes == real.weight_bytes);
        CHECK(dw.n_active_params == real.n_active_params && dw.n_layers == real.n_layers);
        CHECK(dw.embed.data == NULL && dw.embed.fill_seed != 0 && dw.embed.dtype == SAFETENSORS_DTYPE_BF16);
        CHECK((dw.lm_head.fill_seed == dw.embed.fill_seed) == (bool)c.tie_word_embeddings);
        const struct weights_layer *L = &dw.layers[1], *R = &real.layers[1];
        CHECK(L->q.rows == R->q.rows && L->q.cols == R->q.cols && L->o.rows == R->o.rows);
        CHECK(L->q.fill_seed != L->k.fill_seed && L->q.fill_seed != dw.layers[0].q.fill_seed);
        CHECK(L->attn_norm[0] == 1.0f && L->k_norm[c.head_dim - 1] == 1.0f && dw.final_norm[3] == 1.0f);
        const struct weights_layer *L0 = &dw.layers[0], *R0 = &real.layers[0];
        CHECK(L0->is_moe == R0->is_moe && L->is_moe == R->is_moe);
        if (L0->is_moe) /* the MoE fixture: layer 0 sparse, layer 1 dense (mlp_only_layers) */
            CHECK(L0->experts[5].up.rows == R0->experts[5].up.rows && L0->router.rows == R0->router.rows &&
                  L0->experts[5].up.fill_seed != L0->experts[4].up.fill_seed);
        struct weights *h = NULL;
        CHECK_OK(weights_host_materialize(&dw, &h, err, sizeof err), err);
        if (h) {
            CHECK(h->host_copy && h->layers != dw.layers);
            const struct weights_mat *m = &h->layers[1].v;
            const uint16_t *v = m->data;
            int bad = 0, nonzero = 0;
            for (int64_t i = 0; v && i < m->rows * m->cols; i++) {
                bad += v[i] != expect_dummy(m->fill_seed, (uint64_t)i);
                nonzero += v[i] != 0;
            }
            CHECK_MSG(v && bad == 0 && nonzero > m->rows * m->cols / 2, "%d of %lld differ", bad,
                      (long long)(m->rows * m->cols));
            CHECK((h->lm_head.data == h->embed.data) == (bool)c.tie_word_embeddings);
            if (c.n_experts) {
                const struct weights_mat *e = &h->layers[0].experts[7].down;
                CHECK(e->data && ((const uint16_t *)e->data)[e->cols + 3] == expect_dummy(e->fill_seed, e->cols + 3));
            }
            weights_host_free(h);
        }
        weights_free(&dw);
        weights_free(&real);
    }
}

int main(void)
{
    if (!testfs_mkdtemp(tmp, sizeof tmp, "weights")) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_qwen3_tiny);
    TEST_RUN(test_qwen3_tiny_bf16);
    TEST_RUN(test_qwen3moe_tiny);
    TEST_RUN(test_qwen3moe_tiny_bf16_sharded);
    TEST_RUN(test_missing_shape_dtype);
    TEST_RUN(test_sharded_errors);
    TEST_RUN(test_fused_experts);
    TEST_RUN(test_mixed_dtypes_and_alignment);
    TEST_RUN(test_mkmodel_shapes);
    TEST_RUN(test_mkmodel_tiny);
    TEST_RUN(test_mkmodel_tokenizer);
    TEST_RUN(test_dummy);
    testfs_rmtree(tmp);
    TEST_END();
}
