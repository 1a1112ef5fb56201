//! `sessionpack bench viewed`: recently viewed items packed beside the
//! sessions' buckets against the book's ZSET per session.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::harness::info::ServerInfo;
use crate::harness::viewed::{self, ViewedLoad, ViewedRun};
use sessionpack::error::Result;

/// Arguments of `sessionpack bench viewed`.
#[derive(Debug, Args)]
pub struct ViewedArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions to load per layout, each with a full list.
    #[arg(long, default_value_t = 200_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Items per list (the book's 25).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u8).range(1..=64))]
    keep: u8,
    /// Item ids are drawn from 0..catalogue (1M: 3-byte ids).
    #[arg(long, default_value_t = 1_000_000)]
    catalogue: u64,
    /// Views in the rate phase, on random sessions and items.
    #[arg(long, default_value_t = 200_000)]
    views: u64,
    /// Concurrent callers in the rate phase.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// log2 of the packed layout's buckets (default: the advisor's pick).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    bucket_bits: Option<u8>,
    /// Directory for viewed.json and viewed.md.
    #[arg(long, default_value = "results/viewed")]
    out: PathBuf,
}

pub(super) async fn run(args: ViewedArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench viewed").await?;
    let mut conn = target.open(&url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let bits = args.bucket_bits.unwrap_or_else(|| {
        advisor::recommend_compact_bits(args.sessions, &server.limits, DEFAULT_MAX_CONVERTED)
    });
    let load = ViewedLoad {
        sessions: args.sessions,
        keep: args.keep,
        catalogue: args.catalogue.max(1),
        views: args.views,
        clients: args.clients,
    };
    let mut runs: Vec<ViewedRun> = Vec::new();
    for packed in [false, true] {
        target.fresh(packed).await?;
        let run = if packed {
            viewed::packed(&url, &target.options, load, bits).await?
        } else {
            viewed::book(&url, &target.options, load).await?
        };
        println!(
            "{:24} {:6.1} B/session for sessions, {:6.1} B/session for {} items, {:.0} views/s, {:.2} µs server CPU per view, {:.2} per destroy",
            run.layout,
            run.session_bytes,
            run.item_bytes,
            run.items,
            run.views_per_sec,
            run.server_cpu_us_per_view,
            run.server_cpu_us_per_destroy
        );
        runs.push(run);
    }
    let command = super::bench_memory::command_line();
    let base = &runs[0];
    let mut md = format!(
        "# Recently viewed items\n\nProduced by `{command}` ({}, {}). {} sessions (160-bit ids, an integer user id each), each then given a list of {} items drawn from {} item ids. The book keeps a session in `login:` and `recent:` and its items in a ZSET `viewed:<token>` scored by time; the packed layout keeps sessions in compact buckets and items in the buckets' viewed chunks. Then {} views of random items on random sessions by {} concurrent callers: the book's `update_token` (`HSET login:`, `ZADD recent:`, `ZADD viewed:`, `ZREMRANGEBYRANK`, pipelined) against one view script (the item and the session's touch in one step). Then sessions are destroyed with their items, each once: the book's cleanup (`DEL viewed:`, `HDEL login:`, `ZREM recent:`, pipelined) against one remove script. Server CPU is the `INFO cpu` delta over the views (the destroys), per view (destroy).\n\n| layout | session bytes | item bytes / session | vs the book's | RSS bytes / session | list keys (not listpack) | views/s | vs the book's | server CPU µs/view | vs the book's | server CPU µs/destroy | vs the book's |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        server.name(),
        server.mem_allocator,
        args.sessions,
        args.keep,
        load.catalogue,
        args.views,
        args.clients
    );
    for r in &runs {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {:.2}x | {:.1} | {} ({}) | {:.0} | {:.2}x | {:.2} | {:.2}x | {:.2} | {:.2}x |",
            r.layout,
            r.session_bytes,
            r.item_bytes,
            r.item_bytes / base.item_bytes,
            r.rss_per_session,
            r.list_keys,
            r.list_keys_converted,
            r.views_per_sec,
            r.views_per_sec / base.views_per_sec,
            r.server_cpu_us_per_view,
            r.server_cpu_us_per_view / base.server_cpu_us_per_view,
            r.server_cpu_us_per_destroy,
            r.server_cpu_us_per_destroy / base.server_cpu_us_per_destroy
        );
    }
    super::write_report(&args.out, "viewed", &server.name(), &runs, &md)?;
    println!("\n{md}");
    Ok(())
}
