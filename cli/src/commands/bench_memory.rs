//! `sessionpack bench memory`: the memory benchmark, the project's main job.

use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::baselines::LayoutKind;
use crate::harness::info::ServerInfo;
use crate::harness::memory::{
    self, IdentityForm, MemoryReport, Progress, RunResult, RunSpec, UserIndexSpec, human_count,
};
use crate::harness::{plot, report};
use sessionpack::error::{Error, Result};

/// Arguments of `sessionpack bench memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions to load per layout.
    #[arg(long, default_value_t = 1_000_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Measurement points per layout (evenly spaced up to --sessions).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    steps: u32,
    /// Layouts to measure (default: all).
    #[arg(long, value_delimiter = ',', value_parser = super::layout_kind())]
    layouts: Vec<LayoutKind>,
    /// Bucket counts (log2) for the bucketed layout (default: the advisor's
    /// recommendation for the population measured).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=24))]
    bucket_bits: Vec<u8>,
    /// Bits in a session id for the bucketed layouts: 160 (the default) or
    /// 128.
    #[arg(long, default_value_t = 160, value_parser = super::advise::id_bits)]
    id_bits: u16,
    /// Emulate this many sessions: the bucketed layout's sessions go into
    /// --sessions / --emulate of the buckets, so each bucket holds what it
    /// would at this size.
    #[arg(long, value_parser = super::count::positive)]
    emulate: Option<u64>,
    /// Identity forms to measure each layout with: `int` (the default),
    /// `uuid`, `name-N` (N-byte names).
    #[arg(long, value_delimiter = ',', default_value = "int")]
    identities: Vec<IdentityForm>,
    /// Per-user indexes to measure each layout with: `none` (the default),
    /// `packed` (the compact layout's own, as many buckets as the layout
    /// has), `packed:BITS`, `set` (a Spring-Session-style SET per user).
    #[arg(long, value_delimiter = ',', default_value = "none")]
    user_index: Vec<UserIndexSpec>,
    /// Consecutive sessions given to each user.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    sessions_per_user: u32,
    /// Session lifetime in seconds (long enough that none expires).
    #[arg(long, default_value_t = 30 * 24 * 3600)]
    ttl_secs: u64,
    /// Directory for report.json, points.csv, summary.md and the plots.
    #[arg(long, default_value = "results/memory")]
    out: PathBuf,
}

struct Bars {
    bar: Option<ProgressBar>,
}

impl Progress for Bars {
    fn start(&mut self, spec: &RunSpec, sessions: u64) {
        let bar = ProgressBar::new(sessions);
        bar.set_style(
            ProgressStyle::with_template("{msg:40} {bar:40} {pos}/{len} ({per_sec}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(spec.label());
        self.bar = Some(bar);
    }

    fn advance(&mut self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    fn finish(&mut self, result: &RunResult) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if let Some(p) = result.last() {
            let census = p
                .census
                .map(|c| format!(", {} of {} buckets left listpack", c.converted, c.buckets))
                .unwrap_or_default();
            let replication = if p.not_sessions > 0 {
                format!(
                    " (and {:.1} B/session of replication backlog and buffers, not counted)",
                    p.not_sessions as f64 / p.sessions.max(1) as f64
                )
            } else {
                String::new()
            };
            println!(
                "{:40} {:>6} sessions: {:6.1} B/session used_memory{replication}, {:6.1} B/session RSS, frag {:.2}, {:.0} sessions/s{}",
                result.label,
                human_count(p.sessions),
                p.bytes_per_session,
                p.rss_per_session,
                p.sample.mem_fragmentation_ratio,
                result.load_rate,
                census
            );
        }
    }
}

/// The runs asked for, bucketed ones once per bucket count.
fn plan(args: &MemoryArgs, server: &ServerInfo) -> Vec<RunSpec> {
    let layouts = if args.layouts.is_empty() {
        LayoutKind::ALL.to_vec()
    } else {
        args.layouts.clone()
    };
    let population = args.emulate.unwrap_or(args.sessions);
    let bits_for = |layout: LayoutKind| -> Vec<u8> {
        if !args.bucket_bits.is_empty() {
            return args.bucket_bits.clone();
        }
        let pick = match layout {
            LayoutKind::Compact | LayoutKind::CompactServerExpiry => {
                advisor::recommend_compact_bits
            }
            _ => advisor::recommend_bits,
        };
        vec![pick(population, &server.limits, DEFAULT_MAX_CONVERTED)]
    };
    let mut runs = Vec::new();
    for layout in layouts {
        for &identity in &args.identities {
            for &users in &args.user_index {
                // The packed index is the compact layout's own.
                if matches!(users, UserIndexSpec::Packed { .. }) && layout != LayoutKind::Compact {
                    continue;
                }
                let spec = |bucket_bits, emulated_sessions, id_bits| RunSpec {
                    layout,
                    bucket_bits,
                    emulated_sessions,
                    id_bits,
                    identity,
                    users,
                    sessions_per_user: args.sessions_per_user,
                };
                if layout.is_bucketed() {
                    for b in bits_for(layout) {
                        let emulated = args.emulate.filter(|&e| e > args.sessions);
                        runs.push(spec(Some(b), emulated, args.id_bits));
                    }
                } else if args.emulate.is_none() {
                    runs.push(spec(None, None, 160));
                }
            }
        }
    }
    runs
}

pub(super) async fn run(args: MemoryArgs) -> Result<()> {
    let target = args.target.connect().await?;
    target.flush().await?;
    let mut conn = target.open(&target.primaries[0]).await?;
    let server = ServerInfo::read(&mut conn).await?;
    drop(conn);
    let mut runs = plan(&args, &server);
    if target.is_cluster() && runs.iter().any(|r| r.layout == LayoutKind::BookLoginHash) {
        // Its scripts name a `login:` HASH and a `recent:` ZSET with no
        // common hash tag: two slots, which a cluster refuses.
        println!("book-login-hash is not measured: the book's design cannot run on a cluster");
        runs.retain(|r| r.layout != LayoutKind::BookLoginHash);
    }
    if runs.is_empty() {
        return Err(Error::Config(
            "nothing to measure (emulation applies to the bucketed layout only)".into(),
        ));
    }
    println!(
        "{} ({}), listpack limits {}/{} (hash) {}/{} (zset) from {:?}; {} sessions per layout, {} steps",
        server.name(),
        server.mem_allocator,
        server.limits.hash_entries,
        server.limits.hash_value,
        server.limits.zset_entries,
        server.limits.zset_value,
        server.limits.source,
        human_count(args.sessions),
        args.steps
    );
    let started_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut results = Vec::with_capacity(runs.len());
    let mut bars = Bars { bar: None };
    for (i, spec) in runs.into_iter().enumerate() {
        // A fresh process per layout when the server is ours, so RSS and
        // fragmentation start clean; a named server is only emptied.
        if let (true, Some(local)) = (i > 0, &target.local) {
            local.restart().map_err(super::server_error)?;
        }
        results.push(
            memory::run(
                &target.endpoint,
                &target.options,
                spec,
                args.sessions,
                args.steps,
                args.ttl_secs,
                &mut bars,
            )
            .await?,
        );
    }
    let report = MemoryReport {
        command: command_line(),
        started_at,
        server,
        sessions: args.sessions,
        steps: args.steps,
        runs: results,
        cluster_primaries: target.is_cluster().then_some(target.primaries.len()),
    };
    report::write_all(&report, &args.out)?;
    plot::write_all(&report, &args.out)?;
    println!("\n{}", report::table(&report));
    println!(
        "wrote {}/{{report.json,points.csv,summary.md,bytes_per_session.png,total_memory.png,...}}",
        args.out.display()
    );
    Ok(())
}

/// This process's command line, as `sessionpack ...`.
pub(super) fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("sessionpack".to_owned())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}
