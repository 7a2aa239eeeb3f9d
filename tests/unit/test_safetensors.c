/* safetensors: reading the fixtures, writing and reading back, and every malformed
 * header / data layout / shard index the loader must refuse with a message that
 * names the file and the tensor.  Expected values of the fixtures were read with
 * Python's json and struct modules, independently of this code. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "model/safetensors.h"
#include "test.h"
#include "testfs.h"

static char tmp[512];

#define HAS(s, sub) (strstr((s), (sub)) != NULL)
#define CHECK_ERR(call, want_st, ...)                                                                        \
    do {                                                                                                     \
        char err_[HR_ERRLEN] = "";                                                                           \
        struct safetensors st_;                                                                              \
        memset(&st_, 0, sizeof st_);                                                                         \
        enum hr_status got_ = call;                                                                          \
        CHECK_MSG(got_ == (want_st), "%s -> %s (%s)", #call, hr_status_str(got_), err_);                     \
        const char *subs_[] = {__VA_ARGS__};                                                                 \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++)                                       \
            CHECK_MSG(HAS(err_, subs_[k_]), "message '%s' lacks '%s'", err_, subs_[k_]);                     \
        CHECK(st_.n_tensors == 0 && st_.tensors == NULL && st_.files == NULL);                               \
        safetensors_free(&st_);                                                                              \
    } while (0)

static const char *tpath(const char *name)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return p;
}

/* Opens tmp/name as one file. */
#define OPEN_TMP(name, want, ...) \
    CHECK_ERR(safetensors_open_file(&st_, tpath(name), err_, sizeof err_), want, __VA_ARGS__)

/* ---------------------------------------------------------------- fixtures */

static void test_fixture_expected(void)
{
    char p[1024], err[HR_ERRLEN] = "";
    struct safetensors st;
    test_path(p, sizeof p, test_data_dir(), "fixtures/qwen3-tiny/expected.safetensors");
    CHECK_OK(safetensors_open_file(&st, p, err, sizeof err), err);
    CHECK(st.n_files == 1 && st.n_tensors == 16);
    for (int i = 1; i < st.n_tensors; i++)
        CHECK(strcmp(st.tensors[i - 1].name, st.tensors[i].name) < 0);
    const struct safetensors_tensor *t = safetensors_find(&st, "p1.input_ids");
    CHECK(t && t->dtype == SAFETENSORS_DTYPE_I32 && t->n_dims == 1 && t->shape[0] == 7 && t->nbytes == 28);
    if (t) {
        const int32_t want[7] = {11, 337, 326, 63, 87, 509, 75};
        CHECK(memcmp(t->data, want, sizeof want) == 0);
    }
    t = safetensors_find(&st, "p3.logits");
    CHECK(t && t->dtype == SAFETENSORS_DTYPE_F32 && t->n_dims == 2 && t->shape[0] == 70 && t->shape[1] == 512 &&
          t->n_elems == 70 * 512);
    t = safetensors_find(&st, "p0.greedy");
    CHECK(t && t->shape[0] == 12);
    if (t) {
        const int32_t want[12] = {200, 357, 470, 470, 200, 200, 303, 303, 303, 168, 168, 168};
        CHECK(memcmp(t->data, want, sizeof want) == 0);
    }
    CHECK(safetensors_find(&st, "p4.logits") == NULL);
    CHECK(safetensors_find(&st, "__metadata__") == NULL);
    safetensors_free(&st);
    safetensors_free(&st); /* idempotent */
}

static void test_fixture_sharded(void)
{
    char p[1024], err[HR_ERRLEN] = "";
    struct safetensors st;
    test_path(p, sizeof p, test_data_dir(), "fixtures/qwen3moe-tiny-bf16");
    CHECK_OK(safetensors_open_dir(&st, p, err, sizeof err), err);
    CHECK(st.n_files == 2 && st.n_tensors == 47);
    const struct safetensors_tensor *a = safetensors_find(&st, "lm_head.weight");
    const struct safetensors_tensor *b = safetensors_find(&st, "model.layers.0.mlp.experts.6.up_proj.weight");
    CHECK(a && b);
    if (a && b) {
        CHECK(HAS(st.files[a->file].path, "model-00001-of-00002.safetensors"));
        CHECK(HAS(st.files[b->file].path, "model-00002-of-00002.safetensors"));
        CHECK(a->dtype == SAFETENSORS_DTYPE_BF16 && a->shape[0] == 512 && a->shape[1] == 64);
        CHECK(b->shape[0] == 32 && b->shape[1] == 64);
        /* data points into the right mapping */
        CHECK((const uint8_t *)b->data >= st.files[b->file].map &&
              (const uint8_t *)b->data + b->nbytes <= st.files[b->file].map + st.files[b->file].size);
    }
    safetensors_free(&st);

    test_path(p, sizeof p, test_data_dir(), "fixtures/qwen3-tiny");
    CHECK_OK(safetensors_open_dir(&st, p, err, sizeof err), err);
    CHECK(st.n_files == 1 && st.n_tensors == 24);
    safetensors_free(&st);
}

/* ---------------------------------------------------------------- round trip */

static void test_write_read(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
    int32_t c = 42;
    struct safetensors_tensor ts[4] = {
        {.name = "zeta", .dtype = SAFETENSORS_DTYPE_F32, .n_dims = 2, .shape = {2, 3}, .data = a, .nbytes = 24},
        {.name = "alpha", .dtype = SAFETENSORS_DTYPE_BF16, .n_dims = 1, .shape = {3}, .data = b, .nbytes = 6},
        {.name = "scalar", .dtype = SAFETENSORS_DTYPE_I32, .n_dims = 0, .data = &c, .nbytes = 4},
        {.name = "empty", .dtype = SAFETENSORS_DTYPE_F16, .n_dims = 2, .shape = {0, 5}, .data = NULL, .nbytes = 0},
    };
    char err[HR_ERRLEN] = "";
    CHECK_OK(safetensors_write(tpath("rt.safetensors"), ts, 4, err, sizeof err), err);
    struct safetensors st;
    CHECK_OK(safetensors_open_file(&st, tpath("rt.safetensors"), err, sizeof err), err);
    CHECK(st.n_tensors == 4);
    CHECK(st.n_tensors == 4 && !strcmp(st.tensors[0].name, "alpha") && !strcmp(st.tensors[3].name, "zeta"));
    const struct safetensors_tensor *t = safetensors_find(&st, "zeta");
    CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 24 &&
          !memcmp(t->data, a, 24) && t->file == 0);
    t = safetensors_find(&st, "alpha");
    CHECK(t && t->dtype == SAFETENSORS_DTYPE_BF16 && !memcmp(t->data, b, 6));
    t = safetensors_find(&st, "scalar");
    CHECK(t && t->n_dims == 0 && t->n_elems == 1 && !memcmp(t->data, &c, 4));
    t = safetensors_find(&st, "empty");
    CHECK(t && t->n_elems == 0 && t->nbytes == 0);
    /* the data section starts 8-byte aligned, as the reference writer pads it */
    CHECK(st.n_files == 1 && st.files[0].map && ((8 + (st.files[0].map[0] | st.files[0].map[1] << 8)) % 8) == 0);
    safetensors_free(&st);

    /* the streaming writer refuses more or less data than declared */
    struct safetensors_writer wr;
    CHECK_OK(safetensors_writer_open(&wr, tpath("w.safetensors"), ts, 1, err, sizeof err), err);
    CHECK(safetensors_writer_put(&wr, a, 20, err, sizeof err) == HR_OK);
    CHECK(safetensors_writer_put(&wr, a, 8, err, sizeof err) == HR_ERR_INVALID);
    CHECK(safetensors_writer_close(&wr, err, sizeof err) == HR_ERR_INVALID && HAS(err, "w.safetensors"));
    safetensors_writer_free(&wr); /* zeroed by close: no-op */

    /* nbytes that disagree with the shape are refused */
    ts[0].nbytes = 20;
    CHECK(safetensors_write(tpath("bad.safetensors"), ts, 1, err, sizeof err) == HR_ERR_INVALID && HAS(err, "zeta"));
    struct safetensors_tensor dup[2] = {ts[1], ts[1]};
    CHECK(safetensors_write(tpath("bad.safetensors"), dup, 2, err, sizeof err) == HR_ERR_INVALID);
}

/* --no-mmap: the bytes are read into memory, so overwriting the file afterwards changes
 * nothing that was loaded; and a file that changed since it was opened is reported. */
static void test_read_into_memory(void)
{
    float a[4] = {1, 2, 3, 4};
    struct safetensors_tensor ts[1] = {
        {.name = "w", .dtype = SAFETENSORS_DTYPE_F32, .n_dims = 1, .shape = {4}, .data = a, .nbytes = 16}};
    char err[HR_ERRLEN] = "";
    CHECK_OK(safetensors_write(tpath("mem.safetensors"), ts, 1, err, sizeof err), err);
    struct safetensors st;
    safetensors_set_read_into_memory(true);
    CHECK_OK(safetensors_open_file(&st, tpath("mem.safetensors"), err, sizeof err), err);
    safetensors_set_read_into_memory(false);
    CHECK(st.n_files == 1 && st.files[0].in_memory);
    CHECK_OK(safetensors_check_unchanged(&st, err, sizeof err), err);
    /* overwrite in place with other bytes, then shorten it: what was loaded stays */
    testfs_write(tmp, "mem.safetensors", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                                         "0123456789abcdef", 80);
    CHECK(truncate(tpath("mem.safetensors"), 10) == 0);
    const struct safetensors_tensor *t = safetensors_find(&st, "w");
    CHECK(t && !memcmp(t->data, a, 16));
    CHECK(safetensors_check_unchanged(&st, err, sizeof err) == HR_ERR_IO && HAS(err, "changed while"));
    safetensors_free(&st);
    /* mapped (the default): the same check sees a change of size */
    CHECK_OK(safetensors_write(tpath("map.safetensors"), ts, 1, err, sizeof err), err);
    CHECK_OK(safetensors_open_file(&st, tpath("map.safetensors"), err, sizeof err), err);
    CHECK(!st.files[0].in_memory);
    CHECK_OK(safetensors_check_unchanged(&st, err, sizeof err), err);
    FILE *f = fopen(tpath("map.safetensors"), "ab");
    CHECK(f != NULL);
    if (f) {
        fputs("more", f);
        fclose(f);
    }
    CHECK(safetensors_check_unchanged(&st, err, sizeof err) == HR_ERR_IO && HAS(err, "map.safetensors"));
    safetensors_free(&st);
}

static void test_in_memory_parse(void)
{
    /* the fuzzable entry point on a buffer, with __metadata__ skipped */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
    uint8_t buf[256] = {0};
    size_t hl = strlen(h);
    buf[0] = (uint8_t)hl;
    memcpy(buf + 8, h, hl);
    struct safetensors st;
    memset(&st, 0, sizeof st);
    char err[HR_ERRLEN] = "";
    CHECK_OK(safetensors_parse(&st, buf, 8 + hl + 8, 3, "mem", err, sizeof err), err);
    CHECK(st.n_tensors == 1 && st.tensors[0].file == 3 && st.tensors[0].dtype == SAFETENSORS_DTYPE_F64);
    CHECK(st.n_tensors == 1 && st.tensors[0].data == buf + 8 + hl);
    /* a second image with the same tensor name is a duplicate */
    CHECK(safetensors_parse(&st, buf, 8 + hl + 8, 4, "mem2", err, sizeof err) == HR_ERR_FORMAT && HAS(err, "'x'") &&
          HAS(err, "mem2"));
    CHECK(st.n_tensors == 1);
    safetensors_free(&st);
}

/* ---------------------------------------------------------------- malformed files */

#define E(shape, offs) "{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}"

static void test_bad_lengths(void)
{
    testfs_write(tmp, "tiny.safetensors", "\x05\0\0", 3);
    OPEN_TMP("tiny.safetensors", HR_ERR_FORMAT, "tiny.safetensors", "too short");
    testfs_write(tmp, "empty.safetensors", "", 0);
    OPEN_TMP("empty.safetensors", HR_ERR_FORMAT, "empty.safetensors");
    testfs_write_st(tmp, "hlen.safetensors", "{}", 1000, 0);
    OPEN_TMP("hlen.safetensors", HR_ERR_FORMAT, "hlen.safetensors", "beyond the file");
    testfs_write_st(tmp, "huge.safetensors", "{}", 0x7fffffffffffff00ll, 4);
    OPEN_TMP("huge.safetensors", HR_ERR_FORMAT, "huge.safetensors", "beyond the file");
    OPEN_TMP("does-not-exist.safetensors", HR_ERR_NOT_FOUND, "does-not-exist.safetensors");
}

static void test_bad_json(void)
{
    testfs_write_st(tmp, "j1.safetensors", "{\"w\": ", -1, 0);
    OPEN_TMP("j1.safetensors", HR_ERR_FORMAT, "j1.safetensors", "not valid JSON");
    testfs_write_st(tmp, "j2.safetensors", "[1, 2]", -1, 0);
    OPEN_TMP("j2.safetensors", HR_ERR_FORMAT, "j2.safetensors", "not a JSON object");
    testfs_write_st(tmp, "j3.safetensors", "{\"w\": 5}", -1, 0);
    OPEN_TMP("j3.safetensors", HR_ERR_FORMAT, "j3.safetensors", "'w'", "not an object");
    testfs_write_st(tmp, "j4.safetensors", "{\"w\":" E("[1]", "[0,4]") ",\"w\":" E("[1]", "[4,8]") "}", -1, 8);
    OPEN_TMP("j4.safetensors", HR_ERR_FORMAT, "j4.safetensors", "duplicate");
    /* a header length that cuts the JSON short */
    testfs_write_st(tmp, "j5.safetensors", "{\"w\":" E("[1]", "[0,4]") "}", 10, 4);
    OPEN_TMP("j5.safetensors", HR_ERR_FORMAT, "j5.safetensors", "JSON");
}

static void test_bad_entries(void)
{
    struct {
        const char *file, *header, *sub;
        size_t data;
    } cases[] = {
        {"e1.safetensors", "{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", "unknown dtype 'Q4'", 4},
        {"e2.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "missing 'dtype'", 4},
        {"e3.safetensors", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", "'dtype'", 4},
        {"e4.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "missing 'shape'", 4},
        {"e5.safetensors", "{\"w\":" E("[-1]", "[0,4]") "}", "shape[0]", 4},
        {"e6.safetensors", "{\"w\":" E("[1.5]", "[0,4]") "}", "shape[0]", 4},
        {"e7.safetensors", "{\"w\":" E("[4294967296,4294967296,4294967296]", "[0,4]") "}", "overflow", 4},
        {"e8.safetensors", "{\"w\":" E("[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", "dimensions", 4},
        {"e9.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", "missing 'data_offsets'", 4},
        {"e10.safetensors", "{\"w\":" E("[1]", "[0]") "}", "data_offsets", 4},
        {"e11.safetensors", "{\"w\":" E("[1]", "[8,4]") "}", "reversed", 8},
        {"e12.safetensors", "{\"w\":" E("[8]", "[0,32]") "}", "beyond the data", 16},
        {"e13.safetensors", "{\"w\":" E("[2]", "[0,12]") "}", "need 8", 16},
        {"e14.safetensors", "{\"w\":" E("[\"2\"]", "[0,8]") "}", "shape[0]", 8},
        {"e15.safetensors", "{\"w\":" E("[2]", "[-8,0]") "}", "data_offsets", 8},
        {"e16.safetensors", "{\"w\":" E("[2]", "[0,18446744073709551615]") "}", "", 8},
        {"e17.safetensors", "{\"w\":" E("2", "[0,8]") "}", "'shape' is not an array", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        testfs_write_st(tmp, cases[i].file, cases[i].header, -1, cases[i].data);
        OPEN_TMP(cases[i].file, HR_ERR_FORMAT, cases[i].file, cases[i].sub);
    }
    /* a dtype of the format that hearth does not handle (FP8 checkpoints) */
    testfs_write_st(tmp, "fp8.safetensors", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                    -1, 4);
    OPEN_TMP("fp8.safetensors", HR_ERR_UNSUPPORTED, "fp8.safetensors", "'w'", "F8_E4M3 is not supported");
    /* every per-tensor message names the tensor */
    testfs_write_st(tmp, "named.safetensors", "{\"ok\":" E("[1]", "[0,4]") ",\"my.tensor\":" E("[2]", "[4,16]") "}",
                    -1, 16);
    OPEN_TMP("named.safetensors", HR_ERR_FORMAT, "named.safetensors", "'my.tensor'");
}

static void test_overlap_and_gaps(void)
{
    testfs_write_st(tmp, "ov.safetensors", "{\"a\":" E("[4]", "[0,16]") ",\"b\":" E("[4]", "[8,24]") "}", -1, 24);
    OPEN_TMP("ov.safetensors", HR_ERR_FORMAT, "ov.safetensors", "'a'", "'b'", "overlaps");
    testfs_write_st(tmp, "same.safetensors", "{\"a\":" E("[2]", "[0,8]") ",\"b\":" E("[2]", "[0,8]") "}", -1, 8);
    OPEN_TMP("same.safetensors", HR_ERR_FORMAT, "same.safetensors", "overlaps");

    /* gaps, unordered offsets, an empty tensor anywhere and trailing bytes are fine */
    char err[HR_ERRLEN] = "";
    struct safetensors st;
    testfs_write_st(tmp, "gap.safetensors",
                    "{\"b\":" E("[2]", "[16,24]") ",\"a\":" E("[2]", "[0,8]") ",\"z\":" E("[0]", "[4,4]") "}", -1, 40);
    CHECK_OK(safetensors_open_file(&st, tpath("gap.safetensors"), err, sizeof err), err);
    CHECK(st.n_tensors == 3);
    const struct safetensors_tensor *b = safetensors_find(&st, "b");
    CHECK(b && ((const uint8_t *)b->data)[0] == 16); /* the counting data pattern */
    safetensors_free(&st);
}

static void test_truncated_fixture(void)
{
    char p[1024];
    test_path(p, sizeof p, test_data_dir(), "fixtures/qwen3-tiny/model.safetensors");
    FILE *f = fopen(p, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static uint8_t buf[600000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n == 528560);
    /* lose the last byte: the tensor stored last (model.norm.weight) runs past the end */
    testfs_write(tmp, "cut1.safetensors", buf, n - 1);
    OPEN_TMP("cut1.safetensors", HR_ERR_FORMAT, "cut1.safetensors", "'model.norm.weight'", "truncated");
    /* cut inside the header */
    testfs_write(tmp, "cut2.safetensors", buf, 1000);
    OPEN_TMP("cut2.safetensors", HR_ERR_FORMAT, "cut2.safetensors", "beyond the file");
}

/* ---------------------------------------------------------------- shard index */

static void mkshard_dir(const char *sub, const char *index)
{
    char d[1024];
    snprintf(d, sizeof d, "%s/%s", tmp, sub);
    mkdir(d, 0755);
    testfs_write_st(d, "s1.safetensors", "{\"x\":" E("[2]", "[0,8]") ",\"y\":" E("[1]", "[8,12]") "}", -1, 12);
    testfs_write_st(d, "s2.safetensors", "{\"z\":" E("[1]", "[0,4]") "}", -1, 4);
    if (index)
        testfs_write_str(d, "model.safetensors.index.json", index);
}

#define OPEN_DIR(sub, want, ...)                                                                              \
    do {                                                                                                      \
        char d_[1024];                                                                                        \
        snprintf(d_, sizeof d_, "%s/%s", tmp, sub);                                                           \
        CHECK_ERR(safetensors_open_dir(&st_, d_, err_, sizeof err_), want, __VA_ARGS__);                      \
    } while (0)

static void test_index(void)
{
    char err[HR_ERRLEN] = "", d[1024];
    struct safetensors st;
    mkshard_dir("good", "{\"metadata\":{\"total_size\":16},\"weight_map\":{\"x\":\"s1.safetensors\","
                        "\"y\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}");
    snprintf(d, sizeof d, "%s/good", tmp);
    CHECK_OK(safetensors_open_dir(&st, d, err, sizeof err), err);
    CHECK(st.n_files == 2 && st.n_tensors == 3);
    const struct safetensors_tensor *z = safetensors_find(&st, "z");
    CHECK(z && HAS(st.files[z->file].path, "s2.safetensors"));
    safetensors_free(&st);

    mkshard_dir("missing", "{\"weight_map\":{\"x\":\"s1.safetensors\",\"w\":\"s1.safetensors\"}}");
    OPEN_DIR("missing", HR_ERR_FORMAT, "model.safetensors.index.json", "'w'", "s1.safetensors", "missing");
    mkshard_dir("wrongshard", "{\"weight_map\":{\"x\":\"s2.safetensors\",\"z\":\"s2.safetensors\"}}");
    OPEN_DIR("wrongshard", HR_ERR_FORMAT, "'x'", "s2.safetensors", "missing from its shard");
    mkshard_dir("nofile", "{\"weight_map\":{\"x\":\"s1.safetensors\",\"q\":\"s9.safetensors\"}}");
    OPEN_DIR("nofile", HR_ERR_NOT_FOUND, "s9.safetensors");
    mkshard_dir("escape", "{\"weight_map\":{\"x\":\"../good/s1.safetensors\"}}");
    OPEN_DIR("escape", HR_ERR_FORMAT, "'x'", "not a file name");
    mkshard_dir("badjson", "{\"weight_map\":");
    OPEN_DIR("badjson", HR_ERR_FORMAT, "model.safetensors.index.json", "JSON");
    mkshard_dir("nomap", "{\"metadata\":{}}");
    OPEN_DIR("nomap", HR_ERR_FORMAT, "model.safetensors.index.json", "'weight_map'");
    mkshard_dir("emptymap", "{\"weight_map\":{}}");
    OPEN_DIR("emptymap", HR_ERR_FORMAT, "no tensors");
    mkshard_dir("nonstr", "{\"weight_map\":{\"x\":1}}");
    OPEN_DIR("nonstr", HR_ERR_FORMAT, "weight_map['x']");

    /* the same tensor in two shards */
    mkshard_dir("dup", "{\"weight_map\":{\"x\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}");
    snprintf(d, sizeof d, "%s/dup", tmp);
    testfs_write_st(d, "s2.safetensors", "{\"z\":" E("[1]", "[0,4]") ",\"x\":" E("[2]", "[4,12]") "}", -1, 12);
    OPEN_DIR("dup", HR_ERR_FORMAT, "'x'", "also appears", "s1.safetensors");

    /* a broken shard is reported with the shard's name */
    mkshard_dir("badshard", "{\"weight_map\":{\"x\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}");
    snprintf(d, sizeof d, "%s/badshard", tmp);
    testfs_write_st(d, "s2.safetensors", "{\"z\":" E("[4]", "[0,16]") "}", -1, 4);
    OPEN_DIR("badshard", HR_ERR_FORMAT, "s2.safetensors", "'z'");

    /* neither file */
    mkdir(tpath("nothing"), 0755);
    OPEN_DIR("nothing", HR_ERR_NOT_FOUND, "nothing", "model.safetensors");
}

int main(void)
{
    if (!testfs_mkdtemp(tmp, sizeof tmp, "st")) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_fixture_expected);
    TEST_RUN(test_fixture_sharded);
    TEST_RUN(test_write_read);
    TEST_RUN(test_in_memory_parse);
    TEST_RUN(test_read_into_memory);
    TEST_RUN(test_bad_lengths);
    TEST_RUN(test_bad_json);
    TEST_RUN(test_bad_entries);
    TEST_RUN(test_overlap_and_gaps);
    TEST_RUN(test_truncated_fixture);
    TEST_RUN(test_index);
    testfs_rmtree(tmp);
    TEST_END();
}
