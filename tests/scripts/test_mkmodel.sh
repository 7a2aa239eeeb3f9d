#!/usr/bin/env bash
# `hearth mkmodel` and `hearth info` end to end: a tiny checkpoint (one file and
# sharded) loads and is described correctly; with the Qwen3 tokenizer (fetched by
# scripts/testdata.sh) the vocabulary covers it and bos/eos are Qwen3's published ids;
# broken directories and bad options fail with a message.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
cache=${HEARTH_TEST_CACHE:-tests/.cache}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hearth_mkmodel_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "$2"; }
expect() { # name, output, extended regex that must match a line
  if grep -Eq -- "$3" <<<"$2"; then ok "$1"; else bad "$1: no line matching '$3'" "$2"; fi
}

if out=$("$bin" mkmodel --shape tiny --dtype f32 --seed 3 --out "$tmp/tiny" 2>&1); then
  ok "mkmodel tiny"
  info=$("$bin" info --model "$tmp/tiny" 2>&1)
  expect "info architecture" "$info" '^architecture +Qwen3ForCausalLM'
  # 512*64 + 2*(128*64 + 2*64*64 + 64*128 + 3*128*64 + 192) + 64, in f32
  expect "info parameters" "$info" '^parameters +131,520 '
  expect "info weights" "$info" '^weights +526,080 bytes .* in 1 file$'
  expect "info dtypes" "$info" 'F32: 24 tensors \(config: float32\)'
  # 2 layers * (K+V) * 2 kv heads * 32 dims * 2 bytes
  expect "info kv" "$info" '^kv per token +bf16 512 bytes .* f32 1,024 bytes'
  expect "info tokens" "$info" '^tokens +bos 1, eos 2$'
else
  bad "mkmodel tiny" "$out"
fi

if out=$("$bin" mkmodel --shape tiny --seed 3 --out "$tmp/shards" --max-shard-bytes 60000 2>&1); then
  expect "mkmodel sharded" "$out" 'in [0-9]+ files'
  [ -f "$tmp/shards/model.safetensors.index.json" ] && [ -f "$tmp/shards/model-00001-of-00005.safetensors" ] \
    && ok "shard names" || bad "shard names" "$(ls "$tmp/shards")"
  info=$("$bin" info --model "$tmp/shards" 2>&1)
  expect "info sharded" "$info" '^weights +263,040 bytes .* in 5 files$'
else
  bad "mkmodel sharded" "$out"
fi

# The fixture's info, against its config (MoE, sharded, untied)
info=$("$bin" info --model "$data/fixtures/qwen3moe-tiny-bf16" 2>&1)
expect "info moe" "$info" '^experts +8, top-2, moe_intermediate 32, norm_topk_prob false, 1 of 2 layers sparse'
expect "info moe dense layer" "$info" '^dense mlp +intermediate 128 \(1 of 2 layers\)'
expect "info moe untied" "$info" '^embeddings +untied'

if [ -s "$cache/qwen3/tokenizer.json" ]; then
  if out=$("$bin" mkmodel --shape tiny --seed 1 --out "$tmp/tok" --tokenizer "$cache/qwen3" 2>&1); then
    # Qwen3: 151643 BPE tokens + 26 added tokens (ids up to 151668)
    expect "tokenizer vocab" "$out" 'vocab 151669'
    info=$("$bin" info --model "$tmp/tok" 2>&1)
    expect "tokenizer ids" "$info" '^tokens +bos 151643, eos 151645 151643$'
    cmp -s "$cache/qwen3/tokenizer.json" "$tmp/tok/tokenizer.json" && ok "tokenizer.json copied" \
      || bad "tokenizer.json copied"
    [ -s "$tmp/tok/tokenizer_config.json" ] && ok "tokenizer_config.json copied" || bad "tokenizer_config.json copied"
  else
    bad "mkmodel --tokenizer" "$out"
  fi
else
  echo "skip tokenizer case ($cache/qwen3/tokenizer.json missing: run scripts/testdata.sh)"
fi

# --load-format dummy: a config-only directory serves random weights generated at
# load; the same run twice gives the same bytes, and without the flag it is an error
out=$("$bin" mkmodel --shape tiny --config-only --out "$tmp/dummy" 2>&1)
expect "mkmodel --config-only" "$out" 'config only \(for --load-format dummy: 131520 parameters'
[ -s "$tmp/dummy/config.json" ] && ! ls "$tmp/dummy"/*.safetensors >/dev/null 2>&1 && ok "config only: no weights" \
  || bad "config only: no weights"
for r in 1 2; do
  "$bin" generate --model "$tmp/dummy" --load-format dummy --kv-cache-mib 4 --prompt-ids 1,2,3 -n 2 --max-tokens 8 \
    --temperature 0.9 --seed 3 --logprobs 2 >"$tmp/dummy.$r" 2>"$tmp/dummy.err.$r"
done
[ -s "$tmp/dummy.1" ] && grep -q '16 generated' "$tmp/dummy.err.1" && cmp -s "$tmp/dummy.1" "$tmp/dummy.2" \
  && ok "generate --load-format dummy, run to run" || bad "generate --load-format dummy" "$(cat "$tmp/dummy.err.1")"
out=$("$bin" generate --model "$tmp/dummy" --kv-cache-mib 4 --prompt-ids 1 --max-tokens 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "model.safetensors" <<<"$out" && ok "config only without --load-format dummy" \
  || bad "config only without --load-format dummy (rc=$rc)" "$out"
out=$("$bin" generate --model "$tmp/dummy" --load-format pickle --prompt-ids 1 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "auto, safetensors or dummy, got 'pickle'" <<<"$out" && ok "--load-format pickle refused" \
  || bad "--load-format pickle (rc=$rc)" "$out"

# failures: exit status and a message naming the file
mkdir -p "$tmp/broken" && cp "$data/fixtures/qwen3-tiny/config.json" "$tmp/broken/"
head -c 4000 "$data/fixtures/qwen3-tiny/model.safetensors" >"$tmp/broken/model.safetensors"
out=$("$bin" info --model "$tmp/broken" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "broken/model.safetensors: tensor '" <<<"$out" && ok "info on a truncated file" \
  || bad "info on a truncated file (rc=$rc)" "$out"
out=$("$bin" info --model "$tmp/nowhere" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "nowhere/config.json" <<<"$out" && ok "info on a missing dir" || bad "info missing dir" "$out"
out=$("$bin" mkmodel --shape huge --out "$tmp/x" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "unknown shape 'huge'" <<<"$out" && ok "mkmodel unknown shape" || bad "mkmodel shape" "$out"
"$bin" mkmodel --shape tiny 2>/dev/null; [ $? -eq 2 ] && ok "mkmodel without --out" || bad "mkmodel without --out"
"$bin" info --bogus 2>/dev/null; [ $? -eq 2 ] && ok "info unknown option" || bad "info unknown option"

echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
