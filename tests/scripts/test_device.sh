#!/usr/bin/env bash
# --device: the registry's names, a clear error for a device this build or machine
# lacks, auto = the CPU when there is no GPU backend, and the compute/kernel checks
# the backend makes (the one place they are made).
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
model=$data/fixtures/qwen3-tiny
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
gen() { "$bin" generate --model "$model" --prompt-ids 1,2,3 --max-tokens 4 --temperature 0 --threads 1 "$@"; }

gen --device cpu >"$tmp/cpu" 2>"$tmp/cpu.err"; rc=$?
check "--device cpu runs" "[ $rc -eq 0 ] && [ -s $tmp/cpu ]"
gen --device auto >"$tmp/auto" 2>/dev/null; rc=$?
check "--device auto runs and gives the CPU's output" "[ $rc -eq 0 ] && cmp -s $tmp/cpu $tmp/auto"
gen >"$tmp/none" 2>/dev/null; rc=$?
check "no --device is auto" "[ $rc -eq 0 ] && cmp -s $tmp/cpu $tmp/none"
if ! nvidia-smi >/dev/null 2>&1; then
  gen --device cuda >"$tmp/cuda" 2>"$tmp/cuda.err"; rc=$?
  check "--device cuda without a CUDA backend or GPU fails" "[ $rc -ne 0 ] && [ ! -s $tmp/cuda ]"
  check "... and says why" "grep -qi 'cuda' $tmp/cuda.err"
fi
gen --device tpu >/dev/null 2>"$tmp/bad.err"; rc=$?
check "an unknown device is an error naming the known ones" "[ $rc -ne 0 ] && grep -q 'cpu|cuda|auto' $tmp/bad.err"
gen --compute f16 >/dev/null 2>"$tmp/c.err"; rc=$?
check "a bad --compute is refused by the backend" "[ $rc -ne 0 ] && grep -q 'compute must be f32 or bf16' $tmp/c.err"
gen --compute f32 --kernel avx512bf16 >/dev/null 2>"$tmp/k.err"; rc=$?
check "--compute f32 with the avx512bf16 kernel is refused" "[ $rc -ne 0 ] && grep -q 'contradicts' $tmp/k.err"
gen --block-size 2000 >/dev/null 2>"$tmp/bs.err"; rc=$?
check "a block size out of range is refused" "[ $rc -ne 0 ] && grep -q '1024' $tmp/bs.err"
echo "RESULT passed=$passed failed=$failed"
