#!/usr/bin/env bash
# Runs every test (unit, integration against real redis-server processes the
# tests start themselves, doc tests, examples), installing what they need.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
cargo test --all-features --all-targets
cargo test --all-features --doc
