//! The `sessionpack` command-line tool: the memory and throughput benchmark
//! harness, the bucket advisor, the sweeper daemon, the user-index tools and
//! the demo. The binary only parses arguments and calls
//! [`commands::run`]; the session store itself is the `sessionpack`
//! library crate.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod advisor;
pub mod baselines;
pub mod commands;
pub mod harness;
pub mod migrate;
pub mod profile;
pub mod sample;
