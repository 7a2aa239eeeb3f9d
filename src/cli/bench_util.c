/* Benchmark helpers. */
#include "cli/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <xxhash.h>

double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, int n, double q)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    double pos = q * (n - 1);
    int i = (int)pos;
    double f = pos - i;
    return i + 1 < n ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

double bench_median(double *v, int n) { return bench_percentile(v, n, 0.5); }

void bench_digest_add(struct bench_digest *d, const void *data, size_t n)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(data, n, d->lo ^ d->hi);
    d->lo = h.low64;
    d->hi = h.high64;
}

void bench_digest_hex(const struct bench_digest *d, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)d->hi, (unsigned long long)d->lo);
}

struct hearth_engine *bench_engine(const struct hearth_engine_params *p)
{
    char err[HR_ERRLEN];
    struct hearth_engine *e = NULL;
    if (engine_create(&e, p, false, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth bench: %s\n", err);
        return NULL;
    }
    return e;
}

double bench_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

void bench_tokens(int32_t *out, int n, int vocab, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out[i] = (int32_t)(s % (uint64_t)vocab);
    }
}
