/* Constants of the kernels' own exp, shared by every variant so that they all
 * compute the same function (each with its own instruction sequence, hence its own
 * bits): exp(x) = 2^n * P(r), n = round(x * log2 e), r = x - n ln2 (Cody-Waite, two
 * parts), P the degree-7 Taylor polynomial of e^r on |r| <= ln2/2 (truncation error
 * below 1e-8 relative).  exp(x) = 0 for x < CPU_EXP_LO and +inf for x > CPU_EXP_HI,
 * so 2^n is always a normal number built from its exponent bits; NaN stays NaN.
 * libm's expf is not used: its bits may change with the C library. */
#ifndef HEARTH_KERNELS_CPU_VMATH_H
#define HEARTH_KERNELS_CPU_VMATH_H

#define CPU_EXP_HI 88.0f
#define CPU_EXP_LO (-87.0f)
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_LN2_HI 0.693359375f       /* 355/512: n * LN2_HI is exact */
#define CPU_EXP_LN2_LO (-2.12194440e-4f)  /* ln 2 - LN2_HI */
#define CPU_EXP_C2 0.5f
#define CPU_EXP_C3 0.166666672f           /* 1/3! */
#define CPU_EXP_C4 0.0416666679f          /* 1/4! */
#define CPU_EXP_C5 0.00833333377f         /* 1/5! */
#define CPU_EXP_C6 0.00138888892f         /* 1/6! */
#define CPU_EXP_C7 1.98412701e-4f         /* 1/7! */
/* Adding then subtracting 1.5 * 2^23 rounds |t| < 2^22 to the nearest integer (ties
 * to even) without SSE4.1. */
#define CPU_EXP_ROUND 12582912.0f

#endif
