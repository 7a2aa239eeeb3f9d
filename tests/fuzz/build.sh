#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/:
#   fuzz_safetensors  the safetensors header parser
#   fuzz_config       config.json / generation_config.json parsing
#   fuzz_openai       OpenAI request parsing and validation (/v1/completions, /v1/chat/completions)
#   fuzz_template     the Jinja chat-template parser and renderer
#   fuzz_http         one HTTP request as the server's glue sees it: the head (gate.c's
#                     framing checks), the server's router, the body by Content-Length, the
#                     Responses translation and the OpenAI parse (links the whole library,
#                     built instrumented into build-fuzz/lib/ by the Makefile)
#   fuzz_grammar      GBNF / JSON Schema / regex / choice compilers, the matcher and its masks
# With FUZZ_SECONDS=N (or `build.sh N`) also runs each for N seconds over its corpus;
# new inputs go to build-fuzz/corpus-<target>/ (copy crashers into tests/fuzz/corpus/<target>/).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
mkdir -p "$out"
cc=${FUZZ_CC:-clang}
flags="-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Iinclude -Isrc"
base="src/base/status.c src/base/log.c src/base/fileio.c"
$cc $flags -o "$out/fuzz_safetensors" tests/fuzz/fuzz_safetensors.c src/model/safetensors.c $base -ljansson
$cc $flags -o "$out/fuzz_config" tests/fuzz/fuzz_config.c src/model/config.c $base -ljansson -lm
grammar="src/grammar/grammar.c src/grammar/gbnf.c src/grammar/json_schema.c src/grammar/regex.c"
$cc $flags -o "$out/fuzz_openai" tests/fuzz/fuzz_openai.c src/server/openai.c src/server/structured.c $grammar $base -ljansson -lm
$cc $flags -o "$out/fuzz_grammar" tests/fuzz/fuzz_grammar.c $grammar src/grammar/matcher.c src/grammar/vocab.c \
  src/grammar/grammar_mask.c src/grammar/grammar_cache.c $(ls src/tokenizer/*.c) $base \
  -ljansson -lonig -lxxhash -lm -pthread
$cc $flags -o "$out/fuzz_template" tests/fuzz/fuzz_template.c src/template/template*.c $base -ljansson -lm
# The ISA kernel variants without UBSan (SAN_ISA, see the Makefile): fuzz_http links them
# but no target runs a kernel, and clang's UBSan on the GEMM tiles took 80 of this
# script's 180 CPU seconds.
make -s -j"$(nproc)" CUDA=0 CC="$cc" BUILD="$out/lib" OPT=-O1 \
  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  SAN_ISA="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
  "$out/lib/libhearth.a"
$cc $flags -o "$out/fuzz_http" tests/fuzz/fuzz_http.c "$out/lib/libhearth.a" \
  -ljansson -lonig -lmicrohttpd -lxxhash -ledit -lm -pthread
echo "built $out/fuzz_safetensors $out/fuzz_config $out/fuzz_openai $out/fuzz_template $out/fuzz_http $out/fuzz_grammar"
secs=${1:-${FUZZ_SECONDS:-0}}
if [ "$secs" -gt 0 ]; then
  for t in safetensors config openai template http grammar; do
    dict=tests/fuzz/json.dict
    [ $t = template ] && dict=tests/fuzz/template.dict
    [ $t = http ] && dict=tests/fuzz/http.dict
    mkdir -p "$out/corpus-$t"
    "$out/fuzz_$t" -max_total_time="$secs" -dict=$dict -artifact_prefix="$out/crash-$t-" \
      "$out/corpus-$t" "tests/fuzz/corpus/$t"
  done
fi
