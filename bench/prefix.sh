#!/usr/bin/env bash
# The exact-reuse parity benchmark and the multi-client workloads, on the
# qwen3-0.6b bf16 mkmodel checkpoint with 2 threads (--restart: also warm from the disk
# tier after a restart; --kv-cache-host-mib: also warm from the host-RAM tier).  JSON into
# bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
"$bin" bench prefix --model "$model" --threads 2 --shared-prefix-tokens 1024 --suffix-tokens 64 \
  --max-tokens 16 --repeats 3 --kv-cache-mib 256 --restart --kv-cache-host-mib 256 --output-json bench/out/prefix.json
for w in chat none; do
  "$bin" bench prefix --model "$model" --threads 2 --workload $w --clients 8 --kv-cache-mib 1024 --output-json bench/out/prefix-$w.json
done
