//! `sessionpack bench locks`: the talk's lease against the fenced lock.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::harness::info::ServerInfo;
use crate::harness::locks::{self, LockRun};
use sessionpack::error::Result;

/// Arguments of `sessionpack bench locks`.
#[derive(Debug, Args)]
pub struct LocksArgs {
    #[command(flatten)]
    target: Target,
    /// Locks held at once for the memory sample, each its own name.
    #[arg(long, default_value_t = 100_000)]
    locks: u64,
    /// Acquire-release cycles in the rate phase, on random names.
    #[arg(long, default_value_t = 200_000)]
    cycles: u64,
    /// Concurrent callers in the rate phase.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Directory for locks.json and locks.md.
    #[arg(long, default_value = "results/locks")]
    out: PathBuf,
}

pub(super) async fn run(args: LocksArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench locks").await?;
    let mut conn = target.open(&url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let mut runs: Vec<LockRun> = Vec::new();
    for fenced in [false, true] {
        target.fresh(fenced).await?;
        let run = locks::run(
            &url,
            &target.options,
            fenced,
            args.locks,
            args.cycles,
            args.clients,
        )
        .await?;
        println!(
            "{:20} {:6.1} B/held lock, {:6.1} B/name left, {:.0} cycles/s, {:.2} µs server CPU per cycle",
            run.kind,
            run.bytes_per_lock,
            run.bytes_left_per_name,
            run.cycles_per_sec,
            run.server_cpu_us_per_cycle
        );
        runs.push(run);
    }
    let command = super::bench_memory::command_line();
    let base = &runs[0];
    let mut md = format!(
        "# Locks\n\nProduced by `{command}` ({}, {}). {} locks held at once, each its own name: the talk's lease is `SET lock:<name> <token> NX PX` and a compare-and-delete script; the fenced lock takes it in one script that also `INCR`s a counter beside it (`lock:{{<name>}}:fence`), which stays when the lock is released so a fence never goes back. Bytes left per name are sampled once every lock is released: the keyspace's table has not shrunk yet, and the fenced lock's counters stay. Then {} acquire-release cycles on random names by {} concurrent callers. Server CPU is the `INFO cpu` delta over the cycles, per cycle.\n\n| lock | bytes / held lock | bytes left / name | cycles/s | vs the talk's | server CPU µs/cycle | vs the talk's |\n|---|---:|---:|---:|---:|---:|---:|\n",
        server.name(),
        server.mem_allocator,
        args.locks,
        args.cycles,
        args.clients
    );
    for r in &runs {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.1} | {:.0} | {:.2}x | {:.2} | {:.2}x |",
            r.kind,
            r.bytes_per_lock,
            r.bytes_left_per_name,
            r.cycles_per_sec,
            r.cycles_per_sec / base.cycles_per_sec,
            r.server_cpu_us_per_cycle,
            r.server_cpu_us_per_cycle / base.server_cpu_us_per_cycle
        );
    }
    super::write_report(&args.out, "locks", &server.name(), &runs, &md)?;
    println!("\n{md}");
    Ok(())
}
