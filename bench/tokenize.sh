#!/usr/bin/env bash
# Tokenizer benchmark: load time of the 11 MB Qwen3 tokenizer.json (target <= 200 ms) and
# one-thread encode throughput on ~4 MB of mixed text (English, C code, multilingual), hearth
# against Hugging Face tokenizers (npm `tokenizers`) on the same documents in the same run
# (target: at least its speed). Both must produce the same ids (compared by count and hash).
# Prints one JSON object. Usage: bash bench/tokenize.sh [CORPUS_BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/testdata.sh
out=bench/out/tokenize
mkdir -p "$out"
tok=tests/.cache/qwen3/tokenizer.json
make -s build/libhearth.a >&2
cc -std=gnu11 -O2 -Wall -Wextra -Iinclude -Isrc -pthread bench/tokenize_bench.c build/libhearth.a \
   -ljansson -lonig -lmicrohttpd -lxxhash -lm -pthread -o "$out/tokenize_bench"
node bench/tokenize_corpus.js "${1:-4194304}" > "$out/corpus.bin"
hearth=$("$out/tokenize_bench" "$tok" "$out/corpus.bin" 5 3)
# one worker thread for the reference too
oracle=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false UV_THREADPOOL_SIZE=1 \
         node bench/tokenize_oracle.js "$tok" "$out/corpus.bin" 3 3)
node -e '
const h = JSON.parse(process.argv[1]), o = JSON.parse(process.argv[2]);
const r = {
  benchmark: "tokenize", tokenizer: process.argv[3], cpu_threads: 1,
  hearth: h, reference: o,
  same_ids: h.ids === o.ids && h.ids_fnv1a === o.ids_fnv1a,
  speedup: +(h.encode_mb_s / o.encode_mb_s).toFixed(2),
  load_target_ms: 200, load_ok: h.load_ms_median <= 200,
  throughput_ok: h.encode_mb_s >= o.encode_mb_s,
};
console.log(JSON.stringify(r, null, 1));
' "$hearth" "$oracle" "$tok" | tee "$out/result.json"
