//! The actix store taking over the real actix-session `RedisSessionStore`'s
//! sessions during a rolling deploy: old and new instances serving the
//! same sessions, under the same cookie keys, then the close.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;

use actix_session::storage::{RedisSessionStore, SessionKey, SessionStore};
use redis::aio::ConnectionManager;
use sessionpack::actix::{ActixStore, actix_identity_owner};
use sessionpack::identity::Identity;
use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::{CompactConfig, Error};
use sessionpack_cli::migrate::{self, Plan, Report};
use sessionpack_testkit::LocalServer;

type State = HashMap<String, String>;

fn config() -> CompactConfig {
    CompactConfig::new(6).with_user_index(UserIndexConfig::new(4))
}

/// A new instance's store: the actix store taking over actix-session's
/// keys.
async fn new_instance(server: &LocalServer) -> ActixStore<ConnectionManager> {
    ActixStore::new(common::manager(server).await, config())
        .await
        .unwrap()
        .with_takeover(Source::actix_session())
        .await
        .unwrap()
}

/// `sessionpack migrate --from actix-session` (`--delete-copied` with
/// `close`), into the namespace the new instances open.
async fn migrate(server: &LocalServer, close: bool) -> Report {
    let store = TowerStore::new(common::manager(server).await, config())
        .await
        .unwrap()
        .with_owner(actix_identity_owner, None);
    let plan = Plan {
        source: Source::actix_session(),
        dry_run: false,
        delete_copied: close,
        batch: 16,
        restart: false,
        stop_after_batches: None,
    };
    migrate::run(common::manager(server).await, store, &plan, |_| {})
        .await
        .unwrap()
}

/// User `user`'s state, as actix-identity and an app write it: JSON
/// texts, one of them no JSON at all.
fn state(user: &str, n: u64) -> State {
    HashMap::from([
        ("actix_identity.user_id".to_owned(), format!("\"{user}\"")),
        ("cart".to_owned(), format!("[{n},2,3]")),
        ("note".to_owned(), format!("not json {{ {n}")),
    ])
}

fn ttl() -> time::Duration {
    time::Duration::seconds(3600)
}

fn key(text: &str) -> SessionKey {
    SessionKey::try_from(text.to_owned()).unwrap()
}

async fn load(store: &impl SessionStore, k: &SessionKey) -> Option<State> {
    store.load(k).await.unwrap()
}

/// The old key's expiry, unix seconds (`EXPIRETIME`).
async fn old_expiry(server: &LocalServer, k: &SessionKey) -> u64 {
    redis::cmd("EXPIRETIME")
        .arg(k.as_ref())
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap()
}

/// Old and new instances serve the same sessions under the cookie's own
/// key: each sees the other's last write and expiry, a delete on either
/// side holds on both, and a session a new instance creates has a key an
/// old instance loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_instances_see_each_others_writes_and_deletes() {
    let server = common::server();
    let old = RedisSessionStore::new(server.url()).await.unwrap();
    let new = new_instance(&server).await;
    let mut keys = Vec::new();
    for n in 0..6 {
        keys.push(old.save(state("ada", n), &ttl()).await.unwrap());
    }

    // A session the old app wrote loads from the new store, as it was.
    assert_eq!(load(&new, &keys[0]).await, Some(state("ada", 0)));

    // The new instance updates: same key, and the old instance loads it.
    let changed = state("ada", 100);
    let same = new
        .update(key(keys[1].as_ref()), changed.clone(), &ttl())
        .await
        .unwrap();
    assert_eq!(same.as_ref(), keys[1].as_ref());
    assert_eq!(load(&old, &keys[1]).await, Some(changed));

    // The old instance updates a session moved long before: the new one
    // loads that write.
    let later = state("ada", 200);
    old.update(key(keys[0].as_ref()), later.clone(), &ttl())
        .await
        .unwrap();
    assert_eq!(load(&new, &keys[0]).await, Some(later));

    // The old instance deletes a moved session (a log-out there): gone on
    // both sides, for good.
    load(&new, &keys[2]).await.unwrap();
    old.delete(&keys[2]).await.unwrap();
    assert_eq!(load(&new, &keys[2]).await, None);
    assert_eq!(load(&new, &keys[2]).await, None, "came back");
    assert_eq!(load(&old, &keys[2]).await, None);

    // The new instance deletes: the old key goes too.
    new.delete(&keys[3]).await.unwrap();
    assert_eq!(load(&old, &keys[3]).await, None);
    assert_eq!(load(&new, &keys[3]).await, None);

    // Expiries cross both ways: the new instance's `update_ttl` moves the
    // old key's, the old instance's `EXPIRE` the store's. Each must fall
    // in the window of seconds the call ran in, however long it took.
    let unix = || time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let before = unix();
    new.update_ttl(&keys[4], &time::Duration::seconds(600))
        .await
        .unwrap();
    let after = unix();
    let at = old_expiry(&server, &keys[4]).await;
    assert!(
        (before + 600..=after + 601).contains(&at),
        "the old key's expiry did not move: {at} against {before}..{after} + 600"
    );
    let before = unix();
    old.update_ttl(&keys[5], &time::Duration::seconds(300))
        .await
        .unwrap();
    let after = unix();
    assert_eq!(load(&new, &keys[5]).await, Some(state("ada", 5)));
    let sid = sessionpack::takeover::hashed_id(keys[5].as_ref().as_bytes());
    let stored = sessionpack::session::layout::Layout::load(new.layout(), &sid)
        .await
        .unwrap()
        .unwrap();
    assert!(
        (before + 300..=after + 301).contains(&stored.expires_at),
        "the old instance's expiry was not taken: {} against {before}..{after} + 300",
        stored.expires_at
    );

    // A session the new instance creates has a key of actix-session's
    // form, which old instances load.
    let fresh = new.save(state("ada", 300), &ttl()).await.unwrap();
    assert!(sessionpack::takeover::is_actix_key(
        fresh.as_ref().as_bytes()
    ));
    assert_eq!(load(&old, &fresh).await, Some(state("ada", 300)));
    assert_eq!(load(&new, &fresh).await, Some(state("ada", 300)));
    let mut flashed = state("ada", 301);
    flashed.insert("flash".into(), "\"from the old app\"".into());
    old.update(key(fresh.as_ref()), flashed.clone(), &ttl())
        .await
        .unwrap();
    assert_eq!(load(&new, &fresh).await, Some(flashed.clone()));

    // The close copies what is left and deletes every old key; the store
    // then serves each session under its key alone, and creates keys of
    // its own again.
    let close = migrate(&server, true).await;
    assert!(close.closed, "{close:?}");
    assert_eq!(close.deleted, 5, "{close:?}");
    for k in [&keys[0], &keys[1], &keys[4], &keys[5], &fresh] {
        assert_eq!(load(&old, k).await, None, "an old key is left");
        assert!(load(&new, k).await.is_some(), "lost at the close");
    }
    assert_eq!(load(&new, &fresh).await, Some(flashed));
    let after = new_instance(&server).await;
    let own = after.save(state("ada", 400), &ttl()).await.unwrap();
    assert_eq!(own.as_ref().len(), 32, "{}", own.as_ref());
    assert_eq!(load(&old, &own).await, None);
}

/// "Log out everywhere" while the takeover is open reaches the old keys of
/// every session of the user in the index, though actix-session's keys
/// do not follow from the ids (each session's mark keeps its key): copied
/// by `migrate`, copied by a load, or created by a new instance. One only
/// in an old key is refused when a new instance first sees it. "Log out
/// everywhere else" keeps its session; other users keep theirs; a session
/// created on a new instance afterwards lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_out_everywhere_reaches_old_keys_during_the_takeover() {
    let server = common::server();
    let old = RedisSessionStore::new(server.url()).await.unwrap();
    let new = new_instance(&server).await;
    let copied = old.save(state("ada", 1), &ttl()).await.unwrap();
    let other = old.save(state("bob", 2), &ttl()).await.unwrap();
    let keep = old.save(state("eve", 3), &ttl()).await.unwrap();
    migrate(&server, false).await;
    let loaded = old.save(state("ada", 4), &ttl()).await.unwrap();
    assert!(load(&new, &loaded).await.is_some());
    let created = new.save(state("ada", 5), &ttl()).await.unwrap();
    let only_old = old.save(state("ada", 6), &ttl()).await.unwrap();
    let eve_created = new.save(state("eve", 7), &ttl()).await.unwrap();
    let eve_old = old.save(state("eve", 8), &ttl()).await.unwrap();
    assert!(load(&new, &eve_old).await.is_some());

    let revoked = new.revoke_all(&Identity::Name("ada".into())).await.unwrap();
    assert_eq!(revoked.removed, 3, "{revoked:?}");
    for k in [&copied, &loaded, &created] {
        assert_eq!(load(&old, k).await, None, "an old instance serves it");
        assert_eq!(load(&new, k).await, None, "a new instance serves it");
    }
    // One no new instance has seen: old instances serve it until one does.
    assert!(load(&old, &only_old).await.is_some());
    assert_eq!(load(&new, &only_old).await, None);
    assert_eq!(load(&old, &only_old).await, None);
    assert_eq!(load(&new, &other).await, Some(state("bob", 2)));

    // Signed in again afterwards, on a new instance: the session lives,
    // also once an old instance wrote to it.
    let again = new.save(state("ada", 9), &ttl()).await.unwrap();
    let written = state("ada", 10);
    old.update(key(again.as_ref()), written.clone(), &ttl())
        .await
        .unwrap();
    assert_eq!(load(&new, &again).await, Some(written.clone()));

    let revoked = new
        .revoke_others(&Identity::Name("eve".into()), keep.as_ref())
        .await
        .unwrap();
    assert_eq!(revoked.removed, 2, "{revoked:?}");
    for k in [&eve_created, &eve_old] {
        assert_eq!(load(&old, k).await, None, "an old instance serves it");
        assert_eq!(load(&new, k).await, None, "a new instance serves it");
    }
    let kept = state("eve", 11);
    old.update(key(keep.as_ref()), kept.clone(), &ttl())
        .await
        .unwrap();
    assert_eq!(load(&new, &keep).await, Some(kept));

    let close = migrate(&server, true).await;
    assert!(close.closed, "{close:?}");
    assert_eq!(load(&new, &again).await, Some(written));
    assert_eq!(load(&new, &other).await, Some(state("bob", 2)));
}

/// The marks that keep actix-session's keys stay in a listpack (53 bytes
/// each, under the 64 a listpack value may hold by default), so a
/// takeover costs no hashtable per bucket; and an actix store refuses
/// another store's form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_keep_keys_in_listpacks() {
    let server = common::server();
    let old = RedisSessionStore::new(server.url()).await.unwrap();
    let new = new_instance(&server).await;
    for n in 0..50 {
        let k = old.save(state(&format!("u{n}"), n), &ttl()).await.unwrap();
        load(&new, &k).await.unwrap();
        new.save(state(&format!("u{n}"), n), &ttl()).await.unwrap();
    }
    let mut raw = common::raw(&server).await;
    let marks: Vec<String> = redis::cmd("KEYS")
        .arg("sp:*:m")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!marks.is_empty());
    for m in &marks {
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(m)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(encoding, "listpack", "{m}");
    }
    let refused = ActixStore::new(common::manager(&server).await, config())
        .await
        .unwrap()
        .with_takeover(Source::tower_sessions_redis_store())
        .await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
    let refused = TowerStore::new(common::manager(&server).await, config())
        .await
        .unwrap()
        .with_takeover(Source::actix_session())
        .await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
}

/// Many new instances load a session at once while an old instance keeps
/// updating it: every load finds it and none goes back, and once the
/// writes stop every store holds the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_movers_and_an_old_writer_lose_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let server = common::server();
    let old = Arc::new(RedisSessionStore::new(server.url()).await.unwrap());
    let first = old.save(state("ada", 0), &ttl()).await.unwrap();
    let text = first.as_ref().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (old, stop, writes, text) = (old.clone(), stop.clone(), writes.clone(), text.clone());
        tokio::spawn(async move {
            let mut last = state("ada", 0);
            while !stop.load(Ordering::Relaxed) || writes.load(Ordering::Relaxed) < 50 {
                let n = writes.fetch_add(1, Ordering::Relaxed) + 1;
                last = state("ada", n);
                let same = old.update(key(&text), last.clone(), &ttl()).await.unwrap();
                assert_eq!(same.as_ref(), text, "the old store lost the session");
            }
            last
        })
    };
    let mut movers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let new = new_instance(&server).await;
        let text = text.clone();
        movers.spawn(async move {
            let mut seen = 0;
            for _ in 0..25 {
                let loaded = load(&new, &key(&text))
                    .await
                    .expect("a load missed the session");
                let n: u64 = loaded["cart"][1..]
                    .split(',')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
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
    let new = new_instance(&server).await;
    assert_eq!(load(&new, &first).await, Some(last.clone()));
    assert_eq!(load(old.as_ref(), &first).await, Some(last));
    eprintln!(
        "{} updates by the old instance raced 200 loads",
        writes.load(Ordering::Relaxed)
    );
}
