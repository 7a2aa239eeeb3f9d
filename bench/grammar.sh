#!/usr/bin/env bash
# Structured outputs: token-mask time per token (p50/p99) on the real Qwen3 vocabulary for
# JSON mode and three schemas of increasing size, and the end-to-end slowdown of decoding
# constrained by a JSON schema (an array of at least 64 strings of at most 8 characters,
# bg_schema_e2e in src/cli/bench_grammar.c; ignore_eos) vs unconstrained, on the qwen3-0.6b
# bf16 mkmodel checkpoint with 2 threads.  JSON into bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
"$bin" bench grammar --tokenizer tests/.cache/qwen3/tokenizer.json --tokens 2000 \
  --model "$model" --threads 2 --kv-cache-mib 256 --e2e-tokens 32 --repeats 3 --output-json bench/out/grammar.json
