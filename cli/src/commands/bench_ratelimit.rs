//! `sessionpack bench ratelimit`: the talk's exact log against the packed
//! GCRA limiter.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::Target;
use crate::harness::info::ServerInfo;
use crate::harness::ratelimit::{self, Limiter, LimiterRun};
use sessionpack::error::{Error, Result};
use sessionpack::ratelimit::{Gcra, Limit, SlidingLog};

/// Arguments of `sessionpack bench ratelimit`.
#[derive(Debug, Args)]
pub struct RateLimitArgs {
    #[command(flatten)]
    target: Target,
    /// Clients, each making a full window of requests.
    #[arg(long, default_value_t = 20_000)]
    clients: u64,
    /// Requests allowed per window.
    #[arg(long, default_value_t = 10)]
    limit: u32,
    /// The window, seconds.
    #[arg(long, default_value_t = 60.0)]
    window_secs: f64,
    /// Windows of the burst test (a client sends the limit at the start of
    /// each and as many again spread over it), with a window of
    /// --burst-window-ms.
    #[arg(long, default_value_t = 10)]
    burst_windows: u32,
    /// The burst test's window, milliseconds.
    #[arg(long, default_value_t = 500)]
    burst_window_ms: u64,
    /// log2 of the GCRA limiter's buckets (default: ~100 clients each).
    #[arg(long)]
    bucket_bits: Option<u8>,
    /// Directory for ratelimit.json and ratelimit.md.
    #[arg(long, default_value = "results/ratelimit")]
    out: PathBuf,
}

pub(super) async fn run(args: RateLimitArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench ratelimit").await?;
    let limit = Limit::new(
        args.limit,
        Duration::from_secs_f64(args.window_secs.max(0.001)),
    )?;
    let burst = Limit::new(args.limit, Duration::from_millis(args.burst_window_ms))?;
    let bits = args
        .bucket_bits
        .unwrap_or_else(|| ((args.clients as f64 / 100.0).log2().ceil() as u8).clamp(1, 24));
    let mut runs: Vec<LimiterRun> = Vec::new();
    let mut server = None;
    for packed in [false, true] {
        target.fresh(packed).await?;
        let mut conn = target.open(&url).await?;
        server = Some(ServerInfo::read(&mut conn).await?);
        // The load uses the long window; the burst test a short one, on
        // its own keys.
        let (name, loaded) = if packed {
            let gcra = Gcra::new(conn.clone(), "rl", bits, limit)?;
            let g = ratelimit::run(
                &mut conn,
                format!("gcra 2^{bits}"),
                Limiter::Gcra(gcra),
                limit,
                args.clients,
                0,
            )
            .await?;
            (g.limiter.clone(), g)
        } else {
            let log = SlidingLog::new(conn.clone(), "rl", limit);
            let l = ratelimit::run(
                &mut conn,
                "log (the talk's)".into(),
                Limiter::Log(log),
                limit,
                args.clients,
                0,
            )
            .await?;
            (l.limiter.clone(), l)
        };
        let bursting = if packed {
            Limiter::Gcra(Gcra::new(conn.clone(), "rb", 1, burst)?)
        } else {
            Limiter::Log(SlidingLog::new(conn.clone(), "rb", burst))
        };
        let b = ratelimit::run(&mut conn, name, bursting, burst, 0, args.burst_windows).await?;
        let run = LimiterRun {
            most_in_a_window: b.most_in_a_window,
            admitted_per_window: b.admitted_per_window,
            ..loaded
        };
        println!(
            "{:20} {:6.1} B/client, {:.0} checks/s, {:.2} µs server CPU per check; bursts: at most {} in a window, {:.1} per window",
            run.limiter,
            run.bytes_per_client,
            run.checks_per_sec,
            run.server_cpu_us_per_check,
            run.most_in_a_window,
            run.admitted_per_window
        );
        runs.push(run);
    }
    let server = server.ok_or_else(|| Error::Config("nothing measured".into()))?;
    let command = super::bench_memory::command_line();
    let mut md = format!(
        "# Rate limits\n\nProduced by `{command}` ({}). {} clients each make a full window of requests ({} per {:?}): bytes per client are the `used_memory` delta over them, server CPU the `INFO cpu` delta per check (four callers). Then one client sends, in each of {} windows of {} ms, {} requests at once and {} more spread evenly over the window: the most admitted in any window (by the server's clock) and the mean per window, where the exact limit is {}.\n\n| limiter | bytes/client | checks/s | server CPU µs/check | most admitted in a window | admitted per window |\n|---|---:|---:|---:|---:|---:|\n",
        server.name(),
        args.clients,
        args.limit,
        limit.window(),
        args.burst_windows,
        args.burst_window_ms,
        args.limit,
        args.limit,
        args.limit
    );
    for r in &runs {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.0} | {:.2} | {} | {:.1} |",
            r.limiter,
            r.bytes_per_client,
            r.checks_per_sec,
            r.server_cpu_us_per_check,
            r.most_in_a_window,
            r.admitted_per_window
        );
    }
    super::write_report(&args.out, "ratelimit", &server.name(), &runs, &md)?;
    println!("\n{md}");
    Ok(())
}
