#!/usr/bin/env bash
# The prefix cache's disk tier through the server (issue 20), on the tiny random-weight
# Qwen3 with the real tokenizer, on 127.0.0.1 and free ports:
#  - warm restart: serve with --kv-cache-dir, stop (SIGTERM), serve again on the same
#    directory: every prompt's blocks come from disk (cached_tokens > 0) and every
#    output (tokens and logprobs) is byte for byte the output of a server with the
#    prefix cache off;
#  - damaged files: every file truncated, or a byte flipped, or replaced by a file of
#    another namespace (cache_salt) under its name: all rejected and counted, nothing
#    loaded, outputs still equal;
#  - a full disk (a 64 KiB tmpfs, when this host lets us mount one) and a tiny quota:
#    writes fail or are dropped, counted, the server keeps serving;
#  - kill -9 while blocks are written (a loop of 20; 8 under the sanitizers, 20 there too
#    with TEST_LONG=1): the next start removes the temporary files, no complete file is
#    rejected, outputs equal.
# Servers are always killed at the end.  Ends with "RESULT passed=N failed=N [skipped=N]".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
passed=0; failed=0; skipped=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
finish() {
  if [ "$skipped" -ne 0 ]; then echo "RESULT passed=$passed failed=$failed skipped=$skipped"
  else echo "RESULT passed=$passed failed=$failed"; fi
  exit $([ "$failed" -eq 0 ] && echo 0 || echo 1)
}

tmp=$(mktemp -d)
pids=()
mounted=""
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
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
  rm -f "$tmp/$name.out" # a restart under the same name must not read the old port
  "$bin" serve --model "$tmp/model" --served-model-name tiny --host 127.0.0.1 --port 0 --threads 2 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  pids+=("$pid")
  server_ready "$name" "$pid" 0.05
  port=$server_port
}
stop_server() { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }

# Prompts: N token-id prompts of 40..199 tokens, each its own (no shared prefix).
N=8
for i in $(seq 0 $((N - 1))); do
  node -e 'let s=Number(process.argv[1])*7919+13, n=40+(Number(process.argv[1])*37)%160, a=[];
    for(let k=0;k<n;k++){s=(s*1103515245+12345)%2147483648; a.push(100+s%5000);} console.log(JSON.stringify(a))' \
    "$i" >"$tmp/prompt$i"
done
source tests/scripts/cache_lib.sh # run_all, same_as
same_as_off() { same_as "$1" off; }
all_cached() { for i in $(seq 0 $((N - 1))); do [ "$(cat "$tmp/$1.$i.cached" 2>/dev/null)" -gt 0 ] || return 1; done; }
none_cached() { for i in $(seq 0 $((N - 1))); do [ "$(cat "$tmp/$1.$i.cached" 2>/dev/null)" = 0 ] || return 1; done; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | sed -n "s/^$1 \([0-9]*\)$/\1/p"; }
nfiles() { find "$1" -maxdepth 1 -name '*.kvb' | wc -l; }

# ---- the reference: no prefix cache
start_server off --prefix-cache off
run_all off
stop_server
check "reference outputs" grep -q '"logprobs"' "$tmp/off.0"

# ---- warm restart
start_server a1 --kv-cache-dir "$tmp/kva"
run_all a1 a
check "first run equals the cache-off run" same_as_off a1
stop_server
check "clean shutdown wrote the cached blocks" [ "$(nfiles "$tmp/kva")" -gt 0 ]
start_server a2 --kv-cache-dir "$tmp/kva"
run_all a2 a
check "after a restart: outputs equal the cache-off run (tokens and logprobs)" same_as_off a2
check "after a restart: every prompt has cached tokens" all_cached a2
check "after a restart: blocks restored from disk" [ "$(metric hearth_disk_cache_blocks_restored_total)" -gt 0 ]
check "after a restart: no file rejected" [ "$(metric hearth_disk_cache_files_rejected_total)" = 0 ]
stop_server

# Namespace b: the same prompts under another cache_salt, in their own directory.
start_server b1 --kv-cache-dir "$tmp/kvb"
run_all b1 b
stop_server

# ---- damaged files: each kind on a copy of namespace a's directory
damage() { # KIND DIR
  local kind=$1 dir=$2 others
  mapfile -t others < <(find "$tmp/kvb" -maxdepth 1 -name '*.kvb' | sort)
  local k=0
  for f in $(find "$dir" -maxdepth 1 -name '*.kvb' | sort); do
    case $kind in
      truncate) truncate -s -1 "$f" ;;
      flip) printf '\x5a' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") / 2 )) conv=notrunc status=none ;;
      swap) cp "${others[$((k % ${#others[@]}))]}" "$f" ;;
    esac
    k=$((k + 1))
  done
}
for kind in truncate flip swap; do
  rm -rf "$tmp/kvd"; cp -r "$tmp/kva" "$tmp/kvd"
  n=$(nfiles "$tmp/kvd")
  damage $kind "$tmp/kvd"
  start_server d$kind --kv-cache-dir "$tmp/kvd"
  run_all d$kind a
  check "$kind: outputs equal the cache-off run" same_as_off d$kind
  check "$kind: nothing loaded" none_cached d$kind
  r=$(metric hearth_disk_cache_files_rejected_total)
  check "$kind: damaged files counted ($r of $n rejected)" [ "$r" -gt 0 ]
  check "$kind: nothing restored" [ "$(metric hearth_disk_cache_blocks_restored_total)" = 0 ]
  stop_server
done

# ---- a full disk, and a quota of less than one file
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=64k tmpfs "$tmp/full" 2>/dev/null; then
  mounted="$tmp/full"
  start_server full --kv-cache-dir "$tmp/full" --kv-cache-mib 1
  run_all full0 a
  run_all full a
  check "full disk: outputs equal the cache-off run" same_as_off full
  stop_server
  check "full disk: the server stopped cleanly" grep -q "serve: stopped" "$tmp/full.err"
  check "full disk: failed writes logged" grep -q "No space left on device" "$tmp/full.err"
  umount "$tmp/full" && mounted=""
else
  skipped=$((skipped + 1)); echo "SKIP full disk: cannot mount a tmpfs here"
fi
start_server quota --kv-cache-dir "$tmp/kvq" --kv-cache-disk-mib 1 --kv-cache-mib 1 --block-size 16
run_all quota a
check "tiny pool, 1 MiB quota: outputs equal the cache-off run" same_as_off quota
stop_server
check "1 MiB quota: the directory stays under it" [ "$(du -sk "$tmp/kvq" | cut -f1)" -le 1100 ]

# ---- kill -9 while blocks are written (evictions from a pool of 64 blocks: 1 MiB of f32
# KV; even rounds also SIGTERM first, so that some die inside the shutdown flush).  20
# rounds; under the sanitizers 8 (a server start there costs seconds; make test runs the 20,
# and so does make test-long under the sanitizers)
rounds=20; [[ "$bin" == *asan* ]] && [ -z "${TEST_LONG:-}" ] && rounds=8
start_server off32 --prefix-cache off --kv-dtype f32
run_all off32
stop_server
for round in $(seq 1 "$rounds"); do
  start_server k9 --kv-cache-dir "$tmp/kvk" --kv-cache-mib 1 --kv-dtype f32
  for i in $(seq 0 $((N - 1))); do
    for salt in k$round x$round; do
      curl -s -m 30 -o /dev/null "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"tiny\",\"prompt\":$(cat "$tmp/prompt$i"),\"max_tokens\":4,\"cache_salt\":\"$salt\"}" &
    done
  done
  # Once evictions are being written (at most 10 s), a little more, then the kill.
  for _ in $(seq 1 200); do
    [ "$(metric hearth_disk_cache_written_blocks_total)" -gt 0 ] 2>/dev/null && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 3))"
  [ $((round % 2)) = 0 ] && kill -TERM "$pid" && sleep "0.0$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  wait
done
start_server k9b --kv-cache-dir "$tmp/kvk" --kv-dtype f32
check "kill -9 loop ($rounds rounds): temporary files removed at start" [ "$(find "$tmp/kvk" -name '*.tmp.*' | wc -l)" = 0 ]
run_all k9b a
check "kill -9 loop: outputs equal the cache-off run" same_as k9b off32
files=$(nfiles "$tmp/kvk")
# Read back every namespace the loop wrote: no complete file may be rejected.
for round in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((N - 1))); do
    curl -s -m 30 -o /dev/null "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"tiny\",\"prompt\":$(cat "$tmp/prompt$i"),\"max_tokens\":1,\"cache_salt\":\"k$round\"}"
  done
done
# ... and with the cache off for comparison: a restored block gives the cache-off bits.
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"tiny\",\"prompt\":$(cat "$tmp/prompt3"),\"max_tokens\":8,\"temperature\":0,\"logprobs\":3,\"ignore_eos\":true,\"cache_salt\":\"k$rounds\"}" \
  | node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8"));
    console.log(JSON.stringify({text:j.choices[0].text,logprobs:j.choices[0].logprobs}))' >"$tmp/k9c.3" 2>/dev/null
check "kill -9 loop: a prompt restored from the loop's files equals the cache-off run" cmp -s "$tmp/k9c.3" "$tmp/off32.3"
check "kill -9 loop: $files files left, none rejected" [ "$(metric hearth_disk_cache_files_rejected_total)" = 0 ]
check "kill -9 loop: some were read back" [ "$(metric hearth_disk_cache_blocks_restored_total)" -gt 0 ]
stop_server
finish
