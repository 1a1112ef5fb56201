#!/usr/bin/env bash
# The main job: the memory benchmark of every layout (1M sessions by
# default), against a dedicated redis-server it starts and stops itself, or
# the server named with --redis-url URL (add --allow-flush if it holds data).
# Installs redis-server and the plots' font when missing. Extra arguments go
# to `sessionpack bench memory` (see --help); results go to results/memory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
cargo run --release --quiet -p sessionpack-cli -- bench memory "$@"
