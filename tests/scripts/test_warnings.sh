#!/usr/bin/env bash
# gcc and clang both compile every source file (library, CLI, tests, benchmarks) with
# -Wall -Wextra and no warning (-Werror here, so a warning fails the test), and the
# libFuzzer targets build with clang.
#  - gcc: make test's own build, read from the messages kept beside each object, when it
#    is one (see gcc_logs_clean below); else a gcc -Werror build.
#  - clang: every file through clang's front end (-fsyntax-only) with the build's flags
#    and -Werror: clang's -Wall -Wextra diagnostics are the front end's, and this takes a
#    third of a full -O2 build's CPU time (25 against 60 s); the code generation is
#    clang's too in the fuzz build below, whose library is compiled with -Werror.
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
# The sanitizer pass (make asan) runs the same script list: the build check is done once.
case "${BUILD:-build}" in *asan*) echo "skip: checked by make test"; echo "RESULT passed=0 failed=0"; exit 0;; esac
# read_cflags CC CFLAGS: the build's flags of each kind of object (make print-cflags) into
# $plain, $avx2, $avx512; flags_of SRC: the ones SRC compiles with.
read_cflags() {
  { read -r plain; read -r avx2; read -r avx512; } < <(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
      make -s --no-print-directory CC="$1" CFLAGS="$2" print-cflags | tr -s ' ' | sed 's/ *$//')
  [ -n "$plain" ] && [ -n "$avx512" ]
}
flags_of() { case $1 in *_avx2.c) echo "$avx2" ;; *_avx512.c) echo "$avx512" ;; *) echo "$plain" ;; esac; }
# gcc_logs_clean: make test has just compiled every file with gcc and the flags of the -Werror
# build below, less -Werror, and kept each object's messages beside it (OBJ.log, first line
# the command; see scripts/cc-log.sh): those say whether gcc warns, without compiling
# everything a second time (40 CPU seconds).  Returns 2 when that build is not such a build
# (another compiler or other flags, a log missing): then the -Werror build runs.
gcc_logs_clean() {
  local b=${BUILD:-build} gcc_path src obj log cmd first n=0 bad=0
  command -v gcc >/dev/null || return 2
  gcc_path=$(readlink -f "$(command -v gcc)")
  read_cflags gcc "" || return 2
  while read -r src; do
    obj=$b/${src%.c}.o; log=$obj.log
    [ -s "$log" ] && [ -e "$obj" ] && [ "$obj" -nt "$src" ] || return 2
    cmd=$(head -n 1 "$log" | tr -s ' ')
    first=${cmd%% *}
    [ "$(readlink -f "$(command -v "$first" 2>/dev/null)" 2>/dev/null)" = "$gcc_path" ] || return 2
    [ "$cmd" = "$first $(flags_of "$src") -MMD -MP -c $src -o $obj" ] || return 2
    if tail -n +2 "$log" | grep -qE 'warning:|error:'; then
      bad=$((bad + 1)); tail -n +2 "$log" | grep -E 'warning|error' | head -5
    fi
    n=$((n + 1))
  done < <({ find src -name '*.c'; ls tests/unit/*.c; } | sort)
  echo "  (gcc: make test's compile of the $n files, their messages in $b/**/*.o.log)"
  [ "$bad" -eq 0 ]
}
# clang_syntax_clean: every .c file (src, tests/unit, bench) through clang -fsyntax-only
# with the flags of its kind of object (plain, AVX2, AVX-512) and -Werror, two at a time;
# prints the first messages of each file that has any.
clang_syntax_clean() {
  local src log f n bad=0
  read_cflags clang -Werror || { echo "  no flags from make print-cflags"; return 1; }
  log=$(mktemp -d)
  while read -r src; do
    printf '%s\0%s\0' "$(flags_of "$src")" "$src"
  done < <({ find src -name '*.c'; ls tests/unit/*.c bench/*.c; } | sort) |
    xargs -0 -n 2 -P 2 sh -c 'clang $1 -fsyntax-only "$2" >"$0/$(echo "$2" | tr / _).log" 2>&1' "$log"
  # (sh -c: $0 the log directory, $1 the flags, split on purpose, $2 the file)
  for f in "$log"/*.log; do
    [ -s "$f" ] || continue
    bad=$((bad + 1)); grep -E 'warning|error' "$f" | head -5
  done
  n=$(find "$log" -name '*.log' | wc -l)
  rm -rf "$log"
  echo "  (clang: $n files through -fsyntax-only -Werror)"
  [ "$bad" -eq 0 ] && [ "$n" -gt 0 ]
}
for cc in gcc clang; do
  if ! command -v $cc >/dev/null; then
    failed=$((failed + 1)); echo "FAIL $cc is not installed"; continue
  fi
  if [ $cc = gcc ]; then
    gcc_logs_clean; rc=$?
    if [ $rc = 0 ]; then passed=$((passed + 1)); echo "ok   gcc builds warning-free"; continue; fi
    if [ $rc = 1 ]; then failed=$((failed + 1)); echo "FAIL gcc: warnings or errors"; continue; fi
  fi
  if [ $cc = clang ]; then
    if clang_syntax_clean; then passed=$((passed + 1)); echo "ok   clang compiles warning-free"
    else failed=$((failed + 1)); echo "FAIL clang: warnings or errors"; fi
    continue
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
if CFLAGS=-Werror bash tests/fuzz/build.sh >"$log" 2>&1; then
  passed=$((passed + 1)); echo "ok   the libFuzzer targets build (their library compiled by clang with -Werror)"
else
  failed=$((failed + 1)); echo "FAIL the libFuzzer targets do not build"; tail -20 "$log"
fi
rm -f "$log"
echo "RESULT passed=$passed failed=$failed"
