//! `sessionpack bench sweep`: reclaim rate of the bucketed, compact and
//! growing compact sweepers against the book's cleanup, and their server
//! CPU per session beside what Redis's own active expiry spends per key of
//! a key-per-session store (what the peers pay), on the same server in the
//! same run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::baselines::{BookLoginHash, Encoding, KeyPerSession, LayoutKind};
use crate::harness::info::{ServerInfo, expired_keys, server_cpu_secs};
use sessionpack::error::{Error, Result};
use sessionpack::session::layout::{Compact, CompactConfig};
use sessionpack::session::store::Store;
use sessionpack::session::sweep::{SweepConfig, Sweeper};

/// Arguments of `sessionpack bench sweep`.
#[derive(Debug, Args)]
pub struct SweepBenchArgs {
    #[command(flatten)]
    target: Target,
    /// Expired sessions to load into each layout.
    #[arg(long, default_value_t = 1_000_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Directory for sweep.json and sweep.md.
    #[arg(long, default_value = "results/sweep")]
    out: PathBuf,
}

/// One scenario's figures for both cleaners.
#[derive(Debug, Serialize)]
struct Scenario {
    name: &'static str,
    expired: u64,
    live: u64,
    bucketed_reclaimed: u64,
    bucketed_secs: f64,
    /// Server CPU (INFO cpu delta) per session reclaimed, in microseconds.
    bucketed_cpu_us: f64,
    book_reclaimed: u64,
    book_secs: f64,
    book_cpu_us: f64,
    compact_reclaimed: u64,
    compact_secs: f64,
    compact_cpu_us: f64,
    growing_reclaimed: u64,
    growing_secs: f64,
    growing_cpu_us: f64,
    /// Buckets the growing store held before the sweep, and the pairs of
    /// them it merged as they emptied.
    growing_buckets: u64,
    growing_merges: u64,
    /// Keys of a key-per-session store (packed-setex) Redis's active
    /// expiry removed while the server's CPU was read, with no client
    /// sending anything but `INFO`, and its CPU per key.
    redis_expired: u64,
    redis_secs: f64,
    redis_cpu_us: f64,
}

impl Scenario {
    fn bucketed_rate(&self) -> f64 {
        self.bucketed_reclaimed as f64 / self.bucketed_secs
    }

    fn book_rate(&self) -> f64 {
        self.book_reclaimed as f64 / self.book_secs
    }

    fn compact_rate(&self) -> f64 {
        self.compact_reclaimed as f64 / self.compact_secs
    }

    fn growing_rate(&self) -> f64 {
        self.growing_reclaimed as f64 / self.growing_secs
    }
}

#[derive(Debug, Serialize)]
struct SweepBench {
    command: String,
    redis_version: String,
    bucket_bits: u8,
    compact_bucket_bits: u8,
    scenarios: Vec<Scenario>,
}

/// Loads `expired` sessions that live one second and `live` that live an
/// hour, interleaved, then waits until the short ones have expired.
/// The stores run no sweeper of their own: the bench's sweepers are timed.
async fn load<L>(layout: &L, expired: u64, live: u64) -> Result<()>
where
    L: sessionpack::session::layout::Layout + sessionpack::session::sweep::Sweepable,
{
    load_living(layout, expired, live, Duration::from_secs(1)).await?;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    Ok(())
}

/// Loads `expired` sessions that live `short` and `live` that live an
/// hour, interleaved.
async fn load_living<L>(layout: &L, expired: u64, live: u64, short: Duration) -> Result<()>
where
    L: sessionpack::session::layout::Layout + sessionpack::session::sweep::Sweepable,
{
    let short: Store<&L, ()> = Store::new(layout).without_sweeper().with_ttl(short);
    let long: Store<&L, ()> = Store::new(layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let batch: Vec<(u64, ())> = (0..5_000u64).map(|i| (1 << 20 | i, ())).collect();
    let (mut s, mut l) = (0, 0);
    while s < expired || l < live {
        let take = (expired - s).min(batch.len() as u64) as usize;
        short.create_many(&batch[..take]).await?;
        s += take as u64;
        let take = (live - l).min(batch.len() as u64) as usize;
        long.create_many(&batch[..take]).await?;
        l += take as u64;
    }
    Ok(())
}

/// Loads `expired` keys of a key-per-session store (packed-setex, one key
/// per session with its expiry set, as the peers keep them) that expire
/// together after the load, and `live` that do not; then reads the
/// server's CPU while Redis's active expiry removes them, from the first
/// key it expires until 99% of them are gone (or none has gone for
/// [`EXPIRY_STALL`]: among many live keys, Redis's sampling stops looking
/// once few of the keys it samples have expired, and the last ones linger
/// until something reads them), with no client sending anything but
/// `INFO`. Returns the keys expired in that window, its seconds, and the
/// CPU seconds spent.
async fn redis_expiry<C>(conn: &mut C, expired: u64, live: u64) -> Result<(u64, f64, f64)>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let peer = KeyPerSession::new(conn.clone(), Encoding::PackedSetex);
    // Long enough that none expires during the load: twice the load's
    // time measured on a first small batch, and a margin.
    let started = Instant::now();
    load_living(&peer, expired.min(10_000), 0, Duration::from_secs(3600)).await?;
    let per_key = started.elapsed().as_secs_f64() / expired.min(10_000) as f64;
    flush_all(conn).await?;
    let lifetime = Duration::from_secs_f64(per_key * (expired + live) as f64 * 2.0 + 5.0);
    let before = expired_keys(conn).await?;
    load_living(&peer, expired, live, lifetime).await?;
    let poll = Duration::from_millis(100);
    let deadline = Instant::now() + lifetime + Duration::from_secs(600);
    let (keys0, cpu0, t0) = loop {
        let keys = expired_keys(conn).await?;
        if keys > before {
            break (keys, server_cpu_secs(conn).await?, Instant::now());
        }
        if Instant::now() > deadline {
            return Err(Error::Config("Redis expired no key of the load".into()));
        }
        tokio::time::sleep(poll).await;
    };
    // The window ends at the last key removed: a stall's idle CPU is not
    // charged to the keys.
    let (mut last, mut moved, mut cpu_then) = (keys0, Instant::now(), cpu0);
    loop {
        let keys = expired_keys(conn).await?;
        if keys > last {
            let cpu = server_cpu_secs(conn).await?;
            (last, moved, cpu_then) = (keys, Instant::now(), cpu);
        }
        if (keys - before) * 100 >= expired * 99 || moved.elapsed() > EXPIRY_STALL {
            let secs = moved.duration_since(t0).as_secs_f64();
            return Ok((last - keys0, secs, cpu_then - cpu0));
        }
        if Instant::now() > deadline {
            return Err(Error::Config(format!(
                "Redis expired {} of {expired} keys in the time allowed",
                keys - before
            )));
        }
        tokio::time::sleep(poll).await;
    }
}

/// How long Redis's active expiry may remove no key before the bench takes
/// what it removed as all it will.
const EXPIRY_STALL: Duration = Duration::from_secs(10);

pub(super) async fn run(args: SweepBenchArgs) -> Result<()> {
    // It compares with the book's design, which a cluster cannot run.
    let (target, url) = args.target.connect_server("bench sweep").await?;
    target.flush().await?;
    let mut conn = target.open(&url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let bits = advisor::recommend_bits(args.sessions, &server.limits, DEFAULT_MAX_CONVERTED);

    let bucketed = match LayoutKind::Bucketed.open(conn.clone(), bits).await? {
        crate::baselines::AnyLayout::Bucketed(b) => b,
        _ => return Err(Error::Config("bucketed layout expected".into())),
    };
    let book = BookLoginHash::book(conn.clone(), "sp");
    let sweeper = Sweeper::new(bucketed.clone(), SweepConfig::default());
    let compact_bits =
        advisor::recommend_compact_bits(args.sessions, &server.limits, DEFAULT_MAX_CONVERTED);
    let compact = Compact::new(
        conn.clone(),
        CompactConfig::new(compact_bits).with_namespace("spc"),
    )
    .await?;
    let compact_sweeper = Sweeper::new(compact.clone(), SweepConfig::default());
    let growing =
        Compact::new(conn.clone(), CompactConfig::growing().with_namespace("spg")).await?;
    let growing_sweeper = Sweeper::new(growing.clone(), SweepConfig::default());
    let n = args.sessions;
    let mut scenarios = Vec::new();
    for (name, expired, live) in [("all expired", n, 0), ("half expired", n / 2, n / 2)] {
        flush_all(&mut conn).await?;
        load(&bucketed, expired, live).await?;
        let cpu = server_cpu_secs(&mut conn).await?;
        let started = Instant::now();
        let report = sweeper.sweep_range(0..bucketed.buckets().count()).await?;
        let bucketed_secs = started.elapsed().as_secs_f64();
        let bucketed_cpu = server_cpu_secs(&mut conn).await? - cpu;

        flush_all(&mut conn).await?;
        load(&book, expired, live).await?;
        let cpu = server_cpu_secs(&mut conn).await?;
        let started = Instant::now();
        // The book's cleanup keeps the newest `limit`: here, the live ones.
        let book_reclaimed = book.clean_sessions(live).await?;
        let book_secs = started.elapsed().as_secs_f64();
        let book_cpu = server_cpu_secs(&mut conn).await? - cpu;

        flush_all(&mut conn).await?;
        load(&compact, expired, live).await?;
        let cpu = server_cpu_secs(&mut conn).await?;
        let started = Instant::now();
        let compact_report = compact_sweeper
            .sweep_range(0..compact_sweeper.units())
            .await?;
        let compact_secs = started.elapsed().as_secs_f64();
        let compact_cpu = server_cpu_secs(&mut conn).await? - cpu;

        // A growing store, grown by the load; its sweep merges the
        // buckets that empty.
        flush_all(&mut conn).await?;
        load(&growing, expired, live).await?;
        let mut growing_buckets = 0;
        for group in 0..growing_sweeper.units() {
            growing_buckets += growing.group_buckets(group).await?.len() as u64;
        }
        let cpu = server_cpu_secs(&mut conn).await?;
        let started = Instant::now();
        let growing_report = growing_sweeper
            .sweep_range(0..growing_sweeper.units())
            .await?;
        let growing_secs = started.elapsed().as_secs_f64();
        let growing_cpu = server_cpu_secs(&mut conn).await? - cpu;

        flush_all(&mut conn).await?;
        let (redis_expired, redis_secs, redis_cpu) = redis_expiry(&mut conn, expired, live).await?;
        let scenario = Scenario {
            name,
            expired,
            live,
            bucketed_reclaimed: report.reclaimed,
            bucketed_secs,
            bucketed_cpu_us: bucketed_cpu * 1e6 / report.reclaimed.max(1) as f64,
            book_reclaimed,
            book_secs,
            book_cpu_us: book_cpu * 1e6 / book_reclaimed.max(1) as f64,
            compact_reclaimed: compact_report.reclaimed,
            compact_secs,
            compact_cpu_us: compact_cpu * 1e6 / compact_report.reclaimed.max(1) as f64,
            growing_reclaimed: growing_report.reclaimed,
            growing_secs,
            growing_cpu_us: growing_cpu * 1e6 / growing_report.reclaimed.max(1) as f64,
            growing_buckets,
            growing_merges: growing_report.merges,
            redis_expired,
            redis_secs,
            redis_cpu_us: redis_cpu * 1e6 / redis_expired.max(1) as f64,
        };
        println!(
            "{name}: bucketed 2^{bits} sweeper {:.0}/s, compact 2^{compact_bits} {:.0}/s, \
             growing {:.0}/s, book's clean_sessions {:.0}/s: {:.1}x, {:.1}x and {:.1}x",
            scenario.bucketed_rate(),
            scenario.compact_rate(),
            scenario.growing_rate(),
            scenario.book_rate(),
            scenario.bucketed_rate() / scenario.book_rate(),
            scenario.compact_rate() / scenario.book_rate(),
            scenario.growing_rate() / scenario.book_rate()
        );
        println!(
            "{name}: server CPU per session reclaimed: compact {:.2} µs, growing {:.2} µs; \
             Redis's active expiry of packed-setex keys {:.2} µs a key",
            scenario.compact_cpu_us, scenario.growing_cpu_us, scenario.redis_cpu_us
        );
        if report.reclaimed != expired
            || book_reclaimed != expired
            || compact_report.reclaimed != expired
            || growing_report.reclaimed != expired
        {
            return Err(Error::Config(format!(
                "{name}: expected {expired} reclaimed, got {} (bucketed), {} (compact), {} \
                 (growing) and {book_reclaimed} (book)",
                report.reclaimed, compact_report.reclaimed, growing_report.reclaimed
            )));
        }
        scenarios.push(scenario);
    }
    let result = SweepBench {
        command: super::bench_memory::command_line(),
        redis_version: server.name(),
        bucket_bits: bits,
        compact_bucket_bits: compact_bits,
        scenarios,
    };
    let mut md = format!(
        "# Reclaiming expired sessions\n\nProduced by `{}` ({}). The bucketed sweeper runs over 2^{} buckets, one script per bucket step, 256 per pipeline; the compact sweeper over 2^{} buckets, one script per group of 128 buckets its index names as due, 64 groups per pipeline; the growing compact store (`CompactConfig::growing()`, grown by the load from 16 buckets) one script per index of up to 64 buckets, then merges the buckets that emptied; the book's `clean_sessions` removes 100 tokens per three round trips; a key-per-session store (packed-setex, as the peers keep sessions) is cleaned by Redis's own active expiry, measured from the first key it expires until 99% are gone or none has gone for 10 s (the last ones linger among live keys), with no client sending anything but `INFO` every 100 ms. Server CPU is the `INFO cpu` (user + sys) delta over the cleanup, per session reclaimed.\n\n| scenario | cleaner | sessions reclaimed | seconds | sessions/s | vs book | server CPU µs/session |\n|---|---|---:|---:|---:|---:|---:|\n",
        result.command, result.redis_version, bits, compact_bits
    );
    for s in &result.scenarios {
        md += &format!(
            "| {} ({} expired, {} live) | compact sweeper | {} | {:.2} | {:.0} | {:.1}x | {:.2} |\n| | growing compact sweeper ({} buckets, {} merges) | {} | {:.2} | {:.0} | {:.1}x | {:.2} |\n| | bucketed sweeper | {} | {:.2} | {:.0} | {:.1}x | {:.2} |\n| | book's clean_sessions | {} | {:.2} | {:.0} | | {:.2} |\n| | Redis's active expiry (packed-setex keys) | {} | {:.2} | {:.0} | | {:.2} |\n",
            s.name,
            s.expired,
            s.live,
            s.compact_reclaimed,
            s.compact_secs,
            s.compact_rate(),
            s.compact_rate() / s.book_rate(),
            s.compact_cpu_us,
            s.growing_buckets,
            s.growing_merges,
            s.growing_reclaimed,
            s.growing_secs,
            s.growing_rate(),
            s.growing_rate() / s.book_rate(),
            s.growing_cpu_us,
            s.bucketed_reclaimed,
            s.bucketed_secs,
            s.bucketed_rate(),
            s.bucketed_rate() / s.book_rate(),
            s.bucketed_cpu_us,
            s.book_reclaimed,
            s.book_secs,
            s.book_rate(),
            s.book_cpu_us,
            s.redis_expired,
            s.redis_secs,
            s.redis_expired as f64 / s.redis_secs,
            s.redis_cpu_us
        );
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::to_string_pretty(&result).map_err(|e| Error::Config(e.to_string()))?;
    for (name, text) in [("sweep.json", json), ("sweep.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Empties the server before the next scenario. SYNC: a flush that frees
/// in the background (Valkey 9's default) would put its CPU into the next
/// figure.
async fn flush_all<C: redis::aio::ConnectionLike>(conn: &mut C) -> Result<()> {
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query_async(conn).await?;
    Ok(())
}
