//! `sessionpack bench tokens`: one-time tokens packed in buckets against
//! the talk's key per token.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::advisor::{self, DEFAULT_MAX_CONVERTED};
use crate::harness::info::ServerInfo;
use crate::harness::tokens::{self, TokenRun};
use sessionpack::error::{Error, Result};

/// Arguments of `sessionpack bench tokens`.
#[derive(Debug, Args)]
pub struct TokensArgs {
    #[command(flatten)]
    target: Target,
    /// Live tokens to load per layout.
    #[arg(long, default_value_t = 1_000_000)]
    tokens: u64,
    /// Of those, how many to consume (each once) for the rate and CPU.
    #[arg(long, default_value_t = 100_000)]
    consume: u64,
    /// Concurrent consumers.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// log2 of the packed layout's buckets (default: the advisor's pick).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    bucket_bits: Option<u8>,
    /// Directory for tokens.json and tokens.md.
    #[arg(long, default_value = "results/tokens")]
    out: PathBuf,
}

pub(super) async fn run(args: TokensArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("bench tokens").await?;
    let consume = args.consume.min(args.tokens);
    let mut conn = target.open(&url).await?;
    let server = ServerInfo::read(&mut conn).await?;
    let bits = args.bucket_bits.unwrap_or_else(|| {
        advisor::recommend_compact_bits(args.tokens, &server.limits, DEFAULT_MAX_CONVERTED)
    });
    let mut runs: Vec<TokenRun> = Vec::new();
    for packed in [false, true] {
        target.fresh(packed).await?;
        let run = if packed {
            tokens::packed(
                &url,
                &target.options,
                args.tokens,
                bits,
                consume,
                args.clients,
            )
            .await?
        } else {
            tokens::setex(&url, &target.options, args.tokens, consume, args.clients).await?
        };
        if run.consumed != consume {
            return Err(Error::Config(format!(
                "{}: {} of {consume} live tokens were found when consumed",
                run.layout, run.consumed
            )));
        }
        println!(
            "{:20} {:6.1} B/token used_memory, {:6.1} B/token RSS, {:.0} consumes/s, {:.2} µs server CPU per consume",
            run.layout,
            run.bytes_per_token,
            run.rss_per_token,
            run.consumes_per_sec,
            run.server_cpu_us_per_consume
        );
        runs.push(run);
    }
    let command = super::bench_memory::command_line();
    let base = &runs[0];
    let mut md = format!(
        "# One-time tokens\n\nProduced by `{command}` ({}, {}). {} live tokens of 128 bits, each carrying the talk's payload (`{{\"act_id\": \"1234\", \"email\": \"user@example.org\"}}`, with its own numbers); the talk's layout stores it as JSON under `code:<32 hex>` with `SETEX`, the packed one as MessagePack in listpack buckets. Then {consume} of them are consumed, each once, by {} concurrent callers: `MULTI` `GET` `DEL` `EXEC` against one script. Server CPU is the `INFO cpu` delta over the consumes, per consume.\n\n| layout | bytes/token (used_memory) | vs the talk's | RSS bytes/token | consumes/s | vs the talk's | server CPU µs/consume | vs the talk's |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
        server.name(),
        server.mem_allocator,
        args.tokens,
        args.clients
    );
    for r in &runs {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.2}x | {:.1} | {:.0} | {:.2}x | {:.2} | {:.2}x |",
            r.layout,
            r.bytes_per_token,
            r.bytes_per_token / base.bytes_per_token,
            r.rss_per_token,
            r.consumes_per_sec,
            r.consumes_per_sec / base.consumes_per_sec,
            r.server_cpu_us_per_consume,
            r.server_cpu_us_per_consume / base.server_cpu_us_per_consume
        );
    }
    super::write_report(&args.out, "tokens", &server.name(), &runs, &md)?;
    println!("\n{md}");
    Ok(())
}
