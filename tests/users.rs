//! The per-user index on one real `redis-server`: listings, labels,
//! revocations, creates in flight, the sweep of leftovers, and revoke-all
//! racing traffic. The same scenarios run on a cluster in `cluster.rs`.

mod common;

use common::users;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_sessions_are_listed_labelled_and_revoked() {
    let server = common::server();
    users::list_label_and_revoke(common::manager(&server).await, users::fixed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_in_flight_are_blocked_and_leftovers_swept() {
    let server = common::server();
    users::creates_in_flight_are_blocked_and_leftovers_swept(
        common::manager(&server).await,
        users::fixed(),
    )
    .await;
}

/// On one server a create's index entry is written by the same script as
/// its session (`compact_add.lua`), just before it: the script neither
/// checks a grace nor looks for a tombstone (no `HEXISTS`), no command of
/// its own writes the entry, and every session is listed. On a cluster
/// (`tests/cluster.rs`) the same creates fall back to the entry first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_writes_its_entry_in_its_sessions_script() {
    use sessionpack::Store;
    let server = common::server();
    let conn = common::manager(&server).await;
    let layout = users::layout(conn.clone(), users::fixed(), "together").await;
    let store: Store<_, (), u64> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(std::time::Duration::from_secs(600));
    // Loads the scripts and the clock estimate.
    store.create(1, ()).await.unwrap();
    let mut raw = common::raw(&server).await;
    let before = [
        common::calls(&mut raw, "evalsha").await,
        common::calls(&mut raw, "hset").await,
        common::calls(&mut raw, "hexists").await,
    ];
    let mut ids = std::collections::HashSet::new();
    for _ in 0..40 {
        ids.insert(store.create(7, ()).await.unwrap().id);
    }
    let after = [
        common::calls(&mut raw, "evalsha").await,
        common::calls(&mut raw, "hset").await,
        common::calls(&mut raw, "hexists").await,
    ];
    assert_eq!(after[0] - before[0], 40, "one script per create");
    assert_eq!(after[1] - before[1], 40, "one entry per create, no more");
    assert_eq!(after[2], before[2], "no tombstone looked for");
    let listed: std::collections::HashSet<_> = store
        .sessions_of(&7)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, ids);
    users::assert_clean(&layout.audit_users().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_all_races_creates_touches_rotations_and_sweepers() {
    let server = common::server();
    users::revoke_all_races_traffic(common::manager(&server).await, users::fixed(), "race").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_never_outlive_a_revocation() {
    let server = common::server();
    users::rotations_never_outlive_a_revocation(
        common::manager(&server).await,
        users::fixed(),
        "rot",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_overtaking_a_slow_revocation_is_revoked() {
    let server = common::server();
    let far = common::slow_link(&server, std::time::Duration::from_millis(4)).await;
    users::a_rotation_overtaking_a_slow_revocation_is_revoked(
        common::manager(&server).await,
        sessionpack::connect(&far).await.unwrap(),
    )
    .await;
}

/// Eviction under an `allkeys-*` policy could take an index bucket and
/// leave its users' sessions live but out of every revocation's reach: a
/// store with a user index refuses such a server, at open (before anything
/// is written) and at each revocation (the policy can change at run time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_index_is_refused_where_eviction_may_take_it() {
    use redis::AsyncCommands;
    use sessionpack::{Compact, CompactConfig, Error, Store};
    let server = common::server();
    let conn = common::manager(&server).await;
    let mut raw = common::raw(&server).await;
    let indexed = || CompactConfig::new(6).with_user_index(users::config());
    for evicting in ["allkeys-lru", "allkeys-random", "allkeys-lfu"] {
        common::set_eviction_policy(&server, evicting);
        match Compact::new(conn.clone(), indexed()).await {
            Err(Error::Config(msg)) => assert!(msg.contains(evicting), "{msg}"),
            other => panic!("{evicting}: expected Config, got {other:?}"),
        }
        let keys: Vec<String> = raw.keys("*").await.unwrap();
        assert!(keys.is_empty(), "nothing written: {keys:?}");
    }
    // Without an index the buckets alone are fine (the sweeper repairs
    // what eviction leaves); with noeviction or volatile-*, the index too.
    Compact::new(conn.clone(), CompactConfig::new(6).with_namespace("plain"))
        .await
        .unwrap();
    common::set_eviction_policy(&server, "volatile-lru");
    let store: Store<_, ()> = Store::new(Compact::new(conn.clone(), indexed()).await.unwrap());
    let s = store.create(70_001, ()).await.unwrap();
    common::set_eviction_policy(&server, "allkeys-random");
    assert!(matches!(
        store.revoke_all(&70_001).await,
        Err(Error::Config(_))
    ));
    assert!(
        store.load(&s.id).await.unwrap().is_some(),
        "refused, not half done"
    );
    common::set_eviction_policy(&server, "noeviction");
    assert_eq!(store.revoke_all(&70_001).await.unwrap().removed, 1);
    assert!(store.load(&s.id).await.unwrap().is_none());
}

/// An empty name is no one's: refused as a `Name`, and as an `Identity`
/// made directly when a session would be written with it (as is one past
/// 64 bytes, which no record could be read back with). Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_overlong_names_are_refused_and_write_nothing() {
    use sessionpack::identity::{Identity, Name};
    use sessionpack::{Error, Store};
    assert!(Name::new("").is_err());
    let server = common::server();
    let layout = users::layout(common::manager(&server).await, users::fixed(), "names").await;
    let store: Store<_, (), Identity> = Store::for_identities(layout);
    for name in [String::new(), "x".repeat(65), "x".repeat(1 << 20)] {
        let refused = store.create(Identity::Name(name), ()).await.unwrap_err();
        assert!(matches!(refused, Error::InvalidIdentity(_)), "{refused:?}");
    }
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("names:{*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(keys, Vec::<String>::new(), "nothing written");
    let fine = store
        .create(Identity::Name("x".repeat(64)), ())
        .await
        .unwrap();
    assert_eq!(store.sessions_of(&fine.identity).await.unwrap().len(), 1);
}
