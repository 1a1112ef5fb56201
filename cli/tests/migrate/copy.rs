//! Copies of tower-sessions-redis-store and JSON-map sessions: ids, data, expiries, resumption, races.

use super::*;

/// The binary copies every peer session with its id, data and expiry,
/// skips and counts what it cannot read (touching none of it), and a
/// second run changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_sessions_are_copied_with_their_ids_data_and_expiries() {
    let server = common::server();
    let records = fill(&peer(&server).await, 300).await;
    let junk = write_junk(&server).await;
    tower_store(&server).await;
    let before = keyspace(&server).await;

    let dry = migrate_with(
        &server,
        &Plan {
            dry_run: true,
            ..plan()
        },
    )
    .await;
    assert_eq!(dry.get("copied"), 300, "{dry:?}");
    assert_eq!(keyspace(&server).await, before, "a dry run wrote");

    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args([
            "migrate",
            "--redis-url",
            &server.url(),
            "--bucket-bits",
            "6",
            "--batch",
            "50",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcomes = &report["outcomes"];
    assert_eq!(outcomes["copied"], 300, "{report}");
    for reason in ["value", "wrong-type", "no-expiry", "id"] {
        assert_eq!(outcomes[reason], 1, "{reason}: {report}");
    }
    assert_eq!(report["complete"], true);
    assert_eq!(report["deleted"], 0);
    assert!(report["memory_after"].as_u64() > report["memory_before"].as_u64());

    assert_in_store(&tower_store(&server).await, &records).await;
    let after = keyspace(&server).await;
    for (key, contents) in &before {
        assert_eq!(
            after.get(key),
            Some(contents),
            "old key {} changed",
            String::from_utf8_lossy(key)
        );
    }
    for key in &junk {
        assert!(after.contains_key(key.as_bytes()));
    }

    let again = migrate_with(&server, &plan()).await;
    assert_eq!(again.get("copied"), 0, "{again:?}");
    assert_eq!(again.get("unchanged"), 300, "{again:?}");
    assert_eq!(
        keyspace(&server).await,
        after,
        "a second run changed something"
    );
}

/// A run again after the old app wrote on: a session it changed is
/// updated, a new one copied; one a store taking over deleted (its old
/// key with it) is not brought back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_takes_the_old_apps_writes_and_brings_nothing_back() {
    let server = common::server();
    let peer = peer(&server).await;
    let mut records = fill(&peer, 40).await;
    migrate_with(&server, &plan()).await;
    let store = tower_store(&server)
        .await
        .with_takeover(Source::tower_sessions_redis_store())
        .await
        .unwrap();

    records[0]
        .data
        .insert("flash".into(), json!("changed by the old app"));
    peer.save(&records[0]).await.unwrap();
    SessionStore::delete(&store, &records[1].id).await.unwrap();
    let newcomer = fill(&peer, 1).await;

    let report = migrate_with(&server, &plan()).await;
    assert_eq!(report.get("updated"), 1, "{report:?}");
    assert_eq!(report.get("copied"), 1, "{report:?}");
    assert_eq!(report.get("unchanged"), 38, "{report:?}");

    let plain = tower_store(&server).await;
    assert_in_store(&plain, &records[..1]).await;
    assert!(
        SessionStore::load(&plain, &records[1].id)
            .await
            .unwrap()
            .is_none()
    );
    assert_in_store(&plain, &records[2..]).await;
    assert_in_store(&plain, &newcomer).await;
}

/// A pass stopped after a batch resumes at its cursor, and its report
/// covers the whole pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pass_resumes_where_it_stopped() {
    let server = common::server();
    let records = fill(&peer(&server).await, 200).await;
    let first = migrate_with(
        &server,
        &Plan {
            batch: 20,
            stop_after_batches: Some(2),
            ..plan()
        },
    )
    .await;
    assert!(!first.complete && first.cursor != 0, "{first:?}");
    assert!(
        first.get("copied") > 0 && first.get("copied") < 200,
        "{first:?}"
    );
    let rest = migrate_with(
        &server,
        &Plan {
            batch: 20,
            ..plan()
        },
    )
    .await;
    assert!(rest.complete && rest.batches > first.batches, "{rest:?}");
    // SCAN may return a key twice; a key seen again is unchanged.
    assert_eq!(rest.get("copied"), 200, "{rest:?}");
    assert_in_store(&tower_store(&server).await, &records).await;
}

/// With --delete-copied, exactly the keys copied go; unreadable keys stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_copied_keys_are_deleted() {
    let server = common::server();
    let records = fill(&peer(&server).await, 120).await;
    let junk = write_junk(&server).await;
    let report = migrate_with(
        &server,
        &Plan {
            delete_copied: true,
            ..plan()
        },
    )
    .await;
    assert_eq!(report.get("copied"), 120, "{report:?}");
    assert_eq!(report.deleted, 120, "{report:?}");
    assert!(report.closed, "{report:?}");
    let keys = keyspace(&server).await;
    let source = Source::tower_sessions_redis_store();
    for record in &records {
        let key = source
            .key_of(&sessionpack::tower::session_id(record.id.0))
            .unwrap();
        assert!(!keys.contains_key(key.as_bytes()), "copied key left");
    }
    for key in &junk {
        assert!(keys.contains_key(key.as_bytes()), "{key} deleted");
    }
    assert!(
        !keys.keys().any(|k| k.ends_with(b":m")),
        "journal entries of deleted keys left"
    );
    assert_in_store(&tower_store(&server).await, &records).await;
}

/// The old app keeps saving while the copy runs; a run after it stops
/// leaves every session as the old app last wrote it. Writes are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_the_copy_are_all_in_the_store_after_a_catch_up_run() {
    let server = common::server();
    let peer = Arc::new(peer(&server).await);
    let records = Arc::new(tokio::sync::Mutex::new(fill(&peer, 300).await));
    let writes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (peer, records, writes, stop) =
            (peer.clone(), records.clone(), writes.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let mut records = records.lock().await;
                let i = (n * 7919) % records.len();
                records[i].data.insert("counter".into(), json!(n));
                peer.save(&records[i]).await.unwrap();
                writes.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        })
    };
    // The copy runs while writes land (at least one batch after the
    // first write).
    while writes.load(Ordering::Relaxed) == 0 {
        tokio::task::yield_now().await;
    }
    let during = migrate_with(
        &server,
        &Plan {
            batch: 10,
            ..plan()
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let written = writes.load(Ordering::Relaxed);
    assert!(written > 0);
    assert_eq!(during.get("copied"), 300, "{during:?}");

    let after = migrate_with(&server, &plan()).await;
    assert_in_store(&tower_store(&server).await, &records.lock().await).await;
    eprintln!(
        "{written} writes raced the copy; {} sessions updated after",
        after.get("updated")
    );
}

/// A generic source: JSON maps under `sess:<32 hex digits>`; keys whose
/// ids are wider (connect-redis' 24-byte ids) are skipped by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_maps_under_a_prefix_are_copied() {
    use sessionpack::takeover::{IdForm, ValueForm};
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let source = Source::new("sess:", IdForm::Hex, ValueForm::JsonMap);
    let mut expected = Vec::new();
    for n in 0..50u8 {
        let id = sessionpack::SessionId::from_slice(&[n; 16]).unwrap();
        let data = data_of(u64::from(n));
        let _: () = redis::cmd("SET")
            .arg(source.key_of(&id).unwrap())
            .arg(serde_json::to_vec(&data).unwrap())
            .arg("EX")
            .arg(3600)
            .query_async(&mut raw)
            .await
            .unwrap();
        expected.push((id, data));
    }
    let _: () = redis::cmd("SET")
        .arg(format!("sess:{}", "ab".repeat(24)))
        .arg("{}")
        .arg("EX")
        .arg(60)
        .query_async(&mut raw)
        .await
        .unwrap();
    let report = migrate_with(&server, &Plan { source, ..plan() }).await;
    assert_eq!(report.get("copied"), 50, "{report:?}");
    assert_eq!(report.get("id"), 1, "{report:?}");
    let store = tower_store(&server).await;
    for (id, data) in expected {
        let (loaded, at) = store
            .load_data(sessionpack::tower::tower_id(&id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(loaded, data);
        let now = OffsetDateTime::now_utc().unix_timestamp();
        assert!((now + 3500..=now + 3601).contains(&at), "{at} vs {now}");
    }
}

/// With no bucket count, a migration into a new namespace fills a store
/// that grows: its buckets split as the sessions come in, and every one
/// loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_count_a_new_namespace_grows_as_sessions_come_in() {
    let server = common::server();
    common::set_hash_entries(&server, 16);
    let records = fill(&peer(&server).await, 600).await;
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args([
            "migrate",
            "--redis-url",
            &server.url(),
            "--namespace",
            "grown",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = CompactConfig::default().with_namespace("grown");
    let store = TowerStore::new(common::manager(&server).await, config)
        .await
        .unwrap();
    let groups: Vec<u32> = (0..store.layout().buckets().count()).collect();
    let shapes = store.layout().fetch_shapes(&groups).await.unwrap();
    let splits: u64 = shapes.iter().map(|s| s.epoch()).sum();
    // 600 sessions in 16 groups of buckets of at most 12 (three quarters
    // of 16): every group split.
    assert!(splits >= 16, "{splits} splits");
    assert_in_store(&store, &records).await;
}
