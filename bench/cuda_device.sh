#!/usr/bin/env bash
# One round on a GPU machine: the device tests (tests/unit/test_cuda) and the kernel
# benchmark (bench/cuda_kernels.sh), with logs under $OUT (default bench/out).  Runs
# binaries built elsewhere (make); libraries the machine lacks may sit in .devlib/.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.devlib:${LD_LIBRARY_PATH:-}"
if [ -z "${HEARTH_CUBLAS:-}" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/cublas/lib; do
    if [ -e "$d/libcublas.so.13" ]; then export HEARTH_CUBLAS="$d/libcublas.so.13"; export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"; break; fi
  done
fi
echo "cublas: ${HEARTH_CUBLAS:-none}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/smi.txt"
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; }
step test_cuda "${TEST_LIMIT:-300}" build/tests/test_cuda
grep -E '^(ok|FAIL|SKIP|RESULT|device|variant)|check failed|differ|error' "$out/test_cuda.log" | head -60
step bench "${BENCH_LIMIT:-240}" build/cuda_bench ${BENCH_ARGS:-}
cp "$out/bench.log" "$out/cuda_kernels.json" 2>/dev/null
python3 bench/cuda_summary.py "$out/bench.log" || tail -40 "$out/bench.log"
