#!/usr/bin/env bash
# What the default feature `compression` (zstd, built from its C sources
# by zstd-sys) adds to the first build of a new app: a minimal axum app on
# sessionpack's tower store, built from clean twice on this machine, with
# `default-features = false` and with the defaults, each with
# `cargo build --timings`. Writes analysis/build-cost.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
app=$(mktemp -d)
trap 'rm -rf "$app"' EXIT
mkdir -p "$app/src"
cat > "$app/Cargo.toml" <<EOF
[package]
name = "newapp"
version = "0.1.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
sessionpack = { path = "$root", default-features = false, features = ["tower-sessions"] }
tower-sessions = "0.15"
axum = "0.8"
tokio = { version = "1", features = ["full"] }

[features]
packed = ["sessionpack/compression"]
EOF
cat > "$app/src/main.rs" <<'EOF'
use axum::{Router, routing::get};
use tower_sessions::{Session, SessionManagerLayer};

async fn hit(session: Session) -> String {
    let n: u64 = session.get("n").await.ok().flatten().unwrap_or(0) + 1;
    let _ = session.insert("n", n).await;
    n.to_string()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = sessionpack::TowerStore::connect("redis://127.0.0.1/").await?;
    let app = Router::new().route("/", get(hit)).layer(SessionManagerLayer::new(store));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app).await?;
    Ok(())
}
EOF
cd "$app"
cargo fetch --quiet
rows=()
for variant in unpacked packed; do
  flags=()
  [ "$variant" = packed ] && flags=(--features packed)
  rm -rf target
  start=$(date +%s.%N)
  cargo build --quiet --timings "${flags[@]}" 2>/dev/null
  end=$(date +%s.%N)
  zstd=$(python3 - target/cargo-timings/cargo-timing.html <<'EOF'
import json, re, sys
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);", open(sys.argv[1]).read(), re.S).group(1))
print(f"{sum(u['duration'] for u in units if u['name'].startswith('zstd')):.1f}")
EOF
)
  rows+=("| $variant | $(printf '%.1f' "$(echo "$end - $start" | bc)") | $zstd |")
done
cd "$root"
{
  echo "# What packing by default adds to a new app's build"
  echo
  echo "Produced by \`scripts/build-cost.sh\` on $(nproc) cores ($(rustc --version)): a minimal axum app on \`TowerStore::connect\`, built from clean in debug, without sessionpack's default features (\`unpacked\`) and with them (\`packed\`: zstd's C sources compiled by zstd-sys). Seconds of wall time, and the seconds cargo's \`--timings\` gives the zstd crates (their build scripts included), which run beside the other crates."
  echo
  echo "| build | wall s | zstd crates s |"
  echo "|---|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > analysis/build-cost.md
cat analysis/build-cost.md
