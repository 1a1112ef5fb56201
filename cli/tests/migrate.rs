//! `sessionpack migrate` against sessions the real peer crate
//! (tower-sessions-redis-store 0.16) wrote to a real server.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionManager;
use serde_json::{Value, json};
use sessionpack_testkit::LocalServer;
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config};

use sessionpack::CompactConfig;
use sessionpack::identity::Identity;
use sessionpack::session::dictionary::Dictionary;
use sessionpack::takeover::Source;
use sessionpack::tower::{TowerStore, tower_id};
use sessionpack::users::UserIndexConfig;
use sessionpack_cli::migrate::{self, Plan, Report};

/// The peer store on `server`, as its docs set it up.
async fn peer(server: &LocalServer) -> RedisStore<Client> {
    let client = Client::new(Config::from_url(&server.url()).unwrap(), None, None, None);
    client.init().await.expect("fred connects");
    RedisStore::new(client)
}

/// Session data of several shapes: an axum-login session, one with a csrf
/// token, locale and flash, one long enough to go out of line, one of
/// nested values.
fn data_of(n: u64) -> HashMap<String, Value> {
    let login = json!({"user_id": n, "auth_hash": vec![n as u8; 32]});
    let mut data = HashMap::from([("axum-login.data".to_owned(), login)]);
    match n % 4 {
        1 => {
            data.insert("csrf".into(), json!(format!("{n:064x}")));
            data.insert("locale".into(), json!("de-CH"));
            data.insert("flash".into(), json!(["saved", n]));
        }
        2 => {
            data.insert("note".into(), json!("x".repeat(300 + n as usize % 50)));
        }
        3 => {
            data.insert(
                "cart".into(),
                json!({"items": [{"sku": n, "qty": 2}], "total": 9.5}),
            );
        }
        _ => {}
    }
    data
}

/// Creates `count` peer sessions with expiries spread over a day; returns
/// their records.
async fn fill(peer: &RedisStore<Client>, count: u64) -> Vec<Record> {
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let mut records = Vec::new();
    for n in 0..count {
        let mut record = Record {
            id: Id::default(),
            data: data_of(n),
            expiry_date: OffsetDateTime::from_unix_timestamp(now + 600 + (n as i64 * 97) % 86_400)
                .unwrap(),
        };
        peer.create(&mut record).await.unwrap();
        records.push(record);
    }
    records
}

async fn tower_store(server: &LocalServer) -> TowerStore<ConnectionManager> {
    TowerStore::new(common::manager(server).await, CompactConfig::new(6))
        .await
        .unwrap()
}

fn plan() -> Plan {
    Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: false,
        batch: 64,
        restart: false,
        stop_after_batches: None,
    }
}

async fn migrate_with(server: &LocalServer, plan: &Plan) -> Report {
    let store = tower_store(server).await;
    migrate::run(common::manager(server).await, store, plan, |_| {})
        .await
        .expect("migrate")
}

/// Every record loads from the store with its data and its expiry second.
async fn assert_in_store(store: &TowerStore<ConnectionManager>, records: &[Record]) {
    for record in records {
        let loaded = SessionStore::load(store, &record.id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("session {} not in the store", record.id));
        assert_eq!(loaded.data, record.data);
        assert_eq!(
            loaded.expiry_date.unix_timestamp(),
            record.expiry_date.unix_timestamp()
        );
    }
}

/// Every key and its contents (strings and hashes), the migration's state
/// key left out.
async fn keyspace(server: &LocalServer) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut raw = common::raw(server).await;
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        if key.windows(9).any(|w| w == b":migrate:") {
            continue;
        }
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let mut contents: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![
                redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap(),
            ],
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut raw)
                .await
                .unwrap(),
            other => vec![other.as_bytes().to_vec()],
        };
        let ttl: i64 = redis::cmd("PEXPIRETIME")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        contents.push(ttl.to_string().into_bytes());
        out.insert(key, contents);
    }
    out
}

/// Keys the peer crate did not write: under an id-shaped name a value
/// that is no record, a hash, a record without expiry; and keys of other
/// data.
async fn write_junk(server: &LocalServer) -> Vec<String> {
    let mut raw = common::raw(server).await;
    let source = Source::tower_sessions_redis_store();
    let id = |b: u8| {
        source
            .key_of(&sessionpack::SessionId::from_slice(&[b; 16]).unwrap())
            .unwrap()
    };
    let (garbage, hash, persistent) = (id(1), id(2), id(3));
    let record = rmp_serde::to_vec(&Record {
        id: Id(5),
        data: data_of(5),
        expiry_date: OffsetDateTime::now_utc(),
    })
    .unwrap();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(&garbage)
        .arg("not msgpack")
        .arg("EX")
        .arg(3600)
        .cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("v")
        .cmd("SET")
        .arg(&persistent)
        .arg(record)
        .cmd("SET")
        .arg("user:17")
        .arg("other data")
        .query_async(&mut raw)
        .await
        .unwrap();
    vec![garbage, hash, persistent, "user:17".into()]
}

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

/// The source keys left (every key but the store's own and the migration's).
async fn source_keys(server: &LocalServer) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    keys.iter().filter(|k| !k.starts_with("sp:")).count()
}

/// A close killed part way (`kill -9` of the command in its one batch,
/// before it wrote any report): the run that finishes it reports every key
/// the close removed, across both runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_killed_part_way_counts_every_key_it_deleted() {
    let server = common::server();
    let records = fill(&peer(&server).await, 2000).await;
    let copied = migrate_with(&server, &plan()).await;
    assert_eq!(copied.get("copied"), 2000, "{copied:?}");
    let url = server.url();
    let mut close = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["migrate", "--redis-url", &url, "--delete-copied"])
        .args(["--batch", "100000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once its close has deleted some keys (or, on a machine fast
    // enough to finish first, not at all: the count must hold either way).
    loop {
        if close.try_wait().unwrap().is_some() {
            break;
        }
        if source_keys(&server).await < 2000 {
            close.kill().unwrap();
            close.wait().unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let rest = migrate_with(
        &server,
        &Plan {
            delete_copied: true,
            ..plan()
        },
    )
    .await;
    assert!(rest.complete && rest.closed, "{rest:?}");
    assert_eq!(source_keys(&server).await, 0);
    assert_eq!(rest.deleted, 2000, "{rest:?}");
    // The pass's count is in its report: its counter is gone.
    let counter = format!("{}:deleted", migrate::state_key("sp", &plan().source));
    let left: bool = redis::cmd("EXISTS")
        .arg(&counter)
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert!(!left, "{counter} left behind");
    assert_in_store(&tower_store(&server).await, &records).await;
}

/// Runs `sessionpack` with `args`, which must succeed; returns its stdout.
fn sessionpack_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sessionpack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The summed `MEMORY USAGE` of the HASH keys of `namespace`.
async fn hash_bytes(server: &LocalServer, namespace: &str) -> u64 {
    let mut conn = common::manager(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut total = 0;
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if kind == "hash" {
            let bytes: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            total += bytes;
        }
    }
    total
}

/// `migrate` creates the namespace as the app opens it: with
/// `--user-index` an app keeping a user index opens it (without the flag
/// it is refused, typed), each copied session is in its owner's entry,
/// and the copies are packed with a dictionary learned from them, which
/// the app then finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_opens_the_namespace_as_the_app_will() {
    let server = common::server();
    let records = fill(&peer(&server).await, 1300).await;
    let url = server.url();
    let copy = |namespace: &str, extra: &[&str]| {
        let mut args = vec!["migrate", "--redis-url", &url, "--namespace"];
        args.push(namespace);
        args.extend_from_slice(extra);
        sessionpack_ok(&args);
    };
    copy("app", &["--user-index"]);
    copy("unpacked", &["--user-index", "--unpacked"]);
    copy("plain", &[]);

    let conn = common::manager(&server).await;
    let app_config = |namespace: &str| {
        sessionpack::tower::recommended_config()
            .with_namespace(namespace)
            .with_user_index(UserIndexConfig::default())
    };
    let refused = TowerStore::new(conn.clone(), app_config("plain")).await;
    assert!(
        matches!(refused, Err(sessionpack::Error::Config(_))),
        "a namespace copied without --user-index opened with one: {refused:?}"
    );
    let store = TowerStore::new(conn.clone(), app_config("app"))
        .await
        .expect("the app opens the namespace the copy created");
    assert_in_store(&store, &records).await;
    for record in records.iter().step_by(97) {
        let owner = record.data["axum-login.data"]["user_id"].as_u64().unwrap();
        let listed = store.sessions_of(&Identity::Int(owner)).await.unwrap();
        let ids: Vec<i128> = listed.iter().map(|s| tower_id(&s.id)).collect();
        assert_eq!(ids, vec![record.id.0], "user {owner}'s sessions");
    }
    assert!(
        Dictionary::fetch(&conn, "app", 255)
            .await
            .unwrap()
            .is_some(),
        "no dictionary learned"
    );
    assert!(
        Dictionary::fetch(&conn, "unpacked", 255)
            .await
            .unwrap()
            .is_none()
    );
    // The first 1000 copies are the samples, kept as written; the rest are
    // packed.
    let (packed, unpacked) = (
        hash_bytes(&server, "app").await,
        hash_bytes(&server, "unpacked").await,
    );
    assert!(
        packed < unpacked,
        "packed {packed} B, unpacked {unpacked} B"
    );
}

/// With `--bucket-bits` and `--server-expiry` the copy fills a store whose
/// fields the server expires, which an app opened that way reads; skipped,
/// said, where the server cannot expire fields in a listpack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_into_a_store_whose_fields_the_server_expires() {
    use sessionpack::limits::{FieldTtls, field_ttls};
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let ttls = field_ttls(&mut raw, "probe:field-ttl").await.unwrap();
    if ttls != FieldTtls::Listpack {
        println!("skipped: this server cannot expire fields in a listpack ({ttls:?})");
        return;
    }
    let records = fill(&peer(&server).await, 60).await;
    let url = server.url();
    let args = ["migrate", "--redis-url", &url, "--namespace", "fx"];
    sessionpack_ok(&[&args[..], &["--bucket-bits", "4", "--server-expiry"]].concat());
    let config = CompactConfig::new(4)
        .with_namespace("fx")
        .with_server_expiry();
    let store = TowerStore::new(common::manager(&server).await, config)
        .await
        .expect("the app opens the namespace the copy created");
    assert_in_store(&store, &records).await;
    // Each session's field carries its expiry, as the app's own writes do.
    let mut expiring = 0;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("fx:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    for key in keys
        .iter()
        .filter(|k| !k.ends_with(":m") && !k.ends_with(":meta"))
    {
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if kind != "hash" {
            continue;
        }
        let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let ttls: Vec<i64> = redis::cmd("HTTL")
            .arg(key)
            .arg("FIELDS")
            .arg(fields.len())
            .arg(&fields)
            .query_async(&mut raw)
            .await
            .unwrap();
        expiring += ttls.iter().filter(|&&t| t > 0).count();
    }
    assert!(expiring >= records.len(), "{expiring} fields expire");
}

/// actix-session's `RedisSessionStore` (the real crate) wrote the
/// sessions: `migrate --from actix-session` copies them (owners into the
/// user index), the actix store reads each under the cookie's own key,
/// state for state, and writes through it; the close deletes the old keys
/// and the sessions stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_session_keys_are_copied_and_served_under_their_own_keys() {
    use actix_session::storage::{RedisSessionStore, SessionKey, SessionStore as _};
    use sessionpack::actix::ActixStore;

    let server = common::server();
    let peer = RedisSessionStore::new(server.url()).await.unwrap();
    let ttl = time::Duration::seconds(3600);
    let mut sessions: Vec<(SessionKey, HashMap<String, String>)> = Vec::new();
    for n in 0..150u64 {
        let mut state = HashMap::from([
            (
                "actix_identity.user_id".to_owned(),
                format!("\"user-{}\"", n % 10),
            ),
            ("cart".to_owned(), format!("[{n},2,3]")),
        ]);
        if n % 3 == 0 {
            // Text that is not JSON, and JSON written unlike serde_json.
            state.insert("raw".into(), "not json {".into());
            state.insert("spaced".into(), "{ \"a\" : 1 }".into());
        }
        let key = peer.save(state.clone(), &ttl).await.unwrap();
        sessions.push((key, state));
    }
    let url = server.url();
    let migrate = |extra: &[&str]| {
        let from = [
            "migrate",
            "--redis-url",
            &url,
            "--from",
            "actix-session",
            "--json",
        ];
        let out = sessionpack_ok(&[&from[..], extra].concat());
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let copy = migrate(&["--user-index"]);
    assert_eq!(copy["outcomes"]["copied"], 150, "{copy}");

    let config = CompactConfig::default().with_user_index(UserIndexConfig::default());
    let store = ActixStore::new(common::manager(&server).await, config)
        .await
        .expect("the actix store opens the namespace the copy created");
    for (key, state) in &sessions {
        assert_eq!(store.load(key).await.unwrap().as_ref(), Some(state));
    }
    let listed = store
        .sessions_of(&Identity::Name("user-3".into()))
        .await
        .unwrap();
    assert_eq!(listed.len(), 15, "user-3's sessions");

    let close = migrate(&["--delete-copied"]);
    assert_eq!(close["deleted"], 150, "{close}");
    assert_eq!(close["closed"], true, "{close}");
    for (key, _) in &sessions {
        assert!(
            peer.load(key).await.unwrap().is_none(),
            "an old key is left"
        );
    }
    let (key, state) = &sessions[0];
    let mut changed = state.clone();
    changed.insert("cart".into(), "[]".into());
    let same_key = SessionKey::try_from(key.as_ref().to_owned()).unwrap();
    let kept = store.update(same_key, changed.clone(), &ttl).await.unwrap();
    assert_eq!(kept.as_ref(), key.as_ref(), "the cookie's key stays");
    assert_eq!(store.load(key).await.unwrap(), Some(changed));
    // A key of the same form that no session had is none.
    let stranger = SessionKey::try_from("Q".repeat(64)).unwrap();
    assert_eq!(store.load(&stranger).await.unwrap(), None);
}
