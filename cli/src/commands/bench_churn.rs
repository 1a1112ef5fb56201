//! `sessionpack bench churn`: memory after sessions have come and gone,
//! beside memory after a bulk load.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::baselines::LayoutKind;
use crate::harness::churn::{self, ChurnRun, LAYOUTS};
use crate::harness::info::ServerInfo;
use sessionpack::error::{Error, Result};

/// Arguments of `sessionpack bench churn`.
#[derive(Debug, Args)]
pub struct ChurnArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions at full population; half are replaced each round.
    #[arg(long, default_value_t = 1_000_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Churn rounds.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Layouts to measure (bucketed, compact; default both).
    #[arg(long, value_delimiter = ',', value_parser = super::layout_kind())]
    layouts: Vec<LayoutKind>,
    /// Directory for churn.json and churn.md.
    #[arg(long, default_value = "results/churn")]
    out: PathBuf,
}

pub(super) async fn run(args: ChurnArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench churn").await?;
    let layouts = if args.layouts.is_empty() {
        LAYOUTS.to_vec()
    } else {
        args.layouts.clone()
    };
    let mut runs: Vec<ChurnRun> = Vec::new();
    let mut server = None;
    for (i, kind) in layouts.into_iter().enumerate() {
        target.fresh(i > 0).await?;
        let mut conn = target.open(&url).await?;
        let info = ServerInfo::read(&mut conn).await?;
        let pick = match kind {
            LayoutKind::Compact => advisor::recommend_compact_bits,
            _ => advisor::recommend_bits,
        };
        let bits = pick(args.sessions, &info.limits, DEFAULT_MAX_CONVERTED);
        let layout = kind.open(conn.clone(), bits).await?;
        let label = format!("{kind} 2^{bits}");
        println!("{label}: loading {} sessions", args.sessions);
        let run = churn::run(&mut conn, layout, label, args.sessions, args.rounds).await?;
        for p in &run.points {
            println!(
                "  {:28} {:6.1} B/session used_memory, {:6.1} B/session RSS, frag {:.2}",
                p.moment, p.bytes_per_session, p.rss_per_session, p.sample.mem_fragmentation_ratio
            );
        }
        runs.push(run);
        server = Some(info);
    }
    let server = server.ok_or_else(|| Error::Config("no layout to measure".into()))?;
    let command = super::bench_memory::command_line();
    let mut md = format!(
        "# Memory after churn\n\nProduced by `{command}` ({}, {}). Half the sessions live long; each round the other half expire, the sweeper reclaims them and as many new ones are created. Bytes per session are deltas over the empty store at the full population.\n\n| layout | moment | used_memory B/session | RSS B/session | mem_fragmentation_ratio |\n|---|---|---:|---:|---:|\n",
        server.name(),
        server.mem_allocator
    );
    for run in &runs {
        for p in &run.points {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {:.1} | {:.2} |",
                run.label,
                p.moment,
                p.bytes_per_session,
                p.rss_per_session,
                p.sample.mem_fragmentation_ratio
            );
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", args.out.display())))?;
    let json = serde_json::json!({ "command": command, "server": server, "runs": runs });
    let json = serde_json::to_string_pretty(&json).map_err(|e| Error::Config(e.to_string()))?;
    for (name, text) in [("churn.json", json), ("churn.md", md)] {
        let path = args.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}
