/* dtype conversions against independent references: the IEEE definitions evaluated
 * in double precision (exhaustively for binary16), hand-picked ties, and, where the
 * CPU has it, the F16C hardware converter. */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/dtype.h"
#include "test.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* ---------------------------------------------------------------- references */

/* binary16 value by its definition. */
static double f16_ref(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest of two neighbours by exact double distance, ties to the even one.
 * hi_val is the value the upper neighbour would have with an unbounded exponent. */
static int pick(double x, double lo_val, double hi_val, int lo_even)
{
    double dl = fabs(x - lo_val), dh = fabs(hi_val - x);
    if (dl < dh)
        return 0;
    if (dh < dl)
        return 1;
    return lo_even ? 0 : 1;
}

/* f32 -> bf16 by choosing between the truncation and the next value up. */
static uint16_t bf16_ref(float f)
{
    uint32_t u = fbits(f);
    uint16_t lo = (uint16_t)(u >> 16);
    if ((u & 0xffff) == 0)
        return lo;
    uint32_t mag_lo = (uint32_t)(lo & 0x7fff) << 16;
    double vlo = fabs((double)bitsf(mag_lo));
    double vhi = (lo & 0x7fff) == 0x7f7f ? ldexp(1, 128) : fabs((double)bitsf(mag_lo + 0x10000));
    return pick(fabs((double)f), vlo, vhi, (lo & 1) == 0) ? (uint16_t)(lo + 1) : lo;
}

/* f32 -> f16 by binary search over the positive binary16 values, which are
 * increasing in their bit patterns 0x0000..0x7bff. */
static uint16_t f16_from_ref(float f)
{
    uint16_t sign = (fbits(f) >> 16) & 0x8000;
    double x = fabs((double)f);
    if (x >= 65520.0) /* max 65504 plus half an ulp (16): rounds to inf */
        return sign | 0x7c00;
    int lo = 0, hi = 0x7bff;
    while (lo < hi) { /* largest h with value <= x */
        int mid = (lo + hi + 1) / 2;
        if (f16_ref((uint16_t)mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (f16_ref((uint16_t)lo) == x || lo == 0x7bff)
        return sign | (uint16_t)lo;
    return sign | (uint16_t)(lo + pick(x, f16_ref((uint16_t)lo), f16_ref((uint16_t)(lo + 1)), (lo & 1) == 0));
}

/* ---------------------------------------------------------------- tests */

static void test_bf16_to_f32(void)
{
    CHECK(dtype_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(dtype_bf16_to_f32(0xc000) == -2.0f);
    CHECK(dtype_bf16_to_f32(0x0000) == 0.0f && !signbit(dtype_bf16_to_f32(0x0000)));
    CHECK(signbit(dtype_bf16_to_f32(0x8000)));
    CHECK(isinf(dtype_bf16_to_f32(0x7f80)) && dtype_bf16_to_f32(0x7f80) > 0);
    CHECK(isnan(dtype_bf16_to_f32(0x7fc0)));
    CHECK(dtype_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* smallest subnormal */
    CHECK(dtype_bf16_to_f32(0x4049) == 3.140625f);
}

static void test_f32_to_bf16_cases(void)
{
    CHECK(dtype_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(dtype_f32_to_bf16(bitsf(0x3f808000)) == 0x3f80); /* tie, even below: stay */
    CHECK(dtype_f32_to_bf16(bitsf(0x3f818000)) == 0x3f82); /* tie, odd below: up */
    CHECK(dtype_f32_to_bf16(bitsf(0x3f808001)) == 0x3f81); /* above the tie */
    CHECK(dtype_f32_to_bf16(bitsf(0x3f807fff)) == 0x3f80);
    CHECK(dtype_f32_to_bf16(bitsf(0x7f7fffff)) == 0x7f80); /* max float rounds to inf */
    CHECK(dtype_f32_to_bf16(bitsf(0x7f7f7fff)) == 0x7f7f);
    CHECK(dtype_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(dtype_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(dtype_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(dtype_f32_to_bf16(bitsf(0x00008000)) == 0x0000); /* subnormal tie to even */
    CHECK(dtype_f32_to_bf16(bitsf(0x00018000)) == 0x0002);
    /* NaN stays NaN even when its payload lies only in the dropped half */
    uint16_t n1 = dtype_f32_to_bf16(bitsf(0x7f800001));
    CHECK((n1 & 0x7f80) == 0x7f80 && (n1 & 0x7f) != 0);
    CHECK(dtype_f32_to_bf16(bitsf(0xffc00000)) == 0xffc0);
    CHECK(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(NAN))));
}

static void test_f32_to_bf16_random(void)
{
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rnd32();
        if (i & 1) /* half the samples at or next to a tie */
            u = (u & 0xffff0000u) + 0x8000u + (uint32_t)((i >> 1) % 3) - 1u;
        float f = bitsf(u);
        if (isnan(f))
            continue;
        if (dtype_f32_to_bf16(f) != bf16_ref(f) && bad++ < 5)
            fprintf(stderr, "  bf16(%08x) = %04x, reference %04x\n", u, dtype_f32_to_bf16(f), bf16_ref(f));
    }
    CHECK(bad == 0);
}

static void test_f16_to_f32_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = dtype_f16_to_f32((uint16_t)h);
        double want = f16_ref((uint16_t)h);
        bool ok;
        if (isnan(want)) /* NaN: payload moved up, sign kept */
            ok = isnan(got) && (fbits(got) & 0x007fffff) == (h & 0x3ff) << 13 &&
                 (fbits(got) >> 31) == (h >> 15);
        else
            ok = (double)got == want && !signbit(got) == !signbit(want);
        if (!ok && bad++ < 5)
            fprintf(stderr, "  f16 %04x -> %a, want %a\n", h, (double)got, want);
    }
    CHECK(bad == 0);
    float buf[3];
    const uint16_t in[3] = {0x3c00, 0x0001, 0xfbff};
    dtype_f16_to_f32_n(buf, in, 3);
    CHECK(buf[0] == 1.0f && buf[1] == ldexpf(1, -24) && buf[2] == -65504.0f);
}

static void test_f32_to_f16_cases(void)
{
    CHECK(dtype_f32_to_f16(1.0f) == 0x3c00);
    CHECK(dtype_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(dtype_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(dtype_f32_to_f16(65520.0f) == 0x7c00); /* halfway to 2^16: ties to even = inf */
    CHECK(dtype_f32_to_f16(1e10f) == 0x7c00);
    CHECK(dtype_f32_to_f16(-1e10f) == 0xfc00);
    CHECK(dtype_f32_to_f16(ldexpf(1, -24)) == 0x0001);
    CHECK(dtype_f32_to_f16(ldexpf(1, -25)) == 0x0000);          /* tie to even: zero */
    CHECK(dtype_f32_to_f16(ldexpf(1.5f, -25)) == 0x0001);       /* above the tie */
    CHECK(dtype_f32_to_f16(ldexpf(3, -25)) == 0x0002);          /* 1.5 units: tie, odd below -> 2 */
    CHECK(dtype_f32_to_f16(ldexpf(1023.5f, -24)) == 0x0400);    /* rounds into the normal range */
    CHECK(dtype_f32_to_f16(-0.0f) == 0x8000);
    CHECK(dtype_f32_to_f16(ldexpf(1, -140)) == 0x0000);         /* f32 subnormal range */
    CHECK(dtype_f32_to_f16(INFINITY) == 0x7c00);
    uint16_t n = dtype_f32_to_f16(bitsf(0x7f800001));
    CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
    CHECK(dtype_f32_to_f16(bitsf(0xffc00000)) == 0xfe00);
}

static void test_f32_to_f16_roundtrip_and_ties(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hh = (uint16_t)h;
        if (((h >> 10) & 31) == 31)
            continue;
        if (dtype_f32_to_f16(dtype_f16_to_f32(hh)) != hh && bad++ < 5)
            fprintf(stderr, "  roundtrip %04x failed\n", h);
        /* the midpoint to the next value up, computed exactly in double */
        if ((h & 0x7fff) < 0x7bff) {
            double mid = (f16_ref(hh) + f16_ref((uint16_t)(hh + 1))) / 2;
            float fm = (float)mid; /* exact: binary16 midpoints have 12 significant bits */
            uint16_t want = (h & 1) ? (uint16_t)(hh + 1) : hh;
            if ((double)fm == mid && dtype_f32_to_f16(fm) != want && bad++ < 5)
                fprintf(stderr, "  midpoint after %04x -> %04x, want %04x\n", h, dtype_f32_to_f16(fm), want);
        }
    }
    CHECK(bad == 0);
}

static void test_f32_to_f16_random(void)
{
    int bad = 0;
    for (int i = 0; i < 300000; i++) {
        uint32_t u = rnd32();
        /* exponents around the binary16 range, where all the cases are */
        u = (u & 0x807fffffu) | ((uint32_t)(95 + (rnd32() % 50)) << 23);
        float f = bitsf(u);
        if (dtype_f32_to_f16(f) != f16_from_ref(f) && bad++ < 5)
            fprintf(stderr, "  f16(%a) = %04x, reference %04x\n", (double)f, dtype_f32_to_f16(f), f16_from_ref(f));
    }
    CHECK(bad == 0);
}

__attribute__((target("f16c"))) static int compare_f16c(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float hw = _cvtsh_ss((unsigned short)h);
        float sw = dtype_f16_to_f32((uint16_t)h);
        if (fbits(hw) != fbits(sw) && !(isnan(hw) && isnan(sw)))
            bad++;
    }
    for (int i = 0; i < 1000000; i++) {
        float f = bitsf(rnd32());
        if (isnan(f))
            continue;
        unsigned short hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (hw != dtype_f32_to_f16(f) && bad++ < 5)
            fprintf(stderr, "  f16c(%08x) = %04x, ours %04x\n", fbits(f), hw, dtype_f32_to_f16(f));
    }
    return bad;
}

/* F16C (CPUID.1:ECX bit 29) is VEX-encoded: it also needs AVX state enabled by the OS. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27)))
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
}

static void test_f16c_agreement(void)
{
    if (!cpu_has_f16c()) {
        printf("  (no F16C on this CPU: skipped)\n");
        return;
    }
    CHECK(compare_f16c() == 0);
}

static void test_array_forms(void)
{
    const float src[4] = {1.0f, -2.5f, 0.1f, 65504.0f};
    uint16_t b[4], h[4];
    float back[4];
    dtype_f32_to_bf16_n(b, src, 4);
    dtype_f32_to_f16_n(h, src, 4);
    for (int i = 0; i < 4; i++) {
        CHECK(b[i] == dtype_f32_to_bf16(src[i]));
        CHECK(h[i] == dtype_f32_to_f16(src[i]));
    }
    /* unaligned source */
    uint8_t raw[9];
    memcpy(raw + 1, b, 8);
    dtype_bf16_to_f32_n(back, raw + 1, 4);
    CHECK(back[0] == 1.0f && back[1] == -2.5f && back[3] == 65536.0f);
}

int main(void)
{
    TEST_RUN(test_bf16_to_f32);
    TEST_RUN(test_f32_to_bf16_cases);
    TEST_RUN(test_f32_to_bf16_random);
    TEST_RUN(test_f16_to_f32_exhaustive);
    TEST_RUN(test_f32_to_f16_cases);
    TEST_RUN(test_f32_to_f16_roundtrip_and_ties);
    TEST_RUN(test_f32_to_f16_random);
    TEST_RUN(test_f16c_agreement);
    TEST_RUN(test_array_forms);
    TEST_END();
}
