#!/usr/bin/env bash
# Parity with the reference (transformers, float64): `hearth eval` on every fixture,
# with f32 KV (bound 2e-4) and bf16 KV (bound 5e-2), under every kernel variant this
# CPU supports, and with 1 and 3 threads.  The compute-bf16 variant (avx512bf16:
# activations rounded to bf16 before matmuls over bf16 weights) has the bound 5e-2
# with either KV dtype.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
passed=0; failed=0
for dir in "$data"/fixtures/*/; do
  name=$(basename "$dir")
  for kernel in avx512 avx2 scalar; do
    # A variant this CPU lacks is reported as unsupported (exit 2): not a failure.
    if ! out=$("$bin" eval --model "$dir" --expected "$dir/expected.safetensors" --kernel "$kernel" --kv-dtype f32 2>&1); then
      if grep -q "lacks" <<<"$out"; then echo "skip $name $kernel (CPU lacks it)"; continue; fi
      echo "FAIL $name kernel=$kernel kv=f32"; echo "$out"; failed=$((failed + 1)); continue
    fi
    passed=$((passed + 1)); echo "ok   $name kernel=$kernel kv=f32"
    for kv in bf16; do
      for th in 1 3; do
        if out=$("$bin" eval --model "$dir" --expected "$dir/expected.safetensors" --kernel "$kernel" --kv-dtype $kv --threads $th 2>&1); then
          passed=$((passed + 1)); echo "ok   $name kernel=$kernel kv=$kv threads=$th"
        else
          failed=$((failed + 1)); echo "FAIL $name kernel=$kernel kv=$kv threads=$th"; echo "$out"
        fi
      done
    done
  done
  # compute bf16 (on MoE checkpoints eval reports and leaves out positions whose
  # experts differ from an f32-compute, f32-KV control run)
  for kv in f32 bf16; do
    if ! out=$("$bin" eval --model "$dir" --expected "$dir/expected.safetensors" --kernel avx512bf16 --kv-dtype $kv --tol 5e-2 --threads 2 2>&1); then
      if grep -q "lacks" <<<"$out"; then echo "skip $name avx512bf16 (CPU lacks it)"; break; fi
      echo "FAIL $name kernel=avx512bf16 kv=$kv"; echo "$out"; failed=$((failed + 1)); continue
    fi
    passed=$((passed + 1)); echo "ok   $name kernel=avx512bf16 kv=$kv (bound 5e-2)"
  done
done
# A broken bound must fail: an absurdly tight tolerance cannot be met.
if "$bin" eval --model "$data/fixtures/qwen3-tiny" --expected "$data/fixtures/qwen3-tiny/expected.safetensors" --tol 1e-12 >/dev/null 2>&1; then
  failed=$((failed + 1)); echo "FAIL eval accepted a 1e-12 bound"
else
  passed=$((passed + 1)); echo "ok   eval exits non-zero when a bound is broken"
fi
# Checking one model against another model's reference must fail.
if "$bin" eval --model "$data/fixtures/qwen3-tiny-bf16" --expected "$data/fixtures/qwen3-tiny/expected.safetensors" --kv-dtype f32 >/dev/null 2>&1; then
  failed=$((failed + 1)); echo "FAIL eval accepted another model's reference"
else
  passed=$((passed + 1)); echo "ok   eval rejects another model's reference"
fi
echo "RESULT passed=$passed failed=$failed"
