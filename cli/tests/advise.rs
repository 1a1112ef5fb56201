//! `sessionpack advise` sizing records from real sessions: a file of
//! session data, the keys the real peer crate (tower-sessions-redis-store
//! 0.16) wrote to a real server, and a sessionpack namespace's buckets.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::process::Command;

use redis::AsyncCommands;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config};

use sessionpack::CompactConfig;
use sessionpack::tower::TowerStore;

/// Twenty axum-login sessions that fit one value at the default limits,
/// nine with a note that takes pieces, and one whose note sends it out of
/// line.
fn data_of(n: u64) -> HashMap<String, Value> {
    let login = json!({"user_id": 1_000_000 + n, "auth_hash": vec![n as u8; 32]});
    let mut data = HashMap::from([("axum-login.data".to_owned(), login)]);
    if n == 29 {
        data.insert("note".into(), json!("x".repeat(700)));
    } else if n % 3 == 2 {
        data.insert("note".into(), json!("x".repeat(200 + n as usize)));
    }
    data
}

const SESSIONS: u64 = 30;

fn advise(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .arg("advise")
        .args(args)
        .output()
        .expect("run sessionpack");
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line `advise` prints of the records' sizes, as the test expects it
/// from the data it wrote.
fn expected_sizes_line() -> String {
    let mut sizes: Vec<usize> = (0..SESSIONS)
        .map(|n| sessionpack::json_map::encode(&data_of(n)).unwrap().len())
        .collect();
    sizes.sort_unstable();
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    let p99 = sizes[sizes.len() - 1];
    format!("records {mean:.1} bytes on average, {p99} at the 99th percentile")
}

/// Two thirds fit one value at the server's default limit, nine in pieces,
/// one out of line.
const SHARE_INLINE: &str =
    "hash-max-listpack-value 64: 67% of records in one value, 30% in pieces, 3% out of line";

fn expiry() -> OffsetDateTime {
    OffsetDateTime::now_utc() + time::Duration::hours(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_sized_from_a_file_a_peer_store_and_a_namespace() {
    let expected = expected_sizes_line();

    // A file of the sessions' data, one map per line.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sessions.jsonl");
    let lines: Vec<String> = (0..SESSIONS)
        .map(|n| serde_json::to_string(&data_of(n)).unwrap())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let text = advise(&["--sessions-file", file.to_str().unwrap()]);
    assert!(text.contains(&expected), "{expected}\n{text}");
    assert!(text.contains(SHARE_INLINE), "{text}");
    assert!(text.contains("30 sessions in"), "{text}");

    // The same sessions written by the peer crate, beside a key that is no
    // session and one that has a session's name but not its value.
    let server = common::server();
    let client = Client::new(Config::from_url(&server.url()).unwrap(), None, None, None);
    client.init().await.expect("fred connects");
    let peer = RedisStore::new(client);
    for n in 0..SESSIONS {
        let mut record = Record {
            id: Id::default(),
            data: data_of(n),
            expiry_date: expiry(),
        };
        peer.create(&mut record).await.unwrap();
    }
    let mut raw = common::raw(&server).await;
    let _: () = raw.set("cart:17", "not a session").await.unwrap();
    let _: () = raw
        .set(Id::default().to_string(), "not a record")
        .await
        .unwrap();
    let text = advise(&["--sample-url", &server.url()]);
    assert!(text.contains(&expected), "{expected}\n{text}");
    assert!(text.contains(SHARE_INLINE), "{text}");
    assert!(text.contains("Not sized: 1 (value)"), "{text}");
    // Asked for fewer, it reads fewer.
    let text = advise(&["--sample-url", &server.url(), "--sample", "7"]);
    assert!(text.contains("Records sized from 7 sessions"), "{text}");

    // The same data in a sessionpack namespace, the long records in
    // pieces and out of line (their size read from their pieces and key).
    let store = TowerStore::new(
        common::manager(&server).await,
        CompactConfig::new(4).with_namespace("mine"),
    )
    .await
    .unwrap();
    for n in 0..SESSIONS {
        let mut record = Record {
            id: Id::default(),
            data: data_of(n),
            expiry_date: expiry(),
        };
        SessionStore::create(&store, &mut record).await.unwrap();
    }
    let text = advise(&["--sample-url", &server.url(), "--sample-namespace", "mine"]);
    assert!(text.contains(&expected), "{expected}\n{text}");
    assert!(text.contains(SHARE_INLINE), "{text}");
    assert!(
        text.contains("30 records read from the buckets of namespace mine"),
        "{text}"
    );

    // Nothing to size is an error, not advice about nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["advise", "--sample-url", &server.url(), "--from", "keys"])
        .args(["--prefix", "nothing-here:"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no session to size"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["advise", "--sample-url", &server.url()])
        .args(["--sample-namespace", "absent"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
