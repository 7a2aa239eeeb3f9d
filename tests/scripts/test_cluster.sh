#!/usr/bin/env bash
# Replicas behind HAProxy (deploy/cluster.sh, deploy/haproxy.cfg): three `hearth serve` on a
# tiny random-weight Qwen3 with the real tokenizer, on 127.0.0.1 and free ports.
#  - tests/e2e/chat_workload.mjs (48 chats of 6 turns over 8 system prompts, streamed; 24 chats
#    under the sanitizers, 48 there too with TEST_LONG=1) through
#    the proxy: every prompt_cache_key lands on one replica (read from the replicas' JSON
#    access logs, which also must add up to the client's usage); the aggregate hit rate
#    (cached / prompt tokens) with affinity is >= 0.9x a single server's on the same workload
#    and clearly above round robin's (a second HAProxy, balance roundrobin); all three printed;
#  - without a key, the first message (chat) or the prompt's start (completions) is the key;
#  - a stream through the proxy is the same bytes as direct (id and created aside);
#  - prompt_cache_key: validated, never the cache's namespace; /metrics carries instance_name;
#  - a replica killed mid-run: its in-flight requests (streams that had sent a chunk) fail (no
#    hang), later requests for its keys are served by the others, and once restarted it gets
#    its keys back;
#  - cluster.sh stop is graceful: a stream in flight through the proxy ends with [DONE].
# Everything started is stopped at the end.  Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
finish() { echo "RESULT passed=$passed failed=$failed"; exit $([ "$failed" -eq 0 ] && echo 0 || echo 1); }

tmp=$(mktemp -d)
run=$tmp/run
pids=()
cleanup() {
  for f in "$run"/*.pid; do [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$bin" ]; then fail "no binary at $bin"; finish; fi
if ! command -v haproxy >/dev/null; then fail "no haproxy (scripts/deps.sh installs it)"; finish; fi
if [ ! -s tests/.cache/qwen3/tokenizer.json ]; then
  bash scripts/testdata.sh >/dev/null 2>&1 || { fail "test data (run scripts/testdata.sh)"; finish; }
fi
if ! "$bin" mkmodel --shape tiny --tokenizer tests/.cache/qwen3 --out "$tmp/model" >"$tmp/mkmodel.log" 2>&1; then
  fail "mkmodel"; cat "$tmp/mkmodel.log"; finish
fi
# a free port below the kernel's ephemeral range: a port found by binding port 0 is back in
# that range once released, and a replica (--replica-port 0) or any client socket could
# take it before the proxy binds it (seen once in CI: "Address already in use")
free_port() {
  python3 - <<'PY'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    p = random.randrange(max(1024, lo - 12000), lo)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
PY
}
model=tiny

# ---- the new flags refuse bad values, naming the flag
bad_flag() { "$bin" serve --model "$tmp/model" --port 0 "$@" >/dev/null 2>"$tmp/flag.err"; [ $? = 2 ] && grep -q -- "$1" "$tmp/flag.err"; }
check "bad --log-format: exit 2 naming it" bad_flag --log-format xml
check "bad --instance-name: exit 2 naming it" bad_flag --instance-name 'r 1'
check "cluster.sh: a bad --balance is refused" bash -c '! bash deploy/cluster.sh start --model x --balance random 2>/dev/null'

# ---- start: 3 replicas (any free ports) and the proxy
pport=$(free_port); sport=$(free_port)
while [ "$sport" = "$pport" ]; do sport=$(free_port); done
export HEARTH_BIN=$bin
if ! bash deploy/cluster.sh start --model "$tmp/model" --replicas 3 --port "$pport" --replica-port 0 \
     --stats-port "$sport" --dir "$run" --wait 120 -- --served-model-name "$model" --threads 1 \
     --kv-cache-mib 64 --log-format json >"$tmp/start.log" 2>&1; then
  fail "cluster.sh start"; cat "$tmp/start.log" "$run"/*.log 2>/dev/null | tail -n 40; finish
fi
ok "cluster.sh start: 3 replicas and HAProxy up"
proxy=http://127.0.0.1:$pport
rport() { cat "$run/r$1.port"; }
direct=http://127.0.0.1:$(rport 1)
reset_caches() { for i in 1 2 3; do curl -s -m 10 -o /dev/null -X POST "http://127.0.0.1:$(rport "$i")/v1/prefix_cache/reset"; done; }
workload() { node tests/e2e/chat_workload.mjs "$@"; }
jfield() { node -e 'console.log(JSON.parse(process.argv[1])[process.argv[2]])' "$1" "$2"; }

# routes TAG: "replica chat turn prompt cached generated" per chat access line of XFF 10.TAG.*
routes() {
  python3 - "$1" "$run" <<'EOF'
import json, sys, glob, os
tag, run = sys.argv[1], sys.argv[2]
for path in sorted(glob.glob(os.path.join(run, "r*.log"))):
    rep = os.path.basename(path)[:-4]
    for line in open(path, errors="replace"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        ff = o.get("forwarded_for") or ""
        if o.get("msg") != "access" or not ff.startswith("10.%s." % tag):
            continue
        first = ff.split(",")[0].strip().split(".")
        print(rep, first[2], first[3], o.get("prompt_tokens"), o.get("cached_tokens"), o.get("generated_tokens"),
              o.get("status"), o.get("client"), "|" + ff.replace(" ", "") + "|", o.get("path"))
EOF
}

# ---- affinity: the chat workload through the proxy, a key per chat.  48 chats of 6 turns;
# under the sanitizers 24 (the same requests, half as many: the three runs on the sanitized
# replicas were most of this test's time there; make test runs the 48, as does make test-long
# under the sanitizers)
chats=48; [[ "$bin" == *asan* ]] && [ -z "${TEST_LONG:-}" ] && chats=24
nreq=$((chats * 6))
aff=$(workload "$proxy" "$model" --key chat --tag 1 --chats "$chats")
echo "affinity:     $aff"
check "affinity run: $nreq requests, no error" [ "$(jfield "$aff" requests)" = "$nreq" -a "$(jfield "$aff" errors)" = 0 ]
routes 1 >"$tmp/routes1"
check "access logs: one line per request ($nreq)" [ "$(wc -l <"$tmp/routes1")" = "$nreq" ]
keys_split=$(awk '{ r[$2] = r[$2] " " $1 } END { n = 0; for (k in r) { split(r[k], a, " "); for (i in a) if (a[i] != a[1]) { n++; break } } print n }' "$tmp/routes1")
check "every prompt_cache_key on one replica ($chats keys, $keys_split split)" \
  [ "$keys_split" = 0 -a "$(awk '{ print $2 }' "$tmp/routes1" | sort -u | wc -l)" = "$chats" ]
check "all three replicas got keys" [ "$(awk '{ print $1 }' "$tmp/routes1" | sort -u | wc -l)" = 3 ]
check "access log adds up to the client's usage (prompt, cached, generated)" [ \
  "$(awk '{ p += $4; c += $5; g += $6 } END { print p, c, g }' "$tmp/routes1")" = \
  "$(jfield "$aff" prompt_tokens) $(jfield "$aff" cached_tokens) $(jfield "$aff" completion_tokens)" ]
check "access log: status, client and the X-Forwarded-For chain" \
  awk '$7 != 200 || $8 != "127.0.0.1" || $9 !~ /^\|10\.1\.[0-9]+\.[0-9]+,127\.0\.0\.1\|$/ || $10 != "/v1/chat/completions" { bad = 1 } END { exit bad }' "$tmp/routes1"
grep -h '"path":"/v1/chat/completions"' "$run"/r1.log | head -n 1 | sed 's/^/  access line: /'

# ---- the same workload on one server, then through a round-robin proxy
reset_caches
single=$(workload "$direct" "$model" --key chat --tag 2 --chats "$chats")
echo "single:       $single"
reset_caches
rrport=$(free_port); rrsport=$(free_port)
while [ "$rrsport" = "$rrport" ]; do rrsport=$(free_port); done
bash deploy/cluster.sh render --balance roundrobin --port "$rrport" --stats-port "$rrsport" \
  $(for i in 1 2 3; do echo --server "127.0.0.1:$(rport "$i")"; done) >"$tmp/rr.cfg"
haproxy -db -f "$tmp/rr.cfg" >"$tmp/rr.log" 2>&1 &
rrpid=$!; pids+=("$rrpid")
for _ in $(seq 1 50); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$rrsport/stats" && break; sleep 0.1; done
rr=$(workload "http://127.0.0.1:$rrport" "$model" --key chat --tag 3 --chats "$chats")
echo "round robin:  $rr"
kill "$rrpid" 2>/dev/null
h_aff=$(jfield "$aff" hit_rate); h_single=$(jfield "$single" hit_rate); h_rr=$(jfield "$rr" hit_rate)
echo "hit rate: single $h_single, affinity $h_aff, round robin $h_rr"
check "single and round-robin runs: no error" [ "$(jfield "$single" errors)" = 0 -a "$(jfield "$rr" errors)" = 0 ]
check "affinity hit rate $h_aff >= 0.9 x single $h_single" \
  python3 -c "import sys; sys.exit(0 if $h_aff >= 0.9 * $h_single else 1)"
check "affinity hit rate $h_aff clearly above round robin $h_rr (rr <= 0.85 x affinity)" \
  python3 -c "import sys; sys.exit(0 if $h_rr <= 0.85 * $h_aff else 1)"
check "round robin spread each chat over replicas" \
  [ "$(routes 3 | awk '{ r[$2 " " $1] = 1 } END { n = 0; for (k in r) n++; print n }')" -gt $((chats * 2)) ]

# ---- no key: the first message, or the start of a completions prompt, is the key
reset_caches
nokey=$(workload "$proxy" "$model" --key none --tag 4 --chats 16 --turns 2)
check "no key: the workload runs" [ "$(jfield "$nokey" errors)" = 0 ]
check "no key: each system prompt on one replica" \
  [ "$(routes 4 | awk '{ s = $2 % 8; if (!(s in r)) r[s] = $1; else if (r[s] != $1) bad++ } END { print bad + 0 }')" = 0 ]
head256=$(python3 -c 'print(" ".join("shared completions prefix %d" % i for i in range(20)))')
for t in 1 2 3 4; do
  curl -s -m 30 -o /dev/null -H 'Content-Type: application/json' -H "X-Forwarded-For: 10.5.0.$t" "$proxy/v1/completions" \
    -d "{\"model\":\"$model\",\"prompt\":\"$head256 and a tail of its own number $t\",\"max_tokens\":2}"
done
check "no key: completions with one 256-byte start on one replica" \
  [ "$(routes 5 | awk '{ print $1 }' | sort -u | wc -l)" = 1 -a "$(routes 5 | wc -l)" = 4 ]

# ---- streaming through the proxy is the bytes of a direct stream
sse_body="{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Count to ten\"}],\"max_tokens\":48,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"prompt_cache_key\":\"stream-check\"}"
norm() { sed -E 's/"id":"chatcmpl-[0-9a-f]+"/"id":"X"/g; s/"created":[0-9]+/"created":0/g' "$1"; }
curl -sN -m 30 -H 'Content-Type: application/json' "$direct/v1/chat/completions" -d "$sse_body" >"$tmp/direct.sse"
curl -sN -m 30 -D "$tmp/proxy.hdr" -H 'Content-Type: application/json' "$proxy/v1/chat/completions" -d "$sse_body" >"$tmp/proxy.sse"
check "stream: direct ends with [DONE] and has frames" \
  [ "$(grep -c '^data: ' "$tmp/direct.sse")" -gt 10 -a "$(tail -c 14 "$tmp/direct.sse" | tr -d '\n')" = "data: [DONE]" ]
check "stream through the proxy = direct bytes (id, created aside)" cmp -s <(norm "$tmp/direct.sse") <(norm "$tmp/proxy.sse")
check "stream through the proxy: text/event-stream" grep -qi '^content-type: text/event-stream' "$tmp/proxy.hdr"
# unbuffered: the first frame arrives long before the last one
node -e '
  const [url, body] = process.argv.slice(1);
  const b = JSON.parse(body); b.max_tokens = 1000; b.ignore_eos = true; b.stream_options = undefined;
  const t0 = performance.now(); let first = 0, reads = 0;
  const res = await fetch(url + "/v1/chat/completions", { method: "POST", body: JSON.stringify(b),
                          headers: { "Content-Type": "application/json" } });
  for await (const c of res.body) { reads++; if (!first) first = performance.now() - t0; }
  const total = performance.now() - t0;
  console.log(`  stream via proxy: first bytes at ${first.toFixed(1)} ms of ${total.toFixed(1)} ms, ${reads} reads`);
  process.exit(reads >= 4 && first < total / 2 ? 0 : 1);' "$proxy" "$sse_body" >"$tmp/unbuf.log" 2>&1
rc=$?; cat "$tmp/unbuf.log"
check "stream through the proxy is not buffered" [ "$rc" = 0 ]

# ---- prompt_cache_key: validated; not the cache namespace; /metrics labels
long_prompt=$(python3 -c 'print(" ".join("namespace check %d" % i for i in range(60)))')
usage_cached() { node -e 'console.log(JSON.parse(require("fs").readFileSync(0,"utf8")).usage.prompt_tokens_details.cached_tokens)'; }
c1=$(curl -s -m 30 -H 'Content-Type: application/json' "$direct/v1/completions" \
  -d "{\"model\":\"$model\",\"prompt\":\"$long_prompt\",\"max_tokens\":1,\"prompt_cache_key\":\"alpha\"}" | usage_cached)
c2=$(curl -s -m 30 -H 'Content-Type: application/json' "$direct/v1/completions" \
  -d "{\"model\":\"$model\",\"prompt\":\"$long_prompt\",\"max_tokens\":1,\"prompt_cache_key\":\"beta\"}" | usage_cached)
check "another prompt_cache_key still hits the cache (cached $c1 then $c2)" [ "$c1" = 0 -a "${c2:-0}" -gt 0 ]
code=$(curl -s -m 30 -o "$tmp/bad.json" -w '%{http_code}' -H 'Content-Type: application/json' "$proxy/v1/chat/completions" \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt_cache_key\":[1]}")
check "a non-string prompt_cache_key: 400 naming it, through the proxy" \
  [ "$code" = 400 -a "$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).error.param)' "$tmp/bad.json")" = prompt_cache_key ]
check "/metrics of r2 carries instance_name=\"r2\"" \
  bash -c "curl -s -m 10 http://127.0.0.1:$(rport 2)/metrics | grep -q '^hearth_model_ready{instance_name=\"r2\"} 1$'"

# ---- a replica dies mid-run
# the victim: the replica that served chat-0; its keys and another replica's, from the access logs
victim=$(awk '$2 == 0 { print $1; exit }' "$tmp/routes1")
vi=${victim#r}
mine=$(awk -v v="$victim" '$1 == v { print $2 }' "$tmp/routes1" | sort -un | head -n 4 | tr '\n' ' ')
theirs=$(awk -v v="$victim" '$1 != v { print $2 }' "$tmp/routes1" | sort -un | head -n 4 | tr '\n' ' ')
long="{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"go on\"}],\"max_tokens\":3000,\"ignore_eos\":true"
for c in $mine; do
  curl -sN -m 60 -o "$tmp/inflight$c.sse" -H 'Content-Type: application/json' -H "X-Forwarded-For: 10.6.$c.0" \
    "$proxy/v1/chat/completions" -d "$long,\"stream\":true,\"prompt_cache_key\":\"chat-$c\"}" &
  pids+=($!); echo $! >>"$tmp/inflight.pids"
done
first=${mine%% *}
curl -s -m 60 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -H "X-Forwarded-For: 10.6.$first.1" \
  "$proxy/v1/chat/completions" -d "$long,\"prompt_cache_key\":\"chat-$first\"}" >"$tmp/inflight.code" &
pids+=($!); echo $! >>"$tmp/inflight.pids"
# in flight once every stream has sent a chunk (a "data: {" line; within 10 s)
for _ in $(seq 1 200); do
  started=0; for c in $mine; do grep -q '^data: {' "$tmp/inflight$c.sse" 2>/dev/null && started=$((started + 1)); done
  [ "$started" = "$(echo $mine | wc -w)" ] && break; sleep 0.05
done
kill -9 "$(cat "$run/r$vi.pid")"
t_kill=$SECONDS
for p in $(cat "$tmp/inflight.pids"); do wait "$p" 2>/dev/null; done
hang=$((SECONDS - t_kill))
broken=0; for c in $mine; do grep -q '^data: \[DONE\]' "$tmp/inflight$c.sse" || broken=$((broken + 1)); done
check "killed $victim: its $(echo $mine | wc -w) in-flight streams ($started had sent a chunk) end without [DONE], within ${hang}s" \
  [ "$started" = "$(echo $mine | wc -w)" -a "$broken" = "$(echo $mine | wc -w)" -a "$hang" -le 10 ]
check "killed $victim: its in-flight non-streamed request gets a 5xx ($(cat "$tmp/inflight.code"))" \
  grep -q '^5' "$tmp/inflight.code"
short() { # short KEY TAG: status of a short chat through the proxy
  curl -s -m 30 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -H "X-Forwarded-For: $2" \
    "$proxy/v1/chat/completions" -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"prompt_cache_key\":\"$1\"}"
}
codes=""; for c in $mine $theirs; do codes+="$(short "chat-$c" "10.7.$c.0") "; done
check "right after the kill, every key is served (${codes% })" [ "$(echo $codes | tr ' ' '\n' | sort -u)" = 200 ]
hx_state() { curl -s -m 2 "http://127.0.0.1:$sport/stats;csv" | awk -F, -v s="$1" '$1 == "replicas" && $2 == s { print $18 }'; }
for _ in $(seq 1 50); do hx_state "$victim" | grep -q DOWN && break; sleep 0.1; done
check "HAProxy marks $victim down ($(hx_state "$victim"))" bash -c "[[ '$(hx_state "$victim")' == DOWN* ]]"
bash deploy/cluster.sh replica "$vi" --dir "$run" >/dev/null 2>&1
for _ in $(seq 1 150); do [ "$(hx_state "$victim")" = UP ] && break; sleep 0.1; done
check "restarted $victim: HAProxy sees it up again" [ "$(hx_state "$victim")" = UP ]
for c in $mine; do short "chat-$c" "10.8.$c.0" >/dev/null; done
back=$(routes 8 | awk -v v="$victim" '$1 == v' | wc -l)
check "restarted $victim gets its keys back ($back of $(echo $mine | wc -w))" [ "$back" = "$(echo $mine | wc -w)" ]

# ---- stop: graceful (a stream in flight through the proxy finishes), then every process ends
# (under the sanitizers a replica streams some 26 tokens/s when other tests share the
# machine: a shorter stream and a longer grace, still seconds of stream in flight)
drain_tokens=1000; grace=20; [[ "$bin" == *asan* ]] && { drain_tokens=300; grace=40; }
hpid=$(cat "$run/haproxy.pid"); rpids=$(cat "$run"/r*.pid)
curl -sN -m 90 -o "$tmp/drain.sse" -H 'Content-Type: application/json' "$proxy/v1/chat/completions" \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"drain\"}],\"max_tokens\":$drain_tokens,\"ignore_eos\":true,\"stream\":true}" &
drain_pid=$!; pids+=("$drain_pid")
for _ in $(seq 1 200); do grep -q '^data: {' "$tmp/drain.sse" 2>/dev/null && break; sleep 0.05; done
drain_started=no; grep -q '^data: {' "$tmp/drain.sse" 2>/dev/null && ! grep -q '^data: \[DONE\]' "$tmp/drain.sse" && drain_started=yes
t_stop=$SECONDS
bash deploy/cluster.sh stop --dir "$run" --grace $grace >"$tmp/stop.log" 2>&1 &
stopper=$!; pids+=("$stopper")
# while it drains, the proxy takes no new connection (curl: 7, connection refused)
refused=no
for _ in $(seq 1 100); do
  curl -s -m 2 -o /dev/null "$proxy/health"
  [ $? = 7 ] && { kill -0 "$drain_pid" 2>/dev/null && refused=yes; break; }
  sleep 0.05
done
wait "$stopper"; stop_rc=$?
wait "$drain_pid"; drain_rc=$?
echo "  stop took $((SECONDS - t_stop)) s (rc $stop_rc); the in-flight stream: $(grep -c '^data: {' "$tmp/drain.sse") chunks, curl rc $drain_rc"
check "cluster.sh stop: a stream in flight through the proxy (started: $drain_started) ends with [DONE]" \
  [ "$stop_rc" = 0 -a "$drain_started" = yes -a "$drain_rc" = 0 -a "$(tail -c 14 "$tmp/drain.sse" | tr -d '\n')" = "data: [DONE]" ]
check "cluster.sh stop: new connections are refused while that stream drains" [ "$refused" = yes ]
# (a zombie is dead: whoever adopted it may reap it later)
alive=0; for p in $hpid $rpids; do [ -n "$(ps -o stat= -p "$p" | grep -v Z)" ] && alive=$((alive + 1)); done
check "cluster.sh stop ends HAProxy and the replicas" [ "$alive" = 0 -a ! -e "$run/haproxy.pid" ]
if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$run"/r*.log; then
  fail "sanitizer report from a replica"; grep -h -E -A 30 'AddressSanitizer|LeakSanitizer|runtime error:' "$run"/r*.log | head -60
else
  ok "no sanitizer report from the replicas"
fi
finish
