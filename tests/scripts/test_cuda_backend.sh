#!/usr/bin/env bash
# The CUDA backend end to end, on a GPU (skipped without one): a qwen3-0.6b-shaped
# random checkpoint (head_dim 128, bf16), warm = cold = disabled bitwise through
# `hearth bench prefix` (P = 1,024, S = 64) under both kernel variants, run-to-run
# bytes equal, parity with transformers' float64 logits where PyTorch is installed,
# `hearth serve` over the backend (n = 2, a second request served from the prefix cache
# with the first's bytes, a stream with usage and [DONE]), the host-RAM tier
# (--kv-cache-host-mib: pinned memory, copies on their own stream; `hearth bench prefix`
# warm from host RAM = cold, and a server with a pool of 36 blocks whose evicted blocks
# come back from host RAM, and from disk below it, with the bytes of a cache-off server),
# and clear errors for what the backend does not serve.  HEARTH_TEST_DEVICE=cpu runs the
# serve parts on the CPU.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
tmp=$(mktemp -d); trap "rm -rf $tmp" EXIT
passed=0; failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
dev=${HEARTH_TEST_DEVICE:-cuda}
if [ "$dev" = cuda ] && ! "$bin" generate --device cuda --model "$data/fixtures/qwen3-tiny-bf16" --prompt-ids 1 --max-tokens 1 \
     >/dev/null 2>"$tmp/probe"; then
  if grep -qE "no CUDA device|no CUDA backend" "$tmp/probe"; then
    echo "SKIP cuda backend: $(head -c 200 "$tmp/probe")"
    echo "RESULT passed=0 failed=0 skipped=1"
    exit 0
  fi
fi
m=$tmp/m06
cache=${HEARTH_TEST_CACHE:-tests/.cache}
tok=(); [ -s "$cache/qwen3/tokenizer.json" ] && tok=(--tokenizer "$cache/qwen3")
lp=; [ ${#tok[@]} -gt 0 ] && lp=',"logprobs":2' # logprobs come back as tokens: only with a tokenizer
"$bin" mkmodel --shape qwen3-0.6b --dtype bf16 --seed 7 --out "$m" "${tok[@]}" >/dev/null 2>&1
check "mkmodel qwen3-0.6b" "[ -s $m/config.json ]"
for k in $([ "$dev" = cuda ] && echo sm90a sm80); do
  "$bin" bench prefix --device cuda --kernel $k --model "$m" --shared-prefix-tokens 1024 --suffix-tokens 64 \
    --max-tokens 16 --repeats 1 --output-json "$tmp/p_$k.json" >/dev/null 2>"$tmp/p_$k.err"
  check "$k: disabled, cold and warm digests equal" "grep -q '\"digests_equal\": true' $tmp/p_$k.json"
  check "$k: warm computes only the suffix" \
    "grep -q '\"warm\": .*\"query_len\": 64, \"context_len\": 1024' $tmp/p_$k.json"
done
# CUDA graphs (decode steps replay captured graphs by default) against op by op
# (--enforce-eager): one request (bucket 1), then 12 clients arriving a step apart
# (buckets up to 16, padded rows), cache off and on; bytes of ids, logits, logprobs.
for k in $([ "$dev" = cuda ] && echo sm90a sm80); do
  "$bin" bench prefix --device cuda --kernel $k --model "$m" --shared-prefix-tokens 1024 --suffix-tokens 64 \
    --max-tokens 16 --repeats 1 --enforce-eager --output-json "$tmp/pe_$k.json" >/dev/null 2>"$tmp/pe_$k.err"
  check "$k: decode steps ran as graphs by default, op by op with --enforce-eager" \
    "grep -q 'decode steps: [1-9][0-9]* as graphs' $tmp/p_$k.err && grep -q 'decode steps: 0 as graphs' $tmp/pe_$k.err"
  check "$k: graph steps = eager steps (ids and logits digests)" \
    "[ -s $tmp/pe_$k.json ] && [ \"\$(grep -E '\"(ids|logits)_digest\"' $tmp/p_$k.json)\" = \"\$(grep -E '\"(ids|logits)_digest\"' $tmp/pe_$k.json)\" ]"
  for g in graph eager; do
    "$bin" bench prefix --device cuda --kernel $k --model "$m" --workload chat --clients 12 --arrival-steps 1 \
      --shared-prefix-tokens 256 --suffix-tokens 32 --max-tokens 24 $([ $g = eager ] && echo --enforce-eager) \
      --output-json "$tmp/w_${k}_$g.json" >/dev/null 2>"$tmp/w_${k}_$g.err"
  done
  check "$k: 12 clients: graphs = eager, cache on = off (bytes of ids and logprobs)" \
    "grep -q outputs_digest $tmp/w_${k}_graph.json && [ \"\$(grep outputs_digest $tmp/w_${k}_graph.json)\" = \"\$(grep outputs_digest $tmp/w_${k}_eager.json)\" ]"
  grep -h "decode steps" "$tmp/w_${k}_graph.err" | tail -2
done
# The host-RAM tier: the prefix pushed out of the pool into pinned host memory and copied
# back on the copy stream; the digests of every mode (host included) equal.
for k in $([ "$dev" = cuda ] && echo sm90a); do
  "$bin" bench prefix --device cuda --kernel $k --model "$m" --shared-prefix-tokens 1024 --suffix-tokens 64 \
    --max-tokens 16 --repeats 2 --kv-cache-host-mib 256 --output-json "$tmp/h_$k.json" >/dev/null 2>"$tmp/h_$k.err"
  check "$k host tier: disabled, cold, warm and warm-from-host-RAM digests equal" \
    "grep -q '\"digests_equal\": true' $tmp/h_$k.json"
  check "$k host tier: the prefix came from host RAM (only the suffix computed)" \
    "grep -q '\"host\": .*\"query_len\": 64, \"context_len\": 1024' $tmp/h_$k.json"
  grep -E '"(warm|host)": |host_ttft' "$tmp/h_$k.json"
done
P=3,17,250,99,4,4,31,7,150,2,88,19,5,6,200,11,12,400,1000,77
for r in $([ "$dev" = cuda ] && echo 1 2); do
  "$bin" generate --device cuda --model "$m" --prompt-ids $P -n 3 --max-tokens 24 --temperature 0.8 --seed 5 \
    >"$tmp/g$r" 2>/dev/null
done
[ "$dev" = cuda ] && check "sampling on the GPU: run to run the same bytes" "[ -s $tmp/g1 ] && cmp -s $tmp/g1 $tmp/g2"
# --max-model-len sizes attention's split workspace for that context instead of the
# model's 40,960 positions; a 700-token prompt (three splits of 256 at its end) gives
# the same bytes either way (the workspace's layout is not in any sum).
if [ "$dev" = cuda ]; then
  PL=$(seq -s, 3 702)
  for x in full 1100; do
    "$bin" generate --device cuda --model "$m" --prompt-ids $PL --max-tokens 24 --temperature 0 --logprobs 2 \
      $([ $x = 1100 ] && echo --max-model-len 1100) >"$tmp/ml_$x" 2>"$tmp/ml_$x.err"
  done
  grep -h "split workspace" "$tmp"/ml_*.err
  check "--max-model-len 1100: the split workspace sized for 1,100 positions (the default: the model's 40,960)" \
    "grep -q 'contexts up to 1100)' $tmp/ml_1100.err && grep -q 'contexts up to 40960)' $tmp/ml_full.err"
  check "--max-model-len 1100: a 700-token prompt's tokens and logprobs the same bytes" \
    "[ -s $tmp/ml_full ] && cmp -s $tmp/ml_full $tmp/ml_1100"
fi
# Sampling on the device (every request by default; --device-sampling-greedy-only sends
# those with a temperature to the host, --no-device-sampling all of them): greedy
# tokens equal the host's (plain, with penalties and n = 2, and n = 70: a fork over two
# of the backend's 64-row launches); a sampled request
# (temperature 0.8, top_p 0.9, a seed) gives the same bytes alone and among 7 others of
# every kind (grammar-free, prompt logprobs, penalties, n = 3) arriving with it.
if [ "$dev" = cuda ]; then
  for mode in dev host; do
    for a in "--temperature 0" "--temperature 0 --repetition-penalty 1.3 --frequency-penalty 0.5 -n 2" \
             "--temperature 0 --top-k 5 --presence-penalty 0.5 -n 70 --max-num-seqs 96"; do
      "$bin" generate --device cuda --model "$m" --prompt-ids $P --max-tokens 24 $a \
        $([ $mode = host ] && echo --no-device-sampling) >>"$tmp/gr_$mode" 2>>"$tmp/gr_$mode.err"
    done
  done
  check "device sampling: on for every request by default, off with --no-device-sampling" \
    "grep -q 'sampling on the cuda (all requests' $tmp/gr_dev.err && ! grep -q 'sampling on the cuda' $tmp/gr_host.err"
  check "device sampling: greedy tokens equal the host's (plain; penalties, n = 2; n = 70: two launches)" \
    "[ -s $tmp/gr_dev ] && cmp -s $tmp/gr_dev $tmp/gr_host"
  port=$((20000 + RANDOM % 20000))
  "$bin" serve --device cuda --model "$m" --port $port --max-num-seqs 16 --kv-cache-mib 512 --prefix-cache off \
    >"$tmp/ds.log" 2>&1 &
  spid=$!
  for i in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/health)" = 200 ] && break; sleep 1
  done
  dreq() { # NAME BODY-EXTRA
    curl -s -m 120 http://127.0.0.1:$port/v1/completions -H 'content-type: application/json' \
      -d "{\"model\":\"m06\",\"prompt\":[3,17,250,99,4,4,31,7,150,2,88,19,5],\"max_tokens\":32,\"ignore_eos\":true$2}" \
      | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' >"$tmp/$1"
  }
  sampled=',"temperature":0.8,"top_p":0.9,"seed":11'
  dreq alone "$sampled$lp"
  others=(',"temperature":0' ',"temperature":1.0,"top_k":5,"seed":3,"n":3' ',"temperature":0.7,"seed":1,"presence_penalty":1.0'
          ',"temperature":0.9,"min_p":0.1,"seed":2,"logit_bias":{"5":5.0}' ',"temperature":0.5,"seed":9,"echo":true,"logprobs":1'
          ',"temperature":1.2,"seed":4,"frequency_penalty":0.8' ',"temperature":0.3,"top_p":0.5,"seed":6')
  for k in "${!others[@]}"; do dreq "o$k" "${others[$k]}" & done
  dreq together "$sampled$lp"
  wait $(jobs -p | grep -v "^$spid$") 2>/dev/null
  if [ ${#tok[@]} -gt 0 ]; then # without a tokenizer a response carries no tokens to compare
    check "device sampling: a sampled request alone = among 7 others (bytes of text and logprobs)" \
      "grep -q '\"top_logprobs\"' $tmp/alone && cmp -s $tmp/alone $tmp/together"
  else
    echo "skip: device sampling alone = among others (no tokenizer in $cache/qwen3)"
  fi
  check "device sampling: the others were answered" "grep -q '\"choices\"' $tmp/o1 && grep -q '\"choices\"' $tmp/o5"
  head -c 300 "$tmp/o4"; echo
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
fi
if [ "$dev" = cuda ] && python3 -c "import torch, transformers" 2>/dev/null; then
  python3 tools/hf_reference.py --model "$m" --out "$tmp/exp.safetensors" --lengths 1,7,33,70 >/dev/null 2>&1
  "$bin" eval --device cuda --model "$m" --expected "$tmp/exp.safetensors" >"$tmp/eval" 2>&1; rc=$?
  cat "$tmp/eval"
  check "parity with transformers' float64 logits (bf16 compute: 5e-2)" "[ $rc -eq 0 ]"
else
  echo "skip: parity with transformers (PyTorch is not installed here)"
fi
port=$((20000 + RANDOM % 20000))
"$bin" serve --device "$dev" --model "$m" --port $port --max-num-seqs 8 --kv-cache-mib 512 >"$tmp/serve.log" 2>&1 &
spid=$!
for i in $(seq 1 120); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/health)" = 200 ] && break; sleep 1
done
ids='[3,17,250,99,4,4,31,7,150,2,88,19,5,6,200,11,12,400,1000,77,3,17,250,99,4,4,31,7,150,2,88,19,5,6,200,11,12]'
for r in 1 2; do
  curl -s -m 120 http://127.0.0.1:$port/v1/completions -H 'content-type: application/json' \
    -d "{\"model\":\"m06\",\"prompt\":$ids,\"max_tokens\":8,\"n\":2,\"temperature\":0.7,\"seed\":4$lp}" \
    >"$tmp/c$r.json"
done
check "serve: n = 2 answered with usage" "grep -q '\"completion_tokens\": *16' $tmp/c1.json"
check "serve: the second request is served from the cache" "grep -q '\"cached_tokens\": *32' $tmp/c2.json"
check "serve: warm = cold (choices, and logprobs with a tokenizer; bytes)" \
  "grep -q '\"choices\"' $tmp/c1.json && [ \"\$(sed 's/\"id\":\"[^\"]*\"//; s/\"created\":[0-9]*//; s/\"prompt_tokens_details\":{[^}]*}//' $tmp/c1.json)\" = \
     \"\$(sed 's/\"id\":\"[^\"]*\"//; s/\"created\":[0-9]*//; s/\"prompt_tokens_details\":{[^}]*}//' $tmp/c2.json)\" ]"
curl -s -N -m 120 http://127.0.0.1:$port/v1/completions -H 'content-type: application/json' \
  -d "{\"model\":\"m06\",\"prompt\":$ids,\"max_tokens\":6,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
  >"$tmp/s.txt"
check "serve: a stream ends with usage and [DONE]" \
  "grep -q '\"usage\":{\"prompt_tokens\":37' $tmp/s.txt && grep -q '^data: \[DONE\]' $tmp/s.txt"
kill $spid 2>/dev/null; wait $spid 2>/dev/null

# ---- the host-RAM tier under a pool of 36 blocks (64 MiB of the 0.6B's KV, 1.75 MiB a
# block): 4 prompts of 200 tokens (13 blocks each) twice; the second time their blocks
# come back from host RAM (then also from disk under a host tier of 16 blocks); every
# output byte for byte a cache-off server's.
hp=()
for i in 0 1 2 3; do
  hp+=("$(awk -v s=$((i * 7919 + 3)) 'BEGIN { printf "["; for (k = 0; k < 200; k++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", (k ? "," : ""), 100 + s % 50000 } printf "]" }')")
done
host_serve() { # NAME ARGS...: a server on $port; every prompt twice, outputs in $tmp/NAME.r.i
  local name=$1; shift
  port=$((20000 + RANDOM % 20000))
  "$bin" serve --device "$dev" --model "$m" --port $port --max-num-seqs 4 "$@" >"$tmp/$name.log" 2>&1 &
  spid=$!
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$port/health)" = 200 ] && break; sleep 1
  done
  for r in 1 2; do
    for i in 0 1 2 3; do
      curl -s -m 120 http://127.0.0.1:$port/v1/completions -H 'content-type: application/json' \
        -d "{\"model\":\"m06\",\"prompt\":${hp[$i]},\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true$lp}" \
        >"$tmp/$name.$r.$i.json"
      sed 's/"id":"[^"]*"//; s/"created":[0-9]*//; s/"prompt_tokens_details":{[^}]*}//' "$tmp/$name.$r.$i.json" \
        >"$tmp/$name.$r.$i"
    done
  done
  curl -s http://127.0.0.1:$port/metrics >"$tmp/$name.metrics"
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
}
hmetric() { sed -n "s/^$2 \([0-9]*\)$/\1/p" "$tmp/$1.metrics"; }
same_host() { for r in 1 2; do for i in 0 1 2 3; do grep -q '"choices"' "$tmp/$1.$r.$i" && cmp -s "$tmp/$1.$r.$i" "$tmp/hoff.1.$i" || return 1; done; done; }
all_cached() { for i in 0 1 2 3; do grep -q '"cached_tokens": *192' "$tmp/$1.2.$i.json" || return 1; done; }
host_serve hoff --kv-cache-mib 64 --prefix-cache off
host_serve hon --kv-cache-mib 64 --kv-cache-host-mib 256
check "host tier: outputs equal a cache-off server (both rounds, bytes)" "same_host hon"
check "host tier: the second round has every whole block cached (192 of 200 tokens)" "all_cached hon"
check "host tier: blocks stored in and restored from pinned host RAM ($(hmetric hon hearth_host_cache_blocks_restored_total))" \
  "[ \"\$(hmetric hon hearth_host_cache_blocks_restored_total)\" -gt 0 ] && [ \"\$(hmetric hon hearth_host_cache_copy_errors_total)\" = 0 ]"
host_serve hdisk --kv-cache-mib 64 --kv-cache-host-mib 28 --kv-cache-dir "$tmp/kvh"
check "host over disk: outputs equal a cache-off server (bytes)" "same_host hdisk"
check "host over disk: the second round has every whole block cached" "all_cached hdisk"
check "host over disk: blocks went on to disk and came back ($(hmetric hdisk hearth_host_cache_evicted_to_disk_total) to disk, $(hmetric hdisk hearth_disk_cache_blocks_restored_total) from disk)" \
  "[ \"\$(hmetric hdisk hearth_host_cache_evicted_to_disk_total)\" -gt 0 ] && [ \"\$(hmetric hdisk hearth_disk_cache_blocks_restored_total)\" -gt 0 ]"
[ "$dev" = cuda ] || { echo "RESULT passed=$passed failed=$failed"; exit 0; }
"$bin" generate --device cuda --kv-dtype f32 --model "$m" --prompt-ids 1 --max-tokens 1 >/dev/null 2>"$tmp/e1"
check "f32 KV is refused with a reason" "grep -q 'bf16' $tmp/e1"
"$bin" generate --device cuda --model "$data/fixtures/qwen3moe-tiny-bf16" --prompt-ids 1 --max-tokens 1 \
  >/dev/null 2>"$tmp/e2"
check "head_dim 32 (the tiny MoE fixture) is refused with a reason" "grep -q 'head_dim' $tmp/e2"
# the MoE router keeps eight tokens' rows in shared memory: a hidden size past 6,144 is
# refused at start-up, with the reason (a config of random weights on the device)
"$bin" mkmodel --shape qwen3-moe-small --config-only --out "$tmp/wide" >/dev/null 2>&1 &&
  sed -i 's/"hidden_size": 1024/"hidden_size": 8192/' "$tmp/wide/config.json"
"$bin" generate --device cuda --model "$tmp/wide" --load-format dummy --prompt-ids 1 --max-tokens 1 >/dev/null \
  2>"$tmp/e3"
check "an MoE hidden size of 8,192 is refused with a reason" \
  "grep -q 'hidden_size.*8192' $tmp/wide/config.json && grep -q 'hidden size up to 6144' $tmp/e3"
# MoE on the GPU: a qwen3-moe-small checkpoint (32 experts, top-4, a dense layer among
# the sparse ones, head_dim 128): warm = cold = disabled under both variants, the seed's
# case (a warm suffix of 8 on a context of 64), run to run, parity with transformers.
mm=$tmp/moe
"$bin" mkmodel --shape qwen3-moe-small --dtype bf16 --seed 9 --out "$mm" "${tok[@]}" >/dev/null 2>&1
check "mkmodel qwen3-moe-small (layer 2 dense)" \
  "python3 -c \"import json, sys; sys.exit(json.load(open('$mm/config.json'))['mlp_only_layers'] != [2])\""
for k in sm90a sm80; do
  "$bin" bench prefix --device cuda --kernel $k --model "$mm" --shared-prefix-tokens 1024 --suffix-tokens 64 \
    --max-tokens 16 --repeats 1 --output-json "$tmp/mp_$k.json" >/dev/null 2>"$tmp/mp_$k.err"
  check "moe $k: disabled, cold and warm digests equal" "grep -q '\"digests_equal\": true' $tmp/mp_$k.json"
  check "moe $k: warm computes only the suffix" \
    "grep -q '\"warm\": .*\"query_len\": 64, \"context_len\": 1024' $tmp/mp_$k.json"
  "$bin" bench prefix --device cuda --kernel $k --model "$mm" --shared-prefix-tokens 64 --suffix-tokens 8 \
    --max-tokens 8 --repeats 1 --output-json "$tmp/ms_$k.json" >/dev/null 2>"$tmp/ms_$k.err"
  "$bin" bench prefix --device cuda --kernel $k --model "$mm" --shared-prefix-tokens 1024 --suffix-tokens 64 \
    --max-tokens 16 --repeats 1 --enforce-eager --output-json "$tmp/mpe_$k.json" >/dev/null 2>"$tmp/mpe_$k.err"
  check "moe $k: graph steps = eager steps (ids and logits digests)" \
    "grep -q 'decode steps: [1-9][0-9]* as graphs' $tmp/mp_$k.err && [ -s $tmp/mpe_$k.json ] && [ \"\$(grep -E '\"(ids|logits)_digest\"' $tmp/mp_$k.json)\" = \"\$(grep -E '\"(ids|logits)_digest\"' $tmp/mpe_$k.json)\" ]"
  check "moe $k: a warm suffix of 8 on 64 gives the cold run's bytes" \
    "grep -q '\"digests_equal\": true' $tmp/ms_$k.json && grep -q '\"warm\": .*\"query_len\": 8, \"context_len\": 64' $tmp/ms_$k.json"
done
for r in 1 2; do
  "$bin" generate --device cuda --model "$mm" --prompt-ids $P -n 3 --max-tokens 24 --temperature 0.8 --seed 5 \
    >"$tmp/mg$r" 2>/dev/null
done
check "moe: sampling run to run the same bytes" "[ -s $tmp/mg1 ] && cmp -s $tmp/mg1 $tmp/mg2"
if python3 -c "import torch, transformers" 2>/dev/null; then
  # prompts of 33 tokens and more: a random router has near-ties, and eval allows 10% of
  # a prompt's positions to route differently from its f32 control (none of 1 or 7)
  python3 tools/hf_reference.py --model "$mm" --out "$tmp/mexp.safetensors" --lengths 33,70,128 >"$tmp/mhf" 2>&1 ||
    tail -5 "$tmp/mhf"
  "$bin" eval --device cuda --model "$mm" --expected "$tmp/mexp.safetensors" >"$tmp/meval" 2>&1; rc=$?
  cat "$tmp/meval"
  check "moe: parity with transformers' float64 logits (bf16 compute: 5e-2)" "[ $rc -eq 0 ]"
fi
echo "RESULT passed=$passed failed=$failed"
