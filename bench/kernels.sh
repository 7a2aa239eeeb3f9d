#!/usr/bin/env bash
# GEMM GFLOP/s of the CPU kernels for qwen3-0.6b's real shapes (bf16 weights) at
# m = 1, 8, 32 and 512 rows with 2 threads, against the machine's ceilings measured
# in the same run; f32 compute, then bf16 compute (avx512bf16) where the CPU has it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
mkdir -p bench/out
"$bin" bench kernels --threads 2 --m 1,8,32,512 | tee bench/out/kernels.json
if grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  "$bin" bench kernels --threads 2 --m 1,8,32,512 --kernel avx512bf16 | tee bench/out/kernels_bf16.json
fi
