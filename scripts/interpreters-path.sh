#!/usr/bin/env bash
# Print a PATH that puts python3.10 ... python3.13 within reach of tox.
#
# tox looks for `python3.X` on PATH. pyenv installs them side by side but
# only puts the active version's shim to work, so add each installed
# version's own bin directory. Versions that are missing are reported on
# stderr; tox then fails that environment with its own clear message.
set -euo pipefail

dirs=()
for version in 3.10 3.12 3.13 3.11; do
  if command -v "python$version" >/dev/null 2>&1 && "python$version" -c '' 2>/dev/null; then
    continue
  fi
  found=""
  if command -v pyenv >/dev/null 2>&1; then
    prefix=$(pyenv prefix "$(pyenv versions --bare | grep -E "^${version//./\\.}(\.[0-9]+)?$" | sort -V | tail -1)" 2>/dev/null || true)
    [ -n "$prefix" ] && [ -x "$prefix/bin/python$version" ] && found="$prefix/bin"
  fi
  if [ -n "$found" ]; then
    dirs+=("$found")
  else
    echo "note: python$version not found (install it, e.g. with pyenv, to run its tox environments)" >&2
  fi
done
( IFS=:; echo "${dirs[*]:+${dirs[*]}:}$PATH" )
