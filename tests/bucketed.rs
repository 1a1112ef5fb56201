//! What the bucketed layout writes, inspected directly in Redis.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use sessionpack::limits::LimitsSource;
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::layout::Layout;
use sessionpack::session::record;
use sessionpack::{Error, Store};
use sessionpack_testkit::LocalServer;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Profile {
    name: String,
}

#[tokio::test]
async fn keys_fields_values_and_scores_are_as_documented() {
    let server = common::server();
    let layout = common::bucketed(&server, 16).await;
    let store: Store<_, Profile> = Store::new(layout).with_ttl(Duration::from_secs(3600));
    let s = store
        .create(1234, Profile { name: "ada".into() })
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;

    let hex = s.id.to_hex();
    let hash_key = format!("sp:{{{}}}:h", &hex[..4]);
    let zset_key = format!("sp:{{{}}}:z", &hex[..4]);
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.sort();
    let mut expected = vec![hash_key.clone(), zset_key.clone(), "sp:meta".to_owned()];
    expected.sort();
    assert_eq!(
        keys, expected,
        "one HASH and one ZSET, sharing a hash tag, and the store's metadata"
    );

    let field = hex::decode(&hex[4..]).unwrap();
    assert_eq!(
        field.len(),
        18,
        "field is the id after the 16-bit prefix, binary"
    );
    let value: Vec<u8> = raw.hget(&hash_key, &field).await.unwrap();
    assert_eq!(
        value,
        record::encode(&1234u64, &Profile { name: "ada".into() }).unwrap()
    );
    assert_eq!(
        value.len(),
        13,
        "1234 as uint16 (3) + fixmap (1) + fixstr 'name' (5) + fixstr 'ada' (4)"
    );
    let score: f64 = raw.zscore(&zset_key, &field).await.unwrap();
    assert_eq!(score as u64, s.expires_at);
    let now: (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    assert!(
        (now.0 + 3600..=now.0 + 3601).contains(&s.expires_at),
        "server clock, rounded up"
    );
    assert_eq!(common::encoding(&mut raw, &hash_key).await, "listpack");
    assert_eq!(common::encoding(&mut raw, &zset_key).await, "listpack");
    let ttl: i64 = raw.ttl(&hash_key).await.unwrap();
    assert_eq!(ttl, -1, "bucket keys carry no expiry of their own");
}

#[tokio::test]
async fn buckets_stay_listpack_with_20k_sessions_and_a_fat_one() {
    let server = common::server();
    let layout = common::bucketed(&server, 8).await;
    let store: Store<_, Profile> = Store::new(layout);
    let batch: Vec<(u64, Profile)> = (0..20_000).map(|i| (i, Profile::default())).collect();
    let ids = store.create_many(&batch).await.unwrap();
    let fat = store
        .create(
            7,
            Profile {
                name: "f".repeat(10 * 1024),
            },
        )
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;

    let buckets = store.layout().buckets().clone();
    let mut per_bucket: HashMap<u32, usize> = HashMap::new();
    for id in ids.iter().chain([&fat.id]) {
        *per_bucket.entry(buckets.bucket_of(id)).or_default() += 1;
    }
    assert_eq!(per_bucket.len(), 256);
    for bucket in 0..buckets.count() {
        for key in [buckets.hash_key(bucket), buckets.zset_key(bucket)] {
            assert_eq!(common::encoding(&mut raw, &key).await, "listpack", "{key}");
        }
        let n: usize = raw.hlen(buckets.hash_key(bucket)).await.unwrap();
        assert_eq!(n, per_bucket[&bucket]);
        let z: usize = raw.zcard(buckets.zset_key(bucket)).await.unwrap();
        assert_eq!(z, n, "HASH and ZSET agree");
    }

    // The fat record lives out of line, with the session's expiry, under
    // the bucket's hash tag; its bucket holds a one-byte marker.
    let bucket = buckets.bucket_of(&fat.id);
    let field = buckets.field(&fat.id);
    let side_key = buckets.out_of_line_key(bucket, &field);
    assert!(side_key.starts_with(&format!("sp:{}:o:", buckets.tag(bucket))));
    let marker: Vec<u8> = raw.hget(buckets.hash_key(bucket), &field).await.unwrap();
    assert_eq!(marker, vec![0xc1]);
    let blob: Vec<u8> = raw.get(&side_key).await.unwrap();
    assert!(blob.len() > 10 * 1024);
    let expire_at: i64 = redis::cmd("EXPIRETIME")
        .arg(&side_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(expire_at as u64, fat.expires_at);
    assert_eq!(
        store.load(&fat.id).await.unwrap().unwrap().attrs.name.len(),
        10 * 1024
    );

    // Touch moves both expiries.
    let layout = store.layout();
    let renewed = layout.touch(&fat.id, 7200).await.unwrap().unwrap();
    let expire_at: i64 = redis::cmd("EXPIRETIME")
        .arg(&side_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(expire_at as u64, renewed);
    let score: f64 = raw.zscore(buckets.zset_key(bucket), &field).await.unwrap();
    assert_eq!(score as u64, renewed);
}

#[tokio::test]
async fn listpack_limits_come_from_the_server() {
    let server = LocalServer::start_with(&["--hash-max-listpack-value", "24"]).unwrap();
    let layout = common::bucketed(&server, 8).await;
    assert_eq!(layout.limits().hash_value, 24);
    assert_eq!(layout.limits().zset_entries, 128);
    assert_eq!(layout.limits().source, LimitsSource::Server);

    // A 30-byte record is over this server's limit: stored out of line.
    let store: Store<_, Profile> = Store::new(layout);
    let s = store
        .create(
            1,
            Profile {
                name: "n".repeat(25),
            },
        )
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let b = store.layout().buckets();
    let marker: Vec<u8> = raw
        .hget(b.hash_key(b.bucket_of(&s.id)), b.field(&s.id))
        .await
        .unwrap();
    assert_eq!(marker, vec![0xc1]);
    assert_eq!(
        common::encoding(&mut raw, &b.hash_key(b.bucket_of(&s.id))).await,
        "listpack"
    );
}

#[tokio::test]
async fn disabled_config_falls_back_to_redis7_defaults() {
    let server = LocalServer::start_with(&["--rename-command", "CONFIG", ""]).unwrap();
    let layout = common::bucketed(&server, 4).await;
    assert_eq!(layout.limits().source, LimitsSource::Defaults);
    assert_eq!(layout.limits().hash_value, 64);
    let store: Store<_> = Store::new(layout);
    let s = store.create(1, ()).await.unwrap();
    assert!(store.load(&s.id).await.unwrap().is_some());
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_reported_and_left_alone() {
    let server = common::server();
    let layout = common::bucketed(&server, 1).await;
    let store: Store<_, Profile> = Store::new(layout);
    let mut raw = common::raw(&server).await;
    // Another application owns bucket 0's HASH and bucket 1's ZSET.
    let b = store.layout().buckets().clone();
    let _: () = raw.set(b.hash_key(0), "not a hash").await.unwrap();
    let _: () = raw.set(b.zset_key(1), "not a zset").await.unwrap();

    for _ in 0..8 {
        match store.create(1, Profile::default()).await {
            Err(Error::WrongType { location, .. }) => {
                assert!(location.starts_with("sp:{"), "{location}");
            }
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    // An id in bucket 1, whose ZSET is foreign.
    let id = sessionpack::SessionId::parse("ff".repeat(20)).unwrap();
    assert_eq!(b.bucket_of(&id), 1);
    assert!(matches!(
        store.load(&id).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        store.touch(&id).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        store.destroy(&id).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        store.load_many(&[id]).await,
        Err(Error::WrongType { .. })
    ));

    // Nothing was written next to the foreign keys.
    let keys: HashSet<String> = raw
        .keys::<_, Vec<String>>("*")
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        keys,
        HashSet::from([b.hash_key(0), b.zset_key(1), "sp:meta".to_owned()])
    );
    let v: String = raw.get(b.hash_key(0)).await.unwrap();
    assert_eq!(v, "not a hash");
}

#[tokio::test]
async fn redis_down_is_unavailable_then_recovers() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let store: Store<_> = Store::new(layout);
    let s = store.create(1, ()).await.unwrap();
    server.stop();
    for _ in 0..3 {
        match store.load(&s.id).await {
            Err(e @ Error::Unavailable(_)) => assert!(e.is_transient()),
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    server.resume().unwrap();
    let mut ok = false;
    for _ in 0..100 {
        if let Ok(created) = store.create(2, ()).await {
            ok = store.load(&created.id).await.unwrap().is_some();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "store works again once Redis is back");
}

#[tokio::test]
async fn layouts_share_a_connection_and_namespaces_do_not_collide() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let a = Bucketed::new(conn.clone(), BucketedConfig::new(4).with_namespace("app-a"))
        .await
        .unwrap();
    let b = Bucketed::new(conn, BucketedConfig::new(4).with_namespace("app-b"))
        .await
        .unwrap();
    let store_a: Store<_> = Store::new(a);
    let store_b: Store<_> = Store::new(b);
    let s = store_a.create(1, ()).await.unwrap();
    assert_eq!(store_b.load(&s.id).await.unwrap(), None);
    assert!(store_a.load(&s.id).await.unwrap().is_some());
    assert!(
        Bucketed::new(
            common::manager(&server).await,
            BucketedConfig::new(4).with_namespace("x{y}")
        )
        .await
        .is_err()
    );
    assert!(
        Bucketed::new(common::manager(&server).await, BucketedConfig::new(30))
            .await
            .is_err()
    );
}
