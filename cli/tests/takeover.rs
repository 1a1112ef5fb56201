//! A tower store taking over the real peer crate's sessions
//! (tower-sessions-redis-store 0.16) during a rolling deploy: old and new
//! instances serving the same sessions at once, then the close.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis::aio::ConnectionManager;
use serde_json::{Value, json};
use sessionpack_testkit::LocalServer;
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config};

use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::{CompactConfig, Error};
use sessionpack_cli::migrate::{self, Plan};

async fn peer(server: &LocalServer) -> RedisStore<Client> {
    let client = Client::new(Config::from_url(&server.url()).unwrap(), None, None, None);
    client.init().await.expect("fred connects");
    RedisStore::new(client)
}

/// A new instance's store: the compact tower store taking over the peer's
/// keys.
async fn new_instance(
    server: &LocalServer,
    config: CompactConfig,
) -> TowerStore<ConnectionManager> {
    TowerStore::new(common::manager(server).await, config)
        .await
        .unwrap()
        .with_takeover(Source::tower_sessions_redis_store())
        .await
        .unwrap()
}

fn record(n: u64, lifetime: i64) -> Record {
    let data: HashMap<String, Value> = HashMap::from([
        (
            "axum-login.data".to_owned(),
            json!({"user_id": n, "auth_hash": vec![n; 32]}),
        ),
        ("csrf".to_owned(), json!(format!("{n:064x}"))),
    ]);
    Record {
        id: Id::default(),
        data,
        expiry_date: OffsetDateTime::from_unix_timestamp(
            OffsetDateTime::now_utc().unix_timestamp() + lifetime,
        )
        .unwrap(),
    }
}

async fn load(store: &impl SessionStore, id: &Id) -> Option<Record> {
    store.load(id).await.unwrap()
}

fn same(a: &Record, b: &Record) -> bool {
    a.id == b.id
        && a.data == b.data
        && a.expiry_date.unix_timestamp() == b.expiry_date.unix_timestamp()
}

async fn old_key_exists(server: &LocalServer, id: &Id) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(id.to_string())
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    n == 1
}

/// Old and new instances serve the same sessions: each sees the other's
/// last write, a delete on either side holds on both, and nothing comes
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_instances_see_each_others_writes_and_deletes() {
    let server = common::server();
    let old = peer(&server).await;
    let new = new_instance(&server, CompactConfig::new(6)).await;
    let mut records = Vec::new();
    for n in 0..6 {
        let mut r = record(n, 3600);
        old.create(&mut r).await.unwrap();
        records.push(r);
    }

    // A session the old app wrote loads from the new store, as it was.
    let moved = load(&new, &records[0].id).await.expect("moved in");
    assert!(same(&moved, &records[0]));

    // The new instance saves: the old instance loads that save.
    let mut r1 = load(&new, &records[1].id).await.unwrap();
    r1.data
        .insert("flash".into(), json!("saved by the new app"));
    new.save(&r1).await.unwrap();
    assert!(same(&load(&old, &r1.id).await.unwrap(), &r1));

    // The old instance saves a session moved long before: the new one
    // loads it (an old instance's write after a move is not lost).
    let mut r0 = records[0].clone();
    r0.data
        .insert("flash".into(), json!("saved by the old app after the move"));
    old.save(&r0).await.unwrap();
    assert!(same(&load(&new, &r0.id).await.unwrap(), &r0));

    // The old instance deletes a moved session (a log-out there): gone on
    // both sides, for good.
    load(&new, &records[2].id).await.unwrap();
    old.delete(&records[2].id).await.unwrap();
    assert!(load(&new, &records[2].id).await.is_none());
    assert!(load(&new, &records[2].id).await.is_none(), "came back");
    assert!(load(&old, &records[2].id).await.is_none());

    // The new instance deletes: gone on both sides, and a late save by an
    // old instance that loaded it before finds no key.
    let stale = load(&old, &records[3].id).await.unwrap();
    new.delete(&records[3].id).await.unwrap();
    assert!(!old_key_exists(&server, &records[3].id).await);
    // The peer reports that save as an error (its `SET XX` answers nil,
    // which it cannot read as a bool): not acknowledged, and no key made.
    assert!(old.save(&stale).await.is_err());
    assert!(!old_key_exists(&server, &records[3].id).await);
    assert!(load(&new, &records[3].id).await.is_none());
    assert!(load(&old, &records[3].id).await.is_none());

    // A session the new instance creates is served by old instances too.
    let mut fresh = record(99, 3600);
    new.create(&mut fresh).await.unwrap();
    assert!(same(&load(&old, &fresh.id).await.unwrap(), &fresh));
    assert!(same(&load(&new, &fresh.id).await.unwrap(), &fresh));

    // A session never touched by a new instance is still the old app's.
    assert!(same(
        &load(&new, &records[4].id).await.unwrap(),
        &records[4]
    ));
}

/// A store that already held sessions of its own when the takeover
/// opened keeps them: only sessions that came from old keys follow them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_own_sessions_are_not_asked_of_the_old_store() {
    let server = common::server();
    let before = TowerStore::new(common::manager(&server).await, CompactConfig::new(6))
        .await
        .unwrap();
    let mut own = record(1, 3600);
    before.create(&mut own).await.unwrap();
    let new = new_instance(&server, CompactConfig::new(6)).await;
    assert!(same(&load(&new, &own.id).await.unwrap(), &own));
    assert!(!old_key_exists(&server, &own.id).await);
}

/// Many new instances load a session at once while an old instance keeps
/// saving it: every load finds it, and once the writes stop every store
/// holds the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_movers_and_an_old_writer_lose_nothing() {
    let server = common::server();
    let old = Arc::new(peer(&server).await);
    let mut base = record(7, 3600);
    old.create(&mut base).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (old, stop, writes, mut r) = (old.clone(), stop.clone(), writes.clone(), base.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) || writes.load(Ordering::Relaxed) < 50 {
                let n = writes.fetch_add(1, Ordering::Relaxed) + 1;
                r.data.insert("counter".into(), json!(n));
                old.save(&r).await.unwrap();
            }
            r
        })
    };
    let mut movers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let new = new_instance(&server, CompactConfig::new(4)).await;
        let id = base.id;
        movers.spawn(async move {
            let mut seen = 0;
            for _ in 0..25 {
                let r = new
                    .load(&id)
                    .await
                    .unwrap()
                    .expect("a load missed the session");
                let n = r.data.get("counter").and_then(Value::as_u64).unwrap_or(0);
                assert!(n >= seen, "a load went back from {seen} to {n}");
                seen = n;
            }
        });
    }
    while let Some(done) = movers.join_next().await {
        done.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let last = writer.await.unwrap();
    let new = new_instance(&server, CompactConfig::new(4)).await;
    assert!(same(&load(&new, &base.id).await.unwrap(), &last));
    assert!(same(&load(old.as_ref(), &base.id).await.unwrap(), &last));
    eprintln!(
        "{} writes by the old instance raced 200 loads",
        writes.load(Ordering::Relaxed)
    );
}

/// Closing (`migrate --delete-copied`) moves every session, deletes only
/// the old keys copied, and records the takeover closed: stores then read
/// their buckets alone, a straggling old write changes nothing, and a
/// copy is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_moves_every_session_and_ends_the_takeover() {
    let server = common::server();
    let old = peer(&server).await;
    let new = new_instance(&server, CompactConfig::new(6)).await;
    let mut records = Vec::new();
    for n in 0..80 {
        let mut r = record(n, 600 + n as i64);
        old.create(&mut r).await.unwrap();
        records.push(r);
    }
    for r in &records[..30] {
        load(&new, &r.id).await.unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("unrelated")
        .arg("data")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    let plan = Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: true,
        batch: 16,
        restart: false,
        stop_after_batches: None,
    };
    let report = migrate::run(common::manager(&server).await, new.clone(), &plan, |_| {})
        .await
        .unwrap();
    assert!(report.closed, "{report:?}");
    assert_eq!(report.deleted, 80, "{report:?}");
    assert_eq!(report.get("copied"), 50, "{report:?}");
    assert_eq!(report.get("unchanged"), 30, "{report:?}");
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(keys.contains(&"unrelated".to_owned()));
    assert!(
        !keys.iter().any(|k| k.ends_with(":m")),
        "marks left: {keys:?}"
    );
    for r in &records {
        assert!(!keys.contains(&r.id.to_string()), "old key left");
    }
    let state: String = redis::cmd("GET")
        .arg("sp:takeover")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(state, "closed");

    // Every session is served; a new session no longer gets an old key;
    // an old instance's late save creates nothing.
    for r in &records {
        assert!(same(&load(&new, &r.id).await.unwrap(), r));
    }
    let later = new_instance(&server, CompactConfig::new(6)).await;
    let mut fresh = record(500, 3600);
    later.create(&mut fresh).await.unwrap();
    assert!(!old_key_exists(&server, &fresh.id).await);
    assert!(
        old.save(&records[0]).await.is_err(),
        "a save of a missing key"
    );
    assert!(!old_key_exists(&server, &records[0].id).await);
    SessionStore::delete(&later, &records[0].id).await.unwrap();
    assert!(load(&later, &records[0].id).await.is_none());

    let again = migrate::run(common::manager(&server).await, later, &plan, |_| {}).await;
    assert!(matches!(again, Err(Error::Config(_))), "{again:?}");
}

/// One of user `n`'s sessions, written by the old app.
async fn old_session(old: &RedisStore<Client>, n: u64) -> Record {
    let mut r = record(n, 600);
    old.create(&mut r).await.unwrap();
    r
}

/// "Log out everywhere" while the takeover is open reaches every session
/// of the user, on old and new instances: those in the index (copied by
/// `migrate` or a load, or created by a new instance) at once; one only in
/// an old key when a new instance first sees it, or at the close. "Log out
/// everywhere else" keeps its session, other users keep theirs, and a
/// session a new instance creates afterwards lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_out_everywhere_reaches_old_keys_during_the_takeover() {
    use sessionpack::identity::Identity;
    use sessionpack::users::UserIndexConfig;
    let server = common::server();
    let old = peer(&server).await;
    let new = new_instance(
        &server,
        CompactConfig::new(6).with_user_index(UserIndexConfig::new(4)),
    )
    .await;
    let mut plan = Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: false,
        batch: 16,
        restart: false,
        stop_after_batches: None,
    };
    let copied = old_session(&old, 7).await;
    let keep = old_session(&old, 8).await;
    let other = old_session(&old, 9).await;
    migrate::run(common::manager(&server).await, new.clone(), &plan, |_| {})
        .await
        .unwrap();
    let loaded = old_session(&old, 7).await;
    assert!(load(&new, &loaded.id).await.is_some());
    let mut created = record(7, 600);
    new.create(&mut created).await.unwrap();
    let only_old = old_session(&old, 7).await;
    let at_close = old_session(&old, 7).await;
    let mut created_8 = record(8, 600);
    new.create(&mut created_8).await.unwrap();
    let only_old_8 = old_session(&old, 8).await;

    // Created here before the revocation, then evicted with its index
    // entry (as the cap evicts): only its old key is left.
    let mut evicted = record(7, 600);
    new.create(&mut evicted).await.unwrap();
    let evicted_id = sessionpack::tower::session_id(evicted.id.0);
    new.layout().delete(&evicted_id, None).await.unwrap();
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("sp:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    for key in keys.iter().filter(|k| !k.ends_with(":m")) {
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if kind == "hash" {
            let _: i64 = redis::cmd("HDEL")
                .arg(key)
                .arg(evicted_id.as_bytes())
                .query_async(&mut raw)
                .await
                .unwrap();
        }
    }
    assert!(old_key_exists(&server, &evicted.id).await);
    // The revocation is told from the session by the second (its stamp):
    // wait for the server's clock to pass it.
    loop {
        let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
        if secs > u64::from(evicted_id.stamp()) + 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let none = new.revoke_all(&Identity::Int(4242)).await.unwrap();
    assert_eq!(none.removed, 0, "{none:?}");
    let revoked = new.revoke_all(&Identity::Int(7)).await.unwrap();
    assert_eq!(revoked.removed, 3, "{revoked:?}");
    for r in [&copied, &loaded, &created] {
        assert!(
            load(&old, &r.id).await.is_none(),
            "an old instance serves it"
        );
        assert!(
            load(&new, &r.id).await.is_none(),
            "a new instance serves it"
        );
    }
    // Old instances read only their keys: one no new instance has seen
    // is theirs until one does.
    assert!(load(&old, &only_old.id).await.is_some());
    assert!(load(&new, &only_old.id).await.is_none());
    assert!(!old_key_exists(&server, &only_old.id).await);
    assert!(load(&old, &only_old.id).await.is_none());
    assert!(same(&load(&new, &other.id).await.unwrap(), &other));
    assert!(
        load(&new, &evicted.id).await.is_none(),
        "an evicted session revived"
    );
    assert!(!old_key_exists(&server, &evicted.id).await);

    // Signed in again afterwards, on a new instance: the session lives,
    // also once an old instance wrote to it.
    let mut after = record(7, 900);
    new.create(&mut after).await.unwrap();
    after
        .data
        .insert("flash".into(), json!("written by the old app"));
    old.save(&after).await.unwrap();
    assert!(same(&load(&new, &after.id).await.unwrap(), &after));

    let revoked = new
        .revoke_others(&Identity::Int(8), keep.id.0)
        .await
        .unwrap();
    assert_eq!(revoked.removed, 1, "{revoked:?}");
    assert!(load(&old, &created_8.id).await.is_none());
    assert!(load(&new, &only_old_8.id).await.is_none());
    let mut kept = keep.clone();
    kept.data.insert("cart".into(), json!([4]));
    old.save(&kept).await.unwrap();
    assert!(same(&load(&new, &kept.id).await.unwrap(), &kept));

    // The close refuses the last one and deletes its key.
    plan.delete_copied = true;
    let report = migrate::run(common::manager(&server).await, new.clone(), &plan, |_| {})
        .await
        .unwrap();
    assert!(report.closed, "{report:?}");
    assert_eq!(report.get("revoked"), 1, "{report:?}");
    assert!(load(&new, &at_close.id).await.is_none());
    assert!(!old_key_exists(&server, &at_close.id).await);
    assert!(same(&load(&new, &after.id).await.unwrap(), &after));
    let left: bool = redis::cmd("EXISTS")
        .arg(sessionpack::map_store::revoked_key("sp"))
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert!(!left, "the revoked owners outlive the close");
}

/// A new instance's save that moves a session's expiry later moves its
/// mark's too, so an old instance's delete after the first expiry is
/// still told from a session of the store's own; and an old key expiring
/// after February 2106 is taken at that second (no endless copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_outlast_their_sessions_and_far_expiries_are_taken() {
    let server = common::server();
    let old = peer(&server).await;
    let new = new_instance(&server, CompactConfig::new(4)).await;
    let mut r = record(1, 60);
    old.create(&mut r).await.unwrap();
    let mut moved = load(&new, &r.id).await.unwrap();
    moved.expiry_date =
        OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp() + 7200)
            .unwrap();
    new.save(&moved).await.unwrap();
    let marks =
        sessionpack::map_store::marks_key(new.layout(), &sessionpack::tower::session_id(r.id.0));
    let until: i64 = redis::cmd("EXPIRETIME")
        .arg(&marks)
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert!(until >= moved.expiry_date.unix_timestamp(), "{until}");

    let mut far = record(2, 0);
    far.expiry_date = OffsetDateTime::from_unix_timestamp(7_000_000_000).unwrap();
    old.create(&mut far).await.unwrap();
    let loaded = load(&new, &far.id).await.unwrap();
    assert_eq!(
        loaded.expiry_date.unix_timestamp() as u64,
        sessionpack::ttl::MAX_EXPIRES_AT
    );
    assert_eq!(loaded.data, far.data);
}

/// Makes ACL user `name` with the rule `sessionpack acl` prints for
/// `roles` (taking over tower-sessions-redis-store's keys); returns its
/// URL.
async fn acl_user(server: &LocalServer, name: &str, roles: &[&str]) -> String {
    let mut args = vec!["acl", "--user", name];
    for role in roles {
        args.extend(["--role", role]);
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let line = line.trim().replace("CHANGE-THIS-PASSWORD", "pw");
    let () = common::words(&line)
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    format!("redis://{name}:pw@127.0.0.1:{}/", server.port())
}

/// `sessionpack migrate` as `url`'s user; returns its JSON report.
fn migrate_as(url: &str, extra: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["migrate", "--redis-url", url, "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A whole switch runs under the rules `sessionpack acl` prints: the copy
/// and the close as `--role migrate`, the new instances as `--role store
/// --role sweeper --role takeover`. Neither user reaches a key that is
/// neither the namespace's nor an old session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_runs_within_the_acl_rules_it_prints() {
    let server = common::server();
    let old = peer(&server).await;
    let mut records = Vec::new();
    for n in 0..120 {
        let mut r = record(n, 600 + n as i64);
        old.create(&mut r).await.unwrap();
        records.push(r);
    }
    let migrator = acl_user(&server, "migrator", &["migrate"]).await;
    let app = acl_user(&server, "app", &["store", "sweeper", "takeover"]).await;

    // The app's user may not migrate: the command fails and says which
    // rule it needs.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["migrate", "--redis-url", &app])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("ACL") && stderr.contains("sessionpack acl --role migrate"),
        "{stderr}"
    );

    let copy = migrate_as(&migrator, &["--user-index"]);
    assert_eq!(copy["outcomes"]["copied"], 120, "{copy}");

    let config =
        CompactConfig::default().with_user_index(sessionpack::users::UserIndexConfig::default());
    let conn = sessionpack::connect(&app).await.unwrap();
    let new = TowerStore::new(conn, config)
        .await
        .unwrap()
        .with_takeover(Source::tower_sessions_redis_store())
        .await
        .unwrap();
    // The old app writes on; the new one loads, saves, creates, deletes.
    let mut changed = records[0].clone();
    changed
        .data
        .insert("flash".into(), json!("from the old app"));
    old.save(&changed).await.unwrap();
    assert!(same(&load(&new, &changed.id).await.unwrap(), &changed));
    let mut saved = records[1].clone();
    saved.data.insert("cart".into(), json!([1, 2, 3]));
    new.save(&saved).await.unwrap();
    assert!(same(&load(&old, &saved.id).await.unwrap(), &saved));
    let mut fresh = record(900, 3600);
    new.create(&mut fresh).await.unwrap();
    assert!(same(&load(&old, &fresh.id).await.unwrap(), &fresh));
    SessionStore::delete(&new, &records[2].id).await.unwrap();
    assert!(load(&old, &records[2].id).await.is_none());

    let close = migrate_as(&migrator, &["--delete-copied"]);
    assert_eq!(close["closed"], true, "{close}");
    assert_eq!(close["deleted"], 120, "{close}");
    assert!(same(&load(&new, &changed.id).await.unwrap(), &changed));
    assert!(same(&load(&new, &saved.id).await.unwrap(), &saved));
    assert!(load(&new, &records[2].id).await.is_none());

    // Outside their keys and commands, both are refused.
    let _: () = redis::cmd("SET")
        .arg("other:key")
        .arg("x")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    for url in [&migrator, &app] {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for cmd in [
            redis::cmd("GET").arg("other:key").clone(),
            // One character shorter or longer than an old session's key.
            redis::cmd("GET").arg("k".repeat(21)).clone(),
            redis::cmd("GET").arg("k".repeat(23)).clone(),
            redis::cmd("FLUSHALL").clone(),
            redis::cmd("KEYS").arg("*").clone(),
        ] {
            let refused: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
            assert!(
                refused.as_ref().is_err_and(
                    |e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
                ),
                "{url}: {cmd:?} → {refused:?}"
            );
        }
    }
}
