/* The machine's own ceilings, measured with the same threads the kernels use, so
 * that benchmarks can state each figure as a fraction of what the hardware does. */
#ifndef HEARTH_KERNELS_CPU_CEILING_H
#define HEARTH_KERNELS_CPU_CEILING_H

#include <stdbool.h>

#include "base/status.h"

struct cpu_ceilings {
    int n_threads;
    double fma_f32_gflops;  /* peak f32 FMA rate (AVX-512, else AVX2, else scalar) */
    double dot_bf16_gflops; /* peak VDPBF16PS rate, 2 flops per product; 0 without AVX512_BF16 */
    double read_gbs;        /* memory read bandwidth, median of seven passes over 512 MiB */
    bool has_avx512, has_bf16;
};

/* Takes about a second and 512 MiB (the bandwidth buffer, freed before returning). */
enum hr_status cpu_ceilings_measure(int n_threads, struct cpu_ceilings *out, char *err, size_t errlen);

/* Per-thread loops (ceiling_avx512.c, ceiling.c): return a value that depends on the
 * work so the compiler keeps it. */
float cpu_ceiling_fma_avx512(long iters);   /* 12 chains x 16 lanes x 2 flops per iteration */
float cpu_ceiling_dot_avx512bf16(long iters); /* 12 chains x 32 products x 2 flops per iteration */
float cpu_ceiling_read_avx512(const float *p, long n);
float cpu_ceiling_fma_avx2(long iters);     /* 12 chains x 8 lanes x 2 flops per iteration */

#endif
