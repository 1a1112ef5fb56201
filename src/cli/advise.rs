//! `sessionpack advise`: bucket count and memory for a planned population.

use std::path::PathBuf;

use clap::Args;

use crate::advisor::{self, DEFAULT_IDENTITY, DEFAULT_MAX_CONVERTED, Prediction, Workload};
use crate::error::{Error, Result};
use crate::harness::memory::{FIRST_IDENTITY, MemoryReport, human_count};
use crate::layout::LayoutKind;
use crate::limits::ListpackLimits;

/// Arguments of `sessionpack advise`.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// Sessions expected at peak.
    #[arg(long, default_value_t = 10_000_000)]
    sessions: u64,
    /// Read the listpack limits from this server (default: Redis 7's).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// A typical identity value (its size sets the record's).
    #[arg(long, default_value_t = DEFAULT_IDENTITY)]
    identity: u64,
    /// Bytes of encoded attributes per session.
    #[arg(long, default_value_t = 0)]
    attrs_bytes: u64,
    /// Show these bucket counts (log2) instead of those around the
    /// recommendation.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=24))]
    bucket_bits: Vec<u8>,
    /// Tolerated expected number of buckets that leave listpack.
    #[arg(long, default_value_t = DEFAULT_MAX_CONVERTED)]
    max_converted: f64,
    /// Instead of advising, compare the model with the measured run in this
    /// `report.json` (from `sessionpack bench memory`).
    #[arg(long, value_name = "REPORT")]
    check: Option<PathBuf>,
}

fn mib(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", bytes / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}

fn row(p: &Prediction) -> String {
    format!(
        "| {} | {} | {} | {} | {:.1} | {} |",
        p.layout,
        p.bucket_bits
            .map(|b| format!("2^{b} = {}", 1u64 << b))
            .unwrap_or_default(),
        p.mean_load.map(|m| format!("{m:.1}")).unwrap_or_default(),
        p.expected_converted
            .map(|c| format!("{c:.3}"))
            .unwrap_or_default(),
        p.bytes_per_session,
        mib(p.total_bytes)
    )
}

const HEADER: &str = "| layout | buckets | mean sessions/bucket | expected buckets left listpack | bytes/session | total used_memory |\n|---|---|---:|---:|---:|---:|";

pub(super) async fn run(args: AdviseArgs) -> Result<()> {
    if let Some(report) = &args.check {
        return check(report);
    }
    let limits = match &args.redis_url {
        Some(url) => ListpackLimits::read(&mut crate::connect(url).await?).await?,
        None => ListpackLimits::REDIS7_DEFAULTS,
    };
    let w = Workload {
        sessions: args.sessions,
        identity: args.identity,
        attrs_bytes: args.attrs_bytes,
        limits,
    };
    if w.record_bytes() > limits.hash_value {
        println!(
            "note: records of {} bytes exceed hash-max-listpack-value ({}); they will be stored out of line",
            w.record_bytes(),
            limits.hash_value
        );
    }
    let best = advisor::recommend_bits(args.sessions, &limits, args.max_converted);
    println!(
        "{} sessions, {}-byte records, listpack limits {} entries (zset) / {} (hash) from {:?}\n",
        human_count(args.sessions),
        w.record_bytes(),
        limits.zset_entries,
        limits.hash_entries,
        limits.source
    );
    println!(
        "Recommended: 2^{best} = {} buckets (the fewest with at most {} expected buckets over {} entries)\n",
        1u64 << best,
        args.max_converted,
        limits.bucket_entries()
    );
    println!("{HEADER}");
    let shown: Vec<u8> = if args.bucket_bits.is_empty() {
        (best.saturating_sub(3).max(1)..=(best + 3).min(24)).collect()
    } else {
        args.bucket_bits.clone()
    };
    for bits in shown {
        println!("{}", row(&advisor::predict(LayoutKind::Bucketed, bits, &w)));
    }
    println!("\nEvery layout at 2^{best} buckets:\n\n{HEADER}");
    for layout in LayoutKind::ALL {
        println!("{}", row(&advisor::predict(layout, best, &w)));
    }
    Ok(())
}

/// Compares predictions with a measured report, run by run.
fn check(path: &PathBuf) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
    let report: MemoryReport = serde_json::from_str(&text)
        .map_err(|e| Error::Config(format!("{} is not a memory report: {e}", path.display())))?;
    println!(
        "Model vs `{}` (Redis {}):\n",
        report.command, report.server.redis_version
    );
    println!(
        "| run | sessions | predicted bytes/session | measured | error | predicted buckets left listpack | measured |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for run in &report.runs {
        let Some(p) = run.last() else { continue };
        let population = run.spec.emulated_sessions.unwrap_or(p.sessions);
        let w = Workload {
            sessions: population,
            identity: FIRST_IDENTITY + p.sessions / 2,
            attrs_bytes: 0,
            limits: report.server.limits,
        };
        let bits = run.spec.bucket_bits.unwrap_or(16);
        let predicted = advisor::predict(run.spec.layout, bits, &w);
        // An emulated run fills a share of the buckets; scale the expected
        // conversions to that share.
        let share = p.sessions as f64 / population as f64;
        let converted = predicted
            .expected_converted
            .map(|c| format!("{:.1}", c * share))
            .unwrap_or_default();
        println!(
            "| {} | {} | {:.1} | {:.1} | {:+.1}% | {} | {} |",
            run.label,
            human_count(p.sessions),
            predicted.bytes_per_session,
            p.bytes_per_session,
            (predicted.bytes_per_session / p.bytes_per_session - 1.0) * 100.0,
            converted,
            p.census
                .map(|c| c.converted.to_string())
                .unwrap_or_default()
        );
    }
    Ok(())
}
