/* The CUDA kernels on the device, under every variant the card runs (sm90a, sm80):
 * batch invariance compared byte for byte (a GEMM row alone and among m rows at the
 * Qwen3-0.6B and -8B shapes and the 30B-A3B's dense ones, its experts in test_moe;
 * attention rows alone, with neighbours, chunked, over permuted blocks, run to run)
 * and parity with float64 host references within stated tolerances.  Without a GPU
 * (or a build without CUDA) every test reports skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifndef HEARTH_CUDA
int main(void)
{
    TEST_SKIP("cuda", "built without CUDA (CUDA=0 or no nvcc)");
    TEST_END();
}
#else

#include "dsample_ref.h"
#include "engine/dev_sample.h"
#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/dtype.h"
#include "model/dummy_fill.h"
#include "model/weights.h"

static const struct cuda_kernels *K; /* the variant under test */
static struct cuda_dev_info info;
static char err[HR_ERRLEN];

/* Device memory, or the test binary stops (counted as a failure by tests/run.sh). */
static void *dmust(size_t bytes)
{
    void *p = NULL;
    if (cuda_dev_alloc(&p, bytes, err, sizeof err) != HR_OK) {
        fprintf(stderr, "fatal: %s\n", err);
        exit(2);
    }
    return p;
}

static void *hmust(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "fatal: host alloc of %zu bytes\n", bytes);
        exit(2);
    }
    return p;
}

static void up(void *d, const void *h, size_t n)
{
    CHECK_OK(cuda_dev_copy(d, h, n, err, sizeof err), err);
}

static void down(void *h, const void *d, size_t n)
{
    CHECK_OK(cuda_dev_copy(h, d, n, err, sizeof err), err);
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) /* [0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static void fill_f32(float *p, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2 * urand() - 1) * scale);
}

/* ------------------------------------------------------------------ GEMM */

struct shape {
    const char *name;
    int n, k;
    enum cuda_epi epi;
};

static const struct shape shapes[] = {
    {"0.6b q", 2048, 1024, CUDA_EPI_STORE_F32},       {"0.6b k/v", 1024, 1024, CUDA_EPI_STORE_F32},
    {"0.6b o", 1024, 2048, CUDA_EPI_ADD_F32},         {"0.6b gate/up", 3072, 1024, CUDA_EPI_SWIGLU_BF16},
    {"0.6b down", 1024, 3072, CUDA_EPI_ADD_F32},      {"0.6b lm_head", 151936, 1024, CUDA_EPI_STORE_F32},
    {"8b q/o", 4096, 4096, CUDA_EPI_ADD_F32},         {"8b k/v", 1024, 4096, CUDA_EPI_STORE_BF16},
    {"8b gate/up", 12288, 4096, CUDA_EPI_SWIGLU_BF16}, {"8b down", 4096, 12288, CUDA_EPI_ADD_F32},
    {"8b lm_head", 151936, 4096, CUDA_EPI_STORE_F32},  {"30b-a3b o", 2048, 4096, CUDA_EPI_ADD_F32},
    /* the 30B-A3B's q, k and v as the backend launches them: stacked, one launch */
    {"30b-a3b qkv", 5120, 2048, CUDA_EPI_STORE_F32},   {"30b-a3b lm_head", 151936, 2048, CUDA_EPI_STORE_F32},
};
static const int row_counts[] = {1,  2,   3,   4,   5,   6,   7,   8,    9,   10,  11,  12,  13,  14,  15, 16,
                                 17, 31,  32,  33,  63,  64,  65,  127,  128, 129, 255, 256, 257, 448, 1024, 4097};
/* (448: gemm_width's 256-wide tile where 128 x 64 blocks would overflow the slots) */
#define GEMM_MAX_M 4097
#define GEMM_ALONE 257 /* rows 0..GEMM_ALONE-1 are also run alone */

static size_t out_elem(enum cuda_epi e)
{
    return e == CUDA_EPI_STORE_BF16 || e == CUDA_EPI_SWIGLU_BF16 ? 2 : 4;
}

/* The split's workspace and tickets of one shape, for up to max_m rows. */
struct gemm_ws {
    void *work;
    size_t work_bytes;
    int *tickets;
    size_t n_tickets;
};

static void gemm_ws_init(struct gemm_ws *ws, const struct shape *s, int max_m)
{
    ws->work_bytes = K->gemm_workspace(max_m, s->n, s->k, s->epi);
    ws->n_tickets = K->gemm_tickets(max_m, s->n, s->k, s->epi);
    ws->work = ws->work_bytes ? dmust(ws->work_bytes) : NULL;
    ws->tickets = ws->n_tickets ? dmust(ws->n_tickets * sizeof(int)) : NULL;
    if (ws->work) /* poisoned: the partials must not depend on what was there */
        CHECK_OK(cuda_dev_memset(ws->work, 0x7f, ws->work_bytes, err, sizeof err), err);
    if (ws->tickets)
        CHECK_OK(cuda_dev_memset(ws->tickets, 0, ws->n_tickets * sizeof(int), err, sizeof err), err);
}

static void gemm_ws_free(struct gemm_ws *ws)
{
    cuda_dev_free(ws->work);
    cuda_dev_free(ws->tickets);
}

/* x_rows: the rows x's buffer holds (cuda_gemm.x_rows; 0: m) */
static int run_gemm_x(const struct shape *s, void *y, const uint16_t *x, int m, int x_rows, const uint16_t *w,
                      const uint16_t *wu, const struct gemm_ws *ws)
{
    struct cuda_gemm g = {.epi = s->epi, .y = y, .x = x, .w = w, .w_up = wu, .m = m, .n = s->n, .k = s->k,
                          .x_rows = x_rows, .work = ws->work, .work_bytes = ws->work_bytes, .tickets = ws->tickets,
                          .n_tickets = ws->n_tickets};
    enum hr_status st = K->gemm(&g, NULL, err, sizeof err);
    CHECK_OK(st, err);
    return st == HR_OK;
}

static int run_gemm(const struct shape *s, void *y, const uint16_t *x, int m, const uint16_t *w, const uint16_t *wu,
                    const struct gemm_ws *ws)
{
    return run_gemm_x(s, y, x, m, 0, w, wu, ws);
}

/* SwiGLU's widened copy (y_f32: the f32 the backend's op promises, from the same
 * launch): every element is the bf16 output widened, and the bf16 output is the bytes
 * of a launch without the copy; at row counts that take each way of adding the K
 * split's parts (the combine kernel, a part a block, the fold). */
static void test_gemm_swiglu_wide(void)
{
    static const int ms[] = {1, 8, 64, 300};
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        if (s->epi != CUDA_EPI_SWIGLU_BF16)
            continue;
        int M = 300;
        uint16_t *w = dmust((size_t)s->n * s->k * 2), *wu = dmust((size_t)s->n * s->k * 2);
        uint16_t *x = dmust((size_t)M * s->k * 2), *y = dmust((size_t)M * s->n * 2);
        float *y32 = dmust((size_t)M * s->n * 4);
        CHECK_OK(cuda_dev_fill_bf16(w, (size_t)s->n * s->k, 21 + si, 0.05f, err, sizeof err), err);
        CHECK_OK(cuda_dev_fill_bf16(wu, (size_t)s->n * s->k, 121 + si, 0.05f, err, sizeof err), err);
        CHECK_OK(cuda_dev_fill_bf16(x, (size_t)M * s->k, 2001 + si, 1.0f, err, sizeof err), err);
        struct gemm_ws ws;
        gemm_ws_init(&ws, s, M);
        size_t ne = (size_t)M * s->n;
        uint16_t *ref = hmust(ne * 2), *got = hmust(ne * 2);
        float *wide = hmust(ne * 4);
        int bad_y = 0, bad_wide = 0;
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int m = ms[mi];
            size_t n = (size_t)m * s->n;
            run_gemm(s, y, x, m, w, wu, &ws);
            down(ref, y, n * 2);
            CHECK_OK(cuda_dev_memset(y, 0xff, n * 2, err, sizeof err), err);
            CHECK_OK(cuda_dev_memset(y32, 0xff, n * 4, err, sizeof err), err);
            struct cuda_gemm g = {.epi = s->epi, .y = y, .y_f32 = y32, .x = x, .w = w, .w_up = wu, .m = m,
                                  .n = s->n, .k = s->k, .work = ws.work, .work_bytes = ws.work_bytes,
                                  .tickets = ws.tickets, .n_tickets = ws.n_tickets};
            CHECK_OK(K->gemm(&g, NULL, err, sizeof err), err);
            down(got, y, n * 2);
            down(wide, y32, n * 4);
            bad_y += memcmp(got, ref, n * 2) != 0;
            for (size_t i = 0; i < n; i++) {
                float f = dtype_bf16_to_f32(got[i]);
                bad_wide += memcmp(&f, wide + i, 4) != 0;
            }
            checked++;
        }
        CHECK_MSG(bad_y == 0 && bad_wide == 0, "%s %s: %d row counts with other bf16 bytes, %d widened elements off",
                  K->name, s->name, bad_y, bad_wide);
        /* y_f32 belongs to SwiGLU alone */
        struct cuda_gemm bad = {.epi = CUDA_EPI_STORE_F32, .y = y32, .y_f32 = y32, .x = x, .w = w, .m = 1,
                                .n = s->n, .k = s->k, .work = ws.work, .work_bytes = ws.work_bytes,
                                .tickets = ws.tickets, .n_tickets = ws.n_tickets};
        CHECK(K->gemm(&bad, NULL, err, sizeof err) == HR_ERR_INVALID);
        free(ref);
        free(got);
        free(wide);
        gemm_ws_free(&ws);
        cuda_dev_free(w);
        cuda_dev_free(wu);
        cuda_dev_free(x);
        cuda_dev_free(y);
        cuda_dev_free(y32);
    }
    CHECK(checked > 0);
    printf("  %s SwiGLU's widened copy: %d shape x row-count cases, bf16 bytes unchanged, f32 = bf16 widened\n",
           K->name, checked);
}

/* A GEMM case's operands for up to max_m rows: weights (SwiGLU's up too) and x filled
 * on the device from the given seeds, y, and for the residual-add shapes y0, the start
 * every run's y is set to (gemm_ops_reset). */
struct gemm_ops {
    uint16_t *w, *wu, *x;
    void *y;
    float *y0; /* host, [max_m, n], or NULL */
    size_t row_bytes;
};

static void gemm_ops_init(struct gemm_ops *o, const struct shape *s, int max_m, uint64_t w_seed, uint64_t wu_seed,
                          uint64_t x_seed)
{
    size_t nk = (size_t)s->n * s->k;
    o->row_bytes = (size_t)s->n * out_elem(s->epi);
    o->w = dmust(nk * 2);
    o->x = dmust((size_t)max_m * s->k * 2);
    o->wu = NULL;
    CHECK_OK(cuda_dev_fill_bf16(o->w, nk, w_seed, 0.05f, err, sizeof err), err);
    if (s->epi == CUDA_EPI_SWIGLU_BF16) {
        o->wu = dmust(nk * 2);
        CHECK_OK(cuda_dev_fill_bf16(o->wu, nk, wu_seed, 0.05f, err, sizeof err), err);
    }
    CHECK_OK(cuda_dev_fill_bf16(o->x, (size_t)max_m * s->k, x_seed, 1.0f, err, sizeof err), err);
    o->y = dmust((size_t)max_m * o->row_bytes);
    o->y0 = NULL;
    if (s->epi == CUDA_EPI_ADD_F32) {
        o->y0 = hmust((size_t)max_m * o->row_bytes);
        fill_f32(o->y0, (size_t)max_m * s->n, 1.0);
    }
}

/* y's first m rows to the residual's start, or to 0xff bytes (a run must write them all) */
static void gemm_ops_reset(const struct gemm_ops *o, int m)
{
    if (o->y0)
        up(o->y, o->y0, (size_t)m * o->row_bytes);
    else
        CHECK_OK(cuda_dev_memset(o->y, 0xff, (size_t)m * o->row_bytes, err, sizeof err), err);
}

static void gemm_ops_free(struct gemm_ops *o)
{
    free(o->y0);
    cuda_dev_free(o->y);
    cuda_dev_free(o->x);
    cuda_dev_free(o->w);
    cuda_dev_free(o->wu);
}

/* Every row of y among m rows, m in row_counts, equals the same row of the 4097-row
 * product, and rows 0..256 equal the row computed alone (m = 1); bytes compared.  The
 * residual-add shapes start every run from the same y.  The sweep's launches say x's
 * buffer holds 4,097 rows (cuda_gemm.x_rows, as the backend's do), so their last x
 * copies read the buffer's rows past m where the 4,097-row product's is filled with
 * zeros: rows past m must not reach rows below it. */
static void test_gemm_rows(void)
{
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        struct gemm_ops o;
        gemm_ops_init(&o, s, GEMM_MAX_M, 11 + si, 101 + si, 1001 + si);
        const size_t row_bytes = o.row_bytes;
        void *y = o.y;
        const uint16_t *w = o.w, *wu = o.wu, *x = o.x;
        struct gemm_ws ws;
        gemm_ws_init(&ws, s, GEMM_MAX_M);
        unsigned char *ref = hmust((size_t)GEMM_MAX_M * row_bytes), *got = hmust((size_t)GEMM_MAX_M * row_bytes);
        if (o.y0)
            gemm_ops_reset(&o, GEMM_MAX_M);
        run_gemm(s, y, x, GEMM_MAX_M, w, wu, &ws);
        down(ref, y, (size_t)GEMM_MAX_M * row_bytes);
        int bad_m = 0, bad_alone = 0;
        for (size_t mi = 0; mi < sizeof row_counts / sizeof row_counts[0]; mi++) {
            int m = row_counts[mi];
            gemm_ops_reset(&o, m);
            run_gemm_x(s, y, x, m, GEMM_MAX_M, w, wu, &ws);
            down(got, y, (size_t)m * row_bytes);
            for (int r = 0; r < m; r++)
                if (memcmp(got + (size_t)r * row_bytes, ref + (size_t)r * row_bytes, row_bytes)) {
                    if (!bad_m++)
                        fprintf(stderr, "  %s %s: row %d of m=%d differs from m=%d\n", K->name, s->name, r, m,
                                GEMM_MAX_M);
                }
        }
        gemm_ops_reset(&o, GEMM_ALONE);
        for (int r = 0; r < GEMM_ALONE; r++)
            run_gemm(s, (char *)y + (size_t)r * row_bytes, x + (size_t)r * s->k, 1, w, wu, &ws);
        down(got, y, (size_t)GEMM_ALONE * row_bytes);
        for (int r = 0; r < GEMM_ALONE; r++)
            if (memcmp(got + (size_t)r * row_bytes, ref + (size_t)r * row_bytes, row_bytes) && !bad_alone++)
                fprintf(stderr, "  %s %s: row %d alone differs from among %d rows\n", K->name, s->name, r,
                        GEMM_MAX_M);
        CHECK_OK(cuda_dev_sync(err, sizeof err), err);
        CHECK_MSG(bad_m == 0 && bad_alone == 0, "%s %s (split %d): %d rows differ among m, %d alone", K->name,
                  s->name, K->gemm_split(s->n, s->k, s->epi), bad_m, bad_alone);
        printf("  %s %-13s n=%6d k=%5d tile %s split %d: %zu row counts + %d rows alone, bitwise equal: %s\n",
               K->name, s->name, s->n, s->k, K->gemm_tile(s->n, s->k, s->epi), K->gemm_split(s->n, s->k, s->epi),
               sizeof row_counts / sizeof row_counts[0], GEMM_ALONE, bad_m || bad_alone ? "NO" : "yes");
        free(ref);
        free(got);
        gemm_ws_free(&ws);
        gemm_ops_free(&o);
    }
}

/* A knob of the GEMM's launch set for a while (env_push), then as it was (env_pop);
 * the variant is prepared again after each (prepare reads the knobs). */
struct env_keep {
    const char *name;
    char text[32];
    bool had;
};

static void env_push(struct env_keep *k, const char *name, const char *val)
{
    const char *was = getenv(name);
    k->name = name;
    k->had = was != NULL;
    snprintf(k->text, sizeof k->text, "%s", k->had ? was : ""); /* was is gone after setenv */
    setenv(name, val, 1);
}

static void env_pop(const struct env_keep *k)
{
    if (k->had)
        setenv(k->name, k->text, 1);
    else
        unsetenv(k->name);
}

/* Launch settings compared (test_gemm_widths, test_gemm_fold_widths): two knobs, set to
 * each row of vals in turn (the variant prepared again each time); one shape's product at
 * rows of 300, 1, 37 and 130 under each, row by row against the 300-row product under the
 * first row.  Returns the cases compared; *bad counts the rows that differ. */
static int gemm_compare_settings(const struct shape *s, size_t si, const char *knob[2], const char *const (*vals)[2],
                                 size_t n_vals, const char *what, int *bad)
{
    static const int ms[] = {300, 1, 37, 130};
    const int M = 300;
    int cases = 0;
    struct gemm_ops o;
    gemm_ops_init(&o, s, M, 31 + si, 131 + si, 3001 + si);
    const size_t row_bytes = o.row_bytes;
    unsigned char *ref = hmust((size_t)M * row_bytes), *got = hmust((size_t)M * row_bytes);
    struct gemm_ws ws;
    gemm_ws_init(&ws, s, M);
    for (size_t vi = 0; vi < n_vals; vi++) {
        struct env_keep k0, k1;
        env_push(&k0, knob[0], vals[vi][0]);
        env_push(&k1, knob[1], vals[vi][1]);
        CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int m = ms[mi];
            gemm_ops_reset(&o, m);
            run_gemm(s, o.y, o.x, m, o.w, o.wu, &ws);
            down(vi == 0 && m == M ? ref : got, o.y, (size_t)m * row_bytes);
            if (vi == 0 && m == M)
                continue;
            for (int r = 0; r < m; r++)
                if (memcmp(got + (size_t)r * row_bytes, ref + (size_t)r * row_bytes, row_bytes) && !(*bad)++)
                    fprintf(stderr, "  %s %s: %s %s (%s %s), row %d of m=%d differs from %s %s\n", K->name, s->name,
                            what, vals[vi][0], knob[1], *vals[vi][1] ? vals[vi][1] : "unset", r, m, what, vals[0][0]);
            cases++;
        }
        env_pop(&k1);
        env_pop(&k0);
    }
    CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
    free(ref);
    free(got);
    gemm_ws_free(&ws);
    gemm_ops_free(&o);
    return cases;
}

/* gemm_compare_settings on every shape that keep admits (one at least), each shape's rows
 * equal under every setting.  Returns the cases compared; *n_shapes the shapes. */
static int gemm_compare_shapes(bool (*keep)(const struct shape *), const char *knob[2],
                               const char *const (*vals)[2], size_t n_vals, const char *what, int *n_shapes)
{
    int cases = 0;
    *n_shapes = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        if (!keep(s))
            continue;
        (*n_shapes)++;
        int bad = 0;
        cases += gemm_compare_settings(s, si, knob, vals, n_vals, what, &bad);
        CHECK_MSG(bad == 0, "%s %s: %d rows differ between %ss", K->name, s->name, bad, what);
    }
    CHECK(*n_shapes > 0);
    return cases;
}

static bool shape_unsplit(const struct shape *s) { return K->gemm_split(s->n, s->k, s->epi) == 1; }

/* a K split on the TMA tile: the narrow fold's shapes */
static bool shape_split_tma(const struct shape *s)
{
    return K->gemm_split(s->n, s->k, s->epi) != 1 && strcmp(K->gemm_tile(s->n, s->k, s->epi), "tma128") == 0;
}

/* The unsplit TMA tile at each width (HEARTH_CUDA_GEMM_WIDTH 16, 32, 64, 96, 128, 256;
 * 0: gemm_width picks one, and the block's rows, by m) gives the bytes of the 128-wide
 * tile: rows of 1, 37, 130 and 300 at every shape without a K split, compared with the
 * 300-row product at width 128 row by row.  The narrow widths run 64-row blocks, deep
 * where their blocks fit one an SM (m = 1 and 37 at 64 wide on 4,096 columns) and two an
 * SM elsewhere; 128 and 192 also on 192-row blocks (HEARTH_CUDA_GEMM_BM=192: three
 * consumer warpgroups; at 300 rows the second row tile's third has no rows).  (The row
 * sweep crosses the default rule's widths as m grows.) */
static void test_gemm_widths(void)
{
    if (strcmp(K->name, "sm90a") != 0) {
        printf("  %s: one tile width (the TMA tile is Hopper's)\n", K->name);
        return;
    }
    /* width, rows a block (HEARTH_CUDA_GEMM_BM; 192: the three-warpgroup build, 128 and
     * 192 wide only; 64 and 128 at widths 96 and 128: their deep builds where the blocks
     * fit one an SM, the two-an-SM ones elsewhere) */
    static const char *const widths[][2] = {{"128", ""},    {"96", ""},     {"256", ""}, {"192", ""},
                                            {"64", ""},     {"48", ""},     {"40", ""},  {"32", ""},
                                            {"16", ""},     {"0", ""},      {"192", "192"}, {"128", "192"},
                                            {"96", "64"},   {"128", "64"},  {"128", "128"}};
    const char *knob[2] = {"HEARTH_CUDA_GEMM_WIDTH", "HEARTH_CUDA_GEMM_BM"};
    int shapes_n;
    const int cases =
        gemm_compare_shapes(shape_unsplit, knob, widths, sizeof widths / sizeof widths[0], "tile width", &shapes_n);
    printf("  %s tile widths 16 / 32 / 40 / 48 / 64 / 96 / 128 / 192 / 256 / auto (40: not SwiGLU's, which then runs its "
           "automatic width), 128 and 192 on 192-row blocks, 96 and 128 on 64-row blocks, 128 on 128-row blocks: %d "
           "shapes without a split, %d width x row-count cases, "
           "bytes equal\n",
           K->name, shapes_n, cases);
}

/* The narrow fold (HEARTH_CUDA_GEMM_FOLD_WIDTH 16, 32, 64, 128: one 64-row block a
 * tile walking all the K split's parts into a running sum, deep) gives the bytes of the
 * split's other launches (a part a block, added by combine_kernel or in a cluster, or the
 * 128 x 128 fold; HEARTH_CUDA_GEMM_NFOLD_MAX=0): rows of 1, 37, 130 and 300 at every
 * shape with a K split, compared with the 300-row product without the narrow fold row by
 * row.  (The row sweep crosses the default rule's launches as m grows.) */
static void test_gemm_fold_widths(void)
{
    if (strcmp(K->name, "sm90a") != 0) {
        printf("  %s: no narrow fold (the TMA tile is Hopper's)\n", K->name);
        return;
    }
    /* "0": the reference, the split's launches without the narrow fold */
    static const char *const widths[][2] = {{"0", "0"}, {"16", "0"}, {"32", "0"}, {"64", "0"}, {"128", "0"}};
    const char *knob[2] = {"HEARTH_CUDA_GEMM_FOLD_WIDTH", "HEARTH_CUDA_GEMM_NFOLD_MAX"};
    int shapes_n;
    const int cases =
        gemm_compare_shapes(shape_split_tma, knob, widths, sizeof widths / sizeof widths[0], "fold width", &shapes_n);
    printf("  %s narrow fold 16 / 32 / 64 / 128 wide against a part a block: %d shapes with a split, %d width x "
           "row-count cases, bytes equal\n",
           K->name, shapes_n, cases);
}

/* Rows of a 33-row product against float64: f32 outputs within 1e-5 of the sum of
 * |x w| per element (and relative L2 error under 2e-5); bf16 outputs (SwiGLU, store
 * bf16) relative L2 error under 1e-2 (bf16's own rounding is 2^-9). */
static void test_gemm_reference(void)
{
    const int m = 33;
    const int check_rows[2] = {0, 32};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        size_t nk = (size_t)s->n * s->k, oe = out_elem(s->epi);
        int swiglu = s->epi == CUDA_EPI_SWIGLU_BF16;
        uint16_t *w = dmust(nk * 2), *wu = swiglu ? dmust(nk * 2) : NULL, *x = dmust((size_t)m * s->k * 2);
        CHECK_OK(cuda_dev_fill_bf16(w, nk, 7 + si, 0.05f, err, sizeof err), err);
        if (wu)
            CHECK_OK(cuda_dev_fill_bf16(wu, nk, 77 + si, 0.05f, err, sizeof err), err);
        CHECK_OK(cuda_dev_fill_bf16(x, (size_t)m * s->k, 777 + si, 1.0f, err, sizeof err), err);
        struct gemm_ws ws;
        gemm_ws_init(&ws, s, m);
        void *y = dmust((size_t)m * s->n * oe);
        float *y0 = hmust((size_t)m * s->n * 4);
        fill_f32(y0, (size_t)m * s->n, 1.0);
        if (s->epi == CUDA_EPI_ADD_F32)
            up(y, y0, (size_t)m * s->n * 4);
        run_gemm(s, y, x, m, w, wu, &ws);
        uint16_t *hw = hmust(nk * 2), *hwu = swiglu ? hmust(nk * 2) : NULL, *hx = hmust((size_t)m * s->k * 2);
        unsigned char *hy = hmust((size_t)m * s->n * oe);
        down(hw, w, nk * 2);
        if (hwu)
            down(hwu, wu, nk * 2);
        down(hx, x, (size_t)m * s->k * 2);
        down(hy, y, (size_t)m * s->n * oe);
        double worst = 0, e2 = 0, r2 = 0;
        int bad = 0;
        float *xf = hmust((size_t)s->k * 4);
        for (int ci = 0; ci < 2; ci++) {
            int r = check_rows[ci];
            dtype_bf16_to_f32_n(xf, hx + (size_t)r * s->k, (size_t)s->k);
            int step = s->n > 20000 ? 7 : 1; /* lm_head: every 7th column */
            for (int c = 0; c < s->n; c += step) {
                double acc = 0, mag = 0, acc2 = 0, mag2 = 0;
                const uint16_t *wr = hw + (size_t)c * s->k;
                for (int i = 0; i < s->k; i++) {
                    double p = (double)xf[i] * dtype_bf16_to_f32(wr[i]);
                    acc += p;
                    mag += fabs(p);
                }
                if (swiglu) {
                    const uint16_t *ur = hwu + (size_t)c * s->k;
                    for (int i = 0; i < s->k; i++) {
                        double p = (double)xf[i] * dtype_bf16_to_f32(ur[i]);
                        acc2 += p;
                        mag2 += fabs(p);
                    }
                }
                size_t at = (size_t)r * s->n + c;
                double want, got;
                if (swiglu) {
                    want = acc / (1 + exp(-acc)) * acc2;
                    got = dtype_bf16_to_f32(((uint16_t *)hy)[at]);
                } else if (s->epi == CUDA_EPI_STORE_BF16) {
                    want = acc;
                    got = dtype_bf16_to_f32(((uint16_t *)hy)[at]);
                } else {
                    want = s->epi == CUDA_EPI_ADD_F32 ? (double)y0[at] + acc : acc;
                    got = ((float *)hy)[at];
                    double tol = 1e-5 * (mag + (s->epi == CUDA_EPI_ADD_F32 ? fabs(y0[at]) : 0)) + 1e-30;
                    double d = fabs(got - want);
                    if (d / tol > worst)
                        worst = d / tol;
                    if (!(d <= tol) && !bad++)
                        fprintf(stderr, "  %s %s: y[%d,%d] = %.9g, float64 %.9g (tolerance %.3g)\n", K->name, s->name,
                                r, c, got, want, tol);
                }
                e2 += (got - want) * (got - want);
                r2 += want * want;
                (void)mag2;
            }
        }
        double rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
        /* f32: an unsplit K is one running sum (the 8B down's 12,288 steps measured 1.24e-5 on
         * the H200, its 8-part split 2.8e-6), still ~100x under the inputs' bf16 rounding */
        double lim = oe == 2 ? 1e-2 : 2e-5;
        CHECK_MSG(bad == 0 && rel <= lim, "%s %s: %d elements out of tolerance, relative L2 error %.3g (limit %.0e)",
                  K->name, s->name, bad, rel, lim);
        printf("  %s %-13s vs float64: relative L2 error %.3g (limit %.0e)%s\n", K->name, s->name, rel, lim,
               oe == 4 ? "" : " [bf16 output]");
        if (oe == 4)
            printf("      worst element at %.3f of its bound 1e-5 * sum|x w|\n", worst);
        free(xf);
        free(hw);
        free(hwu);
        free(hx);
        free(hy);
        free(y0);
        cuda_dev_free(y);
        gemm_ws_free(&ws);
        cuda_dev_free(x);
        cuda_dev_free(w);
        cuda_dev_free(wu);
    }
}

/* q, k and v in one launch (segments): each segment's rows are the bytes of the same
 * columns of one GEMM over the stacked matrix [q; k; v] (the launch the segments stand
 * for), at m = 1..129, 200, 257 and 448 and for rows alone; row 0 against float64. */
static void test_gemm_segments(void)
{
    static const struct {
        const char *name;
        int nq, nkv, k;
    } cases[] = {{"0.6b qkv", 2048, 1024, 1024}, {"8b qkv", 4096, 1024, 4096}, {"30b-a3b qkv", 4096, 512, 2048}};
    static const int ms[] = {1, 7, 16, 17, 64, 65, 129, 200, 257, 448};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nq = cases[ci].nq, nkv = cases[ci].nkv, k = cases[ci].k, n = nq + 2 * nkv, M = 448;
        struct shape whole = {cases[ci].name, n, k, CUDA_EPI_STORE_F32};
        uint16_t *w = dmust((size_t)n * k * 2), *x = dmust((size_t)M * k * 2);
        CHECK_OK(cuda_dev_fill_bf16(w, (size_t)n * k, 31 + ci, 0.05f, err, sizeof err), err);
        CHECK_OK(cuda_dev_fill_bf16(x, (size_t)M * k, 331 + ci, 1.0f, err, sizeof err), err);
        struct gemm_ws ws;
        gemm_ws_init(&ws, &whole, M);
        float *ycat = dmust((size_t)M * n * 4), *yq = dmust((size_t)M * nq * 4), *yk = dmust((size_t)M * nkv * 4),
              *yv = dmust((size_t)M * nkv * 4);
        run_gemm(&whole, ycat, x, M, w, NULL, &ws);
        float *ref = hmust((size_t)M * n * 4), *got = hmust((size_t)M * n * 4);
        down(ref, ycat, (size_t)M * n * 4);
        int bad = 0, runs = 0;
        /* the default launches (the fit rule's: the 8B's at 129-256 rows 128 x 128, deep),
         * then those before it (HEARTH_CUDA_GEMM_FIT_ROWS=0, HEARTH_CUDA_GEMM_WG3=1) */
        for (int old = 0; old < 2; old++) {
            struct env_keep kf, k3;
            if (old) {
                env_push(&kf, "HEARTH_CUDA_GEMM_FIT_ROWS", "0");
                env_push(&k3, "HEARTH_CUDA_GEMM_WG3", "1");
                CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
            }
            for (size_t mi = 0; mi <= sizeof ms / sizeof ms[0]; mi++) {
                int m = mi < sizeof ms / sizeof ms[0] ? ms[mi] : 1, r0 = mi < sizeof ms / sizeof ms[0] ? 0 : 100;
                struct cuda_gemm g = {.epi = CUDA_EPI_STORE_F32, .y = yq, .x = x + (size_t)r0 * k, .w = w, .m = m,
                                      .n = nq, .k = k, .work = ws.work, .work_bytes = ws.work_bytes,
                                      .tickets = ws.tickets, .n_tickets = ws.n_tickets, .n_more = 2,
                                      .more_w = {w + (size_t)nq * k, w + (size_t)(nq + nkv) * k},
                                      .more_y = {yk, yv}, .more_n = {nkv, nkv}};
                CHECK_OK(cuda_dev_memset(yq, 0xff, (size_t)m * nq * 4, err, sizeof err), err);
                CHECK_OK(K->gemm(&g, NULL, err, sizeof err), err);
                runs++;
                const float *segs[3] = {yq, yk, yv};
                const int off[3] = {0, nq, nq + nkv}, wid[3] = {nq, nkv, nkv};
                for (int sg = 0; sg < 3; sg++) {
                    down(got, segs[sg], (size_t)m * wid[sg] * 4);
                    for (int r = 0; r < m; r++)
                        if (memcmp(got + (size_t)r * wid[sg], ref + (size_t)(r0 + r) * n + off[sg],
                                   (size_t)wid[sg] * 4) &&
                            !bad++)
                            fprintf(stderr, "  %s %s: segment %d row %d of m=%d differs from the stacked GEMM%s\n",
                                    K->name, cases[ci].name, sg, r0 + r, m, old ? " (the old rule)" : "");
                }
            }
            if (old) {
                env_pop(&k3);
                env_pop(&kf);
                CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
            }
        }
        /* row 0 of the stacked product against float64 (every 5th column) */
        uint16_t *hw = hmust((size_t)n * k * 2), *hx = hmust((size_t)k * 2);
        down(hw, w, (size_t)n * k * 2);
        down(hx, x, (size_t)k * 2);
        int bad64 = 0;
        for (int c = 0; c < n; c += 5) {
            double acc = 0, mag = 0;
            for (int i = 0; i < k; i++) {
                double pr = (double)dtype_bf16_to_f32(hx[i]) * dtype_bf16_to_f32(hw[(size_t)c * k + i]);
                acc += pr;
                mag += fabs(pr);
            }
            bad64 += !(fabs(ref[c] - acc) <= 1e-5 * mag + 1e-30);
        }
        CHECK_MSG(bad == 0 && bad64 == 0, "%s %s: %d segment rows differ, %d elements off float64", K->name,
                  cases[ci].name, bad, bad64);
        printf("  %s %s: segments = the stacked GEMM (tile %s split %d) at %d launches, bitwise: %s; float64 ok\n",
               K->name, cases[ci].name, K->gemm_tile(n, k, CUDA_EPI_STORE_F32), K->gemm_split(n, k, CUDA_EPI_STORE_F32),
               runs, bad ? "NO" : "yes");
        free(hw);
        free(hx);
        free(ref);
        free(got);
        gemm_ws_free(&ws);
        cuda_dev_free(ycat);
        cuda_dev_free(yq);
        cuda_dev_free(yk);
        cuda_dev_free(yv);
        cuda_dev_free(w);
        cuda_dev_free(x);
    }
}

/* A bad shape is an error with a message, not a launch. */
static void test_gemm_bad_args(void)
{
    struct cuda_gemm g = {.epi = CUDA_EPI_STORE_F32, .y = (void *)16, .x = (void *)16, .w = (void *)16, .m = 4,
                          .n = 64, .k = 96};
    CHECK(K->gemm(&g, NULL, err, sizeof err) == HR_ERR_INVALID);
    g.k = 64;
    g.n = 63;
    CHECK(K->gemm(&g, NULL, err, sizeof err) == HR_ERR_INVALID);
    g.n = 64;
    g.epi = CUDA_EPI_SWIGLU_BF16; /* no up matrix */
    CHECK(K->gemm(&g, NULL, err, sizeof err) == HR_ERR_INVALID);
    g.epi = CUDA_EPI_STORE_F32; /* a segment without its matrix; too many segments */
    g.n_more = 1;
    CHECK(K->gemm(&g, NULL, err, sizeof err) == HR_ERR_INVALID);
    g.n_more = CUDA_GEMM_SEGS;
    CHECK(K->gemm(&g, NULL, err, sizeof err) == HR_ERR_INVALID);
}

/* ------------------------------------------------------------------ RMSNorm, embedding */

/* Against float64; each row the same bytes alone as in the launch, and gathered.  The
 * rows a launch holds past one block each (a block then takes several, the next one's
 * loads ahead) and every register build (rows of up to 1,024, 2,048, 4,096 and 8,192
 * floats, and longer: a loop). */
static void rmsnorm_case(int rows, int dim)
{
    size_t n = (size_t)rows * dim;
    float *hx = hmust(n * 4), *hw = hmust(dim * 4), *hy = hmust(n * 4), *hy1 = hmust(n * 4);
    uint16_t *hb = hmust(n * 2);
    fill_f32(hx, n, 3.0);
    fill_f32(hw, dim, 1.5);
    float *x = dmust(n * 4), *w = dmust(dim * 4), *y = dmust(n * 4);
    uint16_t *yb = dmust(n * 2);
    int32_t *rows_d = dmust((size_t)rows * 4), *perm = hmust((size_t)rows * 4);
    up(x, hx, n * 4);
    up(w, hw, dim * 4);
    struct cuda_rmsnorm a = {.y_f32 = y, .y_bf16 = yb, .x = x, .w = w, .rows = rows, .dim = dim, .eps = 1e-6f};
    CHECK_OK(K->rmsnorm(&a, NULL, err, sizeof err), err);
    down(hy, y, n * 4);
    down(hb, yb, n * 2);
    int bad = 0, badb = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += (double)hx[r * dim + i] * hx[r * dim + i];
        double inv = 1 / sqrt(ss / dim + 1e-6);
        for (int i = 0; i < dim; i++) {
            double want = hw[i] * (hx[r * dim + i] * inv);
            float got = hy[r * dim + i];
            bad += !(fabs(got - want) <= 1e-5 * fabs(want) + 1e-7);
            badb += hb[r * dim + i] != dtype_f32_to_bf16(got);
        }
    }
    CHECK_MSG(bad == 0, "%d x %d: %d elements off float64 by more than 1e-5 relative", rows, dim, bad);
    CHECK_MSG(badb == 0, "%d x %d: %d bf16 outputs are not the f32 output rounded", rows, dim, badb);
    /* alone, and gathered in a permuted order: the same bytes */
    int diff = 0;
    for (int r = 0; r < rows; r += rows > 100 ? 97 : 1) {
        struct cuda_rmsnorm one = {.y_f32 = y, .x = x + (size_t)r * dim, .w = w, .rows = 1, .dim = dim, .eps = 1e-6f};
        CHECK_OK(K->rmsnorm(&one, NULL, err, sizeof err), err);
        down(hy1, y, (size_t)dim * 4);
        diff += memcmp(hy1, hy + (size_t)r * dim, (size_t)dim * 4) != 0;
    }
    for (int r = 0; r < rows; r++)
        perm[r] = (r * 11 + 5) % rows;
    up(rows_d, perm, (size_t)rows * 4);
    struct cuda_rmsnorm gat = {.y_f32 = y, .x = x, .x_rows = rows_d, .w = w, .rows = rows, .dim = dim, .eps = 1e-6f};
    CHECK_OK(K->rmsnorm(&gat, NULL, err, sizeof err), err);
    down(hy1, y, n * 4);
    for (int r = 0; r < rows; r++)
        diff += memcmp(hy1 + (size_t)r * dim, hy + (size_t)perm[r] * dim, (size_t)dim * 4) != 0;
    CHECK_MSG(diff == 0, "%d x %d: %d rows differ alone or gathered", rows, dim, diff);
    free(perm);
    free(hx);
    free(hw);
    free(hy);
    free(hy1);
    free(hb);
    cuda_dev_free(x);
    cuda_dev_free(w);
    cuda_dev_free(y);
    cuda_dev_free(yb);
    cuda_dev_free(rows_d);
}

static void test_rmsnorm(void)
{
    rmsnorm_case(37, 4096);
    rmsnorm_case(3000, 1024);
    rmsnorm_case(2500, 2048);
    rmsnorm_case(1500, 4096);
    rmsnorm_case(400, 5120);
    rmsnorm_case(1000, 9000);
}

static void test_embed(void)
{
    const int vocab = 1000, dim = 1024, n_tok = 9;
    int32_t tok[9] = {0, 999, 5, 5, 123, -1, 1000, 42, 7};
    uint16_t *t = dmust((size_t)vocab * dim * 2), *ht = hmust((size_t)vocab * dim * 2);
    CHECK_OK(cuda_dev_fill_bf16(t, (size_t)vocab * dim, 5, 2.0f, err, sizeof err), err);
    down(ht, t, (size_t)vocab * dim * 2);
    int32_t *td = dmust(sizeof tok);
    up(td, tok, sizeof tok);
    float *o = dmust((size_t)n_tok * dim * 4), *ho = hmust((size_t)n_tok * dim * 4);
    struct cuda_embed a = {.out = o, .table = t, .tokens = td, .n_tok = n_tok, .dim = dim, .vocab = vocab};
    CHECK_OK(K->embed(&a, NULL, err, sizeof err), err);
    down(ho, o, (size_t)n_tok * dim * 4);
    int bad = 0;
    for (int i = 0; i < n_tok; i++)
        for (int d = 0; d < dim; d++) {
            float want = tok[i] >= 0 && tok[i] < vocab ? dtype_bf16_to_f32(ht[(size_t)tok[i] * dim + d]) : 0.0f;
            bad += memcmp(&want, &ho[(size_t)i * dim + d], 4) != 0;
        }
    CHECK_MSG(bad == 0, "%d embedding elements differ", bad);
    free(ht);
    free(ho);
    cuda_dev_free(t);
    cuda_dev_free(td);
    cuda_dev_free(o);
}

/* ------------------------------------------------------------------ attention */

#define HD 128
#define BS 16
#define NB 256
#define NL 2

struct kv_fixture {
    struct cuda_kv kv;
    size_t slab_elems;
};

static void kv_fixture_init(struct kv_fixture *f, int nkv)
{
    f->kv = (struct cuda_kv){.n_layers = NL, .n_blocks = NB, .n_kv_heads = nkv, .block_size = BS, .head_dim = HD};
    f->slab_elems = (size_t)NL * NB * 2 * nkv * BS * HD;
    f->kv.slab = dmust(f->slab_elems * 2);
    CHECK_OK(cuda_dev_fill_bf16(f->kv.slab, f->slab_elems, 99 + nkv, 1.0f, err, sizeof err), err);
}

/* A host batch row: query_len tokens at positions context .. context + query_len - 1. */
struct hrow {
    const int32_t *table;
    int n_table, context, query;
};

struct dbatch {
    struct cuda_attn_batch b;
    void *mem[6];
};

/* Uploads rows as the attention kernels read them; query blocks of block_tokens. */
static void dbatch_init(struct dbatch *d, const struct hrow *rows, int n_rows, int group)
{
    int n_tok = 0, n_tab = 0, n_qb = 0, bt = cuda_attn_block_tokens(group), max_kv = 0, max_qtok = 0;
    for (int r = 0; r < n_rows; r++) {
        n_tok += rows[r].query;
        n_tab += rows[r].n_table;
        n_qb += (rows[r].query + bt - 1) / bt;
        int qt = rows[r].query < bt ? rows[r].query : bt;
        max_qtok = qt > max_qtok ? qt : max_qtok;
    }
    int32_t *pos = hmust(n_tok * 4), *tr = hmust(n_tok * 4), *rt = hmust(n_rows * 4), *tab = hmust(n_tab * 4);
    int32_t *qb = hmust(n_qb * 8);
    int64_t *slots = hmust(n_tok * 8);
    int t = 0, tb = 0, q = 0, n_dec = 0;
    /* the decode walk's query blocks first, as the backend lays them out */
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0, t0 = 0; r < n_rows; t0 += rows[r].query, r++)
            q = cuda_attn_row_qblocks(qb, q, t0, rows[r].query, group, pass == 0);
        if (pass == 0)
            n_dec = q;
    }
    for (int r = 0; r < n_rows; r++) {
        rt[r] = tb;
        memcpy(tab + tb, rows[r].table, rows[r].n_table * 4);
        tb += rows[r].n_table;
        for (int i = 0; i < rows[r].query; i++) {
            int p = rows[r].context + i;
            pos[t] = p;
            tr[t] = r;
            slots[t] = (int64_t)rows[r].table[p / BS] * BS + p % BS;
            t++;
            max_kv = p + 1 > max_kv ? p + 1 : max_kv;
        }
    }
    void *dp = dmust(n_tok * 4), *dtr = dmust(n_tok * 4), *drt = dmust(n_rows * 4), *dtab = dmust(n_tab * 4),
         *dqb = dmust(n_qb * 8), *ds = dmust(n_tok * 8);
    up(dp, pos, n_tok * 4);
    up(dtr, tr, n_tok * 4);
    up(drt, rt, n_rows * 4);
    up(dtab, tab, n_tab * 4);
    up(dqb, qb, n_qb * 8);
    up(ds, slots, n_tok * 8);
    d->b = (struct cuda_attn_batch){.n_tok = n_tok, .positions = dp, .slots = ds, .tok_row = dtr, .row_table = drt,
                                    .tables = dtab, .n_qblocks = n_qb, .qblocks = dqb, .max_kv = max_kv,
                                    .max_qtok = max_qtok, .n_dec = n_dec};
    void *m[6] = {dp, dtr, drt, dtab, dqb, ds};
    memcpy(d->mem, m, sizeof m);
    free(pos);
    free(tr);
    free(rt);
    free(tab);
    free(qb);
    free(slots);
}

static void dbatch_free(struct dbatch *d)
{
    for (int i = 0; i < 6; i++)
        cuda_dev_free(d->mem[i]);
}

static int g_attn_chunk; /* run_attn's cuda_attention.chunk (0: the launch picks) */
static int g_attn_qs;    /* run_attn's cuda_attention.q_smem (0: HEARTH_CUDA_ATTN_QS) */

/* out[n_tok, nh, HD] f32 of the batch's query rows q[n_tok, nh, HD] (device). */
static void run_attn(const struct kv_fixture *f, const struct dbatch *d, const float *q, float *out, uint16_t *outb,
                     int nh)
{
    size_t wb = K->attn_workspace(d->b.n_tok, nh, HD, d->b.max_kv);
    void *work = wb ? dmust(wb) : NULL;
    /* one ticket array for every launch (zeroed once), checked zero after each: a
     * launch that left a ticket set would throw the next one's merge off */
    size_t nt = (size_t)d->b.n_qblocks * f->kv.n_kv_heads;
    int *tickets = dmust(nt * sizeof(int)), *ht = hmust(nt * sizeof(int));
    CHECK_OK(cuda_dev_memset(tickets, 0, nt * sizeof(int), err, sizeof err), err);
    struct cuda_attention a = {.out_f32 = out, .out_bf16 = outb, .q = q, .n_heads = nh, .layer = 1,
                               .scale = (float)(1.0 / sqrt((double)HD)), .kv = f->kv, .b = &d->b, .work = work,
                               .work_bytes = wb, .tickets = tickets, .n_tickets = nt, .chunk = g_attn_chunk,
                               .q_smem = g_attn_qs};
    for (int rep = 0; rep < 2; rep++) /* twice: the second launch uses the tickets the first left */
        CHECK_OK(K->attention(&a, NULL, err, sizeof err), err);
    CHECK_OK(cuda_dev_sync(err, sizeof err), err);
    down(ht, tickets, nt * sizeof(int));
    size_t set = 0;
    for (size_t i = 0; i < nt; i++)
        set += ht[i] != 0;
    CHECK_MSG(set == 0, "attention left %zu of %zu tickets set", set, nt);
    free(ht);
    cuda_dev_free(tickets);
    cuda_dev_free(work);
}

/* One row of L positions whose queries are qrow[L, nh, HD] (host): every way of
 * running it gives the bytes of the one-chunk prefill, and that is float64's result
 * within 1e-4 (K, V bf16; q, scores, softmax and sums in f32). */
static void attn_case(int nh, int nkv, int L)
{
    struct kv_fixture f;
    kv_fixture_init(&f, nkv);
    int group = nh / nkv, nt = (L + BS - 1) / BS;
    size_t rowf = (size_t)nh * HD;
    int32_t *table = hmust(NB * 4), *table2 = hmust(NB * 4), *tab_b = hmust(NB * 4);
    /* row A: nt distinct blocks in a scrambled order; row B: others */
    for (int i = 0; i < NB; i++)
        table[i] = (i * 37 + 11) % NB;
    for (int i = 0; i < NB; i++)
        tab_b[i] = table[NB - 1 - i];
    float *hq = hmust((size_t)L * rowf * 4), *ref = hmust((size_t)L * rowf * 4), *got = hmust((size_t)L * rowf * 4);
    fill_f32(hq, (size_t)L * rowf, 1.0);
    float *q = dmust((size_t)(L + 64) * rowf * 4), *out = dmust((size_t)(L + 64) * rowf * 4);
    uint16_t *outb = dmust((size_t)L * rowf * 2), *hb = hmust((size_t)L * rowf * 2);
    up(q, hq, (size_t)L * rowf * 4);

    struct hrow full = {table, nt, 0, L};
    struct dbatch d;
    dbatch_init(&d, &full, 1, group);
    run_attn(&f, &d, q, out, outb, nh);
    dbatch_free(&d);
    down(ref, out, (size_t)L * rowf * 4);
    down(hb, outb, (size_t)L * rowf * 2);
    int bad_b = 0;
    for (size_t i = 0; i < (size_t)L * rowf; i++)
        bad_b += hb[i] != dtype_f32_to_bf16(ref[i]);
    CHECK_MSG(bad_b == 0, "%d bf16 outputs are not the f32 output rounded", bad_b);

    /* run to run */
    dbatch_init(&d, &full, 1, group);
    CHECK_OK(cuda_dev_memset(out, 0xff, (size_t)L * rowf * 4, err, sizeof err), err);
    run_attn(&f, &d, q, out, NULL, nh);
    dbatch_free(&d);
    down(got, out, (size_t)L * rowf * 4);
    CHECK_MSG(memcmp(got, ref, (size_t)L * rowf * 4) == 0, "G=%d: a second run differs", group);

    /* a prompt's blocks walking 1, 2, 3 or all of their splits (the launch picks one or
     * all by its block count), with q in registers and from shared memory (q_smem) */
    static const int walks[] = {1, 2, 3, 64};
    for (int qs = -1; qs <= 1; qs += 2)
        for (size_t wi = 0; wi < sizeof walks / sizeof walks[0]; wi++) {
            g_attn_chunk = walks[wi];
            g_attn_qs = qs;
            dbatch_init(&d, &full, 1, group);
            CHECK_OK(cuda_dev_memset(out, 0xff, (size_t)L * rowf * 4, err, sizeof err), err);
            run_attn(&f, &d, q, out, NULL, nh);
            dbatch_free(&d);
            g_attn_chunk = g_attn_qs = 0;
            down(got, out, (size_t)L * rowf * 4);
            CHECK_MSG(memcmp(got, ref, (size_t)L * rowf * 4) == 0,
                      "G=%d L=%d: blocks walking %d splits each (q_smem %d) differ", group, L, walks[wi], qs);
        }

    /* prompt chunks (1 and 3: blocks of at most 16 rows, the split walk's; a block of 3
     * tokens holds three positions); the longer ones both ways of holding q */
    static const int chunks[] = {1, 3, 15, 16, 17, 512};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
        for (int qs = -1; qs <= 1; qs += 2) {
            int c = chunks[ci], bad = 0;
            if (c * group <= 16 && qs > 0)
                continue; /* no block of the walk q_smem changes */
            g_attn_qs = qs;
            for (int p = 0; p < L; p += c) {
                int qn = L - p < c ? L - p : c;
                struct hrow part = {table, nt, p, qn};
                dbatch_init(&d, &part, 1, group);
                run_attn(&f, &d, q + (size_t)p * rowf, out, NULL, nh);
                dbatch_free(&d);
                down(got, out, (size_t)qn * rowf * 4);
                bad += memcmp(got, ref + (size_t)p * rowf, (size_t)qn * rowf * 4) != 0;
            }
            g_attn_qs = 0;
            CHECK_MSG(bad == 0, "G=%d L=%d: %d chunks of %d (q_smem %d) differ from the one-chunk prefill", group, L,
                      bad, c, qs);
        }

    /* with neighbours: decode tokens of row A at probe positions amid a prefill row B
     * and a short decode row, in both orders */
    static const int probes[] = {0, 1, 15, 16, 17, 31, 32, 511, 512, 513, 1023, 1024};
    int bad_n = 0;
    float *hq2 = hmust((size_t)(64 + 2) * rowf * 4);
    for (size_t pi = 0; pi < sizeof probes / sizeof probes[0]; pi++) {
        int p = probes[pi];
        if (p >= L)
            continue;
        for (int order = 0; order < 2; order++) {
            struct hrow rows[3];
            struct hrow ra = {table, nt, p, 1}, rb = {tab_b, NB - nt, 40, 50}, rc = {tab_b + 50, 8, 100, 1};
            rows[0] = order ? rb : ra;
            rows[1] = rc;
            rows[2] = order ? ra : rb;
            /* queries: A's row from hq, the others random */
            fill_f32(hq2, (size_t)52 * rowf, 1.0);
            int at_a = order ? 51 : 0;
            memcpy(hq2 + (size_t)at_a * rowf, hq + (size_t)p * rowf, rowf * 4);
            up(q, hq2, (size_t)52 * rowf * 4);
            dbatch_init(&d, rows, 3, group);
            run_attn(&f, &d, q, out, NULL, nh);
            dbatch_free(&d);
            down(got, out + (size_t)at_a * rowf, rowf * 4);
            bad_n += memcmp(got, ref + (size_t)p * rowf, rowf * 4) != 0;
        }
    }
    CHECK_MSG(bad_n == 0, "G=%d: %d decode rows among neighbours differ from the prefill", group, bad_n);
    up(q, hq, (size_t)L * rowf * 4);

    /* permuted physical blocks: A's blocks copied (block_copy) to other ids */
    int32_t pairs[2 * NB];
    int np = 0;
    for (int i = 0; i < nt; i++) {
        table2[i] = table[NB - 1 - i]; /* not used by A */
        pairs[2 * np] = table[i];
        pairs[2 * np + 1] = table2[i];
        np++;
    }
    int32_t *dpairs = dmust(sizeof pairs);
    up(dpairs, pairs, (size_t)np * 8);
    struct cuda_block_copy bc = {.kv = f.kv, .pairs = dpairs, .n = np};
    CHECK_OK(K->block_copy(&bc, NULL, err, sizeof err), err);
    CHECK_OK(cuda_dev_sync(err, sizeof err), err);
    {
        size_t slice = (size_t)2 * nkv * BS * HD;
        uint16_t *s1 = hmust(slice * 2), *s2 = hmust(slice * 2);
        int badc = 0;
        for (int l = 0; l < NL; l++)
            for (int i = 0; i < np; i++) {
                down(s1, f.kv.slab + ((size_t)l * NB + pairs[2 * i]) * slice, slice * 2);
                down(s2, f.kv.slab + ((size_t)l * NB + pairs[2 * i + 1]) * slice, slice * 2);
                badc += memcmp(s1, s2, slice * 2) != 0;
            }
        CHECK_MSG(badc == 0, "%d block slices not copied", badc);
        free(s1);
        free(s2);
    }
    struct hrow moved = {table2, nt, 0, L};
    dbatch_init(&d, &moved, 1, group);
    run_attn(&f, &d, q, out, NULL, nh);
    dbatch_free(&d);
    down(got, out, (size_t)L * rowf * 4);
    CHECK_MSG(memcmp(got, ref, (size_t)L * rowf * 4) == 0, "G=%d: permuted blocks give other bytes", group);

    /* float64 reference at probe positions (every head) */
    size_t slice = (size_t)2 * nkv * BS * HD;
    uint16_t *hs = hmust(f.slab_elems * 2);
    down(hs, f.kv.slab, f.slab_elems * 2);
    double worst = 0;
    double *sc = hmust((size_t)L * 8);
    for (size_t pi = 0; pi < sizeof probes / sizeof probes[0]; pi++) {
        int p = probes[pi] < L ? probes[pi] : L - 1;
        for (int h = 0; h < nh; h++) {
            int kvh = h / group;
            const float *qr = hq + (size_t)p * rowf + (size_t)h * HD;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= p; j++) {
                const uint16_t *kr = hs + (size_t)(NL - 1) * NB * slice + (size_t)table[j / BS] * slice +
                                     ((size_t)kvh * BS + j % BS) * HD;
                double s = 0;
                for (int e = 0; e < HD; e++)
                    s += (double)qr[e] * dtype_bf16_to_f32(kr[e]);
                sc[j] = s / sqrt((double)HD);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= p; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < HD; e++) {
                double o = 0;
                for (int j = 0; j <= p; j++) {
                    const uint16_t *vr = hs + (size_t)(NL - 1) * NB * slice + (size_t)table[j / BS] * slice +
                                         ((size_t)(nkv + kvh) * BS + j % BS) * HD;
                    o += sc[j] * dtype_bf16_to_f32(vr[e]);
                }
                o /= sum;
                double dd = fabs(o - ref[(size_t)p * rowf + (size_t)h * HD + e]);
                worst = dd > worst ? dd : worst;
            }
        }
    }
    CHECK_MSG(worst <= 1e-4, "G=%d: attention off float64 by %.3g (limit 1e-4)", group, worst);
    printf("  %s attention heads %d/%d, %d positions: chunks, splits a block, q in registers or shared memory, "
           "neighbours, blocks, rerun bitwise equal; max |error| vs float64 %.3g (limit 1e-4)\n",
           K->name, nh, nkv, L, worst);
    free(sc);
    free(hs);
    free(hq2);
    free(table);
    free(table2);
    free(tab_b);
    free(hq);
    free(ref);
    free(got);
    free(hb);
    cuda_dev_free(dpairs);
    cuda_dev_free(q);
    cuda_dev_free(out);
    cuda_dev_free(outb);
    cuda_dev_free(f.kv.slab);
}

static void test_attention(void)
{
    attn_case(16, 8, 1300); /* Qwen3-0.6B: 2 query heads per KV head; 3 splits */
    attn_case(32, 8, 1100); /* Qwen3-8B: 4 */
    attn_case(32, 4, 600);  /* Qwen3-30B-A3B: 8 (a decode token fills 8 of a block's 16 split rows) */
}

/* q/k norm + RoPE + K/V store against float64, and a token alone = in a batch. */
static void test_attn_prep(void)
{
    const int nh = 32, nkv = 8, n_tok = 40;
    const double theta = 1000000.0;
    struct kv_fixture f;
    kv_fixture_init(&f, nkv);
    int32_t table[8] = {9, 3, 200, 17, 5, 6, 100, 101};
    struct hrow rows[2] = {{table, 4, 0, 30}, {table + 4, 4, 50, 10}};
    struct dbatch d;
    dbatch_init(&d, rows, 2, nh / nkv);
    size_t qn = (size_t)n_tok * nh * HD, kn = (size_t)n_tok * nkv * HD;
    float *hq = hmust(qn * 4), *hk = hmust(kn * 4), *hv = hmust(kn * 4), *hqn = hmust(HD * 4), *hkn = hmust(HD * 4);
    float *gq = hmust(qn * 4), *gq1 = hmust(qn * 4);
    fill_f32(hq, qn, 2.0);
    fill_f32(hk, kn, 2.0);
    fill_f32(hv, kn, 2.0);
    fill_f32(hqn, HD, 1.5);
    fill_f32(hkn, HD, 1.5);
    float *q = dmust(qn * 4), *k = dmust(kn * 4), *v = dmust(kn * 4), *qnw = dmust(HD * 4), *knw = dmust(HD * 4);
    up(q, hq, qn * 4);
    up(k, hk, kn * 4);
    up(v, hv, kn * 4);
    up(qnw, hqn, HD * 4);
    up(knw, hkn, HD * 4);
    struct cuda_attn_prep a = {.q = q, .k = k, .v = v, .q_norm = qnw, .k_norm = knw, .eps = 1e-6f,
                               .rope_theta = theta, .n_heads = nh, .layer = 1, .kv = f.kv, .b = &d.b};
    CHECK_OK(K->attn_prep(&a, NULL, err, sizeof err), err);
    down(gq, q, qn * 4);
    uint16_t *hs = hmust(f.slab_elems * 2);
    down(hs, f.kv.slab, f.slab_elems * 2);
    size_t slice = (size_t)2 * nkv * BS * HD;
    int badq = 0, badk = 0, badv = 0, t = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < rows[r].query; i++, t++) {
            int p = rows[r].context + i;
            for (int hh = 0; hh < nh + nkv; hh++) {
                const float *x = hh < nh ? hq + ((size_t)t * nh + hh) * HD : hk + ((size_t)t * nkv + hh - nh) * HD;
                const float *w = hh < nh ? hqn : hkn;
                double ss = 0, y[HD], o[HD];
                for (int e = 0; e < HD; e++)
                    ss += (double)x[e] * x[e];
                double inv = 1 / sqrt(ss / HD + 1e-6);
                for (int e = 0; e < HD; e++)
                    y[e] = w[e] * (x[e] * inv);
                for (int e = 0; e < HD / 2; e++) {
                    double ang = p * pow(theta, -(double)(2 * e) / HD);
                    o[e] = y[e] * cos(ang) - y[e + HD / 2] * sin(ang);
                    o[e + HD / 2] = y[e + HD / 2] * cos(ang) + y[e] * sin(ang);
                }
                for (int e = 0; e < HD; e++) {
                    if (hh < nh) {
                        float g = gq[((size_t)t * nh + hh) * HD + e];
                        badq += !(fabs(g - o[e]) <= 1e-5 * (fabs(y[e]) + fabs(y[(e + HD / 2) % HD])) + 1e-6);
                    } else {
                        int blk = rows[r].table[p / BS];
                        float g = dtype_bf16_to_f32(
                            hs[(size_t)1 * NB * slice + (size_t)blk * slice + ((size_t)(hh - nh) * BS + p % BS) * HD + e]);
                        badk += !(fabs(g - o[e]) <= 8e-3 * fabs(o[e]) + 1e-5 * (fabs(y[e]) + fabs(y[(e + HD / 2) % HD])));
                    }
                }
            }
            for (int kvh = 0; kvh < nkv; kvh++)
                for (int e = 0; e < HD; e++) {
                    int blk = rows[r].table[p / BS];
                    uint16_t g = hs[(size_t)NB * slice + (size_t)blk * slice + ((size_t)(nkv + kvh) * BS + p % BS) * HD + e];
                    badv += g != dtype_f32_to_bf16(hv[((size_t)t * nkv + kvh) * HD + e]);
                }
        }
    CHECK_MSG(badq == 0 && badk == 0 && badv == 0, "prep vs float64: %d q, %d k, %d v elements off", badq, badk, badv);
    dbatch_free(&d);
    /* token 33 (row 1's 4th) alone */
    up(q, hq, qn * 4);
    struct hrow one = {table + 4, 4, 53, 1};
    dbatch_init(&d, &one, 1, nh / nkv);
    a.q = q + (size_t)33 * nh * HD;
    a.k = k + (size_t)33 * nkv * HD;
    a.v = v + (size_t)33 * nkv * HD;
    a.b = &d.b;
    CHECK_OK(K->attn_prep(&a, NULL, err, sizeof err), err);
    down(gq1, q, qn * 4);
    CHECK(memcmp(gq1 + (size_t)33 * nh * HD, gq + (size_t)33 * nh * HD, (size_t)nh * HD * 4) == 0);
    dbatch_free(&d);
    free(hs);
    free(hq);
    free(hk);
    free(hv);
    free(hqn);
    free(hkn);
    free(gq);
    free(gq1);
    cuda_dev_free(q);
    cuda_dev_free(k);
    cuda_dev_free(v);
    cuda_dev_free(qnw);
    cuda_dev_free(knw);
    cuda_dev_free(f.kv.slab);
}

/* ------------------------------------------------------------------ MoE */

/* One MoE layer on the device (hidden 512, 64 experts of 256, top 8).  Every token
 * has a feature that the router's expert 0 weighs heavily, so expert 0 is in every
 * token's top-k and its group holds all the step's rows: 1, 2, 7, 64 or 900.  A token's
 * row of h is the same bytes in each, with other companions, and run to run; parity
 * with a float64 host reference over the experts the device chose (within 1e-2 of the
 * output's scale), and the routing equals the host's top-k where the host's margin
 * is clear. */
#define MOE_H 512
#define MOE_I 256
#define MOE_E 64
#define MOE_K 8
#define MOE_N 900

struct moe_rig {
    uint16_t *router, *gate, *up, *down; /* device */
    float *d_h, *d_x;
    void *work;
    size_t work_bytes;
    int norm;
};

static void moe_run(struct moe_rig *r, const float *h0, const float *x, int n, float *h_out, int32_t *trace)
{
    up(r->d_h, h0, (size_t)n * MOE_H * 4);
    up(r->d_x, x, (size_t)n * MOE_H * 4);
    struct cuda_moe a = {.h = r->d_h, .xn = r->d_x, .router = r->router, .gate = r->gate, .up = r->up,
                         .down = r->down, .n_tok = n, .hidden = MOE_H, .inter = MOE_I, .n_experts = MOE_E,
                         .top_k = MOE_K, .norm_topk = r->norm, .work = r->work, .work_bytes = r->work_bytes,
                         .trace = trace};
    CHECK_OK(K->moe(&a, NULL, err, sizeof err), err);
    CHECK_OK(cuda_dev_sync(err, sizeof err), err);
    down(h_out, r->d_h, (size_t)n * MOE_H * 4);
}

static double bf(uint16_t v) { return (double)dtype_bf16_to_f32(v); }

static void moe_case(int norm)
{
    struct moe_rig r = {.norm = norm};
    size_t ge = (size_t)MOE_E * MOE_I * MOE_H;
    r.router = dmust((size_t)MOE_E * MOE_H * 2);
    r.gate = dmust(ge * 2);
    r.up = dmust(ge * 2);
    r.down = dmust(ge * 2);
    CHECK_OK(cuda_dev_fill_bf16(r.router, (size_t)MOE_E * MOE_H, 11, 0.1f, err, sizeof err), err);
    CHECK_OK(cuda_dev_fill_bf16(r.gate, ge, 12, DUMMY_FILL_SCALE, err, sizeof err), err);
    CHECK_OK(cuda_dev_fill_bf16(r.up, ge, 13, DUMMY_FILL_SCALE, err, sizeof err), err);
    CHECK_OK(cuda_dev_fill_bf16(r.down, ge, 14, DUMMY_FILL_SCALE, err, sizeof err), err);
    uint16_t heavy = dtype_f32_to_bf16(2.0f); /* router[0][0]: expert 0 for every token */
    up(r.router, &heavy, 2);
    r.work_bytes = K->moe_workspace(MOE_N, MOE_H, MOE_I, MOE_E, MOE_K);
    r.work = dmust(r.work_bytes);
    CHECK_OK(cuda_dev_memset(r.work, 0x7f, r.work_bytes, err, sizeof err), err); /* poisoned */
    r.d_h = dmust((size_t)MOE_N * MOE_H * 4);
    r.d_x = dmust((size_t)MOE_N * MOE_H * 4);

    size_t nh = (size_t)MOE_N * MOE_H;
    float *x = hmust(nh * 4), *x2 = hmust(nh * 4), *h0 = hmust(nh * 4), *h0b = hmust(nh * 4);
    float *all = hmust(nh * 4), *part = hmust(nh * 4);
    int32_t *trace = hmust((size_t)MOE_N * MOE_K * 4);
    fill_f32(x, nh, 1.0);
    fill_f32(x2, nh, 1.0);
    fill_f32(h0, nh, 1.0);
    fill_f32(h0b, nh, 1.0);
    for (int t = 0; t < MOE_N; t++)
        x[(size_t)t * MOE_H] = x2[(size_t)t * MOE_H] = 3.0f;

    moe_run(&r, h0, x, MOE_N, all, trace);
    int with0 = 0;
    for (int t = 0; t < MOE_N; t++)
        for (int k = 0; k < MOE_K; k++)
            with0 += trace[t * MOE_K + k] == 0;
    CHECK_MSG(with0 == MOE_N, "expert 0 chosen by %d of %d tokens", with0, MOE_N);

    /* run to run */
    moe_run(&r, h0, x, MOE_N, part, NULL);
    CHECK_MSG(memcmp(all, part, nh * 4) == 0, "norm=%d: run to run differ", norm);
    /* the first n tokens alone: expert 0's group of n rows (1 and 2 tokens: the gate/up
     * launch routes and sorts them itself, seven stages, 96 wide; the others: the sort
     * kernel, four stages, 128 wide); the routing trace too */
    static const int ns[] = {1, 2, 7, 64};
    int32_t *trace_n = hmust((size_t)64 * MOE_K * 4);
    for (int i = 0; i < 4; i++) {
        moe_run(&r, h0, x, ns[i], part, trace_n);
        CHECK_MSG(memcmp(all, part, (size_t)ns[i] * MOE_H * 4) == 0, "norm=%d: %d tokens differ from %d", norm,
                  ns[i], MOE_N);
        CHECK_MSG(memcmp(trace, trace_n, (size_t)ns[i] * MOE_K * 4) == 0, "norm=%d: %d tokens' routing differs",
                  norm, ns[i]);
    }
    free(trace_n);
    /* token 0 among other companions (and other residuals) */
    memcpy(x2, x, (size_t)MOE_H * 4);
    memcpy(h0b, h0, (size_t)MOE_H * 4);
    moe_run(&r, h0b, x2, 300, part, NULL);
    CHECK_MSG(memcmp(all, part, (size_t)MOE_H * 4) == 0, "norm=%d: token 0 depends on its companions", norm);

    /* float64 reference for tokens 0..11 over the device's routing */
    uint16_t *hr = hmust((size_t)MOE_E * MOE_H * 2), *hg = hmust(ge * 2), *hu = hmust(ge * 2), *hd = hmust(ge * 2);
    down(hr, r.router, (size_t)MOE_E * MOE_H * 2);
    down(hg, r.gate, ge * 2);
    down(hu, r.up, ge * 2);
    down(hd, r.down, ge * 2);
    double max_err = 0, max_ref = 0;
    int route_bad = 0;
    for (int t = 0; t < 12; t++) {
        const float *xt = x + (size_t)t * MOE_H;
        double p[MOE_E], mx = -1e300, sum = 0;
        for (int e = 0; e < MOE_E; e++) {
            double l = 0;
            for (int d = 0; d < MOE_H; d++)
                l += (double)xt[d] * bf(hr[(size_t)e * MOE_H + d]);
            p[e] = l;
            mx = l > mx ? l : mx;
        }
        for (int e = 0; e < MOE_E; e++)
            sum += p[e] = exp(p[e] - mx);
        int top[MOE_K + 1];
        double q[MOE_E];
        memcpy(q, p, sizeof q);
        for (int k = 0; k <= MOE_K; k++) { /* the host's top k + 1, for the margin */
            int b = 0;
            for (int e = 1; e < MOE_E; e++)
                b = q[e] > q[b] ? e : b;
            top[k] = b;
            q[b] = -1;
        }
        double margin = (p[top[MOE_K - 1]] - p[top[MOE_K]]) / sum;
        for (int k = 0; k < MOE_K; k++) {
            int found = 0;
            for (int j = 0; j < MOE_K; j++)
                found |= trace[t * MOE_K + j] == top[k];
            route_bad += !found && margin > 1e-5;
        }
        double wsum = 0, y[MOE_H] = {0};
        for (int k = 0; k < MOE_K; k++)
            wsum += p[trace[t * MOE_K + k]] / sum;
        for (int k = 0; k < MOE_K; k++) {
            int e = trace[t * MOE_K + k];
            double w = p[e] / sum / (norm ? wsum : 1.0);
            double act[MOE_I];
            for (int i = 0; i < MOE_I; i++) {
                double g = 0, u = 0;
                for (int d = 0; d < MOE_H; d++) {
                    double xb = (double)dtype_bf16_to_f32(dtype_f32_to_bf16(xt[d]));
                    g += xb * bf(hg[((size_t)e * MOE_I + i) * MOE_H + d]);
                    u += xb * bf(hu[((size_t)e * MOE_I + i) * MOE_H + d]);
                }
                act[i] = g / (1 + exp(-g)) * u;
            }
            for (int d = 0; d < MOE_H; d++) {
                double o = 0;
                for (int i = 0; i < MOE_I; i++)
                    o += act[i] * bf(hd[((size_t)e * MOE_H + d) * MOE_I + i]);
                y[d] += w * o;
            }
        }
        for (int d = 0; d < MOE_H; d++) {
            double got = (double)all[(size_t)t * MOE_H + d] - (double)h0[(size_t)t * MOE_H + d];
            max_err = fmax(max_err, fabs(got - y[d]));
            max_ref = fmax(max_ref, fabs(y[d]));
        }
    }
    CHECK_MSG(route_bad == 0, "norm=%d: %d routing choices differ from the host's clear top-k", norm, route_bad);
    CHECK_MSG(max_ref > 1e-4 && max_err <= 1e-2 * max_ref, "norm=%d: max error %.3g against a scale of %.3g", norm,
              max_err, max_ref);
    printf("  moe norm=%d: max error %.3g of %.3g\n", norm, max_err, max_ref);
    free(hr);
    free(hg);
    free(hu);
    free(hd);
    free(x);
    free(x2);
    free(h0);
    free(h0b);
    free(all);
    free(part);
    free(trace);
    cuda_dev_free(r.router);
    cuda_dev_free(r.gate);
    cuda_dev_free(r.up);
    cuda_dev_free(r.down);
    cuda_dev_free(r.work);
    cuda_dev_free(r.d_h);
    cuda_dev_free(r.d_x);
}

static void test_moe(void)
{
    moe_case(1);
    moe_case(0);
}

/* --load-format dummy generates a matrix on the device with the fill kernel and on the
 * host with weights_dummy_fill: the same bits, or a dummy model would be another model
 * on each backend. */
static void test_dummy_fill(void)
{
    const size_t n = (size_t)3 << 20; /* past one grid's stride: every element's own index */
    uint16_t *d = dmust(n * 2), *h = hmust(n * 2), *want = hmust(n * 2);
    struct weights_mat m = {.dtype = SAFETENSORS_DTYPE_BF16, .rows = 3072, .cols = 1024,
                            .fill_seed = 0x5eed5eed12345ull};
    CHECK_OK(cuda_dev_fill_bf16(d, n, m.fill_seed, DUMMY_FILL_SCALE, err, sizeof err), err);
    down(h, d, n * 2);
    weights_dummy_fill(&m, want);
    size_t differ = 0, zero = 0;
    for (size_t i = 0; i < n; i++) {
        differ += h[i] != want[i];
        zero += want[i] == 0;
    }
    CHECK_MSG(differ == 0 && zero < n / 100, "%zu of %zu differ, %zu zero", differ, n, zero);
    free(h);
    free(want);
    cuda_dev_free(d);
}

/* ------------------------------------------------------------------ sampling */

/* Rows and parameters for the sampler: a pool of cases, each a logits row kind and a
 * parameter set; the device must give the host reference's bytes (dsample_ref.c, a full
 * sort instead of histograms), the CPU sampler's token away from boundaries, and the
 * same bytes whatever the other rows of the launch. */
#define SCASES 112
struct scase {
    struct sampler_params p;
    struct sampler_logit_bias bias[16];
    int32_t hist[700];
    int n_prompt, n_gen;
    uint64_t seq, step;
};
static struct scase scases[SCASES];

/* Repetition, frequency and presence penalties over a history of up to 400 prompt and
 * 300 generated tokens (every other one among the first 50 ids, so some repeat). */
static void scase_penalize(struct scase *c, int V)
{
    c->p.repetition_penalty = 1.3f;
    c->p.frequency_penalty = 0.4f;
    c->p.presence_penalty = -0.3f;
    c->n_prompt = (int)(urand() * 400);
    c->n_gen = (int)(urand() * 300);
    for (int k = 0; k < c->n_prompt + c->n_gen; k++)
        c->hist[k] = (int32_t)(urand() * (k % 2 && V > 50 ? 50 : V));
}

static void scase_make(struct scase *c, int i, int V)
{
    memset(c, 0, sizeof *c);
    struct sampler_params *p = &c->p;
    sampler_params_default(p);
    p->seed = ((uint64_t)(urand() * 4294967296.0) << 32) | (uint64_t)(urand() * 4294967296.0);
    switch (i % 10) {
    case 0: p->temperature = 0.0f; break;
    case 1: p->temperature = 0.8f; p->top_p = 0.9f; break;
    case 2: p->temperature = 1.0f; p->top_k = 1 + (int)(urand() * 60); break;
    case 3: p->temperature = 1.3f; p->min_p = 0.05f; p->top_p = 0.5f; break;
    case 4: p->temperature = 0.7f; p->top_k = 1; break;
    case 5: p->temperature = 1.0f; p->top_p = 0.02f; break;
    case 6: p->temperature = 2.0f; p->top_k = V / 2; p->top_p = 0.99f; break;
    case 7: p->temperature = 1.0f; break;
    case 8: p->temperature = 0.6f; p->top_k = 40; p->top_p = 0.95f; p->min_p = 0.01f; break;
    default: p->temperature = 1.1f; p->top_k = V + 5; p->top_p = 0.7f; break;
    }
    if (i % 3 == 1)
        scase_penalize(c, V);
    if (i % 4 == 2) {
        int n = 1 + (int)(urand() * 6);
        for (int k = 0; k < n; k++) {
            c->bias[k].token = (int32_t)(urand() * V);
            c->bias[k].bias = (float)((urand() - 0.5) * 20.0);
        }
        c->bias[n] = c->bias[0];
        c->bias[n].bias = 0.37f;
        p->logit_bias = c->bias;
        p->n_logit_bias = n + 1;
    }
    if (i % 5 != 0) {
        p->logprobs = true;
        p->n_logprobs = (int)(urand() * 21);
        p->logprobs_mode = i % 2 ? SAMPLER_LOGPROBS_PENALIZED : SAMPLER_LOGPROBS_RAW;
    }
    c->seq = (uint64_t)(urand() * 1000);
    c->step = (uint64_t)(urand() * 5000);
}

/* Logits row kind k: typical, many ties, non-finite entries, peaked, flat, all -inf. */
static void srow_make(float *x, int V, int k)
{
    for (int i = 0; i < V; i++) {
        double v = (urand() + urand() + urand() - 1.5) * 8.0;
        if (k == 1)
            v = floor(v * 2.0) / 2.0;
        x[i] = (float)v;
    }
    if (k == 2) {
        for (int j = 0; j < 5; j++)
            x[(int)(urand() * V)] = NAN;
        x[(int)(urand() * V)] = -INFINITY;
        x[(int)(urand() * V)] = INFINITY;
    }
    if (k == 3)
        x[(int)(urand() * V)] = 40.0f;
    if (k == 4)
        for (int i = 0; i < V; i++)
            x[i] = 1.5f;
    if (k == 5)
        for (int i = 0; i < V; i++)
            x[i] = -INFINITY;
}

static int srow_kind(int i) { return i % 13 == 12 ? 5 : i % 11 == 10 ? 4 : i % 7 == 6 ? 3 : i % 6 == 5 ? 2 : i % 4 == 3; }

/* The device's results for the rows in ds (logits rows d_logits [*, V]). */
static void slaunch(const float *d_logits, int V, const struct dev_sample *ds, struct dsample_out *out)
{
    struct dsample_row *rows = dmust((size_t)ds->n * sizeof *rows);
    struct dsample_mod *mods = dmust((size_t)(ds->n_mods + 1) * sizeof *mods);
    float *biases = dmust((size_t)(ds->n_biases + 1) * sizeof *biases);
    struct dsample_out *d_out = dmust((size_t)ds->n * sizeof *d_out);
    float *work = dmust((size_t)ds->n * cuda_sample_stride(V) * sizeof *work);
    up(rows, ds->rows, (size_t)ds->n * sizeof *rows);
    if (ds->n_mods)
        up(mods, ds->mods, (size_t)ds->n_mods * sizeof *mods);
    if (ds->n_biases)
        up(biases, ds->biases, (size_t)ds->n_biases * sizeof *biases);
    struct cuda_sample a = {.logits = d_logits, .vocab = V, .n_rows = ds->n, .rows = rows, .mods = mods,
                            .n_mods = ds->n_mods, .biases = biases, .n_biases = ds->n_biases, .work = work,
                            .out = d_out};
    cuda_sample_hints(&a, ds->rows); /* as the backend asks: the slices' kernels where rows need them */
    CHECK_OK(K->sample(&a, NULL, err, sizeof err), err);
    down(out, d_out, (size_t)ds->n * sizeof *out);
    cuda_dev_free(rows);
    cuda_dev_free(mods);
    cuda_dev_free(biases);
    cuda_dev_free(d_out);
    cuda_dev_free(work);
}

static void sadd(struct dev_sample *ds, int c, int logit_row)
{
    int idx;
    const struct scase *sc = &scases[c];
    CHECK_OK(dev_sample_add(ds, &sc->p, logit_row, sc->hist, sc->n_prompt, sc->n_gen, sc->seq, sc->step, &idx, err,
                            sizeof err),
             err);
}

/* The rows h[n, V] on the device, and ds holding cases 0 .. n - 1 (row i for case i). */
static float *scases_up(const float *h, int n, int V, struct dev_sample *ds, struct sampler_scratch *ss)
{
    float *d = dmust((size_t)n * V * sizeof *d);
    up(d, h, (size_t)n * V * sizeof *h);
    CHECK_OK(dev_sample_init(ds, V, 8, err, sizeof err), err);
    CHECK_OK(sampler_scratch_init(ss, V, err, sizeof err), err);
    for (int i = 0; i < n; i++)
        sadd(ds, i, i);
    return d;
}

static void sample_vocab(int V, int n_cases, int invariance)
{
    float *h = hmust((size_t)n_cases * V * sizeof *h);
    for (int i = 0; i < n_cases; i++) {
        scase_make(&scases[i], i, V);
        srow_make(h + (size_t)i * V, V, srow_kind(i));
    }
    struct dev_sample ds;
    struct sampler_scratch ss;
    float *d = scases_up(h, n_cases, V, &ds, &ss);
    struct dsample_out *out = hmust((size_t)n_cases * sizeof *out), *again = hmust((size_t)n_cases * sizeof *out);
    slaunch(d, V, &ds, out);
    slaunch(d, V, &ds, again);
    CHECK_MSG(!memcmp(out, again, (size_t)n_cases * sizeof *out), "V=%d: run to run differ", V);
    int ref_bad = 0, greedy_bad = 0, cpu_bad = 0, near = 0, lp_ids = 0;
    double lp_worst = 0.0;
    for (int i = 0; i < n_cases; i++) {
        const struct scase *c = &scases[i];
        const float *row = h + (size_t)i * V;
        struct dsample_out want;
        double margin;
        dsample_ref(&c->p, row, V, c->hist, c->n_prompt, c->n_gen, c->seq, c->step, &ss, &want, &margin);
        if (memcmp(&want, &out[i], sizeof want)) {
            ref_bad++;
            if (ref_bad <= 5)
                fprintf(stderr, "  V=%d case %d (kind %d, T %g k %d p %g minp %g lp %d/%d): device %d %.9g n_top %d, "
                        "reference %d %.9g n_top %d\n", V, i, srow_kind(i), (double)c->p.temperature, c->p.top_k,
                        (double)c->p.top_p, (double)c->p.min_p, c->p.logprobs, c->p.n_logprobs, out[i].token,
                        (double)out[i].logprob, out[i].n_top, want.token, (double)want.logprob, want.n_top);
        }
        struct sampler_result cpu;
        sampler_sample(&c->p, row, V, c->hist, c->n_prompt, c->n_gen, c->seq, c->step, &ss, &cpu);
        if (c->p.temperature < SAMPLER_GREEDY_EPS)
            greedy_bad += cpu.token != out[i].token;
        else if (margin < 1e-5)
            near++;
        else
            cpu_bad += cpu.token != out[i].token;
        for (int k = 0; k < cpu.n_top && k < out[i].n_top; k++) {
            lp_ids += cpu.top[k].token != out[i].top[k].token;
            double e = fabs((double)cpu.top[k].logprob - out[i].top[k].logprob);
            lp_worst = e > lp_worst && !isnan(e) ? e : lp_worst;
        }
        lp_ids += cpu.n_top != out[i].n_top;
    }
    CHECK_MSG(ref_bad == 0, "V=%d: %d of %d rows differ from the host reference", V, ref_bad, n_cases);
    CHECK_MSG(greedy_bad == 0, "V=%d: %d greedy tokens differ from the CPU sampler's", V, greedy_bad);
    CHECK_MSG(cpu_bad == 0, "V=%d: %d tokens differ from the CPU sampler's away from a boundary", V, cpu_bad);
    CHECK_MSG(lp_ids == 0 && lp_worst < 1e-4, "V=%d: top logprob ids differ %d times, values within %.3g", V, lp_ids,
              lp_worst);
    printf("  V=%d: %d rows as the reference; CPU tokens equal (%d near a boundary), logprobs within %.3g\n", V,
           n_cases - ref_bad, near, lp_worst);

    /* batch invariance: a row alone, then among k others at a random place */
    static const int ks[] = {1, 7, 63, 64, 65, 300};
    int inv_bad = 0;
    for (int t = 0; invariance && t < 12; t++) {
        int target = (int)(urand() * n_cases), k = ks[t % 6];
        dev_sample_reset(&ds);
        sadd(&ds, target, target);
        struct dsample_out alone;
        slaunch(d, V, &ds, &alone);
        dev_sample_reset(&ds);
        int at = (int)(urand() * (k + 1));
        for (int j = 0; j <= k; j++) {
            int c = j == at ? target : (int)(urand() * n_cases);
            sadd(&ds, c, c);
        }
        struct dsample_out *many = hmust((size_t)(k + 1) * sizeof *many);
        slaunch(d, V, &ds, many);
        inv_bad += memcmp(&alone, &many[at], sizeof alone) != 0;
        free(many);
    }
    CHECK_MSG(inv_bad == 0, "V=%d: %d rows differ alone and among others", V, inv_bad);
    free(h);
    free(out);
    free(again);
    cuda_dev_free(d);
    dev_sample_free(&ds);
    sampler_scratch_free(&ss);
}

static void test_sample(void)
{
    sample_vocab(151936, SCASES, 1);
    sample_vocab(1000, SCASES, 1);
    sample_vocab(7, 40, 0);
}

/* Greedy rows that need only the maximum (the rows the argmax slices read): maxima tied
 * across the slices' edges, -0 against +0, NaN and +-inf, all -inf, all NaN, a vocab
 * the float4 loads do not divide and one too small to slice.  Each row's bytes must be
 * the host reference's, its token the CPU sampler's, alone or with the others. */
static void greedy_rows_make(float *x, int V, int k, int *expect)
{
    for (int i = 0; i < V; i++)
        x[i] = (float)((urand() - 0.5) * 16.0);
    int chunk = ((V + 63) / 64 + 3) & ~3; /* the default slicing's edges */
    switch (k) {
    case 0: *expect = -1; break;
    case 1: /* the maximum at the last id of a slice, the first of the next and later */
        for (int j = 1; j * chunk < V && j < 64; j += 5) {
            x[j * chunk] = 20.0f;
            x[j * chunk - 1] = 20.0f;
        }
        x[V - 1] = 20.0f;
        *expect = V > chunk ? chunk - 1 : V - 1;
        break;
    case 2: /* all below zero but -0 at a high id and +0 at a lower one: one maximum */
        for (int i = 0; i < V; i++)
            x[i] = -1.0f - (float)urand();
        x[V - 2] = -0.0f;
        x[V / 3] = 0.0f;
        *expect = V / 3 < V - 2 ? V / 3 : V - 2;
        break;
    case 3: /* NaN everywhere but one value: NaN is -inf */
        for (int i = 0; i < V; i++)
            x[i] = NAN;
        x[V / 2] = -5.0f;
        *expect = V / 2;
        break;
    case 4: /* +inf twice and FLT_MAX once: all one value (cleaned, +inf is FLT_MAX) */
        x[V - 1] = INFINITY;
        x[V / 2] = INFINITY;
        x[V / 2 + 1] = 3.40282347e+38f;
        x[V / 4] = -INFINITY;
        *expect = V / 2;
        break;
    case 5:
        for (int i = 0; i < V; i++)
            x[i] = -INFINITY;
        *expect = 0;
        break;
    default:
        for (int i = 0; i < V; i++)
            x[i] = NAN;
        *expect = 0;
        break;
    }
}

static void greedy_vocab(int V)
{
    enum { KINDS = 7, ROWS = 2 * KINDS };
    float *h = hmust((size_t)ROWS * V * sizeof *h);
    int expect[ROWS];
    for (int i = 0; i < ROWS; i++) {
        greedy_rows_make(h + (size_t)i * V, V, i % KINDS, &expect[i]);
        struct scase *c = &scases[i];
        memset(c, 0, sizeof *c);
        sampler_params_default(&c->p);
        c->p.temperature = 0.0f;
        if (i >= KINDS) { /* logprobs of the raw logits: still only the maximum is needed */
            c->p.logprobs = true;
            c->p.n_logprobs = 5;
            c->p.logprobs_mode = SAMPLER_LOGPROBS_RAW;
        }
        c->seq = (uint64_t)i;
        c->step = 3;
    }
    struct dev_sample ds;
    struct sampler_scratch ss;
    float *d = scases_up(h, ROWS, V, &ds, &ss);
    struct dsample_out out[ROWS], alone;
    slaunch(d, V, &ds, out);
    int bad = 0;
    for (int i = 0; i < ROWS; i++) {
        const float *row = h + (size_t)i * V;
        struct dsample_out want;
        double margin;
        struct sampler_result cpu;
        dsample_ref(&scases[i].p, row, V, NULL, 0, 0, scases[i].seq, scases[i].step, &ss, &want, &margin);
        sampler_sample(&scases[i].p, row, V, NULL, 0, 0, scases[i].seq, scases[i].step, &ss, &cpu);
        dev_sample_reset(&ds);
        sadd(&ds, i, i);
        slaunch(d, V, &ds, &alone);
        bool ok = !memcmp(&want, &out[i], sizeof want) && !memcmp(&alone, &out[i], sizeof alone) &&
                  cpu.token == out[i].token && (expect[i] < 0 || out[i].token == expect[i]);
        if (!ok && ++bad <= 5)
            fprintf(stderr, "  V=%d greedy row %d (kind %d): device %d alone %d, reference %d, CPU %d, expected %d\n",
                    V, i, i % KINDS, out[i].token, alone.token, want.token, cpu.token, expect[i]);
    }
    CHECK_MSG(bad == 0, "V=%d: %d greedy rows differ", V, bad);
    printf("  V=%d: %d greedy rows as the reference and the CPU, alone and together\n", V, ROWS - bad);
    free(h);
    cuda_dev_free(d);
    dev_sample_free(&ds);
    sampler_scratch_free(&ss);
}

static void test_sample_greedy(void)
{
    greedy_vocab(151936);
    greedy_vocab(151937);
    greedy_vocab(1000);
    greedy_vocab(7);
}

/* Plain draws read their rows in slices: of temperature and min-p alone, each slice's
 * integer mass, then a walk of the one slice that holds the target; with a top-k, each
 * slice's best k, merged; and the logprobs of such rows and of greedy ones, each slice's
 * mass and best n, merged; a row with bias or penalties has its values written by its
 * slices first.  Such rows among greedy and top-p ones, under 64 slices (the default),
 * 256, 7 and none (the row's block walks the whole row), at top-k values within and past
 * the slices' room, with 0 to 20 top logprobs (raw, or penalized: of a row without
 * mods, walked whole), with and without bias and penalties: each row's bytes must be the
 * host reference's under all four.  Row kinds: typical, flat (a uniform draw, the target
 * anywhere, slice edges included; top-k all ties), the mass at slice edges, non-finite
 * entries, one peak, ties, nothing finite. */
static void sliced_row_make(float *x, int V, int k)
{
    const int chunk = ((V + 63) / 64 + 3) & ~3; /* the default slicing's edges */
    switch (k) {
    case 1: srow_make(x, V, 4); break;
    case 2:
        for (int i = 0; i < V; i++)
            x[i] = -12.0f + (float)urand();
        for (int j = 1; j * chunk < V; j += 3) {
            x[j * chunk] = 3.0f;
            x[j * chunk - 1] = 3.0f;
        }
        break;
    case 3: srow_make(x, V, 2); break;
    case 4: srow_make(x, V, 3); break;
    case 5: srow_make(x, V, 1); break;
    case 6: srow_make(x, V, 5); break;
    default: srow_make(x, V, 0); break;
    }
}

static void sliced_vocab(int V)
{
    enum { ROWS = 96, SETTINGS = 4 };
    static const char *const slices[SETTINGS] = {"64", "256", "7", "0"};
    static const float temps[] = {0.4f, 1.0f, 1.7f};
    static const int ks[] = {1, 5, 12, 20, 40, 48, 49, 1000};
    static const int n_lp[] = {3, 0, 20, 1, 5};
    float *h = hmust((size_t)ROWS * V * sizeof *h);
    int plain = 0, topk = 0, lps = 0, mods = 0;
    for (int i = 0; i < ROWS; i++) {
        sliced_row_make(h + (size_t)i * V, V, i % 7);
        struct scase *c = &scases[i];
        memset(c, 0, sizeof *c);
        sampler_params_default(&c->p);
        c->p.seed = ((uint64_t)(urand() * 4294967296.0) << 32) | (uint64_t)i;
        c->p.temperature = temps[i % 3];
        if (i % 4 == 1)
            c->p.min_p = 0.05f;
        if (i % 5 == 2 || i % 8 == 7) { /* logprobs, raw (still a plain draw) or penalized */
            c->p.logprobs = true;
            c->p.n_logprobs = n_lp[(i / 5) % 5];
            c->p.logprobs_mode = (i / 5) % 9 == 8 ? SAMPLER_LOGPROBS_PENALIZED : SAMPLER_LOGPROBS_RAW;
            lps++;
        }
        if (i % 9 == 4) /* penalties: the row's values are written by its slices */
            scase_penalize(c, V);
        if (i % 10 == 2) { /* logit bias: one token pushed to the top, others anywhere */
            const int n = 1 + (int)(urand() * 4);
            for (int k = 0; k < n; k++) {
                c->bias[k].token = (int32_t)(urand() * V);
                c->bias[k].bias = k == 0 ? 30.0f : (float)((urand() - 0.5) * 20.0);
            }
            c->p.logit_bias = c->bias;
            c->p.n_logit_bias = n;
        }
        mods += i % 9 == 4 || i % 10 == 2;
        if (i % 8 == 7) {
            c->p.temperature = 0.0f; /* greedy rows among them */
        } else if (i % 8 == 3) {
            c->p.top_p = 0.9f; /* and rows that walk the whole row */
        } else if (i % 4 == 1) { /* top-k, with top-p on every other */
            c->p.top_k = ks[(i / 4) % 8];
            if (i % 8 == 5)
                c->p.top_p = 0.95f;
            topk++;
        } else {
            plain++;
        }
        c->seq = (uint64_t)(urand() * 1000);
        c->step = (uint64_t)i;
    }
    struct dev_sample ds;
    struct sampler_scratch ss;
    float *d = scases_up(h, ROWS, V, &ds, &ss);
    struct dsample_out *out = hmust((size_t)SETTINGS * ROWS * sizeof *out);
    for (int k = 0; k < SETTINGS; k++) {
        struct env_keep keep;
        env_push(&keep, "HEARTH_CUDA_SAMPLE_SLICES", slices[k]);
        CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
        slaunch(d, V, &ds, out + (size_t)k * ROWS);
        env_pop(&keep);
    }
    CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
    int bad = 0;
    for (int i = 0; i < ROWS; i++) {
        struct dsample_out want;
        double margin;
        const struct scase *c = &scases[i];
        dsample_ref(&c->p, h + (size_t)i * V, V, c->hist, c->n_prompt, c->n_gen, c->seq, c->step, &ss, &want,
                    &margin);
        for (int k = 0; k < SETTINGS; k++) {
            const struct dsample_out *o = &out[(size_t)k * ROWS + i];
            if (memcmp(&want, o, sizeof want) && ++bad <= 5)
                fprintf(stderr, "  V=%d row %d (kind %d, T %g, min-p %g, k %d, p %g) at %s slices: device %d, "
                        "reference %d\n", V, i, i % 7, (double)c->p.temperature, (double)c->p.min_p, c->p.top_k,
                        (double)c->p.top_p, slices[k], o->token, want.token);
        }
    }
    CHECK_MSG(bad == 0, "V=%d: %d sliced draws differ from the host reference", V, bad);
    printf("  V=%d: %d rows (%d plain draws, %d top-k, %d with logprobs, %d with bias or penalties) as the "
           "reference at 64, 256, 7 and no slices\n", V, ROWS, plain, topk, lps, mods);
    free(h);
    free(out);
    cuda_dev_free(d);
    dev_sample_free(&ds);
    sampler_scratch_free(&ss);
}

static void test_sample_sliced(void)
{
    sliced_vocab(151936);
    sliced_vocab(151937);
    sliced_vocab(16385); /* 64 slices of 260 ids, the last of 5: fewer than the top logprobs */
    sliced_vocab(1000);
    sliced_vocab(7);
}

/* Philox on the device: 2^16 equal logits make the draw floor(u 2^16), the top 16 of the
 * 53 random bits, which must be the host's. */
static void test_sample_philox(void)
{
    const int V = 65536;
    float *h = hmust(V * sizeof *h);
    for (int i = 0; i < V; i++)
        h[i] = 0.25f;
    float *d = dmust(V * sizeof *d);
    up(d, h, V * sizeof *h);
    struct dev_sample ds;
    CHECK_OK(dev_sample_init(&ds, V, 256, err, sizeof err), err);
    struct sampler_params p;
    sampler_params_default(&p);
    uint64_t seeds[256], idx[256], step[256];
    for (int i = 0; i < 256; i++) {
        p.seed = seeds[i] = ((uint64_t)(urand() * 4294967296.0) << 32) ^ (uint64_t)i;
        idx[i] = (uint64_t)(urand() * 1e6) << (i % 40);
        step[i] = (uint64_t)(urand() * 1e5);
        int k;
        CHECK_OK(dev_sample_add(&ds, &p, 0, NULL, 0, 0, idx[i], step[i], &k, err, sizeof err), err);
    }
    struct dsample_out *out = hmust(256 * sizeof *out);
    slaunch(d, V, &ds, out);
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        uint64_t want = (uint64_t)(sampler_uniform(seeds[i], idx[i], step[i]) * 65536.0);
        bad += (uint64_t)out[i].token != want;
    }
    CHECK_MSG(bad == 0, "%d of 256 draws differ from the host's Philox", bad);
    free(h);
    free(out);
    cuda_dev_free(d);
    dev_sample_free(&ds);
}

int main(int argc, char **argv)
{
    /* HEARTH_CUDA_TESTS=quick leaves out the GEMM row sweep (the slowest test); =rows
     * runs the sweep alone; =attention the attention tests alone */
    const char *mode = getenv("HEARTH_CUDA_TESTS");
    int quick = mode && strcmp(mode, "quick") == 0, rows_only = mode && strcmp(mode, "rows") == 0;
    int attn_only = mode && strcmp(mode, "attention") == 0;
    (void)argc;
    (void)argv;
    if (cuda_dev_init(0, &info, err, sizeof err) != HR_OK) {
        TEST_SKIP("cuda", "%s", err);
        TEST_END();
    }
    printf("device: %s, compute %d.%d, %d SMs, %.1f GiB, runtime %d, driver %d\n", info.name, info.major, info.minor,
           info.sm_count, info.total_mem / 1073741824.0, info.runtime_version, info.driver_version);
    if (!rows_only && !attn_only)
        TEST_RUN(test_dummy_fill);
    static const char *variants[] = {"sm90a", "sm80"};
    for (int v = 0; v < 2; v++) {
        K = cuda_kernels_pick(variants[v], info.major, info.minor, err, sizeof err);
        if (!K) {
            TEST_SKIP(variants[v], "%s", err);
            continue;
        }
        if (K->prepare(info.sm_count, err, sizeof err) != HR_OK) {
            fprintf(stderr, "%s: %s\n", variants[v], err);
            test_n_failed++;
            continue;
        }
        printf("variant %s\n", K->name);
        if (rows_only) {
            TEST_RUN(test_gemm_rows);
            /* again with the other ways of adding a row's parts: the tile's last block
             * (ticketed, in the kernel) on the mma.sync tiles (sm80), combine_kernel
             * instead of the cluster's shared memory on the TMA tile (sm90a): each
             * must give the fold's bytes */
            struct env_keep ke, kc;
            env_push(&ke, "HEARTH_CUDA_GEMM_EXT_ROWS", "1");
            env_push(&kc, "HEARTH_CUDA_GEMM_CLUSTER", "0");
            if (K->prepare(info.sm_count, err, sizeof err) == HR_OK)
                TEST_RUN(test_gemm_rows);
            else
                CHECK_MSG(0, "%s", err);
            env_pop(&kc);
            env_pop(&ke);
            CHECK_OK(K->prepare(info.sm_count, err, sizeof err), err);
            continue;
        }
        if (attn_only) {
            TEST_RUN(test_attn_prep);
            TEST_RUN(test_attention);
            continue;
        }
        TEST_RUN(test_gemm_bad_args);
        TEST_RUN(test_gemm_segments);
        TEST_RUN(test_gemm_swiglu_wide);
        TEST_RUN(test_gemm_widths);
        TEST_RUN(test_gemm_fold_widths);
        TEST_RUN(test_rmsnorm);
        TEST_RUN(test_embed);
        TEST_RUN(test_attn_prep);
        TEST_RUN(test_attention);
        TEST_RUN(test_gemm_reference);
        TEST_RUN(test_moe);
        TEST_RUN(test_sample_philox);
        TEST_RUN(test_sample);
        TEST_RUN(test_sample_greedy);
        TEST_RUN(test_sample_sliced);
        if (!quick)
            TEST_RUN(test_gemm_rows);
        else
            TEST_SKIP("test_gemm_rows", "HEARTH_CUDA_TESTS=quick");
    }
    TEST_END();
}

#endif
