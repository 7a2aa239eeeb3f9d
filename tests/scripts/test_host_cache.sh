#!/usr/bin/env bash
# The prefix cache's host-RAM tier through the server (--kv-cache-host-mib), on the tiny
# random-weight Qwen3 with the real tokenizer, on 127.0.0.1 and free ports (on the CPU
# the tier is a second memory tier below the pool; tests/scripts/test_cuda_backend.sh
# runs it on a GPU):
#  - a pool of 64 f32 blocks, two namespaces (cache_salt a, b) of 8 prompts each: b's
#    prompts push a's blocks out of the pool into host RAM; a's prompts again: every
#    one has all its whole blocks cached (counted from its length), some from host RAM,
#    and every output (tokens and logprobs) is byte for byte the cache-off output;
#  - host RAM over a disk tier: blocks pushed out of a 1 MiB host tier go on to disk,
#    prompts run again come back from both, outputs equal; a clean stop writes what host
#    RAM holds, and a server with the disk tier alone finds every block after the restart;
#  - bad values of --kv-cache-host-mib are refused with the reason.
# Servers are always killed at the end.  Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $([ "$failed" -eq 0 ] && echo 0 || echo 1); }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$bin" ]; then fail "no binary at $bin"; finish; fi
if [ ! -s tests/.cache/qwen3/tokenizer.json ]; then
  bash scripts/testdata.sh >/dev/null 2>&1 || { fail "test data (run scripts/testdata.sh)"; finish; }
fi
if ! "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$tmp/model" >"$tmp/mkmodel.log" 2>&1; then
  fail "mkmodel"; cat "$tmp/mkmodel.log"; finish
fi

source tests/scripts/server_lib.sh # server_ready
# start_server NAME ARGS...: sets port and pid once /health answers 200
start_server() {
  local name=$1; shift
  rm -f "$tmp/$name.out"
  "$bin" serve --model "$tmp/model" --served-model-name tiny --host 127.0.0.1 --port 0 --threads 2 --kv-dtype f32 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  pids+=("$pid")
  server_ready "$name" "$pid" 0.05
  port=$server_port
}
stop_server() { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }

# Prompts: N token-id prompts of 60..179 tokens, each its own (no shared prefix).
N=8
for i in $(seq 0 $((N - 1))); do
  node -e 'let s=Number(process.argv[1])*7919+17, n=60+(Number(process.argv[1])*53)%120, a=[];
    for(let k=0;k<n;k++){s=(s*1103515245+12345)%2147483648; a.push(100+s%5000);} console.log(JSON.stringify(a))' \
    "$i" >"$tmp/prompt$i"
done
source tests/scripts/cache_lib.sh # run_all, same_as
# every prompt's whole blocks but the last token's: floor((n - 1) / 16) * 16
all_blocks_cached() {
  for i in $(seq 0 $((N - 1))); do
    local n; n=$(( $(tr -cd , <"$tmp/prompt$i" | wc -c) + 1 )) # the JSON array's elements
    local want=$(( (n - 1) / 16 * 16 ))
    [ "$(cat "$tmp/$1.$i.cached" 2>/dev/null)" = "$want" ] || { echo "  prompt $i: $(cat "$tmp/$1.$i.cached" 2>/dev/null) cached, want $want"; return 1; }
  done
}
metric() { curl -s "http://127.0.0.1:$port/metrics" | sed -n "s/^$1 \([0-9]*\)$/\1/p"; }

# ---- the reference: no prefix cache
start_server off --prefix-cache off
run_all off
stop_server
check "reference outputs" grep -q '"logprobs"' "$tmp/off.0"

# ---- host RAM under a pool of 64 blocks (1 MiB of f32 KV): 4 MiB hold both namespaces
start_server h --kv-cache-mib 1 --kv-cache-host-mib 4
check "start-up names the host tier" grep -q "host tier of 4.0 MiB: 256 blocks" "$tmp/h.err"
run_all ha a
run_all hb b
run_all ha2 a
check "host tier: outputs equal the cache-off run (tokens and logprobs; a, b, a again)" \
  eval 'same_as ha off && same_as hb off && same_as ha2 off'
check "host tier: a's prompts again have every whole block cached" all_blocks_cached ha2
restored=$(metric hearth_host_cache_blocks_restored_total)
check "host tier: blocks copied back from host RAM ($restored)" [ "${restored:-0}" -gt 0 ]
check "host tier: tokens served from it = 16 x blocks restored" \
  [ "$(metric hearth_host_cache_hit_tokens_total)" = "$(( ${restored:-0} * 16 ))" ]
check "host tier: blocks stored, none evicted (it holds them all), no copy error" \
  eval '[ "$(metric hearth_host_cache_stored_blocks_total)" -gt 0 ] && [ "$(metric hearth_host_cache_evicted_blocks_total)" = 0 ] && [ "$(metric hearth_host_cache_copy_errors_total)" = 0 ]'
check "metrics: the tier is on, 256 blocks of 16 KiB" \
  eval '[ "$(metric hearth_host_cache_enabled)" = 1 ] && [ "$(metric hearth_host_cache_capacity_blocks)" = 256 ] && [ "$(metric hearth_host_cache_capacity_bytes)" = 4194304 ]'
check "/v1/stats: host_cache" eval 'curl -s "http://127.0.0.1:$port/v1/stats" | grep -q "\"host_cache\": *{\"enabled\": *true"'
stop_server

# ---- host RAM (1 MiB: 64 blocks) over the disk tier
start_server c --kv-cache-mib 1 --kv-cache-host-mib 1 --kv-cache-dir "$tmp/kvc"
run_all ca a
run_all cb b
run_all cc c
run_all ca2 a # from disk: b and c pushed a out of host RAM
run_all cc2 c # from host RAM: a pushed c out of the pool
run_all ca3 a # from host RAM again; c's blocks go back there
check "host over disk: outputs equal the cache-off run" \
  eval 'same_as ca off && same_as cb off && same_as cc off && same_as ca2 off && same_as cc2 off && same_as ca3 off'
check "host over disk: prompts run again have every whole block cached" \
  eval 'all_blocks_cached ca2 && all_blocks_cached cc2 && all_blocks_cached ca3'
check "host over disk: blocks went on from host RAM to disk" \
  eval '[ "$(metric hearth_host_cache_evicted_to_disk_total)" -gt 0 ] && [ "$(metric hearth_disk_cache_written_blocks_total)" -gt 0 ]'
check "host over disk: blocks came back from both tiers ($(metric hearth_host_cache_blocks_restored_total) from host RAM, $(metric hearth_disk_cache_blocks_restored_total) from disk)" \
  eval '[ "$(metric hearth_host_cache_blocks_restored_total)" -gt 0 ] && [ "$(metric hearth_disk_cache_blocks_restored_total)" -gt 0 ]'
stop_server
check "host over disk: the server stopped cleanly" grep -q "serve: stopped" "$tmp/c.err"
start_server d --kv-cache-mib 1 --kv-cache-dir "$tmp/kvc"
run_all da c
check "after a restart (disk tier only): outputs equal the cache-off run" same_as da off
check "after a restart: c's prompts (pushed into host RAM before the stop) have every whole block cached" all_blocks_cached da
check "after a restart: no file rejected" [ "$(metric hearth_disk_cache_files_rejected_total)" = 0 ]
check "no host tier: its metrics say so" [ "$(metric hearth_host_cache_enabled)" = 0 ]
stop_server

# ---- bad values
for v in -1 abc 67108865 1.5; do
  "$bin" serve --model "$tmp/model" --port 0 --kv-cache-host-mib "$v" >"$tmp/bad.out" 2>"$tmp/bad.err"; rc=$?
  check "--kv-cache-host-mib $v is refused with the reason" \
    eval '[ $rc -ne 0 ] && grep -q "kv-cache-host-mib must be an integer in 0..67108864" "$tmp/bad.err"'
done
"$bin" generate --model "$tmp/model" --prompt-ids 1,2,3 --max-tokens 1 --kv-cache-host-mib 67108864 \
  >"$tmp/big.out" 2>"$tmp/big.err"; rc=$?
check "--kv-cache-host-mib more than the machine has is refused with the reason" \
  eval '[ $rc -ne 0 ] && grep -q "more than this machine.s memory" "$tmp/big.err"'
"$bin" generate --model "$tmp/model" --prompt-ids 1,2,3 --max-tokens 1 --kv-cache-host-mib 1 --prefix-cache off \
  >"$tmp/off.out" 2>"$tmp/off.err"; rc=$?
check "--kv-cache-host-mib without the prefix cache is refused with the reason" \
  eval '[ $rc -ne 0 ] && grep -q "needs the prefix cache" "$tmp/off.err"'
finish
