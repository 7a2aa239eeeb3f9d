#!/usr/bin/env bash
# The server's cost and the prefix cache through HTTP (issue 6's bench):
#  1. the same workload (CONCURRENCY streamed requests of PROMPT_TOKENS random token ids,
#     OUTPUT_TOKENS generated each, ignore_eos) through the C API (`hearth bench
#     throughput`) and through `hearth serve` (bench/serve_http.mjs): the HTTP overhead
#     in end-to-end time (target: <= 3%);
#  2. the chat workload (REQUESTS chats sharing a long system prompt, CONCURRENCY at a
#     time): TTFT and throughput with the prefix cache on and off.
# Model: $SERVE_BENCH_MODEL, else the qwen3-0.6b-shaped checkpoint of bench/model.sh.
# Prints JSON (also written to bench/out/serve.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
model=${SERVE_BENCH_MODEL:-$(bash bench/model.sh)}
threads=${THREADS:-2}
P=${PROMPT_TOKENS:-256}; O=${OUTPUT_TOKENS:-64}; C=${CONCURRENCY:-8}
W=${SYSTEM_WORDS:-400}; N=${REQUESTS:-16}
mkdir -p bench/out
bash scripts/testdata.sh >&2
vocab=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).vocab_size)' "$model/config.json")
engine=(--threads "$threads" --kv-cache-mib 1024)
log=$(mktemp)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -f "$log"' EXIT

serve() { # starts the server with extra flags; sets $url
  "$bin" serve --model "$model" --port 0 "${engine[@]}" "$@" >"$log" 2>&1 &
  pid=$!
  local port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
    [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.2
  done
  url="http://127.0.0.1:$port"
}
unserve() { kill -TERM "$pid"; wait "$pid" || true; pid=""; }

echo "C API: $C x ($P prompt + $O generated)..." >&2
capi=$("$bin" bench throughput --model "$model" "${engine[@]}" --prefix-cache off --prompt-tokens "$P" \
  --output-tokens "$O" --concurrency "$C")
echo "HTTP: the same..." >&2
serve --prefix-cache off
http=$(node bench/serve_http.mjs throughput "$url" "$(basename "$model")" "$P" "$O" "$C" "$vocab")
unserve
echo "chat workload, prefix cache on and off..." >&2
serve --prefix-cache on
chat_on=$(node bench/serve_http.mjs chat "$url" "$(basename "$model")" "$W" "$O" "$C" "$N")
unserve
serve --prefix-cache off
chat_off=$(node bench/serve_http.mjs chat "$url" "$(basename "$model")" "$W" "$O" "$C" "$N")
unserve
node -e '
const [capi, http, on, off, model] = process.argv.slice(1);
const c = JSON.parse(capi), h = JSON.parse(http);
const capiSecs = c.levels[0].seconds;
const out = { benchmark: "serve", model,
  http_vs_capi: { capi_seconds: capiSecs, http_seconds: h.seconds,
    overhead_pct: +((h.seconds - capiSecs) / capiSecs * 100).toFixed(2), http: h, capi: c },
  chat: { cache_on: JSON.parse(on), cache_off: JSON.parse(off) } };
console.log(JSON.stringify(out, null, 2));' "$capi" "$http" "$chat_on" "$chat_off" "$model" | tee bench/out/serve.json
