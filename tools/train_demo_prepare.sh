#!/usr/bin/env bash
# Builds the demo model's training corpus from the Debian package `fortunes`
# (plus `fortunes-min`, which holds the `fortunes` file itself): every fortune of
# usr/share/games/fortunes/*, split on `%` lines, as one JSON line each, into
# tools/train_demo_data/fortunes.jsonl, with the package's copyright file beside it.
# Needs apt-get (Debian/Ubuntu) and python3 (standard library only).
# Usage: bash tools/train_demo_prepare.sh   (idempotent; overwrites the corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
out=tools/train_demo_data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download fortunes fortunes-min >/dev/null 2>&1)
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
mkdir -p "$out"
cp "$tmp/root/usr/share/doc/fortunes/copyright" "$out/COPYRIGHT"
dpkg-deb -f "$tmp"/fortunes_*.deb Package Version > "$out/SOURCE"
python3 tools/train_demo_split.py "$tmp/root/usr/share/games/fortunes" "$out/fortunes.jsonl"
