#!/usr/bin/env bash
# A/B of two hearth binaries on the bench/model.sh checkpoint, interleaved so that
# both meet the same moments of the host (whose bandwidth wanders): rounds of
# `bench forward` (prefill 512, decode at batch 1, 8, 32, context 512) and of
# `bench throughput` (1, 8, 32 concurrent requests, prompt 256, output 128), the two
# binaries taking turns and swapping who goes first every round; bf16 compute where
# the CPU has it, else f32 (AB_KERNEL=avx512 or another variant name forces one).  Prints JSON: per binary the median of each figure, and
# new/old.  Not part of `make bench` (it needs a second binary).
# Usage: bench/ab.sh OLD_BIN NEW_BIN [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1; new=$2; rounds=${3:-3}
model=$(bash bench/model.sh)
kernel=()
grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null && kernel=(--kernel avx512bf16)
[ -n "${AB_KERNEL:-}" ] && kernel=(--kernel "$AB_KERNEL")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  order=(old new); [ $((r % 2)) -eq 0 ] && order=(new old)
  for who in "${order[@]}"; do
    bin=$old; [ "$who" = new ] && bin=$new
    "$bin" bench forward --model "$model" --threads 2 --prompt 512 --context 512 --batches 1,8,32 \
      --no-ceilings "${kernel[@]}" >"$out/forward_${who}_$r.json"
  done
  for who in "${order[@]}"; do
    bin=$old; [ "$who" = new ] && bin=$new
    "$bin" bench throughput --model "$model" --threads 2 --prompt-tokens 256 --output-tokens 128 \
      --concurrency 1,8,32 --kv-cache-mib 1536 "${kernel[@]}" >"$out/throughput_${who}_$r.json" 2>/dev/null
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for who in ("old", "new"):
    f = {}
    for r in range(1, rounds + 1):
        fw = json.load(open(f"{d}/forward_{who}_{r}.json"))
        f.setdefault("prefill_tokens_per_s", []).append(fw["prefill"]["tokens_per_s"])
        for row in fw["decode"]:
            f.setdefault(f"decode_b{row['batch']}_step_ms", []).append(row["step_ms"])
        tp = json.load(open(f"{d}/throughput_{who}_{r}.json"))
        for lv in tp["levels"]:
            f.setdefault(f"throughput_c{lv['concurrency']}_tokens_per_s", []).append(lv["tokens_per_s"])
    res[who] = {k: {"median": statistics.median(v), "runs": v} for k, v in f.items()}
ratio = {k: round(res["new"][k]["median"] / res["old"][k]["median"], 4) for k in res["old"]}
print(json.dumps({"benchmark": "ab", "rounds": rounds, "old": res["old"], "new": res["new"],
                  "new_over_old": ratio}, indent=2))
PY
