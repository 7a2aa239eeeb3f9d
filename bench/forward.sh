#!/usr/bin/env bash
# The forward pass alone on the qwen3-0.6b bf16 mkmodel checkpoint with 2 threads:
# prefill tokens/s for a 512-token prompt and decode tokens/s at batch 1, 8 and 32
# at context 512, with the machine's ceilings (f32 FMA, bf16 dot product, read
# bandwidth) measured in the same run; once with f32 compute (the default variant)
# and once with bf16 compute (avx512bf16) where the CPU has it; then bf16 compute
# again with every decode row over one shared context (--shared-context), which
# shows the batch-32 step with its KV traffic down to one context's.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
"$bin" bench forward --model "$model" --threads 2 --prompt 512 --context 512 --batches 1,8,32 \
  | tee bench/out/forward.json
if grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  "$bin" bench forward --model "$model" --threads 2 --prompt 512 --context 512 --batches 1,8,32 \
    --kernel avx512bf16 | tee bench/out/forward_bf16.json
  "$bin" bench forward --model "$model" --threads 2 --prompt 512 --context 512 --batches 1,8,32 \
    --kernel avx512bf16 --shared-context | tee bench/out/forward_bf16_shared.json
fi
