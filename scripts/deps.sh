#!/usr/bin/env bash
# Installs the Debian packages that the build and the tests need, when missing.
# Idempotent and quiet when everything is already there.
set -euo pipefail
pkgs=(build-essential clang libclang-rt-14-dev libjansson-dev libonig-dev libmicrohttpd-dev libedit-dev
      libxxhash-dev nodejs npm curl ca-certificates python3 haproxy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere than Debian (a preinstalled toolchain): accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
todo=()
for p in "${missing[@]}"; do [ -n "$p" ] && todo+=("$p"); done
[ ${#todo[@]} -eq 0 ] && exit 0
echo "deps: installing ${todo[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${todo[@]}" >/dev/null
