//! Every layout, the sweeper and the tower-sessions store on a real local
//! Redis Cluster: three primaries, each with a replica, started by the
//! test on free loopback ports and stopped by process id when it ends.

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::cluster::{self, Cluster};
use sessionpack::layout::{Encoding, KeyPerSession};
use sessionpack::server::{LocalCluster, Role};
use sessionpack::sweep::{SweepConfig, Sweeper};
use sessionpack::{Bucketed, BucketedConfig, Compact, CompactConfig, IdWidth, Store};

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
                rotate_moves_the_session, rotate_keeps_a_touch_made_meanwhile);
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
    let store: Store<_, String> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let mut live = Vec::new();
    for i in 0..300u64 {
        let fat = "x".repeat(if i % 10 == 0 { 500 } else { 3 });
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
    // What is left: the live sessions, in their buckets, and the live
    // out-of-line records (every tenth), nothing else.
    let mut fields = 0;
    for bucket in 0..layout.buckets().count() {
        fields += layout
            .connection()
            .clone()
            .hlen::<_, u64>(layout.scheme().bucket_key(bucket))
            .await
            .unwrap();
    }
    assert_eq!(fields, 300);
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
    let layout = sessionpack::layout::BookLoginHash::book(conn(&c).await, "sp");
    let store: Store<_, ()> = Store::new(layout).with_ttl(Duration::from_secs(600));
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
