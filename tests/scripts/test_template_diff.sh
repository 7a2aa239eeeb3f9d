#!/usr/bin/env bash
# Differential test of chat templates: `hearth template` against the npm oracle @huggingface/jinja
# on the chat cases of tests/data/qwen3/vectors.json and on seeded generated conversations, for the
# Qwen3 template of tests/data/qwen3/tokenizer_config.json and the upstream one
# (tests/data/qwen3/chat_template_upstream.jinja). See tests/oracle/template_diff.mjs.
set -u
cd "$(dirname "$0")/../.."
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
if [ ! -x "$bin" ]; then
  echo "test_template_diff: hearth binary '$bin' not found (make it first)"
  echo "RESULT passed=0 failed=1"
  exit 1
fi
if [ ! -d tests/oracle/node_modules/@huggingface/jinja ] || ! command -v node >/dev/null; then
  echo "test_template_diff: the oracle is not installed: run 'bash scripts/testdata.sh'"
  echo "RESULT passed=0 failed=1"
  exit 1
fi
exec node tests/oracle/template_diff.mjs "$bin" --cases "${TEMPLATE_DIFF_CASES:-150}" --seed "${TEMPLATE_DIFF_SEED:-20250601}"
