#!/usr/bin/env bash
# Regenerates analysis/: every run behind the figures in analysis/README.md
# and README.md. Each run starts its own redis-server. Takes about an hour
# on a 2-core machine (the real 100M run alone ~30 minutes, 7 GB of Redis);
# pass the names of the parts to run only some: 1m 10m 10m-json-setex
# 100m-emulated 100m compact throughput sweep servers check. `compact`
# measures the compact layout at 1M and 100M emulated, 160- and 128-bit ids;
# `fill` what fuller compact buckets cost in speed and server CPU;
# `throughput-typed` the generic Store with the app's session shapes as
# typed attributes beside packed-setex, every operation's server CPU;
# `growth` a store whose buckets split and merge, grown from 1k
# sessions to 100M (the app's session to 10M) and back to 1M, beside fixed bucket counts;
# `throughput-growing` each operation's speed and server CPU on such a
# store beside fixed buckets and packed-setex;
# `churn` the memory after sessions come and go (Redis 7.0, and 7.4.1 with
# activedefrag). `tower` the tower-sessions store beside the peer crate
# (tower-sessions-redis-store) per session profile; `tower-servers` the
# app profiles, packed and not, on each source-built server. `servers` measures
# every layout at 1M on Redis 7.4.1 and 8.0.6 and Valkey 8.0.1 and 9.1.2
# (built by scripts/ensure-servers.sh; SESSIONPACK_ANALYSIS_SERVERS="a b"
# for only some). `server-expiry` the compact layout swept against the
# same with its fields expired by the server, memory and server CPU, on
# Redis 7.4.1 and 8.0.6 and Valkey 9.1.2. `cluster` every layout at 1M on a local Redis
# Cluster of three primaries; `cluster-throughput` their speed and server
# CPU per primary on one with a replica each, with and without WAIT.
# `identities` what integer, UUID and 24-byte name identities cost at 1M
# and 100M emulated. `users` what the per-user index adds to the compact
# layout at 1M (160- and 128-bit ids, 1 and 3 sessions per user) and 100M
# emulated, beside a Spring-Session-style SET per user, and to each
# operation's server CPU. `tokens` one-time tokens at 1M, packed against the
# talk's key per token. `ratelimit` the talk's exact log against the packed
# GCRA limiter. `viewed` recently viewed items at 1M sessions of 25 items,
# packed beside the buckets against the book's ZSET per session. `locks`
# the talk's lease against the fenced lock. `migrate` 1M sessions of
# tower-sessions-redis-store, then of actix-session, copied into
# sessionpack and closed: time, server CPU and memory at each stage. `actix` the
# actix-session store beside actix-session's RedisSessionStore per state
# profile; `actix-quickstart` what ActixStore::connect gives and what a
# user index adds to each call; `actix-concurrency` the user-id profile with 4, 16 and 64 calls
# in flight. `tower-growing` the tower-sessions store on buckets that grow
# beside fixed buckets and the peer crate; `growth-instructions` the same
# stores' creates in server instructions (callgrind), which the machine's
# load does not move; `quickstart` what
# TowerStore::connect gives (growing, packed) per session shape beside the
# peer on Redis 7.0 and Valkey 9.1.2, `quickstart-tenant` the same for a
# login whose user and tenant are UUIDs, `quickstart-oidc` for a login
# that keeps its OpenID Connect id token (a JSON Web Token). `sweep` also measures Redis's
# own active expiry of key-per-session keys, what the peers pay. `day` a
# day of traffic replayed through tower-sessions (TowerStore::connect
# against tower-sessions-redis-store) and through actix-session
# (ActixStore::connect against its RedisSessionStore), on Redis 7.0 and
# 8.0.6 and Valkey 9.1.2: server CPU per request with the cleanup, memory,
# latency, and where the server's time goes, script by script.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
cargo build --release --quiet -p sessionpack-cli
sp=target/release/sessionpack
# `bench tower --quickstart` of the profiles $2 into analysis/tower/$1/,
# on Redis 7.0 and Valkey 9.1.2 (built with the peer crate).
quickstart() {
  local args=(--sessions 200000 --rounds 1 --default-limits --quickstart --profiles "$2")
  cargo build --release --quiet -p sessionpack-cli --features peer-bench
  $sp bench tower "${args[@]}" --out "analysis/tower/$1/redis-7.0"
  while read -r name path; do
    SESSIONPACK_REDIS_SERVER=$path $sp bench tower "${args[@]}" --out "analysis/tower/$1/$name"
  done < <(scripts/ensure-servers.sh valkey-9.1.2)
  cargo build --release --quiet -p sessionpack-cli
}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(1m 100m-emulated compact churn throughput throughput-typed throughput-growing fill sweep tower tower-growing growth-instructions day actix actix-quickstart actix-concurrency tower-servers servers cluster cluster-throughput identities users tokens ratelimit viewed locks 10m 100m check)
for part in "${parts[@]}"; do
  case "$part" in
    1m) $sp bench memory --sessions 1000000 --bucket-bits 8,14,16,20 --out analysis/runs/1m ;;
    100m-emulated) $sp bench memory --sessions 1000000 --emulate 100000000 --bucket-bits 20,21 --out analysis/runs/100m-emulated ;;
    10m) $sp bench memory --sessions 10000000 --bucket-bits 16,17 --out analysis/runs/10m ;;
    10m-json-setex) $sp bench memory --sessions 10000000 --layouts json-setex --out analysis/runs/10m-json-setex ;;
    100m) $sp bench memory --sessions 100000000 --layouts bucketed --bucket-bits 20 --steps 20 --out analysis/runs/100m ;;
    throughput) $sp bench throughput --out analysis/runs/throughput ;;
    throughput-growing)
      $sp bench throughput --layouts packed-setex,compact --growing \
        --out analysis/runs/throughput-growing ;;
    throughput-typed)
      # The generic Store with typed attributes: the app's session shapes
      # beside packed-setex (one MessagePack key per session).
      for profile in axum-login-app axum-login-app-text; do
        $sp bench throughput --layouts packed-setex,compact --sessions 50000 \
          --profile $profile --out "analysis/runs/throughput-typed-$profile"
      done ;;
    fill)
      # 200k sessions in 2^11 (~98 each, the advisor's pick) and 2^9 (~390) buckets.
      $sp bench throughput --layouts packed-setex,compact --compact-bits 11,9 \
        --out analysis/runs/throughput-fill ;;
    sweep) $sp bench sweep --out analysis/runs/sweep ;;
    growth)
      # A growing store from 1k sessions to 100M (emulated above 1M, one
      # session in 32) and back to 1M, beside fixed 2^13 and 2^20 and the
      # best fixed count at each size: identity-only sessions, and the
      # app's 132-byte one (three listpack entries).
      $sp bench growth --factor 32 --sizes 1k,3k,10k,30k,100k,300k,1M,3M,10M,30M,100M \
        --out analysis/growth/identity
      $sp bench growth --factor 128 --data-bytes 120 \
        --sizes 1k,3k,10k,30k,100k,300k,1M,3M,10M,30M,100M \
        --out analysis/growth/app-session ;;
    migrate)
      $sp bench migrate --sessions 1000000 --out analysis/runs/migrate
      $sp bench migrate --sessions 1000000 --from actix-session --out analysis/runs/migrate-actix ;;
    cluster)
      # Every layout on a local Redis Cluster of three primaries (summed).
      $sp bench memory --sessions 1000000 --cluster 3 --out analysis/runs/cluster-1m ;;
    cluster-throughput)
      # Three primaries with a replica each; every layout also with each
      # write waiting for its replica. Compact at 2^11 (16 hash tags, the
      # advisor's pick for 100k sessions) and 2^14 (128 tags).
      $sp bench throughput --cluster 3 --replicas 1 --wait-replicas 1 --sessions 50000 \
        --compact-bits 11,14 --out analysis/runs/cluster-throughput ;;
    identities)
      $sp bench memory --sessions 1000000 --layouts compact,bucketed,packed-setex,json-setex,hash-per-session \
        --identities int,uuid,name-24 --out analysis/runs/identities-1m
      $sp bench memory --sessions 1000000 --emulate 100000000 --layouts compact --bucket-bits 20 \
        --identities int,uuid,name-24 --out analysis/runs/identities-100m-emulated ;;
    users)
      for ids in 160 128; do
        for per in 1 3; do
          $sp bench memory --sessions 1000000 --layouts compact,packed-setex --bucket-bits 13 \
            --id-bits $ids --user-index none,packed,set --sessions-per-user $per \
            --out analysis/runs/users-1m-$ids-$per
        done
        $sp bench memory --sessions 1000000 --emulate 100000000 --layouts compact --bucket-bits 20 \
          --id-bits $ids --user-index none,packed --out analysis/runs/users-100m-emulated-$ids
      done
      # What the index adds to each operation's server CPU.
      $sp bench throughput --layouts compact,packed-setex --user-index --sessions 50000 \
        --out analysis/runs/throughput-users ;;
    tokens)
      # The advisor's bucket count (~122 tokens a bucket), and 2^15 (~30).
      $sp bench tokens --tokens 1000000 --consume 100000 --out analysis/runs/tokens
      $sp bench tokens --tokens 1000000 --consume 100000 --bucket-bits 15 \
        --out analysis/runs/tokens-2-15 ;;
    ratelimit) $sp bench ratelimit --clients 100000 --out analysis/runs/ratelimit ;;
    viewed)
      # 1M sessions with 25 items each, then 500k views, against the book.
      $sp bench viewed --sessions 1000000 --views 500000 --out analysis/runs/viewed
      # 20,000 sessions: the book's global login: and recent: keys small.
      $sp bench viewed --sessions 20000 --views 200000 --out analysis/runs/viewed-20k ;;
    locks) $sp bench locks --locks 100000 --cycles 200000 --out analysis/runs/locks ;;
    tower)
      # sessionpack's tower-sessions store beside the peer crate, built in.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      $sp bench tower --sessions 200000 --dictionary --out analysis/tower
      cargo build --release --quiet -p sessionpack-cli ;;
    growth-instructions) scripts/growth-instructions.sh ;;
    tower-growing)
      # The store as TowerStore::connect opens it (buckets that grow)
      # beside the advisor's fixed count and the peer crate, interleaved.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      # Five rounds: the first creates while the growing store splits, the
      # other four at a steady size (its report shows creates by round).
      $sp bench tower --sessions 200000 --rounds 5 --profiles axum-login-digest,axum-login-app \
        --growing --out analysis/tower/growing
      cargo build --release --quiet -p sessionpack-cli ;;
    quickstart)
      # What TowerStore::connect gives (growing buckets, records packed with
      # a learned dictionary) beside the fixed unpacked store and the peer
      # crate, at the server's default limits, on Redis 7.0 and Valkey
      # 9.1.2: the app session, random text, a shop cart, an OAuth login.
      quickstart quickstart axum-login-app,axum-login-app-text,shop-cart,oauth-login ;;
    quickstart-tenant)
      # The same for a multi-tenant app's login, whose user and tenant are
      # UUIDs (lifted as 16 bytes each from record format 8).
      quickstart quickstart-tenant tenant-login ;;
    quickstart-oidc)
      # The same for a login that keeps its id token, a JSON Web Token
      # (its header and claims kept decoded from record format 9).
      quickstart quickstart-oidc oidc-login ;;
    day)
      # A day of traffic, compressed, store by store on the same server
      # (the defaults of `sessionpack bench day --help`).
      # Through tower-sessions, then actix-session, on each server.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      $sp bench day --out analysis/day/redis-7.0
      $sp bench day --framework actix --out analysis/day/actix/redis-7.0
      while read -r name path; do
        SESSIONPACK_REDIS_SERVER=$path $sp bench day --out "analysis/day/$name"
        SESSIONPACK_REDIS_SERVER=$path $sp bench day --framework actix \
          --out "analysis/day/actix/$name"
      done < <(scripts/ensure-servers.sh redis-8.0.6 valkey-9.1.2)
      cargo build --release --quiet -p sessionpack-cli ;;
    actix)
      # sessionpack's actix-session store beside actix-session's own Redis
      # store, built in.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      $sp bench actix --sessions 1000000 --rounds 3 --dictionary --out analysis/actix
      cargo build --release --quiet -p sessionpack-cli ;;
    actix-quickstart)
      # What ActixStore::connect gives, and what a user index adds to
      # each call, beside actix-session's own Redis store.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      $sp bench actix --sessions 200000 --rounds 3 --profiles user-id-stamps,app --quickstart \
        --out analysis/actix/quickstart
      cargo build --release --quiet -p sessionpack-cli ;;
    actix-concurrency)
      # The same calls with 4, 16 and 64 in flight: the server's reads and
      # writes are shared by the calls that arrive together, so its cost
      # per call depends on how fast each client sends them.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      for calls in 4 16 64; do
        $sp bench actix --sessions 200000 --rounds 3 --profiles user-id --concurrency $calls \
          --out analysis/actix/concurrency-$calls
      done
      cargo build --release --quiet -p sessionpack-cli ;;
    compact)
      for ids in 160 128; do
        $sp bench memory --sessions 1000000 --layouts compact,bucketed --bucket-bits 13,14 \
          --id-bits $ids --out analysis/runs/compact-1m-$ids
        $sp bench memory --sessions 1000000 --emulate 100000000 --layouts compact \
          --bucket-bits 20 --id-bits $ids --out analysis/runs/compact-100m-emulated-$ids
      done ;;
    churn)
      $sp bench churn --sessions 1000000 --rounds 3 --out analysis/runs/churn
      while read -r name path; do
        [ "$name" = redis-7.4.1 ] || continue
        SESSIONPACK_REDIS_SERVER=$path $sp bench churn --sessions 1000000 --rounds 3 \
          --out "analysis/runs/churn-$name"
      done < <(scripts/ensure-servers.sh) ;;
    tower-servers)
      # The app's two session shapes, packed and not, beside the peer crate
      # on every server users run: 100k sessions, one round.
      cargo build --release --quiet -p sessionpack-cli --features peer-bench
      while read -r name path; do
        SESSIONPACK_REDIS_SERVER=$path $sp bench tower --sessions 100000 --rounds 1 \
          --profiles axum-login-app,axum-login-app-text --dictionary --out "analysis/tower/$name"
      done < <(scripts/ensure-servers.sh ${SESSIONPACK_ANALYSIS_SERVERS:-})
      cargo build --release --quiet -p sessionpack-cli ;;
    servers)
      while read -r name path; do
        SESSIONPACK_REDIS_SERVER=$path $sp bench memory --sessions 1000000 --bucket-bits 14 \
          --out "analysis/runs/1m-$name"
      done < <(scripts/ensure-servers.sh ${SESSIONPACK_ANALYSIS_SERVERS:-}) ;;
    server-expiry)
      # The compact layout swept against the same buckets with their fields
      # expired by the server, at 1M sessions (160- and 128-bit ids), on
      # Redis 7.4.1 and 8.0.6 and on Valkey 9.1.2 (which converts such
      # buckets: measured anyway); each operation's server CPU on the two
      # Redis servers.
      while read -r name path; do
        for ids in 160 128; do
          SESSIONPACK_REDIS_SERVER=$path $sp bench memory --sessions 1000000 \
            --layouts compact,compact-server-expiry --bucket-bits 13 --id-bits $ids \
            --out "analysis/runs/server-expiry-1m-$ids-$name"
        done
        case "$name" in
          redis-*)
            SESSIONPACK_REDIS_SERVER=$path $sp bench throughput --layouts compact,compact-server-expiry \
              --sessions 50000 --out "analysis/runs/throughput-server-expiry-$name" ;;
        esac
      done < <(scripts/ensure-servers.sh ${SESSIONPACK_ANALYSIS_SERVERS:-redis-7.4.1 redis-8.0.6 valkey-9.1.2}) ;;
    check)
      {
        echo "# The advisor's model against measured runs"
        echo
        echo "Produced by \`scripts/analysis.sh check\`, which runs \`sessionpack advise --check\` on each report below."
        for run in 1m 10m 10m-json-setex 100m-emulated 100m compact-1m-160 compact-1m-128 \
          compact-100m-emulated-160 compact-100m-emulated-128 identities-1m \
          identities-100m-emulated; do
          [ -f analysis/runs/$run/report.json ] || continue
          echo
          $sp advise --check analysis/runs/$run/report.json
        done
      } > analysis/advisor-check.md ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
