#!/usr/bin/env bash
# The CUDA kernels on the GPU: HBM read/copy bandwidth (our kernels) and the bf16
# tensor-core rate (cuBLAS, 8192^3) measured in the same run, then our GEMM against
# cuBLAS at the Qwen3-0.6B, -8B and -30B-A3B (dense) shapes for m = 1, 8, 32, 128, 512,
# 4096 (`--model NAME`: one model's shapes; `--m M`: one m), then
# attention decode and prefill; JSON to bench/out/cuda_kernels.json.
# Needs a build with CUDA (make) and a GPU; cuBLAS is found by HEARTH_CUBLAS or the
# loader's path (libcublas.so.13).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_CUDA_BENCH:-build/cuda_bench}
mkdir -p bench/out
"$bin" "$@" | tee bench/out/cuda_kernels.json
