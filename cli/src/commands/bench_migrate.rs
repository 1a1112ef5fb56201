//! `sessionpack bench migrate`: what switching a tower-sessions-redis-store
//! or actix-session app to sessionpack costs. Fills a server with the peer
//! crate's keys as it writes them, copies them ([`crate::migrate`]), then
//! closes (deletes the old keys), measuring time, sessions per second, the
//! server's CPU per session and `used_memory` at each stage, beside the
//! advisor's prediction for the store left.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use tower_sessions_core_014::session::{Id, Record};

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED, Workload};
use crate::baselines::LayoutKind;
use crate::harness::info::{ServerInfo, server_cpu_secs};
use crate::migrate::{self, Plan, Report};
use crate::profile::Profile;
use sessionpack::error::{Error, Result};
use sessionpack::json_map;
use sessionpack::limits::ListpackLimits;
use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::{CompactConfig, IdWidth};

/// Arguments of `sessionpack bench migrate`.
#[derive(Debug, Args)]
pub struct MigrateBenchArgs {
    #[command(flatten)]
    target: Target,
    /// Peer sessions to write, then copy.
    #[arg(long, default_value_t = 1_000_000, value_parser = super::count::positive)]
    sessions: u64,
    /// The sessions' data.
    #[arg(long, default_value = "axum-login-digest")]
    profile: Profile,
    /// log2 of the compact layout's bucket count (default: the advisor's
    /// pick for a tower-sessions store of this many sessions).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    compact_bits: Option<u8>,
    /// The store whose keys are copied.
    #[arg(long, value_enum, default_value = "tower-sessions-redis-store")]
    from: Peer,
    /// Keys per SCAN of the copy.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Directory for migrate.json and migrate.md.
    #[arg(long, default_value = "results/migrate")]
    out: PathBuf,
}

/// A key-per-session store whose keys a migration copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
enum Peer {
    /// tower-sessions-redis-store 0.16: `SET <id> <MessagePack Record> NX
    /// EXAT`.
    TowerSessionsRedisStore,
    /// actix-session 0.11's `RedisSessionStore`: `SET <64-character key>
    /// <JSON object of JSON texts> NX EX`.
    ActixSession,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Self::TowerSessionsRedisStore => "tower-sessions-redis-store",
            Self::ActixSession => "actix-session",
        }
    }

    fn source(self) -> Source {
        match self {
            Self::TowerSessionsRedisStore => Source::tower_sessions_redis_store(),
            Self::ActixSession => Source::actix_session(),
        }
    }

    /// Queues the `SET` this store sends for a new session of `data`
    /// expiring at `at` (unix seconds).
    fn write(
        self,
        pipe: &mut redis::Pipeline,
        data: HashMap<String, Value>,
        at: i64,
    ) -> Result<()> {
        match self {
            Self::TowerSessionsRedisStore => {
                let record = Record {
                    id: Id(rand::random()),
                    data,
                    expiry_date: OffsetDateTime::from_unix_timestamp(at)
                        .map_err(|e| Error::Config(e.to_string()))?,
                };
                pipe.cmd("SET")
                    .arg(record.id.to_string())
                    .arg(rmp_serde::to_vec(&record)?)
                    .arg("NX")
                    .arg("EXAT")
                    .arg(at);
            }
            Self::ActixSession => {
                // Its state: each value a JSON text, the map a JSON object.
                let state: HashMap<String, String> = data
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect();
                let key = rand::distr::SampleString::sample_string(
                    &rand::distr::Alphanumeric,
                    &mut rand::rng(),
                    64,
                );
                let ttl = at - OffsetDateTime::now_utc().unix_timestamp();
                pipe.cmd("SET")
                    .arg(key)
                    .arg(serde_json::to_vec(&state).map_err(|e| Error::Config(e.to_string()))?)
                    .arg("NX")
                    .arg("EX")
                    .arg(ttl.max(1));
            }
        }
        pipe.ignore();
        Ok(())
    }
}

/// One pass of the migration, measured.
#[derive(Debug, Serialize)]
struct Pass {
    seconds: f64,
    sessions_per_sec: f64,
    server_cpu_us_per_session: f64,
    report: Report,
}

/// The run.
#[derive(Debug, Serialize)]
struct Run {
    from: Peer,
    profile: Profile,
    sessions: u64,
    record_bytes_mean: f64,
    compact_bits: u8,
    /// `used_memory` of the empty server.
    empty_bytes: u64,
    /// The peer's keys alone, per session.
    peer_bytes_per_session: f64,
    copy: Pass,
    /// Both stores and the takeover's marks, per session, after the copy.
    both_bytes_per_session: f64,
    /// The highest `used_memory` seen after a batch of the copy, per
    /// session.
    peak_bytes_per_session: f64,
    close: Pass,
    /// sessionpack alone after the close, per session.
    sessionpack_bytes_per_session: f64,
    predicted_bytes_per_session: f64,
}

pub(super) async fn run(args: MigrateBenchArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench migrate").await?;
    target.flush().await?;
    let mut conn = target.open(&url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let limits = ListpackLimits::read(&mut conn).await?;
    let empty = used_memory(&mut conn).await?;
    let n = args.sessions;

    println!("writing {n} sessions as {} writes them", args.from.name());
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let mut sizes = Vec::new();
    for start in (0..n).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1000).min(n) {
            let data = args.profile.data(i);
            if i < 1000 {
                sizes.push(json_map::encode(&data)?.len() as u64);
            }
            let at = now + 86_400 + (i % 3_600) as i64;
            args.from.write(&mut pipe, data, at)?;
        }
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let peer = settled_memory(&mut conn).await?;
    let per = |bytes: u64| bytes.saturating_sub(empty) as f64 / n as f64;

    let bits = args.compact_bits.unwrap_or_else(|| {
        advisor::recommend_compact_bits_filled(
            n,
            &limits,
            DEFAULT_MAX_CONVERTED,
            advisor::TOWER_MAX_MEAN_FILL,
        )
    });
    let store = TowerStore::new(
        target.open(&url).await?,
        CompactConfig::new(bits).with_id_width(IdWidth::Bits128),
    )
    .await?
    .without_sweeper();
    let plan = Plan {
        source: args.from.source(),
        dry_run: false,
        delete_copied: false,
        batch: args.batch,
        restart: true,
        stop_after_batches: None,
    };
    println!("copying into compact 2^{bits}");
    let copy = measured(&mut conn, store.clone(), &plan, n).await?;
    let both = copy.report.memory_after;
    println!("closing (deleting the old keys)");
    let close_plan = Plan {
        delete_copied: true,
        ..plan
    };
    let close = measured(&mut conn, store, &close_plan, n).await?;
    if !close.report.closed {
        return Err(Error::Config(format!(
            "the close left keys behind: {:?}",
            close.report
        )));
    }
    let after = settled_memory(&mut conn).await?;
    let mean = sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64;
    let workload = Workload {
        identity: 0,
        attrs_bytes: (mean.round() as u64).saturating_sub(1),
        limits,
        id_bytes: 16,
        ..Workload::new(n)
    };
    let predicted = advisor::predict(LayoutKind::Compact, bits, &workload).bytes_per_session;
    let run = Run {
        from: args.from,
        profile: args.profile,
        sessions: n,
        record_bytes_mean: mean,
        compact_bits: bits,
        empty_bytes: empty,
        peer_bytes_per_session: per(peer),
        both_bytes_per_session: per(both),
        peak_bytes_per_session: per(copy.report.memory_peak),
        copy,
        close,
        sessionpack_bytes_per_session: per(after),
        predicted_bytes_per_session: predicted,
    };
    target.flush().await?;
    let md = markdown(&server, &run);
    print!("{md}");
    super::write_report(&args.out, "migrate", &server.name(), &[&run], &md)
}

/// Runs one pass, with the server's CPU across it.
async fn measured(
    conn: &mut sessionpack::Connection,
    store: TowerStore<sessionpack::Connection>,
    plan: &Plan,
    n: u64,
) -> Result<Pass> {
    let cpu = server_cpu_secs(conn).await?;
    let start = Instant::now();
    let report = migrate::run(conn.clone(), store, plan, |_| {}).await?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = server_cpu_secs(conn).await? - cpu;
    Ok(Pass {
        seconds,
        sessions_per_sec: n as f64 / seconds,
        server_cpu_us_per_session: cpu * 1e6 / n as f64,
        report,
    })
}

/// `used_memory` once the server has settled after a mass delete: its
/// keyspace dicts shrink in its cron, a rehash at a time, and lazy frees
/// finish in the background. Waits (up to a minute) until two readings
/// half a second apart agree with no rehash under way.
async fn settled_memory(conn: &mut sessionpack::Connection) -> Result<u64> {
    let started = Instant::now();
    let mut last = used_memory(conn).await?;
    loop {
        crate::harness::info::wait_for_rehash(conn, std::time::Duration::from_secs(60)).await?;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = used_memory(conn).await?;
        if now == last || started.elapsed().as_secs() > 60 {
            return Ok(now);
        }
        last = now;
    }
}

async fn used_memory(conn: &mut sessionpack::Connection) -> Result<u64> {
    let info = crate::harness::info::info(conn, "memory").await?;
    Ok(info
        .get("used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

fn markdown(server: &ServerInfo, run: &Run) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Switching {} {} sessions to sessionpack\n\n\
         {}; `{}`; profile `{}` ({:.0}-byte records); compact 2^{}; \
         figures are `used_memory` per session above the empty server.\n",
        run.sessions,
        run.from.name(),
        server.name(),
        super::bench_memory::command_line(),
        run.profile,
        run.record_bytes_mean,
        run.compact_bits
    );
    let _ = writeln!(md, "| stage | bytes/session |\n|---|---:|");
    let _ = writeln!(
        md,
        "| the peer's keys | {:.1} |",
        run.peer_bytes_per_session
    );
    let _ = writeln!(
        md,
        "| highest during the copy | {:.1} |",
        run.peak_bytes_per_session
    );
    let _ = writeln!(
        md,
        "| after the copy (both, and the marks) | {:.1} |",
        run.both_bytes_per_session
    );
    let _ = writeln!(
        md,
        "| after the close (sessionpack alone) | {:.1} |",
        run.sessionpack_bytes_per_session
    );
    let _ = writeln!(
        md,
        "| the advisor's prediction | {:.1} |\n",
        run.predicted_bytes_per_session
    );
    let _ = writeln!(
        md,
        "| pass | seconds | sessions/s | server CPU µs/session | outcomes |\n|---|---:|---:|---:|---|"
    );
    for (name, pass) in [("copy", &run.copy), ("close", &run.close)] {
        let outcomes: Vec<String> = pass
            .report
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            md,
            "| {name} | {:.1} | {:.0} | {:.2} | {}{} |",
            pass.seconds,
            pass.sessions_per_sec,
            pass.server_cpu_us_per_session,
            outcomes.join(", "),
            if pass.report.deleted > 0 {
                format!(", deleted {}", pass.report.deleted)
            } else {
                String::new()
            }
        );
    }
    md
}
