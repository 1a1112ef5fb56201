#!/usr/bin/env bash
# What a growing store's creates cost the server beside a fixed store's,
# in instructions counted by valgrind's callgrind, which do not move with
# the machine's load as `INFO cpu` does: a fill from empty, more creates
# into the filled store, and creates after half the sessions went and the
# groups were reshaped (cli/examples/growth_instructions.rs). Debian's
# redis-server, 20k sessions of the app's 132-byte session (three fields)
# beside fixed 2^11 buckets, and of the 44-byte digest one (one field)
# beside 2^10: about as full as the growing store's buckets once the runs
# have grown to 30k. Takes about five minutes (the server runs some 50
# times slower under valgrind). Writes analysis/growth/instructions.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
if ! command -v callgrind_control >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  echo "installing valgrind from Debian's packages" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind >/dev/null
fi
cargo build --release --quiet -p sessionpack-cli --example growth_instructions
sessions=20000
# Each profile and the fixed store's bucket count (log2).
profiles=(axum-login-app:11 axum-login-digest:10)

dir=$(mktemp -d)
server=""
stop() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap stop EXIT
port=$((20000 + RANDOM % 20000))
while (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" \
  "$(command -v redis-server)" --port "$port" --save '' --appendonly no \
  >"$dir/valgrind.log" 2>&1 &
server=$!
for _ in $(seq 120); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 1
done
redis-cli -p "$port" ping >/dev/null
version=$(redis-cli -p "$port" info server | sed -n 's/^redis_version:\(.*\)\r$/\1/p')

out=analysis/growth/instructions.md
{
  echo "# A growing store's creates in server instructions"
  echo
  echo "Produced by \`scripts/growth-instructions.sh\` (Redis $version from Debian under"
  echo "valgrind's callgrind; $sessions sessions; the tower-sessions store, 16 creates"
  echo "in flight; cli/examples/growth_instructions.rs)."
  echo "Instructions the server ran per create, counted from zero to a dump"
  echo "around each phase: **fill** from empty to $sessions sessions, **grow** by"
  echo "half as many again, **regrow** by half as many again after every"
  echo "other session was deleted and the growing store's groups were reshaped"
  echo "as the sweeper does. Splits are the change in the buckets the shapes"
  echo "hold within a phase; merges are what the reshape reported."
  for pair in "${profiles[@]}"; do
    profile=${pair%:*}
    target/release/examples/growth_instructions "redis://127.0.0.1:$port" "$server" "$dir" \
      "$sessions" "${pair#*:}" "$profile" "$dir/$profile.md"
    echo
    cat "$dir/$profile.md"
  done
} >"$dir/report.md"
mv "$dir/report.md" "$out"
echo "wrote $out"
