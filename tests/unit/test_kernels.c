/* The CPU kernels one by one, under every variant this CPU supports:
 * - GEMM: every tile shape and every split gives the bits of a lone dot product
 *   (memcmp), for f32/bf16/f16 weights and the bf16 x bf16 routine, k tails included;
 *   values agree with a float64 reference;
 * - exp: within a few ulp of libm's double exp, exact at 0, the right limits;
 * - SwiGLU and the attention tile update against float64 references; the
 *   elementwise routines (norm scaling, add, RoPE, bf16 stores) equal their C definitions;
 * - the backend's matmul family: fused forms equal the plain ones bitwise, a row's
 *   result does not depend on the other rows or the thread count;
 * - the thread pool runs every task exactly once, with valid thread indices. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/variant.h"
#include "model/dtype.h"
#include "test.h"

static uint64_t rng = 0x853c49e6748fea9bull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static const struct cpu_variant *variant_by_name(const char *name)
{
    const struct cpu_variant *all[] = {&cpu_variant_avx512bf16, &cpu_variant_avx512, &cpu_variant_avx2,
                                       &cpu_variant_scalar};
    for (int i = 0; i < 4; i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

static int n_variants(const struct cpu_variant **out)
{
    const char *names[8];
    int n = backend_cpu_variants(names, 8);
    for (int i = 0; i < n; i++)
        out[i] = variant_by_name(names[i]);
    return n;
}

enum wkind { W_F32, W_BF16, W_F16, W_BB };

/* y = x w^T with the variant's routine for kind (x is rounded to bf16 first for W_BB). */
static void gemm(const struct cpu_variant *v, enum wkind kind, float *y, int64_t ldy, const float *x,
                 const uint16_t *xb, int64_t ldx, const void *w, int64_t ldw, int m, int n, int k)
{
    switch (kind) {
    case W_F32: v->gemm_f32(y, ldy, x, ldx, w, ldw, m, n, k); break;
    case W_BF16: v->gemm_bf16(y, ldy, x, ldx, w, ldw, m, n, k); break;
    case W_F16: v->gemm_f16(y, ldy, x, ldx, w, ldw, m, n, k); break;
    case W_BB: v->gemm_bb(y, ldy, xb, ldx, w, ldw, m, n, k); break;
    }
}

static double wval(enum wkind kind, const void *w, int64_t i)
{
    if (kind == W_F32)
        return ((const float *)w)[i];
    if (kind == W_F16)
        return dtype_f16_to_f32(((const uint16_t *)w)[i]);
    return dtype_bf16_to_f32(((const uint16_t *)w)[i]);
}

/* Every (m, n, k) in a grid: the block result equals element-by-element lone dot
 * products bitwise, and a float64 reference within a bound relative to sum |x w|. */
static void check_gemm_kind(const struct cpu_variant *v, enum wkind kind)
{
    static const int ks[] = {1, 5, 15, 16, 17, 31, 32, 33, 64, 100, 128, 257};
    static const int ms[] = {1, 2, 3, 5, 6, 7, 8, 13};
    static const int ns[] = {1, 3, 4, 5, 8, 9, 17};
    int bad_bits = 0, bad_vals = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int k = ks[ki], ld = k + 3; /* strided rows: ld > k */
        float *x = malloc(sizeof(float) * 13 * ld);
        uint16_t *xb = malloc(sizeof(uint16_t) * 13 * ld);
        void *w = malloc(4 * 17 * (size_t)ld);
        for (int i = 0; i < 13 * ld; i++)
            x[i] = frand();
        if (kind == W_BB)
            v->to_bf16(xb, x, 13 * ld);
        for (int i = 0; i < 17 * ld; i++) {
            float f = frand();
            if (kind == W_F32)
                ((float *)w)[i] = f;
            else if (kind == W_F16)
                ((uint16_t *)w)[i] = dtype_f32_to_f16(f);
            else
                ((uint16_t *)w)[i] = dtype_f32_to_bf16(f);
        }
        size_t es = kind == W_F32 ? 4 : 2;
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int m = ms[mi], n = ns[ni];
                float y[13 * 17], y1;
                gemm(v, kind, y, n, x, xb, ld, w, ld, m, n, k);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        gemm(v, kind, &y1, 1, x + i * ld, xb + i * ld, ld, (const char *)w + es * j * ld, ld, 1, 1,
                             k);
                        if (memcmp(&y1, &y[i * n + j], sizeof y1) != 0)
                            bad_bits++;
                        double ref = 0, mag = 0;
                        for (int kk = 0; kk < k; kk++) {
                            double xv = kind == W_BB ? dtype_bf16_to_f32(xb[i * ld + kk]) : x[i * ld + kk];
                            double p = xv * wval(kind, w, (int64_t)j * ld + kk);
                            ref += p;
                            mag += fabs(p);
                        }
                        if (!(fabs(y[i * n + j] - ref) <= 1e-6 * mag + 1e-30))
                            bad_vals++;
                    }
            }
        free(x);
        free(xb);
        free(w);
    }
    CHECK_MSG(bad_bits == 0, "%s kind %d: %d elements differ from a lone dot product", v->name, kind, bad_bits);
    CHECK_MSG(bad_vals == 0, "%s kind %d: %d elements off the float64 reference", v->name, kind, bad_vals);
}

/* gemm_bf16 equals gemm_f32 over the widened rows (attention relies on it to skip
 * the widening for small tasks). */
static void check_bf16_as_f32(const struct cpu_variant *v)
{
    enum { M = 5, N = 19, K = 133 };
    float x[M * K], wf[N * K], y1[M * N], y2[M * N];
    uint16_t w[N * K];
    for (int i = 0; i < M * K; i++)
        x[i] = frand();
    for (int i = 0; i < N * K; i++) {
        w[i] = dtype_f32_to_bf16(frand());
        wf[i] = dtype_bf16_to_f32(w[i]);
    }
    for (int m = 1; m <= M; m += 2) {
        v->gemm_bf16(y1, N, x, K, w, K, m, N, K);
        v->gemm_f32(y2, N, x, K, wf, K, m, N, K);
        CHECK_MSG(!memcmp(y1, y2, sizeof(float) * m * N), "%s: gemm_bf16 differs from widened gemm_f32", v->name);
        /* the attention-score forms prefetch elsewhere and change no bit */
        if (v->scores_bf16) {
            memset(y1, 0, sizeof y1);
            memset(y2, 0, sizeof y2);
            v->gemm_bf16(y1, N, x, K, w, K, m, N - 4, K);
            v->scores_bf16(y2, N, x, K, w, K, m, N - 4, K, 4 * K * (ptrdiff_t)sizeof *w);
            CHECK_MSG(!memcmp(y1, y2, sizeof(float) * m * N), "%s: scores_bf16 differs from gemm_bf16", v->name);
        }
        if (v->scores_bb) {
            uint16_t xb[M * K];
            v->to_bf16(xb, x, M * K);
            memset(y1, 0, sizeof y1);
            memset(y2, 0, sizeof y2);
            v->gemm_bb(y1, N, xb, K, w, K, m, N - 4, K);
            v->scores_bb(y2, N, xb, K, w, K, m, N - 4, K, 4 * K * (ptrdiff_t)sizeof *w);
            CHECK_MSG(!memcmp(y1, y2, sizeof(float) * m * N), "%s: scores_bb differs from gemm_bb", v->name);
        }
    }
}

static void test_gemm_invariant(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    for (int i = 0; i < nv; i++) {
        check_gemm_kind(vs[i], W_F32);
        check_gemm_kind(vs[i], W_BF16);
        check_bf16_as_f32(vs[i]);
        check_gemm_kind(vs[i], W_F16);
        if (vs[i]->gemm_bb)
            check_gemm_kind(vs[i], W_BB);
    }
}

/* bf16 widening is exact; the bf16 rounding of the compute-bf16 variant is nearest
 * even, like dtype_f32_to_bf16 for normal numbers. */
static void test_to_bf16(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    for (int i = 0; i < nv; i++) {
        uint16_t h[777];
        float wide[777];
        for (int j = 0; j < 777; j++)
            h[j] = (uint16_t)(j * 84 + 3);
        vs[i]->widen_bf16(wide, h, 777);
        int badw = 0;
        for (int j = 0; j < 777; j++) {
            float want = dtype_bf16_to_f32(h[j]);
            badw += memcmp(&want, &wide[j], 4) != 0;
        }
        CHECK_MSG(badw == 0, "%s: %d values widened wrongly", vs[i]->name, badw);
        if (!vs[i]->to_bf16)
            continue;
        float x[1000];
        uint16_t got[1000];
        for (int j = 0; j < 1000; j++)
            x[j] = frand() * 100.0f;
        x[0] = 1.0f + 1.0f / 256; /* a tie: rounds to even (1.0) */
        x[1] = 1.0f + 3.0f / 256; /* a tie: rounds to even (1 + 4/256) */
        vs[i]->to_bf16(got, x, 999);
        int bad = 0;
        for (int j = 0; j < 999; j++)
            bad += got[j] != dtype_f32_to_bf16(x[j]);
        CHECK_MSG(bad == 0, "%s: %d values rounded differently", vs[i]->name, bad);
        CHECK(got[0] == 0x3f80 && got[1] == 0x3f82);
    }
}

static double ulp_err(float got, double want)
{
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    return fabs((double)got - want) / ulp;
}

static void test_exp(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    enum { N = 20000 };
    static float x[N], y[N], y1[N];
    for (int i = 0; i < N; i++)
        x[i] = -86.9f + 174.8f * (float)i / N + 0.001f * frand(); /* inside the range */
    for (int i = 0; i < nv; i++) {
        const struct cpu_variant *v = vs[i];
        v->exp(y, x, N);
        double worst = 0;
        for (int j = 0; j < N; j++) {
            double e = ulp_err(y[j], exp((double)x[j]));
            worst = e > worst ? e : worst;
        }
        CHECK_MSG(worst <= 2.0, "%s: exp off by %.2f ulp", v->name, worst);
        /* elementwise: the bits do not depend on the call's length or alignment */
        for (int j = 0; j < 37; j++)
            v->exp(y1 + j, x + j, 1);
        v->exp(y1 + 37, x + 37, N - 37);
        CHECK_MSG(!memcmp(y, y1, sizeof y), "%s: exp depends on the call", v->name);
        float sp[6] = {0.0f, -INFINITY, INFINITY, NAN, -100.0f, 100.0f}, r[6];
        v->exp(r, sp, 6);
        CHECK(r[0] == 1.0f && r[1] == 0.0f && isinf(r[2]) && r[2] > 0 && isnan(r[3]) && r[4] == 0.0f &&
              isinf(r[5]));
    }
}

static void test_swiglu(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    enum { N = 1001 };
    float g[N], u[N], o[N], o1[N];
    for (int j = 0; j < N; j++) {
        g[j] = 12.0f * frand();
        u[j] = frand();
    }
    g[0] = -95.0f; /* exp(95) overflows: silu -> -0 */
    for (int i = 0; i < nv; i++) {
        vs[i]->swiglu(o, g, u, N);
        int bad = 0;
        for (int j = 0; j < N; j++) {
            double ref = (double)g[j] / (1.0 + exp(-(double)g[j])) * u[j];
            bad += !(fabs(o[j] - ref) <= 1e-6 * fabs(ref) + 1e-30);
        }
        CHECK_MSG(bad == 0, "%s: %d SwiGLU values off", vs[i]->name, bad);
        vs[i]->swiglu(o1, g, u, 7);
        vs[i]->swiglu(o1 + 7, g + 7, u + 7, N - 7);
        CHECK(!memcmp(o, o1, sizeof o));
    }
}

/* Equal bits, or both NaN: which payload survives an operation on two NaNs is the
 * compiler's choice of operand order (IEEE leaves it open), in C and in intrinsics. */
static bool same_floats(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i])))
            return false;
    return true;
}

/* The elementwise routines give the bits of their plain C definitions (written out
 * here), at every length and for every kind of value. */
static void test_elementwise(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    enum { N = 1000 };
    static float x[N], w[N], y[N], want[N], cs[N];
    static uint16_t h[N];
    static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xff800001u,
                                       0x7fffffffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu,
                                       0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x00000000u, 0x80000000u};
    int n_special = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < nv; i++) {
        const struct cpu_variant *v = vs[i];
        for (int j = 0; j < N; j++) {
            x[j] = frand() * 50.0f;
            w[j] = frand();
            cs[j] = frand();
        }
        for (int j = 0; j < n_special; j++)
            memcpy(&x[3 * j], &special[j], 4);
        for (int n = 1; n <= 130; n += (n < 40 ? 1 : 17)) {
            if (v->norm_scale) {
                for (int j = 0; j < n; j++)
                    want[j] = w[j] * (x[j] * 0.37f);
                memset(y, 0, sizeof y);
                v->norm_scale(y, x, w, 0.37f, n);
                CHECK_MSG(same_floats(y, want, n) && y[n] == 0.0f, "%s: norm_scale n=%d", v->name, n);
            }
            if (v->add) {
                for (int j = 0; j < n; j++)
                    want[j] = w[j] + x[j];
                memcpy(y, w, sizeof(float) * (n + 1));
                v->add(y, x, n);
                CHECK_MSG(same_floats(y, want, n) && !memcmp(&y[n], &w[n], 4), "%s: add n=%d", v->name, n);
            }
            if (v->store_bf16) {
                uint16_t got[N];
                memset(got, 0xa5, sizeof got);
                v->store_bf16(got, x, n);
                for (int j = 0; j < n; j++)
                    h[j] = dtype_f32_to_bf16(x[j]);
                CHECK_MSG(!memcmp(got, h, 2 * (size_t)n) && got[n] == 0xa5a5, "%s: store_bf16 n=%d", v->name, n);
            }
            if (v->rope && n % 2 == 0) {
                memcpy(y, x, sizeof(float) * n);
                memcpy(want, x, sizeof(float) * n);
                for (int j = 0; j < n / 2; j++) {
                    float x1 = x[j], x2 = x[j + n / 2];
                    want[j] = x1 * cs[2 * j] - x2 * cs[2 * j + 1];
                    want[j + n / 2] = x2 * cs[2 * j] + x1 * cs[2 * j + 1];
                }
                y[n] = 12345.0f;
                v->rope(y, cs, n);
                CHECK_MSG(same_floats(y, want, n) && y[n] == 12345.0f, "%s: rope hd=%d", v->name, n);
            }
        }
        /* every 2^16th bit pattern through the bf16 rounding, ties and NaNs included */
        if (v->store_bf16) {
            int bad = 0;
            for (uint32_t hi = 0; hi < 65536; hi += N) {
                for (int j = 0; j < N; j++) {
                    uint32_t u = ((hi + (uint32_t)j) << 16) | ((uint32_t)j * 0x9e37u & 0xffffu);
                    if (j % 5 == 0)
                        u = ((hi + (uint32_t)j) << 16) | 0x8000u; /* exactly half way */
                    memcpy(&x[j], &u, 4);
                }
                uint16_t got[N];
                v->store_bf16(got, x, N);
                for (int j = 0; j < N; j++)
                    bad += got[j] != dtype_f32_to_bf16(x[j]);
            }
            CHECK_MSG(bad == 0, "%s: store_bf16 differs from dtype_f32_to_bf16 on %d values", v->name, bad);
        }
    }
}

/* Online softmax over several tiles against float64 softmax(s * scale) · V. */
static void test_attn_update(void)
{
    const struct cpu_variant *vs[8];
    int nv = n_variants(vs);
    enum { HD = 80, NP = 45 }; /* head_dim not a multiple of 16; a partial last tile */
    float s[NP], v[NP * HD];
    for (int j = 0; j < NP; j++)
        s[j] = 6.0f * frand();
    for (int j = 0; j < NP * HD; j++)
        v[j] = frand();
    float scale = 0.7f;
    double mx = -INFINITY, den = 0, ref[HD] = {0};
    for (int j = 0; j < NP; j++)
        mx = fmax(mx, (double)s[j] * scale);
    for (int j = 0; j < NP; j++) {
        double p = exp((double)s[j] * scale - mx);
        den += p;
        for (int d = 0; d < HD; d++)
            ref[d] += p * v[j * HD + d];
    }
    for (int i = 0; i < nv; i++) {
        float m = -INFINITY, l = 0, acc[HD] = {0}, st[CPU_ATTN_TILE];
        for (int p0 = 0; p0 < NP; p0 += CPU_ATTN_TILE) {
            int n = NP - p0 < CPU_ATTN_TILE ? NP - p0 : CPU_ATTN_TILE;
            memcpy(st, s + p0, (size_t)n * sizeof(float));
            vs[i]->attn_update(&m, &l, acc, st, n, scale, v + p0 * HD, HD);
        }
        int bad = 0;
        for (int d = 0; d < HD; d++)
            bad += !(fabs(acc[d] / l - ref[d] / den) <= 1e-5);
        CHECK_MSG(bad == 0, "%s: %d attention outputs off", vs[i]->name, bad);
        if (!vs[i]->attn_update_rows)
            continue;
        /* rows together = row by row, with different lengths and a head_dim tail */
        enum { R = 7, HD2 = 144 };
        static float m1[R], l1[R], a1[R * HD2], m2[R], l2[R], a2[R * HD2], ss[R * CPU_ATTN_TILE],
            vv[CPU_ATTN_TILE * HD2];
        int nn[R] = {16, 3, 16, 1, 9, 16, 5};
        for (int r = 0; r < R; r++) {
            m1[r] = m2[r] = r % 3 ? 0.5f * frand() : -INFINITY;
            l1[r] = l2[r] = r % 3 ? 1.0f + frand() : 0.0f;
        }
        for (int j = 0; j < R * HD2; j++)
            a1[j] = a2[j] = frand();
        for (int j = 0; j < CPU_ATTN_TILE * HD2; j++)
            vv[j] = frand();
        for (int j = 0; j < R * CPU_ATTN_TILE; j++)
            ss[j] = 3 * frand();
        for (int r = 0; r < R; r++) {
            float st1[CPU_ATTN_TILE];
            memcpy(st1, ss + r * CPU_ATTN_TILE, sizeof st1);
            vs[i]->attn_update(&m1[r], &l1[r], a1 + r * HD2, st1, nn[r], scale, vv, HD2);
        }
        vs[i]->attn_update_rows(m2, l2, a2, ss, nn, R, scale, vv, HD2);
        CHECK_MSG(!memcmp(m1, m2, sizeof m1) && !memcmp(l1, l2, sizeof l1) && !memcmp(a1, a2, sizeof a1),
                  "%s: attn_update_rows differs from row by row", vs[i]->name);
        if (!vs[i]->attn_update_rows_bf16)
            continue;
        /* bf16 V read where it lies = widened first */
        static uint16_t vb[CPU_ATTN_TILE * HD2];
        static float vw[CPU_ATTN_TILE * HD2], m3[R], l3[R], a3[R * HD2], m4[R], l4[R], a4[R * HD2];
        const uint16_t *vrows[CPU_ATTN_TILE];
        for (int j = 0; j < CPU_ATTN_TILE * HD2; j++) {
            vb[j] = dtype_f32_to_bf16(frand());
            vw[j] = dtype_bf16_to_f32(vb[j]);
        }
        for (int j = 0; j < CPU_ATTN_TILE; j++)
            vrows[j] = vb + (CPU_ATTN_TILE - 1 - j) * HD2; /* rows anywhere: reversed */
        float vrev[CPU_ATTN_TILE * HD2];
        for (int j = 0; j < CPU_ATTN_TILE; j++)
            memcpy(vrev + j * HD2, vw + (CPU_ATTN_TILE - 1 - j) * HD2, HD2 * sizeof(float));
        memcpy(m3, m1, sizeof m1), memcpy(l3, l1, sizeof l1), memcpy(a3, a1, sizeof a1);
        memcpy(m4, m1, sizeof m1), memcpy(l4, l1, sizeof l1), memcpy(a4, a1, sizeof a1);
        vs[i]->attn_update_rows(m3, l3, a3, ss, nn, R, scale, vrev, HD2);
        vs[i]->attn_update_rows_bf16(m4, l4, a4, ss, nn, R, scale, vrows, HD2, 0);
        CHECK_MSG(!memcmp(m3, m4, sizeof m3) && !memcmp(l3, l4, sizeof l3) && !memcmp(a3, a4, sizeof a3),
                  "%s: attn_update_rows_bf16 differs from widening first", vs[i]->name);
        /* prefetching the rows one further on (inside vb) changes no bit */
        memcpy(m4, m1, sizeof m1), memcpy(l4, l1, sizeof l1), memcpy(a4, a1, sizeof a1);
        vs[i]->attn_update_rows_bf16(m4, l4, a4, ss, nn, R, scale, vrows, HD2, -HD2 * (ptrdiff_t)sizeof *vb);
        CHECK_MSG(!memcmp(m3, m4, sizeof m3) && !memcmp(l3, l4, sizeof l3) && !memcmp(a3, a4, sizeof a3),
                  "%s: attn_update_rows_bf16 depends on its prefetch", vs[i]->name);
    }
}

/* ------------------------------------------------------------------ backend */

struct mats {
    struct weights_mat a, b;  /* [n, k] bf16 */
    struct weights_mat c;     /* [k2, n] f32 (a second shape and dtype) */
    uint16_t *ad, *bd;
    float *cd;
};

static void mats_init(struct mats *mt, int n, int k)
{
    mt->ad = malloc((size_t)n * k * 2);
    mt->bd = malloc((size_t)n * k * 2);
    mt->cd = malloc((size_t)n * k * 4);
    for (int64_t i = 0; i < (int64_t)n * k; i++) {
        mt->ad[i] = dtype_f32_to_bf16(0.1f * frand());
        mt->bd[i] = dtype_f32_to_bf16(0.1f * frand());
        mt->cd[i] = 0.1f * frand();
    }
    mt->a = (struct weights_mat){.dtype = SAFETENSORS_DTYPE_BF16, .rows = n, .cols = k, .data = mt->ad};
    mt->b = (struct weights_mat){.dtype = SAFETENSORS_DTYPE_BF16, .rows = n, .cols = k, .data = mt->bd};
    mt->c = (struct weights_mat){.dtype = SAFETENSORS_DTYPE_F32, .rows = k, .cols = n, .data = mt->cd};
}

static void mats_free(struct mats *mt)
{
    free(mt->ad);
    free(mt->bd);
    free(mt->cd);
}

static void test_backend_matmuls(void)
{
    const char *names[8];
    int nv = backend_cpu_variants(names, 8);
    enum { N = 300, K = 200, M = 100 };
    struct mats mt;
    mats_init(&mt, N, K);
    float *x = malloc(sizeof(float) * M * K), *xn = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        x[i] = frand();
    for (int i = 0; i < M * N; i++)
        xn[i] = frand();
    float *y = malloc(sizeof(float) * M * N), *y2 = malloc(sizeof(float) * M * N), *u = malloc(sizeof(float) * M * N),
          *z = malloc(sizeof(float) * M * N), *yc = malloc(sizeof(float) * M * K),
          *yc2 = malloc(sizeof(float) * M * K);
    char err[HR_ERRLEN];
    for (int vi = 0; vi < nv; vi++) {
        struct backend be1, be3;
        CHECK_OK(backend_cpu_init(&be1, &(struct backend_opts){.n_threads = 1, .kernel = names[vi]}, err, sizeof err),
                 err);
        CHECK_OK(backend_cpu_init(&be3, &(struct backend_opts){.n_threads = 3, .kernel = names[vi]}, err, sizeof err),
                 err);
        /* matmul scratch for M rows of up to max(K, N) inputs */
        struct model_config geo = {.hidden_size = K > N ? K : N, .head_dim = 2};
        CHECK_OK(be1.ops->reserve(&be1, &geo, M, 0, err, sizeof err), err);
        CHECK_OK(be3.ops->reserve(&be3, &geo, M, 0, err, sizeof err), err);
        /* rows alone and rows together, 1 and 3 threads */
        be1.ops->matmul(&be1, y, x, M, &mt.a);
        int bad = 0;
        for (int i = 0; i < M; i += 7) {
            be3.ops->matmul(&be3, y2, x + i * K, 1, &mt.a);
            bad += memcmp(y2, y + i * N, sizeof(float) * N) != 0;
        }
        be3.ops->matmul(&be3, y2, x, M, &mt.a);
        bad += memcmp(y, y2, sizeof(float) * M * N) != 0;
        be3.ops->matmul(&be3, y2, x + 3 * K, 70, &mt.a); /* another row count: small-m and large-m splits */
        bad += memcmp(y + 3 * N, y2, sizeof(float) * 70 * N) != 0;
        CHECK_MSG(bad == 0, "%s: matmul rows depend on the batch or threads", names[vi]);
        /* matmul_multi = separate matmuls */
        float *ys[2] = {y2, u};
        const struct weights_mat *ws[2] = {&mt.a, &mt.b};
        be3.ops->matmul_multi(&be3, 2, ys, x, M, ws);
        be1.ops->matmul(&be1, z, x, M, &mt.b);
        CHECK(!memcmp(y2, y, sizeof(float) * M * N) && !memcmp(u, z, sizeof(float) * M * N));
        /* matmul_add = matmul then add */
        memcpy(y2, xn, sizeof(float) * M * N);
        be3.ops->matmul_add(&be3, y2, x, M, &mt.a);
        bad = 0;
        for (int i = 0; i < M * N; i++) {
            float want = xn[i] + y[i];
            bad += memcmp(&want, &y2[i], sizeof want) != 0;
        }
        CHECK_MSG(bad == 0, "%s: matmul_add differs from matmul + add", names[vi]);
        /* matmul_swiglu = silu(matmul gate) * matmul up, with the variant's swiglu */
        be3.ops->matmul_swiglu(&be3, y2, x, M, &mt.a, &mt.b);
        ((struct cpu_backend *)be1.impl)->v->swiglu(u, y, z, (int64_t)M * N);
        CHECK_MSG(!memcmp(u, y2, sizeof(float) * M * N), "%s: matmul_swiglu differs", names[vi]);
        /* f32 weights, another k; and matmul_f32 equals the f32 variant's matmul */
        be1.ops->matmul(&be1, yc, xn, M, &mt.c);
        be3.ops->matmul(&be3, yc2, xn, M, &mt.c);
        CHECK(!memcmp(yc, yc2, sizeof(float) * M * K));
        cpu_matmul_f32(&be3, y2, x, M, &mt.a);
        struct backend bef;
        CHECK_OK(backend_cpu_init(&bef, &(struct backend_opts){.n_threads = 2, .kernel = be3.isa, .compute = "f32"},
                                  err, sizeof err),
                 err);
        bef.ops->matmul(&bef, u, x, M, &mt.a);
        CHECK_MSG(!memcmp(u, y2, sizeof(float) * M * N), "%s: matmul_f32 is not the f32 matmul", names[vi]);
        backend_free(&bef);
        /* matmul_grouped = a matmul per group of rows (with an empty group), SwiGLU too */
        int row0[5] = {0, 13, 13, 77, M};
        const struct weights_mat *gw[4] = {&mt.a, &mt.b, &mt.b, &mt.a}, *uw[4] = {&mt.b, &mt.a, &mt.a, &mt.b};
        cpu_matmul_grouped(&be3, y2, x, 4, row0, gw, NULL);
        cpu_matmul_grouped(&be3, u, x, 4, row0, gw, uw);
        bad = 0;
        for (int gi = 0; gi < 4; gi++) {
            int m = row0[gi + 1] - row0[gi];
            if (!m)
                continue;
            be1.ops->matmul(&be1, z, x + row0[gi] * K, m, gw[gi]);
            bad += memcmp(z, y2 + row0[gi] * N, sizeof(float) * m * N) != 0;
            be1.ops->matmul_swiglu(&be1, z, x + row0[gi] * K, m, gw[gi], uw[gi]);
            bad += memcmp(z, u + row0[gi] * N, sizeof(float) * m * N) != 0;
        }
        CHECK_MSG(bad == 0, "%s: matmul_grouped differs from per-group matmuls", names[vi]);
        backend_free(&be1);
        backend_free(&be3);
    }
    free(x);
    free(xn);
    free(y);
    free(y2);
    free(u);
    free(z);
    free(yc);
    free(yc2);
    mats_free(&mt);
}

/* The plain definitions attn_prep fuses: RoPE (halves rotated) with cos/sin of the
 * position computed in double, and the store of one token's K/V row at its slot. */
static void ref_rope(float *x, int pos, int hd, double theta)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        double ang = (double)pos * pow(theta, -(double)(2 * i) / (double)hd);
        float co = (float)cos(ang), si = (float)sin(ang);
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * co - x2 * si;
        x[i + half] = x2 * co + x1 * si;
    }
}

static void ref_kv_store(struct kv_store *kv, int layer, int64_t slot, const float *k, const float *v)
{
    int hd = kv->head_dim, blk = (int)(slot / kv->block_size), off = (int)(slot % kv->block_size);
    for (int h = 0; h < kv->n_kv_heads; h++)
        for (int sel = 0; sel < 2; sel++) {
            const float *src = (sel ? v : k) + (int64_t)h * hd;
            void *dst = kv_store_head(kv, blk, layer, sel, h);
            for (int e = 0; e < hd; e++) {
                if (kv->dtype == KV_DTYPE_F32)
                    ((float *)dst)[(int64_t)off * hd + e] = src[e];
                else
                    ((uint16_t *)dst)[(int64_t)off * hd + e] = dtype_f32_to_bf16(src[e]);
            }
        }
}

/* attn_prep = rmsnorm (q_norm, k_norm) + rope + the K/V store, bitwise, with the RoPE
 * table the backend computes from the batch's positions at begin_step. */
static void test_attn_prep_fused(void)
{
    const char *names[8];
    int nv = backend_cpu_variants(names, 8);
    enum { T = 5, H = 4, KVH = 2, HD = 64, CTX = 2 };
    struct model_config cfg = {.n_layers = 2, .n_heads = H, .n_kv_heads = KVH, .head_dim = HD, .hidden_size = H * HD,
                               .rope_theta = 1000000.0};
    char err[HR_ERRLEN];
    float q0[T * H * HD], k0[T * KVH * HD], v0[T * KVH * HD], qn[HD], kn[HD];
    float q1[T * H * HD], k1[T * KVH * HD], q2[T * H * HD], k2[T * KVH * HD];
    for (int i = 0; i < T * H * HD; i++)
        q0[i] = frand();
    for (int i = 0; i < T * KVH * HD; i++) {
        k0[i] = frand();
        v0[i] = frand();
    }
    for (int i = 0; i < HD; i++) {
        qn[i] = 1 + 0.1f * frand();
        kn[i] = 1 + 0.1f * frand();
    }
    int32_t table[2] = {1, 0}, tok[T] = {1, 2, 3, 4, 5};
    for (int vi = 0; vi < nv; vi++) {
        for (int dt = 0; dt < 2; dt++) {
            struct backend be;
            struct kv_store a, b2;
            struct batch b;
            enum kv_dtype kd = dt ? KV_DTYPE_F32 : KV_DTYPE_BF16;
            size_t bytes = 2 * 4 * kv_store_bytes_per_token(2, KVH, HD, kd);
            CHECK_OK(backend_cpu_init(&be, &(struct backend_opts){.n_threads = 2, .kernel = names[vi]}, err,
                                      sizeof err),
                     err);
            CHECK_OK(be.ops->reserve(&be, &cfg, T, 0, err, sizeof err), err);
            CHECK_OK(kv_store_layout(&a, 2, KVH, HD, kd, 4, bytes, err, sizeof err), err);
            CHECK_OK(kv_store_layout(&b2, 2, KVH, HD, kd, 4, bytes, err, sizeof err), err);
            CHECK_OK(be.ops->kv_alloc(&be, &a, err, sizeof err), err);
            CHECK_OK(be.ops->kv_alloc(&be, &b2, err, sizeof err), err);
            CHECK_OK(batch_init(&b, 4, 1, T, err, sizeof err), err);
            CHECK_OK(batch_add_row(&b, 0, tok, T, CTX, table, 2, BATCH_LOGITS_NONE, err, sizeof err), err);
            CHECK_OK(batch_build(&b, 2, err, sizeof err), err);
            CHECK_OK(be.ops->begin_step(&be, &b, &b2, err, sizeof err), err);
            memcpy(q1, q0, sizeof q0);
            memcpy(k1, k0, sizeof k0);
            memcpy(q2, q0, sizeof q0);
            memcpy(k2, k0, sizeof k0);
            be.ops->rmsnorm(&be, q1, q1, qn, T * H, HD, 1e-6f);
            be.ops->rmsnorm(&be, k1, k1, kn, T * KVH, HD, 1e-6f);
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < H; h++)
                    ref_rope(q1 + (t * H + h) * HD, CTX + t, HD, cfg.rope_theta);
                for (int h = 0; h < KVH; h++)
                    ref_rope(k1 + (t * KVH + h) * HD, CTX + t, HD, cfg.rope_theta);
                ref_kv_store(&a, 1, b.slots[t], k1 + t * KVH * HD, v0 + t * KVH * HD);
            }
            be.ops->attn_prep(&be, q2, k2, v0, qn, kn, 1e-6f, H, &b2, 1);
            CHECK_OK(be.ops->sync(&be, err, sizeof err), err);
            CHECK_MSG(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1), "%s: fused q/k differ", names[vi]);
            CHECK_MSG(!memcmp(a.slab, b2.slab, kv_store_slab_bytes(&a)), "%s: fused KV write differs", names[vi]);
            batch_free(&b);
            be.ops->kv_free(&be, &a);
            be.ops->kv_free(&be, &b2);
            backend_free(&be);
        }
    }
}

/* ------------------------------------------------------------------ thread pool */

struct tp_ctx {
    _Atomic int *hits; /* [n_tasks] */
    _Atomic int bad_thread;
    int n_threads;
};

static void tp_task(void *ctx, int t, int thread)
{
    struct tp_ctx *c = ctx;
    atomic_fetch_add(&c->hits[t], 1);
    if (thread < 0 || thread >= c->n_threads)
        atomic_fetch_add(&c->bad_thread, 1);
}

static void test_threadpool(void)
{
    char err[HR_ERRLEN];
    enum { MAXT = 257 };
    static _Atomic int hits[MAXT];
    for (int nt = 1; nt <= 4; nt++) {
        struct threadpool tp;
        CHECK_OK(threadpool_init(&tp, nt, err, sizeof err), err);
        int bad = 0;
        struct tp_ctx c = {.hits = hits, .n_threads = nt};
        atomic_init(&c.bad_thread, 0);
        for (int round = 0; round < 3000; round++) {
            int n = round % 7 == 0 ? 0 : round % 5 == 0 ? 1 : 1 + round % MAXT;
            for (int i = 0; i < MAXT; i++)
                atomic_store(&hits[i], 0);
            threadpool_run(&tp, tp_task, &c, n);
            for (int i = 0; i < MAXT; i++)
                bad += atomic_load(&hits[i]) != (i < n);
        }
        CHECK_MSG(bad == 0 && atomic_load(&c.bad_thread) == 0, "threads %d: %d tasks ran other than once", nt, bad);
        threadpool_free(&tp);
        threadpool_free(&tp); /* a second free is a no-op */
    }
    struct threadpool tp;
    CHECK(threadpool_init(&tp, 0, err, sizeof err) == HR_ERR_INVALID);
}

int main(void)
{
    TEST_RUN(test_gemm_invariant);
    TEST_RUN(test_to_bf16);
    TEST_RUN(test_exp);
    TEST_RUN(test_swiglu);
    TEST_RUN(test_elementwise);
    TEST_RUN(test_attn_update);
    TEST_RUN(test_backend_matmuls);
    TEST_RUN(test_attn_prep_fused);
    TEST_RUN(test_threadpool);
    TEST_END();
}
