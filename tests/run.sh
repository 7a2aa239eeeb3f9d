#!/usr/bin/env bash
# Runs every unit test binary given on the command line, then every script test
# (tests/scripts/test_*.sh), and ends with the line "N passed, N failed".
# Each test prints "RESULT passed=N failed=N" (and " skipped=N" when some could not run
# here, e.g. GPU tests without a GPU); a crash or a missing line counts as one failure.
set -u
build=$1; shift
passed=0; failed=0; skipped=0
run_one() {
  local name=$1; shift
  local log; log=$(mktemp)
  "$@" >"$log" 2>&1
  local rc=$?
  local line; line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+( skipped=[0-9]+)?$' "$log" | tail -n1)
  if [ -n "$line" ]; then
    local p f k=0; p=$(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line"); f=$(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")
    [[ $line == *skipped=* ]] && k=$(sed -E 's/.*skipped=([0-9]+).*/\1/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
    if [ "$f" -ne 0 ] || [ $rc -ne 0 ]; then
      [ "$f" -eq 0 ] && failed=$((failed + 1))
      echo "--- $name (rc=$rc)"; cat "$log"
    else
      if [ "$k" -ne 0 ]; then echo "$name: $p passed, $k skipped"; grep '^SKIP ' "$log" | sed 's/^/  /'
      else echo "$name: $p passed"; fi
    fi
  else
    failed=$((failed + 1)); echo "--- $name crashed or printed no RESULT (rc=$rc)"; tail -n 60 "$log"
  fi
  rm -f "$log"
}
for t in "$@"; do run_one "$(basename "$t")" "$t"; done
for s in tests/scripts/test_*.sh; do
  [ -e "$s" ] || continue
  run_one "$(basename "$s")" env BUILD="$build" bash "$s"
done
if [ "$skipped" -ne 0 ]; then echo "$passed passed, $failed failed ($skipped skipped)"
else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
