#!/usr/bin/env bash
# Runs every test (unit, property, integration against real servers the
# tests start themselves, the tool end to end, the example app over HTTP,
# doc tests) on every server users run: Debian's Redis 7.0, and Redis 7.4.1
# and Valkey 8.0.1 built from ../shared/servers (once; cached outside the
# repository, see scripts/ensure-servers.sh). Installs what it needs.
#
# Everything is built once. What depends on the server (the library's
# integration tests, tests/*.rs) runs on each server; the rest (unit tests,
# the tool's and the example's tests, doc tests) runs once, on the first.
# Test binaries run side by side, as their tests mostly wait on servers.
#
#   SESSIONPACK_TEST_SERVERS  which servers, e.g. "redis-7.0" or
#                             "redis-8.0.6 valkey-9.1.2" (default: the
#                             three above)
#   SESSIONPACK_TEST_JOBS     test binaries run at once (default: 3)
#   RUST_TEST_THREADS         tests run at once in one binary (default: 6)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/ensure-redis.sh
wanted=${SESSIONPACK_TEST_SERVERS:-redis-7.0 redis-7.4.1 valkey-8.0.1}
jobs=${SESSIONPACK_TEST_JOBS:-3}
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}

declare -A binary=([redis-7.0]="$(command -v redis-server)")
# The others are built from source once (only those asked for). With
# Valkey 9.1.2 comes its build without Lua, on which tests/no_scripts.rs
# opens stores (SESSIONPACK_NO_LUA_SERVER).
built=()
for name in $wanted; do
  [ "$name" = redis-7.0 ] || built+=("$name")
  [ "$name" = valkey-9.1.2 ] && built+=(valkey-9.1.2-nolua)
done
if [ ${#built[@]} -gt 0 ]; then
  while read -r name path; do
    binary[$name]=$path
  done < <(scripts/ensure-servers.sh "${built[@]}")
fi
if [ -n "${binary[valkey-9.1.2-nolua]:-}" ]; then
  export SESSIONPACK_NO_LUA_SERVER=${binary[valkey-9.1.2-nolua]}
fi
for name in $wanted; do
  if [ -z "${binary[$name]:-}" ]; then
    echo "no server named $name (known: ${!binary[*]})" >&2
    exit 2
  fi
  echo "== $name: $("${binary[$name]}" --version)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Build once, and list each test harness: package directory, target, path.
cargo test --workspace --all-features --all-targets --no-run --message-format=json-render-diagnostics \
  | grep '"executable":"[^"]*/deps/' \
  | sed -E 's#.*"manifest_path":"([^"]*)/Cargo.toml".*"target":\{"kind":\["([^"]*)"\].*"name":"([^"]*)","src_path".*"executable":"([^"]*)".*#\1 \2:\3 \4#' \
  > "$work/harnesses"

# One line per run: server, its binary, package directory, target, path.
# The slowest binaries go first so the others fill in around them.
first=${wanted%% *}
{
  for name in $wanted; do
    grep "^$root test:" "$work/harnesses" | sed "s#^#$name ${binary[$name]} #"
  done
  grep -v "^$root test:" "$work/harnesses" | sed "s#^#$first ${binary[$first]} #"
} | awk '{ print ($4 ~ /^test:(cluster|cluster_faults|layouts|cli)$/) ? 0 : 1, $0 }' \
  | sort -s -k1,1n | cut -d' ' -f2- > "$work/all"
# The harness checks measured memory against the model within 5% at a
# small scale; run beside the others on 2 cores it once measured 5.2% over:
# it runs alone, after them.
grep -v '/cli test:harness ' "$work/all" > "$work/runs" || true
grep '/cli test:harness ' "$work/all" > "$work/alone" || true

run() {
  local server=$1 server_binary=$2 dir=$3 target=$4 path=$5
  local log="$work/$server.${target/:/.}.log" start=$SECONDS flags=(-q --show-output)
  # A criterion bench run without --bench tests each bench once; it takes
  # no libtest flags.
  [ "${target%%:*}" = bench ] && flags=()
  if (cd "$dir" && SESSIONPACK_REDIS_SERVER=$server_binary "$path" "${flags[@]}") > "$log" 2>&1; then
    echo "ok     $server ${dir#"$root"}/$target ($((SECONDS - start)) s)"
  else
    echo "FAILED $server ${dir#"$root"}/$target ($((SECONDS - start)) s)"
    touch "$log.failed"
  fi
}
export -f run
export work root

start=$SECONDS
xargs -P "$jobs" -L 1 bash -c 'run "$@"' run < "$work/runs"
RUST_TEST_THREADS=2 xargs -P 1 -L 1 bash -c 'run "$@"' run < "$work/alone"
echo "== test binaries: $((SECONDS - start)) s"
# A test the server cannot serve (a build without TLS) says so and passes:
# each such skip is shown here, never silent.
for log in "$work"/*.log; do
  grep -h "^skipped: " "$log" | sed "s#^#$(basename "$log" .log): #" || true
done

failed=0
for mark in "$work"/*.failed; do
  [ -e "$mark" ] || continue
  failed=1
  log=${mark%.failed}
  echo
  echo "== $(basename "$log" .log)"
  cat "$log"
done
[ "$failed" = 0 ] || exit 1

SESSIONPACK_REDIS_SERVER=${binary[$first]} cargo test --workspace --all-features --doc
echo "== every test: $SECONDS s"
