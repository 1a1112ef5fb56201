//! Writes a memory benchmark's results: JSON (everything), CSV (one row per
//! point) and a markdown summary.

use std::fmt::Write as _;
use std::path::Path;

use super::memory::{MemoryReport, RunResult, human_count};
use sessionpack::error::{Error, Result};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Config(format!("cannot write {}: {e}", path.display()))
}

/// Writes `report.json`, `points.csv` and `summary.md` into `dir`.
pub fn write_all(report: &MemoryReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let json = dir.join("report.json");
    let text = serde_json::to_string_pretty(report).map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&json, text).map_err(io(&json))?;
    write_csv(report, &dir.join("points.csv"))?;
    let md = dir.join("summary.md");
    std::fs::write(&md, summary(report)).map_err(io(&md))?;
    Ok(())
}

fn write_csv(report: &MemoryReport, path: &Path) -> Result<()> {
    let csv_err = |e: csv::Error| Error::Config(format!("cannot write {}: {e}", path.display()));
    let mut w = csv::Writer::from_path(path).map_err(csv_err)?;
    w.write_record([
        "label",
        "layout",
        "bucket_bits",
        "emulated_sessions",
        "sessions",
        "used_memory_delta",
        "not_sessions",
        "bytes_per_session",
        "rss_delta",
        "rss_per_session",
        "used_memory",
        "used_memory_rss",
        "mem_fragmentation_ratio",
        "allocator_frag_ratio",
        "keys",
        "buckets",
        "buckets_left_listpack",
        "census_sampled",
    ])
    .map_err(csv_err)?;
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for run in &report.runs {
        for p in &run.points {
            w.write_record([
                run.label.clone(),
                run.spec.layout.name().to_owned(),
                opt(run.spec.bucket_bits.map(u64::from)),
                opt(run.spec.emulated_sessions),
                p.sessions.to_string(),
                p.used_memory_delta.to_string(),
                p.not_sessions.to_string(),
                format!("{:.2}", p.bytes_per_session),
                p.rss_delta.to_string(),
                format!("{:.2}", p.rss_per_session),
                p.sample.used_memory.to_string(),
                p.sample.used_memory_rss.to_string(),
                format!("{:.2}", p.sample.mem_fragmentation_ratio),
                format!("{:.2}", p.sample.allocator_frag_ratio),
                p.sample.keys.to_string(),
                opt(p.census.map(|c| c.buckets)),
                opt(p.census.map(|c| c.converted)),
                p.census.map(|c| c.sampled.to_string()).unwrap_or_default(),
            ])
            .map_err(csv_err)?;
        }
    }
    w.flush().map_err(io(path))?;
    Ok(())
}

fn baseline(report: &MemoryReport) -> Option<&RunResult> {
    report
        .runs
        .iter()
        .find(|r| r.spec.layout == crate::baselines::LayoutKind::JsonSetex)
}

/// The markdown table of each run's last point.
pub fn summary(report: &MemoryReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Memory per session\n");
    let _ = writeln!(s, "Produced by `{}`.\n", report.command);
    let _ = writeln!(
        s,
        "{} ({}, {}-bit {}), listpack limits: hash {} entries / {} bytes, zset {} entries / {} bytes ({:?}). {} steps per layout.\n",
        report.server.name(),
        report.server.mem_allocator,
        report.server.arch_bits,
        report.server.os,
        report.server.limits.hash_entries,
        report.server.limits.hash_value,
        report.server.limits.zset_entries,
        report.server.limits.zset_value,
        report.server.limits.source,
        report.steps,
    );
    if let Some(n) = report.cluster_primaries {
        let _ = writeln!(
            s,
            "A Redis Cluster of {n} primaries started for the run (no replicas): figures are summed over the primaries.\n"
        );
    }
    s += &table(report);
    s
}

/// Just the table, for embedding in other documents.
pub fn table(report: &MemoryReport) -> String {
    let base = baseline(report)
        .and_then(|r| r.last())
        .map(|p| p.bytes_per_session);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| layout | sessions | bytes/session (used_memory) | vs json-setex | RSS bytes/session | mem_fragmentation_ratio | keys | buckets left listpack | load rate (sessions/s) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for run in &report.runs {
        let Some(p) = run.last() else { continue };
        let vs = base
            .map(|b| format!("{:+.0}%", (p.bytes_per_session / b - 1.0) * 100.0))
            .unwrap_or_default();
        let census = p
            .census
            .map(|c| format!("{} of {}", c.converted, c.buckets))
            .unwrap_or_else(|| "n/a".into());
        // A sample taken while a dict still held two tables says so.
        let transient = if p.settled { "" } else { " (mid-rehash)" };
        let rss = if p.rss_delta < 0 {
            "n/a (below the empty server's)".to_owned()
        } else {
            format!("{:.1}", p.rss_per_session)
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.1}{} | {} | {} | {:.2} | {} | {} | {:.0} |",
            run.label,
            human_count(p.sessions),
            p.bytes_per_session,
            transient,
            vs,
            rss,
            p.sample.mem_fragmentation_ratio,
            p.sample.keys,
            census,
            run.load_rate,
        );
    }
    let replication: Vec<String> = report
        .runs
        .iter()
        .filter_map(|run| {
            let p = run.last()?;
            (p.not_sessions > 0).then(|| {
                format!(
                    "{} {:.1} B/session",
                    run.label,
                    p.not_sessions as f64 / p.sessions.max(1) as f64
                )
            })
        })
        .collect();
    if !replication.is_empty() {
        let _ = writeln!(
            s,
            "\nNot counted above: what replication grew by during the load (the primaries' \
             backlogs, up to `repl-backlog-size` each, and the replicas' output buffers), \
             per session loaded: {}.",
            replication.join("; ")
        );
    }
    s
}
