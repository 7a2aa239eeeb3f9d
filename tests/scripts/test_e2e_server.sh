#!/usr/bin/env bash
# End to end: `hearth serve` on a random-weight tiny Qwen3 checkpoint with the real Qwen3
# tokenizer and chat template, on 127.0.0.1 and free ports.  curl checks the HTTP surface
# (auth, routes, limits, error envelopes, SSE framing, /health /metrics /v1/stats, reload,
# cache reset, --max-waiting), tests/e2e/openai_client.mjs drives it with the official
# openai npm package, tests/e2e/load.mjs runs 64 streaming clients with random
# disconnects, and SIGTERM must end the server cleanly (exit 0) after finishing a stream.
# Servers are always killed at the end.  Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
load_seconds=${HEARTH_LOAD_SECONDS:-15}
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
if [ ! -s tests/.cache/qwen3/tokenizer.json ] || [ ! -d tests/oracle/node_modules/openai ]; then
  # a node_modules installed before the openai client was pinned must be completed
  [ -d tests/oracle/node_modules/openai ] || rm -f tests/oracle/node_modules/.installed
  bash scripts/testdata.sh >/dev/null 2>&1 || { fail "test data (run scripts/testdata.sh)"; finish; }
fi
if ! "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$tmp/model" >"$tmp/mkmodel.log" 2>&1; then
  fail "mkmodel"; cat "$tmp/mkmodel.log"; finish
fi
model=tiny
key=sk-test-key

# ---- start-up errors name the flag; a model that does not load ends the process
startup_fails() { # WANT_RC PATTERN ARGS...: serve exits WANT_RC with PATTERN on stderr
  local want=$1 pat=$2; shift 2
  "$bin" serve "$@" >/dev/null 2>"$tmp/startup.err"
  local rc=$?
  [ "$rc" = "$want" ] && grep -q -- "$pat" "$tmp/startup.err"
}
check "bad flag: exit 2 naming the flag" startup_fails 2 '--prefix-cache' --model "$tmp/model" --prefix-cache maybe
check "bad --reasoning-parser: exit 2" startup_fails 2 '--reasoning-parser' --model "$tmp/model" --reasoning-parser x
check "bad --tool-call-parser: exit 2" startup_fails 2 '--tool-call-parser' --model "$tmp/model" --tool-call-parser x
check "bad --port: exit 2" startup_fails 2 '--port' --model "$tmp/model" --port 70000
check "missing model: exit 1 with the reason" startup_fails 1 'did not load' --model "$tmp/no-such-model" --port 0

source tests/scripts/server_lib.sh # server_ready
# start_server NAME ARGS...: sets port_NAME and pid_NAME once /health answers 200
start_server() {
  local name=$1; shift
  "$bin" serve --model "$tmp/model" --served-model-name "$model" --host 127.0.0.1 --port 0 --threads 2 \
    --kv-cache-mib 64 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  pids+=("$pid")
  eval "pid_$name=$pid"
  server_ready "$name" "$pid"
  eval "port_$name=$server_port"
}

# req METHOD URL [curl args]: the body goes to $tmp/body, headers to $tmp/headers, the status to $code
req() {
  local m=$1 u=$2; shift 2
  code=$(curl -sS -m 60 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X "$m" "$u" "$@" 2>"$tmp/curl.err")
}
# jget PATH: a field of the JSON in $tmp/body ("choices.0.text"), "<undefined>" / "<null>" when so
jget() {
  node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
    const v=process.argv[2].split(".").reduce((o,k)=>o==null?undefined:o[k],j);
    console.log(v===undefined?"<undefined>":v===null?"<null>":typeof v==="object"?JSON.stringify(v):String(v))' \
    "$tmp/body" "$1" 2>/dev/null || echo "<not json>"
}
# envelope PARAM: $tmp/body is OpenAI's error envelope naming PARAM ("<null>" for none)
envelope() {
  node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")); const e=j.error;
    const ok = e && Object.keys(j).length===1 && typeof e.message==="string" && e.message.length>0 &&
      typeof e.type==="string" && "param" in e && "code" in e &&
      (process.argv[2]==="<null>" ? e.param===null : e.param===process.argv[2]);
    if (!ok) { console.error("bad envelope: " + JSON.stringify(j)); process.exit(1); }' "$tmp/body" "$1"
}
expect() { # NAME WANT_STATUS PARAM METHOD PATH [curl args]
  local name=$1 want=$2 param=$3 m=$4 p=$5; shift 5
  req "$m" "$base$p" -H "Authorization: Bearer $key" "$@"
  if [ "$code" = "$want" ] && envelope "$param"; then ok "$name ($want)"; else fail "$name: status $code, want $want: $(head -c 300 "$tmp/body")"; fi
}

start_server on --admin-api-key "$key" --api-key sk-second --salt-per-key --max-body-bytes 65536 --max-n 4 \
  --reasoning-parser qwen3
start_server off --admin-api-key "$key" --prefix-cache off --max-num-seqs 2 --max-waiting 1
base="http://127.0.0.1:$port_on"
auth=(-H "Authorization: Bearer $key")
json=(-H "Content-Type: application/json")

# ---- open endpoints, auth, routes
req GET "$base/health"; check "/health 200 without a key" [ "$code" = 200 -a "$(jget status)" = ok ]
req GET "$base/metrics"
check "/metrics without a key" [ "$code" = 200 ]
check "/metrics has the prefix cache and histograms" grep -q '^hearth_prefix_cache_hits_total ' "$tmp/body"
check "/metrics has TTFT and KV blocks" grep -q '^# TYPE hearth_time_to_first_token_seconds histogram' "$tmp/body"
req GET "$base/v1/models"
check "no key: 401 envelope" [ "$code" = 401 -a "$(jget error.code)" = invalid_api_key ]
req GET "$base/v1/models" -H "Authorization: Bearer sk-wrong"
check "bad key: 401" [ "$code" = 401 ]
req GET "$base/v1/models" -H "Authorization: Bearer sk-second"
check "second key accepted" [ "$code" = 200 ]
req GET "$base/v1/models" "${auth[@]}"
check "/v1/models lists the served name" [ "$code" = 200 -a "$(jget data.0.id)" = "$model" -a "$(jget object)" = list ]
expect "unknown route" 404 "<null>" GET /v1/nothing
expect "wrong method" 405 "<null>" GET /v1/completions
check "405 says what is allowed" grep -qi '^Allow: POST' "$tmp/headers"
expect "wrong method on /health" 405 "<null>" POST /health

# ---- bad input: status, envelope naming the field, server still serving
expect "invalid JSON" 400 "<null>" POST /v1/completions "${json[@]}" -d '{"model": "tiny", "prompt": '
expect "body not an object" 400 "<null>" POST /v1/completions "${json[@]}" -d '[1,2,3]'
expect "missing model" 400 model POST /v1/completions "${json[@]}" -d '{"prompt":"x"}'
expect "missing prompt" 400 prompt POST /v1/completions "${json[@]}" -d '{"model":"tiny"}'
expect "unknown model" 404 model POST /v1/completions "${json[@]}" -d '{"model":"gpt-4o","prompt":"x"}'
expect "wrong type" 400 temperature POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":"x","temperature":"hot"}'
expect "negative max_tokens" 400 max_tokens POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":"x","max_tokens":-3}'
expect "huge max_tokens" 400 max_tokens POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":"x","max_tokens":100000000000}'
expect "beyond the context" 400 max_tokens POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":"x","max_tokens":5000}'
expect "token id beyond the vocabulary" 400 prompt POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":[1,999999999]}'
expect "n above --max-n" 400 n POST /v1/completions "${json[@]}" -d '{"model":"tiny","prompt":"x","n":5}'
expect "empty messages" 400 messages POST /v1/chat/completions "${json[@]}" -d '{"model":"tiny","messages":[]}'
expect "bad role" 400 "messages[0].role" POST /v1/chat/completions "${json[@]}" -d '{"model":"tiny","messages":[{"role":"robot","content":"x"}]}'
expect "missing content" 400 "messages[0].content" POST /v1/chat/completions "${json[@]}" -d '{"model":"tiny","messages":[{"role":"user"}]}'
head -c 100000 /dev/zero | tr '\0' 'a' >"$tmp/big"
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" --data-binary @"$tmp/big"
check "oversized body: 413 envelope" [ "$code" = 413 -a "$(jget error.code)" = request_too_large ]
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"Still serving?","max_tokens":4}'
check "still serving after bad input" [ "$code" = 200 -a "$(jget usage.completion_tokens)" = 4 ]

# ---- responses over curl
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"Hello","max_tokens":5,"echo":true}'
echo_ok() { [ "$code" = 200 ] && [[ "$(jget choices.0.text)" == Hello* ]]; }
check "echo prepends the prompt" echo_ok
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" -d '{"model":"tiny","prompt":[9707,1879],"max_tokens":3,"echo":true}'
check "token-id prompt with echo (detokenized)" [ "$code" = 200 -a "$(jget usage.prompt_tokens)" = 2 ]
# echo with logprobs: the prompt's tokens are scored too (the first one is null), then the completion's
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" \
  -d '{"model":"tiny","prompt":[9707,1879,11,1246],"max_tokens":3,"echo":true,"logprobs":2,"temperature":0}'
cp "$tmp/body" "$tmp/echo_lp.json"
echo_lp_ok() {
  [ "$code" = 200 ] && node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
    const lp=j.choices[0].logprobs, n=4+3;
    const ok = lp.tokens.length===n && lp.token_logprobs.length===n && lp.top_logprobs.length===n &&
      lp.text_offset.length===n && lp.token_logprobs[0]===null && lp.top_logprobs[0]===null &&
      lp.text_offset[0]===0 && lp.tokens.slice(0,4).join("")===j.choices[0].text.slice(0, lp.tokens.slice(0,4).join("").length) &&
      lp.token_logprobs.slice(1).every(x => typeof x==="number" && x<=0) &&
      lp.top_logprobs.slice(1).every(t => Object.keys(t).length>=2);
    process.exit(ok?0:1)' "$tmp/body"
}
check "echo with logprobs scores the prompt (first token null) and the completion" echo_lp_ok
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" \
  -d '{"model":"tiny","prompt":[9707,1879,11,1246],"max_tokens":3,"echo":true,"logprobs":2,"temperature":0,"stream":true}'
echo_stream_ok() {
  [ "$code" = 200 ] && node -e 'const fs=require("fs");
    const full=JSON.parse(fs.readFileSync(process.argv[2],"utf8")).choices[0].logprobs;
    const lines=fs.readFileSync(process.argv[1],"utf8").split("\n").filter(l=>l.startsWith("data: {"));
    const lp={tokens:[],token_logprobs:[],text_offset:[]};
    for (const l of lines) { const c=JSON.parse(l.slice(6)).choices[0]; if (!c || !c.logprobs) continue;
      for (const k of Object.keys(lp)) lp[k].push(...c.logprobs[k]); }
    const same = JSON.stringify(lp.tokens)===JSON.stringify(full.tokens) &&
      JSON.stringify(lp.token_logprobs)===JSON.stringify(full.token_logprobs) &&
      JSON.stringify(lp.text_offset)===JSON.stringify(full.text_offset);
    process.exit(same?0:1)' "$tmp/body" "$tmp/echo_lp.json"
}
check "streamed echo with logprobs carries the same entries" echo_stream_ok
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" \
  -d '{"model":"tiny","prompt":"Stream me","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}'
check "SSE: content type" grep -qi '^Content-Type: text/event-stream' "$tmp/headers"
check "SSE: ends with [DONE]" [ "$(tail -c 14 "$tmp/body")" = "$(printf 'data: [DONE]\n\n')" ]
check "SSE: every event is a data line" node -e 'const t=require("fs").readFileSync(process.argv[1],"utf8");
  const ev=t.split("\n\n").filter(Boolean); const ok=ev.every(e=>e.startsWith("data: ")&&!e.includes("\n"));
  const js=ev.slice(0,-1).map(e=>JSON.parse(e.slice(6))); const last=js[js.length-1];
  process.exit(ok && last.choices.length===0 && last.usage.completion_tokens===6 && js.slice(0,-1).every(c=>c.usage===null)?0:1)' "$tmp/body"
req POST "$base/v1/chat/completions" "${auth[@]}" "${json[@]}" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"chat_template_kwargs":{"enable_thinking":false}}'
check "chat with enable_thinking false" [ "$code" = 200 -a "$(jget choices.0.message.role)" = assistant ]
check "reasoning parser on: reasoning_content key present" [ "$(jget choices.0.message.reasoning_content)" != "<undefined>" ]
req POST "$base/v1/chat/completions" "${auth[@]}" "${json[@]}" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"weather?"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}'
check "chat with tools" [ "$code" = 200 ]
req GET "$base/v1/stats" "${auth[@]}"
check "/v1/stats JSON with the prefix cache" [ "$code" = 200 -a "$(jget prefix_cache.enabled)" = true -a "$(jget blocks_total)" -gt 0 ]
req POST "$base/v1/prefix_cache/reset" "${auth[@]}"
check "prefix cache reset" [ "$code" = 200 ]
req GET "$base/v1/stats" "${auth[@]}"
check "reset empties the cache" [ "$(jget prefix_cache.entries)" = 0 ]
req POST "$base/v1/reload" "${auth[@]}"
check "reload" [ "$code" = 200 -a "$(jget status)" = ok ]
req POST "$base/v1/completions" "${auth[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"After reload","max_tokens":2}'
check "serving after reload" [ "$code" = 200 ]

# ---- --salt-per-key: each key its own prefix-cache namespace, the client's cache_salt within it
prefix=$(printf 'a shared prefix for the salt test %.0s' $(seq 1 30))
salted() { # KEY EXTRA_JSON: prints cached_tokens of one request
  req POST "$base/v1/completions" -H "Authorization: Bearer $1" "${json[@]}" \
    -d "{\"model\":\"tiny\",\"prompt\":\"$prefix $3\",\"max_tokens\":1$2}"
  jget usage.prompt_tokens_details.cached_tokens
}
salted "$key" "" one >/dev/null
c_same=$(salted "$key" "" two)
c_other=$(salted sk-second "" three)
c_salt=$(salted "$key" ',"cache_salt":"sk-second"' four)
check "salt per key: the same key reuses its prefix ($c_same)" [ "$c_same" -gt 0 ]
check "salt per key: another key does not see it ($c_other)" [ "$c_other" = 0 ]
check "salt per key: a client cache_salt is its own namespace within the key ($c_salt)" [ "$c_salt" = 0 ]

# ---- --max-waiting: 503 with Retry-After once the queue is full
# (max-num-seqs 2, max-waiting 1). A long request runs first, seen running in the
# stats, so the waiting slot is free when the burst comes: at least two get 200
# whatever the engine thread's timing on a loaded machine, and the burst of seven
# overfills the queue.
offb="http://127.0.0.1:$port_off"
# (the sanitizers' build on a loaded 2-core machine takes over 60 s for 3,000 tokens)
queue_s=60; [[ "$bin" == *asan* ]] && queue_s=240
queue_req() { # queue_req I MAX_TOKENS
  curl -s -m "$queue_s" -o "$tmp/q$1.body" -D "$tmp/q$1.h" -w '%{http_code}' "${auth[@]}" "${json[@]}" \
    -d '{"model":"tiny","prompt":"queue","max_tokens":'"$2"',"ignore_eos":true}' "$offb/v1/completions" >"$tmp/q$1.code"
}
queue_req 1 1000 &
for w in $(seq 1 200); do
  req GET "$offb/v1/stats" "${auth[@]}"
  [ "$(jget running)" = 1 ] && break
  sleep 0.05
done
for i in $(seq 2 8); do queue_req "$i" 400 & done
wait_n=0; while [ "$(ls "$tmp"/q*.code 2>/dev/null | xargs -r cat | wc -c)" -lt 24 ] && [ $wait_n -lt $((queue_s * 10)) ]; do sleep 0.1; wait_n=$((wait_n + 1)); done
n503=0; n200=0
for i in $(seq 1 8); do
  c=$(cat "$tmp/q$i.code")
  [ "$c" = 503 ] && grep -qi '^Retry-After:' "$tmp/q$i.h" && n503=$((n503 + 1))
  [ "$c" = 200 ] && n200=$((n200 + 1))
done
check "--max-waiting: some requests get 503 + Retry-After, the others finish ($n503 x 503, $n200 x 200)" \
  [ $n503 -ge 1 -a $n200 -ge 2 -a $((n503 + n200)) = 8 ]

# ---- the official openai client
if node tests/e2e/openai_client.mjs "$base" "$offb" "$key" "$model" >"$tmp/client.log" 2>&1; then :; fi
cat "$tmp/client.log"
line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$tmp/client.log" | tail -n1)
if [ -n "$line" ]; then
  passed=$((passed + $(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")))
  failed=$((failed + $(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")))
else fail "openai client crashed"; fi

# ---- load: 64 streaming clients with random disconnects
if node tests/e2e/load.mjs "$base" "$key" "$model" "$load_seconds" 64 >"$tmp/load.log" 2>&1; then :; fi
cat "$tmp/load.log"
line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$tmp/load.log" | tail -n1)
if [ -n "$line" ]; then
  passed=$((passed + $(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")))
  failed=$((failed + $(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")))
else fail "load test crashed"; fi

# ---- a client that hangs up: its request is cancelled (not streamed, and streamed mid-prefill)
idle_soon() { # the engine has nothing running within 3 s
  for _ in $(seq 1 30); do
    req GET "$base/v1/stats" "${auth[@]}"
    [ "$(jget running)" = 0 ] && [ "$(jget waiting)" = 0 ] && [ "$(jget active_requests)" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}
curl -s -m 0.5 -o /dev/null "${auth[@]}" "${json[@]}" "$base/v1/completions" \
  -d '{"model":"tiny","prompt":"hang up","max_tokens":3000,"ignore_eos":true}'
check "hang-up during a non-streamed request cancels it" idle_soon
long=$(printf 'word %.0s' $(seq 1 3000))
curl -s -m 0.05 -o /dev/null "${auth[@]}" "${json[@]}" "$base/v1/completions" \
  -d "{\"model\":\"tiny\",\"prompt\":\"$long\",\"max_tokens\":3000,\"ignore_eos\":true,\"stream\":true}"
check "hang-up during a streamed request's prefill cancels it" idle_soon

# ---- SIGTERM: a stream in flight finishes, then the server exits 0
curl -sN -m 60 "${auth[@]}" "${json[@]}" -d '{"model":"tiny","prompt":"last words","max_tokens":64,"ignore_eos":true,"stream":true}' \
  "$base/v1/completions" >"$tmp/last.sse" 2>/dev/null &
curl_pid=$!
sleep 0.3
for name in on off; do
  eval "pid=\$pid_$name"
  kill -TERM "$pid"
done
rc_on=255; rc_off=255
for name in on off; do
  eval "pid=\$pid_$name"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "server $name still running 30 s after SIGTERM"; continue; fi
  wait "$pid"; eval "rc_$name=$?"
done
wait "$curl_pid" 2>/dev/null
check "SIGTERM: servers exit 0 ($rc_on, $rc_off)" [ "$rc_on" = 0 -a "$rc_off" = 0 ]
check "SIGTERM: the stream in flight finished with [DONE]" grep -q '^data: \[DONE\]' "$tmp/last.sse"
req GET "$base/health"
check "SIGTERM: nothing listens any more" [ "$code" = 000 ]
for name in on off; do
  if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err"; then
    fail "sanitizer report from server $name"; grep -E -A 30 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp/$name.err" | head -60
  else ok "no sanitizer report from server $name"; fi
done
finish
