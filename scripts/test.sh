#!/usr/bin/env bash
# Runs every test (unit, integration against real servers the tests start
# themselves, doc tests, examples) on every server users run: Debian's
# Redis 7.0, and Redis 7.4.1 and Valkey 8.0.1 built from ../shared/servers
# (once; cached outside the repository, see scripts/ensure-servers.sh).
# Installs what it needs.
#
#   SESSIONPACK_TEST_SERVERS  which servers, e.g. "redis-7.0" or
#                             "redis-7.0 valkey-8.0.1" (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
wanted=${SESSIONPACK_TEST_SERVERS:-redis-7.0 redis-7.4.1 valkey-8.0.1}

declare -A binary=([redis-7.0]="$(command -v redis-server)")
if [ "$wanted" != "redis-7.0" ]; then
  while read -r name path; do
    binary[$name]=$path
  done < <(scripts/ensure-servers.sh)
fi

# Build once; each server's run reuses the build.
cargo test --all-features --all-targets --no-run
for name in $wanted; do
  server=${binary[$name]:-}
  if [ -z "$server" ]; then
    echo "no server named $name (known: ${!binary[*]})" >&2
    exit 2
  fi
  echo
  echo "== every test on $name: $("$server" --version)"
  SESSIONPACK_REDIS_SERVER=$server cargo test --all-features --all-targets
done
cargo test --all-features --doc
