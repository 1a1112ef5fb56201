//! The command-line tool's commands. The binary only parses arguments and
//! calls [`run`]; everything it does is library code.

use clap::{Parser, Subcommand};

use crate::error::Result;

mod demo;
mod target;

pub use target::Target;

/// Web sessions packed into listpack-sized Redis buckets.
#[derive(Debug, Parser)]
#[command(name = "sessionpack", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The tool's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, load, touch, rotate and destroy a few sessions, then show
    /// what Redis holds and how much memory it took.
    Demo(demo::DemoArgs),
}

/// Runs one parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
    }
}
