/* Picks the CPU kernel variant once, at start-up, from cpuid.  Built for baseline
 * x86-64: nothing here may use an instruction the oldest supported CPU lacks. */
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

/* F16C through cpuid: not every compiler's __builtin_cpu_supports knows it. */
static bool dispatch_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static bool dispatch_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma") && dispatch_has_f16c();
}

/* AVX512_BF16: cpuid leaf 7, sub-leaf 1, EAX bit 5. */
static bool dispatch_has_avx512bf16(void)
{
    unsigned a, b, c, d;
    return dispatch_has_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

static bool dispatch_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && dispatch_has_f16c();
}

int backend_cpu_variants(const char **names, int cap)
{
    int n = 0;
    if (dispatch_has_avx512() && n < cap)
        names[n++] = cpu_variant_avx512.name;
    if (dispatch_has_avx512bf16() && n < cap)
        names[n++] = cpu_variant_avx512bf16.name;
    if (dispatch_has_avx2() && n < cap)
        names[n++] = cpu_variant_avx2.name;
    if (n < cap)
        names[n++] = cpu_variant_scalar.name;
    return n;
}

enum hr_status cpu_variant_pick(const char *want, const struct cpu_variant **out, char *err, size_t errlen)
{
    if (!want || !*want)
        want = getenv("HEARTH_KERNEL");
    if (!want || !*want || !strcmp(want, "auto")) {
        *out = dispatch_has_avx512() ? &cpu_variant_avx512
             : dispatch_has_avx2()   ? &cpu_variant_avx2
                                     : &cpu_variant_scalar;
        return HR_OK;
    }
    if (!strcmp(want, "avx512bf16")) {
        if (!dispatch_has_avx512bf16())
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "kernel variant avx512bf16: this CPU lacks AVX512_BF16");
        *out = &cpu_variant_avx512bf16;
    } else if (!strcmp(want, "avx512")) {
        if (!dispatch_has_avx512())
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "kernel variant avx512: this CPU lacks AVX-512");
        *out = &cpu_variant_avx512;
    } else if (!strcmp(want, "avx2")) {
        if (!dispatch_has_avx2())
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "kernel variant avx2: this CPU lacks AVX2/FMA");
        *out = &cpu_variant_avx2;
    } else if (!strcmp(want, "scalar")) {
        *out = &cpu_variant_scalar;
    } else {
        return hr_err(err, errlen, HR_ERR_INVALID, "unknown kernel variant '%s' (avx512, avx512bf16, avx2, scalar, auto)",
                      want);
    }
    return HR_OK;
}
