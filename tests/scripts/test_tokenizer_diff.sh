#!/usr/bin/env bash
# Differential test of hearth's tokenizer against the live oracle, Hugging Face tokenizers
# (npm `tokenizers`, pinned in tests/oracle/package.json): a few thousand seeded strings encoded
# and decoded by both, invalid UTF-8 rejected with its offset, plus variants of the Qwen3
# tokenizer.json for the features Qwen3 does not use. See tests/oracle/tokenizer_diff.js.
# Needs the hearth binary and `bash scripts/testdata.sh` (tokenizer.json, node_modules).
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
tok=tests/.cache/qwen3/tokenizer.json
missing=""
[ -x "$bin" ] || missing="$missing $bin (make)"
[ -s "$tok" ] || missing="$missing $tok (bash scripts/testdata.sh)"
[ -d tests/oracle/node_modules/tokenizers ] || missing="$missing tests/oracle/node_modules/tokenizers (bash scripts/testdata.sh)"
command -v node >/dev/null || missing="$missing node"
if [ -n "$missing" ]; then
  echo "FAIL test_tokenizer_diff: missing$missing"
  echo "RESULT passed=0 failed=1"
  exit 1
fi
exec node tests/oracle/tokenizer_diff.js "$bin" "$tok" --seed "${HEARTH_TOKDIFF_SEED:-20240611}"
