#!/usr/bin/env bash
# Structured outputs end to end: `hearth serve` on a random-weight tiny Qwen3 checkpoint with
# the real Qwen3 tokenizer, on 127.0.0.1 and a free port; tests/e2e/structured.mjs checks the
# schema corpus with ajv, the other constraint kinds, forced tool calls through the openai
# client, the 400s, and exactness (alone/batched, cold/warm, streamed);
# tests/e2e/structured_clients.mjs runs the AI SDK's generateObject and LangChain's
# withStructuredOutput against it. Then a second server with --reasoning-parser qwen3 (the
# constraint starts after </think>), and `hearth generate` with the same constraint flags. The server is always killed at the end.
# Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $([ "$failed" -eq 0 ] && echo 0 || echo 1); }

tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

if [ ! -x "$bin" ]; then fail "no binary at $bin"; finish; fi
# test_grammar --check-prefixes checks the outputs cut by max_tokens (built by make test)
grammar_bin=$(dirname "$bin")/tests/test_grammar
[ -x "$grammar_bin" ] || grammar_bin=${BUILD:-build}/tests/test_grammar
if [ ! -x "$grammar_bin" ]; then fail "no test_grammar binary next to $bin (make ${BUILD:-build}/tests/test_grammar)"; finish; fi
if [ ! -s tests/.cache/qwen3/tokenizer.json ] || [ ! -d tests/oracle/node_modules/ajv-formats ] ||
   [ ! -d tests/oracle/node_modules/@langchain/openai ]; then
  rm -f tests/oracle/node_modules/.installed
  bash scripts/testdata.sh >/dev/null 2>&1 || { fail "test data (run scripts/testdata.sh)"; finish; }
fi
if ! "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$tmp/model" >"$tmp/mkmodel.log" 2>&1; then
  fail "mkmodel"; cat "$tmp/mkmodel.log"; finish
fi

source tests/scripts/server_lib.sh # server_ready
: >"$tmp/serve.out"
"$bin" serve --model "$tmp/model" --served-model-name tiny --host 127.0.0.1 --port 0 --threads 2 \
  --kv-cache-mib 128 --tool-call-parser qwen3 >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
server_ready serve "$pid"
port=$server_port

# The corpus's seeds: 3 per schema; under the sanitizers 1 (every schema is still compiled,
# masked and matched there, and the validity of 3 samples each is make test's; the other
# two were 60 of the 155 s of this test under ASan).  TEST_LONG=1 (make test-long): 3.
seeds=3; [[ "$bin" == *asan* ]] && [ -z "${TEST_LONG:-}" ] && seeds=1
slow=; [[ "$bin" == *asan* ]] && slow=1 # the sanitizers' build is several times slower
if STRUCTURED_SLOW=$slow STRUCTURED_SEEDS=$seeds timeout 900 node tests/e2e/structured.mjs "http://127.0.0.1:$port" tiny tests/data/structured/schemas.json \
     "$grammar_bin" >"$tmp/client.log" 2>&1; then :; fi
cat "$tmp/client.log" | grep -v '^RESULT'
line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$tmp/client.log" | tail -n1)
if [ -n "$line" ]; then
  passed=$((passed + $(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")))
  failed=$((failed + $(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")))
else
  fail "structured.mjs printed no RESULT"; tail -n 30 "$tmp/client.log"
fi
if timeout 600 node tests/e2e/structured_clients.mjs "http://127.0.0.1:$port" tiny >"$tmp/clients.log" 2>&1; then :; fi
cat "$tmp/clients.log" | grep -v '^RESULT'
line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+$' "$tmp/clients.log" | tail -n1)
if [ -n "$line" ]; then
  passed=$((passed + $(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line")))
  failed=$((failed + $(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")))
else
  fail "structured_clients.mjs printed no RESULT"; tail -n 30 "$tmp/clients.log"
fi
if kill -0 "$pid" 2>/dev/null; then ok "the server is still up"; else fail "the server died"; tail -n 30 "$tmp/serve.err"; fi
kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rc=$?; pid=""
if [ "$rc" = 0 ]; then ok "server exits 0 on SIGTERM"; else fail "server exit status $rc"; tail -n 30 "$tmp/serve.err"; fi

# ---- --reasoning-parser qwen3: the constraint starts after </think>. A copy of the model whose
# template opens <think> in the generation prompt (as thinking-only Qwen3 templates do), so the
# output starts as reasoning; a small logit_bias on </think> makes the random model close it
# after a few tokens. The reasoning must be free text (unconstrained), the content after
# </think> a document of the schema; with thinking off (the template closes </think> itself)
# the constraint applies from the first token.
cp -r "$tmp/model" "$tmp/model-think"
node -e '
const fs = require("fs"), p = process.argv[1], c = JSON.parse(fs.readFileSync(p, "utf8"));
const from = "{{- '"'"'<|im_start|>assistant\\n'"'"' }}", to = "{{- '"'"'<|im_start|>assistant\\n<think>\\n'"'"' }}";
const from2 = "{{- '"'"'<think>\\n\\n</think>\\n\\n'"'"' }}", to2 = "{{- '"'"'\\n</think>\\n\\n'"'"' }}";
if (!c.chat_template.includes(from) || !c.chat_template.includes(from2)) process.exit(1);
c.chat_template = c.chat_template.replace(from, to).replace(from2, to2);
fs.writeFileSync(p, JSON.stringify(c));' "$tmp/model-think/tokenizer_config.json" || fail "patching the chat template"
: >"$tmp/serve2.out"
"$bin" serve --model "$tmp/model-think" --served-model-name tiny --host 127.0.0.1 --port 0 --threads 2 \
  --kv-cache-mib 64 --reasoning-parser qwen3 >"$tmp/serve2.out" 2>"$tmp/serve2.err" &
pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve2.out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
for _ in $(seq 1 600); do
  [ -n "$port" ] && [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  fail "reasoning server did not start"; cat "$tmp/serve2.err"
else
  think_id=$(curl -s -m 10 "http://127.0.0.1:$port/tokenize" -H 'content-type: application/json' \
               -d '{"model":"tiny","prompt":"</think>"}' | sed -n 's/.*"tokens":\[\([0-9]*\)\].*/\1/p')
  schema='{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"]}'
  for mode in on off; do
    kw=$([ $mode = off ] && echo ', "chat_template_kwargs": {"enable_thinking": false}')
    curl -s -m 120 "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d '{"model": "tiny",
      "messages": [{"role": "user", "content": "a number as JSON"}], "n": 6, "max_tokens": 80, "seed": 5,
      "logit_bias": {"'"$think_id"'": 1.5}'"$kw"',
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": '"$schema"'}}}' >"$tmp/think-$mode.json"
  done
  if node -e '
const fs = require("fs"), [on, off] = process.argv.slice(1).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
const valid = (s) => { try { const v = JSON.parse(s); return /^\{"n":[0-9]\}$/.test(s) && Number.isInteger(v.n); } catch { return false; } };
const why = [];
const cs = on.choices ?? [];
if (cs.length !== 6) why.push("thinking on: " + JSON.stringify(on).slice(0, 300));
for (const c of cs) {
  const m = c.message;
  if (c.finish_reason === "stop" && !valid(m.content)) why.push("content after </think> is not a document of the schema: " + JSON.stringify(m));
  if ((m.content ?? "").includes("</think>") || (m.reasoning_content ?? "").includes("</think>")) why.push("</think> leaked: " + JSON.stringify(m));
}
const thought = cs.filter((c) => c.finish_reason === "stop" && valid(c.message.content) && (c.message.reasoning_content ?? "").length > 0);
if (thought.length < 3) why.push(`only ${thought.length} choices reasoned, then answered`);
/* unconstrained: reasoning no output of the schema could begin with */
if (!thought.some((c) => !"{\"n\":".startsWith(c.message.reasoning_content.slice(0, 5)))) why.push("the reasoning looks constrained");
for (const c of off.choices ?? [{}])
  if (c.finish_reason !== "stop" || !valid(c.message?.content) || c.message.reasoning_content)
    why.push("thinking off: " + JSON.stringify(c));
if (why.length) { console.log(why.slice(0, 4).join("\n")); process.exit(1); }' "$tmp/think-on.json" "$tmp/think-off.json"; then
    ok "reasoning parser: the constraint starts after </think> (reasoning free, content valid; thinking off: from the start)"
  else
    fail "reasoning parser with a constraint"
  fi
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
fi

# ---- hearth generate with the constraint flags
gen() { "$bin" generate --model "$tmp/model" --prompt "x" --threads 2 --kv-cache-mib 32 --seed 5 "$@" 2>"$tmp/gen.err"; }
out=$(gen --max-tokens 30 --regex '[a-f]{2,5}-[0-9]{2}')
if [[ "$out" =~ ^[a-f]{2,5}-[0-9]{2}$ ]] && grep -q '^\[stop\]' "$tmp/gen.err"; then ok "generate --regex"; else fail "generate --regex: '$out'"; cat "$tmp/gen.err"; fi
out=$(gen --max-tokens 10 --choice '["alpha","beta"]')
if [ "$out" = alpha ] || [ "$out" = beta ]; then ok "generate --choice"; else fail "generate --choice: '$out'"; fi
printf 'root ::= "<" [0-9]{1,3} ">"\n' >"$tmp/g.gbnf"
out=$(gen --max-tokens 10 --grammar-file "$tmp/g.gbnf")
if [[ "$out" =~ ^\<[0-9]{1,3}\>$ ]]; then ok "generate --grammar-file"; else fail "generate --grammar-file: '$out'"; fi
out=$(gen --max-tokens 60 --json-schema '{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"]}')
if [[ "$out" =~ ^\{\"n\":[0-9]\}$ ]]; then ok "generate --json-schema"; else fail "generate --json-schema: '$out'"; fi
if ! gen --max-tokens 5 --grammar 'root ::= (' >/dev/null && grep -q 'line 1, column' "$tmp/gen.err"; then
  ok "generate: a grammar error exits 1 with line and column"
else fail "generate: grammar error"; cat "$tmp/gen.err"; fi
finish
