#!/usr/bin/env bash
# hearth bench prefix on a fixture: the three modes agree bit for bit (exit 0, JSON
# with the warm run's geometry and hits), and the disk and host-RAM modes with them; a flipped logit bit in the warm run is
# caught (exit 2, no JSON); the workloads compare every output with the cache off.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
model=$data/fixtures/qwen3-tiny
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }

"$bin" bench prefix --model "$model" --shared-prefix-tokens 200 --suffix-tokens 40 --repeats 2 --threads 2 \
  --output-json "$tmp/p.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "protocol exits 0" "[ $rc -eq 0 ]"
check "json written" "[ -s $tmp/p.json ]"
check "digests equal" "grep -q '\"digests_equal\": true' $tmp/p.json"
check "warm first step computes only the suffix" "grep -q '\"warm\": .*\"query_len\": 48, \"context_len\": 192, \"kv_len\": 240' $tmp/p.json"
check "warm hits 192 tokens" "grep -q '\"warm\": .*\"hit_tokens\": 192' $tmp/p.json"
check "cold hits nothing" "grep -q '\"cold\": .*\"hit_tokens\": 0,' $tmp/p.json"

# --restart: the fourth mode reads the prefix from the disk tier after a restart.
"$bin" bench prefix --model "$model" --shared-prefix-tokens 200 --suffix-tokens 40 --repeats 1 --threads 2 \
  --restart --output-json "$tmp/d.json" >"$tmp/dout" 2>"$tmp/derr"
rc=$?
check "--restart exits 0 with equal digests" "[ $rc -eq 0 ] && grep -q '\"digests_equal\": true' $tmp/d.json"
check "--restart: the disk mode hits 192 tokens and computes only the suffix" \
  "grep -q '\"disk\": .*\"query_len\": 48, \"context_len\": 192, \"kv_len\": 240}, \"hit_tokens\": 192' $tmp/d.json"

# --kv-cache-host-mib: the fifth mode pushes the prefix out of the pool into host RAM and
# copies it back (the other modes run without the tier: their hits are unchanged).
"$bin" bench prefix --model "$model" --shared-prefix-tokens 200 --suffix-tokens 40 --repeats 1 --threads 2 \
  --kv-cache-host-mib 1 --output-json "$tmp/h.json" >"$tmp/hout" 2>"$tmp/herr"
rc=$?
check "--kv-cache-host-mib exits 0 with equal digests" "[ $rc -eq 0 ] && grep -q '\"digests_equal\": true' $tmp/h.json"
check "--kv-cache-host-mib: the host mode hits 192 tokens and computes only the suffix" \
  "grep -q '\"host\": .*\"query_len\": 48, \"context_len\": 192, \"kv_len\": 240}, \"hit_tokens\": 192' $tmp/h.json"
check "--kv-cache-host-mib: no disk mode without --restart, its ratios reported" \
  "! grep -q '\"disk\":' $tmp/h.json && grep -q '\"host_ttft_speedup_vs_cold\"' $tmp/h.json"

HEARTH_TEST_FLIP_WARM_LOGIT=1 "$bin" bench prefix --model "$model" --shared-prefix-tokens 200 --suffix-tokens 40 \
  --repeats 1 --threads 2 --output-json "$tmp/bad.json" >"$tmp/out2" 2>"$tmp/err2"
rc=$?
check "a flipped bit exits 2" "[ $rc -eq 2 ]"
check "no JSON on mismatch" "[ ! -e $tmp/bad.json ] && ! grep -q benchmark $tmp/out2"
check "mismatch named on stderr" "grep -q MISMATCH $tmp/err2"

for w in chat fewshot rag none; do
  "$bin" bench prefix --model "$model" --workload $w --clients 6 --threads 2 >"$tmp/$w.json" 2>"$tmp/werr"
  rc=$?
  check "workload $w exits 0 with equal outputs" "[ $rc -eq 0 ] && grep -q '\"outputs_equal\": true' $tmp/$w.json"
done
hit() { sed -n 's/.*"hit_rate": \([0-9.]*\).*/\1/p' "$tmp/$1.json"; }
# chat: 6 clients share 512 of 576 tokens; all but the first hit 512 (5 * 512 / (6 * 576) = 0.74).
check "chat workload hit rate 0.74" "[ \"$(hit chat)\" = 0.7407 ]"
check "no-prefix workload hits nothing" "[ \"$(hit none)\" = 0.0000 ]"
echo "RESULT passed=$passed failed=$failed"
