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
# 150 generated conversations; 50 under the sanitizers, where each of the ~300 renders is a
# process start of ~0.1 s (the test's 42 of 344 s there); TEST_LONG=1 (make test-long): 150.
cases=150; [[ "$bin" == *asan* ]] && [ -z "${TEST_LONG:-}" ] && cases=50
exec node tests/oracle/template_diff.mjs "$bin" --cases "${TEMPLATE_DIFF_CASES:-$cases}" --seed "${TEMPLATE_DIFF_SEED:-20250601}"
