#!/usr/bin/env bash
# make run: builds (the Makefile did) and serves a model over the OpenAI-compatible API.
#   MODEL=DIR   a Hugging Face model directory to serve; without it, the default model:
#               build/models/default, made on first run: a random-weight Qwen3 checkpoint of the
#               tiny shape (starts in about a second) with the real Qwen3 tokenizer and chat
#               template (fetched by scripts/testdata.sh).  It talks nonsense: it is for trying
#               the API, not the model.
#   HOST, PORT  listen address (default 127.0.0.1:8000); API_KEY: require this key.
# Extra arguments go to `hearth serve` (e.g. make run ARGS="--prefix-cache off").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/hearth}
shift || true
host=${HOST:-127.0.0.1}
port=${PORT:-8000}
model=${MODEL:-}
if [ -z "$model" ]; then
  model=build/models/default
  if [ ! -s "$model/config.json" ] || [ ! -s "$model/tokenizer.json" ]; then
    echo "making the default model in $model (random weights, real Qwen3 tokenizer)..."
    bash scripts/testdata.sh
    rm -rf "$model"
    mkdir -p "$(dirname "$model")"
    "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$model"
  fi
fi
name=$(basename "${model%/}")
auth=()
hdr=""
if [ -n "${API_KEY:-}" ]; then
  auth=(--api-key "$API_KEY")
  hdr=" -H 'Authorization: Bearer $API_KEY'"
fi
cat <<MSG
serving $model as '$name' at http://$host:$port  (Ctrl-C stops it)
try:
  curl http://$host:$port/v1/chat/completions$hdr -H 'Content-Type: application/json' \\
    -d '{"model": "$name", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}'
  curl http://$host:$port/health    curl http://$host:$port/metrics
MSG
# shellcheck disable=SC2086
exec "$bin" serve --model "$model" --host "$host" --port "$port" "${auth[@]}" ${ARGS:-} "$@"
