//! The `sessionpack` binary end to end, against real servers.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};
use std::time::Duration;

use sessionpack::Store;

fn sessionpack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(args)
        .output()
        .expect("run sessionpack")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

mod benches;
mod more_benches;
mod operations;
mod sweep;
