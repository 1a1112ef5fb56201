//! The `sessionpack` binary end to end, against real servers.
#![cfg(feature = "cli")]

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

#[test]
fn demo_runs_against_its_own_server() {
    let text = stdout(&sessionpack(&[
        "demo",
        "--sessions",
        "2000",
        "--bucket-bits",
        "4",
    ]));
    assert!(text.contains("rotated   old id finds None"), "{text}");
    assert!(text.contains("hostile   cookie refused"), "{text}");
    assert!(text.contains("2000 sessions"), "{text}");
}

#[test]
fn advise_recommends_and_checks() {
    let text = stdout(&sessionpack(&["advise", "--sessions", "10000000"]));
    assert!(
        text.contains("Recommended: compact at 2^17 = 131072 buckets"),
        "{text}"
    );
    assert!(text.contains("bucketed: the fewest buckets"), "{text}");
    assert!(text.contains("| json-setex |"), "{text}");
    assert!(text.contains("| compact | 2^17"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let text = stdout(&sessionpack(&[
        "bench",
        "memory",
        "--sessions",
        "20000",
        "--steps",
        "2",
        "--layouts",
        "packed-setex,bucketed",
        "--bucket-bits",
        "8",
        "--out",
        out,
    ]));
    assert!(text.contains("bucketed 2^8"), "{text}");
    let report = dir.path().join("report.json");
    let text = stdout(&sessionpack(&[
        "advise",
        "--check",
        report.to_str().unwrap(),
    ]));
    assert!(text.contains("| packed-setex | 20k |"), "{text}");
    assert!(text.contains("| bucketed 2^8 | 20k |"), "{text}");
}

#[test]
fn bench_memory_refuses_to_empty_a_server_holding_data() {
    let server = common::server();
    let mut conn = server.client().unwrap().get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("precious")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = sessionpack(&[
        "bench",
        "memory",
        "--redis-url",
        &server.url(),
        "--sessions",
        "100",
        "--steps",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-flush"));
    let kept: String = redis::cmd("GET").arg("precious").query(&mut conn).unwrap();
    assert_eq!(kept, "1");
}

#[test]
fn bench_sweep_and_throughput_write_their_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let text = stdout(&sessionpack(&[
        "bench",
        "sweep",
        "--sessions",
        "4000",
        "--out",
        out,
    ]));
    assert!(text.contains("all expired: bucketed"), "{text}");
    assert!(
        std::fs::read_to_string(dir.path().join("sweep.md"))
            .unwrap()
            .contains("book's clean_sessions")
    );
    let text = stdout(&sessionpack(&[
        "bench",
        "throughput",
        "--sessions",
        "2000",
        "--clients",
        "4",
        "--layouts",
        "packed-setex,bucketed",
        "--out",
        out,
    ]));
    assert!(text.contains("vs packed-setex"), "{text}");
    let md = std::fs::read_to_string(dir.path().join("throughput.md")).unwrap();
    assert!(md.contains("| bucketed 2^"), "{md}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweep_daemons_share_one_store() {
    let server = common::server();
    let layout = common::bucketed(&server, 8).await;
    let short: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..3000).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    let long: Store<_, ()> = Store::new(layout.clone());
    let alive = long.create_many(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let url: &'static str = Box::leak(server.url().into_boxed_str());
    let args = [
        "sweep",
        "--redis-url",
        url,
        "--bucket-bits",
        "8",
        "--interval-secs",
        "30",
        "--segments",
        "16",
        "--passes",
        "1",
    ];
    let (a, b) = tokio::join!(
        tokio::task::spawn_blocking(move || sessionpack(&args)),
        tokio::task::spawn_blocking(move || sessionpack(&args)),
    );
    // The daemons pass at start; the 30 s interval is the leases' length,
    // so in one pass each they split the segments between them.
    let total: u64 = [a.unwrap(), b.unwrap()]
        .iter()
        .map(|out| {
            let text = stdout(out);
            let line = text
                .lines()
                .find(|l| l.starts_with("pass 1:"))
                .expect("a pass line");
            line.split("totals: ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 3000, "every expired session reclaimed exactly once");
    assert_eq!(common::found(&long, &alive).await, alive.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_reads_the_stores_bucket_bits_and_refuses_others() {
    let server = common::server();
    let layout = common::bucketed(&server, 6).await;
    let short: Store<_, ()> = Store::new(layout).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..500).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let url = server.url();

    // Other bits than the store's: refused, nothing swept.
    let out = sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--bucket-bits",
        "7",
        "--passes",
        "1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("6 bucket bits"), "{err}");

    // No bits given: the store's own are used.
    let text = stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--passes",
        "1",
    ]));
    assert!(text.contains("sweeping 64 buckets"), "{text}");
    assert!(text.contains("500 reclaimed"), "{text}");

    // A namespace that holds no store: a clear error.
    let out = sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--namespace",
        "none",
        "--passes",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no store recorded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_sweeps_a_compact_store_by_its_metadata() {
    let server = common::server();
    let layout = sessionpack::Compact::new(
        common::manager(&server).await,
        sessionpack::CompactConfig::new(9).with_id_width(sessionpack::IdWidth::Bits128),
    )
    .await
    .unwrap();
    let short: Store<_, ()> = Store::new(layout).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..700).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let url = server.url();
    let text = stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--passes",
        "1",
    ]));
    assert!(text.contains("sweeping 512 buckets"), "{text}");
    assert!(text.contains("700 reclaimed"), "{text}");
}
