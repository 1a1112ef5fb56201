//! Every Rust block of sessionpack's README and guide, compiled.
//!
//! `blocks list` prints each block's name, where it is and whether it runs
//! alone; `blocks run NAME` runs that block's `main`. The tests in
//! `tests/blocks.rs` start the servers and run each block.

use std::process::ExitCode;

/// One block of a document.
pub struct Block {
    /// The module the block compiled into.
    pub name: &'static str,
    /// The document and line of its opening fence.
    pub at: &'static str,
    /// Whether it runs to its end on its own (not a web server).
    pub run: bool,
    /// What it runs against: `server` (`REDIS_URL`), `cluster`
    /// (`REDIS_CLUSTER_URLS`, comma-separated), `tls` (`REDIS_TLS_URL` and
    /// the files `TLS_CA`, `TLS_CERT`, `TLS_KEY`) or `web` (`REDIS_URL`,
    /// and `ADDR` to serve on).
    pub needs: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/blocks.rs"));

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] => {
            for block in BLOCKS {
                let run = if block.run { "run" } else { "no_run" };
                println!("{} {} {run} {}", block.name, block.at, block.needs);
            }
            ExitCode::SUCCESS
        }
        ["run", name] => run(name).unwrap_or_else(|| {
            eprintln!("no block named {name}; `blocks list` lists them");
            ExitCode::from(2)
        }),
        _ => {
            eprintln!("usage: blocks list | blocks run NAME");
            ExitCode::from(2)
        }
    }
}
