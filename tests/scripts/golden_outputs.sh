#!/usr/bin/env bash
# Prints, one line each, the outputs that must never change bit for bit across
# refactors of the engine, the model code or the backends: for every fixture model,
# kernel variant this CPU runs, KV dtype and thread count, the `hearth bench prefix`
# digests (generated ids and every step's logits, disabled / cold / warm) and the
# sha256 of `hearth generate` output with a fixed seed (n = 3 samples, sampling on).
# Usage: golden_outputs.sh HEARTH_BIN DATA_DIR VARIANT...
# GOLDEN_COVER=1: of each variant's 16 (model, KV dtype, threads) runs, the 4 where each
# model runs once and each KV dtype and thread count twice (which 4 rotates with the
# variant), for the sanitizers' pass (see test_golden.sh).
set -u
bin=$1; data=$2; shift 2
kvs=(bf16 f32); thread_counts=(1 3)
vi=0
for variant in "$@"; do
  vi=$((vi + 1)); mi=-1
  kernel=(--kernel "$variant")
  [ "$variant" = avx512bf16 ] && kernel=(--compute bf16)
  for model in qwen3-tiny qwen3-tiny-bf16 qwen3moe-tiny qwen3moe-tiny-bf16; do
    mi=$((mi + 1))
    for kv in "${kvs[@]}"; do
      for threads in "${thread_counts[@]}"; do
        # the cover: model mi takes KV dtype (mi + vi) % 2 and thread count (mi / 2 + vi) % 2
        if [ "${GOLDEN_COVER:-0}" = 1 ]; then
          [ "$kv" = "${kvs[(mi + vi) % 2]}" ] && [ "$threads" = "${thread_counts[(mi / 2 + vi) % 2]}" ] || continue
        fi
        dir=$data/fixtures/$model
        d=$("$bin" bench prefix --model "$dir" "${kernel[@]}" --kv-dtype $kv --threads $threads \
              --shared-prefix-tokens 40 --suffix-tokens 9 --max-tokens 12 --repeats 1 2>/dev/null |
            sed -n 's/.*"\(ids_digest\|logits_digest\)": "\([0-9a-f]*\)".*/\2/p' | tr '\n' ' ')
        g=$("$bin" generate --model "$dir" "${kernel[@]}" --kv-dtype $kv --threads $threads \
              --prompt-ids 3,17,250,99,4,4,31,7,150,2,88,19,5,6,200,11,12 -n 3 --max-tokens 20 \
              --temperature 0.9 --top-p 0.95 --top-k 40 --seed 1234 --repetition-penalty 1.1 \
              --block-size 4 --max-batched-tokens 7 2>/dev/null | { o=$(cat); printf '%s:%s' "${#o}" "$(printf '%s' "$o" | sha256sum | cut -c1-32)"; })
        echo "$variant $model kv=$kv threads=$threads prefix: ${d}generate: $g"
      done
    done
  done
  t=$("$bin" generate --model models/fortune-demo "${kernel[@]}" --threads 2 --prompt "Fortune:" \
        -n 2 --max-tokens 24 --temperature 0.8 --seed 99 2>/dev/null |
      { o=$(cat); printf '%s:%s' "${#o}" "$(printf '%s' "$o" | sha256sum | cut -c1-32)"; })
  echo "$variant fortune-demo text generate: $t"
done
