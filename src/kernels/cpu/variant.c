/* The variant tables: which routine defines each result under each variant. */
#include "kernels/cpu/variant.h"

#include "kernels/cpu/variant_impl.h"

const struct cpu_variant cpu_variant_scalar = {
    .name = "scalar",
    .isa = "scalar",
    .gemm_f32 = cpu_scalar_gemm_f32,
    .gemm_bf16 = cpu_scalar_gemm_bf16,
    .gemm_f16 = cpu_scalar_gemm_f16,
    .swiglu = cpu_scalar_swiglu,
    .attn_update = cpu_scalar_attn_update,
    .exp = cpu_scalar_exp,
    .widen_bf16 = cpu_scalar_widen_bf16,
};

const struct cpu_variant cpu_variant_avx2 = {
    .name = "avx2",
    .isa = "avx2",
    .gemm_f32 = cpu_avx2_gemm_f32,
    .gemm_bf16 = cpu_avx2_gemm_bf16,
    .gemm_f16 = cpu_avx2_gemm_f16,
    .swiglu = cpu_avx2_swiglu,
    .attn_update = cpu_avx2_attn_update,
    .exp = cpu_avx2_exp,
    .widen_bf16 = cpu_avx2_widen_bf16,
};

/* The avx512 variant's routines; avx512bf16 shares all of them. */
#define CPU_VARIANT_AVX512_ROUTINES                                                                             \
    .gemm_f32 = cpu_avx512_gemm_f32, .gemm_bf16 = cpu_avx512_gemm_bf16, .gemm_f16 = cpu_avx512_gemm_f16,         \
    .swiglu = cpu_avx512_swiglu, .attn_update = cpu_avx512_attn_update,                                         \
    .attn_update_rows = cpu_avx512_attn_update_rows, .attn_update_rows_bf16 = cpu_avx512_attn_update_rows_bf16, \
    .scores_bf16 = cpu_avx512_scores_bf16,                                                                      \
    .exp = cpu_avx512_exp, .widen_bf16 = cpu_avx512_widen_bf16, .norm_scale = cpu_avx512_norm_scale,         \
    .add = cpu_avx512_add, .rope = cpu_avx512_rope, .store_bf16 = cpu_avx512_store_bf16

const struct cpu_variant cpu_variant_avx512 = {
    .name = "avx512",
    .isa = "avx512",
    CPU_VARIANT_AVX512_ROUTINES,
};

/* AVX-512 with bf16 compute: matmuls over bf16 weights round the activations to
 * bf16 and use VDPBF16PS, and so do attention scores over a bf16 KV store (the
 * query rounded to bf16); everything else is the avx512 variant's. */
const struct cpu_variant cpu_variant_avx512bf16 = {
    .name = "avx512bf16",
    .isa = "avx512",
    CPU_VARIANT_AVX512_ROUTINES,
    .gemm_bb = cpu_avx512bf16_gemm_bb,
    .scores_bb = cpu_avx512bf16_scores_bb,
    .to_bf16 = cpu_avx512bf16_to_bf16,
};
