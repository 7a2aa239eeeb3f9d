#!/usr/bin/env bash
# make bench: runs every benchmark script bench/*.sh except this one; each prints JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/hearth}
found=0
for b in bench/*.sh; do
  [ "$(basename "$b")" = run.sh ] && continue
  found=1
  echo "== $b"
  HEARTH_BIN=$bin bash "$b"
done
[ $found -eq 1 ] || echo "no benchmarks yet"
