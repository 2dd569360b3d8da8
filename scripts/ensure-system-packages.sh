#!/usr/bin/env bash
# Make sure the system programs the test suite runs are installed.
#
#   scripts/ensure-system-packages.sh COMMAND=DEBIAN_PACKAGE ...
#
# For each COMMAND missing from PATH, install its Debian package with
# apt-get (as root, or through sudo). Exits non-zero with one clear line
# when a program is missing and cannot be installed here.
set -euo pipefail

missing=()
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "error: missing system packages: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${missing[*]}; this is not a Debian-like system, install them with your package manager" >&2
  exit 1
fi

echo "Installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
