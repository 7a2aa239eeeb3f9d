#!/usr/bin/env bash
# Offline throughput and inter-token latency at 1, 8 and 32 concurrent requests
# (prompt 256, output 128) on the qwen3-0.6b bf16 mkmodel checkpoint, 2 threads;
# once with f32 compute (the default variant) and once with bf16 compute
# (avx512bf16) where the CPU has it.  Each run also prints the compute bound: the
# machine's measured peak rate over the flops one request needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
"$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 256 --output-tokens 128 \
  --concurrency 1,8,32 --kv-cache-mib 1536 | tee bench/out/throughput.json
if grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  "$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 256 --output-tokens 128 \
    --concurrency 1,8,32 --kv-cache-mib 1536 --kernel avx512bf16 | tee bench/out/throughput_bf16.json
fi
