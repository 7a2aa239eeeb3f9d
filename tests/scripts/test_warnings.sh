#!/usr/bin/env bash
# gcc and clang both build every source file (library, CLI, tests) with
# -Wall -Wextra and no warning (-Werror here, so a warning fails the test), and the
# libFuzzer targets build with clang.
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
# The sanitizer pass (make asan) runs the same script list: the build check is done once.
case "${BUILD:-build}" in *asan*) echo "skip: checked by make test"; echo "RESULT passed=0 failed=0"; exit 0;; esac
for cc in gcc clang; do
  if ! command -v $cc >/dev/null; then
    failed=$((failed + 1)); echo "FAIL $cc is not installed"; continue
  fi
  out=build-werror-$cc
  log=$(mktemp)
  if make -s -j2 BUILD=$out CC=$cc CFLAGS=-Werror $out/hearth \
       $(ls tests/unit/test_*.c | sed "s|tests/unit/|$out/tests/|; s|\.c$||") >"$log" 2>&1; then
    passed=$((passed + 1)); echo "ok   $cc builds warning-free"
  else
    failed=$((failed + 1)); echo "FAIL $cc: warnings or errors"; grep -E "warning|error" "$log" | head -20
  fi
  rm -f "$log"
done
# The libFuzzer targets (make fuzz) keep building too.
log=$(mktemp)
if bash tests/fuzz/build.sh >"$log" 2>&1; then
  passed=$((passed + 1)); echo "ok   the libFuzzer targets build"
else
  failed=$((failed + 1)); echo "FAIL the libFuzzer targets do not build"; tail -20 "$log"
fi
rm -f "$log"
echo "RESULT passed=$passed failed=$failed"
