#!/usr/bin/env bash
# Offline throughput and inter-token latency at 1, 8 and 32 concurrent requests
# (prompt 256, output 128) on the qwen3-0.6b bf16 mkmodel checkpoint, 2 threads.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
"$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 256 --output-tokens 128 \
  --concurrency 1,8,32 --kv-cache-mib 1536 | tee bench/out/throughput.json
