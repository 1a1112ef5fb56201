#!/usr/bin/env bash
# Builds the source-built test servers once and caches them outside the
# repository: Redis 7.4.1 and 8.0.6, Valkey 8.0.1 and 9.1.2, and Valkey
# 9.1.2 without Lua (`valkey-9.1.2-nolua`, BUILD_LUA=no: no script runs on
# it), from the archives in ../shared/servers/ (checked against their
# sha256); with names
# as arguments (e.g. `redis-8.0.6 valkey-9.1.2`), only those. Prints one
# line per server, `name path-to-server-binary`. A cached build is reused
# if it was built with TLS (the TLS tests need it; older caches had none).
#
#   SESSIONPACK_SERVER_SOURCES  folder of the archives (default ../shared/servers)
#   SESSIONPACK_CACHE           cache folder (default ~/.cache/sessionpack)
set -euo pipefail
cd "$(dirname "$0")/.."
sources=${SESSIONPACK_SERVER_SOURCES:-$(cd .. && pwd)/shared/servers}
cache=${SESSIONPACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sessionpack}/servers
mkdir -p "$cache"

wanted=("$@")

build() {
  local name=$1 archive=$2 sha=$3 binary=$4
  shift 4
  local flags=("$@")
  local out="$cache/$name"
  if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $name "* ]]; then
    return
  fi
  if [ -x "$out/bin/$binary" ] && [ -f "$out/bin/BUILT_WITH_TLS" ]; then
    echo "$name $out/bin/$binary"
    return
  fi
  if [ ! -f "$sources/$archive" ]; then
    echo "missing $sources/$archive: cannot build $name" >&2
    return 1
  fi
  echo "$sha  $sources/$archive" | sha256sum --check --quiet - >&2
  local work
  work=$(mktemp -d)
  tar -xzf "$sources/$archive" -C "$work"
  echo "building $name (a few minutes, once)" >&2
  # Bundled jemalloc, TLS built in (OpenSSL, as Debian's server has it), no
  # modules (Redis 8's need the internet).
  make -C "$work"/*/ -j"$(nproc)" BUILD_TLS=yes BUILD_WITH_MODULES=no "${flags[@]}" >"$work/build.log" 2>&1 || {
    tail -n 30 "$work/build.log" >&2
    return 1
  }
  mkdir -p "$out/bin.tmp"
  cp "$work"/*/src/"$binary" "$out/bin.tmp/"
  for tool in redis-cli valkey-cli redis-benchmark valkey-benchmark; do
    [ -x "$work"/*/src/$tool ] && cp "$work"/*/src/$tool "$out/bin.tmp/" || true
  done
  touch "$out/bin.tmp/BUILT_WITH_TLS"
  rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin"
  rm -rf "$work"
  echo "$name $out/bin/$binary"
}

if ! command -v make >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1 \
  || ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq build-essential pkg-config libssl-dev >/dev/null
fi

build redis-7.4.1 redis-7.4.1.tar.gz \
  4de2e6f23676e4d3872547a51731b8c78de812ff09260712c20f4ce01d1bad30 redis-server
build valkey-8.0.1 valkey-8.0.1.tar.gz \
  bccb382a0f583fb419526348ed07c3d19e0b6fe8f5492aa3b3037793016ea478 valkey-server
build redis-8.0.6 redis-8.0.6.tar.gz \
  763bf3005bcbf77c1d8145016a9627e45219665f99cf5a736bc73ec70faf0c8e redis-server
build valkey-9.1.2 valkey-9.1.2.tar.gz \
  8e8557da7426a51b4e0fb514a65ef6241dc7c85cb408243af389070abf379cec valkey-server
build valkey-9.1.2-nolua valkey-9.1.2.tar.gz \
  8e8557da7426a51b4e0fb514a65ef6241dc7c85cb408243af389070abf379cec valkey-server BUILD_LUA=no
