#!/usr/bin/env bash
# make run: builds (the Makefile did) and serves a model over the OpenAI-compatible API.
#   MODEL=DIR   a Hugging Face model directory to serve; without it, models/fortune-demo:
#               a small Qwen3 model trained on the fortunes of Debian's fortune packages
#               (models/fortune-demo/README.md), shipped in the repository.
#   HOST, PORT  listen address (default 127.0.0.1:8000); API_KEY: require this key.
# Extra arguments go to `hearth serve` (e.g. make run ARGS="--prefix-cache off").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/hearth}
shift || true
host=${HOST:-127.0.0.1}
port=${PORT:-8000}
model=${MODEL:-models/fortune-demo}
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
