#!/usr/bin/env bash
# Serving as users expect it (issue 19), end to end on the tiny random-weight Qwen3 with
# the real tokenizer, on 127.0.0.1 and free ports:
#  - a KV pool smaller than the config's context (1 MiB of f32 KV: 1,024 tokens of 4,096): max_model_len
#    comes down to the pool, with a start-up line saying so and the start-up summary;
#    --max-model-len above the pool is an error; requests without max_tokens run to
#    max_model_len; only a prompt longer than max_model_len is refused;
#  - a busy port is an error at start-up;
#  - CORS preflight and headers, with the default origins and a listed one;
#  - /v1/models/{id}, /tokenize, /detokenize, /version, /v1/responses errors;
#  - the real npm clients (tests/e2e/clients.mjs: openai, LangChain, the AI SDK);
#  - the CLI: generate --logprobs, missing flags named, --version, chat's /help and Ctrl-C.
# Servers are always killed at the end.  Ends with "RESULT passed=N failed=N".
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

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$bin" ]; then fail "no binary at $bin"; finish; fi
if [ ! -s tests/.cache/qwen3/tokenizer.json ] || [ ! -d tests/oracle/node_modules/@ai-sdk/openai ]; then
  rm -f tests/oracle/node_modules/.installed
  bash scripts/testdata.sh >/dev/null 2>&1 || { fail "test data (run scripts/testdata.sh)"; finish; }
fi
if ! "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$tmp/model" >"$tmp/mkmodel.log" 2>&1; then
  fail "mkmodel"; cat "$tmp/mkmodel.log"; finish
fi
model=tiny

source tests/scripts/server_lib.sh # server_ready
# start_server NAME ARGS...: sets port_NAME and pid_NAME once /health answers 200
start_server() {
  local name=$1; shift
  "$bin" serve --model "$tmp/model" --served-model-name "$model" --host 127.0.0.1 --threads 2 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  pids+=("$pid")
  eval "pid_$name=$pid"
  server_ready "$name" "$pid"
  eval "port_$name=$server_port"
}
req() { # METHOD URL [curl args]: body in $tmp/body, headers in $tmp/headers, status in $code
  local m=$1 u=$2; shift 2
  code=$(curl -sS -m 120 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X "$m" "$u" "$@" 2>"$tmp/curl.err")
}
jget() { # PATH: a field of the JSON in $tmp/body
  node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
    const v=process.argv[2].split(".").reduce((o,k)=>o==null?undefined:o[k],j);
    console.log(v===undefined?"<undefined>":v===null?"<null>":typeof v==="object"?JSON.stringify(v):String(v))' \
    "$tmp/body" "$1" 2>/dev/null || echo "<not json>"
}
header() { grep -i "^$1:" "$tmp/headers" | head -n1 | sed 's/^[^:]*: *//' | tr -d '\r'; }

# ---- the pool and max_model_len
start_server small --port 0 --kv-cache-mib 1 --kv-dtype f32 --reasoning-parser qwen3 --log-level debug
base="http://127.0.0.1:$port_small"
check "start-up: max_model_len lowered to the pool, said once" \
  grep -q "max_model_len 1024 (the model's context 4096 is more than the KV pool's 1024 tokens" "$tmp/small.err"
check "start-up summary: device, kernel, threads, pool, max_model_len, max_num_seqs" \
  grep -Eq "serve: device cpu, kernel cpu-[a-z0-9]+, 2 threads; KV pool 1024 tokens \(64 blocks of 16, f32\); max_model_len 1024; max_num_seqs 64" "$tmp/small.err"
check "no libmicrohttpd complaint about the logger option (at debug level)" bash -c "! grep -q 'EXTERNAL_LOGGER' '$tmp/small.err'"
req GET "$base/v1/models"
check "/v1/models: max_model_len is the pool's" [ "$(jget data.0.max_model_len)" = 1024 ]
ids1023=$(node -e 'console.log(Array(1023).fill(100).join(","))')
req POST "$base/v1/completions" -d "{\"model\":\"$model\",\"prompt\":[$ids1023]}"
check "a 1,023-token prompt is served (one token left)" [ "$code" = 200 -a "$(jget usage.completion_tokens)" = 1 ]
req POST "$base/v1/completions" -d "{\"model\":\"$model\",\"prompt\":[$ids1023,100]}"
check_all "a 1,024-token prompt is refused, naming max_model_len" \
  '[ "$code" = 400 -a "$(jget error.param)" = prompt ] && grep -q "maximum context length is 1024" "$tmp/body"'
req POST "$base/v1/chat/completions" -d "{\"model\":\"$model\",\"n\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
check "chat n=3 without max_tokens: the three share the pool" \
  [ "$code" = 200 -a "$(jget choices.2.finish_reason)" = length -a "$(jget usage.completion_tokens)" -gt 900 ]
"$bin" serve --model "$tmp/model" --port 0 --kv-cache-mib 1 --kv-dtype f32 --max-model-len 3000 >/dev/null 2>"$tmp/mml.err"
rc=$?
check_all "--max-model-len above the pool: exit 1 with the reason" \
  '[ "$rc" = 1 ] && grep -q -- "--max-model-len 3000 is more than the KV pool holds (1024 tokens)" "$tmp/mml.err"'
"$bin" serve --model "$tmp/model" --port 0 --kv-cache-memory-fraction 2 >/dev/null 2>"$tmp/frac.err"
rc=$?
check_all "--kv-cache-memory-fraction out of range: exit 2 naming it" \
  '[ "$rc" = 2 ] && grep -q -- "--kv-cache-memory-fraction" "$tmp/frac.err"'

# ---- a busy port
"$bin" serve --model "$tmp/model" --host 127.0.0.1 --port "$port_small" --kv-cache-mib 1 >"$tmp/busy.out" 2>"$tmp/busy.err"
rc=$?
check_all "a busy port: exit 1 saying 'cannot listen', no 'listening'" \
  '[ "$rc" = 1 ] && grep -q "cannot listen" "$tmp/busy.err" && ! grep -q listening "$tmp/busy.out"'
req GET "$base/health"
check "the first server still serves" [ "$code" = 200 ]

# ---- CORS
req OPTIONS "$base/v1/chat/completions" -H "Origin: http://app.test" -H "Access-Control-Request-Method: POST" \
  -H "Access-Control-Request-Headers: authorization, content-type"
check "preflight: 204 with the allow headers" [ "$code" = 204 -a "$(header Access-Control-Allow-Origin)" = "*" -a \
  "$(header Access-Control-Allow-Methods)" = POST -a "$(header Access-Control-Allow-Headers)" = "authorization, content-type" ]
req POST "$base/v1/completions" -H "Origin: http://app.test" -d "{\"model\":\"$model\",\"prompt\":\"hi\",\"max_tokens\":2}"
check "a cross-origin reply carries Access-Control-Allow-Origin" [ "$code" = 200 -a "$(header Access-Control-Allow-Origin)" = "*" ]
req GET "$base/v1/models"
check "a same-origin reply carries none" [ -z "$(header Access-Control-Allow-Origin)" ]
start_server cors --port 0 --kv-cache-mib 1 --api-key sk-k --allowed-origins "http://app.test, https://b.test" \
  --allow-credentials
cb="http://127.0.0.1:$port_cors"
req OPTIONS "$cb/v1/models" -H "Origin: http://app.test" -H "Access-Control-Request-Method: GET"
check "listed origin: preflight without the key, origin echoed" [ "$code" = 204 -a \
  "$(header Access-Control-Allow-Origin)" = http://app.test -a "$(header Access-Control-Allow-Credentials)" = true ]
req OPTIONS "$cb/v1/models" -H "Origin: http://evil.test" -H "Access-Control-Request-Method: GET"
check "other origin: preflight 400, no allow header" [ "$code" = 400 -a -z "$(header Access-Control-Allow-Origin)" ]
req GET "$cb/v1/models" -H "Origin: https://b.test"
check "a 401 to a listed origin is readable by it" [ "$code" = 401 -a "$(header Access-Control-Allow-Origin)" = https://b.test ]
req OPTIONS "$cb/v1/models"
check "OPTIONS without a preflight header: 405" [ "$code" = 405 ]

# ---- endpoints
req GET "$base/v1/models/$model"
check "GET /v1/models/{id}" [ "$code" = 200 -a "$(jget id)" = "$model" -a "$(jget object)" = model ]
req GET "$base/v1/models/other"
check "GET /v1/models/{unknown}: 404" [ "$code" = 404 -a "$(jget error.code)" = model_not_found ]
req GET "$base/version"
check "GET /version" [ "$code" = 200 -a "$(jget version)" = "$("$bin" --version | cut -d' ' -f2)" ]
req POST "$base/tokenize" -d '{"prompt":"Hello world"}'
check "POST /tokenize a prompt" [ "$code" = 200 -a "$(jget tokens)" = "[9707,1879]" -a "$(jget count)" = 2 -a \
  "$(jget max_model_len)" = 1024 ]
req POST "$base/tokenize" -d '{"messages":[{"role":"user","content":"Hello"}],"return_token_strs":true}'
check "POST /tokenize messages with the chat template" [ "$code" = 200 -a "$(jget count)" = 9 -a \
  "$(jget token_strs.0)" = "<|im_start|>" -a "$(jget tokens.3)" = 9707 ]
req POST "$base/detokenize" -d '{"tokens":[9707,1879]}'
check "POST /detokenize" [ "$code" = 200 -a "$(jget prompt)" = "Hello world" ]
req POST "$base/detokenize" -d '{"tokens":[9707,-1]}'
check "POST /detokenize: a bad id is 400" [ "$code" = 400 -a "$(jget error.param)" = tokens ]
req POST "$base/tokenize" -d '{"prompt":"x","messages":[]}'
check "POST /tokenize: prompt and messages together is 400" [ "$code" = 400 ]
req POST "$base/tokenize" -d '{"prompt":"x","model":"other"}'
check "POST /tokenize: another model is 404" [ "$code" = 404 ]
req POST "$base/tokenize" -d '[1'
check "POST /tokenize: bad JSON is 400" [ "$code" = 400 -a "$(jget error.code)" = invalid_json ]
req POST "$base/v1/completions" -d "{\"model\":\"$model\",\"prompt\":\"x\",\"suffix\":\"y\"}"
check "suffix stays a clear 400" [ "$code" = 400 -a "$(jget error.param)" = suffix ]
req POST "$base/v1/responses" -d "{\"model\":\"$model\"}"
check "responses without input: 400 naming it" [ "$code" = 400 -a "$(jget error.param)" = input ]
req POST "$base/v1/responses" -d "{\"model\":\"$model\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}"
check "responses: a non-function tool is 400" [ "$code" = 400 -a "$(jget error.param)" = "tools[0]" ]
req POST "$base/v1/responses" -d "{\"model\":\"$model\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}"
check "responses: an image part is 400" [ "$code" = 400 -a "$(jget error.param)" = "input[0].content" ]
req POST "$base/v1/responses" -d "{\"model\":\"$model\",\"input\":\"x\",\"max_output_tokens\":2,\"stream\":true}" -N
check_all "responses stream over curl: events, no [DONE]" '[ "$code" = 200 ] &&
  grep -q "^event: response.created" "$tmp/body" && grep -q "^event: response.incomplete" "$tmp/body" &&
  ! grep -q "DONE" "$tmp/body"'
req GET "$base/health"
check "still serving after the bad requests" [ "$code" = 200 ]

# ---- the real clients
if node tests/e2e/clients.mjs "$base" "$model" 1024 >"$tmp/clients.log" 2>&1; then :; fi
cp=$(sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\)$/\1/p' "$tmp/clients.log")
cf=$(sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\)$/\2/p' "$tmp/clients.log")
if [ -n "$cp" ] && [ "$cf" = 0 ] && [ "$cp" -gt 20 ]; then
  passed=$((passed + cp)); echo "ok   npm clients: $cp checks"
else
  fail "npm clients (openai, langchain, ai sdk)"; cat "$tmp/clients.log"
  failed=$((failed + ${cf:-0}))
fi

# ---- the CLI
"$bin" generate --model "$tmp/model" --prompt "Hello" --max-tokens 3 --logprobs 2 --seed 1 >"$tmp/gen.out" 2>/dev/null
check "generate --logprobs: a line per token with 2 alternatives" \
  [ "$(grep -c -P '^\d+\t".*"\t-?\d+\.\d+\t".*" -?\d+\.\d+, ".*" -?\d+\.\d+$' "$tmp/gen.out")" = 3 ]
"$bin" generate --model "$tmp/model" >/dev/null 2>"$tmp/gen.err"
rc=$?
check_all "generate without --prompt says so" \
  '[ "$rc" = 2 ] && grep -q "^hearth generate: --prompt TEXT .* is required" "$tmp/gen.err"'
"$bin" mkmodel --shape tiny >/dev/null 2>"$tmp/mk.err"
rc=$?
check_all "mkmodel without --out says so" '[ "$rc" = 2 ] && grep -q "^hearth mkmodel: --out DIR is required" "$tmp/mk.err"'
check "hearth --version" bash -c "'$bin' --version | grep -Eq '^hearth [0-9]+\.[0-9]+\.[0-9]+'"
check "the help describes every bench" bash -c "'$bin' 2>&1 | grep -q 'prefix (exact reuse), throughput, forward, kernels'"
printf '/help\n/nope\nhi\n' | "$bin" chat --model "$tmp/model" --max-tokens 2 --kv-cache-mib 1 >"$tmp/chat.out" 2>"$tmp/chat.err"
check_all "chat: /help and unknown commands stay local" \
  '[ "$(grep -c "/reset  start a new conversation" "$tmp/chat.err")" = 2 ] &&
   grep -q "unknown command /nope" "$tmp/chat.err" && [ "$(grep -c "prompt tokens" "$tmp/chat.err")" = 1 ]'
# Ctrl-C while the answer is written stops it, and the conversation goes on
{ echo hi; sleep 3; echo again; sleep 3; } | "$bin" chat --model "$tmp/model" --ignore-eos --max-tokens 100000 \
  --kv-cache-mib 8 >"$tmp/chat2.out" 2>"$tmp/chat2.err" &
cpid=$!; pids+=("$cpid")
sleep 1.5; kill -INT "$cpid" 2>/dev/null
sleep 3; kill -INT "$cpid" 2>/dev/null
wait "$cpid"; crc=$?
check_all "chat: Ctrl-C stops each answer, the conversation goes on" \
  '[ "$crc" = 0 ] && [ "$(grep -c "\[stopped\]" "$tmp/chat2.err")" = 2 ] && [ "$(grep -c "prompt tokens" "$tmp/chat2.err")" = 2 ]'
python3 tests/e2e/chat_pty.py "$bin" "$tmp/model" >"$tmp/pty.log" 2>&1
pp=$(sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\)$/\1/p' "$tmp/pty.log")
pf=$(sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\)$/\2/p' "$tmp/pty.log")
if [ "${pf:-1}" = 0 ] && [ "${pp:-0}" = 4 ]; then passed=$((passed + 4)); echo "ok   chat on a terminal: 4 checks"
else fail "chat on a terminal (tests/e2e/chat_pty.py)"; cat "$tmp/pty.log"; fi
finish
