#!/usr/bin/env bash
# Start-up with a large KV pool (issue 19, item 8): `hearth serve --kv-cache-mib MIB` on the
# tiny mkmodel checkpoint, RUNS times; the time from launch to the first `/health` 200
# (the server loaded and serving), and the engine's own figure for allocating the pool.
# The CPU backend populates the pool's pages in the background (MADV_POPULATE_WRITE)
# while the server starts and serves; the debug log says when that is done, and the
# bench reports it as well (populated_s), waiting at most POP_WAIT_S for it.
# Target: <= 1 s per 4 GiB to serving.  Prints JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
mib=${KV_MIB:-4608}; runs=${RUNS:-3}; pop_wait=${POP_WAIT_S:-120}
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
"$bin" mkmodel --shape tiny --out "$tmp/model" >/dev/null
port=$((20000 + RANDOM % 20000))
now() { date +%s.%N; }
ready=(); alloc=(); pop=()
for r in $(seq 1 "$runs"); do
  t0=$(now)
  "$bin" serve --model "$tmp/model" --host 127.0.0.1 --port "$port" --kv-cache-mib "$mib" --log-level debug \
    >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  t=""
  for _ in $(seq 1 6000); do
    if curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" 2>/dev/null | grep -q 200; then
      t=$(python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$(now)" "$t0"); break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  [ -n "$t" ] || { echo "startup: never served" >&2; cat "$tmp/err" >&2; exit 1; }
  p=""
  for _ in $(seq 1 $((pop_wait * 10))); do
    p=$(sed -n 's/.*populated in the background in \([0-9.]*\) s.*/\1/p' "$tmp/err")
    [ -n "$p" ] && break
    sleep 0.1
  done
  a=$(sed -n 's/.*KV pool of .* allocated in \([0-9.]*\) s.*/\1/p' "$tmp/err")
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=""
  ready+=("$(printf '%.3f' "$t")"); alloc+=("${a:-null}"); pop+=("${p:-null}")
done
python3 - "$mib" "$(nproc)" "${ready[*]}" "${alloc[*]}" "${pop[*]}" <<'PY'
import json, statistics, sys
mib, cores = int(sys.argv[1]), int(sys.argv[2])
ready = [float(x) for x in sys.argv[3].split()]
num = lambda xs: [None if x == "null" else float(x) for x in xs.split()]
med = statistics.median(ready)
print(json.dumps({"bench": "startup", "kv_cache_mib": mib, "cores": cores, "serving_s": ready,
                  "median_serving_s": med, "median_serving_s_per_4gib": round(med * 4096 / mib, 3),
                  "pool_allocated_s": num(sys.argv[4]), "pool_populated_in_background_s": num(sys.argv[5])}))
PY
