#!/usr/bin/env bash
# Prints the path of the benchmark checkpoint (a qwen3-0.6b-shaped bf16 mkmodel model
# with the real Qwen3 tokenizer), making it on first use under bench/out/models/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
dir=bench/out/models/qwen3-0.6b
if [ ! -s "$dir/model.safetensors" ]; then
  bash scripts/testdata.sh >&2
  mkdir -p bench/out/models
  "$bin" mkmodel --shape qwen3-0.6b --dtype bf16 --seed 1 --out "$dir" --tokenizer tests/.cache/qwen3 >&2
fi
echo "$dir"
