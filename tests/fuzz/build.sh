#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/:
#   fuzz_safetensors  the safetensors header parser
#   fuzz_config       config.json / generation_config.json parsing
#   fuzz_openai       OpenAI request parsing and validation (/v1/completions, /v1/chat/completions)
#   fuzz_template     the Jinja chat-template parser and renderer
#   fuzz_http         one HTTP request as the server's glue sees it: the head (gate.c's
#                     framing checks), the server's router, the body by Content-Length, the
#                     Responses translation and the OpenAI parse
#   fuzz_grammar      GBNF / JSON Schema / regex / choice compilers, the matcher and its masks
# With FUZZ_SECONDS=N (or `build.sh N`) also runs each for N seconds over its corpus;
# new inputs go to build-fuzz/corpus-<target>/ (copy crashers into tests/fuzz/corpus/<target>/).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
mkdir -p "$out"
cc=${FUZZ_CC:-clang}
flags="-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Iinclude -Isrc"
# The library, instrumented (ASan, UBSan, libFuzzer's coverage) into $out/lib/ by the
# Makefile; every target links the objects it needs from it.  The ISA kernel variants
# without UBSan (SAN_ISA, see the Makefile): fuzz_http links them but no target runs a
# kernel, and clang's UBSan on the GEMM tiles took 80 of this script's 180 CPU seconds.
make -s -j"$(nproc)" CUDA=0 CC="$cc" BUILD="$out/lib" OPT=-O1 \
  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  SAN_ISA="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
  "$out/lib/libhearth.a"
libs="-ljansson -lonig -lmicrohttpd -lxxhash -ledit -lm -pthread"
for t in safetensors config openai grammar template http; do
  # shellcheck disable=SC2086
  $cc $flags -o "$out/fuzz_$t" "tests/fuzz/fuzz_$t.c" "$out/lib/libhearth.a" $libs
done
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
