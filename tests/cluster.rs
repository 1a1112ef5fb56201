//! Every layout, the sweeper and the tower-sessions store on a real local
//! Redis Cluster: three primaries, each with a replica, started by the
//! test on free loopback ports and stopped by process id when it ends.

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::conn::cluster::{self, Cluster};
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, IdWidth, Store};
use sessionpack_cli::baselines::{Encoding, KeyPerSession};
use sessionpack_testkit::{LocalCluster, Role};

fn start() -> LocalCluster {
    LocalCluster::start(3, 1).expect("a local cluster (redis-server and redis-cli)")
}

async fn conn(c: &LocalCluster) -> Cluster {
    cluster::connect(&c.urls())
        .await
        .expect("connect to the cluster")
}

/// Runs the suite's cases that need nothing but the layout, each on a
/// fresh layout in its own namespace, on one cluster.
macro_rules! suite_on_cluster {
    ($name:ident, |$conn:ident, $ns:ident| $make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let c = start();
            let node = &c.nodes()[0];
            suite_on_cluster!(@cases c, node, $conn, $ns, $make,
                round_trip, bulk_round_trip, expires_without_a_sweeper,
                touch_rolls_expiry_forward, update_and_save, destroy_is_final,
                rotate_moves_the_session, rotate_keeps_a_touch_made_meanwhile,
                identities_of_every_form, lifetimes_idle_and_absolute);
            let ($conn, $ns) = (conn(&c).await, "concurrent".to_owned());
            common::suite::concurrent_updates_lose_nothing(node, $make).await;
        }
    };
    (@cases $c:ident, $node:ident, $conn:ident, $ns:ident, $make:expr, $($case:ident),+) => {
        $({
            let ($conn, $ns) = (conn(&$c).await, stringify!($case).to_owned());
            common::suite::$case($node, $make).await;
        })+
    };
}

suite_on_cluster!(compact_layout_behaves_on_a_cluster, |conn, ns| {
    Compact::new(conn, CompactConfig::new(8).with_namespace(ns))
        .await
        .unwrap()
});

suite_on_cluster!(
    compact_layout_with_128_bit_ids_behaves_on_a_cluster,
    |conn, ns| {
        let config = CompactConfig::new(10)
            .with_namespace(ns)
            .with_id_width(IdWidth::Bits128);
        Compact::new(conn, config).await.unwrap()
    }
);

suite_on_cluster!(bucketed_layout_behaves_on_a_cluster, |conn, ns| {
    Bucketed::new(conn, BucketedConfig::new(8).with_namespace(ns))
        .await
        .unwrap()
});

suite_on_cluster!(key_per_session_layouts_behave_on_a_cluster, |conn, ns| {
    // One key per session: each in its own slot.
    let _ = ns;
    KeyPerSession::new(conn, Encoding::PackedSetex)
});

#[test]
fn the_local_cluster_has_a_replica_for_each_primary() {
    let c = start();
    let primaries = c.primaries();
    assert_eq!(primaries.len(), 3);
    let replicas: Vec<u16> = c
        .nodes()
        .iter()
        .filter_map(|n| match c.role(n) {
            Some(Role::Replica(of)) => Some(of),
            _ => None,
        })
        .collect();
    assert_eq!(replicas.len(), 3);
    for p in primaries {
        assert!(replicas.contains(&p.port()), "{} has a replica", p.port());
    }
}

/// Keys matching `pattern` on every primary.
async fn keys_everywhere(c: &LocalCluster, pattern: &str) -> Vec<String> {
    let mut out = Vec::new();
    for node in c.primaries() {
        let mut raw = common::raw(node).await;
        let keys: Vec<String> = raw.keys(pattern).await.unwrap();
        out.extend(keys);
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_empties_expired_buckets_on_every_primary() {
    let c = start();
    // 64 groups of 128 buckets, each group one hash tag: spread over every
    // primary.
    let layout = Compact::new(conn(&c).await, CompactConfig::new(13))
        .await
        .unwrap();
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let mut live = Vec::new();
    for i in 0..300u64 {
        // Every tenth out of line, every tenth from the fifth in pieces.
        let fat = "x".repeat(match i % 10 {
            0 => 700,
            5 => 300,
            _ => 3,
        });
        store
            .create_with_ttl(i, fat.clone(), Duration::from_secs(1))
            .await
            .unwrap();
        live.push(store.create(i, fat).await.unwrap());
    }
    // The buckets are spread over every primary.
    for node in c.primaries() {
        let mut raw = common::raw(node).await;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
        assert!(keys > 0, "primary {} holds buckets", node.port());
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.pass().await.unwrap();
    assert_eq!(report.reclaimed, 300, "{report:?}");
    let loaded = store
        .load_many(&live.iter().map(|s| s.id).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(loaded.iter().all(Option::is_some));
    // What is left: the live sessions, in their buckets with the pieces
    // of the pieced ones, and the live out-of-line records, nothing else.
    let (mut sessions, mut pieces) = (0, 0);
    let field_len = layout.buckets().field_len();
    for bucket in 0..layout.buckets().count() {
        let fields: Vec<Vec<u8>> = layout
            .connection()
            .clone()
            .hkeys(layout.scheme().bucket_key(bucket))
            .await
            .unwrap();
        sessions += fields.iter().filter(|f| f.len() == field_len).count();
        // Long piece names are a byte longer than a session's field, short
        // ones four bytes.
        pieces += fields
            .iter()
            .filter(|f| f.len() == field_len + 1 || f.len() == 4)
            .count();
    }
    assert_eq!(sessions, 300);
    // 300 characters: 58 bytes in the value, four pieces.
    assert_eq!(pieces, 30 * 4);
    assert_eq!(keys_everywhere(&c, "sp:*:o:*").await.len(), 30);
}

#[cfg(feature = "tower-sessions")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_sessions_store_works_on_a_cluster() {
    use tower_sessions_core::session::{Id, Record};
    use tower_sessions_core::{ExpiredDeletion, SessionStore};

    let c = start();
    let store = sessionpack::tower::TowerStore::new(conn(&c).await, CompactConfig::new(6))
        .await
        .unwrap();
    // A pipeline's commands follow a slot migration one by one: creates
    // stay one script on a cluster.
    assert_eq!(store.layout().plain_creates(), None);
    let mut records = Vec::new();
    for n in 0..200u64 {
        let mut data = std::collections::HashMap::new();
        data.insert("user".to_owned(), serde_json::json!(n));
        let mut r = Record {
            id: Id::default(),
            data,
            expiry_date: time::OffsetDateTime::now_utc() + time::Duration::minutes(10),
        };
        store.create(&mut r).await.unwrap();
        records.push(r);
    }
    for r in &mut records {
        let loaded = store.load(&r.id).await.unwrap().unwrap();
        assert_eq!(loaded.data, r.data);
        r.data.insert("seen".into(), serde_json::json!(true));
        store.save(r).await.unwrap();
        assert_eq!(store.load(&r.id).await.unwrap().unwrap().data, r.data);
    }
    for r in &records[..100] {
        store.delete(&r.id).await.unwrap();
        assert!(store.load(&r.id).await.unwrap().is_none());
    }
    store.delete_expired().await.unwrap();
    for r in &records[100..] {
        assert!(store.load(&r.id).await.unwrap().is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_design_is_refused_by_a_cluster_with_a_short_error() {
    // Its scripts name a `login:` HASH and a `recent:` ZSET with no common
    // hash tag: two slots.
    let c = start();
    let layout = sessionpack_cli::baselines::BookLoginHash::book(conn(&c).await, "sp");
    let store: Store<_, ()> = Store::new(layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let batch: Vec<(u64, ())> = (0..500).map(|i| (i, ())).collect();
    match store.create_many(&batch).await {
        Err(e @ sessionpack::Error::Redis(_)) => {
            let text = e.to_string();
            assert!(text.contains("500 commands failed"), "{text}");
            assert!(
                text.len() < 1000,
                "one line per command: {} bytes",
                text.len()
            );
        }
        other => panic!("expected a Redis error, got {other:?}"),
    }
}

/// Sessions held: every bucket's fields, read through the cluster.
async fn fields_held(conn: &Cluster, keys: impl Iterator<Item = String>) -> u64 {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.hlen(key);
    }
    let lens: Vec<u64> = pipe.query_async(&mut conn.clone()).await.unwrap();
    lens.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_and_the_segment_leases_hold_on_a_cluster() {
    let c = start();
    let conn = conn(&c).await;
    // 32 hash tags for the compact layout's 2^12 buckets; 2^9 bucketed
    // buckets, one tag each: both spread over every primary.
    let compact = Compact::new(conn.clone(), CompactConfig::new(12).with_namespace("c"))
        .await
        .unwrap();
    let bucketed = Bucketed::new(conn.clone(), BucketedConfig::new(9).with_namespace("b"))
        .await
        .unwrap();
    let batch: Vec<(u64, ())> = (0..8000).map(|i| (i, ())).collect();
    Store::new(compact.clone())
        .without_sweeper()
        .create_many(&batch)
        .await
        .unwrap();
    Store::new(bucketed.clone())
        .without_sweeper()
        .create_many(&batch)
        .await
        .unwrap();
    // Four sweepers at once share two segments and one cap lease each.
    let config = SweepConfig::default()
        .with_segments(2)
        .with_max_sessions(5000);
    let evicted = |reports: Vec<sessionpack::session::sweep::PassReport>| -> u64 {
        reports.iter().map(|r| r.evicted).sum()
    };
    let compact_evicted =
        evicted(common::concurrent_passes(compact.clone(), config.clone(), 4).await);
    let bucketed_evicted = evicted(common::concurrent_passes(bucketed.clone(), config, 4).await);
    let scheme = compact.scheme().clone();
    assert_eq!(
        fields_held(
            &conn,
            (0..compact.buckets().count()).map(|b| scheme.bucket_key(b))
        )
        .await,
        5000
    );
    assert_eq!(compact_evicted, 3000);
    let buckets = bucketed.buckets().clone();
    assert_eq!(
        fields_held(&conn, (0..buckets.count()).map(|b| buckets.hash_key(b))).await,
        5000
    );
    assert_eq!(bucketed_evicted, 3000);
    // Every bucket's HASH and ZSET name the same sessions (each primary
    // audits the buckets it holds).
    let mut sessions = 0;
    for node in c.primaries() {
        let audit = common::audit(&mut common::raw(node).await, &buckets).await;
        assert_eq!(
            (audit.fields_without_expiry, audit.expiries_without_field),
            (0, 0),
            "{audit:?}"
        );
        sessions += audit.sessions;
    }
    assert_eq!(sessions, 5000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_and_hash_tags_are_placed_as_the_cluster_places_them() {
    use sessionpack::conn::cluster::slots;
    let c = start();
    let seed = c.primaries()[0].url();
    // A new cluster's primaries hold the ranges the advisor assumes.
    let ranges = slots::primary_ranges(&seed, &Default::default())
        .await
        .unwrap();
    let mut held: Vec<Vec<std::ops::RangeInclusive<u16>>> =
        ranges.iter().map(|(_, r)| r.clone()).collect();
    held.sort_by_key(|r| *r[0].start());
    let even: Vec<Vec<std::ops::RangeInclusive<u16>>> =
        slots::even_ranges(3).into_iter().map(|r| vec![r]).collect();
    assert_eq!(held, even);
    for (url, r) in &ranges {
        let node = c.primaries().into_iter().find(|n| n.url() == *url).unwrap();
        let mine: Vec<(u16, u16)> = r.iter().map(|r| (*r.start(), *r.end())).collect();
        assert_eq!(c.slot_ranges(node).unwrap(), mine);
    }
    // Key slots are the server's, for sessionpack's keys and others.
    let layout = Compact::new(conn(&c).await, CompactConfig::new(12))
        .await
        .unwrap();
    let scheme = layout.scheme().clone();
    for key in (0..scheme.groups())
        .map(|g| scheme.index_key(g))
        .chain(["foo", "a{}", "{}b{c}", "{user1000}.x"].map(String::from))
    {
        assert_eq!(
            slots::key_slot(key.as_bytes()),
            c.key_slot(&key).unwrap(),
            "{key}"
        );
    }
    // The tags each primary serves are the groups whose keys it holds.
    let store: Store<_, ()> = Store::new(layout.clone()).without_sweeper();
    let batch: Vec<(u64, ())> = (0..20_000).map(|i| (i, ())).collect();
    store.create_many(&batch).await.unwrap();
    let tags: Vec<String> = (0..scheme.groups()).map(|g| scheme.tag(g)).collect();
    let predicted = slots::tags_per_primary(
        tags,
        &ranges.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
    );
    for ((url, _), groups) in ranges.iter().zip(predicted) {
        let node = c.primaries().into_iter().find(|n| n.url() == *url).unwrap();
        let mut raw = common::raw(node).await;
        let index_keys: Vec<String> = raw.keys("sp:*:i").await.unwrap();
        assert_eq!(index_keys.len() as u64, groups, "{url}");
    }
}

/// Writes that wait for a replica on a cluster: a write's `WAIT` goes to
/// the one primary that ran it, not to all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_replicas_asks_only_the_primary_that_wrote() {
    use sessionpack::conn::wait::WaitForReplicas;
    let c = start();
    let conn = WaitForReplicas::new(conn(&c).await, 1, Duration::from_secs(2));
    let layout = Compact::new(conn, CompactConfig::new(12)).await.unwrap();
    let store: Store<_, ()> = Store::new(layout).without_sweeper();
    let mut raws = Vec::new();
    for node in c.primaries() {
        raws.push(common::raw(node).await);
    }
    // The first create finds its script unloaded (`NOSCRIPT`, a `WAIT`
    // with it) and loads it on every primary; counted from the next.
    let mut ids = vec![store.create(99, ()).await.unwrap().id];
    let mut before = 0;
    for raw in &mut raws {
        before += common::calls(raw, "wait").await;
    }
    for i in 0..60 {
        ids.push(store.create(i, ()).await.unwrap().id);
    }
    let mut after = 0;
    for raw in &mut raws {
        after += common::calls(raw, "wait").await;
    }
    // One WAIT per create (a script on its bucket's primary).
    assert_eq!(after - before, 60);
    assert_eq!(common::found(&store, &ids).await, 61);
    for id in &ids[..10] {
        assert!(store.destroy(id).await.unwrap());
    }
    assert_eq!(common::found(&store, &ids).await, 51);
}

/// The user index on a cluster: a user's index bucket and a session's
/// bucket are in different slots (often on different primaries), and no
/// script spans them; listings, revocations, creates in flight and
/// revoke-all racing traffic behave as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_index_holds_on_a_cluster() {
    let c = start();
    common::users::list_label_and_revoke(conn(&c).await, common::users::fixed()).await;
    common::users::creates_in_flight_are_blocked_and_leftovers_swept(
        conn(&c).await,
        common::users::fixed(),
    )
    .await;
    common::users::revoke_all_races_traffic(conn(&c).await, common::users::fixed(), "race").await;
}

/// Recently viewed items on a cluster: a bucket's chunk keys share its
/// hash tag, so a view, and every removal of a session with its items, is
/// one script on one slot; the book's list, removal on every path and
/// concurrent views behave as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewed_items_hold_on_a_cluster() {
    let c = start();
    common::viewed::the_newest_items_are_kept_as_the_book_keeps_them(conn(&c).await).await;
    common::viewed::items_go_with_their_session(conn(&c).await).await;
    common::viewed::concurrent_views_keep_the_list_whole(conn(&c).await).await;
}

/// The talk's patterns on a cluster: tokens packed under hash tags, a
/// lock and its fence counter sharing one, a client's log and retry set
/// sharing one, GCRA buckets each its own; every script stays in one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_locks_and_rate_limits_hold_on_a_cluster() {
    use sessionpack::lock::Lock;
    use sessionpack::ratelimit::{Gcra, Limit, SlidingLog};
    use sessionpack::tokens::Tokens;
    let c = start();
    let conn = conn(&c).await;
    // Tokens: many, spread over every primary; each consumed once.
    let tokens: Tokens<_, String> = Tokens::open(conn.clone(), 6).await.unwrap();
    let payloads: Vec<String> = (0..300).map(|n| format!("reset {n}")).collect();
    let issued = tokens
        .issue_many(&payloads, Duration::from_secs(600))
        .await
        .unwrap();
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let tokens = tokens.clone();
            let issued = issued.clone();
            tokio::spawn(async move {
                let mut won = Vec::new();
                for t in &issued {
                    if let Some(p) = tokens.consume(t).await.unwrap() {
                        won.push(p);
                    }
                }
                won
            })
        })
        .collect();
    let mut won = Vec::new();
    for r in racers {
        won.extend(r.await.unwrap());
    }
    won.sort();
    let mut expected = payloads.clone();
    expected.sort();
    assert_eq!(won, expected, "each token consumed exactly once");
    // Locks: the fence grows across holders.
    let lock = Lock::new(conn.clone(), "report").unwrap();
    let first = lock
        .try_acquire(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(
        lock.try_acquire(Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    let fence = first.fence();
    assert!(first.release().await.unwrap());
    let second = lock
        .try_acquire(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(second.fence() > fence);
    assert!(second.release().await.unwrap());
    // Rate limits: both admit the limit and refuse the next, for clients
    // on every primary.
    let limit = Limit::new(3, Duration::from_secs(60)).unwrap();
    let log = SlidingLog::new(conn.clone(), "rl", limit);
    let gcra = Gcra::new(conn.clone(), "gc", 4, limit).unwrap();
    for client in (0..12).map(|n| format!("client-{n}")) {
        for n in 0..4 {
            let by_log = log.check(&client).await.unwrap();
            let by_gcra = gcra.check(&client).await.unwrap();
            assert_eq!(by_log.allowed, n < 3, "log, {client}, request {n}");
            assert_eq!(by_gcra.allowed, n < 3, "gcra, {client}, request {n}");
        }
    }
    assert_eq!(gcra.sweep().await.unwrap(), 0, "no client has lapsed");
}

/// A primary that has lost its scripts (restarted, or `SCRIPT FLUSH`ed)
/// mid-way through a store's life: a bulk insert spanning every primary
/// still stores each session exactly once and reports each created. (The
/// store sends again only the calls answered `NOSCRIPT`, and an insert
/// sent twice finds its own session; this test passes with either guard
/// alone, as the cluster client also reloads scripts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_lost_its_scripts_gets_only_its_own_calls_again() {
    let c = start();
    let layout = Compact::new(
        conn(&c).await,
        CompactConfig::new(8).with_namespace("noscript"),
    )
    .await
    .unwrap();
    let record = sessionpack::session::record::encode(&70_000u64, &()).unwrap();
    let batch = |n| -> Vec<_> {
        (0..n)
            .map(|_| (sessionpack::SessionId::generate().unwrap(), record.clone()))
            .collect()
    };
    use sessionpack::session::layout::Layout;
    layout.insert_many(&batch(300), 600).await.unwrap();
    let primary = c.primaries()[0].url();
    let mut one = sessionpack::connect(&primary).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut one)
        .await
        .unwrap();
    let items = batch(300);
    let results = layout.insert_many(&items, 600).await.unwrap();
    assert!(
        results
            .iter()
            .all(|r| matches!(r, sessionpack::session::layout::Inserted::Created { .. })),
        "{results:?}"
    );
    let ids: Vec<_> = items.iter().map(|(id, _)| *id).collect();
    let found = layout.load_many(&ids).await.unwrap();
    assert!(found.iter().all(Option::is_some));
}

/// The user index on a growing store on a cluster, its buckets holding 16
/// entries: revoke-all racing creates, touches, rotations and sweepers
/// while buckets split and merge, each group's keys in its own slot and
/// each user's index bucket in another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_index_holds_on_a_growing_store_on_a_cluster() {
    let c = start();
    for node in c.nodes() {
        common::set_hash_entries(node, 16);
    }
    let base = CompactConfig::new(2).with_growth();
    common::users::revoke_all_races_traffic(conn(&c).await, base.clone(), "race").await;
    let layout = common::users::layout(conn(&c).await, base, "race").await;
    let shapes = layout.fetch_shapes(&[0, 1, 2, 3]).await.unwrap();
    let reshapes: u64 = shapes.iter().map(|s| s.epoch()).sum();
    assert!(reshapes >= 4, "only {reshapes} splits and merges");
}

/// Viewed items and the session cap on a growing store on a cluster:
/// splits move a bucket's chunk fields in the same script (every key of a
/// group in its slot), and the cap's cutoff keeps the latest sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewed_items_and_the_cap_hold_on_a_growing_store_on_a_cluster() {
    use sessionpack::session::layout::Layout;
    use sessionpack::ttl::Deadline;
    use sessionpack::viewed::ViewedConfig;
    let c = start();
    for node in c.nodes() {
        common::set_hash_entries(node, 16);
    }
    let config = CompactConfig::new(2)
        .with_growth()
        .with_namespace("vg")
        .with_viewed(ViewedConfig::new(25, 4));
    let layout = Compact::new(conn(&c).await, config).await.unwrap();
    let mut raw = conn(&c).await;
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let mut made = Vec::new();
    for n in 0..300u64 {
        let id = layout.new_id().await.unwrap();
        let record = sessionpack::session::record::encode(&(70_000 + n), &()).unwrap();
        layout
            .insert_new(&id, &record, Deadline::At(now + 1000 + n))
            .await
            .unwrap();
        let items: Vec<Vec<u8>> = (0..3u8).map(|i| vec![n as u8, i]).collect();
        layout.view_many(&id, &items, None).await.unwrap();
        made.push(id);
    }
    let shape = layout.shape().unwrap();
    let mut buckets = 0;
    for group in 0..shape.group_count() {
        buckets += layout.group_buckets(group).await.unwrap().len();
    }
    assert!(buckets > 16, "{buckets} buckets");
    let sweeper = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(100),
    );
    assert_eq!(sweeper.enforce_cap().await.unwrap().evicted, 200);
    for (n, id) in made.iter().enumerate() {
        let items = layout.viewed(id).await.unwrap();
        if n < 200 {
            assert_eq!(items, None, "session {n} outlived the cap");
        } else {
            let newest: Vec<Vec<u8>> = (0..3u8).rev().map(|i| vec![n as u8, i]).collect();
            assert_eq!(items, Some(newest), "session {n}");
        }
    }
}

suite_on_cluster!(growing_compact_layout_behaves_on_a_cluster, |conn, ns| {
    Compact::new(conn, CompactConfig::growing().with_namespace(ns))
        .await
        .unwrap()
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_store_splits_and_merges_within_its_groups_slots() {
    use sessionpack::session::layout::Layout;
    use sessionpack::ttl::Deadline;
    let c = start();
    for node in c.nodes() {
        common::set_hash_entries(node, 16);
    }
    let open = || async {
        Compact::new(conn(&c).await, CompactConfig::growing())
            .await
            .unwrap()
    };
    let layout = open().await;
    let stale = open().await;
    let mut short = Vec::new();
    let mut kept = Vec::new();
    let mut raw = conn(&c).await;
    for n in 0..1200u64 {
        let id = layout.new_id().await.unwrap();
        let record = sessionpack::session::record::encode(&(70_000 + n), &()).unwrap();
        layout
            .insert_new(&id, &record, Deadline::In(3600))
            .await
            .unwrap();
        if n % 10 == 0 {
            kept.push(id);
        } else {
            short.push((id, record));
        }
    }
    let shape = layout.shape().unwrap();
    let mut grown = 0;
    for group in 0..shape.group_count() {
        grown += layout.group_buckets(group).await.unwrap().len();
    }
    assert!(grown > 64, "{grown} buckets");
    // Splits are scripts over a parent and its children: on a cluster they
    // run only because every key of a group shares its slot.
    for id in kept.iter().chain(short.iter().map(|(id, _)| id)) {
        assert!(stale.load(id).await.unwrap().is_some());
    }
    // Nine in ten lives cut short by a save from the stale process.
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for (id, record) in &short {
        stale.save(id, record, now + 2).await.unwrap();
    }
    loop {
        let (t, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
        if t > now + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    assert!(report.merges > 0);
    for id in &kept {
        assert!(stale.load(id).await.unwrap().is_some());
    }
    for (id, _) in &short {
        assert!(layout.load(id).await.unwrap().is_none());
    }
}
