#!/usr/bin/env bash
# make bench: runs every benchmark script bench/*.sh except this one; each prints JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/hearth}
found=0
for b in bench/*.sh; do
  case "$(basename "$b")" in run.sh | ab.sh) continue ;; esac # ab.sh compares two binaries
  found=1
  echo "== $b"
  HEARTH_BIN=$bin bash "$b"
done
[ $found -eq 1 ] || echo "no benchmarks yet"
