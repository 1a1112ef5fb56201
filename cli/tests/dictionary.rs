//! `sessionpack dictionary train` and `publish`, and `advise --pack`: a
//! dictionary trained by the tool is the one a store reads from the
//! namespace, ids are never reused, and the advice sizes packed records.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

use redis::AsyncCommands;
use serde_json::json;
use sessionpack::CompactConfig;
use sessionpack::session::dictionary::Dictionary;
use sessionpack::tower::TowerStore;

fn sessionpack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(args)
        .output()
        .expect("run sessionpack")
}

fn succeeds(args: &[&str]) -> String {
    let out = sessionpack(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `sessionpack dictionary publish` of `file` as id 4 in namespace `app`.
fn publish(server: &sessionpack_testkit::LocalServer, file: &str) -> Output {
    sessionpack(&[
        "dictionary",
        "publish",
        "--redis-url",
        &server.url(),
        "--namespace",
        "app",
        "--id",
        "4",
        file,
    ])
}

/// `sessionpack dictionary train` of dictionary 4 on 2,000 sessions of
/// the app profile into `out`; its output.
fn train(out: &str) -> String {
    succeeds(&[
        "dictionary",
        "train",
        "--profile",
        "axum-login-app",
        "--id",
        "4",
        "--sample",
        "2000",
        "--out",
        out,
    ])
}

/// The number after `label` in `text`.
fn number_after(text: &str, label: &str) -> f64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {text}"))
        + label.len();
    text[at..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a number after {label:?} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trained_dictionary_is_published_and_packs_the_stores_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.dict");
    let path = file.to_str().unwrap();
    let text = train(path);
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        !bytes.is_empty() && bytes.len() <= 16 * 1024,
        "{}",
        bytes.len()
    );
    let before = number_after(&text, "held out of the training: ");
    let after = number_after(&text, "on average, ");
    assert_eq!(before, 132.0, "{text}");
    assert!(after < before, "{text}");

    let server = common::server();
    assert!(publish(&server, path).status.success());
    let mut raw = common::raw(&server).await;
    let stored: Vec<u8> = raw.get("app:dict:4").await.unwrap();
    assert_eq!(stored, bytes);
    // The same file again is fine; another under the same id is refused.
    assert!(publish(&server, path).status.success());
    let other = dir.path().join("other.dict");
    std::fs::write(&other, vec![7u8; 500]).unwrap();
    let out = publish(&server, other.to_str().unwrap());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("never reused"), "{stderr}");

    // A store given the file packs with it; one that only knows the
    // namespace reads the published copy.
    let dictionary = Dictionary::new(4, bytes).unwrap();
    let config = || CompactConfig::new(4).with_namespace("app");
    let packing = TowerStore::new(common::manager(&server).await, config())
        .await
        .unwrap()
        .with_dictionary(&dictionary)
        .await
        .unwrap();
    let reader = TowerStore::new(common::manager(&server).await, config())
        .await
        .unwrap();
    let data: std::collections::HashMap<String, serde_json::Value> =
        serde_json::from_value(json!({
            "axum-login.data": {"user_id": 1_000_001, "auth_hash": [1, 2, 3]},
            "csrf_token": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "locale": "de-DE",
            "flash": "Item removed",
        }))
        .unwrap();
    let expires = sessionpack::clock::unix_now() as i64 + 600;
    packing.create_data(9, &data, expires, || 0).await.unwrap();
    assert_eq!(reader.load_data(9).await.unwrap().unwrap().0, data);
}

#[test]
fn advice_sizes_packed_records_on_sessions_held_out_of_training() {
    // Without `--pack`, records over one value bring up packing.
    let plain = succeeds(&["advise", "--profile", "axum-login-app"]);
    assert!(plain.contains("`--pack`"), "{plain}");
    let short = succeeds(&["advise", "--profile", "axum-login-digest"]);
    assert!(!short.contains("`--pack`"), "{short}");

    let text = succeeds(&["advise", "--profile", "axum-login-app", "--pack"]);
    let unpacked = number_after(&text, "held out average ");
    let packed = number_after(&text, "bytes of data unpacked, ");
    assert_eq!(unpacked, 132.0, "{text}");
    assert!(packed < unpacked, "{text}");
    // The plan is for the packed sizes.
    let planned = number_after(&text, "records ");
    assert!(
        (planned - packed).abs() < 0.05,
        "{planned} {packed}\n{text}"
    );

    // Too few sessions to train on is an error that says so.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("few.jsonl");
    std::fs::write(&file, "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
    let out = sessionpack(&[
        "advise",
        "--sessions-file",
        file.to_str().unwrap(),
        "--pack",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("10 at least"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_packs_its_copies_with_the_namespaces_dictionary() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.dict");
    train(file.to_str().unwrap());
    // Another store's sessions: JSON maps under `sess:<32 hex digits>`.
    let mut raw = common::raw(&server).await;
    let mut sessions = Vec::new();
    for n in 0..20u64 {
        let id = format!("{:032x}", 0x5e55_0000_u128 + u128::from(n) * 7919);
        let data = json!({
            "axum-login.data": {"user_id": 1_000_000 + n, "auth_hash": [n, 2, 3]},
            "csrf_token": format!("{:064x}", u128::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            "locale": "fr-FR",
            "flash": "Order placed",
        });
        let _: () = raw
            .set_ex(format!("sess:{id}"), data.to_string(), 600)
            .await
            .unwrap();
        let bytes: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let sid = sessionpack::SessionId::from_slice(&bytes).unwrap();
        sessions.push((sessionpack::tower::tower_id(&sid), data));
    }
    let url = server.url();
    let args = [
        "migrate",
        "--redis-url",
        &url,
        "--namespace",
        "app",
        "--bucket-bits",
        "4",
        "--from",
        "keys",
        "--prefix",
        "sess:",
        "--dictionary-id",
        "4",
    ];
    // Not yet published: refused, nothing copied.
    let refused = sessionpack(&args);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("dictionary publish"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let buckets: Vec<String> = raw.keys("app:{*").await.unwrap();
    assert!(buckets.is_empty(), "{buckets:?}");
    assert!(publish(&server, file.to_str().unwrap()).status.success());
    succeeds(&args);

    let reader = TowerStore::new(
        common::manager(&server).await,
        CompactConfig::new(4).with_namespace("app"),
    )
    .await
    .unwrap();
    let layout = reader.layout();
    for (id, data) in sessions {
        let (loaded, _) = reader.load_data(id).await.unwrap().expect("copied");
        assert_eq!(serde_json::to_value(&loaded).unwrap(), data);
        let sid = sessionpack::tower::session_id(id);
        let value: Vec<u8> = raw
            .hget(
                layout.scheme().bucket_key(layout.buckets().bucket_of(&sid)),
                layout.buckets().field(&sid),
            )
            .await
            .unwrap();
        // Expiry, the pieced marker and count (and the check, its high
        // bit set) if in pieces, then the data.
        let at = match (value[4], value[5] & 0x80) {
            (0xc3, 0) => 6,
            (0xc3, _) => 10,
            _ => 4,
        };
        assert_eq!(value[at], sessionpack::session::dictionary::PACKED);
    }
}
