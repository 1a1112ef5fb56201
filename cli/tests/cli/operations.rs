//! Leases given back, namespaces never claimed, TLS, ACL rules, migration and growing stores through the commands.

use super::*;

/// A daemon that stops (its passes done, or SIGTERM) gives its segment
/// leases back: the next one sweeps every segment at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_daemon_that_stops_gives_its_leases_back() {
    use std::io::{BufRead, BufReader};
    let server = common::server();
    common::bucketed(&server, 6).await;
    let url = server.url();
    let args = [
        "sweep",
        "--redis-url",
        &url,
        "--interval-secs",
        "3600",
        "--segments",
        "16",
    ];
    let leases = || async {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("sp:sweep:*")
            .query_async(&mut common::raw(&server).await)
            .await
            .unwrap();
        keys
    };
    for run in 1..=2 {
        let text = stdout(&sessionpack(&[&args[..], &["--passes", "1"]].concat()));
        assert!(
            text.contains("16 segments (0 held by others)"),
            "run {run}: {text}"
        );
        assert_eq!(leases().await, Vec::<String>::new(), "run {run}");
    }

    // Stopped by SIGTERM, as a service manager stops it.
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(daemon.stdout.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map(Result::unwrap)
        .find(|l| l.starts_with("pass 1:"))
        .expect("a first pass");
    assert!(first.contains("(0 held by others)"), "{first}");
    assert_eq!(leases().await.len(), 16);
    let status = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = daemon.wait().unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(exit.success(), "{exit:?}: {rest:?}");
    assert!(rest.iter().any(|l| l.contains("terminated")), "{rest:?}");
    assert_eq!(leases().await, Vec::<String>::new());
}

/// A sweeper never claims a namespace: named bits on an empty one are
/// refused, nothing is written, and the app then opens its own layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_never_claims_a_namespace() {
    let server = common::server();
    let url = server.url();
    for bits in ["14", "16"] {
        let out = sessionpack(&[
            "sweep",
            "--redis-url",
            &url,
            "--bucket-bits",
            bits,
            "--passes",
            "1",
        ]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no store recorded"), "{err}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert_eq!(keys, Vec::<String>::new(), "the sweeper wrote nothing");
    // The app's default layout opens.
    sessionpack::Compact::new(
        common::manager(&server).await,
        sessionpack::CompactConfig::default(),
    )
    .await
    .unwrap();
}

/// The operational commands and the memory benchmark reach a TLS-only
/// server that asks for a client certificate: `--redis-url rediss://...`
/// with the CA and the certificate named; without the certificate the
/// server refuses and the command says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_reach_a_tls_only_server() {
    use sessionpack::conn::{ConnectOptions, TlsConfig};
    use sessionpack_testkit::{ClientCerts, TestCerts};
    let certs = TestCerts::generate().unwrap();
    let Some(server) = common::tls_server(&certs, ClientCerts::Required) else {
        return;
    };
    let url = server.url();
    let tls = TlsConfig::from_files(
        Some(&certs.ca()),
        Some(&certs.client_cert()),
        Some(&certs.client_key()),
    )
    .unwrap();
    let conn = sessionpack::connect_with(&url, &ConnectOptions::default().with_tls(tls))
        .await
        .unwrap();
    let layout = sessionpack::Compact::new(conn, sessionpack::CompactConfig::new(4))
        .await
        .unwrap();
    let store: Store<_, String> = Store::new(layout);
    let brief = store
        .create_with_ttl(1, "brief".into(), Duration::from_secs(1))
        .await
        .unwrap();
    while store.load(&brief.id).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (ca, cert, key) = (certs.ca(), certs.client_cert(), certs.client_key());
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let sweep = ["sweep", "--redis-url", &url, "--passes", "1"];
    let text = stdout(&sessionpack(
        &[
            &sweep[..],
            &["--tls-ca-cert", ca, "--tls-cert", cert, "--tls-key", key],
        ]
        .concat(),
    ));
    assert!(text.contains("1 reclaimed"), "{text}");

    let refused = sessionpack(&[&sweep[..], &["--tls-ca-cert", ca]].concat());
    assert!(
        !refused.status.success(),
        "served without a client certificate"
    );
    // The migration too (a namespace of its own: it fills a tower store).
    let migrate = ["migrate", "--redis-url", &url, "--namespace", "taken"];
    let text = stdout(&sessionpack(
        &[
            &migrate[..],
            &["--tls-ca-cert", ca, "--tls-cert", cert, "--tls-key", key],
        ]
        .concat(),
    ));
    assert!(text.contains("copied"), "{text}");
    let refused = sessionpack(&[&migrate[..], &["--tls-ca-cert", ca]].concat());
    assert!(!refused.status.success(), "migrated without a certificate");
    let unpaired = sessionpack(&[&sweep[..], &["--tls-ca-cert", ca, "--tls-cert", cert]].concat());
    assert!(!unpaired.status.success());
    assert!(
        String::from_utf8_lossy(&unpaired.stderr).contains("--tls-key"),
        "{}",
        String::from_utf8_lossy(&unpaired.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let text = stdout(&sessionpack(&[
        "bench",
        "memory",
        "--redis-url",
        &url,
        "--tls-ca-cert",
        ca,
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--allow-flush",
        "--sessions",
        "2000",
        "--steps",
        "1",
        "--layouts",
        "compact",
        "--out",
        dir.path().to_str().unwrap(),
    ]));
    assert!(text.contains("compact"), "{text}");
    assert!(dir.path().join("report.json").exists());
}

/// `sessionpack acl` prints an `ACL SETUSER` command that a server takes
/// as it is, and under which the app's store works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_acl_rule_is_enough_for_the_store() {
    let server = common::server();
    let line = stdout(&sessionpack(&[
        "acl",
        "--role",
        "store",
        "--namespace",
        "acl1",
        "--user",
        "web",
    ]));
    let line = line.trim().replace("CHANGE-THIS-PASSWORD", "pw");
    let () = common::words(&line)
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    let url = format!("redis://web:pw@127.0.0.1:{}/", server.port());
    let conn = sessionpack::connect(&url).await.unwrap();
    let config = sessionpack::CompactConfig::new(4).with_namespace("acl1");
    let store: Store<_, String> = Store::new(
        sessionpack::Compact::new(conn.clone(), config)
            .await
            .unwrap(),
    );
    let s = store.create(1, "v".into()).await.unwrap();
    assert!(store.load(&s.id).await.unwrap().is_some());
    let other = sessionpack::Compact::new(conn, sessionpack::CompactConfig::new(4)).await;
    assert!(
        matches!(other, Err(sessionpack::Error::NoPermission(_))),
        "{other:?}"
    );
    let bad = sessionpack(&["acl", "--role", "admin"]);
    assert!(!bad.status.success());
}

/// `bench migrate` writes peer keys, copies them and closes the takeover:
/// every session copied, then every old key deleted, and the store left
/// smaller than the peer's keys (at this scale a fixed half megabyte the
/// run leaves in no key weighs on both; see analysis/README.md); for
/// tower-sessions-redis-store's keys and actix-session's.
#[test]
fn bench_migrate_copies_and_closes() {
    for from in ["tower-sessions-redis-store", "actix-session"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().to_str().unwrap();
        let text = stdout(&sessionpack(&[
            "bench",
            "migrate",
            "--sessions",
            "3000",
            "--batch",
            "500",
            "--from",
            from,
            "--out",
            out,
        ]));
        assert!(text.contains("after the close"), "{text}");
        assert!(text.contains(&format!("3000 {from} sessions")), "{text}");
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("migrate.json")).unwrap(),
        )
        .unwrap();
        let run = &report["runs"][0];
        assert_eq!(run["copy"]["report"]["outcomes"]["copied"], 3000, "{run}");
        assert_eq!(run["close"]["report"]["deleted"], 3000, "{run}");
        assert_eq!(run["close"]["report"]["closed"], true, "{run}");
        let bytes = |k: &str| run[k].as_f64().unwrap();
        assert!(
            bytes("sessionpack_bytes_per_session") < bytes("peer_bytes_per_session"),
            "{run}"
        );
    }
}

/// The daemon sweeps a growing store by its metadata, and merges the
/// buckets its sessions no longer fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_sweeps_and_merges_a_growing_store() {
    let server = common::server();
    common::set_hash_entries(&server, 16);
    let layout = sessionpack::Compact::new(
        common::manager(&server).await,
        sessionpack::CompactConfig::growing(),
    )
    .await
    .unwrap();
    let long: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let short: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..700).map(|i| (i, ())).collect();
    let ids = long.create_many(&batch).await.unwrap();
    for id in &ids {
        short.touch(id).await.unwrap().unwrap();
    }
    while common::found(&short, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &server.url(),
        "--passes",
        "1",
    ]));
    assert!(
        text.contains("sweeping the 16 groups of a growing store"),
        "{text}"
    );
    assert!(text.contains("700 reclaimed"), "{text}");
    let merged: u64 = text
        .split(" merged")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(merged > 0, "{text}");
}

/// Whether the server a report names has `HGETDEL` (Redis 8.0 and Valkey
/// 9.0 on; Valkey reports the Redis version it is compatible with too).
fn has_hgetdel(server: &serde_json::Value) -> bool {
    let major = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| s.split('.').next()?.parse::<u32>().ok())
    };
    match major(&server["valkey_version"]) {
        Some(valkey) => valkey >= 9,
        None => major(&server["redis_version"]).is_some_and(|redis| redis >= 8),
    }
}

/// `bench actix` measures each store through actix-session's trait: every
/// call ran, and a user-id session costs sessionpack a fraction of a key
/// of its own.
#[test]
fn bench_actix_measures_every_call_of_every_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let text = stdout(&sessionpack(&[
        "bench",
        "actix",
        "--sessions",
        "5000",
        "--rounds",
        "1",
        "--profiles",
        "user-id,app",
        "--dictionary",
        "--compact-bits",
        "7",
        "--out",
        out,
    ]));
    assert!(text.contains("sessionpack (growing)"), "{text}");
    // The count asked for, not the advisor's (2^8 for 5000 sessions).
    assert!(text.contains("sessionpack (compact 2^7)"), "{text}");
    assert!(text.contains("learned dictionary"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("actix.json")).unwrap())
            .unwrap();
    let rows = report["rows"].as_array().unwrap();
    let stores = if cfg!(feature = "peer-bench") { 4 } else { 3 };
    assert_eq!(rows.len(), 2 * stores);
    for row in rows {
        assert!(row["bytes_per_session"].as_f64().unwrap() > 0.0, "{row}");
        let ops = row["ops"].as_array().unwrap();
        assert_eq!(ops.len(), 7);
        for op in ops {
            assert!(op["calls"].as_u64().unwrap() > 0, "{op}");
            assert!(op["calls_per_sec"].as_f64().unwrap() > 0.0, "{op}");
        }
        // What each call sent: the process that loaded the sessions skips
        // every short renewal and deletes a record it saw in one value
        // with one HDEL (HGETDEL); another process renews each by script,
        // and deletes each by a script that reads the value (record format
        // 7: a record's pieces may have short names, which only the value
        // tells the owner of), or by HGETDEL where the server has it.
        if row["store"].as_str().unwrap().starts_with("sessionpack") {
            let per_op = |op: &str, command: &str| {
                let op = ops.iter().find(|o| o["op"] == op).unwrap();
                op["commands"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["command"] == command)
                    .map_or(0.0, |c| c["per_op"].as_f64().unwrap())
            };
            assert_eq!(per_op("update_ttl", "evalsha"), 0.0, "{row}");
            assert!(per_op("update_ttl-unseen", "evalsha") >= 0.99, "{row}");
            assert_eq!(per_op("delete", "del"), 0.0, "{row}");
            // Where the server has HGETDEL, an unseen delete takes the
            // value with it (and the pieces it names after), no script.
            let (remover, name) = if has_hgetdel(&report["server"]) {
                assert_eq!(per_op("delete-unseen", "evalsha"), 0.0, "{row}");
                ("hgetdel", "hgetdel")
            } else {
                ("evalsha", "script compact_")
            };
            assert!(per_op("delete-unseen", remover) >= 0.99, "{row}");
            // A round more, recorded: the unseen delete's command or
            // script by name.
            let anatomy = &ops.iter().find(|o| o["op"] == "delete-unseen").unwrap()["anatomy"];
            assert!(anatomy[0].as_u64().unwrap() > 0, "{row}");
            let callers = anatomy[1]["callers"].as_array().unwrap();
            assert!(
                callers
                    .iter()
                    .any(|c| c["name"].as_str().unwrap().starts_with(name)),
                "{anatomy}"
            );
        }
    }
    if cfg!(feature = "peer-bench") {
        let bytes = |i: usize| rows[i]["bytes_per_session"].as_f64().unwrap();
        // Rows per profile: fixed, growing, packed, the peer.
        assert!(
            bytes(0) < bytes(3) / 2.0,
            "{} against {}",
            bytes(0),
            bytes(3)
        );
    }
    assert!(dir.path().join("actix.md").exists());
}

/// `sweep --passes N` is a job a cron or a script runs: it exits non-zero
/// when a pass failed (here its user lacks `TIME`) or left a bucket
/// unswept (a key of another type), and says what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_job_whose_pass_fails_exits_non_zero() {
    use sessionpack::acl::{Role, Topology, rule};
    let server = common::server();
    let layout = sessionpack::Compact::new(
        common::manager(&server).await,
        sessionpack::CompactConfig::new(4),
    )
    .await
    .unwrap();
    let store: Store<_, ()> = Store::new(layout).without_sweeper();
    store.create(1, ()).await.unwrap();
    let mut admin = common::raw(&server).await;
    let text = format!("{} -time", rule(&[Role::Sweeper], "sp", Topology::Server));
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg("notime")
        .arg("reset")
        .arg("on")
        .arg(">pw");
    for word in text.split_whitespace() {
        setuser.arg(word);
    }
    let () = setuser.query_async(&mut admin).await.unwrap();
    let url = format!("redis://notime:pw@127.0.0.1:{}/", server.port());
    let out = sessionpack(&["sweep", "--redis-url", &url, "--passes", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed pass exited 0: {err}");
    assert!(err.contains("1 of 1 sweep passes failed"), "{err}");
    assert!(err.contains("ACL"), "{err}");

    // A bucket key of another type: the pass sweeps the rest, and the job
    // fails naming it.
    let () = redis::cmd("SET")
        .arg("sp:{0}:0")
        .arg("not a bucket")
        .query_async(&mut admin)
        .await
        .unwrap();
    let out = sessionpack(&["sweep", "--redis-url", &server.url(), "--passes", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a pass with a bad bucket exited 0: {err}"
    );
    assert!(err.contains("could not be swept"), "{err}");
    let fine = sessionpack(&["sweep", "--redis-url", &server.url(), "--passes", "1"]);
    assert!(!fine.status.success());
    let () = redis::cmd("DEL")
        .arg("sp:{0}:0")
        .query_async(&mut admin)
        .await
        .unwrap();
    stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &server.url(),
        "--passes",
        "1",
    ]));
}
