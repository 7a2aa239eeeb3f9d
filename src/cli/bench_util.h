/* Helpers shared by the benchmark subcommands: clocks, percentiles, digests,
 * a threadless engine driven step by step, and the process's peak RSS. */
#ifndef HEARTH_CLI_BENCH_UTIL_H
#define HEARTH_CLI_BENCH_UTIL_H

#include <stdint.h>

#include "engine/engine.h"

double bench_now(void);
/* q in [0, 1] of v[0..n) (sorts v). */
double bench_percentile(double *v, int n, double q);
double bench_median(double *v, int n);
/* A chained 128-bit digest: d = XXH3-128(data, seed = d.lo ^ d.hi). */
struct bench_digest {
    uint64_t lo, hi;
};
void bench_digest_add(struct bench_digest *d, const void *data, size_t n);
void bench_digest_hex(const struct bench_digest *d, char out[33]);
/* An engine without its thread, for exact step-by-step timing. */
struct hearth_engine *bench_engine(const struct hearth_engine_params *p);
/* Peak resident set of this process, MiB. */
double bench_peak_rss_mib(void);
/* Random token ids in [0, vocab) from a seeded generator. */
void bench_tokens(int32_t *out, int n, int vocab, uint64_t seed);

#endif
