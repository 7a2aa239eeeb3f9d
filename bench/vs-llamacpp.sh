#!/usr/bin/env bash
# hearth against llama.cpp, side by side in one run: prefill of a 512-token prompt
# and decode at batch 1 from context 512, 2 threads, on the qwen3-0.6b bf16 mkmodel
# checkpoint and a GGUF of the same weights written by our own writer
# (bench/llamacpp/gguf_write.mjs).  llama.cpp is the prebuilt CPU binary of the npm
# package node-llama-cpp, pinned to 3.21.1 (bench/llamacpp/package.json).  hearth
# runs with f32 compute (the default) and with bf16 compute (avx512bf16).
# Skips (exit 0, a note on stderr) when npm cannot install the package.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=$(bash bench/model.sh)
mkdir -p bench/out
gguf=bench/out/models/qwen3-0.6b-bf16.gguf
if [ ! -s "$gguf" ] || [ "$gguf" -ot "$model/model.safetensors" ]; then
  node bench/llamacpp/gguf_write.mjs "$model" "$gguf"
fi
if [ ! -d bench/llamacpp/node_modules/node-llama-cpp ]; then
  if ! (cd bench/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --silent --no-audit --no-fund \
        --omit=optional >/dev/null 2>&1); then
    echo "vs-llamacpp: npm could not install node-llama-cpp@3.21.1; skipped" >&2
    exit 0
  fi
fi
threads=2
llama=$(node bench/llamacpp/vs.mjs "$gguf" $threads 512 32 3)
f32=$("$bin" bench forward --model "$model" --threads $threads --prompt 512 --context 512 --batches 1 --steps 32 --no-ceilings)

bf16='null'
if grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  bf16=$("$bin" bench forward --model "$model" --threads $threads --prompt 512 --context 512 --batches 1 --steps 32 \
           --no-ceilings --kernel avx512bf16)
fi
node -e '
const [llama, f32, bf16] = process.argv.slice(1).map((s) => JSON.parse(s));
const side = (h) => h && {backend: h.backend, compute: h.compute, prefill_tokens_per_s: h.prefill.tokens_per_s,
  decode_tokens_per_s: h.decode[0].tokens_per_s,
  prefill_vs_llamacpp: +(h.prefill.tokens_per_s / llama.prefill.tokens_per_s).toFixed(2),
  decode_vs_llamacpp: +(h.decode[0].tokens_per_s / llama.decode.tokens_per_s).toFixed(2)};
console.log(JSON.stringify({benchmark: "vs-llamacpp", threads: llama.threads, prompt: llama.prefill.tokens,
  llamacpp: llama, hearth_f32: side(f32), hearth_bf16: side(bf16)}, null, 2));
' "$llama" "$f32" "$bf16" | tee bench/out/vs-llamacpp.json
