#!/usr/bin/env bash
# Replicas behind HAProxy (deploy/cluster.sh): the multi-turn chat workload of
# tests/e2e/chat_workload.mjs (CHATS chats of TURNS turns over SYSTEMS system prompts,
# CONCURRENCY chats at a time, MAX_TOKENS per reply, a prompt_cache_key per chat) on
#  1. one replica, directly, with THREADS threads;
#  2. REPLICAS replicas (THREADS_PER_REPLICA threads each) behind HAProxy hashing the key;
#  3. the same replicas, caches emptied, behind HAProxy with balance roundrobin.
# Reports the prefix-cache hit rate (cached / prompt tokens), requests/s, generated
# tokens/s and client-side TTFT p50/p99 of each.  On a machine with fewer cores than
# replicas throughput does not scale; the hit rate is the figure that must hold.
# Model: $CLUSTER_BENCH_MODEL, else the qwen3-0.6b-shaped checkpoint of bench/model.sh.
# Prints JSON (also written to bench/out/cluster.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export HEARTH_BIN=${HEARTH_BIN:-build/hearth}
model=${CLUSTER_BENCH_MODEL:-$(bash bench/model.sh)}
name=$(basename "$model")
R=${REPLICAS:-3}; threads=${THREADS:-2}; rthreads=${THREADS_PER_REPLICA:-1}
wl=(--chats "${CHATS:-48}" --turns "${TURNS:-6}" --systems "${SYSTEMS:-8}" --concurrency "${CONCURRENCY:-4}"
    --max-tokens "${MAX_TOKENS:-8}" --system-words "${SYSTEM_WORDS:-48}" --user-words "${USER_WORDS:-24}")
serve_args=(--served-model-name "$name" --kv-cache-mib "${KV_MIB:-512}")
command -v haproxy >/dev/null || { echo "bench/cluster.sh: needs haproxy (scripts/deps.sh)" >&2; exit 1; }
mkdir -p bench/out
tmp=$(mktemp -d)
rrpid=""
cleanup() {
  [ -n "$rrpid" ] && kill "$rrpid" 2>/dev/null
  for d in "$tmp/one" "$tmp/many"; do [ -f "$d/replicas" ] && bash deploy/cluster.sh stop --dir "$d" >/dev/null 2>&1; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
workload() { node tests/e2e/chat_workload.mjs "$1" "$name" "${wl[@]}" --key chat; }

echo "1 replica ($threads threads)..." >&2
bash deploy/cluster.sh start --model "$model" --replicas 1 --port "$(free_port)" --replica-port 0 \
  --stats-port "$(free_port)" --dir "$tmp/one" --wait 600 -- "${serve_args[@]}" --threads "$threads" >&2
single=$(workload "http://127.0.0.1:$(cat "$tmp/one/r1.port")")
bash deploy/cluster.sh stop --dir "$tmp/one" >&2

echo "$R replicas ($rthreads thread(s) each) behind HAProxy, hash on prompt_cache_key..." >&2
pport=$(free_port)
bash deploy/cluster.sh start --model "$model" --replicas "$R" --port "$pport" --replica-port 0 \
  --stats-port "$(free_port)" --dir "$tmp/many" --wait 600 -- "${serve_args[@]}" --threads "$rthreads" >&2
affinity=$(workload "http://127.0.0.1:$pport")

echo "the same replicas, caches emptied, balance roundrobin..." >&2
servers=()
for i in $(seq 1 "$R"); do
  p=$(cat "$tmp/many/r$i.port")
  curl -s -m 30 -o /dev/null -X POST "http://127.0.0.1:$p/v1/prefix_cache/reset"
  servers+=(--server "127.0.0.1:$p")
done
rrport=$(free_port); rrs=$(free_port)
bash deploy/cluster.sh render --balance roundrobin --port "$rrport" --stats-port "$rrs" "${servers[@]}" >"$tmp/rr.cfg"
haproxy -db -f "$tmp/rr.cfg" >"$tmp/rr.log" 2>&1 &
rrpid=$!
for _ in $(seq 1 100); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$rrs/stats" && break; sleep 0.1; done
rr=$(workload "http://127.0.0.1:$rrport")
kill "$rrpid"; rrpid=""
bash deploy/cluster.sh stop --dir "$tmp/many" >&2

node -e '
const [single, aff, rr, model, R, threads, rthreads, wl] = process.argv.slice(1);
const s = JSON.parse(single), a = JSON.parse(aff), r = JSON.parse(rr);
const out = { benchmark: "cluster", model, workload: wl,
  single: { replicas: 1, threads: +threads, ...s },
  affinity: { replicas: +R, threads_per_replica: +rthreads, balance: "hash prompt_cache_key (consistent)", ...a },
  round_robin: { replicas: +R, threads_per_replica: +rthreads, balance: "roundrobin", ...r },
  hit_rate_affinity_vs_single: +(a.hit_rate / s.hit_rate).toFixed(4),
  hit_rate_round_robin_vs_single: +(r.hit_rate / s.hit_rate).toFixed(4) };
const txt = JSON.stringify(out, null, 2);
require("fs").writeFileSync("bench/out/cluster.json", txt + "\n");
console.log(txt);' "$single" "$affinity" "$rr" "$name" "$R" "$threads" "$rthreads" "${wl[*]}"
