#!/usr/bin/env bash
# make run: serves $MODEL (a Hugging Face model directory) or the default model.
set -euo pipefail
bin=${1:-build/hearth}
if [ -n "${MODEL:-}" ]; then
  exec "$bin" serve --model "$MODEL" "${@:2}"
fi
if "$bin" serve --help >/dev/null 2>&1; then
  echo "no default model yet: set MODEL=DIR to serve a checkpoint (e.g. MODEL=tests/data/fixtures/qwen3-tiny make run)"
else
  echo "no default model yet, and this build has no server yet (the HTTP server is still being built)."
  echo "meanwhile: $bin eval --model tests/data/fixtures/qwen3-tiny --expected tests/data/fixtures/qwen3-tiny/expected.safetensors"
fi
