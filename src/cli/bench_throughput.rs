//! `sessionpack bench throughput`: sessions per second per layout and
//! operation, as ratios to `redis-benchmark` and to packed-setex.

use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::error::{Error, Result};
use crate::harness::info::ServerInfo;
use crate::harness::throughput::{self, BATCH, SetBaseline, ThroughputReport};
use crate::layout::LayoutKind;
use crate::store::Store;

/// Arguments of `sessionpack bench throughput`.
#[derive(Debug, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions per operation and layout.
    #[arg(long, default_value_t = 100_000)]
    sessions: usize,
    /// Concurrent callers for the one-at-a-time operations.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Rounds; each measures every layout in turn, and the median of each
    /// figure is reported, so a burst of noise on a shared machine hits
    /// every layout alike.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Layouts to measure (default: all).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<LayoutKind>,
    /// Bucket counts (log2) to measure the compact layout at, to see what
    /// fuller buckets cost (default: the advisor's pick).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=24))]
    compact_bits: Vec<u8>,
    /// Directory for throughput.json and throughput.md.
    #[arg(long, default_value = "results/throughput")]
    out: PathBuf,
}

pub(super) async fn run(args: ThroughputArgs) -> Result<()> {
    let target = args.target.connect().await?;
    target.flush().await?;
    let port: u16 = target
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .ok_or_else(|| Error::Config(format!("cannot find a port in {}", target.url)))?;
    let mut conn = crate::connect(&target.url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let layouts = if args.layouts.is_empty() {
        LayoutKind::ALL.to_vec()
    } else {
        args.layouts.clone()
    };
    let requests = (args.sessions as u64).max(10_000);
    // Each layout holds 2 x sessions at the end (batch + single creates).
    let bits = advisor::recommend_bits(
        2 * args.sessions as u64,
        &server.limits,
        DEFAULT_MAX_CONVERTED,
    );
    let compact_bits = advisor::recommend_compact_bits(
        2 * args.sessions as u64,
        &server.limits,
        DEFAULT_MAX_CONVERTED,
    );
    let mut all_rates = Vec::new();
    let (mut singles, mut pipelined) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
        singles.push(throughput::redis_benchmark_set(
            port,
            args.clients,
            1,
            requests,
        )?);
        pipelined.push(throughput::redis_benchmark_set(
            port,
            2,
            BATCH,
            requests * 4,
        )?);
        let runs: Vec<(LayoutKind, u8)> = layouts
            .iter()
            .flat_map(|&layout| match layout {
                LayoutKind::Compact if !args.compact_bits.is_empty() => args
                    .compact_bits
                    .iter()
                    .map(|&b| (layout, b))
                    .collect::<Vec<_>>(),
                LayoutKind::Compact => vec![(layout, compact_bits)],
                _ => vec![(layout, bits)],
            })
            .collect();
        for &(layout, bits) in &runs {
            // Only what this run wrote is there: the target was checked above.
            let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
            let opened = layout.open(conn.clone(), bits).await?;
            let label = if layout.is_bucketed() {
                format!("{layout} 2^{bits}")
            } else {
                layout.name().to_owned()
            };
            let measured = throughput::measure(
                &label,
                Store::new(opened),
                args.clients,
                args.sessions,
                &mut conn,
            )
            .await?;
            for r in &measured {
                println!(
                    "round {round}: {:24} {:16} {:>9.0}/s",
                    r.layout,
                    r.op.name(),
                    r.ops_per_sec
                );
            }
            all_rates.extend(measured);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let set_baseline = SetBaseline {
        single: median(singles),
        pipelined: median(pipelined),
    };
    let report = ThroughputReport {
        command: super::bench_memory::command_line(),
        redis_version: server.name(),
        clients: args.clients,
        sessions: args.sessions,
        set_baseline,
        rounds: args.rounds as usize,
        rates: throughput::medians(&all_rates),
        all_rates,
        layouts,
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| Error::Config(e.to_string()))?;
    let md = format!(
        "# Throughput\n\nProduced by `{}` ({}, {} clients for single operations, batches of {BATCH}; medians of {} rounds, each measuring every layout in turn). redis-benchmark SET: {:.0}/s single, {:.0}/s pipelined. Server CPU is the `INFO cpu` (user + sys) delta over each operation's run, per session.\n\n{}",
        report.command,
        report.redis_version,
        report.clients,
        report.rounds,
        report.set_baseline.single,
        report.set_baseline.pipelined,
        report.table()
    );
    for (name, text) in [("throughput.json", json), ("throughput.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    println!("\n{}", report.table());
    Ok(())
}
