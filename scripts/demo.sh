#!/usr/bin/env bash
# Runs the demo against a dedicated redis-server it starts itself (or the
# server named with --redis-url URL), installing redis-server if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
cargo run --release --quiet -- demo "$@"
