#!/usr/bin/env bash
# Start-up with a large KV pool (issue 19, item 8): `hearth serve --kv-cache-mib MIB` on the
# tiny mkmodel checkpoint, RUNS times; the engine logs how long the pool took to allocate
# and touch (every page, on one thread per core).  Target: <= 1 s per 4 GiB.
# Prints JSON: every run's seconds, the median, and the median per 4 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${HEARTH_BIN:-build/hearth}
mib=${KV_MIB:-4608}; runs=${RUNS:-3}
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
"$bin" mkmodel --shape tiny --out "$tmp/model" >/dev/null
secs=()
for r in $(seq 1 "$runs"); do
  "$bin" serve --model "$tmp/model" --port 0 --kv-cache-mib "$mib" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  s=""
  for _ in $(seq 1 1200); do
    s=$(sed -n 's/.*KV pool of .* touched in \([0-9.]*\) s.*/\1/p' "$tmp/err")
    [ -n "$s" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=""
  [ -n "$s" ] || { echo "startup: no KV line" >&2; cat "$tmp/err" >&2; exit 1; }
  secs+=("$s")
done
printf '%s\n' "${secs[@]}" | sort -n | awk -v mib="$mib" -v cores="$(nproc)" '
  { v[NR] = $1; all = all (NR > 1 ? ", " : "") $1 }
  END { m = v[int((NR + 1) / 2)];
        printf "{\"bench\": \"startup\", \"kv_cache_mib\": %d, \"cores\": %d, \"runs_s\": [%s], \"median_s\": %s, \"median_s_per_4gib\": %.3f}\n", mib, cores, all, m, m * 4096 / mib }'
