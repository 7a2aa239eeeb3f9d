#!/usr/bin/env bash
# Whole-model GPU benchmarks on --load-format dummy shapes (no files): the card's
# ceilings first (cuda_bench --ceilings-only: HBM read bandwidth by our copy kernel,
# bf16 rate by cuBLAS at 8192^3), then for each shape: batch-1 decode (256 tokens after
# a 4-token prompt), a 2,048-token prefill (time to the first token), `bench prefix`
# (P = 1,024, S = 64: digests of disabled / cold / warm, TTFT) and `bench throughput`
# (512 + 128 at the concurrency levels of LEVELS, with its roofline at the ceilings
# measured first) and the chat workload of `bench prefix`
# with and without the cache (CHAT_CLIENTS clients); with HF=1, transformers on the same
# shape (tools/hf_side_by_side.py).  MBT=N runs the throughput levels with
# --max-batched-tokens N (default: the engine's, 2,048 on a GPU).  Logs and JSON under $OUT.
#   SHAPES="qwen3-0.6b qwen3-8b qwen3-30b-a3b" LEVELS=1,32,64 CHAT_CLIENTS=32 HF=1 bash bench/cuda_models.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
bin=${HEARTH_BIN:-build/hearth}
bench=${HEARTH_CUDA_BENCH:-build/cuda_bench}
export LD_LIBRARY_PATH="$PWD/.devlib:${LD_LIBRARY_PATH:-}"
if [ -z "${HEARTH_CUBLAS:-}" ]; then
  for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/cublas/lib; do
    if [ -e "$d/libcublas.so.13" ]; then export HEARTH_CUBLAS="$d/libcublas.so.13"; break; fi
  done
fi
timeout 120 "$bench" --ceilings-only >"$out/ceilings.json" 2>"$out/ceilings.err"
echo "ceilings: $(tr -d '\n' <"$out/ceilings.json" | sed 's/  */ /g')"
# the throughput runs' roofline uses these (bench throughput --ceiling-gbs / --ceiling-tflops)
roof=($(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['ceilings']; g,t=c.get('read_gbs'),c.get('cublas_bf16_tflops_8192')
print('--ceiling-gbs %s --ceiling-tflops %s' % (g, t) if g and t else '')" "$out/ceilings.json" 2>/dev/null))
P=$(python3 -c "print(','.join(str((i*7919)%150000+10) for i in range(2048)))")
for s in ${SHAPES:-qwen3-0.6b qwen3-8b qwen3-30b-a3b}; do
  d=$(mktemp -d)
  "$bin" mkmodel --shape "$s" --config-only --out "$d" >/dev/null || continue
  m=(--device cuda --model "$d" --load-format dummy)
  # batch-1 decode: greedy with graphs (the default), greedy op by op, sampled (T = 1)
  for v in ${DECODE:-greedy eager sampled}; do
    f=(--temperature 0); [ $v = eager ] && f+=(--enforce-eager); [ $v = sampled ] && f=(--temperature 1)
    timeout 180 "$bin" generate "${m[@]}" "${f[@]}" --prompt-ids 1,2,3,4 --max-tokens 256 --ignore-eos \
      >/dev/null 2>"$out/$s.decode_$v.log"
    echo "$s decode b1 $v: $(grep -E 'generated' "$out/$s.decode_$v.log" | tail -1)"
  done
  grep -iE "KV pool|error" "$out/$s.decode_greedy.log" | head -2
  if [ -n "${PROFILE:-}" ]; then # every op waited for and timed (HEARTH_CUDA_PROFILE=1)
    HEARTH_CUDA_PROFILE=1 timeout 120 "$bin" generate "${m[@]}" --temperature 0 --prompt-ids 1,2,3,4 --max-tokens 64 \
      --ignore-eos >/dev/null 2>"$out/$s.profile.log"
    grep -E "cuda profile|generated" "$out/$s.profile.log" | sed 's/^[0-9:.]* hearth info: //'
  fi
  timeout 180 "$bin" generate "${m[@]}" --prompt-ids "$P" --max-tokens 2 >/dev/null 2>"$out/$s.prefill.log"
  echo "$s prefill 2048: $(grep -E 'generated|rror' "$out/$s.prefill.log" | tail -1)"
  timeout 240 "$bin" bench prefix "${m[@]}" --shared-prefix-tokens 1024 --suffix-tokens 64 --max-tokens 16 \
    --repeats 1 --output-json "$out/$s.prefix.json" >/dev/null 2>"$out/$s.prefix.log"
  echo "$s prefix (rc $?):"; grep -E 'digests_equal|"(disabled|cold|warm)"' "$out/$s.prefix.json" | cut -c1-150
  if [ -n "${CHAT_CLIENTS:-}" ]; then
    timeout 300 "$bin" bench prefix "${m[@]}" --workload chat --clients "$CHAT_CLIENTS" \
      --output-json "$out/$s.chat.json" >/dev/null 2>"$out/$s.chat.log"
    echo "$s chat workload (rc $?):"; grep -E 'cache_(off|on)' "$out/$s.chat.json" | cut -c1-200
  fi
  if [ -n "${LEVELS:-}" ]; then
    mbt=(); [ -n "${MBT:-}" ] && mbt=(--max-batched-tokens "$MBT")
    timeout 400 "$bin" bench throughput "${m[@]}" --prompt-tokens 512 --output-tokens 128 --concurrency "$LEVELS" \
      "${mbt[@]}" "${roof[@]}" >"$out/$s.throughput.json" 2>"$out/$s.throughput.log"
    grep -E "^concurrency|rror|roofline" "$out/$s.throughput.log"
  fi
  if [ -n "${HF:-}" ] && python3 -c "import torch, transformers" 2>/dev/null; then
    timeout "${HF_LIMIT:-300}" python3 tools/hf_side_by_side.py --model "$d" >"$out/$s.hf.json" 2>"$out/$s.hf.log"
    echo "$s transformers (rc $?): $(cat "$out/$s.hf.json")"
  fi
  rm -rf "$d"
done
