#!/usr/bin/env bash
# Outputs that must stay bit for bit what they were before the backend seam
# (tests/data/golden/outputs.txt, recorded with the code before the change): for
# every kernel variant this CPU runs, every fixture model, KV dtype and thread count,
# the `hearth bench prefix` digests of ids and logits and a seeded `hearth generate`.
# Variants the CPU lacks are reported as skipped.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
data=${HEARTH_TEST_DATA:-tests/data}
golden=$data/golden/outputs.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
variants=(scalar)
has avx2 fma && variants+=(avx2)
has avx512f avx512bw avx512vl avx512dq && variants+=(avx512)
has avx512f avx512bw avx512vl avx512dq avx512_bf16 && variants+=(avx512bf16)
for v in avx512 avx512bf16 avx2; do
  [[ " ${variants[*]} " == *" $v "* ]] || echo "skip variant $v: this CPU lacks it"
done
# Under the sanitizers (their pass checks memory, make test the bits of all 16 runs a
# variant) each variant runs 4 of its 16 (model, KV dtype, threads) runs: every model,
# both KV dtypes and both thread counts (golden_outputs.sh's GOLDEN_COVER); the test's 60
# of ~350 s there.  TEST_LONG=1 (make test-long): all 16.
cover=0; [[ "$bin" == *asan* ]] && [ -z "${TEST_LONG:-}" ] && cover=1
GOLDEN_COVER=$cover bash tests/scripts/golden_outputs.sh "$bin" "$data" "${variants[@]}" >"$tmp/now.txt"
# every line printed must have its golden line, and with the cover 5 a variant were printed
while IFS= read -r line; do
  grep -qF -- "${line%%:*}:" "$golden" || { failed=$((failed + 1)); echo "FAIL no golden line for: $line"; }
done <"$tmp/now.txt"
if [ "$cover" = 1 ] && [ "$(wc -l <"$tmp/now.txt")" != $((5 * ${#variants[@]})) ]; then
  failed=$((failed + 1)); echo "FAIL the cover printed $(wc -l <"$tmp/now.txt") lines, not $((5 * ${#variants[@]}))"
fi
while IFS= read -r want; do
  key=${want%%:*}
  v=${want%% *}
  [[ " ${variants[*]} " == *" $v "* ]] || continue
  # the cover's runs only (golden_outputs.sh printed those)
  [ "$cover" = 1 ] && ! grep -qF -- "$key:" "$tmp/now.txt" && continue
  got=$(grep -F -- "$key:" "$tmp/now.txt" | head -n1)
  if [ "$got" = "$want" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL $key"; echo "  want: $want"; echo "  got:  $got"
  fi
done <"$golden"
# Nothing compared would be a vacuous pass.
[ "$passed" -gt 0 ] || { failed=$((failed + 1)); echo "FAIL no golden line compared"; }
echo "RESULT passed=$passed failed=$failed"
