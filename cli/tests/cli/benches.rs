//! The demo, the advisor and the benchmarks, end to end.

use super::*;

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
    assert!(
        text.contains("newest first Some([1001, 1003, 1002])")
            && text.contains("viewed Some([1001, 1003, 1002])")
            && text.contains("its viewed items with it: None"),
        "{text}"
    );
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
    assert!(
        text.contains("pass --profile"),
        "a bare session says so: {text}"
    );
    // Counts as people write them read alike; no sessions is refused.
    for written in ["10M", "1e7", "10_000_000", "10,000,000"] {
        let same = stdout(&sessionpack(&["advise", "--sessions", written]));
        assert!(
            same.contains("Recommended: compact at 2^17 = 131072 buckets"),
            "{written}: {same}"
        );
    }
    let refused = sessionpack(&["advise", "--sessions", "0"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("at least 1"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
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
