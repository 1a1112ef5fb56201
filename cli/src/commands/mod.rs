//! The command-line tool's commands. The binary only parses arguments and
//! calls [`run`]; everything it does is library code.

use clap::{Parser, Subcommand};

use crate::baselines::LayoutKind;
use sessionpack::error::Result;

mod acl;
mod advise;
mod bench_actix;
mod bench_churn;
mod bench_day;
mod bench_growth;
mod bench_locks;
mod bench_memory;
mod bench_migrate;
mod bench_ratelimit;
mod bench_sweep;
mod bench_throughput;
mod bench_tokens;
mod bench_tower;
mod bench_viewed;
mod count;
mod demo;
mod dictionary;
mod migrate;
mod source_args;
mod store_args;
mod sweep;
mod target;
mod tls_args;
mod users;

pub use target::Target;

/// Parses a layout by its report name (`compact`, `packed-setex`, ...).
fn layout_kind() -> impl clap::builder::TypedValueParser<Value = LayoutKind> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(LayoutKind::EVERY.map(LayoutKind::name)).try_map(
        |name| {
            LayoutKind::EVERY
                .into_iter()
                .find(|kind| kind.name() == name)
                .ok_or_else(|| format!("no layout named {name}"))
        },
    )
}

/// A test server that would not start, as the tool's error.
fn server_error(e: sessionpack_testkit::Error) -> sessionpack::Error {
    sessionpack::Error::Config(e.to_string())
}

/// Web sessions packed into listpack-sized Redis buckets.
#[derive(Debug, Parser)]
#[command(name = "sessionpack", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The tool's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, load, touch, rotate and destroy a few sessions, then show
    /// what Redis holds and how much memory it took.
    Demo(demo::DemoArgs),
    /// Benchmarks: memory per session (the main job) and throughput.
    #[command(subcommand)]
    Bench(Bench),
    /// Sweep a store's expired sessions as a daemon, printing counters
    /// after each pass.
    Sweep(sweep::SweepArgs),
    /// Recommend a bucket count and predict memory for a planned
    /// population, or check the model against a measured report.
    Advise(advise::AdviseArgs),
    /// A user's sessions in a compact store with a user index: list them,
    /// revoke them, or audit the index.
    Users(users::UsersArgs),
    /// Copy the live sessions of a key-per-session store (tower-sessions'
    /// Redis store, or keys of JSON or MessagePack maps) into a sessionpack
    /// tower store, online: same ids, data and expiries; resumable.
    Migrate(migrate::MigrateArgs),
    /// Train the dictionary a tower store packs its sessions' data with,
    /// or store one in a namespace.
    Dictionary(dictionary::DictionaryArgs),
    /// Print the least-privilege ACL rule of a role (the app's store, the
    /// sweeper, the users command) for a namespace.
    Acl(acl::AclArgs),
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// Load N sessions layout by layout and record used_memory, RSS,
    /// fragmentation and the listpack census at each step.
    Memory(bench_memory::MemoryArgs),
    /// Sessions per second per layout and operation, beside redis-benchmark's
    /// SET on the same server.
    Throughput(bench_throughput::ThroughputArgs),
    /// Reclaim rate of the compact and bucketed sweepers against the book's
    /// cleanup.
    Sweep(bench_sweep::SweepBenchArgs),
    /// Memory after rounds of sessions expiring, swept and replaced, beside
    /// memory after the load.
    Churn(bench_churn::ChurnArgs),
    /// A store that splits and merges its buckets, grown from thousands of
    /// sessions to a hundred million and shrunk back, beside fixed bucket
    /// counts: bytes per session at each size, and the server CPU
    /// splitting cost.
    Growth(bench_growth::GrowthArgs),
    /// sessionpack's tower-sessions store beside the peer crate, profile by
    /// profile: bytes, server CPU per call, calls per second.
    Tower(bench_tower::TowerArgs),
    /// A day of traffic replayed through tower-sessions against the
    /// quickstart's store and the peer crate: server CPU per request with
    /// the cleanup of expired sessions, memory, latency at a fixed load.
    Day(bench_day::DayArgs),
    /// sessionpack's actix-session store beside actix-session's
    /// `RedisSessionStore`, profile by profile: memory, server CPU per call
    /// and calls/s through the same trait (the peer with feature
    /// `peer-bench`).
    Actix(bench_actix::ActixArgs),
    /// One-time tokens packed in buckets beside a key per token: bytes per
    /// token, consumes per second, server CPU per consume.
    Tokens(bench_tokens::TokensArgs),
    /// Rate limits: the talk's exact log beside the packed GCRA limiter:
    /// bytes per client, server CPU per check, requests admitted per
    /// window under bursts.
    Ratelimit(bench_ratelimit::RateLimitArgs),
    /// Locks: the talk's lease beside the fenced lock: bytes per lock,
    /// cycles per second, server CPU per acquire and release.
    Locks(bench_locks::LocksArgs),
    /// Switching a tower-sessions-redis-store app: its sessions copied in
    /// and the takeover closed, timed, with server CPU and memory at each
    /// stage.
    Migrate(bench_migrate::MigrateBenchArgs),
    /// Recently viewed items packed beside the sessions against the book's
    /// ZSET per session: bytes per session, views per second, server CPU
    /// per view.
    Viewed(bench_viewed::ViewedArgs),
}

/// Writes a benchmark's report files into `dir` (made if missing): its
/// JSON (`{command, server, runs}`) as `<stem>.json` and `md` as
/// `<stem>.md`.
fn write_report<T: serde::Serialize>(
    dir: &std::path::Path,
    stem: &str,
    server: &str,
    runs: &T,
    md: &str,
) -> Result<()> {
    use sessionpack::error::Error;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", dir.display())))?;
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "command": bench_memory::command_line(),
        "server": server,
        "runs": runs,
    }))
    .map_err(|e| Error::Config(e.to_string()))?;
    for (path, text) in [
        (dir.join(format!("{stem}.json")), json),
        (dir.join(format!("{stem}.md")), md.to_owned()),
    ] {
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The ACL role (`sessionpack acl --role`) a command connects as, for the
/// hint printed when the server refuses it.
pub fn acl_role(cli: &Cli) -> Option<&'static str> {
    match cli.command {
        Command::Sweep(_) => Some("sweeper"),
        Command::Users(_) => Some("users"),
        Command::Migrate(_) => Some("migrate"),
        _ => None,
    }
}

/// Runs one parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(Bench::Memory(args)) => bench_memory::run(args).await,
        Command::Bench(Bench::Throughput(args)) => bench_throughput::run(args).await,
        Command::Bench(Bench::Sweep(args)) => bench_sweep::run(args).await,
        Command::Bench(Bench::Churn(args)) => bench_churn::run(args).await,
        Command::Bench(Bench::Growth(args)) => bench_growth::run(args).await,
        Command::Bench(Bench::Tower(args)) => bench_tower::run(args).await,
        Command::Bench(Bench::Day(args)) => bench_day::run(args).await,
        Command::Bench(Bench::Actix(args)) => bench_actix::run(args).await,
        Command::Bench(Bench::Migrate(args)) => bench_migrate::run(args).await,
        Command::Bench(Bench::Tokens(args)) => bench_tokens::run(args).await,
        Command::Bench(Bench::Ratelimit(args)) => bench_ratelimit::run(args).await,
        Command::Bench(Bench::Viewed(args)) => bench_viewed::run(args).await,
        Command::Bench(Bench::Locks(args)) => bench_locks::run(args).await,
        Command::Sweep(args) => sweep::run(args).await,
        Command::Advise(args) => advise::run(args).await,
        Command::Users(args) => users::run(args).await,
        Command::Acl(args) => acl::run(&args),
        Command::Dictionary(args) => dictionary::run(args).await,
        Command::Migrate(args) => migrate::run(args).await,
    }
}
