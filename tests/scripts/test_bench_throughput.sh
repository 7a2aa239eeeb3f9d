#!/usr/bin/env bash
# hearth bench throughput on the MoE fixture: the JSON's levels, and its roofline (the
# workload's and the measured decode-only steps') against the same bound computed here in
# Python from config.json alone (the weights' shapes, bf16 KV, uniform routing), with the
# ceilings given as a device's would be;
# without them the CPU's are measured; bad ceilings are refused (exit 2, a message).
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
model=$data/fixtures/qwen3moe-tiny-bf16
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }

"$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 12 --output-tokens 5 --concurrency 1,3 \
  --ceiling-gbs 2 --ceiling-tflops 0.5 >"$tmp/t.json" 2>"$tmp/err"
rc=$?
check "exits 0 with JSON" "[ $rc -eq 0 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' $tmp/t.json"
check "the roofline line for each level" "[ \$(grep -c 'roofline .* generated/s (measured' $tmp/err) -eq 2 ]"
# The bound, independently: bytes and flops of each step from the config's shapes.
cat >"$tmp/roof.py" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json")); t = json.load(open(sys.argv[2]))
H, L, E, K = c["hidden_size"], c["num_hidden_layers"], c["num_experts"], c["num_experts_per_tok"]
q, kv, I, V = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"], c["intermediate_size"], c["vocab_size"]
moe = [l not in c["mlp_only_layers"] and (l + 1) % c["decoder_sparse_step"] == 0 for l in range(L)]
attn = H * q + 2 * H * kv + q * H                     # q, k, v, o weights of a layer
fixed = 2 * (L * attn + sum(3 * H * I for m in moe if not m) + sum(E * H for m in moe if m) + V * H)
expert = 2 * sum(3 * H * c["moe_intermediate_size"] for m in moe if m)
tok_flops = 2 * (L * attn + sum(3 * H * I for m in moe if not m) + sum(E * H + 3 * K * H * c["moe_intermediate_size"] for m in moe if m))
lm, af, kvpos = 2 * V * H, 4 * q * L, 2 * L * 2 * kv  # bf16 KV: 2 bytes, K and V
gbs, tf = 2e9, 0.5e12
step = lambda b, f: max(b / gbs, f / tf)
touched = lambda rows: E * (1 - (1 - K / E) ** rows)
P, O = t["prompt_tokens"], t["output_tokens"]
ok = t["roofline"]["fixed_bytes"] == fixed and t["roofline"]["expert_bytes"] == expert and t["roofline"]["kv_bytes_per_token"] == kvpos
for lv in t["levels"]:
    n = lv["concurrency"]
    s = step(fixed + expert * touched(n * P), n * P * tok_flops + n * lm + af * n * P * (P + 1) / 2)
    dec = [step(fixed + expert * touched(n) + kvpos * n * (P + i), n * (tok_flops + lm) + af * n * (P + i)) for i in range(1, O)]
    s += sum(dec)
    want = n * O / s
    # the measured decode-only steps: one prefill step takes every prompt (n P tokens fit
    # one step), then O - 1 steps of n rows; their roofline at each one's contexts
    dec_ms = 1e3 * sum(dec) / len(dec)
    ok &= lv["decode_steps"] == O - 1 and abs(lv["decode_rows_per_step"] - n) < 1e-9
    ok &= abs(lv["decode_tokens_per_s"] - n / (lv["decode_step_ms"] * 1e-3)) <= 1e-3 * lv["decode_tokens_per_s"] + 0.01
    ok &= abs(lv["decode_roofline_step_ms"] - dec_ms) <= 1e-3 * dec_ms
    ok &= abs(lv["decode_of_roofline"] - lv["decode_roofline_step_ms"] / lv["decode_step_ms"]) <= 2e-3 * lv["decode_of_roofline"]
    mid = 1e3 * step(fixed + expert * touched(n) + kvpos * n * (P + O // 2), n * (tok_flops + lm) + af * n * (P + O // 2))
    ok &= abs(lv["roofline_generated_per_s"] - want) <= 1e-3 * want and abs(lv["roofline_step_ms"] - mid) <= 1e-3 * mid
    ok &= abs(lv["of_roofline"] - lv["generated_per_s"] / lv["roofline_generated_per_s"]) <= 1e-3
    print(n, lv["roofline_generated_per_s"], want, lv["roofline_step_ms"], mid)
sys.exit(0 if ok else 1)
PY
check "the roofline equals the bound computed from config.json (the decode-only steps' too)" "python3 $tmp/roof.py $model $tmp/t.json"
check "a decode-only line for each level" "[ \$(grep -c 'decode-only steps 4, [13].0 rows each' $tmp/err) -eq 2 ]"
check "the given ceilings are named, the compute bound at their rate" \
  "grep -q '\"ceilings\": \"given\"' $tmp/t.json && grep -q '\"compute_bound\": {\"compute\": \"given\", \"peak_gflops\": 500.0' $tmp/t.json"
"$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 8 --output-tokens 3 --concurrency 2 >"$tmp/c.json" 2>/dev/null
check "without ceilings: the CPU's, measured" "grep -q '\"ceilings\": \"cpu\"' $tmp/c.json && grep -q of_roofline $tmp/c.json"
for bad in "--ceiling-gbs 0 --ceiling-tflops 1" "--ceiling-gbs x --ceiling-tflops 1" "--ceiling-gbs 5" "--ceiling-tflops -1 --ceiling-gbs 5"; do
  "$bin" bench throughput --model "$model" --threads 2 $bad >"$tmp/b.out" 2>"$tmp/b.err"
  rc=$?
  check "refused: $bad" "[ $rc -eq 2 ] && [ ! -s $tmp/b.out ] && grep -q 'ceiling' $tmp/b.err"
done
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
