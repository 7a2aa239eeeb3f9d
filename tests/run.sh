#!/usr/bin/env bash
# Runs every unit test binary given on the command line and every script test
# (tests/scripts/test_*.sh), TEST_JOBS of them at a time, and ends with the line
# "N passed, N failed".
# Each test prints "RESULT passed=N failed=N" (and " skipped=N" when some could not run
# here, e.g. GPU tests without a GPU); a crash or a missing line counts as one failure.
# A test's line is printed when it ends (so the order varies with TEST_JOBS > 1) and ends
# with its wall time and the CPU time (user + system) of its processes; "tests took Ns"
# precedes the total.
# TEST_JOBS: how many tests run at once (default: the number of CPUs, nproc; 1 runs them
# one after the other, in the order below).  The tests share nothing that one of them
# changes (free ports, mktemp directories, build directories of their own), and every
# timing bound in them leaves room for a loaded machine.  The longest tests start first.
# TESTS="test_forward test_golden.sh ...": run only these (names as printed).
set -u
build=$1; shift
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "TEST_JOBS must be a positive number, not '$jobs'"; exit 2; }

# The tests: name, path, kind (bin: a unit test binary; sh: a script test, run with BUILD
# set to the build directory under test).
names=(); paths=(); kinds=()
for t in "$@"; do names+=("$(basename "$t")"); paths+=("$t"); kinds+=(bin); done
for s in tests/scripts/test_*.sh; do
  [ -e "$s" ] || continue
  names+=("$(basename "$s")"); paths+=("$s"); kinds+=(sh)
done
# Longest first, by the times of a CI run (wall seconds on 2 CPUs shared with other builds;
# make test: hardening 80-150, warnings 95, disk cache 76, structured 43, forward 37, e2e 35,
# host cache 32, serving 30, golden 30, cluster 22; make asan: forward 84, hardening 63,
# disk cache 55, structured 52, e2e 52, cluster 38, host cache 38, serving 38; the rest
# under 20), so that the last to start are short.
case $build in
  *asan*) slow="test_forward test_server_hardening.sh test_disk_cache.sh test_structured.sh test_e2e_server.sh
                test_cluster.sh test_host_cache.sh test_serving.sh" ;;
  *) slow="test_server_hardening.sh test_warnings.sh test_disk_cache.sh test_structured.sh test_forward
           test_e2e_server.sh test_host_cache.sh test_serving.sh test_golden.sh test_cluster.sh" ;;
esac
order=()
for n in $slow; do for i in "${!names[@]}"; do [ "${names[i]}" = "$n" ] && order+=("$i"); done; done
for i in "${!names[@]}"; do [[ " $(echo $slow) " == *" ${names[i]} "* ]] || order+=("$i"); done
if [ -n "${TESTS:-}" ]; then
  sel=(); for i in "${order[@]}"; do [[ " $TESTS " == *" ${names[i]} "* ]] && sel+=("$i"); done
  order=("${sel[@]}")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# start I: runs test I in the background; its output goes to $work/I.log, its CPU time
# (bash's `times` in the subshell: the test's processes that were waited for) to
# $work/I.times, and "RC START END" to $work/I.done when it has ended.
start() {
  local i=$1
  (
    t0=$EPOCHREALTIME
    if [ "${kinds[i]}" = sh ]; then BUILD=$build bash "${paths[i]}"; else "${paths[i]}"; fi </dev/null >"$work/$i.log" 2>&1
    rc=$?
    times >"$work/$i.times"
    echo "$rc $t0 $EPOCHREALTIME" >"$work/$i.tmp" && mv "$work/$i.tmp" "$work/$i.done"
  ) &
  pid[i]=$!
}

passed=0; failed=0; skipped=0; sum_wall=0; sum_cpu=0
report() {
  local i=$1 name=${names[$1]} log=$work/$1.log rc=1 t0=0 t1=0
  [ -e "$work/$i.done" ] && read -r rc t0 t1 <"$work/$i.done"
  local wall cpu=0
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  [ -e "$work/$i.times" ] &&
    cpu=$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }; printf "%.1f", s }' "$work/$i.times")
  sum_wall=$(awk -v a="$sum_wall" -v b="$wall" 'BEGIN { printf "%.1f", a + b }')
  sum_cpu=$(awk -v a="$sum_cpu" -v b="$cpu" 'BEGIN { printf "%.1f", a + b }')
  local took="${wall}s, cpu ${cpu}s"
  local line; line=$(grep -E '^RESULT passed=[0-9]+ failed=[0-9]+( skipped=[0-9]+)?$' "$log" 2>/dev/null | tail -n1)
  if [ -n "$line" ]; then
    local p f k=0; p=$(sed -E 's/.*passed=([0-9]+).*/\1/' <<<"$line"); f=$(sed -E 's/.*failed=([0-9]+).*/\1/' <<<"$line")
    [[ $line == *skipped=* ]] && k=$(sed -E 's/.*skipped=([0-9]+).*/\1/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
      [ "$f" -eq 0 ] && failed=$((failed + 1))
      echo "--- $name (rc=$rc, $took)"; cat "$log"
    else
      if [ "$k" -ne 0 ]; then echo "$name: $p passed, $k skipped ($took)"; grep '^SKIP ' "$log" | sed 's/^/  /'
      else echo "$name: $p passed ($took)"; fi
    fi
  else
    failed=$((failed + 1)); echo "--- $name crashed or printed no RESULT (rc=$rc, $took)"; tail -n 60 "$log" 2>/dev/null
  fi
}

t_all=$EPOCHREALTIME
next=0; running=(); pid=()
# Polled (bash's `wait -n` misses a job that ended before it was called).
while [ "$next" -lt "${#order[@]}" ] || [ "${#running[@]}" -gt 0 ]; do
  while [ "${#running[@]}" -lt "$jobs" ] && [ "$next" -lt "${#order[@]}" ]; do
    start "${order[next]}"; running+=("${order[next]}"); next=$((next + 1))
  done
  still=()
  for i in "${running[@]}"; do
    if [ -e "$work/$i.done" ]; then report "$i"
    elif ! kill -0 "${pid[i]}" 2>/dev/null && [ ! -e "$work/$i.done" ]; then report "$i" # the runner's subshell died
    else still+=("$i"); fi
  done
  [ "${#still[@]}" = "${#running[@]}" ] && sleep 0.2
  running=("${still[@]}")
done
echo "tests took $(awk -v a="$t_all" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s," \
     "$jobs at a time (the tests' own times add up to ${sum_wall}s, cpu ${sum_cpu}s)"
if [ "$skipped" -ne 0 ]; then echo "$passed passed, $failed failed ($skipped skipped)"
else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
