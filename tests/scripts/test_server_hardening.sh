#!/usr/bin/env bash
# Hardening of `hearth serve` (issue 18), on 127.0.0.1 and free ports, each part bounded in
# count and time: the reload wakeup, admin keys, salts per key combined with the client's,
# amplification limits, HTTP edges answered like nginx (on first and later requests of a
# connection), slow connections that must not lock fresh clients out, nor idle keep-alive
# ones, stalled streams, the shutdown bound, --no-mmap and reload refusing files that change.  HARDEN_ONLY="reload admin ..." runs some parts only.  Servers are
# always killed at the end.  Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
# check NAME COMMAND ARGS...: runs one command; `check N [ … ] && grep …` would assert only the [ … ]
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
# check_all NAME 'CONDITION': the whole shell condition (&&, ||, !, pipes), evaluated when checked
check_all() { if eval "$2"; then ok "$1"; else fail "$1"; fi; }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $([ "$failed" -eq 0 ] && echo 0 || echo 1); }
part() { [ -z "${HARDEN_ONLY:-}" ] || [[ " $HARDEN_ONLY " == *" $1 "* ]]; }

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
json=(-H "Content-Type: application/json")

source tests/scripts/server_lib.sh # server_ready
# start_server NAME MODEL_DIR ARGS...: sets port_NAME and pid_NAME once /health answers 200
start_server() {
  local name=$1 dir=$2; shift 2
  "$bin" serve --model "$dir" --served-model-name tiny --host 127.0.0.1 --port 0 --threads 2 \
    --kv-cache-mib 64 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  pids+=("$pid")
  eval "pid_$name=$pid"
  server_ready "$name" "$pid"
  eval "port_$name=$server_port"
}
# req METHOD URL [curl args]: body to $tmp/body, headers to $tmp/headers, status to $code
req() { # METHOD URL CURL-ARGS...: the reply in $tmp/body, its status in $code (REQ_MAX: seconds, default 30)
  local m=$1 u=$2; shift 2
  code=$(curl -sS -m "${REQ_MAX:-30}" -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X "$m" "$u" "$@" 2>"$tmp/curl.err")
}
jget() {
  node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
    const v=process.argv[2].split(".").reduce((o,k)=>o==null?undefined:o[k],j);
    console.log(v===undefined?"<undefined>":v===null?"<null>":typeof v==="object"?JSON.stringify(v):String(v))' \
    "$tmp/body" "$1" 2>/dev/null || echo "<not json>"
}
# stats_running: /v1/stats's "running" from $tmp/body (its only key of that name), without
# a node start a poll (~0.1 s of CPU each: the reload loop polls hundreds of times)
stats_running() { [[ $(<"$tmp/body") =~ \"running\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo "<none>"; }
py_part() { # NAME SCRIPT ARGS...: runs a python client (bounded), adds its RESULT
  local name=$1; shift
  if ! timeout 120 python3 "$@" >"$tmp/$name.log" 2>&1; then :; fi
  cat "$tmp/$name.log"
  local line; line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$tmp/$name.log" | tail -n1)
  if [ -n "$line" ]; then
    passed=$((passed + $(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")))
  else fail "$name crashed"; fi
}
no_sanitizer_report() { ! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$1.err"; }

# ---- 1. a request that arrives while a reload waits for in-flight work is served
if part reload; then
  start_server rl "$tmp/model" --max-num-seqs 4
  rb="http://127.0.0.1:$port_rl"
  # 50 rounds; 10 under the sanitizers, where each round (a reload included) is slower
  rounds=50 long_tokens=300; [[ "$bin" == *asan* ]] && rounds=10 long_tokens=120
  hung=0; raced=0
  for i in $(seq 1 "$rounds"); do
    curl -s -m 30 -o /dev/null "${json[@]}" "$rb/v1/completions" \
      -d '{"model":"tiny","prompt":"long","max_tokens":'"$long_tokens"',"ignore_eos":true}' &
    long_pid=$!
    for _ in $(seq 1 100); do
      req GET "$rb/v1/stats"; [ "$(stats_running)" = 1 ] && break; sleep 0.01
    done
    curl -s -m 30 -o "$tmp/reload.body" -w '%{http_code}' -X POST "$rb/v1/reload" >"$tmp/reload.code" &
    reload_pid=$!
    sleep 0.03
    # the reload is waiting for the long request when the stats still show it running
    req GET "$rb/v1/stats"; [ "$(stats_running)" = 1 ] && raced=$((raced + 1))
    # bounded: a lost wakeup hangs forever; 30 s leaves room for the long request and the
    # reload on a loaded machine
    c=$(curl -s -m 30 -o /dev/null -w '%{http_code}' "${json[@]}" "$rb/v1/completions" \
      -d '{"model":"tiny","prompt":"small","max_tokens":2}')
    wait "$long_pid" "$reload_pid"
    if [ "$c" != 200 ] || [ "$(cat "$tmp/reload.code")" != 200 ]; then hung=$((hung + 1)); break; fi
  done
  check "reload: a request sent during a reload finishes, $rounds times in a row (hung $hung, raced $raced)" \
    [ "$hung" = 0 -a "$i" = "$rounds" ]
  check "reload: most rounds sent the small request while the reload waited ($raced of $rounds)" \
    [ "$raced" -ge $((rounds / 2)) ]
fi

# ---- 4. admin keys: tenants get 403 on the admin endpoints; client errors name no server paths
if part admin; then
  cp -r "$tmp/model" "$tmp/model_admin"
  start_server adm "$tmp/model_admin" --api-key sk-tenant --admin-api-key sk-admin
  start_server noadm "$tmp/model" --api-key sk-tenant
  ab="http://127.0.0.1:$port_adm"; nb="http://127.0.0.1:$port_noadm"
  tenant=(-H "Authorization: Bearer sk-tenant"); admin=(-H "Authorization: Bearer sk-admin")
  for ep in "POST /v1/prefix_cache/reset" "POST /v1/reload" "GET /v1/stats"; do
    set -- $ep
    req "$1" "$ab$2" "${tenant[@]}"
    check "admin: a tenant key gets 403 on $2" [ "$code" = 403 -a "$(jget error.code)" = forbidden ]
    req "$1" "$ab$2" "${admin[@]}"
    check "admin: the admin key reaches $2" [ "$code" = 200 ]
    req "$1" "$nb$2" "${tenant[@]}"
    check "admin: without --admin-api-key $2 is off for tenants (403)" [ "$code" = 403 ]
    req "$1" "$ab$2"
    check "admin: no key on $2 is 401" [ "$code" = 401 ]
  done
  req POST "$ab/v1/completions" "${admin[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"hi","max_tokens":2}'
  check "admin: the admin key generates too" [ "$code" = 200 ]
  req POST "$ab/v1/completions" "${tenant[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"hi","max_tokens":2}'
  check "admin: the tenant key generates" [ "$code" = 200 ]
  req GET "$ab/v1/models" "${tenant[@]}"
  check "admin: /v1/models answers" [ "$code" = 200 ]
  check "admin: /v1/models names no server path" bash -c "! grep -q '$tmp' '$tmp/body'"
  mv "$tmp/model_admin/model.safetensors" "$tmp/model_admin/moved.safetensors"
  req POST "$ab/v1/reload" "${admin[@]}"
  check "admin: a failed reload is a 500 envelope ($(head -c 200 "$tmp/body"))" [ "$code" = 500 ]
  check "admin: the reload error names no server path" bash -c "! grep -q '$tmp' '$tmp/body'"
  check "admin: the server log has the full reason" grep -q "$tmp/model_admin" "$tmp/adm.err"
  mv "$tmp/model_admin/moved.safetensors" "$tmp/model_admin/model.safetensors"
  req POST "$ab/v1/reload" "${admin[@]}"
  check "admin: reload works again once the file is back" [ "$code" = 200 ]
fi

# ---- 5. --salt-per-key combines the key's namespace with the client's cache_salt
if part salt; then
  start_server salt "$tmp/model" --api-key sk-one --api-key sk-two --salt-per-key
  sb="http://127.0.0.1:$port_salt"
  prefix=$(printf 'a shared prefix for the salt test %.0s' $(seq 1 30))
  cached() { # KEY EXTRA_JSON SUFFIX: prints cached_tokens
    req POST "$sb/v1/completions" -H "Authorization: Bearer $1" "${json[@]}" \
      -d "{\"model\":\"tiny\",\"prompt\":\"$prefix $3\",\"max_tokens\":1$2}"
    jget usage.prompt_tokens_details.cached_tokens
  }
  cached sk-one "" a >/dev/null
  c_plain=$(cached sk-one "" b)
  c_user1=$(cached sk-one ',"cache_salt":"user-1"' c)
  c_user1b=$(cached sk-one ',"cache_salt":"user-1"' d)
  c_user2=$(cached sk-one ',"cache_salt":"user-2"' e)
  c_other=$(cached sk-two ',"cache_salt":"user-1"' f)
  c_other0=$(cached sk-two "" g)
  check "salt: the key alone reuses its prefix ($c_plain)" [ "$c_plain" -gt 0 ]
  check "salt: a client cache_salt separates within the key ($c_user1)" [ "$c_user1" = 0 ]
  check "salt: the same cache_salt under the same key reuses ($c_user1b)" [ "$c_user1b" -gt 0 ]
  check "salt: another cache_salt under the key does not see it ($c_user2)" [ "$c_user2" = 0 ]
  check "salt: the same cache_salt under another key does not see it ($c_other)" [ "$c_other" = 0 ]
  check "salt: another key alone does not see the first key's ($c_other0)" [ "$c_other0" = 0 ]
fi

# ---- 3. amplification: operator limits with clear 400s, long prompts refused before the work
if part limits; then
  start_server lim "$tmp/model" --max-prompts-per-request 4 --max-n 4 --max-response-bytes 262144
  lb="http://127.0.0.1:$port_lim"
  req POST "$lb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":["a","b","c","d","e"],"max_tokens":1}'
  check "limits: 5 prompts above --max-prompts-per-request 4 is a 400 on prompt" \
    [ "$code" = 400 -a "$(jget error.param)" = prompt ]
  req POST "$lb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":["a","b","c","d"],"max_tokens":1}'
  check "limits: 4 prompts are served" [ "$code" = 200 -a "$(jget choices.3.index)" = 3 ]
  req POST "$lb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"x","n":5,"max_tokens":1}'
  check "limits: n above --max-n is a 400 on n" [ "$code" = 400 -a "$(jget error.param)" = n ]
  big='{"model":"tiny","prompt":"x","n":2,"max_tokens":300,"logprobs":20,"ignore_eos":true'
  req POST "$lb/v1/completions" "${json[@]}" -d "$big}"
  check "limits: a non-streamed response that could pass --max-response-bytes is a 400 ($(jget error.message | head -c 120))" \
    [ "$code" = 400 -a "$(jget error.param)" = max_tokens ]
  req POST "$lb/v1/completions" "${json[@]}" -d "$big,\"stream\":true}"
  check "limits: the same request streamed is served to [DONE]" \
    [ "$code" = 200 -a "$(tail -c 14 "$tmp/body")" = "$(printf 'data: [DONE]\n\n')" ]
  req POST "$lb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"x","n":2,"max_tokens":20,"logprobs":20}'
  check "limits: a small one with logprobs is served" [ "$code" = 200 ]
  # 8 MiB of one letter: the baseline tokenized it all (seconds, ~300 MB each) before the
  # context check; it is refused now without that work
  node -e 'process.stdout.write(JSON.stringify({model:"tiny",prompt:"a".repeat(8*1024*1024-100),max_tokens:1}))' >"$tmp/huge.json"
  hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid_lim/status"; }
  before=$(hwm)
  req POST "$lb/v1/completions" "${json[@]}" --data-binary @"$tmp/huge.json"
  after=$(hwm)
  check "limits: a prompt far beyond the context is a 400 on prompt" [ "$code" = 400 -a "$(jget error.param)" = prompt ]
  if [[ "$bin" == *asan* ]]; then ok "limits: peak RSS check skipped under the sanitizers"
  else check "limits: refusing it costs little memory ($(( (after - before) / 1024 )) MiB more peak RSS, under 120)" \
    [ $((after - before)) -lt 122880 ]; fi
  req POST "$lb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"still here","max_tokens":2}'
  check "limits: still serving" [ "$code" = 200 ]
  # a large non-streamed response with logprobs costs memory about its size: the same
  # generation without logprobs first (the KV pages it touches), then with them
  start_server big "$tmp/model" --max-response-bytes 1000000000 --kv-cache-mib 256
  bb="http://127.0.0.1:$port_big"
  hwm_big() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid_big/status"; }
  if [[ "$bin" == *asan* ]]; then
    # No memory figures under the sanitizers, so no baseline run; and 100 tokens, not 1,000:
    # at ~0.1 s a step there, 8 x 1,000 tokens ran into req's 30 s twice (60 s, and the
    # response was never built).  This one is built and served whole under ASan (~10 s).
    req POST "$bb/v1/completions" "${json[@]}" \
      -d '{"model":"tiny","prompt":"x","n":8,"max_tokens":100,"logprobs":20,"ignore_eos":true}'
    size=$(stat -c %s "$tmp/body")
    check "limits: a ${size}-byte response with logprobs is served whole under the sanitizers (memory check skipped)" \
      [ "$code" = 200 -a "$size" -gt 200000 -a "$(jget choices.7.logprobs.tokens.99)" != "<undefined>" ]
  else
    # 8,000 tokens sampled on the host take 10-30 s on a loaded 2-CPU machine (27 s seen
    # beside two busy loops): 120 s, so that only the memory is under test
    REQ_MAX=120 req POST "$bb/v1/completions" "${json[@]}" \
      -d '{"model":"tiny","prompt":"x","n":8,"max_tokens":1000,"ignore_eos":true}'
    h1=$(hwm_big)
    REQ_MAX=120 req POST "$bb/v1/completions" "${json[@]}" \
      -d '{"model":"tiny","prompt":"x","n":8,"max_tokens":1000,"logprobs":20,"ignore_eos":true}'
    h2=$(hwm_big)
    size=$(stat -c %s "$tmp/body")
    check "limits: a ${size}-byte response (HTTP $code$(head -c 80 "$tmp/curl.err" | tr -d "\n" | sed "s/^./, &/")) with logprobs took $(( (h2 - h1) / 1024 )) MiB more peak RSS (at most 4x its size)" \
      [ "$code" = 200 -a "$size" -gt 2000000 -a $(( (h2 - h1) * 1024 )) -le $((4 * size)) ]
  fi
fi

# ---- 8. HTTP edges, answered as nginx answers them (raw sockets)
if part http; then
  start_server edge "$tmp/model" --max-body-bytes 65536
  py_part edges "$PWD/tests/e2e/http_edges.py" "$port_edge"
fi

# ---- 2. 1,030 slow connections (a header line a second, never done) and 15 fresh clients
if part slow; then
  ulimit -n 4096 2>/dev/null
  if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 2200 ]; then
    fail "slow clients: need 2,200 file descriptors, ulimit -n is $(ulimit -n)"
  else
    start_server slow "$tmp/model" --request-head-timeout 2 --max-connections-per-client 64
    py_part slow "$PWD/tests/e2e/slow_clients.py" "$port_slow" 1030 15 2 64
    req GET "http://127.0.0.1:$port_slow/health"
    check "slow clients: still serving afterwards" [ "$code" = 200 ]
  fi
fi

# ---- 2b. idle keep-alive connections holding every slot (4 addresses x the default 256 per
#      client = the 1,024 slots): fresh clients are still served (idle ones are closed first,
#      as nginx does); --keepalive-timeout-s closes an idle one long before --idle-timeout-s
if part keepalive; then
  ulimit -n 4096 2>/dev/null
  if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 2200 ]; then
    fail "keep-alive slots: need 2,200 file descriptors, ulimit -n is $(ulimit -n)"
  else
    start_server ka "$tmp/model"
    py_part keepalive "$PWD/tests/e2e/keepalive_slots.py" "$port_ka" 4 256 15 0
    start_server kat "$tmp/model" --keepalive-timeout-s 2
    py_part keepalive_timeout "$PWD/tests/e2e/keepalive_slots.py" "$port_kat" 0 0 0 2
  fi
fi

# ---- 7. a client that stops reading: its stream is cancelled past --max-unsent-bytes
#      (counted), and SIGTERM's grace bounds the whole stop even with it still connected
if part stall; then
  start_server stall "$tmp/model" --max-unsent-bytes 65536 --shutdown-grace-ms 1000 --kv-cache-mib 256
  stb="http://127.0.0.1:$port_stall"
  # the sanitizers' build takes minutes to fill the socket buffers on a loaded machine;
  # top-20 logprobs make each chunk several times larger, so fewer steps fill them (the
  # part under ASan alone: 63 -> 33 s)
  hold=60; [[ "$bin" == *asan* ]] && hold=240
  python3 "$PWD/tests/e2e/stalled_client.py" "$port_stall" "$hold" \
    '{"model":"tiny","prompt":"stall","n":16,"max_tokens":4000,"ignore_eos":true,"stream":true,"logprobs":20}' &
  stall_pid=$!; pids+=("$stall_pid")
  stalled=0
  for _ in $(seq 1 $((hold * 10 - 100))); do # bounded, and within the client's hold
    req GET "$stb/metrics"
    stalled=$(sed -n 's/^hearth_stalled_streams_total \([0-9]*\)$/\1/p' "$tmp/body")
    [ "${stalled:-0}" -ge 1 ] && break
    sleep 0.1
  done
  check "stall: the stalled stream was cancelled and counted (hearth_stalled_streams_total ${stalled:-none})" \
    [ "${stalled:-0}" -ge 1 ]
  idle=no
  for _ in $(seq 1 100); do
    req GET "$stb/v1/stats"; [ "$(jget running)" = 0 ] && [ "$(jget waiting)" = 0 ] && { idle=yes; break; }; sleep 0.1
  done
  check "stall: the engine stopped generating for it" [ "$idle" = yes ]
  t0=$(date +%s.%N)
  kill -TERM "$pid_stall"
  for _ in $(seq 1 150); do kill -0 "$pid_stall" 2>/dev/null || break; sleep 0.1; done
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  gone=yes; kill -0 "$pid_stall" 2>/dev/null && gone=no
  check_all "stall: SIGTERM with --shutdown-grace-ms 1000 and the stalled client connected: exit within 3 s (${secs} s)" \
    '[ "$gone" = yes ] && awk -v s="$secs" "BEGIN{exit !(s <= 3.0)}"'
  kill "$stall_pid" 2>/dev/null
fi

# ---- 6. --no-mmap: weights overwritten in place no longer kill the server; reload refuses
#      a directory whose files change while it reads them
if part mmap; then
  cp -r "$tmp/model" "$tmp/model_nommap"
  start_server nommap "$tmp/model_nommap" --no-mmap
  nb="http://127.0.0.1:$port_nommap"
  req POST "$nb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"before","max_tokens":4}'
  check "no-mmap: serving" [ "$code" = 200 ]
  # overwrite the weights in place (same inode), then cut the file short
  head -c 4096 /dev/urandom | dd of="$tmp/model_nommap/model.safetensors" bs=4096 seek=1 conv=notrunc status=none
  truncate -s 4096 "$tmp/model_nommap/model.safetensors"
  req POST "$nb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"after","max_tokens":4}'
  check "no-mmap: still serving after the file was overwritten and truncated in place" [ "$code" = 200 ]
  check "no-mmap: the server is alive" kill -0 "$pid_nommap"
  # reload while a writer keeps changing the weights file in place: refused, old model serves
  cp "$tmp/model/model.safetensors" "$tmp/model_nommap/model.safetensors"
  ( trap - EXIT; while :; do printf x >>"$tmp/model_nommap/model.safetensors"; done ) &
  writer=$!; pids+=("$writer")
  req POST "$nb/v1/reload"
  kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null
  check "no-mmap: a reload while the file changes is refused ($code: $(jget error.message | head -c 160))" \
    [ "$code" = 500 ]
  req POST "$nb/v1/completions" "${json[@]}" -d '{"model":"tiny","prompt":"old model","max_tokens":4}'
  check "no-mmap: the old model keeps serving" [ "$code" = 200 ]
  cp "$tmp/model/model.safetensors" "$tmp/model_nommap/new.safetensors"
  mv "$tmp/model_nommap/new.safetensors" "$tmp/model_nommap/model.safetensors"
  req POST "$nb/v1/reload"
  check "no-mmap: a reload after a replacement by rename works" [ "$code" = 200 ]
fi

for f in "$tmp"/*.err; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .err)
  [ "$n" = curl ] && continue
  check "no sanitizer report from server $n" no_sanitizer_report "$n"
done
finish
